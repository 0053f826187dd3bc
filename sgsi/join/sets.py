"""The tables of a join step: a piece's distinct linking tuples, the lists gathered for them
(Prealloc-Combine's GBA), and the candidate sets found from them (:mod:`sgsi.join.engine`)."""

from __future__ import annotations

from dataclasses import dataclass


#: Key of the row-number column :meth:`Engine._count_leaves` adds to a chunk (not a pattern vertex).
_ROW = -1

class _TuplesOf:
    """The distinct linking tuples of a piece's rows, and their distinct first-link vertices.
    ``how``: the piece's :class:`_How`, whose range and order of the first-link vertices spare a
    step of one link its own look at them."""

    def __init__(self, backend, piece, step, how=None):
        cols = [piece[k.other] for k in step.links]
        if len(cols) == 1 and how is not None and how.lo is not None:
            if how.ascending:
                self.row_tuple, self.tuples = _tuples_of_sorted(backend, cols, None, cols[0])
            else:
                uniq, self.row_tuple = backend.distinct_index(cols[0], (how.lo, how.hi))
                self.tuples = [uniq]
        else:
            self.row_tuple, self.tuples = _distinct_tuples(backend, cols)
        if len(self.tuples) == 1:             # one link: the tuples are the distinct vertices
            self.d0 = self.tuples[0]
            self.tuple_d = None                 # tuple t's vertex is d0[t]
            return
        self.d0, dstart, dend = backend.runs(self.tuples[0])          # sorted
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


def _alive(evals, tests):
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


def _per_tuple(backend, a, of_tuple):
    """``a[of_tuple]``: per tuple, the value of its vertex (``of_tuple`` None: tuple t is vertex t)."""
    return a if of_tuple is None else backend.take_values(a, of_tuple)


def _entries(backend, values, start, count):
    """(tuple of each entry, entries) of the buffers ``values[start[t] : start[t] + count[t]]``
    packed end to end, tuples in order."""
    return backend.repeat_index(count), backend.take_values(values, backend.ragged_indices(start, count))


def _cuts(backend, cum, count, cap):
    """Consecutive ranges [a, b) of the items of ``count`` (``cum``: its inclusive prefix sum):
    range k holds the items that start in [k*cap, (k+1)*cap) of the prefix (its items but its
    last sum to under ``cap``)."""
    bounds = backend.to_host(backend.nonzero_index(backend.xp.diff((cum - count) // cap)) + 1)
    cuts = [0] + [int(b) for b in bounds] + [int(count.size)]
    return list(zip(cuts[:-1], cuts[1:]))


def _slices(backend, count, cap):
    """:func:`_cuts` of the tuples by their entries ``count``: one range where all fit ``cap``."""
    n = int(count.size)
    total, = backend.host_reductions(("sum", count)) if n else (0,)
    return [(0, n)] if total <= cap else _cuts(backend, backend.prefix_sum(count), count, cap)


def _tuple_slice(lists, a, b):
    """``lists`` (a :class:`_Lists`) for the tuples [a, b) only."""
    if lists.of_tuple is None:          # tuple t is vertex t
        return _Lists(None, lists.start[a:b], lists.count[a:b], lists.values, lists.reserved)
    return _Lists(lists.of_tuple[a:b], lists.start, lists.count, lists.values, lists.reserved)


def _packed(backend, s):
    """``s`` with its sets packed end to end and the tuple of each entry known."""
    if s.etuple is not None:
        return s
    etuple, evals = _entries(backend, s.evals, s.sstart, s.scount)
    return _Sets(s.row_tuple, etuple, evals, s.scount, backend.exclusive_sum(s.scount))


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


def _columns_read(steps, plan=None):
    """The vertices whose columns ``steps`` read (their links' other ends and their conflicts), and
    with ``plan`` those read by its factored vertices' steps (leaf groups, subtrees) too."""
    if plan is not None:
        steps = list(steps) + [b for g in plan.leaf_groups for b in g.blocks] + [t.step for t in plan.subtrees] + [
            b for t in plan.subtrees for g in t.groups for b in g.blocks]
    return {k.other for st in steps for k in st.links} | {c for st in steps for c in st.conflicts}


def carried(plan, steps, start=0):
    """A count's columns carried past each of ``steps`` (the plan's, or its first ones): those the
    later steps, the row filters and the factored vertices' counts read (a list, a set a step;
    None before ``start``, a seed's level, where every column is kept)."""
    after = _columns_read([], plan) | {v for f in plan.row_filters for v in (f.u, f.w)}
    keep = [None] * len(steps)
    for k in range(len(steps) - 1, start - 1, -1):
        keep[k] = set(after)
        after |= _columns_read([steps[k]])
    return keep


def _taken(backend, chunk, idx, keep=None):
    """The columns of ``chunk`` (those of the vertices ``keep``; None: all) taken at ``idx``."""
    names = [u for u in chunk if keep is None or u in keep]
    return dict(zip(names, backend.take_columns([chunk[u] for u in names], idx)))


def _n_rows(chunk):
    return int(next(iter(chunk.values())).size)


def _nbytes(chunk):
    return sum(int(col.nbytes) for col in chunk.values())


def _distinct_tuples(backend, cols):
    """Distinct rows of the columns ``cols``, sorted (first column major).

    Returns (tuple id of each row, list of the tuples' columns). Rows that
    come sorted (one or two columns, compared as one int64 key) need one
    pass. Otherwise each column is replaced by its rank among its distinct
    values (linear passes over the dense id range), and when the product of
    the numbers of distinct values is small the tuples are found by marking
    their combined rank, with no sort; else they are sorted (by a radix sort
    of the ranks where each column has at most 65,536 distinct values).
    """
    xp = backend.xp
    n = int(cols[0].size)
    if n == 0:
        return xp.zeros(0, xp.int64), [c[:0] for c in cols]
    key = None
    if len(cols) == 1:
        key = cols[0]
        if n < 2 or bool((key[1:] >= key[:-1]).all()):
            return _tuples_of_sorted(backend, cols, None, key)
    elif len(cols) == 2:
        key, ascending = backend.pair_key(cols[0], cols[1])
        if ascending:
            return _tuples_of_sorted(backend, cols, None, key)
    if len(cols) == 1:
        uniq, rank = backend.distinct_index(cols[0])
        return rank, [uniq]
    # The columns' spans in one read, where each distinct_index read its own (a host sync on the
    # GPU: distinct_index made 13,600 of a hard yeast query's 26,500 reads).
    ends = backend.host_reductions(*[(op, c) for c in cols for op in ("min", "max")])
    ranked = [backend.distinct_index(c, (ends[2 * i], ends[2 * i + 1])) for i, c in enumerate(cols)]
    space = 1
    for uniq, _rank in ranked:
        space *= int(uniq.size)
    if space <= 4 * n:
        combined = ranked[0][1]
        for uniq, rank in ranked[1:]:
            combined = combined * int(uniq.size) + rank
        ukey, row_tuple = backend.distinct_index(combined, (0, space - 1))     # bounds, no read
        tuples = []
        for uniq, _rank in ranked[::-1]:
            tuples.append(backend.take_values(uniq, ukey % int(uniq.size)))
            ukey = ukey // int(uniq.size)
        return row_tuple, tuples[::-1]
    if all(int(uniq.size) <= 1 << 16 for uniq, _rank in ranked):
        # Few distinct values per column: a least-significant-first radix sort, one stable
        # sort of 16-bit ranks per column (linear on NumPy and CuPy).
        order = None
        for _uniq, rank in ranked[::-1]:
            r = rank.astype(xp.uint16) if order is None else backend.take_values(rank, order).astype(xp.uint16)
            by = backend.argsort(r)
            order = by if order is None else backend.take_values(order, by)
    elif key is not None:
        order = backend.argsort(key)
    else:
        order = backend.lexsort(cols[::-1])
    srt = backend.take_columns(cols, order)
    return _tuples_of_sorted(backend, srt, order, None if key is None else backend.take_values(key, order))


def _tuples_of_sorted(backend, srt, order, skey):
    """:func:`_distinct_tuples` of rows ``srt`` sorted by ``order`` (None: as they are);
    ``skey``: their sorted int64 key, or None to compare column by column."""
    xp = backend.xp
    n = int(srt[0].size)
    if skey is not None:
        new = backend.run_starts(skey)
    else:
        new = xp.empty(n, dtype=bool)
        new[0] = True
        new[1:] = False
        for c in srt:
            new[1:] |= c[1:] != c[:-1]
    tid_sorted = backend.prefix_sum(new) - 1
    if order is None:
        row_tuple = tid_sorted
    else:
        row_tuple = xp.empty(n, dtype=xp.int64)
        row_tuple[order] = tid_sorted
    return row_tuple, backend.take_columns(srt, backend.nonzero_index(new))
