"""Your own environment without editing a3g: ``--env module:Id`` (gymnasium's syntax) and ``--gym-packages``
import the module in every process that builds the environment; a file a3g loads never makes it import code."""

import csv
import os

import pytest
import torch

from conftest import (
    ROOT,
    assert_bad_input,
    command,
    evaluator_games,
    main_in_process,
    out_dirs,
    read_json,
    run_main,
    start_run,
    stop_run,
    wait_for,
)

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = "a3g_test_envs:Corridor-v0"
# where a user's package would be installed: importable by main.py and every process it starts
WITH_PACKAGE = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])}


def gym_eval(*flags):
    import subprocess

    return subprocess.run([*command("gym_eval.py"), *map(str, flags)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=WITH_PACKAGE)


@pytest.fixture(scope="module")
def corridor_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("corridor")
    result = run_main("--env", ENV, "--workers", "2", "--max-frames", "20000", "--no-tensorboard-logger",
                      *out_dirs(tmp), env=WITH_PACKAGE)
    assert result.returncode == 0, result.stderr[-2000:]
    return tmp


def test_a_module_id_trains_with_two_workers_and_gym_eval_plays_it(corridor_run):
    summary = read_json(corridor_run / "run" / "summary.json")
    assert summary["frames"] >= 20000 and summary["best_return"] == 1.0
    played = gym_eval("--env", ENV, "--model-path", corridor_run / "run", "--num-episodes", "3",
                      "--log-dir", corridor_run / "logs")
    assert played.returncode == 0, played.stderr
    assert "Corridor-v0: mean" in played.stdout


def test_a_model_file_never_makes_a3g_import_its_module(corridor_run):
    refused = gym_eval("--model-path", corridor_run / "run", "--num-episodes", "1", "--log-dir", corridor_run / "logs")
    assert_bad_input(refused, "--env a3g_test_envs:Corridor-v0", "never makes a3g import code")
    played = gym_eval("--model-path", corridor_run / "run", "--gym-packages", "a3g_test_envs", "--num-episodes", "1",
                      "--log-dir", corridor_run / "logs")
    assert played.returncode == 0, played.stderr
    # a resume is the same: the checkpoint names the module, the command line must too
    resumed = run_main("--resume", corridor_run / "run", "--max-frames", "25000", env=WITH_PACKAGE, timeout=120)
    assert_bad_input(resumed, "--gym-packages a3g_test_envs", "never makes a3g import code")


def test_a_sweep_of_a_module_id_plays_its_final_games(tmp_path):
    """gym_eval.py is told the module again: the model file names it, and never makes a3g import it."""
    import subprocess

    out = tmp_path / "sweep"
    result = subprocess.run([*command("sweep"), "--runs", "1", "--frames", "5000", "--final-eval", "1", "--out", out,
                             "--", "--env", ENV, "--workers", "1", "--no-tensorboard-logger"],
                            capture_output=True, text=True, timeout=300, cwd=ROOT, env=WITH_PACKAGE)
    assert result.returncode == 0, result.stdout + result.stderr
    log = (out / "run1" / "final_eval.log").read_text()
    for policy in ("greedy", "stochastic"):
        assert read_json(out / "run1" / f"final_{policy}.json")["episodes"], log


def test_gym_packages_registers_ids_and_a_bad_module_is_one_line(tmp_path):
    result = main_in_process("--env", "Corridor-v0", "--gym-packages", "no_such_module_here", "--max-frames", "10",
                             *out_dirs(tmp_path))
    assert_bad_input(result, "cannot import 'no_such_module_here'")
    result = main_in_process("--env", "Corridor-v0", *out_dirs(tmp_path), "--max-frames", "10")
    assert_bad_input(result, "unknown environment id", "--gym-packages")


def test_eval_stochastic_samples_the_evaluators_actions_and_a_resume_that_turns_it_on_starts_the_mean_afresh(tmp_path):
    """In the corridor a greedy policy (deterministic, in a deterministic game) either walks straight to the end, 4
    steps, or loops until the 20-step limit; sampled actions give other lengths too. The learning rate is tiny so
    that the policy stays near uniform for the whole run. The run is resumed with --eval-stochastic: the evaluator's
    running mean starts with the first sampled game (it takes no greedy one), and the resume says so."""
    run = tmp_path / "run"
    proc = start_run(tmp_path, "--env", ENV, "--workers", "1", "--lr", "1e-9", "--max-seconds", "900",
                     "--no-tensorboard-logger", env=WITH_PACKAGE)
    wait_for(lambda: evaluator_games(tmp_path) >= 10, 120)
    stdout, stderr = stop_run(proc)
    assert proc.returncode == 130, stderr[-2000:]
    greedy = evaluator_games(tmp_path)
    proc = start_run(None, "--resume", run, "--gym-packages", "a3g_test_envs", "--eval-stochastic", env=WITH_PACKAGE)
    wait_for(lambda: evaluator_games(tmp_path) >= greedy + 10, 120)
    stdout, stderr = stop_run(proc)
    assert proc.returncode == 130, stderr[-2000:]
    assert (f"the evaluator now plays sampled games: its --score-window mean starts afresh, without the {greedy} "
            "games already in progress.csv") in stderr
    with open(run / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    lengths = [int(row["length"]) for row in rows]
    assert set(lengths[:greedy]) <= {4, 20}, lengths[:greedy]
    assert set(lengths[greedy:]) - {4, 20}, lengths[greedy:]
    sampled = [float(row["return"]) for row in rows[greedy:]]
    for i, row in enumerate(rows[greedy:]):  # the mean of the sampled games alone (the window is 10)
        window = sampled[max(0, i - 9): i + 1]
        assert float(row["mean_return"]) == pytest.approx(sum(window) / len(window), abs=1e-3)
    assert torch.load(run / "checkpoint.pt", weights_only=True)["eval_window_start"] == greedy
