"""The replay comparison's table and figure from the runs of docs/replay_comparison.sh.

    python docs/replay_table.py [FOLDER]      # prints the table; writes FOLDER/replay.md and .png, and
                                              # FOLDER/milestones.md (when each kept run reached 0, 10, 18)
                                              # FOLDER: docs/replay_runs (the default) or sweeps/replay

Per configuration (A no replay, B queue 0.5 + standard 0.5, C B with --kl-mask, D queue 0.5 + elite sampling,
strategy 3, E D with "score_steps": 5): the runs found, the median and worst evaluator running mean at 2M frames
(the last game at or before it), each run's frames/s (frames over wall seconds, start-up included), and the share of
the learner's steps the trust region masked (C). A run that has not reached 2M frames yet is not counted. Runs whose
folders were lost with their machine count from FOLDER/lost.json (their figures as recorded at the time, marked * in
the table).
"""

import io
import json
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from core.files import atomic_write_bytes, atomic_write_text  # noqa: E402
from tools.plot import read_progress  # noqa: E402

BUDGET = 2_000_000
LEVELS = (0, 10, 18)  # running means for milestones.md
NAMES = {"A": "no replay", "B": "queue 0.5 + standard 0.5", "C": "B with --kl-mask",
         "D": "queue 0.5 + elite sampling (strategy 3)", "E": "D scoring 5 of each unroll's 20 steps"}


def load(folder):
    """{config: [run, ...]}, the finished runs by seed, each a dict with its seed, return at the budget, frames/s,
    masked fraction (None unless --kl-mask) and progress columns (None for a lost run)."""
    runs = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        named = re.fullmatch(r"([A-E])-s(\d+)", name)  # a copy beside them (B-s1.bak) is not a run
        found = os.path.join(folder, name)
        if not named or not os.path.isdir(found):
            continue
        config, seed = named.groups()
        path = os.path.join(found, "run1") if os.path.isdir(os.path.join(found, "run1")) else found
        summary_path = os.path.join(path, "summary.json")
        summary = json.load(open(summary_path)) if os.path.isfile(summary_path) else None
        try:
            progress = read_progress(path)
        except Exception:  # no evaluator game yet
            progress = None
        score = return_at(progress, BUDGET) if progress else None
        if summary and score is not None and summary.get("frames", 0) >= BUDGET:  # a game by 2M frames, run past it
            seconds = summary.get("seconds")
            runs.setdefault(config, []).append({
                "seed": int(seed), "progress": progress, "return": score,
                "fps": summary["frames"] / seconds if seconds else None,
                "masked_fraction": summary.get("masked_fraction")})
    lost = os.path.join(folder, "lost.json")
    try:
        for run in json.load(open(lost))["runs"] if os.path.isfile(lost) else []:
            runs.setdefault(run["config"], []).append({"seed": run["seed"], "progress": None, "lost": True,
                                                       "return": run["return"], "fps": run["fps"],
                                                       "masked_fraction": run.get("masked_fraction")})
    except (ValueError, KeyError, TypeError) as exc:
        sys.exit(f"replay_table.py: error: {lost} is not a list of lost runs ({type(exc).__name__}: {exc}): each "
                 f"needs config, seed, return and fps")
    for config in runs:
        runs[config].sort(key=lambda run: run["seed"])
    return runs


def return_at(progress, frames):
    values = [m for f, m in zip(progress["frames"], progress["mean_return"]) if f <= frames]
    return values[-1] if values else None


def table(runs):
    lines = ["| config | replay | return @ 2M by seed | median | worst | frames/s by seed | masked steps |",
             "|---|---|---|---|---|---|---|"]
    for config in sorted(runs):
        done = runs[config]
        returns = [r["return"] for r in done]
        mark = {True: "*", False: ""}
        by_seed = ", ".join(f"s{r['seed']}{mark[bool(r.get('lost'))]} {r['return']:+.1f}" for r in done)
        fps = ", ".join(f"s{r['seed']}{mark[bool(r.get('lost'))]} " + (f"{r['fps']:,.0f}" if r["fps"] else "-")
                        for r in done)
        masked = [r["masked_fraction"] for r in done if r["masked_fraction"] is not None]
        lines.append(f"| {config} | {NAMES[config]} | {by_seed} | {statistics.median(returns):+.1f} | "
                     f"{min(returns):+.1f} | {fps} | "
                     + (f"{statistics.median(masked):.2%} |" if masked else "- |"))
    return "\n".join(lines)


def first_at(progress, level):
    """(frames, wall seconds) of the first game at or before the budget whose running mean reached level, or None."""
    for frames, seconds, mean in zip(progress["frames"], progress["wall_time_s"], progress["mean_return"]):
        if frames > BUDGET:
            break
        if mean >= level:
            return frames, seconds
    return None


def milestones(runs):
    """When each kept run's running mean first reached each of LEVELS (lost runs have no progress to read)."""
    lines = ["| run | " + " | ".join(f">= {level}" for level in LEVELS) + " |", "|---" * (len(LEVELS) + 1) + "|"]
    for config in sorted(runs):
        for run in (r for r in runs[config] if r["progress"]):
            cells = []
            for level in LEVELS:
                hit = first_at(run["progress"], level)
                cells.append(f"{hit[0] / 1e6:.2f}M ({hit[1] / 60:.1f} min)" if hit else "not in 2M")
            lines.append(f"| {config} s{run['seed']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def figure(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, config in enumerate(sorted(runs)):
        for j, run in enumerate(r for r in runs[config] if r["progress"]):  # lost runs have no curve
            p = run["progress"]
            ax.plot([f / 1e6 for f in p["frames"]], p["mean_return"], color=f"C{i}", alpha=0.8,
                    label=f"{config}: {NAMES[config]}" if j == 0 else None)
    ax.set_xlabel("frames (millions)")
    ax.set_ylabel("evaluator mean return (10 games)")
    ax.set_title("IMPALA on Pong, Nature network: replay or not")
    ax.axvline(BUDGET / 1e6, color="gray", lw=0.5)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, dpi=100, format="png")
    plt.close(fig)
    atomic_write_bytes(path, image.getvalue())


def main(folder):
    runs = load(folder)
    if not runs:
        sys.exit(f"replay_table.py: error: no finished <config>-s<seed> folders or lost.json in {folder}")
    text = table(runs)
    print(text)
    figure(runs, os.path.join(folder, "replay.png"))
    atomic_write_text(os.path.join(folder, "replay.md"), text + "\n")
    atomic_write_text(os.path.join(folder, "milestones.md"), milestones(runs) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 2 or any(a.startswith("-") for a in sys.argv[1:]):
        sys.exit("usage: python docs/replay_table.py [FOLDER]   (default: docs/replay_runs)")
    main(sys.argv[1] if len(sys.argv) == 2 else os.path.join(HERE, "replay_runs"))
