"""Return math for actor-critic training: n-step returns and GAE advantages.

All tensors are time-major: ``[T]`` for one environment or ``[T, B]`` for a batch of B environments, where row
``t`` holds what happened after the agent acted at step ``t``. Episode ends enter only through ``discounts``:

    discounts[t] = gamma * (1 - done[t])

so a return never reaches across the boundary of an episode. ``bootstrap_value`` (``[]`` or ``[B]``) is the critic's
value of the state reached after the last step; pass zeros where that state is terminal (``discounts[-1]`` is zero
there anyway).

References:
- n-step returns: Mnih et al., "Asynchronous Methods for Deep Reinforcement Learning" (2016), Algorithm S3:
  ``R_t = r_t + gamma * R_{t+1}``, started from ``V(s_T)``.
- GAE: Schulman et al., "High-Dimensional Continuous Control Using Generalized Advantage Estimation" (2016),
  eq. 16: ``A_t = sum_l (gamma * lambda)^l * delta_{t+l}``, ``delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)``.

The functions are pure and differentiable-free: callers pass detached tensors (targets are computed without grad).
"""

import torch


def _check_shapes(rewards, discounts, bootstrap_value, values=None):
    if rewards.dim() not in (1, 2):
        raise ValueError(f"rewards must be [T] or [T, B], got shape {tuple(rewards.shape)}")
    if discounts.shape != rewards.shape:
        raise ValueError(f"discounts shape {tuple(discounts.shape)} != rewards shape {tuple(rewards.shape)}")
    if values is not None and values.shape != rewards.shape:
        raise ValueError(f"values shape {tuple(values.shape)} != rewards shape {tuple(rewards.shape)}")
    if bootstrap_value.shape != rewards.shape[1:]:
        raise ValueError(
            f"bootstrap_value shape {tuple(bootstrap_value.shape)} != rewards shape without time "
            f"{tuple(rewards.shape[1:])}"
        )


@torch.no_grad()
def nstep_returns(rewards, discounts, bootstrap_value):
    """Discounted n-step returns ``R_t = r_t + discounts[t] * R_{t+1}``, with ``R_T = bootstrap_value``."""
    _check_shapes(rewards, discounts, bootstrap_value)
    returns = torch.empty_like(rewards)
    acc = bootstrap_value
    for t in range(rewards.shape[0] - 1, -1, -1):
        acc = rewards[t] + discounts[t] * acc
        returns[t] = acc
    return returns


@torch.no_grad()
def gae_advantages(rewards, values, discounts, bootstrap_value, lam):
    """Generalized advantage estimates with ``lambda = lam`` (rl_a3c_pytorch's ``--tau``).

    ``delta_t = r_t + discounts[t] * V_{t+1} - V_t`` and ``A_t = delta_t + discounts[t] * lam * A_{t+1}``, with
    ``V_T = bootstrap_value`` and ``A_T = 0``. With ``lam = 1`` this is the n-step return minus the value.
    """
    _check_shapes(rewards, discounts, bootstrap_value, values)
    next_values = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = rewards + discounts * next_values - values
    advantages = torch.empty_like(rewards)
    acc = torch.zeros_like(bootstrap_value)
    for t in range(rewards.shape[0] - 1, -1, -1):
        acc = deltas[t] + discounts[t] * lam * acc
        advantages[t] = acc
    return advantages
