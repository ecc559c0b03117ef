"""Super Mario Kart (SNES, USA): the race's rewards and end, from the RAM variables of a3g's own integration.

``envs/retro_integrations/SuperMarioKart-Snes-v0/data.json`` names the variables (addresses from the public RAM maps of
the game: Data Crystal's "Super Mario Kart/RAM map" and MrL314's SMK RAM map); stable-retro reads them every frame
and hands them over in ``info``. Its ``scenario.json`` ends the episode when the kart falls off the track (or into
lava or deep water) or the race is over, and rewards laps; ``MarioKartRules`` replaces that reward with a shaped one
that a scenario cannot express (checkpoint progress across the lap line, surfaces):

- +1 for each checkpoint passed forwards, -1 for each passed backwards (driving the wrong way costs what it
  gained, so no back-and-forth earns anything); crossing the lap line counts as one checkpoint, whichever way;
- ``OFF_ROAD_PENALTY`` for each agent step on an off-road surface (grass, dirt, sand, snow, mud, shallow water);
- ``FALL_PENALTY`` once, and the episode ends, when the kart falls off, into lava or into deep water;
- the episode ends when the lap counter shows the race finished (``FINISH_LAP``).

The values of ``FINISH_LAP`` and the surface codes come from those maps and have not been checked against the
game here (no ROM ships with a3g): ``python -m tools.retro_state`` prints the variables at the start of a race so that
a user with the ROM can check them.
"""

from typing import Any

import gymnasium as gym
import numpy as np

OFF_ROAD_SURFACES = {84, 86, 88, 90, 92, 94}  # 7E10AE: Mario Circuit / Choco Island off-road, snow, grass, ...
FELL_STATUSES = {4, 6, 8}  # 7E10A0: fallen off the edge, in lava, in deep water (0 on the ground, 2 in the air)
FINISH_LAP = 128 + 5  # 7E10C1 holds 128 + laps completed: five laps make a race
CHECKPOINT_REWARD = 1.0
OFF_ROAD_PENALTY = -0.05
FALL_PENALTY = -1.0


def checkpoints_passed(prev: dict[str, Any], info: dict[str, Any]) -> int:
    """Signed number of checkpoints passed between two readings: the lap counter decides at the lap line (where
    the checkpoint number wraps from the last one to 0, or back), the checkpoint number elsewhere."""
    laps = info["lap"] - prev["lap"]
    if laps:
        return laps
    return info["checkpoint"] - prev["checkpoint"]


def race_step(prev: dict[str, Any] | None, info: dict[str, Any]) -> tuple[float, bool]:
    """``(reward, race_over)`` for one agent step that went from RAM reading ``prev`` (None at the first step of an
    episode) to ``info``."""
    reward = 0.0
    if prev is not None:
        reward += CHECKPOINT_REWARD * checkpoints_passed(prev, info)
    if info["surface"] in OFF_ROAD_SURFACES:
        reward += OFF_ROAD_PENALTY
    fell = info["kart_status"] in FELL_STATUSES
    if fell:
        reward += FALL_PENALTY
    return reward, fell or info["lap"] >= FINISH_LAP


class MarioKartRules(gym.Wrapper):
    """The shaped reward and race end of ``race_step``, after the action repeat (one reading per agent step)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.prev = None

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        self.prev = None  # stable-retro's reset gives no RAM reading; the first step sets it
        return self.env.reset(**kwargs)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, _, terminated, truncated, info = self.env.step(action)
        reward, race_over = race_step(self.prev, info)
        self.prev = {k: info[k] for k in ("lap", "checkpoint")}
        return obs, reward, terminated or race_over, truncated, info
