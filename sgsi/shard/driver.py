"""The driver of a sharded query: split it, submit a task a shard, sum the counts or read the parts.

The query is planned here (on the CPU, with refined candidate sets) and cut
into about :data:`TASKS_PER_WORKER` tasks a worker (:func:`sgsi.join.shard.split_rows`),
the most costly first; a worker gets the next task when it ends one, so that
no task waits behind a heavy one while another worker idles. A cancel, an error in a task, or a
match reader closed early stops the query's tasks (:meth:`_Run.stop`),
closes the cluster started here and removes the scratch directory.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
import weakref

import pyarrow as pa

from .. import budget as budget_mod
from ..errors import Cancelled, SgsiError
from ..join.backends import search_gate
from ..join.progress import Progress, reporter
from ..join.query import Query, cancel_check
from . import parts, tasks
from .cluster import check_device, connect, gpu_wanted, need_dask, slots
from .whole import Either, Whole

#: Tasks a worker gets, by device (the next goes to the first worker free): each task
#: pays a plan and a chain of join steps of its own (and on a GPU, their launches).
TASKS_PER_WORKER = {"cpu": 4, "gpu": 2}
#: Estimated join work (entries and rows, the driver's sample of its plan) under which a query of CPU
#: tasks runs in this process instead: about a tenth of a second of one core (yeast's sparse_8_22,
#: 2^20: 0.09 s; hprd-hard's, 2^14-2^17: 0.04 s), under the tasks' own fixed costs (0.1-0.3 s on 2
#: workers, with a local cluster's 1-3 s start where ``workers`` starts one).
LOCAL_WORK = 1 << 21
#: Seconds between two looks at the caller's cancel and the tasks.
POLL = 0.02
#: Whether a sharded query's tasks of its plan's own order start while its driver searches another,
#: by device. GPU tasks leave the driver's CPU to the search (one H200, six yeast queries of 1-10 s:
#: the two whose search kept the order 0.14 and 0.35 s faster, the four that switched as before).
#: CPU tasks share the cores with it: on 2 cores, 16 yeast queries of 0.3-4 s, side by side: the
#: 8 that keep the order 1.09x, the 2 that switch after their first order 0.72x, the 6 decided at
#: it (the same path either way) 0.95x: 0.98x in all.
EARLY = {"cpu": False, "gpu": True}
#: Whether a count counts its whole query as one task on a running cluster while the driver splits
#: it, the answer where it ends first (:mod:`.whole`), by device. CPU: its workers idle during the
#: split (:data:`EARLY`); GPU: they run the plan's own tasks.
WHOLE = {"cpu": True, "gpu": False}
#: Tasks of a query submitted a worker thread at once; the rest wait in the driver, the most
#: costly first (:meth:`_Run.submit`).
IN_FLIGHT = 1


def count(graph, pattern, *, device, memory_budget, injective, cancel, progress, workers, scheduler, client):
    """The number of matches, summed over the shards' tasks (see :meth:`sgsi.Graph.count`)."""
    check_device(device)                        # before any work (the workers may have the GPUs)
    need_dask()                                 # whether the query turns out small or not
    check = cancel_check(cancel)
    either = Either(cancel)         # the caller's cancel, or the whole query's task answered
    planner = Query(graph.store, graph._backends, pattern, "cpu", memory_budget, injective, cancel=either,
                    progress=False)
    kind = task_device(device)
    options = _options(device, memory_budget, injective, workers, scheduler, client)
    total, stats = 0, {}
    with contextlib.ExitStack() as stack:
        head = (os.path.abspath(graph.path), planner.pattern, options)
        run = _Tasks(stack, (workers, scheduler, client, device), tasks.count, head)
        whole = None
        if WHOLE[kind] and workers is None:         # a running cluster's, not one started for the query
            whole = Whole(run.client(), head)
            stack.callback(whole.stop)
            either.also = whole.answered
        start = time.perf_counter()
        try:
            shards = _split(planner, kind, workers or slots(run.client()), count=True, ahead=run)
        except Cancelled:
            if whole is None or not whole.answered():
                raise
        if whole is not None and whole.answered():
            n, task_stats = whole.result()
            graph._publish({**task_stats, "tasks": 1, "whole_task": 1,
                            "split_s": round(time.perf_counter() - start, 4)})      # the split it cut short
            return n
        if whole is not None:
            whole.stop()
        if shards and _small(planner, kind):
            stack.close()
            return _here(graph, planner, memory_budget, injective, cancel, progress).count()
        if shards:
            run.keep(shards, planner.split_sets)
            for _shard, (n, task_stats) in run.run.completed(check, Progress(reporter(progress), "matches")):
                total += n
                _merge(stats, task_stats)
    graph._publish({**stats, "tasks": len(shards), "symmetry": planner.split_symmetry,     # not sums
                    **_split_stats(planner), "early_tasks": run.early, "whole_task": 0})
    return total


def match(graph, pattern, *, device, memory_budget, injective, limit, cancel, progress, workers, scheduler, client):
    """(a RecordBatchReader of the shards' rows, a list receiving the error that ended it): as
    :meth:`sgsi.join.query.Query.stream`, read from the tasks' parts as they finish."""
    check_device(device)
    need_dask()
    check = cancel_check(cancel)
    planner = Query(graph.store, graph._backends, pattern, "cpu", memory_budget, injective, cancel=cancel,
                    progress=False)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise SgsiError(f"limit must be a non-negative integer, got {limit!r}")
    schema = pa.schema([(name, graph.store.vertex_id_type) for name in planner.pattern.output_names])
    failure = []
    if limit == 0 or not schema.names:
        return _reader(schema, iter(())), failure
    kind = task_device(device)
    options = _options(device, memory_budget, injective, workers, scheduler, client)
    stack = contextlib.ExitStack()
    try:
        run = _Tasks(stack, (workers, scheduler, client, device), tasks.match,
                     (os.path.abspath(graph.path), planner.pattern, options), (limit,))
        shards = _split(planner, kind, workers or slots(run.client()), ahead=run)
        if not shards or _small(planner, kind):
            stack.close()
            if shards == []:
                return _reader(schema, iter(())), failure
            return _here(graph, planner, memory_budget, injective, cancel, progress).stream(limit)
        run.keep(shards, planner.split_sets)
    except BaseException:
        stack.close()
        raise
    end = _Once(stack.close)
    batches = _batches(run.run, limit, failure, check, Progress(reporter(progress), "rows"), end,
                       lambda stats: graph._publish({**stats, "tasks": len(shards), "symmetry": 1,
                                                     **_split_stats(planner), "early_tasks": run.early}))
    weakref.finalize(batches, end)          # a reader dropped unread ends the query too
    return _reader(schema, batches), failure


def _batches(run, limit, failure, check, progress, end, publish):
    """The parts' batches as their tasks finish, at most ``limit`` rows; ``end()`` at the end."""
    left = limit
    stats = {}
    try:
        for shard, (n, task_stats) in run.completed(check, progress):
            _merge(stats, task_stats)
            target = parts.path(run.directory, shard.index)
            if n and not os.path.exists(target):
                raise SgsiError(f"task {shard.index} wrote its rows where this process does not see them: with "
                                f"workers on other hosts, set SGSI_SHARD_DIR to a directory that they and this "
                                f"process all see")
            for batch in parts.read(target) if n else ():
                if check is not None:
                    check()
                if left is not None and batch.num_rows > left:
                    batch = batch.slice(0, left)
                progress.add(batch.num_rows)
                yield batch
                if left is not None:
                    left -= batch.num_rows
                    if left == 0:
                        return
            with contextlib.suppress(OSError):
                os.remove(target)                   # read: its disk goes back now
    except Exception as e:
        failure.append(e)
        raise
    finally:
        try:
            publish(stats)
        finally:
            end()


def _reader(schema, batches):
    reader = pa.RecordBatchReader.from_batches(schema, batches)
    from_stream = getattr(pa.RecordBatchReader, "from_stream", None)
    return from_stream(reader) if from_stream is not None else reader    # close() ends the generator at once


def task_device(device) -> str:
    """``cpu`` or ``gpu``: where the tasks of ``device`` run (``auto``: the GPU where this host has one)."""
    from ..join.backends import gpu_available
    return "gpu" if device == "gpu" or (device == "auto" and gpu_available()) else "cpu"


def _small(planner, kind) -> bool:
    """Whether the query is run in this process, not as tasks: CPU tasks, and the driver's sampled
    estimate of its plan's join work under :data:`LOCAL_WORK` (none without the order search's
    sampling, ``SGSI_REORDER=0``)."""
    search = planner.split_search
    return kind == "cpu" and search is not None and search["planned_cost"] < LOCAL_WORK


def _here(graph, planner, memory_budget, injective, cancel, progress):
    """The query as one process runs it, here; its stats say ``tasks`` 0 and the driver's part."""
    return Query(graph.store, graph._backends, planner.pattern, "cpu", memory_budget, injective, cancel,
                 lambda stats: graph._publish({**stats, "tasks": 0, "whole_task": 0,
                                                "split_s": round(planner.split_seconds, 4)}),
                 progress)


def _split(planner, kind, workers, count=False, ahead=None):
    """The shards of ``planner``'s query for ``workers`` worker threads running ``kind`` tasks:
    :data:`TASKS_PER_WORKER` a worker, the driver's order search gated by :func:`_gate`, the
    plan's own shards given to ``ahead`` (a :class:`_Tasks`) while it runs where :data:`EARLY`."""
    return planner.shards(TASKS_PER_WORKER[kind] * workers, count=count, workers=workers, gate=_gate(kind, workers),
                          ahead=ahead if EARLY[kind] else None)


def _gate(kind, workers):
    """``reorder_work`` and ``search_work`` of the driver's order search for ``workers`` workers on
    ``kind``: the tasks' backend's, the search's cost times the workers (the join work a switch
    saves is shared by them, the search's time is not; one process searches where twice
    ``search_work`` is left)."""
    reorder_work, search_work = search_gate(kind)
    return reorder_work, search_work * max(1, workers)


def _options(device, memory_budget, injective, workers, scheduler, client):
    """The tasks' Query options. A local CPU cluster's workers share the host's default budget."""
    if memory_budget is None and workers and scheduler is None and client is None and not gpu_wanted(device):
        memory_budget = max(budget_mod.MIN_BUDGET, budget_mod.default_budget() // workers)
    return {"device": device, "memory_budget": memory_budget, "injective": injective}


def _split_stats(planner):
    """The driver's part of a sharded query's stats: whether it switched order, its seconds before
    the tasks (``split_s``: plan, order search, split) and its order search's stats."""
    return {"reordered": planner.split_reordered, "split_s": round(planner.split_seconds, 4),
            "order_search": planner.split_search}


def _merge(stats, more):
    """Add the task's stats ``more`` into ``stats`` (numbers summed; others: the last one)."""
    for k, v in more.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            stats[k] = stats.get(k, 0) + v
        else:
            stats[k] = v


class _Once:
    """``fn()`` the first time it is called; nothing after."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self):
        fn, self.fn = self.fn, None
        if fn is not None:
            fn()


class _Tasks:
    """The cluster of a sharded query and its run of tasks (:class:`_Run`), each begun on first use
    and ended with ``stack``. Where the driver searches the query's order for GPU tasks
    (:data:`EARLY`) and its first order found leaves the search undecided, the tasks of the plan's
    own order run meanwhile (:meth:`start`): where the search keeps that order, the rest of it
    costs no time before the tasks; they stop as soon as it finds an order it switches to
    (:meth:`drop`), and that order's run (:meth:`keep`)."""

    def __init__(self, stack, where, fn, head, tail=()):
        self.stack, self.where = stack, where       # where: (workers, scheduler, client, device)
        self.fn, self.head, self.tail = fn, head, tail
        self._client = None
        self.run = None                 # the _Run of ``shards``
        self.shards = None
        self.early = 0                  # 1: tasks began before the order search ended

    def client(self):
        if self._client is None:
            self._client = self.stack.enter_context(connect(*self.where))
            self.stack.callback(self._end)          # the run ends before its client closes
        return self._client

    def start(self, shards, sets):
        """The shards of the plan's own order, while the driver searches another."""
        self.early = 1
        self._start(shards, sets)

    def drop(self):
        """The search found an order to switch to: the plan's tasks stop now."""
        self._end()
        self.shards = None

    def keep(self, shards, sets):
        """The query's final ``shards``: those running already, or run now instead."""
        if shards is not self.shards:
            self._start(shards, sets)

    def _start(self, shards, sets):
        client = self.client()
        self._end()
        self.run, self.shards = _Run(client), shards
        self.run.submit(shards, self.fn, self.head, self.tail, sets=sets)

    def _end(self):
        run, self.run = self.run, None
        if run is not None:
            run.__exit__(None, None, None)


class _Run:
    """The tasks of one sharded query on a Dask client, and its scratch directory (:mod:`.parts`)."""

    def __init__(self, client):
        self.client = client
        self.name = f"sgsi-{uuid.uuid4().hex[:12]}"
        self.futures = {}                   # Future -> its Shard (those submitted)
        self.directory = parts.new_dir()
        self._lock = threading.Lock()
        self._stopped = False
        self._total = 0
        self._held = None                   # the scattered sets (a Future)
        self._finished = None               # as_completed of the submitted tasks

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.stop()
            with contextlib.suppress(Exception):        # the memory the tasks kept goes back
                self.client.run(tasks.release, wait=False)
        finally:
            self._forget()
            parts.remove(self.directory)
        return False

    def _forget(self):
        """Drop every Future of the query, so that the workers let its sets and results go now:
        the tasks' done callbacks hold this run, and a cycle waits for the garbage collector."""
        with self._lock:
            finished, held = self._finished, self._held
            self._finished = self._held = self._launch = None
            self._pending = []
        if finished is not None:
            finished.clear()
        if held is not None:
            with contextlib.suppress(Exception):
                held.release()

    def submit(self, shards, fn, head, tail=(), sets=None):
        """``fn(*head, shard, query name, directory, *tail, sets=sets)`` a shard, the first shards
        first, at most :data:`IN_FLIGHT` a worker thread at once: the next goes when one ends, to
        the worker that is free (:meth:`_next`); ``sets`` is sent to every worker once
        (``Client.scatter``), not with each task."""
        from distributed import as_completed

        held = self.client.scatter(sets, broadcast=True, hash=False) if sets is not None else None
        self._held = held
        total = len(shards)

        def launch(rank, shard):
            return self.client.submit(fn, *head, shard, self.name, self.directory, *tail, sets=held,
                                      key=f"{self.name}-{shard.index}", priority=total - rank, pure=False)
        self._launch, self._total = launch, total
        self._cost = sum(s.cost for s in shards) or 1.0
        self._pending = list(enumerate(shards))[::-1]       # popped from the end: the first shard first
        self._finished = as_completed([], loop=self.client.loop)
        for _ in range(min(total, IN_FLIGHT * slots(self.client))):
            self._next()

    def _next(self, _ended=None):
        """Submit the next shard, if any is left and the query goes on (a task's end calls it, on
        Dask's callback thread). A worker holds no task queued behind a running one: Dask gave
        each worker two of a query's four tasks at once, and one GPU idled 2.9 s of a 6.8 s query
        while the other ran its second task after a long first."""
        with self._lock:
            if self._stopped or not self._pending:
                return
            rank, shard = self._pending.pop()
            future = self._launch(rank, shard)
            self.futures[future] = shard
            finished = self._finished
        finished.add(future)
        future.add_done_callback(self._next)

    def completed(self, check, progress):
        """(shard, result) of each task as it finishes; a task's error is raised here, as is
        Cancelled once ``check`` says stop (looked at every :data:`POLL` s)."""
        done, seen = 0.0, 0
        while seen < self._total:
            if check is not None:
                check()
            ready = self._finished.next_batch(block=False)
            if not ready:
                progress.tick()
                time.sleep(POLL)
            for f in ready:
                value = f.result()              # the task's error, raised
                with self._lock:
                    shard = self.futures[f]
                if value[0] is None:            # stopped on its worker while this run was not
                    raise Cancelled(f"task {shard.index} of the query was stopped on its worker (its scratch "
                                    f"directory {self.directory} went away?)")
                seen += 1
                done += shard.cost
                progress.at(0, done / self._cost, 0.0)
                yield shard, value

    def stop(self):
        """Stop the tasks not finished, at their next check: the marker goes (the tasks that see
        this directory) and every worker is told (``tasks.cancel``, for those that do not); the
        tasks not submitted are dropped. Idempotent."""
        with self._lock:
            self._stopped = True
            running = [f for f in self.futures if not f.done()]
            self.futures = {}
        tasks.stop(self.client, self.name, self.directory, running)
