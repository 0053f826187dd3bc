"""Two ways to one answer, run in turns until one of them ends.

A :class:`Path` is a list of tasks; a turn runs its tasks one after the
other for a slice of time, stopping a task at the slice's end (as a cancel
does) to start it again on the path's next turn. Each round gives every path
a turn, the slices growing by :data:`GROWTH` from :data:`FIRST_SLICE`; the
first path to finish all its tasks gives the answer. Finished tasks are
kept, so a path loses only the task its slice stopped (a path whose tasks
are not stoppable ends its turn between two tasks, losing none): where one
way is much cheaper, the race costs a few times that way's time. The first
path is the preferred one: where it ends within its first slice the others
never start, and they skip a turn where its tasks so far say it will end
within that turn. A stopped task may say how long it needs (its Cancelled's
``seconds``, from its progress): its path skips the turns under half that.
"""

from __future__ import annotations

import time

from ..errors import Cancelled
from .query import cancel_asked

#: Seconds of the first path's first turn (a turn of each path a round, each round's slices
#: :data:`GROWTH` times the last's).
FIRST_SLICE = 0.25
GROWTH = 2.0


class Path:
    """``tasks``: callables ``task(stop)`` that run a query whose cancel is ``stop`` (a callable
    that says when the turn is over) and keep its result; a task may return tasks to run in its
    place (a list), else None."""

    def __init__(self, name, tasks, stoppable=True):
        self.name, self.stoppable = name, stoppable      # not stoppable: a turn ends between tasks
        self.todo = list(tasks)[::-1]
        self.done, self.seconds = 0, 0.0       # tasks finished; seconds of its turns
        self.needs = 0.0                        # seconds its stopped task said it needs

    def left(self):
        """Seconds its tasks left would take at the pace of those finished (infinite before one)."""
        return self.seconds / self.done * len(self.todo) if self.done else float("inf")


def first_done(paths, cancel=None):
    """(the first of ``paths`` to run all of its tasks, the rounds before its last). ``cancel``: the
    caller's (a ``threading.Event`` or a callable): it stops the race with :class:`Cancelled`."""
    asked = cancel_asked(cancel)
    seconds, rounds = FIRST_SLICE, 0
    while True:
        for k, path in enumerate(paths):
            if k and paths[0].left() < seconds:
                continue                    # the preferred path is about to end: no turn
            if path.needs > 2 * seconds:
                continue                    # its task would not end within this turn
            if _turn(path, seconds, asked):
                return path, rounds
        seconds *= GROWTH
        rounds += 1


def _turn(path, seconds, asked):
    """Run ``path``'s tasks for ``seconds``; whether it has none left."""
    start = time.monotonic()
    end = start + seconds

    def stop():
        return (asked is not None and bool(asked())) or (path.stoppable and time.monotonic() > end)

    try:
        while path.todo:
            if time.monotonic() > end:
                return False
            try:
                more = path.todo[-1](stop)
            except Cancelled as e:
                if asked is not None and asked():
                    raise
                path.needs = getattr(e, "seconds", 0.0)
                return False                # the slice is over: this task again next turn
            path.todo.pop()
            path.needs = 0.0
            path.done += 1
            if more:
                path.todo += list(more)[::-1]
        return True
    finally:
        path.seconds += time.monotonic() - start
