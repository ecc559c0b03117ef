"""The state the supervisor and every role share: counters, flags and the latest losses, lock-free."""

import math
import os
import time
from multiprocessing.context import BaseContext

from core.timing import PHASES, PhaseClock


LOSSES = 7  # RunState.losses' entries


class StopFlag:
    """The run's stop request: one byte of shared memory, read and written without a lock.

    Not a ``multiprocessing.Event``: its wait() and set() share a lock and semaphores, and a child killed while
    waiting on it (SIGTERM to the process group, a SIGKILL) leaves them so that the supervisor's next set() blocks
    for ever. A byte cannot be left half-changed."""

    def __init__(self, ctx: BaseContext) -> None:
        self._flag = ctx.RawValue("b", 0)

    def set(self) -> None:
        self._flag.value = 1

    def is_set(self) -> bool:
        return bool(self._flag.value)

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, less if the flag is set meanwhile (checked every 50 ms)."""
        end = time.monotonic() + timeout
        while not self._flag.value:
            left = end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.05))
        return True


class SlotCounter:
    """A count that several processes add to without a lock: each worker rank adds to its own slot (a restarted
    worker takes over its rank's slot), readers sum the slots."""

    def __init__(self, ctx: BaseContext, typecode: str, slots: int, base: float = 0) -> None:
        self._base = base
        self._slots = ctx.RawArray(typecode, slots)

    def add(self, slot: int, amount: float) -> None:
        self._slots[slot] += amount  # only this slot's worker writes it

    @property
    def value(self) -> float:
        return self._base + sum(self._slots)


GAME_RING = 4096  # training games a worker's ring holds until the main process reads them: ~100 KB a worker, enough
# for seconds of the shortest games (an untrained CartPole ends one every ~20 steps) while the main process is busy


class RunState:
    """Counters, flags and the latest losses, in shared memory. Built by main.py, handed to every child.

    All of it is lock-free: every field has one writer (or, for the counters, one slot per worker). A child killed
    at any instant (a signal to the process group, the supervisor's SIGKILL of a stuck child) therefore cannot
    leave a lock held that the supervisor would then wait on for ever.

    Everything else a child needs (flags, environment settings, model metadata) is plain data passed at spawn.
    """

    def __init__(self, ctx: BaseContext, workers: int, frames: float = 0.0, episodes: int = 0,
                 best_return: float = -math.inf, best_mean_return: float = -math.inf, eval_episodes: int = 0) -> None:
        self.stop = StopFlag(ctx)  # set by anyone: every process winds down at its next check
        # when this invocation of the run began (time.monotonic(), one clock for every process of the machine): a
        # replaced role measures how far the run is (--max-seconds) from it, not from its own start
        self.started = ctx.RawValue("d", time.monotonic())
        self.solved = ctx.RawValue("b", 0)  # set by the evaluator when the score window reaches --stop-score
        self.frames = SlotCounter(ctx, "d", workers, float(frames))  # emulator frames, resumed ones included
        self.episodes = SlotCounter(ctx, "q", workers, int(episodes))  # finished training games (not lives)
        self.nonfinite = SlotCounter(ctx, "q", workers)  # updates skipped for a non-finite loss or gradient
        self.diverged = ctx.RawValue("b", 0)  # set by a worker after --max-nonfinite skipped updates in a row
        self.failed = ctx.RawValue("b", 0)  # set by a role that cannot go on and has said why: the run stops
        # written by the evaluator only
        self.best_return = ctx.RawValue("d", float(best_return))
        self.best_mean_return = ctx.RawValue("d", float(best_mean_return))
        self.eval_episodes = ctx.RawValue("q", int(eval_episodes))
        self.latest_mean = ctx.RawValue("d", math.nan)  # the mean of the latest --score-window games (progress line)
        # training games as they end: (return, length in agent steps, the run's frames then), a ring of GAME_RING
        # per worker or actor, written by that process alone and read by the main process (TensorBoard)
        self.game_ring = ctx.RawArray("d", workers * GAME_RING * 3)
        self.games_written = ctx.RawArray("q", workers)
        # seconds per phase (core.timing.PHASES) of each worker or actor, then the learner and the inference role:
        # each row written by its process alone, cumulative over its life
        self.phases = ctx.RawArray("d", (workers + 2) * len(PHASES))
        # the latest update of worker 0 or the learner, per step (--objective ppo: per sample of the last minibatch):
        # policy loss, value loss, entropy, gradient norm; and with --objective ppo the approximate KL, the clip
        # fraction and the explained variance (NaN where not measured)
        self.losses = ctx.RawArray("d", LOSSES)
        self.losses[:] = [math.nan] * LOSSES  # NaN until the first update: nothing to log before it
        # IMPALA: written by the learner (policy lag of its latest batch: min, mean, max versions; unrolls dropped
        # for --max-policy-lag) and by each actor in its slot (times it found all its slots full); A3G: worker 0's
        # latest lag in the middle entry
        self.policy_lag = ctx.RawArray("d", 3)
        self.dropped = ctx.RawValue("q", 0)
        self.actor_waits = SlotCounter(ctx, "q", workers)
        self.actor_restarts = ctx.RawValue("q", 0)  # --backend ray: actors the learner replaced
        self.inference = ctx.RawArray("d", 2)  # --inference server: batches answered, observations in them
        # --kl-mask: steps the trust region masked and steps seen, since the start (the learner writes them)
        self.masked = ctx.RawArray("d", 2)
        self.masked_recent = ctx.RawValue("d", 0.0)  # the fraction masked in the learner's latest batch
        # --clone-losses: the learner's latest policy and value cloning losses, per step (NaN until the first)
        self.cloning = ctx.RawArray("d", 2)
        self.cloning[:] = [math.nan] * 2

    def record_games(self, slot: int, games: list[tuple[float, int]]) -> None:
        """Worker or actor ``slot``'s finished training games, ``(return, length)`` each, into its ring."""
        for episode_return, length in games:
            start = (slot * GAME_RING + self.games_written[slot] % GAME_RING) * 3
            self.game_ring[start : start + 3] = [episode_return, length, self.frames.value]
            self.games_written[slot] += 1  # after the entry: a reader never sees a count before its entry

    def publish_phases(self, slot: int, clock: PhaseClock) -> None:
        """A process's seconds per phase so far into its row (``slot``: a worker's or actor's rank; ``learner_slot``
        and ``inference_slot`` for those roles). A process that replaced a dead one adds its seconds to what the dead
        one's row held at its first publish: the run's totals lose no time, and two readings never go backwards."""
        start = slot * len(PHASES)
        bases = self.__dict__.setdefault("_phase_bases", {})  # per process: each unpickled copy has its own
        key = (os.getpid(), slot)
        if key not in bases:
            bases[key] = list(self.phases[start : start + len(PHASES)])
        self.phases[start : start + len(PHASES)] = [b + v for b, v in zip(bases[key], clock.values())]

    @property
    def learner_slot(self) -> int:
        return len(self.phases) // len(PHASES) - 2

    @property
    def inference_slot(self) -> int:
        return len(self.phases) // len(PHASES) - 1

    def phase_totals(self) -> dict[str, float]:
        """Seconds per phase, summed over every role's row."""
        rows = len(self.phases) // len(PHASES)
        values = self.phases[:]
        return {name: sum(values[row * len(PHASES) + i] for row in range(rows)) for i, name in enumerate(PHASES)}

    def new_games(self, read: list[int]) -> list[tuple[float, int, float]]:
        """The training games recorded since ``read`` (each slot's count so far, updated in place), as
        ``(return, length, frames)``; a slot that recorded more than its ring holds since then loses the oldest."""
        games = []
        for slot in range(len(read)):
            written = self.games_written[slot]
            for n in range(max(read[slot], written - GAME_RING), written):
                start = (slot * GAME_RING + n % GAME_RING) * 3
                episode_return, length, frames = self.game_ring[start : start + 3]
                games.append((episode_return, int(length), frames))
            read[slot] = written
        return sorted(games, key=lambda game: game[2])

    def mean_inference_batch(self) -> float:
        """--inference server: the mean number of observations in the server's forward passes so far."""
        batches, observations = self.inference[:]
        return observations / batches if batches else 0.0

    def add(self, rank: int, frames: float, episodes: int) -> None:
        """Count worker ``rank``'s ``frames`` and finished ``episodes`` (in its own slots)."""
        self.frames.add(rank, frames)
        if episodes:
            self.episodes.add(rank, episodes)
