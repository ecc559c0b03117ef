"""Coefficients that change with the run's frames: the entropy bonus under ``--entropy-decay START END``."""

from collections.abc import Sequence


def entropy_coef(coef: float, decay: Sequence[int] | None, frames: int) -> float:
    """The entropy bonus's coefficient after ``frames`` frames: ``coef`` until ``START``, then linearly down to 0 at
    ``END``, and 0 after it (``decay`` None: ``coef`` throughout)."""
    if decay is None:
        return coef
    start, end = decay
    return coef * min(1.0, max(0.0, (end - frames) / (end - start)))
