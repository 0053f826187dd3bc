"""Count-only: partial matches merged where the columns a count carries agree.

A count carries past each step only the columns later steps read (:meth:`Engine._run`), so
rows that differed only in a dropped column become equal. :func:`merged` keeps one row of each
such run with a weight column (``WEIGHT``): how many partial matches the row stands for. Later
steps repeat a row's weight with the row, and every count taken over the rows is weighted
(:func:`weighted_sum`; :meth:`Counting._count_leaves` multiplies its per-row products by it).
"""

from __future__ import annotations

import math

from .sets import _n_rows

#: Key of the weight column (int64) of a chunk whose rows were merged (not a pattern vertex).
WEIGHT = -2
#: Products and sums of counts at or past this bound are taken as exact Python integers.
_INT64_SAFE = 1 << 62
#: Bits of one packed key word (kept positive).
_WORD_BITS = 62
#: A level's merging is judged once it has merged this many rows (a probe of a slice's first
#: ones where it has more), and tried again every ``MERGE_RETRY``-th slice once it did not pay.
MERGE_PROBE_ROWS = 1 << 16
MERGE_RETRY = 16
#: Least cut of a probe's rows for the backend's ``merge_probe_growth`` to grow it (a second
#: probe of half its rows): under it the probe's rows are nearly all distinct.
PROBE_GROWTH_FROM = 1.1


class Merges:
    """A count's merging, level by level (:meth:`Engine._step`): a level's output slices are merged
    while that cuts them by the backend's ``merge_gain`` or more."""

    def __init__(self, backend):
        self.backend = backend
        self.seen = {}                  # level -> [rows in, rows out, slices] of its merges

    def slice(self, out, level):
        """(``out`` with its equal rows merged where merging pays at ``level``, the rows it lost)."""
        gain = self.backend.merge_gain
        seen = self.seen.setdefault(level, [0, 0, 0])
        seen[2] += 1
        n = _n_rows(out)
        if seen[0] >= MERGE_PROBE_ROWS:
            if seen[0] < gain * seen[1] and seen[2] % MERGE_RETRY:
                return out, 0
        elif n > MERGE_PROBE_ROWS:              # a probe of the slice's first rows first
            k, m = self._probe(out, n)
            if k < gain * m:
                seen[0] += k
                seen[1] += m
                return out, 0
        got = merged(self.backend, out)
        if got is None:
            return out, 0
        m = _n_rows(got)
        seen[0] += n
        seen[1] += m
        if n < gain * m and WEIGHT not in out:      # not worth a weight column on every later row
            return out, 0
        return got, n - m

    def _probe(self, out, n):
        """(rows, distinct rows) that judge ``out``'s ``n`` rows: its first MERGE_PROBE_ROWS and
        theirs; with the backend's ``merge_probe_growth``, where those cut by at least
        PROBE_GROWTH_FROM but less than the gain, ``n`` and their distinct rows grown to ``n`` at
        the rate they grew from half as many (equal rows lie further apart than a probe's: its
        own count understates what the whole slice merges)."""
        def distinct(k):
            probe = merged(self.backend, {u: c[:k] for u, c in out.items()})
            return k if probe is None else _n_rows(probe)
        k, m = MERGE_PROBE_ROWS, distinct(MERGE_PROBE_ROWS)
        if not self.backend.merge_probe_growth or not (PROBE_GROWTH_FROM * m <= k < self.backend.merge_gain * m):
            return k, m
        rate = min(1.0, max(0.0, math.log2(m / distinct(k // 2))))
        return n, m * (n / k) ** rate


def merged(backend, chunk):
    """``chunk`` with the rows equal on every column merged into one, whose ``WEIGHT`` is the
    sum of theirs (1 each where the chunk has none), in the order of their packed keys; None
    where it has under two rows or a merged weight could pass int64. The columns are packed into
    int64 words by their spans (one read), the words folded into one key, and each run kept once."""
    xp = backend.xp
    names = [u for u in chunk if u != WEIGHT]
    cols = [chunk[u] for u in names]
    w = chunk.get(WEIGHT)
    n = int(cols[0].size)
    if n < 2:
        return None
    ends = backend.host_reductions(*[(op, c) for c in cols for op in ("min", "max")],
                                   *([("max", w)] if w is not None else []))
    if w is not None and ends[-1] * n >= _INT64_SAFE:
        return None
    # The columns packed into words, each word after the first leaving room for a row rank;
    # then folded into one: a word's rank among its distinct values shifted above the next.
    room = _WORD_BITS - n.bit_length()
    words, word, used, cap = [], None, 0, _WORD_BITS
    for i, c in enumerate(cols):
        lo, hi = ends[2 * i], ends[2 * i + 1]
        bits = max(1, (hi - lo).bit_length())
        if word is not None and used + bits > cap:
            words.append((word, used))
            word, used, cap = None, 0, room
        v = c.astype(xp.int64) - lo
        word = v if word is None else word | (v << used)
        used += bits
    words.append((word, used))
    key = words[0][0]
    for word, bits in words[1:]:
        order, new = _sorted_runs(backend, key)
        rank = xp.empty(n, dtype=xp.int64)
        rank[order] = backend.prefix_sum(new) - 1
        key = (rank << bits) | word
    order, new = _sorted_runs(backend, key)
    starts = backend.nonzero_index(new)
    out = dict(zip(names, backend.take_columns(cols, backend.take_values(order, starts))))
    last = xp.empty(int(starts.size), dtype=xp.int64)          # each run's last sorted row
    last[:-1] = starts[1:] - 1
    last[-1] = n - 1
    if w is None:
        out[WEIGHT] = last - starts.astype(xp.int64) + 1
    else:
        cum = backend.take_values(backend.prefix_sum(backend.take_values(w, order)), last)
        cum[1:] -= cum[:-1].copy()
        out[WEIGHT] = cum
    return out


def _sorted_runs(backend, key):
    """(an order sorting ``key``, whether each sorted value starts a run of equal ones)."""
    order = backend.xp.argsort(key)
    return order, backend.run_starts(backend.take_values(key, order))


def weighted_sum(backend, counts, w) -> int:
    """Σ counts · w over rows (``w`` None: Σ counts), exact."""
    if w is None:
        return backend.host_reductions(("sum", counts))[0]
    n = int(counts.size)
    top, wtop, total = backend.host_reductions(("max", counts), ("max", w), ("sum", counts * w))
    if top * wtop * n < _INT64_SAFE:
        return total
    return int(sum(backend.to_host(counts).astype(object) * backend.to_host(w).astype(object)))


def rows_counted(backend, chunk) -> int:
    """The partial matches ``chunk``'s rows stand for: its rows, or the sum of their weights."""
    w = chunk.get(WEIGHT)
    if w is None:
        return int(next(iter(chunk.values())).size)
    top, total = backend.host_reductions(("max", w), ("sum", w))
    if top * int(w.size) < _INT64_SAFE:
        return total
    return int(sum(backend.to_host(w).astype(object)))
