"""Replay: distances against numpy, the elite strategies' picks on crafted data, the store's sampling and
insertion, and --replay-parameters parsing (in process here; through the command line in test_replay_cli.py)."""

import json

import numpy as np
import pytest
import torch

from core.errors import BadInput
from impala.replay import ReplayBuffer, annealed_lambda, concat, cos_dist, elite_picks, kl_div, ln_norm, slot_bytes
from impala.unrolls import column, policy_layout
from model import model_meta
from runtime.replay_spec import replay_specs


@pytest.mark.parametrize("p", [1, 2, 3])
def test_ln_norm_matches_numpy(p):
    rng = np.random.default_rng(p)
    a, b = rng.normal(size=(5, 4, 7)), rng.normal(size=(5, 4, 7))
    want = [np.sum(np.abs(a[i] - b[i]) ** p) ** (1.0 / p) for i in range(5)]
    np.testing.assert_allclose(ln_norm(torch.from_numpy(a), torch.from_numpy(b), p).numpy(), want, rtol=1e-12)
    if p == 2:
        np.testing.assert_allclose(want, [np.linalg.norm((a[i] - b[i]).ravel()) for i in range(5)])


def test_cos_dist_is_a_distance():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(6, 3, 4)), rng.normal(size=(6, 3, 4))
    want = [1 - a[i].ravel() @ b[i].ravel() / (np.linalg.norm(a[i]) * np.linalg.norm(b[i])) for i in range(6)]
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    np.testing.assert_allclose(cos_dist(ta, tb).numpy(), want, rtol=1e-10)
    np.testing.assert_allclose(cos_dist(ta, ta).numpy(), 0.0, atol=1e-12)  # identical: distance 0
    np.testing.assert_allclose(cos_dist(ta, -ta).numpy(), 2.0, atol=1e-12)
    np.testing.assert_allclose(cos_dist(ta, 3.0 * ta).numpy(), 0.0, atol=1e-12)  # direction only
    # ranked as a distance: the candidate pointing the same way as the reference comes first (elite_buffer_vtrace
    # sorted the similarity ascending and picked the most drifted)
    reference = ta[:1]
    candidates = torch.stack([-ta[0], ta[0] + 0.01 * tb[0], tb[0]])
    assert cos_dist(candidates, reference).argmin().item() == 1


def test_kl_div_matches_numpy_and_ignores_constants():
    rng = np.random.default_rng(1)
    pi, mu = rng.normal(size=(4, 3, 5)), rng.normal(size=(4, 3, 5))

    def softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    p, q = softmax(pi), softmax(mu)
    want = (p * np.log(p / q)).sum(-1).sum(-1)
    got = kl_div(torch.from_numpy(pi), torch.from_numpy(mu))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10)
    np.testing.assert_allclose(kl_div(torch.from_numpy(pi) + 8.2, torch.from_numpy(pi)).numpy(), 0.0, atol=1e-12)


# Twelve candidates with known distances and sample counts, three picks. Sorted by distance they are (position,
# distance, count): (5, .05, 2) (1, .1, 3) (7, .2, 0) (3, .3, 0) | (9, .4, 1) (2, .5, 1) (10, .6, 0) (6, .7, 1) |
# (11, .8, 1) (0, .9, 0) (8, 1.0, 2) (4, 1.2, 0), the bars splitting them into three subsets for strategies 2 and 4.
DISTANCES = torch.tensor([0.9, 0.1, 0.5, 0.3, 1.2, 0.05, 0.7, 0.2, 1.0, 0.4, 0.6, 0.8])
COUNTS = torch.tensor([0, 3, 1, 0, 0, 2, 1, 0, 2, 1, 0, 1])
EXPECTED = {
    "strategy1": [5, 1, 7],  # the three lowest distances
    "strategy2": [5, 9, 11],  # the lowest distance of each subset
    "strategy3": [7, 3, 10],  # never-sampled ones first (count 0: 7, 3, 10, 0, 4), lowest distance among them
    "strategy4": [7, 10, 0],  # the least-sampled of each subset (ties to the lower distance: 7 before 3)
}


@pytest.mark.parametrize("strategy", sorted(EXPECTED))
def test_elite_strategies_on_crafted_candidates(strategy):
    assert elite_picks(strategy, DISTANCES, COUNTS, 3).tolist() == EXPECTED[strategy]


def test_elite_strategies_with_uneven_subsets_and_all_equal_counts():
    """No count equals 1 here (elite_buffer_vtrace's strategy 3 looped for ever on that); 12 into 5 subsets."""
    counts = torch.full((12,), 4)
    assert elite_picks("strategy3", DISTANCES, counts, 3).tolist() == EXPECTED["strategy1"]
    picks = elite_picks("strategy2", DISTANCES, counts, 5).tolist()
    assert len(set(picks)) == 5 and picks[0] == 5
    for strategy in EXPECTED:  # as many candidates as picks: each is picked once
        assert sorted(elite_picks(strategy, DISTANCES[:3], COUNTS[:3], 3).tolist()) == [0, 1, 2]


def test_lambda_anneals_linearly_to_one():
    assert annealed_lambda(6, 1.0, 0.0) == 6
    assert annealed_lambda(6, 1.0, 0.5) == pytest.approx(3.5)
    assert annealed_lambda(6, 1.0, 1.0) == 1
    assert annealed_lambda(6, 2.0, 1.0) == pytest.approx(3.5)  # alfa 2: half as fast
    assert annealed_lambda(6, 0.5, 0.6) == 1 and annealed_lambda(1, 1.0, 0.3) == 1


def spec(**extra):
    base = {"type": "custom", "capacity": 8, "sample_ratio": 0.5, "dist_function": "ln_norm", "p": 2,
            "sample_strategy": "elite_sampling", "insert_strategy": None, "lambda_batch_multiplier": 3,
            "alfa_annealing_factor": 1.0, "elite_sampling_strategy": "strategy1", "elite_batch_size": 2, "count": 2}
    return {**base, **extra}


def fake_unrolls(n, T=3, obs=2, actions=2, start=0.0):
    """n unrolls, time-major; unroll j's observations are all start + j (to tell them apart)."""
    values = start + torch.arange(n, dtype=torch.float32)
    return {"obs": values.reshape(1, n, 1).expand(T + 1, n, obs).clone(),
            "actions": torch.zeros(T, n, dtype=torch.int64), "rewards": torch.zeros(T, n),
            "dones": torch.zeros(T, n), "truncated": torch.zeros(T, n), "final_obs": torch.zeros(1, n, obs),
            "logits": torch.zeros(T, n, actions), "values": torch.zeros(T, n),
            "hx": torch.zeros(n, 0),
            "cx": torch.zeros(n, 0), "features": values.reshape(1, n, 1).expand(T, n, 4).clone()}


def fill(buffer, batch, generator, score=None, step=1):
    for j in range(batch["obs"].shape[1]):
        buffer.put(buffer.insert_slot(generator, score), column(batch, j), step)


def test_fifo_store_and_uniform_distinct_samples():
    g = torch.Generator().manual_seed(0)
    buffer = ReplayBuffer(spec(type="standard", capacity=4, count=3), 3, [2], 2, 0, 4)
    assert buffer.features.shape == (4, 3, 0) and buffer.obs.is_shared()
    fill(buffer, fake_unrolls(6), g)  # 6 into 4 slots: 4 and 5 overwrite the oldest, 0 and 1
    assert len(buffer) == 4 and sorted(buffer.obs[:, 0, 0].tolist()) == [2.0, 3.0, 4.0, 5.0]
    for _ in range(20):
        picks = buffer.sample(g)
        assert len(set(picks.tolist())) == 3
    assert buffer.sample_count.sum().item() == 60
    batch = buffer.take(picks)
    assert batch["obs"].shape == (4, 3, 2) and batch["hx"].shape == (3, 0)


def test_a_write_cut_short_is_never_sampled_and_is_written_first():
    """A learner killed in the middle of ``put`` (here: an unroll whose last fields are missing) leaves the slot
    half-written: it is not sampled, does not count towards ``ready``, and the next insert rewrites it."""
    g = torch.Generator().manual_seed(2)
    buffer = ReplayBuffer(spec(type="standard", capacity=3, count=2), 3, [2], 2, 0, 4)
    fill(buffer, fake_unrolls(3), g)  # slots 0, 1, 2 hold unrolls 0, 1, 2; the next FIFO overwrite is slot 0
    broken = {k: v for k, v in column(fake_unrolls(1, start=7.0), 0).items() if k not in ("hx", "cx")}
    with pytest.raises(KeyError):
        buffer.put(buffer.insert_slot(g), broken, step=2)
    assert buffer.obs[0, 0, 0].item() == 7.0  # half-written: new observations, the old unroll's states
    for _ in range(20):
        assert 0 not in buffer.sample(g).tolist()
    assert buffer.ready() and buffer.sample_count[0].item() == 0
    fill(buffer, fake_unrolls(1, start=8.0), g, step=3)
    assert buffer.obs[0, 0, 0].item() == 8.0 and buffer.inserted[0].item() == 3 and buffer.writing.item() == -1
    fill(buffer, fake_unrolls(1, start=9.0), g, step=4)  # then FIFO goes on where it was: slot 1
    assert buffer.obs[:, 0, 0].tolist() == [8.0, 9.0, 2.0]
    assert {0, 1} & set(buffer.sample(g).tolist())


def test_a_write_cut_after_its_slot_was_counted_keeps_the_fifo_order():
    """Killed between counting a new slot and clearing ``writing``: the rewrite does not move the FIFO cursor, so
    once the buffer is full the oldest slot, 0, is still the first overwritten."""
    g = torch.Generator().manual_seed(4)
    buffer = ReplayBuffer(spec(type="standard", capacity=3, count=1), 3, [2], 2, 0, 4)
    fill(buffer, fake_unrolls(1), g)
    buffer.writing[0] = 0  # as a learner killed at the end of put(0) leaves it
    fill(buffer, fake_unrolls(3, start=1.0), g)  # slot 0 again, then 1 and 2
    fill(buffer, fake_unrolls(1, start=9.0), g)
    assert buffer.obs[:, 0, 0].tolist() == [9.0, 2.0, 3.0]


def test_a_half_written_slot_is_not_counted_as_ready():
    g = torch.Generator().manual_seed(3)
    buffer = ReplayBuffer(spec(type="standard", capacity=2, count=2), 3, [2], 2, 0, 4)
    fill(buffer, fake_unrolls(2), g)
    buffer.writing[0] = 1  # as a learner killed writing slot 1 leaves it
    assert not buffer.ready()


def test_elite_sampling_takes_the_closest_and_counts_them():
    g = torch.Generator().manual_seed(1)
    buffer = ReplayBuffer(spec(capacity=8, count=2, lambda_batch_multiplier=4), 3, [2], 2, 0, 4)
    fill(buffer, fake_unrolls(8), g)
    # the "current network" reproduces the features of slots 6 and 3 best
    current = {6: 0.0, 3: 0.1}
    picked = buffer.sample(g, progress=0.0, score=lambda slots: torch.tensor([current.get(int(s), 5.0 + int(s))
                                                                              for s in slots]))
    # 8 candidates (lambda 4 x 2, all the slots): the two closest
    assert sorted(picked.tolist()) == [3, 6]
    assert buffer.sample_count[[3, 6]].tolist() == [1, 1] and buffer.sample_count.sum().item() == 2


def test_elite_sampling_ranks_lambda_6_candidates_per_pick_by_default():
    """Without lambda_batch_multiplier, elite sampling ranks 6 x count random candidates (elite_buffer_vtrace's
    README's lambda) and picks the closest; a default of 1 made the candidates the picks, never scored."""
    entry = {"type": "custom", "capacity": 16, "sample_ratio": 0.5, "dist_function": "ln_norm",
             "sample_strategy": "elite_sampling", "elite_sampling_strategy": "strategy1"}
    ranked = replay_specs(json.dumps([{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, entry]), 4)[1]
    g = torch.Generator().manual_seed(4)
    buffer = ReplayBuffer(ranked, 3, [2], 2, 0, 4)
    fill(buffer, fake_unrolls(16), g)
    scored = []

    def score(slots):  # the distance of slot s is s: the closest are the lowest slots
        scored.append(slots.tolist())
        return slots.float()

    picks = buffer.sample(g, progress=0.0, score=score)
    assert len(scored) == 1 and len(set(scored[0])) == 12  # lambda 6 x 2 picks, distinct
    assert picks.tolist() == sorted(scored[0])[:2]


@pytest.mark.parametrize("lam, batch", [(1, 4), (1.4, 4), (1.4, 10)])
def test_a_sample_strategy_that_would_rank_only_its_picks_is_refused(lam, batch):
    """lambda x count candidates for count picks: 1 x 2, or 1.4 x 2 = 2.8 -> 2, leave nothing to rank (1.4 x 5 = 7
    candidates for 5 picks is fine, and so is any lambda without a sample_strategy)."""
    entry = {"type": "custom", "capacity": 16, "sample_ratio": 0.5, "dist_function": "kl_div",
             "sample_strategy": "attentive_sampling", "lambda_batch_multiplier": lam}
    text = json.dumps([{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, entry])
    if batch == 10:
        assert replay_specs(text, batch)[1]["count"] == 5
        return
    with pytest.raises(ValueError, match=r"entry 2 \(custom\): 'lambda_batch_multiplier' .* more candidates than picks"):
        replay_specs(text, batch)
    unranked = text.replace('"sample_strategy": "attentive_sampling"',
                            '"insert_strategy": "elite_insertion", "elite_batch_size": 8')
    assert replay_specs(unranked, batch)[1]["lambda_batch_multiplier"] == lam


@pytest.mark.parametrize("strategy", sorted(EXPECTED))
def test_buffer_of_exactly_count_slots_neither_hangs_nor_crashes(strategy):
    g = torch.Generator().manual_seed(2)
    buffer = ReplayBuffer(spec(capacity=3, count=3, lambda_batch_multiplier=6, elite_sampling_strategy=strategy),
                          3, [2], 2, 0, 4)
    fill(buffer, fake_unrolls(3), g)
    for progress in (0.0, 0.5, 1.0):
        picks = buffer.sample(g, progress, score=lambda slots: torch.rand(len(slots), generator=g))
        assert sorted(picks.tolist()) == [0, 1, 2]


def test_elite_insertion_overwrites_the_most_drifted_of_its_sample():
    g = torch.Generator().manual_seed(3)
    buffer = ReplayBuffer(spec(capacity=4, insert_strategy="elite_insertion", elite_batch_size=4), 3, [2], 2, 0, 4)
    fill(buffer, fake_unrolls(4), g)
    drift = torch.tensor([0.1, 3.0, 0.2, 0.4])
    fill(buffer, fake_unrolls(1, start=10.0), g, score=lambda slots: drift[slots])
    assert buffer.obs[:, 0, 0].tolist() == [0.0, 10.0, 2.0, 3.0]  # slot 1 was the most drifted


def test_concat_is_time_major():
    a, b = fake_unrolls(2), fake_unrolls(3, start=5.0)
    both = concat([a, b])
    assert both["obs"].shape == (4, 5, 2) and both["hx"].shape == (5, 0)
    assert both["obs"][0, :, 0].tolist() == [0.0, 1.0, 5.0, 6.0, 7.0]


def test_specs_default_and_tolerant_ratios():
    assert replay_specs('[{"type": "queue", "capacity": 1, "sample_ratio": 1}]', 8) == [
        {"type": "queue", "capacity": 1, "sample_ratio": 1, "count": 8}]
    specs = replay_specs('[{"type": "queue", "capacity": 1, "sample_ratio": 0.6}, {"type": "standard", '
                         '"capacity": 9, "sample_ratio": 0.3}, {"type": "custom", "capacity": 9, '
                         '"sample_ratio": 0.1, "dist_function": "kl_div", "sample_strategy": "attentive_sampling"}]', 10)
    assert [s["count"] for s in specs] == [6, 3, 1]  # 0.6 + 0.3 + 0.1 != 1.0 in floats, accepted all the same
    assert specs[2]["elite_sampling_strategy"] == "strategy3" and specs[2]["p"] == 2


def test_elite_scoring_reads_5_steps_by_default_and_no_more_than_an_unroll_has():
    """``score_steps``: 5 unless given (every step of an unroll shorter than that); null scores every step; a value
    given above ``--num-steps`` is refused, as no unroll has those steps."""
    entry = {"type": "custom", "capacity": 16, "sample_ratio": 0.5, "dist_function": "ln_norm",
             "sample_strategy": "elite_sampling"}

    def steps(unroll_length, **given):
        text = json.dumps([{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, {**entry, **given}])
        return replay_specs(text, 4, unroll_length)[1]["score_steps"]

    assert steps(20) == 5 and steps(None) == 5
    assert steps(3) == 3  # the default, cut to a 3-step unroll
    assert steps(20, score_steps=None) is None and steps(20, score_steps=20) == 20
    with pytest.raises(ValueError, match=r"entry 2 \(custom\): 'score_steps' 21 is above --num-steps 20"):
        steps(20, score_steps=21)


@pytest.mark.parametrize("hidden, features", [(0, 0), (16, 4)])
def test_slot_bytes_is_what_a_replay_allocates_per_unroll(hidden, features):
    buffer = ReplayBuffer(spec(capacity=5, sample_strategy="elite_sampling"), 20, [4], 2, hidden, features)
    per_slot = [t for t in vars(buffer).values() if torch.is_tensor(t) and t.shape[:1] == (5,)]
    assert sum(t.numel() * t.element_size() for t in per_slot) == 5 * slot_bytes(20, [4], 2, hidden, features)
    # CartPole, T = 20, no state or features: 21 x 4 observations and one final one, 20 actions (int64), rewards,
    # dones, truncated flags and values, 20 x 2 logits, two int64 counters
    assert slot_bytes(20, [4], 2, 0, 0) == 4 * 22 * 4 + 8 * 20 + 4 * 4 * 20 + 4 * 20 * 2 + 2 * 8
    assert slot_bytes(20, [4], 2, 0, 0, final_slots=3) == slot_bytes(20, [4], 2, 0, 0) + 2 * 4 * 4


def test_frames_are_stored_as_bytes():
    """Atari frames travel as uint8 (--frame-norm scale): a Pong unroll's observations take a quarter of float32's
    bytes, in the replays as in the slot store (the layout both share)."""
    meta = model_meta("nature", [4, 84, 84], 6, 0, uint8=True)
    layout = policy_layout(meta)
    assert layout["obs_dtype"] == torch.uint8
    buffer = ReplayBuffer(spec(capacity=2), 20, meta["obs_shape"], 6, 0, 0, obs_dtype=layout["obs_dtype"])
    assert buffer.obs.dtype == buffer.final_obs.dtype == torch.uint8
    frames = 22 * 4 * 84 * 84  # T + 1 observations and one final one
    as_bytes = slot_bytes(20, [4, 84, 84], 6, 0, 0, obs_dtype=torch.uint8)
    assert slot_bytes(20, [4, 84, 84], 6, 0, 0) - as_bytes == 3 * frames


def test_a_custom_replay_without_a_strategy_says_so_first():
    """Neither strategy: the message names what is missing (it asked for a 'dist_function', which once given was
    refused as reading nothing)."""
    custom = {"type": "custom", "capacity": 100, "sample_ratio": 0.5}
    for entry in (custom, {**custom, "dist_function": "ln_norm"}):
        with pytest.raises(BadInput, match='entry 2 .custom.: a custom replay needs a "sample_strategy" or an '
                                           '"insert_strategy"'):
            replay_specs(json.dumps([{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, entry]), 4)
