"""A store at a version: its base files plus the deltas after them, as the engine reads a store.

On open the deltas are merged in memory into the net edge change since the
base (:func:`~sgsi.storage.lists.net_events`). Each partition is presented,
built on first use and kept:

* the vertices whose list changed (*changed vertices*) get their final
  list (base list, less removed pairs no edge supports any more, plus added
  pairs) in new in-memory PCSR segments of at most ``segment_edges`` edges;
  those after base segment k sit right after it, with source range
  ``[first changed vertex, max(last_src_k, last changed vertex)]``, those
  below the first base segment before it, so both first and last sources
  still ascend;
* a base segment that holds a changed vertex is presented under a new
  segment number with a copy of its groups in which that vertex's pair id is
  -1 (lookups compare ids, so it has no list there); its ci is the file's;
* the degree index batches that hold or would hold a changed vertex are
  rebuilt in memory the same way.

Signatures, vertex labels and ids come from the base files, the new vertices
and the latest signature each delta wrote for a vertex.
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa

from ..errors import PatternError, StoreError
from ..partition import pcsr
from . import format as fmt
from .lists import has_pairs, in_sorted, lists_in, net_events, pair_keys, sorted_unique, split_keys


class VersionView:
    """The changes of versions ``base+1 .. version`` over the base files of ``store``: ``deltas``,
    or, given ``prior`` (the view of an opening of the same base at an earlier version), the deltas
    after its version merged into its net change (an update's new opening would merge every delta
    again: a third of a 1K apply's 76 ms at version 104)."""

    def __init__(self, store, version, deltas, prior=None):
        self.store, self.version = store, version
        self.lock = threading.RLock()
        entry = store.version_entry(version)
        self.n_labels = len(entry["edge_labels"]["values"])
        self.n_base = store._base_n
        parts = ([] if prior is None else [prior]) + list(deltas)      # in version order
        ids = [d.new_ids for d in parts if len(d.new_ids)]
        self.new_ids = pa.concat_arrays(ids) if ids else pa.array([], store.vertex_id_type)
        self.new_labels = np.concatenate([d.new_labels for d in parts] + [np.zeros(0, np.int32)])
        self.n_vertices = self.n_base + len(self.new_labels)
        sv = np.concatenate([d.sig_vertex for d in parts] + [np.zeros(0, np.int32)])
        sw = np.concatenate([d.sig_words for d in parts] + [np.zeros((0, store.n_signature_words), np.uint32)])
        last = len(sv) - 1 - np.unique(sv[::-1], return_index=True)[1]      # each vertex's latest
        self.sig_vertex, self.sig_words = sv[last], sw[last]
        head = [] if prior is None else [(prior.added, prior.removed)]     # net against the base
        self.added, self.removed = net_events(head + [(d.inserted, d.deleted) for d in deltas])
        self._check(store, deltas)
        self._parts = {}
        self._sig_cache = {}

    def _check(self, st, deltas):
        """Values that index arrays: in range, or a StoreError naming the deltas."""
        ids = [x for d in deltas for e in (d.inserted, d.deleted) for x in e[:2]] + [self.sig_vertex]
        labels = [x for d in deltas for e in (d.inserted, d.deleted) for x in e[2:]]
        bad = (self.n_vertices != st.n_vertices or self.sig_words.shape[1] != st.n_signature_words
               or any(x.size and (x.min() < 0 or x.max() >= self.n_vertices) for x in ids)
               or any(x.size and (x.min() < 0 or x.max() >= self.n_labels) for x in labels)
               or (self.new_labels.size and self.new_labels.max() >= len(st.manifest["vertex_labels"]["values"])))
        if bad:
            raise StoreError(f"damaged store {st.path}: the deltas up to version {self.version} hold values out of "
                             f"range (run `sgsi info --verify {st.path}`)")

    # -- partitions -------------------------------------------------------------------

    def target(self, label_id, direction):
        """The key of the partition a (label, direction) reads at this version (aliases resolved)."""
        st = self.store
        multi = self.n_labels > 1
        if st.lean and ((label_id == fmt.ANY_LABEL and multi) or (direction == "both" and not st.undirected)):
            what = [w for w, missing in (("unlabeled", label_id == fmt.ANY_LABEL and multi),
                                         ("undirected", direction == "both" and not st.undirected)) if missing]
            raise PatternError(f"the pattern has {' '.join(what)} edges, and store {st.path} was built lean "
                               f"(labelled, directed partitions only): rebuild it without --lean to match them")
        if label_id != fmt.ANY_LABEL and not 0 <= label_id < self.n_labels:
            raise StoreError(f"store {st.path} has no edge label id {label_id} at version {self.version}")
        base = label_id if (label_id != fmt.ANY_LABEL or multi) else 0
        return fmt.partition_key(base, "out" if st.undirected else direction)

    def partition(self, label_id, direction):
        key = self.target(label_id, direction)
        p = self._parts.get(key)
        if p is None:
            with self.lock:
                p = self._parts.get(key)
                if p is None:
                    p = self._parts[key] = self._build(key)
        return p

    def pairs(self, key, s, d, l):
        """The (src, nb) pairs that edges (s, d, l) put into partition ``key``."""
        return partition_pairs(key, self.store.undirected, s, d, l)

    def _supported(self, key, keys):
        """Whether an edge of this version still puts each pair (``pair_keys``) into ``key``."""
        lab, direction = key.split(":")
        v, w = split_keys(keys)
        ok = np.zeros(len(keys), bool)
        for label in (range(self.n_labels) if lab == "any" else [int(lab)]):
            p = self.partition(label, "out")
            for a, b, use in ((v, w, direction != "in" or self.store.undirected),
                              (w, v, direction in ("in", "both") and not self.store.undirected)):
                todo = np.flatnonzero(~ok) if use else np.zeros(0, np.int64)
                if todo.size:
                    ok[todo] = has_pairs(self.store, p, a[todo], b[todo])
        return ok

    def _build(self, key):
        st = self.store
        base = st._base_partition(key)
        ak = sorted_unique(pair_keys(*self.pairs(key, *self.added)))
        rk = sorted_unique(pair_keys(*self.pairs(key, *self.removed)))
        rk = rk[~in_sorted(rk, ak, a_sorted=True)]
        lab, direction = key.split(":")
        simple = lab != "any" and (st.undirected or direction != "both")
        if not simple and rk.size:
            rk = rk[~self._supported(key, rk)]
        changed = sorted_unique(np.concatenate([ak >> 32, rk >> 32])).astype(np.int32)
        if base is None:
            base = st._empty_partition(key)
        if not changed.size:
            return base
        owner, nb = lists_in(base.seg_ids, base.first_src, base.last_src, st._base_segment, changed)
        old_deg = np.bincount(owner, minlength=changed.size)
        fs, fd = _final_lists(changed[owner], nb, ak, rk)
        starts = np.searchsorted(fs, changed)              # fs: the changed vertices' lists, in order
        new_deg = np.diff(starts, append=fs.size)
        seg_ids, first, last, seg_edges = self._segments(base, changed, starts, new_deg, fs, fd)
        idx_ids, idx_first, idx_last = self._index(base, changed, new_deg)
        return fmt.Partition(key, int(base.edges + new_deg.sum() - old_deg.sum()),
                         int(base.vertices + (new_deg > 0).sum() - (old_deg > 0).sum()),
                         int(max(base.max_degree, new_deg.max(initial=0))), seg_ids, first, last, seg_edges,
                         idx_ids, idx_first, idx_last)

    def _segments(self, base, changed, starts, new_deg, fs, fd):
        """The partition's segments: base ones (masked where they hold a changed vertex) and pieces.
        ``fs[starts[i]:][:new_deg[i]]`` is the list of ``changed[i]`` (found per vertex, not per edge:
        a 100K batch's lists held 20M edges of the 100M-edge R-MAT graph)."""
        st = self.store
        step = max(1, int(st.manifest["parameters"].get("segment_edges", 1 << 16)))
        f, l = base.first_src, base.last_src
        has = np.flatnonzero(new_deg)
        slot = np.searchsorted(f, changed[has], "right") - 1  # the base segment each list follows
        run = np.flatnonzero(np.r_[True, slot[1:] != slot[:-1]]) if has.size else np.zeros(0, np.int64)
        cuts, slot = starts[has[run]], slot[run]
        pieces = {}                                           # slot -> [(segment id, first, last, edges)]
        for j, a, b in zip(slot.tolist(), cuts.tolist(), np.r_[cuts[1:], fs.size].tolist()):
            for c in range(a, b, step):                       # pieces of at most `step` edges
                e = min(b, c + step)
                groups, ci = pcsr.build(fs[c:e], fd[c:e], st.theta)
                top = max(int(fs[e - 1]), int(l[j]) if j >= 0 else -1)
                sid = st._add_segment(base.key, int(fs[c]), top, groups, ci)
                pieces.setdefault(j, []).append((sid, int(fs[c]), top, e - c))
        lo = np.searchsorted(changed, f, "left")
        hi = np.searchsorted(changed, np.asarray(l, np.int64), "right")
        out = list(pieces.get(-1, []))
        for k in range(len(base.seg_ids)):                    # a loop over segments
            sid = int(base.seg_ids[k])
            if hi[k] > lo[k]:
                sid = st._add_masked(sid, changed[lo[k]:hi[k]])
            out.append((sid, int(f[k]), int(l[k]), int(base.seg_edges[k])))
            out.extend(pieces.get(k, []))
        if not out:
            z = np.zeros(0, np.int64)
            return z, z, z, z
        ids, first, last, edges = (np.array(c, np.int64) for c in zip(*out))
        return ids, first, last, edges

    def _index(self, base, changed, new_deg):
        """The partition's degree index batches with the changed vertices' degrees."""
        st = self.store
        bids, f = base.idx_batches, base.idx_first
        out = []
        if not len(bids):
            keep = new_deg > 0
            if keep.any():
                out.append(st._add_index(base.key, changed[keep], new_deg[keep]))
        else:
            slot = np.maximum(np.searchsorted(f, changed, "right") - 1, 0)
            touched = set(np.unique(slot).tolist())
            for k in range(len(bids)):                        # a loop over index batches
                if k not in touched:
                    out.append((int(bids[k]), int(base.idx_first[k]), int(base.idx_last[k])))
                    continue
                v, d = st._base_index_batch(int(bids[k]))
                here = (slot == k) & (new_deg > 0)
                keep = ~np.isin(v, changed)
                v = np.concatenate([v[keep], changed[here]]).astype(np.int32)
                d = np.concatenate([d[keep], new_deg[here]]).astype(d.dtype)
                if v.size:
                    o = np.argsort(v, kind="stable")
                    out.append(st._add_index(base.key, v[o], d[o]))
        if not out:
            z = np.zeros(0, np.int64)
            return z, z, z
        ids, first, last = (np.array(c, np.int64) for c in zip(*out))
        return ids, first, last

    # -- vertices -----------------------------------------------------------------------

    def vertex_labels(self, seg):
        st = self.store
        start, rows, base_rows = self._rows(seg)
        base = st._base_vertex_labels(seg) if base_rows else np.zeros(0, np.int32)
        if rows == base_rows:
            return base
        a = start + base_rows - self.n_base
        return np.concatenate([base, self.new_labels[a:a + rows - base_rows]]).astype(np.int32)

    def signature_columns(self, seg, bucket):
        hit = self._sig_cache.get((seg, bucket))
        if hit is not None:
            return hit
        st = self.store
        start, rows, base_rows = self._rows(seg)
        cols = st._base_signature_columns(seg, bucket) if base_rows else [np.zeros(0, np.uint32)] * st.bucket_columns
        lo, hi = np.searchsorted(self.sig_vertex, [start, start + rows])
        if hi == lo and rows == base_rows:
            return cols
        out = [np.concatenate([c, np.zeros(rows - base_rows, np.uint32)]) for c in cols]
        at = self.sig_vertex[lo:hi] - start
        w0 = bucket * st.bucket_columns
        for c in range(st.bucket_columns):                    # a loop over columns
            out[c][at] = self.sig_words[lo:hi, w0 + c]
        with self.lock:
            self._sig_cache[(seg, bucket)] = out
        return out

    def _rows(self, seg):
        step = self.store.sig_segment_vertices
        start = int(seg) * step
        rows = min(step, self.n_vertices - start)
        return start, rows, max(0, min(step, self.n_base - start))


def _final_lists(src, nb, ak, rk):
    """(src, nb) of the changed vertices' lists now: their base pairs (``src``, ``nb``: by source,
    each list sorted) less the removed pair keys ``rk``, with the added ones ``ak`` (sorted,
    distinct) put in their places. The added pairs are few against the lists (three 100K-edge
    batches on the 100M-edge R-MAT graph: 87K against 10.5M): inserted where a search finds their
    place, where a sort of all the keys and their split took 0.47 of a partition's 1.3 s."""
    kept = pair_keys(src, nb)                           # sorted: lists by source, each sorted
    if kept.size > 1 and not bool((kept[1:] > kept[:-1]).all()):     # not so (a pass): sorted here
        kept = sorted_unique(kept)
        src, nb = split_keys(kept)
    if rk.size:
        keep = ~in_sorted(kept, rk, a_sorted=True)
        src, nb, kept = src[keep], nb[keep], kept[keep]
    at = np.searchsorted(kept, ak)
    new = kept[np.minimum(at, kept.size - 1)] != ak if kept.size else np.ones(ak.size, bool)
    a_src, a_dst = split_keys(ak[new])
    return np.insert(src, at[new], a_src), np.insert(nb, at[new], a_dst)


def partition_pairs(key, undirected, s, d, l):
    """The (src, nb) pairs that edges (s, d, l) put into partition ``key`` of a store."""
    lab, direction = key.split(":")
    if lab != "any":
        keep = l == int(lab)
        s, d = s[keep], d[keep]
    if undirected or direction == "both":
        return np.concatenate([s, d]), np.concatenate([d, s])
    return (s, d) if direction == "out" else (d, s)


def changed_pairs(store, since, label_id, direction):
    """:meth:`~sgsi.storage.store.Store.changed_pairs`: the pairs the net edge change between the
    two versions may touch, looked up in both versions' partitions (only those lists are read)."""
    since = int(since)
    other = store.at_version(since)
    lo, hi = sorted((store.version, since))
    newer = store if store.version >= since else other
    added, removed = net_events([(store._deltas[v].inserted, store._deltas[v].deleted)
                                 for v in range(lo + 1, hi + 1)])
    key = newer.partition(label_id, direction).key
    cand = np.unique(np.concatenate([pair_keys(*partition_pairs(key, store.undirected, *e))
                                     for e in (added, removed)]))
    v, w = split_keys(cand)

    def present(st):
        try:
            p = st.partition(label_id, direction)
        except StoreError:                  # a label the older version does not have yet
            return np.zeros(cand.size, bool)
        return has_pairs(st, p, v, w)
    now, then = present(store), present(other)
    a, r = cand[now & ~then], cand[then & ~now]
    return (*split_keys(a), *split_keys(r))
