"""Sets of vertex pairs as sorted int64 keys, and the row filters a plan runs on them.

A pair (x, y) of dense ids is the key ``x * span + y``; a set of pairs is its keys, sorted and
distinct, tested by ``searchsorted`` on the backend's array module. A :class:`RowFilter` keeps
the rows of a join whose pair (m(u), m(w)) is in such a set (``keep``), or not in it: the
anchored queries of incremental matching (``join/delta.py``) restrict their joins with them,
each at the first level of the order where both its vertices are matched.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def pair_keys(src, dst, span) -> np.ndarray:
    """The sorted distinct int64 keys of the pairs (src[i], dst[i]) (host arrays)."""
    return distinct(np.asarray(src, np.int64) * span + np.asarray(dst, np.int64))


def distinct(a) -> np.ndarray:
    """The sorted distinct values of a host array (by a sort: NumPy's hashed ``unique`` took
    1.4 ms for 2,000 ids)."""
    a = np.sort(a)
    return a[np.concatenate([[True], a[1:] != a[:-1]])] if a.size else a


def in_bits(bits, ids) -> np.ndarray:
    """Whether each id of ``ids`` is in the bitset ``bits`` (host arrays)."""
    return ((bits[ids >> 5] >> (ids & 31).astype(np.uint32)) & 1).astype(bool)


def contains(xp, keys, a, b, span):
    """Whether each pair (a[i], b[i]) is in the set ``keys`` (sorted, on ``xp``): a bool array."""
    q = a.astype(xp.int64) * span + b.astype(xp.int64)
    if keys.size == 0:
        return xp.zeros(q.shape, dtype=bool)
    at = xp.minimum(xp.searchsorted(keys, q), keys.size - 1)
    return keys[at] == q


def id_bits(backend, ids, n):
    """The bitset (uint32 words over ``n`` vertices) of the ids ``ids`` (host ints, below n)."""
    xp = backend.xp
    words = xp.zeros((n + 31) // 32, dtype=xp.int64)
    v = backend.to_device(distinct(np.asarray(ids, np.int64)))
    if v.size:      # distinct ids: their bits in one word add up to their OR
        backend.add_at(words, v >> 5, xp.left_shift(xp.ones(v.shape, xp.int64), v & 31))
    return words.astype(xp.uint32)


@dataclass(frozen=True)
class RowFilter:
    """Keep the rows whose (m(u), m(w)) is in ``keys`` (``keep``) or not; ``level``: the index in
    the plan's order where both are matched, so the chunks of that level are filtered."""

    level: int
    u: int
    w: int
    keys: object            # sorted int64 keys on the backend
    span: int
    keep: bool

    def mask(self, xp, chunk):
        hit = contains(xp, self.keys, chunk[self.u], chunk[self.w], self.span)
        return hit if self.keep else ~hit
