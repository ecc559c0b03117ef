"""The seven Atari games' results page and figures, rebuilt from the committed runs.

    python docs/atari_table.py     # reads docs/atari_ppo_runs/ (today's defaults: PPO on a CPU) and docs/atari_runs/
                                   # (--objective pg), writes docs/results/atari.md and a figure per folder
    python docs/atari_table.py FOLDER PAGE [PROBES [VARIANTS [PG]]]  # other folders of runs, another page (and
                                   # probes, runs with flags beyond pg's defaults, and pg's runs)

A PAGE that exists is replaced only if this script wrote it (its first line); page and figures are written whole. A
figure is its folder's name with ``.png`` (docs/atari_runs/ -> docs/atari_runs.png), linked from the page by a
relative path. A PG folder that holds none of the seven games leaves its section out.

FOLDER/<Game>/ is one game's ``tools.sweep`` output (run1, run2, ... each with args.json, summary.json and
progress.csv; sweep.json with the commands, the machine, the commit and an optional ``note``). For each of
rl_a3c_pytorch's seven games the page gives: the runs found; the evaluator's running mean at 10M and 20M frames
(median and worst of the runs that got that far: the last game at or before the budget, as ``tools.sweep`` reads it);
the mean of the last 100 training games at or before 10M and 20M frames (``games.csv``: the workers' sampled policy,
as RL Zoo evaluates); the median wall-clock and frames/s; the human-normalised score of both medians at 20M frames,
``(score - random) / (human - random)`` with Mnih et al. (2015)'s random and human scores; and RL Zoo's A2C and PPO
scores (10M agent steps = 40M frames, their ``benchmark.md``), with both medians also taken over the same games only.
A game without runs has a row that says so. FOLDER's runs (today's defaults) make the first table, PG's
(``--objective pg``, the defaults before PPO) the second, and a line compares the two tables' medians over the games
both have at 20M frames. Runs that add a flag to pg's defaults (docs/atari_variants/<name>/, the game and flags from
the sweep's ``main_flags``) get rows of their own in a section below, with the seven-game medians as they would be
with each in place of its game's row of pg's table. Below each table a short footnote gives each row's runs, code
(short hashes, with the commits' dates where this checkout's git knows them), machine (CPU and cores) and a link to
its folder; the full commands, machine and notes stay in each folder's sweep.json.
"""

import functools
import io
import json
import math
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LOG = os.path.join(HERE, "log")  # the experiment log's pages, linked from the page
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
    return {"game": game, "folder": out, "runs": runs, "at": at, "training": training, "counted": counted,
            "schedule": "; ".join(dict.fromkeys(schedules)),  # the distinct ones, in the runs' order
            "commit": meta.get("commit"),
            "machine": meta.get("machine"), "date": meta.get("date"),  # the full record stays in sweep.json
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


def against(ppo: list[dict], pg: list[dict]) -> str:
    """The two tables' medians over the games both have at 20M frames (a game in one table only would make the
    medians compare sets of games as much as objectives); empty when no game has both. Both lists are in GAMES'
    order."""
    parts = []
    for kind, name in (("at", "the evaluator's"), ("training", "the training games'")):
        both = [(ours["game"], ours[kind][BUDGETS[1]][0], theirs[kind][BUDGETS[1]][0]) for ours, theirs in zip(ppo, pg)]
        both = [(game, a, b) for game, a, b in both if a is not None and b is not None]
        if both:
            ours = statistics.median(normalised(game, a) for game, a, _ in both)
            theirs = statistics.median(normalised(game, b) for game, _, b in both)
            parts.append(f"{name} **{ours:.2f}** against **{theirs:.2f}** ({', '.join(game for game, _, _ in both)})")
    if not parts:
        return ""
    return ("PPO against pg, the median human-normalised score at 20M frames over the games both tables have there: "
            + "; ".join(parts) + ".\n\n")


PROBE_BUDGETS = (500_000, 1_000_000, 1_500_000, 2_000_000)

PROBES = """## Probes: 2M frames of each game

One short run of each game with the defaults before the 20M-frame runs, to find what breaks (a crop that cuts the
playfield, FIRE and life handling, a game that never ends, an evaluator that does not score); one run each, so they
say whether a game starts to learn, not how well ([what they found]({log}#probes-of-2m-frames)):

```
python -m tools.sweep --runs 1 --frames 2000000 --out sweeps/probes/<Game> -- --env <Game>NoFrameskip-v4
```

Min entropy: worker 0's lowest policy entropy in the first 500k frames (uniform: ln of the number of actions).
Frames/s: the probes shared the machine with other work part of the time, so they are not speed measurements.

"""


def probe_table(folder: str, page_dir: str) -> str:
    """The probes' table (the runs in ``folder``, linked from a page in ``page_dir``): per game the evaluator's mean
    at 0.5M-2M frames beside the random score, and a line of links to each game's folder."""
    rows = ["| game | actions: uniform entropy | frames/s | return @ 0.5M | @ 1M | @ 1.5M | @ 2M | best mean of 10 "
            "| min entropy | random (Mnih 2015) | code |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    links = []
    for game in GAMES:
        out = os.path.join(folder, game)
        dirs = run_dirs(out) if os.path.isdir(out) else []
        if dirs:
            shown = os.path.relpath(out, page_dir).replace(os.sep, "/")
            links.append(f"[{game}]({shown}/sweep.md)" if os.path.exists(os.path.join(out, "sweep.md"))
                         else f"[{game}]({shown}/)")
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
    records = ("\nRecords (each folder's `sweep.json` holds the command, machine and code): " + ", ".join(links)
               + ".\n") if links else ""
    return PROBES.format(log=log_link(page_dir)) + "\n".join(rows) + "\n" + records


VARIANTS = """## Beyond pg's defaults: a game with a flag added

The same columns for runs of A3C's policy gradient (`--objective pg`) that add flags to its defaults: levers probed
on one game and taken to 20M frames, and earlier runs of the games re-run since, with the flags pg's defaults need to
repeat them (`--lr-decay none`: a constant rate; `--lr-decay 18000000 20000000`: the fall over the last tenth, the
default before the fall from 10M frames). The tables above count none of them; below this table, the seven-game
medians with each row in place of its game's row of pg's table. Their history: [the learning rate's fall]({fall}),
[Breakout]({log}#breakout), [SpaceInvaders]({si}).

"""


def variant_section(games: list[dict], variants: list[dict], page_dir: str) -> str:
    """The rows of runs with flags beyond pg's defaults, and the seven-game medians with each in place of its game's
    row of ``games`` (pg's table; no medians without one); empty without such runs."""
    if not variants:
        return ""
    lines = [rows(variants), ""]
    for variant in variants:
        swapped = [variant if g["game"] == variant["game"] else g for g in games]
        parts = medians(swapped)
        if parts:
            lines.append(f"- With {label(variant)} in place of pg's {variant['game']} row, the median "
                         f"human-normalised score at 20M frames: {parts}.")
    intro = VARIANTS.format(log=log_link(page_dir), fall=log_link(page_dir, "atari-lr-fall.md"),
                            si=log_link(page_dir, "atari-spaceinvaders.md"))
    return intro + "\n".join(lines) + "\n\n" + footnote(variants, page_dir) + "\n"


def log_link(page_dir: str, page: str = "atari.md") -> str:
    """The experiment log's page, relative to the results page."""
    return os.path.relpath(os.path.join(LOG, page), page_dir).replace(os.sep, "/")


HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")  # a commit's hash, long or short (a letter in it)
CPU = re.compile(r", ([^,;]+), (\d+) of \d+ cores usable(?:, (\d+) CUDA GPU)?")  # tools.sweep's machine line


@functools.lru_cache(maxsize=None)
def commit_date(commit: str) -> str | None:
    """The commit's date (YYYY-MM-DD) from this checkout's git, or None where git does not know it."""
    try:
        done = subprocess.run(["git", "-C", HERE, "show", "-s", "--format=%cs", commit, "--"], capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    date = done.stdout.strip().splitlines()
    return date[0] if done.returncode == 0 and date and re.fullmatch(r"\d{4}-\d\d-\d\d", date[0]) else None


def short_code(commit: str | None) -> str:
    """The commits of sweep.json's ``commit`` (one hash, or a sentence naming each run's) as short hashes, with the
    range of their dates where git knows them."""
    hashes = list(dict.fromkeys(h[:7] for h in HASH.findall(commit or "")))
    if not hashes:
        return f"code `{commit}`" if commit and len(commit) <= 40 else "code: see sweep.json"
    dates = sorted(d for d in map(commit_date, hashes) if d)
    when = f" ({dates[0]})" if dates and dates[0] == dates[-1] else f" ({dates[0]} to {dates[-1]})" if dates else ""
    return "code " + ", ".join(f"`{h}`" for h in hashes) + when


def short_machine(machine: str | None) -> str:
    """The CPUs (and GPUs) of sweep.json's ``machine`` line, without the platform string: "AMD EPYC, 2 cores"."""
    found = []
    for cpu, cores, gpus in CPU.findall(machine or ""):
        cpu = re.sub(r"\((?:R|TM)\)|\s*\([^)]*\)|\s*@.*|\s+(?:Processor|CPU)\b", "", cpu).strip()
        found.append(f"{cpu}, {cores} cores" + (f", {gpus} GPU(s)" if gpus else ""))
    found = list(dict.fromkeys(found))
    if found:
        return "; ".join(found)
    return machine if machine and len(machine) <= 60 else "machine: see sweep.json"


def footnote(games: list[dict], page_dir: str) -> str:
    """Each row's runs, code, machine and folder in a line (the full record: the folder's sweep.json)."""
    lines = []
    for g in (g for g in games if g["runs"]):
        folder = os.path.relpath(g["folder"], page_dir).replace(os.sep, "/")
        shown = "/".join(folder.split("/")[-2:])
        date = f"; run {g['date']}" if g.get("date") else ""
        target = f"{folder}/sweep.md" if os.path.exists(os.path.join(g["folder"], "sweep.md")) else f"{folder}/"
        lines.append(f"- {label(g)}: {len(g['runs'])} run{'s' if len(g['runs']) > 1 else ''}; "
                     f"{short_code(g['commit'])}{date}; {short_machine(g['machine'])}; [{shown}/]({target})")
    if not lines:
        return ""
    return ("Runs (each folder's `sweep.json` holds the full commands, machine and notes, its `sweep.md` and "
            "`sweep.png` the curves):\n\n" + "\n".join(lines) + "\n")


def figure(games: list[dict], path: str) -> None:
    """Every run's evaluator running mean (solid) and training games' mean (dashed) against frames, a panel per
    game."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    fig, axes = plt.subplots(2, 4, figsize=(16, 7))
    for ax, g in zip(axes.flat, games):
        ax.set_title(g["game"])
        if not any(r["curve"] for r in g["runs"]):
            ax.text(0.5, 0.5, "not run yet", ha="center", va="center", transform=ax.transAxes, color="gray")
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        for run in (r for r in g["runs"] if r["curve"]):
            line, = ax.plot(run["curve"]["frames"], run["curve"]["mean_return"], label=f"seed {run['seed']}")
            training = run["training_curve"]
            if training:
                ax.plot(training["frames"], training["mean_return"], color=line.get_color(), linestyle="--",
                        linewidth=1, label=f"seed {run['seed']}: training games")
        random, _ = REFERENCE[g["game"]]
        ax.axhline(random, color="gray", linestyle=":", linewidth=1, label="random")
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

How A3G learns the seven Atari games of rl_a3c_pytorch with the defaults and no other flag, each game to 20M frames
on a 2-core CPU, so with 2 workers, the count the defaults pick for A3G on Atari on any machine
([why 2]({log}#how-many-workers)). On a CPU the defaults' objective is PPO's clipped surrogate with sample reuse
([why]({ppo}#the-default-objective-on-atari-ppo-against-pg)); the second table is A3C's policy gradient, the defaults
before PPO, which `--objective pg` gives:

```
python -m tools.sweep --runs 3 --frames 20000000 --final-eval 10 --out sweeps/atari/<Game> -- --env <Game>NoFrameskip-v4
python -m tools.sweep --runs 3 --frames 20000000 --final-eval 10 --out sweeps/atari-pg/<Game> -- --env <Game>NoFrameskip-v4 \\
    --objective pg
```

`python docs/atari_table.py` rebuilds this page and its figures from the committed runs, linked below each table.
Why each game ends where it does with pg (entropy, value loss, game lengths) is in the experiment log:
[Breakout]({log}#breakout), [SpaceInvaders]({si}),
[Asteroids, MsPacman, Pong and Seaquest]({log}#asteroids-mspacman-pong-seaquest) (Seaquest's sub never surfaces for
air), and [the learning rate's fall]({fall}).

## The defaults to 20M frames: PPO

"""

PG = """## A3C's policy gradient to 20M frames: `--objective pg`

The same games with the defaults of their commits, whose objective was `pg`, auto's pick then.

"""

COLUMNS = """## What the columns mean

- **learning rate**: the schedule in each run's `args.json`. Today's defaults let the rate fall linearly to 0 from
  10M frames to `--max-frames` ([why]({fall}#the-fall-from-10m-frames)); a "constant" row ran before that default, so
  its 10M-frame columns are today's and its 20M-frame columns are not (the fall could move them either way).
- **evaluator @ N frames**: the evaluator's running mean of 10 greedy games (`--score-window`) at its last game at or
  before N frames: whole games (all lives, raw points, 1-30 no-op starts, FIRE after a lost life where the game waits
  for it, cut at `--max-episode-length`, 10,000 agent steps).
- **training games @ N frames**: the mean of the last 100 games the workers finished at or before N frames
  (`games.csv`: the sampled policy, whole games, raw points), the nearer to how RL Zoo scores (`--eval-stochastic`
  makes the evaluator sample too; these runs keep the greedy default).
- **median / worst**: over the runs that reached N frames; a single number is one run.
- **wall-clock, frames/s**: the runs' medians. Some runs shared the machine for a while (their `sweep.json` note says
  so), so these are not speed measurements.
- **human-normalised**: `(score - random) / (human - random)` with Mnih et al. (2015)'s random and human scores, of
  both medians at 20M frames.
- **RL Zoo A2C, PPO**: stable-baselines3's rl-baselines3-zoo (`benchmark.md`), 10M agent steps, i.e. 40M frames
  (twice this budget), scoring the sampled policy; it publishes no MsPacman score.

"""


def holds_games(folder: str) -> bool:
    return any(os.path.isdir(os.path.join(folder, game)) for game in GAMES)


def figure_path(folder: str) -> str:
    """A folder of runs' figure: docs/atari_runs/ -> docs/atari_runs.png."""
    return os.path.normpath(folder) + ".png"


def section(games: list[dict], folder: str, page_dir: str, caption: str) -> str:
    """A table of the seven games, its medians, its figure and its footnote."""
    shown = os.path.relpath(os.path.abspath(figure_path(folder)), page_dir).replace(os.sep, "/")
    return (table(games) + "\n" + f"![Every run of the seven games, {caption}]({shown})\n\n"
            + footnote(games, page_dir) + "\n")


def refusal(argv: list[str], folder: str, page: str) -> str | None:
    """Why the command line cannot make the page (None: it can): a flag, a FOLDER holding none of the seven games,
    a PAGE that is some other file (the page is rewritten whole: only one this script wrote is replaced)."""
    flags = [a for a in argv if a.startswith("-")]
    if flags:
        return f"{flags[0]}: no such flag (usage: python docs/atari_table.py [FOLDER PAGE [PROBES [VARIANTS [PG]]]])"
    if not holds_games(folder):
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
    folder = argv[0] if argv else os.path.join(HERE, "atari_ppo_runs")
    page = argv[1] if len(argv) > 1 else os.path.join(HERE, "results", "atari.md")
    problem = refusal(argv, folder, page)
    if problem:
        print(f"atari_table.py: error: {problem}", file=sys.stderr)
        return 2
    probes = argv[2] if len(argv) > 2 else os.path.join(HERE, "atari_probes")
    beyond = argv[3] if len(argv) > 3 else os.path.join(HERE, "atari_variants")
    pg_folder = argv[4] if len(argv) > 4 else os.path.join(HERE, "atari_runs")
    page_dir = os.path.dirname(os.path.abspath(page))
    links = {"log": log_link(page_dir), "fall": log_link(page_dir, "atari-lr-fall.md"),
             "si": log_link(page_dir, "atari-spaceinvaders.md"),
             "ppo": os.path.relpath(os.path.join(HERE, "results", "ppo.md"), page_dir).replace(os.sep, "/")}
    ppo = [load_game(os.path.join(folder, game), game) for game in GAMES]
    pg = [load_game(os.path.join(pg_folder, game), game) for game in GAMES] if holds_games(pg_folder) else None
    text = INTRO.format(**links) + section(ppo, folder, page_dir, "the defaults (PPO)")
    drawn = [(ppo, figure_path(folder))]
    if pg:
        text += against(ppo, pg) + PG + section(pg, pg_folder, page_dir, "`--objective pg`")
        drawn.append((pg, figure_path(pg_folder)))
    text += (COLUMNS.format(**links) + variant_section(pg or [], load_variants(beyond), page_dir)
             + probe_table(probes, page_dir))
    for games, png in drawn:
        figure(games, png)
    atomic_write_text(page, text)
    print(text)
    print(json.dumps({"page": page, "figures": [png for _, png in drawn]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
