"""What a run says while it trains, besides the evaluator: the progress line at a steady interval, and
``games.csv``, one row per training game."""

import argparse
import csv
import math
import sys
from typing import Callable, TextIO

from core.logs import format_time
from runtime.run_state import RunState


class Progress:
    """Called by the supervisor's loop; once per ``interval`` seconds it prints one line: frames, the training
    frames/s over the interval, how far the nearest limit is (percent and ETA; with ``--max-frames`` at the
    interval's rate), and the evaluator's latest mean. The evaluator's own lines come as its games end; on Atari
    early games take a minute, and this line says the run is alive meanwhile. ``interval`` 0 prints nothing."""

    def __init__(self, args: argparse.Namespace, state: RunState, clock: Callable[[], float], start_seconds: float,
                 interval: float, out: TextIO = sys.stdout):
        self.args, self.state, self.clock, self.start_seconds = args, state, clock, start_seconds
        self.interval, self.out = interval, out
        self.last_time, self.last_frames = clock(), state.frames.value

    def __call__(self) -> None:
        now = self.clock()
        if self.interval <= 0 or now - self.last_time < self.interval:
            return
        frames = self.state.frames.value
        fps = (frames - self.last_frames) / (now - self.last_time)
        self.last_time, self.last_frames = now, frames
        print(f"a3g: {self.line(frames, fps, now)}", file=self.out, flush=True)

    def line(self, frames: float, fps: float, now: float) -> str:
        """The line's text, for ``frames`` frames at ``fps`` frames/s, ``now`` seconds into this invocation."""
        parts = [f"{format_time(self.start_seconds + now)}, {int(frames):,} frames, {fps:,.0f} frames/s"]
        done, left = self.limit(frames, fps, now)
        if done is not None:
            parts.append(f"{100 * done:.1f}% of the limit, ETA {format_time(left) if math.isfinite(left) else '-'}")
        games = self.state.eval_episodes.value
        if games:
            parts.append(f"evaluator mean {self.state.latest_mean.value:.4g} after {games} games")
        else:
            parts.append("no evaluator game yet")
        return "; ".join(parts)

    def limit(self, frames: float, fps: float, now: float) -> tuple[float | None, float]:
        """The fraction done of whichever limit ends the run first, and the seconds left; (None, inf) without a
        limit."""
        done, left = None, math.inf
        if self.args.max_frames:
            done = min(1.0, frames / self.args.max_frames)
            left = (self.args.max_frames - frames) / fps if fps > 0 else math.inf
        if self.args.max_seconds:
            by_time = min(1.0, now / self.args.max_seconds)
            if done is None or by_time > done:
                done = by_time
            left = min(left, max(0.0, self.args.max_seconds - now))
        return done, max(0.0, left)


class TrainingGames:
    """Called by the supervisor's loop; appends each training game that ended since the last call to the run's
    ``games.csv`` (``runtime.run_dir.GAMES_FIELDS``: the run's seconds when the main process saw it, the frames
    when it ended, its return and length), flushed, so the file can be read while the run goes on. A game a worker
    ended more than ``RunState``'s ring ago, unread, is lost (the loop reads every 0.2 s). A file that cannot be
    written (a full disk) is said once, through ``log``, and training goes on without it."""

    def __init__(self, path: str, state: RunState, clock: Callable[[], float], start_seconds: float,
                 log: Callable[[str], object] = lambda message: print(message, file=sys.stderr)):
        self.path, self.state, self.clock, self.start_seconds, self.log = path, state, clock, start_seconds, log
        self.read = [0] * len(state.games_written)
        self.file: TextIO | None = open(path, "a", newline="")
        self.rows = csv.writer(self.file)

    def __call__(self) -> None:
        if self.file is None:
            return
        read = list(self.read)  # the games count as read once handed to the file: a stop before loses none
        games = self.state.new_games(read)
        if games:
            seconds = f"{self.start_seconds + self.clock():.2f}"
            try:
                self.rows.writerows([seconds, int(frames), f"{episode_return:.15g}", length]
                                    for episode_return, length, frames in games)
                self.read = read
                self.file.flush()
            except OSError as exc:
                self.log(f"{self.path} cannot be written ({exc.strerror or exc}): the training games from here on "
                         f"are not recorded; training goes on")
                self.discard()
                return
        self.read = read

    def discard(self) -> None:
        try:
            self.file.close()
        except OSError:  # the rows still buffered cannot be written either
            pass
        self.file = None

    def close(self) -> None:
        """The games that ended since the last call, then the file is closed."""
        self()
        if self.file is not None:
            self.discard()
