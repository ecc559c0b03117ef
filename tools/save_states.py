"""Save states of a retro game at several points of one game, for training on some and evaluating on others
(``--state`` and ``--eval-state``).

    python -m tools.save_states --env Airstriker-Genesis-v0 --steps 0 100 200 300 --out states/airstriker

It plays one game from ``--state`` (default: the game's own start state) with uniformly random actions (seeded by
``--seed``; a3g's action set and frame skip, so a step is ``--skip-rate`` emulator frames) and, when the game has
played each of ``--steps`` agent steps, writes ``<out>/step<N>.state`` (stable-retro's gzip format, loadable by
``--state`` and by stable-retro itself; never over an existing file) and a PNG of the screen beside it, to look
at. A game that ends before the last step saves what it reached and exits 1 naming the step it ended at: pick
earlier steps or another ``--seed``.
"""

import gzip
import os
import sys

import numpy as np

from core.cli import OneLineParser, random_seed
from core.errors import EXIT_BAD_INPUT, BadInput
from core.files import atomic_write_bytes
from envs import retro_env
from envs.environment import EnvSettings, is_retro, make_env

PROG = "python -m tools.save_states"


def build_parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="Save states of a retro game at several points of one random game.")
    p.add_argument("--env", default="Airstriker-Genesis-v0", help="a stable-retro game id whose ROM is imported")
    p.add_argument("--steps", type=int, nargs="+", required=True, help="agent steps after which to save a state")
    p.add_argument("--out", required=True, help="folder to write step<N>.state (and .png) into")
    p.add_argument("--state", default=None, help="start from this save state (default: the game's own)")
    p.add_argument("--skip-rate", type=int, default=4, help="emulator frames per agent step")
    p.add_argument("--seed", type=random_seed, default=1, help="seed of the random actions")
    return p


def save_states(env_id: str, steps: list[int], out: str, state: str | None = None, skip_rate: int = 4,
                seed: int = 1) -> tuple[list[str], int | None]:
    """Play one random game, saving the emulator at each of ``steps``; returns (files written, the step the game
    ended at before the last of ``steps``, or None)."""
    taken = [path for n in steps for path in (state_file(out, n), picture_file(out, n)) if os.path.exists(path)]
    if taken:
        raise BadInput(f"{taken[0]} exists and is kept: give another --out")
    settings = EnvSettings(env_id, skip_rate, 10 ** 9, retro=retro_env.resolve(env_id, state))  # checked first
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--out {out} cannot be created ({exc.strerror or exc})") from None
    env = make_env(settings, train=False)
    rng = np.random.default_rng(seed)
    written, step = [], 0
    try:
        env.reset(seed=seed)
        emulator = env.unwrapped.em
        for target in sorted(set(steps)):
            while step < target:
                _, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
                step += 1
                if terminated or truncated:
                    return written, step
            path = state_file(out, target)
            atomic_write_bytes(path, gzip.compress(emulator.get_state()))
            written.append(path)
            write_png(picture_file(out, target), env.unwrapped.get_screen())
    finally:
        env.close()
    return written, None


def state_file(out: str, step: int) -> str:
    return os.path.join(out, f"step{step}.state")


def picture_file(out: str, step: int) -> str:
    return os.path.join(out, f"step{step}.png")


def write_png(path: str, screen: np.ndarray) -> None:
    """An RGB screen as a PNG file, written whole (cv2.imwrite said nothing when it wrote no file)."""
    import cv2

    ok, data = cv2.imencode(".png", cv2.cvtColor(screen, cv2.COLOR_RGB2BGR))
    if not ok:
        raise OSError(f"the screen ({screen.shape}) could not be encoded as a PNG")
    atomic_write_bytes(path, data.tobytes())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if not is_retro(args.env):
            raise BadInput(f"--env {args.env}: save states are for stable-retro games")
        if min(args.steps) < 0 or args.skip_rate < 1:
            raise BadInput("--steps must be >= 0 and --skip-rate >= 1")
        written, ended = save_states(args.env, args.steps, args.out, args.state, args.skip_rate, args.seed)
    except BadInput as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:  # --out there but not writable
        print(f"{PROG}: cannot write into --out {args.out} ({exc.strerror or exc})", file=sys.stderr)
        return EXIT_BAD_INPUT
    for path in written:
        print(f"saved {path}")
    if ended is not None:
        print(f"{PROG}: the game ended at step {ended}, before step {max(args.steps)}; pick earlier steps or another "
              f"--seed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
