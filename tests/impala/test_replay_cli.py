"""Bad --replay-parameters (and the trust region's flags) are refused through the command line before anything
starts: exit 2, one line naming the entry and the key."""

import json

import pytest

from conftest import assert_bad_input, main_in_process, out_dirs, run_main

IMPALA = ["--algo", "impala", "--env", "CartPole-v1", "--workers", "1", "--no-tensorboard-logger"]
QUEUE = {"type": "queue", "capacity": 1, "sample_ratio": 0.5}
STANDARD = {"type": "standard", "capacity": 64, "sample_ratio": 0.5}


def replays(*entries):
    return json.dumps(list(entries))


@pytest.mark.parametrize("flags,words", [
    (["--replay-parameters", '[{"type": "queue",'], ["--replay-parameters", "JSON"]),
    (["--replay-parameters", "[]"], ["--replay-parameters", "non-empty"]),
    (["--replay-parameters", replays({**QUEUE, "sample_ratio": 1, "colour": "red"})], ["entry 1", "colour"]),
    (["--replay-parameters", replays(QUEUE, {**STANDARD, "capacity": "ten"})], ["entry 2", "capacity", '"ten"']),
    (["--replay-parameters", replays(QUEUE, {**STANDARD, "sample_ratio": True})], ["entry 2", "sample_ratio"]),
    (["--replay-parameters", replays(QUEUE, {**STANDARD, "type": "prioritized"})], ["entry 2", "type"]),
    (["--replay-parameters", replays(QUEUE, STANDARD), "--batch-size", "3"],
     ["entry 1", "sample_ratio", "not a whole number"]),
    (["--replay-parameters", replays(QUEUE, {**STANDARD, "sample_ratio": 0.25})],
     ["sample_ratio", "add up to 6", "--batch-size 8"]),
    (["--replay-parameters", replays({**STANDARD, "sample_ratio": 1})], ["no on-policy queue"]),
    (["--replay-parameters", replays({**QUEUE, "sample_ratio": 1}, {**STANDARD, "sample_ratio": 1e-9})],
     ["entry 2", "sample_ratio", "at least one unroll"]),
    (["--replay-parameters", replays(QUEUE, {**STANDARD, "type": "custom", "dist_function": "ln_norm",
                                             "capacity": 10, "insert_strategy": "elite_insertion"})],
     ["entry 2", "elite_batch_size", "20", "capacity 10"]),
    (["--replay-parameters", replays(QUEUE, {**STANDARD, "type": "custom", "dist_function": "l2",
                                                          "sample_strategy": "elite_sampling"})],
     ["entry 2", "dist_function"]),
    (["--replay-parameters", replays(QUEUE, {**STANDARD, "type": "custom", "dist_function": "ln_norm",
                                             "sample_strategy": "elite_sampling", "lambda_batch_multiplier": 1})],
     ["entry 2", "lambda_batch_multiplier", "more candidates than picks"]),
    (["--replay-parameters", replays(QUEUE, {**STANDARD, "capacity": 10 ** 10})], ["entry 2", "capacity", "GiB"]),
    (["--replay-parameters", replays(QUEUE, {**STANDARD, "capacity": 3})],  # 0.5 x --batch-size 8 = 4 a batch
     ["entry 2", "capacity", "3 is below the 4 unrolls", "never be sampled"]),
    (["--replay-parameters", replays(QUEUE, {**STANDARD, "type": "custom", "dist_function": "ln_norm",
                                             "sample_strategy": "elite_sampling", "score_steps": 0})],
     ["entry 2", "score_steps", ">= 1"]),
    (["--replay-parameters", replays(QUEUE, {**STANDARD, "type": "custom", "dist_function": "ln_norm",
                                             "sample_strategy": "elite_sampling", "score_steps": 21}),
      "--num-steps", "20"],
     ["entry 2", "score_steps", "--num-steps 20"]),
    (["--replay-parameters", replays(QUEUE, {**STANDARD, "type": "custom", "dist_function": "ln_norm",
                                             "insert_strategy": "elite_insertion", "score_steps": 2.5})],
     ["entry 2", "score_steps", "whole number", "2.5"]),
    (["--kl-mask", "--kl-threshold", "0"], ["--kl-threshold"]),
    (["--kl-mask-mode", "raw_logits"], ["--kl-mask-mode"]),
    (["--clone-losses"], ["--clone-losses", "no replay"]),
    (["--clone-losses", "--replay-parameters", replays(QUEUE, STANDARD), "--value-cloning-cost", "-1"],
     ["--value-cloning-cost"]),
])
def test_bad_replay_parameters(flags, words, tmp_path):
    assert_bad_input(main_in_process(*IMPALA, *flags, *out_dirs(tmp_path)), *words)


def test_replay_parameters_are_for_impala(tmp_path):
    result = main_in_process("--env", "CartPole-v1", "--replay-parameters", replays(QUEUE, STANDARD),
                             *out_dirs(tmp_path))
    assert_bad_input(result, "--replay-parameters", "impala")
    result = main_in_process("--env", "CartPole-v1", "--clone-losses", *out_dirs(tmp_path))
    assert_bad_input(result, "--clone-losses", "impala")

