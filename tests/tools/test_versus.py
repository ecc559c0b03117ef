"""versus.py: the report from crafted runs of a3g and of RL Zoo (games.csv, Monitor files), one-line errors for bad
input, and a real a3g contestant on a budget; sf_peer.py's game log on a real gymnasium environment."""

import csv
import json
import subprocess
import sys

import gymnasium as gym

import pytest

from conftest import ROOT, assert_bad_input, command, in_process, read_json
from tools import sf_peer, versus


def a3g_games(folder, games):
    """``games``: (seconds, frames, return) rows of a games.csv."""
    folder.mkdir(parents=True)
    with open(folder / "games.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["wall_time_s", "frames", "return", "length"])
        writer.writerows([[s, fr, r, 100] for s, fr, r in games])


def monitor_files(folder, start, per_env):
    """RL Zoo's layout: <folder>/<algo>/<env>_1/<i>.monitor.csv, each with its t_start and (r, l, t) rows."""
    run = folder / "ppo" / "BreakoutNoFrameskip-v4_1"
    run.mkdir(parents=True)
    for i, rows in enumerate(per_env):
        with open(run / f"{i}.monitor.csv", "w") as f:
            f.write("#" + json.dumps({"t_start": start + i, "env_id": "BreakoutNoFrameskip-v4"}) + "\n")
            f.write("r,l,t\n")
            f.writelines(f"{r},{length},{t}\n" for r, length, t in rows)


def record(out, runs):
    out.mkdir(exist_ok=True)
    (out / "versus.json").write_text(json.dumps({
        "env": "BreakoutNoFrameskip-v4", "seconds": 600, "runs_each": 2, "contestants": ["a3g", "rlzoo-ppo"],
        "marks": [5, 10], "frame_marks": [1000, 5000], "machine": "test", "commit": "abc", "date": "2026-12-04",
        "runs": runs}))


def test_the_order_alternates_run_by_run_so_that_no_contestant_always_goes_first():
    assert versus.run_order(["a3g", "rlzoo-ppo", "sample-factory"], 3) == [
        (1, "a3g"), (1, "rlzoo-ppo"), (1, "sample-factory"),
        (2, "sample-factory"), (2, "rlzoo-ppo"), (2, "a3g"),
        (3, "a3g"), (3, "rlzoo-ppo"), (3, "sample-factory")]


def test_monitor_games_are_merged_in_the_order_they_ended_with_frames_summed_from_the_first_env_start(tmp_path):
    # env 0 starts at 1000 s, env 1 at 1001 s: env 1's game at t = 5 ended at 6 s, after env 0's at 4 s
    monitor_files(tmp_path, 1000.0, [[(1.0, 300, 4.0), (3.0, 500, 20.0)], [(2.0, 400, 5.0)]])
    assert versus.read_games(str(tmp_path), "rlzoo-ppo") == [(4.0, 300.0, 1.0), (6.0, 700.0, 2.0),
                                                              (20.0, 1200.0, 3.0)]


def test_the_table_gives_median_and_worst_at_each_mark_and_leaves_out_runs_short_of_a_frame_mark(tmp_path):
    out = tmp_path / "vs"
    # a3g run 1: return 2 until 300 s, then 4; run 2: 1 then 3; frames 10 a second
    a3g_games(out / "a3g-run1", [(s, 10 * s, 2.0 if s <= 300 else 4.0) for s in range(10, 601, 10)])
    a3g_games(out / "a3g-run2", [(s, 10 * s, 1.0 if s <= 300 else 3.0) for s in range(10, 601, 10)])
    monitor_files(out / "rlzoo-ppo-run1", 0.0, [[(5.0, 100, 100.0), (7.0, 200, 400.0)]])  # 300 frames in all
    monitor_files(out / "rlzoo-ppo-run2", 0.0, [[(6.0, 100, 200.0)]])
    record(out, [{"name": n, "run": r, "dir": f"{n}-run{r}", "command": f"{n} {r}", "exit": 0}
                 for r in (1, 2) for n in ("a3g", "rlzoo-ppo")])
    result = in_process(versus.main, "--report", out)
    assert result.returncode == 0, result.stderr
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in result.stdout.splitlines()
            if line.startswith("| a3g") or line.startswith("| rlzoo")}
    # at 5 min: the last 30 games of each run, means 2 and 1; at 10 min: 60 games, (30*2 + 30*4)/60 = 3 and 2
    assert rows["a3g"][0] == "1.5 (1.0) @ 0.00M" and rows["a3g"][1] == "2.5 (2.0) @ 0.01M"
    assert rows["a3g"][2].strip(" |") == "1.5 (1.0)"  # 1000 frames: 100 s
    assert rows["rlzoo-ppo"][0] == "5.5 (5.0) @ 0.00M"  # run 1: the game ended at 400 s is past the mark
    assert rows["rlzoo-ppo"][2].strip(" |") == "-"  # 300 frames played: short of the mark
    assert (out / "versus.md").read_text() == result.stdout
    assert (out / "versus.png").read_bytes().startswith(b"\x89PNG")


def test_sample_factory_games_are_logged_whole_in_monitor_files_that_the_report_reads(tmp_path):
    """sf_peer.py's wrapper over RecordEpisodeStatistics (as Sample Factory's make_atari_env has it, on the raw
    game): one line per finished game with its points and steps, in the folder versus reads a peer's games from."""
    log = tmp_path / "sample-factory-run1" / "sf" / "games" / "0_0.monitor.csv"
    env = sf_peer.game_log_class()(gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1")), str(log),
                                   "CartPole-v1")
    env.reset(seed=0)
    lengths, steps = [], 0
    while len(lengths) < 3:
        steps += 1
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            lengths.append(steps)
            steps = 0
            env.reset()
    games = versus.read_games(str(tmp_path / "sample-factory-run1"), "sample-factory")
    assert [(frames, points) for _, frames, points in games] == [
        (float(sum(lengths[:i + 1])), float(n)) for i, n in enumerate(lengths)]  # CartPole: a point a step
    assert all(0 <= seconds < 60 for seconds, _, _ in games)


@pytest.mark.e2e
def test_a_peer_that_saves_and_exits_2_on_ctrl_c_stopped_as_planned_but_not_when_it_exits_2_by_itself(tmp_path):
    """Sample Factory exits with its INTERRUPTED status (2) after Ctrl-C: the budget was spent as planned."""
    on_ctrl_c = "import signal, sys, time; signal.signal(signal.SIGINT, lambda *a: sys.exit(2)); time.sleep(60)"
    assert versus.play([sys.executable, "-c", on_ctrl_c], 0.1, str(tmp_path / "a.log")) == 0
    assert versus.play([sys.executable, "-c", "import sys; sys.exit(2)"], 30, str(tmp_path / "b.log")) == 2


@pytest.mark.parametrize("flags, words", [
    (["--seconds", "60"], ["--out and --seconds"]),
    (["--seconds", "60", "--out", "X", "--contestants", "cleanrl"], ["'cleanrl' is not one of"]),
    (["--seconds", "60", "--out", "X", "--contestants", "a3g:ppo"], ["--a3g-flags ppo"]),
    (["--seconds", "60", "--out", "X", "--contestants", "a3g", "a3g"], ["each name once"]),
    (["--seconds", "60", "--out", "X", "--env", "ALE/Breakout-v5"], ["NoFrameskip-v4"]),
    (["--seconds", "0", "--out", "X"], ["--seconds"]),
    (["--report", "nowhere"], ["no versus.json"]),
])
def test_bad_input_is_one_line(flags, words, tmp_path):
    flags = [str(tmp_path / f) if f == "X" else f for f in flags]
    assert_bad_input(in_process(versus.main, *flags), *words)


def test_a_comparison_is_never_written_over(tmp_path):
    record(tmp_path, [])
    assert_bad_input(in_process(versus.main, "--seconds", "60", "--out", tmp_path), "holds a comparison already")


def test_an_a3g_contestant_runs_its_budget_and_is_reported(tmp_path):
    out = tmp_path / "vs"
    flags = ["--seconds", "20", "--out", out, "--contestants", "a3g:small", "--marks", "0.25", "--a3g-flags",
             "small", "--envs-per-worker 2 --workers 1", "--", "--no-tensorboard-logger"]
    result = subprocess.run([*command("versus"), *map(str, flags)], capture_output=True, text=True, timeout=200,
                            cwd=ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    saved = read_json(out / "versus.json")
    (run,) = saved["runs"]
    assert run["exit"] == 0 and "--workers 1" in run["command"] and "--max-seconds 20" in run["command"]
    assert read_json(out / "a3g-small-run1" / "summary.json")["stop_reason"] == "max_seconds"
    assert "| a3g:small |" in (out / "versus.md").read_text()


@pytest.mark.parametrize("flags, words", [
    (["--resume", "X", "--seconds", "60"], ["give only --runs and --peers-dir", "--seconds"]),
    (["--resume", "X", "--contestants", "a3g"], ["give only --runs", "--contestants"]),
    (["--resume", "X", "--runs", "1"], ["has 2 runs already"]),
    (["--resume", "nowhere"], ["no versus.json"]),
])
def test_a_resume_takes_the_recorded_settings_only(flags, words, tmp_path):
    record(tmp_path, [])
    flags = [str(tmp_path) if f == "X" else f for f in flags]
    assert_bad_input(in_process(versus.main, *flags), *words)


def test_a_resume_keeps_the_runs_that_ended_and_starts_an_interrupted_one_again(tmp_path):
    """Run 1 ended, run 2 was under way when the comparison stopped: --resume --runs 2 plays only run 2, its old
    folder kept beside as -stopped, and the report covers both runs."""
    out = tmp_path / "vs"
    a3g_games(out / "a3g-small-run1", [(s, 10 * s, 1.0) for s in range(1, 16)])
    a3g_games(out / "a3g-small-run2", [(1, 10, 5.0)])
    out.joinpath("a3g-small-run2.log").write_text("stopped\n")
    out.joinpath("versus.json").write_text(json.dumps({
        "env": "BreakoutNoFrameskip-v4", "seconds": 15, "runs_each": 1, "contestants": ["a3g:small"],
        "marks": [0.25], "frame_marks": [1e6], "machine": "test", "commit": "abc", "date": "2026-12-04",
        "a3g_args": ["--no-tensorboard-logger"], "a3g_flags": {"small": "--envs-per-worker 2 --workers 1"},
        "seed0": 7, "runs": [
            {"name": "a3g:small", "run": 1, "dir": "a3g-small-run1", "command": "first", "exit": 0},
            {"name": "a3g:small", "run": 2, "dir": "a3g-small-run2", "command": "second", "exit": None}]}))
    result = subprocess.run([*command("versus"), "--resume", str(out), "--runs", "2"], capture_output=True,
                            text=True, timeout=200, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "a3g:small run 2 had not ended" in result.stdout and "run 1 of" not in result.stdout
    saved = read_json(out / "versus.json")
    assert [(r["run"], r["command"] == "first") for r in saved["runs"]] == [(1, True), (2, False)]
    rerun = saved["runs"][1]
    assert rerun["exit"] == 0 and "--seed 8" in rerun["command"] and "--workers 1" in rerun["command"]
    assert "--max-seconds 15" in rerun["command"] and rerun["commit"] and saved["runs_each"] == 2
    assert (out / "a3g-small-run2-stopped" / "games.csv").exists() and (out / "a3g-small-run2-stopped.log").exists()
    assert read_json(out / "a3g-small-run2" / "summary.json")["stop_reason"] == "max_seconds"
    assert f"commit abc, {rerun['commit']}." in (out / "versus.md").read_text()  # each run's commit in the report
