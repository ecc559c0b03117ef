import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_main(*flags, timeout=300, cwd=None, **popen):
    """Run ``python main.py FLAGS`` as a user would; returns the CompletedProcess (text output)."""
    return subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), *map(str, flags)], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd or ROOT, **popen)


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
