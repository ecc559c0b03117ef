"""The progress line: one per interval, with frames, frames/s, the nearest limit's percent and ETA, and the
evaluator's latest mean; a real run prints it while it trains."""

import argparse
import io
import multiprocessing as mp

from conftest import out_dirs, run_main
from runtime.progress import Progress
from runtime.run_state import RunState


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def progress(max_frames=None, max_seconds=None, interval=10.0):
    args = argparse.Namespace(max_frames=max_frames, max_seconds=max_seconds)
    state, clock, out = RunState(mp.get_context("spawn"), 1), Clock(), io.StringIO()
    return Progress(args, state, clock, 60.0, interval, out), state, clock, out


def test_one_line_per_interval_with_rate_percent_eta_and_mean():
    show, state, clock, out = progress(max_frames=100_000)
    clock.now = 5.0
    state.frames.add(0, 20_000)
    show()
    assert out.getvalue() == ""  # not yet an interval
    clock.now = 10.0
    show()
    clock.now = 10.2
    show()
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    # 20,000 frames in 10 s: 2,000 frames/s, 20% of --max-frames, 80,000 left: 40 s; the run's clock: 60 s + 10 s
    assert lines[0] == "a3g: 00h 01m 10s, 20,000 frames, 2,000 frames/s; 20.0% of the limit, ETA 00h 00m 40s; " \
                       "no evaluator game yet"
    state.eval_episodes.value, state.latest_mean.value = 3, -20.333
    clock.now = 20.0
    show()
    assert out.getvalue().splitlines()[1].endswith("0 frames/s; 20.0% of the limit, ETA -; evaluator mean -20.33 "
                                                   "after 3 games")


def test_the_limit_that_ends_first_and_no_limit():
    show, state, clock, _ = progress(max_frames=1_000_000, max_seconds=100)
    state.frames.add(0, 100_000)
    assert show.limit(100_000, 10_000.0, 50.0) == (0.5, 50.0)  # time: half gone, 50 s left; frames: 90 s left
    show, state, clock, _ = progress()
    assert show.limit(0, 0.0, 1.0) == (None, float("inf"))
    assert "of the limit" not in show.line(0, 0.0, 1.0)


def test_a_run_prints_progress_while_it_trains(tmp_path):
    result = run_main("--env", "CartPole-v1", "--workers", "1", "--max-seconds", "8", "--progress-interval", "2",
                      "--no-tensorboard-logger", *out_dirs(tmp_path), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line for line in result.stdout.splitlines() if "% of the limit" in line]
    assert 2 <= len(lines) <= 5, result.stdout
    assert "frames/s" in lines[-1] and "evaluator mean" in lines[-1]
