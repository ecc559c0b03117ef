"""Sample Factory's Atari example with each training game logged: ``tools.versus`` starts it with the peer venv's
python (Sample Factory 2.1.1 installed there from the package registry), never with a3g's.

    python tools/sf_peer.py GAMES_DIR BreakoutNoFrameskip-v4 --experiment=sf --train_dir=DIR --device=cpu ...

It is ``python -m sf_examples.atari.train_atari --env=atari_breakout ...`` (Sample Factory's own Atari settings),
with one change: each environment is wrapped so that every finished game, raw points summed over all lives and its
emulator frames, is appended to ``GAMES_DIR/<worker>_<env>.monitor.csv`` in the Monitor format RL Zoo's runs write
(a ``#{"t_start": ...}`` line, then ``r,l,t``). Sample Factory itself logs only the mean of 100 games, per life.

The game's end comes from gymnasium's ``RecordEpisodeStatistics``, which Sample Factory's ``make_atari_env`` puts
directly on the raw game, below the frame skip, the life-loss and the reward-clipping wrappers. Sample Factory makes
the environments in processes it spawns: they get the factory through its environment registry, which it hands to
every process it starts, so the factory is a module-level function of this file, and the folder travels in the
environment variable GAMES.
"""

import json
import os
import sys
import time

GAMES = "A3G_PEER_GAMES"


def logged_atari_env(full_env_name, cfg, env_config, render_mode=None):
    """Sample Factory's Atari environment, each finished game appended to its worker's and env's file."""
    import ale_py  # noqa: F401  (ale-py >= 0.9 registers the ALE ids only when imported, in every process)
    from sf_examples.atari.atari_utils import make_atari_env

    env = make_atari_env(full_env_name, cfg, env_config, render_mode=render_mode)
    folder = os.environ.get(GAMES)
    if folder and env_config is not None:  # None: the throwaway env Sample Factory reads the spaces from
        name = f"{env_config.worker_index}_{env_config.vector_index}.monitor.csv"
        env = game_log_class()(env, os.path.join(folder, name), env.unwrapped.spec.id)
    return env


def game_log_class():
    """The wrapper class, made where it is used: it needs gymnasium from the peer's venv."""
    import gymnasium as gym
    import numpy as np

    class GameLog(gym.Wrapper):
        """Appends ``r,l,t`` (points, emulator frames, seconds since the file's start) for every game that ends."""

        def __init__(self, env, path, env_id):
            super().__init__(env)
            self.path, self.start = path, time.time()
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write("#" + json.dumps({"t_start": self.start, "env_id": env_id}) + "\nr,l,t\n")

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            game = info.get("episode")  # RecordEpisodeStatistics: set at the game's real end only
            if game is not None:
                points, frames = float(np.ravel(game["r"])[0]), int(np.ravel(game["l"])[0])
                with open(self.path, "a") as f:
                    f.write(f"{points:g},{frames},{time.time() - self.start:.3f}\n")
            return obs, reward, terminated, truncated, info

    return GameLog


def main(argv: list[str]) -> int:
    from sample_factory.envs.env_utils import register_env
    from sample_factory.train import run_rl
    from sf_examples.atari.atari_utils import ATARI_ENVS
    from sf_examples.atari.train_atari import parse_atari_args, register_atari_components

    folder, env_id, flags = argv[0], argv[1], argv[2:]
    names = [spec.name for spec in ATARI_ENVS if spec.env_id == env_id]
    if not names:
        print(f"sf_peer.py: {env_id} is not one of Sample Factory's Atari games", file=sys.stderr)
        return 2
    os.environ[GAMES] = os.path.abspath(folder)
    register_atari_components()
    register_env(names[0], logged_atari_env)
    return run_rl(parse_atari_args([f"--env={names[0]}", *flags]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
