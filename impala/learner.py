"""IMPALA's learning, the same for both backends: ``LearnerStep`` turns fresh unrolls (and the replays' samples)
into one V-trace update of the shared model and publishes the new weights; ``learner_loop`` feeds it from a
backend's source of unrolls.

Losses, as in the paper: policy gradient with the clipped pg-rhos' advantages, baseline ``0.5 (vs - V)^2`` times
``--value-coef`` (``--baseline-cost``), entropy bonus times ``--entropy-coef`` (``--entropy-cost``); each summed over
time and averaged over the batch, as A3G's loss, so that a learning rate means the same in both.
"""

import argparse
import math
import time
from collections.abc import Sequence

import torch

from core.hardware import device_for
from core.policy import Categorical, Policy
from core.ppo import PPOStats, clip_coefficient, clipped_surrogate, clipped_value_loss, explained_variance, minibatches
from core.returns import VTraceFromLogitsReturns, normalized_advantages, trust_region_mask, vtrace_from_action_log_probs
from core.schedule import entropy_coef, learning_rate
from core.timing import PhaseClock
from envs.environment import EnvSettings
from impala.boundary import UnrollSource, WeightPublisher
from impala.replay import ReplayBuffer, Score, concat, distance
from impala.unrolls import column, policy_layout
from model import Replica, build_model, fast_layout, feature_size
from runtime.defaults import final_slots
from runtime.processes import parent_alive
from runtime.replay_spec import needs_features, replay_specs
from runtime.run_state import RunState
from runtime.tensorboard_log import GradientHistograms
from shared_optim import Update


def learner_forward(model: torch.nn.Module, batch: dict[str, torch.Tensor], device: torch.device | str,
                    bf16: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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
def cut_values(model: torch.nn.Module, batch: dict[str, torch.Tensor], states: tuple[torch.Tensor, torch.Tensor],
               device: torch.device | str) -> torch.Tensor:
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


def vtrace_targets(batch: dict[str, torch.Tensor], logits: torch.Tensor, values: torch.Tensor, cut: torch.Tensor,
                   gamma: float, mask: torch.Tensor | None = None,
                   policy: Policy | None = None) -> VTraceFromLogitsReturns:
    """V-trace over a batch (``returns.vtrace_from_action_log_probs``, the taken actions' log-probabilities under
    the behaviour and the learner's policy: ``policy``, a categorical over the logits by default), with ``cut`` (``learner_forward``'s) where a time
    limit ended an episode. Such a step ends its episode in the unroll (discount 0: the next observation begins
    another one) but not in truth, so its reward gets ``gamma * V(observation it cut at)``: its TD error, target
    and advantage are then exactly those of an unroll that went on to that observation and ended there (whose
    target V-trace takes to be its value)."""
    discounts = gamma * (1.0 - batch["dones"])
    rewards = batch["rewards"] + gamma * cut
    policy = policy or Categorical(logits.shape[-1])
    actions = batch["actions"]
    return vtrace_from_action_log_probs(policy.log_prob(batch["logits"], actions), policy.log_prob(logits[:-1], actions),
                                        discounts, rewards, values[:-1].detach(), values[-1].detach(), mask=mask)


def impala_loss(batch: dict[str, torch.Tensor], logits: torch.Tensor, values: torch.Tensor, cut: torch.Tensor,
                args: argparse.Namespace, mask: torch.Tensor | None = None, policy: Policy | None = None,
                entropy_coef: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """V-trace actor-critic loss of a batch (``learner_forward``'s logits, values and cut values); returns (loss,
    policy loss, baseline loss, entropy). ``mask`` (``[T, n]``, ``--kl-mask``) drops steps outside the trust
    region from the policy gradient and the value targets (a masked step's target is its own value: no baseline
    gradient); the entropy bonus keeps every step. ``policy``: what the logits parameterise (a categorical by
    default; ``core/policy.py``); ``entropy_coef``: the bonus's coefficient now (``core.schedule``; default
    ``args.entropy_coef``). ``--normalize-advantages`` normalises the policy gradient's advantages over the steps
    the mask keeps (``returns.normalized_advantages``)."""
    policy = policy or Categorical(logits.shape[-1])
    vtrace = vtrace_targets(batch, logits, values, cut, args.gamma, mask, policy)
    advantages = vtrace.pg_advantages
    if args.normalize_advantages:
        advantages = normalized_advantages(advantages, mask)
    policy_loss = -(vtrace.target_action_log_probs * advantages).sum(0).mean()
    baseline_loss = 0.5 * (vtrace.vs - values[:-1]).pow(2).sum(0).mean()
    entropy = policy.entropy(logits[:-1]).sum(0).mean()
    coef = args.entropy_coef if entropy_coef is None else entropy_coef
    loss = policy_loss + args.value_coef * baseline_loss - coef * entropy
    if args.bound_coef:  # --bound-coef: the Gaussian's mean beyond the action bounds
        loss = loss + args.bound_coef * policy.bound_excess(logits[:-1]).sum(0).mean()
    return loss, policy_loss, baseline_loss, entropy


def columns(batch: dict[str, torch.Tensor], index: torch.Tensor) -> dict[str, torch.Tensor]:
    """The unrolls ``index`` of a time-major batch (``hx``/``cx``: ``[n, H]``)."""
    return {key: value[index] if key in ("hx", "cx") else value[:, index] for key, value in batch.items()}


def appo_loss(part: dict[str, torch.Tensor], logits: torch.Tensor, values: torch.Tensor, cut: torch.Tensor,
              old_values: torch.Tensor, args: argparse.Namespace, policy: Policy, entropy_coef: float,
              clip: float, kept: tuple[torch.Tensor, torch.Tensor] | None = None
              ) -> tuple[torch.Tensor, PPOStats, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``--objective ppo``'s loss of a minibatch of unrolls (APPO): V-trace targets and policy-gradient advantages
    recomputed on the current values and policy (``--ppo-targets recompute``), or ``kept``: the minibatch's
    (targets, advantages) taken once before the batch's first update (``keep``); PPO's clipped surrogate on the
    ratio of the current policy to the behaviour one (the actors' logits, however many versions old), the value
    loss clipped around ``old_values`` (the learner's values of the batch before its first update), the entropy
    bonus; every term a mean over the minibatch's steps (``core.ppo``). Returns (loss, the surrogate's stats,
    (surrogate, value loss, entropy))."""
    if kept is None:
        vtrace = vtrace_targets(part, logits, values, cut, args.gamma, None, policy)
        targets, advantages = vtrace.vs, vtrace.pg_advantages
        log_probs, behaviour_log_probs = vtrace.target_action_log_probs, vtrace.behavior_action_log_probs
    else:
        targets, advantages = kept
        log_probs = policy.log_prob(logits[:-1], part["actions"])
        behaviour_log_probs = policy.log_prob(part["logits"], part["actions"])
    if args.normalize_advantages:
        advantages = normalized_advantages(advantages)
    surrogate, stats = clipped_surrogate(log_probs, behaviour_log_probs, advantages, clip)
    value_loss = clipped_value_loss(values[:-1], old_values, targets, args.value_clip)
    entropy = policy.entropy(logits[:-1]).mean()
    loss = surrogate + args.value_coef * value_loss - entropy_coef * entropy
    if args.bound_coef:
        loss = loss + args.bound_coef * policy.bound_excess(logits[:-1]).mean()
    return loss, stats, (surrogate, value_loss, entropy)


def cloning_losses(batch: dict[str, torch.Tensor], logits: torch.Tensor, values: torch.Tensor, first_replayed: int,
                   policy: Policy | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """CLEAR's behavioural cloning (Rolnick et al. 2019, "Experience Replay for Continual Learning", Section 3) on
    the replayed unrolls, the batch's columns from ``first_replayed`` on: policy cloning, per step
    ``KL(mu || pi) = sum_a mu(a) log(mu(a) / pi(a))`` from the stored behaviour logits to the learner's, and value
    cloning ``(V - V_behaviour)^2`` to the values stored at acting time. Each is summed over time and averaged over
    the whole batch (a fresh unroll adds 0), as the V-trace losses are, so a replayed step weighs the same in both.
    Returns (policy cloning, value cloning). For a Gaussian policy (``policy``, ``core/policy.py``) the KL is the
    closed form between the two Gaussians."""
    n = batch["actions"].shape[1]
    policy = policy or Categorical(logits.shape[-1])
    cloning = policy.kl(batch["logits"][:, first_replayed:], logits[:-1, first_replayed:]).sum() / n
    value = (values[:-1, first_replayed:] - batch["values"][:, first_replayed:]).pow(2).sum() / n
    return cloning, value


def current_view(model: torch.nn.Module, part: dict[str, torch.Tensor], device: torch.device | str,
                 dist_function: str, bf16: bool = False) -> torch.Tensor:
    """What the current network makes of the ``t`` observations of unrolls ``part`` (time-major, from their stored
    recurrent state), ``[k, t, X]``: its logits for ``kl_div``, else the features its heads read. With ``bf16``
    under bfloat16 autocast, the precision the actors stored theirs in."""
    state = (part["hx"].to(device), part["cx"].to(device))
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
        _, logits, _, features = model.unroll(part["obs"].to(device), state, part["dones"].to(device),
                                              with_features=True)
    return (logits if dist_function == "kl_div" else features).float().cpu().transpose(0, 1)


def replay_scores(replay: ReplayBuffer, model: torch.nn.Module, device: torch.device | str,
                  fresh: dict[str, torch.Tensor], bf16: bool = False) -> tuple[Score | None, Score | None]:
    """The scoring functions (slots -> distances, smaller = closer) a replay's strategies rank by, or None:
    ``elite`` compares what the current network makes of a stored unroll's steps with what the acting network made
    of them (its logits or features, stored at acting time); ``attentive`` compares it with where the agent is now,
    the newest fresh unroll's last state (its view broadcast over the unroll's steps). Both look at the first
    ``score_steps`` steps of each unroll (5 by default: ``DEFAULT_SCORE_STEPS``; null: all of them)."""
    spec = replay.spec
    if spec["type"] != "custom" or not (spec["sample_strategy"] or spec["insert_strategy"]):
        return None, None
    name, p, steps = spec["dist_function"], spec["p"], spec.get("score_steps")
    stored_key = "logits" if name == "kl_div" else "features"

    def view(part):  # the current network's view of the stored steps: the observations after them are not read
        return current_view(model, {**part, "obs": part["obs"][:-1]}, device, name, bf16)

    @torch.no_grad()
    def elite(slots):
        part = replay.take(slots, steps)
        return distance(name, view(part), part[stored_key].transpose(0, 1), p, model.policy)

    @torch.no_grad()
    def attentive(slots):
        newest = {key: value[-1:] if key in ("hx", "cx") else value[:, -1:] for key, value in fresh.items()}
        now = current_view(model, newest, device, name, bf16)[:, -1]
        return distance(name, view(replay.take(slots, steps)), now.unsqueeze(1), p, model.policy)

    sample = attentive if spec["sample_strategy"] == "attentive_sampling" else elite
    return sample, elite


def run_progress(args: argparse.Namespace, state: RunState) -> float:
    """How far the run is, in [0, 1], by --max-frames or --max-seconds (0 without either): lambda's annealing.
    Both are the run's, from the shared run state (as the supervisor counts them), so that a replaced learner
    goes on annealing where its predecessor was."""
    done = 0.0
    if args.max_frames:
        done = max(done, state.frames.value / args.max_frames)
    if args.max_seconds:
        done = max(done, (time.monotonic() - state.started.value) / args.max_seconds)
    return min(done, 1.0)


def build_batch(fresh: dict[str, torch.Tensor], replays: Sequence[ReplayBuffer], generator: torch.Generator,
                progress: float, model: torch.nn.Module, device: torch.device | str,
                bf16: bool = False) -> tuple[dict[str, torch.Tensor], list[Score | None]]:
    """The learner's batch: the ``fresh`` unrolls, then each ready replay's ``count`` samples. Returns (batch, the
    replays' insertion scores; ``bf16``: theirs and the samples' scoring forwards in bfloat16, as ``--bf16``)."""
    parts, insert_scores = [fresh], []
    for replay in replays:
        sample_score, elite_score = replay_scores(replay, model, device, fresh, bf16)
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

    def __init__(self, args: argparse.Namespace, meta: dict, shared_model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer, weights: WeightPublisher, state: RunState,
                 replays: Sequence[ReplayBuffer] = ()) -> None:
        self.args, self.weights, self.state, self.replays = args, weights, state, replays
        self.device = device_for(args.gpu_ids, 0)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.model = fast_layout(build_model(meta).to(self.device), meta, args.channels_last)
        self.replica = Replica(shared_model, self.model)
        self.policy = self.model.policy  # what the logits parameterise (core/policy.py)
        self.obs_stats = shared_model.obs_norm if meta.get("obs_norm") else None  # model.ObsNorm
        self.clock = PhaseClock()  # where the learner's time goes (core/timing.py)
        self.gradient_histograms = GradientHistograms(args)
        self.update = Update(self.replica, optimizer, args, state, 0, self.clock)
        self.generator = torch.Generator().manual_seed(args.seed + args.workers + 1)  # the replays' sampling
        self.queue_count = args.batch_size - sum(replay.count for replay in replays)
        self.steps = 0

    @property
    def need(self) -> int:
        """Fresh unrolls the next batch takes: the queue's share, plus the share of each replay that does not
        hold enough yet."""
        return self.queue_count + sum(replay.count for replay in self.replays if not replay.ready())

    def __call__(self, fresh: dict[str, torch.Tensor], lag: torch.Tensor) -> None:
        """One update from ``fresh`` (``need`` unrolls) whose behaviour policies are ``lag`` (``[need]``) versions
        behind."""
        args, state, device, clock = self.args, self.state, self.device, self.clock
        with clock.phase("sync"):
            self.replica.pull()
        with clock.phase("batch"):
            batch, insert_scores = build_batch(fresh, self.replays, self.generator,
                                               run_progress(args, state), self.model, device, args.bf16)
            batch = {k: v.to(device) for k, v in batch.items()}  # once: learner_forward's moves are then no-ops
        # the learner keeps the observation statistics (the shared model's: the replica's forwards here are not
        # touched); they go out with the weights
        if self.obs_stats is not None:
            self.obs_stats.update(fresh["obs"][:-1])  # the last is the next unroll's first, counted there
        if args.objective == "ppo":
            self.ppo_epochs(batch, fresh, lag, insert_scores)
            return
        learn_started = time.perf_counter()
        logits, values, cut = learner_forward(self.model, batch, device, args.bf16)
        mask = None
        if args.kl_mask:
            mask = trust_region_mask(batch["logits"], logits[:-1].detach(), args.kl_threshold,
                                     mode=args.kl_mask_mode, policy=self.policy)
            masked = float((mask == 0).sum())
            state.masked[0] += masked
            state.masked[1] += mask.numel()
            state.masked_recent.value = masked / mask.numel()
        coef = entropy_coef(args.entropy_coef, args.entropy_decay, state.frames.value)
        loss, policy_loss, baseline_loss, entropy = impala_loss(batch, logits, values, cut, args, mask, self.policy,
                                                                coef)
        need = len(lag)
        if args.clone_losses and batch["actions"].shape[1] > need:  # once a replay holds its share
            policy_cloning, value_cloning = cloning_losses(batch, logits, values, need, self.policy)
            loss = loss + args.policy_cloning_cost * policy_cloning + args.value_cloning_cost * value_cloning
            state.cloning[:] = [policy_cloning.item() / args.num_steps, value_cloning.item() / args.num_steps]
        clock.add("learn", time.perf_counter() - learn_started)
        grad_norm, applied = self.update(loss, learning_rate(args.lr, args.lr_decay, state.frames.value))
        if applied:
            with clock.phase("optimize"):  # the new weights out to the actors
                self.weights.publish()
        T = args.num_steps
        self.finish(fresh, lag, insert_scores, [policy_loss.item() / T, baseline_loss.item() / T,
                                                entropy.item() / T, grad_norm.item(), math.nan, math.nan, math.nan])

    def ppo_epochs(self, batch: dict[str, torch.Tensor], fresh: dict[str, torch.Tensor], lag: torch.Tensor,
                   insert_scores: list) -> None:
        """``--objective ppo`` (APPO): ``--ppo-epochs`` passes over the batch, each split into ``--minibatches`` of
        whole unrolls; every minibatch one update, published to the actors, the replica pulled before the next."""
        args, state, device, clock = self.args, self.state, self.device, self.clock
        frames = state.frames.value
        coef, lr = entropy_coef(args.entropy_coef, args.entropy_decay, frames), learning_rate(args.lr, args.lr_decay,
                                                                                              frames)
        clip = clip_coefficient(args.clip_coef, args.clip_anneal, frames, args.max_frames)
        with clock.phase("learn"), torch.no_grad():  # the values the value clip keeps each update near
            logits, old_values, cut = learner_forward(self.model, batch, device, args.bf16)
            vtrace = vtrace_targets(batch, logits, old_values, cut, args.gamma, None, self.policy)
            explained, old_values = explained_variance(old_values[:-1], vtrace.vs), old_values[:-1]
        kept = (vtrace.vs, vtrace.pg_advantages) if args.ppo_targets == "keep" else None
        unrolls = batch["actions"].shape[1]
        order = [index for _ in range(args.ppo_epochs) for index in minibatches(unrolls, args.minibatches)]
        for n, index in enumerate(order):
            index = index.to(device)
            if n:  # the replica was pulled for the first
                with clock.phase("sync"):
                    self.replica.pull()
            with clock.phase("learn"):
                part = columns(batch, index)
                logits, values, cut = learner_forward(self.model, part, device, args.bf16)
                mine = None if kept is None else (kept[0][:, index], kept[1][:, index])
                loss, stats, losses = appo_loss(part, logits, values, cut, old_values[:, index], args, self.policy,
                                                coef, clip, mine)
            grad_norm, applied = self.update(loss, lr)
            if applied:
                with clock.phase("optimize"):  # the new weights out to the actors
                    self.weights.publish()
        self.finish(fresh, lag, insert_scores, [*(x.item() for x in losses), grad_norm.item(), stats.approx_kl,
                                                stats.clipfrac, explained])

    def finish(self, fresh: dict[str, torch.Tensor], lag: torch.Tensor, insert_scores: list,
               losses: list[float]) -> None:
        """After a batch's updates: its fresh unrolls into the replays, the figures for TensorBoard."""
        args, state, clock = self.args, self.state, self.clock
        self.steps += 1
        with clock.phase("batch"):  # this batch's fresh unrolls into the replays: after it, none twice in one batch
            for replay, score in zip(self.replays, insert_scores):
                for j in range(len(lag)):
                    replay.put(replay.insert_slot(self.generator, score), column(fresh, j), self.steps)
        with clock.phase("learn"):  # reading the losses (on a GPU: waiting for them), the histograms
            self.gradient_histograms(self.model, state.frames.value)
            state.losses[:] = losses
            lag = lag.double()
            state.policy_lag[:] = [lag.min().item(), lag.mean().item(), lag.max().item()]
        state.publish_phases(state.learner_slot, clock)


def learner_loop(step: LearnerStep, source: UnrollSource, state: RunState, parent_pid: int) -> None:
    """The learner's loop, for both backends: a ``step`` each time ``source`` has the fresh unrolls it needs,
    until the run stops. Time spent asking for unrolls that are not there yet counts as ``wait``, taking those that
    are (copying them out of the backend) as ``batch``."""
    while not state.stop.is_set() and parent_alive(parent_pid):
        started = time.perf_counter()
        taken = source.take(step.need, step.weights.version)
        if taken is not None:
            step.clock.add("batch", time.perf_counter() - started)
            step(*taken)
            started = time.perf_counter()
        source.after(taken is not None)
        step.clock.add("wait", time.perf_counter() - started)


def unroll_features(args: argparse.Namespace, meta: dict) -> int:
    """F, the size of the features the actors store beside the logits: what the heads read where a replay ranks
    unrolls by them (elite or attentive sampling by ln_norm/cos_dist), else 0."""
    return features_for(replay_specs(args.replay_parameters, args.batch_size, args.num_steps), meta)


def features_for(specs: list[dict], meta: dict) -> int:
    """``unroll_features`` of replays already parsed."""
    return feature_size(meta) if any(needs_features(spec) for spec in specs) else 0


def replays_for(args: argparse.Namespace, settings: EnvSettings, meta: dict) -> list[ReplayBuffer]:
    """The ``--replay-parameters`` replays, allocated once, by the supervisor's process: a replaced learner finds
    them as its predecessor left them."""
    specs = replay_specs(args.replay_parameters, args.batch_size, args.num_steps)
    features = features_for(specs, meta)
    return [ReplayBuffer(spec, args.num_steps, meta["obs_shape"], hidden_size=meta["hidden_size"],
                         feature_size=features, final_slots=final_slots(settings, args.num_steps),
                         **policy_layout(meta))
            for spec in specs if spec["type"] != "queue"]
