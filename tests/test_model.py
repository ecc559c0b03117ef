"""Networks: output shapes, LSTM state handling, rebuilding from metadata."""

import pytest
import torch

from model import ModelError, build_model, choose_model, model_meta


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
    assert choose_model("auto", (1, 80, 80)) == "a3clstm"
    assert choose_model("auto", (4,)) == "mlplstm"
    with pytest.raises(ModelError):
        choose_model("a3clstm", (4,))
    with pytest.raises(ModelError):
        choose_model("mlplstm", (1, 80, 80))
    with pytest.raises(ModelError):
        build_model({"model": "nope", "obs_shape": [4], "num_actions": 2, "hidden_size": 8})
