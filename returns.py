"""Return math for actor-critic training: n-step returns, GAE advantages and V-trace targets.

All tensors are time-major. n-step returns and GAE take ``[T]`` for one environment or ``[T, B]`` for a batch of B
environments, where row ``t`` holds what happened after the agent acted at step ``t``. Episode ends enter only
through ``discounts``:

    discounts[t] = gamma * (1 - done[t])

so a return never reaches across the boundary of an episode. ``bootstrap_value`` (``[]`` or ``[B]``) is the critic's
value of the state reached after the last step; pass zeros where that state is terminal (``discounts[-1]`` is zero
there anyway).

V-trace (``vtrace_from_importance_weights``, ``vtrace_from_logits``) takes ``[T, B, ...]``: ``rewards`` and
``values`` share one shape of rank >= 2 (``[T, B]``, or e.g. ``[T, B, K]``); ``log_rhos`` and ``discounts`` have
the same ``T`` and ``B`` and may leave out trailing dims or give them size 1 (``[T, B]`` or ``[T, B, 1]`` against
``[T, B, K]``), broadcasting over them; ``bootstrap_value`` is ``values.shape[1:]``; logits are ``[T, B, A]`` and
actions ``[T, B]``. Inconsistent shapes raise ``ValueError``.

References:
- n-step returns: Mnih et al., "Asynchronous Methods for Deep Reinforcement Learning" (2016), Algorithm S3:
  ``R_t = r_t + gamma * R_{t+1}``, started from ``V(s_T)``.
- GAE: Schulman et al., "High-Dimensional Continuous Control Using Generalized Advantage Estimation" (2016),
  eq. 16: ``A_t = sum_l (gamma * lambda)^l * delta_{t+l}``, ``delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)``.
- V-trace: Espeholt et al., "IMPALA: Scalable Distributed Deep-RL with Importance Weighted Actor-Learner
  Architectures" (2018), section 4.1: ``v_s = V(x_s) + sum_{t=s}^{T-1} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t``
  with ``delta_t = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))``, ``rho_t = min(rho_bar, pi/mu)``,
  ``c_i = min(c_bar, pi/mu)``, ``c_bar = 1`` and ``V(x_T) = bootstrap_value``; computed by the recursion
  ``v_s - V(x_s) = delta_s + gamma c_s (v_{s+1} - V(x_{s+1}))``. With per-step discounts ``gamma^{t-s}`` is
  ``prod_{i=s}^{t-1} discounts[i]``, so traces are cut at episode ends. The policy-gradient advantage is
  ``min(rho_bar_pg, pi/mu) * (r_s + gamma v_{s+1} - V(x_s))``. On-policy (``pi = mu``) ``v_s`` is the n-step return.

The functions are pure and differentiable-free: callers pass detached tensors (targets are computed without grad).
``vtrace_from_logits`` is the exception only in that the action log-probabilities it returns keep their graph.
"""

import collections

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


VTraceReturns = collections.namedtuple("VTraceReturns", ["vs", "pg_advantages"])
VTraceFromLogitsReturns = collections.namedtuple(
    "VTraceFromLogitsReturns",
    ["vs", "pg_advantages", "log_rhos", "behavior_action_log_probs", "target_action_log_probs"],
)


def _shape(tensor):
    return tuple(tensor.shape)


def _check_vtrace_shapes(log_rhos, discounts, rewards, values, bootstrap_value):
    """Raise ValueError unless the inputs follow the V-trace shape rules of the module docstring."""
    if rewards.dim() < 2:
        raise ValueError(f"rewards must be [T, B, ...] (rank >= 2), got shape {_shape(rewards)}")
    if values.shape != rewards.shape:
        raise ValueError(f"values shape {_shape(values)} != rewards shape {_shape(rewards)}")
    for name, tensor in (("log_rhos", log_rhos), ("discounts", discounts)):
        if not 2 <= tensor.dim() <= rewards.dim():
            raise ValueError(
                f"{name} must have rank 2..{rewards.dim()} to match rewards [T, B, ...]: got {name} shape "
                f"{_shape(tensor)} (rank {tensor.dim()}) with rewards shape {_shape(rewards)} (rank {rewards.dim()})"
            )
        leading_ok = tensor.shape[:2] == rewards.shape[:2]
        trailing_ok = all(n in (1, m) for n, m in zip(tensor.shape[2:], rewards.shape[2:]))
        if not (leading_ok and trailing_ok):
            raise ValueError(
                f"{name} shape {_shape(tensor)} does not broadcast against rewards shape {_shape(rewards)} "
                f"(same T and B needed; trailing dims equal or 1)"
            )
    if bootstrap_value.shape != values.shape[1:]:
        raise ValueError(
            f"bootstrap_value shape {_shape(bootstrap_value)} != values shape without time {_shape(values)[1:]} "
            f"(values shape {_shape(values)})"
        )


def _check_threshold(name, threshold):
    if threshold is not None and not threshold > 0:
        raise ValueError(f"{name} must be None (no clipping) or > 0, got {threshold!r}")


def _trailing_ones(tensor, rank):
    """View ``tensor`` with size-1 dims appended up to ``rank``, so it broadcasts over trailing dims (not leading)."""
    return tensor.reshape(tuple(tensor.shape) + (1,) * (rank - tensor.dim()))


@torch.no_grad()
def vtrace_from_importance_weights(log_rhos, discounts, rewards, values, bootstrap_value, clip_rho_threshold=1.0,
                                   clip_pg_rho_threshold=1.0):
    """V-trace targets ``vs`` and policy-gradient advantages from log importance weights ``log(pi/mu)``.

    ``clip_rho_threshold`` is the paper's ``rho_bar`` and ``clip_pg_rho_threshold`` the one used for the
    policy-gradient advantage; ``None`` means no clipping. The trace cutting ``c_bar`` is fixed to 1. Shapes are
    in the module docstring; both results have ``values``' shape and carry no gradient.
    """
    _check_vtrace_shapes(log_rhos, discounts, rewards, values, bootstrap_value)
    _check_threshold("clip_rho_threshold", clip_rho_threshold)
    _check_threshold("clip_pg_rho_threshold", clip_pg_rho_threshold)
    rank = values.dim()
    rhos = torch.exp(_trailing_ones(log_rhos, rank))
    discounts = _trailing_ones(discounts, rank)
    clipped_rhos = rhos if clip_rho_threshold is None else rhos.clamp(max=clip_rho_threshold)
    clipped_pg_rhos = rhos if clip_pg_rho_threshold is None else rhos.clamp(max=clip_pg_rho_threshold)
    cs = rhos.clamp(max=1.0)

    next_values = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * next_values - values)
    vs_minus_values = torch.empty_like(deltas)
    acc = torch.zeros(deltas.shape[1:], dtype=deltas.dtype, device=deltas.device)
    for t in range(deltas.shape[0] - 1, -1, -1):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        vs_minus_values[t] = acc
    vs = vs_minus_values + values

    next_vs = torch.cat([vs[1:], bootstrap_value.unsqueeze(0).to(vs.dtype)], dim=0)
    pg_advantages = clipped_pg_rhos * (rewards + discounts * next_vs - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)


def _action_log_probs(logits, actions):
    return torch.log_softmax(logits, dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)


def vtrace_from_logits(behavior_policy_logits, target_policy_logits, actions, discounts, rewards, values,
                       bootstrap_value, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0):
    """V-trace from the behaviour (``mu``) and target (``pi``) policies' logits ``[T, B, A]`` and actions ``[T, B]``.

    ``log_rhos`` is ``log pi(a) - log mu(a)`` of the taken actions (log-softmax). The returned action log-probs
    (and ``log_rhos``) keep whatever gradient the logits carry; ``vs`` and ``pg_advantages`` carry none.
    """
    if behavior_policy_logits.dim() != 3 or target_policy_logits.shape != behavior_policy_logits.shape:
        raise ValueError(
            f"policy logits must both be [T, B, A]: got behavior_policy_logits shape "
            f"{_shape(behavior_policy_logits)} and target_policy_logits shape {_shape(target_policy_logits)}"
        )
    if actions.shape != behavior_policy_logits.shape[:2]:
        raise ValueError(
            f"actions shape {_shape(actions)} != logits shape without actions {_shape(behavior_policy_logits)[:2]}"
        )
    if actions.dtype.is_floating_point or actions.dtype.is_complex or actions.dtype == torch.bool:
        raise ValueError(f"actions must be an integer tensor, got dtype {actions.dtype}")
    actions = actions.long()
    behavior_action_log_probs = _action_log_probs(behavior_policy_logits, actions)
    target_action_log_probs = _action_log_probs(target_policy_logits, actions)
    log_rhos = target_action_log_probs - behavior_action_log_probs
    vtrace_returns = vtrace_from_importance_weights(
        log_rhos=log_rhos, discounts=discounts, rewards=rewards, values=values, bootstrap_value=bootstrap_value,
        clip_rho_threshold=clip_rho_threshold, clip_pg_rho_threshold=clip_pg_rho_threshold,
    )
    return VTraceFromLogitsReturns(
        vs=vtrace_returns.vs, pg_advantages=vtrace_returns.pg_advantages, log_rhos=log_rhos,
        behavior_action_log_probs=behavior_action_log_probs, target_action_log_probs=target_action_log_probs,
    )
