"""Environments: ``make_env(env_id, ...)`` for any gymnasium id, with rl_a3c_pytorch's Atari preprocessing.

Three families of ids (``family``: atari, retro, classic), Atari's in two kinds:
- ``*NoFrameskip-v4`` (and other Atari ids whose emulator does not skip): the emulator steps one frame at a time and
  we add the classic pipeline: 1-30 no-op starts, action repeat of ``skip_rate`` frames with a max over the last two
  (flicker removal), life loss as episode end (training only), FIRE at reset where the game needs it (and, in whole
  games, after a lost life, as training's reset presses it), a per-game crop to gray uint8 frames, stacked
  (``frames.py``, shared with retro games; the network normalises them, or ``--frame-norm running`` does here).
- ``ALE/*-v5`` (and any Atari id whose emulator already skips frames): the same pipeline *without* our action repeat,
  since the emulator repeats the action itself (``--skip-rate`` sets that emulator frame-skip instead).
- stable-retro games (``Airstriker-Genesis-v0``, ``SuperMarioKart-Snes-v0``): ``retro_env.py`` owns them (discrete
  button sets, action repeat, game rules); they share Atari's frame pipeline (``frames.py``).
- Everything else (classic control such as ``CartPole-v1``; continuous control such as ``Pendulum-v1``, Box2D's
  ``BipedalWalker-v3`` and MuJoCo's ``HalfCheetah-v5``): observations as they come, cast to float32. A Box of
  actions is rescaled to ``[-1, 1]`` per dimension and clipped there (gymnasium's ``RescaleAction``,
  ``ClipAction``), the range ``core/policy.py``'s Gaussian acts in.

Frames are counted as emulator frames: ``frames_per_step(...)`` agent steps to frames for each family.
"""

import functools
import importlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from core.errors import BadInput
from envs import retro_env
from envs.frames import FORMER_FRAME_NORM, pixel_pipeline

ATARI_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "atari.json")  # per-game crops

try:  # ale-py registers the ALE/* and *NoFrameskip-v4 ids with gymnasium
    import ale_py

    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr for every game created
except ImportError:  # pragma: no cover - ale-py is a hard requirement, but classic control still works without it
    ale_py = None



# ---------------------------------------------------------------------------------------------------------------
# Looking up ids and configuration


def import_packages(names: Sequence[str]) -> None:
    """Import the modules that register environments with gymnasium on import (``--gym-packages``, or the
    ``module`` of ``--env module:Id``), in whichever process builds an environment."""
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the user's module: any error in it is theirs to fix, said in one line
            raise BadInput(f"cannot import {name!r}, which should register the environment ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else exc!r})") from None


def registered_id(env_id: str) -> str:
    """The id in gymnasium's registry: ``module:Id`` (gymnasium's syntax for an id that importing ``module``
    registers, as ``gym.make`` takes it) imports the module first and gives ``Id``; any other id is itself."""
    if ":" not in env_id:
        return env_id
    module, name = env_id.split(":", 1)
    import_packages([module])
    return name


def env_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """gymnasium's registration of ``env_id``; an unknown id is BadInput (one line), not gymnasium's traceback."""
    name = registered_id(env_id)  # a module that cannot be imported is BadInput already
    try:
        return gym.spec(name)
    except Exception as exc:  # gymnasium raises several error types (NameNotFound, VersionNotFound, ...)
        hint = " (an id that a module of yours registers: --env module:Id, or --gym-packages module)" \
            if ":" not in env_id else ""
        raise BadInput(f"unknown environment id {env_id!r} ({exc}){hint}") from None


def is_registered(env_id: str) -> bool:
    """Whether gymnasium knows ``env_id`` (retro games are not gymnasium ids)."""
    name = registered_id(env_id)
    try:
        gym.spec(name)
        return True
    except Exception:
        return False


def is_retro(env_id: str) -> bool:
    """A stable-retro game: not a gymnasium id, but a stable-retro (or a3g) integration, ROM imported or not."""
    return not is_registered(env_id) and retro_env.has_integration(env_id)


def check_env_id(env_id: str) -> None:
    """Unknown ids, and retro games whose ROM is not imported, fail here (one line each), before anything is built."""
    if is_retro(env_id):
        retro_env.check_rom(env_id)
    else:
        env_spec(env_id)


def family(env_id: str) -> str:
    """``atari``, ``retro``, ``classic`` (vector observations, discrete actions) or ``continuous`` (a Box of
    actions: Pendulum, Box2D, MuJoCo): what picks the preprocessing and the ``auto`` defaults."""
    if is_retro(env_id):
        return "retro"
    if is_atari(env_id):
        return "atari"
    return "continuous" if isinstance(action_space(env_id), gym.spaces.Box) else "classic"


@functools.lru_cache(maxsize=32)
def action_space(env_id: str) -> gym.Space:
    """The action space of a gymnasium id that is neither Atari nor retro (built once, then closed)."""
    try:
        env = gym.make(registered_id(env_id))
    except Exception as exc:
        raise BadInput(f"cannot create environment {env_id!r}: {exc}") from None
    space = env.action_space
    env.close()
    return space


def policy_kind(space: gym.Space) -> tuple[str, int]:
    """What a network acts with in ``space`` (checked by ``check_action_space``): ``("categorical", actions)`` for a
    Discrete space, ``("gaussian", dimensions)`` for a Box (``model.model_meta``'s ``policy`` and
    ``num_actions``)."""
    if isinstance(space, gym.spaces.Box):
        return "gaussian", int(space.shape[0])
    return "categorical", int(space.n)


def check_action_space(env_id: str, space: gym.Space) -> None:
    """a3g acts in a ``Discrete`` space (a categorical policy) or in a ``Box`` of one dimension with finite bounds
    (a diagonal Gaussian, rescaled to the bounds); anything else is BadInput, in one line."""
    if isinstance(space, gym.spaces.Discrete):
        return
    if not isinstance(space, gym.spaces.Box):
        raise BadInput(f"{env_id} has a {type(space).__name__} action space; a3g takes Discrete or Box actions")
    if len(space.shape) != 1:
        raise BadInput(f"{env_id} has Box actions of shape {list(space.shape)}; a3g takes a flat Box (one dimension)")
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise BadInput(f"{env_id} has Box actions with infinite bounds ({space.low.tolist()} to "
                       f"{space.high.tolist()}); a3g's Gaussian policy is rescaled to finite bounds")


def is_atari(env_id: str) -> bool:
    return not is_retro(env_id) and str(env_spec(env_id).entry_point).startswith("ale_py")


def emulator_frameskip(env_id: str) -> int | tuple[int, int]:
    """The frame-skip the emulator itself applies for this Atari id (1 for NoFrameskip ids)."""
    skip = env_spec(env_id).kwargs.get("frameskip", 1)
    return skip


def skip_rate_unread(env_id: str) -> str | None:
    """Why ``--skip-rate`` would change nothing for ``env_id`` (None where it is read): games that are not played
    from frames, and Atari ids whose emulator repeats each action a random 2-4 frames itself (``Pong-v4``)."""
    if not is_atari(env_id) and not is_retro(env_id):
        return f"--skip-rate is for Atari and retro games; {env_id} is not one"
    if is_atari(env_id) and not isinstance(emulator_frameskip(env_id), int):
        low, high = emulator_frameskip(env_id)
        return (f"--skip-rate cannot change {env_id}: its emulator repeats each action a random {low}-{high - 1} "
                f"frames itself (a NoFrameskip-v4 or v5 id takes the flag)")
    return None


def frames_per_step(env_id: str, skip_rate: int) -> int | float:
    """Emulator frames per agent step: the unit of every frame count in a3g."""
    if is_retro(env_id):
        return skip_rate  # retro_env.RetroSkip repeats the action
    if not is_atari(env_id):
        return 1
    skip = emulator_frameskip(env_id)
    if skip == 1:
        return skip_rate  # our MaxAndSkip repeats the action
    if isinstance(skip, int):
        return skip_rate  # v5: make_env sets the emulator's frameskip to skip_rate
    return (skip[0] + skip[1] - 1) / 2.0  # stochastic skip (e.g. Pong-v4): the mean of randint(lo, hi)


def load_env_config(path: str) -> dict:
    """Read an ``--env-config`` JSON file: ``{"Default": {...}, "<Game>": {...}}`` with crop settings per game."""
    try:
        with open(path) as f:
            config = json.load(f)
    except FileNotFoundError:
        raise BadInput(f"--env-config file {path!r} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"--env-config file {path!r} cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"--env-config file {path!r} is not valid JSON: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.get("Default"), dict):
        raise BadInput(f'--env-config file {path!r} must be a JSON object with a "Default" entry')
    for name, conf in config.items():
        for key in ("crop1", "crop2", "dimension2"):
            if not isinstance(conf, dict) or not isinstance(conf.get(key), int) or isinstance(conf.get(key), bool):
                raise BadInput(f"--env-config {path!r}: entry {name!r} needs integer {key!r}")
        if not (0 <= conf["crop1"] < min(210, conf["crop2"] + 160) and conf["crop2"] >= 0
                and 1 <= conf["dimension2"] <= 400):
            raise BadInput(f"--env-config {path!r}: entry {name!r} has crop/dimension values out of range")
    return config


def env_conf_for(env_id: str, config: dict) -> dict[str, int]:
    """The config entry whose key is part of the env id (as rl_a3c_pytorch), else ``Default``."""
    conf = config["Default"]
    for key in config:
        if key != "Default" and key in env_id:
            conf = config[key]
    return {k: conf[k] for k in ("crop1", "crop2", "dimension2")}


# ---------------------------------------------------------------------------------------------------------------
# Atari wrappers. gymnasium's AtariPreprocessing does no-op starts, frame-skip with a max, gray and resize as one
# block with a fixed crop-free resize; a3g keeps rl_a3c_pytorch's per-game crops and needs the parts apart (v5 ids
# skip in the emulator, life loss is for training only), so these stay a3g's own; the rest is gymnasium's
# (TimeLimit, DtypeObservation, FrameStackObservation, TransformReward).


class NoopReset(gym.Wrapper):
    """Start each game after a random number (1..noop_max) of no-ops, so that starts differ (gymnasium has no
    wrapper of its own for it outside AtariPreprocessing)."""

    def __init__(self, env: gym.Env, noop_max: int = 30):
        super().__init__(env)
        self.noop_max = noop_max
        assert env.unwrapped.get_action_meanings()[0] == "NOOP"

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        for _ in range(self.unwrapped.np_random.integers(1, self.noop_max + 1)):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


class MaxAndSkip(gym.Wrapper):
    """Repeat the action ``skip`` frames, sum the rewards, observe the max of the last two frames. An episode that
    ends inside the repeat returns its last frame, not a max with a frame of the finished episode (gymnasium's
    MaxAndSkipObservation maxes whatever the buffer holds)."""

    def __init__(self, env: gym.Env, skip: int = 4):
        super().__init__(env)
        self.skip = skip
        self._buffer = np.zeros((2,) + env.observation_space.shape, dtype=env.observation_space.dtype)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        total_reward = 0.0
        for i in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            if i >= self.skip - 2:
                self._buffer[i - (self.skip - 2)] = obs
            total_reward += reward
            if terminated or truncated:
                break
        if i == self.skip - 1 and self.skip >= 2:  # a full repeat: max over the last two frames removes flicker
            obs = self._buffer.max(axis=0)
        return obs, total_reward, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """Training only: a lost life ends the episode for the learner, but the game goes on at the next reset
    (gymnasium has no such wrapper; ``game_over`` tells a finished game from a lost life)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action: int) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:  # only a life was lost: carry on from where the game is
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.lives = self.unwrapped.ale.lives()
        self.game_over = False
        return obs, info


class FireReset(gym.Wrapper):
    """Press FIRE after a reset, for games that wait for it before play starts (no gymnasium twin).

    In training a lost life ends the learner's episode (``EpisodicLife``), and the reset that follows presses FIRE
    again, so the agent never learns to relaunch the ball itself. ``after_life_loss`` (whole games: the evaluator,
    ``gym_eval.py``) does the same within a game: a lost life is followed by the presses training's reset makes
    (no-op, FIRE, then action 2), so that the game the evaluator scores plays as the learner was trained. Without
    it a greedy Breakout agent waits for ever after its first lost life (the game runs into the length cap)."""

    def __init__(self, env: gym.Env, after_life_loss: bool = False):
        super().__init__(env)
        self.after_life_loss, self.lives = after_life_loss, 0

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(1)
        if terminated or truncated:
            self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(2)
        if terminated or truncated:
            obs, info = self.env.reset(**kwargs)
        self.lives = self.unwrapped.ale.lives()
        return obs, info

    def step(self, action: int) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if not self.after_life_loss:  # training: EpisodicLife ends the episode at a lost life, and reset presses
            return obs, reward, terminated, truncated, info
        lives = self.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            for press in (0, 1, 2):  # what EpisodicLife's reset and this wrapper's reset press in training
                if terminated or truncated:
                    break
                obs, more, terminated, truncated, info = self.env.step(press)
                reward += more
            lives = self.unwrapped.ale.lives()
        self.lives = lives
        return obs, reward, terminated, truncated, info


def atari_box(conf: dict, size: int) -> tuple[tuple[int, int], tuple[int, int], int, tuple[int, int] | None]:
    """The part of a 210x160 Atari screen that ``ScreenFrame`` keeps for ``conf`` (an ``atari.json`` entry): rows
    ``crop1 : crop2 + 160``, all 160 columns, and for 80x80 frames rl_a3c_pytorch's first resize,
    ``cv2.resize(frame, (80, dimension2))``: 80 columns wide, ``dimension2`` rows high."""
    return (conf["crop1"], conf["crop2"] + 160), (0, 160), size, ((80, conf["dimension2"]) if size == 80 else None)


# ---------------------------------------------------------------------------------------------------------------


@dataclass
class EnvSettings:
    """Everything needed to rebuild the same preprocessing later (stored with saved models)."""

    env_id: str
    skip_rate: int = 4
    max_episode_length: int = 10000
    crop: dict | None = None  # the env-config entry for Atari games
    frame_size: int = 80  # Atari frames are frame_size x frame_size ...
    frame_stack: int = 1  # ... and the last frame_stack of them are stacked (the network decides both)
    retro: dict | None = None  # retro games: retro_env.resolve's action set, crop, reward scale, rules and start state
    frame_norm: str = "frame"  # pixels: uint8 frames the network normalises, or "running" floats (envs/frames.py)
    # --gym-packages: modules every process imports before it builds the environment. Not in as_dict, so never in a
    # model file: a file a3g loads never makes it import code.
    packages: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"env_id": self.env_id, "skip_rate": self.skip_rate, "max_episode_length": self.max_episode_length,
                "crop": dict(self.crop) if self.crop else None, "frame_size": self.frame_size,
                "frame_stack": self.frame_stack, "retro": json.loads(json.dumps(self.retro)) if self.retro else None,
                "frame_norm": self.frame_norm}

    @classmethod
    def from_dict(cls, saved: dict, packages: tuple[str, ...] = ()) -> "EnvSettings":
        """The settings a model file or checkpoint stored (``as_dict``); one written before ``frame_norm`` existed
        normalised its frames the ``running`` way."""
        return cls(**{"frame_norm": FORMER_FRAME_NORM, **saved}, packages=tuple(packages))


def make_env(settings: EnvSettings, train: bool = True, render_mode: str | None = None) -> gym.Env:
    """Build the environment ``settings.env_id`` with a3g's preprocessing.

    ``train=True`` ends an Atari episode at each lost life (the learner's view); ``train=False`` plays full games
    (the evaluator's view). Every episode is cut at ``settings.max_episode_length`` agent steps.
    """
    import_packages(settings.packages)
    env_id = settings.env_id
    if is_retro(env_id):
        if settings.retro is None:
            settings.retro = retro_env.resolve(env_id)
        return retro_env.make_retro(settings, train, render_mode)
    spec = env_spec(env_id)
    if not is_atari(env_id):
        try:
            # render_mode only where asked for: an environment of the user's may not take the keyword
            env = gym.make(registered_id(env_id), **({"render_mode": render_mode} if render_mode else {}))
        except Exception as exc:
            raise BadInput(f"cannot create environment {env_id!r}: {exc}") from None
        try:
            check_action_space(env_id, env.action_space)
            if not isinstance(env.observation_space, gym.spaces.Box) or len(env.observation_space.shape) != 1:
                raise BadInput(f"{env_id}: only flat vector observations or Atari frames are supported")
        except BadInput:
            env.close()
            raise
        if isinstance(env.action_space, gym.spaces.Box):
            # the policy acts in [-1, 1] per dimension (core/policy.py); gymnasium maps that onto the Box's bounds
            # and clips what a Gaussian sample puts outside
            unit = np.ones(env.action_space.shape, dtype=np.float32)
            env = gym.wrappers.ClipAction(gym.wrappers.RescaleAction(env, -unit, unit))
        env = gym.wrappers.DtypeObservation(env, np.float32)
        env = gym.wrappers.TimeLimit(env, max_episode_steps=settings.max_episode_length)
        return gym.wrappers.RecordEpisodeStatistics(env) if train else env

    conf = settings.crop or {"crop1": 34, "crop2": 34, "dimension2": 80}
    kwargs = {"obs_type": "grayscale", "render_mode": render_mode}
    skip = spec.kwargs.get("frameskip", 1)
    if skip != 1 and isinstance(skip, int):
        kwargs["frameskip"] = settings.skip_rate  # v5: the emulator repeats the action; no second skip on top
    env = gym.make(registered_id(env_id), **kwargs)
    env = NoopReset(env, noop_max=30)
    if skip == 1 and settings.skip_rate > 1:
        env = MaxAndSkip(env, skip=settings.skip_rate)
    if train:
        # the game's own return and length in agent steps (info["episode"] at a game's end), outside the repeat
        # and inside the life-loss episodes, so that a game is counted whole, with its points as the game scores
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = EpisodicLife(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireReset(env, after_life_loss=not train)
    env = pixel_pipeline(env, atari_box(conf, settings.frame_size), settings.frame_norm, settings.frame_stack)
    # outermost, so that it counts agent steps only; in training (as in rl_a3c_pytorch) it cuts learner episodes
    return gym.wrappers.TimeLimit(env, max_episode_steps=settings.max_episode_length)
