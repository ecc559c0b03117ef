"""Seed sweep: N runs of one training command back to back, then how fast and how far they learned.

    python -m tools.sweep --runs 5 --seconds 1200 --score 18 --out sweeps/pong -- --model nature --stop-score 18
    python -m tools.sweep --runs 5 --seconds 120 --score 475 --budgets 50000 100000 --out sweeps/cartpole \\
        -- --env CartPole-v1 --stop-score 475
    python -m tools.sweep --runs 3 --frames 20e6 --final-eval 10 --out sweeps/breakout -- --env BreakoutNoFrameskip-v4
    python -m tools.sweep --report sweeps/pong            # table and figure again from the runs already there
    python -m tools.sweep --resume sweeps/breakout        # carry on a sweep that was cut short

Flags after ``--`` go to main.py unchanged; sweep.py adds ``--seed <seed0 + i - 1> --run-dir OUT/run<i>``, the
budget (--seconds -> ``--max-seconds``, --frames -> ``--max-frames``) and, unless given, ``--save-model-dir
OUT/trained_models --log-dir OUT/logs``, so that a sweep never overwrites the project's trained_models/. Runs go
one after another (side by side they would share the CPU); run i's output goes to OUT/run<i>/stdout.log.

The report (printed; OUT/sweep.md, OUT/sweep.json, OUT/sweep.png) has a row per run and the median and worst of
  time to score: seconds and frames at the first evaluator game whose running mean, over a full --score-window
      (main.py's rule for --stop-score), reaches --score. Never, or a run that did not exit 0: not reached, which
      counts as infinitely slow;
  return @ F: the running mean of the last evaluator game at or before F frames (runs without one, or that stopped
      before F frames, left out);
  final weights (with --final-eval N): after each run that exits 0, ``gym_eval.py`` plays N whole games with its
      checkpoint.pt greedily and N sampling the policy (``--stochastic``, as RL Zoo scores Atari agents), into
      OUT/run<i>/final_greedy.json and final_stochastic.json (a resumed run's: in the folder it ended in); the mean of
      each. The evaluator's games near the end of a
      run were each played with the weights of their start, so they can trail the weights the run ends with;
  min entropy: worker 0's lowest policy entropy in the first 500,000 frames: the lower of what the run's TensorBoard
      files hold and what OUT/sweep.json recorded of the run (the files are gone from a folder rebuilt from a sweep's
      committed records).
The figure: every run's running mean against wall-clock minutes and against frames. A "note" written into
OUT/sweep.json by hand (that other work shared the machine, say) stays there through --report and shows in sweep.md;
so does any other key written there by hand (docs/atari_table.py's ``flags_now``).

A sweep cut short (a reboot, a killed terminal, Ctrl-C) carries on with ``--resume OUT``: the same command (read from
OUT/sweep.json, written before run 1 starts) for the runs not yet done. A run that stopped before its budget continues
from its last checkpoint (``main.py --resume`` with the budget and what a checkpoint never carries: --gym-packages and
the machine's --gpu-ids, --backend, --ray-address, as the sweep's command gave them; --seconds gives it the seconds
its checkpoint had left), in place where it saved on its way out, else in a branch ``run<i>-from-<frames>`` beside it
(main.py's rule: nothing the run wrote is replaced), which sweep.json records as the run's ``dir`` and the report
measures (its progress.csv holds the whole run); a finished run missing its --final-eval games plays them (told the
modules again); a run not begun starts; a run that crashed stays as it ended (a result). A run cut before its first
checkpoint has nothing to go on from: moved out of OUT, it starts afresh. Frames past the last checkpoint are played
again, so a resumed run is one like the run an uncut sweep would have made, not the same one.

Exit codes: 0 every run exited 0; 1 some did not (the sweep went on); 2 bad input, one line on stderr (also when
run 1 refuses its flags, as every run would); 130 Ctrl-C: main.py, in the same process group, gets it too and
saves, and the report covers the runs so far; 143 SIGTERM, which is passed on to the running main.py.
"""

import argparse
import io
import json
import math
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from typing import Sequence

from core.cli import SEED_LIMIT, HelpFormatter, OneLineParser, random_seed
from core.errors import EXIT_BAD_INPUT, EXIT_CRASH, EXIT_OK, EXIT_SIGINT, EXIT_SIGTERM, BadInput
from core.files import atomic_write_bytes, atomic_write_text, load_json
from runtime.run_dir import branches, holds_run
from tools.plot import read_progress, run_env

PROG = "python -m tools.sweep"  # how the command is run, for its messages

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, where main.py is
FINISHED = ("max_frames", "max_seconds", "solved")  # the stop reasons of a run that exits 0
FINAL_EVAL = (("greedy", []), ("stochastic", ["--stochastic"]))  # --final-eval's games: policy, gym_eval.py's flags
ENTROPY_FRAMES = 500_000  # the min entropy column looks at the first frames, where a collapse shows
# main.py flags that sweep.py sets itself: the user's own would make the runs alike or mix two budgets
OWN_FLAGS = {"seed": ("--seed", "use --seed0"), "run_dir": ("--run-dir", "use --out"),
             "max_seconds": ("--max-seconds", "use --seconds"), "max_frames": ("--max-frames", "use --frames"),
             "resume": ("--resume", "a sweep starts its runs afresh")}


def count(text: str) -> int:
    """A positive whole number, also written as a float (``3e6``): --frames and --budgets."""
    value = float(text)  # so that 3e6 is accepted
    if not (value.is_integer() and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(value)


def build_parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, formatter_class=HelpFormatter,
                      description="Seed sweep of a3g: N runs of one main.py command, then a table of time to score "
                                  "and return at frame budgets (median and worst) and a figure of every run.",
                      epilog="Flags after -- go to main.py unchanged.")
    add = p.add_argument
    add("--runs", type=int, default=5, help="runs in the sweep, one after another")
    add("--seed0", type=random_seed, default=1, help="seed of run 1; run i gets seed0 + i - 1")
    add("--seconds", type=float, default=None, help="wall-clock budget of each run (main.py --max-seconds)")
    add("--frames", type=count, default=None, help="frame budget of each run (main.py --max-frames)")
    add("--score", type=float, default=None, help="report the time each run took to reach this running mean")
    add("--budgets", type=count, nargs="+", default=None, metavar="FRAMES",
        help="frame counts to report the return at (None: 4 evenly spaced up to the shortest run's frames, "
             "rounded down to 2 significant digits)")
    add("--final-eval", type=int, default=0, metavar="N",
        help="after each run, N whole games with its final weights, greedy and sampled (gym_eval.py); 0: none")
    add("--out", default=None, help="new folder for the sweep: run<i>/, trained_models/, logs/, sweep.md/json/png")
    add("--report", default=None, metavar="OUT", help="run nothing: write the report of the sweep in OUT again")
    add("--resume", default=None, metavar="OUT",
        help="carry on the sweep in OUT that was cut short, with its own flags (OUT/sweep.json): each run not "
             "finished continues from its last checkpoint, each not begun starts")
    return p


def parse(argv: list[str], resuming: bool = False) -> tuple[OneLineParser, argparse.Namespace]:
    """sweep.py's flags (before ``--``) checked, and main.py's (after it) in ``args.main_flags``; with --resume OUT,
    those of the sweep in OUT (``resuming``: its own command, re-read, whose --out holds runs)."""
    cut = argv.index("--") if "--" in argv else len(argv)
    p = build_parser()
    args, unknown = p.parse_known_args(argv[:cut])
    if unknown:
        p.error(f"unrecognized arguments: {' '.join(unknown)} (flags for main.py go after --)")
    args.main_flags = argv[cut + 1:]
    if args.resume is not None:
        if argv[:cut] not in (["--resume", args.resume], [f"--resume={args.resume}"]) or args.main_flags:
            p.error("--resume takes the sweep's folder alone: its runs keep the flags they were started with")
        first = sweep_argv(args.resume)
        if first is None and os.path.isfile(os.path.join(args.resume, "sweep.json")):
            p.error(f"{os.path.join(args.resume, 'sweep.json')} is not a sweep's record (unreadable JSON, or no sweep "
                    f"command in it): nothing to resume from")
        if first is None:
            p.error(f"{args.resume} holds no sweep.json naming its sweep command (a sweep writes it before run 1 "
                    f"starts; one cut during its run 1 by an older version did not): nothing to resume from")
        if "--resume" in first or "--report" in first:
            p.error(f"{os.path.join(args.resume, 'sweep.json')} names no sweep to run (its command is a --resume or "
                    f"a --report): nothing to resume from")
        out = args.resume
        _, args = parse(first, resuming=True)
        args.out = args.resume = out
        return p, args
    if args.score is not None and not math.isfinite(args.score):
        p.error(f"--score must be a finite number, got {args.score}")
    if args.report is not None:
        if args.main_flags:
            p.error("--report runs nothing: it takes no flags for main.py")
        if not any(os.path.isfile(os.path.join(run, "progress.csv")) for run in run_dirs(args.report)):
            p.error(f"{args.report} holds no run<i>/progress.csv: not a sweep folder")
    elif args.runs < 1:
        p.error(f"--runs must be at least 1, got {args.runs}")
    elif args.seed0 + args.runs > SEED_LIMIT:
        p.error(f"--seed0 {args.seed0} with --runs {args.runs}: the last run's seed would pass 2**31 - 1")
    elif args.final_eval < 0:
        p.error(f"--final-eval must be >= 0 games, got {args.final_eval}")
    elif args.seconds is None and args.frames is None:
        p.error("give each run a budget: --seconds and/or --frames (or --report OUT)")
    elif args.seconds is not None and not (math.isfinite(args.seconds) and args.seconds > 0):
        p.error(f"--seconds must be positive, got {args.seconds}")
    elif args.out is None:
        p.error("--out is required: the folder the sweep's runs go to")
    elif not resuming:  # a new sweep's folder: none yet, or an empty one
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            p.error(f"--out {args.out} is a file, not a folder")
        if run_dirs(args.out):
            p.error(f"{args.out} already holds runs: give a new --out rather than mix sweeps (or --report {args.out})")
        if os.path.isdir(args.out) and os.listdir(args.out):
            p.error(f"{args.out} already holds files: give a new or empty --out (--resume {args.out} continues a "
                    f"sweep that was cut short)")
    return p, args


def sweep_argv(out: str) -> list[str] | None:
    """The flags the sweep in OUT was started with (after ``python -m tools.sweep``), from OUT/sweep.json."""
    command = load_json(os.path.join(out, "sweep.json")).get("sweep_command")
    try:
        words = shlex.split(command) if isinstance(command, str) else []
    except ValueError:
        return None
    start = ["python", "-m", "tools.sweep"]
    return words[len(start):] if words[:len(start)] == start else None


def run_dirs(out: str) -> list[str]:
    """OUT/run<i> folders, in the order of i."""
    found = [(int(m.group(1)), name) for name in (os.listdir(out) if os.path.isdir(out) else [])
             if (m := re.fullmatch(r"run(\d+)", name)) and os.path.isdir(os.path.join(out, name))]
    return [os.path.join(out, name) for _, name in sorted(found)]


def newest_part(part: str) -> str:
    """Where a run of the sweep went on from ``part`` (the run's folder, or the branch the sweep last recorded): a
    part that ended (finished or crashed) is the run's last; else the branch beside it that main.py --resume wrote
    from the most frames, and so on. A branch with no checkpoint.pt (cut before its first save) is passed over: the
    next resume starts another branch from the same state."""
    if load_json(os.path.join(part, "summary.json")).get("stop_reason") in (*FINISHED, "error"):
        return part
    later = [b for _, b in branches(part) if os.path.isfile(os.path.join(b, "checkpoint.pt"))]
    return newest_part(later[-1]) if later else part


def recorded_part(run_dir: str, known: dict) -> str:
    """The folder that holds the run now: ``known["dir"]`` (sweep.json's), the branch --resume continued it in,
    else ``run_dir``. A branch recorded but gone (a folder copied without it, a hand edit) is bad input."""
    if not known.get("dir"):
        return run_dir
    out, name = os.path.split(run_dir)
    branch = os.path.join(out, known["dir"])
    if not os.path.isdir(branch):
        raise BadInput(f"{os.path.join(out, 'sweep.json')} says {name} went on in {known['dir']}, which is not in "
                       f"{out}: put it back, or remove that \"dir\" from sweep.json to take {name} as it stands")
    return branch


def load_run(run_dir: str, known: dict) -> dict:
    """A run from what it wrote (a crashed one may lack summary.json or games) and what the sweep knows of it:
    ``known["dir"]``, a branch that --resume continued the run in, is measured in its place; ``known["min_entropy"]``,
    the lowest entropy recorded before, counts beside the TensorBoard files (gone from a folder rebuilt from a
    sweep's committed records)."""
    name, parts = os.path.basename(run_dir), [run_dir]
    if known.get("dir"):
        run_dir = recorded_part(run_dir, known)
        parts.append(run_dir)  # a branch's TensorBoard events start at the branch: the first frames are its parent's
    args, summary = load_json(os.path.join(run_dir, "args.json")), load_json(os.path.join(run_dir, "summary.json"))
    try:
        curve = read_progress(run_dir)
    except BadInput:
        curve = None
    frames, code = summary.get("frames", curve["frames"][-1] if curve else None), known.get("exit_code")
    return {"run": name, **({"dir": known["dir"]} if known.get("dir") else {}),
            "seed": args.get("seed", known.get("seed")), "exit_code": code,
            "stop_reason": summary.get("stop_reason"), "frames": None if frames is None else int(frames),
            "seconds": summary.get("seconds", curve["wall_time_s"][-1] if curve else None),
            "best_mean_return": summary.get("best_mean_return"), "score_window": args.get("score_window", 10),
            "min_entropy": min((e for e in [*map(min_entropy, parts), number(known.get("min_entropy"))]
                                if e is not None), default=None),
            **{f"final_{policy}": load_json(final_eval_path(run_dir, policy)).get("mean") for policy, _ in FINAL_EVAL},
            # the exit code when the sweep saw it, else (runs reported without their sweep.json) the stop reason
            "finished": code == 0 if code is not None else summary.get("stop_reason") in FINISHED, "curve": curve}


def final_eval_path(run_dir: str, policy: str) -> str:
    return os.path.join(run_dir, f"final_{policy}.json")


def uncarried(given: dict) -> tuple[list[str], list[str]]:
    """The flags of the sweep's main.py command (``given``: those it names, as main.py's parser reads them) that a
    checkpoint never carries, to give again: (main.py --resume's: the modules to import and the machine's GPUs,
    backend and Ray address; gym_eval.py's: the modules). A file a3g loads never makes it import code, so a resume
    or a final game of ``--env module:Id`` needs its module named."""
    env = given.get("env") or ""
    modules = list(dict.fromkeys([*given.get("gym_packages", []), *([env.split(":", 1)[0]] if ":" in env else [])]))
    imports = ["--gym-packages", *modules] if modules else []
    machine = [*(["--gpu-ids", *map(str, given["gpu_ids"])] if "gpu_ids" in given else []),
               *(["--backend", given["backend"]] if "backend" in given else []),
               *(["--ray-address", given["ray_address"]] if given.get("ray_address") else [])]
    return imports + machine, imports


def final_eval(run_dir: str, games: int, running: list, signals: list, extra: Sequence[str] = ()) -> int:
    """``games`` whole games with the run's last weights (checkpoint.pt), greedy and then sampled (``--stochastic``),
    each written by gym_eval.py to final_<policy>.json in the run (``extra``: gym_eval.py's flags the model file
    cannot give, ``uncarried``); its output goes to final_eval.log. Returns the worst exit code (a signal stops it
    between the two)."""
    codes = [EXIT_OK]
    with open(os.path.join(run_dir, "final_eval.log"), "a") as log:  # a retry keeps the earlier attempt's lines
        for policy, flags in FINAL_EVAL:
            if signals:
                break
            running[0] = subprocess.Popen(
                [sys.executable, os.path.join(ROOT, "gym_eval.py"), "--model-path", run_dir, "--latest",
                 "--num-episodes", str(games), "--json", final_eval_path(run_dir, policy), "--log-dir",
                 os.path.join(run_dir, "final_eval_logs"), *extra, *flags], stdout=log, stderr=subprocess.STDOUT)
            codes.append(running[0].wait())
    running[0] = None
    return max(codes)


def min_entropy(run_dir: str, frames: int = ENTROPY_FRAMES) -> float | None:
    """The lowest policy entropy (worker 0's, TensorBoard ``losses/entropy``) logged up to ``frames``: a categorical
    policy that collapsed early shows as ~0 (a Gaussian's entropy has no floor: it is negative once narrow). None
    without TensorBoard events."""
    if not any(name.startswith("events.out.tfevents") for name in os.listdir(run_dir)):
        return None
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(run_dir, size_guidance={"scalars": 0}).Reload()
    if "losses/entropy" not in events.Tags()["scalars"]:
        return None
    values = [e.value for e in events.Scalars("losses/entropy") if e.step <= frames]
    return min(values) if values else None


def time_to_score(run: dict, score: float) -> tuple[float, int] | tuple[None, None]:
    """(seconds, frames) of the first game whose mean over a full window reaches score: main.py's 'solved'."""
    curve = run["curve"]
    for k, mean in enumerate(curve["mean_return"] if run["finished"] and curve else []):
        if k + 1 >= run["score_window"] and mean >= score:
            return curve["wall_time_s"][k], int(curve["frames"][k])
    return None, None


def return_at(curve: dict[str, list[float]] | None, budget: int, end: int | None = None) -> float | None:
    """The running mean of the last evaluator game at or before ``budget`` frames (None: no game by then, or the run
    ended at ``end`` frames, before the budget: its last game's mean would pass for a return it never had there)."""
    if end is not None and end < budget:
        return None
    means = [m for f, m in zip(curve["frames"], curve["mean_return"]) if f <= budget] if curve else []
    return means[-1] if means else None


def default_budgets(runs: list[dict]) -> list[int]:
    """4 evenly spaced up to the shortest run, rounded down (so that every run got that far) to 2 digits."""
    ends = [run["frames"] for run in runs if run["frames"]]
    budgets = set()
    for x in (int(min(ends) * k / 4) for k in range(1, 5)) if ends else ():
        step = 10 ** max(len(str(x)) - 2, 0)
        budgets.add(x // step * step)
    return sorted(budgets - {0})


def median_and_worst(values: Sequence[float | None], time: bool = False) -> tuple[float | None, float | None]:
    """A time not reached (None) is infinitely slow; a missing return is left out."""
    values = [math.inf if v is None else v for v in values] if time else [v for v in values if v is not None]
    if not values:
        return None, None
    pair = statistics.median(values), (max if time else min)(values)
    return tuple(None if v == math.inf else v for v in pair)


def cell(value: object, fmt: str = "{:.1f}", missing: str = "-") -> str:
    """A table cell: ``value`` formatted, or ``missing`` for None."""
    return missing if value is None else fmt.format(value)


def item(text: str) -> str:
    """A list item of the report wrapped at 120 characters (a long command or note stays readable in a diff)."""
    return textwrap.fill(text, 120, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)


def report(out: str, meta: dict, score: float | None, budgets: list[int] | None) -> str:
    """Measure every run in OUT; write sweep.md, sweep.json and sweep.png; return the markdown."""
    dirs = run_dirs(out)
    runs = [load_run(d, meta["runs"].get(os.path.basename(d), {})) for d in dirs]
    budgets = budgets or default_budgets(runs)
    finals = [f"final_{policy}" for policy, _ in FINAL_EVAL if any(r[f"final_{policy}"] is not None for r in runs)]
    times = ["score_seconds", "score_frames"] if score is not None else []
    keys = ["best_mean_return", "min_entropy", *finals, *times]
    for run in runs:
        if score is not None:
            run["score_seconds"], run["score_frames"] = time_to_score(run, score)
        run["return_at_budgets"] = [return_at(run["curve"], b, run["frames"]) for b in budgets]

    def over_runs(i):  # 0: the median, 1: the worst
        row = {key: median_and_worst([r[key] for r in runs], time=key.startswith("score"))[i] for key in keys}
        row["return_at_budgets"] = [median_and_worst([r["return_at_budgets"][k] for r in runs])[i]
                                    for k in range(len(budgets))]
        return row

    median, worst = over_runs(0), over_runs(1)

    def cells(r, first):
        return (first + [cell(r["best_mean_return"]), cell(r["min_entropy"], "{:.2f}")]
                + [cell(r[key]) for key in finals]
                + [cell(r[key], fmt, "not reached") for key, fmt in zip(times, ("{:.0f}", "{:,.0f}"))]
                + [cell(v) for v in r["return_at_budgets"]])

    header = ["run", "seed", "exit", "stop", "frames", "seconds", "best mean",
              f"min entropy (first {ENTROPY_FRAMES:,} frames)"] + \
        [f"final weights, {key[len('final_'):]}" for key in finals] + \
        ([f"to {score:g} (s)", f"to {score:g} (frames)"] if score is not None else []) + \
        [f"return @ {b:,}" for b in budgets]
    table = [header, ["---"] * len(header)]
    table += [cells(r, [r["run"], cell(r["seed"], "{}"), cell(r["exit_code"], "{}"), r["stop_reason"] or "-",
                        cell(r["frames"], "{:,}"), cell(r["seconds"], "{:.0f}")]) for r in runs]
    table += [cells(s, [f"**{name}**"] + [""] * 5) for name, s in (("median", median), ("worst", worst))]
    env = run_env(dirs[0]) or "?"
    lines = [f"# Seed sweep: {env}, {len(runs)} run(s)", ""]
    lines += [item(f"- {what}: `{meta[key]}`") for what, key in (("sweep", "sweep_command"),
                                                                    ("each run", "run_command")) if meta.get(key)]
    if meta.get("commit"):
        lines.append(f"- code: commit `{meta['commit']}`")
    lines.append(f"- machine: {meta.get('machine') or 'not recorded (no sweep.json of the sweep)'}")
    lines += [item(f"- resumed: {line}") for line in meta.get("resumed", [])]
    if meta.get("note"):
        lines.append(item(f"- note: {meta['note']}"))
    lines += [item("- time to score: the first evaluator game whose running mean over a full --score-window reaches "
              "the score (runs that did not exit 0: not reached); return @ F: the running mean of the last game at or "
              "before F frames (-: none, or the run stopped before F); min entropy: worker 0's lowest logged "
              "policy entropy (a discrete policy's collapse shows as ~0); worst: the slowest time, the lowest return "
              "or entropy"
              + ("; final weights: the mean of gym_eval.py's whole games with the run's checkpoint.pt, greedy and "
                 "sampled (--stochastic)" if finals else "")), ""]
    text = "\n".join(lines + ["| " + " | ".join(row) + " |" for row in table]) + "\n"
    atomic_write_text(os.path.join(out, "sweep.md"), text)
    atomic_write_text(os.path.join(out, "sweep.json"), json.dumps({
        **{k: v for k, v in meta.items() if k != "runs"}, "score": score, "budgets": budgets,
        "runs": [{k: v for k, v in r.items() if k not in ("curve", "finished")} for r in runs],
        "median": median, "worst": worst}, indent=2))
    draw(os.path.join(out, "sweep.png"), runs, score, f"{env}: {len(runs)} run(s)")
    return text


def draw(path: str, runs: list[dict], score: float | None, title: str) -> None:
    """sweep.png: each run's running mean against wall-clock minutes and against frames."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    fig, (ax_time, ax_frames) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for run in (run for run in runs if run["curve"]):
        line, = ax_time.plot([t / 60 for t in run["curve"]["wall_time_s"]], run["curve"]["mean_return"],
                             label=f"{run['run']} (seed {run['seed']})")
        ax_frames.plot(run["curve"]["frames"], run["curve"]["mean_return"], color=line.get_color())
    for ax in (ax_time, ax_frames):
        if score is not None:
            ax.axhline(score, color="black", linestyle="--", linewidth=1, label=f"score {score:g}")
        ax.grid(True, alpha=0.3)
        ax.set_xlim(left=0)
    ax_time.set_xlabel("wall time (min)")
    ax_time.set_ylabel("evaluator return, running mean")
    if ax_time.get_legend_handles_labels()[0]:  # none when no run got to an evaluator game
        ax_time.legend(loc="best", fontsize="small")
    ax_frames.set_xlabel("frames")
    ax_frames.xaxis.set_major_formatter(EngFormatter())
    fig.suptitle(title)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, dpi=120, format="png")
    plt.close(fig)
    atomic_write_bytes(path, png.getvalue())  # the figure of the runs before stays whole until this one is


def commit() -> str | None:
    """The code the runs use: main.py's git commit, ``+changes`` where tracked files differ from it; None outside
    a git checkout."""
    def git(*args):
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return None
        changed = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+changes" if changed else "")


def machine() -> str:
    """The machine in one line (OS, CPU, cores, GPUs, Python, torch), for the report."""
    import torch

    from core.hardware import usable_cores

    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        cpu = None
    gpus = f", {torch.cuda.device_count()} CUDA GPU(s)" if torch.cuda.is_available() else ""
    return (f"{platform.platform()}, {cpu or platform.machine()}, {usable_cores()} of {os.cpu_count()} cores usable"
            f"{gpus}; Python {platform.python_version()}, torch {torch.__version__}")


def recorded(old: dict) -> dict:
    """What a sweep.json holds beyond what the report computes (its command, machine, code, a note or another key
    written by hand), with its runs by name."""
    meta = {key: value for key, value in old.items() if key not in ("runs", "score", "budgets", "median", "worst")}
    runs = old.get("runs") if isinstance(old.get("runs"), list) else []  # a file edited by hand: what it holds
    return meta | {"runs": {r.get("run"): r for r in runs if isinstance(r, dict)}}


def save_meta(out: str, meta: dict) -> None:
    """OUT/sweep.json with what the sweep knows so far (the report rewrites it, measured, after each run); whole or
    not at all, as --resume reads it."""
    atomic_write_text(os.path.join(out, "sweep.json"), json.dumps({**meta, "runs": list(meta["runs"].values())},
                                                                  indent=2))


def run_entry(seed: int, code: int, where: str, run_dir: str, out: str, known: dict) -> dict:
    """What sweep.json records of run i: its seed, exit code and, where it went on in a branch, that folder; the min
    entropy recorded of the same run before (``known``), which its TensorBoard files may no longer hold."""
    entropy = number(known.get("min_entropy"))
    return ({"seed": seed, "exit_code": code} | ({"dir": os.path.relpath(where, out)} if where != run_dir else {})
            | ({"min_entropy": entropy} if entropy is not None else {}))


def resumed_budget(args: argparse.Namespace, part: str) -> list[str]:
    """main.py's budget flags for a run resumed from ``part``'s checkpoint: --max-frames counts the run's frames
    (resumed ones included); --max-seconds counts one start's, so it gets what the checkpoint had left."""
    flags = ["--max-frames", str(args.frames)] if args.frames is not None else []
    if args.seconds is not None:
        from runtime.checkpoints import load_checkpoint

        try:
            spent = float(load_checkpoint(os.path.join(part, "checkpoint.pt"), kind="checkpoint").get("seconds", 0))
        except BadInput:
            spent = 0.0  # main.py refuses the file itself, in one line
        flags += ["--max-seconds", f"{max(1.0, args.seconds - spent):g}"]
    return flags


def sweep(p: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str]) -> int:
    """Run the sweep's runs one after another, reporting after each; returns the exit code."""
    signals, running = [], [None]

    def on_signal(signum, frame):
        # Noted, not raised, so that sweep.py waits for the run: Ctrl-C reaches main.py from the terminal too
        # (same process group) and it saves; a SIGTERM was sent to sweep.py alone and is passed on.
        signals.append(signum)
        if signum == signal.SIGTERM and running[0] is not None:
            running[0].send_signal(signal.SIGTERM)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    from runtime import config  # torch and all, so only here: main.py is about to run anyway

    # main.py's own parser reads the flags as main.py will: bad ones stop the sweep before it starts
    given = vars(config.build_parser(suppress_defaults=True).parse_args(args.main_flags))
    for dest, (flag, hint) in OWN_FLAGS.items():
        if dest in given:
            p.error(f"{flag} after -- is for sweep.py to set ({hint})")
    own = (["--max-seconds", f"{args.seconds:g}"] if args.seconds is not None else []) + \
          (["--max-frames", str(args.frames)] if args.frames is not None else []) + \
          ([] if "save_model_dir" in given else ["--save-model-dir", os.path.join(args.out, "trained_models")]) + \
          ([] if "log_dir" in given else ["--log-dir", os.path.join(args.out, "logs")])

    retold, retold_eval = uncarried(given)  # what a resume and the final games must be told again

    def flags(seed, run_dir):
        return [*args.main_flags, "--seed", seed, "--run-dir", run_dir, *own]

    meta = {"sweep_command": shlex.join(["python", "-m", "tools.sweep", *argv]), "main_flags": args.main_flags,
            "run_command": shlex.join(["python", "main.py", *flags("SEED", os.path.join(args.out, "runI"))])
            + f"  (run I = 1..{args.runs}, SEED = {args.seed0} + I - 1)", "machine": machine(), "commit": commit(),
            "runs": {}}
    if args.resume:  # what the sweep recorded (its command, machine, code, a note) stays; this resume is added to it
        old = load_json(os.path.join(args.out, "sweep.json"))
        meta |= recorded(old)
        if args.score is None and number(old.get("score")) is not None:
            args.score = old["score"]  # a score a later --report asked for
        again = shlex.join(["python", "-m", "tools.sweep", *argv])
        meta["resumed"] = [*meta.get("resumed", []), f"{time.strftime('%Y-%m-%d %H:%M')}: {again}; code {commit()}; "
                                                      f"{machine()}"]
    try:
        os.makedirs(args.out, exist_ok=True)
        save_meta(args.out, meta)  # before any run: what --resume reads
    except OSError as exc:
        p.error(f"--out {args.out} cannot be written ({exc.strerror or exc})")

    text = None
    for i in range(1, args.runs + 1):
        if signals:
            break
        seed, run_dir = args.seed0 + i - 1, os.path.join(args.out, f"run{i}")
        known = meta["runs"].get(f"run{i}", {})
        try:
            where = newest_part(recorded_part(run_dir, known))
        except BadInput as exc:
            p.error(str(exc))
        stop = load_json(os.path.join(where, "summary.json")).get("stop_reason")
        if not holds_run(run_dir):  # a run not begun (or cut before main.py wrote anything)
            known = {}  # what sweep.json holds of a run moved out of the folder is not this run's
            os.makedirs(run_dir, exist_ok=True)
            print(f"sweep: run {i}/{args.runs} (seed {seed}) started, output in {run_dir}/stdout.log", flush=True)
            with open(os.path.join(run_dir, "stdout.log"), "a") as log:  # after an attempt that began nothing
                running[0] = subprocess.Popen([sys.executable, os.path.join(ROOT, "main.py"),
                                               *flags(str(seed), run_dir)], stdout=log, stderr=subprocess.STDOUT)
                code = wait_showing_progress(running[0], log.name, f"sweep: run {i}/{args.runs}: ")
        elif stop in FINISHED or stop == "error":  # --resume: done, or crashed (a result, kept as it ended)
            code = EXIT_OK if stop in FINISHED else known.get("exit_code", EXIT_CRASH)
            if not args.final_eval or code != EXIT_OK or os.path.isfile(final_eval_path(where, "stochastic")):
                meta["runs"][f"run{i}"] = run_entry(seed, code, where, run_dir, args.out, known)
                continue
        elif not os.path.isfile(os.path.join(where, "checkpoint.pt")):
            print(f"{PROG}: error: run {i} was cut before its first checkpoint ({where} holds no checkpoint.pt): "
                  f"move {run_dir} out of {args.out} and --resume again to start it afresh", file=sys.stderr)
            return EXIT_BAD_INPUT
        else:  # --resume: cut before its budget; main.py goes on in place or in a branch
            print(f"sweep: run {i}/{args.runs} (seed {seed}) resumed from {where} (stopped: "
                  f"{stop or 'no summary'}), output in {run_dir}/stdout.log", flush=True)
            with open(os.path.join(run_dir, "stdout.log"), "a") as log:
                running[0] = subprocess.Popen([sys.executable, os.path.join(ROOT, "main.py"), "--resume", where,
                                               *resumed_budget(args, where), *retold],
                                              stdout=log, stderr=subprocess.STDOUT)
                code = wait_showing_progress(running[0], log.name, f"sweep: run {i}/{args.runs}: ")
            where = newest_part(where)
        meta["runs"][f"run{i}"] = run_entry(seed, code, where, run_dir, args.out, known)
        save_meta(args.out, meta)  # which folder holds the run, before its final games: a cut there loses nothing
        if args.final_eval and code == EXIT_OK and not signals:
            print(f"sweep: run {i}/{args.runs}: its final weights play {args.final_eval} greedy and "
                  f"{args.final_eval} stochastic games (gym_eval.py, output in {where}/final_eval.log)", flush=True)
            if final_eval(where, args.final_eval, running, signals, retold_eval) != EXIT_OK:
                print(f"sweep: run {i}/{args.runs}: gym_eval.py did not finish its games: see "
                      f"{where}/final_eval.log", flush=True)
        run = load_run(run_dir, meta["runs"][f"run{i}"])
        line = (f"sweep: run {i}/{args.runs} (seed {seed}) ended: exit {code} ({run['stop_reason'] or 'no summary'})"
                f", {cell(run['seconds'], '{:.0f}')} s, {cell(run['frames'], '{:,}')} frames, best mean "
                f"{cell(run['best_mean_return'])}")
        for policy, _ in FINAL_EVAL:
            if run[f"final_{policy}"] is not None:
                line += f", final weights {policy} {run[f'final_{policy}']:.1f}"
        if args.score is not None:
            seconds, frames = time_to_score(run, args.score)
            line += f", score {args.score:g} " + ("not reached" if seconds is None else
                                                  f"reached at {seconds:.0f} s, {frames:,} frames")
        print(line, flush=True)
        text = report(args.out, meta, args.score, args.budgets)  # after every run: a sweep cut short keeps it
        if code == EXIT_BAD_INPUT:  # main.py refused its flags, as it would for every seed (or its --resume)
            with open(os.path.join(run_dir, "stdout.log")) as f:
                last = ([out for out in f.read().splitlines() if out.strip()] or ["?"])[-1]
            what = "could not resume" if args.resume else "refused its flags"
            print(f"{PROG}: error: run {i} {what}: {last}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if text is None and args.resume and not signals:  # every run was done already: the report once more
        text = report(args.out, meta, args.score, args.budgets)
    if text is not None:
        print(text, flush=True)
        print(f"sweep: wrote {', '.join(os.path.join(args.out, f'sweep.{x}') for x in ('md', 'json', 'png'))}")
    if signals:
        return EXIT_SIGTERM if signal.SIGTERM in signals else EXIT_SIGINT
    return EXIT_OK if all(r["exit_code"] == 0 for r in meta["runs"].values()) else EXIT_CRASH


PROGRESS_EVERY = 30.0  # seconds between the running run's progress lines that the sweep relays


def latest_progress(log_path: str) -> str | None:
    """The newest progress line (``runtime.progress``) in a run's output, without its ``a3g: ``."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, os.path.getsize(log_path) - 8192))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    found = [line for line in lines if line.startswith("a3g: ") and " frames/s; " in line]
    return found[-1][len("a3g: "):] if found else None


def wait_showing_progress(proc: subprocess.Popen, log_path: str, prefix: str, every: float = PROGRESS_EVERY) -> int:
    """Wait for a run to end (a signal's handler returns and the wait goes on); meanwhile, at most once per
    ``every`` seconds, print the run's newest progress line after ``prefix``."""
    shown, last = None, time.monotonic()
    while True:
        try:
            return proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        if time.monotonic() - last >= every:
            last = time.monotonic()
            line = latest_progress(log_path)
            if line is not None and line != shown:
                print(f"{prefix}{line}", flush=True)
                shown = line


def number(value) -> float | None:
    """A number that sweep.json holds, or None for anything else (a file edited by hand)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p, args = parse(argv)
    if args.report is None:
        return sweep(p, args, argv)
    record = os.path.join(args.report, "sweep.json")
    old = load_json(record)  # what only the sweep itself saw
    if not old and os.path.isfile(record) and os.path.getsize(record) > 0:
        p.error(f"{record} cannot be read as JSON (an edit gone wrong?): it is kept; mend it, or move it away for a "
                f"report without what the sweep recorded")
    meta = recorded(old)
    meta |= {key: meta.get(key) for key in ("sweep_command", "main_flags", "run_command", "machine", "commit", "note")}
    score = args.score if args.score is not None else number(old.get("score"))
    budgets = old.get("budgets")  # a list of numbers, or a file edited by hand
    budgets = budgets if isinstance(budgets, list) and budgets and all(number(b) for b in budgets) else None
    try:
        print(report(args.report, meta, score, args.budgets or budgets), flush=True)
    except BadInput as exc:
        p.error(str(exc))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
