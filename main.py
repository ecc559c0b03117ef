"""a3g: A3G training (hogwild A3C, each worker with its own replica on a GPU or the CPU).

    python main.py                                  # PongNoFrameskip-v4, one worker per core, all visible GPUs
    python main.py --env CartPole-v1 --workers 2 --stop-score 475
    python main.py --resume runs/<run>              # continue a run: model, optimizer state, frame count

This file wires a run together: the checked flags (config.py), the shared model and optimizer, the run directory
(run_dir.py), the roles -- A3G's workers (train.py) or IMPALA's actors and learner (impala/), and the evaluator
(test.py, runtime/evaluator.py) -- handed to the supervisor (supervisor.py), which watches them and enforces the
limits; on every way out it stops them all, writes checkpoint.pt (checkpoints.py) and summary.json, and exits with 0
(limit or solved), 1 (crash), 2 (bad input) or 130/143 (Ctrl-C / SIGTERM). With ``--algo impala --backend ray`` it
also starts (or joins) the Ray cluster first and stops (or leaves) it last (impala/ray_backend.py).
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch starts: every process runs one thread (see runtime/processes.py)

import argparse
import json
import math
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.multiprocessing as mp

from core.errors import BAD_INPUT_ERRORS, EXIT_BAD_INPUT, EXIT_CRASH, EXIT_SIGINT, EXIT_SIGTERM
from core.faults import injected_fault
from core.files import atomic_write_text, remove_stale_temporaries
from core.hardware import cpu_has_native_bf16
from core.logs import Stopwatch, format_time, survive_lost_console
from envs.environment import EnvSettings
from impala.replay import check_run_memory
from impala.shm import impala_roles
from model import build_model, describe_network, fast_layout, flatten_parameters, set_log_std
from runtime.checkpoints import CheckpointWriter, checkpoint_payload, frames_on_disk, resumed_file
from runtime.config import check_budget_left, rate_past_its_fall, validate
from runtime.context import RunContext
from runtime.evaluator import window_start
from runtime.processes import evaluator_shares, process_context, stop_fork_server
from runtime.progress import Progress, TrainingGames
from runtime.run_dir import (
    csv_column,
    prepare_run_dir,
    resumed_run_dir,
    write_tensorboard_hparams,
    write_tensorboard_results,
)
from runtime.run_state import RunState
from runtime.supervisor import (
    Supervisor,
    Terminated,
    make_supervisor_log,
    raise_terminated,
    stop_resource_tracker,
    supervise,
)
from runtime.tensorboard_log import TrainingLog
from shared_optim import hyperparameters, optimizer_for
from train import a3g_roles, unused_step_sizes

if TYPE_CHECKING:  # for the annotations only: Ray is an optional extra, imported when a run asks for it
    from impala.ray_backend import Cluster


def main(argv: Sequence[str] | None = None) -> int:
    """main.py's command: check the input, start (or join) a Ray cluster if asked, run; returns the exit code."""
    survive_lost_console()  # `| head`, a tee that Ctrl-C ended, a closed terminal: the run goes on, or stops saved
    try:
        args, settings, meta, resumed, loaded = validate(sys.argv[1:] if argv is None else argv)
        if resumed is not None:
            check_budget_left(resumed, args)
        if args.algo == "impala":  # the replays' size needs the observation's shape, known only now
            check_run_memory(args, settings, meta)
    except BAD_INPUT_ERRORS as exc:
        print(f"main.py: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    cluster = None
    if args.backend == "ray":  # joining the user's cluster is the last check of the input
        from impala.ray_backend import (  # Ray is an optional extra: imported only when asked for
            ClusterError,
            start_cluster,
        )

        try:
            cluster = start_cluster(args)
        except BAD_INPUT_ERRORS as exc:
            print(f"main.py: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except ClusterError as exc:  # not the input's fault, and nothing started: exit 1
            print(f"main.py: error: {exc}", file=sys.stderr)
            return EXIT_CRASH
        except KeyboardInterrupt:  # before anything was built: nothing to save
            return EXIT_SIGINT
    try:
        return run(args, settings, meta, resumed, loaded, cluster)
    finally:
        if cluster is not None:  # after the final save: a cluster the run started goes with it, a joined one stays
            cluster.stop()


def run(args: argparse.Namespace, settings: EnvSettings, meta: dict, resumed: dict | None, loaded: dict | None,
        cluster: "Cluster | None") -> int:
    """The run itself, once the input is known good: shared state, run directory, roles, supervision, final save
    and summary; returns the exit code."""
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    # in the replicas' layout, its parameters views of one flat shared buffer: a replica syncs in one copy
    try:
        shared_model = fast_layout(build_model(meta), meta, args.channels_last)
        flatten_parameters(shared_model, shared=True)
    except (MemoryError, RuntimeError) as exc:
        if not isinstance(exc, MemoryError) and "allocate" not in str(exc):
            raise
        print(f"main.py: error: the network ({describe_network(meta)}) does not fit in memory: lower --hidden-size",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    optimizer = None
    if args.shared_optimizer:
        optimizer = optimizer_for(args, shared_model.parameters(), True)
    counters = {}
    try:
        if resumed is not None:
            shared_model.load_state_dict(resumed["state_dict"])
            saved_optimizer = (resumed.get("args") or {}).get("optimizer", args.optimizer)
            if optimizer is not None and resumed.get("optimizer") is not None:
                if saved_optimizer != args.optimizer:
                    print(f"a3g: note: {args.resume} holds {saved_optimizer} statistics; --optimizer "
                          f"{args.optimizer} starts with fresh ones", file=sys.stderr, flush=True)
                else:
                    optimizer.load_state_dict(resumed["optimizer"])
                    # the saved groups' lr/eps/amsgrad would win over the flags given now: apply the flags
                    optimizer.set_hyperparameters(**hyperparameters(args))
            counters = {k: resumed.get(k, 0) for k in ("frames", "episodes", "eval_episodes")}
            counters.update({k: resumed.get(k, -math.inf) for k in ("best_return", "best_mean_return")})
            if (resumed.get("args") or {}).get("score_window", args.score_window) != args.score_window:
                counters["best_mean_return"] = -math.inf  # a mean over another window: the best starts again
        elif loaded is not None:
            shared_model.load_state_dict(loaded["state_dict"])
        else:
            set_log_std(shared_model, args.log_std_init)
    except (RuntimeError, ValueError, KeyError) as exc:
        source = args.resume if resumed is not None else "--load model"
        print(f"main.py: error: {source} does not fit this network ({str(exc).splitlines()[0]})", file=sys.stderr)
        return EXIT_BAD_INPUT
    shared_model.share_memory()

    ctx = process_context()
    state = RunState(ctx, args.workers, **counters)
    start_seconds = float(resumed.get("seconds", 0.0)) if resumed is not None else 0.0
    # From the run's first file on, a Ctrl-C or SIGTERM waits for the try below, which stops the run as any stop
    # does, its state saved: cut in between, the folder held a run that could neither start again nor resume.
    stops = []
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGHUP: the terminal closed
        signal.signal(signum, lambda signum, frame: stops.append(signum))
    try:
        paths = prepare_run_dir(args, resumed)
    except OSError as exc:  # a path that cannot be a folder, no permission, a full disk: nothing has started yet
        print(f"main.py: error: cannot prepare the output folders: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # the evaluator's running mean takes the games played as it plays now: a resume that changes how starts afresh
    played = len(csv_column(paths["progress"], "return"))
    first_game, window_note = window_start(resumed, args, settings.as_dict(), played)
    if window_note is not None:
        state.best_mean_return.value = -math.inf  # a mean over games played another way: the best starts again
    if injected_fault("start_sigint"):  # test hook: a Ctrl-C while the run starts
        os.kill(os.getpid(), signal.SIGINT)
    if args.tensorboard_logger:
        write_tensorboard_hparams(args)
    clock = Stopwatch()
    log = make_supervisor_log(paths["log_file"])
    checkpoints = CheckpointWriter(paths["checkpoint"], args.keep_checkpoints, log,
                                   frames_on_disk(paths["checkpoint"], args.resume, resumed),
                                   protect=resumed_file(args.resume) if resumed is not None else None)

    def save_checkpoint():
        return checkpoints.save(checkpoint_payload(settings.as_dict(), meta, shared_model, optimizer, state,
                                                   start_seconds + clock(), first_game, args))

    device_names = sorted({"cpu" if g < 0 else f"cuda:{g}" for g in args.gpu_ids})
    roles_line = (f"{args.workers} actor(s) and a learner" if args.algo == "impala" else f"{args.workers} worker(s)")
    print(f"a3g: training {args.env} ({args.algo}, {args.objective}) with {roles_line} on {', '.join(device_names)}, "
          f"model {describe_network(meta)}, evaluator on {describe_evaluator_share(args)}; run directory {args.run_dir}"
          + (f" (resumed at {int(state.frames.value)} frames{branch_note(args)})" if resumed is not None else "")
          + (f"; {cluster.describe(args.workers)}" if cluster is not None else ""), flush=True)
    if args.defaults:
        print(f"a3g: {args.defaults} (a flag given on the command line always wins)", flush=True)
    if args.bf16 and -1 in args.gpu_ids and not cpu_has_native_bf16():
        print("a3g: warning: --bf16 on a CPU without native bfloat16 support is emulated: expect slower training, "
              "not faster", file=sys.stderr, flush=True)
    for note in (unused_step_sizes(args), rate_past_its_fall(args), window_note):
        if note is not None:
            print(f"a3g: note: {note}", file=sys.stderr, flush=True)

    context = RunContext(args, settings, meta, shared_model, optimizer, state, paths, start_seconds, first_game)
    if cluster is not None:
        from impala.ray_backend import ray_roles

        roles = ray_roles(context, cluster.address)
    elif args.algo == "impala":
        roles = impala_roles(ctx, context)
    else:
        roles = a3g_roles(context)
    supervisor = Supervisor(ctx, roles, state, args.max_restarts, log)
    reason, code = "error", EXIT_CRASH
    training_log = games = None
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, raise_terminated)
        signal.signal(signal.SIGHUP, raise_terminated)  # stops as SIGTERM does: saved, exit 143
        if stops:
            raise KeyboardInterrupt if stops[0] == signal.SIGINT else Terminated
        supervisor.start()
        progress = Progress(args, state, clock, start_seconds, args.progress_interval)
        games = TrainingGames(paths["games"], state, clock, start_seconds, log)
        if args.tensorboard_logger:
            training_log = TrainingLog(args, state, shared_model, meta, clock, log)

        def on_each_look():
            progress()
            games()
            if training_log is not None:
                training_log()

        reason, code = supervise(args, supervisor, state, clock, save_checkpoint, log, on_each_look)
    except KeyboardInterrupt:
        reason, code = "interrupted", EXIT_SIGINT
    except Terminated:
        reason, code = "interrupted", EXIT_SIGTERM
    finally:
        # From here on the run is ending: a second Ctrl-C or SIGTERM must not cut the final save short.
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        if reason == "interrupted":
            print("a3g: stopping (saving state)...", file=sys.stderr, flush=True)
        supervisor.stop()
        stop_fork_server()
        for folder in {args.run_dir, args.save_model_dir}:  # what a child killed mid-write left there
            remove_stale_temporaries(folder, supervisor.started)
        if training_log is not None:
            training_log.close()
        if games is not None:
            games.close()
        saved = save_checkpoint()
        summary = {
            "frames": int(state.frames.value),
            "seconds": round(start_seconds + clock(), 3),
            "episodes": int(state.episodes.value),
            "best_return": finite_or_none(state.best_return.value),
            "best_mean_return": finite_or_none(state.best_mean_return.value),
            "solved": bool(state.solved.value),
            "stop_reason": reason,
            "restarts": supervisor.restarts + int(state.actor_restarts.value),  # Ray's actors are the learner's
            "skipped_updates": int(state.nonfinite.value),
            # where the workers', actors' and learner's time went, this invocation (core/timing.py's phases)
            "phase_seconds": {name: round(seconds, 1) for name, seconds in state.phase_totals().items()},
        }
        if args.algo == "impala":
            summary.update(dropped_unrolls=int(state.dropped.value), actor_waits=int(state.actor_waits.value))
            if args.kl_mask:  # the trust region's share of the learner's steps, over the whole run
                masked, seen = state.masked[:]
                summary.update(masked_fraction=round(masked / seen, 6) if seen else 0.0, masked_of_steps=int(seen))
            if args.inference == "server":
                summary.update(inference_batches=int(state.inference[0]),
                               inference_mean_batch=round(state.mean_inference_batch(), 2))
        try:
            atomic_write_text(paths["summary"], json.dumps(summary, indent=2))
            if args.tensorboard_logger:
                write_tensorboard_results(args, summary)
        except OSError as exc:
            log(f"could not write {paths['summary']} ({exc}); the summary was: {json.dumps(summary)}")
        print(f"a3g: {reason} after {format_time(summary['seconds'])}, {summary['frames']} frames; "
              f"{results_line(summary, args.score_window)}; "
              + (f"state in {paths['checkpoint']}" if saved else "the last checkpoint could not be written"),
              flush=True)
        stop_resource_tracker()
    return code


def finite_or_none(x: float) -> float | None:
    """``x``, or None for an infinity or NaN (summary.json holds no such numbers)."""
    return x if math.isfinite(x) else None


def describe_evaluator_share(args: argparse.Namespace) -> str:
    """The evaluator's CPU for the start-up line: '0.2 of a core', and what it plays at when confirming a score."""
    share, confirm = evaluator_shares(args)
    text = f"{share:g} of a core"
    if args.stop_score is not None and confirm > share:
        text += f" ({confirm:g} while its latest game is at --stop-score {args.stop_score:g})"
    return text


def branch_note(args: argparse.Namespace) -> str:
    """The start-up line's word on a resume into another folder than the one resumed from."""
    source = resumed_run_dir(args.resume)
    if os.path.abspath(source) == os.path.abspath(args.run_dir):
        return ""
    return f" of {source}, which is left as it was"


def results_line(summary: dict, window: int) -> str:
    """The last line's scores, in words: the best game, and the best mean of ``window`` games once there were as
    many."""
    if summary["best_return"] is None:
        return "no evaluator game finished"
    best_mean = summary["best_mean_return"]
    mean = (f"best mean of {window} games {best_mean:g}" if best_mean is not None
            else f"fewer than {window} evaluator games, so no mean of {window}")
    return f"best game {summary['best_return']:g}, {mean}"


if __name__ == "__main__":
    sys.exit(main())
