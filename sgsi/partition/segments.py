"""Segment plans: the sizes of PCSR segments, signature buckets and index batches.

They follow from the memory budget: a join step holds two PCSR segments,
two intermediate columns and the Prealloc-Combine buffer inside it, so
each of those gets at most an eighth of it. A PCSR segment of E edges
over at most E source vertices takes at most ``E * (4 + 8Θ)`` bytes (4
bytes of ``ci`` per edge, one group of Θ int32 pairs per vertex).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Full-width signature rows are kept down to this many vertices per segment
#: before the columns are cut into several buckets.
_MIN_FULL_ROWS = 1024


@dataclass(frozen=True)
class Plan:
    budget: int
    segment_edges: int
    signature_bucket_columns: int
    signature_segment_vertices: int
    index_batch_rows: int


def plan(budget: int, theta: int, signature_words: int) -> Plan:
    """The sizes a store built for ``budget`` bytes takes (Θ = ``theta``, signatures of that many words).

    Examples
    --------
    >>> plan(1 << 20, 4, 2).segment_edges
    3640
    """
    piece = budget // 8
    seg_edges = max(8, piece // (4 + 8 * theta))
    cols = signature_words
    if piece < _MIN_FULL_ROWS * 4 * cols:
        cols = max(1, piece // (_MIN_FULL_ROWS * 4))
        while signature_words % cols:
            cols -= 1
    seg_vertices = max(32, (piece // (4 * cols)) // 32 * 32)
    index_rows = max(32, piece // 8)
    return Plan(budget, seg_edges, cols, seg_vertices, index_rows)
