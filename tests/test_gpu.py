"""GPU paths, run where CUDA is (each in a subprocess that sees the GPUs the suite hides); skipped elsewhere."""

import subprocess
import sys

import pytest

from conftest import ROOT, cuda_devices, gpu_env, out_dirs, read_json, run_main

needs_cuda = pytest.mark.skipif(cuda_devices() == 0, reason="no CUDA device on this machine")

LSTM_STATE_DTYPE = """
import torch
from model import build_model, model_meta
model = build_model(model_meta("a3clstm", [1, 80, 80], 6, 512)).cuda()
state = model.initial_state(2, "cuda")
with torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(3):
        _, _, state = model(torch.rand(2, 1, 80, 80, device="cuda"), state)
print(state[0].dtype, state[1].dtype)
"""


@needs_cuda
def test_recurrent_state_stays_float32_under_cuda_bf16_autocast():
    result = subprocess.run([sys.executable, "-c", LSTM_STATE_DTYPE], capture_output=True, text=True, cwd=ROOT,
                            env=gpu_env(), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["torch.float32", "torch.float32"]


@needs_cuda
def test_short_cartpole_run_on_gpu_0(tmp_path):
    result = run_main("--env", "CartPole-v1", "--gpu-ids", "0", "--max-frames", "5000", "--no-tensorboard-logger",
                      *out_dirs(tmp_path), timeout=600, env=gpu_env())
    assert result.returncode == 0, result.stderr[-2000:]
    assert "cuda:0" in result.stdout
    assert read_json(tmp_path / "run" / "args.json")["gpu_ids"] == [0]
