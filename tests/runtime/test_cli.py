"""Bad input: exit 2 with one clear line on stderr, never a traceback, never code run from a checkpoint."""

import json
import os
import subprocess

import pytest
import torch

from conftest import ROOT, assert_bad_input, command, in_process, main_in_process, out_dirs, read_json, run_main
from core.errors import BadInput
from envs.environment import ATARI_CONFIG, EnvSettings


@pytest.mark.parametrize("flags,words", [
    (["--env", "NoSuchGame-v0"], ["NoSuchGame-v0"]),
    (["--workers", "0"], ["--workers"]),
    # counts that auto defaults are computed from: their own message, before any default divides by them
    (["--env", "CartPole-v1", "--algo", "impala", "--workers", "0", "--num-buffers", "8"], ["--workers", "positive"]),
    (["--max-frames", "-5"], ["--max-frames", "positive"]),
    (["--seed", "-1"], ["--seed", "2**31"]),
    (["--seed", str(2**31)], ["--seed", "2**31"]),
    (["--env", "CartPole-v1", "--hidden-size", str(10**12)], ["does not fit in memory", "--hidden-size"]),
    (["--gpu-ids", "7"], ["--gpu-ids"]),
    (["--gpu-ids", "-3"], ["--gpu-ids"]),
    (["--num-steps", "0"], ["--num-steps"]),
    (["--distributed-step-size", "16", "-4"], ["--distributed-step-size"]),
    (["--distributed-step-size", "16", "32", "--num-steps", "20"], ["--num-steps", "--distributed-step-size"]),
    (["--lr", "0"], ["--lr"]),
    (["--lr", "-0.001"], ["--lr"]),
    (["--lr", "nan"], ["--lr"]),
    (["--lr", "fast"], ["--lr"]),
    (["--gamma", "1.5"], ["--gamma"]),
    (["--optimizer", "SGD"], ["--optimizer"]),
    (["--optimizer", "RMSprop", "--alpha", "1.0"], ["--alpha"]),
    (["--optimizer", "RMSprop", "--momentum", "-0.1"], ["--momentum"]),
    (["--reward-clipping", "abs_two"], ["--reward-clipping"]),
    (["--entropy-decay", "5000", "5000"], ["--entropy-decay", "START < END"]),
    (["--entropy-decay", "-1", "5000"], ["--entropy-decay"]),
    (["--lr-decay", "5000", "100"], ["--lr-decay", "START < END"]),
    (["--lr-decay", "5000"], ["--lr-decay", "START END"]),
    (["--lr-decay", "1", "2", "3"], ["--lr-decay", "START END"]),
    (["--lr-decay", "soon", "later"], ["--lr-decay", "START END"]),
    (["--lr-decay", "0", "1000", "--max-frames", "5000"], ["--lr-decay", "--max-frames", "4,000 frames"]),
    (["--entropy-decay", "auto"], ["--entropy-decay", "START END"]),  # auto is --lr-decay's alone
    (["--train-forward", "fast"], ["--train-forward"]),
    (["--algo", "impala", "--inference", "server", "--inference-wait", "-1"], ["--inference-wait"]),
    (["--model", "a3clstm", "--env", "CartPole-v1"], ["a3clstm"]),
    (["--env-config", "/nonexistent/config.json"], ["--env-config"]),
    (["--resume", "/nonexistent/run"], ["not found"]),
    (["--evaluator-cpu", "0"], ["--evaluator-cpu"]),
    (["--evaluator-cpu", "1.5"], ["--evaluator-cpu"]),
    (["--evaluator-cpu", "half"], ["--evaluator-cpu"]),
    (["--objective", "trpo"], ["--objective"]),
    (["--objective", "ppo", "--ppo-epochs", "0"], ["--ppo-epochs", "positive"]),
    (["--objective", "ppo", "--minibatches", "-2"], ["--minibatches", "positive"]),
    (["--objective", "ppo", "--clip-coef", "1.5"], ["--clip-coef", "(0, 1)"]),
    (["--objective", "ppo", "--clip-coef", "nan"], ["--clip-coef", "(0, 1)"]),
    (["--objective", "ppo", "--value-clip", "-0.1"], ["--value-clip", ">= 0"]),
    (["--objective", "ppo", "--num-steps", "5", "--minibatches", "3"],
     ["5 steps x 8 envs", "--minibatches 3", "divides 40"]),
    (["--objective", "ppo", "--model", "a3clstm", "--minibatches", "3"],
     ["--minibatches 3 must divide --envs-per-worker 8", "recurrent"]),
    (["--objective", "ppo", "--algo", "impala", "--batch-size", "6"], ["--minibatches 4 must divide --batch-size 6"]),
    (["--objective", "ppo", "--algo", "impala", "--kl-mask"], ["--kl-mask is for --objective pg"]),
])
def test_bad_flags(flags, words, tmp_path):
    assert_bad_input(main_in_process(*flags, *out_dirs(tmp_path)), *words)


def test_output_folder_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    result = main_in_process("--env", "CartPole-v1", "--run-dir", blocker / "run", "--save-model-dir", tmp_path / "m",
                             "--log-dir", tmp_path / "l")
    assert_bad_input(result, "cannot prepare the output folders")
    # a log folder that cannot be made leaves no empty run folder behind
    result = main_in_process("--env", "CartPole-v1", "--run-dir", tmp_path / "run", "--log-dir", blocker / "logs")
    assert_bad_input(result, "cannot prepare the output folders")
    assert not (tmp_path / "run").exists()


def test_malformed_env_config(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"Default": {"crop1": 34,')
    assert_bad_input(main_in_process("--env-config", bad, *out_dirs(tmp_path)), "JSON")


def test_corrupt_and_truncated_checkpoints(cartpole_run, tmp_path):
    good = (cartpole_run / "run" / "checkpoint.pt").read_bytes()
    for name, data in [("random.pt", os.urandom(4096)), ("truncated.pt", good[: len(good) // 2]),
                       ("empty.pt", b"")]:
        path = tmp_path / name
        path.write_bytes(data)
        assert_bad_input(main_in_process("--resume", path, *out_dirs(tmp_path)), name)


@pytest.mark.parametrize("change,words", [
    ({"args": ["not", "a", "dict"]}, ["'args' entry"]),
    ({"frames": "many"}, ["'frames' entry", "not a number"]),
    ({"env": None}, ["which environment"]),
    ({"model_meta": {}}, ["'model_meta' entry"]),
])
def test_a_checkpoint_with_entries_of_the_wrong_kind_is_one_line(change, words, cartpole_run, tmp_path):
    """A file edited or made by hand: refused where it is loaded, for main.py, gym_eval.py and export_model alike."""
    from runtime.checkpoints import load_checkpoint

    data = torch.load(cartpole_run / "run" / "checkpoint.pt", weights_only=True)
    torch.save({**data, **change}, tmp_path / "edited.pt")
    with pytest.raises(BadInput) as refused:
        load_checkpoint(tmp_path / "edited.pt")
    assert all(word in str(refused.value) for word in words), refused.value


def test_resuming_a_hand_edited_checkpoint_is_one_line(cartpole_run, tmp_path):
    data = torch.load(cartpole_run / "run" / "checkpoint.pt", weights_only=True)
    torch.save({**data, "args": []}, tmp_path / "edited.pt")
    assert_bad_input(main_in_process("--resume", tmp_path / "edited.pt", *out_dirs(tmp_path)), "'args' entry")


class BoobyTrap:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_booby_trapped_checkpoint_runs_no_code(tmp_path):
    trap = BoobyTrap()
    trap.marker = tmp_path / "pwned"
    path = tmp_path / "checkpoint.pt"
    torch.save({"format_version": 1, "kind": "checkpoint", "payload": trap}, path, pickle_protocol=2)
    assert_bad_input(main_in_process("--resume", path, *out_dirs(tmp_path)))
    assert not trap.marker.exists()


def test_checkpoint_of_another_environment(cartpole_run, tmp_path):
    result = main_in_process("--resume", cartpole_run / "run", "--env", "Acrobot-v1", *out_dirs(tmp_path))
    assert_bad_input(result, "CartPole-v1", "Acrobot-v1")


def test_checkpoint_of_another_architecture(cartpole_run, tmp_path):
    result = main_in_process("--resume", cartpole_run / "run", "--hidden-size", "48", *out_dirs(tmp_path))
    assert_bad_input(result, "different network")


def test_a_resume_with_no_frames_left_to_train_is_refused(cartpole_run, tmp_path):
    """Its saved --max-frames reached, or a smaller one given: it would only start and stop every process."""
    frames = f"{int(saved_frames(cartpole_run)):,}"
    assert_bad_input(main_in_process("--resume", cartpole_run / "run", *out_dirs(tmp_path)),
                     f"at {frames} frames", "--max-frames 3,000", "larger --max-frames")
    assert_bad_input(main_in_process("--resume", cartpole_run / "run", "--max-frames", "1000", *out_dirs(tmp_path)),
                     "--max-frames 1,000")
    assert not (tmp_path / "run").exists()


def test_checkpoint_of_newer_format(cartpole_run, tmp_path):
    data = torch.load(cartpole_run / "run" / "checkpoint.pt", weights_only=True)
    data["format_version"] = 99
    torch.save(data, tmp_path / "future.pt")
    assert_bad_input(main_in_process("--resume", tmp_path / "future.pt", *out_dirs(tmp_path)), "newer")


def test_rl_a3c_pytorch_flags_keep_names_and_short_forms():
    from runtime.config import build_parser

    actions = [set(a.option_strings) for a in build_parser()._actions]

    class Options:  # a pair is there when one flag carries all of its names (aliases such as --unroll-length aside)
        def __contains__(self, names):
            return any(set(names) <= strings for strings in actions)

    options = Options()
    for pair in [("-l", "--lr"), ("-ec", "--entropy-coef"), ("-vc", "--value-coef"), ("-g", "--gamma"),
                 ("-t", "--tau"), ("-s", "--seed"), ("-w", "--workers"), ("-ns", "--num-steps"),
                 ("-mel", "--max-episode-length"), ("-ev", "--env"), ("-ld", "--load"), ("-o", "--optimizer"),
                 ("-lmd", "--load-model-dir"), ("-smd", "--save-model-dir"), ("-lg", "--log-dir"),
                 ("-gp", "--gpu-ids"), ("-hs", "--hidden-size"), ("-evc", "--env-config"),
                 ("-dss", "--distributed-step-size"), ("--skip-rate",), ("--max-frames",), ("--max-seconds",),
                 ("--stop-score",), ("--score-window",), ("--run-dir",), ("--resume",), ("--max-grad-norm",),
                 ("--model",)]:
        assert pair in options, pair
    # booleans are real booleans, with a --no- form
    for pair in [("-so", "--shared-optimizer", "--no-shared-optimizer"), ("-sm", "--save-max", "--no-save-max"),
                 ("-a", "--amsgrad", "--no-amsgrad"), ("-tl", "--tensorboard-logger", "--no-tensorboard-logger")]:
        assert pair in options, pair


def test_help_runs():
    result = run_main("--help", timeout=120)
    assert result.returncode == 0 and "--distributed-step-size" in result.stdout


@pytest.mark.parametrize("algo, flags, named", [
    ("a3g", ["--batch-size", "16"], "--batch-size is for --algo impala"),
    ("a3g", ["--inference", "local", "--num-buffers", "32"], "--num-buffers, --inference are for --algo impala"),
    ("a3g", ["--max-policy-lag", "2"], "--max-policy-lag"),
    ("a3g", ["--kl-threshold", "0.5"], "--kl-threshold"),
    ("a3g", ["--no-kl-mask"], "--kl-mask"),
    ("impala", ["--tau", "0.92"], "--tau is for --algo a3g"),
    ("impala", ["-dss", "16", "32"], "--distributed-step-size"),
    ("impala", ["--train-forward", "batched"], "--train-forward"),
])
def test_the_other_algorithms_flags_are_refused(algo, flags, named, tmp_path):
    """A flag only the other algorithm reads would be recorded in args.json and change nothing: refused, one line."""
    from runtime import config

    with pytest.raises(ValueError, match=named) as caught:
        config.validate(["--env", "CartPole-v1", "--algo", algo, *flags, "--run-dir", str(tmp_path / "r")])
    assert "\n" not in str(caught.value)


CARTPOLE = ["--env", "CartPole-v1", "--workers", "1", "--max-frames", "500", "--no-tensorboard-logger"]
IMPALA = [*CARTPOLE, "--algo", "impala"]
QUEUE = {"type": "queue", "capacity": 1, "sample_ratio": 0.5}


def replays(**custom):
    """A queue and one replay: standard, or custom with these keys (and ln_norm's distance unless given)."""
    replay = {"type": "custom", "capacity": 64, "sample_ratio": 0.5, "dist_function": "ln_norm", **custom} \
        if custom else {"type": "standard", "capacity": 64, "sample_ratio": 0.5}
    return json.dumps([QUEUE, replay])


@pytest.mark.parametrize("flags, words", [
    ([*IMPALA, "--kl-threshold", "0.5"], ["--kl-threshold needs --kl-mask"]),
    ([*IMPALA, "--kl-mask-mode", "kl_pi_mu"], ["--kl-mask-mode needs --kl-mask"]),
    ([*IMPALA, "--replay-parameters", replays(), "--policy-cloning-cost", "0.1"],
     ["--policy-cloning-cost needs --clone-losses"]),
    ([*IMPALA, "--replay-parameters", replays(), "--value-cloning-cost", "0.1"],
     ["--value-cloning-cost needs --clone-losses"]),
    ([*IMPALA, "--inference", "local", "--inference-batch", "4"],
     ["--inference-batch needs --inference server", "local"]),
    ([*IMPALA, "--inference-wait", "2"], ["--inference-wait needs --inference server"]),  # auto: local on a CPU
    ([*CARTPOLE, "--optimizer", "RMSprop", "--amsgrad"], ["--amsgrad needs --optimizer Adam", "RMSprop"]),
    ([*CARTPOLE, "--alpha", "0.9"], ["--alpha needs --optimizer RMSprop"]),
    ([*IMPALA, "--momentum", "0.9"], ["--momentum needs --optimizer RMSprop"]),
    ([*IMPALA, "--replay-parameters", replays(sample_strategy="elite_sampling", elite_batch_size=5)],
     ["entry 2", "'elite_batch_size'", "elite_insertion"]),
    ([*IMPALA, "--replay-parameters", replays(insert_strategy="elite_insertion", lambda_batch_multiplier=4)],
     ["entry 2", "'lambda_batch_multiplier'", "sample_strategy"]),
    ([*IMPALA, "--replay-parameters", replays(insert_strategy="elite_insertion", alfa_annealing_factor=2.0)],
     ["entry 2", "'alfa_annealing_factor'", "sample_strategy"]),
    ([*IMPALA, "--replay-parameters", replays(insert_strategy="elite_insertion", elite_sampling_strategy="strategy1")],
     ["entry 2", "'elite_sampling_strategy'", "sample_strategy"]),
    ([*IMPALA, "--replay-parameters", replays(sample_strategy="elite_sampling", dist_function="cos_dist", p=3)],
     ["entry 2", "'p'", "ln_norm"]),
    ([*IMPALA, "--replay-parameters", replays(dist_function="kl_div")],  # a custom replay that ranks nothing
     ["entry 2", "a custom replay needs", "sample_strategy", "insert_strategy"]),
    ([*CARTPOLE, "--skip-rate", "7"], ["--skip-rate is for Atari and retro games"]),
    ([*CARTPOLE, "--ppo-epochs", "8"], ["--ppo-epochs needs --objective ppo"]),
    ([*CARTPOLE, "--objective", "pg", "--clip-coef", "0.2"], ["--clip-coef needs --objective ppo", "pg"]),
    ([*CARTPOLE, "--minibatches", "8"], ["--minibatches needs --objective ppo"]),
    ([*CARTPOLE, "--clip-anneal"], ["--clip-anneal needs --objective ppo"]),
    ([*CARTPOLE, "--value-clip", "0.2"], ["--value-clip needs --objective ppo"]),
    (["--env", "Pong-v4", "--skip-rate", "2"], ["--skip-rate cannot change Pong-v4", "a random 2-4 frames"]),
])
def test_a_flag_nothing_reads_is_refused(flags, words, tmp_path):
    """A flag (or a --replay-parameters key) read only with another setting, given without it, would be recorded
    in args.json and change nothing: refused, one line."""
    assert_bad_input(main_in_process(*flags, *out_dirs(tmp_path)), *words)


def test_load_with_resume_is_refused(cartpole_run, tmp_path):
    """--resume starts from its checkpoint's weights: the --load model would never be read."""
    result = main_in_process("--resume", cartpole_run / "run", "--load", "--load-model-dir",
                             cartpole_run / "trained_models", *out_dirs(tmp_path))
    assert_bad_input(result, "--load needs a run without --resume")


def test_a_resumed_runs_flags_are_not_judged_as_given(cartpole_run, tmp_path):
    """Saved values of flags that nothing reads (the defaults of --kl-threshold, --alpha, ...) are not the user's:
    a resumed run still resumes, and flags given now are judged against the resumed run's settings."""
    from runtime import config

    args = config.validate(["--resume", str(cartpole_run / "run"), "--algo", "impala", "--run-dir",
                            str(tmp_path / "r")])[0]
    assert args.kl_threshold == 0.3 and args.kl_mask is False and args.alpha == 0.99
    data = torch.load(cartpole_run / "run" / "checkpoint.pt", weights_only=True)
    data["args"].update(optimizer="RMSprop", eps=0.1)
    torch.save(data, tmp_path / "rmsprop.pt")
    args = config.validate(["--resume", str(tmp_path / "rmsprop.pt"), "--alpha", "0.9", "--run-dir",
                            str(tmp_path / "r")])[0]
    assert (args.optimizer, args.alpha) == ("RMSprop", 0.9)


def test_a_resumed_runs_lr_decay_is_judged_against_the_budget_given_now(cartpole_run, tmp_path):
    """A run whose learning rate fell to 0 at its budget, resumed with a larger --max-frames, is refused (the frames
    after the fall would train nothing) unless given a new span or --lr-decay none; --entropy-decay none drops a
    saved span too (the bonus then constant)."""
    from runtime import config

    data = torch.load(cartpole_run / "run" / "checkpoint.pt", weights_only=True)
    data["args"].update(lr_decay=[2000, 3000], entropy_decay=[0, 3000], max_frames=3000,
                        auto_flags=[flag for flag in data["args"]["auto_flags"] if flag != "--lr-decay"])  # the user's
    torch.save(data, tmp_path / "decayed.pt")
    resume = ["--resume", str(tmp_path / "decayed.pt"), "--run-dir", str(tmp_path / "r")]
    assert config.validate(resume)[0].lr_decay == [2000, 3000]
    with pytest.raises(BadInput, match="--lr-decay ends at 3,000 frames, before --max-frames 9,000"):
        config.validate([*resume, "--max-frames", "9000"])
    args = config.validate([*resume, "--max-frames", "9000", "--lr-decay", "none", "--entropy-decay", "none"])[0]
    assert args.lr_decay is None and args.entropy_decay is None and args.max_frames == 9000
    args = config.validate([*resume, "--max-frames", "9000", "--lr-decay", "6000", "9000"])[0]
    assert args.lr_decay == [6000, 9000] and args.entropy_decay == [0, 3000]


def test_a_resumed_runs_default_span_follows_a_new_budget(cartpole_run, tmp_path):
    """On the command line --lr-decay is auto: for A3G on Atari a span ending at --max-frames (its last tenth for a
    budget of 5M frames), shown at start-up.
    A run whose span auto picked, resumed with another --max-frames, has auto pick one for the new budget; resumed
    without one it keeps its span, a span given now wins, and a span the user gave is kept (and judged against the
    budget: the test above)."""
    from runtime import config

    atari = ["--env", "PongNoFrameskip-v4", "--run-dir", str(tmp_path / "p"), "--max-frames", "5000000"]
    args = config.validate(atari)[0]
    assert args.lr_decay == [4_500_000, 5_000_000] and args.defaults.endswith("--lr-decay 4500000 5000000")
    assert config.validate([*atari, "--lr-decay", "auto"])[0].lr_decay == [4_500_000, 5_000_000]
    assert config.validate([*atari, "--lr-decay", "none"])[0].lr_decay is None
    assert config.validate([*atari, "--algo", "impala"])[0].lr_decay is None
    assert config.validate(atari[:-2])[0].lr_decay is None  # no budget: a constant rate

    others = args.defaults.removesuffix(" --lr-decay 4500000 5000000")
    data = torch.load(cartpole_run / "run" / "checkpoint.pt", weights_only=True)
    data["args"].update(lr_decay=[2700, 3000], max_frames=3000, defaults=f"{others} --lr-decay 2700 3000")
    # first saved as before auto_flags: the description tells (CartPole's constant rate was auto's too: not here)
    auto_flags = [flag for flag in data["args"].pop("auto_flags") if flag != "--lr-decay"]
    for flags, described in ((None, data["args"]["defaults"]), ([*auto_flags, "--lr-decay"], others)):
        data["args"]["defaults"] = described
        if flags is not None:
            data["args"]["auto_flags"] = flags
        torch.save(data, tmp_path / "auto.pt")
        resume = ["--resume", str(tmp_path / "auto.pt")]
        assert config.parse_args(resume)[0].lr_decay == [2700, 3000]
        assert config.parse_args([*resume, "--max-frames", "9000"])[0].lr_decay == "auto"
        assert config.parse_args([*resume, "--max-frames", "9000", "--lr-decay", "6000", "9000"])[0].lr_decay == [
            6000, 9000]
    data["args"].update(auto_flags=auto_flags, defaults=f"{others} --lr-decay 2700 3000")  # the user's span
    torch.save(data, tmp_path / "given.pt")
    assert config.parse_args(["--resume", str(tmp_path / "given.pt"), "--max-frames", "9000"])[0].lr_decay == [2700,
                                                                                                                3000]
    del data["args"]["auto_flags"]
    data["args"]["defaults"] = others
    torch.save(data, tmp_path / "given.pt")
    assert config.parse_args(["--resume", str(tmp_path / "given.pt"), "--max-frames", "9000"])[0].lr_decay == [2700,
                                                                                                                3000]


def test_a_constant_rate_that_auto_settled_on_falls_once_a_resume_gives_a_budget(cartpole_run, tmp_path):
    """An A3G Atari run started without --max-frames keeps a constant rate, auto's pick: a resume given a budget has
    auto pick the span a fresh run of that budget would have, and one given none (or given the rate) keeps it."""
    from runtime import config
    from runtime.defaults import resolve_defaults

    args = config.validate(["--env", "PongNoFrameskip-v4", "--run-dir", str(tmp_path / "p")])[0]
    assert args.lr_decay is None and "--lr-decay" in args.auto_flags
    assert "--lr-decay" not in config.validate(["--env", "PongNoFrameskip-v4", "--run-dir", str(tmp_path / "q"),
                                                "--lr-decay", "none"])[0].auto_flags
    data = torch.load(cartpole_run / "run" / "checkpoint.pt", weights_only=True)
    data["args"].update(env="PongNoFrameskip-v4", lr_decay=None, max_frames=None, auto_flags=args.auto_flags)
    torch.save(data, tmp_path / "constant.pt")
    resume = ["--resume", str(tmp_path / "constant.pt")]
    assert config.parse_args(resume)[0].lr_decay is None
    args = config.parse_args([*resume, "--max-frames", "20000000"])[0]
    assert args.lr_decay == "auto"
    resolve_defaults(args, "atari", on_gpu=False, native_bf16=False)
    assert args.lr_decay == [10_000_000, 20_000_000]
    assert config.parse_args([*resume, "--max-frames", "20000000", "--lr-decay", "none"])[0].lr_decay is None
    # a resume that picks nothing keeps the record (the saved constant rate is not auto now, but was auto's)
    resumed = config.validate(["--resume", str(cartpole_run / "run"), "--run-dir", str(tmp_path / "r")])[0]
    assert resumed.lr_decay is None and "--lr-decay" in resumed.auto_flags
    data["args"]["auto_flags"] = [flag for flag in data["args"]["auto_flags"] if flag != "--lr-decay"]  # the user's
    torch.save(data, tmp_path / "given.pt")
    assert config.parse_args(["--resume", str(tmp_path / "given.pt"), "--max-frames", "20000000"])[0].lr_decay is None


def test_auto_picks_are_remembered_across_resumes(cartpole_run, tmp_path):
    """args.json's auto_flags lists the flags auto picked over a run's first start and every resume since: a resume
    that picks one again (another --optimizer: --eps) keeps the others, so a later resume with a new budget still has
    auto pick the --lr-decay span afresh; a span the user gives at a resume is theirs from then on."""
    from runtime import config

    data = torch.load(cartpole_run / "run" / "checkpoint.pt", weights_only=True)
    first = list(data["args"]["auto_flags"])
    assert "--eps" in first and "--model" in first and "--hidden-size" not in first  # given
    data["args"].update(lr_decay=[2700, 3000], max_frames=3000, auto_flags=sorted({*first, "--lr-decay"}))
    torch.save(data, tmp_path / "auto.pt")
    other = "RMSprop" if data["args"]["optimizer"] == "Adam" else "Adam"
    args = config.validate(["--resume", str(tmp_path / "auto.pt"), "--optimizer", other, "--run-dir",
                            str(tmp_path / "r1")])[0]
    assert args.defaults.endswith(f"--eps {args.eps:g}") and "--lr-decay" not in args.defaults  # picked now
    assert "--eps" in args.auto_flags and "--lr-decay" in args.auto_flags
    data["args"].update(optimizer=other, eps=args.eps, defaults=args.defaults, auto_flags=args.auto_flags)
    torch.save(data, tmp_path / "again.pt")
    assert config.parse_args(["--resume", str(tmp_path / "again.pt"), "--max-frames", "9000"])[0].lr_decay == "auto"

    args = config.validate(["--resume", str(tmp_path / "auto.pt"), "--lr-decay", "2800", "3000", "--run-dir",
                            str(tmp_path / "r2")])[0]
    assert "--lr-decay" not in args.auto_flags and "--eps" in args.auto_flags
    data["args"].update(lr_decay=[2800, 3000], auto_flags=args.auto_flags)
    torch.save(data, tmp_path / "given.pt")
    assert config.parse_args(["--resume", str(tmp_path / "given.pt"), "--max-frames", "9000"])[0].lr_decay == [2800,
                                                                                                                3000]


def test_a_resume_with_another_algo_picks_the_auto_flags_afresh(cartpole_run, tmp_path):
    """What auto picked for an A3G run (its worker count, its --lr-decay span) was A3G's: resumed with --algo impala
    auto picks them again for IMPALA, and a flag given now, or one the user gave at the first start, stays."""
    from runtime import config

    data = torch.load(cartpole_run / "run" / "checkpoint.pt", weights_only=True)
    data["args"].update(lr_decay=[2700, 3000], max_frames=3000,
                        auto_flags=sorted({*data["args"]["auto_flags"], "--lr-decay", "--workers"}))
    torch.save(data, tmp_path / "a3g.pt")
    resume = ["--resume", str(tmp_path / "a3g.pt")]
    args = config.parse_args([*resume, "--algo", "impala"])[0]
    assert (args.workers, args.lr_decay, args.hidden_size) == ("auto", "auto", 32)
    args = config.parse_args([*resume, "--algo", "impala", "--workers", "3"])[0]
    assert (args.workers, args.lr_decay) == (3, "auto")
    args = config.parse_args(resume)[0]  # the same algorithm: its values
    assert (args.workers, args.lr_decay) == (1, [2700, 3000])
    args = config.validate([*resume, "--algo", "impala", "--run-dir", str(tmp_path / "r")])[0]
    assert args.lr_decay is None and "--train-forward" not in args.auto_flags
    assert "--lr-decay" in args.auto_flags  # IMPALA's constant rate is auto's pick too


def test_a_run_saved_before_the_crops_moved_resumes_with_them(cartpole_run, tmp_path):
    """Runs saved when the crops were the repository's config.json name a file that is gone: they get
    envs/atari.json (the same crops); another file the user named is theirs, and stays."""
    from runtime import config

    data = torch.load(cartpole_run / "run" / "checkpoint.pt", weights_only=True)
    data["args"]["env_config"] = os.path.join(ROOT, "config.json")
    torch.save(data, tmp_path / "older.pt")
    args = config.validate(["--resume", str(tmp_path / "older.pt"), "--run-dir", str(tmp_path / "r")])[0]
    assert args.env_config == ATARI_CONFIG
    own = tmp_path / "crops.json"
    own.write_text(open(ATARI_CONFIG).read())
    data["args"]["env_config"] = str(own)
    torch.save(data, tmp_path / "own.pt")
    args = config.validate(["--resume", str(tmp_path / "own.pt"), "--run-dir", str(tmp_path / "r2")])[0]
    assert args.env_config == str(own)


def test_a_resumed_run_keeps_the_defaults_its_first_start_picked(cartpole_run, tmp_path):
    """args.json's "defaults" names what the run's first start picked; a resume has nothing left to pick (its
    saved flags are values), and keeps that description rather than an empty one."""
    from runtime import config

    saved = torch.load(cartpole_run / "run" / "checkpoint.pt", weights_only=True)["args"]["defaults"]
    assert saved.startswith("defaults for classic control")
    args = config.validate(["--resume", str(cartpole_run / "run"), "--run-dir", str(tmp_path / "r")])[0]
    assert args.defaults == saved


def test_a_run_saved_by_a_checkout_since_removed_resumes_with_this_ones_crops(cartpole_run, tmp_path):
    """A run trained from another clone or worktree names that checkout's envs/atari.json; once it is gone, the
    run resumes with this checkout's (the same defaults). A missing crop file of the user's own stays theirs (an Atari
    run refuses it in one line)."""
    from runtime import config

    data = torch.load(cartpole_run / "run" / "checkpoint.pt", weights_only=True)
    data["args"]["env_config"] = str(tmp_path / "removed-worktree" / "envs" / "atari.json")
    torch.save(data, tmp_path / "moved.pt")
    args = config.validate(["--resume", str(tmp_path / "moved.pt"), "--run-dir", str(tmp_path / "r")])[0]
    assert args.env_config == ATARI_CONFIG
    own = str(tmp_path / "gone" / "crops.json")
    data["args"]["env_config"] = own
    torch.save(data, tmp_path / "own.pt")
    args = config.validate(["--resume", str(tmp_path / "own.pt"), "--run-dir", str(tmp_path / "r2")])[0]
    assert args.env_config == own


def test_a_pong_run_saved_before_frames_stayed_bytes_resumes_and_loads_the_running_way(cartpole_run, tmp_path):
    """A checkpoint from before --frame-norm (no entry in its args, env or network) trained on frames normalised
    the running way: resumed, it keeps that; loaded into a fresh run of today's default (darkest, PPO's on Atari), it
    is refused in one line that names the flag, and taken with --frame-norm running."""
    from runtime import config
    from runtime.checkpoints import check_compatible

    data = torch.load(cartpole_run / "run" / "checkpoint.pt", weights_only=True)
    del data["args"]["frame_norm"]
    data["args"].update(env="PongNoFrameskip-v4", model="nature")
    data["model_meta"] = {"model": "nature", "obs_shape": [4, 84, 84], "num_actions": 6, "hidden_size": 0}
    data["env"] = {key: value for key, value in EnvSettings("PongNoFrameskip-v4", frame_size=84, frame_stack=4)
                   .as_dict().items() if key != "frame_norm"}
    (tmp_path / "models").mkdir()
    torch.save(data, tmp_path / "models" / "PongNoFrameskip-v4.pt")
    args, settings, meta = config.validate(["--resume", str(tmp_path / "models" / "PongNoFrameskip-v4.pt"),
                                            "--run-dir", str(tmp_path / "r")])[:3]
    assert args.frame_norm == settings.frame_norm == "running" and "obs_dtype" not in meta
    fresh = ["--env", "PongNoFrameskip-v4", "--load", "--load-model-dir", str(tmp_path / "models")]
    with pytest.raises(BadInput, match="normalised the 'running' way: give --frame-norm running"):
        config.validate([*fresh, "--run-dir", str(tmp_path / "r2")])
    args, settings, meta = config.validate([*fresh, "--frame-norm", "running", "--run-dir", str(tmp_path / "r3")])[:3]
    assert settings.frame_norm == "running" and "obs_dtype" not in meta
    today = config.validate(["--env", "PongNoFrameskip-v4", "--run-dir", str(tmp_path / "r4")])
    assert today[1].frame_norm == today[2]["frame_norm"] == "darkest" and today[2]["obs_dtype"] == "uint8"
    with pytest.raises(BadInput, match="give --frame-norm darkest"):  # and the other way round
        check_compatible({"env": today[1].as_dict(), "model_meta": today[2]}, "new.pt", "PongNoFrameskip-v4", meta)


@pytest.mark.parametrize("tool, flags, prefix", [
    ("main.py", ["--env", "CartPole-v1", "--max-frame", "1000"], "--max-frame"),
    ("gym_eval.py", ["--env", "CartPole-v1", "--model-path", "/nonexistent.pt", "--num-episode", "1"],
     "--num-episode"),
    ("plot.py", ["/nonexistent/run", "--outp", "x.png"], "--outp"),
    ("sweep.py", ["--report", "/nonexistent/sweep", "--run", "2"], "--run"),
    ("export_model.py", ["/nonexistent/run", "x.pt", "--he"], "--he"),
])
def test_a_prefix_of_a_flag_is_refused(tool, flags, prefix, tmp_path):
    """A prefix that works today would silently change meaning the day a flag that shares it is added."""
    result = subprocess.run([*command(tool), *map(str, flags)], capture_output=True,
                            text=True, timeout=120, cwd=tmp_path)
    assert_bad_input(result, f"unrecognized arguments: {prefix}")


def test_impala_refuses_a_private_optimizer(tmp_path):
    """IMPALA's learner is the only one stepping: a private optimizer's statistics would be in no checkpoint."""
    assert_bad_input(main_in_process(*IMPALA, "--no-shared-optimizer", *out_dirs(tmp_path)),
                     "--no-shared-optimizer is for --algo a3g")


def test_impala_refuses_a_resumed_runs_private_optimizer(cartpole_run, tmp_path):
    """An A3G run with one optimizer per worker, resumed as IMPALA: refused unless --shared-optimizer is given."""
    from runtime import config

    data = torch.load(cartpole_run / "run" / "checkpoint.pt", weights_only=True)
    data["args"]["shared_optimizer"] = False
    torch.save(data, tmp_path / "private.pt")
    result = main_in_process("--resume", tmp_path / "private.pt", "--algo", "impala", "--max-frames", "3000",
                             *out_dirs(tmp_path))
    assert_bad_input(result, "--no-shared-optimizer (the resumed run's) is for --algo a3g", "--shared-optimizer")
    args = config.validate(["--resume", str(tmp_path / "private.pt"), "--algo", "impala", "--shared-optimizer",
                            "--run-dir", str(tmp_path / "r")])[0]
    assert args.shared_optimizer is True


def test_impala_resumed_from_a3g_picks_its_own_defaults(cartpole_run, tmp_path):
    """An A3G run records no IMPALA batch size or inference (nobody chose them); resumed as IMPALA with one actor
    and one env, the batch is what a fresh run picks (2), not a placeholder."""
    saved = read_json(cartpole_run / "run" / "args.json")
    assert saved["batch_size"] is None and saved["inference"] is None
    result = run_main("--resume", cartpole_run / "run", "--algo", "impala", "--envs-per-worker", "1",
                      "--max-frames", str(int(saved_frames(cartpole_run)) + 400), *out_dirs(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    args = read_json(tmp_path / "run" / "args.json")
    assert (args["batch_size"], args["inference"], args["train_forward"]) == (2, "local", None)
    assert "--batch-size 2" in result.stdout and "--inference local" in result.stdout


def test_a_run_that_saved_placeholders_resumes_as_impala_with_its_own_defaults(cartpole_run, tmp_path):
    """Runs that saved A3G's placeholders (batch size 8, local inference) for IMPALA's flags: not carried over."""
    from runtime import config

    data = torch.load(cartpole_run / "run" / "checkpoint.pt", weights_only=True)
    data["args"].update(batch_size=8, inference="local", train_forward="stepped")
    torch.save(data, tmp_path / "older.pt")
    args = config.validate(["--resume", str(tmp_path / "older.pt"), "--algo", "impala", "--envs-per-worker", "1",
                            "--run-dir", str(tmp_path / "r")])[0]
    assert (args.batch_size, args.inference, args.train_forward) == (2, "local", None)
    assert "--batch-size 2" in args.defaults


def saved_frames(run):
    return torch.load(run / "run" / "checkpoint.pt", weights_only=True)["frames"]


@pytest.mark.parametrize("flags, words", [(["--seconds", "-5"], ["--seconds", "above 0"]),
                                          (["--interval", "0"], ["--interval"]), (["--workers", "0"], ["--workers"]),
                                          (["--seconds", "4", "--interval", "30"], ["--interval 30", "too few samples"]),
                                          (["--json", "/proc/a3g-soak.json"], ["--json", "cannot be written"]),
                                          (["--json", "."], ["--json", "is a folder"]),
                                          (["--json", "README.md"], ["--json", "holds no tools.soak results"])])
def test_soak_refuses_a_bad_budget_before_it_starts_a_run(flags, words, tmp_path, monkeypatch):
    import tempfile

    from tools import soak

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the soak's run folder would go
    assert_bad_input(in_process(soak.main, "--env", "CartPole-v1", *flags), *words)
    assert not list(tmp_path.glob("a3g-soak-*"))  # no run folder was made


def test_soak_relays_a_flag_main_py_refuses_as_bad_input(tmp_path):
    """A bad main.py flag after -- is the soak's own bad input: main.py's one line, exit 2, no run folder left (it
    was "FAILED", exit 1, with the run folder kept)."""
    result = subprocess.run([*command("soak"), "--seconds", "8", "--interval", "1", "--env", "CartPole-v1",
                             "--workers", "1", "--", "--bogus-flag"], capture_output=True, text=True, timeout=120,
                            cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "main.py: error: unrecognized arguments: --bogus-flag (see --help)"], result.stderr
    assert not list(tmp_path.glob("a3g-soak-*"))


def test_soak_reads_no_frames_from_a_run_that_wrote_none(tmp_path):
    from tools.soak import progress_fps

    assert progress_fps(str(tmp_path / "run" / "progress.csv"), 0, 10) is None


@pytest.mark.parametrize("flag", ["--resume", "--run-dir", "--log-dir", "--save-model-dir", "--env-config"])
def test_an_empty_path_is_refused(flag):
    """``--resume "$RUN"`` with RUN unset trained a fresh run from scratch; the others wrote to the current folder."""
    from runtime import config

    with pytest.raises(BadInput, match=f"^{flag} needs a path, got an empty one$"):
        config.validate(["--env", "CartPole-v1", flag, ""])
