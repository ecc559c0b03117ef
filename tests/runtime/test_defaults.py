"""Defaults per environment family and machine: 'auto' flags resolved, explicit flags untouched, and the choice
shown at start-up."""

import argparse

import pytest
import torch

from conftest import out_dirs
from runtime.defaults import (
    AUTO,
    batch_capacity,
    describe,
    resolve_defaults,
    slots_per_actor,
    worker_cap_note,
)


def auto_args(**given):
    names = ["model", "envs_per_worker", "bf16", "lr", "hidden_size", "value_coef", "eps", "train_forward",
             "reward_clipping", "obs_norm", "max_grad_norm"]
    return argparse.Namespace(optimizer=given.pop("optimizer", "Adam"), algo=given.pop("algo", "a3g"),
                              workers=given.pop("workers", 2), num_buffers=given.pop("num_buffers", None),
                              backend=given.pop("backend", "shm"), max_frames=given.pop("max_frames", None),
                              clip_coef=given.pop("clip_coef", 0.1),
                              **{n: given.get(n, AUTO) for n in names + ["inference", "batch_size", "lr_decay",
                                                                         "objective", "normalize_advantages",
                                                                         "value_clip", "num_steps", "tau",
                                                                         "frame_norm"]})


@pytest.mark.parametrize("family,gpu,bf16,expected", [
    ("atari", False, True, {"model": "nature", "envs_per_worker": 8, "bf16": True, "lr": 3e-4, "value_coef": 0.5,
                            "train_forward": "batched", "reward_clipping": "abs_one", "max_grad_norm": 40.0}),
    ("atari", False, False, {"model": "nature", "envs_per_worker": 8, "bf16": False, "lr": 3e-4}),
    ("atari", True, True, {"model": "nature", "envs_per_worker": 8, "bf16": False, "lr": 3e-4,
                           "train_forward": "batched"}),
    ("classic", False, True, {"model": "mlp", "envs_per_worker": 4, "bf16": False, "lr": 2e-3,
                              "hidden_size": 64, "value_coef": 0.1, "reward_clipping": "none",
                              "train_forward": "batched"}),
    ("retro", False, True, {"model": "nature", "envs_per_worker": 1, "bf16": True, "lr": 3e-4, "value_coef": 0.5,
                            "reward_clipping": "abs_one", "max_grad_norm": 0.0}),
    ("retro", True, False, {"model": "nature", "envs_per_worker": 1, "bf16": False, "lr": 3e-4}),
    ("continuous", False, True, {"model": "mlp", "envs_per_worker": 4, "bf16": False, "lr": 2e-3, "obs_norm": True,
                                 "reward_clipping": "none", "max_grad_norm": 0.0}),
])
def test_family_and_machine_defaults(family, gpu, bf16, expected):
    """With --objective pg: the values every family gets, without PPO's recipe."""
    args = auto_args(objective="pg")
    description, picked = resolve_defaults(args, family, gpu, bf16)
    for key, value in expected.items():
        assert getattr(args, key) == value, key
    assert AUTO not in vars(args).values()
    assert args.eps == 1e-3
    names = {"atari": "Atari", "classic": "classic control", "retro": "retro games",
             "continuous": "continuous control"}
    assert len(picked) == 11 and names[family] in description
    assert (args.normalize_advantages, args.value_clip) == (False, None)  # not listed
    assert args.obs_norm is (family == "continuous")


@pytest.mark.parametrize("family, gpu, given, objective", [
    ("atari", False, {}, "ppo"),
    ("atari", False, {"model": "nature"}, "ppo"),
    ("atari", True, {}, "pg"),
    ("atari", False, {"algo": "impala"}, "pg"),
    ("atari", False, {"model": "a3clstm"}, "pg"),
    ("atari", False, {"model": "resnet"}, "pg"),
    ("retro", False, {}, "pg"),
    ("classic", False, {}, "pg"),
    ("continuous", False, {}, "pg"),
])
def test_auto_picks_ppo_where_it_was_measured_to_learn_faster_and_pg_elsewhere(family, gpu, given, objective):
    """PPO for A3G with the Nature network on Atari on a CPU; with it, its recipe and the per-minibatch
    normalisation; everything else as with pg."""
    args = auto_args(**given)
    _, picked = resolve_defaults(args, family, gpu, native_bf16=False)
    assert args.objective == objective and ("--objective", objective) in picked
    if objective == "ppo":
        assert (args.num_steps, args.tau, args.lr, args.eps, args.max_grad_norm, args.frame_norm) \
            == (128, 0.95, 5e-4, 1e-5, 0.5, "darkest")
        assert (args.normalize_advantages, args.value_clip) == (True, 0.1)
    else:
        assert (args.normalize_advantages, args.value_clip, args.num_steps) == (False, None, 20)


def test_ppo_normalises_advantages_per_minibatch_and_clips_values_by_the_clip_coefficient():
    args = auto_args(objective="ppo", clip_coef=0.2)
    _, picked = resolve_defaults(args, "atari", on_gpu=False, native_bf16=False)
    assert (args.normalize_advantages, args.value_clip) == (True, 0.2)
    assert {("--normalize-advantages", True), ("--value-clip", 0.2)} <= set(picked)
    assert "--objective" not in dict(picked)  # given, not picked
    args = auto_args(objective="ppo", normalize_advantages=False, value_clip=0.0)
    resolve_defaults(args, "atari", on_gpu=False, native_bf16=False)
    assert (args.normalize_advantages, args.value_clip) == (False, 0.0)


@pytest.mark.parametrize("algo, unchosen", [("a3g", ("inference", "batch_size")), ("impala", ("train_forward",))])
def test_the_other_algorithms_auto_flags_are_nobodys_choice(algo, unchosen):
    """None in args.json, not a placeholder that a run resumed with the other --algo would take for the user's."""
    args = auto_args(algo=algo)
    _, picked = resolve_defaults(args, family="classic", on_gpu=False, native_bf16=False)
    assert [getattr(args, name) for name in unchosen] == [None] * len(unchosen)
    assert not {"--" + name.replace("_", "-") for name in unchosen} & {flag for flag, _ in picked}


@pytest.mark.parametrize("family, num_buffers, expected", [("atari", None, 8), ("retro", None, 4), ("atari", 16, 8),
                                                       ("retro", 6, 6), ("retro", 40, 8)])
def test_impala_batch_size_fits_the_slots(family, num_buffers, expected):
    """auto: 8 unrolls, or two of each environment where there are fewer (retro games: one env per actor); with
    --num-buffers, no more than its slots can always fill (an actor claims one slot per env at once)."""
    args = auto_args(algo="impala", num_buffers=num_buffers)
    resolve_defaults(args, family=family, on_gpu=False, native_bf16=False)
    assert args.batch_size == expected
    assert batch_capacity(args) >= args.batch_size
    args = auto_args(algo="impala", batch_size=16)
    resolve_defaults(args, family="atari", on_gpu=False, native_bf16=False)
    assert args.batch_size == 16


@pytest.mark.parametrize("family, algo, cores, workers", [
    ("atari", "a3g", 16, 2), ("atari", "a3g", 2, 2), ("atari", "a3g", 1, 1), ("atari", "impala", 16, 16),
    ("retro", "a3g", 16, 16), ("classic", "a3g", 16, 16), ("continuous", "a3g", 4, 4)])
def test_workers_are_one_per_core_and_at_most_two_for_a3g_on_atari(monkeypatch, family, algo, cores, workers):
    """Hogwild workers beyond 2 kill Breakout's network (docs/log/atari.md, "How many workers"); IMPALA and the other families keep one
    process per core. Picked before IMPALA's batch size, which reads it; a --workers given is kept."""
    monkeypatch.setattr("runtime.defaults.usable_cores", lambda: cores)
    args = auto_args(algo=algo, workers=AUTO)
    _, picked = resolve_defaults(args, family, on_gpu=True, native_bf16=False)
    assert args.workers == workers and ("--workers", workers) in picked
    if algo == "impala":
        assert args.batch_size == 8 and batch_capacity(args) >= 8
    note = worker_cap_note(picked)
    assert ("Breakout" in note) is (workers < cores) and (not note or note.startswith(f"; 2 workers on {cores} cores"))
    args = auto_args(algo=algo, workers=16)
    _, picked = resolve_defaults(args, family, on_gpu=True, native_bf16=False)
    assert args.workers == 16 and "--workers" not in {flag for flag, _ in picked}
    assert worker_cap_note(picked) == ""


@pytest.mark.parametrize("backend, per_actor", [("shm", 11), ("ray", 8)])
def test_slots_grow_to_fit_a_batch_by_what_an_actor_claims_at_once(backend, per_actor):
    """2 actors x 4 envs, batches of 16: an shm actor claims 4 slots at once (16 / 2 + 3 per actor); Ray's queue
    has no claims (16 / 2, and at least 2 per env)."""
    args = argparse.Namespace(workers=2, envs_per_worker=4, batch_size=16, num_buffers=None, backend=backend)
    assert slots_per_actor(args) == per_actor and batch_capacity(args) == 16


@pytest.mark.parametrize("gpu, backend, expected", [(False, "shm", "local"), (True, "shm", "server"),
                                                     (True, "ray", "local")])
def test_impala_inference_default(gpu, backend, expected):
    args = auto_args(algo="impala", backend=backend)
    resolve_defaults(args, family="atari", on_gpu=gpu, native_bf16=False)
    assert args.inference == expected
    args = auto_args(algo="impala", inference="server")
    resolve_defaults(args, family="atari", on_gpu=False, native_bf16=False)
    assert args.inference == "server"


def test_explicit_flags_win_and_the_learning_rate_follows_the_network():
    args = auto_args(model="a3clstm", bf16=False, lr=5e-5)
    _, picked = resolve_defaults(args, family="atari", on_gpu=False, native_bf16=True)
    assert (args.model, args.bf16, args.lr, args.envs_per_worker) == ("a3clstm", False, 5e-5, 8)
    assert {flag for flag, _ in picked} == {"--envs-per-worker", "--hidden-size", "--value-coef", "--eps",
                                            "--train-forward", "--reward-clipping", "--obs-norm", "--max-grad-norm",
                                            "--objective"}
    args = auto_args(model="a3clstm")
    resolve_defaults(args, family="atari", on_gpu=False, native_bf16=False)
    assert args.lr == 1e-4  # rl_a3c_pytorch's rate for its network
    args = auto_args(optimizer="RMSprop")
    resolve_defaults(args, family="classic", on_gpu=False, native_bf16=False)
    assert args.eps == 0.1


@pytest.mark.parametrize("family, algo, max_frames, span", [
    ("atari", "a3g", 20_000_000, [10_000_000, 20_000_000]),  # from 10M frames: the last half
    ("atari", "a3g", 15_000_000, [10_000_000, 15_000_000]),
    ("atari", "a3g", 10_000_000, [9_000_000, 10_000_000]),  # at least the last tenth
    ("atari", "a3g", 40_000_000, [20_000_000, 40_000_000]),  # at most the last half
    ("atari", "a3g", 5, [4, 5]),
    ("atari", "a3g", None, None),  # no budget to fall by the end of: a constant rate
    ("atari", "impala", 20_000_000, None),
    ("classic", "a3g", 20_000_000, None),
    ("retro", "a3g", 20_000_000, None),
])
def test_the_learning_rate_falls_from_10m_frames_within_an_a3g_atari_budgets_last_tenth_to_half(family, algo,
                                                                                               max_frames, span):
    args = auto_args(algo=algo, max_frames=max_frames)
    description, picked = resolve_defaults(args, family, on_gpu=False, native_bf16=False)
    assert args.lr_decay == span
    assert (("--lr-decay", span) in picked) is (span is not None)
    if span:
        assert describe(description, picked).endswith(f"--lr-decay {span[0]} {span[1]}")
    given = auto_args(algo=algo, max_frames=max_frames, lr_decay=[0, 10])
    resolve_defaults(given, family, on_gpu=False, native_bf16=False)
    assert given.lr_decay == [0, 10]


def test_a_fall_of_the_rate_that_no_frame_limit_ends_is_noted():
    from runtime.config import rate_past_its_fall

    note = rate_past_its_fall(argparse.Namespace(lr_decay=[0, 5_000_000], max_frames=None))
    assert note.startswith("--lr-decay brings the learning rate to 0 at 5,000,000 frames")
    assert note.endswith("(give --max-frames 5000000)")
    assert rate_past_its_fall(argparse.Namespace(lr_decay=[0, 5_000_000], max_frames=5_000_000)) is None
    assert rate_past_its_fall(argparse.Namespace(lr_decay=None, max_frames=None)) is None


def test_describe_names_every_pick():
    line = describe("Atari on a CPU-only machine", [("--model", "nature"), ("--bf16", True), ("--lr", 3e-4),
                                                    ("--bf16", False)])
    assert line == "defaults for Atari on a CPU-only machine: --model nature --bf16 --lr 0.0003 --no-bf16"
    assert describe("x", []) == ""


def test_cartpole_with_no_flags_gets_its_family_defaults(tmp_path):
    """The checked flags main.py runs with and records in args.json, and the defaults line it prints at start-up
    (``args.defaults``; a run's start-up line: tests/runtime/test_cli.py)."""
    from runtime.config import validate

    args = validate(["--env", "CartPole-v1", "--max-frames", "2000", *map(str, out_dirs(tmp_path))])[0]
    assert "defaults for classic control" in args.defaults and "--lr 0.002" in args.defaults
    assert (args.lr, args.hidden_size, args.value_coef, args.envs_per_worker) == (2e-3, 64, 0.1, 4)
    assert args.eps == 1e-3 and args.model == "mlp"


def test_explicit_flag_is_kept_and_not_listed_as_a_default(tmp_path):
    from runtime.config import validate

    args = validate(["--env", "CartPole-v1", "--lr", "0.01", "--optimizer", "RMSprop", "--max-frames", "2000",
                     *map(str, out_dirs(tmp_path))])[0]
    assert "defaults for" in args.defaults and "--lr" not in args.defaults
    assert args.lr == 0.01 and args.eps == 0.1


@pytest.mark.parametrize("given_now, expected", [([], (True, 0.1)), (["--no-normalize-advantages"], (False, 0.1)),
                                                 (["--value-clip", "0"], (True, 0.0))])
def test_a_pg_run_resumed_with_ppo_gets_ppos_auto_values(tmp_path, given_now, expected):
    """A run started with --objective pg had advantage normalisation off and no value clip, auto's values for pg;
    resumed with --objective ppo, auto picks them afresh for ppo (a flag given now wins), and a second resume that
    changes nothing keeps them."""
    import multiprocessing as mp

    from model import build_model
    from runtime.checkpoints import checkpoint_payload
    from runtime.config import validate
    from runtime.run_state import RunState

    args, settings, meta, _, _ = validate(["--env", "CartPole-v1", *map(str, out_dirs(tmp_path))])
    assert (args.objective, args.normalize_advantages, args.value_clip) == ("pg", False, None)
    state = RunState(mp.get_context("spawn"), 1, frames=1000.0)
    (tmp_path / "run").mkdir(exist_ok=True)
    torch.save(checkpoint_payload(settings.as_dict(), meta, build_model(meta), None, state, 1.0, 0, args),
               tmp_path / "run" / "checkpoint.pt")
    resumed = validate(["--resume", str(tmp_path / "run"), "--objective", "ppo", *given_now])[0]
    assert (resumed.objective, resumed.normalize_advantages, resumed.value_clip) == ("ppo", *expected)
    torch.save(checkpoint_payload(settings.as_dict(), meta, build_model(meta), None, state, 1.0, 0, resumed),
               tmp_path / "run" / "checkpoint.pt")
    again = validate(["--resume", str(tmp_path / "run")])[0]
    assert (again.objective, again.normalize_advantages, again.value_clip) == ("ppo", *expected)


def test_an_atari_pg_run_resumed_with_ppo_gets_the_ppo_settings_but_keeps_its_frames(tmp_path):
    """Resumed with --objective ppo, a pg run's auto-picked rollout, GAE lambda, learning rate, eps and gradient clip
    are picked afresh for PPO; --frame-norm is the network's input and stays what the run was trained with."""
    import multiprocessing as mp

    from model import build_model
    from runtime.checkpoints import checkpoint_payload
    from runtime.config import validate
    from runtime.run_state import RunState

    args, settings, meta, _, _ = validate(["--env", "BreakoutNoFrameskip-v4", "--objective", "pg",
                                           *map(str, out_dirs(tmp_path))])
    assert (args.num_steps, args.tau, args.lr, args.frame_norm) == (20, 1.0, 3e-4, "frame")
    (tmp_path / "run").mkdir(exist_ok=True)
    torch.save(checkpoint_payload(settings.as_dict(), meta, build_model(meta), None,
                                  RunState(mp.get_context("spawn"), 1, frames=1000.0), 1.0, 0, args),
               tmp_path / "run" / "checkpoint.pt")
    resumed = validate(["--resume", str(tmp_path / "run"), "--objective", "ppo", "--num-steps", "64"])[0]
    assert (resumed.num_steps, resumed.tau, resumed.lr, resumed.eps, resumed.max_grad_norm, resumed.frame_norm) == \
        (64, 0.95, 5e-4, 1e-5, 0.5, "frame")
