"""Benchmark: how fast a3g trains, and how close that is to what this machine allows.

    python -m tools.bench                      # PongNoFrameskip-v4, the standard configurations (about 7 minutes)
    python -m tools.bench --quick              # a short end-to-end pass (seconds), as the tests run it
    python -m tools.bench --configs "a3clstm:1" "nature:8:bf16" --seconds 60

In one run and one process tree it measures
(a) the emulator ceiling: every core stepping the preprocessed game with random actions (frames/s);
(b) the network's own cost per agent step on the first of ``--gpu-ids`` (or the CPU), one CPU thread: inference at
    the configuration's batch, and a training rollout (forward and backward over num_steps x envs, Adam step) per
    sample;
(c) real training frames/s of each configuration (workers = cores, evaluator included, at its --evaluator-cpu
    share of a core), after a warm-up.
The table gives each configuration's frames/s, its ceilings -- network (cores x frames per step / training cost),
emulator, and both sharing the cores -- and the ratios to them and to the first configuration (the baseline: the
straightforward one-env-per-worker loop). A configuration is
``model:envs_per_worker[:bf16][:nocl][:batched][:impala][:server][:ppo][:replay|:elite|:eliteN]`` and a frame norm
``[:running|:scale|:darkest]`` (``impala``: IMPALA's actors and learner instead of A3G's workers, with the same
number of processes stepping environments; ``server``: with ``--inference server``; ``replay``: IMPALA with
``REPLAYS["replay"]``, half of each batch fresh and half replayed uniformly; ``elite``: the same with elite
sampling, strategy 3, lambda 6 (not annealed in a bench run), scoring the first 5 steps of each candidate (the
default ``score_steps``); ``eliteN``, e.g. ``elite20``: that scoring the first N steps (20, the unroll: every step);
``batched``: A3G's ``--train-forward batched``; ``ppo``: ``--objective ppo`` with the settings auto picks for it
(``runtime.defaults.PPO_ATARI``), its network ceiling counting acting plus PPO_EPOCHS batched training passes per
sample (without it: ``--objective pg``, whatever auto picks); ``running``/``scale``/``darkest``: that
``--frame-norm`` instead of auto's; the emulator ceiling is always the default pipeline's, uint8 frames).
A configuration whose run loses a process (a crash: its error is printed) is not measured: the others' figures are
kept, the table's base is the first one measured, the JSON lists it under "failed", and the exit status is 1.
"""

import argparse
import json
import math
import multiprocessing.queues
import os
import platform
import sys
import tempfile
import time
from typing import Callable, Sequence

os.environ.setdefault("OMP_NUM_THREADS", "1")

import gymnasium as gym
import numpy as np
import torch
import torch.multiprocessing as mp

from core.cli import OneLineParser
from core.errors import BAD_INPUT_ERRORS, BadInput
from core.files import atomic_write_text, check_json_output, first_free
from core.hardware import device_for, missing_gpus, usable_cores
from core.timing import phase_split
from envs.environment import EnvSettings, check_env_id, frames_per_step, make_env
from impala.shm import impala_roles
from model import FRAME_FORMAT, MODELS, build_model, fast_layout, flatten_parameters, obs_dtype
from runtime.config import cpu_share, default_gpu_ids, validate
from runtime.context import RunContext
from runtime.processes import evaluator_cpu_share, process_context, stop_fork_server
from runtime.run_dir import prepare_run_dir
from runtime.run_state import RunState
from runtime.supervisor import Supervisor, describe_exit
from shared_optim import optimizer_for
from train import a3g_roles

# the ``:replay`` and ``:elite`` tokens' --replay-parameters: configurations B and D of the replay comparison
# (docs/replay_comparison.sh)
QUEUE = '{"type": "queue", "capacity": 1, "sample_ratio": 0.5}'
REPLAYS = {"replay": f'[{QUEUE}, {{"type": "standard", "capacity": 1000, "sample_ratio": 0.5}}]',
           "elite": f'[{QUEUE}, {{"type": "custom", "capacity": 1000, "sample_ratio": 0.5, "dist_function": "ln_norm", '
                    '"sample_strategy": "elite_sampling", "lambda_batch_multiplier": 6, "alfa_annealing_factor": 2.0, '
                    '"elite_sampling_strategy": "strategy3"}]'}
STANDARD = ["a3clstm:1:nocl", "a3clstm:1", "a3clstm:8", "a3clstm:8:bf16", "nature:8", "nature:8:bf16",
            "nature:8:bf16:batched:ppo", "nature:8:impala", "nature:8:bf16:impala"]


class RoleDied(RuntimeError):
    """A process of the measured run died: its frames/s would be the survivors' (or none)."""


PPO_EPOCHS = 4  # --ppo-epochs' default: the training passes a ":ppo" configuration makes over each sample
FRAME_NORM_TOKENS = ("running", "scale", "darkest")  # a --frame-norm other than auto's
TOKENS = ("bf16", "nocl", "batched", "impala", "server", "ppo", *REPLAYS, *FRAME_NORM_TOKENS)  # and eliteN


def is_scored_elite(token: str) -> bool:
    """``eliteN``: elite sampling scoring each unroll's first N steps."""
    return token.startswith("elite") and token[len("elite"):].isdigit()


def parse_config(text: str) -> dict:
    """A ``--configs`` entry (``model:envs_per_worker[:token...]``) as the settings of one measured configuration;
    ValueError names what in it is not one."""
    parts = text.split(":")
    if parts[0] not in MODELS:
        raise ValueError(f"--configs {text}: the model {parts[0]!r} is none of {', '.join(MODELS)}")
    if len(parts) > 1 and not (parts[1].isdigit() and int(parts[1]) > 0):
        raise ValueError(f"--configs {text}: environments per worker {parts[1]!r} is not a whole number above 0")
    unknown = [part for part in parts[2:] if part not in TOKENS and not is_scored_elite(part)]
    if unknown:
        raise ValueError(f"--configs {text}: {', '.join(map(repr, unknown))} is none of {', '.join(TOKENS)}, eliteN")
    model, envs = parts[0], int(parts[1]) if len(parts) > 1 else 1
    scored = [part for part in parts[2:] if is_scored_elite(part)]
    impala_only = [part for part in parts[2:] if part in ("server", *REPLAYS) or is_scored_elite(part)]
    if impala_only and "impala" not in parts[2:]:  # else measured as A3G under a name that says otherwise
        raise ValueError(f"--configs {text}: {', '.join(map(repr, impala_only))} is IMPALA's: add :impala")
    # one replay, one frame norm: else one is dropped
    for group in ([*REPLAYS, *scored], list(FRAME_NORM_TOKENS)):
        if len(chosen := [part for part in parts[2:] if part in group]) > 1:
            raise ValueError(f"--configs {text}: {' and '.join(map(repr, chosen))} are two of one setting: give one")
    if "batched" in parts[2:] and "impala" in parts[2:]:
        raise ValueError(f"--configs {text}: 'batched' is A3G's training forward (IMPALA's learner batches anyway)")
    return {"name": text, "model": model, "envs": envs, "bf16": "bf16" in parts[2:],
            "channels_last": "nocl" not in parts[2:], "algo": "impala" if "impala" in parts[2:] else "a3g",
            "train_forward": "batched" if "batched" in parts[2:] else "stepped",
            "inference": "server" if "server" in parts[2:] else "local",
            "replay": next((kind for kind in REPLAYS if kind in parts[2:]), "elite" if scored else None),
            "score_steps": int(scored[0][len("elite"):]) if scored else None,
            "frame_norm": next((norm for norm in FRAME_NORM_TOKENS if norm in parts[2:]), None),  # None: auto
            "objective": "ppo" if "ppo" in parts[2:] else "pg"}


def frame_norm_flags(config: dict) -> list[str]:
    """``--frame-norm`` where the configuration names one; none where auto picks it."""
    return ["--frame-norm", config["frame_norm"]] if config["frame_norm"] else []


def replay_parameters(config: dict) -> str:
    """The ``--replay-parameters`` of a configuration with a replay token (``REPLAYS``, plus ``eliteN``'s
    ``score_steps``)."""
    entries = json.loads(REPLAYS[config["replay"]])
    if config.get("score_steps"):
        entries[1]["score_steps"] = config["score_steps"]
    return json.dumps(entries)


def emulator_worker(env_id: str, frame_size: int, frame_stack: int, seconds: float, seed: int,
                    queue: multiprocessing.queues.Queue) -> None:
    """One core's part of the emulator ceiling: agent steps/s of random play for ``seconds``, put on ``queue``."""
    torch.set_num_threads(1)
    env = make_env(EnvSettings(env_id, frame_size=frame_size, frame_stack=frame_stack), train=True)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    space = env.action_space
    discrete = isinstance(space, gym.spaces.Discrete)  # else a Box, which the policy's actions reach in [-1, 1]
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            action = int(rng.integers(space.n)) if discrete else rng.uniform(-1, 1, space.shape).astype(np.float32)
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        steps += 100
    queue.put(steps / (time.perf_counter() - start))


def emulator_ceiling(env_id: str, frame_format: tuple[int, int], cores: int, seconds: float) -> float:
    """Agent steps/s of all cores together stepping the preprocessed game at random."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=emulator_worker, args=(env_id, *frame_format, seconds, i, queue)) for i in range(cores)]
    for p in procs:
        p.start()
    rates = [queue.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    return sum(rates)


def network_cost(meta: dict, batch: int, bf16: bool, channels_last: bool, num_steps: int = 20, iters: int = 3,
                 batched: bool = False, device: torch.device | str = "cpu",
                 compiled: bool = False) -> tuple[float, float]:
    """Seconds per agent step on ``device`` (one CPU thread): (inference at this batch, training rollout
    forward+backward+Adam per sample). The training rollout is the worker's: the graph built while acting, or
    (``batched``, ``--train-forward batched``) acting without autograd and then one ``model.unroll`` over it.
    ``compiled``: the network through ``torch.compile`` (its compilation happens in the warm-up, not counted)."""
    torch.set_num_threads(1)
    device = torch.device(device)
    model = fast_layout(build_model(meta).to(device), meta, channels_last)
    if compiled:
        model = torch.compile(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    shape = (num_steps, batch, *meta["obs_shape"])
    obs = (torch.randint(0, 256, shape, dtype=torch.uint8, device=device) if obs_dtype(meta) == torch.uint8
           else torch.randn(shape, device=device))  # frames as the workers get them: bytes the network scales
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)

    def clock():  # CUDA work is asynchronous: wait for it before reading the clock
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    with torch.no_grad(), autocast:
        state = model.initial_state(batch, device)
        for _ in range(3):
            model(obs[0], state)
        start = clock()
        for t in range(num_steps):
            _, _, state = model(obs[t], state)
        infer = (clock() - start) / (num_steps * batch)
    best = float("inf")
    for it in range(iters + 1):
        start = clock()
        state = model.initial_state(batch, device)
        losses = []
        with autocast:  # one region for the rollout, as the worker: weights are cast to bf16 once, not every step
            start_state = state
            with torch.set_grad_enabled(not batched):
                for t in range(num_steps):
                    value, logits, state = model(obs[t], state)
                    losses.append(value.float().pow(2).mean() - logits.float().log_softmax(-1).mean())
            if batched:
                values, logits, _ = model.unroll(obs, start_state, torch.zeros(num_steps, batch, device=device))
                losses = [values.float().pow(2).mean(0) - logits.float().log_softmax(-1).mean((0, 2))]
        optimizer.zero_grad()
        torch.stack(losses).sum().backward()
        optimizer.step()
        if it:  # the first is warm-up
            best = min(best, (clock() - start) / (num_steps * batch))
    return infer, best


def training_argv(env_id: str, config: dict, workers: int, out: str, evaluator_cpu: float | str = "auto",
                  evaluator_nice: int = 0, gpu_ids: Sequence[int] = (-1,)) -> list[str]:
    """main.py's flags for one measured configuration, writing into ``out``."""
    argv = ["--env", env_id, "--algo", config["algo"], "--workers", str(workers), "--model", config["model"], "--envs-per-worker",
            str(config["envs"]), "--gpu-ids", *map(str, gpu_ids), "--run-dir", out, "--save-model-dir", out, "--log-dir", out,
            "--no-tensorboard-logger", "--bf16" if config["bf16"] else "--no-bf16",
            "--channels-last" if config["channels_last"] else "--no-channels-last", "--evaluator-cpu",
            str(evaluator_cpu), "--evaluator-nice", str(evaluator_nice), *frame_norm_flags(config)]
    if config["algo"] == "impala":  # each algorithm takes only its own flags
        argv += ["--inference", config["inference"]]
        if config.get("replay"):
            argv += ["--replay-parameters", replay_parameters(config)]
    else:
        argv += ["--train-forward", config["train_forward"]]
    # named either way, with what auto picks for it: a configuration means the same whatever auto's objective is
    return argv + ["--objective", config["objective"]]


def training_fps(env_id: str, config: dict, workers: int, warmup: float, seconds: float, out: str,
                 evaluator_cpu: float | str = "auto", evaluator_nice: int = 0,
                 gpu_ids: Sequence[int] = (-1,)) -> tuple[float, dict[str, float]]:
    """Real training (A3G's workers or IMPALA's actors and learner, and the evaluator, as main.py runs them):
    frames/s after the warm-up, and the share of the roles' time in each phase meanwhile (``core.timing``)."""
    args, settings, meta, _, _ = validate(training_argv(env_id, config, workers, out, evaluator_cpu, evaluator_nice,
                                                        gpu_ids))
    shared_model = fast_layout(build_model(meta), meta, args.channels_last)
    flatten_parameters(shared_model, shared=True)
    optimizer = optimizer_for(args, shared_model.parameters(), True)
    ctx = process_context()  # as main.py starts the roles
    state = RunState(ctx, workers)
    paths = prepare_run_dir(args, None)
    run = RunContext(args, settings, meta, shared_model, optimizer, state, paths)
    roles = impala_roles(ctx, run) if args.algo == "impala" else a3g_roles(run)
    supervisor = Supervisor(ctx, roles, state, args.max_restarts, lambda message, echo=True: None)
    supervisor.start()

    def watch(seconds: float, until: Callable[[], bool] = lambda: False) -> None:
        """Wait ``seconds`` (or until ``until()``), looking that every process of the run is still alive."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not until():
            for name, proc in supervisor.children.items():
                if not proc.is_alive():
                    raise RoleDied(f"{name} (pid {proc.pid}) {describe_exit(proc.exitcode)}")
            time.sleep(0.1)

    try:
        watch(warmup + 120, lambda: state.frames.value > 0)  # start-up (imports) does not count as warm-up
        watch(warmup)
        f0, t0, p0 = state.frames.value, time.monotonic(), state.phase_totals()
        watch(seconds)
        f1, t1, p1 = state.frames.value, time.monotonic(), state.phase_totals()
    finally:
        supervisor.stop()
        stop_fork_server()
    return (f1 - f0) / (t1 - t0), phase_split(p0, p1)


def cpu_name() -> str:
    """The CPU's model name, for the report."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def table(results: list[dict]) -> str:
    """The configurations' frames/s beside their ceilings, one row each, the names in a column as wide as the
    longest; ``x base``: the ratio to the first row."""
    base = (results[0]["fps"] if results else 0) or math.nan  # a configuration that made no frames is 0
    width = max([18] + [len(r["name"]) + 2 for r in results])
    header = (f"{'configuration':<{width}}{'frames/s':>10}{'x base':>8}{'net ceil':>10}{'emu ceil':>10}{'both':>9}"
              f"{'/min':>7}{'/both':>7}")
    rows = [f"{r['name']:<{width}}{r['fps']:>10,.0f}{r['fps'] / base:>8.2f}{r['network_ceiling_fps']:>10,.0f}"
            f"{r['emulator_ceiling_fps']:>10,.0f}{r['combined_ceiling_fps']:>9,.0f}"
            f"{r['ratio_to_min_ceiling']:>7.0%}{r['ratio_to_combined_ceiling']:>7.0%}" for r in results]
    return "\n".join([header, "-" * len(header), *rows])


def main() -> int:
    p = OneLineParser(prog="python -m tools.bench", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="PongNoFrameskip-v4")
    p.add_argument("--configs", nargs="+", default=STANDARD,
                   help="model:envs_per_worker[:bf16][:nocl][:batched][:impala][:server][:ppo][:replay|:elite|:eliteN]"
                        "[:running|:scale|:darkest] ...")
    p.add_argument("--workers", type=int, default=usable_cores(), help="default: cores")
    p.add_argument("--seconds", type=float, default=30.0, help="measured training seconds per configuration")
    p.add_argument("--warmup", type=float, default=15.0, help="training seconds before measuring")
    p.add_argument("--emulator-seconds", type=float, default=10.0)
    p.add_argument("--evaluator-cpu", type=cpu_share, default="auto", help="main.py's --evaluator-cpu for the training runs")
    p.add_argument("--evaluator-nice", type=int, default=0, help="main.py's --evaluator-nice for the training runs")
    p.add_argument("--gpu-ids", type=int, nargs="+", default=default_gpu_ids(),
                   help="as main.py's: the training runs' GPUs, the first one for the network's cost (default: all "
                        "visible GPUs, else -1: the CPU)")
    p.add_argument("--quick", action="store_true", help="seconds, not minutes: one configuration, short phases")
    p.add_argument("--json", default=None,
                   help="write the results here; an earlier bench result there is replaced, any other file kept "
                        "(default: bench.json, or bench-2.json, ... where one is already there)")
    args = p.parse_args()
    if args.workers < 1 or not (args.seconds > 0 and args.warmup >= 0 and args.emulator_seconds > 0):
        p.error("--workers and --seconds must be positive, --warmup >= 0 and --emulator-seconds > 0")
    try:
        check_env_id(args.env)
    except BadInput as exc:
        p.error(str(exc))
    if args.gpu_ids != [-1]:
        missing, count = missing_gpus(args.gpu_ids)
        if missing:
            p.error(f"--gpu-ids {missing} not available: this machine has {count} CUDA device(s) (-1: the CPU)")
    if args.quick:
        args.configs = args.configs if args.configs != STANDARD else ["a3clstm:2"]
        args.seconds, args.warmup, args.emulator_seconds = 3.0, 2.0, 1.0
    try:
        configs = [parse_config(c) for c in args.configs]
    except ValueError as exc:
        p.error(str(exc))
    for config in configs:  # each as main.py would take it, before minutes of measuring the ones before it
        try:
            validate(training_argv(args.env, config, args.workers, os.path.join(tempfile.gettempdir(),
                                                                                   f"a3g-bench-{os.getpid()}"),
                                   args.evaluator_cpu, args.evaluator_nice, args.gpu_ids))
        except BAD_INPUT_ERRORS as exc:
            p.error(f"--configs {config['name']}: {exc}")
    args.json = args.json or first_free("bench", os.path.exists, ".json")  # an earlier run's figures are kept
    try:
        check_json_output(args.json, "--json", {"env", "cores", "results"}, "tools.bench")  # before minutes of work
    except BadInput as exc:
        p.error(str(exc))
    cores = usable_cores()
    skip = frames_per_step(args.env, 4)
    print(f"bench: {args.env} on {cpu_name()}, {cores} cores, torch {torch.__version__}, {args.workers} workers, "
          f"evaluator on {evaluator_cpu_share(args.evaluator_cpu, args.workers):g} of a core, device "
          f"{device_for(args.gpu_ids, 0)}" + (f" ({torch.cuda.get_device_name(args.gpu_ids[0])})"
                                               if args.gpu_ids != [-1] else ""), flush=True)

    emulator = {}
    for fmt in sorted({FRAME_FORMAT.get(c["model"], (80, 1)) for c in configs}):
        steps = emulator_ceiling(args.env, fmt, cores, args.emulator_seconds)
        emulator[fmt] = steps
        print(f"bench: emulator ceiling ({fmt[0]}x{fmt[0]}x{fmt[1]}): {steps * skip:,.0f} frames/s on {cores} cores "
              f"({steps * skip / cores:,.0f} per core)", flush=True)

    results, failed = [], []
    for n, config in enumerate(configs, 1):
        print(f"bench: {config['name']} ({n}/{len(configs)}): measuring, about "
              f"{args.warmup + args.seconds + 20:.0f} s", flush=True)
        with tempfile.TemporaryDirectory(prefix="a3g-bench-") as out:
            ppo = config["objective"] == "ppo"
            argv = ["--env", args.env, "--model", config["model"], "--run-dir", out, "--algo", config["algo"],
                    "--objective", config["objective"], *frame_norm_flags(config)]
            _, _, meta, _, _ = validate(argv)
            infer, train = network_cost(meta, config["envs"], config["bf16"], config["channels_last"],
                                        iters=1 if args.quick else 3,
                                        batched=ppo or config["train_forward"] == "batched",
                                        device=device_for(args.gpu_ids, 0))
            if ppo:  # acting without autograd, then --ppo-epochs forward+backward passes over every sample
                train = infer + PPO_EPOCHS * train
            try:
                fps, split = training_fps(args.env, config, args.workers, args.warmup, args.seconds, out,
                                          args.evaluator_cpu, args.evaluator_nice, args.gpu_ids)
            except RoleDied as exc:
                print(f"bench: {config['name']}: not measured: {exc} (its error is above)", file=sys.stderr,
                      flush=True)
                failed.append({"name": config["name"], "error": str(exc)})
                continue
        fmt = FRAME_FORMAT.get(config["model"], (80, 1))
        emu_step = cores / emulator[fmt]  # core-seconds per agent step in the emulator
        net_fps = cores * skip / train
        emu_fps = emulator[fmt] * skip
        both_fps = cores * skip / (train + emu_step)
        results.append({**config, "fps": fps, "phase_split": split, "inference_ms_per_step": infer * 1e3,
                        "train_ms_per_step": train * 1e3,
                        "network_ceiling_fps": net_fps, "emulator_ceiling_fps": emu_fps,
                        "combined_ceiling_fps": both_fps, "ratio_to_min_ceiling": fps / min(net_fps, emu_fps),
                        "ratio_to_combined_ceiling": fps / both_fps})
        print(f"bench: {config['name']}: {fps:,.0f} frames/s (network: inference {infer * 1e3:.2f} ms, training "
              f"{train * 1e3:.2f} ms per step)", flush=True)
        print(f"bench: {config['name']}: where the roles' time went: "
              + ", ".join(f"{name} {share:.0%}" for name, share in split.items() if share >= 0.005), flush=True)

    print("\n" + table(results))
    report = {"env": args.env, "cpu": cpu_name(), "cores": cores, "workers": args.workers, "torch": torch.__version__,
              "gpu_ids": args.gpu_ids,
              "evaluator_cpu": evaluator_cpu_share(args.evaluator_cpu, args.workers),
              "evaluator_nice": args.evaluator_nice,
              "python": platform.python_version(), "seconds": args.seconds, "warmup": args.warmup,
              "emulator_steps_per_s": {f"{k[0]}x{k[1]}": v for k, v in emulator.items()}, "frames_per_step": skip,
              "results": results, "failed": failed}
    atomic_write_text(args.json, json.dumps(report, indent=2))
    print(f"\nbench: results in {args.json}")
    if failed:
        print(f"bench: error: not measured (a process of its run died): {', '.join(f['name'] for f in failed)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
