"""a3g: A3G training (hogwild A3C, each worker with its own replica on a GPU or the CPU).

    python main.py                                  # PongNoFrameskip-v4, one worker per core, all visible GPUs
    python main.py --env CartPole-v1 --workers 2 --stop-score 475
    python main.py --resume runs/<run>              # continue a run: model, optimizer state, frame count

This file is the supervisor: it parses and checks the flags, builds the shared model and optimizer, spawns the
workers (train.py) and the evaluator (test.py), watches them, enforces the limits, and on every way out stops them
all, writes checkpoint.pt and summary.json, and exits with 0 (limit or solved), 1 (crash), 2 (bad input) or
130/143 (Ctrl-C / SIGTERM).
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch starts: every process runs one thread (see utils.py)

import argparse
import collections
import csv
import datetime
import json
import math
import signal
import sys
import time
from multiprocessing import resource_tracker, util

import numpy as np
import torch
import torch.multiprocessing as mp

from defaults import AUTO, auto_or, describe, resolve_defaults
from environment import ConfigError, EnvSettings, env_conf_for, env_spec, frames_per_step, is_atari, load_env_config
from environment import make_env
from model import FRAME_FORMAT, ModelError, build_model, choose_model, model_meta
from shared_optim import make_optimizer
from test import PROGRESS_FIELDS, test
from train import train
from utils import (FORMAT_VERSION, CheckpointError, OneLineParser, RunState, Stopwatch, atomic_torch_save,
                   atomic_write_text, check_compatible, cpu_has_native_bf16, env_file_name, evaluator_cpu_share,
                   file_logger, format_time, load_checkpoint, missing_gpus, usable_cores)

HERE = os.path.dirname(os.path.abspath(__file__))
EXIT_OK, EXIT_CRASH, EXIT_BAD_INPUT, EXIT_SIGINT, EXIT_SIGTERM = 0, 1, 2, 130, 143


def cpu_share(text):
    """--evaluator-cpu: 'auto' or a fraction of one core in (0, 1]."""
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a fraction of one core in (0, 1], got {text!r}")
    return value


def default_gpu_ids():
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else [-1]


def build_parser(suppress_defaults=False):
    p = OneLineParser(prog="main.py", description="A3G: asynchronous advantage actor-critic on CPU and GPU.",
                      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add = p.add_argument
    # rl_a3c_pytorch's flags: same names, short forms and meaning
    add("-l", "--lr", type=auto_or(float), default=AUTO,
        help="learning rate; auto: 1e-4 for a3clstm (rl_a3c_pytorch's), 3e-4 for nature/resnet, 2e-3 for mlplstm")
    add("-ec", "--entropy-coef", type=float, default=0.01, help="entropy bonus coefficient")
    add("-vc", "--value-coef", type=auto_or(float), default=AUTO,
        help="value loss coefficient; auto: 0.5 for Atari, 0.1 for classic control")
    add("-g", "--gamma", type=float, default=0.99, help="discount factor")
    add("-t", "--tau", type=float, default=1.00, help="GAE lambda (1.0 = plain n-step advantages)")
    add("-s", "--seed", type=int, default=1, help="random seed; worker rank r uses seed + r")
    add("-w", "--workers", type=int, default=usable_cores(), help="training processes (default: CPU cores)")
    add("-ns", "--num-steps", type=int, default=20, help="rollout length (forward steps per update)")
    add("-mel", "--max-episode-length", type=int, default=10000, help="cut episodes after this many agent steps")
    add("-ev", "--env", default="PongNoFrameskip-v4", help="gymnasium environment id")
    add("-so", "--shared-optimizer", action=argparse.BooleanOptionalAction, default=True,
        help="optimizer statistics shared by all workers (else one optimizer per worker)")
    add("-ld", "--load", action="store_true", help="start from the weights in <load-model-dir>/<env>.pt")
    add("-sm", "--save-max", action=argparse.BooleanOptionalAction, default=True,
        help="save the evaluator's model only when its score matches or beats the best (else after every game)")
    add("-o", "--optimizer", default="Adam", choices=["Adam", "RMSprop"], help="optimizer")
    add("-lmd", "--load-model-dir", default="trained_models/", help="folder --load reads <env>.pt from")
    add("-smd", "--save-model-dir", default="trained_models/", help="folder the best model <env>.pt goes to")
    add("-lg", "--log-dir", default="logs/", help="folder of the text log <env>_log")
    add("-gp", "--gpu-ids", type=int, nargs="+", default=default_gpu_ids(),
        help="GPUs for the workers, round-robin; -1 = CPU (default: all visible GPUs, else -1)")
    add("-a", "--amsgrad", action=argparse.BooleanOptionalAction, default=False, help="Adam's amsgrad variant")
    add("--skip-rate", type=int, default=4, help="Atari frames per agent step (the emulator's own for v5 ids)")
    add("-hs", "--hidden-size", type=auto_or(int), default=AUTO,
        help="LSTM hidden size (recurrent networks only); auto: 512 for a3clstm, 64 for mlplstm")
    add("-tl", "--tensorboard-logger", action=argparse.BooleanOptionalAction, default=True,
        help="write TensorBoard events into the run directory")
    add("-evc", "--env-config", default=os.path.join(HERE, "config.json"), help="per-game crop settings (JSON)")
    add("-dss", "--distributed-step-size", type=int, nargs="+", default=[],
        help="rollout lengths handed out to the workers round-robin (overrides --num-steps)")
    # a3g's own
    add("--model", default=AUTO, choices=[AUTO, "a3clstm", "mlplstm", "nature", "resnet"],
        help="network; auto: nature for Atari on a CPU-only machine, a3clstm for Atari with GPUs, mlplstm for "
             "vectors; nature and resnet are feed-forward on 4 stacked 84x84 frames")
    add("--channels-last", action=argparse.BooleanOptionalAction, default=True,
        help="channels-last memory layout for the conv networks' replicas (faster on CPU)")
    add("--bf16", action=argparse.BooleanOptionalAction, default=AUTO,
        help="bfloat16 autocast for the workers' forward passes (faster, less exact); auto: on for Atari on a "
             "CPU-only machine whose CPU has native bf16, else off")
    add("--envs-per-worker", type=auto_or(int), default=AUTO,
        help="environments each worker steps together (batched); auto: 8 for Atari on a CPU-only machine, 1 with "
             "GPUs, 4 for classic control")
    add("--eps", type=auto_or(float), default=AUTO,
        help="the optimizer's epsilon; auto: rl_a3c_pytorch's, 1e-3 for Adam and 0.1 for RMSprop")
    add("--max-frames", type=int, default=None, help="stop after this many frames in total (resumed ones included)")
    add("--max-seconds", type=float, default=None, help="stop after this many seconds of this invocation")
    add("--stop-score", type=float, default=None, help="stop ('solved') when the evaluator's mean reaches this")
    add("--score-window", type=int, default=10, help="evaluator games in the mean that --stop-score tests")
    add("--max-grad-norm", type=float, default=0.0, help="clip the gradient norm per update (0 = off)")
    add("--run-dir", default=None, help="exact run directory (default: runs/<env>__<seed>__<timestamp>)")
    add("--resume", default=None, help="continue from a run directory or its checkpoint.pt")
    add("--evaluator-cpu", type=cpu_share, default="auto", metavar="auto|FRACTION",
        help="the most of one core the evaluator uses, on average (it pauses between bits of games); auto: all of "
             "one when the workers leave a core free, else a tenth of the machine (0.2 on 2 cores)")
    add("--evaluator-nice", type=int, default=0, choices=range(0, 20), metavar="0..19",
        help="scheduling niceness of the evaluator: 10 leaves the workers the CPU, but evaluator games, and so "
             "'solved', come much later")
    add("--checkpoint-interval", type=float, default=300.0, help="seconds between checkpoint.pt saves")
    add("--keep-checkpoints", type=int, default=3,
        help="checkpoints kept: checkpoint.pt and the previous ones as checkpoint-<frames>.pt")
    add("--max-restarts", type=int, default=5,
        help="dead workers/evaluators replaced within 60 s before the run stops with an error")
    add("--max-nonfinite", type=int, default=100,
        help="non-finite updates in a row (each skipped) after which the run stops as diverged")
    if suppress_defaults:
        for action in p._actions:
            action.default = argparse.SUPPRESS
    return p


# ---------------------------------------------------------------------------------------------------------------
# Flags: parse, merge with a resumed run, check once


def parse_args(argv):
    args = build_parser().parse_args(argv)
    explicit = vars(build_parser(suppress_defaults=True).parse_args(argv))
    resumed = None
    if args.resume:
        resumed = load_checkpoint(args.resume, kind="checkpoint")
        # A resumed run keeps its own settings; only flags given now change them. The GPUs are this machine's.
        saved = resumed.get("args") or {}
        for key, value in saved.items():
            if key not in explicit and key not in ("resume", "run_dir", "load", "gpu_ids") and hasattr(args, key):
                setattr(args, key, value)
        if args.optimizer != saved.get("optimizer", args.optimizer) and "eps" not in explicit:
            args.eps = AUTO  # the saved eps was the other optimizer's
        if "run_dir" not in explicit:
            args.run_dir = resumed_run_dir(args.resume)
    return args, resumed


def resumed_run_dir(path):
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


def resumed_file(path):
    return os.path.join(path, "checkpoint.pt") if os.path.isdir(path) else path


def frames_on_disk(checkpoint_path, resume_path, resumed):
    """The frame count of the ``checkpoint.pt`` this run will replace first (it is archived under that count):
    the resumed state's when the run resumed from that very file, else read from the file; None when none."""
    if not os.path.exists(checkpoint_path):
        return None
    if resumed is not None and os.path.samefile(resumed_file(resume_path), checkpoint_path):
        return int(resumed["frames"])
    try:
        return int(load_checkpoint(checkpoint_path)["frames"])
    except (CheckpointError, KeyError, TypeError, ValueError):
        return None  # unreadable: nothing worth archiving


def check_args(args):
    """Every check of user input, up front (after ``auto`` flags are resolved); raises ValueError with a one-line
    reason."""
    positive = {"--workers": args.workers, "--num-steps": args.num_steps, "--lr": args.lr,
                "--hidden-size": args.hidden_size, "--skip-rate": args.skip_rate,
                "--max-episode-length": args.max_episode_length, "--envs-per-worker": args.envs_per_worker,
                "--score-window": args.score_window, "--checkpoint-interval": args.checkpoint_interval,
                "--keep-checkpoints": args.keep_checkpoints, "--max-nonfinite": args.max_nonfinite}
    for flag, value in positive.items():
        if not value > 0 or (isinstance(value, float) and not math.isfinite(value)):
            raise ValueError(f"{flag} must be positive, got {value}")
    if args.max_restarts < 0:
        raise ValueError(f"--max-restarts must be >= 0, got {args.max_restarts}")
    if any(n <= 0 for n in args.distributed_step_size):
        raise ValueError(f"--distributed-step-size entries must be positive, got {args.distributed_step_size}")
    if not 0.0 < args.gamma <= 1.0:
        raise ValueError(f"--gamma must be in (0, 1], got {args.gamma}")
    if not 0.0 <= args.tau <= 1.0:
        raise ValueError(f"--tau must be in [0, 1], got {args.tau}")
    if not (args.eps > 0 and math.isfinite(args.eps)):
        raise ValueError(f"--eps must be positive, got {args.eps}")
    for flag in ("entropy_coef", "value_coef", "max_grad_norm"):
        value = getattr(args, flag)
        if not (value >= 0 and math.isfinite(value)):
            raise ValueError(f"--{flag.replace('_', '-')} must be a finite number >= 0, got {value}")
    if args.max_frames is not None and args.max_frames <= 0:
        raise ValueError(f"--max-frames must be positive, got {args.max_frames}")
    if args.max_seconds is not None and not args.max_seconds > 0:
        raise ValueError(f"--max-seconds must be positive, got {args.max_seconds}")
    if args.stop_score is not None and not math.isfinite(args.stop_score):
        raise ValueError(f"--stop-score must be a finite number, got {args.stop_score}")
    gpus = args.gpu_ids
    if gpus != [-1]:
        if any(g < 0 for g in gpus):
            raise ValueError(f"--gpu-ids: use -1 alone for the CPU, or GPU indices >= 0, got {gpus}")
        missing, count = missing_gpus(gpus)
        if missing:
            raise ValueError(f"--gpu-ids {missing} not available: this machine has {count} CUDA device(s) "
                             f"(use --gpu-ids -1 for the CPU)")


def environment_setup(args):
    """Resolve the environment: its settings, the network's metadata, frames per step. Raises on bad input."""
    crop = env_conf_for(args.env, load_env_config(args.env_config)) if is_atari(args.env) else None
    frame_size, frame_stack = FRAME_FORMAT.get(args.model, (80, 1))  # the network decides the frame format
    settings = EnvSettings(args.env, args.skip_rate, args.max_episode_length, crop, frame_size, frame_stack)
    env = make_env(settings, train=False)
    obs_shape, num_actions = env.observation_space.shape, env.action_space.n
    env.close()
    meta = model_meta(choose_model(args.model, obs_shape), obs_shape, num_actions, args.hidden_size)
    return settings, meta, frames_per_step(args.env, args.skip_rate)


# ---------------------------------------------------------------------------------------------------------------
# Run directory


def prepare_run_dir(args, resumed):
    if args.run_dir is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        args.run_dir = os.path.join("runs", f"{env_file_name(args.env)}__{args.seed}__{stamp}")
    for folder in (args.run_dir, args.save_model_dir, args.log_dir):
        os.makedirs(folder, exist_ok=True)
    paths = {
        "run_dir": args.run_dir,
        "progress": os.path.join(args.run_dir, "progress.csv"),
        "checkpoint": os.path.join(args.run_dir, "checkpoint.pt"),
        "summary": os.path.join(args.run_dir, "summary.json"),
        "model": os.path.join(args.save_model_dir, f"{env_file_name(args.env)}.pt"),
        "log_file": os.path.join(args.log_dir, f"{env_file_name(args.env)}_log"),
    }
    with open(os.path.join(args.run_dir, "args.json"), "w") as f:
        json.dump(vars(args), f, indent=2, sort_keys=True)
    if not (resumed and os.path.exists(paths["progress"])):
        with open(paths["progress"], "w", newline="") as f:
            csv.writer(f).writerow(PROGRESS_FIELDS)
    return paths


def write_tensorboard_hparams(args):
    """The flags as a text table, at the start (CleanRL's way: readable even while the run goes on)."""
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(args.run_dir) as writer:
        table = "\n".join(f"|{key}|{value}|" for key, value in sorted(vars(args).items()))
        writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")


def write_tensorboard_results(args, summary):
    """The flags and the run's results for TensorBoard's HPARAMS tab, at the end: runs compared side by side."""
    from torch.utils.tensorboard import SummaryWriter

    hparams = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in vars(args).items()}
    metrics = {f"hparam/{k}": float(summary[k] if summary[k] is not None else math.nan)
               for k in ("best_mean_return", "best_return", "frames", "seconds")}
    with SummaryWriter(args.run_dir) as writer:
        writer.add_hparams(hparams, metrics, run_name=".", global_step=summary["frames"])


# ---------------------------------------------------------------------------------------------------------------
# Supervision


class Terminated(Exception):
    """SIGTERM (a scheduler, ``docker stop``): handled like Ctrl-C."""


def raise_terminated(signum, frame):
    raise Terminated()


def describe_exit(exitcode):
    if exitcode is None:
        return "is not running"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


class Supervisor:
    """Starts, watches, restarts and stops the children (one evaluator, ``--workers`` workers).

    A child that dies is replaced with the same role, rank, GPU and step size; more than ``--max-restarts`` deaths
    within ``RESTART_WINDOW`` seconds end the run instead (stop_reason ``error``). Children are started with SIGINT
    blocked, so that a Ctrl-C during their start-up (importing torch takes a while) cannot kill them before they
    install their own handling (utils.setup_child_process).
    """

    RESTART_WINDOW = 60.0

    def __init__(self, ctx, args, settings, meta, shared_model, optimizer, state, paths, start_seconds, log):
        self.ctx, self.args, self.state, self.log = ctx, args, state, log
        parent = os.getpid()
        self.targets = {"evaluator": (test, (args, settings, meta, shared_model, state, parent, paths, start_seconds,
                                             state.frames.value, time.time()))}
        for rank in range(args.workers):
            self.targets[f"worker {rank}"] = (train, (rank, args, settings, meta, shared_model, optimizer, state,
                                                      parent))
        self.children = {}
        self.deaths = collections.deque()
        self.restarts = 0

    def start(self, names=None):
        # multiprocessing starts its resource tracker on the first spawn, and afterwards *unblocks* SIGINT in the
        # spawning thread: children spawned after it would then die of a Ctrl-C while still importing torch.
        # Start the tracker first, so that SIGINT stays blocked for every child spawned below.
        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for name in names or self.targets:
                target, target_args = self.targets[name]
                proc = self.ctx.Process(target=target, args=target_args, name=name.replace(" ", "-"), daemon=True)
                proc.start()
                self.children[name] = proc
                self.log(f"started {name} (pid {proc.pid})", echo=False)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    def check(self):
        """Replace dead children. Returns an error message once too many have died, else None."""
        for name, proc in list(self.children.items()):
            if proc.is_alive() or self.state.stop.is_set():
                continue
            proc.join()
            now = time.monotonic()
            self.deaths.append(now)
            while self.deaths and now - self.deaths[0] > self.RESTART_WINDOW:
                self.deaths.popleft()
            if len(self.deaths) > self.args.max_restarts:
                return (f"{name} (pid {proc.pid}) {describe_exit(proc.exitcode)}: {len(self.deaths)} deaths within "
                        f"{self.RESTART_WINDOW:.0f} s is more than --max-restarts {self.args.max_restarts}; stopping")
            self.restarts += 1
            self.log(f"{name} (pid {proc.pid}) {describe_exit(proc.exitcode)}; restarting it "
                     f"({len(self.deaths)} of at most {self.args.max_restarts} within {self.RESTART_WINDOW:.0f} s)")
            self.start([name])
        return None

    def stop(self, grace=5.0):
        """Ask every child to stop; wait up to ``grace`` seconds; then terminate, then kill what is left."""
        self.state.stop.set()
        deadline = time.monotonic() + grace
        for proc in self.children.values():
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self.children.values():
            if proc.is_alive():
                proc.terminate()
        for proc in self.children.values():
            proc.join(1.0)
            if proc.is_alive():
                proc.kill()
                proc.join()


def supervise(args, supervisor, state, clock, save_checkpoint, log):
    """Watch the run until a limit, 'solved', or an unrecoverable fault. Returns (stop_reason, exit code)."""
    last_save = clock()
    reported_nonfinite = 0
    while True:
        if state.solved.value:
            return "solved", EXIT_OK
        if args.max_frames is not None and state.frames.value >= args.max_frames:
            return "max_frames", EXIT_OK
        if args.max_seconds is not None and clock() >= args.max_seconds:
            return "max_seconds", EXIT_OK
        if state.nonfinite.value > reported_nonfinite:
            log(f"skipped {state.nonfinite.value - reported_nonfinite} update(s) with a non-finite loss or gradient "
                f"({state.nonfinite.value} in all); the shared model was not touched")
            reported_nonfinite = state.nonfinite.value
        if state.diverged.value:
            log(f"{args.max_nonfinite} non-finite updates in a row: training has diverged; stopping with the last "
                f"good weights (try a lower --lr or --max-grad-norm)")
            return "error", EXIT_CRASH
        problem = supervisor.check()
        if problem:
            log(problem)
            return "error", EXIT_CRASH
        if clock() - last_save >= args.checkpoint_interval:
            save_checkpoint()
            last_save = clock()
        time.sleep(0.2)


BAD_INPUT_ERRORS = (ValueError, ConfigError, ModelError, CheckpointError)  # each one line for the user, exit 2


def validate(argv):
    """Every check of what the user typed or points to, before anything starts. Returns
    (args, settings, meta, resumed checkpoint or None, --load model or None); raises one of BAD_INPUT_ERRORS (or
    SystemExit(2) from the parser for malformed flags)."""
    args, resumed = parse_args(argv)
    env_spec(args.env)  # unknown ids fail here, before anything is built
    on_gpu = args.gpu_ids != [-1]
    args.defaults = describe(*resolve_defaults(args, is_atari(args.env), on_gpu, cpu_has_native_bf16()))
    check_args(args)
    settings, meta, args.frames_per_step = environment_setup(args)
    if resumed is not None:
        check_compatible(resumed, args.resume, args.env, meta)
    loaded = None
    if args.load:
        model_path = os.path.join(args.load_model_dir, f"{env_file_name(args.env)}.pt")
        loaded = load_checkpoint(model_path)
        check_compatible(loaded, model_path, args.env, meta)
    return args, settings, meta, resumed, loaded


def main(argv=None):
    try:
        args, settings, meta, resumed, loaded = validate(sys.argv[1:] if argv is None else argv)
    except BAD_INPUT_ERRORS as exc:
        print(f"main.py: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    shared_model = build_model(meta)
    optimizer = None
    if args.shared_optimizer:
        optimizer = make_optimizer(args.optimizer, shared_model.parameters(), True, args.lr, args.amsgrad,
                                   args.eps)
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
                    optimizer.set_hyperparameters(lr=args.lr, eps=args.eps, amsgrad=args.amsgrad)
            counters = {k: resumed.get(k, 0) for k in ("frames", "episodes", "eval_episodes")}
            counters.update({k: resumed.get(k, -math.inf) for k in ("best_return", "best_mean_return")})
        elif loaded is not None:
            shared_model.load_state_dict(loaded["state_dict"])
    except (RuntimeError, ValueError, KeyError) as exc:
        source = args.resume if resumed is not None else "--load model"
        print(f"main.py: error: {source} does not fit this network ({str(exc).splitlines()[0]})", file=sys.stderr)
        return EXIT_BAD_INPUT
    shared_model.share_memory()

    ctx = mp.get_context("spawn")
    state = RunState(ctx, args.workers, **counters)
    start_seconds = float(resumed.get("seconds", 0.0)) if resumed is not None else 0.0
    try:
        paths = prepare_run_dir(args, resumed)
    except OSError as exc:  # a path that cannot be a folder, no permission, a full disk: nothing has started yet
        print(f"main.py: error: cannot prepare the output folders: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.tensorboard_logger:
        write_tensorboard_hparams(args)
    clock = Stopwatch()
    log = make_supervisor_log(paths["log_file"])
    checkpoints = CheckpointWriter(paths["checkpoint"], args.keep_checkpoints, log,
                                   frames_on_disk(paths["checkpoint"], args.resume, resumed),
                                   protect=resumed_file(args.resume) if resumed is not None else None)

    def save_checkpoint():
        return checkpoints.save({
            "format_version": FORMAT_VERSION,
            "kind": "checkpoint",
            "env": settings.as_dict(),
            "model_meta": meta,
            "state_dict": shared_model.state_dict(),
            "optimizer": optimizer.state_dict() if optimizer is not None else None,
            "frames": float(state.frames.value),
            "episodes": int(state.episodes.value),
            "eval_episodes": int(state.eval_episodes.value),
            "best_return": float(state.best_return.value),
            "best_mean_return": float(state.best_mean_return.value),
            "seconds": start_seconds + clock(),
            "args": {k: v for k, v in vars(args).items() if k not in ("frames_per_step", "defaults")},
        })

    device_names = sorted({"cpu" if g < 0 else f"cuda:{g}" for g in args.gpu_ids})
    print(f"a3g: training {args.env} with {args.workers} worker(s) on {', '.join(device_names)}, "
          f"model {meta['model']}, evaluator on {evaluator_cpu_share(args.evaluator_cpu, args.workers):g} of a "
          f"core; run directory {args.run_dir}"
          + (f" (resumed at {int(state.frames.value)} frames)" if resumed is not None else ""), flush=True)
    if args.defaults:
        print(f"a3g: {args.defaults} (a flag given on the command line always wins)", flush=True)
    if args.bf16 and -1 in args.gpu_ids and not cpu_has_native_bf16():
        print("a3g: warning: --bf16 on a CPU without native bfloat16 support is emulated: expect slower training, "
              "not faster", file=sys.stderr, flush=True)

    signal.signal(signal.SIGTERM, raise_terminated)
    supervisor = Supervisor(ctx, args, settings, meta, shared_model, optimizer, state, paths, start_seconds, log)
    reason, code = "error", EXIT_CRASH
    try:
        supervisor.start()
        reason, code = supervise(args, supervisor, state, clock, save_checkpoint, log)
    except KeyboardInterrupt:
        reason, code = "interrupted", EXIT_SIGINT
    except Terminated:
        reason, code = "interrupted", EXIT_SIGTERM
    finally:
        # From here on the run is ending: a second Ctrl-C or SIGTERM must not cut the final save short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if reason == "interrupted":
            print("a3g: stopping (saving state)...", file=sys.stderr, flush=True)
        supervisor.stop()
        saved = save_checkpoint()
        summary = {
            "frames": int(state.frames.value),
            "seconds": round(start_seconds + clock(), 3),
            "episodes": int(state.episodes.value),
            "best_return": finite_or_none(state.best_return.value),
            "best_mean_return": finite_or_none(state.best_mean_return.value),
            "solved": bool(state.solved.value),
            "stop_reason": reason,
            "restarts": supervisor.restarts,
            "skipped_updates": int(state.nonfinite.value),
        }
        try:
            atomic_write_text(paths["summary"], json.dumps(summary, indent=2))
            if args.tensorboard_logger:
                write_tensorboard_results(args, summary)
        except OSError as exc:
            log(f"could not write {paths['summary']} ({exc}); the summary was: {json.dumps(summary)}")
        print(f"a3g: {reason} after {format_time(summary['seconds'])}, {summary['frames']} frames; "
              f"best return {summary['best_return']}, best mean {summary['best_mean_return']}; "
              + (f"state in {paths['checkpoint']}" if saved else "the last checkpoint could not be written"),
              flush=True)
        stop_resource_tracker()
    return code


def make_supervisor_log(log_file):
    """``log(message)``: to stderr (unless echo=False) and to the run's text log, for what the supervisor does."""
    logger = file_logger("a3g.main", log_file, prefix="main: ")

    def log(message, echo=True):
        logger.info(message)
        if echo:
            print(f"a3g: {message}", file=sys.stderr, flush=True)

    return log


class CheckpointWriter:
    """Writes ``checkpoint.pt`` atomically and keeps the ``keep - 1`` previous ones as ``checkpoint-<frames>.pt``.

    A failed write (disk full, read-only folder) is logged and leaves the previous checkpoint intact; training
    goes on. ``save`` returns whether the write succeeded. ``protect``: the file a run resumed from (an archive,
    say), which is never replaced or rotated out: resuming must not destroy what it resumed from.
    """

    def __init__(self, path, keep, log, last_frames=None, protect=None):
        self.path, self.keep, self.log = path, keep, log
        self.folder = os.path.dirname(os.path.abspath(path))
        self.last_frames = last_frames  # of the checkpoint.pt on disk (a resumed run's), archived at the next save
        self.protect = os.path.abspath(protect) if protect else None

    def archived(self):
        found = []
        for name in os.listdir(self.folder):
            stem, ext = os.path.splitext(name)
            if ext == ".pt" and stem.startswith("checkpoint-") and stem[len("checkpoint-"):].isdigit():
                found.append((int(stem[len("checkpoint-"):]), os.path.join(self.folder, name)))
        return [path for _, path in sorted(found)]

    def save(self, payload):
        archive = None
        if self.keep > 1 and self.last_frames is not None and os.path.exists(self.path):
            archive = os.path.join(self.folder, f"checkpoint-{self.last_frames}.pt")
            if archive == self.protect:  # the same frame count: the protected file already holds that state
                archive = None
        try:
            atomic_torch_save(payload, self.path, keep_previous_as=archive)
        except OSError as exc:
            self.log(f"could not write {self.path} ({exc.strerror or exc}); the previous checkpoint is intact and "
                     f"training goes on: free some space or fix the folder's permissions")
            return False
        self.last_frames = int(payload["frames"])
        archived = [p for p in self.archived() if p != self.protect]
        for old in archived[: max(0, len(archived) - (self.keep - 1))]:
            try:
                os.remove(old)
            except OSError:
                pass
        return True


def stop_resource_tracker():
    """Stop and reap multiprocessing's resource-tracker helper now that every child is gone. Left to exit after us,
    it would be re-parented, and where PID 1 does not reap (some containers) it would linger as a zombie."""
    try:
        util._run_finalizers(0)  # release our semaphores first (what exit would do), so the tracker has nothing left
        resource_tracker._resource_tracker._stop()
    except Exception:  # private APIs: if they change, the tracker exits on its own as before
        pass


def finite_or_none(x):
    return x if math.isfinite(x) else None


if __name__ == "__main__":
    sys.exit(main())
