"""Small shared pieces: child-process set-up, devices, names, logs, clocks and CPU pacing.

The state the processes share is in run_state.py, checkpoint files in checkpoints.py.
"""

import argparse
import ctypes
import logging
import os
import signal
import time

import torch


class OneLineParser(argparse.ArgumentParser):
    """Bad input is one line on stderr and exit 2 (argparse would print the usage block first). Flags are spelled
    out in full: a prefix that works today would silently take another meaning the day a flag sharing it is added."""

    def __init__(self, *args, allow_abbrev=False, **kwargs):
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# ---------------------------------------------------------------------------------------------------------------
# Child processes and devices


def setup_child_process(seed, parent_pid):
    """First lines of every child: die with the parent, Ctrl-C left to the supervisor, one thread, seeded torch.

    The terminal sends Ctrl-C (SIGINT) to the whole process group. A child that died of it could do so mid-write or
    mid-update; instead children ignore it and stop when the supervisor sets the stop flag. main.py blocks SIGINT
    while it spawns us, so one that arrives while this process is still importing torch waits, then is ignored here.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    # If the supervisor is killed outright (SIGKILL: nothing can be saved), the kernel sends us SIGTERM, so no
    # orphan keeps memory or a GPU. The loops also check parent_alive(), for systems without prctl.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if not parent_alive(parent_pid):  # the parent died before prctl took effect
        os._exit(1)
    # One thread per process: with N workers on N cores, more threads only fight over the same cores.
    torch.set_num_threads(1)
    torch.manual_seed(seed)


def parent_alive(parent_pid):
    """False once the supervisor is gone (killed with SIGKILL, say): the child is re-parented and must exit."""
    return os.getppid() == parent_pid


def missing_gpus(gpu_ids):
    """The ids among ``gpu_ids`` (CPU -1 aside) this machine does not have, and how many CUDA devices it has."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [g for g in gpu_ids if g >= count], count


def cpu_has_native_bf16():
    """Whether this CPU computes bfloat16 natively (AVX512-BF16, AMX): where --bf16 speeds training up."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a private API: without it, assume not
        return False


def device_for(gpu_ids, rank):
    """Worker ``rank``'s device: GPU ``gpu_ids[rank % len]``, or the CPU for ``--gpu-ids -1``."""
    gpu = gpu_ids[rank % len(gpu_ids)]
    return torch.device("cpu") if gpu < 0 else torch.device(f"cuda:{gpu}")


# ---------------------------------------------------------------------------------------------------------------
# Names, logs, clocks


def env_file_name(env_id):
    """``ALE/Pong-v5`` -> ``ALE-Pong-v5``: env ids as file names."""
    return env_id.replace("/", "-")


def injected_fault(name):
    """Test hook: faults named in the ``A3G_FAULT`` environment variable (comma-separated) are injected at the
    places that check for them, so that tests can prove the run survives them. Unset in normal use."""
    return name in os.environ.get("A3G_FAULT", "").split(",")


def file_logger(name, log_file, prefix=""):
    """A logger that appends time-stamped lines to ``log_file`` (the run's text log, shared by the processes)."""
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter(f"%(asctime)s : {prefix}%(message)s"))
    logger.addHandler(handler)
    return logger


def format_time(seconds):
    seconds = int(seconds)
    return f"{seconds // 3600:02d}h {seconds // 60 % 60:02d}m {seconds % 60:02d}s"


class Stopwatch:
    def __init__(self, offset=0.0):
        self.start = time.monotonic() - offset

    def __call__(self):
        return time.monotonic() - self.start


def usable_cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def evaluator_cpu_share(setting, workers, cores=None):
    """--evaluator-cpu as a number: the fraction of one core the evaluator may use on average.

    'auto': when the workers leave a core free the evaluator has it all (1.0); otherwise it gets a tenth of the
    machine (0.2 of a core on 2 cores), instead of the 1/(workers + 1) of it that fair scheduling would give it: a
    third of a 2-core machine with 2 workers, which the workers are better at using."""
    if setting != "auto":
        return float(setting)
    cores = cores or usable_cores()
    return 1.0 if workers < cores else min(1.0, 0.1 * cores)


class CpuPacer:
    """Keeps a process's CPU use at ``share`` of one core on average: ``pace()``, called between small bits of
    work, sleeps long enough that the CPU time spent since the last call is ``share`` of the wall time. Sleeping
    is ``stop.wait``, so a stop request ends it within 50 ms."""

    def __init__(self, share, stop):
        self.share, self.stop = share, stop
        self._mark()

    def _mark(self):
        self.cpu, self.wall = time.process_time(), time.monotonic()

    def pace(self):
        if self.share >= 1.0:
            return
        owed = (time.process_time() - self.cpu) / self.share - (time.monotonic() - self.wall)
        if owed > 0:
            self.stop.wait(owed)
        self._mark()
