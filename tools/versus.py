"""Side by side against peers: a3g and other trainers on one game, for the same wall-clock, on this machine, one
after the other, and how far each got in the training games against minutes and against frames.

    python -m tools.versus --env BreakoutNoFrameskip-v4 --seconds 1800 --runs 3 --out versus/breakout \\
        --contestants a3g rlzoo-ppo
    python -m tools.versus --seconds 1800 --out versus/breakout --contestants a3g:pg a3g:ppo rlzoo-ppo \\
        --a3g-flags ppo "--objective ppo --num-steps 128"
    python -m tools.versus --report versus/breakout       # table and figure again from the runs already there
    python -m tools.versus --resume versus/breakout       # the runs not yet done (an interrupted one is redone)
    python -m tools.versus --resume versus/breakout --runs 5   # two more runs of each contestant

Contestants (run 1 of each in the order given, then run 2 of each in the reverse order, and so on, so that none
always goes first):
  a3g, a3g:LABEL   ``main.py`` from this repository with ``--max-seconds``, the flags after ``--`` and, for a label,
                   ``--a3g-flags LABEL "FLAGS"``; its training games from the run's games.csv;
  rlzoo-ppo, rlzoo-a2c  RL Zoo (``python -m rl_zoo3.train``) with its published Atari hyperparameters, in a venv of
                   its own under --peers-dir, installed from the package registry on first use with the versions in
                   PEERS (torch pinned to the CPU build); stopped with Ctrl-C at the budget, as a user would; its
                   training games from its Monitor files (whole games, raw points: Monitor sits below the frame
                   skip and the life-loss wrapper).
  sample-factory   Sample Factory's Atari example (``sf_examples.atari.train_atari``: its own Atari settings,
                   synchronous PPO) on the CPU with 2 workers x 4 envs, in a venv of its own under --peers-dir like
                   RL Zoo's (PEERS); started through ``tools/sf_peer.py``, which logs each training game in RL Zoo's
                   Monitor format (Sample Factory logs only means over 100 lives); stopped with Ctrl-C at the budget.
Every contestant gets the same wall-clock from its launch, the same game with 30 random no-op starts, and
``--seed seed0 + run - 1``. Each counts seconds on its own clock from the start of its training (a few seconds of
start-up are not in it) and frames as emulator frames (RL Zoo's: the lengths of its finished games, so a little
behind its true count).

The report (printed; OUT/versus.md, OUT/versus.json, OUT/versus.png): for each contestant the mean of its last 100
training games at each of --marks minutes and at each of --frame-marks frames, the median and worst over its runs,
and the frames it had played by each mark; the figure, the running mean of 100 training games of every run against
minutes and against frames.

``--resume OUT`` continues a comparison with the settings OUT/versus.json recorded (``--runs`` may raise its
number of runs): runs that ended are kept, a run that was under way when the comparison stopped is started again, its
folder kept beside as ``<folder>-stopped`` (``-stopped-2``, ...). Each run records the commit it ran.

Exit codes: 0 every run ended as planned; 1 some did not (the others went on); 2 bad input, one line on stderr;
130 Ctrl-C, 143 SIGTERM (either way the running contestant is stopped with Ctrl-C, and the report covers the runs
so far).
"""

import argparse
import csv
import glob
import io
import itertools
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import time
from typing import Sequence

from core.cli import OneLineParser, positive_int, random_seed
from core.errors import EXIT_BAD_INPUT, EXIT_CRASH, EXIT_OK, EXIT_SIGINT, EXIT_SIGTERM, BadInput
from core.files import atomic_write_bytes, atomic_write_text, load_json, readable_rows

PROG = "python -m tools.versus"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# each peer's venv: what is installed into it (pinned), and how its trainer is started
PEERS = {
    "rlzoo": ["torch==2.13.0", "rl_zoo3==2.9.2", "stable-baselines3==2.9.2", "sb3-contrib==2.9.2", "ale-py==0.12.1",
              "gymnasium==1.4.0", "opencv-python-headless==5.1.0.95"],
    # Sample Factory 2.1.1 needs gymnasium < 1.0 and numpy < 2
    "sf": ["torch==2.13.0", "sample-factory==2.1.1", "gymnasium==0.29.1", "numpy==1.26.4", "ale-py==0.9.1",
           "opencv-python==4.10.0.84"],
}
RLZOO_ALGOS = {"rlzoo-ppo": "ppo", "rlzoo-a2c": "a2c"}
PEER_NAMES = (*RLZOO_ALGOS, "sample-factory")
WINDOW = 100  # training games in each mean (CleanRL's and SB3's "last 100 episodes")
GRACE = 60  # seconds a contestant gets to save and exit after its budget


def build_parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="a3g against peers: the same game, the same wall-clock, one machine.")
    p.add_argument("--env", default="BreakoutNoFrameskip-v4", help="the Atari game, a NoFrameskip-v4 id")
    p.add_argument("--seconds", type=positive_int, help="each run's wall-clock budget")
    p.add_argument("--runs", type=positive_int, default=None,
                   help="runs of each contestant (default: 1; with --resume, the recorded number)")
    p.add_argument("--seed0", type=random_seed, default=1, help="run i's seed is seed0 + i - 1 (default: 1)")
    p.add_argument("--contestants", nargs="+", default=["a3g", "rlzoo-ppo"], metavar="NAME",
                   help="a3g, a3g:LABEL, rlzoo-ppo, rlzoo-a2c, sample-factory (default: a3g rlzoo-ppo)")
    p.add_argument("--a3g-flags", nargs=2, action="append", default=[], metavar=("LABEL", "FLAGS"),
                   help="main.py flags of contestant a3g:LABEL, one quoted string (after those after --)")
    p.add_argument("--marks", type=float, nargs="+", default=None, metavar="MINUTES",
                   help="wall-clock marks of the table (default: every 5 minutes of the budget)")
    p.add_argument("--frame-marks", type=float, nargs="+", default=[1e6, 2e6, 5e6], metavar="FRAMES",
                   help="frame marks of the table (default: 1M 2M 5M; a run that did not reach one is left out)")
    p.add_argument("--peers-dir", default=os.path.expanduser("~/.cache/a3g/peers"),
                   help="where the peers' venvs live (default: ~/.cache/a3g/peers)")
    p.add_argument("--out", help="the folder of the runs and the report")
    p.add_argument("--report", metavar="OUT", help="the report again from OUT's runs; nothing is run")
    p.add_argument("--resume", metavar="OUT", help="continue the comparison in OUT with its recorded settings")
    p.add_argument("a3g_args", nargs=argparse.REMAINDER, help="after --: main.py flags for every a3g contestant")
    return p


def parse(argv: Sequence[str]) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    args.a3g_args = args.a3g_args[1:] if args.a3g_args[:1] == ["--"] else args.a3g_args
    if args.report:
        return args
    if args.resume:
        return resumed(args)
    args.runs = args.runs or 1
    if not args.out or not args.seconds:
        raise BadInput("--out and --seconds are needed (or --report OUT, or --resume OUT)")
    labels = dict(args.a3g_flags)
    for name in args.contestants:
        kind, _, label = name.partition(":")
        if kind not in ("a3g", *PEER_NAMES) or (label and kind != "a3g"):
            raise BadInput(f"--contestants: {name!r} is not one of a3g, a3g:LABEL, {', '.join(PEER_NAMES)}")
        if label and label not in labels:
            raise BadInput(f"--contestants {name}: give its flags with --a3g-flags {label} \"FLAGS\"")
    if len(set(args.contestants)) < len(args.contestants):
        raise BadInput("--contestants: each name once")
    if not args.env.endswith("NoFrameskip-v4"):
        raise BadInput(f"--env {args.env}: a NoFrameskip-v4 Atari id (RL Zoo's published Atari settings are for those)")
    if os.path.exists(os.path.join(args.out, "versus.json")):
        raise BadInput(f"--out {args.out} holds a comparison already: give a new folder, or --report {args.out}")
    args.marks = args.marks or [m for m in range(5, args.seconds // 60 + 1, 5)] or [args.seconds / 60]
    return args


SETTINGS = ("env", "seconds", "contestants", "marks", "frame_marks", "a3g_args")


def resumed(args: argparse.Namespace) -> argparse.Namespace:
    """The arguments of the comparison recorded in ``args.resume``: its settings, ``--runs`` at least the recorded
    number; any other setting given now is refused (the runs would not compare)."""
    path = os.path.join(args.resume, "versus.json")
    if not os.path.exists(path):
        raise BadInput(f"--resume {args.resume}: no versus.json there")
    record = load_json(path)
    parser = build_parser()
    given = [f"--{name.replace('_', '-')}" for name in SETTINGS[:-1] if getattr(args, name) != parser.get_default(name)]
    if given or args.a3g_args or args.a3g_flags or args.out or args.seed0 != 1:
        raise BadInput(f"--resume takes the recorded settings: give only --runs and --peers-dir with it "
                       f"(not {' '.join(given) or 'these flags'})")
    if args.runs is not None and args.runs < record["runs_each"]:
        raise BadInput(f"--runs {args.runs}: the comparison in {args.resume} has {record['runs_each']} runs already")
    for name in SETTINGS:
        setattr(args, name, record[name])
    args.a3g_flags, args.seed0, args.out = list(record["a3g_flags"].items()), record.get("seed0", 1), args.resume
    args.runs = args.runs or record["runs_each"]
    return args


def ensure_peer(peers_dir: str, peer: str) -> str:
    """The peer's venv python, installing it (pinned) on first use; progress is pip's own."""
    venv = os.path.join(peers_dir, peer)
    python = os.path.join(venv, "bin", "python")
    marker = os.path.join(venv, "a3g-installed.txt")
    wanted = "\n".join(PEERS[peer])
    if os.path.exists(marker) and open(marker).read() == wanted:
        return python
    print(f"versus: installing {peer} into {venv}: {' '.join(PEERS[peer])}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", *PEERS[peer]], check=True)
    atomic_write_text(marker, wanted)
    return python


def run_order(contestants: Sequence[str], runs: int) -> list[tuple[int, str]]:
    """``(run, contestant)`` in the order they play: odd runs in the order given, even runs reversed, so that no
    contestant always goes first (a machine's speed drifts over hours)."""
    return [(run, name) for run in range(1, runs + 1)
            for name in (contestants if run % 2 else list(reversed(contestants)))]


def command_for(args: argparse.Namespace, name: str, run: int, folder: str) -> list[str]:
    seed = str(args.seed0 + run - 1)
    if name.startswith("a3g"):
        label = name.partition(":")[2]
        extra = shlex.split(dict(args.a3g_flags).get(label, "")) if label else []
        return [sys.executable, os.path.join(ROOT, "main.py"), "--env", args.env, "--max-seconds", str(args.seconds),
                "--seed", seed, "--run-dir", folder, "--save-model-dir", os.path.join(folder, "trained_models"),
                "--log-dir", os.path.join(folder, "logs"), *args.a3g_args, *extra]
    if name == "sample-factory":
        return [ensure_peer(args.peers_dir, "sf"), os.path.join(ROOT, "tools", "sf_peer.py"),
                os.path.join(folder, "sf", "games"), args.env, "--experiment=sf", f"--train_dir={folder}",
                "--device=cpu", "--num_workers=2", "--num_envs_per_worker=4", f"--seed={seed}", "--with_wandb=False"]
    python = ensure_peer(args.peers_dir, "rlzoo")
    return [python, "-m", "rl_zoo3.train", "--algo", RLZOO_ALGOS[name], "--env", args.env, "--seed", seed,
            "-f", folder, "--vec-env", "dummy"]


class Terminated(Exception):
    """A SIGTERM to versus.py: the running contestant is stopped as for Ctrl-C, then the report."""


def on_sigterm(signum, frame):
    raise Terminated


STOPPED = (0, 130, -signal.SIGINT)  # a contestant that ended by itself, or saved and exited on Ctrl-C
INTERRUPTED = 2  # Sample Factory's exit status after it saved and stopped on Ctrl-C (ExperimentStatus.INTERRUPTED)


def play(command: list[str], seconds: float, log: str) -> int:
    """Run ``command`` in a process group of its own for ``seconds`` (a3g stops itself at --max-seconds; a peer gets
    Ctrl-C then, as a user stops a trainer, and SIGKILL GRACE seconds later); its output into ``log``. Returns 0 for
    a contestant stopped as planned, else its exit status. The group never outlives this call."""
    interrupted = False
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT,
                                preexec_fn=hear_ctrl_c)
    try:
        try:
            proc.wait(seconds + 5)
        except subprocess.TimeoutExpired:
            interrupted = True
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(GRACE)
    except (subprocess.TimeoutExpired, KeyboardInterrupt, Terminated) as exc:
        stop_group(proc)
        if not isinstance(exc, subprocess.TimeoutExpired):
            raise
    finally:
        stop_group(proc)
    stopped = proc.returncode in STOPPED or interrupted and proc.returncode == INTERRUPTED
    return 0 if stopped else proc.returncode


def hear_ctrl_c() -> None:
    """In the contestant, before it starts: Ctrl-C as a terminal delivers it, even where versus.py itself was started
    in the background of a script, which ignores SIGINT in its jobs and so in theirs (Python then never raises
    KeyboardInterrupt, and a peer would not save and stop)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop_group(proc: subprocess.Popen) -> None:
    """Ctrl-C to ``proc``'s group, SIGKILL to what is left after GRACE seconds."""
    if proc.poll() is not None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # a child it left behind
        except ProcessLookupError:
            pass
        return
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(GRACE)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def read_games(folder: str, name: str) -> list[tuple[float, float, float]]:
    """``(seconds, frames, return)`` of each training game, in the order they ended."""
    if name.startswith("a3g"):
        path = os.path.join(folder, "games.csv")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [(float(r["wall_time_s"]), float(r["frames"]), float(r["return"]))
                    for r in readable_rows(csv.DictReader(f))]
    games, starts = [], []
    for path in glob.glob(os.path.join(folder, "*", "*", "*.monitor.csv")):
        with open(path) as f:
            starts.append(json.loads(f.readline()[1:])["t_start"])
            games += [(starts[-1] + float(r["t"]), float(r["l"]), float(r["r"])) for r in csv.DictReader(f)]
    frames, out = 0.0, []
    for ended, length, points in sorted(games, key=lambda game: game[0]):  # by time alone: a file's ties keep its order
        frames += length
        out.append((ended - min(starts), frames, points))
    return out


def mean_at(games: list[tuple[float, float, float]], column: int, mark: float) -> tuple[float, float] | None:
    """The mean of the last WINDOW games ended by ``mark`` (seconds: column 0, frames: column 1), and the frames
    then; None where the run did not reach the mark."""
    if not games or games[-1][column] < mark * 0.98 and column == 1:
        return None
    upto = [g for g in games if g[column] <= mark]
    if not upto:
        return None
    last = upto[-WINDOW:]
    return sum(g[2] for g in last) / len(last), upto[-1][1]


def summarise(values: list[float], higher_is_better: bool = True) -> str:
    if not values:
        return "-"
    worst = min(values) if higher_is_better else max(values)
    return f"{statistics.median(values):.1f} ({worst:.1f})" if len(values) > 1 else f"{values[0]:.1f}"


def report(out: str) -> str:
    record = load_json(os.path.join(out, "versus.json"))
    contestants, marks, frame_marks = record["contestants"], record["marks"], record["frame_marks"]
    games = {(r["name"], r["run"]): read_games(os.path.join(out, r["dir"]), r["name"]) for r in record["runs"]}
    lines = [f"# {record['env']}: {' vs '.join(contestants)}", "",
             f"{record['seconds']} s per run, {record['runs_each']} run(s) each, one after the other on "
             f"{record['machine']}; "
             f"{record['date']}; commit {commits(record)}. Mean of the last {WINDOW} training games (whole games, "
             "raw points): median (worst) over the runs; frames played by then in millions.", "",
             "| contestant | " + " | ".join(f"{m:g} min" for m in marks) + " | "
             + " | ".join(f"{f / 1e6:g}M frames" for f in frame_marks) + " |",
             "|---|" + "---|" * (len(marks) + len(frame_marks))]
    for name in contestants:
        runs = [games[(name, r["run"])] for r in record["runs"] if r["name"] == name]
        cells = []
        for mark in marks:
            found = [m for m in (mean_at(g, 0, mark * 60) for g in runs) if m]
            cells.append(f"{summarise([m[0] for m in found])} @ {statistics.median(m[1] for m in found) / 1e6:.2f}M"
                         if found else "-")
        for mark in frame_marks:
            cells.append(summarise([m[0] for m in (mean_at(g, 1, mark) for g in runs) if m]))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Commands:", ""] + [f"- {r['name']} run {r['run']}: `{r['command']}` (exit {r['exit']})"
                                       for r in record["runs"]]
    text = "\n".join(lines) + "\n"
    atomic_write_text(os.path.join(out, "versus.md"), text)
    figure(out, record, games)
    return text


def commits(record: dict) -> str:
    """The commit of every run (a resumed comparison's later runs may have another), in the order they ran."""
    return ", ".join(dict.fromkeys(entry.get("commit", record["commit"]) for entry in record["runs"])) \
        or record["commit"]


def figure(out: str, record: dict, games: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_time, by_frames) = plt.subplots(1, 2, figsize=(12, 4.5))
    colours = {name: f"C{i}" for i, name in enumerate(record["contestants"])}
    for (name, run), played in games.items():
        if not played:
            continue
        means = [statistics.fmean(g[2] for g in played[max(0, i + 1 - WINDOW):i + 1]) for i in range(len(played))]
        label = name if run == 1 else None
        by_time.plot([g[0] / 60 for g in played], means, colours[name], label=label, lw=1)
        by_frames.plot([g[1] / 1e6 for g in played], means, colours[name], label=label, lw=1)
    by_time.set_xlabel("minutes")
    by_frames.set_xlabel("frames (millions)")
    for axes in (by_time, by_frames):
        axes.set_ylabel(f"mean of the last {WINDOW} training games")
        axes.grid(alpha=0.3)
        axes.legend()
    fig.suptitle(f"{record['env']}, {record['seconds']} s per run on {record['machine']}")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(os.path.join(out, "versus.png"), buffer.getvalue())


def set_aside(out: str, entry: dict) -> None:
    """An interrupted run's folder (and log) renamed ``<folder>-stopped`` (``-stopped-2``, ...), so that the run can
    start again in its place."""
    stem = os.path.join(out, entry["dir"])
    names = (f"{stem}-stopped" + ("" if n == 1 else f"-{n}") for n in itertools.count(1))
    aside = next(name for name in names if not os.path.exists(name))
    for path, new in ((stem, aside), (f"{stem}.log", f"{aside}.log")):
        if os.path.exists(path):
            os.rename(path, new)
    print(f"versus: {entry['name']} run {entry['run']} had not ended: it starts again "
          f"({os.path.basename(aside)} kept)", flush=True)


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        model = platform.processor()
    return f"{model or platform.machine()}, {os.cpu_count()} cores"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
        if args.report:
            if not os.path.exists(os.path.join(args.report, "versus.json")):
                raise BadInput(f"--report {args.report}: no versus.json there")
            print(report(args.report), end="")
            return EXIT_OK
        os.makedirs(args.out, exist_ok=True)
    except BadInput as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    path = os.path.join(args.out, "versus.json")
    if args.resume:
        record = load_json(path)
        for entry in (entry for entry in record["runs"] if entry["exit"] is None):
            set_aside(args.out, entry)
        record["runs"] = [entry for entry in record["runs"] if entry["exit"] is not None]
        record["runs_each"] = args.runs
    else:
        record = {"env": args.env, "seconds": args.seconds, "runs_each": args.runs, "contestants": args.contestants,
                  "marks": args.marks, "frame_marks": args.frame_marks, "machine": machine(), "commit": commit(),
                  "date": time.strftime("%Y-%m-%d"), "a3g_args": args.a3g_args, "a3g_flags": dict(args.a3g_flags),
                  "seed0": args.seed0}
        record["runs"] = []  # one entry per run as it starts: its command, folder and (once it ended) exit status
    done = {(entry["name"], entry["run"]) for entry in record["runs"]}
    failed = False
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        for run, name in run_order(args.contestants, args.runs):
            if (name, run) not in done:
                folder = f"{name.replace(':', '-')}-run{run}"
                command = command_for(args, name, run, os.path.join(os.path.abspath(args.out), folder))
                print(f"versus: {name} run {run} of {args.runs}, {args.seconds} s: {shlex.join(command)}", flush=True)
                entry = {"name": name, "run": run, "dir": folder, "command": shlex.join(command), "exit": None,
                         "commit": commit(), "date": time.strftime("%Y-%m-%d")}
                record["runs"].append(entry)
                atomic_write_text(path, json.dumps(record, indent=1))
                entry["exit"] = play(command, args.seconds, os.path.join(args.out, f"{folder}.log"))
                failed |= entry["exit"] != 0
                atomic_write_text(path, json.dumps(record, indent=1))
    except (KeyboardInterrupt, Terminated) as exc:
        atomic_write_text(path, json.dumps(record, indent=1))
        print(report(args.out), end="")
        return EXIT_SIGINT if isinstance(exc, KeyboardInterrupt) else EXIT_SIGTERM
    print(report(args.out), end="")
    return EXIT_CRASH if failed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
