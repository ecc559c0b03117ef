"""RunState: the counters that all processes share stay exact without locks."""

import multiprocessing as mp

from runtime.run_state import RunState


def add_many(state, rank, times):
    for _ in range(times):
        state.add(rank, 4.0, 1)
    state.nonfinite.add(rank, 1)


def test_workers_adding_at_once_lose_nothing():
    ctx = mp.get_context("spawn")
    state = RunState(ctx, 3, frames=1000.0, episodes=7)
    procs = [ctx.Process(target=add_many, args=(state, rank, 20000)) for rank in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert state.frames.value == 1000.0 + 3 * 20000 * 4.0  # resumed frames plus every worker's, exactly
    assert state.episodes.value == 7 + 3 * 20000
    assert state.nonfinite.value == 3


def test_a_restarted_worker_continues_its_rank():
    ctx = mp.get_context("spawn")
    state = RunState(ctx, 2)
    for _ in range(2):  # the first process of rank 1, then its replacement
        p = ctx.Process(target=add_many, args=(state, 1, 10))
        p.start()
        p.join(120)
    assert state.frames.value == 80.0 and state.episodes.value == 20
