"""A batch of environments stepped together, for A3G's workers and IMPALA's actors alike."""

import argparse
import time

import gymnasium as gym
import numpy as np

from envs.environment import EnvSettings, is_atari, make_env


def training_rewards(args: argparse.Namespace) -> dict:
    """``RolloutEnvs``' keywords for ``--reward-clipping``: ``abs_one`` clips, ``normalize`` scales by the running
    standard deviation of the discounted return (with ``--gamma``)."""
    return {"clip_rewards": args.reward_clipping == "abs_one",
            "normalize_gamma": args.gamma if args.reward_clipping == "normalize" else None}


class RolloutEnvs:
    """A worker's environments, stepped together; observations are written into rows of a caller's ``[B, ...]``
    array (a row of the rollout buffer), so stepping allocates nothing.

    The rewards it returns are for learning: clipped to [-1, 1] (``clip_rewards``), or divided by a running
    standard deviation of each environment's discounted return (``normalize_gamma``: gymnasium's
    ``NormalizeReward``, SB3's ``VecNormalize(norm_reward=True)``; its statistics are this process's, begun afresh
    with it), or as the game gives them. Finished games (``take_finished``) keep the game's own points."""

    def __init__(self, settings: EnvSettings | None, count: int, seed: int, clip_rewards: bool,
                 envs: list[gym.Env] | None = None, normalize_gamma: float | None = None):
        self.envs = envs if envs is not None else [make_env(settings, train=True) for _ in range(count)]
        if normalize_gamma is not None:  # outside RecordEpisodeStatistics: games are scored in the game's points
            self.envs = [gym.wrappers.NormalizeReward(env, gamma=normalize_gamma) for env in self.envs]
        self.clip_rewards = clip_rewards
        self.atari = settings is not None and is_atari(settings.env_id)
        self.first_obs = np.stack([env.reset(seed=seed + 10007 * j)[0] for j, env in enumerate(self.envs)])
        self.rewards = np.zeros(count, dtype=np.float32)
        self.dones = np.zeros(count, dtype=np.float32)
        self.truncated = np.zeros(count, dtype=bool)  # cut by a time limit, not ended by the game
        self.final_obs = np.zeros_like(self.first_obs)  # their last observation, to bootstrap from
        self.finished: list[tuple[float, int]] = []  # (return, length) of the games finished since take_finished
        self.step_seconds = 0.0  # spent in step() so far: the environments' share of a worker's time

    def step(self, actions: np.ndarray, obs_out: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Step every env, writing observations into ``obs_out``; returns (rewards, dones, finished games).
        Done envs are reset in place: their row holds the first observation of the next episode; for envs cut by
        a time limit (``self.truncated``) the observation they were cut at is in ``self.final_obs``."""
        started = time.perf_counter()
        games = 0
        for j, env in enumerate(self.envs):
            # an integer action, or a row of floats for a Box (core/policy.py)
            obs, reward, terminated, truncated, info = env.step(actions[j] if actions.ndim > 1 else int(actions[j]))
            if "episode" in info:  # gymnasium's RecordEpisodeStatistics: a whole game ended, with its own points
                self.finished.append((float(info["episode"]["r"]), int(info["episode"]["l"])))
            done = terminated or truncated
            self.truncated[j] = truncated and not terminated
            if done:
                # a lost life ends the learner's episode; only a real game over counts as a finished game
                games += 1 if not self.atari or env.get_wrapper_attr("game_over") else 0
                if self.truncated[j]:
                    self.final_obs[j] = obs
                obs, _ = env.reset()
            obs_out[j] = obs
            self.rewards[j] = max(-1.0, min(1.0, reward)) if self.clip_rewards else reward
            self.dones[j] = done
        self.step_seconds += time.perf_counter() - started
        return self.rewards, self.dones, games

    def take_finished(self) -> list[tuple[float, int]]:
        """The (return, length) of each game finished since the last call, for the training-episode curves."""
        finished, self.finished = self.finished, []
        return finished
