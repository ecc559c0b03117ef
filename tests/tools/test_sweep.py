"""sweep.py: the report from crafted runs (score window, budgets, median and worst), one-line errors for bad input,
and a real two-run sweep."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import ROOT, as_a_terminal_job, command, in_process, read_json
from tools import sweep

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FIELDS = ["wall_time_s", "frames", "episodes", "return", "length", "mean_return", "fps"]


def run_sweep(*flags, timeout=120, **popen):
    return subprocess.run([*command("sweep"), *map(str, flags)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, **popen)


def sweep_here(*flags):
    """``python -m tools.sweep FLAGS`` in this process, where it starts no run (reports, refusals)."""
    return in_process(sweep.main, *flags)


def crafted_run(folder, means, seed, window=3, stop_reason="max_frames"):
    """A run directory whose k-th evaluator game (from 0) is at 10 (k + 1) s and 1000 (k + 1) frames."""
    folder.mkdir(parents=True)
    with open(folder / "progress.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FIELDS)
        for k, mean in enumerate(means):
            writer.writerow([10.0 * (k + 1), 1000 * (k + 1), k, mean, 10, mean, 100.0])
    (folder / "args.json").write_text(json.dumps({"env": "CartPole-v1", "seed": seed, "score_window": window}))
    (folder / "summary.json").write_text(json.dumps({
        "frames": 1000 * len(means), "seconds": 10.0 * len(means), "best_mean_return": max(means),
        "stop_reason": stop_reason}))


@pytest.fixture
def crafted_sweep(tmp_path):
    out = tmp_path / "sweep"
    crafted_run(out / "run1", [50, 10, 20, 30, 60, 70], seed=1)  # 50 at game 1 does not count: window not full
    crafted_run(out / "run2", [5, 10, 50, 52, 55], seed=2)       # reached at game 3, the window just full
    crafted_run(out / "run3", [1, 2, 3, 4, 5, 6, 7], seed=3)     # never
    crafted_run(out / "run4", [60, 60, 60, 60], seed=4)
    crafted_run(out / "run5", [60, 60, 60, 60], seed=5, stop_reason="error")  # reached, but the run crashed
    return out


def assert_bad_input(result, *words):
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].split(": error: ")[0] in ("python -m tools.sweep", "main.py"), lines[0]
    for word in words:
        assert word in lines[0], lines[0]


def test_report_of_crafted_runs(crafted_sweep):
    result = sweep_here("--report", crafted_sweep, "--score", 50, "--budgets", 1500, 4500)
    assert result.returncode == 0, result.stderr
    report = read_json(crafted_sweep / "sweep.json")
    runs = {r["run"]: r for r in report["runs"]}
    assert [r["seed"] for r in report["runs"]] == [1, 2, 3, 4, 5]
    assert (runs["run1"]["score_seconds"], runs["run1"]["score_frames"]) == (50.0, 5000)
    assert (runs["run2"]["score_seconds"], runs["run2"]["score_frames"]) == (30.0, 3000)
    assert (runs["run4"]["score_seconds"], runs["run4"]["score_frames"]) == (30.0, 3000)
    assert runs["run3"]["score_seconds"] is None and runs["run5"]["score_frames"] is None
    # the mean of the last game at or before the budget; run4 and run5 stopped at 4000 frames: no return at 4500
    assert [runs[r]["return_at_budgets"] for r in ("run1", "run2", "run3", "run4", "run5")] == [
        [50, 30], [5, 52], [1, 4], [60, None], [60, None]]
    # time to score over 50, 30, inf, 30, inf: 3 of 5 reached, so the median is a number; the worst is not
    assert report["median"]["score_seconds"] == 50.0 and report["worst"]["score_seconds"] is None
    assert report["median"]["score_frames"] == 5000 and report["worst"]["score_frames"] is None
    # at 4500 the median and worst of the three runs that got there
    assert report["median"]["return_at_budgets"] == [50, 30] and report["worst"]["return_at_budgets"] == [1, 4]
    table = (crafted_sweep / "sweep.md").read_text()
    assert table in result.stdout
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    assert len(rows) == 1 + 5 + 2 and "not reached" in rows[3] and "not reached" in rows[-1]
    assert "return @ 1,500" in rows[0] and "to 50 (s)" in rows[0]
    assert "final weights" not in table  # no run played final games: no such columns
    png = (crafted_sweep / "sweep.png").read_bytes()
    assert png[:8] == PNG_SIGNATURE and len(png) > 20_000


def test_report_again_keeps_what_the_sweep_knew(crafted_sweep):
    assert sweep_here("--report", crafted_sweep, "--score", 50).returncode == 0
    report = read_json(crafted_sweep / "sweep.json")
    report["runs"][0]["exit_code"] = 1  # as the sweep would have recorded a run that exited 1
    report["note"] = "shared the machine with another run"  # written by hand
    report["flags_now"] = "--lr-decay none"  # a key the report knows nothing of, written by hand
    (crafted_sweep / "sweep.json").write_text(json.dumps(report))
    assert "note" not in (crafted_sweep / "sweep.md").read_text()
    assert sweep_here("--report", crafted_sweep).returncode == 0  # score and budgets from sweep.json
    again = read_json(crafted_sweep / "sweep.json")
    assert again["score"] == 50 and again["budgets"] == report["budgets"] == [1000, 2000, 3000, 4000]
    assert again["runs"][0]["exit_code"] == 1 and again["runs"][0]["score_seconds"] is None
    assert again["note"] == "shared the machine with another run" and again["flags_now"] == "--lr-decay none"
    assert "- note: shared the machine with another run" in (crafted_sweep / "sweep.md").read_text()


def test_a_recorded_min_entropy_stays_where_the_tensorboard_files_are_gone(crafted_sweep):
    """A sweep folder rebuilt from its committed records has no TensorBoard files: the min entropy sweep.json holds
    of a run stays in the report, and a lower one in the files that are there counts."""
    from torch.utils.tensorboard import SummaryWriter

    (crafted_sweep / "sweep.json").write_text(json.dumps({"runs": [{"run": "run1", "min_entropy": 1.02},
                                                                   {"run": "run2", "min_entropy": 0.9}]}))
    with SummaryWriter(crafted_sweep / "run2") as writer:
        writer.add_scalar("losses/entropy", 0.5, 1000)
    for _ in range(2):  # and again from the report's own sweep.json
        assert sweep_here("--report", crafted_sweep).returncode == 0
        report = read_json(crafted_sweep / "sweep.json")
        assert [r["min_entropy"] for r in report["runs"]] == [1.02, pytest.approx(0.5), None, None, None]
        assert report["worst"]["min_entropy"] == pytest.approx(0.5)
    assert "| run1 | 1 | - | max_frames | 6,000 | 60 | 70.0 | 1.02 |" in (crafted_sweep / "sweep.md").read_text()


@pytest.mark.e2e  # the sweep reads the machine and the commit from lscpu and git
def test_a_recorded_branch_that_is_gone_is_one_line(crafted_sweep):
    """sweep.json names the branch --resume continued run1 in; a copy of the folder without it is refused in one
    line by --report and --resume (it was a traceback), naming the branch; the record keeps it."""
    assert sweep_here("--report", crafted_sweep).returncode == 0
    report = read_json(crafted_sweep / "sweep.json")
    report["runs"][0]["dir"] = "run1-from-3000"
    report["sweep_command"] = "python -m tools.sweep --runs 5 --frames 6000 --out X -- --env CartPole-v1"
    (crafted_sweep / "sweep.json").write_text(json.dumps(report))
    before = (crafted_sweep / "sweep.json").read_text()
    assert_bad_input(sweep_here("--report", crafted_sweep), "run1 went on in run1-from-3000", "put it back")
    assert (crafted_sweep / "sweep.json").read_text() == before
    assert_bad_input(sweep_here("--resume", crafted_sweep), "run1 went on in run1-from-3000", "put it back")
    assert read_json(crafted_sweep / "sweep.json")["runs"][0]["dir"] == "run1-from-3000"


def test_median_and_worst():
    assert sweep.median_and_worst([30, None, 10, None, 20], time=True) == (30, None)  # 3 of 5 reached
    assert sweep.median_and_worst([30, None, None, None, 20], time=True) == (None, None)
    assert sweep.median_and_worst([3.0, None, -1.0]) == (1.0, -1.0)  # a missing return is left out
    assert sweep.median_and_worst([None, None]) == (None, None)


def test_default_budgets():
    assert sweep.default_budgets([{"frames": 3360}, {"frames": 3120}, {"frames": None}]) == [780, 1500, 2300, 3100]
    assert sweep.default_budgets([{"frames": 4_123_456}]) == [1_000_000, 2_000_000, 3_000_000, 4_100_000]
    assert sweep.default_budgets([{"frames": None}]) == []


@pytest.mark.e2e  # the sweep reads the machine and the commit from lscpu and git
def test_bad_input_is_one_line_exit_2(tmp_path, crafted_sweep):
    (tmp_path / "empty").mkdir()
    new = tmp_path / "new"
    (tmp_path / "a_file").write_text("a user's notes")
    (tmp_path / "a_run").mkdir()
    (tmp_path / "a_run" / "args.json").write_text("{}")  # a folder of something else: a run's, say
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "sweep.json").write_text('{"sweep_command": ')  # cut off as it was written
    cases = [
        (["--runs", 0, "--frames", 1000, "--out", new], ["--runs"]),
        (["--out", new], ["budget"]),
        (["--frames", 0, "--out", new], ["--frames"]),
        (["--seconds", -5, "--out", new], ["--seconds"]),
        (["--frames", 1000], ["--out"]),
        (["--frames", 1000, "--score", "nan", "--out", new], ["--score"]),
        (["--frames", 1000, "--final-eval", -1, "--out", new], ["--final-eval"]),
        (["--frames", 1000, "--out", new, "--env", "CartPole-v1"], ["--env", "after --"]),
        (["--frames", 1000, "--out", crafted_sweep], ["already holds runs"]),
        (["--frames", 1000, "--out", tmp_path / "a_file"], ["is a file"]),
        (["--frames", 1000, "--out", tmp_path / "a_run"], ["already holds files", "--resume"]),
        (["--frames", 1000, "--out", tmp_path / "a_file" / "sub", "--", "--env", "CartPole-v1"], ["cannot be written"]),
        (["--frames", 1000, "--seed0", -3, "--out", new], ["--seed0", "2**31"]),
        (["--frames", 1000, "--runs", 3, "--seed0", 2**31 - 2, "--out", new], ["--seed0", "--runs"]),
        (["--report", tmp_path / "empty"], ["run<i>/progress.csv"]),
        (["--report", tmp_path / "nothing_here"], ["run<i>/progress.csv"]),
        (["--report", crafted_sweep, "--", "--env", "CartPole-v1"], ["--report"]),
        (["--resume", crafted_sweep], ["sweep.json"]),
        (["--resume", tmp_path / "nothing_here"], ["sweep.json"]),
        (["--resume", tmp_path / "corrupt"], ["is not a sweep's record"]),
        (["--resume", crafted_sweep, "--runs", 3], ["--resume", "alone"]),
        (["--resume", crafted_sweep, "--", "--env", "CartPole-v1"], ["--resume", "alone"]),
    ]
    for flags, words in cases:
        assert_bad_input(sweep_here(*flags), *words)
    assert not new.exists() and (tmp_path / "a_file").read_text() == "a user's notes"
    assert os.listdir(tmp_path / "a_run") == ["args.json"]


@pytest.mark.parametrize("flags,words", [
    (["--seed", 3], ["--seed", "--seed0"]),
    (["-s3"], ["--seed"]),
    (["--run-dir", "x"], ["--run-dir"]),
    (["--max-frames", 10], ["--max-frames", "--frames"]),
    (["--resume", "x"], ["--resume"]),
    (["--no-such-flag"], ["--no-such-flag"]),  # main.py's own parser, before any run
])
def test_main_flags_that_sweep_refuses(flags, words, tmp_path):
    assert_bad_input(sweep_here("--frames", 1000, "--out", tmp_path / "s", "--", *flags), *words)
    assert not (tmp_path / "s" / "run1").exists()


def test_flags_main_py_refuses_end_the_sweep_at_run_1(tmp_path):
    out = tmp_path / "s"
    result = run_sweep("--runs", 3, "--frames", 1000, "--out", out, "--", "--env", "CartPole-v1", "--workers", 0)
    assert_bad_input(result, "run 1 refused", "--workers")
    assert (out / "run1" / "stdout.log").exists() and not (out / "run2").exists()
    refusal = (out / "run1" / "stdout.log").read_text()
    assert "--workers" in refusal
    # run 1 began nothing, so --resume starts it again: its first attempt's output is kept, the new one after it
    assert_bad_input(run_sweep("--resume", out), "run 1 could not resume", "--workers")
    assert (out / "run1" / "stdout.log").read_text() == refusal * 2


TINY = ["--env", "CartPole-v1", "--workers", 1, "--hidden-size", 32, "--no-tensorboard-logger"]


def test_real_sweep(tmp_path):
    out = tmp_path / "sweep"
    result = run_sweep("--runs", 2, "--frames", 3000, "--final-eval", 2, "--out", out, "--", *TINY, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("run1", "run2", "sweep.md", "sweep.json", "sweep.png", "trained_models"):
        assert (out / name).exists(), name
    assert [read_json(out / r / "args.json")["seed"] for r in ("run1", "run2")] == [1, 2]
    assert "max_frames" in (out / "run1" / "stdout.log").read_text() + read_json(out / "run1" / "summary.json")[
        "stop_reason"]
    report = read_json(out / "sweep.json")
    assert [(r["exit_code"], r["stop_reason"]) for r in report["runs"]] == [(0, "max_frames")] * 2
    assert len(report["budgets"]) == 4 and report["budgets"][-1] <= min(r["frames"] for r in report["runs"])
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # the code the runs used, in the report
        assert report["commit"].startswith(head.stdout.strip()) and report["commit"] in (out / "sweep.md").read_text()
    assert result.stdout.count("started") == 2 and result.stdout.count("ended: exit 0") == 2
    # --final-eval: each run's checkpoint.pt played in whole games, greedy and sampled, by gym_eval.py
    for run in report["runs"]:
        for policy in ("greedy", "stochastic"):
            played = read_json(out / run["run"] / f"final_{policy}.json")
            assert len(played["episodes"]) == 2 and played["policy"] == policy
            assert played["model"].endswith("checkpoint.pt") and run[f"final_{policy}"] == played["mean"]
    assert "final weights, greedy" in (out / "sweep.md").read_text()


def test_ctrl_c_stops_the_sweep_after_the_running_run_saved(tmp_path):
    out = tmp_path / "sweep"
    flags = ["--runs", 3, "--seconds", 120, "--out", out, "--", *TINY]
    proc = subprocess.Popen([*command("sweep"), *map(str, flags)], cwd=ROOT,
                            start_new_session=True, preexec_fn=as_a_terminal_job,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    progress, deadline = out / "run1" / "progress.csv", time.monotonic() + 120
    while not (progress.exists() and len(progress.read_text().splitlines()) > 5) and time.monotonic() < deadline:
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)  # as the terminal does: to sweep.py and main.py alike
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout + stderr
    assert not (out / "run2").exists()
    report = read_json(out / "sweep.json")
    assert [(r["exit_code"], r["stop_reason"]) for r in report["runs"]] == [(130, "interrupted")]
    assert (out / "sweep.md").exists() and (out / "sweep.png").exists()


def test_a_sweep_cut_short_carries_on_with_resume(tmp_path):
    """A sweep killed outright (a reboot: no process saves) during run 1 carries on with --resume OUT: run 1 goes on
    from its last checkpoint in a branch beside it (games past that checkpoint were logged), which the report
    measures; run 2, never begun, starts; each plays its --final-eval games. Resuming a finished sweep runs nothing."""
    out, frames = tmp_path / "sweep", 20000  # run 1 must still be going after its third save (0.2 s apart)
    flags = ["--runs", 2, "--frames", frames, "--final-eval", 1, "--out", out, "--", *TINY, "--checkpoint-interval",
             0.2]
    proc = subprocess.Popen([*command("sweep"), *map(str, flags)], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run1, deadline = out / "run1", time.monotonic() + 120

    def logged():  # frames of the run's logged games, the training's and the evaluator's
        return [float(row["frames"]) for name in ("games.csv", "progress.csv") if (run1 / name).exists()
                for row in csv.DictReader(open(run1 / name))]

    def saved():
        try:
            return torch.load(run1 / "checkpoint.pt", weights_only=True)["frames"]
        except (OSError, RuntimeError, EOFError):
            return None

    # an outright kill (a reboot: nothing saves) once trained weights were saved and games logged after them
    while time.monotonic() < deadline:
        archives = [name for name in os.listdir(run1) if name.startswith("checkpoint-")] if run1.exists() else []
        at = saved()
        if len(archives) >= 2 and at is not None and max(logged(), default=0) > at:
            break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    at = saved()
    assert at is not None and 0 < at < max(logged()) < frames, (at, max(logged(), default=None))
    assert read_json(out / "sweep.json")["runs"] == [] and not (run1 / "summary.json").exists()
    assert not (out / "run2").exists()

    result = run_sweep("--resume", out, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    branch = [name for name in os.listdir(out) if name.startswith("run1-from-")]
    assert branch == [f"run1-from-{at:.0f}"], os.listdir(out)
    assert "run 1/2 (seed 1) resumed from" in result.stdout and "run 2/2 (seed 2) started" in result.stdout
    report = read_json(out / "sweep.json")
    assert [(r["run"], r.get("dir"), r["exit_code"], r["stop_reason"]) for r in report["runs"]] == [
        ("run1", branch[0], 0, "max_frames"), ("run2", None, 0, "max_frames")]
    for run, folder in (("run1", branch[0]), ("run2", "run2")):
        summary = read_json(out / folder / "summary.json")
        assert summary["frames"] >= frames and read_json(out / folder / "args.json")["seed"] == int(run[-1])
        entry = next(r for r in report["runs"] if r["run"] == run)
        assert entry["frames"] == summary["frames"] and entry["final_greedy"] == read_json(
            out / folder / "final_greedy.json")["mean"]
    with open(out / branch[0] / "games.csv") as f:  # the branch's files hold the whole run, from frame 0
        assert float(next(csv.DictReader(f))["frames"]) < frames / 2
    assert report["sweep_command"].endswith(f"--out {out} -- " + " ".join(map(str, TINY)) + " --checkpoint-interval 0.2")
    assert len(report["resumed"]) == 1 and "--resume" in report["resumed"][0]
    assert "- resumed: " in (out / "sweep.md").read_text()

    before = sorted(os.listdir(out))
    again = run_sweep("--resume", out, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "started" not in again.stdout and "resumed from" not in again.stdout and "| run1 |" in again.stdout
    assert len(read_json(out / "sweep.json")["resumed"]) == 2 and sorted(os.listdir(out)) == before
    assert run_sweep("--report", out).returncode == 0  # the report again measures the branch, and keeps the resumes
    report = read_json(out / "sweep.json")
    assert report["runs"][0]["dir"] == branch[0] and report["runs"][0]["frames"] >= frames
    assert len(report["resumed"]) == 2


def test_a_hand_edited_sweep_json_is_read_for_what_it_holds(crafted_sweep):
    """Entries of the wrong kind are left out of the report; a command that is no sweep's is nothing to resume."""
    (crafted_sweep / "sweep.json").write_text(json.dumps({"runs": 5, "score": "high", "budgets": "all"}))
    result = sweep_here("--report", crafted_sweep)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert read_json(crafted_sweep / "sweep.json")["score"] is None
    (crafted_sweep / "sweep.json").write_text('{"sweep_command": "python -m tools.sweep", "note": "mine",}')
    assert_bad_input(sweep_here("--report", crafted_sweep), "cannot be read as JSON", "it is kept")
    assert (crafted_sweep / "sweep.json").read_text().endswith('"mine",}')
    command = f"python -m tools.sweep --resume {crafted_sweep}"  # would resume itself for ever
    (crafted_sweep / "sweep.json").write_text(json.dumps({"sweep_command": command}))
    assert_bad_input(sweep_here("--resume", crafted_sweep), "names no sweep to run")


@pytest.mark.e2e  # the sweep reads the machine and the commit from lscpu and git
def test_resume_runs_nothing_for_runs_that_ended_and_refuses_one_cut_before_its_first_checkpoint(crafted_sweep):
    """Runs that finished or crashed stay as they ended (no training starts); a run with files but no checkpoint
    has nothing to go on from: one line, exit 2, naming the folder to move."""
    command = f"python -m tools.sweep --runs 5 --frames 4000 --out {crafted_sweep} -- --env CartPole-v1"
    recorded = [{"run": "run1", "seed": 1, "exit_code": 0, "min_entropy": 1.02}]  # its TensorBoard files are gone
    (crafted_sweep / "sweep.json").write_text(json.dumps({"sweep_command": command, "runs": recorded}))
    result = sweep_here("--resume", crafted_sweep)
    assert result.returncode == 1, result.stdout + result.stderr  # run 5 crashed: a result the resume keeps
    assert "started" not in result.stdout and "resumed from" not in result.stdout
    report = read_json(crafted_sweep / "sweep.json")
    assert [(r["run"], r["exit_code"]) for r in report["runs"]] == [("run1", 0), ("run2", 0), ("run3", 0),
                                                                     ("run4", 0), ("run5", 1)]
    assert report["runs"][0]["min_entropy"] == 1.02
    assert len(report["resumed"]) == 1 and report["sweep_command"] == command
    again = sweep_here(f"--resume={crafted_sweep}")  # argparse's other spelling is the same flag
    assert again.returncode == 1 and len(read_json(crafted_sweep / "sweep.json")["resumed"]) == 2, again.stderr

    (crafted_sweep / "run5" / "summary.json").unlink()  # killed, and before any checkpoint
    assert_bad_input(sweep_here("--resume", crafted_sweep), "run 5", "first checkpoint", "run5")


def test_newest_part_follows_the_branches_a_resume_wrote(tmp_path):
    run = tmp_path / "run1"
    crafted_run(run, [1, 2], seed=1, stop_reason="interrupted")
    assert sweep.newest_part(str(run)) == str(run)
    crafted_run(tmp_path / "run1-from-100", [1], seed=1, stop_reason="interrupted")  # cut before its first save
    assert sweep.newest_part(str(run)) == str(run)
    for name in ("run1-from-100-2", "run1-from-100-2-from-300"):
        crafted_run(tmp_path / name, [1, 2, 3], seed=1, stop_reason="interrupted")
        (tmp_path / name / "checkpoint.pt").write_bytes(b"")
    assert sweep.newest_part(str(run)) == str(tmp_path / "run1-from-100-2-from-300")
    (tmp_path / "run1" / "summary.json").write_text(json.dumps({"stop_reason": "max_frames"}))
    assert sweep.newest_part(str(run)) == str(run)  # a run that finished is not followed into branches made later


def test_a_resume_and_the_final_games_are_told_again_what_a_checkpoint_never_carries():
    """The modules to import (a file a3g loads never makes it import code) and the machine's flags."""
    from runtime import config

    def retold(*flags):
        return sweep.uncarried(vars(config.build_parser(suppress_defaults=True).parse_args(list(flags))))

    assert retold("--env", "CartPole-v1", "--lr", "0.001") == ([], [])
    assert retold("--env", "mine:Maze-v0", "--gym-packages", "extras", "--gpu-ids", "0", "1", "--backend", "ray") == (
        ["--gym-packages", "extras", "mine", "--gpu-ids", "0", "1", "--backend", "ray"], ["--gym-packages", "extras",
                                                                                          "mine"])
    assert retold("--gym-packages", "mine", "--env", "mine:Maze-v0", "-gp", "-1")[0] == [
        "--gym-packages", "mine", "--gpu-ids", "-1"]


def test_min_entropy_looks_at_the_first_frames_only(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(tmp_path) as writer:
        for step, value in ((100_000, 1.7), (400_000, 0.3), (600_000, 0.01)):
            writer.add_scalar("losses/entropy", value, step)
    assert sweep.min_entropy(str(tmp_path)) == pytest.approx(0.3)
    assert sweep.min_entropy(str(tmp_path), frames=10**6) == pytest.approx(0.01)
    (tmp_path / "empty").mkdir()
    assert sweep.min_entropy(str(tmp_path / "empty")) is None


def test_the_sweep_relays_the_running_runs_progress(tmp_path, capsys):
    """While a run goes, its newest progress line, at most once per interval and never the same line twice."""
    log = tmp_path / "stdout.log"
    writer = ("import sys, time\n"
              "for i in range(4):\n"
              "    print(f'a3g: 00h 00m 0{i}s, {i * 1000} frames, 500 frames/s; no evaluator game yet', flush=True)\n"
              "    time.sleep(0.6)\n"
              "print('a3g: max_frames after ...', flush=True)\n")
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", writer], stdout=out)
        assert sweep.wait_showing_progress(proc, str(log), "sweep: run 1/1: ", every=1.0) == 0
    lines = capsys.readouterr().out.splitlines()
    assert 1 <= len(lines) <= 3 and len(set(lines)) == len(lines), lines
    assert all(line.startswith("sweep: run 1/1: 00h 00m 0") and "frames/s" in line for line in lines), lines
