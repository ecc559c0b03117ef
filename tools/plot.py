"""Plot training progress: evaluator returns against frames and against wall time, from runs' progress.csv (or,
with ``--curve training``, the training games of their games.csv).

    python -m tools.plot runs/CartPole-v1__1__20261121-180000                 # -> that run's progress.png
    python -m tools.plot runs/a runs/b -o compare.png                          # several runs on one figure

Each run is a run directory (or its progress.csv). Faint lines: the return of each evaluator game; solid lines: the
running mean_return (mean of the last --score-window games). The legend labels runs by their directory name.
Exit codes: 0 written, 2 bad input (one line on stderr).
"""

import csv
import io
import json
import math
import os
import sys
from typing import Sequence

from core.cli import OneLineParser
from core.errors import EXIT_BAD_INPUT, EXIT_OK, BadInput
from core.files import atomic_write_bytes, readable_rows

PROG = "python -m tools.plot"  # how the command is run, for its messages

NEEDED = ("wall_time_s", "frames", "return", "mean_return")


def build_parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="Plot evaluator returns of a3g runs against frames and wall time.")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (or their progress.csv files)")
    p.add_argument("-o", "--output", default=None,
                   help="PNG to write (default: <RUN_DIR>/progress.png for one run, ./progress.png for several; "
                        "training.png with --curve training)")
    p.add_argument("--title", default=None, help="figure title (default: the runs' environment id)")
    p.add_argument("--dpi", type=int, default=120, help="resolution of the PNG (default: 120)")
    p.add_argument("--curve", default="eval", choices=["eval", "training"],
                   help="eval: the evaluator's greedy games (progress.csv); training: the training games, with a "
                        "running mean of 10 (games.csv; a run from before it: TensorBoard's charts/episodic_return) "
                        "(default: eval)")
    return p


def progress_path(run: str) -> str:
    return os.path.join(run, "progress.csv") if os.path.isdir(run) else run


def run_label(run: str) -> str:
    path = os.path.normpath(os.path.abspath(run))
    if not os.path.isdir(path):
        path = os.path.dirname(path)
    return os.path.basename(path)


def run_env(run: str) -> str | None:
    """The env id from the run's args.json, if there is one."""
    folder = run if os.path.isdir(run) else os.path.dirname(os.path.abspath(run))
    try:
        with open(os.path.join(folder, "args.json")) as f:
            return json.load(f).get("env")
    except (OSError, ValueError, AttributeError):
        return None


def read_progress(run: str) -> dict[str, list[float]]:
    """Columns of progress.csv as lists of floats; raises BadInput when there is nothing to plot."""
    path = progress_path(run)
    if not os.path.isfile(path):
        raise BadInput(f"{path} not found (give a3g run directories, which hold progress.csv)")
    data, unread = {c: [] for c in NEEDED}, 0
    try:
        with open(path, newline="", errors="replace") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None:
                raise BadInput(f"{path} is empty")
            missing = [c for c in NEEDED if c not in reader.fieldnames]
            if missing:
                raise BadInput(f"{path} lacks the column(s) {', '.join(missing)}: not an a3g progress.csv")
            for row in readable_rows(reader):
                try:
                    values = {c: float(row[c]) for c in NEEDED}
                except (TypeError, ValueError):
                    unread += 1
                    continue  # a half-written last line of a running run, say
                if all(math.isfinite(v) for v in values.values()):
                    for c in NEEDED:
                        data[c].append(values[c])
    except (OSError, csv.Error) as exc:  # csv.Error: a header csv cannot read
        raise BadInput(f"{path} cannot be read ({exc})") from None
    if not data["frames"]:
        raise BadInput(f"{path} has no evaluator games yet (only a header)" if not unread else
                       f"{path} has no readable evaluator game ({unread} row(s) that are not numbers)")
    return data


def running_means(returns: list[float], window: int) -> list[float]:
    """The mean of the last ``window`` values (fewer at the start) after each."""
    return [sum(returns[max(0, i + 1 - window) : i + 1]) / min(i + 1, window) for i in range(len(returns))]


def read_games(path: str, window: int) -> dict[str, list[float]] | None:
    """A run's games.csv in progress.csv's columns (the mean of the last ``window`` games as ``mean_return``); None
    when it holds no game (or is not a3g's). A row that is not numbers (cut mid-write by a run still going or
    stopped) is left out, the rest kept; so is a tail csv cannot read."""
    rows = []
    try:
        with open(path, newline="", errors="replace") as f:
            for r in readable_rows(csv.DictReader(f)):
                try:
                    row = (float(r["wall_time_s"]), float(r["frames"]), float(r["return"]))
                except KeyError:
                    return None  # not a3g's games.csv
                except (TypeError, ValueError):
                    continue
                if all(map(math.isfinite, row)):
                    rows.append(row)
    except OSError:
        pass
    if not rows:
        return None
    returns = [r for _, _, r in rows]
    return {"wall_time_s": [t for t, _, _ in rows], "frames": [f for _, f, _ in rows], "return": returns,
            "mean_return": running_means(returns, window)}


def read_training(run: str, window: int = 10) -> dict[str, list[float]]:
    """The training games of a run, in progress.csv's columns: wall time, frames, return, and the mean of the last
    ``window`` games. From its games.csv; a run from before games.csv: TensorBoard's ``charts/episodic_return`` (wall
    time from the run's first event)."""
    folder = run if os.path.isdir(run) else os.path.dirname(os.path.abspath(run))
    games = read_games(os.path.join(folder, "games.csv"), window)
    if games is not None:
        return games
    if not os.path.isdir(folder) or not any(name.startswith("events.out.tfevents") for name in os.listdir(folder)):
        raise BadInput(f"{folder} has no training games (no games.csv with a game, no TensorBoard events)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(folder, size_guidance={"scalars": 0}).Reload()
    if "charts/episodic_return" not in events.Tags()["scalars"]:
        raise BadInput(f"{folder} has no training games in its TensorBoard events yet")
    games = events.Scalars("charts/episodic_return")
    start = min(event.wall_time for tag in events.Tags()["scalars"] for event in events.Scalars(tag)[:1])
    returns = [game.value for game in games]
    return {"wall_time_s": [game.wall_time - start for game in games], "frames": [float(game.step) for game in games],
            "return": returns, "mean_return": running_means(returns, window)}


def time_unit(max_seconds: float) -> tuple[float, str]:
    """The wall-time axis' unit for runs this long: (seconds per unit, its name)."""
    if max_seconds < 600:
        return 1.0, "s"
    if max_seconds < 3 * 3600:
        return 60.0, "min"
    return 3600.0, "h"


def plot(runs: Sequence[str], output: str, title: str | None = None, dpi: int = 120, curve: str = "eval") -> str:
    """Draw the runs' returns (the evaluator's, or with ``curve`` "training" the training games') against frames and
    wall time into the PNG ``output``; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    read = read_training if curve == "training" else read_progress
    data = [(run_label(run), read(run)) for run in runs]
    if title is None:
        envs = {run_env(run) for run in runs}
        title = envs.pop() if len(envs) == 1 and None not in envs else None
    scale, unit = time_unit(max(max(d["wall_time_s"]) for _, d in data))

    fig, (ax_frames, ax_time) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, d) in enumerate(data):
        color = colors[i % len(colors)]
        times = [t / scale for t in d["wall_time_s"]]
        for ax, x in ((ax_frames, d["frames"]), (ax_time, times)):
            ax.plot(x, d["return"], color=color, alpha=0.25, linewidth=0.8)
            ax.plot(x, d["mean_return"], color=color, linewidth=2.0, label=label)
    ax_frames.set_xlabel("frames")
    ax_frames.xaxis.set_major_formatter(EngFormatter())
    ax_frames.set_ylabel(f"{'training' if curve == 'training' else 'evaluator'} return (faint: each game; solid: "
                         f"running mean)")
    ax_time.set_xlabel(f"wall time ({unit})")
    for ax in (ax_frames, ax_time):
        ax.grid(True, alpha=0.3)
        ax.set_xlim(left=0)
    ax_frames.set_title("return vs frames")
    ax_time.set_title("return vs wall time")
    ax_time.legend(loc="best", fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    folder = os.path.dirname(os.path.abspath(output))
    os.makedirs(folder, exist_ok=True)
    png = io.BytesIO()
    fig.savefig(png, dpi=dpi, format="png")
    plt.close(fig)
    atomic_write_bytes(output, png.getvalue())  # an earlier figure stays whole until the new one is
    return output


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_output(output: str) -> None:
    """The figure goes to a .png that is new or an earlier figure: never over a file of another kind (a run's
    progress.csv, a user's notes). BadInput otherwise."""
    if not output.lower().endswith(".png"):
        raise BadInput(f"-o {output}: the figure is a PNG; give a file name ending in .png")
    if os.path.isdir(output):
        raise BadInput(f"-o {output} is a folder; give a file name")
    if os.path.exists(output):
        try:
            with open(output, "rb") as f:
                is_png = f.read(len(PNG_SIGNATURE)) == PNG_SIGNATURE
        except OSError as exc:
            raise BadInput(f"-o {output} cannot be read ({exc.strerror or exc})") from None
        if not is_png:
            raise BadInput(f"-o {output} exists and is no PNG: it is kept; give another file name")


MAX_DPI = 1200  # a 14,400-pixel-wide PNG; far more would take minutes and gigabytes to draw


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if not 0 < args.dpi <= MAX_DPI:
        print(f"{PROG}: error: --dpi must be in 1..{MAX_DPI} (the figure is 12 inches wide), got {args.dpi}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    output = args.output
    if output is None:
        name = "training.png" if args.curve == "training" else "progress.png"
        output = os.path.join(os.path.dirname(progress_path(args.runs[0])), name) if len(args.runs) == 1 else name
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"{PROG}: error: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        check_output(output)
        plot(args.runs, output, args.title, args.dpi, args.curve)
    except BadInput as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(f"{PROG}: error: cannot write {output} ({exc})", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"plot: wrote {output} ({len(args.runs)} run(s))")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
