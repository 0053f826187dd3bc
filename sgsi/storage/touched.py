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

    A signature holds each group's pair count capped at 2, so a vertex the batch only adds pairs
    to gets its words from its current ones plus the inserted pairs (no list is read); the ends
    of deleted edges are counted again from their lists (:func:`_recount`)."""
    ins, dele = batch
    recount = np.intersect1d(changed, np.concatenate([dele[0], dele[1]]))
    grow = changed[~np.isin(changed, recount)]
    words = np.zeros((changed.size, st.n_signature_words), np.uint32)
    if recount.size:
        words[np.searchsorted(changed, recount)] = _words(st, recount, _recount(st, recount, net, batch, n_labels),
                                                          None, labels_of, n_vlabels)
    if grow.size:
        v, nb, lab, code = entries(*ins, st.undirected)
        keep = np.isin(v, grow)
        part = (v[keep], nb[keep], lab[keep], code[keep], np.ones(int(keep.sum()), np.int8))
        words[np.searchsorted(changed, grow)] = _words(st, grow, [part], signature_rows(st, grow), labels_of,
                                                       n_vlabels)
    return words


def _recount(st, verts, net, batch, n_labels):
    """List entries (vertex, neighbour, label, code, sign) of ``verts`` after the batch: their base
    lists (only the base segments holding them are read), less the entries of the edges removed
    since the base, plus those added."""
    und = st.undirected
    known = verts[verts < st._base_n]
    dirs = ("out",) if und else ("out", "in")
    parts = []
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
        keep = np.isin(v, verts)
        if keep.any():
            parts.append((v[keep], nb[keep], lab[keep], code[keep], np.full(int(keep.sum()), sign, np.int8)))
    return parts


def signature_rows(st, verts):
    """The current signature words of sorted ``verts`` (zeros for ids past ``st``'s vertices)."""
    out = np.zeros((verts.size, st.n_signature_words), np.uint32)
    step = st.sig_segment_vertices
    old = verts[verts < st.n_vertices]
    seg = old // step
    cuts = np.flatnonzero(np.r_[True, seg[1:] != seg[:-1]]) if old.size else np.zeros(0, np.int64)
    for a, b in zip(cuts.tolist(), np.r_[cuts[1:], old.size].tolist()):     # a loop over vertex segments
        k = int(seg[a])
        cols = [c for bucket in range(st.n_buckets) for c in st.signature_columns(k, bucket)]
        out[a:b] = np.stack(cols, 1)[old[a:b] - k * step]
    return out


def _counts_of(words, label_bits, groups):
    """Pair counts (capped at 2) per group that signature ``words`` hold: 00 -> 0, 01 -> 1, 11 -> 2."""
    b = np.ascontiguousarray(words.astype("<u4", copy=False)).view(np.uint8)
    slots = ((b[:, :, None] >> np.array([0, 2, 4, 6], np.uint8)) & 3).reshape(len(words), -1)
    c = slots[:, label_bits // 2:label_bits // 2 + groups].astype(np.int64)
    return np.where(c == 3, 2, c)


def _words(st, verts, parts, old, labels_of, n_vlabels):
    """Signature words of sorted ``verts`` from list entries ``parts`` (vertex, neighbour, label,
    code, sign), added to the counts of their words ``old`` (None: none)."""
    und = st.undirected
    groups = signatures.n_groups(st.signature_bits, st.label_bits)
    vl = labels_of(verts)
    table_bits = signatures.label_bit_table(n_vlabels, st.label_bits)
    parts = [p for p in parts if p[0].size]
    if not parts:
        counts = _counts_of(old, st.label_bits, groups) if old is not None else np.zeros((verts.size, groups),
                                                                                            np.int64)
        return signatures.words_from_counts(counts, vl, st.signature_bits, st.label_bits, table_bits)
    v, nb, lab, code, sign = (np.concatenate(c) for c in zip(*parts))
    combo = (lab.astype(np.int64) * 2 + code) * (n_vlabels + 1) + labels_of(nb) + 1
    uniq, inv = np.unique(combo, return_inverse=True)
    names = np.array([signatures.UNDIRECTED] if und else [signatures.OUT, signatures.IN], object)
    m = n_vlabels + 1
    grp = pairhash.pair_groups(uniq // (2 * m), names[(uniq // m) % 2], uniq % m - 1, groups)
    key = np.searchsorted(verts, v) * groups + grp[inv.reshape(-1)]
    one = verts.size <= _BLOCK
    if not one:
        o = np.argsort(key)
        key, sign = key[o], sign[o]
    words = np.zeros((verts.size, st.n_signature_words), np.uint32)
    for a in range(0, verts.size, _BLOCK):               # blocks of vertices
        b = min(verts.size, a + _BLOCK)
        lo, hi = (0, key.size) if one else np.searchsorted(key, [a * groups, b * groups])
        counts = np.bincount(key[lo:hi] - a * groups, weights=sign[lo:hi], minlength=(b - a) * groups)
        counts = counts.astype(np.int64).reshape(b - a, groups)
        if old is not None:
            counts += _counts_of(old[a:b], st.label_bits, groups)
        words[a:b] = signatures.words_from_counts(counts, vl[a:b], st.signature_bits, st.label_bits, table_bits)
    return words
