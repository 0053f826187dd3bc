"""What an update reads: the touched vertices' lists at the newest version, without its overlay.

A version's lists are the base lists, less the pairs of the edges removed
since the base, plus those of the edges added (:func:`~.lists.net_events`:
removed edges are in the base, added ones are not). So an update reads the
base segments that hold the vertices it touches, and filters the net change
since the base; it never builds a version's overlay (:mod:`.overlay`).
Vectorized over vertices and edges; loops run over labels and segments.
"""

from __future__ import annotations

import numpy as np

from ..errors import StoreError
from ..partition import signatures
from . import format as fmt
from . import pairhash
from .lists import edge_isin, has_pairs_in, lists_in, net_events

#: Vertices whose signatures are counted at once.
_BLOCK = 1 << 16


def present(st, net, s, d, l):
    """Whether each edge (s, d, l) (ids and labels known to ``st``) is there at ``st``'s version;
    ``net`` = (added, removed) since the base."""
    out = np.zeros(len(s), bool)
    for lab in np.unique(l).tolist():                      # a loop over labels
        base = st._base_partition(fmt.partition_key(lab, "out"))
        if base is not None:
            rows = np.flatnonzero(l == lab)
            out[rows] = has_pairs_in(base, lambda k: st._base_segment(k, check=False), s[rows], d[rows])
    added, removed = net
    return (out & ~edge_isin(s, d, l, *removed)) | edge_isin(s, d, l, *added)


def entries(s, d, l, undirected):
    """The list entries (vertex, neighbour, label, direction code 0 out / 1 in) that edges make;
    undirected: both ends, code 0, a loop once."""
    if undirected:
        two = s != d
        return (np.concatenate([s, d[two]]), np.concatenate([d, s[two]]), np.concatenate([l, l[two]]),
                np.zeros(len(s) + int(two.sum()), np.int8))
    return (np.concatenate([s, d]), np.concatenate([d, s]), np.concatenate([l, l]),
            np.repeat(np.array([0, 1], np.int8), len(s)))


def signatures_of(st, changed, net, batch, n_labels, labels_of, n_vlabels):
    """Signature words of sorted ``changed`` after ``batch`` = (inserted, deleted), net against the
    version ``st`` reads, whose net change since the base is ``net``.

    Pair counts per (vertex, group): the base lists of the changed vertices, less the entries of
    the edges removed since the base after the batch, plus those added; only the base segments
    holding a changed vertex are read."""
    und = st.undirected
    known = changed[changed < st._base_n]
    dirs = ("out",) if und else ("out", "in")
    parts = []                                             # (vertex, neighbour, label, code, sign)
    for lab in range(n_labels):                            # a loop over labels and directions
        for code, direction in enumerate(dirs):
            base = st._base_partition(fmt.partition_key(lab, direction))
            if base is None:
                continue
            owner, nb = lists_in(base.seg_ids, base.first_src, base.last_src,
                                 lambda k: st._base_segment(k, check=False), known)
            if nb.size and (int(nb.min()) < 0 or int(nb.max()) >= st._base_n):
                raise StoreError(f"damaged store {st.path}: partition {base.key} holds vertex ids out of range")
            if owner.size:
                parts.append((known[owner], nb, np.full(owner.size, lab, np.int32), np.full(owner.size, code, np.int8),
                              np.ones(owner.size, np.int8)))
    added, removed = net_events([net, batch])
    for edges, sign in ((added, 1), (removed, -1)):
        v, nb, lab, code = entries(*edges, und)
        keep = np.isin(v, changed)
        if keep.any():
            parts.append((v[keep], nb[keep], lab[keep], code[keep], np.full(int(keep.sum()), sign, np.int8)))
    groups = signatures.n_groups(st.signature_bits, st.label_bits)
    vl = labels_of(changed)
    table_bits = signatures.label_bit_table(n_vlabels, st.label_bits)
    if not parts:
        return signatures.words_from_counts(np.zeros((changed.size, groups), np.int64), vl, st.signature_bits,
                                            st.label_bits, table_bits)
    v, nb, lab, code, sign = (np.concatenate(c) for c in zip(*parts))
    combo = (lab.astype(np.int64) * 2 + code) * (n_vlabels + 1) + labels_of(nb) + 1
    uniq, inv = np.unique(combo, return_inverse=True)
    names = np.array([signatures.UNDIRECTED] if und else [signatures.OUT, signatures.IN], object)
    m = n_vlabels + 1
    grp = pairhash.pair_groups(uniq // (2 * m), names[(uniq // m) % 2], uniq % m - 1, groups)
    key = np.searchsorted(changed, v) * groups + grp[inv.reshape(-1)]
    one = changed.size <= _BLOCK
    if not one:
        o = np.argsort(key)
        key, sign = key[o], sign[o]
    words = np.zeros((changed.size, st.n_signature_words), np.uint32)
    for a in range(0, changed.size, _BLOCK):               # blocks of vertices
        b = min(changed.size, a + _BLOCK)
        lo, hi = (0, key.size) if one else np.searchsorted(key, [a * groups, b * groups])
        counts = np.bincount(key[lo:hi] - a * groups, weights=sign[lo:hi], minlength=(b - a) * groups)
        words[a:b] = signatures.words_from_counts(counts.astype(np.int64).reshape(b - a, groups), vl[a:b],
                                                  st.signature_bits, st.label_bits, table_bits)
    return words
