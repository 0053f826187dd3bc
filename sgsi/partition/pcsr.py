"""PCSR: the Partitioned Compressed Sparse Row structure of one segment (§4).

A segment holds a run of edges of one edge-label partition P(G, l), sorted
by (src, dst). Its PCSR has

* ``ci``: the column index, every neighbour list, each sorted;
* ``groups``: Δ = |V(D)| groups of Θ pairs, an int32 array of shape
  (Δ, Θ, 2). Pairs ``0..Θ-2`` are ``(v, o_v)``: vertex v, hashed to this
  group, whose neighbours are ``ci[o_v : next]``, where ``next`` is the
  offset of the following pair; unused pairs are ``(-1, END)``. The last
  pair is ``(GID, END)``: GID = -1, or the group that holds the vertices that
  overflowed this one; END = the end of the neighbours of the group's last
  vertex, so the end offset of the pair in slot s is always
  ``groups[g, s + 1, 1]``.

``ci`` is laid out group by group, slot by slot. Overflowing vertices of a
group take chains of empty groups; with Δ = |V(D)| there are always enough
(Claim 1 of the paper): a group of c ≥ Θ vertices needs
ceil((c - Θ + 1)/(Θ - 1)) ≤ c - 1 extra groups, and the empty groups number
exactly Σ(c - 1) over non-empty groups.

Lookup (:func:`lookup`) hashes v, reads one group, probes it and follows
GID: O(1) expected transactions. The CUDA kernel in
:mod:`sgsi.join.kernels` does the same with one warp per group.
"""

from __future__ import annotations

import numpy as np

#: Default number of pairs per group (Θ); 2 ≤ Θ ≤ 16.
DEFAULT_THETA = 4

_HASH_MULT = 2654435761  # Knuth's multiplicative constant (2^32 / φ)


def vertex_hash(v, n_groups, xp=np):
    """Group of vertex ids ``v``: ``(v * 2654435761 mod 2^32) mod n_groups``.

    The CUDA kernels compute the same with 32-bit unsigned arithmetic.
    """
    h = (v.astype(xp.uint64) * xp.uint64(_HASH_MULT)) & xp.uint64(0xFFFFFFFF)
    return (h % xp.uint64(n_groups)).astype(xp.int64)


def build(src: np.ndarray, dst: np.ndarray, theta: int = DEFAULT_THETA):
    """Build the PCSR of one segment from its edges, sorted by (src, dst).

    Returns
    -------
    groups : ndarray of int32, shape (Δ, Θ, 2)
    ci : ndarray of int32, the neighbour lists in group layout

    Examples
    --------
    >>> g, ci = build(np.array([0, 0, 5]), np.array([1, 2, 0]), theta=2)
    >>> sorted(ci.tolist())
    [0, 1, 2]
    """
    if not 2 <= theta <= 16:
        raise ValueError(f"theta must be in 2..16, got {theta}")
    n = len(src)
    if n == 0:
        return np.zeros((0, theta, 2), np.int32), np.zeros(0, np.int32)
    src = np.asarray(src)
    starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]])
    verts = src[starts].astype(np.int64)
    counts = np.diff(np.r_[starts, n])
    n_groups = len(verts)
    cap = theta - 1

    h = vertex_hash(verts, n_groups)
    order = np.lexsort((verts, h))            # by group, then vertex id
    hs = h[order]
    first = np.flatnonzero(np.r_[True, hs[1:] != hs[:-1]])
    rank = np.arange(n_groups) - np.repeat(first, np.diff(np.r_[first, n_groups]))

    # Vertices past the first Θ-1 of their group go to chains of empty groups,
    # Θ-1 vertices per chained group.
    primary = rank < cap
    chunk = np.where(primary, -1, (rank - cap) // cap)
    group_of = hs.copy()
    slot = np.where(primary, rank, (rank - cap) % cap)
    gid = np.full(n_groups, -1, np.int64)
    over = np.flatnonzero(~primary)
    if over.size:
        key_h, key_c = hs[over], chunk[over]
        new_chunk = np.r_[True, (key_h[1:] != key_h[:-1]) | (key_c[1:] != key_c[:-1])]
        chunk_id = np.cumsum(new_chunk) - 1
        empty = np.setdiff1d(np.arange(n_groups), hs, assume_unique=False)
        n_chunks = int(chunk_id[-1]) + 1
        assert n_chunks <= empty.size, "PCSR overflow groups exhausted (Claim 1 violated)"
        chunk_group = empty[:n_chunks]
        group_of[over] = chunk_group[chunk_id]
        # Link: the home group points at the first chunk, each chunk at the next.
        starts_c = np.flatnonzero(new_chunk)
        c_h, c_c = key_h[starts_c], key_c[starts_c]
        first_of_home = c_c == 0
        gid[c_h[first_of_home]] = chunk_group[first_of_home]
        nxt = np.flatnonzero(~first_of_home)          # chunk k>0 follows chunk k-1
        gid[chunk_group[nxt - 1]] = chunk_group[nxt]

    # ci layout: by (group, slot); offsets are the prefix sum of degrees.
    layout = np.lexsort((slot, group_of))
    lay_vert = order[layout]                      # index into verts
    lay_counts = counts[lay_vert]
    offsets = np.r_[0, np.cumsum(lay_counts)]
    per_group = np.bincount(group_of, weights=counts[order], minlength=n_groups).astype(np.int64)
    end = np.cumsum(per_group)

    groups = np.empty((n_groups, theta, 2), np.int64)
    groups[:, :, 0] = -1
    groups[:, :, 1] = end[:, None]
    g_lay, s_lay = group_of[layout], slot[layout]
    groups[g_lay, s_lay, 0] = verts[lay_vert]
    groups[g_lay, s_lay, 1] = offsets[:-1]
    groups[:, cap, 0] = gid

    ci = dst[ragged_indices(starts[lay_vert], lay_counts)]
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError("segment too large for int32 offsets")
    return groups.astype(np.int32), ci.astype(np.int32)


def ragged_indices(starts, counts, xp=np):
    """Concatenation of ``arange(s, s + c)`` for each (s, c), vectorized."""
    counts = xp.asarray(counts, dtype=xp.int64)
    total = int(counts.sum())
    if total == 0:
        return xp.zeros(0, xp.int64)
    csum = xp.cumsum(counts)
    row_start = csum - counts
    step = xp.ones(total, xp.int64)
    nz = counts > 0
    # At each row's first element, jump from the previous row's end to its start.
    first_pos = row_start[nz]
    starts = xp.asarray(starts, dtype=xp.int64)[nz]
    prev_end = xp.concatenate([xp.zeros(1, xp.int64), (starts + counts[nz])[:-1]])
    step[first_pos] = starts - prev_end + 1
    step[0] = starts[0]
    return xp.cumsum(step)


def lookup(groups, v, xp=np):
    """Find N(v) in one segment for each vertex in ``v``.

    Returns ``(start, end)`` into the segment's ``ci``; ``start == end == 0``
    where a vertex is absent. Follows overflow chains (a loop over chain
    depth, not over vertices).
    """
    n_groups, theta, _ = groups.shape
    v = xp.asarray(v)
    start = xp.zeros(v.shape, xp.int64)
    end = xp.zeros(v.shape, xp.int64)
    if n_groups == 0 or v.size == 0:
        return start, end
    cap = theta - 1
    pending = xp.flatnonzero(v >= 0)        # ids are never negative; -1 marks unused slots
    g = vertex_hash(v[pending], n_groups, xp)
    while pending.size:
        grp = groups[g]                                   # (k, Θ, 2)
        hit = grp[:, :cap, 0] == v[pending, None]
        found = hit.any(axis=1)
        s = hit.argmax(axis=1)
        rows = xp.arange(pending.size)
        f = rows[found]
        start[pending[f]] = grp[f, s[f], 1]
        end[pending[f]] = grp[f, s[f] + 1, 1]
        nxt = grp[:, cap, 0]
        go = (~found) & (nxt >= 0)
        pending, g = pending[go], nxt[go].astype(xp.int64)
    return start, end
