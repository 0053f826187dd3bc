"""Streaming neighbour lists N(v, l) out of a partition's segments (§6.1).

A partition's edges are sorted by (src, dst) and cut into segments of equal
edge count, so N(v, l) may span consecutive segments. These helpers find the
segments that hold a set of vertices and read their lists segment by
segment, in order, through each segment's PCSR.
"""

from __future__ import annotations

import numpy as np

from ..partition import pcsr


def neighbour_lists(store, backend, p, vertices):
    """Stream N(v, l) for sorted distinct ``vertices`` over partition ``p``.

    Yields ``(lo, hi, nb, owner)`` per segment holding any of them: the
    vertices ``vertices[lo:hi]`` lie in the segment, ``nb`` holds their
    neighbours there (each vertex's sorted), ``owner`` the index (0..hi-lo)
    of the vertex each neighbour belongs to. A vertex's list may continue in
    the next segment.
    """
    xp = backend.xp
    for lo, hi, groups, ci in segments_of(store, backend, p, vertices):
        st, en = backend.pcsr_lookup(groups, vertices[lo:hi])
        cnt = en - st
        nb = ci[pcsr.ragged_indices(st, cnt, xp)]
        yield lo, hi, nb, backend.repeat_index(cnt)


def segments_of(store, backend, p, vertices):
    """The segments of partition ``p`` holding any of the sorted distinct ``vertices``, in
    order, on the backend: yields ``(lo, hi, groups, ci)``, ``vertices[lo:hi]`` being the
    ones the segment may hold (a vertex's list may continue in the next segment)."""
    xp = backend.xp
    positions = segment_range(p, backend.to_host(vertices))
    bounds = backend.to_host(xp.searchsorted(vertices, backend.to_device(
        np.stack([p.first_src[positions], p.last_src[positions] + 1]).astype(np.int32))))
    for i, groups, ci in backend.segments(store, p.seg_ids[positions]):
        lo, hi = int(bounds[0, i]), int(bounds[1, i])
        if lo < hi:
            yield lo, hi, groups, ci


def segment_range(p, v_sorted):
    """Positions (in partition ``p``) of the segments holding any of the sorted vertex ids."""
    if len(v_sorted) == 0 or p.seg_ids.size == 0:
        return np.zeros(0, np.int64)
    first = np.searchsorted(p.last_src, v_sorted, "left")      # first segment whose last source >= v
    last = np.searchsorted(p.first_src, v_sorted, "right") - 1  # last segment whose first source <= v
    ok = first <= last
    first, last = first[ok], last[ok]
    mark = np.zeros(p.seg_ids.size + 1, np.int64)
    np.add.at(mark, first, 1)
    np.add.at(mark, last + 1, -1)
    return np.flatnonzero(np.cumsum(mark[:-1]) > 0)


def degree_index(store, backend, bid):
    """(vertex, degree) arrays of degree-index batch ``bid``, where the backend computes."""
    bid = int(bid)
    v, d = backend.store_arrays([(store.path, "index-v", bid), (store.path, "index-d", bid)],
                                lambda: store.index_batch(bid))
    return v, d
