"""Later linking edges (Algorithm 5): is each buffer entry in N(t_j, l_j)?

The entries of a piece come as (tuple, value) pairs, sorted by tuple and,
within a tuple, by value; the tuples use far fewer distinct linking vertices
than there are entries. So the lists of the distinct linking vertices are
streamed once into a bitset, one row per vertex over the entries' value
range, and each entry is then one bit lookup: linear passes and one gather,
no sort of the entries. The bitset is bounded by ``cap`` bytes; wider value
ranges are tested in blocks of linking vertices, and a single row too wide
for the cap falls back to a binary search of (vertex, neighbour) keys.

This is the CPU backend's way (``CpuBackend.member``; NumPy arrays) and the reference of the GPU's,
which binary-searches each entry in its vertex's list, segment by segment
(``GpuBackend.member``, the ``member_entries`` kernel).

Where the lists are already in memory, sorted, as ranks of a small value
space (the engine's gathered lists, see ``Engine._sets_whole``),
:func:`lists_bitset` and :func:`in_rows` do the same test without streaming.
"""

from __future__ import annotations

import numpy as np

from ..stream import neighbour_lists
from .base import cancel_point

#: Bitset bytes an entry may cost (the rows of a block's linking vertices over its entries' value
#: range) before the block's entries are searched in the sorted lists instead. A 100K-edge batch's
#: triangle delta on the 100M-edge R-MAT graph (2 cores): blocks of 8 rows of 1 MB for ~1,000
#: entries each, searched 3-7x faster.
SEARCH_PAST = 2048


def member(backend, store, link, vcol, erow, evals, cap, ecount=None, cbits=None):
    """For each entry i: is ``evals[i]`` in N(vcol[erow[i]], l)? (a bool array)

    ``vcol`` holds the linking vertex of each tuple; ``erow`` the tuple of
    each entry (sorted), and ``ecount``, if given, the entries of each tuple
    (``erow`` is then ``repeat(arange, ecount)``); ``cap`` bounds the bitset's bytes.
    ``cbits``, if given, is a bitset that holds every entry's value (the new
    vertex's candidates): values are then tested by their rank among its
    members, a denser space than the ids, so the bitset is smaller and its
    probes stay in cache.
    """
    n = int(evals.size)
    if n == 0:
        return np.zeros(0, dtype=bool)
    p = store.partition(link.label_id, link.direction)
    uniq, k_t = backend.distinct_index(vcol)
    xmin, xmax = int(evals.min()), int(evals.max())
    ranks = None
    if cbits is not None and xmax - xmin < 4 * n:
        incand = backend.test_bits(cbits, np.arange(xmin, xmax + 1, dtype=np.int64))
        ranks = (xmin, incand, np.cumsum(incand, dtype=np.int32) - 1)
        evals = np.take(ranks[2], evals - xmin)
        xmin, xmax = 0, int(ranks[2][-1])
    b0 = xmin >> 3
    width = (xmax >> 3) - b0 + 1                 # bytes per bitset row
    nd = int(uniq.size)
    per_block = max(1, cap // width)             # linking vertices per block
    if width > cap or (nd <= per_block and nd * width > SEARCH_PAST * n):
        return _member_search(backend, store, p, uniq, np.take(k_t, erow), evals, ranks)
    if nd <= per_block:
        bits = _bitset(backend, store, p, uniq, xmin, xmax, b0, width, ranks)
        return in_rows(bits, k_t * width - b0, erow, evals, ecount)
    # Blocks of linking vertices: regroup the entries by block (a sort of tuples), test each.
    found = np.empty(n, dtype=bool)
    block_t = k_t // per_block
    ot = backend.argsort(block_t)
    tstart = np.searchsorted(erow, np.arange(int(vcol.size) + 1))
    cnt = np.diff(tstart)[ot]
    perm = backend.ragged_indices(tstart[:-1][ot], cnt)            # entries, block-major
    ecum = np.zeros(cnt.size + 1, dtype=np.int64)
    ecum[1:] = backend.prefix_sum(cnt)
    nblocks = (nd + per_block - 1) // per_block
    ecut = backend.to_host(ecum[np.searchsorted(block_t[ot], np.arange(nblocks + 1))])
    for b in range(nblocks):                     # a loop over blocks of the bitset
        cancel_point()
        e0, e1 = int(ecut[b]), int(ecut[b + 1])
        if e1 == e0:
            continue
        r0, r1 = b * per_block, min(nd, (b + 1) * per_block)
        sel = perm[e0:e1]
        ev = np.take(evals, sel)
        kq = np.take(k_t, np.take(erow, sel)) - r0      # each entry's linking vertex in the block
        lo, hi = int(ev.min()), int(ev.max())
        bb0 = lo >> 3
        w = (hi >> 3) - bb0 + 1
        if (r1 - r0) * w > SEARCH_PAST * (e1 - e0):    # a sparse block: its entries searched
            found[sel] = _member_search(backend, store, p, uniq[r0:r1], kq, ev, ranks)
            continue
        bits = _bitset(backend, store, p, uniq[r0:r1], lo, hi, bb0, w, ranks)
        found[sel] = _test(bits, kq * w - bb0, ev)
    return found


def _test(bits, idx, evals):
    """Bit ``evals & 7`` of byte ``idx + (evals >> 3)`` of ``bits``, as bool (``idx`` is consumed)."""
    idx += evals >> 3
    byte = np.take(bits, idx)
    byte >>= evals.astype(np.uint8) & np.uint8(7)      # the low 3 bits survive the cast
    byte &= np.uint8(1)
    return byte.view(bool)


def _ranked(ranks, nb, owner):
    """Neighbours ``nb`` (of ``owner``) that are members of the ranked set, as their ranks."""
    base, incand, rank = ranks
    inside = np.flatnonzero((nb >= base) & (nb < base + incand.size))
    off, owner = np.take(nb, inside) - base, np.take(owner, inside)
    keep = np.flatnonzero(np.take(incand, off))
    return np.take(rank, np.take(off, keep)), np.take(owner, keep)


def _bitset(backend, store, p, uniq, xmin, xmax, b0, width, ranks=None):
    """uint8 rows of ``width`` bytes, one per vertex of ``uniq``: bit x - 8*b0 set iff x in N(v, l)
    (x the rank of the neighbour among the members of ``ranks``, where given)."""
    bits = np.zeros(int(uniq.size) * width, dtype=np.uint8)
    for lo, _hi, nb, owner in neighbour_lists(store, backend, p, uniq):
        cancel_point()
        if ranks is not None:           # ranks grow with ids: each owner's list stays sorted
            nb, owner = _ranked(ranks, nb, owner)
        ok = (nb >= xmin) & (nb <= xmax)
        nb = nb[ok]
        if nb.size == 0:
            continue
        _set_bits(backend, bits, owner[ok] + lo, nb, width, b0)     # |=: a list may continue in the next segment
    return bits


def _set_bits(backend, bits, row, nb, width, b0):
    """bits |= bit ``nb - 8*b0`` of row ``row``, for (row, nb) pairs sorted and distinct."""
    # Byte positions come sorted and the bits of one byte distinct, so their sum is their OR.
    byte = row * width + ((nb >> 3) - b0)
    ub, _start, end = backend.runs(byte)
    bits[ub] |= _sums_over_runs(np.left_shift(np.int32(1), nb & 7), end, np.int32).astype(np.uint8)


def lists_bitset(backend, count, values, nbits):
    """Bitset rows of ``(nbits + 7) // 8`` bytes, one per list: row i has the bits of
    ``values`` of list i set. The lists lie back to back in ``values`` (``count[i]``
    of list i, each sorted, distinct). Returns (bits, row width in bytes)."""
    width = (nbits + 7) >> 3
    bits = np.zeros(int(count.size) * width, dtype=np.uint8)
    if values.size:
        _set_bits(backend, bits, backend.repeat_index(count), values, width, 0)
    return bits, width


def in_rows(bits, rowbase, erow, evals, ecount=None):
    """Entry i: is bit ``evals[i]`` set in the bitset row that starts at byte
    ``rowbase[erow[i]]``? (``ecount``: entries per row, when ``erow`` is sorted)"""
    if int(bits.size) < 2 ** 31:
        rowbase = rowbase.astype(np.int32)
    if ecount is not None:
        return _test(bits, np.repeat(rowbase, ecount), evals)
    return _test(bits, np.take(rowbase, erow), evals)


def _member_search(backend, store, p, uniq, kq, evals, ranks=None):
    """Entry i (of vertex ``uniq[kq[i]]``) by a binary search of sorted (vertex, neighbour) keys, one
    segment at a time (a vertex's list may continue in the next segment): where a bitset row would
    pass the cap, or the rows would be sparse for the entries (:data:`SEARCH_PAST`)."""
    found = np.zeros(evals.size, dtype=bool)
    keys = (kq.astype(np.int64) << 32) | evals.astype(np.int64)
    for lo, hi, nb, owner in neighbour_lists(store, backend, p, uniq):
        cancel_point()
        if ranks is not None:
            nb, owner = _ranked(ranks, nb, owner)
        if nb.size == 0:
            continue
        skeys = ((owner + lo).astype(np.int64) << 32) | nb.astype(np.int64)      # sorted
        sel = np.flatnonzero((kq >= lo) & (kq < hi))
        q = keys[sel]
        pos = np.minimum(np.searchsorted(skeys, q), skeys.size - 1)
        found[sel] |= skeys[pos] == q
    return found


def intersect_ranked(backend, lists, bitcap):
    """The sets S(t) of a step's tuples from the gathered lists of its links, by bitsets.

    ``lists[j]`` is link j's gathered lists (``Engine._gather``), or None where
    not gathered; ``lists[0]`` always is. The lists are packed back to back as
    ranks among their distinct values, with a bitset of each (one row per
    vertex, one bit per rank). Each tuple takes its entries from the shortest of
    its ranked lists (the probe side chosen per tuple), and each entry is tested
    by one bit of every other ranked list's row.

    Returns (tuple of each entry, value of each entry, entries probed, links not
    tested), entries sorted by tuple then value; or None when no later link is
    ranked: a later link's list is left to streaming when its bitset would
    exceed ``bitcap`` bytes, and all are when the first link's would. (The CPU
    backend's way; the GPU's kernel intersects without bitsets.)
    """
    if all(L is None for L in lists[1:]):
        return None
    packed = [None if L is None else np.take(L.values, backend.ragged_indices(L.start, L.count))
              for L in lists]
    allvals = np.concatenate([v for v in packed if v is not None])
    if allvals.size == 0:
        return None
    ids, rank = backend.distinct_index(allvals)
    nbits = int(ids.size)
    width = (nbits + 7) >> 3
    fits = [L is not None and int(L.count.size) * width <= bitcap for L in lists]
    if not fits[0] or not any(fits[1:]):
        return None
    rank = rank.astype(np.int32)
    have, at = [], 0           # per ranked list: (count per tuple, start per tuple, bits, row base)
    for L, v, ok in zip(lists, packed, fits):
        cancel_point()
        n = 0 if v is None else int(v.size)
        if ok:
            start = backend.prefix_sum(L.count) - L.count + at          # in ``rank``
            bits, w = lists_bitset(backend, L.count, rank[at:at + n], nbits)
            have.append((L.count[L.of_tuple], start[L.of_tuple], bits, L.of_tuple * w))
        at += n
    tcnt, start = have[0][0], have[0][1]
    which = np.zeros(tcnt.shape, np.int8)
    for k, (count, st, _bits, _base) in enumerate(have[1:], 1):
        shorter = count < tcnt
        tcnt = np.where(shorter, count, tcnt)
        start = np.where(shorter, st, start)
        which[shorter] = k
    etuple = backend.repeat_index(tcnt)
    evals = np.take(rank, backend.ragged_indices(start, tcnt))
    probes = int(evals.size)
    alive = np.ones(evals.size, dtype=bool)
    for k, (_count, _st, bits, rowbase) in enumerate(have):
        cancel_point()
        if bool((which != k).any()):            # the bit of a tuple's own probe list is set
            alive &= in_rows(bits, rowbase, etuple, evals, tcnt)
    keep = np.flatnonzero(alive)
    etuple, evals = np.take(etuple, keep), np.take(ids, np.take(evals, keep))
    untested = [j for j, ok in enumerate(fits) if not ok]
    return etuple, evals, probes, untested


def _sums_over_runs(values, end, dtype):
    """Sums of ``values`` (along the last axis) over the runs that end (exclusive) at ``end``."""
    cs = np.cumsum(values, axis=-1, dtype=dtype)
    tot = np.take(cs, end - 1, axis=-1)
    tot[..., 1:] -= np.take(cs, end[:-1] - 1, axis=-1)
    return tot
