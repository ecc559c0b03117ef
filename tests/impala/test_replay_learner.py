"""Replay in the learner: the network's features, batches that mix fresh and replayed unrolls (never one twice),
elite scoring with the current network, the trust-region mask in the loss, CLEAR's cloning losses, and a whole
IMPALA run with every replay feature on (elite sampling on features from the inference server)."""

import argparse
import json
import math
import multiprocessing as mp
import time

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from test_impala import fake_batch

from conftest import out_dirs, read_json, run_main
from impala.learner import LearnerStep, build_batch, cloning_losses, impala_loss, replay_scores, replays_for
from impala.replay import ReplayBuffer
from impala.shm import SharedWeights, UnrollStore
from impala.unrolls import column
from model import build_model, feature_size, model_meta
from runtime.config import validate
from runtime.replay_spec import replay_specs
from runtime.run_state import RunState
from shared_optim import optimizer_for

QUEUE = {"type": "queue", "capacity": 1, "sample_ratio": 0.5}


def test_features_are_what_the_heads_read():
    torch.manual_seed(0)
    for meta, obs in ((model_meta("mlplstm", [3], 2, 8), torch.randn(5, 3)),
                      (model_meta("nature", [4, 84, 84], 6, 0), torch.rand(2, 4, 84, 84))):
        model = build_model(meta)
        state = model.initial_state(obs.shape[0])
        value, logits, _, features = model(obs, state, with_features=True)
        assert features.shape == (obs.shape[0], feature_size(meta))
        torch.testing.assert_close(model.actor_linear(features), logits)
        torch.testing.assert_close(model.critic_linear(features).squeeze(-1), value)
        plain = model(obs, state)
        assert len(plain) == 3 and torch.equal(plain[1], logits)  # the A3G path is unchanged
        values, unrolled_logits, _, unrolled = model.unroll(obs.unsqueeze(0), state, with_features=True)
        torch.testing.assert_close(unrolled[0], features)
        assert len(model.unroll(obs.unsqueeze(0), state)) == 3


def fill_store(store, rank, count, start):
    """``count`` committed unrolls of actor ``rank`` whose observations are start, start + 1, ..."""
    slots = store.claim(rank, count)
    for i, slot in enumerate(slots):
        store.obs[slot] = float(start + i)
    store.commit(slots, version=0)


def test_batches_mix_fresh_and_replayed_unrolls_never_twice():
    T, B = 3, 4
    specs = replay_specs('[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, '
                         '{"type": "standard", "capacity": 6, "sample_ratio": 0.5}]', B)
    store = UnrollStore(slots=8, per_actor=8, unroll_length=T, obs_shape=[3], num_actions=2, hidden_size=8)
    replay = ReplayBuffer(specs[1], T, [3], 2, 8, 0)
    model = build_model(model_meta("mlplstm", [3], 2, 8))
    g = torch.Generator().manual_seed(0)
    seen = []
    for step in range(5):
        fill_store(store, 0, 4, start=10 * step)
        need = 2 + (0 if replay.ready() else 2)  # while the replay is empty, its share is fresh too
        fresh = store.take(store.full()[:need])
        batch, _ = build_batch(fresh, [replay], g, 0.0, model, "cpu")
        ids = batch["obs"][0, :, 0].tolist()
        assert len(ids) == B and len(set(ids)) == B  # always --batch-size unrolls, each once
        assert ids[:need] == [10 * step + i for i in range(need)]  # fresh first
        if step > 0:
            assert set(ids[need:]) <= set(seen)  # replayed ones are earlier fresh ones
        for j in range(need):  # after the batch, as the learner does
            replay.put(replay.insert_slot(g), column(fresh, j), step)
        seen += ids[:need]
        store.release(store.full())  # the rest of this step's unrolls: not needed here
    assert len(replay) == 6


def test_elite_score_uses_the_current_network_against_stored_features():
    T = 3
    spec = replay_specs('[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, {"type": "custom", "capacity": 4, '
                        '"sample_ratio": 0.5, "dist_function": "ln_norm", "sample_strategy": "elite_sampling", '
                        '"lambda_batch_multiplier": 2, "elite_sampling_strategy": "strategy1"}]', 4)[1]
    torch.manual_seed(1)
    meta = model_meta("mlplstm", [3], 2, 8)
    model = build_model(meta)
    replay = ReplayBuffer(spec, T, [3], 2, 8, feature_size(meta))
    batch = fake_batch(T, 4, 3, 2, hidden=8)
    _, _, _, features = model.unroll(batch["obs"], (batch["hx"], batch["cx"]), batch["dones"], with_features=True)
    batch["features"] = features[:-1].detach()
    batch["features"][:, 2] += 1.0  # unroll 2's stored features no longer match what the network makes of it
    batch["features"][:, 3] += 0.1
    g = torch.Generator().manual_seed(0)
    for j in range(4):
        replay.put(replay.insert_slot(g), column(batch, j), 1)
    sample_score, elite_score = replay_scores(replay, model, "cpu", batch)
    scores = elite_score(torch.arange(4))
    assert scores[0] < 1e-5 and scores[1] < 1e-5 and scores[3] < scores[2]
    assert torch.isclose(scores[2], torch.tensor(1.0 * (T * 8) ** 0.5), atol=1e-4)
    assert sorted(replay.sample(g, 0.0, sample_score).tolist()) == [0, 1]  # the two reproduced best
    # with --bf16 the current view is taken in bfloat16, as the actors stored theirs: the same ranking here
    _, elite_bf16 = replay_scores(replay, model, "cpu", batch, bf16=True)
    in_bf16 = elite_bf16(torch.arange(4))
    assert not torch.equal(in_bf16, scores)  # taken in bfloat16
    assert in_bf16[3] < in_bf16[2] and max(in_bf16[0], in_bf16[1]) < in_bf16[3]
    assert torch.isclose(in_bf16[2], scores[2], rtol=0.05)


def test_score_steps_ranks_by_the_first_steps_only():
    """``score_steps`` k: the elite distance over the first k steps of each unroll (what drifted later is not
    seen), and the same as the whole unroll's at k = T."""
    T = 4
    text = ('[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, {"type": "custom", "capacity": 4, '
            '"sample_ratio": 0.5, "dist_function": "ln_norm", "sample_strategy": "elite_sampling", '
            '"lambda_batch_multiplier": 2, "elite_sampling_strategy": "strategy1"%s}]')
    torch.manual_seed(2)
    meta = model_meta("mlplstm", [3], 2, 8)
    model = build_model(meta)
    batch = fake_batch(T, 4, 3, 2, hidden=8)
    batch["dones"][1, 1] = 1.0  # an episode starts inside unroll 1's first steps: the state is cut there too
    _, _, _, features = model.unroll(batch["obs"], (batch["hx"], batch["cx"]), batch["dones"], with_features=True)
    batch["features"] = features[:-1].detach()
    batch["features"][:2, 2] += 0.5  # unroll 2 drifted in its first two steps
    batch["features"][2:, 3] += 1.0  # unroll 3 only after them
    scores = {}
    for steps in ("null", 2, T):
        spec = replay_specs(text % f', "score_steps": {steps}', 4)[1]
        replay = ReplayBuffer(spec, T, [3], 2, 8, feature_size(meta))
        g = torch.Generator().manual_seed(0)
        for j in range(4):
            replay.put(replay.insert_slot(g), column(batch, j), 1)
        scores[steps] = replay_scores(replay, model, "cpu", batch)[1](torch.arange(4))
    whole, first = scores["null"], scores[2]
    assert whole[0] < 1e-5 and whole[1] < 1e-5 and first[0] < 1e-5 and first[1] < 1e-5
    assert torch.isclose(whole[3], torch.tensor(1.0 * (2 * 8) ** 0.5), atol=1e-4) and first[3] < 1e-5
    assert torch.isclose(first[2], torch.tensor(0.5 * (2 * 8) ** 0.5), atol=1e-4)
    torch.testing.assert_close(scores[T], whole)


def test_loss_with_the_mask():
    args = argparse.Namespace(gamma=0.9, value_coef=0.5, entropy_coef=0.01, normalize_advantages=False,
                              bound_coef=0.0)
    T, n = 4, 3
    batch = fake_batch(T, n, 3, 4)
    logits = torch.randn(T + 1, n, 4, requires_grad=True)
    values = torch.randn(T + 1, n)
    no_cut = torch.zeros(T, n)
    plain = impala_loss(batch, logits, values, no_cut, args)
    ones = impala_loss(batch, logits, values, no_cut, args, torch.ones(T, n))
    for a, b in zip(plain, ones):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    _, policy_loss, baseline_loss, entropy = impala_loss(batch, logits, values, no_cut, args, torch.zeros(T, n))
    assert policy_loss.item() == 0.0 and baseline_loss.item() == 0.0
    torch.testing.assert_close(entropy, plain[3])  # the entropy bonus keeps every step


def test_cloning_losses_match_the_formula_step_by_step():
    """CLEAR (Rolnick et al. 2019, Section 3): per replayed step, sum_a mu(a) log(mu(a) / pi(a)) and
    (V - V_behaviour)^2, summed over time and averaged over the whole batch; fresh columns add nothing."""
    T, n, A, first_replayed = 4, 5, 3, 2
    batch = fake_batch(T, n, 3, A)
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(T + 1, n, A, generator=g, requires_grad=True)
    values = torch.randn(T + 1, n, generator=g, requires_grad=True)
    policy, value = cloning_losses(batch, logits, values, first_replayed)
    want_policy = want_value = 0.0
    for j in range(first_replayed, n):
        for t in range(T):
            mu = [math.exp(x) for x in batch["logits"][t, j].tolist()]
            pi = [math.exp(x) for x in logits[t, j].tolist()]
            mu, pi = [x / sum(mu) for x in mu], [x / sum(pi) for x in pi]
            want_policy += sum(m * math.log(m / p) for m, p in zip(mu, pi))
            want_value += (values[t, j].item() - batch["values"][t, j].item()) ** 2
    assert math.isclose(policy.item(), want_policy / n, rel_tol=1e-5)
    assert math.isclose(value.item(), want_value / n, rel_tol=1e-5)
    (policy + value).backward()
    assert torch.all(logits.grad[:, :first_replayed] == 0) and torch.all(values.grad[:, :first_replayed] == 0)
    assert torch.all(logits.grad[-1] == 0) and torch.all(values.grad[-1] == 0)  # the bootstrap step is not cloned
    assert logits.grad[:-1, first_replayed:].abs().sum() > 0 and values.grad[:-1, first_replayed:].abs().sum() > 0


def test_cloning_losses_vanish_where_the_learner_still_acts_as_the_actor_did():
    T, n, A = 3, 4, 5
    batch = fake_batch(T, n, 3, A)
    logits = torch.cat([batch["logits"] + 7.0, torch.zeros(1, n, A)])  # a constant added: the same policy
    values = torch.cat([batch["values"], torch.zeros(1, n)])
    policy, value = cloning_losses(batch, logits, values, 0)
    assert abs(policy.item()) < 1e-5 and value.item() == 0.0


def test_an_impala_run_with_every_replay_feature(tmp_path):
    """Elite sampling ranks by the features the inference server now returns, with the trust region and the
    cloning losses on: the run ends normally and says what the mask and the cloning did."""
    elite = {"type": "custom", "capacity": 32, "sample_ratio": 0.5, "dist_function": "ln_norm",
             "sample_strategy": "elite_sampling", "lambda_batch_multiplier": 2, "elite_sampling_strategy": "strategy3"}
    replays = f'[{{"type": "queue", "capacity": 1, "sample_ratio": 0.5}}, {json.dumps(elite)}]'
    result = run_main("--algo", "impala", "--env", "CartPole-v1", "--workers", "2", "--inference", "server",
                      "--replay-parameters", replays, "--kl-mask", "--clone-losses", "--max-frames", "12000",
                      *out_dirs(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = read_json(tmp_path / "run" / "summary.json")
    assert summary["stop_reason"] == "max_frames" and summary["inference_batches"] > 0
    assert summary["masked_of_steps"] > 0 and 0.0 <= summary["masked_fraction"] <= 1.0
    tags = EventAccumulator(str(tmp_path / "run")).Reload().Tags()["scalars"]
    assert {"impala/masked_fraction", "impala/policy_cloning", "impala/value_cloning"} <= set(tags)


def test_a_replaced_learner_anneals_lambda_from_where_the_run_is(tmp_path, monkeypatch):
    """--max-seconds 3 and lambda 6: a learner started 1.8 s into the run (its predecessor died) ranks the
    candidates of a run at least 60% done (lambda 3 or less: at most 6 for 2 picks), not those of a run that has
    just started (11 or 12): the annealing reads the run's time from the shared run state."""
    elite = {"type": "custom", "capacity": 16, "sample_ratio": 0.5, "dist_function": "kl_div",
             "sample_strategy": "elite_sampling", "lambda_batch_multiplier": 6}
    args, settings, meta, _, _ = validate(["--algo", "impala", "--env", "CartPole-v1", "--workers", "1", "--batch-size", "4",
                                    "--max-seconds", "3", "--replay-parameters", json.dumps([QUEUE, elite]),
                                    *map(str, out_dirs(tmp_path))])
    ctx = mp.get_context("spawn")
    state = RunState(ctx, args.workers)  # the run starts
    shared_model = build_model(meta)
    weights, replays = SharedWeights(ctx, shared_model), replays_for(args, settings, meta)
    stored = fake_batch(args.num_steps, 16, 4, 2)
    for j in range(16):
        replays[0].put(j, column(stored, j), 1)
    time.sleep(1.8)  # the first learner ran until here
    step = LearnerStep(args, meta, shared_model, optimizer_for(args, shared_model.parameters(), True), weights, state,
                       replays)
    ranked, candidates = [], replays[0].candidates

    def counted(generator, progress):
        chosen = candidates(generator, progress)
        ranked.append(len(chosen))
        return chosen

    monkeypatch.setattr(replays[0], "candidates", counted)
    step(fake_batch(args.num_steps, step.need, 4, 2), torch.zeros(step.need, dtype=torch.int64))
    assert len(ranked) == 1 and ranked[0] <= 6


def test_the_learner_counts_each_observation_of_an_unroll_once(tmp_path):
    """An unroll's last observation is the first of the next unroll of its environment: the observation statistics
    take the T steps that were acted on, as A3G's workers do, not that shared observation twice."""
    args, settings, meta, _, _ = validate(["--algo", "impala", "--env", "CartPole-v1", "--workers", "1",
                                           "--batch-size", "2", "--obs-norm", *map(str, out_dirs(tmp_path))])
    ctx = mp.get_context("spawn")
    shared_model = build_model(meta)
    step = LearnerStep(args, meta, shared_model, optimizer_for(args, shared_model.parameters(), True),
                       SharedWeights(ctx, shared_model), RunState(ctx, args.workers))
    fresh = fake_batch(args.num_steps, step.need, 4, 2)
    fresh["obs"][-1] = 1000.0  # the next unroll's first observation: it would pull the mean far up
    step(fresh, torch.zeros(step.need, dtype=torch.int64))
    stats = shared_model.obs_norm
    assert float(stats.count) == pytest.approx(1e-4 + args.num_steps * step.need)
    acted_on = fresh["obs"][:-1].reshape(-1, 4).double()
    torch.testing.assert_close(stats.mean.double(), acted_on.mean(0) * (1 - 1e-4 / float(stats.count)),
                               atol=1e-4, rtol=1e-4)
