"""On-disk layout of a graph store and the helpers that read and write it.

A store is a directory::

    manifest.json          version, counts, dictionaries, parameters, files
    vertices.parquet       the vertex dictionary: row i = dense id i (id, label)
    vertex_ids.arrow       the original ids again, memory-mapped for lookups
    vertex_labels.arrow    int32 label id per vertex (-1: none), one batch
                           per signature vertex segment
    signatures.arrow       signature words, one batch per (bucket, vertex
                           segment); columns w0.. of the bucket
    segments.arrow         one row per PCSR segment: partition, first/last
                           source vertex, edges, groups
    pcsr_groups.arrow      batch k = the (Δ, Θ, 2) groups of segment k
    pcsr_ci.arrow          batch k = the column index of segment k
    vindex.arrow           per partition, sorted (vertex, degree) batches
    vindex_batches.arrow   one row per vindex batch: partition, first/last vertex

Arrow IPC files are opened memory-mapped, so a segment costs nothing until
its pages are touched.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

FORMAT_VERSION = 1
MANIFEST = "manifest.json"

#: Partition key of unlabeled pattern edges (any edge label).
ANY_LABEL = -1
DIRECTIONS = ("out", "in", "both")


def partition_key(label_id: int, direction: str) -> str:
    return f"{'any' if label_id == ANY_LABEL else label_id}:{direction}"


#: The Arrow files a store needs, with the columns each must have.
ARROW_FILES = {
    "segments.arrow": ("partition", "first_src", "last_src", "edges", "groups"),
    "pcsr_groups.arrow": None,
    "pcsr_ci.arrow": None,
    "vindex.arrow": None,
    "vindex_batches.arrow": ("partition", "first_vertex", "last_vertex", "rows"),
    "vertex_ids.arrow": None,
    "vertex_labels.arrow": None,
    "signatures.arrow": None,
}
#: Every file a store needs.
STORE_FILES = tuple(sorted(ARROW_FILES)) + ("vertices.parquet",)

@dataclass
class Partition:
    """The segments of one edge-label partition P(G, l) in one direction."""

    key: str
    edges: int
    vertices: int
    max_degree: int
    seg_ids: np.ndarray      # global segment numbers, in order
    first_src: np.ndarray    # per segment
    last_src: np.ndarray
    seg_edges: np.ndarray
    idx_batches: np.ndarray  # global vindex batch numbers, in order
    idx_first: np.ndarray
    idx_last: np.ndarray


def file_crc32(path: str, chunk: int = 1 << 22) -> str:
    crc = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            crc = zlib.crc32(block, crc)
    return f"{crc:08x}"


def write_manifest(directory: str, manifest: dict) -> None:
    with open(os.path.join(directory, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


class BatchFile:
    """An Arrow IPC file written one record batch at a time."""

    def __init__(self, path: str, schema: pa.Schema):
        self.path = path
        self.schema = schema
        self._sink = pa.OSFile(path, "wb")
        self._writer = pa.ipc.new_file(self._sink, schema)
        self.n_batches = 0

    def write(self, columns: list) -> int:
        """Append one batch; returns its index."""
        self._writer.write_batch(pa.record_batch(columns, schema=self.schema))
        self.n_batches += 1
        return self.n_batches - 1

    def close(self) -> None:
        self._writer.close()
        self._sink.close()


def open_batches(path: str) -> pa.ipc.RecordBatchFileReader:
    return pa.ipc.open_file(pa.memory_map(path, "r"))
