"""A random policy's score: whole games with uniformly random actions, through a3g's own preprocessing (the
evaluator's view: full games, raw rewards), so that a trained agent's evaluator mean has a baseline.

    python docs/random_baseline.py --env Airstriker-Genesis-v0 --games 30
    python docs/random_baseline.py --env Airstriker-Genesis-v0 --games 30 --state states/airstriker/step240.state
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from core.cli import OneLineParser, positive_int, random_seed  # noqa: E402
from core.errors import BAD_INPUT_ERRORS, EXIT_BAD_INPUT  # noqa: E402
from envs.environment import EnvSettings, is_retro, make_env, skip_rate_unread  # noqa: E402

PROG = "python docs/random_baseline.py"


def main() -> int:
    p = OneLineParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="Airstriker-Genesis-v0")
    p.add_argument("--games", type=positive_int, default=30)
    p.add_argument("--skip-rate", type=positive_int, default=4)
    p.add_argument("--seed", type=random_seed, default=1)
    p.add_argument("--state", nargs="+", default=None, help="retro games: start states, played in turn (as the "
                   "evaluator's --eval-state)")
    args = p.parse_args()
    try:
        if args.state is not None and not is_retro(args.env):
            raise ValueError(f"--state is for stable-retro games; {args.env} is not one")
        if args.skip_rate != 4 and (why := skip_rate_unread(args.env)) is not None:
            raise ValueError(why)
        retro = None
        if is_retro(args.env):
            from envs import retro_env

            retro = retro_env.resolve(args.env, args.state)  # the games are the evaluator's: its states, in turn
        env = make_env(EnvSettings(args.env, args.skip_rate, 10000, None, 84, 4, retro), train=False)
    except BAD_INPUT_ERRORS as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    env.action_space.seed(args.seed)
    scores, lengths = [], []
    for game in range(args.games):
        env.reset(seed=args.seed + game)
        score, length, done = 0.0, 0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            score, length, done = score + reward, length + 1, terminated or truncated
        scores.append(score)
        lengths.append(length)
        print(f"game {game + 1}: score {score:g}, {length} steps", flush=True)
    env.close()
    print(json.dumps({"env": args.env, "state": args.state, "games": args.games, "mean": float(np.mean(scores)),
                      "std": float(np.std(scores)), "median": float(np.median(scores)),
                      "mean_length": float(np.mean(lengths))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
