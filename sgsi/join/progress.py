"""Progress of a long query: a line on stderr once it runs past :data:`AFTER` seconds.

The share of the work done is read off the join's stack: at each level, the
rows of its input chunk that the pieces before the current one held, and the
current piece's part (:meth:`Progress.at`); deeper levels refine the share of
the levels above (``p0 + w0 * (p1 + w1 * (p2 + ...))``). It is an estimate:
pieces of equal rows need not take equal time.
"""

from __future__ import annotations

import math
import sys
import time

#: Seconds a query runs before its first progress line.
AFTER = 2.0
#: Seconds between two lines.
EVERY = 2.0


class Progress:
    """Where one query is; ``report(line)`` gets a line of text at most every :data:`EVERY`
    seconds once the query has run :data:`AFTER` seconds (None: no report)."""

    def __init__(self, report=None, what="rows"):
        self.report = report
        self.what = what
        self.start = time.monotonic()
        self.next = self.start + AFTER
        self.levels = []                # [(share before the current unit, the unit's share)]
        self.rows = 0                   # rows (or matches) so far
        self.lines = 0
        self._since, self._last = self.start, 0.0     # the pace's start (a replan starts it again)

    def at(self, level, before, width):
        """Level ``level`` starts a unit: ``before`` of its input done, the unit ``width`` of it."""
        del self.levels[level:]
        self.levels.append((before, width))
        self.tick()

    def add(self, rows):
        self.rows += rows
        self.tick()

    def share(self) -> float:
        done, scale = 0.0, 1.0
        for before, width in self.levels:
            done += scale * before
            scale *= width
        return min(done, 1.0)

    def tick(self):
        if self.report is None:
            return
        now = time.monotonic()
        if now < self.next:
            return
        self.next = now + EVERY
        self.lines += 1
        share = self.share()
        if share < self._last:          # planned again: the work starts over
            self._since = now
        self._last = share
        self.report(f"sgsi: {now - self.start:.0f} s, {_done(share)}{_left(now - self._since, share)}, "
                    f"{self.rows:,} {self.what} so far")


def stderr_line(line):
    """A progress line on stderr."""
    print(line, file=sys.stderr, flush=True)


def reporter(progress):
    """The ``report`` of a query's ``progress`` option: True (the default) writes to stderr,
    False or None nothing, a callable gets each line."""
    if progress is True:
        return stderr_line
    if progress is None or progress is False:
        return None
    if callable(progress):
        return progress
    from ..errors import SgsiError
    raise SgsiError(f"progress must be True, False or a callable taking a line of text, not "
                    f"{type(progress).__name__}")


def _done(share):
    """The share done in words: whole percent from 10%, two figures below (a hard query's first
    hours may be a thousandth of a percent)."""
    pct = 100 * share
    if pct == 0:
        return "about 0% done"
    if pct < 1e-4:
        return "under 0.0001% done"
    return f"about {pct:.2g}% done" if pct < 1 else f"about {pct:.{1 if pct < 10 else 0}f}% done"


def left_by_share(done: float, share: float) -> float:
    """What is left of work (or time) ``done`` over ``share`` of it by the progress (infinite where
    the share is 0): a join's work left (the order search's gate; sampled estimates of a plan's
    order ran 1.7-4.5x over the work of whole yeast queries, this one is measured), and the time
    left a progress line reports."""
    return done * (1.0 - share) / share if share > 0 else math.inf


def _left(seconds, share):
    """The clause ", some TIME left at this pace": what is left at the pace of ``share`` done in
    ``seconds`` (nothing before a line's interval, or with nothing done)."""
    if share <= 0 or share >= 1.0 or seconds < EVERY:
        return ""
    return f", some {_duration(left_by_share(seconds, share))} left at this pace"


def _duration(seconds):
    """``seconds`` in the unit a person reads: s, min, h or days."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    days = seconds / 86400
    return f"{days:.1f} days" if days < 10 else f"{days:,.0f} days"
