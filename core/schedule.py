"""Coefficients that change with the run's frames: the entropy bonus under ``--entropy-decay START END``, the
learning rate under ``--lr-decay START END`` (SB3's ``lin_`` schedules: ``--lr-decay 0 N`` with ``--max-frames N``)."""

from collections.abc import Sequence


def decayed(value: float, decay: Sequence[int] | None, frames: int) -> float:
    """``value`` after ``frames`` frames: itself until ``START``, then linearly down to 0 at ``END``, and 0 after
    it (``decay`` None: ``value`` throughout)."""
    if decay is None:
        return value
    start, end = decay
    return value * min(1.0, max(0.0, (end - frames) / (end - start)))


def entropy_coef(coef: float, decay: Sequence[int] | None, frames: int) -> float:
    """The entropy bonus's coefficient after ``frames`` frames (``--entropy-decay``)."""
    return decayed(coef, decay, frames)


def learning_rate(lr: float, decay: Sequence[int] | None, frames: int) -> float:
    """The optimizer's learning rate after ``frames`` frames (``--lr-decay``)."""
    return decayed(lr, decay, frames)
