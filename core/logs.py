"""The run's text log, and clocks."""

import logging
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
