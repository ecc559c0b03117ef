"""n-step returns and GAE against slow references written from the papers' sum-of-products formulas."""

import numpy as np
import pytest
import torch

from core.returns import gae_advantages, normalized_advantages, nstep_returns


def reference_nstep(rewards, dones, bootstrap, gamma):
    """R_t = sum_{k=t}^{T-1} gamma^{k-t} r_k prod_{j<k} (1 - done_j) + gamma^{T-t} V_T prod_{j<T} (1 - done_j)
    (A3C, Algorithm S3, written out as a sum instead of a recursion)."""
    T = len(rewards)
    out = np.zeros(T)
    for t in range(T):
        total, alive = 0.0, 1.0
        for k in range(t, T):
            total += alive * gamma ** (k - t) * rewards[k]
            alive *= 1.0 - dones[k]
        total += alive * gamma ** (T - t) * bootstrap
        out[t] = total
    return out


def reference_gae(rewards, values, dones, bootstrap, gamma, lam):
    """A_t = sum_{l>=0} (gamma * lam)^l delta_{t+l}, stopping at an episode end, with
    delta_t = r_t + gamma (1 - done_t) V_{t+1} - V_t (GAE paper, eq. 16)."""
    T = len(rewards)
    next_values = list(values[1:]) + [bootstrap]
    deltas = [rewards[t] + gamma * (1.0 - dones[t]) * next_values[t] - values[t] for t in range(T)]
    out = np.zeros(T)
    for t in range(T):
        total, alive = 0.0, 1.0
        for k in range(t, T):
            total += alive * (gamma * lam) ** (k - t) * deltas[k]
            alive *= 1.0 - dones[k]
        out[t] = total
    return out


def random_rollout(rng, T, B=None, done_p=0.2):
    shape = (T,) if B is None else (T, B)
    rewards = rng.normal(size=shape)
    values = rng.normal(size=shape)
    dones = (rng.random(shape) < done_p).astype(np.float64)
    bootstrap = rng.normal(size=() if B is None else (B,))
    return rewards, values, dones, bootstrap


@pytest.mark.parametrize("T", [1, 5, 20])
@pytest.mark.parametrize("gamma", [0.99, 0.9, 1.0])
def test_nstep_returns_match_reference_1d(T, gamma):
    rng = np.random.default_rng(T)
    rewards, _, dones, bootstrap = random_rollout(rng, T)
    got = nstep_returns(torch.tensor(rewards), torch.tensor(gamma * (1 - dones)), torch.tensor(bootstrap))
    np.testing.assert_allclose(got.numpy(), reference_nstep(rewards, dones, bootstrap, gamma), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
def test_gae_matches_reference_batched(lam):
    rng = np.random.default_rng(7)
    T, B, gamma = 13, 4, 0.97
    rewards, values, dones, bootstrap = random_rollout(rng, T, B, done_p=0.3)
    assert dones.sum() > 0  # the test must cover episode ends inside the rollout
    got = gae_advantages(torch.tensor(rewards), torch.tensor(values), torch.tensor(gamma * (1 - dones)),
                         torch.tensor(bootstrap), lam)
    for b in range(B):
        want = reference_gae(rewards[:, b], values[:, b], dones[:, b], bootstrap[b], gamma, lam)
        np.testing.assert_allclose(got[:, b].numpy(), want, rtol=1e-6, atol=1e-5)


def test_nstep_returns_batched_match_reference():
    rng = np.random.default_rng(3)
    T, B, gamma = 20, 3, 0.99
    rewards, _, dones, bootstrap = random_rollout(rng, T, B)
    got = nstep_returns(torch.tensor(rewards), torch.tensor(gamma * (1 - dones)), torch.tensor(bootstrap))
    for b in range(B):
        np.testing.assert_allclose(got[:, b].numpy(), reference_nstep(rewards[:, b], dones[:, b], bootstrap[b], gamma),
                                   rtol=1e-6, atol=1e-5)


def test_gae_with_lambda_one_is_nstep_return_minus_value():
    rng = np.random.default_rng(11)
    rewards, values, dones, bootstrap = [torch.tensor(x) for x in random_rollout(rng, 20, 2)]
    discounts = 0.99 * (1 - dones)
    adv = gae_advantages(rewards, values, discounts, bootstrap, 1.0)
    torch.testing.assert_close(adv, nstep_returns(rewards, discounts, bootstrap) - values)


def test_episode_end_blocks_bootstrap_and_future_rewards():
    rewards = torch.tensor([1.0, 1.0, 1.0])
    dones = torch.tensor([0.0, 1.0, 0.0])
    got = nstep_returns(rewards, 0.5 * (1 - dones), torch.tensor(100.0))
    # step 1 ends an episode: it sees only its own reward; step 2 starts the next and bootstraps from 100
    torch.testing.assert_close(got, torch.tensor([1.5, 1.0, 51.0]))


def test_known_value_of_constant_reward():
    """Reward 1 forever with V = 1 / (1 - gamma) as the bootstrap: every return equals that value."""
    gamma = 0.9
    got = nstep_returns(torch.ones(50), torch.full((50,), gamma), torch.tensor(1 / (1 - gamma)))
    torch.testing.assert_close(got, torch.full((50,), 10.0))


def test_wrong_shapes_are_rejected():
    with pytest.raises(ValueError):
        nstep_returns(torch.zeros(5, 2), torch.zeros(5, 2), torch.zeros(3))
    with pytest.raises(ValueError):
        gae_advantages(torch.zeros(5), torch.zeros(4), torch.zeros(5), torch.zeros(()), 0.9)
    with pytest.raises(ValueError):
        nstep_returns(torch.zeros(5, 2, 2), torch.zeros(5, 2, 2), torch.zeros(2, 2))


def reference_normalized(advantages, kept):
    """(A - mean) / (std + 1e-8) over the kept entries (population std), written out with plain floats; a dropped
    entry is 0."""
    values = [a for a, k in zip(advantages, kept) if k]
    mean = sum(values) / len(values)
    std = (sum((a - mean) ** 2 for a in values) / len(values)) ** 0.5
    return [(a - mean) / (std + 1e-8) if k else 0.0 for a, k in zip(advantages, kept)]


def test_normalized_advantages_from_the_formula():
    g = torch.Generator().manual_seed(4)
    advantages = 3.0 + 2.5 * torch.randn(6, 4, generator=g, dtype=torch.float64)
    flat = advantages.flatten().tolist()
    out = normalized_advantages(advantages)
    np.testing.assert_allclose(out.flatten().numpy(), reference_normalized(flat, [1] * len(flat)), rtol=1e-12)
    assert out.shape == advantages.shape
    assert abs(out.mean().item()) < 1e-12 and abs(out.std(unbiased=False).item() - 1.0) < 1e-6


def test_normalized_advantages_keep_masked_steps_at_zero():
    """With a trust-region mask the kept steps' statistics normalise them and a dropped step stays 0 (before:
    V-trace gave it advantage 0; shifting by the mean would have given it a gradient)."""
    g = torch.Generator().manual_seed(5)
    advantages = torch.randn(5, 3, generator=g, dtype=torch.float64)
    mask = (torch.rand(5, 3, generator=g) > 0.4).double()
    advantages = advantages * mask
    out = normalized_advantages(advantages, mask)
    expected = reference_normalized(advantages.flatten().tolist(), mask.flatten().tolist())
    np.testing.assert_allclose(out.flatten().numpy(), expected, rtol=1e-12, atol=1e-15)
    assert torch.all(out[mask == 0] == 0)
    torch.testing.assert_close(normalized_advantages(advantages, torch.ones(5, 3)), normalized_advantages(advantages))


def test_normalized_advantages_of_a_single_step_or_a_constant_are_zero():
    """One step, or every advantage equal: nothing to rank, so no policy gradient (not a division by zero)."""
    assert normalized_advantages(torch.tensor([[2.5]])).item() == 0.0
    assert torch.all(normalized_advantages(torch.full((4, 2), -1.5)) == 0)
