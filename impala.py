"""IMPALA in a3g (Espeholt et al. 2018): actors that never wait for the learner, and a learner that corrects for
their lag with V-trace.

Roles, handed to the supervisor as A3G's are (``impala_roles``):
- **actor** x ``--workers``: steps ``--envs-per-worker`` environments with a CPU copy of the latest published
  weights (``--inference local``) or through the inference role (``--inference server``, inference.py), and
  writes each environment's unroll of ``--unroll-length`` steps (observations, actions, rewards, episode ends,
  the steps a time limit cut and the observations it cut at, the behaviour policy's logits and values, the
  recurrent state at the unroll's start and the weights' version) into a slot of the shared ``UnrollStore``;
- **learner** x 1: takes the oldest full unrolls (``LearnerStep.need`` of them: ``--batch-size`` less the share of
  each replay that can already give its own; dropping those more than ``--max-policy-lag`` versions old),
  computes V-trace targets (``returns.vtrace_from_logits``; a step a time limit cut bootstraps from the learner's
  own value of the observation it cut at, ``cut_values``), steps the shared optimizer on the shared model
  (through a replica on its device, as an A3G worker does) and publishes the new weights' version;
- **evaluator**: test.py, exactly as for A3G;
- **inference** x 1 with ``--inference server``: answers the actors' forward passes in batches (inference.py).

The roles' work is written once, for both backends: ``Acting`` (one unroll of an actor's environments into plain
buffers) and ``LearnerStep`` (fresh unrolls -> V-trace update -> ``publish``). This file's backend moves unrolls
through ``UnrollStore`` (actors ``claim`` free slots and ``commit`` full ones; the learner ``take``s a batch) and
weights through ``SharedWeights`` (``publish`` / ``fetch`` with a version); impala_ray.py moves the same through
Ray's object store, to run the actors on several machines.

Why slots with a status byte instead of free/full index queues (TorchBeast's MonoBeast): a multiprocessing queue
has a lock, and a process killed while holding it (an actor killed mid-``put``) leaves every other process
waiting on it for ever. Here every slot belongs to one actor (``--num-buffers`` split between them), and each
status change has a single writer: the owning actor turns FREE into WRITING into FULL, the learner turns FULL
back into FREE once it has copied the unroll. An actor killed mid-unroll leaves its slot WRITING; its replacement
(same rank, same slots) frees it first, so an unroll is never lost for good and never used half-written.

Losses, as in the paper: policy gradient with the clipped pg-rhos' advantages, baseline ``0.5 (vs - V)^2`` times
``--value-coef`` (``--baseline-cost``), entropy bonus times ``--entropy-coef`` (``--entropy-cost``); each summed over
time and averaged over the batch, as A3G's loss, so that a learning rate means the same in both.
"""

import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from defaults import slots_per_actor
from inference import InferenceClient, InferenceServer, InferenceStopped, LocalPolicy, inference
from model import Replica, build_model, fast_layout, feature_size
from replay import ReplayBuffer, concat, distance, needs_features, replay_specs
from returns import trust_region_mask, vtrace_from_logits
from test import test
from train import RolloutEnvs, Update
from unrolls import UnrollSlots, column, final_slots
from utils import device_for, parent_alive, setup_child_process

FREE, WRITING, FULL = 0, 1, 2
WAIT = 0.002  # seconds between polls of the store: a wait always ends with the stop flag or the parent's death


class UnrollStore(UnrollSlots):
    """Preallocated shared-memory slots, one unroll of one environment each, ``T = unroll_length`` steps:
    ``obs [T + 1, ...]`` (the last one is where the next unroll starts, and what V-trace bootstraps from),
    ``actions``, ``rewards``, ``dones``, ``truncated`` and ``final_obs [K, ...]`` (the steps a time limit cut, and
    the observations it cut at: ``unrolls``), ``logits [T, A]`` and ``values [T]`` (the behaviour policy's),
    ``hx``/``cx`` (the recurrent state before ``obs[0]``), the weights' ``version`` that acted, and when it was
    committed (``stamp``, for oldest-first); with a replay that ranks by them, ``features [T, F]`` (what the acting
    network's heads read, for elite sampling; F = 0 otherwise). Slots ``[rank * per_actor, (rank + 1) *
    per_actor)`` belong to actor ``rank``."""

    def __init__(self, slots, per_actor, unroll_length, obs_shape, num_actions, hidden_size, feature_size=0,
                 final_slots=1):
        super().__init__(slots, unroll_length, obs_shape, num_actions, hidden_size, feature_size, final_slots)
        self.per_actor = per_actor
        self.version = torch.zeros(slots, dtype=torch.int64)
        self.stamp = torch.zeros(slots, dtype=torch.float64)
        self.status = torch.zeros(slots, dtype=torch.int8)
        self.share_memory()

    def own(self, rank):
        return range(rank * self.per_actor, (rank + 1) * self.per_actor)

    def recover(self, rank):
        """A new actor of ``rank`` frees what its predecessor was writing when it died."""
        for slot in self.own(rank):
            if self.status[slot] == WRITING:
                self.status[slot] = FREE

    def claim(self, rank, count):
        """``count`` free slots of actor ``rank``, now WRITING; None when fewer are free."""
        free = [slot for slot in self.own(rank) if self.status[slot] == FREE][:count]
        if len(free) < count:
            return None
        self.status[free] = WRITING
        return free

    def write(self, slots, unroll):
        """Copy an actor's unroll (``Acting.unroll``: env ``j`` into ``slots[j]``) into its claimed slots."""
        for j, slot in enumerate(slots):
            self.store(slot, column(unroll, j))

    def commit(self, slots, version):
        self.version[slots] = version
        self.stamp[slots] = time.monotonic()
        self.status[slots] = FULL  # last: the learner reads a slot only once it is FULL

    def full(self):
        """The FULL slots, oldest first."""
        slots = (self.status == FULL).nonzero().squeeze(1)
        return slots[self.stamp[slots].argsort()]

    def take(self, slots):
        """Copy the unrolls in ``slots`` out, time-major (``[T + 1, n, ...]`` observations, ``[T, n, ...]`` the
        rest, ``[n, H]`` states), and free the slots."""
        batch = self.read(slots)
        self.release(slots)
        return batch

    def release(self, slots):
        self.status[slots] = FREE


class SharedWeights:
    """The weights actors act with: the shared model, and a version number that the learner alone writes."""

    def __init__(self, ctx, shared_model):
        self.model = shared_model
        self._version = ctx.RawValue("q", 0)

    @property
    def version(self):
        return self._version.value

    def publish(self):
        """The learner has stepped the shared model: announce the new version."""
        self._version.value += 1

    def replica(self, model):
        """``model`` as a replica of the shared weights, for ``fetch`` (``model.Replica``: one flat copy)."""
        return Replica(self.model, model, train=False)

    def fetch(self, replica):
        """Copy the latest weights into ``replica``; returns their version (read first: a copy torn by a
        concurrent step is counted as the older version)."""
        version = self._version.value
        replica.pull()
        return version


def unroll_frames(args):
    """Emulator frames in one actor's unroll: every env's ``--unroll-length`` steps, each ``frames_per_step``."""
    return args.num_steps * args.envs_per_worker * args.frames_per_step


class Acting:
    """An actor's side of the boundary, the same for both backends: its environments, the policy it acts with
    (``LocalPolicy`` or ``InferenceClient``) and one unroll's buffers, allocated once. ``unroll()`` plays
    ``T = --unroll-length`` steps in each of its ``--envs-per-worker`` environments and returns the unroll; how it
    travels to the learner (a slot of the shared ``UnrollStore``, or a Ray object) is the backend's business."""

    def __init__(self, args, settings, meta, policy, rank, feature_size, bf16):
        batch, T = args.envs_per_worker, args.num_steps
        self.envs = RolloutEnvs(settings, batch, seed=args.seed + rank * batch,
                                clip_rewards=args.reward_clipping == "abs_one")
        self.policy, self.T = policy, T
        self.autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)
        self.obs = torch.zeros((T + 1, batch) + self.envs.first_obs.shape[1:])
        self.obs_np = self.obs.numpy()
        self.obs_np[-1] = self.envs.first_obs
        self.hx, self.cx = torch.zeros(batch, meta["hidden_size"]), torch.zeros(batch, meta["hidden_size"])
        self.actions = torch.zeros((T, batch), dtype=torch.int64)
        self.rewards, self.dones = torch.zeros(T, batch), torch.zeros(T, batch)
        self.truncated = torch.zeros(T, batch)
        self.final_obs = torch.zeros((final_slots(settings, T), batch) + self.envs.first_obs.shape[1:])
        self.cuts = np.zeros(batch, dtype=np.int64)  # episodes cut so far in this unroll, per environment
        self.logits, self.values = torch.zeros((T, batch, meta["num_actions"])), torch.zeros(T, batch)
        self.features = torch.zeros((T, batch, feature_size))  # F = 0 unless a replay ranks by them
        self.frames = unroll_frames(args)

    def unroll(self):
        """One unroll of every environment, time-major: ``{"obs": [T + 1, B, ...], "actions", "rewards", "dones",
        "truncated", "values": [T, B], "final_obs": [K, B, ...], "logits": [T, B, A], "features": [T, B, F], "hx",
        "cx": [B, H]}`` (the state before ``obs[0]``), then the weights' version that acted and the games finished.
        Rewards are the environment's (clipped with ``--reward-clipping``): a cut's bootstrap is the learner's to
        add. The tensors are this object's buffers: the next call overwrites them."""
        policy, envs, obs, obs_np = self.policy, self.envs, self.obs, self.obs_np
        with_features = self.features.shape[-1] > 0
        policy.begin_unroll()
        obs_np[0] = obs_np[-1]  # where the previous unroll left off
        h0, c0 = self.hx, self.cx
        hx, cx = h0, c0
        games = 0
        self.cuts[:] = 0
        with torch.no_grad(), self.autocast:
            for t in range(self.T):
                if with_features:
                    value, logits, (hx, cx), features = policy(obs[t], (hx, cx), with_features=True)
                    self.features[t] = features.float()
                else:
                    value, logits, (hx, cx) = policy(obs[t], (hx, cx))
                logits = logits.float()
                self.values[t] = value.float()
                action = F.softmax(logits, -1).multinomial(1).squeeze(1)
                step_rewards, step_dones, finished = envs.step(action.numpy(), obs_np[t + 1])
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

    def keep_final_obs(self, truncated, final_obs):
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


def local_policy(args, meta, weights):
    """``--inference local``: the actor's own CPU copy of the weights, refreshed from ``weights`` (the shared
    model here, the latest Ray object with the Ray backend)."""
    return LocalPolicy(fast_layout(build_model(meta), meta, args.channels_last).eval(), weights)


def actor(rank, args, settings, meta, store, weights, server, state, parent_pid):
    """The shared-memory actor: claim this actor's free slots, play an unroll into them, commit them."""
    setup_child_process(args.seed + rank, parent_pid)
    store.recover(rank)
    if server is None:
        policy = local_policy(args, meta, weights)
    else:
        policy = InferenceClient(server, rank, state.stop, parent_pid)
    acting = Acting(args, settings, meta, policy, rank, store.features.shape[-1], args.bf16 and server is None)
    batch = args.envs_per_worker
    try:
        while not state.stop.is_set() and parent_alive(parent_pid):
            slots = store.claim(rank, batch)
            if slots is None:  # every slot of this actor is full: the learner is behind
                state.actor_waits.add(rank, 1)
                while slots is None and not state.stop.is_set() and parent_alive(parent_pid):
                    time.sleep(WAIT)
                    slots = store.claim(rank, batch)
                if slots is None:
                    break
            unroll, version, games = acting.unroll()
            store.write(slots, unroll)
            store.commit(slots, version)
            state.add(rank, acting.frames, games)
    except InferenceStopped:  # the run stopped while this actor waited for the inference server
        pass


def learner_forward(model, batch, device, bf16=False):
    """The learner's policy and values over a batch of unrolls: ``[T + 1, n, A]`` logits and ``[T + 1, n]`` values,
    from the state each unroll started in, reset where an episode ended (``model.unroll``: the convolutional part
    sees all ``(T + 1) x n`` observations in one batch), and ``[T, n]``, its values of the observations a time
    limit cut episodes at (``cut_values``). With ``bf16`` (``--bf16``) the forward pass runs under bfloat16
    autocast, as A3G's workers' do; the results, and the loss, are float32."""
    state = (batch["hx"].to(device), batch["cx"].to(device))
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
        values, logits, _, states = model.unroll(batch["obs"].to(device), state, batch["dones"].to(device),
                                                 with_states=True)
        cut = cut_values(model, batch, states, device)
    return logits.float(), values.float(), cut


@torch.no_grad()
def cut_values(model, batch, states, device):
    """``[T, n]``: where a time limit cut an episode (``batch["truncated"]``), the learner's value of the
    observation it cut at, from the state after that step (where the episode would have gone on: ``states``, from
    ``model.unroll(..., with_states=True)``); 0 elsewhere. No gradient: it is a bootstrap target, as V-trace's
    value after the unroll's last step is. An unroll's i-th cut observation is its ``final_obs[i]``."""
    truncated = batch["truncated"].to(device)
    cut = torch.zeros_like(truncated)
    steps, columns = truncated.nonzero(as_tuple=True)
    if len(steps):
        rows = (truncated.cumsum(0) - 1)[steps, columns].long()
        final_obs = batch["final_obs"].to(device)[rows, columns]
        value, _, _ = model(final_obs, (states[0][steps, columns], states[1][steps, columns]))
        cut[steps, columns] = value.float()
    return cut


def vtrace_targets(batch, logits, values, cut, gamma, mask=None):
    """V-trace over a batch (``returns.vtrace_from_logits``), with ``cut`` (``learner_forward``'s) where a time
    limit ended an episode. Such a step ends its episode in the unroll (discount 0: the next observation begins
    another one) but not in truth, so its reward gets ``gamma * V(observation it cut at)``: its TD error, target
    and advantage are then exactly those of an unroll that went on to that observation and ended there (whose
    target V-trace takes to be its value)."""
    discounts = gamma * (1.0 - batch["dones"])
    rewards = batch["rewards"] + gamma * cut
    return vtrace_from_logits(batch["logits"], logits[:-1], batch["actions"], discounts, rewards,
                              values[:-1].detach(), values[-1].detach(), mask=mask)


def impala_loss(batch, logits, values, cut, args, mask=None):
    """V-trace actor-critic loss of a batch (``learner_forward``'s logits, values and cut values); returns (loss,
    policy loss, baseline loss, entropy). ``mask`` (``[T, n]``, ``--kl-mask``) drops steps outside the trust
    region from the policy gradient and the value targets (a masked step's target is its own value: no baseline
    gradient); the entropy bonus keeps every step."""
    vtrace = vtrace_targets(batch, logits, values, cut, args.gamma, mask)
    policy_loss = -(vtrace.target_action_log_probs * vtrace.pg_advantages).sum(0).mean()
    baseline_loss = 0.5 * (vtrace.vs - values[:-1]).pow(2).sum(0).mean()
    log_policy = F.log_softmax(logits[:-1], -1)
    entropy = -(log_policy.exp() * log_policy).sum(-1).sum(0).mean()
    loss = policy_loss + args.value_coef * baseline_loss - args.entropy_coef * entropy
    return loss, policy_loss, baseline_loss, entropy


def cloning_losses(batch, logits, values, first_replayed):
    """CLEAR's behavioural cloning (Rolnick et al. 2019, "Experience Replay for Continual Learning", Section 3) on
    the replayed unrolls, the batch's columns from ``first_replayed`` on: policy cloning, per step
    ``KL(mu || pi) = sum_a mu(a) log(mu(a) / pi(a))`` from the stored behaviour logits to the learner's, and value
    cloning ``(V - V_behaviour)^2`` to the values stored at acting time. Each is summed over time and averaged over
    the whole batch (a fresh unroll adds 0), as the V-trace losses are, so a replayed step weighs the same in both.
    Returns (policy cloning, value cloning)."""
    n = batch["actions"].shape[1]
    mu_log = F.log_softmax(batch["logits"][:, first_replayed:], -1)
    pi_log = F.log_softmax(logits[:-1, first_replayed:], -1)
    policy = (mu_log.exp() * (mu_log - pi_log)).sum() / n
    value = (values[:-1, first_replayed:] - batch["values"][:, first_replayed:]).pow(2).sum() / n
    return policy, value


def current_view(model, part, device, dist_function):
    """What the current network makes of stored unrolls, ``[k, T, X]``: its logits for ``kl_div``, else the
    features its heads read; and the same for the state each unroll ends in, ``[k, X]`` (attentive sampling)."""
    state = (part["hx"].to(device), part["cx"].to(device))
    _, logits, _, features = model.unroll(part["obs"].to(device), state, part["dones"].to(device),
                                          with_features=True)
    seen = (logits if dist_function == "kl_div" else features).float().cpu()
    return seen[:-1].transpose(0, 1), seen[-1]


def replay_scores(replay, model, device, fresh):
    """The scoring functions (slots -> distances, smaller = closer) a replay's strategies rank by, or None:
    ``elite`` compares what the current network makes of a stored unroll with what the acting network made of it
    (its logits or features, stored at acting time); ``attentive`` compares it with where the agent is now, the
    newest fresh unroll's last state (its view broadcast over the unroll's steps)."""
    spec = replay.spec
    if spec["type"] != "custom" or not (spec["sample_strategy"] or spec["insert_strategy"]):
        return None, None
    name, p = spec["dist_function"], spec["p"]
    stored_key = "logits" if name == "kl_div" else "features"

    @torch.no_grad()
    def elite(slots):
        part = replay.take(slots)
        current, _ = current_view(model, part, device, name)
        return distance(name, current, part[stored_key].transpose(0, 1), p)

    @torch.no_grad()
    def attentive(slots):
        _, now = current_view(model, {k: v[:, -1:] if k not in ("hx", "cx") else v[-1:] for k, v in fresh.items()},
                              device, name)
        current, _ = current_view(model, replay.take(slots), device, name)
        return distance(name, current, now.unsqueeze(1), p)

    sample = attentive if spec["sample_strategy"] == "attentive_sampling" else elite
    return sample, elite


def run_progress(args, state):
    """How far the run is, in [0, 1], by --max-frames or --max-seconds (0 without either): lambda's annealing.
    Both are the run's, from the shared run state (as the supervisor counts them), so that a replaced learner
    goes on annealing where its predecessor was."""
    done = 0.0
    if args.max_frames:
        done = max(done, state.frames.value / args.max_frames)
    if args.max_seconds:
        done = max(done, (time.monotonic() - state.started.value) / args.max_seconds)
    return min(done, 1.0)


def build_batch(fresh, replays, generator, progress, model, device):
    """The learner's batch: the ``fresh`` unrolls, then each ready replay's ``count`` samples. Returns (batch, the
    replays' insertion scores)."""
    parts, insert_scores = [fresh], []
    for replay in replays:
        sample_score, elite_score = replay_scores(replay, model, device, fresh)
        insert_scores.append(elite_score)
        if replay.ready():
            parts.append(replay.take(replay.sample(generator, progress, sample_score)))
    return concat(parts), insert_scores


class LearnerStep:
    """The learner's side of the boundary, the same for both backends: ``step(fresh, lag)`` turns ``need`` fresh
    unrolls (time-major, as ``UnrollSlots.read`` gives them) and the replays' samples into one V-trace update of
    the shared model (through a replica on the learner's device) and publishes the new weights with
    ``weights.publish()``. Where the fresh unrolls come from (the slots, or Ray objects) and how a published
    version reaches the actors is the backend's business."""

    def __init__(self, args, meta, shared_model, optimizer, weights, state, replays=()):
        self.args, self.weights, self.state, self.replays = args, weights, state, replays
        self.device = device_for(args.gpu_ids, 0)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.model = fast_layout(build_model(meta).to(self.device), meta, args.channels_last)
        self.replica = Replica(shared_model, self.model)
        self.update = Update(self.replica, optimizer, args, state, 0)
        self.generator = torch.Generator().manual_seed(args.seed + args.workers + 1)  # the replays' sampling
        self.queue_count = args.batch_size - sum(replay.count for replay in replays)
        self.steps = 0

    @property
    def need(self):
        """Fresh unrolls the next batch takes: the queue's share, plus the share of each replay that does not
        hold enough yet."""
        return self.queue_count + sum(replay.count for replay in self.replays if not replay.ready())

    def __call__(self, fresh, lag):
        """One update from ``fresh`` (``need`` unrolls) whose behaviour policies are ``lag`` (``[need]``) versions
        behind."""
        args, state, device = self.args, self.state, self.device
        self.replica.pull()
        batch, insert_scores = build_batch(fresh, self.replays, self.generator,
                                           run_progress(args, state), self.model, device)
        batch = {k: v.to(device) for k, v in batch.items()}  # once: learner_forward's moves are then no-ops
        logits, values, cut = learner_forward(self.model, batch, device, args.bf16)
        mask = None
        if args.kl_mask:
            mask = trust_region_mask(batch["logits"], logits[:-1].detach(), args.kl_threshold,
                                     mode=args.kl_mask_mode)
            masked = float((mask == 0).sum())
            state.masked[0] += masked
            state.masked[1] += mask.numel()
            state.masked_recent.value = masked / mask.numel()
        loss, policy_loss, baseline_loss, entropy = impala_loss(batch, logits, values, cut, args, mask)
        need = len(lag)
        if args.clone_losses and batch["actions"].shape[1] > need:  # once a replay holds its share
            policy_cloning, value_cloning = cloning_losses(batch, logits, values, need)
            loss = loss + args.policy_cloning_cost * policy_cloning + args.value_cloning_cost * value_cloning
            state.cloning[:] = [policy_cloning.item() / args.num_steps, value_cloning.item() / args.num_steps]
        grad_norm, applied = self.update(loss)
        if applied:
            self.weights.publish()
        self.steps += 1
        for replay, score in zip(self.replays, insert_scores):  # after the batch: no unroll twice in one batch
            for j in range(need):
                replay.put(replay.insert_slot(self.generator, score), column(fresh, j), self.steps)
        T = args.num_steps
        state.losses[:] = [policy_loss.item() / T, baseline_loss.item() / T, entropy.item() / T, grad_norm.item()]
        lag = lag.double()
        state.policy_lag[:] = [lag.min().item(), lag.mean().item(), lag.max().item()]


def learner(args, meta, shared_model, optimizer, store, weights, state, parent_pid, replays=()):
    """The shared-memory learner: the oldest full slots (too old ones dropped), one ``LearnerStep`` each batch."""
    setup_child_process(args.seed + args.workers + 1, parent_pid)
    step = LearnerStep(args, meta, shared_model, optimizer, weights, state, replays)
    while not state.stop.is_set() and parent_alive(parent_pid):
        full = store.full()
        lag = weights.version - store.version[full]
        stale = full[lag > args.max_policy_lag] if args.max_policy_lag is not None else full[:0]
        if len(stale):  # too old to correct well: dropped, counted
            store.release(stale)
            state.dropped.value += len(stale)
            continue
        need = step.need
        if len(full) < need:
            time.sleep(WAIT)
            continue
        slots = full[:need]
        lag = weights.version - store.version[slots]
        step(store.take(slots), lag)


def unroll_features(args, meta):
    """F, the size of the features the actors store beside the logits: what the heads read where a replay ranks
    unrolls by them (elite or attentive sampling by ln_norm/cos_dist), else 0."""
    specs = replay_specs(args.replay_parameters, args.batch_size)
    return feature_size(meta) if any(needs_features(spec) for spec in specs) else 0


def replays_for(args, settings, meta):
    """The ``--replay-parameters`` replays, allocated once, by the supervisor's process: a replaced learner finds
    them as its predecessor left them."""
    specs, features = replay_specs(args.replay_parameters, args.batch_size), unroll_features(args, meta)
    return [ReplayBuffer(spec, args.num_steps, meta["obs_shape"], meta["num_actions"], meta["hidden_size"], features,
                         final_slots(settings, args.num_steps))
            for spec in specs if spec["type"] != "queue"]


def evaluator_role(args, settings, meta, shared_model, state, paths, start_seconds):
    """The evaluator (test.py), as for A3G, with the run's time and frames at this start."""
    return test, (args, settings, meta, shared_model, state, os.getpid(), paths, start_seconds,
                  state.frames.value, time.time())


def impala_roles(ctx, args, settings, meta, shared_model, optimizer, state, paths, start_seconds):
    """IMPALA's roles for the supervisor: ``actor <rank>`` x ``--workers``, the learner, the evaluator and, with
    ``--inference server``, the inference role."""
    per_actor = slots_per_actor(args)
    features = unroll_features(args, meta)
    store = UnrollStore(per_actor * args.workers, per_actor, args.num_steps, meta["obs_shape"], meta["num_actions"],
                        meta["hidden_size"], features, final_slots(settings, args.num_steps))
    replays = replays_for(args, settings, meta)
    weights = SharedWeights(ctx, shared_model)
    server = None
    if args.inference == "server":
        server = InferenceServer(ctx, args.workers, args.envs_per_worker, meta["obs_shape"], meta["num_actions"],
                                 meta["hidden_size"], features)
    parent = os.getpid()
    roles = {"evaluator": evaluator_role(args, settings, meta, shared_model, state, paths, start_seconds),
             "learner": (learner, (args, meta, shared_model, optimizer, store, weights, state, parent, replays))}
    for rank in range(args.workers):
        roles[f"actor {rank}"] = (actor, (rank, args, settings, meta, store, weights, server, state, parent))
    if server is not None:
        roles["inference"] = (inference, (args, meta, server, weights, state, parent))
    return roles
