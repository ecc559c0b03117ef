"""bench.py end to end in its short mode: every phase runs and the JSON holds the figures."""

import json
import os
import subprocess

import pytest

from conftest import ROOT, command


def test_bench_quick_runs_end_to_end(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run([*command("bench"), "--quick", "--json", str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["env"] == "PongNoFrameskip-v4" and report["frames_per_step"] == 4
    (row,) = report["results"]
    assert row["fps"] > 0 and row["train_ms_per_step"] > 0 and row["inference_ms_per_step"] > 0
    assert row["emulator_ceiling_fps"] > row["fps"] and row["combined_ceiling_fps"] > 0
    assert "frames/s" in result.stdout and "a3clstm:2" in result.stdout


def test_bench_measures_a_continuous_task_with_both_algorithms_in_one_table(tmp_path):
    """Box actions: the emulator ceiling steps random actions in [-1, 1], the runs train a Gaussian policy, with A3G
    and with IMPALA, each a row of the same table."""
    out = tmp_path / "bench.json"
    result = subprocess.run([*command("bench"), "--quick", "--env", "Pendulum-v1", "--configs", "mlp:4",
                             "mlp:4:impala", "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads(out.read_text())["results"]
    assert [row["name"] for row in rows] == ["mlp:4", "mlp:4:impala"]
    assert [row["algo"] for row in rows] == ["a3g", "impala"]
    assert all(row["fps"] > 0 and row["emulator_ceiling_fps"] > row["fps"] for row in rows)


def test_configuration_names():
    from tools.bench import parse_config

    config = parse_config("nature:8:bf16:batched")
    assert (config["model"], config["envs"], config["bf16"], config["train_forward"], config["algo"]) == (
        "nature", 8, True, "batched", "a3g")
    config = parse_config("a3clstm:1:nocl:impala:server")
    assert not config["channels_last"] and config["train_forward"] == "stepped" and config["algo"] == "impala"
    assert config["inference"] == "server" and parse_config("nature:8:impala")["inference"] == "local"
    assert parse_config("nature:8")["frame_norm"] is None  # auto's
    assert parse_config("nature:8:bf16:running")["frame_norm"] == "running"
    assert parse_config("nature:8:impala:scale")["frame_norm"] == "scale"
    assert parse_config("nature:8:bf16:batched:ppo:darkest")["frame_norm"] == "darkest"
    assert parse_config("nature:8:impala")["replay"] is None
    assert parse_config("nature:8:impala:elite3")["score_steps"] == 3


def test_the_table_keeps_its_columns_under_a_long_configuration_name():
    """A name longer than the first column (``nature:8:bf16:batched:ppo:darkest``) widens it; every row's figures
    end where the header's do."""
    from tools.bench import table

    with open(os.path.join(ROOT, "docs/ppo_runs/bench/pong_pg_ppo_darkest.json")) as f:
        header, rule, *rows = table(json.load(f)["results"]).splitlines()
    assert len(rows) == 2 and rows[1].startswith("nature:8:bf16:batched:ppo:darkest ")
    assert len(rule) == len(header) and all(len(row) == len(header) for row in rows)
    assert header.index("frames/s") + len("frames/s") == rows[1].index("2,317") + len("2,317")
    assert rows[1].split()[2] == "0.45"  # x base: the first row's frames/s is the base


def test_a_ppo_configuration_runs_main_py_with_the_atari_ppo_settings(tmp_path):
    """``:ppo``: --objective ppo with the settings auto picks for it, checked by main.py's own validation; A3G's
    rollout of 128 steps, GAE 0.95 and frames divided by 255 less their darkest value, IMPALA's unrolls and frames
    as they are (it reads no --tau)."""
    from runtime.config import validate
    from tools.bench import parse_config, training_argv

    assert parse_config("nature:8")["objective"] == "pg" and parse_config("nature:8:ppo")["objective"] == "ppo"
    for entry, steps, tau, lr, norm in (("nature:8:bf16:batched:ppo", 128, 0.95, 5e-4, "darkest"),
                                         ("nature:8:impala:ppo", 20, None, 2.5e-4, "frame")):
        args = validate(training_argv("BreakoutNoFrameskip-v4", parse_config(entry), 2, str(tmp_path / entry)))[0]
        assert (args.objective, args.num_steps, args.tau, args.lr, args.eps, args.max_grad_norm, args.frame_norm) \
            == ("ppo", steps, tau, lr, 1e-5, 0.5, norm)


@pytest.mark.parametrize("entry, says", [("bogus:8", "the model 'bogus'"), ("nature:x", "environments per worker 'x'"),
                                         ("nature:0", "environments per worker '0'"), ("nature:8:bf17", "'bf17'"),
                                         # measured as A3G, named as IMPALA: refused
                                         ("nature:8:replay", "IMPALA's: add :impala"),
                                         ("a3clstm:8:server", "IMPALA's: add :impala"),
                                         ("nature:8:elite20", "IMPALA's: add :impala"),
                                         ("nature:8:impala:batched", "'batched' is A3G's"),
                                         # two values of one setting: the second was dropped, the name kept both
                                         ("nature:8:impala:replay:elite", "'replay' and 'elite' are two of one"),
                                         ("nature:8:impala:elite5:elite20", "'elite5' and 'elite20' are two of one"),
                                         ("nature:8:impala:replay:elite5", "'replay' and 'elite5' are two of one"),
                                         ("a3clstm:1:running:scale", "'running' and 'scale' are two of one"),
                                         ("nature:8:scale:darkest", "'scale' and 'darkest' are two of one")])
def test_a_configuration_entry_that_is_none_says_what(entry, says):
    from tools.bench import parse_config

    with pytest.raises(ValueError, match=says):
        parse_config(entry)


def test_a_configuration_the_run_cannot_take_is_refused_before_any_measurement(tmp_path):
    """An LSTM network on 80x80 frames for CartPole: one line naming the entry, before the emulator's ceiling and
    the configurations before it are measured (their minutes were lost with a traceback)."""
    result = subprocess.run([*command("bench"), "--env", "CartPole-v1", "--configs", "mlp:2", "a3clstm:1", "--quick",
                             "--json", str(tmp_path / "bench.json")], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "--configs a3clstm:1" in result.stderr and "a3clstm" in result.stderr.split("--configs a3clstm:1")[1]
    assert "ceiling" not in result.stdout and not (tmp_path / "bench.json").exists()


def test_bench_refuses_a_bad_configuration_in_one_line(tmp_path):
    result = subprocess.run([*command("bench"), "--configs", "nature:8:bf17", "--quick", "--json",
                             str(tmp_path / "bench.json")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "'bf17' is none of" in result.stderr and not (tmp_path / "bench.json").exists()
    # and a --json it could not write is found before the minutes of measuring
    result = subprocess.run([*command("bench"), "--quick", "--json", "/proc/a3g-bench.json"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--json /proc/a3g-bench.json cannot be written" in result.stderr, result.stderr
    # a file of something else at --json is the user's: kept
    (tmp_path / "notes.json").write_text('{"kept by": "a user"}')
    result = subprocess.run([*command("bench"), "--quick", "--json", str(tmp_path / "notes.json")], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "holds no tools.bench results: it is kept" in result.stderr, result.stderr
    assert (tmp_path / "notes.json").read_text() == '{"kept by": "a user"}'
    for flags, says in ((["--env", "NoSuchGame-v0"], "NoSuchGame-v0"), (["--gpu-ids", "99"], "--gpu-ids [99]"),
                        (["--workers", "0"], "--workers")):
        result = subprocess.run([*command("bench"), "--quick", *flags, "--json", str(tmp_path / "bench.json")],
                                cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1 and says in result.stderr, result.stderr


@pytest.mark.parametrize("token, kind", [("replay", "standard"), ("elite", "custom")])
def test_replay_tokens_name_valid_replay_parameters(token, kind):
    """``:replay`` and ``:elite`` run IMPALA with the replay comparison's configurations B and D, parameters that
    main.py's own parser accepts."""
    from runtime.replay_spec import replay_specs
    from tools.bench import REPLAYS, parse_config

    assert parse_config(f"nature:8:bf16:impala:{token}")["replay"] == token
    specs = replay_specs(REPLAYS[token], 8)
    assert [spec["type"] for spec in specs] == ["queue", kind]
    if token == "elite":
        assert specs[1]["sample_strategy"] == "elite_sampling" and specs[1]["elite_sampling_strategy"] == "strategy3"


def test_an_elite_token_with_steps_scores_that_many_steps():
    """``:elite20``: configuration D scoring the first 20 steps of each candidate (every step of an unroll);
    ``:elite`` the default, 5."""
    from runtime.replay_spec import replay_specs
    from tools.bench import parse_config, replay_parameters

    config = parse_config("nature:8:bf16:impala:elite20")
    assert config["replay"] == "elite" and config["score_steps"] == 20
    specs = replay_specs(replay_parameters(config), 8, 20)
    assert specs[1]["score_steps"] == 20 and specs[1]["sample_strategy"] == "elite_sampling"
    assert replay_specs(replay_parameters(parse_config("nature:8:impala:elite")), 8, 20)[1]["score_steps"] == 5



def test_a_configuration_whose_process_dies_is_named_not_measured(tmp_path):
    """A worker that crashes during the warm-up: the configuration is reported as not measured (it was the
    survivors' frames/s, with no word), the next one is measured, its figures kept, exit 1."""
    out = tmp_path / "bench.json"
    result = subprocess.run([*command("bench"), "--env", "CartPole-v1", "--configs", "mlp:2", "mlp:2:impala",
                             "--warmup", "2", "--seconds", "4", "--emulator-seconds", "1", "--json", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=400,
                            env={**os.environ, "A3G_FAULT": "worker_raise"})  # A3G's worker 0 only
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    report = json.loads(out.read_text())
    assert [row["name"] for row in report["results"]] == ["mlp:2:impala"] and report["results"][0]["fps"] > 0
    (failed,) = report["failed"]
    assert failed["name"] == "mlp:2" and "worker" in failed["error"] and "exit" in failed["error"], failed
    assert "bench: mlp:2: not measured: " in result.stderr and "injected fault" in result.stderr
