"""Two ways to one answer in turns (sgsi/join/race.py): the first to end wins, a stopped task
starts again on its path's next turn, the caller's cancel stops the race."""

import threading
import time

import pytest

from sgsi.errors import Cancelled
from sgsi.join import race


def task(seconds, log, name):
    """A task of ``seconds`` that polls ``stop`` as a query does; ``log`` gets (name, ended)."""
    def run(stop):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if stop():
                log.append((name, False))
                raise Cancelled("query cancelled")
            time.sleep(0.001)
        log.append((name, True))
    return run


@pytest.fixture
def fast(monkeypatch):
    monkeypatch.setattr(race, "FIRST_SLICE", 0.02)


def test_a_path_done_in_its_first_slice_runs_alone(monkeypatch):
    monkeypatch.setattr(race, "FIRST_SLICE", 1.0)
    log = []
    a = race.Path("a", [task(0.001, log, "a1"), task(0.001, log, "a2")])
    b = race.Path("b", [task(0.001, log, "b1")])
    path, rounds = race.first_done([a, b])
    assert path is a and rounds == 0 and log == [("a1", True), ("a2", True)]


def test_the_cheaper_path_wins_and_stopped_tasks_start_again(fast):
    log = []
    slow = race.Path("slow", [task(10.0, log, "s")])                  # stopped every turn
    cheap = race.Path("cheap", [task(0.015, log, "c1"), task(0.015, log, "c2"), task(0.015, log, "c3")])
    path, rounds = race.first_done([slow, cheap])
    assert path is cheap and rounds >= 1
    assert ("s", True) not in log and log.count(("s", False)) == rounds + 1
    assert [x for x in log if x[0] != "s"][-1] == ("c3", True)
    assert [x for x in log if x == ("c1", True)] == [("c1", True)]    # finished once, kept


def test_a_path_not_stoppable_ends_its_turn_between_tasks(fast):
    log = []
    whole = race.Path("whole", [task(0.03, log, f"w{i}") for i in range(3)], stoppable=False)
    never = race.Path("never", [task(10.0, log, "n")])
    path, _rounds = race.first_done([whole, never])
    assert path is whole and [x for x in log if x[0] != "n"] == [(f"w{i}", True) for i in range(3)]


def test_a_path_whose_task_needs_longer_skips_its_turns(fast):
    """A stopped task that says it needs 100 s gets no turn shorter than 50 s."""
    log = []
    runs = []

    def long(stop):
        runs.append(1)
        try:
            task(100.0, log, "long")(stop)
        except Cancelled as e:
            e.seconds = 100.0
            raise
    whole = race.Path("whole", [task(0.03, log, f"w{i}") for i in range(4)], stoppable=False)
    path, rounds = race.first_done([whole, race.Path("long", [long])])
    assert path is whole and rounds >= 1 and len(runs) == 1


def test_a_task_may_give_back_tasks_in_its_place(fast):
    log = []

    def split(stop):
        log.append(("split", True))
        return [task(0.001, log, "x"), task(0.001, log, "y")]
    path, _ = race.first_done([race.Path("a", [split, task(0.001, log, "z")])])
    assert path.done == 4 and [n for n, _ok in log] == ["split", "x", "y", "z"]


def test_the_callers_cancel_stops_the_race(fast):
    ev = threading.Event()
    threading.Timer(0.1, ev.set).start()
    log = []
    t = time.monotonic()
    with pytest.raises(Cancelled):
        race.first_done([race.Path("a", [task(10.0, log, "a")]), race.Path("b", [task(10.0, log, "b")])], ev)
    assert time.monotonic() - t < 2.0
