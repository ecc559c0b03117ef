"""The supervisor: starts, watches, restarts and stops a run's roles, and enforces its limits.

It knows no algorithm. An algorithm hands it its roles, ``{name: (target, args)}`` (A3G: ``worker <rank>`` x N
and ``evaluator``); the supervisor spawns each as a daemonic child with SIGINT blocked, replaces one that dies
with the same target and arguments, and ends the run when ``--max-restarts`` deaths fall within a minute.
``supervise`` polls the shared ``RunState`` for 'solved', the frame and time limits and divergence, and saves
periodic checkpoints through the callback it is given.
"""

import argparse
import collections
import os
import signal
import sys
import time
from collections.abc import Iterable
from multiprocessing import resource_tracker, util
from multiprocessing.context import BaseContext
from types import FrameType
from typing import Callable, NoReturn

from core.errors import EXIT_CRASH, EXIT_OK
from core.files import process_alive
from core.logs import file_logger
from runtime.run_state import RunState


class Terminated(Exception):
    """SIGTERM (a scheduler, ``docker stop``): handled like Ctrl-C."""


def raise_terminated(signum: int, frame: FrameType | None) -> NoReturn:
    """The SIGTERM handler: raise ``Terminated`` in the main thread."""
    raise Terminated()


def describe_exit(exitcode: int | None) -> str:
    """How a child process ended, in words, from its ``exitcode``."""
    if exitcode is None:
        return "is not running"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


class RestartWindow:
    """``--max-restarts``: deaths counted over the last ``seconds``; one more than ``max_restarts`` of them ends the
    run. The supervisor counts its roles' deaths with one, the Ray backend its actors' (impala/ray_backend.py ``ActorFleet``)."""

    def __init__(self, max_restarts: int, seconds: float = 60.0) -> None:
        self.max_restarts, self.seconds, self.deaths = max_restarts, seconds, collections.deque()

    def death(self) -> bool:
        """Count a death now. Returns True while the deaths in the window are within ``max_restarts``."""
        now = time.monotonic()
        self.deaths.append(now)
        while now - self.deaths[0] > self.seconds:
            self.deaths.popleft()
        return len(self.deaths) <= self.max_restarts

    def too_many(self, what: str = "deaths") -> str:
        return f"{len(self.deaths)} {what} within {self.seconds:.0f} s is more than --max-restarts {self.max_restarts}"

    def so_far(self) -> str:
        return f"{len(self.deaths)} of at most {self.max_restarts} within {self.seconds:.0f} s"


class Supervisor:
    """Starts, watches, restarts and stops a run's roles: ``roles`` maps a name to ``(target, args)``.

    A child that dies is replaced with the same target and arguments (for A3G: the same rank, GPU and step size);
    more than ``max_restarts`` deaths within a minute (``RestartWindow``) end the run instead (stop_reason
    ``error``). Children are started with SIGINT
    blocked, so that a Ctrl-C during their start-up (importing torch takes a while) cannot kill them before they
    install their own handling (``runtime.processes.setup_child_process``).
    """

    def __init__(self, ctx: BaseContext, roles: dict[str, tuple[Callable, tuple]], state: RunState, max_restarts: int,
                 log: Callable[..., object]) -> None:
        self.ctx, self.targets, self.state, self.log = ctx, dict(roles), state, log
        self.children = {}
        self.started: list[int] = []  # every child's pid, the replaced ones' too (whose temporaries to remove)
        self.deaths = RestartWindow(max_restarts)
        self.restarts = 0

    def start(self, names: Iterable[str] | None = None) -> None:
        """Start the roles ``names`` (default: all of them), each a daemonic child with SIGINT blocked."""
        # multiprocessing starts its resource tracker on the first spawn, and afterwards *unblocks* SIGINT in the
        # spawning thread: children spawned after it would then die of a Ctrl-C while still importing torch.
        # Start the tracker first, so that SIGINT stays blocked for every child spawned below.
        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for name in names or self.targets:
                target, target_args = self.targets[name]
                proc = self.ctx.Process(target=target, args=target_args, name=name.replace(" ", "-"), daemon=True)
                proc.start()
                self.children[name] = proc
                self.started.append(proc.pid)
                self.log(f"started {name} (pid {proc.pid})", echo=False)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    def check(self) -> str | None:
        """Replace dead children. Returns an error message once too many have died, else None."""
        for name, proc in list(self.children.items()):
            if proc.is_alive() or self.state.stop.is_set() or self.state.failed.value:
                continue
            proc.join()
            if not self.deaths.death():
                return f"{name} (pid {proc.pid}) {describe_exit(proc.exitcode)}: {self.deaths.too_many()}; stopping"
            self.restarts += 1
            self.log(f"{name} (pid {proc.pid}) {describe_exit(proc.exitcode)}; restarting it ({self.deaths.so_far()})")
            self.start([name])
        return None

    def stop(self, grace: float = 5.0) -> None:
        """Ask every child to stop; wait up to ``grace`` seconds; then terminate, then kill what is left."""
        self.state.stop.set()
        deadline = time.monotonic() + grace
        for proc in self.children.values():
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self.children.values():
            if proc.is_alive():
                proc.terminate()
        for proc in self.children.values():
            proc.join(1.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        # A forked child's join returns once the fork server that forked it is gone (the same SIGTERM to the
        # process group kills it), while the child itself may still finish an fsync: wait for the processes.
        deadline = time.monotonic() + grace
        for proc in self.children.values():
            wait_until_gone(proc.pid, deadline)


def wait_until_gone(pid: int, deadline: float) -> None:
    """Wait until process ``pid`` has exited (a zombie has); past ``deadline``, kill it and wait a little more (a
    process in an uninterruptible write dies when the write returns)."""
    killed = False
    while process_alive(pid):
        if time.monotonic() > deadline:
            if killed:
                return
            killed = True
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            deadline = time.monotonic() + 5.0
        time.sleep(0.01)


def supervise(args: argparse.Namespace, supervisor: Supervisor, state: RunState, clock: Callable[[], float],
              save_checkpoint: Callable[[], object], log: Callable[[str], object],
              progress: Callable[[], None] = lambda: None) -> tuple[str, int]:
    """Watch the run until a limit, 'solved', or an unrecoverable fault, calling ``progress`` on each look.
    Returns (stop_reason, exit code)."""
    last_save = clock()
    reported_nonfinite = 0
    while True:
        if state.solved.value:
            return "solved", EXIT_OK
        if args.max_frames is not None and state.frames.value >= args.max_frames:
            return "max_frames", EXIT_OK
        if args.max_seconds is not None and clock() >= args.max_seconds:
            return "max_seconds", EXIT_OK
        if state.nonfinite.value > reported_nonfinite:
            log(f"skipped {state.nonfinite.value - reported_nonfinite} update(s) with a non-finite loss or gradient "
                f"({state.nonfinite.value} in all); the shared model was not touched")
            reported_nonfinite = state.nonfinite.value
        if state.diverged.value:
            log(f"{args.max_nonfinite} non-finite updates in a row: training has diverged; stopping with the last "
                f"good weights (try a lower --lr or --max-grad-norm)")
            return "error", EXIT_CRASH
        if state.failed.value:  # the role said why, in its own line
            return "error", EXIT_CRASH
        problem = supervisor.check()
        if problem:
            log(problem)
            return "error", EXIT_CRASH
        if clock() - last_save >= args.checkpoint_interval:
            save_checkpoint()
            last_save = clock()
        progress()
        time.sleep(0.2)


def make_supervisor_log(log_file: str) -> Callable[..., None]:
    """``log(message)``: to stderr (unless echo=False) and to the run's text log, for what the supervisor does."""
    logger = file_logger("a3g.main", log_file, prefix="main: ")

    def log(message, echo=True):
        logger.info(message)
        if echo:
            print(f"a3g: {message}", file=sys.stderr, flush=True)

    return log


def stop_resource_tracker() -> None:
    """Stop and reap multiprocessing's resource-tracker helper now that every child is gone. Left to exit after us,
    it would be re-parented, and where PID 1 does not reap (some containers) it would linger as a zombie."""
    try:
        util._run_finalizers(0)  # release our semaphores first (what exit would do), so the tracker has nothing left
        resource_tracker._resource_tracker._stop()
    except Exception:  # private APIs: if they change, the tracker exits on its own as before
        pass
