"""The join engine: one vertex-at-a-time step per pattern vertex (§5, §6).

Each step extends a chunk of the intermediate table M' (columnar: one int32
array per matched pattern vertex) by the next pattern vertex u:

1. **Prealloc-Combine** (Algorithm 3). e0 is the linking edge whose label is
   least frequent; F is the exclusive prefix sum of |N(v'_i, l0)| over the
   rows, and one buffer GBA of F[|M'|] entries holds buf_i = GBA[F_i:F_i+1].
2. **First edge** (Algorithm 4). The segments of e0's partition are
   streamed in order; for the rows whose vertex lies in a segment, N_x(v, l0)
   is read through the segment's PCSR, tested against the C(u) bitset, the
   row's own vertices are subtracted (injective matching), and the survivors
   are appended to buf_i. A row is done once its vertex is behind the
   segment; the stream stops when every row is done.
3. **Other linking edges** (Algorithm 5). Each buffer entry is kept only if
   it is in N(v'_j, l_j), found segment by segment. Where the lists of a
   later link fit the cap too, they are gathered like the first link's, and
   each tuple takes its entries from the shortest of its gathered lists and
   tests them against the others (bitsets over the ranks of the lists'
   values): on skewed graphs a hub on the first link no longer makes every
   tuple that shares it probe its whole list.
4. **Columnar extension** (Algorithm 6). A prefix sum of num(buf_i) sizes the
   new table; each old column is repeated num(buf_i) times and the buffer
   entries become the new column (``backend.extend``: one gather on the CPU,
   the Prealloc-Combine expansion kernels on the GPU). The join runs once:
   no count-then-join.

A light piece (few first-link entries in all, no long list: ``LIGHT_MAX_LIST``)
skips the distinct tuples: each row streams its own first-link list into its
own buffer, C(u) and the row's vertices tested on the fly, the buffers are
packed, and the other links tested as in 3. On the GPU that is one kernel per
segment and one to pack, where the tuples took dozens of small operations.

Chunks are bounded by the memory budget, which the steps share: a chunk
whose GBA would overflow is split into pieces (rows sharing a first-link
vertex stay together, so its list is streamed once), and each piece's output
leaves in slices that are carried through the remaining steps depth first,
on an explicit stack. Memory stays bounded whatever the number of matches
and however long the pattern. In count-only mode the last step counts
without materialising.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..partition import pcsr
from .backend import (distinct_index, exclusive_sum, exclusive_total, host_ints, host_reductions, nonzero_index,
                      pair_key, prefix_sum, row_numbers, run_starts, runs, scatter_equal, take_columns, take_values)
from .plan import REFINE_ROUNDS, Link, QueryPlan, Step, refine_cost
from .stream import degree_index, neighbour_lists, segments_of, segments_spanning

#: Work (buffer entries plus rows) after which a query on unrefined candidate
#: sets is planned again with refinement: at least this much, this many times
#: the total size of the candidate sets, and as much as the neighbour-list
#: entries refinement would read in its rounds. Work past that is a rent paid
#: for not refining (the ski-rental rule: it costs at most about what the
#: refinement would have): on graphs where the join's work stays near the size
#: of the lists the first plan runs to its end and refinement costs nothing;
#: where the join explodes (yeast, the 100M R-MAT walks) it is refined early.
REPLAN_MIN_WORK = 1 << 16
REPLAN_FACTOR = 8
REPLAN_COST_FACTOR = REFINE_ROUNDS


#: A piece whose rows' first-link lists hold at most ``backend.light_entries`` entries in
#: all (each row counted with its own list, however many rows share a vertex), none longer
#: than ``LIGHT_MAX_LIST``, is joined row by row (``Engine._row_sets``): a handful of
#: operations instead of the distinct tuples' dozens. The lists read again where rows
#: share a vertex cost less than finding the distinct tuples, at that size. A step of
#: several links is light below ``SHORTEST_LIST_MIN_PROBES`` entries only, where its tuples
#: would not probe from their shortest lists.
LIGHT_MAX_LIST = 1 << 14

#: Entries (from the first link's lists) under which a step does not gather its later
#: links' lists to let each tuple probe from its shortest: the fixed cost of gathering
#: and ranking them is then more than the probes it could save.
SHORTEST_LIST_MIN_PROBES = 1 << 15


class _Replan(Exception):
    """The join outgrew its plan before producing results; plan again."""


class _Eager(Exception):
    """A subtree's sums, added with their bounds unread, came in Python integers: count again,
    each bound read (:meth:`Engine._subtree_counts`)."""


#: Bytes a GBA entry and its bookkeeping take (value, row id, flags).
_GBA_ENTRY_BYTES = 16
#: Bytes of a row's int64 temporaries in a join step (tuple id, degree, offsets, sort order).
_ROW_TEMP_BYTES = 48


@dataclass
class Limits:
    """Chunk sizes derived from the part of the memory budget a join step may use, and capped
    by the backend's slice (``slice_entries``, ``slice_rows``): a step's work between two
    cancellation checks stays short however large the budget."""

    gba_entries: int     # most buffer entries of one piece
    chunk_rows: int      # most rows of one intermediate chunk (before a step)

    @classmethod
    def from_budget(cls, budget: int, width: int, backend=None):
        room = max(budget, 0) // 8
        gba = max(16, room // _GBA_ENTRY_BYTES)
        rows = max(4, room // (4 * max(width, 1) + _ROW_TEMP_BYTES))
        if backend is not None:
            gba, rows = min(gba, backend.slice_entries), min(rows, backend.slice_rows)
        return cls(gba, rows)


class Engine:
    """Runs a :class:`QueryPlan` over a store on one backend."""

    def __init__(self, store, plan: QueryPlan, backend, budget: int, replan=None):
        """``replan()`` gives the refined plan; without it the query runs on ``plan``."""
        self.store, self.plan, self.backend = store, plan, backend
        self.xp = backend.xp
        self.budget = budget
        self._entries = []             # device sums of entries not yet added to stats (no read per step)
        self._stats = {"chunks": 0, "steps": 0, "light_steps": 0, "replanned": 0, "entries": 0,
                       "subtrees_weighted": 0, "leaves_factored": plan.factored,
                       "leaf_groups": _shared_groups(plan), "subtrees": len(plan.subtrees)}
        # Adaptive planning: run on the cheap plan first; if the join's work
        # outgrows the candidate sets by far before any result has left, start
        # again on the plan ``replan()`` gives (refined candidate sets).
        self.replan = replan
        self.work = 0
        self.emitted = False
        self.work_limit = None if replan is None else max(
            REPLAN_MIN_WORK, REPLAN_FACTOR * sum(plan.candidate_counts))
        self.cost_checked = False
        self.counting = False           # a count is running (``_rows_ahead``)

    @property
    def stats(self) -> dict:
        """The query's counters (``entries``: the candidate-set entries the steps found)."""
        if self._entries:
            self._stats["entries"] += sum(host_ints(self.xp, *self._entries))
            self._entries.clear()
        return self._stats

    # -- driving -------------------------------------------------------------------

    def count(self) -> int:
        """Number of embeddings, counted without materialising the last step."""
        while True:
            if self.plan.empty:
                return 0
            try:
                return sum(value for _kind, value in self._run(count_only=True))
            except _Replan:
                self._switch_plan()

    def chunks(self):
        """Yield result chunks: dicts pattern vertex -> int32 dense ids (on the host)."""
        while True:
            if self.plan.empty:
                return
            try:
                for _kind, chunk in self._run(count_only=False):
                    self.emitted = True
                    yield {u: self.backend.to_host(col) for u, col in chunk.items()}
                return
            except _Replan:
                self._switch_plan()

    def _switch_plan(self):
        self.plan = self.replan()
        self._stats["leaves_factored"] = self.plan.factored
        self._stats["leaf_groups"] = _shared_groups(self.plan)
        self._stats["subtrees"] = len(self.plan.subtrees)
        self.replan = None
        self.work_limit = None
        self._stats["replanned"] = 1

    def _run(self, count_only):
        """Depth first over the join steps, driven by an explicit stack.

        ``stack[k]`` yields the chunks that have matched the first k + 1
        pattern vertices; a chunk taken from the top is handed to the next
        step, whose output slices become the new top. Only one output slice
        per step is alive at a time, and the Python stack does not grow with
        the pattern.

        ``held[k]`` is what level k holds while the deeper levels run (its
        chunk, candidate sets and current slice, in bytes); a new step sizes
        its pieces and slices from the budget left over, so the levels
        together stay within the budget however long the pattern, and steps
        under light levels get nearly all of it.
        """
        steps = self.plan.steps
        self.counting = count_only
        # A count carries past step k only the columns that the later steps read.
        keep = [None] * len(steps)
        if count_only:                  # from the last step back: the columns read after step k
            after = _columns_read([], self.plan)
            for k in range(len(steps) - 1, -1, -1):
                keep[k] = set(after)
                after |= _columns_read([steps[k]])
        held = [0]
        stack = [self._roots(self._limits(0), held)]
        while stack:
            chunk = next(stack[-1], None)
            if chunk is None:
                stack.pop()
                held.pop()
                continue
            k = len(stack) - 1
            lim = self._limits(sum(held))
            if k == len(steps) and count_only and self.plan.factored:
                yield ("count", self._count_leaves(chunk, lim))      # the core joined: the rest per row
            elif k == len(steps):
                yield ("count", _n_rows(chunk)) if count_only else ("chunk", chunk)
            elif count_only and not self.plan.factored and k == len(steps) - 1:
                yield ("count", sum(self._count(piece, step_sets, steps[k])
                                    for piece, step_sets in self._pieces_with_sets(chunk, steps[k], lim,
                                                                                   counts=True)))
            else:
                held.append(0)
                stack.append(self._step(chunk, steps[k], lim, held, k + 1, keep[k]))

    def _limits(self, used):
        """Limits of a step when the levels above it hold ``used`` bytes."""
        return Limits.from_budget(self.budget - used, len(self.plan.order), self.backend)

    def _roots(self, lim, held):
        """Chunks of the first pattern vertex's candidates."""
        first = self.plan.order[0]
        ids_all = self.backend.bits_to_ids(self.plan.candidates[first], self.store.n_vertices,
                                           self.plan.candidate_counts[first])
        held[0] = int(ids_all.nbytes)
        rows = lim.chunk_rows
        for a in range(0, int(ids_all.size), rows):
            yield {first: ids_all[a:a + rows]}

    def _step(self, chunk, step: Step, lim, held, level, keep=None):
        """One join step over ``chunk``: its output in slices of about ``chunk_rows`` rows, with
        the columns of the vertices ``keep`` and the new one (None: every column)."""
        take = [u for u in chunk if keep is None or u in keep]       # the columns carried over
        for piece, sets in self._pieces_with_sets(chunk, step, lim, take=take):
            for out in self._extension(piece, sets, step, lim, keep):
                held[level] = _nbytes(chunk) + sets.nbytes + _nbytes(out)
                yield out

    def _pieces_with_sets(self, chunk, step, lim, counts=False, take=None):
        """Each piece of ``chunk`` with its sets; ``counts``: only the sets' sizes are wanted
        (a light piece of one link then counts its rows' entries without writing them).
        ``take``: the columns a light piece of one link takes at its entries' rows as it
        packs them (:attr:`_RowSets.taken`, the extension's output)."""
        for piece, deg, how in self._pieces(chunk, step, lim):
            for sets in self._sets(piece, deg, step, how, lim, counts, take):
                self._stats["chunks"] += 1
                yield piece, sets

    def _pieces(self, chunk, step: Step, lim: Limits):
        """Split a chunk so that each piece's GBA holds at most about ``gba_entries``.

        The GBA holds one buffer per distinct first-link vertex, so rows that
        share that vertex stay in one piece and its list is streamed once. A
        vertex whose list alone exceeds the cap (a hub) is a piece of its own.
        Yields (piece, |N(v, l0)| per row, :class:`_How` its sets are found).
        """
        xp = self.xp
        e0 = step.links[0]
        col = chunk[e0.other]
        n = int(col.size)
        if n == 0:
            return
        self._rows_ahead(n)
        cap = lim.gba_entries
        dense = self._dense_degrees(e0)
        offsets = zeros = None
        if dense is not None:           # the degrees gathered as the rows are summarised
            deg, (total, longest, lo, hi, descents), offsets, zeros = self.backend.piece_degrees(dense, col)
        else:
            deg = self._degrees(e0, col)
            total, longest, lo, hi, descents = self.backend.piece_summary(deg, col)
        # A light step of several links: only where the distinct tuples would not probe
        # from their shortest lists either (SHORTEST_LIST_MIN_PROBES).
        light_max = self.backend.light_entries if len(step.links) == 1 else \
            min(self.backend.light_entries, SHORTEST_LIST_MIN_PROBES - 1)
        light = total <= min(cap, lim.chunk_rows, light_max) and longest <= LIGHT_MAX_LIST
        whole = (_How("light", total, lo, hi, descents == 0, offsets, zeros) if light
                 else _How("tuples", total, lo, hi, descents == 0))
        if total <= cap:                # a light piece is within the cap too
            yield chunk, deg, whole
            return
        distinct = self.backend.distinct_sum(col, deg, (lo, hi))
        if distinct <= cap:             # the GBA holds one buffer per distinct vertex
            yield chunk, deg, whole
            return
        if longest <= cap and 2 * distinct >= total:
            # Rows share few first-link vertices: cut them in their own order (no gather);
            # rows whose buffers start in [k*cap, (k+1)*cap) form piece k.
            cum = prefix_sum(xp, deg)
            bounds = self.backend.to_host(nonzero_index(xp, xp.diff((cum - deg) // cap)) + 1)
            cuts = [0] + [int(b) for b in bounds] + [n]
            for a, b in zip(cuts[:-1], cuts[1:]):
                yield {u: c[a:b] for u, c in chunk.items()}, deg[a:b], _How("tuples")
            return
        # Rows sorted by their first-link vertex; distinct vertices grouped greedily.
        order = self.backend.argsort(col)
        chunk = {u: col[order] for u, col in chunk.items()}
        deg = deg[order]
        _v, vstart, vend = runs(xp, chunk[e0.other])
        vdeg = deg[vstart]
        cum = prefix_sum(xp, vdeg)
        group = (cum - vdeg) // cap
        big = vdeg > cap
        cut = xp.zeros(vdeg.size, dtype=bool)
        cut[1:] = (group[1:] != group[:-1]) | big[1:] | big[:-1]
        starts = self.backend.to_host(nonzero_index(xp, cut))
        vs = [0] + [int(s) for s in starts] + [int(vdeg.size)]
        vstart_h, vend_h = self.backend.to_host(vstart), self.backend.to_host(vend)
        big_h = self.backend.to_host(big)
        for i, j in zip(vs[:-1], vs[1:]):       # one iteration per piece
            a, b = int(vstart_h[i]), int(vend_h[j - 1])
            yield {u: col[a:b] for u, col in chunk.items()}, deg[a:b], _How("hub" if big_h[i] else "tuples")

    # -- one join step -------------------------------------------------------------

    def _dense_degrees(self, link):
        """|N(v, l)| of every vertex where the backend keeps it (the GPU), else None."""
        return self.backend.dense_degrees(self.store, self.store.partition(link.label_id, link.direction))

    def _degrees(self, link, v):
        """|N(v, l)| for each entry of ``v``, from the partition's degree index."""
        xp = self.xp
        store, backend = self.store, self.backend
        p = store.partition(link.label_id, link.direction)
        if v.size == 0 or p.idx_batches.size == 0:
            return xp.zeros(v.shape, dtype=xp.int64)
        dense = self._dense_degrees(link)
        if dense is not None:                   # kept on the device: one gather
            return take_values(xp, dense, v, xp.int64)
        deg = xp.zeros(v.shape, dtype=xp.int64)
        lo, hi = host_reductions(xp, ("min", v), ("max", v))
        b0 = int(np.searchsorted(p.idx_last, lo, "left"))
        b1 = int(np.searchsorted(p.idx_first, hi, "right"))
        for bi in range(b0, b1):      # index batches overlapping the rows' vertices
            verts, d = degree_index(store, backend, p.idx_batches[bi])
            a, b = max(lo, int(p.idx_first[bi])), min(hi, int(p.idx_last[bi]))
            if b - a + 1 <= 8 * int(v.size):
                # Few ids to span: scatter the batch's degrees into a dense range, then gather.
                dense = xp.zeros(b - a + 1, dtype=xp.int64)
                inside = (verts >= a) & (verts <= b)
                dense[verts[inside] - a] = d[inside]
                if a == lo and b == hi:
                    deg = take_values(xp, dense, v - a)
                else:
                    sel = nonzero_index(xp, (v >= a) & (v <= b))
                    deg[sel] = take_values(xp, dense, take_values(xp, v, sel) - a)
                continue
            pos = xp.searchsorted(verts, v)
            pos = xp.minimum(pos, verts.size - 1)
            hit = verts[pos] == v
            deg = xp.where(hit, d[pos].astype(xp.int64), deg)
        return deg

    def _sets(self, piece, deg, step: Step, how, lim: Limits, counts=False, take=None):
        """The candidate set S(t) of each distinct linking tuple t of the piece's rows.

        Rows that map the linking vertices alike share one set: S(t) =
        N(t0, l0) ∩ C(u) ∩ N(t1, l1) ∩ ... is found once, and each row later
        takes S(t) minus its own vertices. Yields one :class:`_Sets`; for a
        hub piece (the rows of one vertex whose list exceeds the cap) the list is
        streamed once and a :class:`_Sets` is yielded each time ``gba_entries``
        of its candidates have been read. A light piece yields its
        :class:`_RowSets` instead.
        """
        if how.way == "light":
            yield self._row_sets(piece, deg, step, lim, how, counts, take)
            return
        if how.way == "tuples":
            yield self._sets_whole(piece, deg, step, lim, how)      # a call: nothing of it stays here
            return
        # One vertex: its candidates in windows of the cap, one pass over its segments. While
        # a window's sets are out, only the current segment and the tuples stay alive here.
        xp, backend, store = self.xp, self.backend, self.store
        cbits = self.plan.candidates[step.vertex]
        tuples_of = _TuplesOf(xp, backend, piece, step)
        p0 = store.partition(step.links[0].label_id, step.links[0].direction)
        cap = lim.gba_entries
        parts, filled = [], 0
        for _lo, _hi, nb, _owner in neighbour_lists(store, backend, p0, tuples_of.d0):
            vals = nb[backend.test_bits(cbits, nb)]
            while vals.size:
                take = min(cap - filled, int(vals.size))
                parts.append(vals[:take].copy())
                filled, vals = filled + take, vals[take:]
                if filled == cap:
                    yield self._window_sets(tuples_of, parts, step, lim)
                    filled = 0
        if filled:
            yield self._window_sets(tuples_of, parts, step, lim)

    def _window_sets(self, t, parts, step, lim):
        """Sets of a hub piece from one window of the hub's candidates (``parts``, emptied)."""
        xp = self.xp
        gba = xp.concatenate(parts)
        parts.clear()
        n = int(gba.size)
        lists = _Lists(t.tuple_d, xp.zeros(1, xp.int64), xp.asarray([n]), gba, n)
        return self._finish(t.row_tuple, t.tuples, [lists] + [None] * (len(step.links) - 1), step, lim)

    def _sets_whole(self, piece, deg, step: Step, lim: Limits, how=None):
        """Sets of a piece whose GBA fits the cap.

        The lists of the first link's distinct vertices are gathered into the
        GBA; so are those of every other link whose lists fit the cap too
        (``_other_lists``), and each tuple then takes its entries from the
        shortest of its gathered lists and tests them against the others.
        """
        xp, backend = self.xp, self.backend
        t = _TuplesOf(xp, backend, piece, step, how)
        if self._dense_degrees(step.links[0]) is not None:     # every vertex's degree on the device
            d0deg = self._degrees(step.links[0], t.d0)          # a gather
        else:
            d0deg = xp.zeros(int(t.d0.size), dtype=xp.int64)
            row_d = t.row_tuple if t.tuple_d is None else take_values(xp, t.tuple_d, t.row_tuple)
            scatter_equal(xp, d0deg, row_d, deg)  # rows carry |N(v'_i, l0)| already
        first = self._gather(step.links[0], t.d0, t.tuple_d, d0deg, step)
        lists = [first]
        if len(step.links) > 1:
            # entries if all come from the first link
            probes, = host_reductions(xp, ("sum", _per_tuple(xp, first.count, first.of_tuple)))
            lists += [self._other_lists(link, col, step, lim, probes)
                      for link, col in zip(step.links[1:], t.tuples[1:])]
        return self._finish(t.row_tuple, t.tuples, lists, step, lim)

    def _other_lists(self, link, col, step, lim, probes):
        """``_gather`` for a later link's vertices, or None where it would not pay: the
        first link's lists give fewer than ``SHORTEST_LIST_MIN_PROBES`` entries, or these
        lists are longer than those entries or than the cap."""
        if probes < SHORTEST_LIST_MIN_PROBES:
            return None
        xp = self.xp
        verts, of_tuple = distinct_index(xp, col)
        deg = self._degrees(link, verts)
        if host_reductions(xp, ("sum", deg))[0] > min(lim.gba_entries, probes):
            return None
        return self._gather(link, verts, of_tuple, deg, step)

    def _gather(self, link, verts, of_tuple, deg, step) -> "_Lists":
        """N(v, l) ∩ C(u) for the sorted distinct vertices ``verts``, streamed over the
        segments of l (Algorithm 4), in Prealloc-Combine: F = exclusive prefix sum of
        |N(v, l)|, one GBA holds every buffer, buf_v += N_x(v, l) ∩ C(u) per segment."""
        xp, backend, store = self.xp, self.backend, self.store
        cbits = self.plan.candidates[step.vertex]
        nd = int(verts.size)
        F, total = exclusive_total(xp, deg)
        gba = xp.empty(total, dtype=xp.int32)
        fill = xp.zeros(nd, dtype=xp.int64)             # candidates written per vertex
        for lo, hi, groups, ci in segments_of(store, backend, store.partition(link.label_id, link.direction), verts):
            backend.gather_segment(groups, ci, verts[lo:hi], cbits, F[lo:hi], fill[lo:hi], gba)
        return _Lists(of_tuple, F, fill, gba, total)

    def _finish(self, row_tuple, tuples, lists, step: Step, lim: Limits):
        """The sets S(t) from the gathered lists (``lists[j]``: link j's, or None where not
        gathered; ``lists[0]`` always is)."""
        xp, backend = self.xp, self.backend
        self._charge(lists[0].reserved + int(row_tuple.size))
        L = lists[0]
        if len(step.links) == 1:
            # One link: each tuple's set is its buffer in the GBA, as it stands (not packed:
            # the extension reads the buffers where they are; _packed when a count needs it).
            tcnt = _per_tuple(xp, L.count, L.of_tuple)
            self._entries.append(tcnt.sum())
            return _Sets(row_tuple, None, L.values, tcnt, _per_tuple(xp, L.start, L.of_tuple))
        got = backend.intersect_lists(lists, max(4096, 4 * lim.gba_entries))
        if got is None:
            # Entries from the first link's lists; the other links are tested by streaming.
            tcnt = _per_tuple(xp, L.count, L.of_tuple)
            etuple, evals = _entries(xp, backend, L.values, _per_tuple(xp, L.start, L.of_tuple), tcnt)
            self._stats["entries"] += int(evals.size)
            untested = list(range(1, len(step.links)))
        else:
            # The gathered lists intersected (each tuple probing its shortest list); the
            # links whose lists were not gathered or not intersected are left to streaming.
            etuple, evals, probes, untested = got
            self._stats["entries"] += probes
            tcnt = backend.bincount(etuple, int(tuples[0].size)) if untested else None

        # Links not tested yet (Algorithm 5): keep the entries found in N(t_j, l_j), streamed.
        if untested:
            cbits = self.plan.candidates[step.vertex]
            alive = _alive(xp, evals, (lambda j=j: self._member(step.links[j], tuples[j], etuple, evals, lim, tcnt,
                                                                  cbits) for j in untested))
            if alive is not None:
                keep = nonzero_index(xp, alive)
                etuple, evals = take_values(xp, etuple, keep), take_values(xp, evals, keep)
        scount = backend.bincount(etuple, int(tuples[0].size))
        return _Sets(row_tuple, etuple, evals, scount, exclusive_sum(xp, scount))

    def _charge(self, work):
        """Count one step's ``work`` (buffer entries plus rows); past the limit, before any
        result has left, the query is planned again (:class:`_Replan`)."""
        self._stats["steps"] += 1
        self.work += work
        self._replan_past(self.work)

    def _replan_past(self, work):
        """:class:`_Replan` if ``work`` is past the limit and no result has left."""
        if self.work_limit is not None and work > self.work_limit and not self.emitted:
            if not self.cost_checked:       # first time over: weigh the refinement's own cost
                self.cost_checked = True
                self.work_limit = max(self.work_limit,
                                      REPLAN_COST_FACTOR * refine_cost(self.store, self.backend, self.plan))
            if work > self.work_limit:
                raise _Replan()

    def _rows_ahead(self, rows):
        """A count about to join ``rows`` rows that a step will charge (a step's rows, or an
        extension's output, which the next step or the factored vertices' counts take):
        :class:`_Replan` now where the charge would pass the limit, before the work that leads
        up to it (on the 3.5e9 walk of the 100M graph, an extension of 93M rows and their
        distinct tuples). A count emits nothing, so the charge would come, and the plan change
        with it; enumerating, a step's later pieces may be charged after results have left, so
        only the charges decide."""
        if self.counting:
            self._replan_past(self.work + rows)

    def _row_sets(self, piece, deg, step: Step, lim: Limits, light: "_How", counts=False, take=None):
        """S(t_i) \\ m_i of each row of a light piece, row by row, with no distinct tuples:
        each row's first-link list is streamed into its own buffer (Prealloc-Combine, F the
        prefix sum of the rows' |N(v'_i, l0)|), keeping the entries in C(u) that are none
        of the row's vertices (``backend.row_lists``); the buffers are packed, and the
        entries not in the row's lists of the other links dropped (Algorithm 5). ``counts``
        and one link: the entries are counted per row, not written (no GBA, no packing).
        ``take`` (names of the piece's columns) and one link: the packing takes those columns
        at the entries' rows too (:attr:`_RowSets.taken`; on the GPU in its launch)."""
        xp, backend, store = self.xp, self.backend, self.store
        n = int(deg.size)
        self._stats["light_steps"] += 1
        counts = counts and len(step.links) == 1
        if counts:                      # nothing written: no buffers, no offsets
            F = gba = None
        else:
            F = light.offsets if light.offsets is not None else exclusive_sum(xp, deg)
            gba = xp.empty(light.total, dtype=xp.int32)
        fill = light.zeros if light.zeros is not None else xp.zeros(n, dtype=xp.int64)
        e0 = step.links[0]
        cbits = self.plan.candidates[step.vertex]
        col = piece[e0.other]
        conflicts = [piece[c] for c in step.conflicts]
        for groups, ci in segments_spanning(store, backend, store.partition(e0.label_id, e0.direction),
                                            light.lo, light.hi):
            backend.row_lists(groups, ci, col, cbits, conflicts, F, fill, gba)
        if counts:
            total, = host_reductions(xp, ("sum", fill))
            self._charge(total + n)
            self._stats["entries"] += total
            return _RowSets(None, None, fill, total)
        taking = take is not None and len(step.links) == 1      # no entry dropped after the packing
        first, evals = backend.pack_rows(gba, F, fill, take=[piece[u] for u in take] if taking else None)
        erow, taken = (None, dict(zip(take, first))) if taking else (first, None)
        # The work charged is what the rows kept, as a piece of tuples charges its distinct
        # vertices' lists: rows that share a vertex read its list again, but that reading
        # is not the join's growth that replanning looks for.
        self._charge(int(evals.size) + n)
        self._stats["entries"] += int(evals.size)
        if len(step.links) > 1 and evals.size:
            alive = _alive(xp, evals, (lambda link=link: self._member(link, piece[link.other], erow, evals, lim, fill,
                                                                       cbits) for link in step.links[1:]))
            keep = nonzero_index(xp, alive)
            erow, evals = take_values(xp, erow, keep), take_values(xp, evals, keep)
            fill = backend.bincount(erow, n)
        return _RowSets(erow, evals, fill, int(evals.size), taken)

    def _count(self, piece, s, step: Step) -> int:
        """Σ_rows |S(t_i)| minus the rows' own vertices found in their S(t_i) (count-only last step)."""
        if isinstance(s, _RowSets):
            return s.total
        return host_reductions(self.xp, ("sum", self._row_counts(piece, s, step)))[0]

    def _row_counts(self, piece, s, step: Step):
        """|S(t_i) \\ m_i| for each row i of the piece (int64)."""
        if isinstance(s, _RowSets):
            return s.count
        if not step.conflicts or s.evals.size == 0:
            return take_values(self.xp, s.scount, s.row_tuple)
        return self.backend.sizes_less_own(s.row_tuple, s.etuple, s.evals, s.sstart, s.scount,
                                           [piece[c] for c in step.conflicts])

    def _count_leaves(self, chunk, lim) -> int:
        """Count-only, the pattern's factored vertices (``QueryPlan.leaf_groups``): Σ over the
        rows of Π over the groups of the group's number of matches for the row, with no row
        of them enumerated.

        Each block's sets come from one join step over the rows (its pieces may cut and
        reorder them: a row-number column rides along to put the counts back); a group of
        one vertex is its |S_u \\ m_row|, a larger one the sum of its inclusion-exclusion
        terms (:class:`~sgsi.join.plan.LeafGroup`).

        The one-vertex blocks go first, those with the most links first: a row where one
        of them is empty counts nothing and is dropped, so the later blocks (the blocks of
        several vertices above all) are found for the rows that count only, as enumerating
        the vertices one by one would prune them.
        """
        xp, backend = self.xp, self.backend
        groups = self.plan.leaf_groups
        rows = dict(chunk)
        rows[_ROW] = row_numbers(xp, _n_rows(chunk))
        sizes = {}                      # (group, block) -> |S_B \ m_row| per row of ``rows``
        blocks = [(gi, bi, step) for gi, g in enumerate(groups) for bi, step in enumerate(g.blocks)]
        one = [b for b in blocks if b[2].vertex in groups[b[0]].leaves]
        one.sort(key=lambda b: -len(b[2].links))
        # Whether every row left counts: each group is one leaf (its matches, its block's size) and
        # each block's rows where it is empty were cut.
        counting = all(len(g.leaves) == 1 for g in groups)
        for gi, bi, step in one + [b for b in blocks if b[2].vertex not in groups[b[0]].leaves]:
            sizes[gi, bi] = self._block_sizes(rows, step, lim)
            if step.vertex in groups[gi].leaves:
                rows, sizes, whole = _rows_kept(xp, rows, sizes, sizes[gi, bi] > 0)
                counting &= whole
                if _n_rows(rows) == 0:
                    return 0
        prod = self._groups_product(groups, sizes)
        subtrees = self.plan.subtrees
        # The last subtree's sums are added in int64 with their bounds left to the final read
        # (``bounds``), and its product with the rest is taken there too (``last``): one read
        # where _add_counts, _exact_product and the sum took one each.
        last, bounds = None, []
        for k, tree in enumerate(subtrees):
            # Rows that count nothing already are not expanded (none is left where ``counting``).
            if prod is not None and not _exact(prod) and not (counting and k == 0):
                rows, kept, _whole = _rows_kept(xp, rows, {0: prod}, prod > 0)
                prod = kept[0]
                if _n_rows(rows) == 0:
                    return 0
            lazy = k == len(subtrees) - 1 and (prod is None or not _exact(prod))
            try:
                value = self._subtree_counts(rows, tree, lim, bounds if lazy else None)
            except _Eager:              # a sum in Python integers: counted again, each bound read
                lazy, bounds = False, []
                value = self._subtree_counts(rows, tree, lim)
            if lazy and prod is not None:
                last = (prod, value)
            else:
                prod = value if prod is None else _exact_product(backend, prod, value)
        factors = [] if last is None else list(last)
        if last is not None:
            prod = last[0] * last[1]
        if not _exact(prod):
            got = host_reductions(xp, *[("max", f) for f in factors], ("max", prod), ("sum", prod),
                                  *[("max", v) for v, _size in bounds])
            f = len(factors)
            top, total = got[f], got[f + 1]
            added = sum(m * size for m, (_v, size) in zip(got[f + 2:], bounds)) < _INT64_SAFE
            if added and math.prod(got[:f]) < _INT64_SAFE and top * _n_rows(rows) < _INT64_SAFE:
                return total                # no sum, product or total could pass int64
            if not added:               # the last subtree's sums may have: counted again, each bound read
                value = self._subtree_counts(rows, subtrees[-1], lim)
                prod = value if last is None else _exact_product(backend, last[0], value)
            elif last is not None:
                prod = _exact_product(backend, *last)
        if not _exact(prod):
            top, total = host_reductions(xp, ("max", prod), ("sum", prod))     # one read
            if top * _n_rows(rows) < _INT64_SAFE:               # the int64 sum did not overflow
                return total
        return int(sum(backend.to_host(prod).tolist()))

    def _groups_product(self, groups, sizes):
        """Π over ``groups`` of their matches per row, from their blocks' ``sizes`` (None: no group)."""
        prod = None
        for gi, group in enumerate(groups):
            value = _group_matches(self.backend, group, [sizes[gi, bi] for bi in range(len(group.blocks))])
            prod = value if prod is None else _exact_product(self.backend, prod, value)
        return prod

    def _subtree_counts(self, rows, tree, lim, bounds=None):
        """Matches of a :class:`~sgsi.join.plan.Subtree` per row of ``rows``: the rows are extended
        by the root (in slices), the root's leaf groups counted per extended row, and their
        product summed back onto the rows. The slices and their groups' sets take half of
        this level's limits, the rows' sets for the root the rest. A subtree of one leaf is
        counted without extending the rows where they fan out far (:meth:`_weighted_rows`).

        ``bounds`` (a list): the sums are added in int64 with no read, each added array and its
        size appended to ``bounds``; they are exact where Σ max · size < ``_INT64_SAFE``, which the
        caller reads. A sum that comes in Python integers raises :class:`_Eager` then."""
        xp = self.xp
        n = _n_rows(rows)
        half = Limits(max(16, lim.gba_entries // 2), max(4, lim.chunk_rows // 2))
        total = xp.zeros(n, dtype=xp.int64)
        exact = None                        # Python integers, once a sum may pass int64
        keep = _columns_read([b for g in tree.groups for b in g.blocks]) | {_ROW}
        weighted = WEIGHTED_SUBTREES and _one_leaf(tree)
        for piece, deg, how in self._pieces(rows, tree.step, half):
            for sets in self._sets(piece, deg, tree.step, how, half):
                self._stats["chunks"] += 1
                # A hub's sets come in windows of its list: the collisions, found per row over the
                # whole list, would be taken off once per window. Its rows are extended.
                value = self._weighted_rows(piece, sets, tree, half) if weighted and how.way != "hub" else None
                if value is not None:
                    exact = self._add_counts(total, exact, piece[_ROW], value, bounds)
                    continue
                for at, value in self._extended_rows(piece, sets, tree, half, keep):
                    exact = self._add_counts(total, exact, at, value, bounds)
        return total if exact is None else exact

    def _add_counts(self, total, exact, at, value, bounds=None):
        """total[at] += value (int64 ``total`` while no sum may pass int64; then the Python integers
        ``exact``, made from ``total`` once); returns ``exact``. With ``bounds`` (a list) the sum is
        added in int64 unread, and (value, its size) appended (see :meth:`_subtree_counts`)."""
        backend = self.backend
        if bounds is not None:
            if _exact(value):
                raise _Eager()
            backend.add_at(total, at, value)
            bounds.append((value, int(at.size)))
            return None
        if exact is None and not _exact(value) and _sum_bound(backend.xp, value, int(at.size), total) < _INT64_SAFE:
            backend.add_at(total, at, value)
            return None
        if exact is None:
            exact = backend.to_host(total).astype(object)
        np.add.at(exact, backend.to_host(at), backend.to_host(value).astype(object))
        return exact

    def _extended_rows(self, piece, sets, tree, lim, keep):
        """The subtree's matches for the rows of one piece of the root's step, by slices of the rows
        extended by the root: yields (the rows' numbers in ``rows``, matches) per slice."""
        xp = self.xp
        for out in self._extension(piece, sets, tree.step, lim, keep):
            at = out[_ROW]
            out = dict(out)
            out[_ROW] = row_numbers(xp, int(at.size))
            sizes = {(gi, bi): self._block_sizes(out, step, lim)
                     for gi, g in enumerate(tree.groups) for bi, step in enumerate(g.blocks)}
            yield at, self._groups_product(tree.groups, sizes)

    def _weighted_rows(self, piece, sets, tree, lim):
        """A one-leaf subtree's matches for the rows of one piece, the rows not extended by the
        root r; None where it would not pay (fewer than ``WEIGHTED_FANOUT`` entries of r's sets
        per row, or ``WEIGHTED_MIN_ENTRIES`` in all) or a sum could pass int64 (the rows are
        extended then).

        With w(v) = |S_l(v)| of the leaf l, less v itself where l may take r's vertex, row m
        counts Σ_{v ∈ S_r(m)} w(v), minus for each vertex c of the core that l may collide
        with the v ∈ S_r(m) whose S_l(v) holds m_c, where m_c is a candidate of l: those are
        a block of r with a link to c for each of l's links (``_block_sizes``). No v is an
        m_c (r's sets leave the row's vertices out, or their candidates do not meet), and
        the m_c differ, so nothing is subtracted twice. w is found for the distinct vertices
        of r's sets only."""
        xp, backend = self.xp, self.backend
        (leaf_step,) = tree.groups[0].blocks
        r = tree.root
        n = _n_rows(piece)
        rowwise = isinstance(sets, _RowSets)
        if rowwise:                             # the rows extended
            entries = sets.total
        else:
            entries, = host_reductions(xp, ("sum", take_values(xp, sets.scount, sets.row_tuple)))
        if entries < max(WEIGHTED_FANOUT * n, WEIGHTED_MIN_ENTRIES):
            return None
        if entries == 0:
            return xp.zeros(n, dtype=xp.int64)
        if rowwise:                             # the rows' own vertices are left out already
            owner, hits = sets.erow, ()
        else:
            sets = _packed(xp, backend, sets)
            owner, hits = sets.etuple, _own_hits(backend, piece, sets, tree.step)
        uniq, idx = distinct_index(xp, sets.evals)
        own = Step(leaf_step.vertex, leaf_step.links, [r] if r in leaf_step.conflicts else [])
        w = self._block_sizes({r: uniq, _ROW: row_numbers(xp, int(uniq.size))}, own, lim)
        if _maxes(xp, w)[0] * entries >= _INT64_SAFE:
            return None
        sums = xp.zeros(n if rowwise else int(sets.scount.size), dtype=xp.int64)
        backend.add_at(sums, owner, take_values(xp, w, idx))          # Σ w over each row's (tuple's) set
        per_row = sums if rowwise else take_values(xp, sums, sets.row_tuple)
        for sel, hit, x in hits:                # a row's own vertex in its set: its weight out
            at = xp.minimum(xp.searchsorted(uniq, x), uniq.size - 1)
            per_row[sel] -= xp.where(hit, take_values(xp, w, at), 0)
        part = {u: col for u, col in piece.items() if u != _ROW}
        part[_ROW] = row_numbers(xp, n)
        for c in leaf_step.conflicts:
            if c == r:
                continue
            links = tree.step.links + [Link(c, k.label_id, _REVERSED[k.direction],
                                            self.store.partition(k.label_id, _REVERSED[k.direction]).edges)
                                       for k in leaf_step.links]
            both = Step(r, sorted(links, key=lambda k: k.edges), tree.step.conflicts)
            shared = self._block_sizes(part, both, lim)
            per_row -= xp.where(backend.test_bits(self.plan.candidates[leaf_step.vertex], piece[c]), shared, 0)
        self._stats["subtrees_weighted"] += 1
        return per_row

    def _block_sizes(self, rows, step, lim):
        """|S_B \\ m_row| of a block's step for each row of ``rows`` (int64), in slices of at most
        ``chunk_rows`` rows (the rows of a weighted subtree, its root's distinct vertices, may
        be more)."""
        xp = self.xp
        n = _n_rows(rows)
        per_row = None
        cap = lim.chunk_rows
        for a in range(0, n, cap):
            part = rows if n <= cap else {u: col[a:a + cap] for u, col in rows.items()}
            for piece, sets in self._pieces_with_sets(part, step, lim, counts=True):
                counts = self._row_counts(piece, sets, step).astype(xp.int64, copy=False)
                if piece is rows:
                    # The rows as they came (their _ROW is 0 .. n - 1): the counts are per row
                    # already, with no zeroed array and scatter. A hub's windows add up.
                    per_row = counts if per_row is None else per_row + counts
                    continue
                if per_row is None:
                    per_row = xp.zeros(n, dtype=xp.int64)
                per_row[piece[_ROW]] += counts      # a hub's rows get their sets in windows: they add up
        return xp.zeros(n, dtype=xp.int64) if per_row is None else per_row

    def _extension(self, piece, s, step: Step, lim: Limits, keep=None):
        """Columnar extension (Algorithm 6), row i taking S(t_i) \\ m_i: yields the new
        table in slices of about ``chunk_rows`` rows. Only the columns of the vertices ``keep``
        (None: all) are carried over, with the new vertex's: a count needs no column that no
        later step reads."""
        xp, backend = self.xp, self.backend
        if isinstance(s, _RowSets):                       # a light piece: its entries are the output
            if s.total:
                out = dict(s.taken) if s.taken is not None else _taken(xp, piece, s.erow, keep)
                out[step.vertex] = s.evals
                yield out
            return
        per_row = take_values(xp, s.scount, s.row_tuple)  # outputs of each row, at most
        n = int(per_row.size)
        total, heaviest = host_reductions(xp, ("sum", per_row), ("max", per_row)) if n else (0, 0)
        if total == 0:
            return
        cum = prefix_sum(xp, per_row)
        self._rows_ahead(total)
        cap = lim.chunk_rows
        if total <= cap:
            cuts = [0, n]
        else:
            bounds = nonzero_index(xp, xp.diff((cum - per_row) // cap)) + 1
            cuts = [0] + [int(b) for b in backend.to_host(bounds)] + [n]
        for a, b in zip(cuts[:-1], cuts[1:]):
            conflict_cols = [piece[c][a:b] for c in step.conflicts]
            sizes = (cum, total, heaviest) if b - a == n else None        # one slice: sized already
            erow, vals = backend.extend(s.row_tuple[a:b], per_row[a:b], s.evals, s.sstart, s.scount, conflict_cols,
                                        sizes)
            if erow.size == 0:
                continue
            out = _taken(xp, {u: col[a:b] for u, col in piece.items() if keep is None or u in keep}, erow)
            out[step.vertex] = vals
            yield out

    def _member(self, link, vcol, erow, evals, lim, ecount, cbits):
        """For each buffer entry (tuple erow, value evals): is it in N(vcol[tuple], l)?
        ``ecount``: entries per tuple; ``cbits``: C(u), which holds every entry. The CPU's
        bitsets (membership) are bounded like the GBA (``gba_entries`` int32 entries); the GPU
        binary-searches each entry in its list (no bitset)."""
        return self.backend.member(self.store, link, vcol, erow, evals, cap=max(4096, 4 * lim.gba_entries),
                                   ecount=ecount, cbits=cbits)


class _TuplesOf:
    """The distinct linking tuples of a piece's rows, and their distinct first-link vertices.
    ``how``: the piece's :class:`_How`, whose range and order of the first-link vertices spare a
    step of one link its own look at them."""

    def __init__(self, xp, backend, piece, step, how=None):
        cols = [piece[k.other] for k in step.links]
        if len(cols) == 1 and how is not None and how.lo is not None:
            if how.ascending:
                self.row_tuple, self.tuples = _tuples_of_sorted(xp, cols, None, cols[0])
            else:
                uniq, self.row_tuple = distinct_index(xp, cols[0], (how.lo, how.hi))
                self.tuples = [uniq]
        else:
            self.row_tuple, self.tuples = _distinct_tuples(xp, backend, cols)
        if len(self.tuples) == 1:             # one link: the tuples are the distinct vertices
            self.d0 = self.tuples[0]
            self.tuple_d = None                 # tuple t's vertex is d0[t]
            return
        self.d0, dstart, dend = runs(xp, self.tuples[0])          # sorted
        self.tuple_d = backend.repeat_index(dend - dstart)         # tuple -> distinct t0


@dataclass
class _Lists:
    """Gathered lists N(v, l) ∩ C(u) of a link's distinct vertices (a GBA)."""

    of_tuple: object     # index of each tuple's linking vertex among the link's distinct vertices
                         # (None: one tuple per vertex, in order)
    start: object        # where each vertex's buffer starts in ``values``
    count: object        # entries written in each buffer
    values: object       # the GBA (slots past a buffer's count are not written)
    reserved: int        # slots the GBA was allocated with


@dataclass
class _Sets:
    """A piece's candidate sets: entries (etuple, evals) sorted by tuple then value. Not packed
    (``etuple`` None): tuple t's set is ``evals[sstart[t] : sstart[t] + scount[t]]``, with gaps
    between the sets (a GBA as gathered); :func:`_packed` packs them."""

    row_tuple: object    # tuple id of each row
    etuple: object       # tuple of each entry (None: not packed)
    evals: object        # vertex of each entry
    scount: object       # entries per tuple
    sstart: object       # first entry of each tuple

    @property
    def nbytes(self):
        return sum(int(a.nbytes) for a in (self.row_tuple, self.etuple, self.evals, self.scount, self.sstart)
                   if a is not None)


def _alive(xp, evals, tests):
    """The AND of the bool arrays the callables ``tests`` give, over the entries ``evals``, each
    called only while some entry is left; None where there are no entries (nothing called)."""
    if not evals.size:
        return None
    alive = None
    for test in tests:
        if alive is not None and not bool(alive.any()):
            break
        hit = test()
        alive = hit if alive is None else alive & hit
    return alive


def _per_tuple(xp, a, of_tuple):
    """``a[of_tuple]``: per tuple, the value of its vertex (``of_tuple`` None: tuple t is vertex t)."""
    return a if of_tuple is None else take_values(xp, a, of_tuple)


def _entries(xp, backend, values, start, count):
    """(tuple of each entry, entries) of the buffers ``values[start[t] : start[t] + count[t]]``
    packed end to end, tuples in order."""
    return backend.repeat_index(count), take_values(xp, values, pcsr.ragged_indices(start, count, xp))


def _one_leaf(tree) -> bool:
    """Whether a :class:`~sgsi.join.plan.Subtree` is its root and one leaf (one group of one block,
    the leaf's links all to the root)."""
    if len(tree.groups) != 1:
        return False
    g = tree.groups[0]
    return len(g.leaves) == 1 and len(g.blocks) == 1 and all(k.other == tree.root for k in g.blocks[0].links)


def _own_hits(backend, piece, s, step):
    """``backend.own_hits`` of the conflicts of ``step`` (the vertices of the rows that may be in
    their sets) in ``s``, packed."""
    return backend.own_hits(s.row_tuple, s.etuple, s.evals, s.sstart, s.scount, [piece[c] for c in step.conflicts])


def _packed(xp, backend, s):
    """``s`` with its sets packed end to end and the tuple of each entry known."""
    if s.etuple is not None:
        return s
    etuple, evals = _entries(xp, backend, s.evals, s.sstart, s.scount)
    return _Sets(s.row_tuple, etuple, evals, s.scount, exclusive_sum(xp, s.scount))


@dataclass
class _RowSets:
    """A light piece's sets, row by row: S(t_i) \\ m_i of each row i, rows in order (only
    their sizes where the entries were counted, not written: ``erow`` and ``evals`` None).
    ``taken``: where the packing took the piece's columns at the entries' rows, those columns
    by vertex (``erow`` None)."""

    erow: object         # row of each entry
    evals: object        # vertex of each entry
    count: object        # entries per row (int64)
    total: int           # entries in all
    taken: dict = None   # columns of the piece at each entry's row (the extension's output)

    @property
    def nbytes(self):
        return sum(int(a.nbytes) for a in (self.erow, self.evals, self.count) if a is not None)


@dataclass
class _How:
    """How a piece's sets are found (``Engine._pieces``): ``way`` is "light" (row by row,
    :meth:`Engine._row_sets`), "tuples" (by its distinct linking tuples) or "hub" (one hub's
    rows, in windows). For a whole chunk also its rows' first-link entries in all, the range of
    their first-link vertices and whether those come in ascending order (None: not known)."""

    way: str
    total: int | None = None
    lo: int | None = None
    hi: int | None = None
    ascending: bool | None = None
    offsets: object = None          # the rows' exclusive prefix sum of their degrees, where found
    zeros: object = None            # int64 zeros a row (for a light step's fill), where written with offsets


#: Whether a subtree of one leaf is counted from its root's sets and weights, not by extending
#: the rows by the root (:meth:`Engine._weighted_rows`; off only to compare the two), for the
#: pieces whose rows have at least ``WEIGHTED_FANOUT`` entries in the root's sets on average and
#: ``WEIGHTED_MIN_ENTRIES`` in all: under that, extending the rows costs less than finding the
#: weights and the collisions (on the CPU's 10M-edge walks: 1.18x slower at 8e5 entries and 3.5
#: per row, 0.69x at 2.4e7 entries and 3 per row).
WEIGHTED_SUBTREES = True
WEIGHTED_FANOUT = 2
WEIGHTED_MIN_ENTRIES = 1 << 22
#: A link's direction seen from its other end.
_REVERSED = {"out": "in", "in": "out", "both": "both"}

#: Key of the row-number column :meth:`Engine._count_leaves` adds to a chunk (not a pattern vertex).
_ROW = -1
#: Products and sums of counts at or past this bound are taken as exact Python integers.
_INT64_SAFE = 1 << 62


def _columns_read(steps, plan=None):
    """The vertices whose columns ``steps`` read (their links' other ends and their conflicts), and
    with ``plan`` those read by its factored vertices' steps (leaf groups, subtrees) too."""
    if plan is not None:
        steps = list(steps) + [b for g in plan.leaf_groups for b in g.blocks] + [t.step for t in plan.subtrees] + [
            b for t in plan.subtrees for g in t.groups for b in g.blocks]
    return {k.other for st in steps for k in st.links} | {c for st in steps for c in st.conflicts}


def _maxes(xp, *arrays) -> list:
    """The max of each of the int64 ``arrays`` (0 where empty), where the backend computes, read in
    one transfer."""
    return host_reductions(xp, *[("max", a) for a in arrays])


def _sum_bound(xp, value, n, total) -> int:
    """A bound on ``total`` after adding ``n`` of ``value``'s entries to it (int64 arrays; one read)."""
    top_value, top_total = _maxes(xp, value, total)
    return top_value * n + top_total


def _shared_groups(plan):
    """Groups of factored vertices that may share data vertices (counted by inclusion-exclusion)."""
    return sum(len(g.leaves) > 1 for g in plan.leaf_groups)


def _exact(a):
    """Whether per-row counts are held as Python integers (past int64) rather than int64."""
    return isinstance(a, np.ndarray) and a.dtype == object


def _exact_product(backend, a, b):
    """a * b per row: int64 while it cannot overflow, else Python integers (on the host)."""
    if not _exact(a) and not _exact(b) and math.prod(_maxes(backend.xp, a, b)) < _INT64_SAFE:
        return a * b
    return backend.to_host(a).astype(object) * backend.to_host(b).astype(object)


def _group_matches(backend, group, sizes):
    """The matches of a leaf group per row: Σ over its terms of μ(π) Π_{B ∈ π} |S_B \\ m_row|
    (``sizes[i]``: |S_B \\ m_row| of block i), exact."""
    if len(group.terms) == 1 and group.terms[0][0] == 1 and len(group.terms[0][1]) == 1:
        return sizes[group.terms[0][1][0]]            # one leaf
    # Each term is at most (largest size)^|leaves| in magnitude and the |μ| sum to |leaves|!.
    bound = max(_maxes(backend.xp, *sizes)) ** len(group.leaves) * math.factorial(len(group.leaves))
    if bound >= _INT64_SAFE:
        sizes = [backend.to_host(x).astype(object) for x in sizes]      # Python integers
    total = 0
    for coef, blocks in group.terms:
        term = sizes[blocks[0]] * coef
        for i in blocks[1:]:
            term = term * sizes[i]
        total = total + term
    return total


def _rows_kept(xp, rows, sizes, keep):
    """``rows`` and the per-row ``sizes`` cut to the rows where ``keep``, when that drops a
    quarter of them or more (a cut copies every column); the row numbers start again at 0. The
    third value: whether ``keep`` holds on every row returned."""
    n = int(keep.size)
    idx = nonzero_index(xp, keep)
    if int(idx.size) > 3 * n // 4:
        return rows, sizes, int(idx.size) == n
    names = [u for u in rows if u != _ROW]
    taken = take_columns(xp, [rows[u] for u in names] + list(sizes.values()), idx)
    rows = dict(zip(names, taken))
    rows[_ROW] = row_numbers(xp, int(idx.size))
    return rows, dict(zip(sizes, taken[len(names):])), True


def _taken(xp, chunk, idx, keep=None):
    """The columns of ``chunk`` (those of the vertices ``keep``; None: all) taken at ``idx``."""
    names = [u for u in chunk if keep is None or u in keep]
    return dict(zip(names, take_columns(xp, [chunk[u] for u in names], idx)))


def _n_rows(chunk):
    return int(next(iter(chunk.values())).size)


def _nbytes(chunk):
    return sum(int(col.nbytes) for col in chunk.values())


def _distinct_tuples(xp, backend, cols):
    """Distinct rows of the columns ``cols``, sorted (first column major).

    Returns (tuple id of each row, list of the tuples' columns). Rows that
    come sorted (one or two columns, compared as one int64 key) need one
    pass. Otherwise each column is replaced by its rank among its distinct
    values (linear passes over the dense id range), and when the product of
    the numbers of distinct values is small the tuples are found by marking
    their combined rank, with no sort; else they are sorted (by a radix sort
    of the ranks where each column has at most 65,536 distinct values).
    """
    n = int(cols[0].size)
    if n == 0:
        return xp.zeros(0, xp.int64), [c[:0] for c in cols]
    key = None
    if len(cols) == 1:
        key = cols[0]
        if n < 2 or bool((key[1:] >= key[:-1]).all()):
            return _tuples_of_sorted(xp, cols, None, key)
    elif len(cols) == 2:
        key, ascending = pair_key(xp, cols[0], cols[1])
        if ascending:
            return _tuples_of_sorted(xp, cols, None, key)
    if len(cols) == 1:
        uniq, rank = distinct_index(xp, cols[0])
        return rank, [uniq]
    ranked = [distinct_index(xp, c) for c in cols]
    space = 1
    for uniq, _rank in ranked:
        space *= int(uniq.size)
    if space <= 4 * n:
        combined = ranked[0][1]
        for uniq, rank in ranked[1:]:
            combined = combined * int(uniq.size) + rank
        ukey, row_tuple = distinct_index(xp, combined)
        tuples = []
        for uniq, _rank in ranked[::-1]:
            tuples.append(take_values(xp, uniq, ukey % int(uniq.size)))
            ukey = ukey // int(uniq.size)
        return row_tuple, tuples[::-1]
    if all(int(uniq.size) <= 1 << 16 for uniq, _rank in ranked):
        # Few distinct values per column: a least-significant-first radix sort, one stable
        # sort of 16-bit ranks per column (linear on NumPy and CuPy).
        order = None
        for _uniq, rank in ranked[::-1]:
            r = rank.astype(xp.uint16) if order is None else take_values(xp, rank, order).astype(xp.uint16)
            by = backend.argsort(r)
            order = by if order is None else take_values(xp, order, by)
    elif key is not None:
        order = backend.argsort(key)
    else:
        order = backend.lexsort(cols[::-1])
    srt = take_columns(xp, cols, order)
    return _tuples_of_sorted(xp, srt, order, None if key is None else take_values(xp, key, order))


def _tuples_of_sorted(xp, srt, order, skey):
    """:func:`_distinct_tuples` of rows ``srt`` sorted by ``order`` (None: as they are);
    ``skey``: their sorted int64 key, or None to compare column by column."""
    n = int(srt[0].size)
    if skey is not None:
        new = run_starts(xp, skey)
    else:
        new = xp.empty(n, dtype=bool)
        new[0] = True
        new[1:] = False
        for c in srt:
            new[1:] |= c[1:] != c[:-1]
    tid_sorted = prefix_sum(xp, new) - 1
    if order is None:
        row_tuple = tid_sorted
    else:
        row_tuple = xp.empty(n, dtype=xp.int64)
        row_tuple[order] = tid_sorted
    return row_tuple, take_columns(xp, srt, nonzero_index(xp, new))
