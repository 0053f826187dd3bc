"""Progress lines (sgsi/join/progress.py): the share done in words and the time left at the pace so far."""

from types import SimpleNamespace

from sgsi.join import progress
from sgsi.join.progress import Progress


def test_the_share_is_finer_below_ten_percent():
    assert progress._done(0.0) == "about 0% done"
    assert progress._done(3e-7) == "under 0.0001% done"
    assert progress._done(1.46e-5) == "about 0.0015% done"
    assert progress._done(0.00031) == "about 0.031% done"
    assert progress._done(0.0123) == "about 1.2% done"
    assert progress._done(0.5) == "about 50% done"


def test_the_time_left_at_the_pace_so_far():
    assert progress._left(12, 0.0) == "" and progress._left(1, 0.5) == ""     # nothing done, or too soon
    assert progress._left(10, 0.5) == ", some 10 s left at this pace"
    assert progress._left(30, 0.01) == ", some 50 min left at this pace"
    assert progress._left(60, 0.01) == ", some 1.6 h left at this pace"
    assert progress._left(3600, 0.01) == ", some 4.1 days left at this pace"
    assert progress._left(15, 1.46e-5) == ", some 12 days left at this pace"
    assert progress._left(10, 1.0) == ""


def test_a_replan_starts_the_pace_again(monkeypatch):
    """Where the share drops (the query planned again), the time left counts from the drop."""
    now = [100.0]
    monkeypatch.setattr(progress, "time", SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(progress, "AFTER", 0.0)
    monkeypatch.setattr(progress, "EVERY", 0.0)
    lines = []
    p = Progress(lines.append, "matches")
    now[0] = 110.0
    p.at(0, 0.5, 0.5)                                   # half done in 10 s
    now[0] = 200.0
    p.at(0, 0.1, 0.1)                                   # started over: a tenth done at once
    now[0] = 210.0
    p.at(0, 0.2, 0.1)                                   # a fifth done 10 s after the drop
    assert lines[0] == "sgsi: 10 s, about 50% done, some 10 s left at this pace, 0 matches so far"
    assert lines[2] == "sgsi: 110 s, about 20% done, some 40 s left at this pace, 0 matches so far"
