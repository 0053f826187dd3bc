"""Merging two sorted scratch files: the ``both`` partitions of a store.

A directed store's ``both`` partitions hold the distinct union of the
``out`` and ``in`` ones. The build keeps the rows of those passes in
scratch Arrow files, sorted alike, and merges them here in bounded chunks:
each step takes the rows of both files up to the smaller of their last
buffered keys, so no row is emitted before all rows that sort before it.
Rows (v, w) are packed into uint64 keys, which sort as the pairs do.
"""

from __future__ import annotations

import numpy as np

from . import format as fmt

_LOW32 = np.uint64(0xFFFFFFFF)


def _pack(v, w):
    """(v, w) of non-negative int32 ids as one sortable uint64."""
    k = v.astype(np.uint64)
    k <<= np.uint64(32)
    k |= w.astype(np.uint64)
    return k


def _unpack(k):
    return (k >> np.uint64(32)).astype(np.int32), (k & _LOW32).astype(np.int32)


class _KeyCursor:
    """The rows of a scratch file as (label, packed (v, w)) arrays, consumed by key bound."""

    def __init__(self, path, label_major):
        self.file = fmt.open_batches(path)
        self.next_batch = 0
        self.label_major = label_major
        self.l = self.k = None

    def fill(self):
        while (self.k is None or len(self.k) == 0) and self.next_batch < self.file.num_record_batches:
            b = self.file.get_batch(self.next_batch)
            self.next_batch += 1
            self.l = b.column("l").to_numpy() if self.label_major else None
            self.k = _pack(b.column("v").to_numpy(), b.column("w").to_numpy())
        return self.k is not None and len(self.k) > 0

    def last(self):
        return (int(self.l[-1]) if self.label_major else 0, int(self.k[-1]))

    def take(self, bound):
        """Rows with (label, key) <= bound (all rows if bound is None)."""
        if self.k is None or len(self.k) == 0:
            return None, np.zeros(0, np.uint64)
        if bound is None:
            cut = len(self.k)
        elif self.label_major:
            i0 = int(np.searchsorted(self.l, bound[0], "left"))
            i1 = int(np.searchsorted(self.l, bound[0], "right"))
            cut = i0 + int(np.searchsorted(self.k[i0:i1], np.uint64(bound[1]), "right"))
        else:
            cut = int(np.searchsorted(self.k, np.uint64(bound[1]), "right"))
        l = self.l[:cut] if self.label_major else None
        k = self.k[:cut]
        if self.label_major:
            self.l = self.l[cut:]
        self.k = self.k[cut:]
        return l, k


def merge_sorted(x_file, y_file, label_major):
    """Yield (label, v, w) runs of the distinct union of two sorted scratch files.

    Label-major files are sorted by (label, v, w) and yield one run per label
    and chunk; vertex-major ones are merged on (v, w) alone (label None).
    """
    x, y = _KeyCursor(x_file, label_major), _KeyCursor(y_file, label_major)
    prev = None     # vertex-major files repeat (v, w) under several labels, maybe across batches
    while True:
        hx, hy = x.fill(), y.fill()
        if not hx and not hy:
            return
        bound = min(x.last(), y.last()) if (hx and hy) else None
        xl, xk = x.take(bound)
        yl, yk = y.take(bound)
        if not label_major:
            k = _merge_keys(xk, yk)
            if len(k) and prev is not None and k[0] == prev:
                k = k[1:]
            if len(k):
                prev = k[-1]
                yield (None, *_unpack(k))
            continue
        labels = np.union1d(_run_values(xl), _run_values(yl))
        for lab in labels.tolist():                       # one step per label in the chunk
            xs = xk[np.searchsorted(xl, lab, "left"):np.searchsorted(xl, lab, "right")] if xl is not None else xk[:0]
            ys = yk[np.searchsorted(yl, lab, "left"):np.searchsorted(yl, lab, "right")] if yl is not None else yk[:0]
            yield (lab, *_unpack(_merge_keys(xs, ys)))


def _run_values(sorted_values):
    if sorted_values is None or len(sorted_values) == 0:
        return np.zeros(0, np.int32)
    return sorted_values[np.r_[True, sorted_values[1:] != sorted_values[:-1]]]


def _merge_keys(a, b):
    """Sorted distinct union of two sorted uint64 arrays."""
    k = np.concatenate([a, b])
    k.sort(kind="stable")          # two sorted runs: timsort merges them in linear time
    if len(k) > 1:
        keep = np.empty(len(k), bool)
        keep[0] = True
        np.not_equal(k[1:], k[:-1], out=keep[1:])
        if not keep.all():
            k = k[keep]
    return k
