""":func:`~sgsi.partition.signatures.pair_group` of many keys at once: MurmurHash3 (x86, 32 bits,
seed 0) of the strings ``"{edge label}|{direction}|{neighbour label}"``, in NumPy.

Vectorized over keys; loops run over the 4-byte blocks of the longest string.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl(x, r):
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _fmix(h):
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h


def murmur3(strings: pa.Array) -> np.ndarray:
    """uint32 MurmurHash3 (x86_32, seed 0) of each string of an Arrow string array (``mmh3.hash``
    with ``signed=False``)."""
    strings = strings.cast(pa.string())
    n = len(strings)
    off = np.frombuffer(strings.buffers()[1], np.int32, n + 1, strings.offset * 4).astype(np.int64)
    data = np.frombuffer(strings.buffers()[2], np.uint8) if n else np.zeros(0, np.uint8)
    length = np.diff(off)
    width = -(-int(length.max(initial=0)) // 4) * 4
    pad = np.zeros((n, max(width, 4)), np.uint8)
    col = np.arange(pad.shape[1])
    inside = col[None, :] < length[:, None]
    pad[inside] = data[(off[:-1, None] + col[None, :])[inside]]
    words = pad.view("<u4").astype(np.uint32)
    h = np.zeros(n, np.uint32)
    with np.errstate(over="ignore"):
        for b in range(words.shape[1]):                       # a loop over blocks
            full = length >= 4 * (b + 1)
            tail = (length > 4 * b) & ~full
            k = words[:, b] * _C1
            k = _rotl(k, 15) * _C2
            hb = _rotl(h ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)
            h = np.where(full, hb, np.where(tail, h ^ k, h))
        h ^= length.astype(np.uint32)
        return _fmix(h)


def pair_groups(edge_label, direction, neighbour_label, groups) -> np.ndarray:
    """``pair_group`` of arrays of edge label ids, direction codes (strings) and neighbour label ids."""
    keys = pc.binary_join_element_wise(pa.array(np.asarray(edge_label, np.int64)).cast(pa.string()),
                                       pa.array(np.asarray(direction, object), pa.string()),
                                       pa.array(np.asarray(neighbour_label, np.int64)).cast(pa.string()), "|")
    return (murmur3(keys) % np.uint32(groups)).astype(np.int64)
