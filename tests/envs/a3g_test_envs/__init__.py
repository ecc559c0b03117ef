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


class OddActions(gym.Env):
    """A one-step task whose action space a3g refuses (``space``: ``unbounded`` a Box with infinite bounds,
    ``multidiscrete``, ``matrix`` a Box of shape [2, 2]), for the one-line answers."""

    SPACES = {"unbounded": lambda: gym.spaces.Box(-np.inf, np.inf, (2,), dtype=np.float32),
              "multidiscrete": lambda: gym.spaces.MultiDiscrete([2, 3]),
              "matrix": lambda: gym.spaces.Box(-1.0, 1.0, (2, 2), dtype=np.float32)}

    def __init__(self, space: str = "unbounded"):
        self.observation_space = gym.spaces.Box(0.0, 1.0, (3,), dtype=np.float32)
        self.action_space = self.SPACES[space]()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, dtype=np.float32), {}

    def step(self, action):
        return np.zeros(3, dtype=np.float32), 0.0, True, False, {}


for _space in OddActions.SPACES:
    gym.register(f"OddActions-{_space}-v0", entry_point=OddActions, kwargs={"space": _space}, max_episode_steps=5)


class InsideBounds(gym.Env):
    """Ten steps in a Box of [-2, 2]^2 whose reward is 1 for an action strictly inside the bounds and 0 for one on
    a bound: a game's return counts the steps whose action was not clipped (``--box-actions``)."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(0.0, 1.0, (3,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-2.0, 2.0, (2,), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, dtype=np.float32), {}

    def step(self, action):
        inside = bool(np.all(np.abs(np.asarray(action)) < 2.0))
        return np.zeros(3, dtype=np.float32), float(inside), False, False, {}


gym.register("InsideBounds-v0", entry_point=InsideBounds, max_episode_steps=10)
