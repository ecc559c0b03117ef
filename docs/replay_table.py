"""Issue 14's table and figure from the runs of docs/replay_comparison.sh.

    python docs/replay_table.py [FOLDER]      # prints the table; writes FOLDER/replay.md and .png
                                              # FOLDER: docs/replay_runs (the default) or sweeps/replay

Per configuration (A no replay, B queue 0.5 + standard 0.5, C B with --kl-mask, D queue 0.5 + elite sampling,
strategy 3): the runs found, the median and worst evaluator running mean at 2M frames (the last game at or before
it), the median frames/s of the runs (frames over wall seconds, start-up included), and the share of the learner's
steps the trust region masked (C). A run that has not reached 2M frames yet is listed, not counted.
"""

import glob
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from plot import read_progress  # noqa: E402

BUDGET = 2_000_000
NAMES = {"A": "no replay", "B": "queue 0.5 + standard 0.5", "C": "B with --kl-mask",
         "D": "queue 0.5 + elite sampling (strategy 3)"}


def load(folder):
    """{config: [run, ...]}, each run a dict with seed, progress columns and its summary (None while running)."""
    runs = {}
    for found in sorted(glob.glob(os.path.join(folder, "[A-D]-s*"))):
        config, seed = os.path.basename(found).split("-s")
        path = os.path.join(found, "run1") if os.path.isdir(os.path.join(found, "run1")) else found
        summary_path = os.path.join(path, "summary.json")
        summary = json.load(open(summary_path)) if os.path.isfile(summary_path) else None
        try:
            progress = read_progress(path)
        except Exception:  # no evaluator game yet
            progress = None
        runs.setdefault(config, []).append({"seed": int(seed), "progress": progress, "summary": summary})
    return runs


def return_at(progress, frames):
    values = [m for f, m in zip(progress["frames"], progress["mean_return"]) if f <= frames]
    return values[-1] if values else None


def table(runs):
    lines = ["| config | replay | runs (seeds) | median return @ 2M | worst | frames/s (median) | masked steps |",
             "|---|---|---|---|---|---|---|"]
    for config in sorted(runs):
        done = [r for r in runs[config] if r["summary"] and r["summary"]["frames"] >= BUDGET and r["progress"]]
        returns = [return_at(r["progress"], BUDGET) for r in done]
        fps = [r["summary"]["frames"] / r["summary"]["seconds"] for r in done]
        masked = [r["summary"]["masked_fraction"] for r in done if "masked_fraction" in r["summary"]]
        seeds = ", ".join(str(r["seed"]) for r in done) or "-"
        lines.append(f"| {config} | {NAMES[config]} | {len(done)} ({seeds}) | "
                     + (f"{statistics.median(returns):+.1f} | {min(returns):+.1f} | {statistics.median(fps):,.0f} | "
                        if done else "- | - | - | ")
                     + (f"{statistics.median(masked):.1%} |" if masked else "- |"))
    return "\n".join(lines)


def figure(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, config in enumerate(sorted(runs)):
        for j, run in enumerate(r for r in runs[config] if r["progress"]):
            p = run["progress"]
            ax.plot([f / 1e6 for f in p["frames"]], p["mean_return"], color=f"C{i}", alpha=0.8,
                    label=f"{config}: {NAMES[config]}" if j == 0 else None)
    ax.set_xlabel("frames (millions)")
    ax.set_ylabel("evaluator mean return (10 games)")
    ax.set_title("IMPALA on Pong, Nature network: replay or not")
    ax.axvline(BUDGET / 1e6, color="gray", lw=0.5)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(folder):
    runs = load(folder)
    if not runs:
        sys.exit(f"replay_table.py: error: no <config>-s<seed> folders in {folder}")
    text = table(runs)
    print(text)
    with open(os.path.join(folder, "replay.md"), "w") as f:
        f.write(text + "\n")
    figure(runs, os.path.join(folder, "replay.png"))


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit("usage: python docs/replay_table.py [FOLDER]   (default: docs/replay_runs)")
    main(sys.argv[1] if len(sys.argv) == 2 else os.path.join(HERE, "replay_runs"))
