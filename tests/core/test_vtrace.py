"""V-trace against a slow reference written from the IMPALA paper's sum-of-products formula (Espeholt et al. 2018,
section 4.1), plus the properties that tie it to n-step returns and to episode ends."""

import math

import numpy as np
import pytest
import torch

from core.returns import (
    VTraceFromLogitsReturns,
    VTraceReturns,
    nstep_returns,
    vtrace_from_importance_weights,
    vtrace_from_logits,
)

TOL = dict(rtol=1e-6, atol=1e-5)
CLIPS = [(3.7, 2.2), (None, None), (1.0, 1.0)]


def _clip(x, threshold):
    return x if threshold is None else min(threshold, x)


def reference_vtrace_1d(log_rhos, discounts, rewards, values, bootstrap, clip_rho, clip_pg_rho):
    """One trajectory, Python floats, written as the paper's sum (NOT the recursion):

        v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i) (prod_{i=s}^{t-1} c_i) delta_t
        delta_t = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t)),  V(x_T) = bootstrap
        rho_t = min(rho_bar, pi/mu),  c_i = min(1, pi/mu)
        pg_s = min(rho_bar_pg, pi/mu) (r_s + gamma_s v_{s+1} - V(x_s)),  v_T = bootstrap

    gamma_i is the per-step discount (gamma * (1 - done_i)), i.e. gamma^{t-s} in the paper for constant gamma.
    """
    T = len(rewards)
    rhos = [math.exp(float(x)) for x in log_rhos]
    next_values = [float(v) for v in values[1:]] + [float(bootstrap)]
    vs = []
    for s in range(T):
        total = float(values[s])
        for t in range(s, T):
            discount_product = 1.0
            trace_product = 1.0
            for i in range(s, t):
                discount_product *= float(discounts[i])
                trace_product *= min(1.0, rhos[i])
            delta = _clip(rhos[t], clip_rho) * (float(rewards[t]) + float(discounts[t]) * next_values[t] -
                                                float(values[t]))
            total += discount_product * trace_product * delta
        vs.append(total)
    next_vs = vs[1:] + [float(bootstrap)]
    pg = [_clip(rhos[s], clip_pg_rho) * (float(rewards[s]) + float(discounts[s]) * next_vs[s] - float(values[s]))
          for s in range(T)]
    return np.array(vs), np.array(pg)


def reference_vtrace(log_rhos, discounts, rewards, values, bootstrap, clip_rho, clip_pg_rho):
    """[T, B, ...] numpy arrays: log_rhos/discounts get trailing size-1 dims and broadcast against values."""
    shape = values.shape

    def expand(a):
        return np.broadcast_to(a.reshape(a.shape + (1,) * (len(shape) - a.ndim)), shape)

    log_rhos, discounts = expand(log_rhos), expand(discounts)
    vs, pg = np.zeros(shape), np.zeros(shape)
    for idx in np.ndindex(*shape[1:]):
        col = (slice(None),) + idx
        vs[col], pg[col] = reference_vtrace_1d(log_rhos[col], discounts[col], rewards[col], values[col],
                                               bootstrap[idx], clip_rho, clip_pg_rho)
    return vs, pg


def random_inputs(rng, T, B, dtype=np.float64, done_p=0.2, extra=()):
    """log_rhos uniform over [-2.5, 2.5) (rho in about [0.08, 12.2)), so thresholds 3.7 / 2.2 / 1 all bite;
    a different gamma per batch entry (0.9 / (b + 1), as in the paper's test) times (1 - done)."""
    shape = (T, B) + tuple(extra)
    gammas = np.array([0.9 / (b + 1) for b in range(B)]).reshape((1, B) + (1,) * len(extra))
    dones = (rng.random((T, B)) < done_p).reshape((T, B) + (1,) * len(extra))
    return dict(
        log_rhos=rng.uniform(-2.5, 2.5, size=(T, B)).astype(dtype),
        discounts=(gammas * (1.0 - dones)).astype(dtype),
        rewards=rng.normal(size=shape).astype(dtype),
        values=rng.normal(size=shape).astype(dtype),
        bootstrap_value=rng.normal(size=shape[1:]).astype(dtype),
    )


def to_torch(inputs):
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in inputs.items()}


def run_both(inputs, clip_rho, clip_pg_rho):
    got = vtrace_from_importance_weights(**to_torch(inputs), clip_rho_threshold=clip_rho,
                                         clip_pg_rho_threshold=clip_pg_rho)
    want = reference_vtrace(inputs["log_rhos"], inputs["discounts"], inputs["rewards"], inputs["values"],
                            inputs["bootstrap_value"], clip_rho, clip_pg_rho)
    return got, want


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("T", [1, 2, 5, 17])
@pytest.mark.parametrize("B", [1, 5])
@pytest.mark.parametrize("clip_rho,clip_pg_rho", CLIPS)
def test_vtrace_matches_paper_reference(dtype, T, B, clip_rho, clip_pg_rho):
    rng = np.random.default_rng(1000 * T + B)
    inputs = random_inputs(rng, T, B, dtype)
    got, want = run_both(inputs, clip_rho, clip_pg_rho)
    assert isinstance(got, VTraceReturns)
    assert got.vs.dtype == got.pg_advantages.dtype == torch.from_numpy(np.zeros(1, dtype)).dtype
    assert got.vs.shape == got.pg_advantages.shape == (T, B)
    np.testing.assert_allclose(got.vs.numpy(), want[0], **TOL)
    np.testing.assert_allclose(got.pg_advantages.numpy(), want[1], **TOL)


def test_clipping_thresholds_bite():
    """TorchBeast-style evenly spread log_rhos over [-2.5, 2.5): some rhos are below 1, some above 2.2 and 3.7, and
    clipping at 3.7 / 2.2 changes both results (against the reference, and against no clipping)."""
    T, B = 5, 5
    rng = np.random.default_rng(0)
    inputs = random_inputs(rng, T, B, done_p=0.0)
    inputs["log_rhos"] = 5.0 * (np.arange(T * B).reshape(T, B) / (T * B) - 0.5)
    rhos = np.exp(inputs["log_rhos"])
    assert (rhos < 1).any() and (rhos > 3.7).any() and ((rhos > 2.2) & (rhos < 3.7)).any()
    clipped, want = run_both(inputs, 3.7, 2.2)
    np.testing.assert_allclose(clipped.vs.numpy(), want[0], **TOL)
    np.testing.assert_allclose(clipped.pg_advantages.numpy(), want[1], **TOL)
    unclipped = vtrace_from_importance_weights(**to_torch(inputs), clip_rho_threshold=None,
                                               clip_pg_rho_threshold=None)
    assert not torch.allclose(clipped.vs, unclipped.vs)
    assert not torch.allclose(clipped.pg_advantages, unclipped.pg_advantages)
    # pg clipping only touches pg_advantages; rho clipping only touches vs (and, through v_{s+1}, pg_advantages).
    pg_only = vtrace_from_importance_weights(**to_torch(inputs), clip_rho_threshold=None, clip_pg_rho_threshold=2.2)
    torch.testing.assert_close(pg_only.vs, unclipped.vs)


def test_defaults_are_rho_bar_one():
    rng = np.random.default_rng(5)
    inputs = random_inputs(rng, 6, 3)
    got = vtrace_from_importance_weights(**to_torch(inputs))
    want = reference_vtrace(inputs["log_rhos"], inputs["discounts"], inputs["rewards"], inputs["values"],
                            inputs["bootstrap_value"], 1.0, 1.0)
    np.testing.assert_allclose(got.vs.numpy(), want[0], **TOL)
    np.testing.assert_allclose(got.pg_advantages.numpy(), want[1], **TOL)


def test_single_step_by_hand():
    """T = 1: v_0 = V + min(rho_bar, rho) (r + gamma b - V); pg = min(rho_bar_pg, rho) (r + gamma b - V)."""
    rho, r, gamma, v, b = 3.0, 1.5, 0.5, 2.0, 4.0
    got = vtrace_from_importance_weights(
        torch.tensor([[math.log(rho)]], dtype=torch.float64), torch.tensor([[gamma]], dtype=torch.float64),
        torch.tensor([[r]], dtype=torch.float64), torch.tensor([[v]], dtype=torch.float64),
        torch.tensor([b], dtype=torch.float64), clip_rho_threshold=2.5, clip_pg_rho_threshold=1.25)
    td = r + gamma * b - v  # 1.5
    assert got.vs.item() == pytest.approx(v + 2.5 * td)
    assert got.pg_advantages.item() == pytest.approx(1.25 * td)


@pytest.mark.parametrize("log_rho_extra", [(1,), ()])
@pytest.mark.parametrize("discount_extra", [(1,), ()])
def test_higher_rank_inputs(log_rho_extra, discount_extra):
    """rewards/values [T, B, 42]; log_rhos and discounts [T, B, 1] or [T, B] broadcast over the last dim."""
    T, B, K = 4, 2, 42
    rng = np.random.default_rng(11)
    inputs = random_inputs(rng, T, B, extra=(K,))
    inputs["log_rhos"] = inputs["log_rhos"].reshape((T, B) + log_rho_extra)
    inputs["discounts"] = inputs["discounts"].reshape((T, B) + discount_extra)
    got, want = run_both(inputs, 3.7, 2.2)
    assert got.vs.shape == got.pg_advantages.shape == (T, B, K)
    np.testing.assert_allclose(got.vs.numpy(), want[0], **TOL)
    np.testing.assert_allclose(got.pg_advantages.numpy(), want[1], **TOL)


def test_higher_rank_zeros_shape():
    T, B = 3, 2
    out = vtrace_from_importance_weights(log_rhos=torch.zeros(T, B, 1), discounts=torch.zeros(T, B, 1),
                                         rewards=torch.zeros(T, B, 42), values=torch.zeros(T, B, 42),
                                         bootstrap_value=torch.zeros(B, 42))
    assert out.vs.shape == out.pg_advantages.shape == (T, B, 42)


T_, B_ = 3, 2
BAD_SHAPES = [
    # (log_rhos, discounts, rewards, values, bootstrap_value), words the message must contain
    (((T_,), (T_, B_), (T_, B_), (T_, B_), (B_,)), ["log_rhos", "(3,)", "(3, 2)"]),
    (((T_, B_, 1), (T_, B_, 1), (T_, B_, 42), (T_, B_, 42), (B_,)), ["bootstrap_value", "(2,)", "(2, 42)"]),
    (((T_, B_), (T_, B_), (T_, B_), (T_, B_), (B_, 1)), ["bootstrap_value", "(2, 1)", "(2,)"]),
    (((T_, B_), (T_, B_), (T_, B_), (T_, B_), (T_,)), ["bootstrap_value", "(3,)", "(2,)"]),
    (((T_, B_), (T_, B_), (T_, B_), (T_, B_ + 1), (B_,)), ["values", "(3, 3)", "(3, 2)"]),
    (((T_, B_), (T_ + 1, B_), (T_, B_), (T_, B_), (B_,)), ["discounts", "(4, 2)", "(3, 2)"]),
    (((T_, B_, 1, 1), (T_, B_), (T_, B_, 42), (T_, B_, 42), (B_, 42)), ["log_rhos", "(3, 2, 1, 1)", "(3, 2, 42)"]),
    (((T_, B_, 3), (T_, B_), (T_, B_, 42), (T_, B_, 42), (B_, 42)), ["log_rhos", "(3, 2, 3)", "(3, 2, 42)"]),
    (((T_, B_), (T_,), (T_, B_), (T_, B_), (B_,)), ["discounts", "(3,)", "(3, 2)"]),
    (((B_, T_), (T_, B_), (T_, B_), (T_, B_), (B_,)), ["log_rhos", "(2, 3)", "(3, 2)"]),
    (((T_,), (T_,), (T_,), (T_,), ()), ["rewards", "(3,)"]),
]


@pytest.mark.parametrize("shapes,words", BAD_SHAPES)
def test_inconsistent_shapes_raise_value_error(shapes, words):
    names = ["log_rhos", "discounts", "rewards", "values", "bootstrap_value"]
    kwargs = {name: torch.zeros(shape) for name, shape in zip(names, shapes)}
    with pytest.raises(ValueError) as info:
        vtrace_from_importance_weights(**kwargs)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


@pytest.mark.parametrize("threshold", [0.0, -1.0])
def test_non_positive_threshold_rejected(threshold):
    kwargs = dict(log_rhos=torch.zeros(2, 1), discounts=torch.ones(2, 1), rewards=torch.zeros(2, 1),
                  values=torch.zeros(2, 1), bootstrap_value=torch.zeros(1))
    with pytest.raises(ValueError, match="clip_rho_threshold"):
        vtrace_from_importance_weights(**kwargs, clip_rho_threshold=threshold)
    with pytest.raises(ValueError, match="clip_pg_rho_threshold"):
        vtrace_from_importance_weights(**kwargs, clip_pg_rho_threshold=threshold)


def numpy_action_log_probs(logits, actions):
    """log softmax(logits)[a], by hand (max-shifted)."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return np.take_along_axis(log_softmax, actions[..., None], axis=-1)[..., 0]


@pytest.mark.parametrize("B", [1, 2])
@pytest.mark.parametrize("clip_rho,clip_pg_rho", [(None, None), (3.7, 2.2)])
def test_from_logits_equals_from_importance_weights(B, clip_rho, clip_pg_rho):
    T, A = 5, 3
    rng = np.random.default_rng(B)
    inputs = random_inputs(rng, T, B)
    del inputs["log_rhos"]
    behavior = rng.normal(scale=2.0, size=(T, B, A))
    target = rng.normal(scale=2.0, size=(T, B, A))
    actions = rng.integers(0, A, size=(T, B))
    behavior_lp = numpy_action_log_probs(behavior, actions)
    target_lp = numpy_action_log_probs(target, actions)
    log_rhos = target_lp - behavior_lp
    assert np.abs(log_rhos).max() > math.log(3.7)  # clipping matters for the clipped case

    got = vtrace_from_logits(torch.from_numpy(behavior), torch.from_numpy(target), torch.from_numpy(actions),
                             **to_torch(inputs), clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho)
    assert isinstance(got, VTraceFromLogitsReturns)
    assert actions.dtype == np.int64
    from_iw = vtrace_from_importance_weights(torch.from_numpy(log_rhos), **to_torch(inputs),
                                             clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho)
    want = reference_vtrace(log_rhos, inputs["discounts"], inputs["rewards"], inputs["values"],
                            inputs["bootstrap_value"], clip_rho, clip_pg_rho)
    np.testing.assert_allclose(got.behavior_action_log_probs.numpy(), behavior_lp, **TOL)
    np.testing.assert_allclose(got.target_action_log_probs.numpy(), target_lp, **TOL)
    np.testing.assert_allclose(got.log_rhos.numpy(), log_rhos, **TOL)
    np.testing.assert_allclose(got.vs.numpy(), from_iw.vs.numpy(), **TOL)
    np.testing.assert_allclose(got.pg_advantages.numpy(), from_iw.pg_advantages.numpy(), **TOL)
    np.testing.assert_allclose(got.vs.numpy(), want[0], **TOL)
    np.testing.assert_allclose(got.pg_advantages.numpy(), want[1], **TOL)


def test_from_logits_gradients():
    """Target log-probs keep their graph (used in the policy-gradient loss); vs / pg_advantages carry none."""
    T, B, A = 4, 3, 5
    torch.manual_seed(0)
    behavior = torch.randn(T, B, A)
    target = torch.randn(T, B, A, requires_grad=True)
    actions = torch.randint(0, A, (T, B), dtype=torch.int64)
    values = torch.randn(T, B, requires_grad=True)
    out = vtrace_from_logits(behavior, target, actions, discounts=torch.full((T, B), 0.99),
                             rewards=torch.randn(T, B), values=values, bootstrap_value=torch.randn(B))
    assert out.target_action_log_probs.requires_grad
    assert not out.vs.requires_grad and not out.pg_advantages.requires_grad
    assert not out.behavior_action_log_probs.requires_grad
    (-(out.pg_advantages * out.target_action_log_probs).sum()).backward()
    # d/dlogits of log softmax(logits)[a] = onehot(a) - softmax(logits)
    onehot = torch.nn.functional.one_hot(actions, A).to(target.dtype)
    expected = -out.pg_advantages[..., None] * (onehot - torch.softmax(target.detach(), -1))
    torch.testing.assert_close(target.grad, expected)
    assert values.grad is None


def test_from_logits_bad_shapes():
    T, B, A = 3, 2, 4
    common = dict(discounts=torch.ones(T, B), rewards=torch.zeros(T, B), values=torch.zeros(T, B),
                  bootstrap_value=torch.zeros(B))
    with pytest.raises(ValueError, match=r"\(3, 2, 4\).*\(3, 2, 5\)"):
        vtrace_from_logits(torch.zeros(T, B, A), torch.zeros(T, B, A + 1), torch.zeros(T, B, dtype=torch.long),
                           **common)
    with pytest.raises(ValueError, match=r"actions shape \(2, 3\)"):
        vtrace_from_logits(torch.zeros(T, B, A), torch.zeros(T, B, A), torch.zeros(B, T, dtype=torch.long), **common)
    with pytest.raises(ValueError, match="integer"):
        vtrace_from_logits(torch.zeros(T, B, A), torch.zeros(T, B, A), torch.zeros(T, B), **common)
    with pytest.raises(ValueError, match="bootstrap_value"):
        vtrace_from_logits(torch.zeros(T, B, A), torch.zeros(T, B, A), torch.zeros(T, B, dtype=torch.long),
                           **{**common, "bootstrap_value": torch.zeros(T)})


@pytest.mark.parametrize("clip_rho,clip_pg_rho", [(None, None), (1.0, 1.0), (3.7, 2.2)])
@pytest.mark.parametrize("T,B", [(1, 1), (7, 1), (20, 4)])
def test_on_policy_vtrace_is_nstep_return(clip_rho, clip_pg_rho, T, B):
    """log_rhos = 0 (pi = mu): every c and rho is 1 whatever the thresholds (>= 1), so v_s is the n-step return,
    episode ends included, and pg_advantages = r_s + gamma_s v_{s+1} - V(x_s)."""
    rng = np.random.default_rng(T * 31 + B)
    inputs = to_torch(random_inputs(rng, T, B, done_p=0.3))
    inputs["log_rhos"] = torch.zeros(T, B, dtype=torch.float64)
    got = vtrace_from_importance_weights(**inputs, clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho)
    returns = nstep_returns(inputs["rewards"], inputs["discounts"], inputs["bootstrap_value"])
    torch.testing.assert_close(got.vs, returns, rtol=1e-12, atol=1e-12)
    next_returns = torch.cat([returns[1:], inputs["bootstrap_value"][None]], dim=0)
    expected_pg = inputs["rewards"] + inputs["discounts"] * next_returns - inputs["values"]
    torch.testing.assert_close(got.pg_advantages, expected_pg, rtol=1e-12, atol=1e-12)


def test_pg_advantages_unclipped_on_policy_by_hand():
    """Thresholds None, log_rhos = 0: pg_advantages = r + gamma v_{s+1} - V with v_T = bootstrap, from vs itself."""
    T, B = 6, 3
    rng = np.random.default_rng(9)
    inputs = to_torch(random_inputs(rng, T, B))
    inputs["log_rhos"] = torch.zeros(T, B, dtype=torch.float64)
    got = vtrace_from_importance_weights(**inputs, clip_rho_threshold=None, clip_pg_rho_threshold=None)
    for s in range(T):
        v_next = got.vs[s + 1] if s + 1 < T else inputs["bootstrap_value"]
        expected = inputs["rewards"][s] + inputs["discounts"][s] * v_next - inputs["values"][s]
        torch.testing.assert_close(got.pg_advantages[s], expected)


@pytest.mark.parametrize("clip_rho,clip_pg_rho", CLIPS)
def test_traces_cut_at_episode_end(clip_rho, clip_pg_rho):
    """A done at step d (discounts[d] = 0): vs[:d+1] and pg_advantages[:d+1] do not depend on anything after d
    (rewards, values, log_rhos, discounts, bootstrap), while vs[d+1:] does."""
    T, B, d = 9, 3, 4
    rng = np.random.default_rng(21)
    a = to_torch(random_inputs(rng, T, B, done_p=0.0))
    a["discounts"][d] = 0.0
    b = {k: v.clone() for k, v in a.items()}
    for name in ("rewards", "values", "log_rhos"):
        b[name][d + 1:] = torch.from_numpy(rng.normal(size=(T - d - 1, B)))
    b["discounts"][d + 1:] = 0.5
    b["bootstrap_value"] = b["bootstrap_value"] + 10.0
    out_a = vtrace_from_importance_weights(**a, clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho)
    out_b = vtrace_from_importance_weights(**b, clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho)
    torch.testing.assert_close(out_a.vs[:d + 1], out_b.vs[:d + 1], rtol=0, atol=0)
    torch.testing.assert_close(out_a.pg_advantages[:d + 1], out_b.pg_advantages[:d + 1], rtol=0, atol=0)
    assert not torch.allclose(out_a.vs[d + 1:], out_b.vs[d + 1:])
    # And without the done, the rewards after d do reach vs[d].
    a["discounts"][d] = 0.9
    b["discounts"][d] = 0.9
    out_a = vtrace_from_importance_weights(**a, clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho)
    out_b = vtrace_from_importance_weights(**b, clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho)
    assert not torch.allclose(out_a.vs[d], out_b.vs[d])


def test_pure_no_grad_and_inputs_untouched():
    T, B = 5, 2
    rng = np.random.default_rng(4)
    inputs = {k: v.requires_grad_() for k, v in to_torch(random_inputs(rng, T, B)).items()}
    before = {k: v.detach().clone() for k, v in inputs.items()}
    first = vtrace_from_importance_weights(**inputs, clip_rho_threshold=3.7, clip_pg_rho_threshold=2.2)
    second = vtrace_from_importance_weights(**inputs, clip_rho_threshold=3.7, clip_pg_rho_threshold=2.2)
    assert not first.vs.requires_grad and not first.pg_advantages.requires_grad
    for k, v in inputs.items():
        torch.testing.assert_close(v.detach(), before[k], rtol=0, atol=0)
    torch.testing.assert_close(first.vs, second.vs, rtol=0, atol=0)
    torch.testing.assert_close(first.pg_advantages, second.pg_advantages, rtol=0, atol=0)


def test_empty_rollout():
    out = vtrace_from_importance_weights(torch.zeros(0, 2), torch.zeros(0, 2), torch.zeros(0, 2), torch.zeros(0, 2),
                                         torch.zeros(2))
    assert out.vs.shape == out.pg_advantages.shape == (0, 2)
