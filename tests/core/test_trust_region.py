"""LASER's trust region: V-trace with a mask against a slow double loop written from the formula, and the mask
itself (three definitions) against a slow per-element loop."""

import math

import numpy as np
import pytest
import torch
from test_vtrace import TOL, random_inputs, to_torch

from core.returns import trust_region_mask, vtrace_from_importance_weights, vtrace_from_logits


def reference_masked_vtrace_1d(log_rhos, discounts, rewards, values, bootstrap, mask, clip_rho, clip_pg_rho):
    """One trajectory, Python floats, as a sum (not the recursion):

        v_s = V_s + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} m_i gamma_i c_i) m_t delta_t
        pg_s = m_s min(rho_bar_pg, rho_s) (r_s + gamma_s v_{s+1} - V_s),  v_T = bootstrap
    """
    T = len(rewards)
    rhos = [math.exp(float(x)) for x in log_rhos]
    clip = (lambda x, c: x if c is None else min(c, x))
    next_values = [float(v) for v in values[1:]] + [float(bootstrap)]
    vs = []
    for s in range(T):
        total = float(values[s])
        for t in range(s, T):
            product = 1.0
            for i in range(s, t):
                product *= float(mask[i]) * float(discounts[i]) * min(1.0, rhos[i])
            delta = clip(rhos[t], clip_rho) * (float(rewards[t]) + float(discounts[t]) * next_values[t] -
                                               float(values[t]))
            total += product * float(mask[t]) * delta
        vs.append(total)
    next_vs = vs[1:] + [float(bootstrap)]
    pg = [float(mask[s]) * clip(rhos[s], clip_pg_rho) *
          (float(rewards[s]) + float(discounts[s]) * next_vs[s] - float(values[s])) for s in range(T)]
    return vs, pg


def reference_masked_vtrace(inputs, mask, clip_rho, clip_pg_rho):
    T, B = inputs["rewards"].shape
    vs, pg = np.zeros((T, B)), np.zeros((T, B))
    for b in range(B):
        vs[:, b], pg[:, b] = reference_masked_vtrace_1d(
            inputs["log_rhos"][:, b], inputs["discounts"][:, b], inputs["rewards"][:, b], inputs["values"][:, b],
            inputs["bootstrap_value"][b], mask[:, b], clip_rho, clip_pg_rho)
    return vs, pg


@pytest.mark.parametrize("T,B", [(1, 1), (6, 3), (17, 4)])
@pytest.mark.parametrize("clip_rho,clip_pg_rho", [(1.0, 1.0), (3.7, 2.2), (None, None)])
def test_masked_vtrace_matches_double_loop(T, B, clip_rho, clip_pg_rho):
    rng = np.random.default_rng(7 * T + B)
    inputs = random_inputs(rng, T, B)
    mask = (rng.random((T, B)) < 0.6).astype(np.float64)
    got = vtrace_from_importance_weights(**to_torch(inputs), clip_rho_threshold=clip_rho,
                                         clip_pg_rho_threshold=clip_pg_rho, mask=torch.from_numpy(mask))
    want = reference_masked_vtrace(inputs, mask, clip_rho, clip_pg_rho)
    np.testing.assert_allclose(got.vs.numpy(), want[0], **TOL)
    np.testing.assert_allclose(got.pg_advantages.numpy(), want[1], **TOL)
    if 0 < mask.sum() < mask.size:  # the mask changed something: the test can fail
        plain = vtrace_from_importance_weights(**to_torch(inputs), clip_rho_threshold=clip_rho,
                                               clip_pg_rho_threshold=clip_pg_rho)
        assert not torch.allclose(plain.vs, got.vs)


def test_masked_step_has_no_target_and_cuts_the_return():
    """A masked step t: vs_t = V_t, pg_t = 0, and v_{t-1} bootstraps from V_t (the rewards after t do not reach
    it), as LASER's lambda(s_t) = 1[beta < b] stops the return at a rejected state."""
    T, B, t = 8, 2, 4
    rng = np.random.default_rng(3)
    a = to_torch(random_inputs(rng, T, B, done_p=0.0))
    mask = torch.ones(T, B, dtype=torch.float64)
    mask[t] = 0.0
    b = {k: v.clone() for k, v in a.items()}
    b["rewards"][t:] += 5.0
    b["log_rhos"][t:] -= 1.0
    out_a = vtrace_from_importance_weights(**a, mask=mask)
    out_b = vtrace_from_importance_weights(**b, mask=mask)
    torch.testing.assert_close(out_a.vs[t], a["values"][t], rtol=0, atol=0)
    assert torch.all(out_a.pg_advantages[t] == 0)
    torch.testing.assert_close(out_a.vs[:t], out_b.vs[:t], rtol=0, atol=0)
    assert not torch.allclose(out_a.vs[t + 1:], out_b.vs[t + 1:])


@pytest.mark.parametrize("clip_rho,clip_pg_rho", [(1.0, 1.0), (3.7, 2.2), (None, None)])
def test_mask_none_or_ones_is_exactly_todays_result(clip_rho, clip_pg_rho):
    rng = np.random.default_rng(11)
    for dtype in (np.float64, np.float32):
        inputs = to_torch(random_inputs(rng, 9, 3, dtype))
        kwargs = dict(clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho)
        plain = vtrace_from_importance_weights(**inputs, **kwargs)
        for mask in (None, torch.ones(9, 3), torch.ones(9, 3, dtype=torch.bool)):
            got = vtrace_from_importance_weights(**inputs, **kwargs, mask=mask)
            torch.testing.assert_close(got.vs, plain.vs, rtol=0, atol=0)
            torch.testing.assert_close(got.pg_advantages, plain.pg_advantages, rtol=0, atol=0)


def test_from_logits_passes_the_mask_on():
    T, B, A = 5, 2, 3
    rng = np.random.default_rng(2)
    inputs = to_torch(random_inputs(rng, T, B))
    log_rhos = inputs.pop("log_rhos")
    del log_rhos
    behavior, target = torch.randn(T, B, A, dtype=torch.float64), torch.randn(T, B, A, dtype=torch.float64)
    actions = torch.randint(0, A, (T, B))
    mask = torch.tensor([[1, 0], [0, 1], [1, 1], [1, 0], [0, 1]], dtype=torch.float64)
    got = vtrace_from_logits(behavior, target, actions, **inputs, mask=mask)
    want = vtrace_from_importance_weights(got.log_rhos, **inputs, mask=mask)
    torch.testing.assert_close(got.vs, want.vs)
    torch.testing.assert_close(got.pg_advantages, want.pg_advantages)


def test_mask_of_wrong_shape_is_value_error():
    kwargs = dict(log_rhos=torch.zeros(3, 2), discounts=torch.ones(3, 2), rewards=torch.zeros(3, 2),
                  values=torch.zeros(3, 2), bootstrap_value=torch.zeros(2))
    with pytest.raises(ValueError, match=r"mask shape \(2, 3\)"):
        vtrace_from_importance_weights(**kwargs, mask=torch.ones(2, 3))


# ---------------------------------------------------------------------------------------------------------------
# The mask


def slow_mask(behavior, target, threshold, mode, rho_bar=1.0):
    """Per element, Python floats: softmax by hand, then the divergence of the mode, then the cut."""
    T, B, A = behavior.shape
    mask = np.zeros((T, B))
    for b in range(B):
        alive = True
        for t in range(T):
            mu = np.exp(behavior[t, b] - behavior[t, b].max())
            mu = mu / mu.sum()
            pi = np.exp(target[t, b] - target[t, b].max())
            pi = pi / pi.sum()
            if mode == "laser":
                implied = [min(rho_bar * mu[a], pi[a]) for a in range(A)]
                total = sum(implied)
                divergence = sum(pi[a] * math.log(pi[a] / (implied[a] / total)) for a in range(A))
            elif mode == "kl_pi_mu":
                divergence = sum(pi[a] * math.log(pi[a] / mu[a]) for a in range(A))
            else:
                divergence = sum(mu[a] * math.log(mu[a] / pi[a]) for a in range(A))
            inside = divergence < threshold
            if mode == "kl_mu_pi_cut":
                alive = alive and inside
                inside = alive
            mask[t, b] = float(inside)
    return mask


MODES = ["laser", "kl_pi_mu", "kl_mu_pi_cut"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("threshold", [0.05, 0.3, 1.0])
def test_mask_matches_slow_loop(mode, threshold):
    rng = np.random.default_rng(int(threshold * 100))
    behavior = rng.normal(scale=1.5, size=(12, 4, 5))
    drift = np.linspace(0.1, 2.5, 12).reshape(12, 1, 1)  # the policies drift apart along the unroll
    target = behavior + drift * rng.normal(size=(12, 4, 5))
    got = trust_region_mask(torch.from_numpy(behavior), torch.from_numpy(target), threshold, mode=mode)
    want = slow_mask(behavior, target, threshold, mode)
    assert got.shape == (12, 4) and got.dtype == torch.float64
    np.testing.assert_array_equal(got.numpy(), want)
    if threshold == 0.3:
        assert 0 < want.sum() < want.size  # the threshold bites both ways here


def test_laser_mask_with_rho_bar_matches_slow_loop():
    rng = np.random.default_rng(4)
    behavior, target = rng.normal(size=(10, 3, 4)), rng.normal(size=(10, 3, 4))
    got = trust_region_mask(torch.from_numpy(behavior), torch.from_numpy(target), 0.05, clip_rho_threshold=2.0)
    np.testing.assert_array_equal(got.numpy(), slow_mask(behavior, target, 0.05, "laser", rho_bar=2.0))
    everything = trust_region_mask(torch.from_numpy(behavior), torch.from_numpy(target), 1e-9,
                                   clip_rho_threshold=None)
    assert torch.all(everything == 1)  # no clipping: V-trace is unbiased, its implied policy is pi itself


@pytest.mark.parametrize("mode", MODES)
def test_mask_ignores_constants_added_to_the_logits(mode):
    """Logits are defined up to a constant per state: impala-laser's raw-logit 'KL' was not."""
    rng = np.random.default_rng(8)
    behavior = torch.from_numpy(rng.normal(size=(15, 4, 6)))
    target = torch.from_numpy(rng.normal(size=(15, 4, 6)))
    base = trust_region_mask(behavior, target, 0.2, mode=mode)
    shift_b = torch.from_numpy(rng.normal(scale=8.0, size=(15, 4, 1)))
    shift_t = torch.from_numpy(rng.normal(scale=8.0, size=(15, 4, 1)))
    torch.testing.assert_close(trust_region_mask(behavior + shift_b, target - shift_t, 0.2, mode=mode), base)
    same = trust_region_mask(behavior, behavior + 8.2, 1e-6, mode=mode)
    assert torch.all(same == 1)  # identical policies are always inside


def test_threshold_behaviour():
    """Two actions, mu = (0.5, 0.5), pi = (0.9, 0.1): KL(pi || mu) = 0.368..., and the implied policy with
    rho_bar = 1 is min(mu, pi) normalised = (0.5, 0.1) / 0.6, KL(pi || implied) = 0.0948... A step is inside
    only below the threshold (strictly); the cut mode masks everything after its first failure."""
    mu, pi = torch.tensor([0.5, 0.5]).log(), torch.tensor([0.9, 0.1]).log()
    kl_pi_mu = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)
    kl_laser = 0.9 * math.log(0.9 / (0.5 / 0.6)) + 0.1 * math.log(0.1 / (0.1 / 0.6))
    behavior, target = mu.repeat(1, 1, 1), pi.repeat(1, 1, 1)
    for mode, kl in (("kl_pi_mu", kl_pi_mu), ("laser", kl_laser)):
        assert trust_region_mask(behavior, target, kl + 1e-4, mode=mode).item() == 1.0
        assert trust_region_mask(behavior, target, kl - 1e-4, mode=mode).item() == 0.0
    # the cut: steps 0 and 2 inside, step 1 outside -> step 2 masked as well
    same, far = torch.zeros(2), torch.tensor([4.0, -4.0])
    behavior = torch.stack([same, same, same]).unsqueeze(1)
    target = torch.stack([same, far, same]).unsqueeze(1)
    assert trust_region_mask(behavior, target, 0.5, mode="kl_mu_pi_cut").squeeze(1).tolist() == [1.0, 0.0, 0.0]
    assert trust_region_mask(behavior, target, 0.5, mode="kl_pi_mu").squeeze(1).tolist() == [1.0, 0.0, 1.0]


def test_bad_arguments():
    logits = torch.zeros(2, 1, 3)
    with pytest.raises(ValueError, match="mode"):
        trust_region_mask(logits, logits, 0.1, mode="kl")
    with pytest.raises(ValueError, match="threshold"):
        trust_region_mask(logits, logits, 0.0)
    with pytest.raises(ValueError, match=r"\(2, 1, 4\)"):
        trust_region_mask(logits, torch.zeros(2, 1, 4), 0.1)
