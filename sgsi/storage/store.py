"""Opening a graph store and reading its pieces (memory-mapped).

:class:`Store` checks the manifest version and every file's size on open,
and says which file is wrong. Readers hand out NumPy views over the
memory-mapped Arrow IPC files, so nothing is read until it is touched.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import StoreError
from . import format as fmt


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


class Store:
    """A graph store opened read-only.

    Parameters
    ----------
    path : str
        The store directory written by :func:`sgsi.build`.
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self.manifest = _read_manifest(self.path)
        m = self.manifest
        self.n_vertices = int(m["vertices"])
        self.n_edges = int(m["edges"])
        self.undirected = bool(m["undirected"])
        p = m["parameters"]
        self.theta = int(p["theta"])
        self.signature_bits = int(p["signature_bits"])
        self.label_bits = int(p["label_bits"])
        self.bucket_columns = int(p["signature_bucket_columns"])
        self.sig_segment_vertices = int(p["signature_segment_vertices"])
        self.build_budget = int(p["memory_budget"])
        self._edge_label_ids = {_label_key(v): i for i, v in enumerate(m["edge_labels"]["values"])
                                if m["edge_labels"]["present"]}
        self._vertex_label_ids = {_label_key(v): i for i, v in enumerate(m["vertex_labels"]["values"])}
        self.edge_label_freq = np.asarray(m["edge_labels"]["frequency"], np.int64)
        self._readers = {}
        seg = self._reader("segments.arrow").read_all()
        self._seg_partition = np.asarray(seg.column("partition").to_pylist(), dtype=object)
        self._seg_first = seg.column("first_src").to_numpy()
        self._seg_last = seg.column("last_src").to_numpy()
        self._seg_edges = seg.column("edges").to_numpy()
        self._seg_groups = seg.column("groups").to_numpy()
        idx = self._reader("vindex_batches.arrow").read_all()
        self._idx_first = idx.column("first_vertex").to_numpy()
        self._idx_last = idx.column("last_vertex").to_numpy()
        self._partitions = {}
        self._segments = {}
        self._views = {}
        self.max_segment_bytes = int(max((self._seg_edges * 4 + self._seg_groups * self.theta * 8).max(initial=0), 0))

    # -- files ----------------------------------------------------------------------

    def _reader(self, name):
        r = self._readers.get(name)
        if r is None:
            try:
                r = fmt.open_batches(os.path.join(self.path, name))
            except (pa.ArrowInvalid, OSError) as e:
                raise StoreError(f"damaged store {self.path}: cannot read {name}: {str(e).splitlines()[0]}") from None
            self._readers[name] = r
        return r

    def _column(self, name, batch, col=0):
        """One column of one batch as a NumPy view (cached: views cost no memory of their own)."""
        key = (name, int(batch), col)
        hit = self._views.get(key)
        if hit is None:
            hit = self._reader(name).get_batch(int(batch)).column(col).to_numpy(zero_copy_only=False)
            self._views[key] = hit
        return hit

    def verify(self):
        """Check every file's checksum; raises StoreError naming the first bad file."""
        for name, info in self.manifest["files"].items():
            crc = fmt.file_crc32(os.path.join(self.path, name))
            if crc != info["crc32"]:
                raise StoreError(f"damaged store {self.path}: {name} fails its checksum "
                                 f"(crc32 {crc}, manifest says {info['crc32']})")

    # -- labels ---------------------------------------------------------------------

    def edge_label_id(self, label: str):
        """Id of an edge label written in a pattern, or None when the store has none such."""
        return self._edge_label_ids.get(label)

    def vertex_label_id(self, label: str):
        return self._vertex_label_ids.get(label)

    @property
    def has_edge_labels(self) -> bool:
        return bool(self.manifest["edge_labels"]["present"])

    # -- partitions and segments -----------------------------------------------------

    def partition(self, label_id: int, direction: str) -> Partition:
        key = fmt.partition_key(label_id, direction)
        p = self._partitions.get(key)
        if p is None:
            info = self.manifest["partitions"][key]
            target = info.get("alias", key)
            info = self.manifest["partitions"][target]
            s0, ns = info["segments"]
            i0, ni = info["vindex"]
            seg_ids = np.arange(s0, s0 + ns)
            idx = np.arange(i0, i0 + ni)
            p = Partition(target, int(info["edges"]), int(info["vertices"]), int(info["max_degree"]), seg_ids,
                          self._seg_first[seg_ids], self._seg_last[seg_ids], self._seg_edges[seg_ids],
                          idx, self._idx_first[idx], self._idx_last[idx])
            self._partitions[key] = p
        return p

    def segment(self, seg_id: int):
        """(groups, ci) of a segment: views over the memory-mapped files."""
        hit = self._segments.get(seg_id)
        if hit is not None:
            return hit
        groups = self._column("pcsr_groups.arrow", seg_id).reshape(-1, self.theta, 2)
        ci = self._column("pcsr_ci.arrow", seg_id)
        self._segments[seg_id] = (groups, ci)   # views: they cost no memory of their own
        return groups, ci

    def segment_bytes(self, seg_id: int) -> int:
        return int(self._seg_edges[seg_id] * 4 + self._seg_groups[seg_id] * self.theta * 8)

    def index_batch(self, batch_id: int):
        """(vertex, degree) arrays of one degree-index batch (sorted by vertex)."""
        return self._column("vindex.arrow", batch_id, 0), self._column("vindex.arrow", batch_id, 1)

    # -- vertices -------------------------------------------------------------------

    @property
    def n_signature_words(self) -> int:
        return self.signature_bits // 32

    @property
    def n_buckets(self) -> int:
        return self.n_signature_words // self.bucket_columns

    def vertex_segments(self):
        """Yield (first vertex, number of vertices, segment number) of the signature segments."""
        step = self.sig_segment_vertices
        for k, start in enumerate(range(0, self.n_vertices, step)):
            yield start, min(step, self.n_vertices - start), k

    def vertex_labels(self, seg: int):
        return self._column("vertex_labels.arrow", seg)

    def signature_columns(self, seg: int, bucket: int):
        """The word columns of one (vertex segment, bucket) piece."""
        batch = seg * self.n_buckets + bucket
        return [self._column("signatures.arrow", batch, c) for c in range(self.bucket_columns)]

    def vertex_ids(self, dense: np.ndarray) -> pa.Array:
        """Original vertex ids of dense ids (Arrow array of the original type)."""
        ids = self._vertex_id_table()
        return ids.take(pa.array(np.asarray(dense, np.int64)))

    def _vertex_id_table(self):
        t = getattr(self, "_vid", None)
        if t is None:
            t = self._reader("vertex_ids.arrow").read_all().column(0)
            if t.num_chunks == 1:
                t = t.chunk(0)
            self._vid = t
        return t

    @property
    def vertex_id_type(self) -> pa.DataType:
        return self._reader("vertex_ids.arrow").schema.field(0).type

    def close(self):
        self._readers.clear()
        self._partitions.clear()
        self._segments.clear()
        self._views.clear()
        self._vid = None


def _label_key(v) -> str:
    return str(v)


def _read_manifest(path):
    if not os.path.isdir(path):
        raise StoreError(f"no graph store at {path}" + (" (it is a file)" if os.path.exists(path) else ""))
    mpath = os.path.join(path, fmt.MANIFEST)
    if not os.path.isfile(mpath):
        raise StoreError(f"{path} is not a graph store: {fmt.MANIFEST} is missing")
    try:
        with open(mpath) as f:
            m = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise StoreError(f"damaged store {path}: {fmt.MANIFEST} is not valid JSON ({e})") from None
    if not isinstance(m, dict) or m.get("format") != "sgsi-store":
        raise StoreError(f"{path} is not a graph store: {fmt.MANIFEST} is not an sgsi manifest")
    if m.get("version") != fmt.FORMAT_VERSION:
        raise StoreError(f"store {path} has format version {m.get('version')}; this sgsi reads version "
                         f"{fmt.FORMAT_VERSION} (rebuild the store)")
    for name, info in m.get("files", {}).items():
        fp = os.path.join(path, name)
        if not os.path.isfile(fp):
            raise StoreError(f"damaged store {path}: {name} is missing")
        size = os.path.getsize(fp)
        if size != info["bytes"]:
            raise StoreError(f"damaged store {path}: {name} has {size} bytes, manifest says {info['bytes']}")
    return m
