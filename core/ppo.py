"""PPO's clipped objective (Schulman et al. 2017) and the diagnostics a PPO user reads, for both algorithms.

Every quantity is a mean over the minibatch's samples (CleanRL's and baselines' convention, so that their learning
rate and gradient-norm clip carry over): ``clipped_surrogate`` is eq. 7's ``L^CLIP`` negated into a loss,
``clipped_value_loss`` baselines ppo2's value clip, and eq. 9's whole objective is
``surrogate + value_coef * value_loss - entropy_coef * entropy``. Tested against slow references written from the
formulas (``tests/core/test_ppo.py``).
"""

from typing import NamedTuple

import torch

OBJECTIVES = ("pg", "ppo")  # --objective: the policy gradient (A3C's, V-trace's) or PPO's clipped surrogate


class PPOStats(NamedTuple):
    """One minibatch's diagnostics, as floats: ``approx_kl`` (the ``(r - 1) - log r`` estimator of
    KL(behaviour || current), John Schulman's "Approximating KL divergence"), ``clipfrac`` (the share of samples
    whose ratio left ``[1 - clip, 1 + clip]``)."""
    approx_kl: float
    clipfrac: float


def clipped_surrogate(log_probs: torch.Tensor, behaviour_log_probs: torch.Tensor, advantages: torch.Tensor,
                      clip: float) -> tuple[torch.Tensor, PPOStats]:
    """``-mean(min(r * A, clip(r, 1 - clip, 1 + clip) * A))`` with ``r = exp(log_probs - behaviour_log_probs)``,
    the probability ratio of the current policy to the one that acted (eq. 7); and the minibatch's ``PPOStats``."""
    log_ratio = log_probs - behaviour_log_probs
    ratio = log_ratio.exp()
    surrogate = torch.min(ratio * advantages, ratio.clamp(1.0 - clip, 1.0 + clip) * advantages)
    with torch.no_grad():
        stats = PPOStats(((ratio - 1.0) - log_ratio).mean().item(),
                         ((ratio - 1.0).abs() > clip).float().mean().item())
    return -surrogate.mean(), stats


def clipped_value_loss(values: torch.Tensor, behaviour_values: torch.Tensor, returns: torch.Tensor,
                       clip: float) -> torch.Tensor:
    """``0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old, -clip, clip) - R)^2))`` (baselines ppo2): a value
    moved further than ``clip`` from the one the rollout was acted with gains nothing from moving further.
    ``clip`` 0: the plain ``0.5 * mean((V - R)^2)``."""
    loss = (values - returns).pow(2)
    if clip > 0:
        clipped = behaviour_values + (values - behaviour_values).clamp(-clip, clip)
        loss = torch.max(loss, (clipped - returns).pow(2))
    return 0.5 * loss.mean()


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """``1 - Var(R - V) / Var(R)``: 1 for a value function that predicts the returns, 0 for one no better than
    their mean, negative for worse; NaN where the returns do not vary."""
    returns, values = returns.detach().double().flatten(), values.detach().double().flatten()
    variance = returns.var(unbiased=False)
    if variance == 0:
        return float("nan")
    return float(1.0 - (returns - values).var(unbiased=False) / variance)


def minibatches(size: int, count: int, generator: torch.Generator | None = None) -> list[torch.Tensor]:
    """A random permutation of ``range(size)`` split into ``count`` minibatches of equal size (``size`` must be a
    multiple of ``count``: refused where it is set)."""
    if count < 1 or size % count:
        raise ValueError(f"{size} samples do not split into {count} equal minibatches")
    return list(torch.randperm(size, generator=generator).view(count, size // count))


def clip_coefficient(clip: float, anneal: bool, frames: float, max_frames: float | None) -> float:
    """The clip coefficient now: ``clip``, or with ``anneal`` falling linearly to 0 at ``max_frames`` (CleanRL's and
    RL Zoo's Atari PPO anneal it with the learning rate)."""
    if not anneal or not max_frames:
        return clip
    return clip * max(0.0, 1.0 - frames / max_frames)
