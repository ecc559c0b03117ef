"""The evaluator, for A3G and IMPALA alike: plays full games greedily (``--eval-stochastic``: sampling from the policy)
with the latest shared weights, logs them, keeps the best model.

Games are whole (no life-loss episodes) and scored with raw, unclipped rewards. After every game it
- prints one line and appends a row to ``progress.csv`` (and TensorBoard, with the workers' latest losses);
- saves the weights that played it to the run directory's ``best_model.pt``: with ``--save-max`` (the default)
  only games at least as good as the run's best so far, else every game; with ``--save-model-dir`` also to
  ``<save-model-dir>/<env>.pt``, where a file another run wrote is replaced only by a better game;
- declares the run solved once the mean of the last ``--score-window`` games reaches ``--stop-score``.
The mean is the run's: a resumed run's starts with the last games in its ``progress.csv``, unless the resume changes
how the evaluator plays (``--eval-stochastic``, its start states): those games were played another way.
"""

import argparse
import collections
import csv
import logging
import math
import os
import sys
import time
from typing import Callable

import numpy as np
import torch

from core.errors import BadInput
from core.files import atomic_torch_save
from core.hardware import device_for
from core.logs import file_logger, format_time
from core.play import play_game
from envs import retro_env
from envs.environment import make_env
from model import build_model, fast_layout
from runtime.checkpoints import load_checkpoint, model_file
from runtime.context import RunContext
from runtime.processes import (
    CpuPacer,
    evaluator_shares,
    parent_alive,
    setup_child_process,
    share_after_game,
)
from runtime.run_dir import csv_column, recent_returns


def evaluator_role(run: RunContext, target: Callable | None = None) -> tuple[Callable, tuple]:
    """The evaluator for the supervisor (``target``: ``evaluate``, or A3G's ``test.test`` that calls it), with
    the run's frames and the time at this start, so that its clock and frames/s survive resumes and restarts."""
    return target or evaluate, (run, os.getpid(), run.state.frames.value, time.time())


def evaluate(run: RunContext, parent_pid: int, start_frames: float, run_started: float) -> None:
    """Play, log and keep evaluator games until the run stops. ``start_frames``: the run's frames when this
    invocation began (at ``run_started``, a ``time.time()``); with ``run.start_seconds`` they keep times and
    frames/s right across resumes and restarts."""
    args, settings, meta, shared_model, state, paths = (run.args, run.settings, run.meta, run.shared_model,
                                                        run.state, run.paths)
    start_seconds = run.start_seconds
    setup_child_process(args.seed + args.workers, parent_pid)
    # With one worker per core, fair scheduling would give the evaluator a third of a 2-core machine. It paces
    # itself to --evaluator-cpu of a core instead; --evaluator-nice lowers its priority as well (docs/log/speed.md).
    # While its latest game is at --stop-score, the games that can end the run are the run's critical path: the
    # evaluator then plays them at --confirm-cpu (a whole core by default), the workers slowed only for those games.
    share, confirm_share = evaluator_shares(args)
    pacer = CpuPacer(share, state.stop)
    if args.evaluator_nice:
        os.nice(args.evaluator_nice)
    device = device_for(args.gpu_ids, 0)
    if device.type == "cuda":  # else CUDA's current device stays cuda:0, where allocations could land
        torch.cuda.set_device(device)
    env = make_env(settings, train=False)
    env.reset(seed=args.seed + args.workers)
    model = fast_layout(build_model(meta).to(device), meta, args.channels_last)
    model.eval()

    def keep_playing(length):
        """Between bits of a game: keep to the CPU share, and give up the game when the run stops."""
        pacer.pace()
        return length % 100 != 0 or not (state.stop.is_set() or not parent_alive(parent_pid))

    logger = file_logger("a3g.test", paths["log_file"])
    writer = None
    if args.tensorboard_logger:
        from torch.utils.tensorboard import SummaryWriter  # imported here: the workers write no events

        writer = SummaryWriter(paths["run_dir"], filename_suffix=".evaluator")
    told_kept = False
    # a run killed after its best game and before the next checkpoint: that game's score is in best_model.pt alone
    state.best_return.value = max(state.best_return.value, kept_return(paths["best_model"]))
    with open(paths["progress"], "a", newline="") as f:
        progress = csv.writer(f)
        # a resumed run's mean goes on from its last games (progress.csv holds them), not from one game, and the
        # start states' turns from the games played so far (each state counts alike in the window)
        retro_env.take_turns_from(env, len(csv_column(paths["progress"], "return")[run.window_start:]))
        scores = collections.deque(recent_returns(paths["progress"], args.score_window, run.window_start),
                                   maxlen=args.score_window)
        if scores:
            state.latest_mean.value = float(np.mean(scores))
        while not state.stop.is_set() and parent_alive(parent_pid):
            model.load_state_dict(shared_model.state_dict())
            result = play_game(env, model, device, args.max_episode_length, stochastic=args.eval_stochastic,
                               between=keep_playing)
            if result is None:
                break
            episode_return, length = result
            scores.append(episode_return)
            mean_return = float(np.mean(scores))
            elapsed = time.time() - run_started
            frames = state.frames.value
            fps = (frames - start_frames) / max(elapsed, 1e-9)
            state.eval_episodes.value += 1
            state.latest_mean.value = mean_return
            if len(scores) == args.score_window:
                state.best_mean_return.value = max(state.best_mean_return.value, mean_return)

            line = (f"Time {format_time(start_seconds + elapsed)}, frames {int(frames)}, fps {fps:.0f}, "
                    f"episode reward {episode_return:g}, episode length {length}, reward mean {mean_return:.4f}")
            print(line, flush=True)
            logger.info(line)
            progress.writerow([f"{start_seconds + elapsed:.2f}", int(frames), state.episodes.value,
                               episode_return, length, f"{mean_return:.4f}", f"{fps:.1f}"])
            f.flush()
            if writer is not None:
                step = int(frames)
                writer.add_scalar("eval/episodic_return", episode_return, step)
                writer.add_scalar("eval/episodic_length", length, step)
                writer.add_scalar("eval/mean_return", mean_return, step)
                writer.flush()

            # A branch's first game is saved whatever the parent's best: the branch's folder has no model yet.
            if (not args.save_max or episode_return >= state.best_return.value
                    or not os.path.exists(paths["best_model"])):
                payload = model_file(settings.as_dict(), meta, model.state_dict(), episode_return, frames,
                                     paths["run_dir"])
                save_model(paths["best_model"], payload, logger)  # the run's own folder: only this run writes
                if paths["export_model"] is not None:
                    if may_replace(paths["export_model"], payload):
                        save_model(paths["export_model"], payload, logger)
                    elif not told_kept:  # once a run: why --save-model-dir's file did not change
                        told_kept = True
                        note = kept_note(paths["export_model"], paths["best_model"])
                        print(note, flush=True)
                        logger.info(note)
            state.best_return.value = max(state.best_return.value, episode_return)

            if args.stop_score is not None and len(scores) == args.score_window and mean_return >= args.stop_score:
                state.solved.value = 1
                state.stop.set()
            pacer.share = share_after_game(episode_return, args.stop_score, share, confirm_share)
            pacer.pace()
    if writer is not None:
        writer.close()


def how_it_plays(args: dict, env: dict) -> tuple[bool, list[str]]:
    """How the evaluator plays its games with a run's flags and environment settings (``vars(args)`` and
    ``EnvSettings.as_dict()``, or a checkpoint's): sampling or greedy, and from which start states."""
    retro = env.get("retro")
    return bool(args.get("eval_stochastic", False)), retro_env.start_states(retro, train=False) if retro else []


def window_start(resumed: dict | None, args: argparse.Namespace, settings: dict, played: int) -> tuple[int, str | None]:
    """The first game in progress.csv (``played`` games long now) that the evaluator's running mean takes, and a
    note for the user when that changes: a resumed run's own start, or, where the resume changes how the evaluator
    plays (``how_it_plays``), the next game, so that the mean never mixes games played two ways."""
    if resumed is None:
        return 0, None
    before = how_it_plays(resumed.get("args") or {}, resumed.get("env") or {})
    now = how_it_plays(vars(args), settings)
    if before == now:
        return int(resumed.get("eval_window_start", 0)), None
    kind = ("sampled " if now[0] else "greedy ") if before[0] != now[0] else ""
    where = " from other start states" if before[1] != now[1] else ""
    return played, (f"the evaluator now plays {kind}games{where}: its --score-window mean starts afresh, without "
                    f"the {played} games already in progress.csv")


def kept_return(path: str) -> float:
    """The score of the game whose weights ``path`` holds; -inf where there is none (no file, no score, not a
    readable model)."""
    if not os.path.exists(path):
        return -math.inf
    try:
        score = float(load_checkpoint(path, kind="model").get("return", math.nan))
    except BadInput:
        return -math.inf
    return -math.inf if math.isnan(score) else score


def may_replace(path: str, payload: dict) -> bool:
    """Whether the evaluator may write ``payload`` to ``path`` (in ``--save-model-dir``): a file this run wrote, or
    none; a model file that another run (or the project) keeps, only with a better game. A file that is no
    readable model is kept."""
    if not os.path.exists(path):
        return True
    try:
        held = load_checkpoint(path, kind="model")
    except BadInput:
        return False
    if held.get("run") == payload["run"]:
        return True
    # an exported model records no score (NaN), so no game beats it: it is the user's to replace
    return payload["return"] > float(held.get("return", math.nan))


def kept_note(path: str, best_model: str) -> str:
    """What a run says the first time ``may_replace`` keeps ``path``: whose file it is and where this run's best
    weights are instead."""
    try:
        held = load_checkpoint(path, kind="model")
    except BadInput:
        whose = "is no model file a3g can read"
    else:
        score = float(held.get("return", math.nan))
        whose = ("is an exported model with no score recorded, which no game replaces" if math.isnan(score) else
                 f"is another run's model (its game scored {score:g}), replaced only by a better game")
    return f"a3g: {path} {whose}; this run's best weights are in {best_model}"


def save_model(path: str, payload: dict, logger: logging.Logger) -> None:
    """The weights that just played, with what is needed to rebuild them: small, plain, safe to load. A failed write
    (disk full, say) leaves the previous file intact, and the evaluator goes on."""
    try:
        atomic_torch_save(payload, path)
    except OSError as exc:
        print(f"a3g: could not save {path} ({exc.strerror or exc}); the previous model file is intact",
              file=sys.stderr, flush=True)
        logger.info(f"could not save {path}: {exc}")
