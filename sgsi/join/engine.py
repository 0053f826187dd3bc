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

from dataclasses import dataclass

import numpy as np

from .counting import Counting, _shared_groups
from .merge import WEIGHT, Merges, rows_counted
from .plan import REFINE_ROUNDS, QueryPlan, Step, refine_cost
from .progress import Progress
from .sets import (_alive, _entries, _How, _Lists, _n_rows, _nbytes, _per_tuple, _RowSets, _Sets,
                   _cuts, _slices, _taken, _tuple_slice, _TuplesOf, carried)
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


#: Most device sums of entries held before one read adds them to ``stats`` (a long count
#: makes one a chunk: 20,315 on a 1B-edge walk).
_ENTRIES_HELD = 1024

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


#: Entries a piece's tuples take from their buffers at once, in GBA caps (``Limits.expand_entries``):
#: each entry is a tuple id and a value with their tests' temporaries, like a buffer entry; on the
#: CPU 2^23, a quarter of a second of array operations between two cancel checks.
EXPAND_FACTOR = 4
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

    @property
    def expand_entries(self) -> int:
        """Most entries a piece's tuples take from their buffers at once (:meth:`Engine._finish`)."""
        return EXPAND_FACTOR * self.gba_entries

    @classmethod
    def from_budget(cls, budget: int, width: int, backend=None):
        room = max(budget, 0) // 8
        gba = max(16, room // _GBA_ENTRY_BYTES)
        rows = max(4, room // (4 * max(width, 1) + _ROW_TEMP_BYTES))
        if backend is not None:
            gba, rows = min(gba, backend.slice_entries), min(rows, backend.slice_rows)
        return cls(gba, rows)


class Engine(Counting):
    """Runs a :class:`QueryPlan` over a store on one backend."""

    def __init__(self, store, plan: QueryPlan, backend, budget: int, replan=None, progress=None, seed=(),
                 reorder=None):
        """``replan()`` gives the refined plan; without it the query runs on ``plan``.
        ``reorder(plan, done)`` gives (the refined plan on a better order, or None where its own
        is best; the search's stats), ``done`` the join work run on ``plan``: asked once that is
        ``backend.reorder_work`` (:mod:`~sgsi.join.ordering`). ``progress``:
        the query's :class:`~sgsi.join.progress.Progress` (None: not reported). ``seed``: partial
        matches of the order's first vertices to start from instead of the first vertex's
        candidates, ``((u, host int32 column), ...)`` in the order (a sharded query's task)."""
        self.progress = progress if progress is not None else Progress()
        self.seed = tuple(seed)
        self.store, self.plan, self.backend = store, plan, backend
        self.xp = backend.xp
        self.budget = budget
        self._entries = []             # device sums of entries not yet added to stats (no read per step)
        self._stats = {"chunks": 0, "steps": 0, "light_steps": 0, "replanned": 0, "reordered": 0, "entries": 0,
                       "subtrees_weighted": 0, "subtrees_split": 0, "blocks_fused": 0, "blocks_hoisted": 0,
                       "rows_merged": 0,
                       "leaves_factored": plan.factored, "leaf_groups": _shared_groups(plan),
                       "subtrees": len(plan.subtrees), "symmetry": plan.symmetry}
        # Adaptive planning: run on the cheap plan first; if the join's work
        # outgrows the candidate sets by far before any result has left, start
        # again on the plan ``replan()`` gives (refined candidate sets).
        self.replan = replan
        self.work = 0
        self.emitted = False
        self.work_limit = None if replan is None else max(
            REPLAN_MIN_WORK, REPLAN_FACTOR * sum(plan.candidate_counts))
        self.cost_checked = False
        self.reorder = reorder
        self.refined_at = None          # the work done when the refined plan started (None: no search due)
        self._reordered = None          # the plan ``reorder`` gave, for :meth:`_switch_plan`
        self.counting = False           # a count is running (``_rows_ahead``)
        self._depth = 0                 # the stack level whose chunk the factored vertices are counted for
        self._merges = Merges(backend)  # a count's merging of equal rows, by level

    @property
    def stats(self) -> dict:
        """The query's counters (``entries``: the candidate-set entries the steps found)."""
        if self._entries:
            self._stats["entries"] += sum(self.backend.host_ints(*self._entries))
            self._entries.clear()
        return self._stats

    # -- driving -------------------------------------------------------------------

    def count(self) -> int:
        """Number of embeddings, counted without materialising the last step (a plan whose row
        filters keep one embedding of each orbit of ``symmetry``: their count times it)."""
        while True:
            if self.plan.empty:
                return 0
            try:
                total = 0
                for _kind, value in self._run(count_only=True):
                    value *= self.plan.symmetry
                    total += value
                    self.progress.add(value)
                return total
            except _Replan:
                self.progress.rows = 0
                self._switch_plan()

    def chunks(self):
        """Yield result chunks: dicts pattern vertex -> int32 dense ids (on the host)."""
        while True:
            if self.plan.empty:
                return
            try:
                for _kind, chunk in self._run(count_only=False):
                    self.emitted = True
                    self.progress.add(_n_rows(chunk))
                    yield {u: self.backend.to_host(col) for u, col in chunk.items()}
                return
            except _Replan:
                self._switch_plan()

    def prefix(self, depth):
        """Host chunks of the partial matches of the order's first ``depth + 1`` vertices (the
        plan's first ``depth`` steps), as :meth:`chunks` gives matches."""
        for _kind, chunk in self._run(count_only=False, depth=depth):
            yield {u: self.backend.to_host(col) for u, col in chunk.items()}

    def _switch_plan(self):
        if self._reordered is not None:         # the refined plan on the order a search found
            self.plan, self._reordered = self._reordered, None
            self._stats["reordered"] = 1
        else:
            self.plan = self.replan()
            self.replan = None
            self.work_limit = None
            self._stats["replanned"] = 1
            if self.reorder is not None:
                self.refined_at = self.work
        self._merges = Merges(self.backend)
        self._stats["leaves_factored"] = self.plan.factored
        self._stats["leaf_groups"] = _shared_groups(self.plan)
        self._stats["subtrees"] = len(self.plan.subtrees)
        self._stats["symmetry"] = self.plan.symmetry

    def _run(self, count_only, depth=None):
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
        steps = self.plan.steps if depth is None else self.plan.steps[:depth]
        self.counting = count_only
        filters = {}                    # level -> the row filters of its chunks
        start = len(self.seed) - 1 if self.seed else 0          # a seed's chunks come in at its level
        for f in self.plan.row_filters:
            filters.setdefault(max(f.level, start), []).append(f)
        # A count carries past step k only the columns that the later steps (and filters) read.
        keep = [None] * len(steps)
        if count_only:                  # none before a seed's level
            keep = [None if c is None else c | {WEIGHT} for c in carried(self.plan, steps, start)]
        if self.seed:                   # a task's partial matches: stack[level] yields them
            level = len(self.seed) - 1
            held = [0] * (level + 1)
            stack = [iter(())] * level + [self._seeded(self._limits(0), held)]
        else:
            held = [0]
            stack = [self._roots(self._limits(0), held)]
        while stack:
            chunk = next(stack[-1], None)
            if chunk is None:
                stack.pop()
                held.pop()
                continue
            k = len(stack) - 1
            if k in filters:
                chunk = self._filtered(chunk, filters[k])
                if chunk is None:
                    continue
            lim = self._limits(sum(held))
            if k == len(steps) and count_only and self.plan.factored:
                self._depth = k + 1
                yield ("count", self._count_leaves(chunk, lim))      # the core joined: the rest per row
            elif k == len(steps):
                yield ("count", rows_counted(self.backend, chunk)) if count_only else ("chunk", chunk)
            elif count_only and not self.plan.factored and k == len(steps) - 1 and len(steps) not in filters:
                yield ("count", sum(self._count(piece, step_sets, steps[k])
                                    for piece, step_sets in self._pieces_with_sets(chunk, steps[k], lim,
                                                                                   counts=True)))
            else:
                held.append(0)
                stack.append(self._step(chunk, steps[k], lim, held, k + 1, keep[k]))

    def _filtered(self, chunk, filters):
        """The rows of ``chunk`` that every one of ``filters`` keeps; None where none is left."""
        mask = filters[0].mask(self.xp, chunk)
        for f in filters[1:]:
            mask &= f.mask(self.xp, chunk)
        idx = self.backend.nonzero_index(mask)
        if int(idx.size) == 0:
            return None
        return _taken(self.backend, chunk, idx)

    def _limits(self, used):
        """Limits of a step when the levels above it hold ``used`` bytes."""
        return Limits.from_budget(self.budget - used, len(self.plan.order), self.backend)

    def _roots(self, lim, held):
        """Chunks of the first pattern vertex's candidates."""
        first = self.plan.order[0]
        ids_all = self.backend.bits_to_ids(self.plan.candidates[first], self.store.n_vertices,
                                           self.plan.candidate_counts[first])
        held[0] = int(ids_all.nbytes)
        rows, n = lim.chunk_rows, int(ids_all.size)
        for a in range(0, n, rows):
            self.progress.at(0, a / n, min(rows, n - a) / n)
            yield {first: ids_all[a:a + rows]}

    def _seeded(self, lim, held):
        """Chunks of the ``seed`` partial matches (their level: the number of seeded vertices - 1)."""
        level = len(self.seed) - 1
        if [u for u, _c in self.seed] != list(self.plan.order[:level + 1]):
            raise ValueError("a seed's vertices must be the first ones of the plan's order")
        cols = {u: self.backend.to_device(np.ascontiguousarray(c, dtype=np.int32)) for u, c in self.seed}
        held[level] = sum(int(c.nbytes) for c in cols.values())
        n = int(self.seed[0][1].size)
        self.progress.levels = [(0.0, 1.0)] * level
        for a in range(0, n, lim.chunk_rows):
            self.progress.at(level, a / n, min(lim.chunk_rows, n - a) / n)
            yield {u: c[a:a + lim.chunk_rows] for u, c in cols.items()}

    def _step(self, chunk, step: Step, lim, held, level, keep=None):
        """One join step over ``chunk``: its output in slices of about ``chunk_rows`` rows, with
        the columns of the vertices ``keep`` and the new one (None: every column)."""
        take = [u for u in chunk if keep is None or u in keep]       # the columns carried over
        # Rows may become equal; not before a last step counted by its sets' sizes, whose work
        # goes by distinct linking tuples more than by rows.
        merge = keep is not None and len(take) < len(chunk) and (
            self.plan.factored or level < len(self.plan.steps) - 1)
        n, done = max(_n_rows(chunk), 1), 0
        for piece, sets in self._pieces_with_sets(chunk, step, lim, take=take):
            rows = _n_rows(piece)
            self.progress.at(level, done / n, rows / n)

            def place(i, k, before=done, rows=rows):      # slice i of the piece's k
                self.progress.at(level, (before + rows * i / k) / n, rows / (n * k))
            done += rows
            for out in self._extension(piece, sets, step, lim, keep, place):
                if merge:
                    out, cut = self._merges.slice(out, level)
                    self._stats["rows_merged"] += cut
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
                self.progress.tick()
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
            for a, b in _cuts(self.backend, self.backend.prefix_sum(deg), deg, cap):
                yield {u: c[a:b] for u, c in chunk.items()}, deg[a:b], _How("tuples")
            return
        # Rows sorted by their first-link vertex; distinct vertices grouped greedily.
        order = self.backend.argsort(col)
        chunk = {u: col[order] for u, col in chunk.items()}
        deg = deg[order]
        _v, vstart, vend = self.backend.runs(chunk[e0.other])
        vdeg = deg[vstart]
        cum = self.backend.prefix_sum(vdeg)
        group = (cum - vdeg) // cap
        big = vdeg > cap
        cut = xp.zeros(vdeg.size, dtype=bool)
        cut[1:] = (group[1:] != group[:-1]) | big[1:] | big[:-1]
        starts = self.backend.to_host(self.backend.nonzero_index(cut))
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
            return backend.take_values(dense, v, xp.int64)
        deg = xp.zeros(v.shape, dtype=xp.int64)
        lo, hi = backend.host_reductions(("min", v), ("max", v))
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
                    deg = backend.take_values(dense, v - a)
                else:
                    sel = backend.nonzero_index((v >= a) & (v <= b))
                    deg[sel] = backend.take_values(dense, backend.take_values(v, sel) - a)
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
        backend, store = self.backend, self.store
        cbits = self.plan.candidates[step.vertex]
        tuples_of = _TuplesOf(backend, piece, step)
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
        return self._finish(t.row_tuple, t.tuples, [lists] + [None] * (len(step.links) - 1), step, lim,
                            bound=n * int(t.tuples[0].size))

    def _sets_whole(self, piece, deg, step: Step, lim: Limits, how=None):
        """Sets of a piece whose GBA fits the cap.

        The lists of the first link's distinct vertices are gathered into the
        GBA; so are those of every other link whose lists fit the cap too
        (``_other_lists``), and each tuple then takes its entries from the
        shortest of its gathered lists and tests them against the others.
        """
        xp, backend = self.xp, self.backend
        t = _TuplesOf(backend, piece, step, how)
        if self._dense_degrees(step.links[0]) is not None:     # every vertex's degree on the device
            d0deg = self._degrees(step.links[0], t.d0)          # a gather
        else:
            d0deg = xp.zeros(int(t.d0.size), dtype=xp.int64)
            row_d = t.row_tuple if t.tuple_d is None else backend.take_values(t.tuple_d, t.row_tuple)
            backend.scatter_equal(d0deg, row_d, deg)  # rows carry |N(v'_i, l0)| already
        first = self._gather(step.links[0], t.d0, t.tuple_d, d0deg, step)
        lists = [first]
        if len(step.links) > 1:
            # entries if all come from the first link
            probes, = backend.host_reductions(("sum", _per_tuple(backend, first.count, first.of_tuple)))
            lists += [self._other_lists(link, col, step, lim, probes)
                      for link, col in zip(step.links[1:], t.tuples[1:])]
        return self._finish(t.row_tuple, t.tuples, lists, step, lim, bound=None if how is None else how.total)

    def _other_lists(self, link, col, step, lim, probes):
        """``_gather`` for a later link's vertices, or None where it would not pay: the
        first link's lists give fewer than ``SHORTEST_LIST_MIN_PROBES`` entries, or these
        lists are longer than those entries or than the cap."""
        if probes < SHORTEST_LIST_MIN_PROBES:
            return None
        verts, of_tuple = self.backend.distinct_index(col)
        deg = self._degrees(link, verts)
        if self.backend.host_reductions(("sum", deg))[0] > min(lim.gba_entries, probes):
            return None
        return self._gather(link, verts, of_tuple, deg, step)

    def _gather(self, link, verts, of_tuple, deg, step) -> "_Lists":
        """N(v, l) ∩ C(u) for the sorted distinct vertices ``verts``, streamed over the
        segments of l (Algorithm 4), in Prealloc-Combine: F = exclusive prefix sum of
        |N(v, l)|, one GBA holds every buffer, buf_v += N_x(v, l) ∩ C(u) per segment."""
        xp, backend, store = self.xp, self.backend, self.store
        cbits = self.plan.candidates[step.vertex]
        nd = int(verts.size)
        F, total = backend.exclusive_total(deg)
        gba = xp.empty(total, dtype=xp.int32)
        fill = xp.zeros(nd, dtype=xp.int64)             # candidates written per vertex
        for lo, hi, groups, ci in segments_of(store, backend, store.partition(link.label_id, link.direction), verts):
            backend.gather_segment(groups, ci, verts[lo:hi], cbits, F[lo:hi], fill[lo:hi], gba)
        return _Lists(of_tuple, F, fill, gba, total)

    def _finish(self, row_tuple, tuples, lists, step: Step, lim: Limits, bound=None):
        """The sets S(t) from the gathered lists (``lists[j]``: link j's, or None where not
        gathered; ``lists[0]`` always is). ``bound``: at least the entries the tuples' first-link
        lists hold in all, where the caller knows it (the piece's rows' degrees)."""
        backend = self.backend
        self._charge(lists[0].reserved + int(row_tuple.size))
        L = lists[0]
        if len(step.links) == 1:
            # One link: each tuple's set is its buffer in the GBA, as it stands (not packed:
            # the extension reads the buffers where they are; _packed when a count needs it).
            tcnt = _per_tuple(backend, L.count, L.of_tuple)
            self._entries.append(tcnt.sum())
            if len(self._entries) >= _ENTRIES_HELD:
                self.stats                      # one read folds them into the counter
            return _Sets(row_tuple, None, L.values, tcnt, _per_tuple(backend, L.start, L.of_tuple))
        # A slice of tuples at a time, each taking its entries from its shortest gathered list:
        # rows that share a first-link vertex share its buffer, not its entries (a 10M-edge
        # R-MAT 4-cycle's piece of 2^21 buffer entries made 636M from the first link's lists).
        n = int(tuples[0].size)
        cuts = [(0, n)] if bound is not None and bound <= lim.expand_entries else \
            _slices(backend, self._shortest(lists)[0], lim.expand_entries)
        parts = []
        for a, b in cuts:
            etuple, evals = self._intersected([None if Lj is None else _tuple_slice(Lj, a, b) for Lj in lists],
                                              [t[a:b] for t in tuples], step, lim)
            parts.append((etuple + a if a else etuple, evals))
        etuple, evals = parts[0] if len(parts) == 1 else (self.xp.concatenate([e for e, _ in parts]),
                                                          self.xp.concatenate([v for _, v in parts]))
        scount = backend.bincount(etuple, n)
        return _Sets(row_tuple, etuple, evals, scount, backend.exclusive_sum(scount))

    def _shortest(self, lists):
        """Per tuple, (the entries of its shortest gathered list, which list that is: None where
        the first link's is the only one gathered)."""
        best = _per_tuple(self.backend, lists[0].count, lists[0].of_tuple)
        which = None
        for j, Lj in enumerate(lists[1:], 1):
            if Lj is not None:
                c = _per_tuple(self.backend, Lj.count, Lj.of_tuple)
                shorter = c < best
                best = self.xp.where(shorter, c, best)
                which = self.xp.zeros(int(best.size), self.xp.int8) if which is None else which
                which[shorter] = j
        return best, which

    def _intersected(self, lists, tuples, step, lim):
        """(tuple of each entry, entry) of S(t) for each tuple: the gathered lists intersected
        (each tuple probing its shortest list), the links not gathered or not intersected tested
        by streaming."""
        backend = self.backend
        got = backend.intersect_lists(lists, max(4096, 4 * lim.gba_entries))
        if got is None:
            return self._streamed(lists, tuples, step, lim)
        etuple, evals, probes, untested = got
        self._stats["entries"] += probes
        if untested:
            etuple, evals = self._tested(step, untested, tuples, etuple, evals, lim,
                                         backend.bincount(etuple, int(tuples[0].size)))
        return etuple, evals

    def _streamed(self, lists, tuples, step, lim):
        """``_intersected`` where ``intersect_lists`` could not intersect the gathered lists (their
        bitsets too wide): each tuple takes its entries from the shortest of its gathered lists
        (on the 10M-edge R-MAT 4-cycle, 5x fewer than from the first link's) and tests them
        against its other links by streaming; the tuples grouped by that list."""
        backend = self.backend
        side = [None if Lj is None else (_per_tuple(backend, Lj.count, Lj.of_tuple),
                                         _per_tuple(backend, Lj.start, Lj.of_tuple), Lj.values) for Lj in lists]
        which = self._shortest(lists)[1]           # the list each tuple takes its entries from
        groups = [(0, None)] if which is None else \
            [(k, backend.nonzero_index(which == k)) for k, sk in enumerate(side) if sk is not None]
        parts = []
        for k, rows in groups:
            count, start, values = side[k]
            if rows is not None:
                count, start = backend.take_values(count, rows), backend.take_values(start, rows)
            if not int(count.size):
                continue
            etuple, evals = _entries(backend, values, start, count)
            self._stats["entries"] += int(evals.size)
            cols = tuples if rows is None else [backend.take_values(t, rows) for t in tuples]
            etuple, evals = self._tested(step, [j for j in range(len(step.links)) if j != k], cols, etuple, evals,
                                         lim, count)
            parts.append((etuple if rows is None else backend.take_values(rows, etuple), evals))
        if not parts:
            return self.xp.zeros(0, self.xp.int64), self.xp.zeros(0, self.xp.int32)
        if len(parts) == 1:
            return parts[0]
        etuple, evals = self.xp.concatenate([e for e, _ in parts]), self.xp.concatenate([v for _, v in parts])
        order = backend.argsort(etuple)             # stable: each tuple's entries stay sorted
        return backend.take_values(etuple, order), backend.take_values(evals, order)

    def _tested(self, step, untested, tuples, etuple, evals, lim, tcnt):
        """(``etuple``, ``evals``) less the entries not in N(t_j, l_j) for each link j of
        ``untested`` (Algorithm 5: the lists streamed); ``tcnt``: entries per tuple."""
        backend = self.backend
        cbits = self.plan.candidates[step.vertex]
        alive = _alive(evals, (lambda j=j: self._member(step.links[j], tuples[j], etuple, evals, lim, tcnt, cbits)
                               for j in untested))
        if alive is None:
            return etuple, evals
        keep = backend.nonzero_index(alive)
        return backend.take_values(etuple, keep), backend.take_values(evals, keep)

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
        if self.refined_at is not None and work - self.refined_at > self.backend.reorder_work and not self.emitted:
            done, self.refined_at = work - self.refined_at, None
            self._reordered, self._stats["order_search"] = self.reorder(self.plan, done, self.progress.share())
            if self._reordered is not None:
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
            F = light.offsets if light.offsets is not None else backend.exclusive_sum(deg)
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
            total, = backend.host_reductions(("sum", fill))
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
            alive = _alive(evals, (lambda link=link: self._member(link, piece[link.other], erow, evals, lim, fill,
                                                                       cbits) for link in step.links[1:]))
            keep = backend.nonzero_index(alive)
            erow, evals = backend.take_values(erow, keep), backend.take_values(evals, keep)
            fill = backend.bincount(erow, n)
        return _RowSets(erow, evals, fill, int(evals.size), taken)

    def _extension(self, piece, s, step: Step, lim: Limits, keep=None, place=None):
        """Columnar extension (Algorithm 6), row i taking S(t_i) \\ m_i: yields the new
        table in slices of about ``chunk_rows`` rows. Only the columns of the vertices ``keep``
        (None: all) are carried over, with the new vertex's: a count needs no column that no
        later step reads."""
        backend = self.backend
        if isinstance(s, _RowSets):                       # a light piece: its entries are the output
            if s.total:
                out = dict(s.taken) if s.taken is not None else _taken(backend, piece, s.erow, keep)
                out[step.vertex] = s.evals
                yield out
            return
        per_row = backend.take_values(s.scount, s.row_tuple)  # outputs of each row, at most
        n = int(per_row.size)
        total, heaviest = backend.host_reductions(("sum", per_row), ("max", per_row)) if n else (0, 0)
        if total == 0:
            return
        cum = backend.prefix_sum(per_row)
        self._rows_ahead(total)
        cap = lim.chunk_rows
        cuts = [(0, n)] if total <= cap else _cuts(backend, cum, per_row, cap)
        for i, (a, b) in enumerate(cuts):
            if place is not None:       # progress: slice i of len(cuts)
                place(i, len(cuts))
            conflict_cols = [piece[c][a:b] for c in step.conflicts]
            sizes = (cum, total, heaviest) if b - a == n else None        # one slice: sized already
            erow, vals = backend.extend(s.row_tuple[a:b], per_row[a:b], s.evals, s.sstart, s.scount, conflict_cols,
                                        sizes)
            if erow.size == 0:
                continue
            out = _taken(backend, {u: col[a:b] for u, col in piece.items() if keep is None or u in keep}, erow)
            out[step.vertex] = vals
            yield out

    def _member(self, link, vcol, erow, evals, lim, ecount, cbits):
        """For each buffer entry (tuple erow, value evals): is it in N(vcol[tuple], l)?
        ``ecount``: entries per tuple; ``cbits``: C(u), which holds every entry. The CPU's
        bitsets (membership) are bounded like the GBA (``gba_entries`` int32 entries); the GPU
        binary-searches each entry in its list (no bitset)."""
        return self.backend.member(self.store, link, vcol, erow, evals, cap=max(4096, 4 * lim.gba_entries),
                                   ecount=ecount, cbits=cbits)


