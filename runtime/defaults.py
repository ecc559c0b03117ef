"""Defaults that fit the environment family and the machine: what ``python main.py`` picks when a flag is not given.

A few flags default to ``auto``. After parsing (and after a resumed run's saved flags are merged in, which are
never ``auto``), ``resolve_defaults`` replaces each ``auto`` with the value that learned fastest for that family on
that kind of machine, and returns what it picked with the reason, for the start-up line. A flag given on the
command line is never touched, so rl_a3c_pytorch's commands keep their meaning. ``--eps`` follows ``--optimizer``
(rl_a3c_pytorch's: Adam 1e-3, RMSprop 0.1).

The table of what each family gets on each kind of machine is docs/reference/defaults.md (a test checks it against
``resolve_defaults``); the measurements that chose each value are on the results pages it links.

- Games from frames: the Nature network with 8 environments per worker, on a CPU and with GPUs alike (the
  A3C-LSTM with one environment launches small kernels one step at a time). Retro games: the same with one
  environment per worker (stable-retro runs one emulator per process).
- ``--workers``: one per CPU core, at most 2 for A3G on Atari: a hogwild worker's gradient is computed on weights as
  many updates old as there are other workers, and with 4 or more Breakout's network lost its units and learned
  nothing. IMPALA keeps one actor per core: its one learner applies each update to the weights it was computed on.
- ``--reward-clipping``: ``abs_one`` for Atari and retro games (rl_a3c_pytorch's and TorchBeast's), ``none`` for
  classic control. ``--max-grad-norm``: 40 for Atari (TorchBeast's), which ends Breakout's collapses after
  outsized updates without slowing Pong; off elsewhere.
- ``--lr-decay``: for A3G on Atari the rate falls linearly to 0 by ``--max-frames``, from 10M frames but over at
  least the budget's last tenth and at most its last half (measured on Breakout and SpaceInvaders at 10M and 20M
  frames; spans between and beyond are the rule's); constant without ``--max-frames`` and elsewhere.
- ``--objective``: ``ppo`` for A3G with the Nature network on Atari on a CPU-only machine (Breakout's and
  SpaceInvaders' scores sooner in wall-clock, Pong's +18 as soon); ``pg`` wherever PPO was not measured against it:
  IMPALA, the recurrent networks, GPUs and the other families.
- ``--objective ppo`` on Atari: CleanRL's and RL Zoo's PPO settings (``PPO_ATARI``), and A3G's frames divided by
  255 less each frame's darkest value: divided by 255 alone, they learned Breakout where per-frame standardisation
  idled, and Pong only with its grey background made black; without it, the values in ``QUIET``.
- The auto flags that only one algorithm reads (IMPALA's ``--inference`` and ``--batch-size``, A3G's
  ``--train-forward``) are None in the other's runs. ``--inference``: ``local`` on a CPU, ``server`` with GPUs.
  ``--train-forward``: ``batched`` for the feed-forward networks and with GPUs, ``stepped`` for the recurrent
  networks on a CPU (their second forward costs more there than batching saves).
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
ONE_ALGORITHMS_AUTO = ("inference", "batch_size", "train_forward", "tau")  # auto flags that only one --algo reads
# --objective ppo's settings for Atari: CleanRL's and RL Zoo's (8 envs x 128 steps, GAE 0.95, Adam 2.5e-4 with eps
# 1e-5, the gradient norm clipped at 0.5) with A3G's rate doubled (Pong's +18 in fewer frames, Breakout and
# SpaceInvaders alike per frame: log/ppo.md), and frames divided by 255 less their darkest value (Pong's background
# black; a frame with a black pixel as it is divided by 255); IMPALA keeps its unrolls and reads no --tau,
# and its frames keep --frame-norm frame (its PPO measured only with scale, one run per --ppo-targets: results/ppo.md)
PPO_ATARI = {"a3g": {"num_steps": 128, "tau": 0.95, "lr": 5e-4, "eps": 1e-5, "max_grad_norm": 0.5,
                     "frame_norm": "darkest"},
             "impala": {"lr": 2.5e-4, "eps": 1e-5, "max_grad_norm": 0.5}}
# what the flags above are without PPO on Atari, where they are not listed at start-up (they are the same everywhere)
QUIET = {"num_steps": 20, "frame_norm": "frame"}


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

    measured_ppo = family == "atari" and args.algo == "a3g" and not on_gpu and args.model in (AUTO, "nature")
    pick("objective", "ppo" if measured_ppo else "pg")
    # CleanRL's and RL Zoo's PPO recipe (Adam's eps only: RMSprop keeps its own)
    recipe = PPO_ATARI[args.algo] if family == "atari" and args.objective == "ppo" else {}
    if args.optimizer != "Adam":
        recipe = {name: value for name, value in recipe.items() if name != "eps"}
    for name, value in recipe.items():
        pick(name, value)

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
        if args.tau == AUTO:  # plain n-step advantages, as everywhere but PPO on Atari: not listed
            args.tau = 1.0
    # The other algorithm's are nobody's choice: None in args.json, not auto, and not a placeholder value that a run
    # resumed with that other --algo would take for the user's
    for name in ONE_ALGORITHMS_AUTO:
        if getattr(args, name) == AUTO:
            setattr(args, name, None)
    for name, value in QUIET.items():  # not listed: the same for every family
        if getattr(args, name) == AUTO:
            setattr(args, name, value)
    pick("eps", DEFAULT_EPS[args.optimizer])  # rl_a3c_pytorch's, per optimizer
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
            f"(docs/reference/defaults.md)")


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
