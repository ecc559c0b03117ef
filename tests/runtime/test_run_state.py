"""RunState: the counters that all processes share stay exact without locks."""

import multiprocessing as mp

from core.timing import PhaseClock
from runtime.run_state import GAME_RING, RunState


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


def publish_env_seconds(state, slot, seconds):
    clock = PhaseClock()
    clock.add("env", seconds)
    state.publish_phases(slot, clock)
    clock.add("env", seconds)  # cumulative: the row holds the process's total so far
    state.publish_phases(slot, clock)


def test_a_replaced_process_adds_to_its_rows_time():
    """A replaced worker started its row again from 0: the run's phase seconds lost the dead one's, and a share
    measured across the replacement came out negative."""
    ctx = mp.get_context("spawn")
    state = RunState(ctx, 2)
    for seconds in (2.0, 0.5):  # a worker of rank 1, then its replacement
        p = ctx.Process(target=publish_env_seconds, args=(state, 1, seconds))
        p.start()
        p.join(120)
        assert p.exitcode == 0
    assert state.phase_totals()["env"] == 2 * 2.0 + 2 * 0.5


def test_a_restarted_worker_continues_its_rank():
    ctx = mp.get_context("spawn")
    state = RunState(ctx, 2)
    for _ in range(2):  # the first process of rank 1, then its replacement
        p = ctx.Process(target=add_many, args=(state, 1, 10))
        p.start()
        p.join(120)
    assert state.frames.value == 80.0 and state.episodes.value == 20


def test_each_roles_phases_in_its_own_row_and_their_totals():
    state = RunState(mp.get_context("spawn"), 2)
    worker, learner = PhaseClock(), PhaseClock()
    worker.add("env", 2.0)
    worker.add("act", 1.0)
    learner.add("learn", 4.0)
    state.publish_phases(1, worker)
    state.publish_phases(state.learner_slot, learner)
    worker.add("env", 1.0)  # cumulative: publishing again replaces the row, it does not add to it
    state.publish_phases(1, worker)
    totals = state.phase_totals()
    assert (totals["env"], totals["act"], totals["learn"], totals["wait"]) == (3.0, 1.0, 4.0, 0.0)
    assert state.inference_slot == state.learner_slot + 1 == 3


def test_training_games_come_out_once_and_in_frame_order():
    state = RunState(mp.get_context("spawn"), 2)
    read = [0, 0]
    state.frames.add(0, 100)
    state.record_games(0, [(1.0, 10)])
    state.frames.add(1, 100)
    state.record_games(1, [(2.0, 20), (3.0, 30)])
    assert state.new_games(read) == [(1.0, 10, 100.0), (2.0, 20, 200.0), (3.0, 30, 200.0)]
    assert state.new_games(read) == []
    state.record_games(0, [(float(i), i) for i in range(GAME_RING + 5)])  # more than the ring holds: the oldest go
    games = state.new_games(read)
    assert len(games) == GAME_RING and games[0][0] == 5.0 and games[-1][0] == GAME_RING + 4


def test_training_games_are_written_with_their_whole_return(tmp_path):
    """games.csv kept 6 significant digits: a return of 1,234,567 was written 1.23457e+06, and a continuous task's
    -123.4567891 as -123.457."""
    import csv

    from runtime.progress import TrainingGames

    state = RunState(mp.get_context("spawn"), 1)
    state.record_games(0, [(1234567.0, 900), (-123.4567891, 200), (21.0, 50)])
    games = TrainingGames(str(tmp_path / "games.csv"), state, lambda: 1.0, 0.0)
    games.close()
    with open(tmp_path / "games.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert [row[2] for row in rows] == ["1234567", "-123.4567891", "21"]
    assert [float(row[2]) for row in rows] == [1234567.0, -123.4567891, 21.0]


def test_a_games_file_that_cannot_be_written_is_said_once_and_training_goes_on(tmp_path):
    """A full disk while games.csv is written: one message, no exception (it escaped the supervisor's loop and the
    final save never ran); games are counted as read only once written."""
    from runtime.progress import TrainingGames

    state = RunState(mp.get_context("spawn"), 1)
    said = []
    games = TrainingGames("/dev/full", state, lambda: 1.0, 0.0, said.append)  # every write: ENOSPC
    state.record_games(0, [(21.0, 50)])
    games()
    state.record_games(0, [(20.0, 50)])
    games()
    games.close()
    assert len(said) == 1 and "/dev/full cannot be written (No space left on device)" in said[0], said
    state = RunState(mp.get_context("spawn"), 1)
    kept = TrainingGames(str(tmp_path / "games.csv"), state, lambda: 1.0, 0.0, said.append)
    state.record_games(0, [(5.0, 10)])
    read = kept.read
    kept()
    assert kept.read == [1] and read == [0]  # a new list once the rows are written, the old one untouched
    kept.close()
