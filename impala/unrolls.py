"""The unroll layout that IMPALA's slot store (impala/shm.py ``UnrollStore``) and the replays (impala/replay.py
``ReplayBuffer``) share: per slot ``obs [T + 1, ...]``, ``actions`` (``[T]`` integers, or ``[T, d]`` floats for a
Gaussian policy), ``rewards``, ``dones`` ``[T]``, the behaviour policy's parameters ``logits [T, P]``
(``core/policy.py``) and ``values [T]`` (CLEAR's cloning losses clone both), the recurrent state ``hx``/``cx`` before
``obs[0]``, ``features [T, F]`` (F = 0 unless a replay ranks by them), and what a time limit's cut needs:
``truncated [T]`` (1 where a time limit, not the game, ended the episode at that step) and ``final_obs [K, ...]``
(the observations those episodes were cut at, the unroll's first cut in row 0), in shared memory, allocated once;
one unroll stored into a slot, and their time-major read-out for the learner.

Why the cut observation is stored rather than its value: a cut is not a terminal state, so the step's target is
``r + gamma * V(cut observation)``, and that value must be the learner's, with the weights of its loss (as an
A3G worker's is), also when the unroll is replayed thousands of updates later; an actor's value at acting time
would be a stale constant baked into the reward. ``obs[t + 1]`` cannot hold it: there the next episode begins."""

from collections.abc import Sequence

import torch

from core.policy import policy_for


class UnrollSlots:
    """``slots`` unrolls of ``unroll_length`` steps in the layout above, allocated once (``share_memory`` to share)."""

    def __init__(self, slots: int, unroll_length: int, obs_shape: Sequence[int], num_actions: int, hidden_size: int,
                 feature_size: int = 0, final_slots: int = 1, action_shape: Sequence[int] = ()) -> None:
        """``num_actions``: the width ``P`` of the policy's parameters; ``action_shape``: one action's, ``()`` for
        an integer (``policy_layout`` gives both for a network)."""
        T = unroll_length
        self.obs = torch.zeros((slots, T + 1, *obs_shape))
        self.actions = torch.zeros((slots, T, *action_shape), dtype=torch.float32 if action_shape else torch.int64)
        self.rewards = torch.zeros((slots, T))
        self.dones = torch.zeros((slots, T))
        self.truncated = torch.zeros((slots, T))
        self.final_obs = torch.zeros((slots, final_slots, *obs_shape))
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
        self.obs[slot], self.actions[slot] = unroll["obs"], unroll["actions"]
        self.rewards[slot], self.dones[slot] = unroll["rewards"], unroll["dones"]
        self.truncated[slot], self.final_obs[slot] = unroll["truncated"], unroll["final_obs"]
        self.logits[slot], self.values[slot] = unroll["logits"], unroll["values"]
        self.hx[slot], self.cx[slot] = unroll["hx"], unroll["cx"]
        if self.features.shape[-1]:
            self.features[slot] = unroll["features"]

    def read(self, slots: torch.Tensor | list[int]) -> dict[str, torch.Tensor]:
        """The unrolls in ``slots``, time-major: ``[T + 1, n, ...]`` observations, ``[K, n, ...]`` final ones,
        ``[T, n, ...]`` the rest, ``[n, H]`` states (copies: indexing with a list of slots copies)."""
        batch = {"obs": self.obs[slots].transpose(0, 1), "actions": self.actions[slots].transpose(0, 1),
                 "rewards": self.rewards[slots].t(), "dones": self.dones[slots].t(),
                 "truncated": self.truncated[slots].t(), "final_obs": self.final_obs[slots].transpose(0, 1),
                 "logits": self.logits[slots].transpose(0, 1), "values": self.values[slots].t(),
                 "hx": self.hx[slots], "cx": self.cx[slots]}
        if self.features.shape[-1]:
            batch["features"] = self.features[slots].transpose(0, 1)
        return batch


def policy_layout(meta: dict) -> dict:
    """The unroll layout's policy part for the network ``meta`` describes: ``num_actions`` (the parameters' width)
    and ``action_shape``, as keywords for ``UnrollSlots``."""
    policy = policy_for(meta)
    return {"num_actions": policy.params, "action_shape": policy.action_shape}


def column(batch: dict[str, torch.Tensor], j: int) -> dict[str, torch.Tensor]:
    """Unroll ``j`` of a time-major batch, in the slots' per-unroll layout."""
    unroll = {key: value[:, j] for key, value in batch.items() if key not in ("hx", "cx")}
    unroll["hx"], unroll["cx"] = batch["hx"][j], batch["cx"][j]
    return unroll
