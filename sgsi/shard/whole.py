"""A sharded count's whole query as one task, run on a worker while the driver splits it.

The driver plans the query, may search its join order and splits it before any task starts
(0.05-0.6 s on yeast's queries on 2 CPU workers); a count that one process finishes in that time
(merging makes some counts of a billion rows short, and one process searches no order where it
ends first) then waits for it, and for tasks that each plan again. Meanwhile the workers idle:
one of them counts the whole query as one process would. If it ends before the split, its count
is the answer and the split stops (:class:`Either` is the driver's cancel); else it is stopped
when the shards are submitted, its worker free for them within a few milliseconds.
"""

from __future__ import annotations

import uuid

from . import parts, tasks
from ..join.query import cancel_asked


class Either:
    """A cancel (a callable) that says stop when the caller's ``cancel`` does, or ``also()``."""

    def __init__(self, cancel):
        self.asked = cancel_asked(cancel) or (lambda: False)
        self.also = lambda: False

    def __call__(self):
        return self.asked() or self.also()


class Whole:
    """The count task of the whole query on ``client``: ``head`` are :func:`tasks.count`'s
    arguments before its shard (path, pattern, options)."""

    def __init__(self, client, head):
        self.client = client
        self.name = f"sgsi-whole-{uuid.uuid4().hex[:12]}"
        self.directory = parts.new_dir()
        self.future = client.submit(tasks.count, *head, None, self.name, self.directory,
                                    key=self.name, priority=1 << 20, pure=False)
        self.value = None

    def answered(self) -> bool:
        """Whether the task ended with a count (an error or a stop leaves the query to its shards)."""
        if self.value is None and self.future is not None and self.future.status == "finished":
            value = self.future.result()
            self.value = value if value[0] is not None else None
        return self.value is not None

    def result(self):
        """(count, the task's stats), where :meth:`answered`."""
        return self.value

    def stop(self):
        """Stop the task at its next check, forget it, remove its directory. Idempotent."""
        future, self.future = self.future, None
        if future is None:
            return
        tasks.stop(self.client, self.name, self.directory, [] if future.done() else [future])
        future.release()
        parts.remove(self.directory)
