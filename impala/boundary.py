"""The boundary between IMPALA's roles, which each backend implements (``shm``: shared memory on one machine,
``ray_backend``: Ray's object store across machines). Written as protocols, so that ``Acting``, ``LearnerStep``
and ``learner_loop`` are written once and a reader sees what a backend must provide."""

from typing import Protocol

import torch


class WeightPublisher(Protocol):
    """The learner's side of the weights: after a step of the shared model, ``publish()`` makes a new version."""

    @property
    def version(self) -> int: ...

    def publish(self) -> None: ...


class WeightSource(Protocol):
    """An actor's side of the weights (``LocalPolicy`` reads it): the latest ``version``, a ``replica(model)`` to
    copy into, and ``fetch(replica)``, which copies the latest weights and returns the version it copied."""

    @property
    def version(self) -> int: ...

    def replica(self, model: torch.nn.Module) -> object: ...

    def fetch(self, replica: object) -> int: ...


class UnrollSource(Protocol):
    """Where the learner's fresh unrolls come from. ``take(need, version)`` returns ``need`` unrolls (time-major, as
    ``UnrollSlots.read`` gives them) with how many versions behind ``version`` their behaviour policies were, or
    None while fewer are there (it drops and counts those more than ``--max-policy-lag`` behind); ``after(took)``
    runs once per loop, after the learner's step if there was one (wait a little, or start the actors' next
    unrolls with the newest weights)."""

    def take(self, need: int, version: int) -> tuple[dict[str, torch.Tensor], torch.Tensor] | None: ...

    def after(self, took: bool) -> None: ...
