"""Nothing a user keeps is overwritten: shipped and earlier models, both branches of a resume, archives on file
systems without hard links."""

import csv
import errno
import hashlib
import json
import math
import os
import shutil
from types import SimpleNamespace

import pytest
import torch

from conftest import ROOT, out_dirs, read_json, run_main, start_run, stop_run, wait_for
from core.errors import BadInput
from runtime import run_dir
from runtime.checkpoints import CheckpointWriter, model_file
from runtime.evaluator import kept_note, may_replace, window_start
from runtime.run_dir import GAMES_FIELDS, PROGRESS_FIELDS, branches, choose_run_dir, prepare_run_dir, recent_returns

CARTPOLE = ["--env", "CartPole-v1", "--workers", "1", "--hidden-size", "32", "--no-tensorboard-logger"]


def digests(folder):
    """Every file under ``folder`` and its SHA-256."""
    found = {}
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return found


def progress_frames(run, name="progress.csv", fields=PROGRESS_FIELDS):
    with open(run / name, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == fields
    return [float(row[1]) for row in rows[1:]]


def assert_running_means_go_on(run, window=10):
    """Every row's mean_return is the mean of the returns of the last ``window`` rows up to it: the evaluator's
    running mean, across resumes (a branch's own first games count its parent's last ones)."""
    with open(run / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    returns = [float(row["return"]) for row in rows]
    for i, row in enumerate(rows):
        last = returns[max(0, i + 1 - window): i + 1]
        assert float(row["mean_return"]) == pytest.approx(sum(last) / len(last), abs=1e-3), (run, i)


def rows(run):
    """The rows in a run's progress.csv so far (0 before it exists)."""
    path = run / "progress.csv"
    return len(path.read_text().splitlines()) - 1 if path.exists() else 0


def fake_checkpoint(path, frames):
    torch.save({"format_version": 1, "kind": "checkpoint", "frames": float(frames), "model_meta": {},
                "state_dict": {}}, path)


# ---------------------------------------------------------------------------------------------------------------
# Best models: the run's own, and --save-model-dir's that other runs keep


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory):
    """A run as the README's command starts one (no --save-model-dir), 3,000 CartPole frames; the shipped models'
    digests before it. For the tests that only read what it wrote."""
    tmp = tmp_path_factory.mktemp("readme_run")
    shipped = digests(os.path.join(ROOT, "trained_models"))
    result = run_main(*CARTPOLE, "--max-frames", "3000", "--run-dir", tmp / "run", "--log-dir", tmp / "logs")
    assert result.returncode == 0, result.stderr[-2000:]
    return tmp / "run", result, shipped


def test_the_readme_command_leaves_the_shipped_models_untouched(readme_run):
    """Without --save-model-dir the best model goes to the run directory, never to trained_models/."""
    run, result, shipped = readme_run
    assert digests(os.path.join(ROOT, "trained_models")) == shipped
    best = torch.load(run / "best_model.pt", weights_only=True)
    assert best["kind"] == "model" and best["run"] == str(run)
    assert "None" not in result.stdout.splitlines()[-1], result.stdout


def test_every_training_game_gets_a_row_in_games_csv(readme_run):
    """games.csv: one row per finished training game (summary.json's episodes), frames in order; a CartPole game's
    return is its length (1 point per step)."""
    run, result, _ = readme_run
    with open(run / "games.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == GAMES_FIELDS
    assert len(rows) == read_json(run / "summary.json")["episodes"] > 10
    frames = [int(row["frames"]) for row in rows]
    assert frames == sorted(frames) and 0 < frames[-1] <= read_json(run / "summary.json")["frames"]
    assert all(float(row["return"]) == int(row["length"]) > 0 for row in rows)
    seconds = [float(row["wall_time_s"]) for row in rows]
    # games.csv rounds to 0.01 s, summary.json to 0.001 s: a last game near the end can round past it by 0.005
    assert seconds == sorted(seconds) and seconds[-1] <= read_json(run / "summary.json")["seconds"] + 0.005


def test_load_then_save_keeps_the_loaded_model_unless_beaten(tmp_path):
    """--load with --save-model-dir naming the same folder: the first game no longer replaces the model it loaded
    (the shipped CartPole model scores 500, the most a game can)."""
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(os.path.join(ROOT, "trained_models", "CartPole-v1.pt"), models)
    before = digests(models)
    meta = torch.load(models / "CartPole-v1.pt", weights_only=True)["model_meta"]
    proc = start_run(None, "--env", "CartPole-v1", "--workers", "1", "--hidden-size", str(meta["width"]), "--load",
                     "--load-model-dir", models, "--save-model-dir", models, "--max-seconds", "900",
                     "--no-tensorboard-logger", "--run-dir", tmp_path / "run", "--log-dir", tmp_path / "logs")
    # until the evaluator has played two games, either of which could have saved
    wait_for(lambda: rows(tmp_path / "run") >= 2, 180)
    stdout, stderr = stop_run(proc)
    assert proc.returncode == 130, stderr[-2000:]
    assert digests(models) == before
    # and the run says so, once, and where its own best weights went
    kept = [line for line in stdout.splitlines() if "CartPole-v1.pt is another run's model" in line]
    assert len(kept) == 1 and "game scored 500" in kept[0] and str(tmp_path / "run" / "best_model.pt") in kept[0]


def test_save_model_dir_replaces_another_runs_model_only_with_a_better_game(tmp_path):
    settings, meta = {"env_id": "CartPole-v1"}, {"model": "mlp"}
    weights = {"w": torch.zeros(2)}
    path = tmp_path / "CartPole-v1.pt"
    torch.save(model_file(settings, meta, weights, 100.0, 5000, run=tmp_path / "other"), path)
    assert not may_replace(path, model_file(settings, meta, weights, 100.0, 9000, run=tmp_path / "this"))
    assert may_replace(path, model_file(settings, meta, weights, 101.0, 9000, run=tmp_path / "this"))
    # the run's own file, whatever its score; no file at all
    assert may_replace(path, model_file(settings, meta, weights, 5.0, 9000, run=tmp_path / "other"))
    assert may_replace(tmp_path / "none.pt", model_file(settings, meta, weights, 5.0, 9000, run=tmp_path))
    # an exported model records no score, so no game replaces it, and a file that is no model is kept
    torch.save(model_file(settings, meta, weights, math.nan, 5000), path)
    assert not may_replace(path, model_file(settings, meta, weights, 500.0, 9000, run=tmp_path))
    assert "an exported model with no score recorded" in kept_note(str(path), "runs/x/best_model.pt")
    path.write_bytes(b"a user's notes")
    assert not may_replace(path, model_file(settings, meta, weights, 500.0, 9000, run=tmp_path))
    assert kept_note(str(path), "runs/x/best_model.pt").endswith("is no model file a3g can read; this run's best "
                                                                 "weights are in runs/x/best_model.pt")


# ---------------------------------------------------------------------------------------------------------------
# Where a run writes: never into another run, and a resume from an earlier state is a branch


def args_for(run_dir=None, resume=None):
    return SimpleNamespace(run_dir=run_dir, resume=resume, env="CartPole-v1", seed=1)


def test_a_fresh_run_never_writes_into_a_folder_that_holds_a_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "stdout.log").write_text("a sweep's log, written before the run starts\n")
    assert choose_run_dir(args_for(str(run)), None) == str(run)
    (run / "progress.csv").write_text(",".join(PROGRESS_FIELDS) + "\n")
    with pytest.raises(ValueError, match="already holds a run"):
        choose_run_dir(args_for(str(run)), None)


def test_a_resume_from_an_earlier_state_is_a_branch(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for frames in (100, 200):
        fake_checkpoint(run / f"checkpoint-{frames}.pt", frames)
    fake_checkpoint(run / "checkpoint.pt", 300)
    latest = {"frames": 300.0}
    assert choose_run_dir(args_for(resume=str(run)), latest) == str(run)  # the newest state: in place
    assert choose_run_dir(args_for(str(run), str(run)), latest) == str(run)
    older = {"frames": 100.0}
    branch = choose_run_dir(args_for(resume=str(run / "checkpoint-100.pt")), older)
    assert branch == f"{run}-from-100"
    with pytest.raises(ValueError, match="branch"):
        choose_run_dir(args_for(str(run), str(run / "checkpoint-100.pt")), older)
    # games logged past the last checkpoint (a run killed outright) make the folder newer than its checkpoint
    fake_checkpoint(run / "checkpoint.pt", 300)
    with open(run / "progress.csv", "w") as f:
        f.write(",".join(PROGRESS_FIELDS) + "\n1.0,250,1,9,9,9,9\n2.0,350,2,9,9,9,9\n")
    assert choose_run_dir(args_for(resume=str(run)), latest) == f"{run}-from-300"
    os.remove(run / "progress.csv")  # training games past it do the same
    with open(run / "games.csv", "w") as f:
        f.write(",".join(GAMES_FIELDS) + "\n1.0,320,9,9\n")
    assert choose_run_dir(args_for(resume=str(run)), latest) == f"{run}-from-300"
    # a second branch from the same state gets a folder of its own
    os.makedirs(branch)
    (tmp_path / "run-from-100" / "args.json").write_text("{}")
    assert choose_run_dir(args_for(resume=str(run / "checkpoint-100.pt")), older) == f"{run}-from-100-2"


def test_a_branch_of_the_folder_one_is_in_goes_beside_it(tmp_path, monkeypatch):
    """``--resume .`` from inside a run: the branch is a folder beside the run, not a hidden ``.-from-N`` in it."""
    run = tmp_path / "run"
    run.mkdir()
    fake_checkpoint(run / "checkpoint.pt", 300)
    (run / "games.csv").write_text(",".join(GAMES_FIELDS) + "\n1.0,320,9,9\n")  # a run killed past its checkpoint
    monkeypatch.chdir(run)
    for resume in (".", "./", "../run"):
        assert choose_run_dir(args_for(resume=resume), {"frames": 300.0}) in (str(tmp_path / "run-from-300"),
                                                                              os.path.join("..", "run-from-300"))
    assert choose_run_dir(args_for(resume="."), {"frames": 300.0}) == str(tmp_path / "run-from-300")


def test_branches_are_the_resumes_beside_a_run_oldest_state_first(tmp_path):
    run = tmp_path / "run1"
    run.mkdir()
    assert branches(str(run)) == []
    for name in ("run1-from-300", "run1-from-100", "run1-from-100-2", "run1-from-300-from-400", "run10-from-50",
                 "run1-from-x", "run1-from-200"):
        (tmp_path / name).mkdir()
        if name != "run1-from-200":  # an empty folder holds no run
            (tmp_path / name / "args.json").write_text("{}")
    assert branches(str(run)) == [(frames, str(tmp_path / name)) for frames, name in (
        (100, "run1-from-100"), (100, "run1-from-100-2"), (300, "run1-from-300"))]
    assert branches(str(tmp_path / "run1-from-300") + os.sep) == [(400, str(tmp_path / "run1-from-300-from-400"))]


def test_a_branch_starts_with_its_parents_rows_up_to_the_resumed_state(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with open(run / "progress.csv", "w") as f:
        f.write(",".join(PROGRESS_FIELDS) + "\n1.0,50,1,9,9,9,9\n2.0,100,2,9,9,9,9\n3.0,150,3,9,9,9,9\n")
    args = SimpleNamespace(run_dir=str(tmp_path / "branch"), resume=str(run / "checkpoint-100.pt"),
                           save_model_dir=None, log_dir=str(tmp_path / "logs"), env="CartPole-v1")
    with open(run / "games.csv", "w") as f:
        f.write(",".join(GAMES_FIELDS) + "\n0.5,20,10,20\n1.5,90,30,70\n2.5,120,5,30\n")
    prepare_run_dir(args, {"frames": 100.0})
    assert progress_frames(tmp_path / "branch") == [50.0, 100.0]
    assert progress_frames(run) == [50.0, 100.0, 150.0]
    assert progress_frames(tmp_path / "branch", "games.csv", GAMES_FIELDS) == [20.0, 90.0]
    assert progress_frames(run, "games.csv", GAMES_FIELDS) == [20.0, 90.0, 120.0]


def test_a_row_cut_short_by_a_lost_write_never_glues_onto_the_next_nor_hides_the_others(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    header = ",".join(PROGRESS_FIELDS) + "\n"
    # the machine stopped while the evaluator wrote its third row, and in the middle of a games.csv row
    (run / "progress.csv").write_text(header + "1.0,50,1,9,9,9,9\n2.0,100,2,8,9,8.5,9\n3.0,1")
    (run / "games.csv").write_text(",".join(GAMES_FIELDS) + "\n0.5,20,10,20\n1.")
    assert recent_returns(str(run / "progress.csv"), 10) == [9.0, 8.0]  # the cut row alone is left out
    # a branch keeps its parent's history up to the state it resumed from
    args = SimpleNamespace(run_dir=str(tmp_path / "branch"), resume=str(run / "checkpoint-100.pt"),
                           save_model_dir=None, log_dir=str(tmp_path / "logs"), env="CartPole-v1")
    prepare_run_dir(args, {"frames": 100.0})
    assert progress_frames(tmp_path / "branch") == [50.0, 100.0]
    # a resume in place drops the cut rows, so the rows it appends start lines of their own
    args.run_dir, args.resume = str(run), str(run)
    prepare_run_dir(args, {"frames": 100.0})
    assert (run / "progress.csv").read_text() == header + "1.0,50,1,9,9,9,9\n2.0,100,2,8,9,8.5,9\n"
    assert (run / "games.csv").read_text() == ",".join(GAMES_FIELDS) + "\n0.5,20,10,20\n"
    with open(run / "progress.csv", "a") as f:
        f.write("4.0,150,3,7,9,8,9\n")
    assert progress_frames(run) == [50.0, 100.0, 150.0]
    # a file cut before its header ended starts again from a whole header
    (run / "games.csv").write_text("wall_ti")
    prepare_run_dir(args, {"frames": 100.0})
    assert (run / "games.csv").read_text().splitlines() == [",".join(GAMES_FIELDS)]


def test_a_tail_csv_cannot_read_keeps_the_rows_before_it(tmp_path):
    """A machine that stopped mid-write can leave a long tail of NUL bytes (or bytes that are no text): csv's
    "field larger than field limit" was a traceback of --resume and of the evaluator's running mean."""
    run = tmp_path / "run"
    run.mkdir()
    header = ",".join(PROGRESS_FIELDS) + "\n"
    (run / "progress.csv").write_bytes((header + "1.0,50,1,9,9,9,9\n2.0,100,2,8,9,8.5,9\n").encode() + b"\0" * 200_000)
    assert recent_returns(str(run / "progress.csv"), 10) == [9.0, 8.0]
    assert run_dir.progress_frames(str(run)) == [50.0, 100.0]
    (run / "games.csv").write_bytes((",".join(GAMES_FIELDS) + "\n0.5,20,10,20\n").encode() + b"\xff\xfe,1\n")
    assert run_dir.csv_column(str(run / "games.csv"), "return") == [10.0]


def test_two_fresh_runs_that_picked_one_folder_never_write_into_each_other(tmp_path):
    """The default folder is named by the second: two runs of one env and seed started in the same second picked
    the same one, and both wrote into it. The second to claim it is refused; the first's files are as it wrote."""
    args = SimpleNamespace(run_dir=str(tmp_path / "run"), resume=None, save_model_dir=None,
                           log_dir=str(tmp_path / "logs"), env="CartPole-v1", seed=1)
    prepare_run_dir(args, None)
    first = {name: (tmp_path / "run" / name).read_bytes() for name in ("args.json", "progress.csv", "games.csv")}
    args.seed = 2
    with pytest.raises(FileExistsError, match="another run started in it at the same moment"):
        prepare_run_dir(args, None)
    assert {name: (tmp_path / "run" / name).read_bytes() for name in first} == first


def test_a_branch_of_a_parent_with_a_damaged_tail_keeps_the_rows_before_it(tmp_path):
    """A resume after a power loss is a branch, and its parent's files can end in NUL bytes or bytes that are no
    text: copying the parent's rows was a traceback."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "progress.csv").write_bytes((",".join(PROGRESS_FIELDS) + "\n1.0,50,1,9,9,9,9\n2.0,100,2,8,9,8.5,9\n")
                                       .encode() + b"\0" * 200_000)
    (run / "games.csv").write_bytes((",".join(GAMES_FIELDS) + "\n0.5,20,10,20\n").encode() + b"\xff\xfe\n")
    args = SimpleNamespace(run_dir=str(tmp_path / "branch"), resume=str(run / "checkpoint-100.pt"),
                           save_model_dir=None, log_dir=str(tmp_path / "logs"), env="CartPole-v1")
    prepare_run_dir(args, {"frames": 100.0})
    assert progress_frames(tmp_path / "branch") == [50.0, 100.0]
    assert progress_frames(tmp_path / "branch", "games.csv", GAMES_FIELDS) == [20.0]


def test_a_text_log_that_cannot_be_opened_fails_the_start_before_the_run_has_a_file(tmp_path):
    """The text log was opened after args.json and the CSVs were written: a log path that is a folder left a run
    folder that could neither start again (it holds a run) nor resume (no checkpoint)."""
    args = SimpleNamespace(run_dir=str(tmp_path / "run"), resume=None, save_model_dir=None,
                           log_dir=str(tmp_path / "logs"), env="CartPole-v1", seed=1)
    (tmp_path / "logs" / "CartPole-v1_log").mkdir(parents=True)
    with pytest.raises(IsADirectoryError):
        prepare_run_dir(args, None)
    assert not run_dir.holds_run(str(tmp_path / "run"))


def test_a_start_that_finds_the_disk_full_leaves_every_file_whole(tmp_path, monkeypatch):
    run = tmp_path / "run"
    args = SimpleNamespace(run_dir=str(run), resume=None, save_model_dir=None, log_dir=str(tmp_path / "logs"),
                           env="CartPole-v1", seed=1)
    prepare_run_dir(args, None)
    written = {name: (run / name).read_bytes() for name in ("args.json", "progress.csv", "games.csv")}
    assert json.loads(written["args.json"])["seed"] == 1
    assert written["progress.csv"] == (",".join(PROGRESS_FIELDS) + "\r\n").encode()  # the header csv writes
    monkeypatch.setenv("A3G_FAULT", "start_enospc")
    # a resume in place writes args.json again: the disk is full, so the run's first args.json stays as it was
    args.seed, args.resume = 2, str(run)
    with pytest.raises(OSError, match="No space left"):
        prepare_run_dir(args, {"frames": 100.0})
    assert {name: (run / name).read_bytes() for name in written} == written
    # a fresh run: no file half-written, no temporary file left
    fresh = tmp_path / "fresh"
    args.run_dir, args.resume = str(fresh), None
    with pytest.raises(OSError, match="No space left"):
        prepare_run_dir(args, None)
    assert sorted(p.name for p in run.iterdir()) == sorted(written) and list(fresh.iterdir()) == []


def test_a_branch_whose_csv_finds_the_disk_full_leaves_no_half_of_its_parents_rows(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    (run / "progress.csv").write_text(",".join(PROGRESS_FIELDS) + "\n" + "1.0,50,1,9,9,9,9\n" * 500)
    args = SimpleNamespace(run_dir=str(tmp_path / "branch"), resume=str(run / "checkpoint-100.pt"),
                           save_model_dir=None, log_dir=str(tmp_path / "logs"), env="CartPole-v1")
    # the disk is full for the CSVs' writes alone (args.json goes through)
    write = run_dir.atomic_write_text
    monkeypatch.setattr(run_dir, "atomic_write_text",
                        lambda path, text, fault: write(path, text, "csv_full" if path.endswith(".csv") else fault))
    monkeypatch.setenv("A3G_FAULT", "csv_full")
    with pytest.raises(OSError, match="No space left"):
        prepare_run_dir(args, {"frames": 100.0})
    # no CSV, whole or half, no temporary file, and not the args.json it wrote: the folder holds no run
    assert list((tmp_path / "branch").iterdir()) == []
    assert not run_dir.holds_run(str(tmp_path / "branch"))


def test_a_resumed_evaluator_starts_its_mean_with_the_runs_last_games(tmp_path):
    path = tmp_path / "progress.csv"
    assert recent_returns(str(path), 10) == []  # no file: a fresh run
    path.write_text(",".join(PROGRESS_FIELDS) + "\n")
    assert recent_returns(str(path), 10) == []  # a header only
    with open(path, "a") as f:
        f.writelines(f"{i}.0,{i * 100},{i},{i * 2}.5,9,9,9\n" for i in range(1, 13))
    assert recent_returns(str(path), 3) == [20.5, 22.5, 24.5]
    assert recent_returns(str(path), 10) == [6.5 + 2 * i for i in range(10)]
    assert recent_returns(str(path), 20) == [0.5 + 2 * i for i in range(1, 13)]
    assert recent_returns(str(path), 0) == []
    assert recent_returns(str(path), 3, start=10) == [22.5, 24.5]  # the games from the 11th on


def test_the_running_mean_starts_where_the_evaluator_began_to_play_as_it_plays_now():
    """``window_start``: a fresh run's mean takes every game; a resume that plays as before keeps its run's start (an
    earlier change of play is remembered in the checkpoint); one that changes --eval-stochastic or the evaluator's
    start states starts after the games played so far, and says why."""
    retro = {"states": ["/s/a.state", "/s/b.state"], "eval_states": None}
    saved = {"args": {"eval_stochastic": False}, "env": {"retro": retro}, "eval_window_start": 7}
    now = SimpleNamespace(eval_stochastic=False)
    assert window_start(None, now, {"retro": retro}, 30) == (0, None)
    assert window_start(saved, now, {"retro": retro}, 30) == (7, None)
    older = {k: v for k, v in saved.items() if k != "eval_window_start"}  # a checkpoint from before the entry
    assert window_start(older, now, {"retro": retro}, 30) == (0, None)
    start, note = window_start(saved, SimpleNamespace(eval_stochastic=True), {"retro": retro}, 30)
    assert start == 30 and "now plays sampled games: its --score-window mean starts afresh" in note
    start, note = window_start(saved, now, {"retro": {**retro, "eval_states": ["/s/c.state"]}}, 30)
    assert start == 30 and "now plays games from other start states" in note
    start, note = window_start({**saved, "args": {"eval_stochastic": True}}, now, {"retro": None}, 12)
    assert start == 12 and "now plays greedy games from other start states" in note


def test_a_resume_with_another_score_window_starts_its_best_mean_again(tmp_path):
    """The best mean of 1 game (the best game) is no best mean of 1,000: the resumed run's summary says it has none
    yet, rather than the old window's figure under the new window's name (a resume that changes how the evaluator
    plays: tests/envs/test_custom_env.py)."""
    run = tmp_path / "run"
    first = run_main(*CARTPOLE, "--max-frames", "3000", "--score-window", "1", *out_dirs(tmp_path), timeout=180)
    assert first.returncode == 0, first.stderr[-2000:]
    assert read_json(run / "summary.json")["best_mean_return"] is not None
    frames = read_json(run / "summary.json")["frames"]
    second = run_main("--resume", run, "--max-frames", frames + 500, "--score-window", "1000", timeout=180)
    assert second.returncode == 0, second.stderr[-2000:]
    assert read_json(run / "summary.json")["best_mean_return"] is None


def test_resuming_from_each_archive_in_turn_loses_nothing_of_either_branch(tmp_path):
    """A run with three archives, resumed from each archive in turn and then from its latest state: every file of
    the run and of each branch is still there, and no progress.csv or games.csv goes backwards in frames. Each part
    runs until it has what the test reads (archives, an evaluator game of its own), then stops at Ctrl-C."""
    run = tmp_path / "run"
    logs = ["--log-dir", tmp_path / "logs"]
    first = start_run(None, *CARTPOLE, "--checkpoint-interval", "0.3", "--keep-checkpoints", "4", "--run-dir", run,
                      *logs)
    wait_for(lambda: len(list(run.glob("checkpoint-*.pt"))) >= 3 and rows(run) >= 1, 180)
    stdout, stderr = stop_run(first)
    assert first.returncode == 130, stderr[-2000:]
    archives = sorted(run.glob("checkpoint-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
    assert len(archives) == 3, archives  # the last save rotated the oldest out: 4 kept, checkpoint.pt among them
    kept = {run: digests(run)}
    branch_games = 0
    for archive in archives:
        frames = int(archive.stem.split("-")[1])
        branch = tmp_path / f"run-from-{frames}"
        parent = [f for f in progress_frames(run) if f <= frames]
        proc = start_run(None, "--resume", archive, "--max-frames", 10 ** 9, *logs)
        wait_for(lambda: rows(branch) > len(parent), 180)  # a game of the branch's own
        stdout, stderr = stop_run(proc)
        assert proc.returncode == 130, stderr[-2000:]
        assert f"resumed at {frames} frames of {run}" in stdout, stdout
        assert (branch / "checkpoint.pt").is_file() and (branch / "best_model.pt").is_file()
        for folder, files in kept.items():
            assert digests(folder) == files, folder  # nothing of the run or an earlier branch changed
        kept[branch] = digests(branch)
        assert progress_frames(branch)[: len(parent)] == parent
        branch_games += len(progress_frames(branch)) - len(parent)
    before = read_json(run / "summary.json")["frames"]
    # the newest state: in place, 4,000 frames past where the first run stopped
    resumed = run_main("--resume", run, "--max-frames", before + 4000, *logs, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert read_json(run / "summary.json")["frames"] > before
    for folder in kept:
        for name, fields in (("progress.csv", PROGRESS_FIELDS), ("games.csv", GAMES_FIELDS)):
            frames = progress_frames(folder, name, fields)
            assert frames and frames == sorted(frames), (folder, name)
        assert_running_means_go_on(folder)
    assert branch_games > 0  # the branches played games of their own: their means went on from their parent's


# ---------------------------------------------------------------------------------------------------------------
# Archives on a file system without hard links


def test_rotation_copies_where_the_file_system_has_no_hard_links(tmp_path, monkeypatch):
    def no_links(src, dst):  # what vfat and some network mounts answer
        raise OSError(errno.EPERM, os.strerror(errno.EPERM), dst)

    monkeypatch.setattr(os, "link", no_links)
    logged = []
    writer = CheckpointWriter(str(tmp_path / "checkpoint.pt"), keep=3, log=logged.append)
    for frames in (100, 200, 300, 400):
        assert writer.save({"frames": float(frames)}), logged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-200.pt", "checkpoint-300.pt", "checkpoint.pt"]
    assert torch.load(tmp_path / "checkpoint-300.pt", weights_only=True)["frames"] == 300.0
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["frames"] == 400.0
    assert not logged


def test_a_resume_stopped_before_any_frame_keeps_every_archive(tmp_path):
    """Its last save holds the state on disk already: archiving that again rotated out an older archive, a state
    the folder then no longer had (each such stop lost one more)."""
    logged = []
    writer = CheckpointWriter(str(tmp_path / "checkpoint.pt"), keep=2, log=logged.append)
    for frames in (500, 1000):
        assert writer.save({"frames": float(frames)}), logged
    resumed = CheckpointWriter(str(tmp_path / "checkpoint.pt"), keep=2, log=logged.append, last_frames=1000)
    assert resumed.save({"frames": 1000.0}), logged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-500.pt", "checkpoint.pt"]
    assert torch.load(tmp_path / "checkpoint-500.pt", weights_only=True)["frames"] == 500.0
    assert resumed.save({"frames": 1500.0}), logged  # the next real save archives the resumed state as before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1000.pt", "checkpoint.pt"]


def test_a_folder_of_archived_checkpoints_alone_is_a_run_a_fresh_one_never_joins(tmp_path):
    """A fresh run there would rotate them away (--keep-checkpoints deletes the fewest-frames archives)."""
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "checkpoint-1200000.pt").write_bytes(b"a user's archive")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "checkpoint-notes.pt").write_bytes(b"not an archive's name")
    assert run_dir.holds_run(str(tmp_path / "kept")) and not run_dir.holds_run(str(tmp_path / "other"))
    args = SimpleNamespace(run_dir=str(tmp_path / "kept"), resume=None, env="CartPole-v1", seed=1)
    with pytest.raises(BadInput, match="already holds a run"):
        choose_run_dir(args, None)


# ---------------------------------------------------------------------------------------------------------------
# The checkpoint's round trip


def test_a_checkpoint_round_trip_restores_the_training_state_exactly(tmp_path):
    """What main.py saves (``checkpoint_payload`` through ``CheckpointWriter``) loads back with weights_only into a
    new network and optimizer bit for bit: the weights, the optimizer's statistics (the next step is the same
    step), the counters and the flags."""
    import multiprocessing as mp

    from model import build_model, model_meta
    from runtime.checkpoints import checkpoint_payload, load_checkpoint
    from runtime.run_state import RunState
    from shared_optim import optimizer_for

    torch.manual_seed(0)
    args = SimpleNamespace(optimizer="Adam", lr=1e-3, eps=1e-5, amsgrad=False, alpha=0.99, momentum=0.0,
                           env="CartPole-v1", frames_per_step=1)
    meta = model_meta("mlp", [4], 2, 16)
    models = [build_model(meta), build_model(meta)]
    optimizers = [optimizer_for(args, models[0].parameters(), shared=True)]
    obs = torch.randn(8, 4)

    def step(model, optimizer):
        optimizer.zero_grad()
        value, logits, _ = model(obs, model.initial_state(8))
        (value.pow(2).mean() + logits.logsumexp(-1).mean()).backward()
        optimizer.step()

    for _ in range(3):
        step(models[0], optimizers[0])
    state = RunState(mp.get_context("spawn"), 1, frames=12345.0, episodes=67, best_return=89.5,
                     best_mean_return=45.25, eval_episodes=12)
    writer = CheckpointWriter(str(tmp_path / "checkpoint.pt"), 1, print)
    assert writer.save(checkpoint_payload({"env_id": "CartPole-v1"}, meta, models[0], optimizers[0], state, 61.5,
                                          7, args))
    loaded = load_checkpoint(tmp_path / "checkpoint.pt", kind="checkpoint")
    assert loaded["model_meta"] == meta and loaded["env"] == {"env_id": "CartPole-v1"}
    assert (loaded["frames"], loaded["episodes"], loaded["eval_episodes"]) == (12345.0, 67, 12)
    assert (loaded["best_return"], loaded["best_mean_return"], loaded["seconds"]) == (89.5, 45.25, 61.5)
    assert loaded["eval_window_start"] == 7 and loaded["args"]["lr"] == 1e-3 and "frames_per_step" not in loaded["args"]
    models[1] = build_model(loaded["model_meta"])
    models[1].load_state_dict(loaded["state_dict"])
    optimizers.append(optimizer_for(args, models[1].parameters(), shared=True))
    optimizers[1].load_state_dict(loaded["optimizer"])
    for a, b in zip(models[0].state_dict().values(), models[1].state_dict().values()):
        assert torch.equal(a, b)
    for model, optimizer in zip(models, optimizers):  # the same statistics: the same next step
        step(model, optimizer)
    for a, b in zip(models[0].state_dict().values(), models[1].state_dict().values()):
        assert torch.equal(a, b)
