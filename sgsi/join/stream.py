"""Streaming neighbour lists N(v, l) out of a partition's segments (§6.1).

A partition's edges are sorted by (src, dst) and cut into segments of equal
edge count, so N(v, l) may span consecutive segments. These helpers find the
segments that hold a set of vertices and read their lists segment by
segment, in order, through each segment's PCSR.
"""

from __future__ import annotations

import numpy as np


def neighbour_lists(store, backend, p, vertices):
    """Stream N(v, l) for sorted distinct ``vertices`` over partition ``p``.

    Yields ``(lo, hi, nb, owner)`` per segment holding any of them: the
    vertices ``vertices[lo:hi]`` lie in the segment, ``nb`` holds their
    neighbours there (each vertex's sorted), ``owner`` the index (0..hi-lo)
    of the vertex each neighbour belongs to. A vertex's list may continue in
    the next segment.
    """
    for lo, hi, groups, ci in segments_of(store, backend, p, vertices):
        st, en = backend.pcsr_lookup(groups, vertices[lo:hi])
        cnt = en - st
        nb = ci[backend.ragged_indices(st, cnt)]
        yield lo, hi, nb, backend.repeat_index(cnt)


def segments_of(store, backend, p, vertices):
    """The segments of partition ``p`` holding any of the sorted distinct ``vertices``, in
    order, on the backend: yields ``(lo, hi, groups, ci)``, ``vertices[lo:hi]`` being the
    ones the segment may hold (a vertex's list may continue in the next segment).

    Each segment's source range [first_src, last_src] is searched in the vertices where
    they are (the ranges are few, the vertices may be millions): one small read back.
    """
    if p.seg_ids.size == 0 or vertices.size == 0:
        return
    if p.seg_ids.size == 1:
        # One segment: it is asked for every vertex (one outside its range has no list there,
        # and its lookup finds none), with no search and no read back.
        for _i, groups, ci in backend.segments(store, p.seg_ids):
            yield 0, int(vertices.size), groups, ci
        return
    ranges = segment_ranges(store, backend, p)
    bounds = backend.to_host(backend.xp.searchsorted(vertices, ranges))       # (2, segments)
    positions = np.flatnonzero(bounds[1] > bounds[0])
    for i, groups, ci in backend.segments(store, p.seg_ids[positions]):
        yield int(bounds[0, positions[i]]), int(bounds[1, positions[i]]), groups, ci


def segment_ranges(store, backend, p):
    """The source ranges of partition ``p``'s segments on the backend, kept: int32 of shape
    (2, segments), the first source of each, then one past its last."""
    return backend.derived((store.token, "segment-ranges", p.key),
                           lambda: backend.to_device(np.stack([p.first_src, p.last_src + 1]).astype(np.int32)))


def spanning(p, lo, hi):
    """Positions, in partition ``p``, of the segments whose source range meets [lo, hi]: a run of
    consecutive ones, found by two binary searches (the segments come in (src, dst) order, so
    both their first and their last sources ascend)."""
    a = int(np.searchsorted(p.last_src, lo, "left"))
    return np.arange(a, max(a, int(np.searchsorted(p.first_src, hi, "right"))))


def segments_spanning(store, backend, p, lo, hi):
    """The segments of partition ``p`` whose source range meets [lo, hi], in order, on the
    backend: yields ``(groups, ci)`` (for vertices that come unsorted, with repeats)."""
    for _i, groups, ci in backend.segments(store, p.seg_ids[spanning(p, lo, hi)]):
        yield groups, ci


def degree_index(store, backend, bid):
    """(vertex, degree) arrays of degree-index batch ``bid``, where the backend computes."""
    bid = int(bid)
    v, d = backend.store_arrays([(store.token, "index-v", bid), (store.token, "index-d", bid)],
                                lambda: store.index_batch(bid))
    return v, d


def dense_degrees_of(store, backend, p):
    """|N(v, l)| of every vertex in partition ``p`` (int32, zero off the partition), made on the
    backend from the partition's degree index batches and kept with its derived arrays between
    queries (``backend.derived``). The backends' ``dense_degrees`` call it where it fits."""
    xp = backend.xp

    def make():
        dense = xp.zeros(store.n_vertices, xp.int32)
        for bid in p.idx_batches:
            v, d = degree_index(store, backend, bid)
            dense[v] = d
        return dense
    return backend.derived((store.token, "dense-degrees", p.key), make)
