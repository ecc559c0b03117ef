"""IMPALA in a3g (Espeholt et al. 2018): actors that never wait for the learner, and a learner that corrects for
their lag with V-trace.

Roles, handed to the supervisor as A3G's are (``impala_roles``):
- **actor** x ``--workers``: steps ``--envs-per-worker`` environments with a CPU copy of the latest published
  weights (``--inference local``) or through the inference role (``--inference server``, impala/inference.py), and
  writes each environment's unroll of ``--unroll-length`` steps (observations, actions, rewards, episode ends,
  the steps a time limit cut and the observations it cut at, the behaviour policy's logits and values, the
  recurrent state at the unroll's start and the weights' version) into a slot of the shared ``UnrollStore``;
- **learner** x 1: takes the oldest full unrolls (``LearnerStep.need`` of them: ``--batch-size`` less the share of
  each replay that can already give its own; dropping those more than ``--max-policy-lag`` versions old),
  computes V-trace targets and steps the shared model (``impala/learner.py``) and publishes the new weights' version;
- **evaluator**: ``runtime/evaluator.py``, the same as A3G's;
- **inference** x 1 with ``--inference server``: answers the actors' forward passes in batches (impala/inference.py).

The roles' work is written once, for both backends: ``Acting`` (impala/acting.py: one unroll of an actor's
environments into plain buffers) and ``LearnerStep`` in ``learner_loop`` (impala/learner.py: fresh unrolls ->
V-trace update -> ``publish``). This file's backend implements impala/boundary.py's protocols with shared memory:
unrolls through ``UnrollStore`` (actors ``claim`` free slots and ``commit`` full ones; ``StoreSource`` hands the
learner the oldest full ones) and weights through ``SharedWeights`` (``publish`` / ``fetch`` with a version);
impala/ray_backend.py moves the same through Ray's object store, to run the actors on several machines.

Why slots with a status byte instead of free/full index queues (TorchBeast's MonoBeast): a multiprocessing queue
has a lock, and a process killed while holding it (an actor killed mid-``put``) leaves every other process
waiting on it for ever. Here every slot belongs to one actor (``--num-buffers`` split between them), and each
status change has a single writer: the owning actor turns FREE into WRITING into FULL, the learner turns FULL
back into FREE once it has copied the unroll. An actor killed mid-unroll leaves its slot WRITING; its replacement
(same rank, same slots) frees it first, so an unroll is never lost for good and never used half-written.
"""

import os
import time
from collections.abc import Sequence
from multiprocessing.context import BaseContext
from typing import Callable

import torch

from impala.acting import Acting, local_policy
from impala.inference import InferenceClient, InferenceServer, InferenceStopped, inference
from impala.learner import LearnerStep, learner_loop, replays_for, unroll_features
from impala.replay import ReplayBuffer
from impala.unrolls import UnrollSlots, column, policy_layout
from model import Replica
from runtime.context import RunContext
from runtime.defaults import final_slots, slots_per_actor
from runtime.evaluator import evaluator_role
from runtime.processes import parent_alive, setup_child_process
from runtime.run_state import RunState

FREE, WRITING, FULL = 0, 1, 2
WAIT = 0.002  # seconds between polls of the store: a wait always ends with the stop flag or the parent's death


class UnrollStore(UnrollSlots):
    """Preallocated shared-memory slots, one unroll of one environment each, ``T = unroll_length`` steps:
    ``obs [T + 1, ...]`` (the last one is where the next unroll starts, and what V-trace bootstraps from),
    ``actions``, ``rewards``, ``dones``, ``truncated`` and ``final_obs [K, ...]`` (the steps a time limit cut, and
    the observations it cut at: ``unrolls``), ``logits [T, A]`` and ``values [T]`` (the behaviour policy's),
    ``hx``/``cx`` (the recurrent state before ``obs[0]``), the weights' ``version`` that acted, and when it was
    committed (``stamp``, for oldest-first); with a replay that ranks by them, ``features [T, F]`` (what the acting
    network's heads read, for elite sampling; F = 0 otherwise). Slots ``[rank * per_actor, (rank + 1) *
    per_actor)`` belong to actor ``rank``."""

    def __init__(self, slots: int, per_actor: int, unroll_length: int, obs_shape: Sequence[int], num_actions: int,
                 hidden_size: int, feature_size: int = 0, **layout) -> None:
        """``layout``: ``UnrollSlots``' keywords (``final_slots`` and ``policy_layout``'s)."""
        super().__init__(slots, unroll_length, obs_shape, num_actions, hidden_size, feature_size, **layout)
        self.per_actor = per_actor
        self.version = torch.zeros(slots, dtype=torch.int64)
        self.stamp = torch.zeros(slots, dtype=torch.float64)
        self.status = torch.zeros(slots, dtype=torch.int8)
        self.share_memory()

    def own(self, rank: int) -> range:
        """The slots of actor ``rank``."""
        return range(rank * self.per_actor, (rank + 1) * self.per_actor)

    def recover(self, rank: int) -> None:
        """A new actor of ``rank`` frees what its predecessor was writing when it died."""
        for slot in self.own(rank):
            if self.status[slot] == WRITING:
                self.status[slot] = FREE

    def claim(self, rank: int, count: int) -> list[int] | None:
        """``count`` free slots of actor ``rank``, now WRITING; None when fewer are free."""
        free = [slot for slot in self.own(rank) if self.status[slot] == FREE][:count]
        if len(free) < count:
            return None
        self.status[free] = WRITING
        return free

    def write(self, slots: list[int], unroll: dict[str, torch.Tensor]) -> None:
        """Copy an actor's unroll (``Acting.unroll``: env ``j`` into ``slots[j]``) into its claimed slots."""
        for j, slot in enumerate(slots):
            self.store(slot, column(unroll, j))

    def commit(self, slots: list[int], version: int) -> None:
        """Mark the written ``slots`` FULL, acted by weights ``version``, stamped now."""
        self.version[slots] = version
        self.stamp[slots] = time.monotonic()
        self.status[slots] = FULL  # last: the learner reads a slot only once it is FULL

    def full(self) -> torch.Tensor:
        """The FULL slots, oldest first."""
        slots = (self.status == FULL).nonzero().squeeze(1)
        return slots[self.stamp[slots].argsort()]

    def take(self, slots: torch.Tensor) -> dict[str, torch.Tensor]:
        """Copy the unrolls in ``slots`` out, time-major (``[T + 1, n, ...]`` observations, ``[T, n, ...]`` the
        rest, ``[n, H]`` states), and free the slots."""
        batch = self.read(slots)
        self.release(slots)
        return batch

    def release(self, slots: torch.Tensor | list[int]) -> None:
        self.status[slots] = FREE


class SharedWeights:
    """The weights actors act with: the shared model, and a version number that the learner alone writes."""

    def __init__(self, ctx: BaseContext, shared_model: torch.nn.Module) -> None:
        self.model = shared_model
        self._version = ctx.RawValue("q", 0)

    @property
    def version(self) -> int:
        return self._version.value

    def publish(self) -> None:
        """The learner has stepped the shared model: announce the new version."""
        self._version.value += 1

    def replica(self, model: torch.nn.Module) -> Replica:
        """``model`` as a replica of the shared weights, for ``fetch`` (``model.Replica``: one flat copy)."""
        return Replica(self.model, model, train=False)

    def fetch(self, replica: Replica) -> int:
        """Copy the latest weights into ``replica``; returns their version (read first: a copy torn by a
        concurrent step is counted as the older version)."""
        version = self._version.value
        replica.pull()
        return version


def actor(rank: int, run: RunContext, store: UnrollStore, weights: SharedWeights, server: InferenceServer | None,
          parent_pid: int) -> None:
    """The shared-memory actor: claim this actor's free slots, play an unroll into them, commit them."""
    args, settings, meta, state = run.args, run.settings, run.meta, run.state
    setup_child_process(args.seed + rank, parent_pid)
    store.recover(rank)
    if server is None:
        policy = local_policy(args, meta, weights)
    else:
        policy = InferenceClient(server, rank, state.stop, parent_pid)
    acting = Acting(args, settings, meta, policy, rank, store.features.shape[-1], args.bf16 and server is None)
    batch = args.envs_per_worker
    try:
        while not state.stop.is_set() and parent_alive(parent_pid):
            slots = store.claim(rank, batch)
            if slots is None:  # every slot of this actor is full: the learner is behind
                state.actor_waits.add(rank, 1)
                with acting.clock.phase("wait"):
                    while slots is None and not state.stop.is_set() and parent_alive(parent_pid):
                        time.sleep(WAIT)
                        slots = store.claim(rank, batch)
                if slots is None:
                    break
            unroll, version, games = acting.unroll()
            store.write(slots, unroll)
            store.commit(slots, version)
            state.add(rank, acting.frames, games)
            state.record_games(rank, acting.envs.take_finished())
            state.publish_phases(rank, acting.clock)
    except InferenceStopped:  # the run stopped while this actor waited for the inference server
        pass


class StoreSource:
    """The learner's ``UnrollSource`` here: the oldest full slots of the store; those more than
    ``--max-policy-lag`` versions behind are freed unused and counted in ``state.dropped``."""

    def __init__(self, store: UnrollStore, max_policy_lag: int | None, state: RunState) -> None:
        self.store, self.max_policy_lag, self.state = store, max_policy_lag, state

    def take(self, need: int, version: int) -> tuple[dict[str, torch.Tensor], torch.Tensor] | None:
        full = self.store.full()
        if self.max_policy_lag is not None:
            stale = full[version - self.store.version[full] > self.max_policy_lag]
            if len(stale):  # too old to correct well: dropped, counted
                self.store.release(stale)
                self.state.dropped.value += len(stale)
                full = self.store.full()
        if len(full) < need:
            return None
        slots = full[:need]
        lag = version - self.store.version[slots]  # before take frees the slots to actors, who may refill them
        return self.store.take(slots), lag

    def after(self, took: bool) -> None:
        if not took:
            time.sleep(WAIT)


def learner(run: RunContext, store: UnrollStore, weights: SharedWeights, parent_pid: int,
            replays: list[ReplayBuffer]) -> None:
    """The shared-memory learner: ``learner_loop`` over the store's full slots."""
    args = run.args
    setup_child_process(args.seed + args.workers + 1, parent_pid)
    step = LearnerStep(args, run.meta, run.shared_model, run.optimizer, weights, run.state, replays)
    learner_loop(step, StoreSource(store, args.max_policy_lag, run.state), run.state, parent_pid)


def impala_roles(ctx: BaseContext, run: RunContext) -> dict[str, tuple[Callable, tuple]]:
    """IMPALA's roles for the supervisor: ``actor <rank>`` x ``--workers``, the learner, the evaluator and, with
    ``--inference server``, the inference role."""
    args, settings, meta, state = run.args, run.settings, run.meta, run.state
    per_actor = slots_per_actor(args)
    features = unroll_features(args, meta)
    layout = policy_layout(meta)
    store = UnrollStore(per_actor * args.workers, per_actor, args.num_steps, meta["obs_shape"],
                        hidden_size=meta["hidden_size"], feature_size=features,
                        final_slots=final_slots(settings, args.num_steps), **layout)
    replays = replays_for(args, settings, meta)
    weights = SharedWeights(ctx, run.shared_model)
    server = None
    if args.inference == "server":
        server = InferenceServer(ctx, args.workers, args.envs_per_worker, meta["obs_shape"], layout["num_actions"],
                                 meta["hidden_size"], features, layout["obs_dtype"])
    parent = os.getpid()
    roles = {"evaluator": evaluator_role(run), "learner": (learner, (run, store, weights, parent, replays))}
    for rank in range(args.workers):
        roles[f"actor {rank}"] = (actor, (rank, run, store, weights, server, parent))
    if server is not None:
        roles["inference"] = (inference, (args, meta, server, weights, state, parent))
    return roles
