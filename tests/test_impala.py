"""IMPALA: the unroll store's slots, the learner's forward pass and loss, and real runs with faults injected."""

import argparse
import os
import signal

import pytest
import torch

from conftest import out_dirs, read_json, run_main
from impala import FREE, FULL, WRITING, UnrollStore, impala_loss, learner_forward
from model import build_model, model_meta
from returns import nstep_returns
from test_faults import child_pids, evaluator_games, start_run, wait_for

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
            "logits": torch.randn(T, n, actions, generator=g), "values": torch.randn(T, n, generator=g),
            "hx": torch.zeros(n, hidden),
            "cx": torch.zeros(n, hidden)}


def test_recurrent_learner_forward_equals_stepping_and_resets_at_episode_ends():
    torch.manual_seed(0)
    model = build_model(model_meta("mlplstm", [3], 2, 8))
    dones = torch.zeros(4, 2)
    dones[1, 0] = 1.0  # env 0's episode ends after step 1
    batch = fake_batch(4, 2, 3, 2, dones, hidden=8)
    logits, values = learner_forward(model, batch, "cpu")
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
             "dones": torch.zeros(2, 2)}
    logits, values = learner_forward(model, batch, "cpu")
    value, logit, _ = model(batch["obs"][1], model.initial_state(2))
    torch.testing.assert_close(values[1], value)
    torch.testing.assert_close(logits[1], logit)


def test_bf16_learner_forward_runs_in_bfloat16_and_returns_float32():
    torch.manual_seed(0)
    model = build_model(model_meta("nature", [4, 84, 84], 6, 0))
    batch = {"obs": torch.rand(3, 2, 4, 84, 84), "hx": torch.zeros(2, 0), "cx": torch.zeros(2, 0),
             "dones": torch.zeros(2, 2)}
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


def test_on_policy_loss_is_the_n_step_actor_critic_loss():
    """Behaviour = target policy (log-rhos 0): V-trace targets are n-step returns and the policy gradient weights
    the log-probabilities by r + gamma * v' - V, so the loss is computed from those by hand here."""
    args = argparse.Namespace(gamma=0.9, value_coef=0.5, entropy_coef=0.01)
    T, n = 5, 3
    dones = torch.zeros(T, n)
    dones[2, 1] = 1.0
    batch = fake_batch(T, n, 3, 4, dones)
    logits = torch.randn(T + 1, n, 4, requires_grad=True)
    batch["logits"] = logits[:-1].detach().clone()
    values = torch.randn(T + 1, n)
    loss, policy_loss, baseline_loss, entropy = impala_loss(batch, logits, values, args)
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


@pytest.mark.slow
def test_impala_run_writes_the_same_run_directory_and_resumes_as_a3g(tmp_path):
    first = run_main(*CARTPOLE, "--max-frames", "20000", *out_dirs(tmp_path), timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    run = tmp_path / "run"
    summary = read_json(run / "summary.json")
    assert summary["stop_reason"] == "max_frames" and summary["frames"] >= 20000
    assert {"dropped_unrolls", "actor_waits"} <= set(summary) and summary["skipped_updates"] == 0
    checkpoint = torch.load(run / "checkpoint.pt", weights_only=True)
    assert checkpoint["optimizer"]["state"][0]["step"] > 0  # the learner stepped the shared optimizer
    assert read_json(run / "args.json")["algo"] == "impala"
    # an IMPALA checkpoint continues under A3G: one format for both
    second = run_main("--resume", run, "--algo", "a3g", "--max-frames", "30000", *out_dirs(tmp_path)[2:],
                      timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert read_json(run / "summary.json")["frames"] >= 30000


@pytest.mark.slow
def test_max_policy_lag_drops_and_counts_old_unrolls(tmp_path):
    result = run_main(*CARTPOLE, "--max-policy-lag", "0", "--max-frames", "20000", *out_dirs(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert read_json(tmp_path / "run" / "summary.json")["dropped_unrolls"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("victim, flags", [("actor 0", []), ("learner", []), ("inference", ["--inference", "server"])])
def test_killed_role_is_replaced_and_learning_goes_on(tmp_path, victim, flags):
    proc = start_run(tmp_path, *CARTPOLE, *flags, "--max-seconds", "30")
    wait_for(lambda: evaluator_games(tmp_path) >= 3)
    old_pid = child_pids(tmp_path)[victim]
    os.kill(old_pid, signal.SIGKILL)
    wait_for(lambda: child_pids(tmp_path).get(victim) != old_pid, 15)
    games = evaluator_games(tmp_path)
    wait_for(lambda: evaluator_games(tmp_path) > games + 2, 60)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-2000:]
    assert f"{victim} (pid {old_pid}) was killed by SIGKILL; restarting it" in stderr
    summary = read_json(tmp_path / "run" / "summary.json")
    assert summary["restarts"] == 1 and summary["frames"] > 0
    if victim == "inference":  # the server batched the two actors' steps
        assert 1.0 < summary["inference_mean_batch"] <= 2 * 4 and summary["inference_batches"] > 100


def test_batch_larger_than_the_slots_can_fill_is_bad_input(tmp_path):
    """2 actors x 4 envs, 8 slots each: an actor may hold 3 free slots it cannot claim, so 2 x 5 is the most."""
    result = run_main(*CARTPOLE, "--num-buffers", "16", "--batch-size", "11", *out_dirs(tmp_path), timeout=120)
    assert result.returncode == 2 and "batches of at most 10" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_batch_that_is_not_a_multiple_of_the_envs_does_not_hang(tmp_path):
    """One actor of 4 envs and batches of 7: with 8 slots the actor could be left with 3 free slots (it claims 4
    at once) and the learner with 5 full ones (it waits for 7), for ever. The slots grow to fit the batch."""
    result = run_main(*CARTPOLE, "--workers", "1", "--batch-size", "7", "--max-frames", "10000",
                      *out_dirs(tmp_path), timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    assert read_json(tmp_path / "run" / "summary.json")["stop_reason"] == "max_frames"
