"""Networks: output shapes, LSTM state handling, rebuilding from metadata."""

import pytest
import torch

from core.errors import BadInput
from model import build_model, choose_model, fast_layout, model_meta, obs_dtype


@pytest.mark.parametrize("name,obs_shape", [("a3clstm", [1, 80, 80]), ("mlplstm", [4])])
def test_output_shapes(name, obs_shape):
    model = build_model(model_meta(name, obs_shape, 6, 32))
    hx, cx = model.initial_state(3)
    value, logits, (hx2, cx2) = model(torch.randn(3, *obs_shape), (hx, cx))
    assert value.shape == (3,) and logits.shape == (3, 6)
    assert hx2.shape == cx2.shape == (3, 32)


def test_a3clstm_size_matches_rl_a3c_pytorch():
    model = build_model(model_meta("a3clstm", [1, 80, 80], 6, 512))
    assert sum(p.numel() for p in model.parameters()) == 3_249_639


def test_lstm_state_carries_memory_and_zero_state_resets_it():
    torch.manual_seed(0)
    model = build_model(model_meta("mlplstm", [4], 2, 16))
    obs = torch.randn(1, 4)
    fresh = model(obs, model.initial_state(1))
    # the same observation after a different history gives a different output: the state carries memory
    _, _, state = model(torch.randn(1, 4) * 5, model.initial_state(1))
    after_history = model(obs, state)
    assert not torch.allclose(fresh[1], after_history[1])
    # cutting the state (zeros, as a worker does at an episode end) gives back the fresh output exactly
    keep = torch.zeros(1, 1)
    again = model(obs, (state[0] * keep, state[1] * keep))
    torch.testing.assert_close(fresh[1], again[1])
    torch.testing.assert_close(fresh[0], again[0])


def test_batch_rows_are_independent():
    torch.manual_seed(0)
    model = build_model(model_meta("a3clstm", [1, 80, 80], 4, 64))
    x = torch.randn(2, 1, 80, 80)
    batched = model(x, model.initial_state(2))
    single = model(x[1:], model.initial_state(1))
    torch.testing.assert_close(batched[1][1:], single[1], rtol=1e-4, atol=1e-5)


def test_initial_policy_is_near_uniform():
    model = build_model(model_meta("mlplstm", [4], 3, 32))
    _, logits, _ = model(torch.randn(16, 4), model.initial_state(16))
    probs = logits.softmax(-1)
    assert (probs - 1 / 3).abs().max() < 0.05


def test_choose_model():
    assert choose_model("a3clstm", (1, 80, 80)) == "a3clstm" and choose_model("mlplstm", (4,)) == "mlplstm"
    with pytest.raises(BadInput):
        choose_model("a3clstm", (4,))
    with pytest.raises(BadInput):
        choose_model("mlplstm", (1, 80, 80))
    with pytest.raises(BadInput):
        build_model({"model": "nope", "obs_shape": [4], "num_actions": 2, "hidden_size": 8})


@pytest.mark.parametrize("name", ["nature", "resnet"])
def test_feed_forward_models_pass_an_empty_state(name):
    model = build_model(model_meta(name, [4, 84, 84], 6, 512))
    hx, cx = model.initial_state(5)
    value, logits, (hx2, cx2) = model(torch.randn(5, 4, 84, 84), (hx, cx))
    assert value.shape == (5,) and logits.shape == (5, 6) and hx2.shape == (5, 0)
    assert choose_model(name, (4, 84, 84)) == name
    with pytest.raises(BadInput):
        choose_model(name, (1, 80, 80))


def test_channels_last_replica_computes_the_same():
    from model import fast_layout

    torch.manual_seed(0)
    meta = model_meta("a3clstm", [1, 80, 80], 6, 64)
    plain = build_model(meta)
    fast = fast_layout(build_model(meta), meta)
    fast.load_state_dict(plain.state_dict())
    x = torch.randn(3, 1, 80, 80)
    a, b = plain(x, plain.initial_state(3)), fast(x, fast.initial_state(3))
    torch.testing.assert_close(a[1], b[1], rtol=1e-4, atol=1e-5)
    (a[0].sum() + a[1].pow(2).sum()).backward()
    (b[0].sum() + b[1].pow(2).sum()).backward()
    for p, q in zip(plain.parameters(), fast.parameters()):
        torch.testing.assert_close(p.grad, q.grad.contiguous(), rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("name, obs_shape", [("a3clstm", (1, 80, 80)), ("mlplstm", (4,)), ("mlp", (4,)),
                                             ("nature", (4, 84, 84)), ("resnet", (4, 84, 84))])
def test_unroll_equals_stepping_with_resets_at_episode_ends(name, obs_shape):
    """``unroll`` (the batched training forward) gives what T calls of ``forward`` give, with the recurrent state
    zeroed after a step that ended an episode, and the same gradients."""
    torch.manual_seed(0)
    model = build_model(model_meta(name, obs_shape, 3, 16))
    T, B = 5, 3
    obs = torch.rand((T, B) + obs_shape)
    dones = torch.zeros(T, B)
    dones[1, 0] = dones[3, 2] = 1.0
    h0 = tuple(torch.randn_like(s) for s in model.initial_state(B))
    values, logits, state = model.unroll(obs, h0, dones)
    assert values.shape == (T, B) and logits.shape == (T, B, 3)

    stepped_values, stepped_logits, (hx, cx) = [], [], h0
    for t in range(T):
        value, logit, (hx, cx) = model(obs[t], (hx, cx))
        stepped_values.append(value)
        stepped_logits.append(logit)
        keep = (1.0 - dones[t]).unsqueeze(1)
        if t < T - 1:
            hx, cx = hx * keep, cx * keep
    stepped_values, stepped_logits = torch.stack(stepped_values), torch.stack(stepped_logits)
    torch.testing.assert_close(values, stepped_values, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(logits, stepped_logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(state[0], hx, rtol=1e-4, atol=1e-5)

    grads = torch.autograd.grad((values.sum() + logits.pow(2).sum()), list(model.parameters()))
    stepped_grads = torch.autograd.grad((stepped_values.sum() + stepped_logits.pow(2).sum()),
                                        list(model.parameters()))
    for g, s in zip(grads, stepped_grads):
        torch.testing.assert_close(g, s, rtol=1e-3, atol=1e-5)
    if model.hidden_size:  # the reset matters: env 0 at step 2 starts from a zero state, env 1 never does
        fresh_value, _, _ = model(obs[2, :1], model.initial_state(1))
        torch.testing.assert_close(values[2, :1], fresh_value, rtol=1e-4, atol=1e-5)
        assert not torch.allclose(values[2, 1:2], model(obs[2, 1:2], model.initial_state(1))[0])


def test_flattened_parameters_keep_values_layout_and_outputs():
    from model import fast_layout, flat_buffer, flatten_parameters

    torch.manual_seed(0)
    meta = model_meta("nature", [4, 84, 84], 6, 0)
    model = fast_layout(build_model(meta), meta, True)
    obs = torch.rand(2, 4, 84, 84)
    before = model(obs, model.initial_state(2))[1].detach()
    assert flat_buffer(list(model.parameters())) is None  # separate tensors
    flat = flatten_parameters(model, shared=True)
    params = list(model.parameters())
    assert flat.is_shared() and flat.numel() == sum(p.numel() for p in params)
    assert model.conv1.weight.is_contiguous(memory_format=torch.channels_last)  # kept its layout
    torch.testing.assert_close(model(obs, model.initial_state(2))[1], before, rtol=0, atol=0)
    found = flat_buffer(params)
    assert found is not None and found.data_ptr() == flat.data_ptr()
    flat.zero_()  # the parameters are views of it
    assert all(p.abs().sum() == 0 for p in params)


def test_mlp_stores_its_width_and_has_no_recurrent_state():
    meta = model_meta("mlp", [4], 2, 32)
    assert meta["hidden_size"] == 0 and meta["width"] == 32
    model = build_model(meta)
    assert model.fc1.out_features == 32
    value, logits, (hx, cx) = model(torch.randn(5, 4), model.initial_state(5))
    assert value.shape == (5,) and logits.shape == (5, 2) and hx.shape == (5, 0)
    with pytest.raises(BadInput):
        choose_model("mlp", (4, 84, 84))


def standardised(frames):
    """Each frame of ``[n, k, H, W]`` uint8, in [0, 1], less its mean, over its std (population), pixel by pixel."""
    out = frames.double() / 255.0
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            frame = out[i, j]
            out[i, j] = (frame - frame.mean()) / (frame.std(correction=0) + 1e-8)
    return out.float()


def darkened(frames):
    """Each frame of ``[n, k, H, W]`` uint8, in [0, 1], less its darkest pixel's value, pixel by pixel."""
    out = frames.double() / 255.0
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = out[i, j] - out[i, j].min()
    return out.float()


@pytest.mark.parametrize("frame_norm", ["frame", "scale", "darkest"])
@pytest.mark.parametrize("name,obs_shape", [("a3clstm", [1, 80, 80]), ("nature", [4, 84, 84]), ("resnet", [4, 84, 84])])
def test_conv_networks_normalise_uint8_frames_where_they_compute(name, obs_shape, frame_norm):
    """Frames travel as bytes: a conv network standardises each frame by its own mean and std (--frame-norm
    frame), divides it by 255 (scale) or divides it by 255 less its darkest value (darkest) itself, and takes float
    frames (--frame-norm running's, normalised by the environment) as they come."""
    meta = model_meta(name, obs_shape, 6, 32, uint8=True, frame_norm=frame_norm)
    assert meta["obs_dtype"] == "uint8" and obs_dtype(meta) == torch.uint8 and meta["frame_norm"] == frame_norm
    assert obs_dtype(model_meta(name, obs_shape, 6, 32)) == torch.float32  # and a file from before: no entry
    model = fast_layout(build_model(meta), meta)
    frames = torch.randint(0, 256, (3, *obs_shape), dtype=torch.uint8)
    frames[0, 0] = 17  # a blank frame: 0 after standardising, not a division by 0
    frames[1] = frames[1] // 2 + 60  # no black pixel: --frame-norm darkest takes 60 or more off
    state = model.initial_state(3)
    value, logits, _ = model(frames, state)
    expected = {"frame": standardised, "darkest": darkened}.get(frame_norm, lambda x: x.float() / 255.0)(frames)
    value_f, logits_f, _ = model(expected, state)
    assert torch.allclose(value, value_f, atol=1e-5) and torch.allclose(logits, logits_f, atol=1e-5)
    _, unrolled, _ = model.unroll(frames.unsqueeze(0), state, torch.zeros(1, 3))
    assert torch.allclose(unrolled[0], logits, atol=1e-5)
    assert torch.isfinite(logits).all()
    assert not torch.allclose(model(frames.float(), state)[1], logits, atol=1e-3)  # floats are not scaled again
