"""The unroll layout that IMPALA's slot store (impala/shm.py ``UnrollStore``) and the replays (impala/replay.py
``ReplayBuffer``) share: per slot ``obs [T + 1, ...]``, ``actions`` (``[T]`` integers, or ``[T, d]`` floats for a
Gaussian policy), ``rewards``, ``dones`` ``[T]``, the behaviour policy's parameters ``logits [T, P]``
(``core/policy.py``) and ``values [T]`` (CLEAR's cloning losses clone both), the recurrent state ``hx``/``cx`` before
``obs[0]``, ``features [T, F]`` (F = 0 unless a replay ranks by them), and what a time limit's cut needs:
``truncated [T]`` (1 where a time limit, not the game, ended the episode at that step) and ``final_obs [K, ...]``
(the observations those episodes were cut at, the unroll's first cut in row 0), in shared memory, allocated once;
one unroll stored into a slot, and their time-major read-out for the learner.

Stacked frames are stored once (``frame_stack`` k > 1, uint8 frames): an observation ``[k, H, W]`` shares k - 1
frames with the one before it, so a slot keeps ``frames [T + k, H, W]``, the first observation's k frames and then
each later observation's newest (``pack_frames``), and the read-out rebuilds the stacks (``unpack_frames``) from
them and ``dones``: where an episode began (a reset fills the stack with its first frame, gymnasium's reset
padding, envs/frames.py), the frames before it are that first frame. A Pong unroll of 20 steps: 24 frames of
84 x 84 bytes instead of 21 x 4.

Why the cut observation is stored rather than its value: a cut is not a terminal state, so the step's target is
``r + gamma * V(cut observation)``, and that value must be the learner's, with the weights of its loss (as an
A3G worker's is), also when the unroll is replayed thousands of updates later; an actor's value at acting time
would be a stale constant baked into the reward. ``obs[t + 1]`` cannot hold it: there the next episode begins."""

from collections.abc import Sequence

import torch

from core.policy import policy_for
from model import obs_dtype


def pack_frames(obs: torch.Tensor, k: int) -> torch.Tensor:
    """``obs [T + 1, ..., k, H, W]`` -> ``[T + k, ..., H, W]``: the first observation's k frames, then the newest
    frame of each later one."""
    return torch.cat([obs[0].movedim(-3, 0), obs[1:, ..., -1, :, :]])


def unpack_frames(frames: torch.Tensor, dones: torch.Tensor, k: int) -> torch.Tensor:
    """``pack_frames``' inverse for a time-major batch: ``frames [T + k, n, H, W]`` and ``dones [T, n]`` (1 where
    the step ended an episode: the next observation is a reset's) -> ``obs [T + 1, n, k, H, W]``. Frame j of
    observation t is the frame of time ``t - (k - 1) + j``, or, where that is before the episode's first
    observation at time s (within the unroll), the frame of time s; time p is row ``p + k - 1`` of ``frames``."""
    return frames[stack_rows(dones, k), torch.arange(frames.shape[1])[None, :, None]]


def stack_rows(dones: torch.Tensor, k: int) -> torch.Tensor:
    """The rows of packed frames that make each observation's stack: ``[T + 1, n, k]`` (``unpack_frames``)."""
    steps, n = dones.shape[0] + 1, dones.shape[1]
    time = torch.arange(steps)
    no_start = -(k - 1)  # the earliest time the rows hold: clamping to it changes nothing
    starts = torch.full((steps, n), no_start, dtype=torch.long)
    starts[1:] = torch.where(dones > 0, time[1:, None], no_start)
    starts = starts.cummax(0).values  # the latest episode start at or before t
    wanted = time[:, None, None] - (k - 1) + torch.arange(k)  # [T + 1, 1, k]
    return torch.maximum(wanted, starts[:, :, None]) + (k - 1)


class UnrollSlots:
    """``slots`` unrolls of ``unroll_length`` steps in the layout above, allocated once (``share_memory`` to share)."""

    def __init__(self, slots: int, unroll_length: int, obs_shape: Sequence[int], num_actions: int, hidden_size: int,
                 feature_size: int = 0, *, final_slots: int = 1, action_shape: Sequence[int] = (),
                 obs_dtype: torch.dtype = torch.float32, frame_stack: int = 1) -> None:
        """``num_actions``: the width ``P`` of the policy's parameters; ``action_shape``: one action's, ``()`` for
        an integer; ``obs_dtype``: uint8 for frames; ``frame_stack``: k > 1 where the observations are stacks of k
        frames, each stored once (``policy_layout(meta)`` gives all four for a network, as keywords)."""
        T = unroll_length
        self.frame_stack = frame_stack
        if frame_stack > 1:
            self.obs = torch.zeros((slots, T + frame_stack, *obs_shape[1:]), dtype=obs_dtype)
        else:
            self.obs = torch.zeros((slots, T + 1, *obs_shape), dtype=obs_dtype)
        self.actions = torch.zeros((slots, T, *action_shape), dtype=torch.float32 if action_shape else torch.int64)
        self.rewards = torch.zeros((slots, T))
        self.dones = torch.zeros((slots, T))
        self.truncated = torch.zeros((slots, T))
        self.final_obs = torch.zeros((slots, final_slots, *obs_shape), dtype=obs_dtype)
        self.logits = torch.zeros((slots, T, num_actions))
        self.values = torch.zeros((slots, T))
        self.hx = torch.zeros((slots, hidden_size))
        self.cx = torch.zeros((slots, hidden_size))
        self.features = torch.zeros((slots, T, feature_size))

    def share_memory(self) -> None:
        """Every tensor attribute (the subclass's own too) into shared memory."""
        for tensor in vars(self).values():
            if torch.is_tensor(tensor):
                tensor.share_memory_()

    def store(self, slot: int, unroll: dict[str, torch.Tensor]) -> None:
        """Store one unroll (``unroll``: one column of a time-major batch, see ``column``) into ``slot``."""
        obs = unroll["obs"]
        self.obs[slot] = pack_frames(obs, self.frame_stack) if self.frame_stack > 1 else obs
        self.actions[slot] = unroll["actions"]
        self.rewards[slot], self.dones[slot] = unroll["rewards"], unroll["dones"]
        self.truncated[slot], self.final_obs[slot] = unroll["truncated"], unroll["final_obs"]
        self.logits[slot], self.values[slot] = unroll["logits"], unroll["values"]
        self.hx[slot], self.cx[slot] = unroll["hx"], unroll["cx"]
        if self.features.shape[-1]:
            self.features[slot] = unroll["features"]

    def read(self, slots: torch.Tensor | list[int], steps: int | None = None) -> dict[str, torch.Tensor]:
        """The unrolls in ``slots``, time-major: ``[T + 1, n, ...]`` observations, ``[K, n, ...]`` final ones,
        ``[T, n, ...]`` the rest, ``[n, H]`` states (copies: indexing with a list of slots copies); with ``steps``
        only their first ``steps`` steps (``[steps + 1, n, ...]`` observations, ``[steps, n, ...]`` the rest)."""
        T = self.dones.shape[1] if steps is None else steps
        dones = self.dones[slots, :T].t()
        obs = self.obs[slots, :T + self.frame_stack].transpose(0, 1)
        if self.frame_stack > 1:
            obs = unpack_frames(obs, dones, self.frame_stack)
        batch = {"obs": obs, "actions": self.actions[slots, :T].transpose(0, 1),
                 "rewards": self.rewards[slots, :T].t(), "dones": dones,
                 "truncated": self.truncated[slots, :T].t(), "final_obs": self.final_obs[slots].transpose(0, 1),
                 "logits": self.logits[slots, :T].transpose(0, 1), "values": self.values[slots, :T].t(),
                 "hx": self.hx[slots], "cx": self.cx[slots]}
        if self.features.shape[-1]:
            batch["features"] = self.features[slots, :T].transpose(0, 1)
        return batch


def stacked_frames(meta: dict) -> int:
    """k where the network ``meta`` describes reads stacks of k > 1 uint8 frames (each stored once in unrolls and
    replays), else 1 (vectors, single frames, and ``--frame-norm running``'s float frames, stored whole)."""
    shape = meta["obs_shape"]
    return shape[0] if obs_dtype(meta) == torch.uint8 and len(shape) == 3 and shape[0] > 1 else 1


def policy_layout(meta: dict) -> dict:
    """What the unroll layout takes from the network ``meta`` describes: ``num_actions`` (the policy parameters'
    width), ``action_shape``, ``obs_dtype`` (``model.obs_dtype``) and ``frame_stack`` (``stacked_frames``), as
    keywords for ``UnrollSlots`` and its subclasses (``UnrollSlots(n, T, obs_shape, **policy_layout(meta), ...)``)."""
    policy = policy_for(meta)
    return {"num_actions": policy.params, "action_shape": policy.action_shape, "obs_dtype": obs_dtype(meta),
            "frame_stack": stacked_frames(meta)}


def column(batch: dict[str, torch.Tensor], j: int) -> dict[str, torch.Tensor]:
    """Unroll ``j`` of a time-major batch, in the slots' per-unroll layout."""
    unroll = {key: value[:, j] for key, value in batch.items() if key not in ("hx", "cx")}
    unroll["hx"], unroll["cx"] = batch["hx"][j], batch["cx"][j]
    return unroll
