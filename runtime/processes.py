"""The run's child processes: how each starts (dies with its parent, leaves Ctrl-C to the supervisor, one thread,
seeded), and how the evaluator keeps to its share of a CPU core.

The state the processes share is in run_state.py, checkpoint files in checkpoints.py.
"""

import ctypes
import multiprocessing as mp
import os
import signal
import time
from multiprocessing.context import BaseContext
from typing import Callable

import torch

from core.hardware import usable_cores
from core.logs import survive_lost_console
from runtime.run_state import StopFlag


# the libraries a role imports (nine tenths of its start-up): loaded once, by the fork server, and shared by every
# role it forks. Not the project's own modules: the server imports before it has the run's sys.path, and a3g's
# test.py would be the standard library's test package there.
ROLE_LIBRARIES = ["torch", "numpy", "gymnasium", "ale_py", "cv2"]


def process_context() -> BaseContext:
    """How the run starts its roles: forked from a fork server that has imported the libraries they need once (a role
    then starts in a fraction of a second instead of importing torch itself), or, where there is no fork server
    (Windows), spawned. The server is the first role's start; it exits when the supervisor does, so its children
    die with the supervisor too (``setup_child_process``)."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(ROLE_LIBRARIES)
    return ctx


def stop_fork_server() -> None:
    """Once every role has stopped: the fork server told to exit, and waited for (left to exit after the supervisor,
    it would be a zombie of the run's session until init reaps it)."""
    from multiprocessing import forkserver

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:
        try:
            stop()
        except OSError:
            pass


_PARENT_AT_START: int | None = None


def setup_child_process(seed: int, parent_pid: int) -> None:
    """First lines of every child: die with the parent, Ctrl-C left to the supervisor, one thread, seeded torch.

    The terminal sends Ctrl-C (SIGINT) to the whole process group. A child that died of it could do so mid-write or
    mid-update; instead children ignore it and stop when the supervisor sets the stop flag. main.py blocks SIGINT
    while it spawns us, so one that arrives while this process is still importing torch waits, then is ignored here.
    """
    global _PARENT_AT_START
    _PARENT_AT_START = os.getppid()  # the supervisor, or the fork server that forked us (it exits with the supervisor)
    let_the_fork_server_go()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal: the supervisor stops the run, saved
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    survive_lost_console()  # a reader of the console gone (| head, a closed terminal) is no crash of a role
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


def let_the_fork_server_go() -> None:
    """A child the fork server forked holds a copy of the pipe whose end tells the server that the supervisor is
    gone: closed here, so that the server exits with the supervisor, and with it (PR_SET_PDEATHSIG: its parent)
    every role. (A role starts no process of its own, so it never needs the server.)"""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
        server._forkserver_alive_fd = None


def parent_alive(parent_pid: int) -> bool:
    """False once the supervisor (``parent_pid``) is gone (killed with SIGKILL, say): the child is re-parented and
    must exit. A child forked by the fork server has the server for parent, which exits when the supervisor does."""
    parent = os.getppid()
    return parent == parent_pid or (parent == _PARENT_AT_START and parent != 1)


def evaluator_cpu_share(setting: str | float, workers: int, cores: int | None = None) -> float:
    """--evaluator-cpu as a number: the fraction of one core the evaluator may use on average.

    'auto': when the workers leave a core free the evaluator has it all (1.0); otherwise it gets a tenth of the
    machine (0.2 of a core on 2 cores), instead of the 1/(workers + 1) of it that fair scheduling would give it: a
    third of a 2-core machine with 2 workers, which the workers are better at using."""
    if setting != "auto":
        return float(setting)
    cores = cores or usable_cores()
    return 1.0 if workers < cores else min(1.0, 0.1 * cores)


def confirm_cpu_share(setting: str | float, share: float) -> float:
    """--confirm-cpu as a number: the evaluator's share of a core while its latest game is at --stop-score, never
    less than its usual ``share``; auto: a whole core."""
    return max(share, 1.0 if setting == "auto" else float(setting))


def training_processes(args) -> int:
    """The processes that train beside the evaluator: A3G's workers; IMPALA's actors, its learner and, with
    ``--inference server``, the server."""
    if getattr(args, "algo", "a3g") != "impala":
        return args.workers
    return args.workers + 1 + (getattr(args, "inference", None) == "server")


def evaluator_shares(args) -> tuple[float, float]:
    """The evaluator's usual share of a core and its share while confirming a score, from the run's flags (a core
    is free when the training processes, IMPALA's learner and server counted, leave one)."""
    share = evaluator_cpu_share(args.evaluator_cpu, training_processes(args))
    return share, confirm_cpu_share(args.confirm_cpu, share)


def share_after_game(episode_return: float, stop_score: float | None, share: float, confirm_share: float) -> float:
    """The evaluator's share of a core for its next game: ``confirm_share`` while its latest game is at the stop
    score (the games that can end the run are then its critical path), else its usual ``share``."""
    return confirm_share if stop_score is not None and episode_return >= stop_score else share


class CpuPacer:
    """Keeps a process's CPU use at ``share`` of one core on average: ``pace()``, called between small bits of
    work, sleeps long enough that the CPU time spent since the last call is ``share`` of the wall time. Sleeping
    is ``stop.wait``, so a stop request ends it within 50 ms. ``clock``: the CPU time it keeps to the share (the
    whole process's by default)."""

    def __init__(self, share: float, stop: StopFlag, clock: Callable[[], float] = time.process_time) -> None:
        self.share, self.stop, self.clock = share, stop, clock
        self._mark()

    def _mark(self):
        self.cpu, self.wall = self.clock(), time.monotonic()

    def pace(self) -> None:
        """Pays for the CPU time since the last call at today's ``share`` (which may change between calls)."""
        owed = (self.clock() - self.cpu) / self.share - (time.monotonic() - self.wall)
        if owed > 0 and self.share < 1.0:
            self.stop.wait(owed)
        self._mark()
