"""Where a process's time goes: phases summed per process, and their shares between two readings."""

import time

import pytest

from core.timing import PHASES, PhaseClock, phase_split


def test_phases_add_up_what_was_spent_in_them():
    clock = PhaseClock()
    with clock.phase("env"):
        time.sleep(0.02)
    clock.add("learn", 0.5)
    clock.add("learn", 0.25)
    assert clock.seconds["learn"] == 0.75 and 0.02 <= clock.seconds["env"] < 0.2
    assert clock.values() == [clock.seconds[name] for name in PHASES] and len(PHASES) == 7
    with pytest.raises(KeyError):
        clock.add("lunch", 1.0)


def test_the_split_is_each_phases_share_of_the_time_between_two_readings():
    before = dict.fromkeys(PHASES, 1.0)
    after = {**before, "env": 4.0, "learn": 2.0}
    split = phase_split(before, after)
    assert split["env"] == pytest.approx(0.75) and split["learn"] == pytest.approx(0.25) and split["act"] == 0
    assert phase_split(before, before) == {}


def test_acting_splits_the_environments_time_from_the_rest():
    class Envs:
        step_seconds = 1.0

    envs, clock = Envs(), PhaseClock()
    with clock.acting(envs):
        time.sleep(0.05)
        envs.step_seconds += 0.03  # what stepping the environments took inside the stretch
    assert clock.seconds["env"] == pytest.approx(0.03)
    assert 0.015 <= clock.seconds["act"] < 0.2
