"""The run directory: where it is, ``args.json``, the headers of ``progress.csv`` (the evaluator's games) and
``games.csv`` (the training games), and the run's flags and results in TensorBoard.

A run directory belongs to one line of training, so nothing in it is ever overwritten by another: a fresh run never
writes into a folder that holds a run, and a resume continues in place only from the folder's newest state. A resume
from an earlier state (an archived ``checkpoint-<frames>.pt``, or a ``checkpoint.pt`` that the folder's progress has
gone past) is a branch: it writes into a new folder, ``<run>-from-<frames>``, whose ``progress.csv`` and ``games.csv``
start with the parent's rows up to that point, so that frames never go backwards within one file and both branches
stay whole.
"""

import argparse
import contextlib
import csv
import datetime
import errno
import io
import json
import math
import os

from core.errors import BadInput
from core.files import atomic_write_text, env_file_name, first_free, make_folders, readable_rows
from runtime.checkpoints import archive_frames, frames_on_disk

PROGRESS_FIELDS = ["wall_time_s", "frames", "episodes", "return", "length", "mean_return", "fps"]
# one row per training game as it ends (the workers' or actors' sampled policy; a whole game across lost lives, its
# own points, its length in agent steps): SB3's monitor.csv and CleanRL's charts/episodic_return, as a file
GAMES_FIELDS = ["wall_time_s", "frames", "return", "length"]
CSV_FILES = {"progress.csv": PROGRESS_FIELDS, "games.csv": GAMES_FIELDS}
BEST_MODEL = "best_model.pt"
# a folder with one of these holds a run
RUN_FILES = ("args.json", "progress.csv", "games.csv", "summary.json", "checkpoint.pt", BEST_MODEL)


def resumed_run_dir(path: str) -> str:
    """The run directory that ``--resume PATH`` names: PATH itself, or the folder of a checkpoint file."""
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


def sibling_stem(run: str) -> str:
    """``run`` as the start of a folder name beside it (``<run>-from-<frames>``): as given, so that a relative path
    stays relative, but absolute where it ends in ``.`` or ``..`` (``--resume .`` in the run's own folder)."""
    stem = os.path.normpath(run)
    return os.path.abspath(stem) if os.path.basename(stem) in (os.curdir, os.pardir) else stem


def holds_run(folder: str) -> bool:
    """Whether ``folder`` holds any of a run's files (``RUN_FILES``, or an archived checkpoint)."""
    if any(os.path.exists(os.path.join(folder, name)) for name in RUN_FILES):
        return True
    # --keep-checkpoints' archives: its rotation deletes them
    return os.path.isdir(folder) and any(archive_frames(name) is not None for name in os.listdir(folder))


def unused_folder(stem: str) -> str:
    """``stem``, or ``stem-2``, ``stem-3``, ... : the first that holds no run."""
    return first_free(stem, holds_run)


def branches(run: str) -> list[tuple[int, str]]:
    """The folders that ``main.py --resume`` made beside ``run`` (``<run>-from-<frames>``, or ``-from-<frames>-<n>``
    for a second branch from the same state) that hold a run, as (frames resumed from, folder), the one resumed from
    the most frames last."""
    parent, name = os.path.split(os.path.abspath(run))
    found = []
    for entry in os.listdir(parent or os.sep):
        rest = entry[len(name) + len("-from-"):] if entry.startswith(f"{name}-from-") else ""
        frames, _, copy = rest.partition("-")
        folder = os.path.join(parent, entry)
        if frames.isdigit() and (copy == "" or copy.isdigit()) and holds_run(folder):
            found.append((int(frames), int(copy or 1), folder))
    return [(frames, folder) for frames, _, folder in sorted(found)]


def cell_number(text: str | None) -> float | None:
    """``text`` as a number, or None (empty, missing, or not a number: a row cut short by a lost write)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def csv_column(path: str, field: str) -> list[float]:
    """The column ``field`` of the CSV file ``path``, as numbers (empty when there is no such file or column; a
    row whose cell is not a number is left out, the rest are kept; a tail csv cannot read, as a machine that stopped
    mid-write can leave, ends the column there)."""
    values = []
    try:
        with open(path, newline="", errors="replace") as f:
            for row in readable_rows(csv.DictReader(f)):
                if (value := cell_number(row.get(field))) is not None:
                    values.append(value)
    except OSError:
        pass
    return values


def drop_cut_row(path: str) -> None:
    """A last row that does not end its line (the machine stopped in the middle of writing it) is removed, so that
    the rows appended after it start on a line of their own instead of gluing onto it."""
    with open(path, "rb+") as f:
        text = f.read()  # a few MB at most: one row per game
        if text and not text.endswith(b"\n"):
            f.truncate(text.rfind(b"\n") + 1)  # no whole line at all, not even the header: empty
            f.flush()
            os.fsync(f.fileno())


def progress_frames(folder: str, name: str = "progress.csv") -> list[float]:
    """The frames of each row of ``folder``'s progress.csv (or games.csv; empty when there is none)."""
    return csv_column(os.path.join(folder, name), "frames")


def newest_frames(folder: str, resume_path: str, resumed: dict | None) -> float | None:
    """The most frames that anything in the run directory reached: its checkpoint.pt, the archives' names, the
    evaluator's rows in progress.csv and the training games in games.csv (a run killed outright may have logged games
    past its last checkpoint)."""
    found = [frames for name in CSV_FILES for frames in progress_frames(folder, name)]
    for name in os.listdir(folder):
        stem, ext = os.path.splitext(name)
        if ext == ".pt" and stem.startswith("checkpoint-") and stem[len("checkpoint-"):].isdigit():
            found.append(int(stem[len("checkpoint-"):]))
    on_disk = frames_on_disk(os.path.join(folder, "checkpoint.pt"), resume_path, resumed)
    return max(found + ([on_disk] if on_disk is not None else []), default=None)


def choose_run_dir(args: argparse.Namespace, resumed: dict | None) -> str:
    """Where this run writes (``args.run_dir`` is the ``--run-dir`` given, or None). Raises ValueError, one line,
    for a folder that would mix two runs."""
    given = args.run_dir
    if resumed is None:
        if given is None:
            stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            return unused_folder(os.path.join("runs", f"{env_file_name(args.env)}__{args.seed}__{stamp}"))
        if holds_run(given):
            raise BadInput(f"--run-dir {given} already holds a run: continue it with --resume {given}, or name a "
                             f"new folder")
        return given
    source, frames = resumed_run_dir(args.resume), int(resumed["frames"])
    newest = newest_frames(source, args.resume, resumed)
    branch = newest is not None and newest > frames
    if given is None:
        return unused_folder(f"{sibling_stem(source)}-from-{frames}") if branch else source
    if os.path.abspath(given) == os.path.abspath(source):
        if branch:
            raise BadInput(f"{source} went on to {newest:.0f} frames, past the {frames} of {args.resume}: that "
                             f"resume is a branch and writes elsewhere; leave out --run-dir or name a new folder")
        return given
    if holds_run(given):
        raise BadInput(f"--run-dir {given} already holds a run; name a new folder for the resumed run")
    return given


def prepare_run_dir(args: argparse.Namespace, resumed: dict | None) -> dict[str, str | None]:
    """Create the folders, write ``args.json`` and start ``progress.csv`` and ``games.csv``: a fresh run's header;
    in place, the file as it is; a branch, the header and the parent's rows up to the state it resumed from."""
    for folder in (args.save_model_dir, args.log_dir, args.run_dir):  # the run's own last: no empty run is left
        if folder is not None:
            make_folders(folder)
    name = env_file_name(args.env)
    paths = {
        "run_dir": args.run_dir,
        "progress": os.path.join(args.run_dir, "progress.csv"),
        "games": os.path.join(args.run_dir, "games.csv"),
        "checkpoint": os.path.join(args.run_dir, "checkpoint.pt"),
        "summary": os.path.join(args.run_dir, "summary.json"),
        "best_model": os.path.join(args.run_dir, BEST_MODEL),
        "export_model": os.path.join(args.save_model_dir, f"{name}.pt") if args.save_model_dir else None,
        "log_file": os.path.join(args.log_dir, f"{name}_log"),
    }
    with open(paths["log_file"], "a"):  # the text log opens (not a folder, writable) before the run has any file
        pass
    # each file whole or not at all (a resume in place rewrites args.json; a branch's CSVs start with its parent's
    # rows), and a start that fails removes the files it made, so that the same command can run again
    texts = {"args.json": json.dumps(vars(args), indent=2, sort_keys=True)}
    for name, fields in CSV_FILES.items():
        path = os.path.join(args.run_dir, name)
        if resumed is not None and os.path.exists(path):  # in place: the file as it is, less a row cut short
            drop_cut_row(path)
            if os.path.getsize(path):
                continue
        rows = parent_rows(args, resumed, name, fields) if resumed is not None else []
        buffer = io.StringIO()
        csv.writer(buffer).writerows([fields] + rows)
        texts[name] = buffer.getvalue()
    made = []
    try:
        if resumed is None:  # claim the folder first: two runs that picked the same one never write into each other
            claim = os.path.join(args.run_dir, "progress.csv")
            try:
                os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                raise FileExistsError(errno.EEXIST, "another run started in it at the same moment; start again",
                                      args.run_dir) from None
            made.append(claim)
        for name, text in texts.items():
            path = os.path.join(args.run_dir, name)
            existed = os.path.exists(path)
            atomic_write_text(path, text, fault="start_enospc")
            if not existed:
                made.append(path)
    except OSError:
        for path in made:
            with contextlib.suppress(OSError):
                os.remove(path)
        raise
    return paths


def parent_rows(args: argparse.Namespace, resumed: dict, name: str = "progress.csv",
                fields: list[str] = PROGRESS_FIELDS) -> list[list[str]]:
    """A branch's history: the rows of the run it resumed from (its file ``name``, whose header is ``fields``), up
    to the resumed state's frames."""
    source = resumed_run_dir(args.resume)
    if os.path.abspath(source) == os.path.abspath(args.run_dir):
        return []
    rows = []
    try:
        with open(os.path.join(source, name), newline="", errors="replace") as f:
            reader = readable_rows(csv.reader(f))
            if next(reader, None) != fields:
                return []
            for row in reader:
                if len(row) == len(fields) and (frames := cell_number(row[1])) is not None \
                        and frames <= float(resumed["frames"]):
                    rows.append(row)
    except OSError:
        pass
    return rows


def recent_returns(path: str, count: int, start: int = 0) -> list[float]:
    """The returns of the last ``count`` evaluator games in ``path`` (a progress.csv; empty when there is none),
    from its game ``start`` on: a resumed run's evaluator starts its running mean with them, so the mean goes on
    across the resume instead of starting over (a branch's file holds its parent's games up to the branch, an
    in-place one its own; ``start``: the first game played the way the evaluator plays now)."""
    return csv_column(path, "return")[start:][-count:] if count > 0 else []


def write_tensorboard_hparams(args: argparse.Namespace) -> None:
    """The flags as a text table, at the start (CleanRL's way: readable even while the run goes on)."""
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(args.run_dir) as writer:
        table = "\n".join(f"|{key}|{value}|" for key, value in sorted(vars(args).items()))
        writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")


def write_tensorboard_results(args: argparse.Namespace, summary: dict) -> None:
    """The flags and the run's results for TensorBoard's HPARAMS tab, at the end: runs compared side by side."""
    from torch.utils.tensorboard import SummaryWriter

    hparams = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in vars(args).items()}
    metrics = {f"hparam/{k}": float(summary[k] if summary[k] is not None else math.nan)
               for k in ("best_mean_return", "best_return", "frames", "seconds")}
    with SummaryWriter(args.run_dir) as writer:
        writer.add_hparams(hparams, metrics, run_name=".", global_step=summary["frames"])
