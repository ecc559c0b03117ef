"""IMPALA's ``--inference server``: one role runs every actor's forward passes, batched (GA3C, Batched-IMPALA).

With ``--inference local`` each actor acts with its own CPU copy of the weights, one small batch (its envs) at a
time. With ``--inference server`` the actors hold no network: at each step an actor writes its observations (and
recurrent state) into its row of the shared ``InferenceServer`` and waits; the **inference** role gathers whatever
rows are waiting (up to ``--inference-batch`` observations, waiting at most ``--inference-wait`` ms for more once
one has arrived), runs one forward pass on its device (the GPU when there is one) with the latest published
weights, and writes each actor's values, logits, new state (and, when a replay ranks unrolls by them, the features
the network's heads read) and the weights' version back. Where it pays: one
model on a GPU instead of a CUDA context per actor, and large batches; on a CPU the actors' own forward passes
cost no more than the server's, and the hand-off is extra (docs/results/throughput.md).

Hand-off: every row has a status (IDLE -> ASKED by its actor -> ANSWERED by the server -> IDLE by the actor), each
change with a single writer, as the unroll slots' (impala/shm.py). The waits sleep on POSIX semaphores (one that
wakes the server, one per actor that wakes it), not on a polled flag: a step is about a millisecond, and spinning
would take a core from the emulators. A semaphore holds no lock that a killed process could leave held, and every
wait has a timeout after which the waiter looks at the status itself, so a lost wake-up costs time, never a hang:
a server killed mid-batch is replaced (the supervisor) and the new one answers the rows still ASKED; an actor
killed while waiting leaves a row its replacement resets.
"""

import argparse
import time
from collections.abc import Sequence
from multiprocessing.context import BaseContext

import torch

from core.hardware import device_for
from impala.boundary import WeightSource
from model import build_model, fast_layout
from runtime.processes import parent_alive, setup_child_process
from runtime.run_state import RunState, StopFlag

IDLE, ASKED, ANSWERED = 0, 1, 2
POLL = 0.1  # seconds a wait sleeps before it checks the status, the stop flag and the parent by itself


class InferenceStopped(Exception):
    """The run is stopping (or its parent is gone) while an actor waits for an answer."""


class InferenceServer:
    """Shared-memory request and answer rows, one per actor (``[actors, envs, ...]``), and the semaphores."""

    def __init__(self, ctx: BaseContext, actors: int, envs: int, obs_shape: Sequence[int], num_actions: int,
                 hidden_size: int, feature_size: int = 0, obs_dtype: torch.dtype = torch.float32) -> None:
        self.obs = torch.zeros((actors, envs, *obs_shape), dtype=obs_dtype)
        self.hx_in = torch.zeros((actors, envs, hidden_size))
        self.cx_in = torch.zeros((actors, envs, hidden_size))
        self.count = torch.zeros(actors, dtype=torch.int64)  # observations in the row's request
        self.values = torch.zeros((actors, envs))
        self.logits = torch.zeros((actors, envs, num_actions))
        self.hx_out = torch.zeros((actors, envs, hidden_size))
        self.cx_out = torch.zeros((actors, envs, hidden_size))
        self.features = torch.zeros((actors, envs, feature_size))  # F = 0 unless a replay ranks by them
        self.version = torch.zeros(actors, dtype=torch.int64)  # the weights' version that answered
        self.status = torch.zeros(actors, dtype=torch.int8)
        for tensor in vars(self).values():
            if torch.is_tensor(tensor):
                tensor.share_memory_()
        self.asked = ctx.Semaphore(0)  # released once per request: wakes the server
        self.answered = [ctx.Semaphore(0) for _ in range(actors)]  # released once per answer: wakes actor r


class InferenceClient:
    """What an actor acts with under ``--inference server``: called as the model is, ``(obs [n, ...], (hx, cx))``
    to ``(values [n], logits [n, A], (hx, cx))`` (and ``features [n, F]`` with ``with_features``, when the server
    computes them), with ``n`` up to its envs. ``unroll_version`` is the oldest weights' version that answered
    since ``begin_unroll``."""

    def __init__(self, server: InferenceServer, rank: int, stop: StopFlag, parent_pid: int) -> None:
        self.server, self.rank, self.stop, self.parent_pid = server, rank, stop, parent_pid
        server.status[rank] = IDLE  # a predecessor killed while waiting may have left its row ASKED or ANSWERED
        while server.answered[rank].acquire(block=False):
            pass
        self.unroll_version = None

    def begin_unroll(self) -> None:
        """Start an unroll: ``unroll_version`` is the oldest version of the answers from here on."""
        self.unroll_version = None

    def __call__(self, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor],
                 with_features: bool = False) -> tuple:
        s, r, n = self.server, self.rank, obs.shape[0]
        s.obs[r, :n] = obs
        s.hx_in[r, :n], s.cx_in[r, :n] = state
        s.count[r] = n
        s.status[r] = ASKED  # last: the server reads a row only once it is ASKED
        s.asked.release()
        while s.status[r] != ANSWERED:
            if not s.answered[r].acquire(timeout=POLL) and (self.stop.is_set()
                                                            or not parent_alive(self.parent_pid)):
                raise InferenceStopped
        version = int(s.version[r])
        self.unroll_version = version if self.unroll_version is None else min(self.unroll_version, version)
        answer = (s.values[r, :n].clone(), s.logits[r, :n].clone(), (s.hx_out[r, :n].clone(), s.cx_out[r, :n].clone()))
        if with_features:
            answer += (s.features[r, :n].clone(),)
        s.status[r] = IDLE
        return answer


class LocalPolicy:
    """What an actor acts with under ``--inference local``: its own CPU copy of the weights, refreshed at the start
    of an unroll when a newer version is published. The same interface as ``InferenceClient``."""

    def __init__(self, model: torch.nn.Module, weights: WeightSource) -> None:
        self.model, self.weights = model, weights
        self.replica = weights.replica(model)
        self.unroll_version = weights.fetch(self.replica)

    def begin_unroll(self) -> None:
        """Refresh the weights if a newer version was published."""
        if self.weights.version != self.unroll_version:
            self.unroll_version = self.weights.fetch(self.replica)

    def __call__(self, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor],
                 with_features: bool = False) -> tuple:
        return self.model(obs, state, with_features=with_features)


def waiting_rows(server: InferenceServer) -> list[int]:
    """The rows whose actor has asked and not been answered yet."""
    return (server.status == ASKED).nonzero().squeeze(1).tolist()


def gather(server: InferenceServer, max_batch: int, max_wait: float) -> list[int]:
    """The rows to answer now: those ASKED, plus any that ask within ``max_wait`` seconds of the first while the
    batch has room, cut to the rows whose observations fit in ``max_batch`` (``within``). Rows a full batch left
    waiting are answered first, without a wait. Empty when nothing asked within ``POLL``."""
    rows = waiting_rows(server)
    if not rows:
        # a wake-up lost to a killed server leaves rows ASKED with no release: the timeout finds them
        server.asked.acquire(timeout=POLL)
        rows = waiting_rows(server)
        if not rows:
            return rows
    deadline = time.monotonic() + max_wait
    while int(server.count[rows].sum()) < max_batch and len(rows) < len(server.status):
        left = deadline - time.monotonic()
        if left <= 0 or not server.asked.acquire(timeout=left):
            break
        rows = waiting_rows(server)
    return within(server, rows, max_batch)


def within(server: InferenceServer, rows: list[int], max_batch: int) -> list[int]:
    """The rows of one forward pass: taken in turn from the row after the last one answered (so that no actor
    waits behind the others' new requests), while their observations fit in ``max_batch``; one row at least."""
    start = getattr(server, "next_row", 0)  # this process's own cursor: not shared
    kept, total = [], 0
    for r in sorted(rows, key=lambda r: (r - start) % len(server.status)):
        n = int(server.count[r])
        if kept and total + n > max_batch:
            break
        kept.append(r)
        total += n
    server.next_row = (kept[-1] + 1) % len(server.status)
    return kept


def answer(server: InferenceServer, model: torch.nn.Module, rows: list[int], version: int,
           device: torch.device) -> int:
    """One forward pass over the rows' observations; each row's answer written back and its actor woken. Returns
    the number of observations answered."""
    counts = server.count[rows].tolist()
    obs = torch.cat([server.obs[r, :n] for r, n in zip(rows, counts)]).to(device, non_blocking=True)
    hx = torch.cat([server.hx_in[r, :n] for r, n in zip(rows, counts)]).to(device)
    cx = torch.cat([server.cx_in[r, :n] for r, n in zip(rows, counts)]).to(device)
    with_features = server.features.shape[-1] > 0
    out = model(obs, (hx, cx), with_features=with_features)
    values, logits, (hx, cx) = out[:3]
    values, logits, hx, cx = (t.float().cpu() for t in (values, logits, hx, cx))
    features = out[3].float().cpu() if with_features else None
    start = 0
    for r, n in zip(rows, counts):
        end = start + n
        server.values[r, :n], server.logits[r, :n] = values[start:end], logits[start:end]
        if with_features:
            server.features[r, :n] = features[start:end]
        server.hx_out[r, :n], server.cx_out[r, :n] = hx[start:end], cx[start:end]
        server.version[r] = version
        server.status[r] = ANSWERED  # last: the actor reads its answer only once it is ANSWERED
        server.answered[r].release()
        start = end
    return start


def inference(args: argparse.Namespace, meta: dict, server: InferenceServer, weights: WeightSource, state: RunState,
              parent_pid: int) -> None:
    """The inference role: answer the actors' requests in batches with the latest published weights."""
    setup_child_process(args.seed + args.workers + 2, parent_pid)
    device = device_for(args.gpu_ids, 0)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    model = fast_layout(build_model(meta).to(device), meta, args.channels_last).eval()
    replica = weights.replica(model)
    version = weights.fetch(replica)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16)
    max_batch = args.inference_batch or args.workers * args.envs_per_worker
    max_wait = args.inference_wait / 1000.0
    while not state.stop.is_set() and parent_alive(parent_pid):
        rows = gather(server, max_batch, max_wait)
        if not rows:
            continue
        if weights.version != version:
            version = weights.fetch(replica)
        with torch.no_grad(), autocast:
            answered = answer(server, model, rows, version, device)
        state.inference[0] += 1  # this role is their only writer
        state.inference[1] += answered
