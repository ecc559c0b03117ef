"""What the network's frames hold, game by game (docs/log/ppo.md, "Each frame centred"): over random play, each frame's
mean in [0, 1], its darkest value (the mean and the highest over the frames), the share of its pixels at that value,
and its std, as the pipeline gives them (crop, gray, 80x80, uint8). A darkest value above 0 on most of the pixels is
a uniform background that ``--frame-norm scale`` passes on as it is and ``--frame-norm darkest`` makes black.

    python docs/frame_stats.py [--steps 1000] [--games Pong Breakout ...]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from core.cli import OneLineParser  # noqa: E402
from envs.environment import ATARI_CONFIG, EnvSettings, env_conf_for, load_env_config, make_env  # noqa: E402

GAMES = ("Pong", "Breakout", "SpaceInvaders", "Seaquest", "BeamRider", "Asteroids", "MsPacman")


def frame_stats(game: str, steps: int, seed: int = 0) -> dict[str, float]:
    """The means over ``steps`` random agent steps of ``game`` (its NoFrameskip-v4 id, training episodes)."""
    env_id = f"{game}NoFrameskip-v4"
    env = make_env(EnvSettings(env_id, crop=env_conf_for(env_id, load_env_config(ATARI_CONFIG)), frame_norm="scale"))
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    means, darkest, share, stds = [], [], [], []
    for _ in range(steps):
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        frame = np.asarray(obs)[-1].astype(np.float32) / 255.0
        means.append(frame.mean())
        darkest.append(frame.min())
        share.append((frame == frame.min()).mean())
        stds.append(frame.std())
        if terminated or truncated:
            env.reset()
    env.close()
    return {"mean": float(np.mean(means)), "darkest": float(np.mean(darkest)), "darkest_max": float(np.max(darkest)),
            "share": float(np.mean(share)), "std": float(np.mean(stds))}


def main() -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000, help="random agent steps per game (default: 1000)")
    parser.add_argument("--games", nargs="+", default=list(GAMES), help="Atari games, without NoFrameskip-v4")
    args = parser.parse_args()
    print("| game | mean | darkest | darkest, highest | pixels at the darkest | std |\n|---|---|---|---|---|---|")
    for game in args.games:
        s = frame_stats(game, args.steps)
        print(f"| {game} | {s['mean']:.3f} | {s['darkest']:.3f} | {s['darkest_max']:.3f} | {s['share']:.0%} "
              f"| {s['std']:.3f} |")


if __name__ == "__main__":
    main()
