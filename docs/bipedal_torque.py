"""Where a BipedalWalker model's points go: greedy games (the evaluator's policy: the Gaussian's mean, clipped by the
environment) with each game's return, length, the motors' torque cost and how often the mean lies at or beyond a
bound.

    python docs/bipedal_torque.py runs/BipedalWalker-v3__1__.../best_model.pt --games 10

BipedalWalker-v3 pays ``130 / 30`` points per unit of forward progress (about 344 for the whole course) and charges
``0.00035 * 80 * sum_i min(|a_i|, 1)`` per step for the four motors' torque (gymnasium's ``bipedal_walker.py``), so a
game's return is roughly its progress less the torque cost; an action dimension whose mean lies beyond a bound
plays that bound at full torque.
"""

import argparse
import os
import sys

import gymnasium as gym
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gym_eval  # noqa: E402
from core.cli import OneLineParser  # noqa: E402
from core.errors import BAD_INPUT_ERRORS  # noqa: E402
from core.play import play_game  # noqa: E402
from envs.environment import make_env  # noqa: E402

TORQUE_COST = 0.00035 * 80  # per unit of |action| and motor, per step (gymnasium's bipedal_walker.py)


class ActionLedger(gym.Wrapper):
    """Outside the environment's clip, so it sees the policy's actions as played (the greedy mean): per game, the
    torque cost, how many action dimensions were at or past a bound, and the last reward (a fall's -100)."""

    def reset(self, **kwargs):
        self.torque, self.at_bound, self.dims, self.last_reward = 0.0, 0, 0, 0.0
        return self.env.reset(**kwargs)

    def step(self, action):
        magnitude = np.abs(np.asarray(action, dtype=np.float64))
        self.torque += TORQUE_COST * float(np.minimum(magnitude, 1.0).sum())
        self.at_bound += int((magnitude >= 1.0).sum())
        self.dims += magnitude.size
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.last_reward = float(reward)
        return obs, reward, terminated, truncated, info


def main() -> int:
    p = OneLineParser(prog="python docs/bipedal_torque.py", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a BipedalWalker model file or checkpoint")
    p.add_argument("--games", type=int, default=10)
    p.add_argument("--seed", type=int, default=1000, help="game i starts from seed + i")
    args = p.parse_args()
    try:
        eval_args = gym_eval.build_parser().parse_args(["--model-path", args.model, "--env", "BipedalWalker-v3"])
        _, _, settings, model, _ = gym_eval.load_model_file(eval_args)
    except BAD_INPUT_ERRORS as exc:
        print(f"bipedal_torque.py: {exc}", file=sys.stderr)
        return 2
    model.eval()
    env = ActionLedger(make_env(settings, train=False))
    rows = []
    for game in range(args.games):
        ret, steps = play_game(env, model, "cpu", settings.max_episode_length, seed=args.seed + game)
        rows.append((ret, steps, env.torque, env.at_bound / env.dims, env.last_reward == -100.0))
        ret, steps, torque, share, fell = rows[-1]
        print(f"game {game + 1}: return {ret:6.1f} in {steps:4d} steps, torque cost {torque:5.1f}, "
              f"mean at a bound in {share:.0%} of the action dimensions{', fell' if fell else ''}", flush=True)
    standing = np.array([row[:4] for row in rows if not row[4]])
    print(f"{len(rows) - len(standing)} of {len(rows)} games fell", end="")
    if len(standing):
        ret, steps, torque, share = np.median(standing, 0)
        print(f"; the others' median: return {ret:.1f} in {steps:.0f} steps, torque cost {torque:.1f}, "
              f"mean at a bound in {share:.0%}", end="")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
