"""The seven Atari games' results table and figure, rebuilt from the committed runs.

    python docs/atari_table.py                 # reads docs/atari_runs/, writes docs/ATARI.md and docs/atari_runs.png
    python docs/atari_table.py FOLDER PAGE [PROBES [VARIANTS]]  # another folder of runs, another page (and probes,
                                                                # and runs with flags beyond the defaults)

A PAGE that exists is replaced only if this script wrote it (its first line); page and figure are written whole.

FOLDER/<Game>/ is one game's ``tools.sweep`` output (run1, run2, ... each with args.json, summary.json and
progress.csv; sweep.json with the commands, the machine, the commit and an optional ``note`` that the page
prints with them). For each of rl_a3c_pytorch's seven games the
page gives: the runs found; the evaluator's running mean at 10M and 20M frames (median and worst of the runs that got
that far: the last game at or before the budget, as ``tools.sweep`` reads it); the mean of the last 100 training games
at or before 10M and 20M frames (``games.csv``: the workers' sampled policy, as RL Zoo evaluates); the median
wall-clock and frames/s; the human-normalised score of both medians at 20M frames, ``(score - random) / (human -
random)`` with Mnih et al. (2015)'s random and human scores; and RL Zoo's A2C and PPO scores (10M agent steps = 40M
frames, their ``benchmark.md``), with both medians also taken over the same games only. A game without runs has a
row that says so. Runs that add a flag to the defaults (docs/atari_variants/<name>/, the game and flags from the
sweep's ``main_flags``) get rows of their own in a section below, with the seven-game medians as they would be with
each in place of its game's defaults row.
"""

import io
import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from core.files import atomic_write_bytes, atomic_write_text  # noqa: E402
from tools.plot import read_games  # noqa: E402
from tools.sweep import load_json, load_run, median_and_worst, return_at, run_dirs  # noqa: E402

BUDGETS = (10_000_000, 20_000_000)
# Mnih et al. 2015 (Nature), Extended Data Table 2: (random, human)
REFERENCE = {"Asteroids": (719.1, 13157.0), "BeamRider": (363.9, 5775.0), "Breakout": (1.7, 31.8),
             "MsPacman": (307.3, 15693.0), "Pong": (-20.7, 9.3), "Seaquest": (68.4, 20182.0),
             "SpaceInvaders": (148.0, 1652.0)}
# RL Zoo (rl-baselines3-zoo benchmark.md), NoFrameskip-v4 at 10M agent steps (40M frames); None: not published
RL_ZOO = {"Asteroids": (1286.6, 2156.2), "BeamRider": (2890.3, 3397.0), "Breakout": (279.8, 398.0),
          "MsPacman": (None, None), "Pong": (17.3, 21.0), "Seaquest": (1721.5, 1783.6),
          "SpaceInvaders": (627.2, 960.3)}
GAMES = sorted(REFERENCE)
TRAINING_WINDOW = 100  # training games in a mean (SB3's ep_rew_mean, RL Zoo's evaluations are of 100 games or more)
# the minimal action sets of ale-py (NoFrameskip-v4)
ACTIONS = {"Asteroids": 14, "BeamRider": 9, "Breakout": 4, "MsPacman": 9, "Pong": 6, "Seaquest": 18,
           "SpaceInvaders": 6}


def normalised(game: str, score: float | None) -> float | None:
    """The human-normalised score: 0 plays like a random policy, 1 like Mnih et al.'s human tester."""
    if score is None:
        return None
    random, human = REFERENCE[game]
    return (score - random) / (human - random)


def load_game(out: str, game: str) -> dict:
    """One game's runs (the ``tools.sweep`` output ``out``) and what the table says of them."""
    meta = load_json(os.path.join(out, "sweep.json"))
    known = {r.get("run"): r for r in meta.get("runs", []) if isinstance(r, dict)}
    dirs = run_dirs(out)
    runs = [load_run(d, known.get(os.path.basename(d), {})) for d in dirs]
    # the folder each run ended in: a resumed run's branch, whose files hold the whole run (its parent's stop early)
    ended_in = [os.path.join(out, r["dir"]) if r.get("dir") else run_dir for r, run_dir in zip(runs, dirs)]
    for run, folder in zip(runs, ended_in):  # the mean of the last 100 training games after each (None: no games.csv)
        run["training_curve"] = read_games(os.path.join(folder, "games.csv"), TRAINING_WINDOW)
    got_to = {budget: [r for r in runs if r["frames"] is not None and r["frames"] >= budget] for budget in BUDGETS}
    values = {kind: {budget: [return_at(r[curve], budget) for r in got] for budget, got in got_to.items()}
              for kind, curve in (("at", "curve"), ("training", "training_curve"))}
    at, training = ({budget: median_and_worst(v) for budget, v in values[kind].items()} for kind in ("at", "training"))
    # how many runs each cell's median is of (a run that reached the budget without a games.csv has no training mean)
    counted = {kind: {budget: sum(v is not None for v in vs) for budget, vs in values[kind].items()} for kind in values}
    timed = [r for r in runs if r["frames"] and r["seconds"]]
    # each run's learning-rate schedule, from the args.json of the folder it ended in
    schedules = [schedule(load_json(os.path.join(folder, "args.json"))) for folder in ended_in]
    saved = load_json(os.path.join(dirs[0], "args.json")) if dirs else {}
    defaults = saved.get("defaults")
    if defaults and "--max-grad-norm" not in defaults and saved.get("max_grad_norm") is not None:
        # runs from before --max-grad-norm was an auto default (40 for Atari) did not clip unless told
        defaults += f"; --max-grad-norm {saved['max_grad_norm']:g}"
    return {"game": game, "runs": runs, "at": at, "training": training, "counted": counted,
            "schedule": "; ".join(dict.fromkeys(schedules)),  # the distinct ones, in the runs' order
            "commit": meta.get("commit"),
            "machine": meta.get("machine"), "command": meta.get("sweep_command"), "defaults": defaults,
            "note": meta.get("note"),  # what the records do not say (a run that shared the machine for a while)
            "seconds": statistics.median([r["seconds"] for r in timed]) if timed else None,
            "fps": statistics.median([r["frames"] / r["seconds"] for r in timed]) if timed else None}


def schedule(args: dict) -> str:
    """How a run's learning rate moved, from its saved arguments: ``lr_decay`` [START, END] (to 0 linearly between
    those frames) or none (a constant rate; runs from before the flag existed have no such key)."""
    span = args.get("lr_decay")
    if not span:
        return "constant"
    return f"falls to 0 from {span[0] / 1e6:g}M to {span[1] / 1e6:g}M frames"


def load_variants(folder: str) -> list[dict]:
    """Runs that add flags to the defaults: each FOLDER/<name>/ is a ``tools.sweep`` output whose ``main_flags`` (in
    its sweep.json) name the game (``--env``) and the flags, or ``flags_now`` the flags that today's defaults would
    need to run them (runs from before the defaults changed); by game, then flags."""
    found = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        meta = load_json(os.path.join(folder, name, "sweep.json"))
        flags = list(meta.get("main_flags") or [])
        if "--env" not in flags[:-1]:
            continue
        at = flags.index("--env")
        game = flags[at + 1].removesuffix("NoFrameskip-v4")
        if game not in REFERENCE:
            continue
        variant = load_game(os.path.join(folder, name), game)
        # flags_now: what the runs add to today's defaults, where the defaults changed since they ran
        variant["flags"] = meta.get("flags_now") or " ".join(flags[:at] + flags[at + 2:])
        found.append(variant)
    return sorted(found, key=lambda g: (g["game"], g["flags"]))


def label(g: dict) -> str:
    return f"{g['game']}, `{g['flags']}`" if g.get("flags") else g["game"]


def number(value: float | None, fmt: str = "{:,.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def pair(median: float | None, worst: float | None, runs: int) -> str:
    if median is None:
        return "-"
    return number(median) if runs == 1 else f"{number(median)} / {number(worst)}"


def rows(games: list[dict]) -> str:
    lines = ["| game | runs | learning rate | evaluator @ 10M frames | evaluator @ 20M frames "
            "| training games @ 10M frames | training games @ 20M frames | wall-clock (min) | frames/s "
            "| human-normalised @ 20M: evaluator, training games | RL Zoo A2C @ 40M frames | RL Zoo PPO @ 40M frames |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for g in games:
        a2c, ppo = RL_ZOO[g["game"]]
        if not g["runs"]:
            lines.append(f"| {label(g)} | not run yet | | | | | | | | | {number(a2c)} | {number(ppo)} |")
            continue
        cells = [pair(*g[kind][budget], g["counted"][kind][budget])
                 for kind in ("at", "training") for budget in BUDGETS]
        scores = [number(normalised(g["game"], g[kind][BUDGETS[1]][0]), "{:.2f}") for kind in ("at", "training")]
        lines.append(f"| {label(g)} | {len(g['runs'])} | {g['schedule']} | " + " | ".join(cells)
                     + f" | {number(g['seconds'] and g['seconds'] / 60, '{:.0f}')} | {number(g['fps'], '{:,.0f}')} | "
                     f"{', '.join(scores)} | {number(a2c)} | {number(ppo)} |")
    return "\n".join(lines)


def medians(games: list[dict]) -> str:
    """The median human-normalised score at 20M frames of the evaluator and of the training games, over the games
    that have one."""
    parts = []
    for kind, name in (("at", "the evaluator's"), ("training", "the training games'")):
        ours = [normalised(g["game"], g[kind][BUDGETS[1]][0]) for g in games]
        ours = [x for x in ours if x is not None]
        if ours:
            parts.append(f"{name} **{statistics.median(ours):.2f}** over {len(ours)} game(s)")
    return "; ".join(parts)


def table(games: list[dict]) -> str:
    theirs = [normalised(game, RL_ZOO[game][0]) for game in GAMES if RL_ZOO[game][0] is not None]
    parts = medians(games)
    summary = ("Median human-normalised score at 20M frames (the games with a run that got that far): "
               + parts if parts else "No game has a run that reached 20M frames yet")
    summary += (f"; RL Zoo's A2C at 40M frames: {statistics.median(theirs):.2f} (median over the {len(theirs)} games it "
                f"publishes: no MsPacman).")
    return rows(games) + "\n\n" + summary + "\n" + like_for_like(games)


def like_for_like(games: list[dict]) -> str:
    """Both medians over the same games: those with a run at 20M frames and an RL Zoo A2C score (a median over
    different sets of games compares the sets as much as the agents)."""
    common = [g["game"] for g in games if g["at"][BUDGETS[1]][0] is not None and RL_ZOO[g["game"]][0] is not None]
    if not common:
        return ""
    by_game = {g["game"]: g for g in games}
    parts = []
    for kind, name in (("at", "the evaluator's"), ("training", "the training games'")):
        ours = [normalised(game, by_game[game][kind][BUDGETS[1]][0]) for game in common]
        if None not in ours:
            parts.append(f"{name} **{statistics.median(ours):.2f}**")
    theirs = statistics.median(normalised(game, RL_ZOO[game][0]) for game in common)
    return (f"\nOn the same games only ({', '.join(common)}: a run at 20M frames and an RL Zoo A2C score): "
            f"{'; '.join(parts)} at 20M frames against RL Zoo's A2C's **{theirs:.2f}** at 40M frames.\n")


PROBE_BUDGETS = (500_000, 1_000_000, 1_500_000, 2_000_000)

PROBES = """## Probes: 2M frames of each game

Before the 20M-frame runs, one short run of each game with the defaults (`python -m tools.sweep --runs 1 --frames
2000000 --out sweeps/probes/<Game> -- --env <Game>NoFrameskip-v4`), to find what breaks: a crop that cuts the
playfield, FIRE and life handling, a game that never ends, an evaluator that does not score. Rebuilt from
`{folder}/`; one run each, so they say whether a game starts to learn, not how well it learns. Min entropy: worker
0's lowest policy entropy in the first 500k frames (uniform: ln of the number of actions). Frames/s: the probes
shared the machine with other work part of the time, so they are not speed measurements (BENCHMARKS.md has those).

"""


def probe_table(folder: str, shown: str) -> str:
    """The probes' table (``folder``, named ``shown`` on the page): per game the evaluator's mean at 0.5M-2M frames
    beside the random score."""
    rows = ["| game | actions: uniform entropy | frames/s | return @ 0.5M | @ 1M | @ 1.5M | @ 2M | best mean of 10 "
            "| min entropy | random (Mnih 2015) | code |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for game in GAMES:
        out = os.path.join(folder, game)
        dirs = run_dirs(out) if os.path.isdir(out) else []
        if not dirs:
            rows.append(f"| {game} | | | not probed | | | | | | {REFERENCE[game][0]:,.1f} | |")
            continue
        meta = load_json(os.path.join(out, "sweep.json"))
        known = {r.get("run"): r for r in meta.get("runs", []) if isinstance(r, dict)}
        run = load_run(dirs[0], known.get(os.path.basename(dirs[0]), {}))
        record = known.get(os.path.basename(dirs[0]), {})
        actions = record.get("num_actions") or ACTIONS[game]
        returns = [number(return_at(run["curve"], budget, run["frames"])) for budget in PROBE_BUDGETS]
        fps = run["frames"] / run["seconds"] if run["frames"] and run["seconds"] else None
        rows.append(f"| {game} | {actions}: {math.log(actions):.2f} | {number(fps, '{:,.0f}')} | "
                    + " | ".join(returns) + f" | {number(record.get('best_mean_return'))} | "
                    f"{number(record.get('min_entropy'), '{:.2f}')} | {REFERENCE[game][0]:,.1f} | "
                    f"`{(meta.get('commit') or 'not recorded')[:7]}` |")
    return PROBES.format(folder=shown) + "\n".join(rows) + "\n"


VARIANTS = """## Beyond the defaults: a game with a flag added

The same measurements for runs that add a flag to the defaults (rebuilt from `{folder}/`, each folder's
`sweep.md` and `sweep.png` its curves): levers that BENCHMARKS.md probed on one game, taken to 20M frames, and the
defaults' runs from before the learning rate fell from 10M frames by default, of the games re-run since (their flags,
as today's defaults would need them: `--lr-decay none` for a constant rate, `--lr-decay 18000000 20000000` for the
fall over the last tenth). They are not the defaults' results and the table above does not count
them; below the table, the seven-game medians with each such row in place of the defaults' row of its game.

"""


def variant_section(games: list[dict], variants: list[dict], shown: str) -> str:
    """The rows of runs with flags beyond the defaults, and the seven-game medians with each in place of its game's
    defaults row; empty without such runs."""
    if not variants:
        return ""
    lines = [rows(variants), ""]
    for variant in variants:
        swapped = [variant if g["game"] == variant["game"] else g for g in games]
        parts = medians(swapped)
        if parts:
            lines.append(f"- With {label(variant)} in place of the defaults' {variant['game']} row, the median "
                         f"human-normalised score at 20M frames: {parts}.")
    return (VARIANTS.format(folder=shown) + "\n".join(lines) + "\n\n### Their runs\n\n" + provenance(variants)
            + "\n\n")


def provenance(games: list[dict]) -> str:
    lines = []
    for g in (g for g in games if g["runs"]):
        lines.append(f"- **{label(g)}**: `{g['command']}`; code `{g['commit'] or 'not recorded'}`; "
                     f"{g['machine'] or 'machine not recorded'}; {g['defaults'] or 'defaults not recorded'}"
                     + (f". {g['note']}" if g["note"] else ""))
    return "\n".join(lines) if lines else "- no runs yet"


def figure(games: list[dict], path: str) -> None:
    """Every run's evaluator running mean (solid) and training games' mean (dashed) against frames, a panel per
    game."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    fig, axes = plt.subplots(2, 4, figsize=(16, 7))
    for ax, g in zip(axes.flat, games):
        for run in (r for r in g["runs"] if r["curve"]):
            line, = ax.plot(run["curve"]["frames"], run["curve"]["mean_return"], label=f"seed {run['seed']}")
            training = run["training_curve"]
            if training:
                ax.plot(training["frames"], training["mean_return"], color=line.get_color(), linestyle="--",
                        linewidth=1, label=f"seed {run['seed']}: training games")
        random, _ = REFERENCE[g["game"]]
        ax.axhline(random, color="gray", linestyle=":", linewidth=1, label="random")
        ax.set_title(g["game"])
        ax.xaxis.set_major_formatter(EngFormatter())
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="x-small")
    axes.flat[-1].axis("off")
    fig.supxlabel("frames")
    fig.supylabel(f"return: evaluator's running mean (solid), last {TRAINING_WINDOW} training games' (dashed)")
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, dpi=100, format="png")
    plt.close(fig)
    atomic_write_bytes(path, image.getvalue())  # a figure cut short never replaces the committed one


INTRO = """# Atari: the seven games rl_a3c_pytorch shipped

How `python main.py --env <Game>NoFrameskip-v4` learns with no other flag (the defaults of the machine it runs on),
each game to 20M frames through `python -m tools.sweep`. Rebuilt from the committed runs in `{folder}/` by
`python docs/atari_table.py`; the figure is `{figure}`. Every run here had 2 cores, so 2 workers, as the defaults
now start on any machine: with 16 workers (the GPU defaults before), Breakout learned nothing in 20M frames, and 8
killed most of the network's units in a probe as 16 did (BENCHMARKS.md, "Many workers kill the network's units on
Breakout").

Today's defaults let the learning rate fall linearly to 0 from 10M frames to `--max-frames` (over its last half here;
README, "The learning rate's fall"). The "learning rate" column says, from each run's `args.json`, whether a row's runs
had that fall or a constant rate (an earlier default): a constant-rate row's 10M-frame columns are today's, and its
20M-frame columns may be low or high by what the fall moves (BENCHMARKS.md, "How long the fall", measures that on the
games re-run with it). The earlier runs of the games re-run with today's fall (a constant rate; the fall over the last
tenth, the defaults in between) are rows of "Beyond the defaults" below.

How the scores are taken: the evaluator's greedy policy (the argmax of the policy) plays whole games (all lives, raw
points, 1-30 no-op starts, games cut at `--max-episode-length` 10,000 agent steps), pressing FIRE after a lost life
in the games that wait for it, as training's reset does; a return at N frames is the evaluator's running mean (over
`--score-window`, 10 games) at its last game at or before N frames of training. Training games: the mean of the last
100 games the workers finished at or before N frames (`games.csv`: the sampled policy, whole games across lost lives,
raw points, the same no-op starts), the nearest to how RL Zoo evaluates (`--eval-stochastic` makes the evaluator play
so too; these runs keep the greedy default). Where there are several runs a cell is "median / worst".
Human-normalised: `(score - random) / (human - random)` with the random and human scores of Mnih et al. (2015). RL
Zoo's A2C and PPO (stable-baselines3's rl-baselines3-zoo, `benchmark.md`) trained 10M agent steps, i.e. **40M
frames**, twice our budget, and evaluate the stochastic policy. Why a game falls short (entropy, value loss, game
lengths): BENCHMARKS.md's section of that game ("Breakout on the defaults with a constant rate", "The learning rate
falling to 0 over the last 2M frames", "How long the fall", "Asteroids to 20M frames", "MsPacman to 20M frames",
"Seaquest to 20M frames": its sub never surfaces for air, so every life ends when the first tank is empty).

"""


def refusal(argv: list[str], folder: str, page: str) -> str | None:
    """Why the command line cannot make the page (None: it can): a flag, a FOLDER holding none of the seven games,
    a PAGE that is some other file (the page is rewritten whole: only one this script wrote is replaced)."""
    flags = [a for a in argv if a.startswith("-")]
    if flags:
        return f"{flags[0]}: no such flag (usage: python docs/atari_table.py [FOLDER PAGE [PROBES [VARIANTS]]])"
    if not any(os.path.isdir(os.path.join(folder, game)) for game in GAMES):
        return f"{folder} holds none of the seven games' folders ({', '.join(GAMES)}): not a folder of runs"
    if os.path.exists(page):
        try:
            with open(page) as f:
                ours = f.readline() == INTRO.splitlines(keepends=True)[0]
        except (OSError, UnicodeDecodeError):
            ours = False
        if not ours:
            return f"{page} exists and is not a page this script wrote: it is kept; give another PAGE"
    return None


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    folder = argv[0] if argv else os.path.join(HERE, "atari_runs")
    page = argv[1] if len(argv) > 1 else os.path.join(HERE, "ATARI.md")
    problem = refusal(argv, folder, page)
    if problem:
        print(f"atari_table.py: error: {problem}", file=sys.stderr)
        return 2
    stem = os.path.splitext(os.path.basename(page))[0].lower()  # ATARI.md -> atari_runs.png beside it
    png = os.path.join(os.path.dirname(page), stem + "_runs.png")
    probes = argv[2] if len(argv) > 2 else os.path.join(HERE, "atari_probes")
    beyond = argv[3] if len(argv) > 3 else os.path.join(HERE, "atari_variants")
    games = [load_game(os.path.join(folder, game), game) for game in GAMES]
    variants = load_variants(beyond)
    rel = os.path.relpath
    text = (INTRO.format(folder=rel(folder, os.path.dirname(page)), figure=rel(png, os.path.dirname(page)))
            + table(games) + "\n## The runs\n\n" + provenance(games) + "\n\n"
            + f"![Every run of the seven games]({rel(png, os.path.dirname(page))})\n\n"
            + variant_section(games, variants, rel(beyond, os.path.dirname(page)))
            + probe_table(probes, rel(probes, os.path.dirname(page))))
    figure(games, png)
    atomic_write_text(page, text)
    print(text)
    print(json.dumps({"page": page, "figure": png}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
