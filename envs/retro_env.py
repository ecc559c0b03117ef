"""Retro console games through stable-retro: the third family of ``make_env`` (after Atari and classic control).

An id is a stable-retro integration, ``<Game>-<System>-v0`` (``Airstriker-Genesis-v0``, the one game whose ROM
ships with stable-retro), or one of a3g's own integrations in ``envs/retro_integrations/`` (``SuperMarioKart-Snes-v0``).
A game runs once its ROM is imported: ``python -m stable_retro.import DIR`` for stable-retro's games,
``python -m tools.retro_import DIR`` for a3g's own (stable-retro's importer does not know our folder).

The preprocessing, all in this file, in the order the wrappers are stacked:
- ``StartStates``: with several save states (``--state``, ``--eval-state``), each episode starts from one of them.
- ``RetroActions``: a discrete action set, a list of button combinations (``retro_games.json``: per game, else per
  console, else one built from the console's pad: no-op, each direction, each button, left/right with the first
  button). Menu buttons (START, SELECT, MODE) are never in a default set: pressing them pauses or resets games.
- ``RetroSkip``: the action held for ``skip_rate`` emulator frames (stable-retro steps one frame at a time), the
  rewards summed; frames are counted as emulator frames, like Atari's.
- game rules (``mario_kart.MarioKartRules`` for Super Mario Kart): rewards and episode ends computed from the RAM
  variables stable-retro puts into ``info``, where ``scenario.json`` cannot say them;
- ``pixel_pipeline`` (frames.py, as for Atari): crop (per game, e.g. Mario Kart's minimap), gray, resize to the
  network's frame size, uint8 (or ``--frame-norm running``'s float32), frame stacking.
- training only: ``reward_scale`` (per game) then the worker's clipping to [-1, 1], as for Atari; the evaluator and
  ``gym_eval.py`` score games with the unscaled rewards.

An episode is a whole game (or, with rules, a race): stable-retro has no general notion of lives, so training and
evaluation episodes are the same.

stable-retro allows one emulator per process, so ``--envs-per-worker`` must be 1 for retro games (``runtime/config.py``;
docs/results/retro.md has the measurement behind that choice); every worker, the evaluator and ``gym_eval.py`` are processes
of their own, and the parent builds its one env to read the shapes and closes it before any child starts.
"""

import functools
import gzip
import json
import os
import zlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from core.errors import BadInput
from envs.frames import pixel_pipeline

if TYPE_CHECKING:  # environment.py imports this module: no import of it at run time
    from envs.environment import EnvSettings

HERE = os.path.dirname(os.path.abspath(__file__))
INTEGRATIONS = os.path.join(HERE, "retro_integrations")  # a3g's own integrations (data, scenario, metadata)
RETRO_CONFIG = os.path.join(HERE, "retro_games.json")
MENU_BUTTONS = {"START", "SELECT", "MODE", "PAUSE", "COIN", None}
DIRECTIONS = ("LEFT", "RIGHT", "UP", "DOWN")


@functools.lru_cache(maxsize=None)
def retro() -> ModuleType:
    """stable-retro, imported on first use (Atari and classic control never pay for it), with a3g's integrations
    added to the folders it searches."""
    import stable_retro

    stable_retro.data.add_custom_integration(INTEGRATIONS)
    return stable_retro


def has_integration(env_id: str) -> bool:
    """Whether stable-retro (or a3g's own folder) has an integration named ``env_id``, its ROM imported or not
    (``environment.is_retro`` asks this of the ids gymnasium does not know)."""
    if "/" in env_id or not env_id.endswith("-v0") or env_id.count("-") < 2:
        return False
    r = retro()
    return r.data.get_file_path(env_id, "rom.sha", r.data.Integrations.DEFAULT) is not None


def is_own_integration(env_id: str) -> bool:
    """Whether ``env_id`` is one of a3g's own integrations (``envs/retro_integrations/``), not stable-retro's."""
    return os.path.isfile(os.path.join(INTEGRATIONS, env_id, "rom.sha"))


def import_command(env_id: str) -> str:
    """The command that imports this game's ROM (stable-retro's importer does not know a3g's own folder)."""
    if is_own_integration(env_id):
        return "python -m tools.retro_import DIR"
    return "python -m stable_retro.import DIR"


def check_rom(env_id: str) -> None:
    """Raise BadInput, one line naming the import command, when the game's ROM has not been imported."""
    r = retro()
    try:
        r.data.get_romfile_path(env_id, r.data.Integrations.DEFAULT)
    except FileNotFoundError:
        raise BadInput(f"{env_id}: its ROM is not imported; put your ROM file in a folder DIR and run "
                         f"`{import_command(env_id)}` (no ROM ships with a3g)") from None


def system_of(env_id: str) -> str:
    """``Airstriker-Genesis-v0`` -> ``Genesis``."""
    return env_id.rsplit("-", 2)[-2]


def state_path(env_id: str, state: str | None, flag: str = "--state") -> str | None:
    """One ``--state`` entry: a path to a ``.state`` file, or the name of one in the game's integration folder."""
    if state is None:
        return None
    if os.path.isfile(state):
        if not state.endswith(".state"):  # stable-retro would look for <state>.state instead
            raise BadInput(f"{flag} {state!r}: stable-retro reads save states from files named *.state; rename it")
        return os.path.abspath(state)
    r = retro()
    name = state if state.endswith(".state") else state + ".state"
    path = r.data.get_file_path(env_id, name, r.data.Integrations.DEFAULT)
    if path is None:
        known = r.data.list_states(env_id, r.data.Integrations.DEFAULT)
        raise BadInput(f"{flag} {state!r}: no such file, and {env_id} has no state of that name "
                         f"(it has: {', '.join(known) or 'none'})")
    return path


def state_paths(env_id: str, states: str | list[str] | None, flag: str = "--state") -> list[str]:
    """``--state``/``--eval-state``: files, names in the game's integration folder, or folders (every ``*.state``
    in one, in name order), as absolute paths; [] for the game's own start state."""
    if states is None:
        return []
    paths = []
    for entry in [states] if isinstance(states, str) else states:
        if os.path.isdir(entry):
            found = sorted(os.path.join(entry, name) for name in os.listdir(entry) if name.endswith(".state"))
            if not found:
                raise BadInput(f"{flag} {entry!r}: a folder without .state files")
            paths += [os.path.abspath(path) for path in found]
        else:
            paths.append(state_path(env_id, entry, flag))
    for path in paths:
        read_state(path)  # an unreadable file is one line now, not a crash in every worker
    return paths


def read_state(path: str) -> bytes:
    """A save state's emulator bytes (stable-retro's ``.state`` files are gzip-compressed)."""
    try:
        with gzip.open(path, "rb") as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as exc:  # zlib.error: compressed data damaged inside a whole file
        raise BadInput(f"save state {path!r} cannot be read: {exc}") from None


def check_states(env: gym.Env, states: dict[str, bytes], env_id: str) -> None:
    """Each save state (path -> its bytes, ``read_state``'s) loads into ``env``'s emulator: stable-retro ignores a
    refused one (junk in a gzip file, another game's state) and starts the games from the default state instead,
    without a word."""
    for path, data in states.items():
        if not env.unwrapped.em.set_state(data):
            raise BadInput(f"save state {path!r} is not a state of {env_id} (its emulator refuses it)")


def start_states(conf: dict, train: bool) -> list[str]:
    """The save states episodes start from: training's (``states``) or the evaluator's (``eval_states``, default
    the training ones). Model files from before several states were possible store one ``state`` (or None);
    ``gym_eval.py --state`` adds ``eval_states`` to those too, and they win there as anywhere."""
    if not train and conf.get("eval_states") is not None:
        return list(conf["eval_states"])
    if "states" not in conf:
        return [conf["state"]] if conf.get("state") else []
    return list(conf["states"])


# ---------------------------------------------------------------------------------------------------------------
# retro_games.json: action sets, crops, reward scales


def load_retro_config(path: str = RETRO_CONFIG) -> dict:
    """Read ``retro_games.json`` (``{"systems": {...}, "games": {...}}``); an unreadable file is BadInput."""
    try:
        with open(path) as f:
            config = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"retro game settings {path!r} cannot be read: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.get("games", {}), dict) \
            or not isinstance(config.get("systems", {}), dict):
        raise BadInput(f"{path!r}: expected an object with 'systems' and 'games' objects")
    return config


def default_actions(buttons: list[str | None]) -> list[list[str]]:
    """A console pad's sensible discrete set: no-op, each direction, each (non-menu) button, left/right with the
    first button (move while firing/jumping)."""
    pad = [b for b in buttons if b not in MENU_BUTTONS]
    fire = [b for b in pad if b not in DIRECTIONS]
    actions = [[]] + [[d] for d in DIRECTIONS if d in pad] + [[b] for b in fire]
    if fire:
        actions += [[d, fire[0]] for d in ("LEFT", "RIGHT") if d in pad]
    return actions


def retro_conf_for(env_id: str, config: dict, buttons: list[str | None]) -> dict:
    """The resolved settings of one game: ``{"actions", "crop", "reward_scale", "rules"}`` from its entry in
    ``retro_games.json`` (key: the env id without ``-v0``), its console's entry, and the pad's default set."""
    game = config.get("games", {}).get(env_id.removesuffix("-v0"), {})
    system = config.get("systems", {}).get(system_of(env_id), {})
    actions = game.get("actions") or system.get("actions") or default_actions(buttons)
    for combo in actions:
        if not isinstance(combo, list) or any(b not in buttons or b is None for b in combo):
            raise BadInput(f"retro_games.json: {env_id}'s action {combo!r} names a button its console lacks "
                             f"(buttons: {[b for b in buttons if b]})")
    crop = {"top": 0, "bottom": 0, "left": 0, "right": 0, **game.get("crop", {})}
    if any(not isinstance(v, int) or v < 0 for v in crop.values()) or set(crop) != {"top", "bottom", "left", "right"}:
        raise BadInput(f"retro_games.json: {env_id}'s crop must be non-negative top/bottom/left/right pixels")
    scale = game.get("reward_scale", system.get("reward_scale", 1.0))
    if not isinstance(scale, (int, float)) or not scale > 0:
        raise BadInput(f"retro_games.json: {env_id}'s reward_scale must be a positive number")
    return {"actions": [list(c) for c in actions], "crop": crop, "reward_scale": float(scale),
            "rules": game.get("rules")}


def pad_buttons(env_id: str) -> list[str | None]:
    """The console's buttons, in the order of stable-retro's button arrays (read without starting an emulator)."""
    return list(retro().get_system_info(system_of(env_id))["buttons"])


def resolve(env_id: str, states: str | list[str] | None = None, config_path: str = RETRO_CONFIG,
            eval_states: str | list[str] | None = None) -> dict:
    """Everything ``EnvSettings.retro`` stores for a game: its settings from retro_games.json, the training start
    states (``--state``: ``states``, [] for the game's own) and the evaluator's (``--eval-state``: ``eval_states``,
    None for the training ones). Checks the ROM first, so that a missing ROM is the one line the user sees."""
    check_rom(env_id)
    conf = retro_conf_for(env_id, load_retro_config(config_path), pad_buttons(env_id))
    conf["states"] = state_paths(env_id, states)
    conf["eval_states"] = state_paths(env_id, eval_states, "--eval-state") if eval_states is not None else None
    if not conf["states"] or conf["eval_states"] == []:
        check_default_state(env_id)
    return conf


def check_default_state(env_id: str) -> None:
    """A game whose metadata names a default start state that is not there (a3g's Mario Kart before
    ``python -m tools.retro_state``): one line saying how to make it, rather than stable-retro's TypeError."""
    r = retro()
    meta_path = r.data.get_file_path(env_id, "metadata.json", r.data.Integrations.DEFAULT)
    try:
        with open(meta_path) as f:
            default = json.load(f).get("default_state")
    except (TypeError, OSError, json.JSONDecodeError):
        return
    if default and r.data.get_file_path(env_id, default + ".state", r.data.Integrations.DEFAULT) is None:
        how = ("make it from your ROM with `python -m tools.retro_state`" if is_own_integration(env_id)
               else "give --state FILE")
        raise BadInput(f"{env_id}: its start state {default!r} is missing; {how}")


# ---------------------------------------------------------------------------------------------------------------
# Wrappers


class RetroActions(gym.ActionWrapper):
    """Discrete(n) over a list of button combinations -> the button array stable-retro presses."""

    def __init__(self, env: gym.Env, combos: list[list[str]], buttons: list[str | None]):
        super().__init__(env)
        self.combos = [list(c) for c in combos]
        self._arrays = np.zeros((len(combos), len(buttons)), dtype=np.uint8)
        for i, combo in enumerate(combos):
            for name in combo:
                self._arrays[i, buttons.index(name)] = 1
        self.action_space = gym.spaces.Discrete(len(combos))

    def action(self, action: int) -> np.ndarray:
        return self._arrays[int(action)]


class StartStates(gym.Wrapper):
    """Each episode starts from one of several save states (``--state A B C``): a random one in training (from a
    generator seeded by the first ``reset(seed=...)``), one after the other in the evaluator's games, so that its
    mean weighs every state alike: its ``--score-window`` is a multiple of the states (``runtime.config``), and a
    new evaluator takes its turns on from the games its run already played (``take_turns_from``).
    ``info["start_state"]`` is the index of the one an episode started from."""

    def __init__(self, env: gym.Env, states: list[bytes], shuffle: bool):
        super().__init__(env)
        self.states, self.shuffle = states, shuffle
        self.rng, self.games = np.random.default_rng(), 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None and self.games == 0:
            self.rng = np.random.default_rng(seed)
        index = int(self.rng.integers(len(self.states))) if self.shuffle else self.games % len(self.states)
        self.games += 1
        self.env.unwrapped.initial_state = self.states[index]  # what stable-retro's reset restores
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, {**info, "start_state": index}


def take_turns_from(env: gym.Env, games: int) -> None:
    """Make the next game of ``env`` (built by ``make_env``) start from the state whose turn comes after ``games``
    games played in turn from the first; nothing to do where the games do not start from several states."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, StartStates):
            env.games = games
            return
        env = env.env


class RetroSkip(gym.Wrapper):
    """Hold the action for ``skip`` emulator frames, summing the rewards; observe the last frame. (Consoles draw
    every sprite every frame in most games, so the Atari max-over-two-frames is not needed.)"""

    def __init__(self, env: gym.Env, skip: int):
        super().__init__(env)
        self.skip = skip

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        total = 0.0
        for _ in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info


def game_rules(name: str) -> type[gym.Wrapper]:
    """The wrapper class of a game's ``rules`` entry in retro_games.json."""
    if name == "mario_kart":
        from envs.mario_kart import MarioKartRules

        return MarioKartRules
    raise BadInput(f"retro_games.json: unknown rules {name!r}")


def retro_box(crop: dict[str, int], height: int, width: int, size: int) -> tuple[tuple[int, int], tuple[int, int], int]:
    """The part of a ``width x height`` screen that ``ScreenFrame`` keeps for ``crop`` (top/bottom/left/right
    margins in pixels, from retro_games.json)."""
    if crop["top"] + crop["bottom"] >= height or crop["left"] + crop["right"] >= width:
        raise BadInput(f"retro_games.json: the crop {crop} leaves nothing of the {width}x{height} screen")
    return (crop["top"], height - crop["bottom"]), (crop["left"], width - crop["right"]), size


def make_retro(settings: "EnvSettings", train: bool, render_mode: str | None) -> gym.Env:
    """The game with a3g's preprocessing (module docstring), the frame pipeline shared with Atari (frames.py)."""
    r = retro()
    conf = settings.retro
    states = start_states(conf, train)
    datas = [read_state(path) for path in states]  # a damaged file is one line here, not stable-retro's traceback
    try:
        env = r.make(settings.env_id, state=states[0] if states else r.State.DEFAULT,
                     use_restricted_actions=r.Actions.ALL, render_mode="rgb_array" if render_mode else None)
    except FileNotFoundError:
        check_rom(settings.env_id)
        raise
    except RuntimeError as exc:  # a second emulator in this process
        raise BadInput(f"{settings.env_id}: {exc}") from None
    try:
        check_states(env, dict(zip(states, datas)), settings.env_id)
    except BadInput:
        env.close()
        raise
    if len(states) > 1:
        env = StartStates(env, datas, shuffle=train)
    env = RetroActions(env, conf["actions"], list(env.unwrapped.buttons))
    env = RetroSkip(env, settings.skip_rate)
    if conf.get("rules"):
        env = game_rules(conf["rules"])(env)
    # inside the game's statistics, so that a game cut at --max-episode-length is counted with its points too
    env = gym.wrappers.TimeLimit(env, max_episode_steps=settings.max_episode_length)
    if train:  # a game's points and length in agent steps, before the training reward's scale
        env = gym.wrappers.RecordEpisodeStatistics(env)
    if train and conf.get("reward_scale", 1.0) != 1.0:
        scale = conf["reward_scale"]  # training only, before the worker's clipping: points that come in hundreds
        env = gym.wrappers.TransformReward(env, lambda reward: reward * scale)
    box = retro_box(conf["crop"], *env.observation_space.shape[:2], settings.frame_size)
    return pixel_pipeline(env, box, settings.frame_norm, settings.frame_stack)
