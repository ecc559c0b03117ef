"""Actor-critic networks. Every model maps ``(obs [B, ...], (hx, cx))`` to ``(value [B], logits [B, A], (hx, cx))``.

- ``a3clstm``: rl_a3c_pytorch's A3C-LSTM for one 80x80 gray frame: 4 x (conv, 2x2 max-pool, ReLU) -> 1024 features
  -> LSTMCell(hidden) -> actor and critic heads. 3.25M parameters at hidden 512, about 59M multiply-adds a step.
- ``mlplstm``: the same recurrent actor-critic for vector observations (classic control): Linear+ReLU -> LSTMCell.

``build_model(meta)`` rebuilds a network from ``model_meta(...)``, the small dict stored with every checkpoint.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def normalized_columns_(weight, std):
    """Init a linear layer's weight with rows of norm ``std`` (small policy logits / unit-scale values at start)."""
    with torch.no_grad():
        weight.normal_(0.0, 1.0)
        weight.mul_(std / weight.pow(2).sum(dim=1, keepdim=True).sqrt())


class RecurrentActorCritic(nn.Module):
    """The LSTM core and the two heads, shared by every network; subclasses define ``features(obs)``."""

    def __init__(self, feature_size, num_actions, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.lstm = nn.LSTMCell(feature_size, hidden_size)
        self.critic_linear = nn.Linear(hidden_size, 1)
        self.actor_linear = nn.Linear(hidden_size, num_actions)

    def _init_core(self):
        self.lstm.bias_ih.data.zero_()
        self.lstm.bias_hh.data.zero_()
        normalized_columns_(self.actor_linear.weight, 0.01)
        normalized_columns_(self.critic_linear.weight, 1.0)
        self.actor_linear.bias.data.zero_()
        self.critic_linear.bias.data.zero_()

    def initial_state(self, batch_size=1, device="cpu"):
        zeros = torch.zeros(batch_size, self.hidden_size, device=device)
        return zeros, zeros.clone()

    def forward(self, obs, state):
        hx, cx = self.lstm(self.features(obs), state)
        return self.critic_linear(hx).squeeze(-1), self.actor_linear(hx), (hx, cx)


class A3Clstm(RecurrentActorCritic):
    def __init__(self, obs_shape, num_actions, hidden_size=512):
        channels = obs_shape[0]
        super().__init__(64 * 4 * 4, num_actions, hidden_size)
        # 80 -conv5p2-> 80 -pool-> 40 -conv5p1-> 38 -pool-> 19 -conv4p1-> 18 -pool-> 9 -conv3p1-> 9 -pool-> 4
        self.conv1 = nn.Conv2d(channels, 32, 5, stride=1, padding=2)
        self.conv2 = nn.Conv2d(32, 32, 5, stride=1, padding=1)
        self.conv3 = nn.Conv2d(32, 64, 4, stride=1, padding=1)
        self.conv4 = nn.Conv2d(64, 64, 3, stride=1, padding=1)
        gain = nn.init.calculate_gain("relu")
        for conv in (self.conv1, self.conv2, self.conv3, self.conv4):
            nn.init.xavier_uniform_(conv.weight, gain=gain)
            conv.bias.data.zero_()
        self._init_core()

    def features(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2, 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2, 2))
        x = F.relu(F.max_pool2d(self.conv3(x), 2, 2))
        x = F.relu(F.max_pool2d(self.conv4(x), 2, 2))
        return x.flatten(1)


class MLPlstm(RecurrentActorCritic):
    def __init__(self, obs_shape, num_actions, hidden_size=128):
        super().__init__(hidden_size, num_actions, hidden_size)
        self.fc = nn.Linear(obs_shape[0], hidden_size)
        nn.init.xavier_uniform_(self.fc.weight, gain=nn.init.calculate_gain("relu"))
        self.fc.bias.data.zero_()
        self._init_core()

    def features(self, x):
        return F.relu(self.fc(x))


MODELS = {"a3clstm": A3Clstm, "mlplstm": MLPlstm}


class ModelError(ValueError):
    """A model that does not fit the observation, or metadata that names no model: one line to the user, exit 2."""


def choose_model(name, obs_shape):
    """Resolve ``--model auto`` from the observation's shape and check that the named model can take it."""
    image = len(obs_shape) == 3
    if name == "auto":
        return "a3clstm" if image else "mlplstm"
    if name == "a3clstm" and (not image or tuple(obs_shape[1:]) != (80, 80)):
        raise ModelError(f"--model a3clstm needs [C, 80, 80] frames, this environment gives {list(obs_shape)}")
    if name == "mlplstm" and len(obs_shape) != 1:
        raise ModelError(f"--model mlplstm needs vector observations, this environment gives {list(obs_shape)}")
    return name


def model_meta(name, obs_shape, num_actions, hidden_size):
    """The plain-data description a checkpoint stores so that the network can be rebuilt without any flags."""
    return {"model": name, "obs_shape": [int(d) for d in obs_shape], "num_actions": int(num_actions),
            "hidden_size": int(hidden_size)}


def build_model(meta):
    if meta.get("model") not in MODELS:
        raise ModelError(f"unknown model {meta.get('model')!r}; known: {', '.join(MODELS)}")
    return MODELS[meta["model"]](meta["obs_shape"], meta["num_actions"], meta["hidden_size"])
