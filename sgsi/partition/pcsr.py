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
GID: O(1) expected transactions. The GPU's ``pcsr_lookup`` kernel does
the same with one warp per group.
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
    return (h % xp.asarray(n_groups, dtype=xp.uint64)).astype(xp.int64)


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
    if len(src) == 0:
        return np.zeros((0, theta, 2), np.int32), np.zeros(0, np.int32)
    src = np.asarray(src)
    starts, verts, counts = source_runs(src)
    return build_from_runs(starts, verts, counts, np.asarray(dst), theta)


def source_runs(src: np.ndarray):
    """(starts, verts, counts) of the runs of equal values of a sorted ``src``."""
    n = len(src)
    starts = np.flatnonzero(src[1:] != src[:-1])
    starts += 1
    starts = np.concatenate([np.zeros(1, starts.dtype), starts])
    verts = src[starts]
    counts = np.diff(starts, append=n)
    return starts, verts, counts


def _hash_groups(verts, n_groups):
    """:func:`vertex_hash` of non-negative int32 ids in 32-bit arithmetic (the same values)."""
    v = np.asarray(verts)
    if v.dtype != np.uint32:
        v = v.astype(np.uint32)           # ids are 0 <= v < 2^31: exact
    h = v * np.uint32(_HASH_MULT)         # wraps mod 2^32, as the & 0xFFFFFFFF does
    h %= np.uint32(n_groups)
    return h


def _stable_order(h, n_keys):
    """``argsort(h, kind="stable")`` for 0 <= h < n_keys, by 16-bit radix passes."""
    if n_keys <= 1 << 16:
        return np.argsort(h.astype(np.uint16), kind="stable")
    order = np.argsort((h & np.uint32(0xFFFF)).astype(np.uint16), kind="stable")
    hi = (h >> np.uint32(16)).astype(np.uint16)
    return order[np.argsort(hi[order], kind="stable")]


def build_from_runs(starts, verts, counts, dst, theta: int = DEFAULT_THETA):
    """:func:`build` from the source runs of a sorted segment (see :func:`source_runs`)."""
    n = len(dst)
    n_groups = len(verts)
    if n_groups == 0:
        return np.zeros((0, theta, 2), np.int32), np.zeros(0, np.int32)
    if n > np.iinfo(np.int32).max:
        raise ValueError("segment too large for int32 offsets")
    cap = theta - 1

    h = _hash_groups(verts, n_groups)
    order = _stable_order(h, n_groups)        # by group, then vertex id (verts are sorted)
    hs = h[order].astype(np.int64)
    idx = np.arange(n_groups)
    new_group = np.empty(n_groups, bool)
    new_group[0] = True
    np.not_equal(hs[1:], hs[:-1], out=new_group[1:])
    rank = idx - np.maximum.accumulate(np.where(new_group, idx, 0))

    # Vertices past the first Θ-1 of their group go to chains of empty groups,
    # Θ-1 vertices per chained group.
    group_of = hs
    slot = rank
    gid = np.full(n_groups, -1, np.int32)
    over = np.flatnonzero(rank >= cap)
    if over.size:
        key_h = hs[over]
        r = rank[over] - cap
        key_c = r // cap
        slot = rank.copy()
        slot[over] = r % cap
        new_chunk = np.r_[True, (key_h[1:] != key_h[:-1]) | (key_c[1:] != key_c[:-1])]
        chunk_id = np.cumsum(new_chunk) - 1
        used = np.zeros(n_groups, bool)
        used[hs] = True
        empty = np.flatnonzero(~used)
        n_chunks = int(chunk_id[-1]) + 1
        assert n_chunks <= empty.size, "PCSR overflow groups exhausted (Claim 1 violated)"
        chunk_group = empty[:n_chunks]
        group_of = hs.copy()
        group_of[over] = chunk_group[chunk_id]
        # Link: the home group points at the first chunk, each chunk at the next.
        starts_c = np.flatnonzero(new_chunk)
        c_h, c_c = key_h[starts_c], key_c[starts_c]
        first_of_home = c_c == 0
        gid[c_h[first_of_home]] = chunk_group[first_of_home]
        nxt = np.flatnonzero(~first_of_home)          # chunk k>0 follows chunk k-1
        gid[chunk_group[nxt - 1]] = chunk_group[nxt]

    # ci layout: by (group, slot); every (group, slot) holds at most one vertex.
    cell = group_of * cap + slot
    grid = np.full(n_groups * cap, -1, np.int64)
    grid[cell] = idx
    layout = grid[grid >= 0]                      # index into order, by (group, slot)
    lay_vert = order[layout]                      # index into verts
    lay_counts = counts[lay_vert]
    offsets = np.empty(n_groups + 1, np.int64)
    offsets[0] = 0
    np.cumsum(lay_counts, out=offsets[1:])
    g_lay = group_of[layout]
    s_lay = slot[layout]
    end = offsets[np.cumsum(np.bincount(g_lay, minlength=n_groups))]

    groups = np.empty((n_groups, theta, 2), np.int32)
    groups[:, :, 0] = -1
    groups[:, :, 1] = end[:, None]
    groups[g_lay, s_lay, 0] = verts[lay_vert]
    groups[g_lay, s_lay, 1] = offsets[:-1]
    groups[:, cap, 0] = gid

    ci = _gather_lists(dst, starts[lay_vert], lay_counts, offsets)
    return groups, ci


#: Edges gathered per step of :func:`_gather_lists` (keeps its temporaries small and reused).
_GATHER_STEP = 1 << 20
_ARANGE = np.arange(_GATHER_STEP)


def _gather_lists(dst, list_start, list_len, offsets):
    """``concatenate([dst[s:s + c] for s, c in zip(list_start, list_len)])`` as int32.

    ``offsets`` is the prefix sum of ``list_len`` (with a leading 0). Done in
    steps of about ``_GATHER_STEP`` edges: ci[k] = dst[k + start - offset]
    for the list that holds position k.
    """
    n = int(offsets[-1])
    ci = np.empty(n, np.int32)
    delta = list_start - offsets[:-1]
    cuts = np.unique(np.searchsorted(offsets, np.arange(0, n, _GATHER_STEP), "right") - 1)
    cuts = np.r_[cuts, len(list_len)].tolist()
    for a, b in zip(cuts[:-1], cuts[1:]):              # steps of ~_GATHER_STEP edges, not single lists
        e0, e1 = int(offsets[a]), int(offsets[b])
        if e1 == e0:
            continue
        idx = np.repeat(delta[a:b], list_len[a:b])
        idx += _ARANGE[:e1 - e0] if e1 - e0 <= _GATHER_STEP else np.arange(e1 - e0)
        idx += e0
        np.take(dst, idx, out=ci[e0:e1], mode="clip")    # in range by construction
    return ci


def ragged_indices(starts, counts):
    """Concatenation of ``arange(s, s + c)`` for each (s, c), vectorized: int32 where every index
    fits (half the memory traffic of int64), else int64. (The backends' ``ragged_indices``: this
    on the CPU, a kernel and a scan on the GPU.)

    Examples
    --------
    >>> ragged_indices(np.array([100, 70]), np.array([3, 2])).tolist()
    [100, 101, 102, 70, 71]
    """
    counts = np.asarray(counts, dtype=np.int64)
    if counts.shape == (1,):
        # One row (most calls of the CPU join): one arange, not a dozen NumPy calls (~13 µs).
        c = int(counts[0])
        if c == 0:
            return np.zeros(0, np.int64)
        s = int(np.asarray(starts, dtype=np.int64).reshape(-1)[0])
        return np.arange(s, s + c, dtype=np.int32 if c < 2 ** 31 and s + c < 2 ** 31 else np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    row_start = np.cumsum(counts) - counts
    # Each row's offset (start - where the row begins in the output), repeated, plus a ramp.
    small = total < 2 ** 31 and int((starts + counts).max()) < 2 ** 31
    dt = np.int32 if small else np.int64
    idx = np.repeat((starts - row_start).astype(dt), counts)
    idx += np.arange(total, dtype=dt)
    return idx


def lookup(groups, v, xp=np):
    """Find N(v) in one segment for each vertex in ``v``.

    Returns ``(start, end)`` into the segment's ``ci``; ``start == end == 0``
    where a vertex is absent. Follows overflow chains (a loop over chain
    depth, not over vertices).
    """
    n_groups, theta, _ = groups.shape
    v = xp.asarray(v)
    if xp is np and v.size == 1 and n_groups:
        return _lookup_one(groups, int(v.reshape(-1)[0]), v.shape, n_groups, theta - 1)
    start = xp.zeros(v.shape, xp.int64)
    end = xp.zeros(v.shape, xp.int64)
    if n_groups == 0 or v.size == 0:
        return start, end
    pending = xp.flatnonzero(v >= 0)        # ids are never negative; -1 marks unused slots
    _chase(lambda g, _b: groups[g], v, pending, vertex_hash(v[pending], n_groups, xp), None, None,
           start, end, theta - 1, xp)
    return start, end


def lookup_flat(flat, v, base, n_groups, theta, xp=np):
    """:func:`lookup` of each ``v[i]`` in the segment whose groups start at ``flat[base[i]]`` (even),
    ``n_groups[i]`` of them: the groups of many segments read as one int32 array, as they lie in
    their file. Raises IndexError where an overflow link leaves its segment (a damaged one)."""
    v = xp.asarray(v)
    start = xp.zeros(v.shape, xp.int64)
    end = xp.zeros(v.shape, xp.int64)
    pending = xp.flatnonzero((v >= 0) & (n_groups > 0))
    pairs = flat[:flat.size // 2 * 2].reshape(-1, 2)
    ramp = xp.arange(theta)
    b, ng = base[pending] // 2, n_groups[pending]
    _chase(lambda g, b: pairs[(b + g * theta)[:, None] + ramp], v, pending, vertex_hash(v[pending], ng, xp), b, ng,
           start, end, theta - 1, xp)
    return start, end


def slots(groups, v):
    """The pair of each vertex of ``v`` present in one segment, as an index into
    ``groups.reshape(-1, 2)`` (its slot's vertex id and offset), for the vertices found only."""
    n_groups, theta, _ = groups.shape
    v = np.asarray(v)
    at = np.full(v.shape, -1, np.int64)
    if n_groups and v.size:
        pending = np.flatnonzero(v >= 0)
        _chase(lambda g, _b: groups[g], v, pending, vertex_hash(v[pending], n_groups), None, None,
               None, None, theta - 1, np, at)
    return at[at >= 0]


def _chase(rows, v, pending, g, b, ng, start, end, cap, xp, at=None):
    """Probe group ``g`` of each pending vertex, then its overflow chain, filling ``start`` and ``end``
    (or ``at``: the pair's index, group * Θ + slot); ``rows(g, b)`` gathers the groups (k, Θ, 2), of
    the segments at ``b`` (``ng`` groups each) if given."""
    while pending.size:
        grp = rows(g, b)
        hit = grp[:, :cap, 0] == v[pending, None]
        found = hit.any(axis=1)
        s = hit.argmax(axis=1)
        f = xp.flatnonzero(found)
        if at is not None:
            at[pending[f]] = g[f] * (cap + 1) + s[f]
        else:
            start[pending[f]] = grp[f, s[f], 1]
            end[pending[f]] = grp[f, s[f] + 1, 1]
        nxt = grp[:, cap, 0]
        go = (~found) & (nxt >= 0)
        pending, g = pending[go], nxt[go].astype(xp.int64)
        if b is not None:
            b, ng = b[go], ng[go]
            if bool((g >= ng).any()):
                raise IndexError("an overflow link past its segment's groups")


def _lookup_one(groups, v, shape, n_groups, cap):
    """:func:`lookup` of one vertex ``v`` in NumPy groups, probed as Python scalars: most lookups
    of the CPU join are of one vertex, where the vectorized probe's two dozen NumPy calls took
    ~40 µs. The same hash, the same first matching slot, the same overflow chain."""
    start = end = 0
    if v >= 0:
        g = ((v * _HASH_MULT) & 0xFFFFFFFF) % n_groups
        while g >= 0:
            pairs = groups[g].tolist()                    # Θ pairs [v, o]; the last [GID, END]
            for s in range(cap):
                if pairs[s][0] == v:
                    start, end = pairs[s][1], pairs[s + 1][1]
                    g = -1
                    break
            else:
                g = pairs[cap][0]
    return np.full(shape, start, np.int64), np.full(shape, end, np.int64)
