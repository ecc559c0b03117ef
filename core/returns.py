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

Both V-trace functions take an optional ``mask`` ``[T, B]`` of 0/1 that drops steps outside a trust region, and
``trust_region_mask`` computes one from the two policies' logits (LASER: Schmitt, Hessel & Simonyan, "Off-Policy
Actor-Critic with Shared Experience Replay", ICML 2020, Section 4).

The functions are pure and differentiable-free: callers pass detached tensors (targets are computed without grad).
``vtrace_from_logits`` is the exception only in that the action log-probabilities it returns keep their graph.
"""

import collections

import torch

from core.policy import Categorical, Policy


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
def nstep_returns(rewards: torch.Tensor, discounts: torch.Tensor, bootstrap_value: torch.Tensor) -> torch.Tensor:
    """Discounted n-step returns ``R_t = r_t + discounts[t] * R_{t+1}``, with ``R_T = bootstrap_value``."""
    _check_shapes(rewards, discounts, bootstrap_value)
    returns = torch.empty_like(rewards)
    acc = bootstrap_value
    for t in range(rewards.shape[0] - 1, -1, -1):
        acc = rewards[t] + discounts[t] * acc
        returns[t] = acc
    return returns


@torch.no_grad()
def gae_advantages(rewards: torch.Tensor, values: torch.Tensor, discounts: torch.Tensor, bootstrap_value: torch.Tensor,
                   lam: float) -> torch.Tensor:
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


@torch.no_grad()
def normalized_advantages(advantages: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Advantages shifted and scaled to mean 0 and standard deviation 1 over the whole batch (``--normalize-
    advantages``: SB3's ``normalize_advantage``, CleanRL's ``--norm-adv``), ``(A - mean) / (std + 1e-8)`` with the
    population std. With a ``mask`` (0/1, the advantages' shape) the statistics are the kept steps' and a masked
    step's advantage stays 0, so normalising never gives a step that was dropped a gradient."""
    mask = torch.ones_like(advantages) if mask is None else mask.to(advantages.dtype).expand_as(advantages)
    kept = mask.sum().clamp(min=1.0)
    mean = (advantages * mask).sum() / kept
    std = ((advantages - mean).pow(2) * mask).sum().div(kept).sqrt()
    return mask * (advantages - mean) / (std + 1e-8)


VTraceReturns = collections.namedtuple("VTraceReturns", ["vs", "pg_advantages"])
VTraceFromLogitsReturns = collections.namedtuple(
    "VTraceFromLogitsReturns",
    ["vs", "pg_advantages", "log_rhos", "behavior_action_log_probs", "target_action_log_probs"],
)


def _shape(tensor):
    return tuple(tensor.shape)


def _check_broadcasts(name, tensor, rewards):
    """``tensor`` has rewards' ``T`` and ``B`` and leaves out trailing dims or gives them size 1."""
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


def _check_vtrace_shapes(log_rhos, discounts, rewards, values, bootstrap_value):
    """Raise ValueError unless the inputs follow the V-trace shape rules of the module docstring."""
    if rewards.dim() < 2:
        raise ValueError(f"rewards must be [T, B, ...] (rank >= 2), got shape {_shape(rewards)}")
    if values.shape != rewards.shape:
        raise ValueError(f"values shape {_shape(values)} != rewards shape {_shape(rewards)}")
    for name, tensor in (("log_rhos", log_rhos), ("discounts", discounts)):
        _check_broadcasts(name, tensor, rewards)
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
def vtrace_from_importance_weights(log_rhos: torch.Tensor, discounts: torch.Tensor, rewards: torch.Tensor,
                                   values: torch.Tensor, bootstrap_value: torch.Tensor,
                                   clip_rho_threshold: float | None = 1.0, clip_pg_rho_threshold: float | None = 1.0,
                                   mask: torch.Tensor | None = None) -> VTraceReturns:
    """V-trace targets ``vs`` and policy-gradient advantages from log importance weights ``log(pi/mu)``.

    ``clip_rho_threshold`` is the paper's ``rho_bar`` and ``clip_pg_rho_threshold`` the one used for the
    policy-gradient advantage; ``None`` means no clipping. The trace cutting ``c_bar`` is fixed to 1. Shapes are
    in the module docstring; both results have ``values``' shape and carry no gradient.

    ``mask`` (``[T, B]`` of 0/1, shaped as ``log_rhos`` may be; ``None`` = all ones) drops steps outside a trust
    region (LASER, ``trust_region_mask``): ``vs_t - V_t = m_t (delta_t + gamma_t c_t (vs_{t+1} - V_{t+1}))``, so a
    masked step has ``vs_t = V_t`` (no value target) and the step before it bootstraps from ``V_{t+1}`` alone (the
    return is never carried through a rejected step); its policy-gradient advantage is multiplied by ``m_t`` too.
    All ones gives exactly the unmasked result.
    """
    _check_vtrace_shapes(log_rhos, discounts, rewards, values, bootstrap_value)
    if mask is not None:
        _check_broadcasts("mask", mask, rewards)
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
    if mask is None:
        for t in range(deltas.shape[0] - 1, -1, -1):
            acc = deltas[t] + discounts[t] * cs[t] * acc
            vs_minus_values[t] = acc
    else:
        mask = _trailing_ones(mask.to(deltas.dtype), rank)
        for t in range(deltas.shape[0] - 1, -1, -1):
            acc = mask[t] * (deltas[t] + discounts[t] * cs[t] * acc)
            vs_minus_values[t] = acc
    vs = vs_minus_values + values

    next_vs = torch.cat([vs[1:], bootstrap_value.unsqueeze(0).to(vs.dtype)], dim=0)
    pg_advantages = clipped_pg_rhos * (rewards + discounts * next_vs - values)
    if mask is not None:
        pg_advantages = mask * pg_advantages
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)


def _action_log_probs(logits, actions):
    return torch.log_softmax(logits, dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)


def vtrace_from_logits(behavior_policy_logits: torch.Tensor, target_policy_logits: torch.Tensor, actions: torch.Tensor,
                       discounts: torch.Tensor, rewards: torch.Tensor, values: torch.Tensor,
                       bootstrap_value: torch.Tensor, clip_rho_threshold: float | None = 1.0,
                       clip_pg_rho_threshold: float | None = 1.0,
                       mask: torch.Tensor | None = None) -> VTraceFromLogitsReturns:
    """V-trace from the behaviour (``mu``) and target (``pi``) policies' logits ``[T, B, A]`` and actions ``[T, B]``.

    ``log_rhos`` is ``log pi(a) - log mu(a)`` of the taken actions (log-softmax). The returned action log-probs
    (and ``log_rhos``) keep whatever gradient the logits carry; ``vs`` and ``pg_advantages`` carry none. ``mask``
    as in ``vtrace_from_importance_weights`` (``trust_region_mask`` computes one from the same logits).
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
    return vtrace_from_action_log_probs(
        _action_log_probs(behavior_policy_logits, actions), _action_log_probs(target_policy_logits, actions),
        discounts, rewards, values, bootstrap_value, clip_rho_threshold, clip_pg_rho_threshold, mask)


def vtrace_from_action_log_probs(behavior_action_log_probs: torch.Tensor, target_action_log_probs: torch.Tensor,
                                 discounts: torch.Tensor, rewards: torch.Tensor, values: torch.Tensor,
                                 bootstrap_value: torch.Tensor, clip_rho_threshold: float | None = 1.0,
                                 clip_pg_rho_threshold: float | None = 1.0,
                                 mask: torch.Tensor | None = None) -> VTraceFromLogitsReturns:
    """V-trace from the taken actions' log-probabilities ``log mu(a_t)`` and ``log pi(a_t)`` (``[T, B]``), for
    any distribution (a Gaussian policy's densities: ``core/policy.py``): ``log_rhos = log pi(a) - log mu(a)``,
    then ``vtrace_from_importance_weights``. The returned log-probs (and ``log_rhos``) keep their gradient."""
    if behavior_action_log_probs.shape != target_action_log_probs.shape:
        raise ValueError(f"action log-probs must have one shape: got {_shape(behavior_action_log_probs)} and "
                         f"{_shape(target_action_log_probs)}")
    log_rhos = target_action_log_probs - behavior_action_log_probs
    vtrace_returns = vtrace_from_importance_weights(
        log_rhos=log_rhos, discounts=discounts, rewards=rewards, values=values, bootstrap_value=bootstrap_value,
        clip_rho_threshold=clip_rho_threshold, clip_pg_rho_threshold=clip_pg_rho_threshold, mask=mask,
    )
    return VTraceFromLogitsReturns(
        vs=vtrace_returns.vs, pg_advantages=vtrace_returns.pg_advantages, log_rhos=log_rhos,
        behavior_action_log_probs=behavior_action_log_probs, target_action_log_probs=target_action_log_probs,
    )


TRUST_REGION_MODES = ("laser", "kl_pi_mu", "kl_mu_pi_cut")


@torch.no_grad()
def trust_region_mask(behavior_logits: torch.Tensor, target_logits: torch.Tensor, threshold: float, mode: str = "laser",
                      clip_rho_threshold: float | None = 1.0, policy: Policy | None = None) -> torch.Tensor:
    """LASER's trust region: a ``[T, B]`` 0/1 mask of the steps whose behaviour is relevant to the target policy,
    for ``vtrace_from_logits(..., mask=...)``. Logits are ``[T, B, A]`` (``mu``: behaviour, ``pi``: target); a step
    is kept where its divergence is below ``threshold`` (strictly, as the paper's ``beta < b``).

    ``mode``:
    - ``laser`` (default; Schmitt, Hessel & Simonyan, "Off-Policy Actor-Critic with Shared Experience Replay",
      ICML 2020, arXiv 1909.11583, Section 4 and its behaviour relevance function of Section 4.3): per step,
      ``beta_KL = KL(pi(.|s_t) || pi_hat_mu(.|s_t))`` where ``pi_hat_mu(a) = min(rho_bar mu(a), pi(a)) / sum_b
      min(rho_bar mu(b), pi(b))`` is the implied policy whose value V-trace actually estimates (their
      Proposition 1, IMPALA's Theorem 1; ``rho_bar = clip_rho_threshold``). It measures V-trace's bias, not the
      raw distance between the policies, and depends on the state only, never on the sampled action, so
      rejecting by it adds no bias of its own (Section 4.3). The estimator ``lambda(s_t) = 1[beta < b]`` stops a
      return at the first rejected state (Section 4), which the masked V-trace recursion does. With
      ``clip_rho_threshold=None`` (no clipping) V-trace is unbiased: the implied policy is ``pi`` and nothing is
      masked.
    - ``kl_pi_mu``: per step ``KL(pi || mu)`` (elite_buffer_vtrace's KL mask).
    - ``kl_mu_pi_cut``: ``KL(mu || pi)``, and from the first step outside on the rest of the unroll is masked too
      (impala-laser-pytorch's rule; computed here on log-softmax, so adding a constant to either policy's logits
      changes nothing, where that code's KL on raw logits did).

    ``policy`` (``core/policy.py``; default: a categorical over the logits' last dim) says what the logits
    parameterise. For a Gaussian the KLs are closed-form; LASER's ``KL(pi || pi_hat)`` has none and is estimated
    with samples of ``pi`` (``DiagGaussian.implied_kl``).
    """
    if mode not in TRUST_REGION_MODES:
        raise ValueError(f"mode must be one of {', '.join(TRUST_REGION_MODES)}, got {mode!r}")
    if not threshold > 0:
        raise ValueError(f"threshold must be > 0, got {threshold!r}")
    _check_threshold("clip_rho_threshold", clip_rho_threshold)
    if behavior_logits.dim() != 3 or target_logits.shape != behavior_logits.shape:
        raise ValueError(
            f"policy logits must both be [T, B, A]: got behavior_logits shape {_shape(behavior_logits)} and "
            f"target_logits shape {_shape(target_logits)}"
        )
    policy = policy or Categorical(behavior_logits.shape[-1])
    if mode == "laser":
        divergence = policy.implied_kl(behavior_logits, target_logits, clip_rho_threshold)
    elif mode == "kl_pi_mu":
        divergence = policy.kl(target_logits, behavior_logits)
    else:
        divergence = policy.kl(behavior_logits, target_logits)
    inside = divergence < threshold
    if mode == "kl_mu_pi_cut":
        inside = inside.to(torch.int8).cumprod(dim=0).bool()
    return inside.to(target_logits.dtype)

