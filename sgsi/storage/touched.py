"""What an update reads: whether its edges are there, and the signatures of the vertices it touches.

A version's lists are the base lists, less the pairs of the edges removed
since the base, plus those of the edges added (:func:`~.lists.net_events`:
removed edges are in the base, added ones are not). So the presence test
reads the base segments that hold the edges' sources and the net change
since the base, and never builds a version's overlay (:mod:`.overlay`);
signatures come from the touched vertices' current words and the batch.
Vectorized over vertices and edges; loops run over labels and segments.
"""

from __future__ import annotations

import numpy as np

from ..partition import signatures
from . import format as fmt
from . import pairhash
from .lists import covering, edge_isin, has_pairs_mapped

#: Keys (edge label, direction, neighbour label) below this many: their groups come from a table.
_TABLE_KEYS = 1 << 20


def present(st, net, s, d, l):
    """Whether each edge (s, d, l) (ids and labels known to ``st``) is there at ``st``'s version;
    ``net`` = (added, removed) since the base. The base segments of all the edges' labels are
    searched at once (:func:`~.lists.has_pairs_mapped`): a 1K batch touched 85 segments, each
    a dozen NumPy calls and halvings of its own (16 of a 23 ms update)."""
    out = np.zeros(len(s), bool)
    parts = [(lab, st._base_partition(fmt.partition_key(lab, "out"))) for lab in np.unique(l).tolist()]
    parts = [(lab, p) for lab, p in parts if p is not None and len(p.seg_ids)]     # a loop over labels
    if parts:
        seg = np.concatenate([p.seg_ids for _lab, p in parts])
        key = [np.concatenate([(np.int64(lab) << 32) | np.asarray(getattr(p, end), np.int64) for lab, p in parts])
               for end in ("first_src", "last_src")]
        edge = (np.asarray(l, np.int64) << 32) | np.asarray(s, np.int64)
        o = np.argsort(edge)               # segment by segment, sources in order: the files read in order
        row, at = covering(*key, edge[o])
        row = o[row]
        out[row[has_pairs_mapped(st.segment_table(seg), at, s[row], d[row])]] = True
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


def signatures_of(st, changed, batch, labels_of, n_vlabels):
    """Signature words of sorted ``changed`` after ``batch`` = (inserted, deleted), net against the
    version ``st`` reads, from their current words: no list is read.

    A signature holds each group's pair count capped at 2. Below the cap the count is exact, so
    the batch's pairs are added to it and its deleted ones taken from it; a saturated group (two
    pairs or more) stays saturated, whatever was deleted. So a version's signatures may pass a
    vertex that lost pairs in a saturated group where a fresh build's would not (never the
    reverse: a filter, not an answer), and compaction, which rebuilds them, makes them exact.
    Recounting instead read the whole lists of the deleted edges' ends, hubs above all (100K
    mixed edges on 100M-edge R-MAT: 25.5 s against 1.1 s for 100K inserted)."""
    ins, dele = batch
    parts = []
    for edges, sign in ((ins, 1), (dele, -1)):
        v, nb, lab, code = entries(*edges, st.undirected)
        parts.append((v, nb, lab, code, np.full(v.size, sign, np.int8)))
    return _words(st, changed, parts, signature_rows(st, changed), labels_of, n_vlabels)


def signature_rows(st, verts):
    """The current signature words of sorted ``verts`` (zeros for ids past ``st``'s vertices): the
    base file's rows, then the newest a delta wrote (no version's columns are built)."""
    out = np.zeros((verts.size, st.n_signature_words), np.uint32)
    step = st.sig_segment_vertices
    old = verts[verts < st._base_n]
    seg = old // step
    cuts = np.flatnonzero(np.r_[True, seg[1:] != seg[:-1]]) if old.size else np.zeros(0, np.int64)
    for a, b in zip(cuts.tolist(), np.r_[cuts[1:], old.size].tolist()):     # a loop over vertex segments
        k = int(seg[a])
        at = old[a:b] - k * step
        cols = [c[at] for bucket in range(st.n_buckets) for c in st._base_signature_columns(k, bucket)]
        out[a:b] = np.stack(cols, 1)
    v = st._view
    if v is not None and v.sig_vertex.size:
        pos = np.minimum(np.searchsorted(v.sig_vertex, verts), v.sig_vertex.size - 1)
        hit = v.sig_vertex[pos] == verts
        out[hit] = v.sig_words[pos[hit]]
    return out


def _counts_of(words, label_bits, groups):
    """Pair counts (capped at 2) per group that signature ``words`` hold: 00 -> 0, 01 -> 1, 11 -> 2."""
    b = np.ascontiguousarray(words.astype("<u4", copy=False)).view(np.uint8)
    slots = ((b[:, :, None] >> np.array([0, 2, 4, 6], np.uint8)) & 3).reshape(len(words), -1)
    c = slots[:, label_bits // 2:label_bits // 2 + groups].astype(np.int64)
    return np.where(c == 3, 2, c)


def _words(st, verts, parts, old, labels_of, n_vlabels):
    """Signature words of sorted ``verts``: their words ``old`` with the groups that list entries
    ``parts`` (vertex, neighbour, label, code, sign) touch moved by them, a saturated group kept
    saturated, and new vertices' label bits set; the other groups' bits stay as they are."""
    words = old.copy()
    new = np.flatnonzero(verts >= st.n_vertices)
    vl = labels_of(verts[new])
    if (vl >= 0).any():
        has = new[vl >= 0]
        lb = signatures.label_bit_table(n_vlabels, st.label_bits)[vl[vl >= 0]]
        words[has, lb // 32] |= np.uint32(1) << (lb % 32).astype(np.uint32)
    parts = [p for p in parts if p[0].size]
    if not parts:
        return words
    v, nb, lab, code, sign = (np.concatenate(c) for c in zip(*parts))
    slot, net = _slot_changes(st, v, _groups_of(st, lab, code, labels_of(nb), n_vlabels), sign)
    groups = signatures.n_groups(st.signature_bits, st.label_bits)
    row = np.searchsorted(verts, slot // groups)
    bit = st.label_bits + 2 * (slot % groups)
    flat = row * words.shape[1] + bit // 32             # ascending: slots are sorted
    shift = (bit % 32).astype(np.uint32)
    now = (words.reshape(-1)[flat] >> shift) & np.uint32(3)
    count = np.minimum(now, 2).astype(np.int64)          # 00 -> 0, 01 -> 1, 11 -> 2
    count = np.where(count >= 2, 2, np.clip(count + net, 0, 2)).astype(np.uint32)
    flip = (now ^ (count | count >> np.uint32(1))) << shift
    first = np.flatnonzero(np.r_[True, flat[1:] != flat[:-1]])
    words.reshape(-1)[flat[first]] ^= np.bitwise_or.reduceat(flip, first)
    return words


def _groups_of(st, lab, code, nb_label, n_vlabels):
    """The two-bit group of each list entry's (edge label, direction code, neighbour label) key."""
    groups = signatures.n_groups(st.signature_bits, st.label_bits)
    m = n_vlabels + 1
    combo = (lab.astype(np.int64) * 2 + code) * m + nb_label + 1
    names = np.array([signatures.UNDIRECTED] if st.undirected else [signatures.OUT, signatures.IN], object)
    if int(combo.max(initial=0)) < _TABLE_KEYS:          # a table by key (0.6 ms against 18 for 300K)
        uniq = np.flatnonzero(np.bincount(combo))
        table = np.zeros(uniq[-1] + 1 if uniq.size else 0, np.int64)
        table[uniq] = pairhash.pair_groups(uniq // (2 * m), names[(uniq // m) % 2], uniq % m - 1, groups)
        return table[combo]
    uniq, inv = np.unique(combo, return_inverse=True)
    return pairhash.pair_groups(uniq // (2 * m), names[(uniq // m) % 2], uniq % m - 1, groups)[inv.reshape(-1)]


def _slot_changes(st, v, grp, sign):
    """The (vertex, group) slots ``vertex * groups + group`` that entries touch, sorted, and the
    net change of each slot's pair count (one sort of the entries' slots and signs)."""
    groups = signatures.n_groups(st.signature_bits, st.label_bits)
    k = np.sort((v.astype(np.int64) * groups + grp) * 2 + (sign < 0))
    first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    runs = np.diff(np.r_[first, k.size]) * np.where(k[first] & 1, -1, 1)
    slot = k[first] >> 1
    one = np.flatnonzero(np.r_[True, slot[1:] != slot[:-1]])
    return slot[one], np.add.reduceat(runs, one)
