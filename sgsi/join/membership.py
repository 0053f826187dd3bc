"""Later linking edges (Algorithm 5): is each buffer entry in N(t_j, l_j)?

The entries of a piece come as (tuple, value) pairs, sorted by tuple and,
within a tuple, by value; the tuples use far fewer distinct linking vertices
than there are entries. So the lists of the distinct linking vertices are
streamed once into a bitset, one row per vertex over the entries' value
range, and each entry is then one bit lookup: linear passes and one gather,
no sort of the entries. The bitset is bounded by ``cap`` bytes; wider value
ranges are tested in blocks of linking vertices, and a single row too wide
for the cap falls back to a binary search of (vertex, neighbour) keys.

This is the CPU backend's way (``CpuBackend.member``) and the reference of the GPU's,
which binary-searches each entry in its vertex's list, segment by segment
(``GpuBackend.member``, the ``member_entries`` kernel).

Where the lists are already in memory, sorted, as ranks of a small value
space (the engine's gathered lists, see ``Engine._sets_whole``),
:func:`lists_bitset` and :func:`in_rows` do the same test without streaming.
"""

from __future__ import annotations

import numpy as np

from ..partition import pcsr
from .backend import distinct_index, nonzero_index, prefix_sum, runs, sums_over_runs
from .stream import neighbour_lists


def member(xp, backend, store, link, vcol, erow, evals, cap, ecount=None, cbits=None):
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
        return xp.zeros(0, dtype=bool)
    p = store.partition(link.label_id, link.direction)
    uniq, k_t = distinct_index(xp, vcol)
    xmin, xmax = int(evals.min()), int(evals.max())
    ranks = None
    if cbits is not None and xmax - xmin < 4 * n:
        incand = backend.test_bits(cbits, xp.arange(xmin, xmax + 1, dtype=xp.int64))
        ranks = (xmin, incand, xp.cumsum(incand, dtype=xp.int32) - 1)
        evals = xp.take(ranks[2], evals - xmin)
        xmin, xmax = 0, int(ranks[2][-1])
    b0 = xmin >> 3
    width = (xmax >> 3) - b0 + 1                 # bytes per bitset row
    if width > cap:
        return _member_search(xp, backend, store, p, uniq, k_t, erow, evals, ranks)
    per_block = max(1, cap // width)             # linking vertices per block
    nd = int(uniq.size)
    if nd <= per_block:
        bits = _bitset(xp, backend, store, p, uniq, xmin, xmax, b0, width, ranks)
        return in_rows(xp, bits, k_t * width - b0, erow, evals, ecount)
    # Blocks of linking vertices: regroup the entries by block (a sort of tuples), test each.
    found = xp.empty(n, dtype=bool)
    block_t = k_t // per_block
    ot = backend.argsort(block_t)
    tstart = xp.searchsorted(erow, xp.arange(int(vcol.size) + 1))
    cnt = xp.diff(tstart)[ot]
    perm = pcsr.ragged_indices(tstart[:-1][ot], cnt, xp)            # entries, block-major
    ecum = xp.zeros(cnt.size + 1, dtype=xp.int64)
    ecum[1:] = prefix_sum(xp, cnt)
    nblocks = (nd + per_block - 1) // per_block
    ecut = backend.to_host(ecum[xp.searchsorted(block_t[ot], xp.arange(nblocks + 1))])
    for b in range(nblocks):                     # a loop over blocks of the bitset
        e0, e1 = int(ecut[b]), int(ecut[b + 1])
        if e1 == e0:
            continue
        r0, r1 = b * per_block, min(nd, (b + 1) * per_block)
        sel = perm[e0:e1]
        ev = xp.take(evals, sel)
        lo, hi = int(ev.min()), int(ev.max())
        bb0 = lo >> 3
        w = (hi >> 3) - bb0 + 1
        bits = _bitset(xp, backend, store, p, uniq[r0:r1], lo, hi, bb0, w, ranks)
        found[sel] = _test(xp, bits, xp.take((k_t - r0) * w - bb0, xp.take(erow, sel)), ev)
    return found


def _test(xp, bits, idx, evals):
    """Bit ``evals & 7`` of byte ``idx + (evals >> 3)`` of ``bits``, as bool (``idx`` is consumed)."""
    idx += evals >> 3
    byte = xp.take(bits, idx)
    byte >>= evals.astype(xp.uint8) & xp.uint8(7)      # the low 3 bits survive the cast
    byte &= xp.uint8(1)
    return byte.view(bool)


def _ranked(xp, ranks, nb, owner):
    """Neighbours ``nb`` (of ``owner``) that are members of the ranked set, as their ranks."""
    base, incand, rank = ranks
    inside = nonzero_index(xp, (nb >= base) & (nb < base + incand.size))
    off, owner = xp.take(nb, inside) - base, xp.take(owner, inside)
    keep = nonzero_index(xp, xp.take(incand, off))
    return xp.take(rank, xp.take(off, keep)), xp.take(owner, keep)


def _bitset(xp, backend, store, p, uniq, xmin, xmax, b0, width, ranks=None):
    """uint8 rows of ``width`` bytes, one per vertex of ``uniq``: bit x - 8*b0 set iff x in N(v, l)
    (x the rank of the neighbour among the members of ``ranks``, where given)."""
    bits = xp.zeros(int(uniq.size) * width, dtype=xp.uint8)
    for lo, _hi, nb, owner in neighbour_lists(store, backend, p, uniq):
        if ranks is not None:           # ranks grow with ids: each owner's list stays sorted
            nb, owner = _ranked(xp, ranks, nb, owner)
        ok = (nb >= xmin) & (nb <= xmax)
        nb = nb[ok]
        if nb.size == 0:
            continue
        _set_bits(xp, bits, owner[ok] + lo, nb, width, b0)     # |=: a list may continue in the next segment
    return bits


def _set_bits(xp, bits, row, nb, width, b0):
    """bits |= bit ``nb - 8*b0`` of row ``row``, for (row, nb) pairs sorted and distinct."""
    # Byte positions come sorted and the bits of one byte distinct, so their sum is their OR.
    byte = row * width + ((nb >> 3) - b0)
    ub, _start, end = runs(xp, byte)
    bits[ub] |= sums_over_runs(xp, xp.left_shift(xp.int32(1), nb & 7), end, xp.int32).astype(xp.uint8)


def lists_bitset(xp, backend, count, values, nbits):
    """Bitset rows of ``(nbits + 7) // 8`` bytes, one per list: row i has the bits of
    ``values`` of list i set. The lists lie back to back in ``values`` (``count[i]``
    of list i, each sorted, distinct). Returns (bits, row width in bytes)."""
    width = (nbits + 7) >> 3
    bits = xp.zeros(int(count.size) * width, dtype=xp.uint8)
    if values.size:
        _set_bits(xp, bits, backend.repeat_index(count), values, width, 0)
    return bits, width


def in_rows(xp, bits, rowbase, erow, evals, ecount=None):
    """Entry i: is bit ``evals[i]`` set in the bitset row that starts at byte
    ``rowbase[erow[i]]``? (``ecount``: entries per row, when ``erow`` is sorted)"""
    if int(bits.size) < 2 ** 31:
        rowbase = rowbase.astype(xp.int32)
    if ecount is not None and xp is np:
        return _test(xp, bits, np.repeat(rowbase, ecount), evals)
    return _test(xp, bits, xp.take(rowbase, erow), evals)


def _member_search(xp, backend, store, p, uniq, k_t, erow, evals, ranks=None):
    """Value ranges too wide for a bitset row: binary search of sorted (vertex, neighbour)
    keys, one segment at a time (a vertex's list may continue in the next segment)."""
    found = xp.zeros(evals.size, dtype=bool)
    kq = xp.take(k_t, erow)
    keys = (kq.astype(xp.int64) << 32) | evals.astype(xp.int64)
    for lo, hi, nb, owner in neighbour_lists(store, backend, p, uniq):
        if ranks is not None:
            nb, owner = _ranked(xp, ranks, nb, owner)
        if nb.size == 0:
            continue
        skeys = ((owner + lo).astype(xp.int64) << 32) | nb.astype(xp.int64)      # sorted
        sel = nonzero_index(xp, (kq >= lo) & (kq < hi))
        q = keys[sel]
        pos = xp.minimum(xp.searchsorted(skeys, q), skeys.size - 1)
        found[sel] |= skeys[pos] == q
    return found


def intersect_ranked(xp, backend, lists, bitcap):
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
    packed = [None if L is None else xp.take(L.values, pcsr.ragged_indices(L.start, L.count, xp))
              for L in lists]
    allvals = xp.concatenate([v for v in packed if v is not None])
    if allvals.size == 0:
        return None
    ids, rank = distinct_index(xp, allvals)
    nbits = int(ids.size)
    width = (nbits + 7) >> 3
    fits = [L is not None and int(L.count.size) * width <= bitcap for L in lists]
    if not fits[0] or not any(fits[1:]):
        return None
    rank = rank.astype(xp.int32)
    have, at = [], 0           # per ranked list: (count per tuple, start per tuple, bits, row base)
    for L, v, ok in zip(lists, packed, fits):
        n = 0 if v is None else int(v.size)
        if ok:
            start = prefix_sum(xp, L.count) - L.count + at          # in ``rank``
            bits, w = lists_bitset(xp, backend, L.count, rank[at:at + n], nbits)
            have.append((L.count[L.of_tuple], start[L.of_tuple], bits, L.of_tuple * w))
        at += n
    tcnt, start = have[0][0], have[0][1]
    which = xp.zeros(tcnt.shape, xp.int8)
    for k, (count, st, _bits, _base) in enumerate(have[1:], 1):
        shorter = count < tcnt
        tcnt = xp.where(shorter, count, tcnt)
        start = xp.where(shorter, st, start)
        which[shorter] = k
    etuple = backend.repeat_index(tcnt)
    evals = xp.take(rank, pcsr.ragged_indices(start, tcnt, xp))
    probes = int(evals.size)
    alive = xp.ones(evals.size, dtype=bool)
    for k, (_count, _st, bits, rowbase) in enumerate(have):
        if bool((which != k).any()):            # the bit of a tuple's own probe list is set
            alive &= in_rows(xp, bits, rowbase, etuple, evals, tcnt)
    keep = nonzero_index(xp, alive)
    etuple, evals = xp.take(etuple, keep), xp.take(ids, xp.take(evals, keep))
    untested = [j for j, ok in enumerate(fits) if not ok]
    return etuple, evals, probes, untested
