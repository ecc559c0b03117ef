"""The policies' distributions (core/policy.py) against slow references written from the formulas, and V-trace
with a Gaussian policy's importance ratios against the paper's reference (tests/core/test_vtrace.py)."""

import math

import numpy as np
import pytest
import torch
from test_vtrace import TOL, random_inputs, reference_vtrace, to_torch

from core.policy import Categorical, DiagGaussian, policy_for
from core.returns import trust_region_mask, vtrace_from_action_log_probs


def reference_normal_log_density(a, mean, log_std):
    """log of one normal density, from ``exp(-(a - m)^2 / (2 s^2)) / (s sqrt(2 pi))``."""
    s = math.exp(log_std)
    return math.log(math.exp(-((a - mean) ** 2) / (2 * s * s)) / (s * math.sqrt(2 * math.pi)))


def random_gaussian(rng, shape, dim):
    return torch.from_numpy(np.concatenate([rng.normal(size=shape + (dim,)),
                                            rng.uniform(-1.5, 0.5, size=shape + (dim,))], -1))


def test_gaussian_log_prob_entropy_and_kl_match_the_formulas():
    rng = np.random.default_rng(0)
    policy = DiagGaussian(3)
    p, q = random_gaussian(rng, (5,), 3), random_gaussian(rng, (5,), 3)
    actions = torch.from_numpy(rng.normal(size=(5, 3)))
    log_prob, entropy, kl = policy.log_prob(p, actions), policy.entropy(p), policy.kl(p, q)
    for i in range(5):
        m1, s1, m2, s2 = p[i, :3].tolist(), p[i, 3:].tolist(), q[i, :3].tolist(), q[i, 3:].tolist()
        want = sum(reference_normal_log_density(float(actions[i, k]), m1[k], s1[k]) for k in range(3))
        assert log_prob[i].item() == pytest.approx(want, rel=1e-9)
        # differential entropy of a normal: log(s sqrt(2 pi e))
        assert entropy[i].item() == pytest.approx(sum(math.log(math.exp(s) * math.sqrt(2 * math.pi * math.e))
                                                      for s in s1), rel=1e-9)
        want_kl = sum(math.log(math.exp(s2[k]) / math.exp(s1[k]))
                      + (math.exp(2 * s1[k]) + (m1[k] - m2[k]) ** 2) / (2 * math.exp(2 * s2[k])) - 0.5
                      for k in range(3))
        assert kl[i].item() == pytest.approx(want_kl, rel=1e-9)
    assert torch.allclose(policy.kl(p, p), torch.zeros(5, dtype=p.dtype))


def test_gaussian_sampling_has_the_distributions_moments_and_greedy_is_the_mean():
    torch.manual_seed(0)
    policy = DiagGaussian(2)
    params = torch.tensor([[0.5, -0.3, math.log(0.2), math.log(1.5)]]).expand(200_000, 4)
    samples = policy.sample(params)
    assert samples.shape == (200_000, 2) and samples.dtype == torch.float32
    assert torch.allclose(samples.mean(0), torch.tensor([0.5, -0.3]), atol=0.01)
    assert torch.allclose(samples.std(0), torch.tensor([0.2, 1.5]), rtol=0.01)
    assert torch.equal(policy.greedy(params[:1]), torch.tensor([[0.5, -0.3]]))


def test_categorical_matches_the_softmax_by_hand():
    logits = torch.tensor([[1.0, 2.0, 0.5]], dtype=torch.float64)
    policy = Categorical(3)
    z = sum(math.exp(x) for x in (1.0, 2.0, 0.5))
    probs = [math.exp(x) / z for x in (1.0, 2.0, 0.5)]
    assert policy.log_prob(logits, torch.tensor([1])).item() == pytest.approx(math.log(probs[1]))
    assert policy.entropy(logits).item() == pytest.approx(-sum(p * math.log(p) for p in probs))
    assert policy.greedy(logits).item() == 1
    assert policy.sample(logits).shape == (1,)


def reference_implied_kl_1d(mu, pi, rho_bar, grid=200_001):
    """``KL(pi || pi_hat)``, ``pi_hat = min(rho_bar mu, pi) / Z``, by quadrature on a fine grid (one dimension)."""
    (m_mu, ls_mu), (m_pi, ls_pi) = mu, pi
    s_pi = math.exp(ls_pi)
    x = np.linspace(m_pi - 12 * s_pi, m_pi + 12 * s_pi, grid)
    dx = x[1] - x[0]

    def log_density(m, log_s):  # in logs: far in the tails the densities underflow
        s = math.exp(log_s)
        return -((x - m) ** 2) / (2 * s * s) - math.log(s * math.sqrt(2 * math.pi))

    log_p, log_m = log_density(m_pi, ls_pi), log_density(m_mu, ls_mu)
    log_unnormalised = np.minimum(math.log(rho_bar) + log_m, log_p)
    log_implied = log_unnormalised - math.log(np.exp(log_unnormalised).sum() * dx)
    return float((np.exp(log_p) * (log_p - log_implied)).sum() * dx)


@pytest.mark.parametrize("mu, pi, rho_bar", [((0.0, 0.0), (1.0, -0.5), 1.0), ((0.3, -1.0), (0.0, 0.2), 1.0),
                                             ((0.0, 0.0), (0.5, 0.0), 2.0), ((-1.0, 0.5), (1.0, -1.0), 1.0)])
def test_gaussian_laser_divergence_matches_quadrature(mu, pi, rho_bar):
    policy = DiagGaussian(1)
    mu_params = torch.tensor([[mu[0], mu[1]]], dtype=torch.float64)
    pi_params = torch.tensor([[pi[0], pi[1]]], dtype=torch.float64)
    got = policy.implied_kl(mu_params, pi_params, rho_bar, samples=200_000).item()
    want = reference_implied_kl_1d(mu, pi, rho_bar)
    assert got == pytest.approx(want, rel=0.03, abs=2e-3)
    # the same policies: nothing to mask; no clipping (rho_bar None): V-trace is unbiased, 0 too
    assert policy.implied_kl(pi_params, pi_params, rho_bar).item() == pytest.approx(0.0, abs=1e-9)
    assert policy.implied_kl(mu_params, pi_params, None).item() == 0.0
    # a deterministic function of the two policies (fixed draws), whatever the global random state
    assert policy.implied_kl(mu_params, pi_params, rho_bar).item() == policy.implied_kl(mu_params, pi_params,
                                                                                           rho_bar).item()


def test_gaussian_laser_divergence_of_policies_far_apart_is_large_not_minus_infinity():
    """Narrow float32 policies far apart: every draw's excess passes ~104, where exp(-excess) is 0 in float32; the
    divergence was log 0 = -inf, below any threshold, so the mask kept the steps it exists to drop."""
    policy = DiagGaussian(1)
    for shift in (0.2, 0.5, 1.0):
        mu = torch.tensor([[shift, -5.0]])  # log-std at its lower bound
        pi = torch.tensor([[0.0, -5.0]])
        kl = policy.implied_kl(mu, pi, 1.0)
        assert torch.isfinite(kl).all() and kl.item() > 50, (shift, kl)
        assert trust_region_mask(mu.unsqueeze(0), pi.unsqueeze(0), threshold=0.5, policy=policy).item() == 0.0


def test_trust_region_mask_with_gaussian_policies():
    policy = DiagGaussian(1)
    mu = torch.tensor([[[0.0, 0.0]], [[0.0, 0.0]]])  # [T=2, B=1, P=2]
    pi = torch.tensor([[[0.05, 0.0]], [[3.0, 0.0]]])  # close, then far
    for mode in ("laser", "kl_pi_mu", "kl_mu_pi_cut"):
        mask = trust_region_mask(mu, pi, threshold=0.1, mode=mode, policy=policy)
        assert mask.tolist() == [[1.0], [0.0]], mode


def test_vtrace_from_gaussian_log_probs_matches_the_paper_reference():
    """Behaviour and target Gaussians, sampled actions: V-trace's ratios are the densities' ratios."""
    rng = np.random.default_rng(3)
    T, B, dim = 7, 4, 2
    inputs = random_inputs(rng, T, B)
    policy = DiagGaussian(dim)
    mu, pi = random_gaussian(rng, (T, B), dim), random_gaussian(rng, (T, B), dim)
    actions = policy.sample(mu).double()
    got = vtrace_from_action_log_probs(policy.log_prob(mu, actions), policy.log_prob(pi, actions),
                                       **{k: v for k, v in to_torch(inputs).items() if k != "log_rhos"},
                                       clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0)
    log_rhos = np.zeros((T, B))
    for t in range(T):
        for b in range(B):
            for k in range(dim):
                a = float(actions[t, b, k])
                log_rhos[t, b] += (reference_normal_log_density(a, float(pi[t, b, k]), float(pi[t, b, dim + k]))
                                   - reference_normal_log_density(a, float(mu[t, b, k]), float(mu[t, b, dim + k])))
    np.testing.assert_allclose(got.log_rhos.numpy(), log_rhos, rtol=1e-9, atol=1e-9)
    vs, pg = reference_vtrace(log_rhos, inputs["discounts"], inputs["rewards"], inputs["values"],
                              inputs["bootstrap_value"], 1.0, 1.0)
    np.testing.assert_allclose(got.vs.numpy(), vs, **TOL)
    np.testing.assert_allclose(got.pg_advantages.numpy(), pg, **TOL)


def test_policy_for_reads_the_model_meta():
    assert isinstance(policy_for({"num_actions": 6}), Categorical)  # a file from before continuous actions
    gaussian = policy_for({"num_actions": 4, "policy": "gaussian"})
    assert isinstance(gaussian, DiagGaussian) and gaussian.params == 8 and gaussian.action_shape == (4,)
    assert not gaussian.squash and policy_for({"num_actions": 4, "policy": "tanh_gaussian"}).squash


def reference_squashed_entropy(mean, log_std, points=400_001):
    """The differential entropy of a = tanh(u), u ~ N(mean, std), from its definition -int p(a) log p(a) da over
    (-1, 1), with p(a) = N(atanh(a); mean, std) / (1 - a^2) (the change of variables), written over v = atanh(a)
    (p(a) da = N(v) dv, so -int N(v) log(N(v) / (1 - tanh(v)^2)) dv, with 1 - tanh(v)^2 = 1 / cosh(v)^2 and
    log cosh v = |v| + log(1 + exp(-2|v|)) - log 2), by the midpoint rule on mean +- 12 std."""
    s = math.exp(log_std)
    edges = np.linspace(mean - 12 * s, mean + 12 * s, points)
    v, dv = (edges[1:] + edges[:-1]) / 2, edges[1] - edges[0]
    log_normal = -((v - mean) ** 2) / (2 * s * s) - math.log(s) - 0.5 * math.log(2 * math.pi)
    log_cosh = np.abs(v) + np.log1p(np.exp(-2 * np.abs(v))) - math.log(2)
    return float(-(np.exp(log_normal) * (log_normal + 2 * log_cosh) * dv).sum())


@pytest.mark.parametrize("mean, log_std", [(0.0, 0.0), (0.5, -1.0), (-1.0, 0.3), (0.2, -2.0), (0.3, 2.0),
                                           (-2.5, 1.0), (0.0, -5.0)])
def test_squashed_gaussian_entropy_matches_its_definition(mean, log_std):
    """The entropy of tanh-squashed actions (two dimensions: the sum of each one's), as the policy computes it
    (quadrature), against numerical integration of the squashed density, from a narrow Gaussian to one much wider
    than the bounds."""
    params = torch.tensor([mean, -mean, log_std, log_std], dtype=torch.float64)
    got = DiagGaussian(2, squash=True).entropy(params).item()
    want = 2 * reference_squashed_entropy(mean, log_std)  # -mean has the same entropy as mean
    assert got == pytest.approx(want, abs=0.01)


def test_squashed_entropy_is_the_same_for_a_state_however_the_states_are_laid_out():
    """A3G's stepped and batched training forwards give the same loss: each state's squashed entropy depends on its
    own parameters only, not on the batch around it; and at mean 0 it pushes the mean to neither side."""
    torch.manual_seed(0)
    policy = DiagGaussian(3, squash=True)
    params = torch.cat([torch.randn(5, 4, 3), torch.randn(5, 4, 3) - 0.5], -1)
    batched = policy.entropy(params)
    stepped = torch.stack([policy.entropy(params[t]) for t in range(5)])
    one_by_one = torch.stack([torch.stack([policy.entropy(params[t, b]) for b in range(4)]) for t in range(5)])
    assert batched.shape == (5, 4)
    torch.testing.assert_close(stepped, batched)
    torch.testing.assert_close(one_by_one, batched)
    centred = torch.tensor([0.0, 0.0, 0.0, 0.7, -1.0, 2.0], requires_grad=True)
    policy.entropy(centred).backward()
    assert centred.grad[:3].abs().max().item() < 1e-6


def test_the_squashed_entropy_bonus_does_not_widen_the_gaussian_for_ever():
    """What the squash is for: a clipped Gaussian's entropy grows without end with its log-std (its gradient is 1),
    so an entropy bonus keeps widening it; the squashed actions' entropy falls once the Gaussian is much wider than
    the bounds (actions pile up at them), so the bonus pulls the log-std back. Sampling, log-probabilities and KL
    are the Gaussian's over u; only the environment's action is tanh(u), and greedy play is tanh(mean)."""
    squashed, clipped = DiagGaussian(1, squash=True), DiagGaussian(1)
    entropies = []
    for log_std in (0.0, 2.0):
        params = torch.tensor([0.3, log_std], requires_grad=True)
        entropy = squashed.entropy(params)
        entropy.backward()
        entropies.append((entropy.item(), params.grad[1].item()))
        params.grad = None
        clipped.entropy(params).backward()
        assert params.grad[1].item() == pytest.approx(1.0)
    (narrow, _), (wide, wide_slope) = entropies
    assert wide < narrow and wide_slope < 0
    u = torch.tensor([[3.0, -0.2], [-20.0, 0.0]])
    assert torch.allclose(DiagGaussian(2, squash=True).env_actions(u), torch.tanh(u))
    assert torch.equal(DiagGaussian(2).env_actions(u), u)
    two = DiagGaussian(2, squash=True)
    greedy = two.env_action(two.greedy(torch.tensor([1.0, -1.0, 0.0, 0.0])))
    np.testing.assert_allclose(greedy, np.tanh([1.0, -1.0]), rtol=1e-6)
    p, q = torch.tensor([0.3, -0.5]), torch.tensor([0.1, 0.2])
    assert squashed.log_prob(p, torch.tensor([0.7])) == clipped.log_prob(p, torch.tensor([0.7]))
    assert squashed.kl(p, q) == clipped.kl(p, q)


def test_bound_excess_is_the_squared_overshoot_of_the_mean_and_pulls_it_back_inside():
    """``sum_i max(|m_i| - 1, 0)^2`` from the definition, 0 for a mean inside the bounds (whatever the log-std) and
    for a categorical; its gradient moves only a mean beyond a bound, toward the bound."""
    rng = np.random.default_rng(3)
    policy = DiagGaussian(3)
    params = random_gaussian(rng, (6,), 3) * torch.tensor([2.5] * 3 + [1.0] * 3)
    excess = policy.bound_excess(params)
    for i in range(6):
        want = sum(max(abs(m) - 1.0, 0.0) ** 2 for m in params[i, :3].tolist())
        assert excess[i].item() == pytest.approx(want, rel=1e-12, abs=1e-15)
    inside = torch.tensor([[0.99, -1.0, 0.0, 2.0, -5.0, 0.0]])
    assert policy.bound_excess(inside).item() == 0.0
    params = torch.tensor([[1.5, -2.0, 0.3, 0.0, 0.0, 0.0]], requires_grad=True)
    policy.bound_excess(params).sum().backward()
    assert params.grad.tolist() == [[1.0, -2.0, 0.0, 0.0, 0.0, 0.0]]  # descent: 1.5 goes down, -2 up
    assert Categorical(4).bound_excess(torch.randn(5, 2, 4)).equal(torch.zeros(5, 2))
