"""The evaluator's CPU pacing: how much of a core it may use, that pacing keeps it to that share, and that its
pauses (waits on the run's stop flag) can neither outlast a stop request nor wedge the supervisor."""

import multiprocessing as mp
import os
import signal
import threading
import time

import pytest

from conftest import wait_for
from runtime.processes import CpuPacer, confirm_cpu_share, evaluator_cpu_share, share_after_game
from runtime.run_state import StopFlag


@pytest.mark.parametrize("workers,cores,share", [
    (2, 2, 0.2),    # workers fill the machine: the evaluator gets a tenth of it
    (4, 2, 0.2),
    (8, 4, 0.4),
    (16, 16, 1.0),  # a tenth of 16 cores is more than the one core it can use
    (1, 2, 1.0),    # a core is free: no pacing
    (15, 16, 1.0),
])
def test_auto_share(workers, cores, share):
    assert evaluator_cpu_share("auto", workers, cores) == pytest.approx(share)


def test_impalas_learner_and_server_take_the_core_the_actors_leave():
    """--workers cores - 1 with IMPALA: the learner runs on the core the actors leave, so no core is free."""
    from argparse import Namespace

    from runtime.processes import evaluator_shares, training_processes, usable_cores

    cores = usable_cores()
    base = dict(evaluator_cpu="auto", confirm_cpu="auto", workers=max(1, cores - 1))
    assert training_processes(Namespace(**base, algo="a3g")) == base["workers"]
    assert training_processes(Namespace(**base, algo="impala", inference="local")) == base["workers"] + 1
    assert training_processes(Namespace(**base, algo="impala", inference="server")) == base["workers"] + 2
    if cores > 1:  # A3G leaves a core free; IMPALA's learner takes it
        assert evaluator_shares(Namespace(**base, algo="a3g"))[0] == 1.0
        assert evaluator_shares(Namespace(**base, algo="impala", inference="local"))[0] == pytest.approx(
            min(1.0, 0.1 * cores))


def test_explicit_share_is_kept():
    assert evaluator_cpu_share(0.5, 2, 2) == 0.5
    assert evaluator_cpu_share(1.0, 64, 2) == 1.0


def test_confirm_share_is_never_below_the_usual_one():
    assert confirm_cpu_share("auto", 0.2) == 1.0
    assert confirm_cpu_share(0.5, 0.2) == 0.5
    assert confirm_cpu_share(0.1, 0.2) == 0.2  # at or below --evaluator-cpu: no change


def test_the_confirm_share_holds_while_the_latest_game_is_at_the_stop_score():
    assert share_after_game(18.0, 18.0, 0.2, 1.0) == 1.0
    assert share_after_game(21.0, 18.0, 0.2, 1.0) == 1.0
    assert share_after_game(17.0, 18.0, 0.2, 1.0) == 0.2  # a game below it: back to the usual share
    assert share_after_game(21.0, None, 0.2, 1.0) == 0.2  # no --stop-score: nothing to confirm


def burn(seconds):
    """``seconds`` of this thread's CPU time (what the pacers below keep to their share: threads of the process
    that a test before left spinning, OpenMP's after a torch op say, count in the process's CPU time)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_pacing_keeps_cpu_time_to_the_share():
    share, chunk = 0.25, 0.02
    pacer = CpuPacer(share, threading.Event(), clock=time.thread_time)
    cpu0, wall0 = time.thread_time(), time.monotonic()
    for _ in range(40):
        burn(chunk)
        pacer.pace()
    cpu, wall = time.thread_time() - cpu0, time.monotonic() - wall0
    # every pace() sleeps until the chunk's CPU time is `share` of its wall time, whatever the machine's load
    assert cpu <= share * wall * 1.05, (cpu, wall)
    assert wall >= 40 * chunk / share * 0.95


def test_full_share_never_sleeps():
    pacer = CpuPacer(1.0, threading.Event(), clock=time.thread_time)
    burn(0.05)
    start = time.monotonic()
    pacer.pace()
    assert time.monotonic() - start < 0.5  # no pause (a generous bound: the machine may be busy)


def test_a_lower_share_after_a_full_one_charges_only_what_follows():
    """The evaluator plays at a whole core while confirming a score and goes back to its share after: the CPU it
    used at the whole core is not paid for again at the small share (that would be a pause of many seconds)."""
    pacer = CpuPacer(1.0, threading.Event(), clock=time.thread_time)
    for _ in range(5):
        burn(0.05)
        pacer.pace()
    pacer.share = 0.5
    burn(0.05)
    start = time.monotonic()
    pacer.pace()
    paused = time.monotonic() - start
    assert paused < 0.2, paused  # 0.05 s of CPU at half a core: ~0.05 s; with the full phase's 0.25 s too, ~0.5 s


def test_a_stop_request_ends_the_pause():
    stop = StopFlag(mp.get_context("spawn"))
    pacer = CpuPacer(0.01, stop, clock=time.thread_time)  # 0.1 s of CPU would mean a 10 s pause
    burn(0.1)
    threading.Timer(0.2, stop.set).start()
    start = time.monotonic()
    pacer.pace()
    assert time.monotonic() - start < 3.0


def wait_on(flag, ready):
    ready.value = 1
    flag.wait(60)


def started_waiter(ctx, flag):
    """A child waiting on ``flag``: started, and past the point where it says it waits."""
    ready = ctx.RawValue("b", 0)
    child = ctx.Process(target=wait_on, args=(flag, ready))
    child.start()
    wait_for(lambda: ready.value, timeout=60)
    return child


def test_a_child_killed_while_waiting_cannot_block_set():
    """With a multiprocessing.Event this hangs: the dead waiter is still counted as sleeping, and set() waits for
    it to wake. The supervisor calls set() on every way out, after children may have died of a signal."""
    ctx = mp.get_context("spawn")
    flag = StopFlag(ctx)
    child = started_waiter(ctx, flag)
    os.kill(child.pid, signal.SIGKILL)
    child.join(30)
    setter = threading.Thread(target=flag.set, daemon=True)
    setter.start()
    setter.join(10)
    assert not setter.is_alive(), "set() blocked"
    assert flag.is_set()


def test_set_in_one_process_ends_a_wait_in_another():
    ctx = mp.get_context("spawn")
    flag = StopFlag(ctx)
    child = started_waiter(ctx, flag)
    flag.set()
    child.join(20)
    assert child.exitcode == 0
