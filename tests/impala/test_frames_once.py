"""Stacked frames stored once: unrolls and replays keep each step's newest frame (``pack_frames``) and the read-out
rebuilds the stacks (``unpack_frames``) exactly, across episode starts, against stacks from real Atari games."""

import numpy as np
import pytest
import torch

from envs.environment import ATARI_CONFIG, EnvSettings, env_conf_for, load_env_config
from envs.rollout_envs import RolloutEnvs
from impala.replay import ReplayBuffer, slot_bytes
from impala.unrolls import pack_frames, policy_layout, unpack_frames
from model import model_meta


def slow_stacks(frames_seen, starts, k):
    """The reference, from the definition: observation t is the last k frames of its episode, the episode's first
    frame repeated where the episode is shorter (gymnasium's reset padding)."""
    stacks = []
    for t in range(len(frames_seen)):
        first = max(s for s in starts if s <= t)
        stacks.append(np.stack([frames_seen[max(t - k + 1 + j, first)] for j in range(k)]))
    return np.stack(stacks)


@pytest.mark.parametrize("k", [2, 4])
def test_unpacking_rebuilds_every_stack_across_episode_starts(k):
    """Synthetic frames whose pixels name their time: episodes begin at random steps, also at the unroll's first
    step and on consecutive steps; the observation at step 0 may reach back into an earlier unroll."""
    rng = np.random.default_rng(0)
    T, n = 12, 5
    obs, dones = np.zeros((T + 1, n, k, 2, 3), np.uint8), np.zeros((T, n), np.float32)
    for j in range(n):
        dones[:, j] = rng.random(T) < (0.1 * j + 0.1)
        frames = list(range(100, 100 + T + k))  # frames of times -(k - 1) .. T
        starts = [0] + [t + k for t in range(T) if dones[t, j]]  # the first observation may come from afar
        stacks = slow_stacks(frames, starts, k)[k - 1:]  # observations 0 .. T
        obs[:, j] = stacks[:, :, None, None]
    packed = pack_frames(torch.from_numpy(obs), k)
    assert packed.shape == (T + k, n, 2, 3)
    assert torch.equal(unpack_frames(packed, torch.from_numpy(dones), k), torch.from_numpy(obs))


def test_real_games_stacks_come_back_exactly_through_a_replay():
    """Breakout with its lives (a lost life ends a training episode and refills the stack) and a time limit of 7
    steps: 4 environments step 30 steps, stored in a replay slot by slot and read back."""
    crop = env_conf_for("BreakoutNoFrameskip-v4", load_env_config(ATARI_CONFIG))
    settings = EnvSettings("BreakoutNoFrameskip-v4", max_episode_length=7, crop=crop, frame_size=84, frame_stack=4)
    envs = RolloutEnvs(settings, 4, seed=1, clip_rewards=True)
    T = 30
    obs = np.zeros((T + 1, 4, 4, 84, 84), np.uint8)
    dones = np.zeros((T, 4), np.float32)
    obs[0] = envs.first_obs
    rng = np.random.default_rng(1)
    for t in range(T):
        _, done, _ = envs.step(rng.integers(4, size=4), obs[t + 1])
        dones[t] = done
    assert dones.sum() >= 8  # every environment began new episodes
    meta = model_meta("nature", [4, 84, 84], 4, 0, uint8=True)
    layout = policy_layout(meta)
    assert layout["frame_stack"] == 4
    replay = ReplayBuffer({"type": "standard", "capacity": 4, "count": 4}, T, meta["obs_shape"], hidden_size=0,
                          feature_size=0, **layout)
    assert replay.obs.shape == (4, T + 4, 84, 84)
    for j in range(4):
        replay.store(j, {"obs": torch.from_numpy(obs[:, j]), "actions": torch.zeros(T, dtype=torch.int64),
                         "rewards": torch.zeros(T), "dones": torch.from_numpy(dones[:, j]),
                         "truncated": torch.zeros(T), "final_obs": torch.zeros(1, 4, 84, 84, dtype=torch.uint8),
                         "logits": torch.zeros(T, 4), "values": torch.zeros(T), "hx": torch.zeros(0),
                         "cx": torch.zeros(0)})
    batch = replay.read([0, 1, 2, 3])
    assert batch["obs"].dtype == torch.uint8 and torch.equal(batch["obs"], torch.from_numpy(obs))
    first = replay.read([0, 1, 2, 3], steps=9)  # the first steps only (elite scoring's score_steps)
    assert torch.equal(first["obs"], torch.from_numpy(obs[:10])) and torch.equal(first["dones"], batch["dones"][:9])
    assert first["logits"].shape == (9, 4, 4) and first["final_obs"].shape == batch["final_obs"].shape


def test_a_thousand_pong_unrolls_fit_in_a_fifth_of_a_gigabyte():
    """A replay of 1,000 Pong unrolls (T = 20, Nature network, 6 actions): frames as bytes, each stored once."""
    meta = model_meta("nature", [4, 84, 84], 6, 0, uint8=True)
    once = slot_bytes(20, meta["obs_shape"], hidden_size=0, feature_size=0, **policy_layout(meta))
    whole = slot_bytes(20, meta["obs_shape"], 6, 0, 0)  # float32 stacks, as --frame-norm running stores them
    assert 1000 * once <= 0.2e9 < 2.4e9 <= 1000 * whole
