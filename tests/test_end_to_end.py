"""Real training runs: real processes, real games, real files."""

import csv
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import ROOT, as_a_terminal_job, live_processes, out_dirs, read_json, run_main, wait_for
from core.schedule import entropy_coef, learning_rate


# CartPole settings that solve it in a minute or two on 2 cores (docs/results/cartpole.md has the measured times)
CARTPOLE = ["--env", "CartPole-v1", "--workers", "2", "--lr", "2e-3", "--hidden-size", "64", "--value-coef", "0.1",
            "--envs-per-worker", "4"]


def test_cartpole_learns_to_475(tmp_path):
    result = run_main(*CARTPOLE, "--stop-score", "475", "--max-seconds", "900", "--no-tensorboard-logger",
                      *out_dirs(tmp_path), timeout=1000)
    summary = read_json(tmp_path / "run" / "summary.json")
    assert result.returncode == 0, result.stderr[-2000:]
    assert summary["solved"] is True and summary["stop_reason"] == "solved", summary
    assert summary["best_mean_return"] >= 475
    rows = list(csv.DictReader(open(tmp_path / "run" / "progress.csv")))
    last = [float(r["return"]) for r in rows[-10:]]
    assert sum(last) / 10 >= 475
    # the best model on disk is small, safe to load, and greedy play with it scores
    model = torch.load(tmp_path / "trained_models" / "CartPole-v1.pt", weights_only=True)
    assert model["kind"] == "model" and "optimizer" not in model and model["return"] >= 475


def test_cartpole_learns_to_475_with_ppo_and_tensorboard_shows_its_diagnostics(tmp_path):
    """--objective ppo (each rollout reused for 4 epochs of 4 minibatches, every update pushed hogwild) solves
    CartPole, and TensorBoard gets the PPO user's curves: approximate KL, clip fraction, explained variance."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = run_main(*CARTPOLE, "--objective", "ppo", "--stop-score", "475", "--max-seconds", "900",
                      "--log-interval", "1", *out_dirs(tmp_path), timeout=1000)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "training CartPole-v1 (a3g, ppo) with 2 worker(s)" in result.stdout  # the start-up line names it
    summary = read_json(tmp_path / "run" / "summary.json")
    assert summary["solved"] is True and summary["best_mean_return"] >= 475, summary
    events = EventAccumulator(str(tmp_path / "run")).Reload()
    kl, clipfrac, explained = (events.Scalars(f"losses/{name}")
                               for name in ("approx_kl", "clipfrac", "explained_variance"))
    assert kl and all(0 <= e.value < 1 for e in kl)
    assert clipfrac and all(0 <= e.value <= 1 for e in clipfrac) and max(e.value for e in clipfrac) > 0
    assert explained and all(e.value <= 1 for e in explained)
    # worker 0's own 15 earlier minibatches and whatever worker 1 pushed meanwhile (an increment of the shared
    # step counter two workers made at once can be lost: a margin)
    assert all(e.value >= 10 for e in events.Scalars("a3g/policy_lag"))


@pytest.mark.parametrize("algo", ["a3g", "impala"])
def test_entropy_and_lr_decay_run_in_both_algorithms(algo, tmp_path):
    """--entropy-decay and --lr-decay reach A3G's workers and IMPALA's learner (each reads the run's frame count
    every update; the schedules themselves: tests/test_train.py), are kept in args.json for a resume, and
    TensorBoard shows both (losses/entropy_coef, charts/learning_rate: 0 by the end, at END)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = run_main(*CARTPOLE, "--algo", algo, "--entropy-decay", "1000", "3000", "--lr-decay", "2000", "6000",
                      "--max-frames", "6000", *out_dirs(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    saved = read_json(tmp_path / "run" / "args.json")
    assert saved["entropy_decay"] == [1000, 3000] and saved["lr_decay"] == [2000, 6000]
    assert read_json(tmp_path / "run" / "summary.json")["frames"] >= 6000
    events = EventAccumulator(str(tmp_path / "run")).Reload()
    logged = events.Scalars("losses/entropy_coef")
    for event in logged:
        assert event.value == pytest.approx(entropy_coef(0.01, (1000, 3000), event.step), abs=1e-6)
    assert logged[-1].step >= 6000 and logged[-1].value == 0
    rates = events.Scalars("charts/learning_rate")
    for event in rates:
        assert event.value == pytest.approx(learning_rate(saved["lr"], (2000, 6000), event.step), rel=1e-6)
    assert rates[-1].step >= 6000 and rates[-1].value == 0


def test_short_pong_run_writes_run_directory_and_resumes(tmp_path):
    flags = ["--workers", "2", "--max-episode-length", "50", *out_dirs(tmp_path)]
    first = run_main(*flags, "--max-frames", "3000", timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    run = tmp_path / "run"
    names = set(os.listdir(run))
    assert {"args.json", "progress.csv", "summary.json", "checkpoint.pt"} <= names
    assert any(n.startswith("events.out.tfevents") for n in names)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run)).Reload()
    scalars = events.Tags()["scalars"]
    assert {"eval/episodic_return", "losses/entropy", "charts/SPS", "hparam/best_return"} <= set(scalars), scalars
    assert "_hparams_/session_start_info" in events.PluginTagToContent("hparams")  # TensorBoard's HPARAMS tab
    assert (tmp_path / "logs" / "PongNoFrameskip-v4_log").stat().st_size > 0
    assert (tmp_path / "trained_models" / "PongNoFrameskip-v4.pt").exists()
    args = read_json(run / "args.json")
    assert args["env"] == "PongNoFrameskip-v4" and args["workers"] == 2 and args["gpu_ids"] == [-1]
    summary = read_json(run / "summary.json")
    assert summary["stop_reason"] == "max_frames" and summary["frames"] >= 3000 and summary["solved"] is False
    rows = list(csv.reader(open(run / "progress.csv")))
    assert rows[0] == ["wall_time_s", "frames", "episodes", "return", "length", "mean_return", "fps"]
    assert len(rows) >= 2
    checkpoint = torch.load(run / "checkpoint.pt", weights_only=True)
    assert checkpoint["kind"] == "checkpoint" and checkpoint["frames"] >= 3000
    assert checkpoint["optimizer"]["state"][0]["step"] > 0

    # --resume with no other flags continues the same run: same env, same directory, frame count carried over.
    # The budget is set past where the first run stopped: workers finish the rollouts they are in when the
    # supervisor sees --max-frames, so a run ends some rollouts (640 frames each here) beyond it.
    first_frames = int(checkpoint["frames"])
    target = first_frames + 1500
    second = run_main("--resume", run, "--max-frames", str(target), timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"resumed at {first_frames} frames" in second.stdout
    resumed = torch.load(run / "checkpoint.pt", weights_only=True)
    assert resumed["frames"] >= target
    assert resumed["optimizer"]["state"][0]["step"] > checkpoint["optimizer"]["state"][0]["step"]
    rows_after = list(csv.reader(open(run / "progress.csv")))
    assert rows_after[: len(rows)] == rows and rows_after.count(rows[0]) == 1
    assert read_json(run / "summary.json")["frames"] >= target


@pytest.mark.parametrize("sig,code,when", [
    (signal.SIGINT, 130, "running"), (signal.SIGINT, 130, "starting"), (signal.SIGTERM, 143, "running"),
    (signal.SIGHUP, 143, "running")])  # the terminal closed: as SIGTERM (it killed every process, nothing saved)
def test_signal_stops_everything_and_saves(tmp_path, sig, code, when):
    cmd = [sys.executable, os.path.join(ROOT, "main.py"), *CARTPOLE, "--no-tensorboard-logger", *out_dirs(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,  # its own process group, as a terminal gives a foreground job
                            preexec_fn=as_a_terminal_job)
    progress = tmp_path / "run" / "progress.csv"
    deadline = time.monotonic() + 120
    if when == "running":  # wait until the evaluator has logged a game: every child is up and working
        while time.monotonic() < deadline and not (progress.exists() and len(progress.read_text().splitlines()) > 2):
            time.sleep(0.2)
    else:  # while the children are still importing torch
        while time.monotonic() < deadline and not progress.exists():
            time.sleep(0.05)
        time.sleep(0.5)
    os.killpg(proc.pid, sig)  # what Ctrl-C does: the signal reaches every process of the group
    sent = time.monotonic()
    stdout, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 15, "the run took too long to stop"
    assert proc.returncode == code, stderr[-2000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-2000:]
    summary = read_json(tmp_path / "run" / "summary.json")
    assert summary["stop_reason"] == "interrupted"
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["kind"] == "checkpoint"
    wait_for(lambda: live_processes(proc.pid) == [], 15)  # no process left behind
    assert not list((tmp_path / "run").glob("*.tmp*")), "a temporary checkpoint was left behind"


def test_a_console_reader_that_goes_away_neither_crashes_a_process_nor_the_stop(tmp_path):
    """``python main.py | head``, or ``| tee`` that the Ctrl-C ended first: the evaluator's and the progress lines
    met a broken pipe (a traceback, the evaluator replaced again and again), and so did the stop's last lines."""
    cmd = [sys.executable, os.path.join(ROOT, "main.py"), *CARTPOLE, "--no-tensorboard-logger", *out_dirs(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=as_a_terminal_job)
    progress = tmp_path / "run" / "progress.csv"

    def games():
        return len(progress.read_text().splitlines()) - 1 if progress.exists() else 0

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and games() < 2:
        time.sleep(0.2)
    proc.stdout.readline()
    proc.stdout.close()  # the reader is gone: every later line to stdout is a broken pipe
    before = games()
    while time.monotonic() < deadline and games() < before + 3:  # the evaluator plays (and prints) on
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    stderr = proc.stderr.read()
    proc.wait(timeout=60)
    assert proc.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr and "restarting" not in stderr, stderr[-2000:]
    assert read_json(tmp_path / "run" / "summary.json")["stop_reason"] == "interrupted"
    assert live_processes(proc.pid) == [], "processes left behind"
