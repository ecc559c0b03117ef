"""TensorBoard's training curves, written by the main process at a steady interval while the run trains.

Tags (x axis: the run's emulator frames, as every a3g count; ``charts/agent_steps`` beside them, so a curve can be
read against agent steps as CleanRL's and SB3's are):
- ``charts/episodic_return``, ``charts/episodic_length``: each *training* game as it ends (CleanRL's names and
  meaning: the game's own points, a whole game across lost lives, its length in agent steps), from the workers'
  and actors' ``RecordEpisodeStatistics`` through ``RunState``'s rings;
- ``charts/SPS`` (frames/s over the interval), ``charts/agent_steps``;
- ``losses/policy_loss``, ``losses/value_loss``, ``losses/entropy``, ``losses/grad_norm`` (A3G's worker 0 or
  IMPALA's learner, per step; with ``--objective ppo`` per sample of the last minibatch, and
  ``losses/approx_kl``, ``losses/clipfrac``, ``losses/explained_variance`` beside them), ``a3g/policy_lag``
  (A3G with the shared optimizer: the shared model's updates between the weights worker 0 acted with and its last
  update, its own included), ``losses/entropy_coef`` with ``--entropy-decay`` (the bonus's coefficient at those
  frames), ``charts/learning_rate`` with ``--lr-decay`` (SB3's ``train/learning_rate``), and IMPALA's ``impala/*``;
- ``perf/<phase>``: the share of the workers', actors' and learner's time in each phase over the interval
  (``core.timing.PHASES``: sync, env, act, wait, batch, learn, optimize);
- ``weights/<parameter>`` histograms of the shared model every ``--histogram-interval`` seconds (and
  ``gradients/<parameter>``, from A3G's worker 0 or IMPALA's learner: ``GradientHistograms``), and the network's
  graph once.
The evaluator writes its own games under ``eval/*`` (runtime/evaluator.py).
"""

import argparse
import math
import time
from typing import Callable

import torch

from core.schedule import entropy_coef, learning_rate
from core.timing import phase_split
from runtime.run_state import RunState


class TrainingLog:
    """Called by the supervisor's loop; writes what is new once per ``--log-interval`` seconds."""

    def __init__(self, args: argparse.Namespace, state: RunState, shared_model: torch.nn.Module, meta: dict,
                 clock: Callable[[], float], log: Callable[..., object]):
        from torch.utils.tensorboard import SummaryWriter  # imported here: a run without TensorBoard never loads it

        self.args, self.state, self.shared_model, self.clock = args, state, shared_model, clock
        self.writer = SummaryWriter(args.run_dir, filename_suffix=".training")
        self.read = [0] * len(state.games_written)
        self.last_time, self.last_frames, self.last_histogram = clock(), state.frames.value, -math.inf
        self.last_phases = state.phase_totals()
        self.graph(meta, log)

    def graph(self, meta: dict, log: Callable[..., object]) -> None:
        """The network's graph, once per run (TensorBoard's GRAPHS tab), traced on a zero observation."""
        state = self.shared_model.initial_state(1)
        try:
            self.writer.add_graph(self.shared_model, (torch.zeros(1, *meta["obs_shape"]), state))
        except Exception as exc:  # tracing is a nicety: a network it cannot trace still trains
            log(f"TensorBoard: no graph of the network ({type(exc).__name__}: {str(exc)[:200]})", echo=False)

    def __call__(self) -> None:
        now = self.clock()
        if now - self.last_time < self.args.log_interval:
            return
        self.write(now)

    def write(self, now: float) -> None:
        state, writer = self.state, self.writer
        for episode_return, length, frames in state.new_games(self.read):
            writer.add_scalar("charts/episodic_return", episode_return, int(frames))
            writer.add_scalar("charts/episodic_length", length, int(frames))
        frames = state.frames.value
        step = int(frames)
        if now - self.last_time >= 0.5:  # a rate over less than that (the final write, just after one) says little
            writer.add_scalar("charts/SPS", (frames - self.last_frames) / (now - self.last_time), step)
        writer.add_scalar("charts/agent_steps", frames / self.args.frames_per_step, step)
        self.last_time, self.last_frames = now, frames
        phases = state.phase_totals()
        for name, share in phase_split(self.last_phases, phases).items():  # where the roles' time went meanwhile
            writer.add_scalar(f"perf/{name}", share, step)
        self.last_phases = phases
        policy_loss, value_loss, entropy, grad_norm, approx_kl, clipfrac, explained = state.losses[:]
        if not math.isnan(entropy):  # NaN: no update yet (a 0 here would read as a collapsed policy)
            writer.add_scalar("losses/policy_loss", policy_loss, step)
            writer.add_scalar("losses/value_loss", value_loss, step)
            writer.add_scalar("losses/entropy", entropy, step)
            writer.add_scalar("losses/grad_norm", grad_norm, step)
            if self.args.algo == "a3g" and self.args.shared_optimizer:  # worker 0's latest, in shared updates
                writer.add_scalar("a3g/policy_lag", state.policy_lag[1], step)
        for name, value in (("approx_kl", approx_kl), ("clipfrac", clipfrac), ("explained_variance", explained)):
            if not math.isnan(value):  # --objective ppo's (explained variance: NaN too where the returns were flat)
                writer.add_scalar(f"losses/{name}", value, step)
        if self.args.entropy_decay is not None:  # the bonus's coefficient the roles read at these frames
            writer.add_scalar("losses/entropy_coef", entropy_coef(self.args.entropy_coef, self.args.entropy_decay,
                                                                  frames), step)
        if self.args.lr_decay is not None:  # the learning rate the roles step with at these frames
            writer.add_scalar("charts/learning_rate", learning_rate(self.args.lr, self.args.lr_decay, frames), step)
        if self.args.algo == "impala":  # how many versions behind the learner the latest batch's actors were
            for name, lag in zip(("min", "mean", "max"), state.policy_lag[:]):
                writer.add_scalar(f"impala/policy_lag_{name}", lag, step)
            if self.args.kl_mask:  # the share of the latest batch's steps outside the trust region
                writer.add_scalar("impala/masked_fraction", state.masked_recent.value, step)
            policy_cloning, value_cloning = state.cloning[:]
            if self.args.clone_losses and not math.isnan(policy_cloning):
                writer.add_scalar("impala/policy_cloning", policy_cloning, step)
                writer.add_scalar("impala/value_cloning", value_cloning, step)
        if self.args.histogram_interval > 0 and now - self.last_histogram >= self.args.histogram_interval:
            self.last_histogram = now
            for name, param in self.shared_model.named_parameters():
                writer.add_histogram(f"weights/{name}", param.detach(), step)
        writer.flush()

    def close(self) -> None:
        """The last interval's curves (a short run may not have reached one), then the file is closed."""
        self.write(self.clock())
        self.writer.close()


class GradientHistograms:
    """``gradients/<parameter>`` histograms every ``--histogram-interval`` seconds, from the process that computes
    them (A3G's worker 0, IMPALA's learner: the main process holds no gradients), into an event file of its own in
    the run directory. ``__call__(model, frames)`` right after an update, while the replica still holds them."""

    def __init__(self, args: argparse.Namespace, clock: Callable[[], float] = time.monotonic):
        self.interval, self.run_dir, self.clock = args.histogram_interval, args.run_dir, clock
        self.enabled = args.tensorboard_logger and self.interval > 0
        self.writer, self.last = None, clock()  # the first after one interval: the start's gradients say little

    def __call__(self, model: torch.nn.Module, frames: float) -> None:
        if not self.enabled or self.clock() - self.last < self.interval:
            return
        self.last = self.clock()
        if self.writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(self.run_dir, filename_suffix=".gradients")
        for name, param in model.named_parameters():
            if param.grad is not None:
                self.writer.add_histogram(f"gradients/{name}", param.grad.detach().float().cpu(), int(frames))
        self.writer.flush()
