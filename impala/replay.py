"""Replay for IMPALA's learner (``--replay-parameters``): batches that mix fresh unrolls with stored ones.

A run has one on-policy **queue** (the unroll store's fresh unrolls, impala/shm.py) and any number of **replays**, each
a ``ReplayBuffer`` with a ``capacity`` of unrolls. Every learner batch is ``--batch-size`` unrolls: ``sample_ratio x
B`` of them from each source (``count``). The fresh unrolls are put into every replay only after the batch is
built, so no unroll appears twice in one batch. Until a replay holds ``count`` unrolls, its share of the batch is
fresh unrolls too (a batch is never short, and training starts at once).

Replay kinds, as elite_buffer_vtrace names them (its README and ``parameter_schema``):
- ``standard``: uniform sampling, oldest overwritten first;
- ``custom``: a ``dist_function`` (``ln_norm``, ``cos_dist``, ``kl_div``) and optional strategies:
  ``sample_strategy`` ``elite_sampling`` (prefer stored unrolls whose features the current network still
  reproduces: smallest distance between the features stored at acting time and the current network's) or
  ``attentive_sampling`` (prefer unrolls whose current features are closest to those of the newest unroll's last
  state, where the agent is now), both ranking a random candidate set of ``lambda x count`` distinct slots, lambda
  annealing linearly from ``lambda_batch_multiplier`` (6, as elite_buffer_vtrace's README runs it; one that gives
  no more candidates than picks is refused) to 1 (``elite_sampling_strategy`` strategy1-4 picks among the
  candidates: ``elite_picks``); ``insert_strategy`` ``elite_insertion`` (once full, overwrite the most drifted
  of ``elite_batch_size`` random slots instead of the oldest).

Where this differs from elite_buffer_vtrace, on purpose: ``cos_dist`` is ``1 - cosine similarity``, a distance
(its code ranked the similarity as if it were one, so elite sampling picked the most drifted unrolls); candidates
are distinct slots, so strategy 3 cannot loop for ever waiting for a sample count that no candidate has, and a
buffer of exactly ``count`` slots works; ratios are compared with a tolerance (it rejected 0.6, 0.3, 0.1). Added:
``score_steps`` k ranks by each unroll's first k steps only (5 by default, every step where unrolls are shorter;
null: every step), k/T of the scoring forwards' cost (on a CPU, scoring every step cost as much as the learner's
training; the first 5 learned Pong as well: docs/results/replay.md).

The buffers are shared-memory tensors allocated once by the supervisor (they outlive a replaced learner), with
the unroll slots' layout plus per-unroll features, sample counts and insertion step; the learner is their only
writer, and it samples with its own seeded ``torch.Generator``. A stored unroll keeps the environment's rewards
and the observations a time limit cut its episodes at, so a replayed cut bootstraps from the current network's
value, as a fresh one does (``impala.learner.cut_values``).
"""

import argparse
import os
from collections.abc import Sequence
from typing import Callable

import torch

from core.policy import Categorical, Policy
from envs.environment import EnvSettings
from impala.unrolls import UnrollSlots, policy_layout
from model import feature_size
from runtime.defaults import final_slots
from runtime.replay_spec import candidate_count, entry_error, needs_features, replay_specs

Score = Callable[[torch.Tensor], torch.Tensor]  # a replay's ranking: slots -> distances (smaller = closer)

# ---------------------------------------------------------------------------------------------------------------
# Distances between unrolls' features: [n, T, F] against [n, T, F] (or [T, F], broadcast), one number per unroll


def ln_norm(a: torch.Tensor, b: torch.Tensor, p: float = 2) -> torch.Tensor:
    """``(sum |a - b|^p)^(1/p)`` over each unroll's steps and features."""
    return (a - b).abs().pow(p).flatten(1).sum(1).pow(1.0 / p)


def cos_dist(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``1 - cos(a, b)`` of each unroll's features, flattened: 0 for the same direction, 2 for opposite ones."""
    a, b = torch.broadcast_tensors(a, b)
    a, b = a.flatten(1), b.flatten(1)
    similarity = (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1)).clamp_min(eps)
    return 1.0 - similarity


def kl_div(target_logits: torch.Tensor, behavior_logits: torch.Tensor, policy: Policy | None = None) -> torch.Tensor:
    """``sum_t KL(pi_t || mu_t)`` of each unroll, from logits ``[n, T, P]``: ``policy``'s KL (``core/policy.py``;
    by default a categorical over the logits, whose log-softmax drops constants)."""
    policy = policy or Categorical(target_logits.shape[-1])
    target_logits, behavior_logits = torch.broadcast_tensors(target_logits, behavior_logits)
    return policy.kl(target_logits, behavior_logits).flatten(1).sum(1)


def distance(name: str, current: torch.Tensor, stored: torch.Tensor, p: float = 2,
             policy: Policy | None = None) -> torch.Tensor:
    """``dist_function`` ``name`` between the current network's features (or logits, for ``kl_div``, with
    ``policy``'s KL) and the stored ones; smaller = closer."""
    if name == "ln_norm":
        return ln_norm(current, stored, p)
    if name == "cos_dist":
        return cos_dist(current, stored)
    return kl_div(current, stored, policy)


# ---------------------------------------------------------------------------------------------------------------
# Picking among candidates


def elite_picks(strategy: str, distances: torch.Tensor, counts: torch.Tensor, n: int) -> torch.Tensor:
    """Positions of ``n`` picks among candidates with ``distances`` and sample ``counts`` (both ``[k]``, k >= n),
    as elite_buffer_vtrace's README defines the strategies (ties go to the lower position):

    - strategy1: the ``n`` lowest distances;
    - strategy2: sort by distance, split into ``n`` consecutive subsets, the lowest distance of each;
    - strategy3: as 1, least-sampled first (by count, then distance);
    - strategy4: as 2, the least-sampled of each subset (ties: the lower distance).
    """
    k = distances.shape[0]
    if not 0 < n <= k:
        raise ValueError(f"cannot pick {n} of {k} candidates")
    by_distance = torch.sort(distances, stable=True).indices
    if strategy == "strategy1":
        return by_distance[:n]
    if strategy == "strategy3":
        by_count = torch.sort(counts[by_distance], stable=True).indices
        return by_distance[by_count][:n]
    groups = torch.tensor_split(by_distance, n)
    if strategy == "strategy2":
        return torch.stack([group[0] for group in groups])
    if strategy == "strategy4":
        return torch.stack([group[torch.argmin(counts[group])] for group in groups])
    raise ValueError(f"unknown elite_sampling_strategy {strategy!r}")


def annealed_lambda(lambda0: float, alfa: float, progress: float) -> float:
    """Candidates per pick, ``lambda0 - (lambda0 - 1) x progress / alfa`` and at least 1, with ``progress`` the
    run's fraction done in [0, 1]: with ``alfa`` 1 it reaches 1 at the run's end, with ``alfa`` 2 it falls half as
    fast (elite_buffer_vtrace's ``alfa_annealing_factor`` divides the slope the same way)."""
    return max(1.0, lambda0 - (lambda0 - 1.0) * min(max(progress, 0.0), 1.0) / alfa)


# ---------------------------------------------------------------------------------------------------------------
# Memory


def slot_bytes(unroll_length: int, obs_shape: Sequence[int], num_actions: int, hidden_size: int, feature_size: int,
               **layout) -> int:
    """Bytes one stored unroll takes: one slot of the unroll layout (measured on a one-slot ``UnrollSlots``, so that
    a new field counts; ``layout``: its keywords), and the replay's ``sample_count`` and ``inserted``."""
    one = UnrollSlots(1, unroll_length, obs_shape, num_actions, hidden_size, feature_size, **layout)
    return sum(t.numel() * t.element_size() for t in vars(one).values() if torch.is_tensor(t)) + 2 * 8


def available_memory() -> int | None:
    """Bytes this machine can still give shared tensors: the smaller of MemAvailable and /dev/shm's free space
    (where torch puts shared memory on Linux); None where neither can be read."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    try:
        stat = os.statvfs("/dev/shm")
        found.append(stat.f_bavail * stat.f_frsize)
    except OSError:
        pass
    return min(found) if found else None


def check_run_memory(args: argparse.Namespace, settings: EnvSettings, meta: dict) -> None:
    """Refuse, before anything is allocated, a run whose replays would not fit in memory (they need the
    observation's shape, so this runs once the environment is known)."""
    specs = replay_specs(args.replay_parameters, args.batch_size, args.num_steps)
    check_replay_memory(specs, args.num_steps, meta["obs_shape"], hidden_size=meta["hidden_size"],
                        feature_size=feature_size(meta), final_slots=final_slots(settings, args.num_steps),
                        **policy_layout(meta))


def check_replay_memory(specs: list[dict], unroll_length: int, obs_shape: Sequence[int], num_actions: int,
                        hidden_size: int, feature_size: int, **layout) -> None:
    """ValueError when the replays would not fit in memory (estimated from the observation shape and unroll
    length; ``layout``: ``UnrollSlots``' keywords, ``final_slots`` from ``runtime.defaults.final_slots``), before
    anything is allocated."""
    needed = sum(spec["capacity"] * slot_bytes(unroll_length, obs_shape, num_actions, hidden_size,
                                               feature_size if needs_features(spec) else 0, **layout)
                 for spec in specs if spec["type"] != "queue")
    free = available_memory()
    if free is not None and needed > 0.9 * free:
        largest = max(range(len(specs)), key=lambda i: specs[i]["capacity"] if specs[i]["type"] != "queue" else -1)
        raise entry_error(largest, specs[largest], "'capacity'",
                   f"{specs[largest]['capacity']}: the replays need {needed / 2**30:.1f} GiB of shared memory, this "
                   f"machine has {free / 2**30:.1f} GiB free; lower the capacities")


# ---------------------------------------------------------------------------------------------------------------
# The store


class ReplayBuffer(UnrollSlots):
    """One replay's unrolls in preallocated shared memory: the unroll slots' tensors (impala/shm.py ``UnrollStore``)
    plus ``features [C, T, F]`` (F = 0 unless the replay ranks by them), ``sample_count`` and ``inserted`` (the
    learner step that stored it), ``size``/``cursor`` (next slot FIFO overwrites) and ``writing`` (the slot being
    written, -1 when none). The learner alone writes; a learner killed in the middle of a write leaves ``writing``
    set, and that slot is never sampled until the next learner has written it again (first)."""

    def __init__(self, spec: dict, unroll_length: int, obs_shape: Sequence[int], num_actions: int, hidden_size: int,
                 feature_size: int, **layout) -> None:
        """``layout``: ``UnrollSlots``' keywords (``final_slots`` and ``policy_layout``'s)."""
        C = spec["capacity"]
        super().__init__(C, unroll_length, obs_shape, num_actions, hidden_size,
                         feature_size if needs_features(spec) else 0, **layout)
        self.spec = spec
        self.sample_count = torch.zeros(C, dtype=torch.int64)
        self.inserted = torch.zeros(C, dtype=torch.int64)
        self.size = torch.zeros(1, dtype=torch.int64)
        self.cursor = torch.zeros(1, dtype=torch.int64)
        self.writing = torch.full((1,), -1, dtype=torch.int64)
        self.share_memory()

    @property
    def capacity(self) -> int:
        return self.spec["capacity"]

    @property
    def count(self) -> int:
        return self.spec["count"]

    def __len__(self) -> int:
        return int(self.size[0])

    def whole(self) -> torch.Tensor:
        """The slots that hold a whole unroll: the filled ones, less one a dead learner left half-written."""
        filled = torch.arange(len(self))
        return filled[filled != self.writing[0]] if self.writing[0] >= 0 else filled

    def ready(self) -> bool:
        """Whether it can give its share of a batch (``count`` distinct unrolls)."""
        return len(self.whole()) >= self.count

    def insert_slot(self, generator: torch.Generator, score: Score | None = None) -> int:
        """Where the next unroll goes: a slot a dead learner left half-written, else the next free slot, then the
        oldest (FIFO), or with elite insertion the one of ``elite_batch_size`` random slots that ``score`` (slots
        -> distances) finds most drifted. Changes nothing: ``put`` does."""
        if self.writing[0] >= 0:
            return int(self.writing[0])
        if len(self) < self.capacity:
            return len(self)
        if self.spec.get("insert_strategy") == "elite_insertion" and score is not None:
            candidates = torch.randperm(self.capacity, generator=generator)[: self.spec["elite_batch_size"]]
            return int(candidates[torch.argmax(score(candidates))])
        return int(self.cursor[0])

    def put(self, slot: int, unroll: dict[str, torch.Tensor], step: int) -> None:
        """Store one unroll (one column of a time-major batch, ``impala.unrolls.column``) into ``slot`` (``insert_slot``'s),
        inserted at learner step ``step`` and not sampled yet; the slot counts as filled once it is whole."""
        self.writing[0] = slot
        self.store(slot, unroll)
        self.sample_count[slot] = 0
        self.inserted[slot] = step
        if slot == len(self):
            self.size[0] += 1
        elif len(self) == self.capacity and slot == self.cursor[0]:  # FIFO (a refill after a cut write: not)
            self.cursor[0] = (slot + 1) % self.capacity
        self.writing[0] = -1

    def candidates(self, generator: torch.Generator, progress: float) -> torch.Tensor:
        """``lambda x count`` distinct random whole slots (all of them at most; never fewer than ``count``)."""
        lam = annealed_lambda(self.spec.get("lambda_batch_multiplier", 1), self.spec.get("alfa_annealing_factor", 1),
                              progress)
        whole = self.whole()
        k = min(len(whole), candidate_count(lam, self.count))
        return whole[torch.randperm(len(whole), generator=generator)[:k]]

    def sample(self, generator: torch.Generator, progress: float = 0.0, score: Score | None = None) -> torch.Tensor:
        """``count`` distinct slots: uniform, or ranked by ``score`` (slots -> distances) with the replay's
        ``sample_strategy``; their sample counts go up by one."""
        candidates = self.candidates(generator, progress)
        if self.spec.get("sample_strategy") and score is not None and len(candidates) > self.count:
            picks = candidates[elite_picks(self.spec["elite_sampling_strategy"], score(candidates),
                                           self.sample_count[candidates], self.count)]
        else:
            picks = candidates[: self.count]
        self.sample_count[picks] += 1
        return picks

    def take(self, slots: torch.Tensor | list[int], steps: int | None = None) -> dict[str, torch.Tensor]:
        """The unrolls in ``slots``, time-major as ``UnrollStore.take`` gives them (they stay stored); with
        ``steps``, their first ``steps`` steps."""
        return self.read(slots, steps)


def concat(batches: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Time-major batches side by side: ``[T, n1 + n2 + ..., ...]`` (``hx``/``cx`` ``[n, H]``); keys all share."""
    keys = set.intersection(*(set(b) for b in batches))
    return {key: torch.cat([b[key] for b in batches], dim=0 if key in ("hx", "cx") else 1) for key in keys}
