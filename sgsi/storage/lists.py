"""Neighbour lists and edge sets as NumPy arrays, for updates and their reader view.

Everything here is vectorized over vertices and edges; loops run over
segments, labels or versions only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import StoreError
from ..partition import pcsr

_LOW = np.int64(0xFFFFFFFF)


def pair_keys(src, dst) -> np.ndarray:
    """int64 keys ``src << 32 | dst`` of non-negative int32 pairs (sorting them sorts by (src, dst))."""
    return (np.asarray(src, np.int64) << 32) | np.asarray(dst, np.int64)


def split_keys(keys):
    """(src, dst) int32 of :func:`pair_keys`."""
    keys = np.asarray(keys, np.int64)
    return (keys >> 32).astype(np.int32), (keys & _LOW).astype(np.int32)


def sorted_unique(keys, kind="stable"):
    """``np.unique`` of int keys by a sort and a neighbour test: stable (linear on sorted runs), or
    ``kind=None`` for keys in no order (NumPy's SIMD sort; its unique hashes, 8x slower)."""
    k = np.sort(np.asarray(keys), kind=kind)
    return k[np.r_[True, k[1:] != k[:-1]]] if k.size else k


def in_sorted(a, b, a_sorted=False):
    """Whether each value of ``a`` is in ``b`` (sorted): a searchsorted of ``a`` in ``b``, or
    where ``a`` is sorted too and the longer, of ``b`` in ``a``, marking the runs it finds
    (``np.isin`` of 1.7M pair keys in 3K: 73 ms; this: a few)."""
    a = np.asarray(a)
    if not b.size or not a.size:
        return np.zeros(a.shape, bool)
    if not a_sorted or a.size <= b.size:
        return b[np.minimum(np.searchsorted(b, a), b.size - 1)] == a
    runs = np.bincount(np.searchsorted(a, b, "left"), minlength=a.size + 1)
    runs -= np.bincount(np.searchsorted(a, b, "right"), minlength=a.size + 1)
    return np.cumsum(runs[:-1]) > 0


def edge_order(s, d, l):
    """Indices sorting edges by (src, dst, label)."""
    return np.lexsort((l, d, s))


class EdgeKeys:
    """One int64 key per edge (s, d, l), ordered as the triples: s, d and l in bit fields just wide
    enough for the edges it was made for (:meth:`of`). One sort or searchsorted of keys replaces a
    lexsort of three columns (100K edges: 1.3 ms against 23 ms)."""

    def __init__(self, vertex_bits, label_bits):
        self.vb, self.lb = vertex_bits, label_bits

    @classmethod
    def of(cls, *sets):
        """A coding for every edge of the (s, d, l) ``sets``; None where 63 bits are too few (or a
        value is negative): then sort the columns (:func:`edge_order`)."""
        cols = [np.asarray(x) for e in sets for x in e]
        if any(c.size and int(c.min()) < 0 for c in cols):
            return None
        top = [int(c.max(initial=0)) for c in cols]
        vb = max([t for i, t in enumerate(top) if i % 3 < 2] + [0]).bit_length()
        lb = max(top[2::3] + [0]).bit_length()
        return cls(vb, lb) if 2 * vb + lb <= 63 else None

    def encode(self, s, d, l):
        k = np.asarray(s, np.int64) << (self.vb + self.lb)
        k |= np.asarray(d, np.int64) << self.lb
        k |= np.asarray(l, np.int64)
        return k

    def decode(self, k):
        """(s, d, l) int32 of keys."""
        s = (k >> (self.vb + self.lb)).astype(np.int32)
        d = ((k >> self.lb) & ((1 << self.vb) - 1)).astype(np.int32)
        return s, d, (k & ((1 << self.lb) - 1)).astype(np.int32)


def unique_edges(s, d, l):
    """Distinct (src, dst, label) edges, sorted."""
    s, d, l = (np.asarray(x, np.int32) for x in (s, d, l))
    if not len(s):
        return s, d, l
    code = EdgeKeys.of((s, d, l))
    if code is not None:
        k = np.sort(code.encode(s, d, l))
        return code.decode(k[np.r_[True, k[1:] != k[:-1]]])
    o = edge_order(s, d, l)
    s, d, l = s[o], d[o], l[o]
    keep = np.r_[True, (s[1:] != s[:-1]) | (d[1:] != d[:-1]) | (l[1:] != l[:-1])]
    return s[keep], d[keep], l[keep]


def canonical(s, d):
    """Undirected edges as (min, max)."""
    return np.minimum(s, d), np.maximum(s, d)


def edge_isin(s, d, l, ts, td, tl):
    """Whether each edge (s, d, l) is among the edges (ts, td, tl)."""
    if not len(s) or not len(ts):
        return np.zeros(len(s), bool)
    code = EdgeKeys.of((s, d, l), (ts, td, tl))
    if code is not None:
        # A searchsorted of the keys in the sorted other set's (fast where they come sorted).
        return in_sorted(code.encode(s, d, l), np.sort(code.encode(ts, td, tl)))
    # Both sets sorted together by (pair key, label): an edge is in where its run of equal
    # edges holds one of the second set's (6x np.isin over a structured dtype at 100K + 450K).
    key = np.concatenate([pair_keys(s, d), pair_keys(ts, td)])
    lab = np.concatenate([np.asarray(l, np.int32), np.asarray(tl, np.int32)])
    o = np.lexsort((lab, key))
    key, lab = key[o], lab[o]
    run = np.cumsum(np.r_[True, (key[1:] != key[:-1]) | (lab[1:] != lab[:-1])]) - 1
    theirs = o >= len(s)
    held = np.bincount(run[theirs], minlength=int(run[-1]) + 1) > 0
    out = np.empty(len(s), bool)
    out[o[~theirs]] = held[run[~theirs]]
    return out


def net_events(versions):
    """The net edge change over consecutive versions' (inserted, deleted) edge triples.

    ``versions``: in version order, ``((s, d, l) inserted, (s, d, l) deleted)``,
    each net against the version before. An edge's events alternate; its first
    tells whether it was there before, its last whether it is there after.
    Returns (added, removed), each (s, d, l) int32 arrays sorted.
    """
    parts = [(e, t) for ins, dele in versions for e, t in ((ins, 1), (dele, -1)) if len(e[0])]
    empty = tuple(np.zeros(0, np.int32) for _ in range(3))
    if not parts:
        return empty, empty
    s = np.concatenate([np.asarray(e[0], np.int32) for e, _ in parts])
    d = np.concatenate([np.asarray(e[1], np.int32) for e, _ in parts])
    l = np.concatenate([np.asarray(e[2], np.int32) for e, _ in parts])
    kind = np.concatenate([np.full(len(e[0]), t, np.int8) for e, t in parts])
    code = EdgeKeys.of((s, d, l))
    if code is not None:            # stable: a merge of the parts' sorted runs, events in order
        k = code.encode(s, d, l)
        o = np.argsort(k, kind="stable")
        k, kind = k[o], kind[o]
        first = np.r_[True, k[1:] != k[:-1]]
    else:
        o = np.lexsort((np.arange(len(s)), l, d, s))
        s, d, l, kind = s[o], d[o], l[o], kind[o]
        first = np.r_[True, (s[1:] != s[:-1]) | (d[1:] != d[:-1]) | (l[1:] != l[:-1])]
    starts = np.flatnonzero(first)
    ends = np.r_[starts[1:], len(kind)] - 1
    a, b = kind[starts], kind[ends]
    add, rem = starts[(a == 1) & (b == 1)], starts[(a == -1) & (b == -1)]
    if code is not None:
        return code.decode(k[add]), code.decode(k[rem])
    return (s[add], d[add], l[add]), (s[rem], d[rem], l[rem])


def lists_in(seg_ids, first, last, get, vertices):
    """Neighbour lists of sorted distinct ``vertices`` in the given segments.

    ``get(seg)`` returns a segment's (groups, ci), or (groups, ci, hidden):
    the lists of the sorted vertices ``hidden`` are not there (a masked
    segment read from its base). Returns (owner, nb): for each list entry
    the index into ``vertices`` of its vertex and the neighbour, by owner
    (each list sorted, segments in order).
    """
    vertices = np.asarray(vertices, np.int32)
    owners, nbs = [], []
    if len(seg_ids) and len(vertices):
        lo = np.searchsorted(vertices, first, "left")
        hi = np.searchsorted(vertices, np.asarray(last, np.int64) + 1, "left")
        for k in np.flatnonzero(hi > lo):
            groups, ci, *hidden = get(int(seg_ids[k]))
            a, b = int(lo[k]), int(hi[k])
            st, en = _looked_up(lambda: pcsr.lookup(groups, vertices[a:b]), int(seg_ids[k]), len(ci))
            cnt = (en - st).astype(np.int64)
            if hidden and hidden[0] is not None:
                cnt[np.isin(vertices[a:b], hidden[0])] = 0
            if not cnt.sum():
                continue
            nbs.append(np.asarray(ci)[pcsr.ragged_indices(st, cnt)])
            owners.append(np.repeat(np.arange(a, b, dtype=np.int64), cnt))
    if not owners:
        return np.zeros(0, np.int64), np.zeros(0, np.int32)
    owner, nb = np.concatenate(owners), np.concatenate(nbs).astype(np.int32)
    if bool((owner[1:] >= owner[:-1]).all()):     # segments of disjoint ranges, in order: sorted already
        return owner, nb
    o = np.argsort(owner, kind="stable")
    return owner[o], nb[o]


def partition_lists(store, p, vertices):
    """:func:`lists_in` over partition ``p`` of ``store`` (as the store presents it)."""
    return lists_in(p.seg_ids, p.first_src, p.last_src, store.segment_lists, vertices)


def has_pairs(store, p, src, dst):
    """Whether partition ``p`` of ``store`` holds each pair (src, dst)."""
    return has_pairs_in(p, store.segment_lists, src, dst)


def has_pairs_in(p, get, src, dst):
    """Whether partition ``p``, its segments read with ``get(seg)`` (as :func:`lists_in`), holds
    each pair (src, dst): a binary search of dst in src's sorted list, in each segment whose
    range holds src (a loop over segments and halvings), reading O(log degree) of each list."""
    src, dst = np.asarray(src, np.int32), np.asarray(dst, np.int32)
    out = np.zeros(len(src), bool)
    if not len(src) or not len(p.seg_ids):
        return out
    o = np.argsort(src, kind="stable")
    ss = src[o]
    lo_k = np.searchsorted(ss, p.first_src, "left")
    hi_k = np.searchsorted(ss, np.asarray(p.last_src, np.int64) + 1, "left")
    for k in np.flatnonzero(hi_k > lo_k):
        seg = int(p.seg_ids[k])
        groups, ci, *hidden = get(seg)
        rows = o[int(lo_k[k]):int(hi_k[k])]
        lo, en = _looked_up(lambda: pcsr.lookup(groups, src[rows]), seg, len(ci))
        if hidden and hidden[0] is not None:
            en = np.where(np.isin(src[rows], hidden[0]), lo, en)
        out[rows] |= in_lists(np.asarray(ci), lo, en, dst[rows])
    return out


def _looked_up(find, seg, n_ci):
    """(start, end) of the lists ``find()`` looks up, checked to lie within their segment's ``n_ci``
    list values (they index and size arrays): a StoreError naming the segment (``seg``: its number,
    or each row's) where they do not, or an overflow link leaves its groups (a damaged segment)."""
    try:
        lo, en = find()
        bad = (lo < 0) | (en < lo) | (en > n_ci)
    except IndexError:
        lo = en = None
        bad = np.ones(np.size(seg), bool)
    if bool(bad.any()):
        at = seg if np.ndim(seg) == 0 else seg[np.flatnonzero(bad)[0]]
        raise StoreError(f"damaged store: PCSR segment {int(at)} holds values out of range "
                         f"(run `sgsi info --verify` on it)")
    return lo, en


def in_lists(ci, lo, en, d):
    """Whether each ``d[i]`` is in the sorted ``ci[lo[i]:en[i]]``: a binary search of each (a loop
    over halvings, reading O(log length) of each list); ``lo`` is consumed."""
    hi = en.copy()
    while True:                                        # a loop over halvings
        act = np.flatnonzero(lo < hi)
        if not act.size:
            break
        mid = (lo[act] + hi[act]) // 2
        less = ci[mid] < d[act]
        lo[act[less]] = mid[less] + 1
        hi[act[~less]] = mid[~less]
    hit = lo < en
    hit[hit] = ci[lo[hit]] == d[hit]
    return hit


def covering(first, last, keys):
    """(i, k): each key ``keys[i]`` with each range k of ``[first[k], last[k]]`` that holds it,
    the ranges sorted by both ends (a list that spans segments is in each of them)."""
    keys = np.asarray(keys, np.int64)
    j0 = np.searchsorted(np.asarray(last, np.int64), keys, "left")       # ranges ending at or past the key
    j1 = np.searchsorted(np.asarray(first, np.int64), keys, "right")     # ranges starting at or before it
    cnt = np.maximum(j1 - j0, 0)
    return np.repeat(np.arange(keys.size), cnt), pcsr.ragged_indices(j0, cnt)


@dataclass(frozen=True)
class SegmentTable:
    """Base segments read where they lie in the store's files (:meth:`~sgsi.storage.store.Store.segment_table`):
    ``groups`` and ``ci`` are int32 arrays over the whole of the groups' and the lists' file; the
    rest is per segment of ``ids`` (global segment numbers), in int32 values."""

    ids: np.ndarray
    groups: np.ndarray
    ci: np.ndarray
    goff: np.ndarray        # where the segment's groups start in ``groups``
    coff: np.ndarray        # where its lists start in ``ci``
    n_groups: np.ndarray
    n_ci: np.ndarray
    theta: int


def has_pairs_mapped(table, at, src, dst):
    """Whether segment ``table.ids[at[i]]`` holds the pair (src[i], dst[i]), for all i at once
    (no loop over segments): hashed lookups and binary searches in the files' arrays."""
    at = np.asarray(at, np.int64)
    src, dst = np.asarray(src, np.int32), np.asarray(dst, np.int32)
    lo, en = _looked_up(lambda: pcsr.lookup_flat(table.groups, src, table.goff[at], table.n_groups[at], table.theta),
                        table.ids[at], table.n_ci[at])
    start = table.coff[at]
    return in_lists(table.ci, lo + start, en + start, dst)


def segment_pairs(groups, ci):
    """Every (src, dst) of one PCSR segment, in its layout order (vertices with id -1 left out)."""
    groups = np.asarray(groups)
    if not groups.size:
        return np.zeros(0, np.int32), np.zeros(0, np.int32)
    cap = groups.shape[1] - 1
    v = groups[:, :cap, 0].reshape(-1)
    st = groups[:, :cap, 1].reshape(-1).astype(np.int64)
    en = groups[:, 1:, 1].reshape(-1).astype(np.int64)
    keep = v >= 0
    v, st, cnt = v[keep], st[keep], (en - st)[keep]
    return np.repeat(v, cnt).astype(np.int32), np.asarray(ci)[pcsr.ragged_indices(st, cnt)].astype(np.int32)
