"""Evaluate a trained model: play full games with it, print the scores, optionally watch or record them.

    python gym_eval.py --env CartPole-v1                          # 100 greedy games with trained_models/CartPole-v1.pt
    python gym_eval.py --env PongNoFrameskip-v4 -ne 5 --record videos/   # and write each game as an MP4
    python gym_eval.py --model-path my_models/Pong.pt --json scores.json # any model file; its own env is used
    python gym_eval.py --model-path runs/<run>                    # a run's best model (--latest: its checkpoint)

rl_a3c_pytorch's gym_eval.py flags keep their names and meaning. The network and the preprocessing are rebuilt
from what the model file stores (``model_meta`` and ``env``), so ``--hidden-size``, ``--skip-rate`` and
``--env-config`` need not be repeated. Games are whole games (no life-loss episodes) scored with raw rewards, and
the policy is greedy (the argmax; for a Box of actions the Gaussian's mean, or ``tanh`` of it) unless
``--stochastic``.

Exit codes: 0 done, 2 bad input (one line on stderr), 130 Ctrl-C (the games finished so far are still summarised).
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch starts: evaluation needs no thread pool
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

import argparse
import glob
import json
import logging
import math
import sys
import time
from typing import Sequence

import gymnasium as gym
import numpy as np
import torch

from core.cli import HelpFormatter, OneLineParser, positive_int, random_seed
from core.errors import BAD_INPUT_ERRORS, EXIT_BAD_INPUT, EXIT_CRASH, EXIT_OK, EXIT_SIGINT, BadInput
from core.files import atomic_write_text, check_json_output, env_file_name, try_write
from core.hardware import missing_gpus
from core.logs import file_logger
from core.play import play_game
from core.policy import GAUSSIANS
from envs import retro_env
from envs.environment import (
    EnvSettings,
    check_env_id,
    env_conf_for,
    family,
    import_packages,
    is_atari,
    load_env_config,
    make_env,
    policy_kind,
    skip_rate_unread,
)
from envs.recording import Monitor, VideoRecorder, Viewer, WindowClosed, check_display, is_render_error, video_fps
from model import RECURRENT_MODELS, build_model, describe_network
from runtime.checkpoints import load_checkpoint
from runtime.run_dir import BEST_MODEL, branches, sibling_stem

DEFAULT_ENV = "PongNoFrameskip-v4"
PROGRESS_EVERY = 10.0  # seconds between the lines of a game still playing
LOGGER = "a3g.gym_eval"  # the text log <log-dir>/<env>_mon_log


class GameProgress:
    """``play_game``'s ``between``: a line every ``PROGRESS_EVERY`` seconds while a long game plays (an Atari game
    can take minutes), so that the command is seen to be alive; a game shorter than that prints nothing."""

    def __init__(self, name: str):
        self.name, self.last = name, time.monotonic()

    def __call__(self, length: int) -> bool:
        if time.monotonic() - self.last >= PROGRESS_EVERY:
            self.last = time.monotonic()
            print(f"gym_eval.py: {self.name} still playing, {length:,} steps so far", flush=True)
        return True


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="gym_eval.py", description="Play full games with a trained a3g model and score them.",
                      formatter_class=HelpFormatter)
    add = p.add_argument
    # rl_a3c_pytorch's gym_eval.py flags: same names, short forms and meaning
    add("-ev", "--env", default=None,
        help=f"gymnasium environment id (default: {DEFAULT_ENV}, or the model's own env with --model-path)")
    add("--gym-packages", nargs="+", default=[], metavar="MODULE",
        help="modules to import before the environment is built, for ids they register (a model trained on "
             "module:Id needs its module named here or in --env: a model file never makes a3g import code)")
    add("-evc", "--env-config", default=None,
        help="per-game crop settings (JSON; default: the crop stored in the model, Atari only)")
    add("-ne", "--num-episodes", type=positive_int, default=100, help="full games to play")
    add("-lmd", "--load-model-dir", default="trained_models/", help="folder the model <env>.pt is read from")
    add("-lg", "--log-dir", default="logs/", help="folder of the text log <env>_mon_log")
    add("-r", "--render", action="store_true", help="watch the games in a window (needs a display and pygame)")
    add("-rf", "--render-freq", type=positive_int, default=1,
        help="--render and --record show/write every N-th game (games 1, 1+N, 1+2N, ...)")
    add("-mel", "--max-episode-length", type=positive_int, default=None,
        help="cut a game after this many agent steps (default: the model's setting)")
    add("-nge", "--new-gym-eval", action="store_true",
        help="also write a monitor record into <log-dir>/<env>_monitor/: stats.json (gym Monitor format) and "
             "videos of games 0, 1, 8, 27, ... (gymnasium RecordVideo's schedule)")
    add("-s", "--seed", type=random_seed, default=1, help="seed of the environment (and of --stochastic sampling)")
    add("-gp", "--gpu-id", type=int, default=-1, help="GPU to run the network on; -1 = CPU")
    add("-hs", "--hidden-size", type=positive_int, default=None,
        help="LSTM size; read from the model file, so only a check (a different value is an error)")
    add("--skip-rate", type=positive_int, default=None,
        help="emulator frames per agent step, Atari and retro games (default: the model's setting; a different "
             "value overrides it)")
    # a3g's own
    add("--model-path", default=None,
        help="what to play instead of <load-model-dir>/<env>.pt: a model file, a checkpoint file (its weights), or "
             "a run directory (its best_model.pt, or with --latest its checkpoint.pt)")
    add("--latest", action="store_true",
        help="with a run directory as --model-path: play the run's latest weights (checkpoint.pt), not its best "
             "model")
    add("--state", nargs="+", default=None, metavar="STATE",
        help="retro games: play from these save states in turn (files, names in the game's integration folder or "
             "folders; default: the model's evaluation states)")
    add("--stochastic", action="store_true", help="sample actions from the policy instead of taking the argmax")
    add("--json", default=None, metavar="PATH", help="write the episodes and the summary as JSON to PATH")
    add("--record", default=None, metavar="DIR", help="write games as videos into DIR (every --render-freq-th)")
    add("--video-format", default="mp4", choices=["mp4", "gif"],
        help="video container for --record/--new-gym-eval; MP4 falls back to GIF where OpenCV cannot write it")
    return p


# ---------------------------------------------------------------------------------------------------------------
# Loading: the model file decides the network and the preprocessing


def load_model_file(args: argparse.Namespace) -> tuple[str, dict, EnvSettings, torch.nn.Module, list[str]]:
    """Returns (path, data, settings, model, notes); raises BadInput."""
    import_packages(args.gym_packages)
    if args.env is not None:
        check_env_id(args.env)  # an unknown id (or a retro game without its ROM) fails here, before any file is read
    path = model_path(args)
    data = load_checkpoint(path)  # a model file, or a checkpoint, whose weights and env are read the same way
    env_dict = data["env"]  # load_checkpoint checked the entries it reads
    saved_env = env_dict["env_id"]
    if args.env is None:
        module = saved_env.split(":", 1)[0] if ":" in saved_env else None
        if module is not None and module not in args.gym_packages:
            raise BadInput(f"{path} was trained on {saved_env}: give --env {saved_env} (or --gym-packages {module}) "
                           f"to import {module} (a model file never makes a3g import code)")
        args.env = saved_env if args.model_path is not None else DEFAULT_ENV
    if saved_env != args.env:
        raise BadInput(f"{path} was trained on {saved_env}, not {args.env}")
    env_dict = {key: value for key, value in env_dict.items() if key != "packages"}  # imports: the flags' alone
    try:
        settings = EnvSettings.from_dict(env_dict, args.gym_packages)
    except TypeError as exc:
        raise BadInput(f"{path} has an unreadable 'env' entry ({exc})") from None

    notes = []
    later = branches(args.model_path) if args.model_path is not None and os.path.isdir(args.model_path) else []
    if later:  # named as the user named the run (a relative path stays relative)
        run = sibling_stem(args.model_path)
        at, folder = later[-1]
        newest = os.path.join(os.path.dirname(run), os.path.basename(folder))
        notes.append(f"main.py --resume wrote a branch of {run} from its state at {at:,} frames, {newest}"
                     f"{f' (and {len(later) - 1} more)' if len(later) > 1 else ''}: this plays the weights of {run} "
                     f"itself; give --model-path {newest} for the branch's")
    meta = data["model_meta"]
    if (args.hidden_size is not None and meta.get("model") in RECURRENT_MODELS
            and args.hidden_size != meta.get("hidden_size")):  # feed-forward networks have no hidden size
        raise BadInput(f"--hidden-size {args.hidden_size} does not match the model's {meta.get('hidden_size')} "
                       f"(the network is rebuilt from {path}; leave --hidden-size out)")
    if args.max_episode_length is not None:
        settings.max_episode_length = args.max_episode_length
    atari = is_atari(args.env)
    if args.env_config is not None and not atari:
        raise BadInput(f"--env-config is the crop of Atari frames; {args.env} is not an Atari game")
    if args.skip_rate is not None and (why := skip_rate_unread(args.env)) is not None:
        raise BadInput(why)
    if args.skip_rate is not None and args.skip_rate != settings.skip_rate:
        notes.append(f"--skip-rate {args.skip_rate} overrides the model's {settings.skip_rate}")
        settings.skip_rate = args.skip_rate
    if args.state is not None:
        if settings.retro is None:
            raise BadInput(f"--state is for stable-retro games; {args.env} is not one")
        settings.retro = {**settings.retro, "eval_states": retro_env.state_paths(args.env, args.state)}
    elif settings.retro is not None:  # state files are the training machine's paths
        states = retro_env.start_states(settings.retro, train=False)
        for state in states:
            if not os.path.isfile(state):
                raise BadInput(f"{path} starts its games from {state}, which is not here: give --state FILE "
                               f"(or the name of a state in the game's integration folder)")
        if not states:  # the game's own start state, which this machine may lack (a3g's Mario Kart: retro_state)
            retro_env.check_default_state(args.env)
    if args.env_config is not None and atari:
        crop = env_conf_for(args.env, load_env_config(args.env_config))
        if crop != settings.crop:
            notes.append(f"--env-config crop {crop} overrides the model's {settings.crop}")
            settings.crop = crop

    try:
        model = build_model(meta)
        model.load_state_dict(data["state_dict"])
    except BadInput:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInput(f"{path}: the weights do not fit the network it describes ({reason[:200]})") from None
    return path, data, settings, model, notes


def model_path(args: argparse.Namespace) -> str:
    """The file that ``--model-path`` (a file or a run directory) or ``--load-model-dir`` names."""
    if args.latest and (args.model_path is None or not os.path.isdir(args.model_path)):
        raise BadInput("--latest picks a run's checkpoint.pt: give the run directory as --model-path")
    if args.model_path is None:
        path = os.path.join(args.load_model_dir, f"{env_file_name(args.env or DEFAULT_ENV)}.pt")
        if not os.path.isfile(path):
            raise BadInput(f"model file {path} not found (train one with main.py, or give --model-path FILE or a "
                           f"run directory)")
        return path
    if os.path.isdir(args.model_path):
        path = os.path.join(args.model_path, "checkpoint.pt" if args.latest else BEST_MODEL)
        if not os.path.isfile(path):
            what = "no checkpoint.pt" if args.latest else f"no {BEST_MODEL} (no evaluator game finished; --latest " \
                                                          f"plays its checkpoint.pt)"
            raise BadInput(f"run directory {args.model_path} holds {what}")
        return path
    if not os.path.isfile(args.model_path):
        raise BadInput(f"model file {args.model_path} not found")
    return args.model_path


def weights_note(data: dict) -> str:
    """Which weights are played, for the header: an evaluator game's, a checkpoint's, or an exported model's."""
    frames = float(data.get("frames", math.nan))
    at = f"{frames:,.0f} frames" if math.isfinite(frames) else "an unknown frame count"
    if data.get("kind") == "checkpoint":
        return f"a checkpoint's latest weights, at {at}"
    score = float(data.get("return", math.nan))
    if math.isnan(score):
        return f"weights exported from a checkpoint at {at}"
    return f"the weights of an evaluator game of {score:g}, at {at}"


def check_env_fits(env: gym.Env, meta: dict, path: str) -> None:
    """BadInput, before any game, when the environment's observations or actions are not what the model takes."""
    obs_shape = [int(d) for d in env.observation_space.shape]
    policy, actions = policy_kind(env.action_space)
    wanted = "gaussian" if meta.get("policy") in GAUSSIANS else "categorical"  # clipped or squashed: a Box

    def described(kind, count):
        return f"{count} actions" if kind == "categorical" else f"{count}-dimensional Box actions"

    if obs_shape != list(meta["obs_shape"]) or (policy, actions) != (wanted, meta["num_actions"]):
        raise BadInput(f"{path} expects observations {meta['obs_shape']} and {described(wanted, meta['num_actions'])}, "
                       f"this environment gives {obs_shape} and {described(policy, actions)}")


def device_for_flag(gpu_id: int) -> torch.device:
    """``--gpu-id``'s device (made CUDA's current one); a GPU this machine lacks is BadInput."""
    if gpu_id < 0:
        return torch.device("cpu")
    missing, count = missing_gpus([gpu_id])
    if missing:
        raise BadInput(f"--gpu-id {gpu_id} not available: this machine has {count} CUDA device(s) "
                       f"(use --gpu-id -1 for the CPU)")
    torch.cuda.set_device(gpu_id)  # else CUDA's current device stays cuda:0, where allocations could land
    return torch.device(f"cuda:{gpu_id}")


# ---------------------------------------------------------------------------------------------------------------
# Playing


def summary_line(env_id: str, returns: Sequence[float]) -> str:
    r = np.asarray(returns, dtype=np.float64)
    return (f"{env_id}: mean {r.mean():.2f} ± {r.std():.2f} over {len(r)} episodes "
            f"(best {r.max():g}, worst {r.min():g})")


def write_json(path: str, obj: object) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False))


def prepare_outputs(args: argparse.Namespace) -> tuple[Monitor | None, logging.Logger]:
    """Create every output folder and open the text log up front, so that a bad path fails before any game is
    played: (the --new-gym-eval monitor, the logger of <log-dir>/<env>_mon_log; ``close_log`` closes it)."""
    name = env_file_name(args.env)
    try:
        os.makedirs(args.log_dir, exist_ok=True)
        if args.record:
            earlier = sorted(glob.glob(os.path.join(glob.escape(args.record), f"{name}_episode*")))
            if earlier:
                raise BadInput(f"--record {args.record} already holds videos of {args.env} "
                               f"({os.path.basename(earlier[0])}, ...): they are kept; give another folder")
            os.makedirs(args.record, exist_ok=True)
            try_write(os.path.join(args.record, f"{name}_episode001"))  # a folder it may not write in
        monitor = Monitor(os.path.join(args.log_dir, f"{name}_monitor")) if args.new_gym_eval else None
        if monitor is not None:
            try_write(os.path.join(monitor.folder, "stats.json"))
    except OSError as exc:
        raise BadInput(f"cannot write an output: {exc}") from None
    if args.json:
        try:  # where the results will be written, tried before the games
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        except OSError as exc:
            raise BadInput(f"--json {args.json} cannot be written ({exc.strerror or exc})") from None
        # an earlier --json of gym_eval's may be replaced (same command, newer games), nothing else
        check_json_output(args.json, "--json", {"env", "model", "policy", "episodes"}, "gym_eval")
    log = os.path.join(args.log_dir, f"{name}_mon_log")
    try:  # last: nothing after it can refuse the run and leave the file open
        return monitor, file_logger(LOGGER, log)
    except OSError as exc:
        raise BadInput(f"the text log {log} cannot be written ({exc.strerror or exc})") from None


def close_log(logger: logging.Logger) -> None:
    """Close the text log's file: a second ``main`` in one process (the tests) writes to its own log only."""
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(1)
    rendering = args.render or args.record is not None or args.new_gym_eval
    if not args.render:  # off-screen rendering (pygame for classic control): no window, no audio device, no noise
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    try:
        if args.render:
            check_display()
        device = device_for_flag(args.gpu_id)
        path, data, settings, model, notes = load_model_file(args)
        if rendering and family(args.env) in ("classic", "continuous"):
            try:
                import pygame  # noqa: F401  (gymnasium draws classic control frames with it)
            except ImportError:
                raise BadInput(f"rendering {args.env} (--render/--record/--new-gym-eval) needs pygame: "
                               f"pip install pygame") from None
        env = make_env(settings, train=False, render_mode="rgb_array" if rendering else None)
        check_env_fits(env, data["model_meta"], path)
        monitor, logger = prepare_outputs(args)
    except BAD_INPUT_ERRORS as exc:
        print(f"gym_eval.py: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return evaluate(args, env, device, path, data, settings, model, notes, monitor, logger)
    finally:
        close_log(logger)


def evaluate(args: argparse.Namespace, env, device, path: str, data: dict, settings, model, notes: list[str],
             monitor: Monitor | None, logger: logging.Logger) -> int:
    """Play the games and write their results (``main``'s second half, once every input was checked)."""
    for note in notes:
        print(f"gym_eval.py: note: {note}", file=sys.stderr)

    torch.manual_seed(args.seed)
    env.action_space.seed(args.seed)
    model = model.to(device).eval()
    meta = data["model_meta"]
    fps = video_fps(settings, env)
    policy = "stochastic" if args.stochastic else "greedy"
    header = (f"gym_eval: {args.env}, {path} ({describe_network(meta)}; {weights_note(data)}), "
              f"{args.num_episodes} {policy} games, seed {args.seed}")
    print(header, flush=True)
    logger.info(header)

    viewer = Viewer(f"a3g: {args.env}") if args.render else None
    episodes, code, format_notes = [], EXIT_OK, {}
    try:
        for i in range(args.num_episodes):
            shown = (i % args.render_freq) == 0
            sinks, recorders = [], []
            if viewer is not None and shown:
                sinks.append(lambda frame: viewer.show(frame, fps))
            if args.record is not None and shown:
                stem = os.path.join(args.record, f"{env_file_name(args.env)}_episode{i + 1:03d}")
                recorders.append(VideoRecorder(stem, fps, args.video_format, format_notes))
            if monitor is not None and monitor.wants_video(i):
                recorders.append(VideoRecorder(monitor.video_stem(i), fps, args.video_format, format_notes))
            sinks += [rec.add for rec in recorders]
            try:
                episode_return, length = play_game(env, model, device, settings.max_episode_length,
                                                   stochastic=args.stochastic, seed=args.seed if i == 0 else None,
                                                   frame_sinks=sinks,
                                                   between=GameProgress(f"game {i + 1}/{args.num_episodes}"))
            finally:
                videos = [rec.close() for rec in recorders]
            episodes.append({"return": episode_return, "length": length})
            if monitor is not None:
                monitor.add(episode_return, length)
            mean = float(np.mean([e["return"] for e in episodes]))
            line = (f"Episode {i + 1}/{args.num_episodes}, episode reward {episode_return:g}, "
                    f"episode length {length}, reward mean {mean:.4f}")
            if args.record is not None and shown and videos[0]:
                line += f", video {videos[0]} ({recorders[0].frames} frames at {fps:g} fps)"
            print(line, flush=True)
            logger.info(line)
    except (KeyboardInterrupt, WindowClosed) as exc:
        code = EXIT_SIGINT if isinstance(exc, KeyboardInterrupt) else EXIT_OK
        why = "interrupted" if isinstance(exc, KeyboardInterrupt) else "window closed"
        print(f"gym_eval.py: {why} after {len(episodes)} complete game(s)", file=sys.stderr, flush=True)
    except Exception as exc:  # a renderer that fails mid-run: one line, not a traceback
        if not is_render_error(exc):
            raise
        print(f"gym_eval.py: error: rendering failed ({str(exc).splitlines()[0] if str(exc) else exc!r})",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        env.close()
        if viewer is not None:
            viewer.close()

    if not episodes:
        return code
    returns = [e["return"] for e in episodes]
    line = summary_line(args.env, returns)
    print(line, flush=True)
    logger.info(line)
    if args.json:
        r = np.asarray(returns, dtype=np.float64)
        try:
            write_json(args.json, {
                "env": args.env, "model": path, "policy": policy, "seed": args.seed,
                "max_episode_length": settings.max_episode_length, "episodes": episodes,
                "mean": float(r.mean()), "std": float(r.std()), "best": float(r.max()), "worst": float(r.min()),
            })
        except OSError as exc:  # writable before the games, not now (a full disk): the summary above stands
            print(f"gym_eval.py: error: could not write --json {args.json} ({exc.strerror or exc})", file=sys.stderr)
            return EXIT_CRASH
    return code


if __name__ == "__main__":
    sys.exit(main())
