"""PPO's quantities against slow references written from the formulas: Schulman et al. 2017 eq. 7 (the clipped
surrogate) and eq. 9 (the whole objective), baselines ppo2's clipped value loss, the ``(r - 1) - log r`` KL
estimator, the clip fraction and the explained variance."""

import math

import numpy as np
import pytest
import torch

from core.ppo import (
    clip_coefficient,
    clipped_surrogate,
    clipped_value_loss,
    explained_variance,
    minibatches,
)


def reference_surrogate(log_probs, old_log_probs, advantages, eps):
    """-(1/N) sum_t min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t), r_t = pi(a_t|s_t) / pi_old(a_t|s_t) (eq. 7)."""
    total = 0.0
    for lp, old, a in zip(log_probs, old_log_probs, advantages):
        r = math.exp(lp) / math.exp(old)
        total += min(r * a, min(max(r, 1 - eps), 1 + eps) * a)
    return -total / len(advantages)


def reference_value_loss(values, old_values, returns, eps):
    """(1/2N) sum_t max((V_t - R_t)^2, (V_old,t + clip(V_t - V_old,t, -eps, eps) - R_t)^2) (baselines ppo2)."""
    total = 0.0
    for v, old, ret in zip(values, old_values, returns):
        clipped = old + min(max(v - old, -eps), eps)
        total += max((v - ret) ** 2, (clipped - ret) ** 2) if eps > 0 else (v - ret) ** 2
    return total / (2 * len(values))


def random_batch(seed, n=64, spread=0.4):
    rng = np.random.default_rng(seed)
    old = rng.normal(-1.5, 0.5, n)
    new = old + rng.normal(0.0, spread, n)  # ratios on both sides of the clip range
    return new, old, rng.normal(size=n)


@pytest.mark.parametrize("eps", [0.1, 0.2, 0.3])
@pytest.mark.parametrize("seed", [0, 1])
def test_clipped_surrogate_matches_eq_7(eps, seed):
    new, old, adv = random_batch(seed)
    loss, _ = clipped_surrogate(torch.tensor(new), torch.tensor(old), torch.tensor(adv), eps)
    assert loss.item() == pytest.approx(reference_surrogate(new, old, adv, eps), rel=1e-9)


def test_the_surrogate_gives_no_gradient_where_the_clip_holds_the_ratio():
    # r = e^0.5 > 1 + eps with A > 0: clipped, no gradient; r = e^-0.5 < 1 - eps with A > 0: min takes r A, which
    # has a gradient (the pessimistic bound); r = e^0.5 with A < 0: r A < clip(r) A, the gradient flows.
    new = torch.tensor([0.5, -0.5, 0.5, 0.05], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(4, dtype=torch.float64)
    adv = torch.tensor([1.0, 1.0, -1.0, 1.0], dtype=torch.float64)
    loss, stats = clipped_surrogate(new, old, adv, 0.2)
    loss.backward()
    expected = [0.0, -math.exp(-0.5) / 4, math.exp(0.5) / 4, -math.exp(0.05) / 4]
    np.testing.assert_allclose(new.grad.numpy(), expected, rtol=1e-12)
    assert stats.clipfrac == pytest.approx(3 / 4)


def test_at_the_behaviour_policy_the_surrogate_is_the_policy_gradient():
    # r = 1: the gradient of -mean(r A) is -mean(A grad log pi), A3C's policy gradient averaged over samples
    logits = torch.randn(32, 6, dtype=torch.float64, requires_grad=True)
    actions = torch.randint(0, 6, (32,))
    adv = torch.randn(32, dtype=torch.float64)
    log_probs = torch.log_softmax(logits, -1).gather(1, actions[:, None]).squeeze(1)
    loss, stats = clipped_surrogate(log_probs, log_probs.detach(), adv, 0.1)
    (grad,) = torch.autograd.grad(loss, logits, retain_graph=True)
    (expected,) = torch.autograd.grad(-(log_probs * adv).mean(), logits)
    torch.testing.assert_close(grad, expected)
    assert stats.approx_kl == 0.0 and stats.clipfrac == 0.0


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.5])
def test_clipped_value_loss_matches_ppo2(eps):
    rng = np.random.default_rng(7)
    old = rng.normal(size=50)
    values, returns = old + rng.normal(0, 0.3, 50), old + rng.normal(0, 1.0, 50)
    got = clipped_value_loss(torch.tensor(values), torch.tensor(old), torch.tensor(returns), eps).item()
    assert got == pytest.approx(reference_value_loss(values, old, returns, eps), rel=1e-9)


def test_eq_9_is_the_sum_of_its_parts():
    # L^{CLIP+VF+S} = E[L^CLIP - c1 L^VF + c2 S], negated into a loss: surrogate + c1 * value loss - c2 * entropy
    new, old, adv = random_batch(3)
    values, old_values, returns = random_batch(4)
    entropy, c1, c2, eps = 1.2, 0.5, 0.01, 0.1
    objective = (-reference_surrogate(new, old, adv, eps) - c1 * reference_value_loss(values, old_values, returns, eps)
                 + c2 * entropy)
    surrogate, _ = clipped_surrogate(torch.tensor(new), torch.tensor(old), torch.tensor(adv), eps)
    value_loss = clipped_value_loss(torch.tensor(values), torch.tensor(old_values), torch.tensor(returns), eps)
    assert (surrogate + c1 * value_loss - c2 * entropy).item() == pytest.approx(-objective, rel=1e-9)


def test_approx_kl_and_clipfrac_match_their_formulas():
    new, old, adv = random_batch(5, n=200)
    _, stats = clipped_surrogate(torch.tensor(new), torch.tensor(old), torch.tensor(adv), 0.2)
    ratios = [math.exp(n - o) for n, o in zip(new, old)]
    assert stats.approx_kl == pytest.approx(sum((r - 1) - math.log(r) for r in ratios) / 200, rel=1e-9)
    assert stats.clipfrac == pytest.approx(sum(abs(r - 1) > 0.2 for r in ratios) / 200)
    assert 0 < stats.clipfrac < 1 and stats.approx_kl > 0


def test_explained_variance():
    rng = np.random.default_rng(0)
    returns = rng.normal(size=100)
    values = returns + rng.normal(0, 0.5, 100)
    expected = 1 - np.var(returns - values) / np.var(returns)
    assert explained_variance(torch.tensor(values), torch.tensor(returns)) == pytest.approx(expected, rel=1e-9)
    assert explained_variance(torch.tensor(returns), torch.tensor(returns)) == pytest.approx(1.0)
    assert explained_variance(torch.full((100,), returns.mean()), torch.tensor(returns)) == pytest.approx(0.0)
    assert math.isnan(explained_variance(torch.zeros(5), torch.ones(5)))


def test_minibatches_cover_every_sample_once():
    parts = minibatches(1024, 4, torch.Generator().manual_seed(0))
    assert [len(p) for p in parts] == [256] * 4
    assert sorted(torch.cat(parts).tolist()) == list(range(1024))
    with pytest.raises(ValueError, match="do not split into 3"):
        minibatches(1024, 3)


def test_clip_coefficient_anneals_linearly_to_zero_when_asked():
    assert clip_coefficient(0.1, False, 5e6, 1e7) == 0.1
    assert clip_coefficient(0.1, True, 2.5e6, 1e7) == pytest.approx(0.075)
    assert clip_coefficient(0.1, True, 2e7, 1e7) == 0.0
    assert clip_coefficient(0.1, True, 5e6, None) == 0.1
