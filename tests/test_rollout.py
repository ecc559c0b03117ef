"""The worker's rollout and hand-off: recurrent state per environment, what carries across rollouts, time limits
that bootstrap, and gradients that reach the shared model intact."""

import argparse
import contextlib
import multiprocessing

import gymnasium as gym
import numpy as np
import pytest
import torch

from core.policy import Categorical
from envs.rollout_envs import RolloutEnvs
from model import Replica, build_model, fast_layout, flatten_parameters, model_meta
from shared_optim import SharedAdam, push_gradients
from core.returns import gae_advantages
from core.timing import PhaseClock
from train import a3c_loss, play_rollout, ppo_minibatches, push_each

GAMMA = 0.9


class CountingEnv(gym.Env):
    """Observation ``[steps into the episode, env index + 1]`` (never all zeros, which would keep an LSTM at 0), reward 1 a step; the episode terminates after
    ``length`` steps (``length=None``: never; a TimeLimit can still cut it)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, index, length):
        self.index, self.length, self.t = index, length, 0

    def _obs(self):
        return np.array([self.t, self.index + 1], dtype=np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, self.length is not None and self.t >= self.length, False, {}


class Recorder(torch.nn.Module):
    """Wraps a model and records every observation and recurrent state it is given while acting (``forward``),
    and what it answered."""

    def __init__(self, model):
        super().__init__()
        self.model, self.calls, self.answers = model, [], []
        self.policy = model.policy

    def initial_state(self, *a, **k):
        return self.model.initial_state(*a, **k)

    def forward(self, obs, state):
        self.calls.append((obs.clone(), state[0].clone(), state[1].clone()))
        value, logits, state = self.model(obs, state)
        self.answers.append((value.clone(), logits.clone()))
        return value, logits, state

    def unroll(self, obs, state, dones=None):
        return self.model.unroll(obs, state, dones)


class ConstantValue(torch.nn.Module):
    """A feed-forward 'network' whose value is 5 everywhere and whose policy is uniform."""

    policy = Categorical(2)

    def initial_state(self, batch=1, device="cpu"):
        return torch.zeros(batch, 0), torch.zeros(batch, 0)

    def forward(self, obs, state):
        batch = obs.shape[0]
        return torch.full((batch,), 5.0), torch.zeros(batch, 2, requires_grad=True), state

    def unroll(self, obs, state, dones=None):
        steps, batch = obs.shape[:2]
        return torch.full((steps, batch), 5.0), torch.zeros(steps, batch, 2, requires_grad=True), state


class FrameCountingEnv(CountingEnv):
    """CountingEnv with 4 stacked 84x84 frames, for the image networks: the count and the index in one corner."""

    observation_space = gym.spaces.Box(0.0, 1.0, (4, 84, 84), np.float32)

    def _obs(self):
        frames = np.zeros((4, 84, 84), dtype=np.float32)
        frames[:, :8, :8] = self.t / 10.0
        frames[:, 8:16, :8] = (self.index + 1) / 10.0
        return frames


def make_envs(lengths, time_limit=None, kind=CountingEnv):
    envs = [kind(i, n) for i, n in enumerate(lengths)]
    if time_limit:
        envs = [gym.wrappers.TimeLimit(e, max_episode_steps=time_limit) for e in envs]
    return RolloutEnvs(None, len(envs), seed=0, clip_rewards=False, envs=envs)


def buffer_for(envs, steps):
    observations = torch.zeros((steps + 1, len(envs.envs), 2))
    observations[0] = torch.from_numpy(envs.first_obs)
    return observations


def lstm():
    torch.manual_seed(0)
    return Recorder(build_model(model_meta("mlplstm", [2], 2, 8)))


class BigRewardEnv(CountingEnv):
    def step(self, action):
        obs, _, terminated, truncated, info = super().step(action)
        return obs, -7.5, terminated, truncated, info


@pytest.mark.parametrize("clip, expected", [(True, -1.0), (False, -7.5)])
def test_reward_clipping(clip, expected):
    """``--reward-clipping abs_one`` clips training rewards to [-1, 1]; ``none`` keeps them."""
    envs = RolloutEnvs(None, 1, seed=0, clip_rewards=clip, envs=[BigRewardEnv(0, None)])
    rewards, _, _ = envs.step(np.zeros(1, dtype=np.int64), np.zeros((1, 2), dtype=np.float32))
    assert rewards.tolist() == [expected]


def test_normalized_rewards_are_divided_by_the_running_std_of_the_discounted_return():
    """``--reward-clipping normalize``: each reward over the standard deviation of the discounted returns seen so
    far, ``R_t = gamma R_(t-1) (1 - terminal_t) + r_t`` (gymnasium's NormalizeReward, recomputed here from that
    definition), while finished games keep the game's own points."""
    env = gym.wrappers.RecordEpisodeStatistics(BigRewardEnv(0, 3))  # games of 3 steps of -7.5
    envs = RolloutEnvs(None, 1, seed=0, clip_rewards=False, envs=[env], normalize_gamma=0.9)
    returns, got = [], []
    discounted, terminal = 0.0, False
    for t in range(7):
        rewards, dones, _ = envs.step(np.zeros(1, dtype=np.int64), np.zeros((1, 2), dtype=np.float32))
        terminal = t % 3 == 2
        discounted = discounted * 0.9 * (1 - terminal) + -7.5
        returns.append(discounted)
        assert bool(dones[0]) == terminal
        got.append((rewards[0], -7.5 / np.sqrt(np.var(returns) + 1e-8)))
    for reward, want in got[2:]:  # the first steps' variance is gymnasium's prior (1 at count ~0)
        assert reward == pytest.approx(want, rel=1e-3)
    assert abs(got[-1][0]) < 7.5 / 2  # scaled, not the raw -7.5
    assert envs.take_finished() == [(-22.5, 3), (-22.5, 3)]


def test_reward_options_follow_the_flag():
    from argparse import Namespace

    from envs.rollout_envs import training_rewards

    assert training_rewards(Namespace(reward_clipping="normalize", gamma=0.97)) == \
        {"clip_rewards": False, "normalize_gamma": 0.97}
    assert training_rewards(Namespace(reward_clipping="abs_one", gamma=0.97)) == \
        {"clip_rewards": True, "normalize_gamma": None}


def test_lstm_state_is_reset_only_for_the_env_whose_episode_ended():
    envs = make_envs([2, 3, None])  # env 0 ends after its 2nd step, env 1 after its 3rd, env 2 never
    model = lstm()
    observations = buffer_for(envs, 5)
    with torch.no_grad():
        rollout, _ = play_rollout(model, envs, observations, model.initial_state(3), GAMMA, "cpu")
    hx_in = [hx for _, hx, _ in model.calls[:5]]  # the state fed at steps 0..4
    assert torch.all(hx_in[0] == 0)
    for t in range(1, 5):
        fresh = {0: t == 2 or t == 4, 1: t == 3, 2: False}  # an episode of env 0 also ends after step 3
        for env, zero in fresh.items():
            assert bool(torch.all(hx_in[t][env] == 0)) == zero, (t, env)
    # the episode ends are terminal: discount 0 exactly there
    expected_done = torch.tensor([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=torch.float32)
    torch.testing.assert_close(rollout.discounts, GAMMA * (1 - expected_done))
    # after a reset the env's row holds the first observation of its next episode
    assert observations[2, 0, 0] == 0 and observations[3, 1, 0] == 0 and observations[5, 2, 0] == 5


@pytest.mark.parametrize("name, obs_shape", [("mlplstm", (2,)), ("nature", (4, 84, 84))])
def test_batched_training_forward_gives_the_stepped_loss_and_gradients(name, obs_shape):
    """``--train-forward batched`` (act without autograd, recompute the rollout in one batch) and ``stepped``
    (the graph built while acting): the same actions (same seed), the same loss and gradients, episode ends and a
    time-limit cut included."""
    results = []
    for batched in (False, True):
        torch.manual_seed(0)
        model = build_model(model_meta(name, list(obs_shape), 2, 8))
        envs = make_envs([2, None, 4], time_limit=3, kind=CountingEnv if len(obs_shape) == 1 else FrameCountingEnv)
        observations = torch.zeros((6, 3) + obs_shape)
        observations[0] = torch.from_numpy(envs.first_obs)
        state = tuple(torch.randn_like(s) for s in model.initial_state(3))
        rollout, final_state = play_rollout(model, envs, observations, state, GAMMA, "cpu", batched=batched)
        args = argparse.Namespace(tau=0.95, value_coef=0.5, entropy_coef=0.01, normalize_advantages=False,
                                  bound_coef=0.0)
        loss, *_ = a3c_loss(*rollout[:6], args)
        loss.backward()
        results.append((loss.detach(), rollout.rewards, [p.grad.clone() for p in model.parameters()], final_state))
    (loss_s, rewards_s, grads_s, state_s), (loss_b, rewards_b, grads_b, state_b) = results
    torch.testing.assert_close(rewards_b, rewards_s)
    assert (rewards_s != 1.0).any()  # the time-limit cut bootstrapped somewhere
    torch.testing.assert_close(loss_b, loss_s, rtol=1e-4, atol=1e-5)
    for b, s in zip(grads_b, grads_s):
        torch.testing.assert_close(b, s, rtol=1e-3, atol=1e-5)
    torch.testing.assert_close(state_b[0], state_s[0])


def test_the_loss_sees_the_values_and_policy_that_acting_saw():
    """With ``batched=True`` acting runs without autograd; the loss's values and log-probabilities are recomputed
    over the whole rollout in one batch (``model.unroll``). They must be the very numbers acting used, episode
    ends included."""
    envs = make_envs([2, 3, None])
    model = lstm()
    observations = buffer_for(envs, 5)
    rollout, _ = play_rollout(model, envs, observations, model.initial_state(3), GAMMA, "cpu", batched=True)
    acted_values = torch.stack([v for v, _ in model.answers[:5]])
    acted_log_policy = torch.log_softmax(torch.stack([lg for _, lg in model.answers[:5]]), -1)
    torch.testing.assert_close(rollout.values, acted_values, rtol=1e-5, atol=1e-6)
    # the log-probability of the action taken is one of the acted policy's, and the entropy is the acted one's
    taken = (acted_log_policy - rollout.log_probs.unsqueeze(2)).abs().min(2).values
    assert taken.max() < 1e-5
    torch.testing.assert_close(rollout.entropies, -(acted_log_policy.exp() * acted_log_policy).sum(-1))
    assert rollout.values.requires_grad and rollout.log_probs.requires_grad


def test_observation_row_and_state_carry_across_rollouts():
    envs = make_envs([None, None])
    model = lstm()
    observations = buffer_for(envs, 3)
    state = model.initial_state(2)
    with torch.no_grad():
        _, state = play_rollout(model, envs, observations, state, GAMMA, "cpu")
        last_obs, last_state = observations[-1].clone(), state[0].clone()
        observations[0] = observations[-1]  # what the worker does between rollouts
        model.calls.clear()
        play_rollout(model, envs, observations, state, GAMMA, "cpu")
    first_obs, first_hx, _ = model.calls[0]
    torch.testing.assert_close(first_obs, last_obs)
    assert torch.equal(last_obs[:, 0], torch.tensor([3.0, 3.0]))  # the episodes went on: 3 steps in
    torch.testing.assert_close(first_hx, last_state)
    assert not torch.all(first_hx == 0)


def test_time_limit_bootstraps_from_the_last_observation_but_termination_does_not():
    envs = make_envs([2, None], time_limit=3)  # env 0 terminates at step 2; env 1 is cut at step 3
    observations = buffer_for(envs, 4)
    rollout, _ = play_rollout(ConstantValue(), envs, observations, ConstantValue().initial_state(2), GAMMA, "cpu")
    # env 0: terminal after its 2nd step (t=1): reward 1, discount 0, nothing added
    assert rollout.rewards[1, 0] == 1.0 and rollout.discounts[1, 0] == 0.0
    # env 1: cut after its 3rd step (t=2): the reward carries gamma * V(cut observation) = 0.9 * 5
    assert rollout.rewards[2, 1] == pytest.approx(1.0 + GAMMA * 5.0) and rollout.discounts[2, 1] == 0.0
    assert rollout.rewards[0, 1] == 1.0 and rollout.rewards[3, 1] == 1.0
    # so the return at the cut is what an uncut episode would bootstrap to: 1 + 0.9 * V
    from core.returns import nstep_returns

    returns = nstep_returns(rollout.rewards, rollout.discounts, rollout.bootstrap_value)
    assert returns[2, 1] == pytest.approx(1.0 + GAMMA * 5.0)
    assert returns[1, 0] == pytest.approx(1.0)


@pytest.mark.parametrize("flat_shared", [True, False])
def test_gradient_reaching_the_shared_model_equals_the_replicas(flat_shared):
    """A channels-last replica of the Nature network: its gradients land in the shared parameters unchanged (one
    flat copy when the shared model is flattened in the same layout, a copy per tensor when it is a plain
    contiguous model), and the optimizer steps exactly the shared weights."""
    meta = model_meta("nature", [4, 84, 84], 6, 0)
    torch.manual_seed(0)
    shared = build_model(meta)
    if flat_shared:
        shared = fast_layout(shared, meta, True)
        flatten_parameters(shared, shared=True)
    else:
        shared.share_memory()
    shared_params = list(shared.parameters())
    replica = Replica(shared, fast_layout(build_model(meta), meta, True))
    assert replica.one_copy == flat_shared
    replica.pull()
    for s_p, r_p in zip(shared_params, replica.model.parameters()):
        assert torch.equal(s_p, r_p)
    value, logits, _ = replica.model(torch.rand(3, 4, 84, 84).to(memory_format=torch.channels_last),
                                     replica.model.initial_state(3))
    (value.pow(2).sum() + logits.logsumexp(-1).sum()).backward()
    before = [p.detach().clone() for p in shared_params]
    optimizer = SharedAdam(shared_params, lr=1e-3)
    push_gradients(replica, optimizer)
    reference = [p.detach().clone().requires_grad_() for p in before]
    for r, p in zip(reference, replica.model.parameters()):
        r.grad = p.grad.contiguous()
    torch.optim.Adam(reference, lr=1e-3, eps=1e-3).step()
    for shared_p, replica_p, ref in zip(shared_params, replica.model.parameters(), reference):
        torch.testing.assert_close(shared_p.grad, replica_p.grad, rtol=0, atol=0)
        torch.testing.assert_close(shared_p.detach(), ref.detach(), rtol=0, atol=0)
    replica.pull()  # the stepped weights come back into the replica
    for s_p, r_p in zip(shared_params, replica.model.parameters()):
        assert torch.equal(s_p, r_p)


def _worker_steps(shared, optimizer, steps):
    torch.set_num_threads(1)
    replica = Replica(shared, torch.nn.Linear(3, 2))
    assert replica.one_copy  # the flat shared buffer is found again in this process
    for _ in range(steps):
        replica.pull()
        replica.model.zero_grad(set_to_none=False)
        replica.model.weight.sum().add(replica.model.bias.sum()).backward()  # gradient 1 everywhere, every time
        push_gradients(replica, optimizer)


def test_two_workers_step_one_shared_model_without_losing_an_update():
    """Two worker processes step one shared model and one set of shared statistics, one after the other (run
    concurrently, hogwild may interleave reads and lose an update by design). With a constant gradient every Adam
    step is exactly lr / (1 + eps) (m_hat = v_hat = 1), so every weight must have moved by both workers' steps
    (one worker stepping a private copy would leave half of them out) and the shared step count must hold both."""
    torch.manual_seed(0)
    shared = torch.nn.Linear(3, 2)
    flatten_parameters(shared, shared=True)
    before = [p.detach().clone() for p in shared.parameters()]
    lr, eps, steps = 1e-2, 1e-3, 25
    optimizer = SharedAdam(shared.parameters(), lr=lr, eps=eps)
    ctx = multiprocessing.get_context("spawn")
    for _ in range(2):
        proc = ctx.Process(target=_worker_steps, args=(shared, optimizer, steps))
        proc.start()
        proc.join(120)
        assert proc.exitcode == 0
    assert optimizer.global_step == 2 * steps
    for b, p in zip(before, shared.parameters()):
        torch.testing.assert_close(b - p.detach(), torch.full_like(b, 2 * steps * lr / (1 + eps)), rtol=1e-4, atol=0)


def test_loss_of_a_rollout_with_a_real_model_is_finite_and_trains():
    envs = make_envs([4, 7])
    model = lstm()
    observations = buffer_for(envs, 5)
    rollout, _ = play_rollout(model, envs, observations, model.initial_state(2), GAMMA, "cpu")
    args = argparse.Namespace(tau=1.0, value_coef=0.5, entropy_coef=0.01, normalize_advantages=False,
                              bound_coef=0.0)
    loss, *_ = a3c_loss(*rollout[:6], args)
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("name, minibatches", [("mlplstm", 2), ("mlp", 4)])
def test_ppo_minibatches_see_the_behaviour_policy_and_pair_each_sample_with_its_own_targets(name, minibatches):
    """``--objective ppo``: acting records the behaviour policy's log-probabilities and values (no autograd), the
    very numbers a forward over the rollout gives; every minibatch of an epoch, recomputed on the same weights,
    finds ratio 1 (KL 0, nothing clipped) for its samples, and their value losses average to the whole rollout's
    0.5 * mean(A^2) (returns = GAE + values): each sample meets its own action, old log-probability and return, a
    recurrent network's unrolled from the rollout's first state across episode ends and a time-limit cut."""
    torch.manual_seed(0)
    model = build_model(model_meta(name, [2], 2, 8))
    envs = make_envs([2, None, 4, 3], time_limit=3)
    observations = buffer_for(envs, 5)
    start = tuple(torch.randn_like(s) for s in model.initial_state(4))
    rollout, _ = play_rollout(model, envs, observations, start, GAMMA, "cpu", behaviour=True)
    assert not rollout.values.requires_grad and not rollout.log_probs.requires_grad
    with torch.no_grad():
        values, logits, _ = model.unroll(observations[:-1], start, rollout.dones)
    torch.testing.assert_close(rollout.values, values, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rollout.log_probs, model.policy.log_prob(logits, rollout.actions), rtol=1e-5, atol=1e-6)

    args = argparse.Namespace(tau=0.95, value_coef=0.5, entropy_coef=0.01, normalize_advantages=False, bound_coef=0.0,
                              ppo_epochs=2, minibatches=minibatches, value_clip=0.1)
    parts = [p for _, p in ppo_minibatches(model, observations, rollout, args, 0.01, 0.1, PhaseClock(),
                                           contextlib.nullcontext())]
    assert len(parts) == 2 * minibatches
    advantages = gae_advantages(rollout.rewards, rollout.values, rollout.discounts, rollout.bootstrap_value, 0.95)
    for epoch in (parts[:minibatches], parts[minibatches:]):
        assert all(p.stats.approx_kl < 1e-6 and p.stats.clipfrac == 0 for p in epoch)
        value_loss = sum(p.value_loss.item() for p in epoch) / minibatches
        assert value_loss == pytest.approx(0.5 * advantages.pow(2).mean().item(), rel=1e-4)
        surrogate = sum(p.surrogate.item() for p in epoch) / minibatches
        assert surrogate == pytest.approx(-advantages.mean().item(), rel=1e-4, abs=1e-6)
    assert parts[0].explained_variance == pytest.approx(
        1 - (advantages.var(unbiased=False) / (advantages + rollout.values).var(unbiased=False)).item(), rel=1e-4)


def test_ppo_updates_raise_the_surrogate_only_up_to_the_clip_bound():
    """Repeated updates on one rollout move each clearly advantaged action's probability in its advantage's
    direction, and the surrogate improves until the clip caps it: eq. 7 is at most
    mean((1 + clip) A) over positive advantages and (1 - clip) A over negative ones, however far the ratios go."""
    torch.manual_seed(1)
    model = build_model(model_meta("mlp", [2], 2, 8))
    envs = make_envs([None, None])
    observations = buffer_for(envs, 4)
    rollout, _ = play_rollout(model, envs, observations, model.initial_state(2), GAMMA, "cpu", behaviour=True)
    rollout = rollout._replace(rewards=torch.tensor([[2.0, -2.0], [-2.0, 0.0], [0.0, 2.0], [2.0, -2.0]]))
    args = argparse.Namespace(tau=0.95, value_coef=0.0, entropy_coef=0.0, normalize_advantages=False, bound_coef=0.0,
                              ppo_epochs=300, minibatches=1, value_clip=0.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    losses = []
    for loss, _ in ppo_minibatches(model, observations, rollout, args, 0.0, 0.2, PhaseClock(),
                                   contextlib.nullcontext()):
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    advantages = gae_advantages(rollout.rewards, rollout.values, rollout.discounts, rollout.bootstrap_value, 0.95)
    with torch.no_grad():
        _, logits, _ = model.unroll(observations[:-1], model.initial_state(2))
    ratio = (model.policy.log_prob(logits, rollout.actions) - rollout.log_probs).exp()
    clear = advantages.abs() > 0.5
    assert clear.sum() >= 6 and ((ratio > 1.2) == (advantages > 0))[clear].all()
    assert ((ratio < 0.8) == (advantages < 0))[clear].all()
    bound = -torch.where(advantages > 0, 1.2 * advantages, 0.8 * advantages).mean().item()
    assert losses[0] == pytest.approx(-advantages.mean().item(), rel=1e-4)  # ratio 1 at the first update
    assert bound - 1e-6 <= min(losses) and losses[-1] < losses[0] - 0.5 * (losses[0] - bound)


def test_each_ppo_minibatch_is_computed_on_the_weights_the_previous_update_made():
    """The worker pushes a minibatch's update, pulls the shared weights, and only then is the next minibatch's
    forward run (``ppo_minibatches`` computes it when asked for): forward, update, pull, forward, ... A pull after
    the forward would leave every minibatch one update behind, its own last update missing."""
    torch.manual_seed(0)
    model = build_model(model_meta("mlp", [2], 2, 8))
    envs = make_envs([None, None])
    observations = buffer_for(envs, 4)
    rollout, _ = play_rollout(model, envs, observations, model.initial_state(2), GAMMA, "cpu", behaviour=True)
    events, forward = [], model.forward

    def recorded(*a, **k):
        events.append("forward")
        return forward(*a, **k)

    model.forward = recorded
    args = argparse.Namespace(tau=0.95, value_coef=0.5, entropy_coef=0.01, normalize_advantages=True, bound_coef=0.0,
                              ppo_epochs=2, minibatches=2, value_clip=0.1)
    losses = ppo_minibatches(model, observations, rollout, args, 0.01, 0.1, PhaseClock(), contextlib.nullcontext())
    update = lambda loss, lr: (events.append("update"), (torch.tensor(1.0), True))[1]  # noqa: E731
    grad_norm, applied, parts = push_each(losses, update, 1e-3, lambda: events.append("pull"))
    assert events == ["forward", "update", "pull"] * 4
    assert applied and parts is not None and grad_norm.item() == 1.0
