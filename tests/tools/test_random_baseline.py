"""docs/random_baseline.py: a random policy's whole games through a3g's preprocessing, the baseline a retro held-out
state's evaluator mean is judged against; bad input is one line, exit 2 (no traceback, no NaN baseline)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = [sys.executable, os.path.join(ROOT, "docs", "random_baseline.py")]


def run(*flags):
    return subprocess.run([*SCRIPT, *flags], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("flags, words", [
    (["--env", "NoSuchEnv-v0"], "unknown environment id 'NoSuchEnv-v0'"),
    (["--state", "nosuch.state"], "--state 'nosuch.state': no such file"),
    (["--seed", "-1"], "--seed: must be in [0, 2**31)"),
    (["--skip-rate", "0"], "--skip-rate: must be a positive integer"),
    (["--games", "0"], "--games: must be a positive integer"),  # was a NaN mean, exit 0
    (["--env", "CartPole-v1", "--state", "foo.state"], "--state is for stable-retro games"),  # was ignored
    (["--env", "CartPole-v1", "--skip-rate", "2"], "--skip-rate is for Atari and retro games"),
])
def test_bad_input_is_one_line_exit_2(flags, words):
    result = run(*flags)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and words in lines[0], result.stderr
    assert result.stdout == ""


def test_a_random_policys_games_and_their_mean():
    result = run("--env", "CartPole-v1", "--games", "3", "--seed", "4")
    assert result.returncode == 0, result.stderr
    *games, summary = result.stdout.strip().splitlines()
    scores = [float(line.split("score ")[1].split(",")[0]) for line in games]
    report = json.loads(summary)
    assert len(scores) == 3 and report["games"] == 3 and report["mean"] == pytest.approx(sum(scores) / 3)
    assert 5 <= report["mean"] < 60  # CartPole's random policy: about 22 steps, one point each
