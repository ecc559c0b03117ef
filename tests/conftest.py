import functools
import json
import os
import subprocess
import sys

import pytest

# The suite runs on the CPU, also on a machine with GPUs: the default --gpu-ids is every visible GPU, and the tests'
# expectations (gpu_ids [-1], --gpu-ids 7 refused) are the CPU's. Hidden here, before anything imports torch; the
# children of run_main inherit it. A GPU test opts in by putting the variable back in its own subprocess's env.
VISIBLE_GPUS = os.environ.get("CUDA_VISIBLE_DEVICES")
os.environ["CUDA_VISIBLE_DEVICES"] = ""

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_main(*flags, timeout=300, cwd=None, **popen):
    """Run ``python main.py FLAGS`` as a user would; returns the CompletedProcess (text output)."""
    return subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), *map(str, flags)], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd or ROOT, **popen)


def gpu_env():
    """The environment a GPU test's subprocess runs in: this machine's GPUs visible again."""
    env = dict(os.environ)
    if VISIBLE_GPUS is None:
        env.pop("CUDA_VISIBLE_DEVICES")
    else:
        env["CUDA_VISIBLE_DEVICES"] = VISIBLE_GPUS
    return env


@functools.lru_cache(maxsize=None)
def cuda_devices():
    """How many CUDA devices a subprocess sees (this process hides them): 0 on CI and CPU machines."""
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True, env=gpu_env(), timeout=300)
    return int(probe.stdout.strip() or 0) if probe.returncode == 0 else 0


def out_dirs(tmp_path, name="run"):
    """Flags that keep every output of a run inside tmp_path."""
    return ["--run-dir", tmp_path / name, "--save-model-dir", tmp_path / "trained_models",
            "--log-dir", tmp_path / "logs"]


def read_json(path):
    with open(path) as f:
        return json.load(f)


@pytest.fixture(scope="session")
def cartpole_run(tmp_path_factory):
    """A short real CartPole run (a few seconds), for tests that need a checkpoint of the current format."""
    tmp = tmp_path_factory.mktemp("cartpole")
    result = run_main("--env", "CartPole-v1", "--workers", "1", "--hidden-size", "32", "--max-frames", "3000",
                      "--no-tensorboard-logger", *out_dirs(tmp))
    assert result.returncode == 0, result.stderr
    return tmp
