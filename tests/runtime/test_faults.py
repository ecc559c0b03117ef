"""Faults a run must survive, each injected for real: killed workers and evaluators, a killed supervisor, NaN
updates, failed saves, leftovers of an interrupted save, and fuzzed input."""

import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import (
    ROOT,
    child_pids,
    command,
    evaluator_games,
    live_processes,
    main_in_process,
    out_dirs,
    read_json,
    run_main,
    start_run,
    stop_run,
    wait_for,
)
from core.errors import BAD_INPUT_ERRORS

CARTPOLE = ["--env", "CartPole-v1", "--workers", "2", "--hidden-size", "32", "--no-tensorboard-logger"]


@pytest.mark.parametrize("victim", ["worker 0", "evaluator"])
def test_killed_child_is_replaced_and_the_run_goes_on(tmp_path, victim):
    proc = start_run(tmp_path, *CARTPOLE, "--max-seconds", "900")  # stopped once the new one has played on
    wait_for(lambda: evaluator_games(tmp_path) >= 3)
    old_pid = child_pids(tmp_path)[victim]
    model_file = tmp_path / "trained_models" / "CartPole-v1.pt"
    best_before = torch.load(model_file, weights_only=True)["return"]
    os.kill(old_pid, signal.SIGKILL)
    new_pid = wait_for(lambda: child_pids(tmp_path).get(victim) != old_pid and child_pids(tmp_path)[victim], 15)
    games = evaluator_games(tmp_path)
    wait_for(lambda: evaluator_games(tmp_path) > games + 2, 60)  # the (new) evaluator plays on
    stdout, stderr = stop_run(proc)
    assert proc.returncode == 130, stderr[-2000:]
    assert f"{victim} (pid {old_pid}) was killed by SIGKILL; restarting it" in stderr
    summary = read_json(tmp_path / "run" / "summary.json")
    assert summary["stop_reason"] == "interrupted" and summary["restarts"] == 1
    assert new_pid != old_pid
    # --save-max: the best model on disk never gets worse, also across a new evaluator
    assert torch.load(model_file, weights_only=True)["return"] >= best_before


def test_restart_window_counts_the_deaths_of_the_last_seconds_only():
    from runtime.supervisor import RestartWindow

    window = RestartWindow(max_restarts=2, seconds=0.2)
    assert window.death() and window.death()
    assert not window.death()  # the third within the window is one too many
    assert window.too_many() == "3 deaths within 0 s is more than --max-restarts 2"
    time.sleep(0.3)
    assert window.death()  # the old ones have left the window
    assert window.so_far() == "1 of at most 2 within 0 s"


def test_worker_that_keeps_crashing_stops_the_run_cleanly(tmp_path):
    proc = start_run(tmp_path, *CARTPOLE, "--max-restarts", "2", "--max-seconds", "120",
                     env={"A3G_FAULT": "worker_raise"})
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 1
    assert "injected fault" in stderr  # the worker's own traceback tells why it died
    assert "more than --max-restarts 2; stopping" in stderr
    summary = read_json(tmp_path / "run" / "summary.json")
    assert summary["stop_reason"] == "error" and summary["restarts"] == 2
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["kind"] == "checkpoint"


def test_non_finite_updates_are_skipped_and_never_reach_the_shared_model(tmp_path):
    result = run_main("--env", "CartPole-v1", "--workers", "1", "--hidden-size", "32", "--no-tensorboard-logger",
                      "--max-nonfinite", "20", "--max-seconds", "120", *out_dirs(tmp_path), timeout=180,
                      env={**os.environ, "A3G_FAULT": "worker_nan"})
    assert result.returncode == 1, result.stderr[-2000:]
    assert "non-finite" in result.stderr and "diverged" in result.stderr
    summary = read_json(tmp_path / "run" / "summary.json")
    assert summary["stop_reason"] == "error" and summary["skipped_updates"] >= 20
    checkpoint = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert all(torch.isfinite(t).all() for t in checkpoint["state_dict"].values())
    assert all(s["step"] == 0 for s in checkpoint["optimizer"]["state"].values())  # not one update went through


def test_failed_saves_keep_the_previous_checkpoint_and_training_goes_on(tmp_path):
    first = run_main(*CARTPOLE, "--max-frames", "2000", *out_dirs(tmp_path), timeout=180)
    assert first.returncode == 0, first.stderr[-2000:]
    checkpoint = tmp_path / "run" / "checkpoint.pt"
    before, first_frames = checkpoint.read_bytes(), read_json(tmp_path / "run" / "summary.json")["frames"]
    # the disk is "full" for every save of the resumed run: periodic ones and the final one
    limit = first_frames + 10000  # the first run overshoots its 2000 by up to a poll's worth of frames
    second = run_main("--resume", tmp_path / "run", "--max-frames", limit, "--checkpoint-interval", "1",
                      timeout=180, env={**os.environ, "A3G_FAULT": "save_enospc"})
    assert second.returncode == 0, second.stderr[-2000:]
    assert "No space left on device" in second.stderr and "previous checkpoint is intact" in second.stderr
    assert "the last checkpoint could not be written" in second.stdout
    assert checkpoint.read_bytes() == before
    assert not list((tmp_path / "run").glob("*.tmp*"))
    # training went on to its limit although nothing could be saved; the checkpoint is still the first run's
    reached = re.search(r"max_frames after .*?, (\d+) frames", second.stdout)  # summary.json could not be written
    assert reached and int(reached.group(1)) >= limit
    assert torch.load(checkpoint, weights_only=True)["frames"] == first_frames


def test_a_ctrl_c_while_the_run_starts_stops_it_with_its_state_saved(tmp_path):
    """A Ctrl-C after the run's first files are written and before its processes start: the run stops as any
    interrupted run does (exit 130, checkpoint and summary), so it resumes; it left a folder that held a run it
    could neither start again (--run-dir refused) nor resume (no checkpoint.pt)."""
    run = tmp_path / "run"
    first = run_main(*CARTPOLE, "--max-frames", "2000", *out_dirs(tmp_path), timeout=180,
                     env={**os.environ, "A3G_FAULT": "start_sigint"})
    assert first.returncode == 130, first.stderr[-2000:]
    assert "Traceback" not in first.stderr and read_json(run / "summary.json")["stop_reason"] == "interrupted"
    assert torch.load(run / "checkpoint.pt", weights_only=True)["frames"] == 0
    second = run_main("--resume", run, timeout=180)
    assert second.returncode == 0, second.stderr[-2000:]
    assert read_json(run / "summary.json")["frames"] >= 2000


def test_resume_ignores_leftovers_of_an_interrupted_save(tmp_path):
    first = run_main(*CARTPOLE, "--max-frames", "2000", "--keep-checkpoints", "2", *out_dirs(tmp_path), timeout=180)
    assert first.returncode == 0, first.stderr[-2000:]
    run = tmp_path / "run"
    (run / "checkpoint.pt.tmp.12345").write_bytes(b"half a checkpoint")  # a save cut off by a power loss
    # the first run may overshoot its budget by a fraction of a second of frames: continue from where it stopped
    first_frames = torch.load(run / "checkpoint.pt", weights_only=True)["frames"]
    second = run_main("--resume", run, "--max-frames", str(int(first_frames) + 2000), timeout=180)
    assert second.returncode == 0, second.stderr[-2000:]
    assert torch.load(run / "checkpoint.pt", weights_only=True)["frames"] >= first_frames + 2000
    # --keep-checkpoints 2: the previous checkpoint is kept beside the latest
    archived = list(run.glob("checkpoint-*.pt"))
    assert len(archived) == 1 and torch.load(archived[0], weights_only=True)["frames"] == first_frames


def test_supervisor_killed_with_sigkill_leaves_no_live_child(tmp_path):
    proc = start_run(tmp_path, *CARTPOLE, "--max-seconds", "120")
    wait_for(lambda: evaluator_games(tmp_path) >= 1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    # every child notices its parent is gone (zombies, which hold no memory or GPU, are the init process's to reap)
    wait_for(lambda: live_processes(proc.pid) == [], 15)


# ---------------------------------------------------------------------------------------------------------------
# Fuzzing: random and truncated checkpoint files, random flag values. Exit 2 or success; never a traceback.


def test_fuzzed_checkpoint_files_are_rejected_cleanly(cartpole_run, tmp_path):
    from core.errors import BadInput
    from runtime.checkpoints import load_checkpoint

    good = (cartpole_run / "run" / "checkpoint.pt").read_bytes()
    rng = random.Random(0)
    for i in range(150):
        data = bytearray(good)
        kind = i % 3
        if kind == 0:
            data = data[: rng.randrange(len(data))]
        elif kind == 1:
            for _ in range(rng.randint(1, 20)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        else:
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 2000)))
        path = tmp_path / f"fuzz{i}.pt"
        path.write_bytes(bytes(data))
        try:
            loaded = load_checkpoint(path, kind="checkpoint")
        except BadInput as exc:
            assert "\n" not in str(exc)
        else:  # a mutation that missed everything that matters still loads
            assert loaded["kind"] == "checkpoint"


def test_a_damaged_zip64_end_record_is_rejected_cleanly(tmp_path):
    """zipfile.is_zipfile raises (instead of answering False) on a ZIP64 locator that names several disks: one
    fuzzed checkpoint in a few hundred hit it."""
    import struct

    from core.errors import BadInput
    from runtime.checkpoints import load_checkpoint

    locator = struct.pack("<4sLQL", b"PK\x06\x07", 1, 0, 2)  # disk 1 of 2
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0, 0, 0, 0, 0)
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"junk" + locator + end)
    with pytest.raises(BadInput, match="not a torch checkpoint"):
        load_checkpoint(path)


FLAG_VALUES = {
    "--workers": ["0", "-1", "1", "x", "1e3"], "--num-steps": ["0", "-5", "3", "2.5"],
    "--lr": ["0", "-1", "1e-4", "inf", "nan", "abc"], "--gamma": ["0", "1", "1.01", "-0.5", "0.9"],
    "--tau": ["-0.1", "1.5", "0.95"], "--entropy-coef": ["-1", "0", "nan"], "--hidden-size": ["0", "-3", "16"],
    "--skip-rate": ["0", "2"], "--max-episode-length": ["0", "-1", "50"], "--gpu-ids": ["-1", "0", "5", "-2"],
    "--distributed-step-size": ["0", "4", "-4"], "--max-frames": ["0", "-10", "200"],
    "--max-seconds": ["0", "-1", "nan"], "--score-window": ["0", "3"], "--env": ["CartPole-v1", "Nope-v9", ""],
    "--model": ["auto", "mlplstm", "a3clstm", "vit"], "--optimizer": ["Adam", "RMSprop", "SGD"],
    "--max-grad-norm": ["-1", "40", "inf"], "--envs-per-worker": ["0", "2"], "--keep-checkpoints": ["0", "2"],
    "--max-restarts": ["-1", "0"], "--resume": ["/nonexistent"], "--env-config": ["/nonexistent.json"],
    "--seed": ["-1", "0", "7", str(2**31)],
}


def test_fuzzed_flags_are_accepted_or_rejected_cleanly(tmp_path):
    from runtime import config

    rng = random.Random(1)
    for i in range(300):
        argv = ["--env", "CartPole-v1"]
        for flag in rng.sample(sorted(FLAG_VALUES), rng.randint(1, 4)):
            argv += [flag, rng.choice(FLAG_VALUES[flag])]
        argv += ["--run-dir", str(tmp_path / f"r{i}")]
        try:
            config.validate(argv)
        except SystemExit as exc:
            assert exc.code == 2, argv
        except BAD_INPUT_ERRORS as exc:
            assert str(exc) and "\n" not in str(exc), argv


def test_fuzzed_flags_end_to_end(tmp_path):
    """A few random flag sets through the real command line: exit 0 or 2, never a traceback, never a hang. A set
    the checks refuse is refused in this process (what main.py does before it starts anything); one they accept
    runs as a process of its own."""
    from runtime import config

    rng = random.Random(2)
    for i in range(6):
        argv = ["--env", "CartPole-v1", "--max-frames", "300", "--no-tensorboard-logger"]
        for flag in rng.sample(sorted(set(FLAG_VALUES) - {"--max-frames", "--max-seconds", "--env"}), 3):
            argv += [flag, rng.choice(FLAG_VALUES[flag])]
        argv += out_dirs(tmp_path, f"r{i}")
        try:
            config.validate(list(map(str, argv)))
        except (SystemExit, *BAD_INPUT_ERRORS):
            result = main_in_process(*argv)
            assert result.returncode == 2, (argv, result.stderr)
        else:
            result = run_main(*argv, timeout=240)
        assert result.returncode in (0, 2), (argv, result.stderr[-2000:])
        assert "Traceback" not in result.stderr, (argv, result.stderr[-2000:])


def test_a_soak_stopped_with_sigterm_stops_its_run_first(tmp_path):
    """SIGTERM to soak.py alone (a CI timeout, ``kill``): its run and every process of it stop before soak.py
    exits; the run trained on alone to its --seconds."""
    temp = tmp_path / "temp"
    temp.mkdir()
    soak = subprocess.Popen([*command("soak"), "--seconds", "300", "--interval", "1", "--workers", "1", "--env",
                             "CartPole-v1", "--", "--hidden-size", "32"], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(temp)})
    try:
        wait_for(lambda: list(temp.glob("a3g-soak-*/run/checkpoint.pt")) or
                 any((p / "run" / "progress.csv").exists() for p in temp.glob("a3g-soak-*")), 180)
        soak.send_signal(signal.SIGTERM)
        _, err = soak.communicate(timeout=120)
    finally:
        if soak.poll() is None:
            os.killpg(soak.pid, signal.SIGKILL)
    assert soak.returncode == 130 and "stopped before its end" in err, err
    assert live_processes(soak.pid) == []  # main.py and its children are gone with it
    assert list(temp.glob("a3g-soak-*/run/summary.json"))  # the run stopped as a stopped run does: saved


def test_short_soak_has_no_leaks(tmp_path):
    """soak.py in miniature: 2 x cores workers; file descriptors, /dev/shm entries and memory stay flat."""
    out, temp = tmp_path / "soak.json", tmp_path / "temp"
    temp.mkdir()
    result = subprocess.run([*command("soak"), "--seconds", "20", "--interval", "2", "--env", "CartPole-v1",
                             "--json", str(out), "--", "--hidden-size", "32"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env={**os.environ, "TMPDIR": str(temp)})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert not list(temp.glob("a3g-soak-*"))  # a passing soak removes its run
    report = read_json(out)
    assert report["returncode"] == 0 and report["fds_end"] <= report["fds_start"] + 2
    assert any(k.startswith("supervisor") for k in report["peak_rss_mb"])


SLOW_TO_DIE = '''
import os, signal, time

def role(folder):
    def on_sigterm(signum, frame):  # as a child in the middle of an fsync: the signal takes effect a while later
        time.sleep(1.0)
        open(os.path.join(folder, "exited"), "w").close()
        os._exit(0)
    signal.signal(signal.SIGTERM, on_sigterm)
    open(os.path.join(folder, "ready"), "w").close()
    while True:
        time.sleep(0.1)
'''

STOP_AFTER_THE_FORK_SERVER = '''
import os, signal, sys, time
import multiprocessing as mp
from multiprocessing import forkserver
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from slow_to_die import role
from runtime.run_state import RunState
from runtime.supervisor import Supervisor
from core.files import process_alive

folder = sys.argv[2]
ctx = mp.get_context("forkserver")
supervisor = Supervisor(ctx, {"role": (role, (folder,))}, RunState(ctx, 1), 0, lambda *a, **k: None)
supervisor.start()
while not os.path.exists(os.path.join(folder, "ready")):
    time.sleep(0.05)
os.kill(forkserver._forkserver._forkserver_pid, signal.SIGKILL)  # what a SIGTERM to the process group does to it
os.kill(supervisor.started[0], signal.SIGTERM)
supervisor.stop(grace=5.0)
print(os.path.exists(os.path.join(folder, "exited")), process_alive(supervisor.started[0]))
'''


def test_stop_waits_for_a_forked_child_that_outlives_its_fork_server(tmp_path):
    # With the fork server gone, a forked child's join returns at once: a supervisor that trusted it would clear the
    # child's temporary files while the child still writes one (a leftover *.tmp.<pid> in the run's folder).
    (tmp_path / "slow_to_die.py").write_text(SLOW_TO_DIE)
    done = subprocess.run([sys.executable, "-c", STOP_AFTER_THE_FORK_SERVER, ROOT, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "False"], "stop returned before the child had exited"
