"""Defaults that fit the environment family and the machine: what ``python main.py`` picks when a flag is not given.

A few flags default to ``auto``. After parsing (and after a resumed run's saved flags are merged in, which are
never ``auto``), ``resolve_defaults`` replaces each ``auto`` with the value that learned fastest for that family on
that kind of machine, and returns what it picked with the reason, for the start-up line. A flag given on the
command line is never touched, so rl_a3c_pytorch's commands keep their meaning. ``--eps`` follows ``--optimizer``
(rl_a3c_pytorch's: Adam 1e-3, RMSprop 0.1).

The table of what each family gets on each kind of machine is README.md's "Defaults" (a test checks it against
``resolve_defaults``); why these values, with the measurements, is BENCHMARKS.md's.

Games from frames get the Nature network with 8 environments per worker on a CPU and with GPUs alike: on one H200
with 16 cores it trained Pong at 52,000 frames/s against 4,000 for rl_a3c_pytorch's A3C-LSTM with one environment
per worker (16 processes each launching small kernels one step at a time), and reached an evaluator mean of +14 in
3.7 minutes where the A3C-LSTM was still at -20.6 (one run each; BENCHMARKS.md, "GPU: one H200 with 16 cores").
Retro games are Atari's recipe with one environment per worker: stable-retro runs one emulator per process
(BENCHMARKS.md, "Retro games: one emulator per process"; not measured on a GPU).

``--workers`` is one per CPU core, but at most 2 for A3G on Atari: each hogwild worker's gradient is computed on
weights as many updates old as there are other workers, and with 4, 8 or 16 workers (x 8 envs) Breakout's network
lost its conv3 units within 0.5-0.9M frames and learned nothing (16 workers on an H200: nothing in 20M frames), as did 4
workers with 32 envs each to 5M frames, where 2 workers learned it in every run (BENCHMARKS.md, "Many workers kill
the network's units on Breakout"). Pong learns with 16, in ~3x the frames. IMPALA's actors keep one per core: its
one learner applies every update to the weights it computed it on.

``--reward-clipping`` is ``abs_one`` for Atari and retro games (rl_a3c_pytorch's and TorchBeast's), ``none`` for
classic control. ``--max-grad-norm`` is 40 for Atari (TorchBeast's ``--grad_norm_clipping``): on Breakout, without
it, updates with gradient norms 10-80 times the median were followed by collapses of the policy, and clipping at
40 did not slow Pong or Breakout (BENCHMARKS.md, "Gradient clipping at 40 as Atari's default"); off for the other
families (not measured on retro games; Pendulum learned worse clipped at 0.5).
``--lr-decay`` lets the learning rate fall linearly to 0 by the end of ``--max-frames`` for A3G on Atari, the fall
starting at 10M frames but covering at least the budget's last tenth and at most its last half (``--max-frames
20000000``: from 10M frames; 10M: from 9M; 40M: from 20M); with no ``--max-frames`` the rate is constant. On
Breakout runs branched at their last checkpoint before the fall ended higher with it than without it: at 20M frames
the last tenth (from 18M) lifted both runs of the defaults (169.8 -> 233.1, 247.3 -> 289.5) and, with ``--num-steps
5``, the median of three (134.6 -> 267.9); the last half (from 10M) did better still (three seeds: 305.5, 311.9 and
290.1 against the tenth's 233.1, 289.5 and 234.4). On a 10M-frame budget the order turned: the last tenth 46.2,
fifth 40.6, half 28.7, constant 26.9 (one seed), so the fall waits until 10M frames, where Breakout's climb begins,
unless the budget is shorter. SpaceInvaders ended a little lower with the half than with the tenth (at 20M frames,
median of three: the training games 570.9 against 583.9, lower on every seed; the evaluator 552.5 against 655.5;
constant 617.0): a trade, Breakout's gain the larger. BENCHMARKS.md, "The learning rate falling to 0 over the last
2M frames" and "How long the fall". Spans between 10M and 20M frames, and past 20M, are the rule's, not measured.
Not measured with IMPALA or the other families, which keep a constant rate.
The auto flags that only one algorithm reads (IMPALA's ``--inference`` and ``--batch-size``, A3G's
``--train-forward``) are None in the other's runs.
IMPALA's ``--inference`` is ``local`` on a CPU (measured faster there) and ``server`` with GPUs (one model on the
GPU for every actor; on the H200, one bench run: 15,500 frames/s against 16,700 local, both bound by a learner at
batch 8, so not a difference that decides).
``--train-forward`` is ``batched`` for the feed-forward networks (measured on a 2-core CPU: nature with 8 envs
per worker 7% faster, mean of 3 pairs of bench runs) and with GPUs (fewer, larger kernels: 3.5x fewer device ops
an update for nature, 1.4x for a3clstm), ``stepped`` for the recurrent networks on a CPU
(a3clstm with one env 6% slower batched, mlplstm 12% slower: the second forward costs more than batching saves).
"""

import argparse
from typing import Callable

from core.hardware import usable_cores
from envs.environment import EnvSettings, env_spec, is_registered
from model import RECURRENT_MODELS
from shared_optim import DEFAULT_EPS

AUTO = "auto"

LR = {"a3clstm": 1e-4, "nature": 3e-4, "resnet": 3e-4, "mlplstm": 2e-3, "mlp": 2e-3}
A3G_ATARI_WORKERS = 2  # the most hogwild workers measured to learn Breakout (module docstring)
HIDDEN = {"a3clstm": 512, "mlplstm": 64, "mlp": 64, "nature": 512, "resnet": 512}  # feed-forward nets ignore it
ONE_ALGORITHMS_AUTO = ("inference", "batch_size", "train_forward")  # auto flags that only one --algo reads
# --objective ppo's settings for Atari: CleanRL's and RL Zoo's (8 envs x 128 steps, GAE 0.95, Adam 2.5e-4 with eps
# 1e-5, the gradient norm clipped at 0.5); IMPALA keeps its unrolls and reads no --tau (tools.bench's ":ppo")
PPO_ATARI_FLAGS = {"a3g": ["--num-steps", "128", "--tau", "0.95", "--lr", "2.5e-4", "--eps", "1e-5",
                           "--max-grad-norm", "0.5"],
                   "impala": ["--lr", "2.5e-4", "--eps", "1e-5", "--max-grad-norm", "0.5"]}


def auto_or(kind: type) -> Callable[[str], object]:
    """An argparse ``type`` that accepts ``auto`` or a value of ``kind``."""

    def parse(text):
        return AUTO if text == AUTO else kind(text)

    parse.__name__ = kind.__name__  # argparse names the type in its error message
    return parse


FAMILY_NAMES = {"atari": "Atari", "retro": "retro games", "classic": "classic control",
                "continuous": "continuous control"}


def resolve_defaults(args: argparse.Namespace, family: str, on_gpu: bool,
                     native_bf16: bool) -> tuple[str, list[tuple[str, object]]]:
    """Fill every ``auto`` flag of ``args`` in place for ``family`` (``atari``, ``retro``, ``classic`` or
    ``continuous``, from ``environment.family``). Returns ``(description, [(flag, value), ...])`` of what was
    picked, the description naming the family and machine (empty list: every flag was given)."""
    machine = "GPUs" if on_gpu else "a CPU-only machine" + (" with native bf16" if native_bf16 else "")
    description = f"{FAMILY_NAMES[family]} on {machine}"
    frames = family in ("atari", "retro")
    picked = []

    def pick(name, value):
        if getattr(args, name) == AUTO:
            setattr(args, name, value)
            picked.append(("--" + name.replace("_", "-"), value))

    cores = usable_cores()
    pick("workers", min(cores, A3G_ATARI_WORKERS) if family == "atari" and args.algo == "a3g" else cores)
    if frames:
        pick("model", "nature")
        pick("envs_per_worker", 1 if family == "retro" else 8)  # retro: one emulator per process
        pick("bf16", bool(native_bf16 and not on_gpu))
    else:
        pick("model", "mlp")
        pick("envs_per_worker", 4)
        pick("bf16", False)
    pick("obs_norm", family == "continuous")
    model = args.model
    pick("lr", LR.get(model, 1e-4))
    pick("hidden_size", HIDDEN.get(model, 512))
    pick("value_coef", 0.5 if frames else 0.1)
    train_forward = "batched" if on_gpu or model not in RECURRENT_MODELS else "stepped"
    pick("reward_clipping", "abs_one" if frames else "none")
    pick("max_grad_norm", 40.0 if family == "atari" else 0.0)
    if args.algo == "impala":
        pick("inference", "server" if on_gpu and args.backend == "shm" else "local")  # ray: each actor its own copy
        # 8 unrolls, or two of each environment where there are fewer; with --num-buffers, what its slots can fill
        pick("batch_size", min(8, 2 * args.workers * args.envs_per_worker if args.num_buffers is None
                               else batch_capacity(args)))
    else:
        pick("train_forward", train_forward)
    # The other algorithm's are nobody's choice: None in args.json, not auto, and not a placeholder value that a run
    # resumed with that other --algo would take for the user's
    for name in ONE_ALGORITHMS_AUTO:
        if getattr(args, name) == AUTO:
            setattr(args, name, None)
    pick("eps", DEFAULT_EPS[args.optimizer])  # rl_a3c_pytorch's, per optimizer
    pick("objective", "pg")
    if args.objective == "ppo":
        pick("normalize_advantages", True)  # per minibatch (CleanRL's, baselines')
        pick("value_clip", args.clip_coef)
    else:  # off, and nothing to clip: not listed at start-up
        if args.normalize_advantages == AUTO:
            args.normalize_advantages = False
        if args.value_clip == AUTO:
            args.value_clip = None
    if family == "atari" and args.algo == "a3g" and args.max_frames:
        pick("lr_decay", lr_fall(args.max_frames))
    elif args.lr_decay == AUTO:
        args.lr_decay = None  # a constant rate (not listed at start-up: nothing falls)
    return description, picked


FALL_FROM = 10_000_000  # frames: where the learning rate starts to fall, within the budget's last tenth to half


def lr_fall(max_frames: int) -> list[int]:
    """``--lr-decay``'s default span for a ``--max-frames`` budget: from ``FALL_FROM`` frames to the end, but over
    at least the budget's last tenth and at most its last half (module docstring)."""
    start = min(max(FALL_FROM, max_frames // 2), max_frames * 9 // 10)
    return [start, max_frames]


def slots_per_actor(args: argparse.Namespace) -> int:
    """IMPALA's unroll slots per actor: ``--num-buffers`` split between the actors, and at least two unrolls of each
    of an actor's environments (one being filled while the other waits for the learner); without ``--num-buffers``,
    also enough that the actors can always fill a batch (``batch_capacity``)."""
    least = 2 * args.envs_per_worker
    if args.num_buffers is None:  # B <= batch_capacity(args)
        claimed_at_once = args.envs_per_worker if args.backend == "shm" else 1  # Ray's queue: no claims
        least = max(least, -(-args.batch_size // args.workers) + claimed_at_once - 1)
    return max((args.num_buffers or 0) // args.workers, least)


def batch_capacity(args: argparse.Namespace) -> int:
    """The largest batch the shared-memory slots can always fill. An actor claims one slot per environment at once
    (E of them), so while the learner waits for full slots each actor may be stuck with up to E - 1 free ones it
    cannot use: a batch larger than ``workers * (per_actor - E + 1)`` could wait for ever. (Ray's backend queues
    as many unrolls as there are slots, and nothing claims them.)"""
    if args.backend == "ray":
        return args.workers * slots_per_actor(args)
    return args.workers * (slots_per_actor(args) - args.envs_per_worker + 1)


def worker_cap_note(picked: list[tuple[str, object]]) -> str:
    """Where the defaults ``resolve_defaults`` picked left cores idle (A3G on Atari on a machine of more than 2), why,
    for the start-up line."""
    workers, cores = dict(picked).get("--workers"), usable_cores()
    if workers is None or workers >= cores:
        return ""
    return (f"; {workers} workers on {cores} cores: more hogwild workers killed Breakout's network "
            f"(README.md, \"Defaults\")")


def describe(description: str, picked: list[tuple[str, object]]) -> str:
    """The start-up line's part about defaults."""
    if not picked:
        return ""
    flags = " ".join(flag if value is True else f"--no-{flag[2:]}" if value is False else f"{flag} {value:g}"
                     if isinstance(value, float) else f"{flag} {' '.join(map(str, value))}"
                     if isinstance(value, list) else f"{flag} {value}" for flag, value in picked)
    return f"defaults for {description}: {flags}"


def final_slots(settings: EnvSettings, unroll_length: int) -> int:
    """K, the most episodes a time limit can cut within one environment's unroll of ``T`` steps: each cut ends an
    episode of L steps, so ceil(T / L) for the shortest limit L (``--max-episode-length``, or the environment's
    own, e.g. CartPole-v1's 500; counted in agent steps as if each were ``--skip-rate`` of its steps, which can
    only overestimate). 1 for any usual setting: an unroll stores one extra observation, not T of them."""
    limits = [settings.max_episode_length]
    own = env_spec(settings.env_id).max_episode_steps if is_registered(settings.env_id) else None
    if own:
        limits.append(max(1, own // max(1, settings.skip_rate)))
    return -(-unroll_length // min(limits))
