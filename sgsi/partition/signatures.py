"""Vertex signatures (§3.1) and their column-first buckets (§6.1).

S(v) has N bits in N/32 uint32 words. The first K bits encode the vertex
label (one bit, chosen by hashing the label); the other N-K bits are
(N-K)/2 two-bit groups. Each (edge label, direction, neighbour label) pair
of v is hashed with MurmurHash3 (``mmh3``) to a group, which reads 00 (no
pair), 01 (one pair) or 11 (more than one). For directed graphs the
direction is part of the hashed key; an undirected store hashes ``u``.

A data vertex v cannot match a query vertex u when ``S(v) & S(u) != S(u)``:
every pair of u maps (injectively) onto a distinct pair of v with the same
key, so v's count in every group is at least u's.

The table is stored column-first: one array per word, cut vertically into
buckets of columns and horizontally into vertex segments whose length is a
multiple of 32 (coalesced reads on the GPU).
"""

from __future__ import annotations

import functools

import mmh3
import numpy as np

DEFAULT_BITS = 128
DEFAULT_LABEL_BITS = 16

OUT, IN, UNDIRECTED = "o", "i", "u"


def n_groups(n_bits: int, label_bits: int) -> int:
    return (n_bits - label_bits) // 2


def validate_params(n_bits: int, label_bits: int) -> None:
    if n_bits % 32 or n_bits < 32:
        raise ValueError(f"signature bits must be a positive multiple of 32, got {n_bits}")
    if label_bits % 2 or not 0 < label_bits < n_bits:
        raise ValueError(f"label bits must be even and below {n_bits}, got {label_bits}")


@functools.lru_cache(maxsize=1 << 16)
def label_bit(vertex_label_id: int, label_bits: int) -> int:
    """Bit (0..K-1) that encodes a vertex label id; -1 for no label."""
    if vertex_label_id < 0:
        return -1
    return mmh3.hash(f"v{vertex_label_id}", signed=False) % label_bits


@functools.lru_cache(maxsize=1 << 16)
def pair_group(edge_label_id: int, direction: str, neighbour_label_id: int, groups: int) -> int:
    """Two-bit group of one (edge label, direction, neighbour label) key."""
    return mmh3.hash(f"{edge_label_id}|{direction}|{neighbour_label_id}", signed=False) % groups


def words_from_groups(vertex, group, count, vertex_label, n_vertices, n_bits, label_bits, first_vertex=0):
    """Signature words of vertices ``first_vertex .. first_vertex+n_vertices``.

    ``vertex, group, count`` list how many pairs of each vertex hash to each
    group; ``vertex_label`` holds the label ids of those n_vertices vertices.
    Returns an (n_vertices, N/32) uint32 array.
    """
    n_words = n_bits // 32
    bits = np.zeros((n_vertices, n_words), np.uint32)
    lab_bits = np.array([label_bit(int(x), label_bits) for x in range(int(vertex_label.max(initial=-1)) + 1)],
                        np.int64)
    has = vertex_label >= 0
    if has.any():
        lb = lab_bits[vertex_label[has]]
        rows = np.flatnonzero(has)
        np.bitwise_or.at(bits, (rows, lb // 32), (np.uint32(1) << (lb % 32).astype(np.uint32)))
    if len(vertex):
        rows = np.asarray(vertex, np.int64) - first_vertex
        bit = label_bits + 2 * np.asarray(group, np.int64)
        val = np.where(np.asarray(count) > 1, 3, 1).astype(np.uint32)
        np.bitwise_or.at(bits, (rows, bit // 32), val << (bit % 32).astype(np.uint32))
    return bits


def words_from_counts(counts, vertex_label, n_bits, label_bits, label_table=None):
    """Signature words of a block of vertices from their per-group pair counts.

    ``counts`` is an (n, G) array: row i counts the pairs of vertex i that
    hash to each of the G two-bit groups; ``vertex_label`` holds the label
    ids of the n vertices (-1: none). ``label_table`` optionally gives
    :func:`label_bit_table` for these labels. Returns the same (n, N/32)
    uint32 array as :func:`words_from_groups` for the same pairs.
    """
    capped = np.minimum(np.asarray(counts), 2).astype(np.uint8)
    return words_from_saturated(capped, vertex_label, n_bits, label_bits, label_table)


def words_from_saturated(counts, vertex_label, n_bits, label_bits, label_table=None):
    """:func:`words_from_counts` for counts already capped at 2, as a uint8 (n, G) array.

    Byte operations only: each group's two bits are ``c | c >> 1`` (00, 01
    or 11), four groups make a byte, and the bytes of a row are its words in
    little-endian order; then each labelled vertex gets its label bit.
    """
    counts = np.asarray(counts, np.uint8)
    n, groups = counts.shape
    slots = np.zeros((n, n_bits // 2), np.uint8)       # two bits each; the label bits come first
    first = label_bits // 2
    np.bitwise_or(counts, counts >> 1, out=slots[:, first:first + groups])
    q = slots.reshape(n, n_bits // 8, 4)
    packed = q[:, :, 3] << 6
    packed |= q[:, :, 2] << 4
    packed |= q[:, :, 1] << 2
    packed |= q[:, :, 0]
    words = np.ascontiguousarray(packed).view("<u4").astype(np.uint32, copy=False)
    vertex_label = np.asarray(vertex_label)
    has = vertex_label >= 0
    if has.any():
        if label_table is None:
            label_table = label_bit_table(int(vertex_label.max()) + 1, label_bits)
        rows = np.flatnonzero(has)
        lb = label_table[vertex_label[rows]]
        words[rows, lb // 32] |= np.uint32(1) << (lb % 32).astype(np.uint32)
    return words


def label_bit_table(n_labels, label_bits):
    """:func:`label_bit` of the label ids ``0 .. n_labels-1``, as an int64 array."""
    return np.array([label_bit(x, label_bits) for x in range(n_labels)], np.int64)   # one per label


def query_signature(label_id, pairs, n_bits, label_bits, injective=True):
    """Signature words of one query vertex.

    ``pairs`` lists (edge label id, direction, neighbour label id) for the
    pattern edges whose key is fully known. Under homomorphism two pattern
    edges may map onto one data edge, so only the 01 bits are kept.
    """
    words = [0] * (n_bits // 32)           # Python ints: numpy's scalar ORs cost a microsecond each
    if label_id is not None and label_id >= 0:
        b = label_bit(label_id, label_bits)
        words[b // 32] |= 1 << (b % 32)
    groups = n_groups(n_bits, label_bits)
    counts = {}
    for key in pairs:
        g = pair_group(*key, groups)
        counts[g] = counts.get(g, 0) + 1
    for g, c in counts.items():
        bit = label_bits + 2 * g
        val = 3 if (c > 1 and injective) else 1
        words[bit // 32] |= val << (bit % 32)
    return np.array(words, np.uint32)


def signature_pass(columns, query_words, xp=np):
    """Vertices of one bucket segment whose signature covers the query's.

    ``columns`` is a list of word arrays (one per column of the bucket);
    ``query_words`` the query's words for the same columns.
    """
    ok = None
    for col, q in zip(columns, query_words):
        if int(q) == 0:
            continue
        q = xp.uint32(int(q))
        t = (col & q) == q
        ok = t if ok is None else ok & t
    return ok
