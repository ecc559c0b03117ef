"""One A3G worker: its own replica of the network, its own environments, gradients into the shared model.

Each rollout:
1. sync the replica (on GPU ``gpu_ids[rank % len]`` or the CPU) from the shared CPU model;
2. play ``num_steps`` steps (this worker's entry of ``--distributed-step-size`` if given) in each of its
   ``--envs-per-worker`` environments, sampling actions from the policy, batched over environments;
3. n-step value targets and GAE(tau) advantages (``returns.py``), the A3C loss, backward on the replica;
4. copy the gradients into the shared model's ``.grad`` (this process's own buffers: no locks, no allocation) and
   step the optimizer, which updates the shared weights (and, with ``--shared-optimizer``, the shared statistics).

With ``--objective ppo`` step 2 acts without autograd, keeping the behaviour policy's log-probabilities and values,
and steps 3-4 become ``--ppo-epochs`` passes over the rollout in ``--minibatches``, each minibatch's loss (PPO's
clipped surrogate, the clipped value loss, the entropy bonus) one update of the shared model, the replica pulled
before the next minibatch's forward (``ppo_minibatches``, ``push_each``).

The LSTM state is carried from one rollout to the next (detached: truncated backprop through time) and reset to
zero where an episode ended. An episode cut by a time limit (``--max-episode-length``, CartPole's 500 steps) is not
terminal: its return bootstraps from the value of the observation it was cut at (``play_rollout``).
"""

import argparse
import collections
import math
import os
from typing import Callable, Iterable, Iterator

import numpy as np
import torch

from core.faults import injected_fault
from core.hardware import device_for
from core.ppo import clip_coefficient, clipped_surrogate, clipped_value_loss, explained_variance, minibatches
from core.returns import gae_advantages, normalized_advantages, nstep_returns
from core.schedule import entropy_coef, learning_rate
from core.timing import PhaseClock
from envs.rollout_envs import RolloutEnvs, training_rewards
from model import ExplorationNoise, RecurrentActorCritic, Replica, build_model, exploration_noise, fast_layout
from runtime.context import RunContext
from runtime.evaluator import evaluator_role
from runtime.processes import parent_alive, setup_child_process
from runtime.tensorboard_log import GradientHistograms
from shared_optim import Update, optimizer_for
from test import test


def worker_num_steps(args: argparse.Namespace, rank: int) -> int:
    """Rollout length of worker ``rank``: ``--num-steps``, or its entry of ``--distributed-step-size``."""
    if args.distributed_step_size:
        return args.distributed_step_size[rank % len(args.distributed_step_size)]
    return args.num_steps


def unused_step_sizes(args: argparse.Namespace) -> str | None:
    """A note for the start of a run whose ``--distributed-step-size`` has more entries than it has workers (a list
    written for a larger machine, the workers auto picked for this one): the entries no worker gets."""
    unused = args.distributed_step_size[args.workers:]
    if not unused:
        return None
    return (f"--distributed-step-size {' '.join(map(str, args.distributed_step_size))} has more entries than the "
            f"{args.workers} worker(s): {' '.join(map(str, unused))} unused (one entry per worker, round-robin)")


def time_limit_bootstrap(model: torch.nn.Module, envs: RolloutEnvs, state: tuple[torch.Tensor, torch.Tensor],
                         gamma: float, device: torch.device) -> torch.Tensor:
    """``[B]``: ``gamma * V(cut observation)`` for the envs a time limit cut at this step, 0 for the others: added to
    their last reward, it makes the return go on from where the cut left the agent instead of ending there (a cut
    is not a terminal state). ``state``: the recurrent state after this step."""
    bonus = torch.zeros(len(envs.truncated))
    cut = np.flatnonzero(envs.truncated)
    if len(cut):
        with torch.no_grad():
            final_value, _, _ = model(torch.from_numpy(envs.final_obs[cut]).to(device), (state[0][cut], state[1][cut]))
        bonus[cut] = gamma * final_value.float().cpu()
    return bonus


Rollout = collections.namedtuple("Rollout", "log_probs entropies values rewards discounts bootstrap_value games "
                                             "bound_excess actions dones start_state")


def play_rollout(model: torch.nn.Module, envs: RolloutEnvs, observations: torch.Tensor,
                 recurrent_state: tuple[torch.Tensor, torch.Tensor], gamma: float, device: torch.device,
                 batched: bool = False, noise: ExplorationNoise | None = None, behaviour: bool = False
                 ) -> tuple[Rollout, tuple[torch.Tensor, torch.Tensor]]:
    """Play ``T = len(observations) - 1`` steps in every env of ``envs``, sampling actions from ``model``.

    ``observations`` is the ``[T + 1, B, ...]`` host buffer: row 0 holds the current observations on entry, and
    each step's observations are written into the next row (rows are never reused within a rollout: autograd
    keeps every step's input). ``recurrent_state`` ``(hx, cx)`` is the state before row 0. Returns the ``[T, B]``
    tensors of the A3C loss as a ``Rollout``, and the recurrent state after the last row (zeroed where an episode
    ended). Episodes cut by a time limit are not terminal: their last reward gets ``gamma * V(last observation)``
    added, so that the return bootstraps from where the cut left the agent, not from 0 (a terminal state).

    Two ways to the same loss (``--train-forward``): ``batched=False`` builds the autograd graph while acting, ``T``
    forwards of ``B`` observations (the fewest multiply-adds: best on a CPU); ``batched=True`` acts without autograd
    and then recomputes the values and log-probabilities with ``model.unroll`` over all ``T x B`` observations in
    one batch (the replica's weights have not changed in between, so they are the numbers acting saw): one more
    forward, but far fewer, larger kernels (meant for a GPU, where launches dominate; docs/results/throughput.md).

    ``noise`` (``--log-std sde``: ``model.ExplorationNoise``) samples the actions instead of the distribution,
    with a noise matrix per env drawn afresh at the start of the rollout.

    ``behaviour`` (``--objective ppo``): act without autograd and return the behaviour policy's numbers, detached:
    the log-probabilities of the actions taken and the values, as acting computed them (``entropies`` and
    ``bound_excess`` None); the epochs recompute the rest from ``actions``, ``dones`` and ``start_state``."""
    num_steps, batch = observations.shape[0] - 1, observations.shape[1]
    observations_np = observations.numpy()
    policy = model.policy  # the distribution the actor head parameterises (core/policy.py)
    start_state = recurrent_state
    hx, cx = recurrent_state
    rewards, dones = torch.zeros(num_steps, batch), torch.zeros(num_steps, batch)
    actions = torch.zeros((num_steps, batch) + policy.action_shape, dtype=policy.action_dtype)
    values, log_probs, entropies, excesses = [], [], [], []
    games = 0
    if noise is not None:
        noise.resample()
    sample = policy.sample if noise is None else noise.sample
    with torch.set_grad_enabled(torch.is_grad_enabled() and not (batched or behaviour)):
        for t in range(num_steps):
            value, logits, (hx, cx) = model(observations[t].to(device, non_blocking=True), (hx, cx))
            logits = logits.float()
            action = sample(logits.detach())
            actions[t] = action.cpu()
            if behaviour:
                values.append(value.float())
                log_probs.append(policy.log_prob(logits, action))
            elif not batched:
                values.append(value.float())
                log_probs.append(policy.log_prob(logits, action))
                entropies.append(policy.entropy(logits))
                excesses.append(policy.bound_excess(logits))

            step_rewards, step_dones, finished = envs.step(policy.env_actions(actions[t]).numpy(),
                                                           observations_np[t + 1])
            games += finished
            rewards[t] = torch.from_numpy(step_rewards)
            dones[t] = torch.from_numpy(step_dones)
            if step_dones.any():
                rewards[t] += time_limit_bootstrap(model, envs, (hx, cx), gamma, device)
                keep = (1.0 - dones[t]).to(device).unsqueeze(1)  # cut the LSTM state where an episode ended
                hx, cx = hx * keep, cx * keep
    with torch.no_grad():
        bootstrap_value, _, _ = model(observations[-1].to(device), (hx, cx))
    dones = dones.to(device)
    if behaviour:
        values, log_probs, entropies, excess = torch.stack(values), torch.stack(log_probs), None, None
    elif batched:
        value, logits, _ = model.unroll(observations[:-1].to(device), start_state, dones)
        values, logits = value.float(), logits.float()
        log_probs = policy.log_prob(logits, actions.to(device))
        entropies = policy.entropy(logits)
        excess = policy.bound_excess(logits)
    else:
        values, log_probs, entropies = torch.stack(values), torch.stack(log_probs), torch.stack(entropies)
        excess = torch.stack(excesses)
    rollout = Rollout(log_probs, entropies, values, rewards.to(device), gamma * (1.0 - dones),
                      bootstrap_value.float(), games, excess, actions.to(device), dones, start_state)
    return rollout, (hx, cx)


def a3c_loss(log_probs: torch.Tensor, entropies: torch.Tensor, values: torch.Tensor, rewards: torch.Tensor,
             discounts: torch.Tensor, bootstrap_value: torch.Tensor, args: argparse.Namespace,
             entropy_coef: float | None = None, bound_excess: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The A3C loss of a ``[T, B]`` rollout: summed over time, averaged over environments (so that the learning
    rate means the same for any ``--envs-per-worker``). ``entropy_coef``: the bonus's coefficient now
    (``core.schedule``; default ``args.entropy_coef``). ``--normalize-advantages`` normalises the GAE advantages
    over the whole rollout, every step of every environment (``returns.normalized_advantages``).
    ``bound_excess`` (``[T, B]``, ``policy.bound_excess``): added times ``--bound-coef`` where that is set."""
    returns = nstep_returns(rewards, discounts, bootstrap_value)
    advantages = gae_advantages(rewards, values.detach(), discounts, bootstrap_value, args.tau)
    if args.normalize_advantages:
        advantages = normalized_advantages(advantages)
    policy_loss = -(log_probs * advantages).sum(0).mean()
    value_loss = 0.5 * (returns - values).pow(2).sum(0).mean()
    entropy = entropies.sum(0).mean()
    coef = args.entropy_coef if entropy_coef is None else entropy_coef
    loss = policy_loss + args.value_coef * value_loss - coef * entropy
    if bound_excess is not None and args.bound_coef:
        loss = loss + args.bound_coef * bound_excess.sum(0).mean()
    return loss, policy_loss, value_loss, entropy


PPOParts = collections.namedtuple("PPOParts", "surrogate value_loss entropy stats explained_variance")


def ppo_minibatches(model: torch.nn.Module, observations: torch.Tensor, rollout: Rollout, args: argparse.Namespace,
                    entropy_coef: float, clip: float, clock: PhaseClock, autocast
                    ) -> Iterator[tuple[torch.Tensor, PPOParts]]:
    """``--objective ppo``'s losses over one rollout acted with ``play_rollout(..., behaviour=True)``: GAE
    advantages (lambda ``--tau``) and returns on the values acting saw, then ``--ppo-epochs`` passes, each a fresh
    random split into ``--minibatches``; yields each minibatch's loss (``core.ppo``: the clipped surrogate, the
    clipped value loss and the entropy bonus, means over its samples) and its parts. Each forward runs when the
    next minibatch is asked for, on the weights the replica holds then: the caller pushes each update and pulls
    the shared weights in between. Feed-forward networks take samples from anywhere in the rollout; recurrent
    ones whole environments' sequences, unrolled from the state the rollout started in."""
    policy = model.policy
    steps, batch = rollout.rewards.shape
    with clock.phase("learn"):
        advantages = gae_advantages(rollout.rewards, rollout.values, rollout.discounts, rollout.bootstrap_value,
                                    args.tau)
        returns = (advantages + rollout.values).flatten()
        advantages = advantages.flatten()
        actions, old_log_probs = rollout.actions.flatten(0, 1), rollout.log_probs.flatten()
        old_values = rollout.values.flatten()
        explained = explained_variance(old_values, returns)
    recurrent = isinstance(model, RecurrentActorCritic)
    obs = observations[:-1]
    device = rollout.rewards.device
    for _ in range(args.ppo_epochs):
        for part in minibatches(batch if recurrent else steps * batch, args.minibatches):
            with clock.phase("learn"), autocast:
                if recurrent:  # every step of the environments in part, time-major as the flat index runs
                    hx, cx = rollout.start_state
                    values, logits, _ = model.unroll(obs[:, part].to(device), (hx[part], cx[part]),
                                                     rollout.dones[:, part])
                    index = (torch.arange(steps)[:, None] * batch + part[None, :]).flatten().to(device)
                else:
                    values, logits, _ = model(obs.flatten(0, 1)[part].to(device),
                                              model.initial_state(len(part), device))
                    index = part.to(device)
                values, logits = values.float().flatten(), logits.float().flatten(0, -2)
                sample_advantages = advantages[index]
                if args.normalize_advantages:
                    sample_advantages = normalized_advantages(sample_advantages)
                surrogate, stats = clipped_surrogate(policy.log_prob(logits, actions[index]), old_log_probs[index],
                                                     sample_advantages, clip)
                value_loss = clipped_value_loss(values, old_values[index], returns[index], args.value_clip)
                entropy = policy.entropy(logits).mean()
                loss = surrogate + args.value_coef * value_loss - entropy_coef * entropy
                if args.bound_coef:
                    loss = loss + args.bound_coef * policy.bound_excess(logits).mean()
            yield loss, PPOParts(surrogate, value_loss, entropy, stats, explained)


def push_each(losses: Iterable[tuple[torch.Tensor, PPOParts | None]], update: Update, lr: float,
              pull: Callable[[], None] | None = None) -> tuple[torch.Tensor, bool, PPOParts | None]:
    """Each ``(loss, parts)`` of ``losses`` one update of the shared model; with ``pull`` (``--objective ppo``: the
    replica's) called after each, before the next loss is asked for, so that its forward (which
    ``ppo_minibatches`` runs only then) sees the weights this update, and the other workers', made. Returns the
    last update's gradient norm, whether every update was applied, and the last parts."""
    all_applied, grad_norm, parts = True, torch.tensor(math.nan), None
    for loss, parts in losses:
        grad_norm, applied = update(loss, lr)
        all_applied &= applied
        if pull is not None:
            pull()
    return grad_norm, all_applied, parts


def pull(replica: Replica, clock: PhaseClock) -> None:
    with clock.phase("sync"):
        replica.pull()


def train(rank: int, run: RunContext, parent_pid: int) -> None:
    """Worker ``rank``: rollouts, A3C losses (or PPO's minibatches) and updates of the shared model until the run
    stops."""
    args, settings, meta, shared_model, optimizer, state = (run.args, run.settings, run.meta, run.shared_model,
                                                            run.optimizer, run.state)
    setup_child_process(args.seed + rank, parent_pid)
    device = device_for(args.gpu_ids, rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    num_steps = worker_num_steps(args, rank)
    frames_per_step = args.frames_per_step  # resolved in main.py: emulator frames per agent step
    batch = args.envs_per_worker
    batched = args.train_forward == "batched"
    ppo = args.objective == "ppo"

    envs = RolloutEnvs(settings, batch, seed=args.seed + rank * batch, **training_rewards(args))
    model = fast_layout(build_model(meta).to(device), meta, args.channels_last)
    model.train()
    noise = exploration_noise(model, batch)  # gSDE's sampler with --log-std sde, else None
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16)
    if optimizer is None:  # --no-shared-optimizer: statistics of this worker's own
        optimizer = optimizer_for(args, shared_model.parameters(), False)
    # The hand-off (one flat copy each way), and this process's gradient buffers on the shared parameters:
    # allocated once, overwritten every update.
    replica = Replica(shared_model, model)
    clock = PhaseClock()  # where this worker's time goes (core/timing.py)
    gradient_histograms = GradientHistograms(args)
    update = Update(replica, optimizer, args, state, rank, clock)

    hx, cx = model.initial_state(batch, device)
    # Rollout storage on the host, allocated once; the envs write each step's observations into their own row.
    observations = torch.zeros((num_steps + 1, batch) + envs.first_obs.shape[1:],
                               dtype=torch.from_numpy(envs.first_obs).dtype)  # uint8 frames: the network scales them
    if device.type == "cuda":
        observations = observations.pin_memory()
    observations[-1] = torch.from_numpy(envs.first_obs)
    frames_per_rollout = num_steps * batch * frames_per_step
    obs_stats = shared_model.obs_norm if rank == 0 and meta.get("obs_norm") else None  # model.ObsNorm
    updates = 0
    fault_nan = rank == 0 and injected_fault("worker_nan")  # test hooks (core.faults.injected_fault)
    fault_raise = rank == 0 and injected_fault("worker_raise")

    while not state.stop.is_set() and parent_alive(parent_pid):
        pull(replica, clock)
        acted_at = optimizer.global_step  # the shared model's updates so far: how old the acting weights will be
        observations[0] = observations[-1]  # where the previous rollout left off
        # One autocast region for the whole rollout (with --bf16): the weights are cast to bfloat16 once per
        # rollout rather than at every step (17% of the Nature network's training cost at 8 envs).
        with clock.acting(envs), autocast:
            rollout, (hx, cx) = play_rollout(model, envs, observations, (hx.detach(), cx.detach()), args.gamma,
                                             device, batched, noise, behaviour=ppo)
        frames = state.frames.value
        coef, lr = entropy_coef(args.entropy_coef, args.entropy_decay, frames), learning_rate(args.lr, args.lr_decay,
                                                                                              frames)
        if ppo:  # every minibatch's update pushed as it is made, the replica pulled before the next one's forward
            clip = clip_coefficient(args.clip_coef, args.clip_anneal, frames, args.max_frames)
            losses = ppo_minibatches(model, observations, rollout, args, coef, clip, clock, autocast)
        else:
            with clock.phase("learn"):
                loss, policy_loss, value_loss, entropy = a3c_loss(*rollout[:6], args, coef, rollout.bound_excess)
            losses = [(loss, None)]
        if obs_stats is not None:  # one process keeps the observation statistics: they reach the others' next pull
            obs_stats.update(observations[:-1])

        if fault_nan:
            losses = ((loss * float("nan"), parts) for loss, parts in losses)
        if fault_raise and updates >= 2:
            raise RuntimeError("injected fault: worker crash (A3G_FAULT=worker_raise)")
        grad_norm, all_applied, parts = push_each(losses, update, lr, (lambda: pull(replica, clock)) if ppo else None)
        if rank == 0:
            gradient_histograms(model, state.frames.value)
        if not all_applied:
            hx, cx = model.initial_state(batch, device)  # the recurrent state may be non-finite too
        state.add(rank, frames_per_rollout, rollout.games)
        state.record_games(rank, envs.take_finished())
        state.publish_phases(rank, clock)
        updates += 1
        if rank == 0 and parts is None:  # per-step figures for TensorBoard (the evaluator writes them)
            state.losses[:] = [policy_loss.item() / num_steps, value_loss.item() / num_steps,
                               entropy.item() / num_steps, grad_norm.item(), math.nan, math.nan, math.nan]
        elif rank == 0:  # the last minibatch's, and how well the values acting saw predicted the returns
            state.losses[:] = [parts.surrogate.item(), parts.value_loss.item(), parts.entropy.item(),
                               grad_norm.item(), parts.stats.approx_kl, parts.stats.clipfrac,
                               parts.explained_variance]
        if rank == 0 and args.shared_optimizer:  # updates between the acting weights and the last update's
            state.policy_lag[1] = optimizer.global_step - acted_at - 1


def a3g_roles(run: RunContext) -> dict[str, tuple[Callable, tuple]]:
    """A3G's roles for the supervisor: ``--workers`` workers (``train``), each with its rank, and the evaluator
    (``test.test``)."""
    roles = {"evaluator": evaluator_role(run, test)}
    for rank in range(run.args.workers):
        roles[f"worker {rank}"] = (train, (rank, run, os.getpid()))
    return roles
