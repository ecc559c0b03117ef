"""IMPALA's acting, the same for both backends: ``Acting`` plays one unroll of an actor's environments into plain
buffers with the policy it is given (its own copy of the weights, ``local_policy``, or the inference server)."""

import argparse

import numpy as np
import torch

from core.policy import policy_for
from core.timing import PhaseClock
from envs.environment import EnvSettings
from envs.rollout_envs import RolloutEnvs, training_rewards
from impala.boundary import WeightSource
from impala.inference import InferenceClient, LocalPolicy
from model import build_model, fast_layout
from runtime.defaults import final_slots


def unroll_frames(args: argparse.Namespace) -> float:
    """Emulator frames in one actor's unroll: every env's ``--unroll-length`` steps, each ``frames_per_step``."""
    return args.num_steps * args.envs_per_worker * args.frames_per_step


class Acting:
    """An actor's side of the boundary, the same for both backends: its environments, the policy it acts with
    (``LocalPolicy`` or ``InferenceClient``) and one unroll's buffers, allocated once. ``unroll()`` plays
    ``T = --unroll-length`` steps in each of its ``--envs-per-worker`` environments and returns the unroll; how it
    travels to the learner (a slot of the shared ``UnrollStore``, or a Ray object) is the backend's business."""

    def __init__(self, args: argparse.Namespace, settings: EnvSettings, meta: dict,
                 policy: LocalPolicy | InferenceClient, rank: int, feature_size: int, bf16: bool) -> None:
        batch, T = args.envs_per_worker, args.num_steps
        self.clock = PhaseClock()  # where this actor's time goes (core/timing.py)
        self.envs = RolloutEnvs(settings, batch, seed=args.seed + rank * batch, **training_rewards(args))
        self.policy, self.T = policy, T
        self.autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)
        obs_shape, obs_dtype = self.envs.first_obs.shape[1:], torch.from_numpy(self.envs.first_obs).dtype  # uint8 frames
        self.obs = torch.zeros((T + 1, batch) + obs_shape, dtype=obs_dtype)
        self.obs_np = self.obs.numpy()
        self.obs_np[-1] = self.envs.first_obs
        self.hx, self.cx = torch.zeros(batch, meta["hidden_size"]), torch.zeros(batch, meta["hidden_size"])
        self.distribution = policy_for(meta)  # what the logits parameterise (core/policy.py)
        self.actions = torch.zeros((T, batch) + self.distribution.action_shape, dtype=self.distribution.action_dtype)
        self.rewards, self.dones = torch.zeros(T, batch), torch.zeros(T, batch)
        self.truncated = torch.zeros(T, batch)
        self.final_obs = torch.zeros((final_slots(settings, T), batch) + obs_shape, dtype=obs_dtype)
        self.cuts = np.zeros(batch, dtype=np.int64)  # episodes cut so far in this unroll, per environment
        self.logits, self.values = torch.zeros((T, batch, self.distribution.params)), torch.zeros(T, batch)
        self.features = torch.zeros((T, batch, feature_size))  # F = 0 unless a replay ranks by them
        self.frames = unroll_frames(args)

    def unroll(self) -> tuple[dict[str, torch.Tensor], int, int]:
        """One unroll of every environment, time-major: ``{"obs": [T + 1, B, ...], "actions", "rewards", "dones",
        "truncated", "values": [T, B], "final_obs": [K, B, ...], "logits": [T, B, P], "features": [T, B, F], "hx",
        "cx": [B, H]}`` (the state before ``obs[0]``), then the weights' version that acted and the games finished.
        Rewards are the environment's (clipped or normalised with ``--reward-clipping``): a cut's bootstrap is the
        learner's to add. The tensors are this object's buffers: the next call overwrites them."""
        policy, envs, obs, obs_np = self.policy, self.envs, self.obs, self.obs_np
        with_features = self.features.shape[-1] > 0
        with self.clock.phase("sync"):
            policy.begin_unroll()
        obs_np[0] = obs_np[-1]  # where the previous unroll left off
        h0, c0 = self.hx, self.cx
        hx, cx = h0, c0
        games = 0
        self.cuts[:] = 0
        with self.clock.acting(envs), torch.no_grad(), self.autocast:  # with a server, "act" is waiting for it
            for t in range(self.T):
                if with_features:
                    value, logits, (hx, cx), features = policy(obs[t], (hx, cx), with_features=True)
                    self.features[t] = features.float()
                else:
                    value, logits, (hx, cx) = policy(obs[t], (hx, cx))
                logits = logits.float()
                self.values[t] = value.float()
                action = self.distribution.sample(logits)
                env_actions = self.distribution.env_actions(action).numpy()  # core/policy.py: tanh for a squash
                step_rewards, step_dones, finished = envs.step(env_actions, obs_np[t + 1])
                games += finished
                self.actions[t], self.logits[t] = action, logits
                self.rewards[t], self.dones[t] = torch.from_numpy(step_rewards), torch.from_numpy(step_dones)
                self.truncated[t] = torch.from_numpy(envs.truncated)
                if envs.truncated.any():
                    self.keep_final_obs(envs.truncated, envs.final_obs)
                keep = (1.0 - self.dones[t]).unsqueeze(1)
                hx, cx = hx * keep, cx * keep
        self.hx, self.cx = hx, cx
        unroll = {"obs": obs, "actions": self.actions, "rewards": self.rewards, "dones": self.dones,
                  "truncated": self.truncated, "final_obs": self.final_obs, "logits": self.logits,
                  "values": self.values, "features": self.features, "hx": h0, "cx": c0}
        return unroll, policy.unroll_version, games

    def keep_final_obs(self, truncated: np.ndarray, final_obs: np.ndarray) -> None:
        """The observations a time limit cut episodes at, each in its environment's next free row of
        ``final_obs``."""
        cut = np.flatnonzero(truncated)
        rows = self.cuts[cut]
        if rows.max() >= self.final_obs.shape[0]:  # final_slots' bound says it cannot happen
            raise RuntimeError(f"a time limit cut more than {self.final_obs.shape[0]} episode(s) of one environment "
                               f"within one unroll of {self.T} steps; is there a limit shorter than "
                               f"--max-episode-length?")
        self.final_obs[rows, cut] = torch.from_numpy(final_obs[cut])
        self.cuts[cut] += 1


def local_policy(args: argparse.Namespace, meta: dict, weights: WeightSource) -> LocalPolicy:
    """``--inference local``: the actor's own CPU copy of the weights, refreshed from ``weights`` (the shared
    model here, the latest Ray object with the Ray backend)."""
    return LocalPolicy(fast_layout(build_model(meta), meta, args.channels_last).eval(), weights)
