"""The worker's loss: batched over environments it equals the average of the environments' own losses, and its
gradient pushes the policy toward advantaged actions."""

import argparse

import pytest
import torch

from core.returns import gae_advantages
from core.schedule import entropy_coef, learning_rate
from train import a3c_loss, unused_step_sizes, worker_num_steps

ARGS = argparse.Namespace(tau=0.95, value_coef=0.5, entropy_coef=0.01, num_steps=20, distributed_step_size=[],
                          normalize_advantages=False, bound_coef=0.0)


def random_rollout(T, B, seed=0):
    g = torch.Generator().manual_seed(seed)
    log_probs = -torch.rand(T, B, generator=g)
    entropies = torch.rand(T, B, generator=g)
    values = torch.randn(T, B, generator=g)
    rewards = torch.randn(T, B, generator=g)
    discounts = 0.99 * (torch.rand(T, B, generator=g) > 0.2).float()
    bootstrap = torch.randn(B, generator=g)
    return log_probs, entropies, values, rewards, discounts, bootstrap


def test_batched_loss_is_mean_of_single_env_losses():
    rollout = random_rollout(20, 4)
    batched = a3c_loss(*rollout, ARGS)
    singles = [a3c_loss(*[x[..., b : b + 1] for x in rollout], ARGS) for b in range(4)]
    for i in range(4):
        torch.testing.assert_close(batched[i], torch.stack([s[i] for s in singles]).mean())


def test_loss_terms_from_definitions():
    """T=1, no episode end: return = r + gamma * V', advantage = return - V (tau irrelevant for one step)."""
    log_prob, entropy, value = torch.tensor([[-0.5]]), torch.tensor([[0.7]]), torch.tensor([[2.0]])
    reward, discount, bootstrap = torch.tensor([[1.0]]), torch.tensor([[0.9]]), torch.tensor([3.0])
    loss, policy_loss, value_loss, ent = a3c_loss(log_prob, entropy, value, reward, discount, bootstrap, ARGS)
    advantage = 1.0 + 0.9 * 3.0 - 2.0
    torch.testing.assert_close(policy_loss, torch.tensor(0.5 * advantage))
    torch.testing.assert_close(value_loss, torch.tensor(0.5 * advantage**2))
    torch.testing.assert_close(loss, torch.tensor(0.5 * advantage + 0.5 * 0.5 * advantage**2 - 0.01 * 0.7))


def test_policy_gradient_raises_probability_of_advantaged_action():
    logits = torch.zeros(1, 1, 2, requires_grad=True)
    log_prob = torch.log_softmax(logits, -1)[..., 0]  # action 0 was taken
    value = torch.zeros(1, 1)
    loss, *_ = a3c_loss(log_prob, torch.zeros(1, 1), value, torch.ones(1, 1), torch.zeros(1, 1), torch.zeros(1), ARGS)
    loss.backward()
    with torch.no_grad():
        new = torch.softmax(logits - 0.1 * logits.grad, -1)
    assert new[0, 0, 0] > 0.5


def test_bound_penalty_adds_coef_times_the_excess_summed_over_time_averaged_over_envs():
    """``--bound-coef``: the loss grows by ``coef * mean_b sum_t excess[t, b]``; the other terms are unchanged, and
    at 0, its default, the excess is ignored."""
    rollout = random_rollout(5, 3)
    excess = torch.rand(5, 3, generator=torch.Generator().manual_seed(7))
    plain = a3c_loss(*rollout, ARGS)
    bounded = a3c_loss(*rollout, argparse.Namespace(**{**vars(ARGS), "bound_coef": 0.3}), None, excess)
    want = 0.3 * sum(float(excess[:, b].sum()) for b in range(3)) / 3
    torch.testing.assert_close(bounded[0] - plain[0], torch.tensor(want))
    for i in (1, 2, 3):
        torch.testing.assert_close(bounded[i], plain[i])
    off = a3c_loss(*rollout, argparse.Namespace(**{**vars(ARGS), "bound_coef": 0.0}), None, excess)
    torch.testing.assert_close(off[0], plain[0])
    torch.testing.assert_close(a3c_loss(*rollout, ARGS, None, excess)[0], plain[0])


def test_distributed_step_sizes_round_robin():
    args = argparse.Namespace(num_steps=20, distributed_step_size=[16, 32, 64])
    assert [worker_num_steps(args, r) for r in range(5)] == [16, 32, 64, 16, 32]
    assert worker_num_steps(argparse.Namespace(num_steps=20, distributed_step_size=[]), 3) == 20


def test_step_sizes_no_worker_gets_are_named_at_the_start():
    args = argparse.Namespace(workers=2, distributed_step_size=[16, 32, 64, 128])
    assert unused_step_sizes(args) == ("--distributed-step-size 16 32 64 128 has more entries than the 2 worker(s): "
                                       "64 128 unused (one entry per worker, round-robin)")
    for workers in (4, 18):
        assert unused_step_sizes(argparse.Namespace(workers=workers, distributed_step_size=[16, 32, 64, 128])) is None
    assert unused_step_sizes(argparse.Namespace(workers=2, distributed_step_size=[])) is None


def test_lr_decay_schedule_and_the_update_that_steps_with_it():
    """--lr-decay START END: the learning rate until START, linearly to 0 at END, 0 after; ``Update`` steps the
    shared model with the rate it is given (0: the weights stay), and with none at the optimizer's own."""
    from model import Replica
    from shared_optim import SharedAdam, Update

    assert [learning_rate(1e-3, None, f) for f in (0, 10**9)] == [1e-3, 1e-3]
    assert [learning_rate(1e-3, (0, 4000), f) for f in (0, 1000, 4000, 10**9)] == pytest.approx(
        [1e-3, 7.5e-4, 0.0, 0.0])
    torch.manual_seed(0)
    shared, local = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    shared.share_memory()
    replica = Replica(shared, local)
    optimizer = SharedAdam(shared.parameters(), lr=1e-2)
    state = argparse.Namespace(nonfinite=None, diverged=None)
    update = Update(replica, optimizer, argparse.Namespace(max_grad_norm=0.0, max_nonfinite=3), state, 0)
    x = torch.randn(5, 3)
    before = [p.detach().clone() for p in shared.parameters()]
    replica.pull()
    assert update(local(x).pow(2).sum(), 0.0)[1]
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, shared.parameters()))  # lr 0: nothing moved
    assert optimizer.param_groups[0]["lr"] == 0.0
    replica.pull()
    assert update(local(x).pow(2).sum(), 5e-3)[1] and optimizer.param_groups[0]["lr"] == 5e-3
    moved = max(float((a - b.detach()).abs().max()) for a, b in zip(before, shared.parameters()))
    assert 0 < moved <= 5e-3 * 1.01  # Adam's first step moves each weight by at most about lr


def test_entropy_decay_schedule_and_the_loss_it_weights():
    """--entropy-decay START END: the coefficient until START, linearly to 0 at END, 0 after; the loss takes the
    coefficient of the moment, and without one it is --entropy-coef."""
    assert [entropy_coef(0.01, None, f) for f in (0, 10**9)] == [0.01, 0.01]
    decay = (1000, 3000)
    assert [entropy_coef(0.01, decay, f) for f in (0, 1000, 2000, 2500, 3000, 10**9)] == pytest.approx(
        [0.01, 0.01, 0.005, 0.0025, 0.0, 0.0])
    rollout = random_rollout(20, 4)
    full, half, none = (a3c_loss(*rollout, ARGS, coef)[0] for coef in (None, 0.005, 0.0))
    entropy = rollout[1].sum(0).mean()
    torch.testing.assert_close(none - full, 0.01 * entropy)
    torch.testing.assert_close(none - half, 0.005 * entropy)


def test_normalized_advantages_weight_the_policy_gradient_and_leave_the_value_loss():
    """--normalize-advantages: the policy loss weighs the log-probabilities by the rollout's GAE advantages
    normalised over all its steps and environments; the value loss and the entropy are the same as without."""
    rollout = random_rollout(20, 4, seed=3)
    log_probs, entropies, values, rewards, discounts, bootstrap = rollout
    plain = a3c_loss(*rollout, ARGS)
    normalized = a3c_loss(*rollout, argparse.Namespace(**{**vars(ARGS), "normalize_advantages": True}))
    advantages = gae_advantages(rewards, values, discounts, bootstrap, ARGS.tau)
    scaled = (advantages - advantages.mean()) / (advantages.std(unbiased=False) + 1e-8)
    torch.testing.assert_close(normalized[1], -(log_probs * scaled).sum(0).mean())
    torch.testing.assert_close(normalized[2], plain[2])
    torch.testing.assert_close(normalized[3], plain[3])
    assert not torch.allclose(normalized[1], plain[1])
