"""docs/atari_table.py: the seven games' results page from runs on disk (crafted here: the numbers are known)."""

import csv
import importlib.util
import json
import os

import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location("atari_table", os.path.join(ROOT, "docs", "atari_table.py"))
atari_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(atari_table)

M = 1_000_000
DATES = {"abc1234": "2026-11-25", "4f72e9a": "2026-11-29", "8111891": "2026-11-30"}  # commits' dates, as git says


@pytest.fixture(autouse=True)
def git_dates(monkeypatch):
    """The page dates each row's code by git (a process, which these in-process tests do not start): known here."""
    monkeypatch.setattr(atari_table, "commit_date", DATES.get)
FIELDS = ["wall_time_s", "frames", "episodes", "return", "length", "mean_return", "fps"]


def crafted_run(folder, points, seed, lr_decay=None):
    """A run whose evaluator running mean is ``mean`` at ``frames`` for each (frames, mean); 1,000 frames/s;
    ``lr_decay`` its saved learning-rate span (None: a constant rate, as runs from before the flag save no key)."""
    folder.mkdir(parents=True)
    with open(folder / "progress.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FIELDS)
        for k, (frames, mean) in enumerate(points):
            writer.writerow([frames / 1000, frames, k, mean, 100, mean, 1000.0])
    (folder / "args.json").write_text(json.dumps({"env": "BreakoutNoFrameskip-v4", "seed": seed,
                                                  "defaults": "defaults for Atari on a CPU-only machine: --model nature",
                                                  **({"lr_decay": lr_decay} if lr_decay else {})}))
    (folder / "summary.json").write_text(json.dumps({"frames": points[-1][0], "seconds": points[-1][0] / 1000,
                                                     "stop_reason": "max_frames"}))


def crafted_games(folder, returns):
    """games.csv: a training game every 100,000 frames, the k-th (from 1) with return ``returns(k)``."""
    with open(folder / "games.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["wall_time_s", "frames", "return", "length"])
        writer.writerows([k / 10, k * 100_000, returns(k), 500] for k in range(1, 201))


@pytest.fixture
def runs(tmp_path):
    folder = tmp_path / "atari_runs"
    crafted_run(folder / "Breakout" / "run1", [(5 * M, 10), (10 * M, 100), (15 * M, 200), (20 * M, 300)], 1,
                [10 * M, 20 * M])
    crafted_run(folder / "Breakout" / "run2", [(9 * M, 50), (19 * M, 250), (20 * M, 280)], 2, [10 * M, 20 * M])
    crafted_run(folder / "Breakout" / "run3", [(10 * M, 40), (12 * M, 45)], 3)  # stopped before 20M: not counted
    crafted_games(folder / "Breakout" / "run1", lambda k: k)  # last 100 by 10M: 1..100; by 20M: 101..200
    crafted_games(folder / "Breakout" / "run2", lambda k: 30)  # run3 has no games.csv: left out
    (folder / "Breakout" / "sweep.json").write_text(json.dumps({
        "sweep_command": "python -m tools.sweep --runs 3 --frames 20000000 --out x -- --env BreakoutNoFrameskip-v4",
        "machine": "Linux-6.1-x86_64-with-glibc2.36, AMD EPYC with avx512_bf16 (bfloat16 by the defaults), 2 of 2 "
                   "cores usable; Python 3.11.7, torch 2.13.0+cpu", "commit": "abc1234def5678abc1234def5678abc1234def56",
        "note": "run 2 beside a BipedalWalker run", "runs": []}))
    crafted_run(folder / "Pong" / "run1", [(10 * M, 18.0), (20 * M, 20.5)], 1)
    return folder


def table_rows(text):
    return {line.split(" | ")[0].strip("| "): line.split(" | ") for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| game")}


def test_the_table_from_crafted_runs(runs, tmp_path):
    page = tmp_path / "atari.md"
    probes = tmp_path / "atari_probes"
    crafted_run(probes / "Breakout" / "run1", [(4e5, 1.0), (9e5, 3.0), (2 * M, 12.0)], 1)
    (probes / "Breakout" / "sweep.json").write_text(json.dumps({"commit": "def4567890", "runs": [
        {"run": "run1", "best_mean_return": 12.5, "min_entropy": 1.37}]}))
    none = str(tmp_path / "none")  # no variants, no pg: the project's own folders must not reach crafted tables
    assert atari_table.main([str(runs), str(page), str(probes), none, none]) == 0
    text = page.read_text()
    assert "## Beyond" not in text and "## A3C's policy gradient" not in text and "PPO against pg" not in text
    results, probed = text.split("## Probes")
    rows = table_rows(results)
    probe_rows = table_rows(probed)
    assert probe_rows["Breakout"][1:] == ["4: 1.39", "1,000", "1.0", "3.0", "3.0", "12.0", "12.5", "1.37", "1.7",
                                          "`def4567` |"]
    assert "not probed" in " | ".join(probe_rows["Pong"]) and len(probe_rows) == 7
    breakout = rows["Breakout"]
    assert breakout[1] == "3"
    assert breakout[2] == "falls to 0 from 10M to 20M frames; constant"  # the runs' args.json: two schedules
    assert breakout[3] == "50.0 / 40.0"  # at 10M: 100, 50, 40 -> median 50, worst 40
    assert breakout[4] == "290.0 / 280.0"  # at 20M: only the two runs that got there
    assert breakout[5] == "40.2 / 30.0"  # training games at 10M: 50.5 and 30 (run3 wrote none)
    assert breakout[6] == "90.2 / 30.0"  # at 20M: 150.5 and 30
    assert breakout[8] == "1,000"  # frames/s
    assert breakout[9] == f"{(290.0 - 1.7) / (31.8 - 1.7):.2f}, {(90.25 - 1.7) / (31.8 - 1.7):.2f}"  # human-normalised
    assert breakout[10] == "279.8" and breakout[11].startswith("398.0")
    assert rows["Pong"][1] == "1" and rows["Pong"][2] == "constant" and rows["Pong"][4] == "20.5"
    assert rows["Pong"][6] == "-"
    assert "not run yet" in rows["Seaquest"][1] and "not run yet" in rows["MsPacman"][1]
    assert len(rows) == 7 and list(rows) == sorted(rows)  # the seven games, by name
    # the footnote: runs, short code, short machine and a relative link per game; the commands and notes stay in
    # sweep.json, and no path of this machine reaches the page
    assert ("- Breakout: 3 runs; code `abc1234` (2026-11-25); AMD EPYC with avx512_bf16, 2 cores; "
            "[atari_runs/Breakout/](atari_runs/Breakout/)") in text
    assert "- Pong: 1 run; code: see sweep.json; machine: see sweep.json; [atari_runs/Pong/](atari_runs/Pong/)" in text
    assert "--out x" not in text and "BipedalWalker" not in text and str(tmp_path) not in text
    assert max(len(line) for line in text.splitlines()) <= 1000
    assert "![Every run of the seven games, the defaults (PPO)](atari_runs.png)" in text
    ours = sorted([(290.0 - 1.7) / (31.8 - 1.7), (20.5 + 20.7) / (9.3 + 20.7)])
    assert f"evaluator's **{(ours[0] + ours[1]) / 2:.2f}** over 2 game(s)" in text
    assert f"training games' **{(90.25 - 1.7) / (31.8 - 1.7):.2f}** over 1 game(s)" in text
    zoo = sorted([(279.8 - 1.7) / (31.8 - 1.7), (17.3 + 20.7) / (9.3 + 20.7)])  # RL Zoo's A2C on the same two games
    # the training games' median is left out: Pong's run has no games.csv, so it cannot cover the same games
    assert (f"On the same games only (Breakout, Pong: a run at 20M frames and an RL Zoo A2C score): the evaluator's "
            f"**{(ours[0] + ours[1]) / 2:.2f}** at 20M frames against RL Zoo's A2C's **{(zoo[0] + zoo[1]) / 2:.2f}**"
            in text)
    assert (tmp_path / "atari_runs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_defaults_table_then_pgs_and_their_medians_side_by_side(runs, tmp_path):
    """Today's defaults (PPO) first, pg's runs in a section of their own, and the two medians over the games both
    have at 20M frames: a game in one table only does not reach the comparison."""
    ppo = tmp_path / "atari_ppo_runs"
    crafted_run(ppo / "Breakout" / "run1", [(10 * M, 150), (20 * M, 380)], 1, [10 * M, 20 * M])
    crafted_games(ppo / "Breakout" / "run1", lambda k: 300)
    crafted_run(ppo / "Seaquest" / "run1", [(20 * M, 2000)], 1)  # pg has no Seaquest: left out of the comparison
    page = tmp_path / "results" / "atari.md"
    page.parent.mkdir()
    none = str(tmp_path / "none")
    assert atari_table.main([str(ppo), str(page), none, none, str(runs)]) == 0
    text = page.read_text()
    ours, theirs = text.split("## A3C's policy gradient to 20M frames: `--objective pg`")
    assert table_rows(ours)["Breakout"][4] == "380.0" and table_rows(ours)["Breakout"][6] == "300.0"
    assert table_rows(theirs.split("## What the columns")[0])["Breakout"][4] == "290.0 / 280.0"
    breakout = [(380.0 - 1.7) / (31.8 - 1.7), (290.0 - 1.7) / (31.8 - 1.7)]
    training = [(300.0 - 1.7) / (31.8 - 1.7), (90.25 - 1.7) / (31.8 - 1.7)]
    assert (f"PPO against pg, the median human-normalised score at 20M frames over the games both tables have there: "
            f"the evaluator's **{breakout[0]:.2f}** against **{breakout[1]:.2f}** (Breakout); the training games' "
            f"**{training[0]:.2f}** against **{training[1]:.2f}** (Breakout).") in ours
    assert "![Every run of the seven games, the defaults (PPO)](../atari_ppo_runs.png)" in ours
    assert "![Every run of the seven games, `--objective pg`](../atari_runs.png)" in theirs
    assert "[atari_ppo_runs/Breakout/](../atari_ppo_runs/Breakout/)" in ours
    assert "[atari_runs/Breakout/](../atari_runs/Breakout/)" in theirs
    for png in ("atari_ppo_runs.png", "atari_runs.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_resumed_runs_training_games_are_read_from_its_branch(tmp_path):
    """A run the sweep resumed in a branch (sweep.json's ``dir``) is measured there, its training games too: the
    parent's games.csv stops where the parent did."""
    out = tmp_path / "Pong"
    crafted_run(out / "run1", [(10 * M, 5.0), (13 * M, 6.0)], 1)
    crafted_games(out / "run1", lambda k: -20)
    crafted_run(out / "run1-from-12000000", [(10 * M, 5.0), (20 * M, 19.0)], 1)
    crafted_games(out / "run1-from-12000000", lambda k: 15)
    (out / "sweep.json").write_text(json.dumps({"runs": [{"run": "run1", "dir": "run1-from-12000000",
                                                          "exit_code": 0}]}))
    game = atari_table.load_game(str(out), "Pong")
    assert game["at"][20 * M] == (19.0, 19.0) and game["training"][20 * M] == (15.0, 15.0)


def test_human_normalised_scores():
    assert atari_table.normalised("Pong", -20.7) == 0.0 and atari_table.normalised("Pong", 9.3) == pytest.approx(1.0)
    assert atari_table.normalised("Breakout", None) is None


def test_runs_with_a_flag_added_get_rows_of_their_own(runs, tmp_path):
    page = tmp_path / "atari.md"
    variants = tmp_path / "atari_variants"
    crafted_run(variants / "Breakout_ns5" / "run1", [(10 * M, 200), (20 * M, 400)], 1, [18 * M, 20 * M])
    crafted_run(variants / "Breakout_ns5" / "run2", [(10 * M, 100), (20 * M, 350)], 2, [18 * M, 20 * M])
    (variants / "Breakout_ns5" / "sweep.json").write_text(json.dumps({
        "main_flags": ["--env", "BreakoutNoFrameskip-v4", "--num-steps", "5"], "sweep_command": "python -m tools.sweep",
        "commit": "fed9876543210fed9876543210fed9876543210", "runs": []}))
    crafted_run(variants / "Breakout_old" / "run1", [(10 * M, 20), (20 * M, 30)], 1)
    (variants / "Breakout_old" / "sweep.json").write_text(json.dumps({  # the defaults before they changed
        "main_flags": ["--env", "BreakoutNoFrameskip-v4"], "flags_now": "--lr-decay none", "runs": []}))
    (variants / "notes").mkdir()  # a folder that is not a sweep of a game: left out
    ppo = tmp_path / "atari_ppo_runs"
    crafted_run(ppo / "Pong" / "run1", [(10 * M, 19.0), (20 * M, 21.0)], 1)
    # the variants are of pg's defaults: pg's table (the crafted runs) is the one they stand in
    assert atari_table.main([str(ppo), str(page), str(tmp_path / "none"), str(variants), str(runs)]) == 0
    text = page.read_text()
    tables, beyond = text.split("## Beyond")
    assert "--num-steps" not in tables  # neither table counts a variant
    variant = table_rows(beyond.split("## Probes")[0])["Breakout, `--num-steps 5`"]
    assert variant[2] == "falls to 0 from 18M to 20M frames"  # one schedule, said once
    assert variant[1] == "2" and variant[3] == "150.0 / 100.0" and variant[4] == "375.0 / 350.0"
    swapped = sorted([(375.0 - 1.7) / (31.8 - 1.7), (20.5 + 20.7) / (9.3 + 20.7)])
    assert (f"With Breakout, `--num-steps 5` in place of pg's Breakout row, the median human-normalised "
            f"score at 20M frames: the evaluator's **{(swapped[0] + swapped[1]) / 2:.2f}** over 2 game(s)") in beyond
    assert ("- Breakout, `--num-steps 5`: 2 runs; code `fed9876`; machine: see sweep.json; "
            "[atari_variants/Breakout_ns5/](atari_variants/Breakout_ns5/)") in beyond
    assert table_rows(beyond.split("## Probes")[0])["Breakout, `--lr-decay none`"][4] == "30.0"


def test_no_section_without_runs_beyond_the_defaults(runs, tmp_path):
    page = tmp_path / "atari.md"
    assert atari_table.main([str(runs), str(page), str(tmp_path / "none"), str(tmp_path / "none"), str(runs)]) == 0
    assert "## Beyond" not in page.read_text()


def test_a_command_line_it_cannot_use_writes_nothing(runs, tmp_path, capsys):
    """A flag, a folder of no games, a PAGE that is some other file: one line, exit 2, nothing written (a typo in
    FOLDER made a table of seven 'not run yet' rows over the committed page)."""
    mine = tmp_path / "notes.md"
    mine.write_text("# my notes\n")
    page = tmp_path / "atari.md"
    for argv in (["--page", str(page)], [str(tmp_path / "no_such_runs"), str(page)], [str(runs), str(mine)]):
        assert atari_table.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("atari_table.py: error: ") and len(err.strip().splitlines()) == 1, err
    assert mine.read_text() == "# my notes\n" and not page.exists() and not (tmp_path / "atari_runs.png").exists()
    none = str(tmp_path / "none")
    assert atari_table.main([str(runs), str(page), none, none, none]) == 0
    assert atari_table.main([str(runs), str(page), none, none, none]) == 0  # a page it wrote is its own to replace


def test_a_probe_that_stopped_early_has_no_return_past_its_end(runs, tmp_path):
    probes = tmp_path / "atari_probes"
    crafted_run(probes / "Breakout" / "run1", [(4e5, 1.0), (9e5, 3.0), (1.2 * M, 5.0)], 1)  # crashed at 1.2M
    text = atari_table.probe_table(str(probes), str(tmp_path))
    assert table_rows(text)["Breakout"][3:7] == ["1.0", "3.0", "-", "-"]


def test_a_cell_of_one_value_is_not_shown_as_a_median_and_worst(runs, tmp_path):
    """Two runs reached 20M frames but only one has training games: one value, not 'x / x' as if two agreed."""
    (runs / "Breakout" / "run2" / "games.csv").unlink()
    game = atari_table.load_game(str(runs / "Breakout"), "Breakout")
    row = table_rows(atari_table.rows([game]))["Breakout"]
    assert row[4] == "290.0 / 280.0" and row[6] == "150.5"


def test_the_footnote_shortens_what_sweep_json_records():
    """A machine line and a commit sentence of several runs (as sweep.json holds them, written by hand) become the
    CPUs and cores, and the distinct short hashes."""
    machine = ("runs 1 and 3: Linux-6.18.44-fc-v782-x86_64-with-glibc2.36, AMD EPYC with AVX2 only (float32 by the "
               "defaults), 2 of 2 cores usable; Python 3.11.7, torch 2.13.0+cpu; run1 alone (~1,800 frames/s); run2: "
               "Linux-6.18.44-fc-v857-x86_64-with-glibc2.36, Intel(R) Xeon(R) Processor @ 2.50GHz, 2 of 2 cores "
               "usable, 1 CUDA GPU(s); Python 3.11.7, torch 2.13.0+cpu")
    assert atari_table.short_machine(machine) == "AMD EPYC with AVX2 only, 2 cores; Intel Xeon, 2 cores, 1 GPU(s)"
    assert atari_table.short_machine(None) == "machine: see sweep.json"
    commit = ("run1: 4f72e9afdd2a729f15b839b2d2ca7f5c55cd33bb; run2: 4f72e9afdd2a729f15b839b2d2ca7f5c55cd33bb up to "
              "16.93M frames, then 8111891405a255f4d4c1530b7ade5dcdec2f0d1b; 20000000 frames")
    assert atari_table.short_code(commit) == "code `4f72e9a`, `8111891` (2026-11-29 to 2026-11-30)"
    assert atari_table.short_code(None) == "code: see sweep.json"
