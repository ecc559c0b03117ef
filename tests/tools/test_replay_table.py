"""docs/replay_table.py: the replay comparison's table from kept run folders and lost.json (runs whose folders went with a
machine), medians and worsts over seeds, unfinished runs left out."""

import csv
import json
import os
import subprocess
import sys

from conftest import ROOT

FIELDS = ["wall_time_s", "frames", "episodes", "return", "length", "mean_return", "fps"]


def kept_run(folder, means, frames_done, seconds=1000.0, masked=None):
    """A run folder as replay_comparison.sh keeps it: progress.csv with one evaluator game per 0.5M frames."""
    folder.mkdir(parents=True)
    with open(folder / "progress.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FIELDS)
        for i, mean in enumerate(means):
            writer.writerow([i * 10.0, (i + 1) * 500_000, i, mean, 800, mean, 2000.0])
    summary = {"frames": frames_done, "seconds": seconds}
    if masked is not None:
        summary["masked_fraction"] = masked
    (folder / "summary.json").write_text(json.dumps(summary))


def test_table_counts_finished_and_lost_runs(tmp_path):
    kept_run(tmp_path / "A-s2", [-21, -10, 1.5, 3.0, 9.0], 2_000_000, seconds=500.0)  # 3.0 at 2M, 9.0 after it
    kept_run(tmp_path / "A-s3", [-21, -15, -2.0, -4.0], 2_010_000, seconds=670.0)
    kept_run(tmp_path / "C-s2", [-21, 0, 10, 18.4], 2_000_000, masked=0.0025)
    kept_run(tmp_path / "C-s3", [-21, -20], 900_000)  # still running: not counted
    (tmp_path / "lost.json").write_text(json.dumps({"note": "lost", "runs": [
        {"config": "A", "seed": 1, "return": 4.6, "fps": 1177},
        {"config": "C", "seed": 1, "return": 20.2, "fps": 932, "masked_fraction": 0.0015}]}))
    result = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "replay_table.py"), str(tmp_path)],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    rows = {line.split(" | ")[0].strip("| "): line for line in result.stdout.splitlines()[2:]}
    assert set(rows) == {"A", "C"}
    assert "s1* +4.6, s2 +3.0, s3 -4.0 | +3.0 | -4.0 | s1* 1,177, s2 4,000, s3 3,000 | - |" in rows["A"]
    assert "s1* +20.2, s2 +18.4 | +19.3 | +18.4 |" in rows["C"]  # median of two: their mean
    assert rows["C"].endswith("| 0.20% |")
    assert (tmp_path / "replay.md").read_text().strip() == result.stdout.strip()
    assert (tmp_path / "replay.png").stat().st_size > 10_000


def test_no_runs_is_one_line(tmp_path):
    result = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "replay_table.py"), str(tmp_path)],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0 and "no finished" in result.stderr


def test_milestones_of_kept_runs_within_the_budget(tmp_path):
    kept_run(tmp_path / "A-s2", [-21, -10, 1.5, 3.0, 12.0], 2_000_000)  # +12 only at 2.5M: past the budget
    kept_run(tmp_path / "C-s2", [-21, 0, 10, 18.4], 2_000_000)
    (tmp_path / "lost.json").write_text(json.dumps({"note": "lost", "runs": [
        {"config": "C", "seed": 1, "return": 20.2, "fps": 932}]}))
    result = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "replay_table.py"), str(tmp_path)],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "milestones.md").read_text().splitlines() == [
        "| run | >= 0 | >= 10 | >= 18 |",
        "|---|---|---|---|",
        "| A s2 | 1.50M (0.3 min) | not in 2M | not in 2M |",
        "| C s2 | 1.00M (0.2 min) | 1.50M (0.3 min) | 2.00M (0.5 min) |"]  # the lost seed 1 has no progress


def test_a_copy_beside_the_runs_and_a_run_without_a_game_by_2m_are_left_out(tmp_path):
    """A folder B-s1.bak was int('1.bak'): a traceback; a run past 2M frames whose first game came after it formatted
    None: a traceback."""
    kept_run(tmp_path / "A-s1", [-21, -10, 1.5, 3.0], 2_000_000)
    kept_run(tmp_path / "A-s1.bak", [-21, -10, 1.5, 3.0], 2_000_000)
    late = tmp_path / "A-s2"
    kept_run(late, [], 2_100_000)
    with open(late / "progress.csv", "a", newline="") as f:
        csv.writer(f).writerow([1.0, 2_050_000, 0, -20, 800, -20, 2000.0])  # its first game, after 2M frames
    result = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "replay_table.py"), str(tmp_path)],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    (row,) = result.stdout.splitlines()[2:]
    assert row.startswith("| A | no replay | s1 +3.0 | +3.0 | +3.0 |"), row
