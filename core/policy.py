"""The policy's distribution over actions, for every part that samples, scores or compares actions.

A network's actor head outputs the distribution's parameters, called ``logits`` everywhere (buffers, unrolls,
replays keep them as ``[..., P]``); what they mean is this module's business:

- ``Categorical(n)`` (a ``Discrete(n)`` action space): ``P = n`` unnormalised log-probabilities; an action is an
  integer.
- ``DiagGaussian(d)`` (a ``Box`` of ``d`` dimensions): ``P = 2d``, the mean and the log standard deviation of
  each dimension (independent normals); an action is ``d`` floats. Actions live in ``[-1, 1]`` per dimension: the
  environment rescales them to the Box's bounds (gymnasium's ``RescaleAction``) and clips what falls outside
  (``ClipAction``). The policy is the unbounded Gaussian and its log-probabilities are those of the sample before
  the clip: the clip is a fixed function the environment applies, like any other part of its dynamics, so the
  policy gradient and V-trace's importance ratios stay exact (as SB3's A2C and PPO do).
- ``DiagGaussian(d, squash=True)`` (``--box-actions tanh``): the same Gaussian over ``u``, and the environment
  takes ``tanh(u)`` (``env_actions``). Rollouts, unrolls and replays keep ``u``, so log-probabilities, importance
  ratios and KL divergences are the Gaussian's (a change of variables cancels in every ratio, and KL is invariant
  under it); only the entropy differs: the actions' is ``H(u) + E[log(1 - tanh(u)^2)]``, which a wide Gaussian
  does not raise (its actions pile up at the bounds), where the clipped Gaussian's entropy grows with its width
  while its clipped actions do not get more varied.

Each gives, over the last dimension of the parameters: ``sample``, ``greedy`` (the argmax, or the mean),
``log_prob(params, actions)``, ``entropy``, ``kl(p, q)`` = ``KL(p || q)``, ``bound_excess`` (the Gaussian's
mean beyond ``[-1, 1]``, ``--bound-coef``'s penalty; 0 for a categorical), ``env_actions`` (a batch of actions as
the environments take them) and ``env_action`` (one environment's). Formulas: the categorical's as usual; the
Gaussian's per dimension, summed over dimensions: ``log N(a; m, s) = -(a - m)^2 / (2 s^2) - log s - log(2 pi) /
2``, entropy ``log s + (1 + log(2 pi)) / 2`` and ``KL(N(m1, s1) || N(m2, s2)) = log(s2 / s1) + (s1^2 + (m1 -
m2)^2) / (2 s2^2) - 1/2``; the squashed entropy's ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))`` (stable
for large ``|u|``), its expectation by Gauss-Hermite quadrature in each dimension.
"""

import functools
import math

import numpy as np
import torch
import torch.nn.functional as F

LOG_2PI = math.log(2 * math.pi)
BOX_ACTIONS = {"clip": "gaussian", "tanh": "tanh_gaussian"}  # --box-actions -> model_meta's policy for a Box
GAUSSIANS = tuple(BOX_ACTIONS.values())


class Categorical:
    """Discrete actions: softmax over ``n`` logits."""

    kind = "categorical"
    action_shape: tuple[int, ...] = ()
    action_dtype = torch.int64

    def __init__(self, n: int):
        self.n = self.params = n

    def sample(self, logits: torch.Tensor) -> torch.Tensor:
        flat = logits.float().reshape(-1, self.n)
        return F.softmax(flat, -1).multinomial(1).reshape(logits.shape[:-1])

    def greedy(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1)

    def log_prob(self, logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(logits, -1).gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self, logits: torch.Tensor) -> torch.Tensor:
        log_p = F.log_softmax(logits, -1)
        return -(log_p.exp() * log_p).sum(-1)

    def kl(self, p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
        log_p, log_q = F.log_softmax(p_logits, -1), F.log_softmax(q_logits, -1)
        return (log_p.exp() * (log_p - log_q)).sum(-1)

    def bound_excess(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.new_zeros(logits.shape[:-1])  # a discrete action has no bounds to overshoot

    def env_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return actions

    def env_action(self, action: torch.Tensor | np.ndarray) -> int:
        return int(action)

    def implied_kl(self, mu_logits: torch.Tensor, pi_logits: torch.Tensor,
                   clip_rho_threshold: float | None) -> torch.Tensor:
        """LASER's ``KL(pi || pi_hat)``, ``pi_hat(a) = min(rho_bar mu(a), pi(a)) / Z`` (the policy whose value
        V-trace estimates; ``core.returns.trust_region_mask``), exactly: a sum over the actions."""
        log_mu, log_pi = F.log_softmax(mu_logits, -1), F.log_softmax(pi_logits, -1)
        if clip_rho_threshold is None:
            return torch.zeros(log_pi.shape[:-1], dtype=log_pi.dtype, device=log_pi.device)
        log_unnormalised = torch.minimum(log_mu + math.log(clip_rho_threshold), log_pi)
        log_implied = log_unnormalised - torch.logsumexp(log_unnormalised, dim=-1, keepdim=True)
        return (log_pi.exp() * (log_pi - log_implied)).sum(-1)


@functools.lru_cache(maxsize=8)
def gauss_hermite(n: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes ``z`` and weights ``w`` (``[n]`` each) of the ``n``-point Gauss-Hermite rule for the standard normal:
    ``E[f(Z)] ~ sum w f(z)``, exact for polynomials of degree below ``2n``."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(n)
    weights = weights / math.sqrt(2 * math.pi)
    return (torch.as_tensor(nodes, dtype=dtype, device=device), torch.as_tensor(weights, dtype=dtype, device=device))


class DiagGaussian:
    """Continuous actions: ``d`` independent normals, parameters ``[mean (d), log_std (d)]``, whose samples the
    environment takes in ``[-1, 1]^d`` after its clip, or (``squash``) takes as ``tanh`` of them."""

    action_dtype = torch.float32
    # Gauss-Hermite nodes per dimension for the squashed entropy's expectation: log(1 - tanh(u)^2) bends within
    # |u| < 1, so a Gaussian much wider than that needs many (at the log-std's bound of 2, std 7.4, 128 nodes are
    # within 0.01 nats of the integral, 32 within 0.08)
    SQUASH_NODES = 128

    def __init__(self, dim: int, squash: bool = False):
        self.dim, self.params, self.squash = dim, 2 * dim, squash
        self.action_shape = (dim,)
        self.kind = "tanh_gaussian" if squash else "gaussian"

    def split(self, params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, log_std)``, each ``[..., d]``."""
        return params[..., :self.dim], params[..., self.dim:]

    def sample(self, params: torch.Tensor) -> torch.Tensor:
        mean, log_std = self.split(params.float())
        return mean + log_std.exp() * torch.randn_like(mean)

    def greedy(self, params: torch.Tensor) -> torch.Tensor:
        return self.split(params)[0]

    def log_prob(self, params: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        mean, log_std = self.split(params)
        z = (actions - mean) * torch.exp(-log_std)
        return (-0.5 * z.pow(2) - log_std - 0.5 * LOG_2PI).sum(-1)

    def entropy(self, params: torch.Tensor) -> torch.Tensor:
        mean, log_std = self.split(params)
        entropy = (log_std + 0.5 * (1.0 + LOG_2PI)).sum(-1)
        if not self.squash:
            return entropy
        # E[log(1 - tanh(u)^2)] has no closed form; it is a sum of one-dimensional expectations over u = mean + std
        # * z, z ~ N(0, 1), each taken by Gauss-Hermite quadrature: fixed nodes, the same for every state however
        # the states are laid out, a smooth function of the parameters whose gradient reaches the mean and the
        # log-std, and exactly even in the mean (no push to either side at mean 0)
        nodes, weights = gauss_hermite(self.SQUASH_NODES, mean.device, mean.dtype)
        u = mean.unsqueeze(-1) + log_std.exp().unsqueeze(-1) * nodes
        log_jacobian = 2 * (math.log(2.0) - u - F.softplus(-2 * u))
        return entropy + (log_jacobian * weights).sum((-2, -1))

    def kl(self, p_params: torch.Tensor, q_params: torch.Tensor) -> torch.Tensor:
        (m1, log_s1), (m2, log_s2) = self.split(p_params), self.split(q_params)
        ratio = torch.exp(2 * (log_s1 - log_s2))
        return (log_s2 - log_s1 + 0.5 * (ratio + (m1 - m2).pow(2) * torch.exp(-2 * log_s2)) - 0.5).sum(-1)

    def bound_excess(self, params: torch.Tensor) -> torch.Tensor:
        """``sum_i max(|mean_i| - 1, 0)^2``: how far the mean lies beyond the action bounds (``--bound-coef``'s
        penalty). Where the clip turns nearly every sample into the bound, the policy gradient cannot tell a mean of
        1.5 from one of 3, so nothing brings such a mean back; this term does."""
        return (self.split(params)[0].abs() - 1.0).clamp_min(0.0).pow(2).sum(-1)

    def env_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return torch.tanh(actions) if self.squash else actions

    def env_action(self, action: torch.Tensor | np.ndarray) -> np.ndarray:
        return np.asarray(self.env_actions(torch.as_tensor(action, dtype=torch.float32)), dtype=np.float32)

    def implied_kl(self, mu_params: torch.Tensor, pi_params: torch.Tensor, clip_rho_threshold: float | None,
                   samples: int = 256) -> torch.Tensor:
        """LASER's ``KL(pi || pi_hat)`` for densities, ``pi_hat(a) = min(rho_bar mu(a), pi(a)) / Z``. With
        ``x(a) = log pi(a) - log mu(a) - log rho_bar``, ``log pi - log pi_hat = max(x, 0) + log Z`` and
        ``Z = E_pi[exp(-max(x, 0))]``, so ``KL = E_pi[max(x, 0)] + log E_pi[exp(-max(x, 0))]`` (>= 0 by Jensen).
        No closed form: both expectations are averages over ``samples`` draws of ``pi`` per state, from fixed
        normal draws (a generator seeded alike every call), so the result is a deterministic function of the two
        policies, as the categorical's is."""
        if clip_rho_threshold is None:
            return torch.zeros(pi_params.shape[:-1], dtype=pi_params.dtype, device=pi_params.device)
        mean, log_std = self.split(pi_params)
        generator = torch.Generator(device=pi_params.device).manual_seed(0)
        noise = torch.randn((samples,) + tuple(mean.shape), generator=generator, device=mean.device,
                            dtype=mean.dtype)
        actions = mean + log_std.exp() * noise
        x = (self.log_prob(pi_params.unsqueeze(0), actions) - self.log_prob(mu_params.unsqueeze(0), actions)
             - math.log(clip_rho_threshold))
        excess = x.clamp_min(0.0)  # log Z in logs: where every draw's excess passes ~104, exp(-excess) is 0 in float32
        return excess.mean(0) + torch.logsumexp(-excess, 0) - math.log(samples)


Policy = Categorical | DiagGaussian


def policy_for(meta: dict) -> Policy:
    """The distribution of the network ``meta`` (``model.model_meta``) describes (every model also keeps its own
    as ``model.policy``): a model file written before continuous actions has no ``policy`` entry and is
    categorical."""
    if meta.get("policy", "categorical") in GAUSSIANS:
        return DiagGaussian(int(meta["num_actions"]), squash=meta["policy"] == "tanh_gaussian")
    return Categorical(int(meta["num_actions"]))
