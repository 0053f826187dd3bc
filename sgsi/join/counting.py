"""Counting without enumerating: the last step's set sizes, and the pattern's factored
vertices (leaf groups and subtrees, :class:`~sgsi.join.plan.QueryPlan`) counted per row of the
core's matches, by products and inclusion-exclusion (:class:`Counting`, a part of
:class:`~sgsi.join.engine.Engine`)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .merge import _INT64_SAFE, WEIGHT, weighted_sum
from .plan import Link, Step
from .sets import _ROW, _RowSets, _columns_read, _distinct_tuples, _n_rows, _packed

class _Eager(Exception):
    """A subtree's sums, added with their bounds unread, came in Python integers: count again,
    each bound read (:meth:`Engine._subtree_counts`)."""


#: Whether a subtree of one leaf is counted from its root's sets and weights, not by extending
#: the rows by the root (:meth:`Engine._weighted_rows`; off only to compare the two), for the
#: pieces whose rows have on average at least ``WEIGHTED_FANOUT`` entries in the root's sets and
#: ``WEIGHTED_PER_CONFLICT`` per core vertex the leaf may collide with (each a block over the
#: rows), and the backend's ``weighted_min_entries`` in all (the weights' fixed costs). Timed both
#: ways per piece on 2 cores (277 pieces of 74 yeast queries and 10M-edge walks): 75.3 s
#: extended at 2^22 entries, 29.0 s with these; pieces of 3.2e6 entries, 3 a row: 2.7x faster
#: weighted; 3.4e6 entries, 3.3 a row, 7 collisions: 1.9x slower.
WEIGHTED_SUBTREES = True
WEIGHTED_FANOUT = 2
WEIGHTED_PER_CONFLICT = 0.5
#: Entries a row of a subtree's root's sets from which its blocks with no link to the root are
#: counted over the core's rows, not over the rows extended by the root (:meth:`Counting._extended_rows`).
HOIST_FANOUT = 1
#: A link's direction seen from its other end.
_REVERSED = {"out": "in", "in": "out", "both": "both"}


class Counting:
    """The count-only methods of :class:`~sgsi.join.engine.Engine`."""

    def _count(self, piece, s, step: Step) -> int:
        """Σ_rows |S(t_i)| minus the rows' own vertices found in their S(t_i) (count-only last step)."""
        w = piece.get(WEIGHT)
        if isinstance(s, _RowSets) and w is None:
            return s.total
        return weighted_sum(self.backend, self._row_counts(piece, s, step), w)

    def _row_counts(self, piece, s, step: Step):
        """|S(t_i) \\ m_i| for each row i of the piece (int64)."""
        if isinstance(s, _RowSets):
            return s.count
        if not step.conflicts or s.evals.size == 0:
            return self.backend.take_values(s.scount, s.row_tuple)
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
        backend = self.backend
        groups = self.plan.leaf_groups
        rows = dict(chunk)
        rows[_ROW] = backend.row_numbers(_n_rows(chunk))
        sizes = {}                      # (group, block) -> |S_B \ m_row| per row of ``rows``
        blocks = [(gi, bi, step) for gi, g in enumerate(groups) for bi, step in enumerate(g.blocks)]
        one = [b for b in blocks if b[2].vertex in groups[b[0]].leaves]
        one.sort(key=lambda b: -len(b[2].links))
        # Whether every row left counts: each group is one leaf (its matches, its block's size) and
        # each block's rows where it is empty were cut.
        counting = all(len(g.leaves) == 1 for g in groups)
        order = one + [b for b in blocks if b[2].vertex not in groups[b[0]].leaves]
        units = len(order) + len(self.plan.subtrees)      # progress: a block or a subtree each
        for i, (gi, bi, step) in enumerate(order):
            self.progress.at(self._depth, i / units, 1 / units)
            sizes[gi, bi] = self._block_sizes(rows, step, lim)
            if step.vertex in groups[gi].leaves:
                rows, sizes, whole = _rows_kept(backend, rows, sizes, sizes[gi, bi] > 0)
                counting &= whole
                if _n_rows(rows) == 0:
                    return 0
        prod = self._groups_product(groups, sizes)
        if WEIGHT in rows:              # merged rows: each stands for its weight's partial matches
            prod = rows[WEIGHT] if prod is None else _exact_product(backend, prod, rows[WEIGHT])
        subtrees = self.plan.subtrees
        # The last subtree's sums are added in int64 with their bounds left to the final read
        # (``bounds``), and its product with the rest is taken there too (``last``): one read
        # where _add_counts, _exact_product and the sum took one each.
        last, bounds = None, []
        for k, tree in enumerate(subtrees):
            self.progress.at(self._depth, (len(order) + k) / units, 1 / units)
            # Rows that count nothing already are not expanded (none is left where ``counting``).
            if prod is not None and not _exact(prod) and not (counting and k == 0):
                rows, kept, _whole = _rows_kept(backend, rows, {0: prod}, prod > 0)
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
            got = backend.host_reductions(*[("max", f) for f in factors], ("max", prod), ("sum", prod),
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
            top, total = backend.host_reductions(("max", prod), ("sum", prod))     # one read
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
        caller reads. A sum that comes in Python integers raises :class:`_Eager` then.

        A subtree split by its meeting leaves (:attr:`~sgsi.join.plan.Subtree.terms`) is counted
        term by term (:meth:`_split_counts`)."""
        if tree.terms is not None:
            value = self._split_counts(rows, tree, lim)
            if bounds is not None and _exact(value):
                raise _Eager()
            return value
        xp = self.xp
        n = _n_rows(rows)
        half = dataclasses.replace(lim, gba_entries=max(16, lim.gba_entries // 2), chunk_rows=max(4, lim.chunk_rows // 2))
        total = xp.zeros(n, dtype=xp.int64)
        exact = None                        # Python integers, once a sum may pass int64
        keep = _columns_read([b for g in tree.groups for b in g.blocks]) | {_ROW}
        weighted = WEIGHTED_SUBTREES and _one_leaf(tree)
        done = 0
        for piece, deg, how in self._pieces(rows, tree.step, half):
            self.progress.at(self._depth + 1, done / max(n, 1), _n_rows(piece) / max(n, 1))
            done += _n_rows(piece)
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

    def _split_counts(self, rows, tree, lim):
        """A split subtree's matches per row of ``rows``: Σ over its terms of sign × the narrow
        subtree's count × the block sizes of the meeting leaves it leaves out (over the core's
        rows, less the root among their own vertices), exact."""
        backend = self.backend
        sizes = {}
        for gi in tree.meeting:
            (b,) = tree.groups[gi].blocks
            sizes[gi] = self._block_sizes(rows, _root_out(b, tree.root), lim)
        sums = {1: None, -1: None}          # the terms added by sign: both sums are counts (>= 0)
        for sign, sub, rest in tree.terms:
            value = self._subtree_counts(rows, sub, lim)
            for gi in rest:
                value = _exact_product(backend, value, sizes[gi])
            got = sums[sign]
            sums[sign] = value if got is None else _exact_sum(backend, got, value)
        self._stats["subtrees_split"] += 1
        if sums[-1] is None:
            return sums[1]
        if _exact(sums[1]) or _exact(sums[-1]):
            return backend.to_host(sums[1]).astype(object) - backend.to_host(sums[-1]).astype(object)
        return sums[1] - sums[-1]

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
        if exact is None and not _exact(value) and _sum_bound(backend, value, int(at.size), total) < _INT64_SAFE:
            backend.add_at(total, at, value)
            return None
        if exact is None:
            exact = backend.to_host(total).astype(object)
        np.add.at(exact, backend.to_host(at), backend.to_host(value).astype(object))
        return exact

    def _extended_rows(self, piece, sets, tree, lim, keep):
        """The subtree's matches for the rows of one piece of the root's step, by slices of the rows
        extended by the root: yields (the rows' numbers in ``rows``, matches) per slice.

        A block with no link to the root r reads core vertices only: where the root's sets hold
        at least ``HOIST_FANOUT`` entries a row, its sizes are found once over the piece's rows
        (r left out of its conflicts), and an extended row takes its row's, less one where r's
        vertex v is in the block's set and may be counted there (v in its candidates and in each
        of its links' lists: ``_root_in_block``)."""
        backend = self.backend
        free = [(gi, bi) for gi, g in enumerate(tree.groups) for bi, b in enumerate(g.blocks)
                if not any(k.other == tree.root for k in b.links)]
        hoisted, rows_of = {}, None
        if free and _set_entries(backend, sets) >= HOIST_FANOUT * _n_rows(piece):
            rows_of, piece = piece[_ROW], dict(piece)
            piece[_ROW] = backend.row_numbers(int(rows_of.size))     # the extended rows' own, to take from
            for gi, bi in free:
                b = tree.groups[gi].blocks[bi]
                hoisted[gi, bi] = self._block_sizes(piece, _root_out(b, tree.root), lim)
            self._stats["blocks_hoisted"] += len(free)
        for out in self._extension(piece, sets, tree.step, lim, keep):
            at = out[_ROW]
            out = dict(out)
            out[_ROW] = backend.row_numbers(int(at.size))
            sizes = {}
            for gi, g in enumerate(tree.groups):
                for bi, step in enumerate(g.blocks):
                    if (gi, bi) not in hoisted:
                        sizes[gi, bi] = self._block_sizes(out, step, lim)
                        continue
                    sizes[gi, bi] = backend.take_values(hoisted[gi, bi], at)
                    if tree.root in step.conflicts:
                        sizes[gi, bi] -= self._root_in_block(out, step, tree.root, lim)
            yield (at if rows_of is None else backend.take_values(rows_of, at)), self._groups_product(
                tree.groups, sizes)

    def _root_in_block(self, out, step, root, lim):
        """Per extended row, 1 where the root's vertex is in the block's set over the core's row (a
        candidate of the block, in each of its links' lists), else 0 (int64)."""
        backend, xp = self.backend, self.xp
        v = out[root]
        got = backend.test_bits(self.plan.candidates[step.vertex], v)
        for k in step.links:
            sel = backend.nonzero_index(got)
            if int(sel.size) == 0:
                break
            got[sel] = self._member(k, backend.take_values(out[k.other], sel), backend.row_numbers(int(sel.size)),
                                    backend.take_values(v, sel), lim, None, self.plan.candidates[root])
        return got.astype(xp.int64)

    def _weighted_rows(self, piece, sets, tree, lim):
        """A one-leaf subtree's matches for the rows of one piece, the rows not extended by the
        root r; None where it would not pay (too few entries of r's sets per row, or in all: see
        :data:`WEIGHTED_SUBTREES`) or a sum could pass int64 (the rows are extended then).

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
        rowwise = isinstance(sets, _RowSets)        # the rows extended
        entries = _set_entries(backend, sets)
        if entries < max(max(WEIGHTED_FANOUT, WEIGHTED_PER_CONFLICT * collisions(leaf_step, r)) * n,
                         backend.weighted_min_entries):
            return None
        if entries == 0:
            return xp.zeros(n, dtype=xp.int64)
        if rowwise:                             # the rows' own vertices are left out already
            owner, hits = sets.erow, ()
        else:
            sets = _packed(backend, sets)
            owner, hits = sets.etuple, _own_hits(backend, piece, sets, tree.step)
        uniq, idx = backend.distinct_index(sets.evals)
        own = Step(leaf_step.vertex, leaf_step.links, [r] if r in leaf_step.conflicts else [])
        w = self._block_sizes({r: uniq, _ROW: backend.row_numbers(int(uniq.size))}, own, lim)
        if _maxes(self.backend, w)[0] * entries >= _INT64_SAFE:
            return None
        sums = xp.zeros(n if rowwise else int(sets.scount.size), dtype=xp.int64)
        backend.add_at(sums, owner, backend.take_values(w, idx))          # Σ w over each row's (tuple's) set
        per_row = sums if rowwise else backend.take_values(sums, sets.row_tuple)
        for sel, hit, x in hits:                # a row's own vertex in its set: its weight out
            at = xp.minimum(xp.searchsorted(uniq, x), uniq.size - 1)
            per_row[sel] -= xp.where(hit, backend.take_values(w, at), 0)
        part = {u: col for u, col in piece.items() if u != _ROW}
        part[_ROW] = backend.row_numbers(n)
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
        ``chunk_rows`` rows (the rows of a subtree's count, or a weighted one's root's distinct
        vertices, may be more), each by :meth:`_fused_sizes` where it applies."""
        xp = self.xp
        n = _n_rows(rows)
        per_row = None
        cap = lim.chunk_rows
        for a in range(0, n, cap):
            self.progress.at(self._depth + 1, a / max(n, 1), min(cap, n - a) / max(n, 1))
            part = rows if n <= cap else {u: col[a:a + cap] for u, col in rows.items()}
            fused = self._fused_sizes(part, step, lim)
            if fused is not None and part is rows:
                return fused
            if fused is not None:
                if per_row is None:
                    per_row = xp.zeros(n, dtype=xp.int64)
                per_row[a:a + cap] += fused
                continue
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

    def _fused_sizes(self, rows, step, lim):
        """:meth:`_block_sizes` by the backend's ``block_counts`` (the GPU's; none on the CPU, whose
        ``block_count_probes`` is 0), where every link's partition is one segment: a warp a row,
        nothing written, where the rows times the smallest of the links' longest lists (a bound
        on the entries read, known with no read) are at most ``block_count_probes``; else, for a
        block of several links and at most ``chunk_rows`` rows (:meth:`_block_sizes` gives it a
        slice at a time), a warp a distinct linking tuple,
        then the rows' own vertices taken off their tuples' counts (``rows_less_own``, a thread a
        row, in its tuple's lists as ``block_counts`` found them). Two or three launches where
        pieces, gathered lists and sets took some 20 launches and reads. None where neither applies."""
        cap = self.backend.block_count_probes
        if not cap:
            return None
        store, backend = self.store, self.backend
        parts = [store.partition(k.label_id, k.direction) for k in step.links]
        if any(p.seg_ids.size > 1 for p in parts):
            return None
        n = _n_rows(rows)
        if any(p.seg_ids.size == 0 for p in parts):         # a link with no edge: no match
            return self.xp.zeros(n, dtype=self.xp.int64)
        per_row = n * min(p.max_degree for p in parts) <= cap
        if not per_row and (len(step.links) == 1 or n > lim.chunk_rows):
            return None
        segs = [(groups, ci) for p in parts for _i, groups, ci in backend.segments(store, p.seg_ids)]
        cbits = self.plan.candidates[step.vertex]
        conflicts = [rows[c] for c in step.conflicts]
        if per_row:
            counts = backend.block_counts([(groups, ci, rows[k.other]) for (groups, ci), k in zip(segs, step.links)],
                                          cbits, conflicts)
        else:
            row_tuple, tuples = _distinct_tuples(backend, [rows[k.other] for k in step.links])
            got = backend.block_counts([(groups, ci, col) for (groups, ci), col in zip(segs, tuples)], cbits, [],
                                       spans=True)
            counts = None if got is None else backend.rows_less_own([ci for _g, ci in segs], cbits, conflicts,
                                                                    *got, row_tuple)
        if counts is not None:
            self._stats["blocks_fused"] += 1
            self._charge(n)
            self.progress.tick()
        return counts


def _root_out(block, root) -> Step:
    """A subtree's block with no link to its root, over the core's rows: the root out of its
    conflicts (where it may take the root's vertex, each term or extended row takes that off)."""
    return Step(block.vertex, block.links, [c for c in block.conflicts if c != root])


def _set_entries(backend, sets) -> int:
    """The entries of a piece's sets over its rows (one read where they are a tuple's)."""
    if isinstance(sets, _RowSets):
        return sets.total
    return backend.host_reductions(("sum", backend.take_values(sets.scount, sets.row_tuple)))[0]


def collisions(leaf_step, root) -> int:
    """The core vertices a one-leaf subtree's leaf may collide with (its conflicts but the root):
    each a block over the rows when the subtree is counted from weights."""
    return sum(c != root for c in leaf_step.conflicts)


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


def _maxes(backend, *arrays) -> list:
    """The max of each of the int64 ``arrays`` (0 where empty), where the backend computes, read in
    one transfer."""
    return backend.host_reductions(*[("max", a) for a in arrays])


def _sum_bound(backend, value, n, total) -> int:
    """A bound on ``total`` after adding ``n`` of ``value``'s entries to it (int64 arrays; one read)."""
    top_value, top_total = _maxes(backend, value, total)
    return top_value * n + top_total


def _shared_groups(plan):
    """Groups of factored vertices that may share data vertices (counted by inclusion-exclusion)."""
    return sum(len(g.leaves) > 1 for g in plan.leaf_groups)


def _exact(a):
    """Whether per-row counts are held as Python integers (past int64) rather than int64."""
    return isinstance(a, np.ndarray) and a.dtype == object


def _exact_product(backend, a, b):
    """a * b per row: int64 while it cannot overflow, else Python integers (on the host)."""
    if not _exact(a) and not _exact(b) and math.prod(_maxes(backend, a, b)) < _INT64_SAFE:
        return a * b
    return backend.to_host(a).astype(object) * backend.to_host(b).astype(object)


def _exact_sum(backend, a, b):
    """a + b per row of non-negative counts: int64 while it cannot overflow, else Python integers."""
    if not _exact(a) and not _exact(b) and sum(_maxes(backend, a, b)) < _INT64_SAFE:
        return a + b
    return backend.to_host(a).astype(object) + backend.to_host(b).astype(object)


def _group_matches(backend, group, sizes):
    """The matches of a leaf group per row: Σ over its terms of μ(π) Π_{B ∈ π} |S_B \\ m_row|
    (``sizes[i]``: |S_B \\ m_row| of block i), exact."""
    if len(group.terms) == 1 and group.terms[0][0] == 1 and len(group.terms[0][1]) == 1:
        return sizes[group.terms[0][1][0]]            # one leaf
    # Each term is at most (largest size)^|leaves| in magnitude and the |μ| sum to |leaves|!.
    bound = max(_maxes(backend, *sizes)) ** len(group.leaves) * math.factorial(len(group.leaves))
    if bound >= _INT64_SAFE:
        sizes = [backend.to_host(x).astype(object) for x in sizes]      # Python integers
    total = 0
    for coef, blocks in group.terms:
        term = sizes[blocks[0]] * coef
        for i in blocks[1:]:
            term = term * sizes[i]
        total = total + term
    return total


def _rows_kept(backend, rows, sizes, keep):
    """``rows`` and the per-row ``sizes`` cut to the rows where ``keep``, when that drops a
    quarter of them or more (a cut copies every column); the row numbers start again at 0. The
    third value: whether ``keep`` holds on every row returned."""
    n = int(keep.size)
    idx = backend.nonzero_index(keep)
    if int(idx.size) > 3 * n // 4:
        return rows, sizes, int(idx.size) == n
    names = [u for u in rows if u != _ROW]
    taken = backend.take_columns([rows[u] for u in names] + list(sizes.values()), idx)
    rows = dict(zip(names, taken))
    rows[_ROW] = backend.row_numbers(int(idx.size))
    return rows, dict(zip(sizes, taken[len(names):])), True


