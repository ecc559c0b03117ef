"""A package of the user's own, as a test sees one: importing it registers ``Corridor-v0`` with gymnasium, so that
``--env a3g_test_envs:Corridor-v0`` (gymnasium's module:id) or ``--gym-packages a3g_test_envs`` can train it."""

import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Walk right along a corridor of ``length`` cells: +1 and the end at the last cell, a step left of the first
    cell stays there. Observations are the cell, one-hot; at most ``4 * length`` steps."""

    def __init__(self, length: int = 5):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 1.0, (length,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)  # 0: left, 1: right
        self.cell = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.length, dtype=np.float32)
        obs[self.cell] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cell = 0
        return self._obs(), {}

    def step(self, action):
        self.cell = max(0, self.cell + (1 if int(action) == 1 else -1))
        done = self.cell == self.length - 1
        return self._obs(), float(done), done, False, {}


gym.register("Corridor-v0", entry_point=Corridor, max_episode_steps=20)
