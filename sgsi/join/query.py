"""One query, from its pattern to its end: what ``Graph``, the command line and SQL run.

A :class:`Query` loads the pattern, resolves the budget once (at or above the
store's floor, :func:`memory_floor`), plans on the filtered candidate sets with
a refined plan for the engine to switch to (replanning), runs the engine with
cancellation checks between its units of work (:class:`_Watched`), runs the
query again on half its budget where its work outgrew the memory
(:class:`~sgsi.errors.MemoryShortage`), and on every path (result, error,
cancel, a stream closed early) hands the backend back with what the query took
released (``backend.end``).
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from dataclasses import replace

import pyarrow as pa

from .. import budget as budget_mod
from ..errors import BudgetError, Cancelled, MemoryShortage, PatternError, SgsiError
from ..pattern import load_pattern
from .backends import get_backend
from .backends.base import WATCH
from . import ordering, symmetry
from .engine import Engine
from .plan import REFINE_ROUNDS, make_plan
from .progress import Progress, left_by_share, reporter
from .shard import SplitSets, kept_to_end, split, split_rows

#: The most vertices a pattern may have. The engine runs one join step per
#: pattern vertex, nested (depth first), and plans in time quadratic in the
#: pattern's size; far larger patterns are refused with a PatternError
#: rather than exhausting the stack or the clock.
MAX_PATTERN_VERTICES = 256
#: Whether counts break the pattern's symmetry (:mod:`.symmetry`); False: every embedding joined.
SYMMETRY = os.environ.get("SGSI_SYMMETRY", "1") != "0"
#: Whether a heavy query searches its join order on samples (:mod:`.ordering`); False: Algorithm 1's.
REORDER = os.environ.get("SGSI_REORDER", "1") != "0"

#: Bytes the floor holds for one partial match and its step (beside two segments).
PARTIAL_MATCH_BYTES = 4096


def memory_floor(store) -> int:
    """The least memory budget a query of ``store`` runs at: two of its segments and one partial
    match's step (:data:`PARTIAL_MATCH_BYTES`), and never under :data:`~sgsi.budget.MIN_BUDGET`."""
    return max(budget_mod.MIN_BUDGET, 2 * store.max_segment_bytes + PARTIAL_MATCH_BYTES)


def load(pattern):
    """The :class:`~sgsi.pattern.Pattern` of ``pattern`` (text, a Pattern, or a query file)."""
    pat = load_pattern(pattern)
    if len(pat.vertices) > MAX_PATTERN_VERTICES:
        raise PatternError(f"the pattern has {len(pat.vertices):,} vertices; sgsi matches patterns of at most "
                           f"{MAX_PATTERN_VERTICES} vertices")
    return pat


def with_columns(pattern, why):
    """:func:`load` of ``pattern``, or a PatternError where it names no vertex: its rows would have
    no columns (``why``: the error's end, what instead), raised before any work."""
    pat = load(pattern)
    if not pat.output_names:
        raise PatternError(f"the pattern names no vertex, so {why}")
    return pat


class HeavyAnchor(SgsiError):
    """An anchored count has joined past its backend's ``reorder_work`` (once refined) while it
    excludes earlier edges, whose vertices it joins for their filters: its delta counts it
    another way (:func:`sgsi.join.delta._unpinned`)."""


class Backends:
    """The backends of one open store: at most one idle backend a device, reused by the next
    query (its caches survive), and one more for each query running beside another."""

    def __init__(self):
        self._lock = threading.Lock()
        self._idle = {}         # device -> a backend no query uses now

    def take(self, device):
        with self._lock:
            backend = self._idle.pop(device, None)
        if backend is None:
            backend = get_backend(device)
        backend.stats = dict.fromkeys(backend.stats, 0)
        return backend

    def give_back(self, device, backend, failed, keep=False):
        """The query on ``backend`` ended: what it took goes back (``backend.end``; ``keep``:
        its free memory stays for the next query, until :meth:`release`)."""
        backend.end(failed, keep)
        with self._lock:
            self._idle.setdefault(device, backend)

    def release(self):
        """The free memory kept by the queries given back with ``keep`` goes back."""
        with self._lock:
            idle = list(self._idle.values())
        for backend in idle:
            backend.release()

    def clear(self):
        with self._lock:
            self._idle.clear()


class _Early(ordering.Ahead):
    """A split plan's own (shards, sets), made by ``make()`` and handed to the driver's
    ``ahead.start`` during its order search (:meth:`Query.shards`): ``split`` once made."""

    def __init__(self, make, ahead):
        self.make, self.ahead, self.split = make, ahead, None

    def start(self):
        self.split = self.make()
        self.ahead.start(*self.split)

    def drop(self):
        self.ahead.drop()


class Query:
    """One count or match of ``pattern`` over ``store``; see the module's docstring.

    ``publish(stats)`` receives the query's stats when it ends well (and for a stream, when it
    ends at all). ``shard``: a :class:`~sgsi.join.shard.Shard`, the part of the query to run.
    ``anchor``: a :class:`~sgsi.join.delta.Anchor`, the anchored query of an incremental match.
    ``keep_memory``: the free memory of a query that ends well stays for the next one, until
    ``backends.release()`` (a sharded query's tasks on one worker)."""

    def __init__(self, store, backends, pattern, device="auto", memory_budget=None, injective=True,
                 cancel=None, publish=None, progress=True, shard=None, shard_sets=None, anchor=None,
                 keep_memory=False):
        self.store, self.backends = store, backends
        self.shard = shard              # a Shard: this query is one task of a sharded one
        self.shard_sets = shard_sets    # its driver's refined candidate sets (SplitSets), or None
        self.split_sets = None          # shards(): the refined sets the query was split on
        self.split_symmetry = 1         # shards() of a count: the |H| its tasks multiply by
        self.split_reordered = 0        # shards(): 1 where the plan split is on a searched order
        self.split_seconds = 0.0        # shards(): its seconds (plan, order search, split)
        self.split_search = None        # shards(): the order search's stats, where one ran
        self.anchor = anchor            # an Anchor: this query is one of an incremental match's
        self.pattern = load(pattern)
        self.check = cancel_check(cancel)
        self.report = reporter(progress)
        self.device, self.memory_budget, self.injective = device, memory_budget, injective
        self.publish = publish or (lambda stats: None)
        self.keep_memory = keep_memory

    # -- count ------------------------------------------------------------------------

    def count(self) -> int:
        return self._on_backend(self._count)

    def _on_backend(self, fn):
        """``fn(backend)`` on a backend taken for this query, given back after (as failed, where
        ``fn`` raised)."""
        backend = self.backends.take(self.device)
        failed = True
        try:
            out = fn(backend)
            failed = False
            return out
        except BaseException as e:
            drop_frames(e)
            raise
        finally:
            self.backends.give_back(self.device, backend, failed, self.keep_memory)

    def _count(self, backend):
        self.progress = Progress(self.report, "matches")
        budget = self._begin(backend)
        halved = 0
        while True:
            try:
                engine = None
                self.progress.rows = 0
                engine = self._engine(backend, budget, count=True)
                with backend.measuring_memory():
                    n = self._guard(backend.run, engine.count)
                break
            except MemoryShortage as e:
                engine = None
                budget = self._halved(backend, budget, e)
                halved += 1
        self._publish(backend, engine, budget_halved=halved)
        return n

    # -- match ------------------------------------------------------------------------

    def stream(self, limit=None):
        """The embeddings as a :class:`pyarrow.RecordBatchReader` (one column per named vertex,
        original ids), and a list that receives the exception that ended the stream, if any
        (pyarrow's stream interface carries none: :func:`reraise_stream_error`)."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise SgsiError(f"limit must be a non-negative integer, got {limit!r}")
        self.progress = Progress(self.report, "rows")
        backend = self.backends.take(self.device)
        try:
            budget = self._begin(backend)
            while True:
                try:
                    engine = self._engine(backend, budget)
                    break
                except MemoryShortage as e:
                    budget = self._halved(backend, budget, e)
        except BaseException as e:
            drop_frames(e)
            self.backends.give_back(self.device, backend, failed=True)
            raise
        schema = pa.schema([(name, self.store.vertex_id_type) for name in self.pattern.output_names])
        failure = []
        reader = pa.RecordBatchReader.from_batches(schema, self._batches(backend, engine, budget, limit, schema,
                                                                         failure))
        # A reader made by from_batches keeps its generator alive after close();
        # seen through the C stream interface, close() releases it at once, and
        # with it the engine and every array it holds.
        from_stream = getattr(pa.RecordBatchReader, "from_stream", None)
        if from_stream is not None:
            reader = from_stream(reader)
        return reader, failure

    def _batches(self, backend, engine, budget, limit, schema, failure):
        """The record batches of :meth:`stream`; the query runs again on half the budget where
        its work outgrew the memory before any batch left."""
        cols = self.pattern.output_vertices
        left = limit
        failed = True
        sent = False
        chunks = chunk = None
        try:
            if left == 0 or not cols:
                failed = False
                return
            chunks = engine.chunks()
            while True:
                try:
                    chunk = self._guard(backend.run, next, chunks, None)
                except MemoryShortage as e:
                    if sent:
                        raise BudgetError(f"{e}; rows have been returned already, so the query cannot be run "
                                          f"again on a smaller budget: use a larger memory budget") from None
                    chunks = engine = None
                    budget = self._halved(backend, budget, e)
                    engine = self._engine(backend, budget)
                    chunks = engine.chunks()
                    continue
                if chunk is None:
                    break
                if self.check is not None:
                    self.check()
                n = int(next(iter(chunk.values())).size)
                if left is not None and n > left:
                    chunk = {u: c[:left] for u, c in chunk.items()}
                    n = left
                sent = True
                yield pa.record_batch([self.store.vertex_ids(chunk[u]) for u in cols], schema=schema)
                if left is not None:
                    left -= n
                    if left == 0:
                        break
            failed = False
        except BaseException as e:
            drop_frames(e)
            failure.append(e)
            raise
        finally:   # also when stopped early: by the limit, or the reader closed
            try:
                self._publish(backend, engine, settled=not failed)
            finally:        # this frame outlives the stream in the error's traceback: let its arrays go
                chunks = chunk = engine = None
                self.backends.give_back(self.device, backend, failed, self.keep_memory)

    # -- a sharded query's split ---------------------------------------------------------

    def shards(self, tasks, count=False, workers=None, gate=None, ahead=None):
        """About ``tasks`` :class:`~sgsi.join.shard.Shard` of this query, the most costly first
        (:func:`~sgsi.join.shard.split_rows` or :func:`~sgsi.join.shard.split` of its refined
        plan), after the budget check; none where a benchmark query's label matches nothing.
        The refined plan's candidate sets are left in ``split_sets``, for the tasks; ``workers``:
        those that will run them (partial matches are cut in rounds of one task a worker);
        ``gate``: (``reorder_work``, ``search_work``) of the backend they run on, which gate the
        order search as that backend gates its own (default: this query's).

        ``ahead``: where the order search's first order leaves it undecided, ``ahead.start(shards,
        sets)`` is given the shards of the plan's own order and their sets (the driver runs them
        while the search goes on), and ``ahead.drop()`` is called if the search then finds an order
        it will take; those very shards are returned where the search keeps the order."""
        def split_on(backend):
            start = time.perf_counter()
            budget = self._begin(backend)
            plan = self._guard(backend.run, lambda: make_plan(self.store, self.pattern, backend,
                                                              injective=self.injective,
                                                              refine_rounds=REFINE_ROUNDS, factor_leaves=count))
            if plan.empty:
                return []
            watched = backend if self.check is None else _Watched(backend, self.check)
            early = ahead and _Early(lambda: self._split_shards(backend, plan, budget, tasks, workers, count), ahead)
            searched = self._guard(backend.run, lambda: self._split_order(watched, budget, plan, count, gate,
                                                                          early))
            out, self.split_sets = (early.split if early and early.split and searched is plan else
                                    self._split_shards(backend, searched, budget, tasks, workers, count))
            self.split_seconds = time.perf_counter() - start
            return out
        return self._on_backend(split_on)

    def _split_shards(self, backend, plan, budget, tasks, workers, count):
        """(the shards of ``plan``, its candidate sets as :class:`SplitSets`); a count's tasks each
        join one embedding of every orbit of the plan's symmetry group (its |H| in ``split_symmetry``)."""
        sets = SplitSets(tuple(backend.to_host(b) for b in plan.candidates))
        out = self._guard(backend.run, lambda: self._split(backend, plan, budget, tasks, workers, count))
        if count and SYMMETRY:              # every task joins one embedding of each orbit
            given = symmetry.of_plan(plan)
            self.split_symmetry = given[1]
            out = [replace(s, symmetry=(tuple(given[0]), given[1])) for s in out]
        return out, sets

    def candidates(self):
        """The filtered candidate bitsets of the pattern's vertices on the host (unrefined: the
        signature filter's and degree tests'), after the budget check; None where a benchmark
        query's label matches nothing."""
        def sets_on(backend):
            self._begin(backend)
            plan = self._guard(backend.run, lambda: make_plan(self.store, self.pattern, backend,
                                                              injective=self.injective, refine_rounds=0))
            return None if plan.empty else [backend.to_host(b) for b in plan.candidates]
        return self._on_backend(sets_on)

    def _split(self, backend, plan, budget, tasks, workers, count=False):
        """By the partial matches of the first vertices where they cut well (a count's grouped by
        the vertices it carries to its end), else by candidate ranges."""
        def prefix(depth, seed):
            return Engine(self.store, plan, backend, budget, seed=seed).prefix(depth)
        out = split_rows(plan, prefix, tasks, workers, kept_to_end(plan) if count else ())
        return split(self.store, plan, backend, tasks) if out is None else out

    # -- the parts --------------------------------------------------------------------

    def _begin(self, backend):
        """The query's budget on ``backend``, at or above the store's floor."""
        budget = backend.begin(self.store, self.memory_budget)
        floor = memory_floor(self.store)
        if budget < floor:
            raise BudgetError(f"memory budget of {budget_mod.format_size(budget)} is below this store's floor of "
                              f"{budget_mod.format_size(floor)} (two segments and a partial match); use a larger "
                              f"budget or rebuild the store with a smaller --memory-budget")
        return budget

    def _engine(self, backend, budget, count=False):
        """An :class:`Engine` on the plan of the filtered candidate sets, which switches to the
        plan of the refined ones (``replan``) if its join outgrows them. A count takes the
        pattern's leaves and last vertices as a product (``make_plan``'s ``factor_leaves``)."""
        if self.check is not None:
            self.check()
            backend = _Watched(backend, self.check)
        pat, store, injective = self.pattern, self.store, self.injective
        shard = self.shard
        if self.anchor is not None:
            # Refined only where the join outgrows its sets (refinement reads the lists of every
            # candidate); a count factors the vertices its row filters do not read.
            anchor = self.anchor
            broken = (lambda p: symmetry.broken(p, given=anchor.symmetry)) if count else (lambda p: p)
            plan = self._guard(backend.run, lambda: broken(anchor.plan(store, pat, backend, injective, count)))
            refined = lambda: broken(anchor.plan(store, pat, backend, injective, count,  # noqa: E731
                                                 refine_from=plan.candidates))

            def reorder_anchored(refined_plan, done, share):
                """As ``reorder`` below: an order that keeps the anchor's pairs first (its seed)
                and joins the vertices its filters read; a count that excludes earlier edges is
                given back to its delta instead (:class:`HeavyAnchor`)."""
                if count and anchor.exclude and anchor.unpin:
                    raise HeavyAnchor()
                seed = [(u, backend.to_host(ids)) for u, ids in anchor.seed]
                choice = self._reorder(backend, budget, refined_plan, count, done, share, seed, anchor.pinned)
                if not choice.switch:
                    return None, choice.stats
                return broken(anchor.plan(store, pat, backend, injective, count, refine_from=refined_plan.candidates,
                                          order=choice.order)), choice.stats
            return Engine(store, plan, backend, budget, replan=refined, progress=self.progress, seed=anchor.seed,
                          reorder=reorder_anchored if REORDER and anchor.u != anchor.w else None)
        if shard is not None:
            # A shard of a query its driver split on refined sets: on those sets where it has them
            # (restricted, refined again where the shard cuts candidate ranges), else refined at
            # once (a restricted first plan would switch late, its work limit scaled to its sets).
            sets = None if self.shard_sets is None else [backend.to_device(b) for b in self.shard_sets.bits]
            rounds = 0 if sets is not None and shard.seed else REFINE_ROUNDS
            plan = self._guard(backend.run, lambda: make_plan(store, pat, backend, injective=injective,
                                                              refine_rounds=rounds, factor_leaves=count,
                                                              filtered=sets, shard=shard))
            if count:
                plan = symmetry.broken(plan, given=shard.symmetry)
            return Engine(store, plan, backend, budget, progress=self.progress, seed=shard.seed)
        # A count joins one embedding of each orbit of the pattern's automorphisms (symmetry.py).
        broken = symmetry.broken if count and SYMMETRY else (lambda p: p)
        plan = self._guard(backend.run, lambda: broken(make_plan(store, pat, backend, injective=injective,
                                                                 refine_rounds=0, factor_leaves=count)))
        refined = lambda: broken(make_plan(store, pat, backend, injective=injective,  # noqa: E731
                                           refine_rounds=REFINE_ROUNDS, factor_leaves=count,
                                           filtered=plan.candidates))       # not filtered again

        def reorder(refined_plan, done, share):
            """The refined plan on the order a sampled search finds, where that pays for starting
            again (:meth:`_reorder`)."""
            choice = self._reorder(backend, budget, refined_plan, count, done, share)
            if not choice.switch:
                return None, choice.stats
            return broken(self._on_order(backend, refined_plan, choice.order, count)), choice.stats
        return Engine(store, plan, backend, budget, replan=refined, progress=self.progress,
                      reorder=reorder if REORDER else None)

    def _reorder(self, backend, budget, plan, count, done, share, seed=(), keep=()):
        """:func:`ordering.choose`'s :class:`~sgsi.join.ordering.Choice` for a join of ``plan``
        that did ``done`` over the ``share`` of it (its progress); none is searched where what is
        left of the plan's work is under twice ``search_work`` (what the search itself takes): by
        ``done`` and ``share`` (no sample drawn), or by the plan's sampled estimate."""
        least = 2 * backend.search_work
        left = left_by_share(done, share)
        if left <= least:
            return ordering.Choice(plan.order, done + left, done + left, 0, 0.0, False)
        return self._search_order(backend, budget, plan, count, done, least=least, seed=seed, keep=keep)

    def _split_order(self, backend, budget, plan, count, gate=None, ahead=None):
        """A sharded query's refined ``plan`` on the order a sampled search finds, where its own
        order is estimated past ``reorder_work`` and twice ``search_work`` (``gate``; default
        ``backend``'s), and the cheapest order searched at a ``GAIN``-th of it or less
        (:func:`ordering.choose`, with ``ahead``): its tasks join in the order of the plan split."""
        if not REORDER:
            return plan
        reorder_work, search_work = gate or (backend.reorder_work, backend.search_work)
        choice = self._search_order(backend, budget, plan, count, 0, least=max(reorder_work, 2 * search_work),
                                    ahead=ahead)
        self.split_search = choice.stats
        if not choice.switch:
            return plan
        self.split_reordered = 1
        return self._on_order(backend, plan, choice.order, count)

    def _on_order(self, backend, plan, order, count):
        """Refined ``plan`` on ``order``: its sets, not refined again, factored and stepped anew."""
        return make_plan(self.store, self.pattern, backend, injective=self.injective, refine_rounds=0,
                         factor_leaves=count, filtered=plan.candidates[:len(self.pattern.vertices)], order=order)

    def _search_order(self, backend, budget, plan, count, done, least=0, seed=(), keep=(), ahead=None):
        """:func:`ordering.choose` for ``plan``, on the CPU: its sampled steps are small, and a
        step costs the CPU a fraction of the launches and reads it costs a GPU. ``seed``, ``keep``,
        ``ahead``: ``choose``'s (an anchored query's costs are not divided by a symmetry group)."""
        symmetric = count and SYMMETRY and not seed and not keep
        if backend.name == "cpu":
            return ordering.choose(self.store, backend, plan, budget // 4, count, done, least, symmetric, seed, keep,
                                   ahead)
        cpu = self.backends.take("cpu")
        failed = True
        try:
            cpu_budget = cpu.begin(self.store, None)
            sampler = cpu if self.check is None else _Watched(cpu, self.check)
            host = replace(plan, candidates=[backend.to_host(b) for b in plan.candidates])
            out = ordering.choose(self.store, sampler, host, min(budget, cpu_budget) // 4, count, done, least,
                                  symmetric, seed, keep, ahead)
            failed = False
            return out
        finally:
            self.backends.give_back("cpu", cpu, failed)

    def _halved(self, backend, budget, shortage):
        """The budget to run again on after ``shortage``: half of ``budget``, where that is
        still at or above the store's floor (else the shortage is raised as a BudgetError)."""
        drop_frames(shortage)               # its traceback holds the failed run's arrays
        floor = memory_floor(self.store)
        if budget // 2 < floor:
            raise BudgetError(f"{shortage}, even at {budget_mod.format_size(budget)}, the least this store's "
                              f"floor of {budget_mod.format_size(floor)} allows halving to; use a larger memory "
                              f"budget") from None
        backend.recover()
        return budget // 2

    def _guard(self, fn, *args, **kwargs):
        """Run ``fn``; an unexpected error is checked against the store's checksums, so a
        damaged file is reported as a StoreError naming it rather than as a crash; the host
        running out of memory is a :class:`~sgsi.errors.MemoryShortage`."""
        try:
            return fn(*args, **kwargs)
        except (SgsiError, RecursionError):
            raise
        except MemoryError as e:            # the host's memory: as the GPU pool's limit
            raise MemoryShortage(f"the query needed more host memory than there is: {e}") from None
        except Exception as e:
            damage = self.store.find_damage()
            if damage is not None:
                raise damage from e
            raise

    def _publish(self, backend, engine, settled=True, **extra):
        """Hand the query's stats to ``publish``; ``settled``: it ended well, so the backend can
        wait for its work (the GPU's copy timings are complete then)."""
        if settled:
            backend.synchronize()
        self.publish({"device": backend.name, **(engine.stats if engine is not None else {}), **backend.stats,
                      **extra})


def reraise_stream_error(failure, exc):
    """Raise the exception that ended a :meth:`Query.stream` in place of pyarrow's copy."""
    if failure and isinstance(exc, pa.ArrowException):
        raise failure[0] from None


def drop_frames(exc):
    """Clear the locals of the finished frames in the tracebacks of ``exc`` and the exceptions
    behind it: an exception kept by the caller must not keep the query's arrays (device memory).
    sgsi's own errors (a cancel, a budget, a bad pattern) lose the engine's part of their
    traceback, which says nothing to a user; other errors keep their frames, cleared."""
    seen = set()
    first = exc
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__
    if isinstance(first, SgsiError):
        first.__traceback__ = None


def cancel_asked(cancel):
    """A function saying whether ``cancel`` (an Event, or a callable) says stop; None for None."""
    if cancel is None:
        return None
    if hasattr(cancel, "is_set"):
        return cancel.is_set
    if callable(cancel):
        return cancel
    raise SgsiError(f"cancel must be a threading.Event or a callable returning True to stop, "
                    f"not {type(cancel).__name__}")


def cancel_check(cancel):
    """A function raising Cancelled once ``cancel`` (an Event, or a callable) says stop; None for None."""
    test = cancel_asked(cancel)
    if test is None:
        return None

    def check():
        if test():
            raise Cancelled("query cancelled")
    return check


def _watched_call(check, fn, args, kwargs):
    """``fn(*args, **kwargs)`` once ``check()`` passed, ``check`` the thread's
    :func:`~sgsi.join.backends.base.cancel_point` test while it runs."""
    check()
    before, WATCH.check = WATCH.check, check
    try:
        return fn(*args, **kwargs)
    finally:
        WATCH.check = before


class _Watched:
    """A backend that checks for cancellation between its units of work.

    Every join step reads its neighbour lists through ``backend.segments()``
    (its later links' too: ``member()`` is given this wrapper to stream them), a
    refinement round is one ``refine_round()`` call, the filter runs in one
    ``candidate_bits()`` or ``candidate_sets()`` call, and the columnar extension one output
    slice per ``extend()`` call (a light piece's, one ``pack_rows()`` call): a
    check at each stops a query within the work of one segment, round or slice. Every other
    method of the backend checks before it runs too: a step over a large piece is a chain of
    array operations of a second or more on the CPU (a 10M-edge graph's 4-cycle: cancels took
    1.5-4.9 s between two segments), and a method's own passes check while it runs
    (:func:`~sgsi.join.backends.base.cancel_point`: on human's queries one CPU call of a count's
    leaves took 1.8 s, a pass of it per conflict column).
    """

    def __init__(self, backend, check):
        object.__setattr__(self, "_backend", backend)
        object.__setattr__(self, "_check", check)

    def __getattr__(self, name):
        attr = getattr(self._backend, name)
        if name.startswith("_") or not callable(attr) or isinstance(attr, type):
            return attr
        check = self._check

        def checked(*args, **kwargs):
            return _watched_call(check, attr, args, kwargs)
        object.__setattr__(self, name, checked)        # found as an attribute from now on
        return checked

    def __setattr__(self, name, value):
        setattr(self._backend, name, value)

    def member(self, *args, **kwargs):                                 # its lists through segments()
        return _watched_call(self._check, self._backend.member, args, dict(kwargs, via=self))

    # The units of work named above (their own frames: a test asks from inside them).
    def refine_round(self, *args, **kwargs):
        return _watched_call(self._check, self._backend.refine_round, args, kwargs)

    def candidate_bits(self, *args, **kwargs):
        return _watched_call(self._check, self._backend.candidate_bits, args, kwargs)

    def candidate_sets(self, *args, **kwargs):
        return _watched_call(self._check, self._backend.candidate_sets, args, kwargs)

    def extend(self, *args, **kwargs):
        return _watched_call(self._check, self._backend.extend, args, kwargs)

    def pack_rows(self, *args, **kwargs):
        return _watched_call(self._check, self._backend.pack_rows, args, kwargs)

    def segments(self, store, seg_ids):
        self._check()
        for item in self._backend.segments(store, seg_ids):
            yield item
            self._check()


