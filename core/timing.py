"""Where a process's time goes: seconds per phase of its loop, so that a throughput figure can be explained.

The phases, the same names for every role: ``sync`` (copying the shared weights in), ``env`` (stepping the
environments), ``act`` (the acting forward passes, A3G's training forward included when it is built while
acting; with ``--inference server`` the wait for the server's answer), ``wait`` (an IMPALA actor waiting for a free
slot, the learner waiting for unrolls), ``batch`` (the learner building its batch: copying unrolls, scoring a
replay's candidates), ``learn`` (the learner's forward, every role's loss and backward), ``optimize`` (the
gradients into the shared model and the optimizer's step).
"""

import time
from contextlib import contextmanager
from typing import Iterator, Protocol

PHASES = ("sync", "env", "act", "wait", "batch", "learn", "optimize")


class SteppedEnvs(Protocol):
    """What ``PhaseClock.acting`` reads of a batch of environments (``envs.rollout_envs.RolloutEnvs``): the seconds
    spent stepping them so far."""

    step_seconds: float


class PhaseClock:
    """A process's seconds per phase, summed since it started: ``with clock.phase("env"): ...``, or ``add``."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    @contextmanager
    def acting(self, envs: SteppedEnvs) -> Iterator[None]:
        """A stretch of acting in ``envs``: the environments' own stepping as ``env``, the rest (forward passes, or
        the wait for an inference server's answers) as ``act``."""
        env_start, start = envs.step_seconds, time.perf_counter()
        try:
            yield
        finally:
            env_seconds = envs.step_seconds - env_start
            self.seconds["env"] += env_seconds
            self.seconds["act"] += time.perf_counter() - start - env_seconds

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] += seconds

    def values(self) -> list[float]:
        """The seconds in ``PHASES``' order, for a row of the run state's table."""
        return [self.seconds[name] for name in PHASES]


def phase_split(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The share of the roles' time in each phase between two readings of ``RunState.phase_totals`` (dicts of
    seconds per phase)."""
    spent = {name: after[name] - before[name] for name in after}
    total = sum(spent.values())
    return {name: seconds / total for name, seconds in spent.items()} if total > 0 else {}
