"""Actor-critic networks. Every model maps ``(obs [B, ...], (hx, cx))`` to ``(value [B], logits [B, P], (hx, cx))``,
where ``logits`` are the parameters of the policy's distribution (``core/policy.py``): ``P = A`` logits of a
categorical over ``A`` actions, or, for a ``d``-dimensional Box (``meta["policy"]``: ``"gaussian"``, or
``"tanh_gaussian"`` when ``tanh`` squashes the actions), ``P = 2d``: the means and the log standard deviations of a
diagonal Gaussian (``GaussianHead``: a state-independent log-std).

- ``a3clstm``: rl_a3c_pytorch's A3C-LSTM for one 80x80 gray frame: 4 x (conv, 2x2 max-pool, ReLU) -> 1024 features
  -> LSTMCell(hidden) -> actor and critic heads. 3.25M parameters at hidden 512, about 59M multiply-adds a step.
- ``mlplstm``: the same recurrent actor-critic for vector observations (classic control): Linear+ReLU -> LSTMCell.
- ``mlp``: a feed-forward actor-critic for vector observations: two tanh layers of ``--hidden-size`` units.
- ``nature``: the feed-forward DQN "Nature" network on 4 stacked 84x84 frames (conv 8/4, 4/2, 3/1 -> 512).
  1.69M parameters (6 actions), about 9M multiply-adds a step.
- ``resnet``: the IMPALA ResNet (3 stages of conv + max-pool + 2 residual blocks, 16/32/32 channels -> 256),
  feed-forward, on 4 stacked 84x84 frames. 1.09M parameters, about 54M multiply-adds a step.

Feed-forward models take and return an empty recurrent state (``[B, 0]`` tensors), so the worker and the evaluator
treat every model alike.

``model.unroll(obs [T, B, ...], state, dones)`` evaluates a whole unroll at once, for training: the
convolutional (or MLP) part sees all ``T x B`` observations in one batch, only the LSTM cell steps through time. It
gives what ``T`` calls of ``forward`` would, with far fewer, larger kernels (docs/results/throughput.md).

The vector networks (``mlp``, ``mlplstm``) can normalise their observations with a running mean and variance
(``ObsNorm``, ``meta["obs_norm"]``): the statistics are parameters that no optimizer touches, so they travel with
the weights (shared model, replicas, checkpoints, model files) and a saved model plays as it trained.

``build_model(meta)`` rebuilds a network from ``model_meta(...)``, the small dict stored with every checkpoint.
"""

import math
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from core.errors import BadInput
from core.policy import GAUSSIANS, Policy, policy_for


def normalized_columns_(weight: torch.Tensor, std: float) -> None:
    """Init a linear layer's weight with rows of norm ``std`` (small policy logits / unit-scale values at start)."""
    with torch.no_grad():
        weight.normal_(0.0, 1.0)
        weight.mul_(std / weight.pow(2).sum(dim=1, keepdim=True).sqrt())


def init_heads(actor_linear: "nn.Linear | GaussianHead", critic_linear: nn.Linear) -> None:
    """rl_a3c_pytorch's start for the heads: small policy logits (std 0.01: a near-uniform first policy), a value
    head of std 1, zero biases."""
    normalized_columns_(actor_linear.weight, 0.01)
    normalized_columns_(critic_linear.weight, 1.0)
    actor_linear.bias.data.zero_()
    critic_linear.bias.data.zero_()


class _HoldIn(torch.autograd.Function):
    """``hold_in``'s forward is a clamp; its backward passes a gradient where the input lies within the bounds, and
    past a bound only a gradient whose descent step points back inside (positive above the upper bound, negative
    below the lower one)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, low: float, high: float) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.low, ctx.high = low, high
        return x.clamp(low, high)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (x,) = ctx.saved_tensors
        outward = ((x > ctx.high) & (grad < 0)) | ((x < ctx.low) & (grad > 0))
        return grad.masked_fill(outward, 0.0), None, None


def hold_in(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """``x`` clamped to ``[low, high]``, with a gradient that can bring a value past a bound back and never takes it
    further out (``_HoldIn``)."""
    return _HoldIn.apply(x, low, high)


# a Gaussian's log-stds: one parameter per dimension, a linear function of the state, or gSDE's (state-dependent
# exploration: ``GaussianHead.make_sde``, ``ExplorationNoise``)
LOG_STDS = ("shared", "state", "sde")


def noise_log_std(x: torch.Tensor, table: torch.Tensor, floor: float) -> torch.Tensor:
    """The log-std of gSDE's noise ``x E`` (``E [features, d]`` of independent normals with log-stds ``table [d,
    features]``), its variance plus ``floor``: ``0.5 log(sum_i x_i^2 exp(2 table[j, i]) + floor)``, summed in log
    space so that it is finite for any table (``exp(2 table)`` overflows float32 past 44). Float32, under --bf16
    too; the features detached."""
    with torch.autocast(x.device.type, enabled=False):
        log_x2 = x.detach().float().pow(2).log().unsqueeze(-2)  # [..., 1, features]; -inf where x_i = 0
        terms = log_x2 + 2 * table.float()  # [..., d, features]
        floors = terms.new_full(terms.shape[:-1] + (1,), math.log(floor))
        return 0.5 * torch.logsumexp(torch.cat([terms, floors], -1), -1)


class GaussianHead(nn.Module):
    """A diagonal Gaussian's parameters for ``d`` action dimensions: the means from the features (a linear layer,
    ``weight``/``bias`` as the categorical head's), the log standard deviations a parameter of their own, the same
    in every state (SB3's and the PPO paper's choice for continuous control; ``make_state_dependent`` for
    log-stds that depend on the state, ``make_sde`` for gSDE's), starting at 0 (std 1, half the
    ``[-1, 1]`` action range; ``--log-std-init``: ``set_log_std``). Returns ``[..., 2d]``. The log-std the policy
    uses is held in [-5, 2] (``hold_in``): past a bound, a gradient that would take it further out is dropped and
    one that brings it back passes, so the entropy bonus cannot push the parameters ever further out (a plain
    clamp's zero gradient would leave them stuck there for good, a straight-through one let them run away)."""

    LOG_STD_RANGE = (-5.0, 2.0)
    SDE_FLOOR = 1e-8  # added to gSDE's variance: features all 0 give a log-std of -9.2 (then the bound, -5)

    def __init__(self, feature_size: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, feature_size))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.log_std = nn.Parameter(torch.zeros(dim))
        self.log_std_weight: nn.Parameter | None = None
        self.sde = False
        nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)

    def make_state_dependent(self) -> None:
        """``--log-std state`` (a3c_continuous's and Sample Factory's ``adaptive_stddev`` way): the log-stds become
        a linear function of the features, ``log_std_weight`` (starting at 0, so the first policy is the same in
        every state) with ``log_std`` as its bias; the same bounds."""
        self.log_std_weight = nn.Parameter(torch.zeros_like(self.weight))

    def make_sde(self) -> None:
        """``--log-std sde``, generalized state-dependent exploration (gSDE: Raffin et al. 2021, SB3's
        ``use_sde``): an action's noise is ``z E``, the features ``z`` (detached: the noise does not train the
        torso) times a matrix ``E`` of independent normals whose log-stds are ``log_std`` (``[d, features]``,
        every entry starting at ``--log-std-init``). ``ExplorationNoise`` draws ``E`` once per rollout, so
        the noise changes smoothly with the state instead of afresh every step. Each step's action is then a
        diagonal Gaussian around the mean with ``var_j = sum_i z_i^2 exp(2 log_std[j, i])``: this head returns
        that log-std, so log-probabilities, entropies, V-trace and the KL terms are the diagonal Gaussian's."""
        self.log_std = nn.Parameter(torch.zeros_like(self.weight))
        self.sde = True

    def sde_log_std(self, x: torch.Tensor) -> torch.Tensor:
        """The log-std of gSDE's noise ``x E`` for the features ``x``, the variance floored: ``0.5 log(sum_i x_i^2
        exp(2 log_std[j, i]) + SDE_FLOOR)`` (``noise_log_std``)."""
        return noise_log_std(x, self.log_std, self.SDE_FLOOR)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = F.linear(x, self.weight, self.bias)
        if self.sde:
            log_std = self.sde_log_std(x)
        elif self.log_std_weight is None:
            log_std = self.log_std
        else:
            log_std = F.linear(x, self.log_std_weight, self.log_std)
        log_std = hold_in(log_std, *self.LOG_STD_RANGE)
        return torch.cat([mean, log_std.to(mean.dtype).expand_as(mean)], -1)


class ExplorationNoise:
    """gSDE's sampling for one worker's ``batch`` environments (``--log-std sde``: ``GaussianHead.make_sde``):
    a noise matrix ``E`` per environment, ``[features, d]`` normals of std ``exp(log_std)`` (each dimension's
    scaled by a constant that keeps it finite), drawn by ``resample``
    (once per rollout: SB3's default ``sde_sample_freq=-1``); ``sample(logits)`` is the mean plus ``z E``, with
    ``z`` the features of the head's latest forward (a forward hook keeps them). Within a rollout the same state
    gets the same action, and nearby states nearby ones; over the draws of ``E`` each action is the head's
    diagonal Gaussian, also where the head's log-std is not the noise's own (the bounds, ``LOG_STD_RANGE``, and
    the variance floor): the noise is scaled to the std the head gives, which the log-probabilities use."""

    def __init__(self, model: nn.Module, batch: int):
        self.head, self.batch = model.actor_linear, batch
        self.features: torch.Tensor | None = None
        self.matrices: torch.Tensor | None = None
        self.table: torch.Tensor | None = None
        self.head.register_forward_hook(self._keep)

    def _keep(self, module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        self.features = inputs[0].detach().float()

    def resample(self) -> None:
        # each action dimension's table shifted to a largest entry of 0, so that exp() stays finite; the scale in
        # ``sample`` undoes the shift
        table = self.head.log_std.detach().float()
        self.table = table - table.amax(-1, keepdim=True)  # [d, features]
        std = self.table.exp().t()  # [features, d]
        self.matrices = torch.randn((self.batch,) + tuple(std.shape), device=std.device) * std

    def sample(self, logits: torch.Tensor) -> torch.Tensor:
        mean = logits[..., :self.matrices.shape[-1]].float()
        noise = torch.bmm(self.features.unsqueeze(1), self.matrices).squeeze(1)
        with torch.no_grad():  # the head's log-std over the noise's own (which the bounds, floor and shift change)
            scale = (logits[..., self.matrices.shape[-1]:].float()
                     - noise_log_std(self.features, self.table, 1e-30)).exp()
        return mean + noise * scale


def exploration_noise(model: nn.Module, batch: int) -> ExplorationNoise | None:
    """The sampler a worker's rollouts use for ``model``: gSDE's for ``--log-std sde``, else None (the
    distribution's own ``sample``)."""
    head = getattr(model, "actor_linear", None)
    return ExplorationNoise(model, batch) if isinstance(head, GaussianHead) and head.sde else None


def set_log_std(model: nn.Module, value: float) -> None:
    """Start a Gaussian policy's log standard deviations at ``value`` (``--log-std-init``; a fresh model's only: a
    resumed or loaded one keeps its own; with ``--log-std state``, the bias of their layer, whose weight starts at
    0; with ``--log-std sde``, every entry of the noise matrix's log-stds). A categorical policy has none: nothing
    to do."""
    if isinstance(model.actor_linear, GaussianHead):
        with torch.no_grad():
            model.actor_linear.log_std.fill_(value)


def actor_head(feature_size: int, num_actions: int, policy: str) -> nn.Linear | GaussianHead:
    """The policy head: logits of a categorical, or a ``GaussianHead`` for either Gaussian policy (clipped or
    squashed: ``core.policy.GAUSSIANS``)."""
    return GaussianHead(feature_size, num_actions) if policy in GAUSSIANS else nn.Linear(feature_size, num_actions)


def distribution(num_actions: int, policy: str) -> Policy:
    """What the head's output parameterises (``core/policy.py``): every model keeps it as ``model.policy``."""
    return policy_for({"num_actions": num_actions, "policy": policy})


class ObsNorm(nn.Module):
    """Observations normalised by a running mean and variance, then clipped to [-10, 10] (SB3's VecNormalize and
    CleanRL's continuous-control recipe). The statistics are parameters without gradients (optimizers skip them:
    ``trainable``), so they are shared, pulled and saved with the weights; one process updates them (``update``:
    A3G's worker 0, IMPALA's learner) from the observations it trains on."""

    def __init__(self, size: int):
        super().__init__()
        self.mean = nn.Parameter(torch.zeros(size), requires_grad=False)
        self.var = nn.Parameter(torch.ones(size), requires_grad=False)
        self.count = nn.Parameter(torch.full((1,), 1e-4), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean) * torch.rsqrt(self.var + 1e-8)).clamp(-10.0, 10.0)

    @torch.no_grad()
    def update(self, obs: torch.Tensor) -> None:
        """Merge a batch ``[..., size]`` into the statistics (Chan et al.'s parallel update of mean and variance)."""
        batch = obs.reshape(-1, self.mean.numel()).double()
        n, count = batch.shape[0], self.count.double()
        if n == 0:
            return
        mean, var = batch.mean(0), batch.var(0, unbiased=False)
        delta, total = mean - self.mean.double(), count + n
        m2 = self.var.double() * count + var * n + delta.pow(2) * count * n / total
        self.mean.copy_(self.mean.double() + delta * n / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)


def pixels(x: torch.Tensor, frame_norm: str = "scale") -> torch.Tensor:
    """A conv network's input as it computes on it, from uint8 frames ``[..., H, W]`` (envs/frames.py), here, on
    the side that computes, once per forward: scaled to [0, 1] (``frame_norm`` ``scale``), the same less the
    frame's darkest value (``darkest``: a uniform background made black), or with ``frame`` standardised per frame,
    ``(x - mean) / sqrt(var + 1e-6)`` over its pixels in 0-255 units (the same as in [0, 1] but for the tiny term
    that keeps a blank frame at 0; rl_a3c_pytorch normalises each frame by running averages of frames' means and
    stds, this takes the frame's own). Float frames (``--frame-norm running``: normalised already, by the
    environment) pass as they come."""
    if x.dtype != torch.uint8:
        return x
    if frame_norm == "darkest":  # no pixel is below its frame's darkest: the difference stays in uint8's range
        x = x - x.flatten(-2).amin(-1)[..., None, None]
    x = x.float()
    if frame_norm in ("scale", "darkest"):
        return x.mul_(1.0 / 255.0)
    # in 0-255 units (the standardised frame is the same); mean and mean square in one pass each: ~5x faster on a
    # CPU than torch.std_mean over the last two dimensions
    flat = x.flatten(-2)
    mean = flat.mean(-1, keepdim=True)
    var = flat.square().mean(-1, keepdim=True) - mean.square()
    return ((flat - mean) * torch.rsqrt(var.clamp_min(0.0) + 1e-6)).view_as(x)


def obs_dtype(meta: dict) -> torch.dtype:
    """The dtype the observations of the network ``meta`` describes travel in (rollouts, unrolls, replays, Ray):
    ``uint8`` frames, or float32 (vectors, and frames normalised the ``running`` way)."""
    return torch.uint8 if meta.get("obs_dtype") == "uint8" else torch.float32


def trainable(parameters) -> list[torch.Tensor]:
    """The parameters an optimizer steps: all but ``ObsNorm``'s statistics."""
    return [p for p in parameters if p.requires_grad]


class RecurrentActorCritic(nn.Module):
    """The LSTM core and the two heads, shared by every network; subclasses define ``features(obs)``."""

    def __init__(self, feature_size: int, num_actions: int, hidden_size: int, policy: str = "categorical"):
        super().__init__()
        self.hidden_size = hidden_size
        self.lstm = nn.LSTMCell(feature_size, hidden_size)
        self.critic_linear = nn.Linear(hidden_size, 1)
        self.actor_linear = actor_head(hidden_size, num_actions, policy)
        self.policy = distribution(num_actions, policy)

    def _init_core(self):
        self.lstm.bias_ih.data.zero_()
        self.lstm.bias_hh.data.zero_()
        init_heads(self.actor_linear, self.critic_linear)

    def initial_state(self, batch_size: int = 1,
                      device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        zeros = torch.zeros(batch_size, self.hidden_size, device=device)
        return zeros, zeros.clone()

    def forward(self, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor],
                with_features: bool = False) -> tuple:
        hx, cx = self.lstm(self.features(obs), state)
        # CUDA autocast runs the LSTM cell in bfloat16 (--bf16): the state carried to the next step and rollout
        # stays float32 on every device, as it is on the CPU (a no-op there)
        hx, cx = hx.float(), cx.float()
        out = (self.critic_linear(hx).squeeze(-1), self.actor_linear(hx), (hx, cx))
        return out + (hx,) if with_features else out  # what the heads read (replay's elite sampling)

    def unroll(self, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor], dones: torch.Tensor | None = None,
               with_features: bool = False, with_states: bool = False) -> tuple:
        """``obs [T, B, ...]`` from recurrent state ``state``; ``dones[t]`` (``[B]``, for ``t < T - 1`` at least)
        is 1 where the step taken at ``obs[t]`` ended an episode: the state is zeroed before ``obs[t + 1]``.
        Returns ``values [T, B]``, ``logits [T, B, A]`` and the state after the last step (not cut); with
        ``with_features`` also what the heads read, ``[T, B, F]``; with ``with_states`` also the state after each
        step, before any cut, ``([T, B, H], [T, B, H])`` (where an episode cut by a time limit would have gone
        on: IMPALA's learner bootstraps from there)."""
        steps, batch = obs.shape[:2]
        features = self.features(obs.flatten(0, 1)).unflatten(0, (steps, batch))
        hx, cx = state
        outputs, cells = [], []
        for t in range(steps):
            if dones is not None and t > 0:
                keep = (1.0 - dones[t - 1]).unsqueeze(1)
                hx, cx = hx * keep, cx * keep
            hx, cx = self.lstm(features[t], (hx, cx))
            hx, cx = hx.float(), cx.float()
            outputs.append(hx)
            cells.append(cx)
        hidden = torch.stack(outputs)
        out = (self.critic_linear(hidden).squeeze(-1), self.actor_linear(hidden), (hx, cx))
        if with_features:
            out += (hidden,)
        return out + ((hidden, torch.stack(cells)),) if with_states else out


class A3Clstm(RecurrentActorCritic):
    def __init__(self, obs_shape: Sequence[int], num_actions: int, hidden_size: int = 512, policy: str = "categorical",
                 frame_norm: str = "scale"):
        channels = obs_shape[0]
        super().__init__(64 * 4 * 4, num_actions, hidden_size, policy)
        self.frame_norm = frame_norm  # how uint8 frames are normalised (pixels)
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

    def features(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(pixels(x, self.frame_norm)), 2, 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2, 2))
        x = F.relu(F.max_pool2d(self.conv3(x), 2, 2))
        x = F.relu(F.max_pool2d(self.conv4(x), 2, 2))
        return x.flatten(1)


class MLPlstm(RecurrentActorCritic):
    def __init__(self, obs_shape: Sequence[int], num_actions: int, hidden_size: int = 128, policy: str = "categorical",
                 obs_norm: bool = False):
        super().__init__(hidden_size, num_actions, hidden_size, policy)
        self.obs_norm = ObsNorm(obs_shape[0]) if obs_norm else nn.Identity()
        self.fc = nn.Linear(obs_shape[0], hidden_size)
        nn.init.xavier_uniform_(self.fc.weight, gain=nn.init.calculate_gain("relu"))
        self.fc.bias.data.zero_()
        self._init_core()

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.fc(self.obs_norm(x)))


class FeedForwardActorCritic(nn.Module):
    """Heads over ``features(obs)``; the recurrent state is empty and passed through."""

    hidden_size: int = 0

    def __init__(self, feature_size: int, num_actions: int, policy: str = "categorical"):
        super().__init__()
        self.critic_linear = nn.Linear(feature_size, 1)
        self.actor_linear = actor_head(feature_size, num_actions, policy)
        self.policy = distribution(num_actions, policy)
        init_heads(self.actor_linear, self.critic_linear)

    def initial_state(self, batch_size: int = 1,
                      device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        empty = torch.zeros(batch_size, 0, device=device)
        return empty, empty.clone()

    def forward(self, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor],
                with_features: bool = False) -> tuple:
        x = self.features(obs)
        out = (self.critic_linear(self.critic_features(obs, x)).squeeze(-1), self.actor_linear(x), state)
        return out + (x,) if with_features else out

    def critic_features(self, obs: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """What the value head reads: the policy's ``features`` (one torso for both heads), unless a network
        gives its critic a torso of its own (``MLP``'s ``critic="separate"``)."""
        return features

    def unroll(self, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor], dones: torch.Tensor | None = None,
               with_features: bool = False, with_states: bool = False) -> tuple:
        """``obs [T, B, ...]`` as one batch of ``T x B``; see ``RecurrentActorCritic.unroll`` (the states after
        each step are the empty ``[T, B, 0]``)."""
        steps, batch = obs.shape[:2]
        flat = obs.flatten(0, 1)
        x = self.features(flat)
        values, logits = self.critic_linear(self.critic_features(flat, x)).squeeze(-1), self.actor_linear(x)
        out = (values.unflatten(0, (steps, batch)), logits.unflatten(0, (steps, batch)), state)
        if with_features:
            out += (x.unflatten(0, (steps, batch)),)
        return out + (tuple(s.expand(steps, *s.shape) for s in state),) if with_states else out


CRITICS = ("shared", "separate")  # the mlp's value head: on the policy's torso, or on two layers of its own


class MLP(FeedForwardActorCritic):
    """Two tanh layers of ``width`` units shared by both heads (the usual network for classic control), or, with
    ``critic="separate"``, read by the policy's head alone, the value head reading two layers of its own over the
    same normalised observations (SB3's and CleanRL's actor-critic MLPs: no value-loss gradient reaches the
    policy's features)."""

    def __init__(self, obs_shape: Sequence[int], num_actions: int, width: int = 64, policy: str = "categorical",
                 obs_norm: bool = False, critic: str = "shared"):
        super().__init__(width, num_actions, policy)
        self.obs_norm = ObsNorm(obs_shape[0]) if obs_norm else nn.Identity()
        self.fc1 = nn.Linear(obs_shape[0], width)
        self.fc2 = nn.Linear(width, width)
        layers = [self.fc1, self.fc2]
        self.critic_fc1 = self.critic_fc2 = None
        if critic == "separate":
            self.critic_fc1 = nn.Linear(obs_shape[0], width)
            self.critic_fc2 = nn.Linear(width, width)
            layers += [self.critic_fc1, self.critic_fc2]
        for layer in layers:
            nn.init.orthogonal_(layer.weight, nn.init.calculate_gain("tanh"))
            layer.bias.data.zero_()

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc2(torch.tanh(self.fc1(self.obs_norm(x)))))

    def critic_features(self, obs: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        if self.critic_fc1 is None:
            return features
        return torch.tanh(self.critic_fc2(torch.tanh(self.critic_fc1(self.obs_norm(obs)))))


class Nature(FeedForwardActorCritic):
    def __init__(self, obs_shape: Sequence[int], num_actions: int, hidden_size: int = 512, policy: str = "categorical",
                 frame_norm: str = "scale"):
        super().__init__(512, num_actions, policy)
        self.frame_norm = frame_norm  # how uint8 frames are normalised (pixels)
        self.conv1 = nn.Conv2d(obs_shape[0], 32, 8, stride=4)
        self.conv2 = nn.Conv2d(32, 64, 4, stride=2)
        self.conv3 = nn.Conv2d(64, 64, 3, stride=1)
        self.fc = nn.Linear(64 * 7 * 7, 512)
        for layer in (self.conv1, self.conv2, self.conv3, self.fc):
            nn.init.orthogonal_(layer.weight, nn.init.calculate_gain("relu"))
            layer.bias.data.zero_()

    def features(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(pixels(x, self.frame_norm)))
        x = F.relu(self.conv2(x))
        x = F.relu(self.conv3(x))
        return F.relu(self.fc(x.flatten(1)))


class ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(F.relu(self.conv1(F.relu(x))))


class ResNet(FeedForwardActorCritic):
    """Espeholt et al., "IMPALA" (2018), Figure 3 (right), without the LSTM."""

    def __init__(self, obs_shape: Sequence[int], num_actions: int, hidden_size: int = 256, policy: str = "categorical",
                 frame_norm: str = "scale"):
        super().__init__(256, num_actions, policy)
        self.frame_norm = frame_norm  # how uint8 frames are normalised (pixels)
        stages, channels = [], obs_shape[0]
        for out in (16, 32, 32):
            stages += [nn.Conv2d(channels, out, 3, padding=1), nn.MaxPool2d(3, stride=2, padding=1),
                       ResidualBlock(out), ResidualBlock(out)]
            channels = out
        self.stages = nn.Sequential(*stages)
        size = obs_shape[1]
        for _ in range(3):
            size = (size + 1) // 2
        self.fc = nn.Linear(channels * size * size, 256)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.stages(pixels(x, self.frame_norm)))
        return F.relu(self.fc(x.flatten(1)))


MODELS = {"a3clstm": A3Clstm, "mlplstm": MLPlstm, "mlp": MLP, "nature": Nature, "resnet": ResNet}
CONV_MODELS = ("a3clstm", "nature", "resnet")
# the observation each image model is built for: (frame size, frames stacked)
FRAME_FORMAT = {"a3clstm": (80, 1), "nature": (84, 4), "resnet": (84, 4)}


def fast_layout(model: nn.Module, meta: dict, enabled: bool = True) -> nn.Module:
    """Channels-last weights for conv models: about 1.3-2x faster convolutions on CPU (docs/results/throughput.md). Loading
    weights into such a replica and copying its gradients out work unchanged (copy_ converts layouts)."""
    if enabled and meta["model"] in CONV_MODELS:
        model = model.to(memory_format=torch.channels_last)
    return model


def choose_model(name: str, obs_shape: Sequence[int]) -> str:
    """``name``, checked against the observation's shape (``--model auto`` is resolved before this, by the defaults
    of ``runtime.defaults``)."""
    image = len(obs_shape) == 3
    if name == "a3clstm" and (not image or tuple(obs_shape[1:]) != (80, 80)):
        raise BadInput(f"--model a3clstm needs [C, 80, 80] frames, this environment gives {list(obs_shape)}")
    if name in ("nature", "resnet") and (not image or tuple(obs_shape) != (4, 84, 84)):
        raise BadInput(f"--model {name} needs Atari frames (4 stacked 84x84), this environment gives "
                         f"{list(obs_shape)}")
    if name in ("mlplstm", "mlp") and len(obs_shape) != 1:
        raise BadInput(f"--model {name} needs vector observations, this environment gives {list(obs_shape)}")
    return name


RECURRENT_MODELS = ("a3clstm", "mlplstm")


VECTOR_MODELS = ("mlplstm", "mlp")


def model_meta(name: str, obs_shape: Sequence[int], num_actions: int, hidden_size: int, policy: str = "categorical",
               obs_norm: bool = False, uint8: bool = False, frame_norm: str = "frame", log_std: str = "shared",
               critic: str = "shared") -> dict:
    """The plain-data description a checkpoint stores so that the network can be rebuilt without any flags.
    ``hidden_size`` is the recurrent state's size: feed-forward networks store 0, whatever the flag says; ``mlp``
    stores the flag as its layers' ``width``. ``num_actions`` is the number of actions, or a Box's dimensions for
    ``policy="gaussian"`` or ``"tanh_gaussian"``; ``obs_norm`` (vector networks only) adds ``ObsNorm``. Both are
    stored only where they differ from the default, so a file written before them describes the same network; so
    are ``uint8`` (the observations are uint8 frames: ``obs_dtype``) and how the network normalises them
    (``frame_norm``, ``pixels``), which a file written before them never had, and a Gaussian's ``log_std``
    (``LOG_STDS``: "state" where the log-stds are a function of the features, "sde" for gSDE's) and the mlp's
    ``critic`` ("separate": a torso of its own for the value head)."""
    meta = {"model": name, "obs_shape": [int(d) for d in obs_shape], "num_actions": int(num_actions),
            "hidden_size": int(hidden_size) if name in RECURRENT_MODELS else 0}
    if name == "mlp":
        meta["width"] = int(hidden_size)
    if policy != "categorical":
        meta["policy"] = policy
    if obs_norm and name in VECTOR_MODELS:
        meta["obs_norm"] = True
    if uint8:
        meta["obs_dtype"], meta["frame_norm"] = "uint8", frame_norm
    if log_std != "shared" and policy in GAUSSIANS:
        meta["log_std"] = log_std
    if critic != "shared" and name == "mlp":
        meta["critic"] = critic
    return meta


def describe_network(meta: dict) -> str:
    """The network in a few words, for a header line: its name and the size that sets it apart (and a Gaussian
    policy's dimensions, normalised observations)."""
    if meta.get("model") in RECURRENT_MODELS:
        text = f"{meta['model']}, hidden {meta['hidden_size']}"
    elif meta.get("model") == "mlp":
        text = f"mlp, width {meta['width']}"
    else:
        text = str(meta.get("model"))
    if meta.get("policy") in GAUSSIANS:
        text += f", Gaussian policy over {meta['num_actions']} dimension(s)"
        text += ", squashed by tanh" if meta["policy"] == "tanh_gaussian" else ""
        text += {"state": ", log-std from the state", "sde": ", state-dependent exploration (gSDE)"}.get(
            meta.get("log_std"), "")
    text += ", a separate critic" if meta.get("critic") == "separate" else ""
    return text + (", normalised observations" if meta.get("obs_norm") else "")


def feature_size(meta: dict) -> int:
    """The size of what the policy's head reads (``forward(..., with_features=True)``): the LSTM's hidden state,
    or the feed-forward torso's output (the value head's too, unless the mlp's critic is separate)."""
    if meta["model"] in RECURRENT_MODELS:
        return meta["hidden_size"]
    if meta["model"] == "mlp":
        return meta["width"]
    return {"nature": 512, "resnet": 256}[meta["model"]]


def same_network(a: dict, b: dict) -> bool:
    """Whether two ``model_meta`` dicts describe the same network. A feed-forward network's ``hidden_size`` is
    ignored: files written before it was stored as 0 hold the flag's value (512), which the network never used."""
    def key(meta):
        return {**meta, "hidden_size": meta.get("hidden_size") if meta.get("model") in RECURRENT_MODELS else 0}

    return key(a) == key(b)


def build_model(meta: dict) -> RecurrentActorCritic | FeedForwardActorCritic:
    """The network that ``meta`` (``model_meta``) describes, freshly initialised; an unknown model is BadInput."""
    if meta.get("model") not in MODELS:
        raise BadInput(f"unknown model {meta.get('model')!r}; known: {', '.join(MODELS)}")
    if meta.get("policy", "categorical") not in ("categorical",) + GAUSSIANS:
        raise BadInput(f"unknown policy {meta.get('policy')!r}; known: categorical, {', '.join(GAUSSIANS)}")
    if meta.get("log_std", "shared") not in LOG_STDS or (meta.get("log_std") and meta.get("policy") not in GAUSSIANS):
        raise BadInput(f"unknown log-std {meta.get('log_std')!r} for policy {meta.get('policy', 'categorical')!r}; "
                       f"known: {', '.join(LOG_STDS)}, for {', '.join(GAUSSIANS)}")
    if meta.get("critic", "shared") not in CRITICS or (meta.get("critic") and meta["model"] != "mlp"):
        raise BadInput(f"unknown critic {meta.get('critic')!r} for model {meta['model']!r}; known: "
                       f"{', '.join(CRITICS)}, for mlp")
    size = meta["width"] if meta["model"] == "mlp" else meta["hidden_size"]
    extra = {"obs_norm": True} if meta.get("obs_norm") else {}
    if meta.get("critic"):
        extra["critic"] = meta["critic"]
    if meta.get("frame_norm"):
        extra["frame_norm"] = meta["frame_norm"]
    model = MODELS[meta["model"]](meta["obs_shape"], meta["num_actions"], size, meta.get("policy", "categorical"),
                                  **extra)
    if meta.get("log_std") == "state":
        model.actor_linear.make_state_dependent()
    elif meta.get("log_std") == "sde":
        model.actor_linear.make_sde()
    return model


# ---------------------------------------------------------------------------------------------------------------
# Flat parameter buffers: the hand-off between the shared model and a replica in one copy each way


def _dense(t):
    return t.is_contiguous() or t.is_contiguous(memory_format=torch.channels_last)


def _views(flat, params):
    """Views of ``flat`` with each parameter's shape and strides (a channels-last weight stays channels-last)."""
    views, offset = [], 0
    for p in params:
        views.append(flat[offset: offset + p.numel()].as_strided(p.shape, p.stride()))
        offset += p.numel()
    return views


def flatten_parameters(model: nn.Module, shared: bool = False) -> torch.Tensor:
    """Move every parameter of ``model`` into one flat buffer (each a view in its own layout), in shared memory if
    ``shared``; returns the buffer. Call it last (``.to()`` and ``fast_layout`` would replace the views)."""
    params = list(model.parameters())
    flat = torch.empty(sum(p.numel() for p in params), device=params[0].device)
    if shared:
        flat.share_memory_()
    for p, view in zip(params, _views(flat, params)):
        view.copy_(p.data)
        p.data = view
    return flat


def flat_buffer(params: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The flat buffer that ``params`` tile in order (``flatten_parameters``; also in a child process that received
    the shared model), or None where they do not."""
    if not params or not all(_dense(p) for p in params):
        return None
    storage, offset = params[0].untyped_storage(), params[0].storage_offset()
    for p in params:
        if p.untyped_storage().data_ptr() != storage.data_ptr() or p.storage_offset() != offset:
            return None
        offset += p.numel()
    first = params[0]
    return torch.empty(0, dtype=first.dtype, device=first.device).set_(storage, first.storage_offset(),
                                                                        (offset - first.storage_offset(),), (1,))


def flat_grads(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """Give ``params`` gradient buffers that are views of one zeroed flat buffer, in their layouts; returns it."""
    flat = torch.zeros(sum(p.numel() for p in params), device=params[0].device)
    for p, view in zip(params, _views(flat, params)):
        p.grad = view
    return flat


class Replica:
    """A process's copy of the shared model (on its device) and the hand-off between them: ``pull`` copies the
    shared weights in, ``push_grads`` copies the replica's gradients into this process's gradient buffers of the
    shared parameters (for the optimizer step that follows).

    Both sides keep their parameters, and their gradients, as views of one flat buffer each, laid out alike (the
    same ``fast_layout``), so each direction is one copy: for a GPU replica one host-to-device and one
    device-to-host transfer an update instead of one per tensor, each a synchronisation. Where the layouts differ
    (a shared model not flattened), it falls back to a copy per tensor, which ``copy_`` also converts."""

    def __init__(self, shared_model: nn.Module, model: nn.Module, train: bool = True):
        self.shared_model, self.model = shared_model, model
        self.local = flatten_parameters(model)
        shared_params, local_params = list(shared_model.parameters()), list(model.parameters())
        self.shared = flat_buffer(shared_params)
        alike = all(s.shape == p.shape and s.stride() == p.stride() for s, p in zip(shared_params, local_params))
        if not alike or self.shared is None or self.shared.numel() != self.local.numel():
            self.shared = None
        self.shared_params, self.local_params = shared_params, local_params
        if train:
            self.local_grads = flat_grads(local_params)
            self.shared_grads = flat_grads(shared_params)  # this process's own, overwritten every update

    @property
    def one_copy(self) -> bool:
        """Whether both sides are flat buffers laid out alike, so that each hand-off is one copy."""
        return self.shared is not None

    def pull(self) -> None:
        """The shared weights into the replica."""
        if self.shared is not None:
            self.local.copy_(self.shared)
        else:
            for p, s in zip(self.local_params, self.shared_params):
                p.data.copy_(s.data)

    def push_grads(self) -> None:
        """The replica's gradients into this process's gradient buffers of the shared parameters."""
        if self.shared is not None:
            self.shared_grads.copy_(self.local_grads)
        else:
            for s, p in zip(self.shared_params, self.local_params):
                s.grad.copy_(p.grad)
