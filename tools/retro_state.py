"""Make the save state Super Mario Kart training starts from: the first race of the Mushroom Cup (Mario Circuit 1,
50cc, Mario), at the start of the countdown.

    python -m tools.retro_import DIR          # once: copies your Super Mario Kart (USA) ROM into envs/retro_integrations/
    python -m tools.retro_state               # writes envs/retro_integrations/SuperMarioKart-Snes-v0/MarioCircuit1.state

It powers the console on, presses through the menus with a fixed list of button presses (``MENU_PRESSES``: title
screen, 1P game, Mario GP, 50cc, Mario, Mushroom Cup), then waits for the race to start, and checks the RAM
variables of a3g's integration before it saves: the countdown's race phase, on the ground, lap counter at the
start. It also writes a PNG of the screen next to the state, to look at (after a failed attempt, or a state that
could not be written: ``<out>.failed.png``, ``<out>.failed-2.png``, ..., so that every attempt's screen is kept and
the rerun is not blocked).

Honest limits: no ROM ships with a3g, so this sequence was written from how the game's menus work and has not been
run against the game here. When the check fails it saves nothing, prints the variables and where the screen
picture is, and exits 1: adjust ``MENU_PRESSES`` (the frames to wait are the likely culprits), or make the state
by hand with any SNES emulator's stable-retro-compatible tools and pass it with ``--state FILE``.
"""

import gzip
import os
import sys
from typing import Any

import gymnasium as gym
import numpy as np

from core.cli import OneLineParser
from core.errors import BadInput
from core.files import atomic_write_bytes, first_free, try_write
from envs import retro_env
from tools.save_states import write_png

PROG = "python -m tools.retro_state"  # how the command is run, for its messages

GAME = "SuperMarioKart-Snes-v0"
STATE_NAME = "MarioCircuit1"
# (button, frames held, frames waited afterwards); None = no button. SNES confirms with B, START on the title.
MENU_PRESSES = [
    (None, 0, 420),      # boot, Nintendo logo, intro
    ("START", 4, 120),   # title screen -> 1P/2P
    ("B", 4, 90),        # 1P GAME
    ("B", 4, 90),        # MARIO GP
    ("B", 4, 90),        # 50cc
    ("B", 4, 120),       # OK?
    ("B", 4, 90),        # Mario (the cursor starts on him)
    ("B", 4, 120),       # OK?
    ("B", 4, 90),        # MUSHROOM CUP
    ("B", 4, 60),        # OK?
]
RACE_WAIT_FRAMES = 1800  # the course intro (Lakitu, camera sweep) before the countdown
COUNTDOWN_PHASE = 4  # 7E003A: 4 during the countdown, 6 once racing (MrL314's map)


def press(env: gym.Env, buttons: list[str | None], name: str | None, held: int, wait: int) -> dict[str, Any]:
    """Hold button ``name`` (None: none) for ``held`` frames, then release it for ``wait``; the last RAM reading."""
    action = np.zeros(len(buttons), dtype=np.uint8)
    if name is not None:
        action[buttons.index(name)] = 1
    info = {}
    for i in range(held + wait):
        _, _, _, _, info = env.step(action if i < held else np.zeros_like(action))
    return info


def race_start_problems(info: dict[str, Any]) -> list[str]:
    """What is wrong with ``info`` for the start of a race (an empty list: nothing)."""
    problems = []
    if info.get("race_phase") not in (COUNTDOWN_PHASE, COUNTDOWN_PHASE + 2):
        problems.append(f"race_phase {info.get('race_phase')} (expected {COUNTDOWN_PHASE} or {COUNTDOWN_PHASE + 2})")
    if info.get("kart_status") != 0:
        problems.append(f"kart_status {info.get('kart_status')} (expected 0, on the ground)")
    if info.get("lap") not in (127, 128):
        problems.append(f"lap {info.get('lap')} (expected 127 or 128 at the start line)")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default=GAME, choices=[GAME], help="the game (a3g has one such recipe)")
    p.add_argument("--out", default=None, help="state file (default: the integration's MarioCircuit1.state)")
    args = p.parse_args(argv)
    out = args.out or os.path.join(retro_env.INTEGRATIONS, args.game, STATE_NAME + ".state")
    try:
        retro_env.check_rom(args.game)
        for kept in (out, os.path.splitext(out)[0] + ".png"):  # the state, and the picture of its screen
            if os.path.exists(kept):
                raise BadInput(f"{kept} exists and is kept: give another --out (or remove it to make it again)")
        try_write(out)  # before the menus are played, not after
    except BadInput as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{PROG}: error: --out {out} cannot be written ({exc.strerror or exc})", file=sys.stderr)
        return 2
    r = retro_env.retro()
    env = r.make(args.game, state=r.State.NONE, use_restricted_actions=r.Actions.ALL, render_mode="rgb_array")
    env.reset()
    buttons = list(env.unwrapped.buttons)
    for name, held, wait in MENU_PRESSES:
        info = press(env, buttons, name, held, wait)
    for _ in range(RACE_WAIT_FRAMES // 10):
        info = press(env, buttons, None, 0, 10)
        if info.get("race_phase") == COUNTDOWN_PHASE:
            break
    problems, screen = race_start_problems(info), env.render()
    state = None if problems else env.unwrapped.em.get_state()
    env.close()
    stem = os.path.splitext(out)[0]
    failed = first_free(stem + ".failed", os.path.exists, ".png")
    if problems:
        shown = save_screen(failed, screen)
        print(f"{PROG}: the menus did not lead to the start of a race ({'; '.join(problems)}); nothing saved; "
              f"{shown}; variables: {info}", file=sys.stderr)
        return 1
    try:  # the state first: its picture under the name of a kept state only once the state is whole
        atomic_write_bytes(out, gzip.compress(state))
    except OSError as exc:
        print(f"{PROG}: error: {out} could not be written ({exc.strerror or exc}): nothing saved; "
              f"{save_screen(failed, screen)}", file=sys.stderr)
        return 1
    print(f"{PROG}: saved {out} ({save_screen(stem + '.png', screen)}); variables at the start: {info}")
    return 0


def save_screen(path: str, screen: np.ndarray) -> str:
    """Write the screen's picture; says where it is, or why it is not (a picture lost is no reason to fail)."""
    try:
        write_png(path, screen)
    except OSError as exc:
        return f"the screen's picture could not be written ({exc.strerror or exc})"
    return f"the screen is in {path}"


if __name__ == "__main__":
    sys.exit(main())
