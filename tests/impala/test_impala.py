"""IMPALA: the unroll store's slots, the learner's forward pass and loss, and real runs with faults injected."""

import argparse
import math
import os
import signal

import pytest
import torch

from conftest import (
    child_pids,
    evaluator_games,
    out_dirs,
    read_json,
    run_main,
    start_run,
    stop_run,
    training_games,
    wait_for,
)
from core.policy import Categorical, DiagGaussian
from core.ppo import clipped_value_loss
from core.returns import nstep_returns, vtrace_from_action_log_probs
from envs.environment import EnvSettings, make_env
from impala.acting import Acting
from impala.inference import LocalPolicy
from impala.learner import appo_loss, columns, impala_loss, learner_forward, vtrace_targets
from impala.replay import ReplayBuffer
from impala.shm import FREE, FULL, WRITING, SharedWeights, UnrollStore
from impala.unrolls import column
from model import build_model, model_meta
from runtime.defaults import final_slots

CARTPOLE = ["--algo", "impala", "--env", "CartPole-v1", "--workers", "2", "--no-tensorboard-logger"]


def test_slots_belong_to_one_actor_and_go_oldest_first():
    store = UnrollStore(slots=8, per_actor=4, unroll_length=3, obs_shape=[2], num_actions=2, hidden_size=0)
    first = store.claim(1, 2)
    assert first == [4, 5] and store.status[4:6].tolist() == [WRITING] * 2
    store.obs[first] = 1.0
    store.commit(first, version=7)
    second = store.claim(0, 3)
    store.commit(second, version=9)
    assert store.claim(0, 2) is None  # actor 0 has one free slot left: it cannot take two
    assert store.full().tolist() == [4, 5, 0, 1, 2]  # committed first, taken first
    batch = store.take(store.full()[:2])
    assert batch["obs"].shape == (4, 2, 2) and torch.all(batch["obs"] == 1.0)  # time-major [T + 1, n, ...]
    assert store.status[4:6].tolist() == [FREE] * 2 and store.version[4].item() == 7


def test_a_new_actor_frees_what_its_predecessor_was_writing():
    store = UnrollStore(slots=4, per_actor=2, unroll_length=2, obs_shape=[1], num_actions=2, hidden_size=0)
    store.claim(0, 2)  # actor 0 dies mid-unroll
    store.commit(store.claim(1, 1), 0)
    store.claim(1, 1)  # actor 1 is writing, alive
    store.recover(0)
    assert store.status.tolist() == [FREE, FREE, FULL, WRITING]  # only rank 0's half-written slots, and no others


def fake_batch(T, n, obs_dim, actions, dones=None, hidden=0):
    g = torch.Generator().manual_seed(0)
    return {"obs": torch.randn(T + 1, n, obs_dim, generator=g), "actions": torch.randint(actions, (T, n), generator=g),
            "rewards": torch.randn(T, n, generator=g), "dones": torch.zeros(T, n) if dones is None else dones,
            "truncated": torch.zeros(T, n), "final_obs": torch.zeros(1, n, obs_dim),
            "logits": torch.randn(T, n, actions, generator=g), "values": torch.randn(T, n, generator=g),
            "hx": torch.zeros(n, hidden),
            "cx": torch.zeros(n, hidden)}


def test_recurrent_learner_forward_equals_stepping_and_resets_at_episode_ends():
    torch.manual_seed(0)
    model = build_model(model_meta("mlplstm", [3], 2, 8))
    dones = torch.zeros(4, 2)
    dones[1, 0] = 1.0  # env 0's episode ends after step 1
    batch = fake_batch(4, 2, 3, 2, dones, hidden=8)
    logits, values, _ = learner_forward(model, batch, "cpu")
    assert logits.shape == (5, 2, 2) and values.shape == (5, 2)
    # env 0 from step 2 on is a fresh episode: the same as starting there from a zero state
    fresh_values, _, state = [], None, model.initial_state(1)
    for t in range(2, 5):
        value, _, state = model(batch["obs"][t, :1], state)
        fresh_values.append(value)
    torch.testing.assert_close(values[2:, 0], torch.cat(fresh_values))


def test_feed_forward_learner_forward_is_one_batch():
    torch.manual_seed(0)
    model = build_model(model_meta("nature", [4, 84, 84], 6, 0))
    batch = {"obs": torch.rand(3, 2, 4, 84, 84), "hx": torch.zeros(2, 0), "cx": torch.zeros(2, 0),
             "dones": torch.zeros(2, 2), "truncated": torch.zeros(2, 2), "final_obs": torch.zeros(1, 2, 4, 84, 84)}
    logits, values, _ = learner_forward(model, batch, "cpu")
    value, logit, _ = model(batch["obs"][1], model.initial_state(2))
    torch.testing.assert_close(values[1], value)
    torch.testing.assert_close(logits[1], logit)


def test_bf16_learner_forward_runs_in_bfloat16_and_returns_float32():
    torch.manual_seed(0)
    model = build_model(model_meta("nature", [4, 84, 84], 6, 0))
    batch = {"obs": torch.rand(3, 2, 4, 84, 84), "hx": torch.zeros(2, 0), "cx": torch.zeros(2, 0),
             "dones": torch.zeros(2, 2), "truncated": torch.zeros(2, 2), "final_obs": torch.zeros(1, 2, 4, 84, 84)}
    seen = []
    first = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    first.register_forward_hook(lambda module, inputs, output: seen.append(output.dtype))
    full = learner_forward(model, batch, "cpu")
    half = learner_forward(model, batch, "cpu", bf16=True)
    assert seen == [torch.float32, torch.bfloat16]
    for a, b in zip(full, half):
        assert b.dtype == torch.float32
        torch.testing.assert_close(b, a, atol=0.05, rtol=0.05)
    loss = half[1].sum()
    loss.backward()  # the gradient reaches the float32 weights
    assert first.weight.grad is not None and first.weight.grad.dtype == torch.float32


def test_bound_penalty_in_the_learner_loss_is_the_gaussians_mean_beyond_the_bounds():
    """``--bound-coef`` with a Gaussian policy: the V-trace loss grows by ``coef * mean_n sum_t`` of the target
    policy's ``sum_i max(|mean_i| - 1, 0)^2``, from the definition; the other terms are unchanged."""
    T, n, dim = 4, 3, 2
    policy = DiagGaussian(dim)
    batch = fake_batch(T, n, 3, 2)
    g = torch.Generator().manual_seed(1)
    batch["actions"] = torch.randn(T, n, dim, generator=g)
    batch["logits"] = torch.randn(T, n, 2 * dim, generator=g)
    logits = torch.cat([2.0 * torch.randn(T + 1, n, dim, generator=g), torch.zeros(T + 1, n, dim)], -1)
    values = torch.randn(T + 1, n, generator=g)
    args = argparse.Namespace(gamma=0.9, value_coef=0.5, entropy_coef=0.01, normalize_advantages=False,
                              bound_coef=0.0)
    plain = impala_loss(batch, logits, values, torch.zeros(T, n), args, policy=policy)
    args.bound_coef = 0.2
    bounded = impala_loss(batch, logits, values, torch.zeros(T, n), args, policy=policy)
    means = logits[:-1, :, :dim].tolist()
    want = 0.2 * sum(max(abs(m) - 1.0, 0.0) ** 2 for t in range(T) for b in range(n) for m in means[t][b]) / n
    assert want > 0
    torch.testing.assert_close(bounded[0] - plain[0], torch.tensor(want), rtol=1e-5, atol=1e-6)
    for i in (1, 2, 3):
        torch.testing.assert_close(bounded[i], plain[i])


def on_policy_batch(T, n, done_at):
    """A batch of n unrolls of T steps (3 observations, 4 actions) with one episode end at ``done_at`` (step,
    unroll), the learner's logits ``[T + 1, n, 4]`` (requiring grad) the behaviour's too, and values ``[T + 1, n]``."""
    dones = torch.zeros(T, n)
    dones[done_at] = 1.0
    batch = fake_batch(T, n, 3, 4, dones)
    logits = torch.randn(T + 1, n, 4, requires_grad=True)
    batch["logits"] = logits[:-1].detach().clone()
    return batch, dones, logits, torch.randn(T + 1, n)


def test_on_policy_loss_is_the_n_step_actor_critic_loss():
    """Behaviour = target policy (log-rhos 0): V-trace targets are n-step returns and the policy gradient weights
    the log-probabilities by r + gamma * v' - V, so the loss is computed from those by hand here."""
    args = argparse.Namespace(gamma=0.9, value_coef=0.5, entropy_coef=0.01, normalize_advantages=False,
                              bound_coef=0.0)
    T, n = 5, 3
    batch, dones, logits, values = on_policy_batch(T, n, done_at=(2, 1))
    loss, policy_loss, baseline_loss, entropy = impala_loss(batch, logits, values, torch.zeros(T, n), args)
    discounts = 0.9 * (1 - dones)
    vs = nstep_returns(batch["rewards"], discounts, values[-1])
    next_vs = torch.cat([vs[1:], values[-1:]])
    advantages = batch["rewards"] + discounts * next_vs - values[:-1]
    log_probs = torch.log_softmax(logits[:-1], -1).gather(2, batch["actions"].unsqueeze(2)).squeeze(2)
    torch.testing.assert_close(policy_loss, -(log_probs * advantages).sum(0).mean())
    torch.testing.assert_close(baseline_loss, 0.5 * (vs - values[:-1]).pow(2).sum(0).mean())
    probs = torch.softmax(logits[:-1], -1)
    torch.testing.assert_close(entropy, -(probs * probs.log()).sum(-1).sum(0).mean())
    torch.testing.assert_close(loss, policy_loss + 0.5 * baseline_loss - 0.01 * entropy)


def test_appo_loss_at_the_behaviour_policy_is_the_v_trace_loss_per_step():
    """--objective ppo (APPO) on an on-policy batch (ratio 1) whose values are those the value clip keeps near: the
    surrogate's gradient is V-trace's policy gradient, and the value loss its baseline loss, each divided by the
    T x n steps (PPO's means against V-trace's sums over time averaged over unrolls); with the behaviour policy
    shifted, the ratio leaves 1 and the clip fraction counts what left the range."""
    args = argparse.Namespace(gamma=0.9, value_coef=0.5, entropy_coef=0.01, normalize_advantages=False,
                              bound_coef=0.0, value_clip=0.1)
    T, n = 5, 4
    batch, _, logits, values = on_policy_batch(T, n, done_at=(1, 2))
    values.requires_grad_()
    policy = Categorical(4)
    loss, stats, (surrogate, value_loss, entropy) = appo_loss(batch, logits, values, torch.zeros(T, n),
                                                              values[:-1].detach(), args, policy, 0.01, 0.2)
    _, policy_loss, baseline_loss, vtrace_entropy = impala_loss(batch, logits, values, torch.zeros(T, n), args)
    assert stats.approx_kl == pytest.approx(0.0, abs=1e-7) and stats.clipfrac == 0.0
    (appo_grad,) = torch.autograd.grad(surrogate, logits, retain_graph=True)
    (vtrace_grad,) = torch.autograd.grad(policy_loss, logits, retain_graph=True)
    torch.testing.assert_close(appo_grad * T, vtrace_grad)
    torch.testing.assert_close(value_loss * T, baseline_loss)
    torch.testing.assert_close(entropy * T, vtrace_entropy)
    torch.testing.assert_close(loss, surrogate + 0.5 * value_loss - 0.01 * entropy)
    batch["logits"] = batch["logits"] + torch.randn(T, n, 4, generator=torch.Generator().manual_seed(1))
    _, stats, _ = appo_loss(batch, logits, values, torch.zeros(T, n), values[:-1].detach(), args, policy, 0.01, 0.2)
    assert stats.approx_kl > 0 and 0 < stats.clipfrac <= 1


def test_appo_loss_with_kept_targets_is_the_recomputed_one_until_the_weights_move():
    """--ppo-targets keep: the V-trace targets and advantages of the whole batch, taken once and sliced to a
    minibatch's unrolls, give the recomputed loss (value and gradients) at the weights they were taken with (each
    unroll's V-trace is its own); once the critic has moved, the recomputed surrogate follows it and the kept one
    does not, and the kept value loss still regresses to the kept targets."""
    args = argparse.Namespace(gamma=0.9, value_coef=0.5, entropy_coef=0.01, normalize_advantages=True,
                              bound_coef=0.0, value_clip=0.1)
    T, n = 6, 4
    batch, _, logits, values = on_policy_batch(T, n, done_at=(2, 1))
    batch["logits"] = batch["logits"] + 0.3 * torch.randn(T, n, 4, generator=torch.Generator().manual_seed(2))
    policy, cut, index = Categorical(4), torch.zeros(T, n), torch.tensor([0, 2])
    whole = vtrace_targets(batch, logits.detach(), values, cut, args.gamma, None, policy)
    kept = (whole.vs[:, index], whole.pg_advantages[:, index])
    part, old = columns(batch, index), values[:-1, index]

    def losses(part_values, kept):
        part_values = part_values.clone().requires_grad_()
        part_logits = logits[:, index]
        loss, _, (surrogate, value_loss, _) = appo_loss(part, part_logits, part_values, cut[:, index], old, args,
                                                        policy, 0.01, 0.2, kept)
        return (loss, surrogate, value_loss, *torch.autograd.grad(loss, (logits, part_values)))

    for recomputed, with_kept in zip(losses(values[:, index], None), losses(values[:, index], kept)):
        torch.testing.assert_close(recomputed, with_kept)
    moved = values[:, index] + 1.0
    _, surrogate, _, _, _ = losses(moved, None)
    _, kept_surrogate, kept_value_loss, _, _ = losses(moved, kept)
    assert not torch.allclose(surrogate, kept_surrogate)
    torch.testing.assert_close(kept_surrogate, losses(values[:, index], kept)[1])
    torch.testing.assert_close(kept_value_loss, clipped_value_loss(moved[:-1], old, kept[0], 0.1))


def test_normalized_advantages_in_the_v_trace_loss_leave_masked_steps_out():
    """--normalize-advantages with IMPALA: on-policy, the policy gradient's advantages (r + gamma * v' - V, as
    above) normalised over the steps the trust-region mask keeps; a dropped step's stays 0; the baseline loss is
    the masked loss without normalisation."""
    plain_args = argparse.Namespace(gamma=0.9, value_coef=0.5, entropy_coef=0.01, normalize_advantages=False,
                                    bound_coef=0.0)
    args = argparse.Namespace(**{**vars(plain_args), "normalize_advantages": True})
    T, n = 5, 3
    batch = fake_batch(T, n, 3, 4, torch.zeros(T, n))
    logits = torch.randn(T + 1, n, 4)
    batch["logits"] = logits[:-1].clone()
    values = torch.randn(T + 1, n)
    mask = torch.ones(T, n)
    mask[3:, 0] = 0.0
    mask[1, 2] = 0.0
    _, policy_loss, baseline_loss, _ = impala_loss(batch, logits, values, torch.zeros(T, n), args, mask)
    _, _, plain_baseline, _ = impala_loss(batch, logits, values, torch.zeros(T, n), plain_args, mask)
    vtrace = vtrace_from_action_log_probs(torch.zeros(T, n), torch.zeros(T, n), 0.9 * torch.ones(T, n),
                                          batch["rewards"], values[:-1], values[-1], mask=mask)
    kept = vtrace.pg_advantages[mask == 1]
    expected = mask * (vtrace.pg_advantages - kept.mean()) / (kept.std(unbiased=False) + 1e-8)
    log_probs = torch.log_softmax(logits[:-1], -1).gather(2, batch["actions"].unsqueeze(2)).squeeze(2)
    torch.testing.assert_close(policy_loss, -(log_probs * expected).sum(0).mean())
    torch.testing.assert_close(baseline_loss, plain_baseline)

def cut_unroll(T=8, limit=3, envs=2, gamma=0.9):
    """A real CartPole actor's unroll with every episode cut by ``--max-episode-length limit`` (CartPole lasts
    longer than 3 steps), through a slot of the store as the learner takes it; the actor's critic says 7 for
    everything, so that a value of its baked into a reward would show."""
    args = argparse.Namespace(envs_per_worker=envs, num_steps=T, seed=3, reward_clipping="none", gamma=gamma,
                              frames_per_step=1)
    settings = EnvSettings("CartPole-v1", max_episode_length=limit)
    meta = model_meta("mlplstm", [4], 2, 8)
    torch.manual_seed(0)
    actor_model = build_model(meta)
    torch.nn.init.constant_(actor_model.critic_linear.bias, 7.0)
    policy = LocalPolicy(actor_model, SharedWeights(torch.multiprocessing.get_context("spawn"), actor_model))
    unroll, _, _ = Acting(args, settings, meta, policy, 0, 0, False).unroll()
    store = UnrollStore(envs, envs, T, [4], 2, 8, 0, final_slots=final_slots(settings, T))
    store.write(store.claim(0, envs), unroll)
    return store.take(list(range(envs))), settings, meta


def test_an_unroll_keeps_the_environment_rewards_and_the_observations_a_time_limit_cut_at():
    """Episodes cut at steps 2 and 5 (limit 3, T 8: K = 3 rows for the cut observations): rewards stay CartPole's
    1s, the cut steps are flagged, and the stored cut observations are those a replay of the same actions in a
    fresh environment reaches (while the next observation already begins the next episode)."""
    batch, settings, _ = cut_unroll()
    assert batch["final_obs"].shape == (3, 2, 4)
    assert torch.equal(batch["rewards"], torch.ones(8, 2))  # no value of the actor's baked in
    cut = torch.zeros(8, 2)
    cut[[2, 5]] = 1.0
    assert torch.equal(batch["truncated"], cut) and torch.equal(batch["dones"], cut)
    for j in range(2):
        env = make_env(settings)
        obs, _ = env.reset(seed=3 + 10007 * j)
        for t in range(8):
            torch.testing.assert_close(batch["obs"][t, j], torch.from_numpy(obs))
            obs, _, _, truncated, _ = env.step(int(batch["actions"][t, j]))
            assert truncated == bool(cut[t, j])
            if truncated:
                torch.testing.assert_close(batch["final_obs"][t // 3, j], torch.from_numpy(obs))
                obs, _ = env.reset()


def slow_vtrace_with_cuts(model, batch, gamma):
    """V-trace from the formula, one step at a time (Espeholt et al. 2018, eq. 1, rho-bar = c-bar = 1):
    ``vs_t = V(x_t) + delta_t + gamma_t c_t (vs_{t+1} - V(x_{t+1}))`` with ``delta_t = rho_t (r_t + gamma V' -
    V(x_t))``, where V' is V(x_{t+1}) within an episode, 0 after a terminal step and the model's value of the cut
    observation after a step a time limit cut, from the recurrent state the episode would have gone on with."""
    T, n = batch["actions"].shape
    vs = torch.zeros(T, n)
    for j in range(n):
        state = (batch["hx"][j:j + 1], batch["cx"][j:j + 1])
        values, next_values, rhos, cuts = [], [], [], 0
        for t in range(T + 1):
            value, logits, after = model(batch["obs"][t, j:j + 1], state)
            values.append(value.item())
            if t == T:
                break
            log_pi = torch.log_softmax(logits[0], -1)[batch["actions"][t, j]]
            log_mu = torch.log_softmax(batch["logits"][t, j], -1)[batch["actions"][t, j]]
            rhos.append(min(1.0, math.exp((log_pi - log_mu).item())))
            if batch["truncated"][t, j]:
                next_values.append(model(batch["final_obs"][cuts, j:j + 1], after)[0].item())
                cuts += 1
            else:
                next_values.append(None)  # V(x_{t+1}), known next step
            keep = 1.0 - batch["dones"][t, j].item()
            state = (after[0] * keep, after[1] * keep)
        following = values[T]
        for t in reversed(range(T)):
            done = batch["dones"][t, j].item()
            bootstrap = next_values[t] if next_values[t] is not None else (0.0 if done else values[t + 1])
            delta = rhos[t] * (batch["rewards"][t, j].item() + gamma * bootstrap - values[t])
            vs[t, j] = values[t] + delta + gamma * (1.0 - done) * rhos[t] * (following - values[t + 1])
            following = vs[t, j].item()
    return vs


def test_the_learner_bootstraps_a_cut_episode_from_its_own_value_of_the_stored_observation():
    """The learner (other weights than the actor's) gets each cut step's target from its own value of the stored
    cut observation, whatever the actor's critic said: its V-trace targets equal the formula's."""
    batch, _, meta = cut_unroll()
    torch.manual_seed(1)
    learner_model = build_model(meta)
    logits, values, cut = learner_forward(learner_model, batch, "cpu")
    assert torch.count_nonzero(cut).item() == 4 and torch.all(cut[batch["truncated"] == 0] == 0)
    with torch.no_grad():
        want = slow_vtrace_with_cuts(learner_model, batch, 0.9)
    got = vtrace_targets(batch, logits.detach(), values.detach(), cut, 0.9).vs
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # replayed later, by a learner whose weights moved on: the cut steps bootstrap from its values now
    replay = ReplayBuffer({"type": "standard", "capacity": 2, "count": 2}, 8, [4], 2, 8, 0, final_slots=3)
    for j in range(2):
        replay.put(j, column(batch, j), 1)
    torch.nn.init.constant_(learner_model.critic_linear.bias, -3.0)
    replayed = replay.take([1, 0])
    logits, values, cut = learner_forward(learner_model, replayed, "cpu")
    with torch.no_grad():
        want = slow_vtrace_with_cuts(learner_model, replayed, 0.9)
    torch.testing.assert_close(vtrace_targets(replayed, logits.detach(), values.detach(), cut, 0.9).vs, want,
                               rtol=1e-5, atol=1e-5)


def test_impala_run_writes_the_same_run_directory_and_resumes_as_a3g(tmp_path):
    first = run_main(*CARTPOLE, "--max-frames", "6000", *out_dirs(tmp_path), timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    run = tmp_path / "run"
    summary = read_json(run / "summary.json")
    assert summary["stop_reason"] == "max_frames" and summary["frames"] >= 6000
    assert {"dropped_unrolls", "actor_waits"} <= set(summary) and summary["skipped_updates"] == 0
    checkpoint = torch.load(run / "checkpoint.pt", weights_only=True)
    assert checkpoint["optimizer"]["state"][0]["step"] > 0  # the learner stepped the shared optimizer
    assert read_json(run / "args.json")["algo"] == "impala"
    # an IMPALA checkpoint continues under A3G: one format for both
    target = summary["frames"] + 4000  # past where the first run stopped (a few unrolls past its budget)
    second = run_main("--resume", run, "--algo", "a3g", "--max-frames", target, *out_dirs(tmp_path)[2:],
                      timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert read_json(run / "summary.json")["frames"] >= target


@pytest.mark.parametrize("objective", [["--clone-losses"], ["--objective", "ppo"]])
def test_a_run_whose_episodes_a_time_limit_cuts_learns_values_beyond_the_cut(tmp_path, objective):
    """--max-episode-length 5 with unrolls of 20 steps (4 cuts an unroll, each bootstrapped by the learner), through
    the inference server and a replay, with the cloning losses or PPO's epochs over each batch (APPO): the run ends
    normally, and the critic values CartPole's start well above 5, the most an episode cut at 5 steps could return
    if a cut were the end."""
    replays = ('[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, '
               '{"type": "standard", "capacity": 64, "sample_ratio": 0.5}]')
    result = run_main(*CARTPOLE, "--max-episode-length", "5", "--num-steps", "20", "--inference", "server",
                      "--replay-parameters", replays, *objective, "--max-frames", "20000", *out_dirs(tmp_path),
                      timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert read_json(tmp_path / "run" / "summary.json")["stop_reason"] == "max_frames"
    checkpoint = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    model = build_model(checkpoint["model_meta"])
    model.load_state_dict(checkpoint["state_dict"])
    env = make_env(EnvSettings("CartPole-v1"))
    starts = torch.stack([torch.from_numpy(env.reset(seed=seed)[0]) for seed in range(10)])
    with torch.no_grad():
        values, _, _ = model(starts, model.initial_state(10))
    assert values.min().item() > 5.0


def test_max_policy_lag_drops_and_counts_old_unrolls(tmp_path):
    result = run_main(*CARTPOLE, "--max-policy-lag", "0", "--max-frames", "6000", *out_dirs(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert read_json(tmp_path / "run" / "summary.json")["dropped_unrolls"] > 0


@pytest.mark.parametrize("victim, flags", [("actor 0", []), ("learner", []), ("inference", ["--inference", "server"])])
def test_killed_role_is_replaced_and_learning_goes_on(tmp_path, victim, flags):
    proc = start_run(tmp_path, *CARTPOLE, *flags, "--max-seconds", "900")  # stopped once it has played on
    # the actors' unrolls arriving (training games), and the evaluator playing the learner's weights
    wait_for(lambda: training_games(tmp_path) >= 5 and evaluator_games(tmp_path) >= 3)
    old_pid = child_pids(tmp_path)[victim]
    os.kill(old_pid, signal.SIGKILL)
    wait_for(lambda: child_pids(tmp_path).get(victim) != old_pid, 15)
    games, played = evaluator_games(tmp_path), training_games(tmp_path)
    wait_for(lambda: training_games(tmp_path) > played + 5 and evaluator_games(tmp_path) > games + 2, 60)
    stdout, stderr = stop_run(proc)
    assert proc.returncode == 130, stderr[-2000:]
    assert f"{victim} (pid {old_pid}) was killed by SIGKILL; restarting it" in stderr
    summary = read_json(tmp_path / "run" / "summary.json")
    assert summary["restarts"] == 1 and summary["frames"] > 0
    if victim == "inference":  # the server batched the two actors' steps
        assert 1.0 < summary["inference_mean_batch"] <= 2 * 4 and summary["inference_batches"] > 20


def test_batch_larger_than_the_slots_can_fill_is_bad_input(tmp_path):
    """2 actors x 4 envs, 8 slots each: an actor may hold 3 free slots it cannot claim, so 2 x 5 is the most."""
    result = run_main(*CARTPOLE, "--num-buffers", "16", "--batch-size", "11", *out_dirs(tmp_path), timeout=120)
    assert result.returncode == 2 and "batches of at most 10" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_a_batch_that_is_not_a_multiple_of_the_envs_does_not_hang(tmp_path):
    """One actor of 4 envs and batches of 7: with 8 slots the actor could be left with 3 free slots (it claims 4
    at once) and the learner with 5 full ones (it waits for 7), for ever. The slots grow to fit the batch."""
    result = run_main(*CARTPOLE, "--workers", "1", "--batch-size", "7", "--max-frames", "4000",
                      *out_dirs(tmp_path), timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    assert read_json(tmp_path / "run" / "summary.json")["stop_reason"] == "max_frames"
