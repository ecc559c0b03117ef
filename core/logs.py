"""The run's text log, the console streams, and clocks."""

import io
import logging
import os
import sys
import time


def file_logger(name: str, log_file: str, prefix: str = "") -> logging.Logger:
    """A logger that appends time-stamped lines to ``log_file`` (the run's text log, shared by the processes)."""
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter(f"%(asctime)s : {prefix}%(message)s"))
    logger.addHandler(handler)
    return logger


def format_time(seconds: float) -> str:
    """``00h 01m 13s``: rl_a3c_pytorch's clock in the evaluator's lines."""
    seconds = int(seconds)
    return f"{seconds // 3600:02d}h {seconds // 60 % 60:02d}m {seconds % 60:02d}s"


class Stopwatch:
    """Seconds since it was made, plus ``offset`` (a resumed run's time so far), on the monotonic clock."""

    def __init__(self, offset: float = 0.0):
        self.start = time.monotonic() - offset

    def __call__(self) -> float:
        return time.monotonic() - self.start


class SurvivingStream:
    """A console stream (stdout, stderr) whose lost reader does not end the process: the first write or flush that
    fails (a broken pipe: ``| head`` done, a ``tee`` that Ctrl-C ended; EIO: the terminal closed) points its file
    descriptor at /dev/null, and the process goes on, its log file and CSVs written as before."""

    def __init__(self, stream: io.TextIOBase) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError:
            self.lost()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError:
            self.lost()

    def lost(self) -> None:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())  # what is still buffered, and all that follows, goes there
            os.close(devnull)
        except (OSError, ValueError, io.UnsupportedOperation):  # no file descriptor (a test's capture)
            pass

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def survive_lost_console() -> None:
    """This process's stdout and stderr as ``SurvivingStream`` s (once)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, SurvivingStream):
            setattr(sys, name, SurvivingStream(stream))
