"""Small shared pieces: the state shared between processes, child-process set-up, checkpoint files, formatting."""

import argparse
import ctypes
import errno
import logging
import math
import os
import signal
import time
import zipfile

import torch

from model import same_network

FORMAT_VERSION = 1  # of checkpoint.pt and trained_models/<env>.pt; bump when their layout changes


class OneLineParser(argparse.ArgumentParser):
    """Bad input is one line on stderr and exit 2 (argparse would print the usage block first)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class CheckpointError(ValueError):
    """A checkpoint that is missing, corrupt, of a newer format, or of another game or network: exit 2."""


# ---------------------------------------------------------------------------------------------------------------
# State shared by the supervisor, the workers and the evaluator


class StopFlag:
    """The run's stop request: one byte of shared memory, read and written without a lock.

    Not a ``multiprocessing.Event``: its wait() and set() share a lock and semaphores, and a child killed while
    waiting on it (SIGTERM to the process group, a SIGKILL) leaves them so that the supervisor's next set() blocks
    for ever. A byte cannot be left half-changed."""

    def __init__(self, ctx):
        self._flag = ctx.RawValue("b", 0)

    def set(self):
        self._flag.value = 1

    def is_set(self):
        return bool(self._flag.value)

    def wait(self, timeout):
        """Sleep up to ``timeout`` seconds, less if the flag is set meanwhile (checked every 50 ms)."""
        end = time.monotonic() + timeout
        while not self._flag.value:
            left = end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.05))
        return True


class SlotCounter:
    """A count that several processes add to without a lock: each worker rank adds to its own slot (a restarted
    worker takes over its rank's slot), readers sum the slots."""

    def __init__(self, ctx, typecode, slots, base=0):
        self._base = base
        self._slots = ctx.RawArray(typecode, slots)

    def add(self, slot, amount):
        self._slots[slot] += amount  # only this slot's worker writes it

    @property
    def value(self):
        return self._base + sum(self._slots)


class RunState:
    """Counters, flags and the latest losses, in shared memory. Built by main.py, handed to every child.

    All of it is lock-free: every field has one writer (or, for the counters, one slot per worker). A child killed
    at any instant (a signal to the process group, the supervisor's SIGKILL of a stuck child) therefore cannot
    leave a lock held that the supervisor would then wait on for ever.

    Everything else a child needs (flags, environment settings, model metadata) is plain data passed at spawn.
    """

    def __init__(self, ctx, workers, frames=0.0, episodes=0, best_return=-math.inf, best_mean_return=-math.inf,
                 eval_episodes=0):
        self.stop = StopFlag(ctx)  # set by anyone: every process winds down at its next check
        self.solved = ctx.RawValue("b", 0)  # set by the evaluator when the score window reaches --stop-score
        self.frames = SlotCounter(ctx, "d", workers, float(frames))  # emulator frames, resumed ones included
        self.episodes = SlotCounter(ctx, "q", workers, int(episodes))  # finished training games (not lives)
        self.nonfinite = SlotCounter(ctx, "q", workers)  # updates skipped for a non-finite loss or gradient
        self.diverged = ctx.RawValue("b", 0)  # set by a worker after --max-nonfinite skipped updates in a row
        # written by the evaluator only
        self.best_return = ctx.RawValue("d", float(best_return))
        self.best_mean_return = ctx.RawValue("d", float(best_mean_return))
        self.eval_episodes = ctx.RawValue("q", int(eval_episodes))
        # the latest update of worker 0, per step: policy loss, value loss, entropy, gradient norm
        self.losses = ctx.RawArray("d", 4)

    def add(self, rank, frames, episodes):
        self.frames.add(rank, frames)
        if episodes:
            self.episodes.add(rank, episodes)


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
# Files


def env_file_name(env_id):
    """``ALE/Pong-v5`` -> ``ALE-Pong-v5``: env ids as file names."""
    return env_id.replace("/", "-")


def model_file(env, meta, state_dict, episode_return, frames):
    """The contents of a model file (``trained_models/<env>.pt``): weights plus what rebuilds the network and its
    preprocessing, no optimizer state. Written by the evaluator and by export_model.py, read by gym_eval.py."""
    return {
        "format_version": FORMAT_VERSION,
        "kind": "model",
        "env": env,
        "model_meta": meta,
        "state_dict": {k: v.detach().cpu() for k, v in state_dict.items()},
        "return": float(episode_return),
        "frames": float(frames),
    }


def injected_fault(name):
    """Test hook: faults named in the ``A3G_FAULT`` environment variable (comma-separated) are injected at the
    places that check for them, so that tests can prove the run survives them. Unset in normal use."""
    return name in os.environ.get("A3G_FAULT", "").split(",")


def _atomic_write(path, write, keep_previous_as=None):
    """Write through ``write(file)`` to a temporary file beside ``path``, fsync it, then rename it over ``path``: a
    reader sees the old file or the new one, never half of one. On any error the temporary file is removed and the
    old file is left as it was. ``keep_previous_as`` hard-links the old file to that name first."""
    path = os.fspath(path)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            write(f)
            if injected_fault("save_enospc"):
                f.flush()
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), tmp)
            f.flush()
            os.fsync(f.fileno())
        if keep_previous_as and os.path.exists(path):
            if os.path.exists(keep_previous_as):
                os.remove(keep_previous_as)
            os.link(path, keep_previous_as)
        os.replace(tmp, path)
        try:  # make the rename itself durable
            dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError:
            pass
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def atomic_torch_save(obj, path, keep_previous_as=None):
    _atomic_write(path, lambda f: torch.save(obj, f), keep_previous_as)


def atomic_write_text(path, text):
    _atomic_write(path, lambda f: f.write(text.encode()))


def load_checkpoint(path, kind=None):
    """Load a checkpoint or model file safely (``weights_only=True``: plain tensors and numbers, no code runs).

    Raises CheckpointError with a one-line reason for a missing, corrupt, foreign or too-new file.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "checkpoint.pt")
    if not os.path.isfile(path):
        raise CheckpointError(f"{path} not found")
    if not zipfile.is_zipfile(path):  # torch.save writes zip archives; anything else would give a misleading error
        raise CheckpointError(f"{path} is not a torch checkpoint (empty, truncated or another format)")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # unpickling errors, truncated zip files, refused globals...
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path} is not a readable a3g checkpoint ({reason[:200]})") from None
    if not isinstance(data, dict) or "format_version" not in data or "model_meta" not in data:
        raise CheckpointError(f"{path} is not an a3g checkpoint (no format_version/model_meta)")
    if not isinstance(data["format_version"], int) or data["format_version"] > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format version {data['format_version']}, newer than this a3g's {FORMAT_VERSION}: update a3g"
        )
    if kind is not None and data.get("kind") != kind:
        raise CheckpointError(f"{path} holds a {data.get('kind')!r}, not a {kind!r}")
    if not isinstance(data.get("state_dict"), dict):
        raise CheckpointError(f"{path} holds no model weights")
    return data


def check_compatible(data, path, env_id, meta):
    """The checkpoint must be of the same environment and the same network (name, sizes) as this run."""
    saved_env = (data.get("env") or {}).get("env_id")
    if saved_env != env_id:
        raise CheckpointError(f"{path} was trained on {saved_env}, not {env_id}")
    if not same_network(data["model_meta"], meta):
        raise CheckpointError(f"{path} holds a different network {data['model_meta']}, this run builds {meta}")


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
