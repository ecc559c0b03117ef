"""The command line: main.py's flags, merged with a resumed run's, resolved and checked once, up front.

``validate(argv)`` is everything main.py does before it builds anything: parse (rl_a3c_pytorch's flag names), merge
a ``--resume`` checkpoint's saved flags under the ones given now, resolve ``auto`` defaults (``defaults.py``),
check every value, build the environment once to learn its shapes, and check a resumed or ``--load``ed file
against the network. Bad input raises one of ``BAD_INPUT_ERRORS``: one line for the user, exit 2.
"""

import argparse
import math
import os
from collections.abc import Collection, Sequence

import numpy as np
import torch

from core.cli import HelpFormatter, OneLineParser, random_seed
from core.errors import BadInput
from core.files import env_file_name
from core.hardware import cpu_has_native_bf16, missing_gpus
from core.policy import BOX_ACTIONS
from core.ppo import OBJECTIVES
from core.returns import TRUST_REGION_MODES
from envs import retro_env
from envs.environment import (
    ATARI_CONFIG,
    EnvSettings,
    check_env_id,
    env_conf_for,
    family,
    frames_per_step,
    import_packages,
    is_atari,
    is_retro,
    load_env_config,
    make_env,
    policy_kind,
    skip_rate_unread,
)
from envs.frames import FORMER_FRAME_NORM, FRAME_NORMS
from model import CRITICS, FRAME_FORMAT, LOG_STDS, RECURRENT_MODELS, VECTOR_MODELS, GaussianHead, choose_model, model_meta
from runtime.checkpoints import check_compatible, load_checkpoint
from runtime.defaults import (
    AUTO,
    auto_or,
    batch_capacity,
    describe,
    resolve_defaults,
    worker_cap_note,
)
from runtime.replay_spec import DEFAULT_REPLAY_PARAMETERS, check_keys_read, replay_specs
from runtime.run_dir import choose_run_dir

MACHINE_FLAGS = ("resume", "run_dir", "load", "gpu_ids", "backend", "ray_address")  # never taken from a resumed run
# Each algorithm's own flags: given with the other algorithm they are refused rather than silently ignored.
ALGO_FLAGS = {
    "impala": ("batch_size", "backend", "ray_address", "max_policy_lag", "num_buffers", "inference", "inference_batch", "inference_wait",
               "replay_parameters", "kl_mask", "kl_threshold", "kl_mask_mode", "clone_losses", "policy_cloning_cost",
               "value_cloning_cost", "ppo_targets"),
    "a3g": ("tau", "distributed_step_size", "train_forward"),
}
# Flags that only another setting reads: given without it, each would be recorded in args.json and change nothing.
# flag -> (the setting that reads it, the value it reads it with; None: only without that setting)
# flags only a Box of actions reads, with their defaults (environment_setup refuses them for Discrete actions)
BOX_ONLY_FLAGS = {"box_actions": "clip", "log_std": "shared", "log_std_init": 0.0, "bound_coef": 0.0}
READ_ONLY_WITH = {
    "kl_threshold": ("kl_mask", True),
    "kl_mask_mode": ("kl_mask", True),
    "policy_cloning_cost": ("clone_losses", True),
    "value_cloning_cost": ("clone_losses", True),
    "inference_batch": ("inference", "server"),
    "inference_wait": ("inference", "server"),
    "amsgrad": ("optimizer", "Adam"),
    "alpha": ("optimizer", "RMSprop"),
    "momentum": ("optimizer", "RMSprop"),
    "ppo_epochs": ("objective", "ppo"),
    "minibatches": ("objective", "ppo"),
    "clip_coef": ("objective", "ppo"),
    "clip_anneal": ("objective", "ppo"),
    "value_clip": ("objective", "ppo"),
    "ppo_targets": ("objective", "ppo"),
    "load": ("resume", None),  # a resumed run starts from its checkpoint's weights
    "load_model_dir": ("load", True),
}


def cpu_share(text: str) -> str | float:
    """--evaluator-cpu, --confirm-cpu: 'auto' or a fraction of one core in (0, 1]."""
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a fraction of one core in (0, 1], got {text!r}")
    return value


class FrameSpan(argparse.Action):
    """--entropy-decay, --lr-decay: START END frames, or ``none`` (a constant value; drops a resumed run's span), or
    (--lr-decay) ``auto``."""

    def __call__(self, parser, namespace, values, option_string=None):
        if values == ["none"]:
            setattr(namespace, self.dest, None)
            return
        if values == ["auto"] and self.dest == "lr_decay":  # elsewhere "auto" is refused below, as a bad START END
            setattr(namespace, self.dest, AUTO)
            return
        try:
            start, end = (int(value) for value in values)
        except ValueError:
            parser.error(f"argument {option_string}: expected START END (frames) or none, got {' '.join(values)}")
        setattr(namespace, self.dest, [start, end])


def default_gpu_ids() -> list[int]:
    """--gpu-ids' default: every visible GPU, else [-1] (the CPU)."""
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else [-1]


def build_parser(suppress_defaults: bool = False) -> OneLineParser:
    """main.py's flags, in groups by concern (``--help`` reads in sections). rl_a3c_pytorch's flags keep their names,
    short forms and meaning; TorchBeast's names are aliases where the meaning is ours."""
    p = OneLineParser(prog="main.py", description="A3G: asynchronous advantage actor-critic on CPU and GPU.",
                      formatter_class=HelpFormatter)

    add = p.add_argument_group('environment', 'what is played and how its observations and rewards are prepared').add_argument
    add("-ev", "--env", default="PongNoFrameskip-v4",
        help="gymnasium environment id (module:Id for an id that importing your module registers, as gym.make "
             "takes it), or a stable-retro game <Game>-<System>-v0 whose ROM is imported")
    add("--gym-packages", nargs="+", default=[], metavar="MODULE",
        help="modules to import in every process before the environment is built, for ids they register "
             "(RL Zoo's flag)")
    add("-evc", "--env-config", default=ATARI_CONFIG, help="per-game crop settings (JSON; default: envs/atari.json)")
    add("--skip-rate", type=int, default=4, help="emulator frames per agent step: Atari (the emulator's own for v5 ids) and retro games")
    add("-mel", "--max-episode-length", type=int, default=10000, help="cut episodes after this many agent steps")
    add("--reward-clipping", default=AUTO, choices=[AUTO, "abs_one", "normalize", "none"],
        help="training rewards clipped to [-1, 1] (abs_one), divided by a running standard deviation of the "
             "discounted return (normalize: SB3's VecNormalize) or as they come (none); the evaluator always "
             "scores raw rewards; auto: abs_one for Atari and retro games, none for classic control")
    add("--box-actions", default=BOX_ONLY_FLAGS["box_actions"], choices=list(BOX_ACTIONS),
        help="Box action spaces: the Gaussian's samples go to the environment clipped to the bounds (clip) or "
             "squashed by tanh (tanh: its entropy is then that of the squashed actions, which a wider Gaussian "
             "does not raise)")
    add("--log-std", default=BOX_ONLY_FLAGS["log_std"], choices=list(LOG_STDS),
        help="Box action spaces: the Gaussian's log standard deviations are parameters of their own, the same in "
             "every state (shared: SB3's and PPO's way), a linear function of the network's features (state: "
             "a3c_continuous's way), starting the same in every state, or gSDE's state-dependent exploration (sde: "
             "SB3's use_sde; A3G's workers draw the noise once per rollout, IMPALA's actors every step)")
    add("--log-std-init", type=float, default=BOX_ONLY_FLAGS["log_std_init"],
        help="Box action spaces: the Gaussian's log standard deviation at the start of a fresh run, the same for "
             "every dimension (SB3's log_std_init; 0: std 1, half the [-1, 1] range; it must lie in [-5, 2], "
             "the log-std's bounds; with --log-std sde, that of every entry of the noise matrix)")
    add("--bound-coef", type=float, default=BOX_ONLY_FLAGS["bound_coef"],
        help="Box action spaces with --box-actions clip: a loss of this times sum(max(|mean| - 1, 0)^2) per step, "
             "the Gaussian's mean beyond the bounds (rl_games' bounds loss). The clip gives a mean of 1.5 and one "
             "of 3 the same actions, so nothing else brings a mean back inside, and a greedy policy whose means "
             "sit beyond the bounds plays every action at full strength (0: off)")

    add = p.add_argument_group('retro games').add_argument
    add("--state", nargs="+", default=None, metavar="STATE",
        help="retro games: start each episode from this save state (a .state file, the name of one in the game's "
             "integration folder, or a folder of them); several: each training episode from one at random "
             "(default: the game's own start state)")
    add("--eval-state", nargs="+", default=None, metavar="STATE",
        help="retro games: the evaluator's start states, played in turn (default: --state's), e.g. a level that "
             "training never sees")

    add = p.add_argument_group('training', 'for both algorithms').add_argument
    add("--algo", default="a3g", choices=["a3g", "impala"],
        help="a3g: hogwild workers, each with its own replica; impala: actors and one V-trace learner")
    add("-w", "--workers", type=auto_or(int), default=AUTO,
        help="training processes; auto: one per CPU core, at most 2 for A3G on Atari (docs/reference/defaults.md)")
    add("-ns", "--num-steps", "--unroll-length", type=auto_or(int), default=AUTO,
        help="rollout length (A3G: forward steps per update; IMPALA: steps per unroll); auto: 20, 128 for A3G's "
             "--objective ppo on Atari")
    add("--envs-per-worker", type=auto_or(int), default=AUTO,
        help="environments each worker steps together (batched); auto: 8 for Atari, 1 for retro games, 4 for "
             "vector observations")
    add("-g", "--gamma", "--discounting", type=float, default=0.99, help="discount factor")
    add("-ec", "--entropy-coef", "--entropy-cost", type=float, default=0.01, help="entropy bonus coefficient")
    add("--entropy-decay", nargs="+", action=FrameSpan, default=None, metavar="START END|none",
        help="the entropy bonus falls linearly from --entropy-coef at START frames to 0 at END frames, and stays 0 "
             "(none: a constant bonus)")
    add("--lr-decay", nargs="+", action=FrameSpan, default=AUTO, metavar="START END|none|auto",
        help="the learning rate falls linearly from --lr at START frames to 0 at END frames (SB3's lin_ schedules "
             "are --lr-decay 0 N with --max-frames N); END before --max-frames is refused, as the frames after it "
             "would train nothing (none: a constant learning rate); auto: for A3G on Atari from 10M frames to "
             "--max-frames, over at least its last tenth and at most its last half, else none")
    add("--normalize-advantages", action=argparse.BooleanOptionalAction, default=AUTO,
        help="scale each update's advantages to mean 0 and standard deviation 1 before the policy gradient: over "
             "the whole batch (pg) or each minibatch (ppo) (SB3's normalize_advantage, CleanRL's --norm-adv); "
             "auto: on for --objective ppo, off for pg")
    add("-vc", "--value-coef", "--baseline-cost", type=auto_or(float), default=AUTO,
        help="value loss coefficient; auto: 0.5 for pixel games (Atari, retro), 0.1 for vector observations")
    add("--max-grad-norm", "--grad-norm-clipping", type=auto_or(float), default=AUTO,
        help="clip the gradient norm per update (0 = off); auto: 40 for Atari (0.5 with --objective ppo), off for the "
             "other families")
    add("--max-nonfinite", type=int, default=100,
        help="non-finite updates in a row (each skipped) after which the run stops as diverged")
    add("-s", "--seed", type=random_seed, default=1, help="random seed; worker rank r uses seed + r")
    add("-gp", "--gpu-ids", type=int, nargs="+", default=default_gpu_ids(),
        help="GPUs for the workers, round-robin; -1 = CPU (default: all visible GPUs, else -1)")

    add = p.add_argument_group('PPO objective', 'for both algorithms: --objective ppo reuses each batch '
                                                '(Schulman et al. 2017)').add_argument
    add("--objective", default=AUTO, choices=[AUTO, *OBJECTIVES],
        help="the policy loss: pg (A3C's policy gradient, IMPALA's V-trace one; each sample gives one gradient) or "
             "ppo (PPO's clipped surrogate on the ratio of the current policy to the one that acted, each batch "
             "reused for --ppo-epochs epochs of --minibatches minibatches); auto: ppo for A3G with the nature "
             "network on Atari on a CPU-only machine, pg elsewhere")
    add("--ppo-epochs", type=int, default=4, help="ppo: passes over each batch (CleanRL's --update-epochs)")
    add("--minibatches", type=int, default=4,
        help="ppo: minibatches each pass splits the batch into, one update each (CleanRL's --num-minibatches): "
             "an A3G worker's rollout (a recurrent network's by environment: it must divide --envs-per-worker) or "
             "IMPALA's --batch-size unrolls (whole unrolls: it must divide --batch-size)")
    add("--clip-coef", type=float, default=0.1,
        help="ppo: the ratio is clipped to [1 - this, 1 + this] (CleanRL's Atari 0.1)")
    add("--clip-anneal", action=argparse.BooleanOptionalAction, default=False,
        help="ppo: the clip coefficient falls linearly to 0 at --max-frames (RL Zoo's Atari PPO)")
    add("--value-clip", type=auto_or(float), default=AUTO,
        help="ppo: a value further than this from the one the rollout was acted with gains nothing from moving "
             "further (baselines' ppo2; 0: off); auto: --clip-coef")
    add("--ppo-targets", choices=["recompute", "keep"], default="recompute",
        help="IMPALA's ppo: the V-trace targets and advantages recomputed for each minibatch with the current "
             "values and policy, or kept: taken once per batch, before its first update")

    add = p.add_argument_group('network').add_argument
    add("--model", default=AUTO, choices=[AUTO, "a3clstm", "mlplstm", "mlp", "nature", "resnet"],
        help="network; auto: nature for games from frames (on a CPU and with GPUs), mlp for vectors; nature and "
             "resnet are feed-forward on 4 stacked 84x84 frames, mlp on vectors")
    add("-hs", "--hidden-size", type=auto_or(int), default=AUTO,
        help="LSTM hidden size (a3clstm, mlplstm) or the width of mlp's layers; auto: 512 for a3clstm, 64 for "
             "mlp/mlplstm")
    add("--bf16", action=argparse.BooleanOptionalAction, default=AUTO,
        help="bfloat16 autocast for the forward passes of A3G's workers and IMPALA's actors and learner (faster, "
             "less exact); auto: on for Atari and retro games on a "
             "CPU-only machine whose CPU has native bf16, else off")
    add("--obs-norm", action=argparse.BooleanOptionalAction, default=AUTO,
        help="normalise vector observations by a running mean and variance kept in the network (mlp, mlplstm; "
             "saved with the model); auto: on for continuous control, else off")
    add("--critic", default="shared", choices=list(CRITICS),
        help="the mlp's value head: on the policy's two layers (shared) or on two layers of its own over the same "
             "observations (separate: SB3's and CleanRL's MLPs, whose value loss does not move the policy's "
             "features)")
    add("--frame-norm", default=AUTO, choices=[AUTO, *FRAME_NORMS],
        help="Atari and retro frames: uint8 to the network, which standardises each frame by its own mean and std "
             "(frame), divides it by 255 (scale) or divides it by 255 less its darkest value (darkest: a uniform "
             "background made black); or rl_a3c_pytorch's running mean and std of each frame in the environment, "
             "as float32 (running: how models trained before --frame-norm normalised); auto: frame, "
             "darkest for A3G's --objective ppo on Atari")
    add("--channels-last", action=argparse.BooleanOptionalAction, default=True,
        help="channels-last memory layout for the conv networks' replicas (faster on CPU)")

    add = p.add_argument_group('optimizer').add_argument
    add("-l", "--lr", type=auto_or(float), default=AUTO,
        help="learning rate; auto: 1e-4 for a3clstm (rl_a3c_pytorch's), 3e-4 for nature/resnet, 2e-3 for "
             "mlp/mlplstm; with --objective ppo on Atari 5e-4 for A3G, 2.5e-4 for IMPALA")
    add("-o", "--optimizer", default="Adam", choices=["Adam", "RMSprop"], help="optimizer")
    add("--eps", "--epsilon", type=auto_or(float), default=AUTO,
        help="the optimizer's epsilon; auto: rl_a3c_pytorch's, 1e-3 for Adam and 0.1 for RMSprop; 1e-5 for Adam with "
             "--objective ppo on Atari")
    add("-a", "--amsgrad", action=argparse.BooleanOptionalAction, default=False,
        help="Adam's amsgrad variant (needs --optimizer Adam)")
    add("--alpha", type=float, default=0.99,
        help="RMSprop's smoothing constant (TorchBeast's --alpha; needs --optimizer RMSprop)")
    add("--momentum", type=float, default=0.0,
        help="RMSprop's momentum (TorchBeast's --momentum; needs --optimizer RMSprop)")

    add = p.add_argument_group('A3G', '--algo a3g only').add_argument
    add("-t", "--tau", type=auto_or(float), default=AUTO,
        help="GAE lambda (1.0 = plain n-step advantages); auto: 1.0, 0.95 for --objective ppo on Atari")
    add("-dss", "--distributed-step-size", type=int, nargs="+", default=[],
        help="rollout lengths handed out to the workers round-robin (overrides --num-steps)")
    add("--train-forward", default=AUTO, choices=[AUTO, "stepped", "batched"],
        help="A3G's training forward: stepped (the loss's graph is built while acting: fewest multiply-adds) or "
             "batched (act without autograd, then one batched forward over the rollout: fewest kernels); "
             "auto: batched for the feed-forward networks and with GPUs, stepped for the recurrent networks on a "
             "CPU (measured faster there)")
    add("-so", "--shared-optimizer", action=argparse.BooleanOptionalAction, default=True,
        help="optimizer statistics shared by all workers; --no-shared-optimizer: one optimizer per worker (A3G only: "
             "IMPALA's learner steps the shared one, whose statistics checkpoint.pt keeps)")

    add = p.add_argument_group('IMPALA', '--algo impala only').add_argument
    add("--batch-size", type=auto_or(int), default=AUTO,
        help="IMPALA: unrolls per learner step; auto: 8, or two per env where there are fewer envs (retro games' "
             "one env per actor), or what --num-buffers' slots can fill where that is less")
    add("--max-policy-lag", type=int, default=None,
        help="IMPALA: drop unrolls whose behaviour policy is more than this many versions old; none (the default) keeps them all")
    add("--num-buffers", type=int, default=None,
        help="IMPALA: unroll slots in shared memory, split between the actors; none (the default): 2 per env, more "
             "where --batch-size needs them; at least 2 per env")
    add("--inference", default=AUTO, choices=[AUTO, "local", "server"],
        help="IMPALA: local (each actor acts with its own CPU copy of the weights) or server (one inference role "
             "answers every actor's steps in batches, on the GPU when there is one); auto: local on a CPU-only "
             "machine (measured faster there), server with GPUs")
    add("--inference-batch", type=int, default=0,
        help="IMPALA: most observations in one forward pass, 0 for every actor's envs; needs "
             "--inference server")
    add("--inference-wait", type=float, default=1.0,
        help="IMPALA: most milliseconds to wait for more actors once one has asked; needs --inference server")

    add = p.add_argument_group('replay', "--algo impala only: stored unrolls in the learner's batches (docs/guide/impala.md)").add_argument
    add("--replay-parameters", default=DEFAULT_REPLAY_PARAMETERS, metavar="JSON",
        help="IMPALA: the batch's sources, a JSON list of {\"type\": queue|standard|custom, \"capacity\": N, "
             "\"sample_ratio\": r, ...} (elite_buffer_vtrace's format; custom adds dist_function, p, "
             "sample_strategy, insert_strategy, lambda_batch_multiplier, alfa_annealing_factor, "
             "elite_sampling_strategy, elite_batch_size: each key only where its strategy reads it); r x "
             "--batch-size unrolls from each, one queue of fresh unrolls required (docs/guide/impala.md)")
    add("--kl-mask", action=argparse.BooleanOptionalAction, default=False,
        help="IMPALA: LASER's trust region: steps whose behaviour is too far from the learner's policy get no "
             "V-trace target or policy gradient")
    add("--kl-threshold", type=float, default=0.3,
        help="IMPALA: a step is kept while its divergence is below this (elite_buffer_vtrace's value); needs "
             "--kl-mask")
    add("--kl-mask-mode", default="laser", choices=list(TRUST_REGION_MODES),
        help="IMPALA, needs --kl-mask: laser (LASER paper: KL(pi || V-trace's implied policy) per step), kl_pi_mu "
             "(elite_buffer_vtrace: KL(pi || mu) per step) or kl_mu_pi_cut (impala-laser: KL(mu || pi), the rest of "
             "the unroll masked after the first failing step)")
    add("--clone-losses", action=argparse.BooleanOptionalAction, default=False,
        help="IMPALA with a replay: CLEAR's behavioural cloning on replayed unrolls (policy: KL from the stored "
             "behaviour policy to the learner's; value: squared distance to the stored values)")
    add("--policy-cloning-cost", type=float, default=0.01,
        help="IMPALA: weight of the policy cloning loss (CLEAR's 0.01); needs --clone-losses")
    add("--value-cloning-cost", type=float, default=0.005,
        help="IMPALA: weight of the value cloning loss (CLEAR's 0.005); needs --clone-losses")

    add = p.add_argument_group('Ray', '--algo impala only: actors across machines').add_argument
    add("--backend", default="shm", choices=["shm", "ray"],
        help="IMPALA: how unrolls and weights travel between the roles: shm (shared memory, one machine) or ray "
             "(actors as Ray actors, on this machine or a cluster; pip install -r requirements-ray.txt)")
    add("--ray-address", default=None, metavar="HOST:PORT",
        help="--backend ray: join the Ray cluster whose head is at this address (what `ray start --head` prints) "
             "instead of starting a local cluster for the run")

    add = p.add_argument_group('limits', 'when the run stops').add_argument
    add("--max-frames", type=int, default=None,
        help="stop after this many frames in total (resumed ones included); the rollouts under way finish, so a run "
             "ends a few rollouts past it")
    add("--max-seconds", type=float, default=None, help="stop after this many seconds of this invocation")
    add("--stop-score", type=float, default=None, help="stop ('solved') when the evaluator's mean reaches this")
    add("--score-window", type=int, default=10, help="evaluator games in the mean that --stop-score tests")
    add("--eval-stochastic", action="store_true",
        help="the evaluator samples its actions from the policy (as RL Zoo scores Atari agents) instead of playing "
             "the greedy ones; what --stop-score, best_model.pt and progress.csv then measure")

    add = p.add_argument_group('output', 'the run directory, models, logs and checkpoints').add_argument
    add("--run-dir", default=None, help="exact run directory (default: runs/<env>__<seed>__<timestamp>)")
    add("--resume", default=None, help="continue from a run directory or its checkpoint.pt")
    add("-ld", "--load", action="store_true",
        help="start from the weights in <load-model-dir>/<env>.pt (a fresh run: not with --resume)")
    add("-lmd", "--load-model-dir", default="trained_models/", help="folder --load reads <env>.pt from")
    add("-smd", "--save-model-dir", default=None,
        help="also keep the best model as <save-model-dir>/<env>.pt (it always goes to the run directory's "
             "best_model.pt); a file there that another run wrote is replaced only by a better game")
    add("-sm", "--save-max", action=argparse.BooleanOptionalAction, default=True,
        help="save the evaluator's model only when its score matches or beats the best (else after every game)")
    add("-lg", "--log-dir", default="logs/", help="folder of the text log <env>_log")
    add("-tl", "--tensorboard-logger", action=argparse.BooleanOptionalAction, default=True,
        help="write TensorBoard events into the run directory")
    add("--log-interval", type=float, default=5.0,
        help="seconds between TensorBoard's training curves: training games, losses, frames/s")
    add("--histogram-interval", type=float, default=60.0,
        help="seconds between TensorBoard histograms of the weights; 0: none")
    add("--progress-interval", type=float, default=10.0,
        help="seconds between progress lines while training (frames, frames/s, percent and ETA of the limit, the "
             "evaluator's latest mean); 0: none")
    add("--checkpoint-interval", type=float, default=300.0, help="seconds between checkpoint.pt saves")
    add("--keep-checkpoints", type=int, default=3,
        help="checkpoints kept: checkpoint.pt and the previous ones as checkpoint-<frames>.pt")

    add = p.add_argument_group('processes', "the evaluator's share of the CPU, and replacing dead processes").add_argument
    add("--evaluator-cpu", type=cpu_share, default="auto", metavar="auto|FRACTION",
        help="the most of one core the evaluator uses, on average (it pauses between bits of games); auto: all of "
             "one when the training processes (IMPALA's learner and server counted) leave a core free, else a "
             "tenth of the machine (0.2 on 2 cores)")
    add("--confirm-cpu", type=cpu_share, default="auto", metavar="auto|FRACTION",
        help="with --stop-score: the most of one core the evaluator uses while its latest game reached the score, "
             "so that the games which can end the run come sooner; auto: a whole core (as much as the scheduler "
             "gives it); a value at or below --evaluator-cpu: no change")
    add("--evaluator-nice", type=int, default=0, choices=range(0, 20), metavar="0..19",
        help="scheduling niceness of the evaluator: 10 leaves the workers the CPU, but evaluator games, and so "
             "'solved', come much later")
    add("--max-restarts", type=int, default=5,
        help="dead workers/evaluators replaced within 60 s before the run stops with an error")
    if suppress_defaults:
        for action in p._actions:
            action.default = argparse.SUPPRESS
    return p


PATH_FLAGS = ("resume", "run_dir", "save_model_dir", "log_dir", "env_config")
# auto flags whose value follows --objective (not --frame-norm: the network's input, fixed for a run's life)
OBJECTIVE_AUTO = ("normalize_advantages", "value_clip", "num_steps", "tau", "lr", "eps", "max_grad_norm")


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, dict | None, dict]:
    """Parse ``argv``, merge a ``--resume``d run's saved flags under those given now; returns (args, the resumed
    checkpoint or None, the flags given explicitly)."""
    args = build_parser().parse_args(argv)
    explicit = vars(build_parser(suppress_defaults=True).parse_args(argv))
    for name in PATH_FLAGS:  # an unset shell variable (--resume "$RUN") must not start a fresh run, or write to ./
        if explicit.get(name) == "":
            raise BadInput(f"{option(name)} needs a path, got an empty one")
    resumed = None
    if args.resume:
        resumed = load_checkpoint(args.resume, kind="checkpoint")
        # A resumed run keeps its own settings; only flags given now change them. The GPUs are this machine's.
        saved = resumed.get("args") or {}
        # How the roles travel (--backend, --ray-address) is the machine's too: a ray run resumes on shm unless told.
        saved_algo = saved.get("algo", "a3g")  # runs from before --algo were A3G's
        algo = explicit.get("algo", saved_algo)
        for key, value in saved.items():
            if key not in explicit and key not in MACHINE_FLAGS and hasattr(args, key) and \
                    carried(key, saved_algo, algo):
                setattr(args, key, value)
        if "frame_norm" not in saved and "frame_norm" not in explicit:
            args.frame_norm = FORMER_FRAME_NORM  # a run from before --frame-norm
        if args.optimizer != saved.get("optimizer", args.optimizer) and "eps" not in explicit:
            args.eps = AUTO  # the saved eps was the other optimizer's
        if "max_frames" in explicit and "lr_decay" not in explicit and "--lr-decay" in auto_picked(saved):
            args.lr_decay = AUTO  # the saved span was auto's, for the old budget: auto picks one for the new
        if explicit.get("objective", saved.get("objective")) != saved.get("objective"):  # auto's for the old one
            for name in OBJECTIVE_AUTO:
                if name not in explicit and option(name) in auto_picked(saved):
                    setattr(args, name, AUTO)
        if algo != saved_algo:  # what auto picked was for the other algorithm: picked afresh for this one
            for name in map(dest, auto_picked(saved)):
                if name not in explicit and hasattr(args, name):
                    setattr(args, name, AUTO)
        check_imports_given(saved, explicit, args.resume)
        if "env_config" not in explicit and is_gone_default_crop_file(args.env_config):
            args.env_config = ATARI_CONFIG  # the same crops, where this checkout keeps them
    check_algo_flags(args.algo, explicit)
    return args, resumed, explicit


def auto_picked(saved: dict) -> list[str]:
    """The flags ``auto`` picked for a saved run, over its first start and every resume since (``auto_flags``); of a
    run saved before that list was kept, its description of the defaults tells whether its --lr-decay was auto's."""
    if "auto_flags" in saved:
        return list(saved["auto_flags"])
    return ["--lr-decay"] if "--lr-decay " in (saved.get("defaults") or "") else []


def check_imports_given(saved: dict, explicit: dict, source: str) -> None:
    """A resumed run whose environment needs the user's modules imported gets them only from flags given now: a
    file a3g loads never makes it import code."""
    modules = list(saved.get("gym_packages") or [])
    if ":" in str(saved.get("env", "")):
        modules.append(saved["env"].split(":", 1)[0])
    given = list(explicit.get("gym_packages") or [])
    if ":" in str(explicit.get("env", "")):
        given.append(explicit["env"].split(":", 1)[0])
    missing = [m for m in modules if m not in given]
    if missing:
        raise BadInput(f"{source} builds its environment with {', '.join(missing)} imported: give --gym-packages "
                       f"{' '.join(missing)} again (a checkpoint never makes a3g import code)")


def is_gone_default_crop_file(path: str) -> bool:
    """Whether a resumed run names the default crops of a checkout that is gone: its own ``envs/atari.json`` from a
    clone moved or removed since (a worktree), or, saved before the crops moved there, this repository's
    ``config.json``. A missing file of the user's own stays theirs (and is refused in one line)."""
    if os.path.exists(path):
        return False
    path = os.path.abspath(path)
    root = os.path.dirname(os.path.dirname(ATARI_CONFIG))
    return path == os.path.join(root, "config.json") or path.endswith(os.sep + os.path.join("envs", "atari.json"))


def carried(key: str, saved_algo: str, algo: str) -> bool:
    """Whether a resumed run's saved flag carries over. One algorithm's own flag (ALGO_FLAGS) does only where both
    runs are of that algorithm: a run of the other algorithm never chose it (older runs saved placeholders there),
    so its default or ``auto`` stands, and ``auto`` is picked afresh for this run."""
    owners = [name for name, flags in ALGO_FLAGS.items() if key in flags]
    return not owners or (saved_algo == algo and algo in owners)


def check_algo_flags(algo: str, given: Collection[str]) -> None:
    """A flag that only the other algorithm reads, given now, is refused: it would be recorded in args.json and
    change nothing."""
    for other, flags in ALGO_FLAGS.items():
        wrong = [option(flag) for flag in flags if flag in given]
        if other != algo and wrong:
            raise BadInput(f"{', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} for --algo {other}, and this "
                             f"run is --algo {algo}")


def check_flags_read(args: argparse.Namespace, given: Collection[str]) -> None:
    """A flag given now that nothing reads with this run's settings (the resumed run's included) is refused: it would
    be recorded in args.json and change nothing. What a resumed run saved is not judged: it was not given now."""
    for flag, (setting, wanted) in READ_ONLY_WITH.items():
        value = getattr(args, setting)
        if flag in given and not (value is None if wanted is None else value == wanted):
            raise BadInput(f"{option(flag)} needs {requirement(setting, wanted, value)}, else it changes nothing")
    if "replay_parameters" in given:  # the user's own keys: the defaults filled in for the others are fine
        check_keys_read(args.replay_parameters)
    if "num_steps" in given and args.algo == "a3g" and args.distributed_step_size:
        raise BadInput(f"--num-steps changes nothing with --distributed-step-size {args.distributed_step_size}: each "
                       f"worker's rollout length is its entry of that list (give one of the two)")


def check_impala_optimizer(args: argparse.Namespace, given: Collection[str]) -> None:
    """IMPALA's learner is the only one stepping, with the shared optimizer, whose statistics checkpoint.pt keeps; a
    private one's would be lost at every save and whenever the learner is replaced. Refused given now or saved by a
    resumed run (an A3G run with one optimizer per worker, resumed as IMPALA)."""
    if args.algo == "impala" and not args.shared_optimizer:
        whose, fix = ("", "leave it out") if "shared_optimizer" in given else (" (the resumed run's)",
                                                                               "give --shared-optimizer")
        raise BadInput(f"--no-shared-optimizer{whose} is for --algo a3g: IMPALA's learner steps the shared "
                         f"optimizer, whose statistics checkpoint.pt keeps ({fix})")


def option(name: str) -> str:
    """A flag's name as typed: ``batch_size`` -> ``--batch-size``."""
    return "--" + name.replace("_", "-")


def dest(flag: str) -> str:
    """``option``'s inverse, the attribute a flag sets: ``--batch-size`` -> ``batch_size``."""
    return flag[2:].replace("-", "_")


def requirement(setting: str, wanted: object, value: object) -> str:
    """What READ_ONLY_WITH's ``(setting, wanted)`` asks for, in the user's terms."""
    if wanted is True:
        return option(setting)
    if wanted is None:
        return f"a run without {option(setting)}"
    return f"{option(setting)} {wanted} (this run's is {value})"


def check_counts(args: argparse.Namespace) -> None:
    """The counts that ``auto`` defaults are computed from (slots per actor, the learning rate's fall), checked
    before they are: a 0 or negative one is its own one-line error, not a division by zero or a message about a
    flag the user never gave."""
    for flag, value in (("--workers", args.workers), ("--envs-per-worker", args.envs_per_worker),
                        ("--num-buffers", args.num_buffers), ("--max-frames", args.max_frames)):
        if value is not None and value != AUTO and not value > 0:
            raise BadInput(f"{flag} must be positive, got {value}")


def check_ppo(args: argparse.Namespace) -> None:
    """--objective ppo's numbers, and a batch that splits into --minibatches equal ones (A3G: each worker's rollout of
    --num-steps x --envs-per-worker samples, a recurrent network's by environment, each minibatch whole sequences;
    IMPALA: the learner's --batch-size unrolls)."""
    if args.objective != "ppo":
        return
    for flag, value in (("--ppo-epochs", args.ppo_epochs), ("--minibatches", args.minibatches)):
        if not value > 0:
            raise BadInput(f"{flag} must be positive, got {value}")
    if not (0 < args.clip_coef < 1):
        raise BadInput(f"--clip-coef must lie in (0, 1), got {args.clip_coef}")
    if not (args.value_clip >= 0 and math.isfinite(args.value_clip)):
        raise BadInput(f"--value-clip must be a finite number >= 0, got {args.value_clip}")
    if args.algo == "impala":
        for flag in ("kl_mask", "clone_losses"):
            if getattr(args, flag):
                raise BadInput(f"{option(flag)} is for --objective pg: with ppo the clip keeps each update near the "
                               f"behaviour policy")
        if args.batch_size % args.minibatches:
            raise BadInput(f"--minibatches {args.minibatches} must divide --batch-size {args.batch_size}: each "
                           f"minibatch is whole unrolls")
        return
    if args.model in RECURRENT_MODELS:
        if args.envs_per_worker % args.minibatches:
            raise BadInput(f"--minibatches {args.minibatches} must divide --envs-per-worker {args.envs_per_worker}: "
                           f"--model {args.model} is recurrent, so each minibatch is the whole rollout of some "
                           f"environments")
        return
    for steps in sorted(set(args.distributed_step_size or [args.num_steps])):
        if (steps * args.envs_per_worker) % args.minibatches:
            raise BadInput(f"a rollout of {steps} steps x {args.envs_per_worker} envs does not split into "
                           f"--minibatches {args.minibatches} equal ones: give a --minibatches that divides "
                           f"{steps * args.envs_per_worker}, or --objective pg")


def check_args(args: argparse.Namespace) -> None:
    """Every check of user input, up front (after ``auto`` flags are resolved; the counts they are resolved from,
    ``check_counts``, before); raises BadInput with a one-line reason."""
    positive = {"--num-steps": args.num_steps, "--lr": args.lr, "--hidden-size": args.hidden_size,
                "--skip-rate": args.skip_rate, "--max-episode-length": args.max_episode_length,
                "--score-window": args.score_window, "--checkpoint-interval": args.checkpoint_interval,
                "--keep-checkpoints": args.keep_checkpoints, "--max-nonfinite": args.max_nonfinite}
    for flag, value in positive.items():
        if not value > 0 or (isinstance(value, float) and not math.isfinite(value)):
            raise BadInput(f"{flag} must be positive, got {value}")
    for flag, value in (("--progress-interval", args.progress_interval), ("--log-interval", args.log_interval),
                        ("--histogram-interval", args.histogram_interval)):
        if not (value >= 0 and math.isfinite(value)):
            raise BadInput(f"{flag} must be a number of seconds >= 0, got {value}")
    check_ppo(args)
    if args.algo == "impala":
        if args.batch_size <= 0:
            raise BadInput(f"--batch-size must be positive, got {args.batch_size}")
        if args.inference_batch < 0:
            raise BadInput(f"--inference-batch must be >= 0, got {args.inference_batch}")
        if not (args.inference_wait >= 0 and math.isfinite(args.inference_wait)):
            raise BadInput(f"--inference-wait must be a finite number of milliseconds >= 0, got "
                             f"{args.inference_wait}")
        if args.max_policy_lag is not None and args.max_policy_lag < 0:
            raise BadInput(f"--max-policy-lag must be >= 0, got {args.max_policy_lag}")
        if batch_capacity(args) < args.batch_size:
            raise BadInput(f"--batch-size {args.batch_size} needs more unroll slots than --num-buffers "
                             f"{args.num_buffers} gives: they fill batches of at most {batch_capacity(args)} (each "
                             f"actor claims --envs-per-worker slots at once); raise --num-buffers or leave it out, "
                             f"or lower --batch-size")
        specs = replay_specs(args.replay_parameters, args.batch_size, args.num_steps)
        if not (args.kl_threshold > 0 and math.isfinite(args.kl_threshold)):
            raise BadInput(f"--kl-threshold must be a finite number > 0, got {args.kl_threshold}")
        for flag, cost in (("--policy-cloning-cost", args.policy_cloning_cost),
                           ("--value-cloning-cost", args.value_cloning_cost)):
            if not (cost >= 0 and math.isfinite(cost)):
                raise BadInput(f"{flag} must be a finite number >= 0, got {cost}")
        if args.clone_losses and len(specs) == 1:
            raise BadInput("--clone-losses clones replayed unrolls, and --replay-parameters has no replay: add a "
                             "standard or custom one")
    check_backend(args)
    if is_retro(args.env) and args.envs_per_worker > 1:
        raise BadInput(f"--envs-per-worker {args.envs_per_worker}: stable-retro runs one emulator per process, so "
                         f"retro games take 1 env per worker; use --workers for more emulators")
    for flag, value in (("--state", args.state), ("--eval-state", args.eval_state)):
        if value is not None and not is_retro(args.env):
            raise BadInput(f"{flag} is for stable-retro games; {args.env} is not one")
    if args.max_restarts < 0:
        raise BadInput(f"--max-restarts must be >= 0, got {args.max_restarts}")
    if any(n <= 0 for n in args.distributed_step_size):
        raise BadInput(f"--distributed-step-size entries must be positive, got {args.distributed_step_size}")
    if not 0.0 < args.gamma <= 1.0:
        raise BadInput(f"--gamma must be in (0, 1], got {args.gamma}")
    if args.tau is not None and not 0.0 <= args.tau <= 1.0:
        raise BadInput(f"--tau must be in [0, 1], got {args.tau}")
    if not (args.eps > 0 and math.isfinite(args.eps)):
        raise BadInput(f"--eps must be positive, got {args.eps}")
    if not 0.0 <= args.alpha < 1.0:
        raise BadInput(f"--alpha must be in [0, 1), got {args.alpha}")
    if not 0.0 <= args.momentum < 1.0:
        raise BadInput(f"--momentum must be in [0, 1), got {args.momentum}")
    for flag in ("entropy_coef", "value_coef", "max_grad_norm", "bound_coef"):
        value = getattr(args, flag)
        if not (value >= 0 and math.isfinite(value)):
            raise BadInput(f"--{flag.replace('_', '-')} must be a finite number >= 0, got {value}")
    for flag in ("entropy_decay", "lr_decay"):
        decay = getattr(args, flag)
        if decay is not None and not 0 <= decay[0] < decay[1]:
            raise BadInput(f"--{flag.replace('_', '-')} takes START < END frames, both >= 0, got {decay[0]} "
                           f"{decay[1]}")
    if args.lr_decay is not None and args.max_frames is not None and args.max_frames > args.lr_decay[1]:
        end = args.lr_decay[1]
        raise BadInput(f"--lr-decay ends at {end:,} frames, before --max-frames {args.max_frames:,}: the last "
                       f"{args.max_frames - end:,} frames would train with a learning rate of 0; give --lr-decay "
                       f"START END with END >= --max-frames, or --lr-decay none")
    low, high = GaussianHead.LOG_STD_RANGE
    if not low <= args.log_std_init <= high:
        raise BadInput(f"--log-std-init must lie in [{low:g}, {high:g}] (the log-std's bounds), got "
                       f"{args.log_std_init}")
    if args.max_seconds is not None and not args.max_seconds > 0:
        raise BadInput(f"--max-seconds must be positive, got {args.max_seconds}")
    if args.stop_score is not None and not math.isfinite(args.stop_score):
        raise BadInput(f"--stop-score must be a finite number, got {args.stop_score}")
    gpus = args.gpu_ids
    if gpus != [-1]:
        if any(g < 0 for g in gpus):
            raise BadInput(f"--gpu-ids: use -1 alone for the CPU, or GPU indices >= 0, got {gpus}")
        missing, count = missing_gpus(gpus)
        if missing:
            raise BadInput(f"--gpu-ids {missing} not available: this machine has {count} CUDA device(s) "
                             f"(use --gpu-ids -1 for the CPU)")


def rate_past_its_fall(args: argparse.Namespace) -> str | None:
    """A note for a run that can go past the end of its learning rate's fall (``--lr-decay`` and no
    ``--max-frames``: a run bounded by time or score): those frames train with a rate of 0. Not refused: the
    time or score may well stop it first."""
    if args.lr_decay is None or args.max_frames is not None:
        return None
    return (f"--lr-decay brings the learning rate to 0 at {args.lr_decay[1]:,} frames and no --max-frames stops "
            f"the run there: frames past it would train nothing (give --max-frames {args.lr_decay[1]})")


def ray_host_port(address: str) -> tuple[str, int]:
    """``--ray-address HOST:PORT`` split, the port a TCP port (1-65535); anything else is bad input."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadInput(f"--ray-address {address!r}: expected HOST:PORT with a port from 1 to 65535, as "
                       f"`ray start --head` prints it")
    return host, int(port)


def check_backend(args: argparse.Namespace) -> None:
    """--backend ray: local inference, and Ray installed (an optional extra). (A3G given --backend at all was refused
    by check_algo_flags.)"""
    if args.backend == "shm":
        if args.ray_address is not None:
            raise BadInput("--ray-address is for --backend ray")
        return
    if args.ray_address is not None:
        ray_host_port(args.ray_address)
    if args.inference == "server":
        raise BadInput("--inference server is for --backend shm: with --backend ray each actor acts with its own "
                         "copy of the weights (--inference local)")
    try:
        import ray  # noqa: F401  (only to learn whether it is there: main.py imports it when the run starts)
    except ImportError as exc:
        raise BadInput(f"--backend ray needs Ray, which is not installed here ({exc}): "
                         f"pip install -r requirements-ray.txt") from None


def environment_setup(args: argparse.Namespace, given: Collection[str] = ()) -> tuple[EnvSettings, dict, int | float]:
    """Resolve the environment: its settings, the network's metadata, frames per step (``given``: the flags typed
    now). Raises on bad input."""
    if "skip_rate" in given and (why := skip_rate_unread(args.env)) is not None:
        raise BadInput(why)
    crop = env_conf_for(args.env, load_env_config(args.env_config)) if is_atari(args.env) else None
    frame_size, frame_stack = FRAME_FORMAT.get(args.model, (80, 1))  # the network decides the frame format
    retro = retro_env.resolve(args.env, args.state, eval_states=args.eval_state) if is_retro(args.env) else None
    turns = len(retro_env.start_states(retro, train=False)) if retro is not None else 1
    if args.score_window % turns:  # the evaluator plays its states in turn: a window of whole rounds counts each alike
        fits = sorted({turns * max(1, args.score_window // turns), turns * -(-args.score_window // turns)})
        raise BadInput(f"--score-window {args.score_window} is not a multiple of the evaluator's {turns} start states, "
                       f"which it plays in turn: its mean would count some more often than others; give "
                       f"--score-window {' or '.join(map(str, fits))}")
    settings = EnvSettings(args.env, args.skip_rate, args.max_episode_length, crop, frame_size, frame_stack, retro,
                           args.frame_norm, tuple(args.gym_packages))
    # Retro games: this is the parent's one emulator, closed here, before any child starts (one per process).
    env = make_env(settings, train=False)
    if retro is not None:  # the evaluator's states were checked in make_env; training's, with the same emulator
        try:
            training = retro_env.start_states(retro, train=True)
            retro_env.check_states(env, {path: retro_env.read_state(path) for path in training}, args.env)
        except BadInput:
            env.close()
            raise
    obs_shape, (policy, num_actions) = env.observation_space.shape, policy_kind(env.action_space)
    uint8 = env.observation_space.dtype == np.uint8  # frames as bytes (--frame-norm scale)
    env.close()
    for flag in BOX_ONLY_FLAGS:  # what only a Box reads: refused where given (or saved) for nothing
        value = getattr(args, flag)
        if policy == "categorical" and (flag in given or value != BOX_ONLY_FLAGS[flag]):
            raise BadInput(f"{option(flag)} {value} is for Box action spaces; {args.env} has Discrete actions")
    if policy != "categorical":
        policy = BOX_ACTIONS[args.box_actions]
    if args.bound_coef and args.box_actions == "tanh":
        raise BadInput("--bound-coef is for --box-actions clip: tanh keeps every action inside the bounds")
    name = choose_model(args.model, obs_shape)
    if args.obs_norm and name not in VECTOR_MODELS:
        raise BadInput(f"--obs-norm is for the vector networks ({', '.join(VECTOR_MODELS)}), not --model {name}")
    if args.critic != "shared" and name != "mlp":
        raise BadInput(f"--critic {args.critic} is for --model mlp, not --model {name}")
    meta = model_meta(name, obs_shape, num_actions, args.hidden_size, policy, args.obs_norm, uint8, args.frame_norm,
                      args.log_std, args.critic)
    return settings, meta, frames_per_step(args.env, args.skip_rate)


def check_budget_left(resumed: dict, args: argparse.Namespace) -> None:
    """A resume that could train nothing (its checkpoint already at or past --max-frames, given now or saved) is
    refused: it would start every process only to stop them and rewrite the run's files."""
    done = resumed.get("frames", 0)
    if args.max_frames is not None and isinstance(done, (int, float)) and done >= args.max_frames:
        raise BadInput(f"{args.resume} is at {int(done):,} frames, already at --max-frames {args.max_frames:,}: give "
                       f"a larger --max-frames to train on")


def validate(argv: Sequence[str]) -> tuple[argparse.Namespace, EnvSettings, dict, dict | None, dict | None]:
    """Every check of what the user typed or points to, before anything starts. Returns
    (args, settings, meta, resumed checkpoint or None, --load model or None); raises one of BAD_INPUT_ERRORS (or
    SystemExit(2) from the parser for malformed flags)."""
    args, resumed, given = parse_args(argv)
    args.run_dir = choose_run_dir(args, resumed)  # a folder that would mix two runs is refused here
    import_packages(args.gym_packages)
    check_env_id(args.env)  # unknown ids and retro games without their ROM fail here, before anything is built
    on_gpu = args.gpu_ids != [-1]
    lr_decay_auto = args.lr_decay == AUTO  # auto's even where it settles on a constant rate (no budget to fall by)
    # auto's too where the objective left them off or unread (pg): a resume with --objective ppo picks them afresh
    objective_auto = [option(name) for name in OBJECTIVE_AUTO if getattr(args, name) == AUTO]
    check_counts(args)
    description, picked = resolve_defaults(args, family(args.env), on_gpu, cpu_has_native_bf16())
    picked_now = describe(description, picked) + worker_cap_note(picked)
    # a resumed run keeps the defaults its first start picked (its saved flags leave nothing auto to pick now)
    saved = (resumed.get("args") or {}) if resumed else {}
    args.defaults = picked_now or saved.get("defaults", "")
    # which values are auto's, not the user's: a later resume with a new budget picks auto's --lr-decay span again,
    # however many resumes ago auto picked it (a flag given since is the user's)
    earlier = [flag for flag in auto_picked(saved) if dest(flag) not in given  # None: the other algorithm's
               and (flag == "--lr-decay" or dest(flag) in OBJECTIVE_AUTO or getattr(args, dest(flag), None) is not None)]
    args.auto_flags = sorted({*earlier, *(flag for flag, _ in picked), *(["--lr-decay"] if lr_decay_auto else []),
                              *objective_auto})
    check_args(args)
    check_flags_read(args, given)
    check_impala_optimizer(args, given)
    if "log_std_init" in given and (resumed is not None or args.load):
        raise BadInput(f"--log-std-init starts a fresh run's policy; {'--resume' if resumed else '--load'} keeps "
                       "the saved one")
    settings, meta, args.frames_per_step = environment_setup(args, given)
    if resumed is not None:
        check_compatible(resumed, args.resume, args.env, meta)
    loaded = None
    if args.load:
        model_path = os.path.join(args.load_model_dir, f"{env_file_name(args.env)}.pt")
        loaded = load_checkpoint(model_path)
        check_compatible(loaded, model_path, args.env, meta)
    return args, settings, meta, resumed, loaded
