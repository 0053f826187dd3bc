"""Opening a graph store and reading its pieces (memory-mapped).

:class:`Store` checks, on open and cheaply (no data page is read):

* the manifest: version, and the fields the reader relies on;
* every file the manifest lists: present, of the recorded size, an Arrow
  file with the expected columns and number of batches;
* the two small tables read whole on open (``segments.arrow``,
  ``vindex_batches.arrow``) against their checksums, and their values
  against the manifest.

Each batch is checked again when first read (its length, and the ranges of
the values that size allocations: PCSR offsets, degrees), so a damaged file
gives a :class:`~sgsi.errors.StoreError` naming it instead of a crash or a
runaway allocation. Content damage that keeps every value in range is found
only by :meth:`Store.verify` (all checksums; ``sgsi info --verify``,
``sgsi.open(path, verify=True)``).

All files are opened (memory-mapped) when the store is opened, so a store
replaced on disk while open (``build --force``) keeps serving the files it
was opened with: a reader sees one store, never a mix of two.

Readers hand out NumPy views over the memory-mapped Arrow IPC files, so
nothing is read until it is touched.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pyarrow as pa

from ..errors import PatternError, StoreError
from ..partition import pcsr
from . import format as fmt
from .format import ARROW_FILES, Partition
from .lists import SegmentTable
from .manifest import (count_field, first_line, identity, int_column, label_key, read_manifest,  # noqa: F401
                       verify_files, what_field)       # verify_files: the CLI's and tests' import
from .reads import READ_ERRORS, Reading, pread, pread_threads
from .versions import OPENINGS, Versions


#: Files whose batches can also be read with pread(2) instead of through the memory map.
_READ_DIRECT = ("pcsr_groups.arrow", "pcsr_ci.arrow")
#: Bytes one pread(2) call reads; larger reads are cut into pieces read by several threads.
_PREAD_PIECE = 8 << 20
#: Files read whole on open, so checked against their checksums then.
_CHECKED_ON_OPEN = ("segments.arrow", "vindex_batches.arrow")


class Store(Versions):
    """A graph store opened read-only.

    Parameters
    ----------
    path : str
        The store directory written by :func:`sgsi.build`.
    version : int, optional
        The store version to present (None: the newest); see
        :mod:`sgsi.storage.overlay`. A store opened at a version keeps it.

    Raises
    ------
    StoreError
        When there is no store at ``path``, or it is of another format
        version, or a file is missing, of the wrong size or not the Arrow
        file it should be; the message names the file.
    """

    def __init__(self, path, version=None):
        self.path = os.fspath(path)
        self._want_version = None if version is None else int(version)
        #: This opening of the store, in the keys of the caches that the process's queries share
        #: (a store rebuilt in place and opened again gets a new one).
        self.token = (self.path, next(OPENINGS))
        #: The same for the base files, which the openings newest() and at() make share: in the keys
        #: of what only they hold (a base segment), so that every version finds it.
        self.base_token = (self.path, "base", self.token[1])
        self._lock = threading.Lock()
        # A store replaced on disk (build --force) while we open it would give
        # a manifest of one and files of the other: open again if the
        # directory changed under us.
        for _attempt in range(3):
            before = identity(self.path)
            try:
                self._open()
            except StoreError:
                if identity(self.path) == before:
                    raise
                continue
            if identity(self.path) == before:
                self._identity = before
                return
            self.close()
        raise StoreError(f"store {self.path} kept changing while it was opened (is it being rebuilt?)")

    def _open(self):
        self._readers = {}
        self._maps = {}
        self._views = {}
        self._close_hooks = []
        self.manifest = read_manifest(self.path)
        m = self.manifest
        try:
            self.n_vertices = count_field(m["vertices"], "vertices")
            self.n_edges = count_field(m["edges"], "edges")
            self.undirected = bool(m["undirected"])
            p = m["parameters"]
            self.theta = int(p["theta"])
            self.signature_bits = int(p["signature_bits"])
            self.label_bits = int(p["label_bits"])
            self.bucket_columns = int(p["signature_bucket_columns"])
            self.sig_segment_vertices = int(p["signature_segment_vertices"])
            self.build_budget = int(p["memory_budget"])
            self.lean = bool(p.get("lean", False))
            present = bool(m["edge_labels"]["present"])
            self._edge_label_ids = {label_key(v): i for i, v in enumerate(m["edge_labels"]["values"]) if present}
            self._vertex_label_ids = {label_key(v): i for i, v in enumerate(m["vertex_labels"]["values"])}
            self.edge_label_freq = np.asarray(m["edge_labels"]["frequency"], np.int64)
            parts = m["partitions"]
            for info in parts.values():
                target = parts[info["alias"]] if "alias" in info else info
                for field in ("segments", "vindex"):
                    a, n = target[field]
                    count_field(a, field), count_field(n, field)
                for field in ("edges", "vertices", "max_degree"):
                    count_field(target[field], field)
            if not 2 <= self.theta <= 16 or self.signature_bits % 32 or self.signature_bits <= 0 \
                    or self.bucket_columns <= 0 or (self.signature_bits // 32) % self.bucket_columns \
                    or self.sig_segment_vertices <= 0:
                raise ValueError("parameters out of range")
        except StoreError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            raise StoreError(f"damaged store {self.path}: {fmt.MANIFEST} lacks or has a bad value for "
                             f"{what_field(e)}") from None

        files = m["files"]
        for name in _CHECKED_ON_OPEN:
            crc = fmt.file_crc32(os.path.join(self.path, name))
            if crc != files[name]["crc32"]:
                raise StoreError(f"damaged store {self.path}: {name} fails its checksum "
                                 f"(crc32 {crc}, manifest says {files[name]['crc32']})")
        for name, columns in ARROW_FILES.items():
            self._readers[name] = self._open_arrow(name, files[name]["bytes"], columns)

        seg = self._read_table("segments.arrow")
        idx = self._read_table("vindex_batches.arrow")
        with self._reading("segments.arrow"):
            self._seg_partition = np.asarray(seg.column("partition").to_pylist(), dtype=object)
            self._seg_first = int_column(seg.column("first_src"))
            self._seg_last = int_column(seg.column("last_src"))
            self._seg_edges = int_column(seg.column("edges"))
            self._seg_groups = int_column(seg.column("groups"))
        with self._reading("vindex_batches.arrow"):
            self._idx_partition = np.asarray(idx.column("partition").to_pylist(), dtype=object)
            self._idx_first = int_column(idx.column("first_vertex"))
            self._idx_last = int_column(idx.column("last_vertex"))
            self._idx_rows = int_column(idx.column("rows"))
        self._check_structure()
        self._partitions = {}
        self._segments = {}
        self._checked_segments = set()
        self._checked_index = set()
        self._vid = None
        self.max_segment_bytes = int(max((self._seg_edges * 4 + self._seg_groups * self.theta * 8).max(initial=0), 0))
        self._base_n = self.n_vertices
        self._base_manifest = m
        self._base_max_segment_bytes = self.max_segment_bytes
        self._n_base_segments = len(self._seg_edges)
        self._offsets = np.full((self._n_base_segments, 2), -1, np.int64)     # segment_table's, once known
        self._n_base_index = len(self._idx_rows)
        self._siblings = {}
        self._older = None          # the opening newest() made this from (Versions.newest)
        self._open_versions()

    # -- checks ---------------------------------------------------------------------

    def _damaged(self, name, problem) -> StoreError:
        return StoreError(f"damaged store {self.path}: {name} {problem} (run `sgsi info --verify {self.path}`, "
                          f"or rebuild the store)")

    def _open_arrow(self, name, size, columns):
        fp = os.path.join(self.path, name)
        try:
            mm = pa.memory_map(fp, "r")
        except OSError as e:
            raise StoreError(f"damaged store {self.path}: cannot read {name}: {e.strerror or e}") from None
        if mm.size() != size:     # the file we mapped, not whatever the path names now
            raise StoreError(f"damaged store {self.path}: {name} has {mm.size()} bytes, manifest says {size}")
        if name in _READ_DIRECT and size:
            # The map's first byte, so that a buffer's address gives its offset in the file.
            mm.seek(0)
            self._maps[name] = (mm, mm.read_buffer(1).address)
            mm.seek(0)
        try:
            reader = pa.ipc.open_file(mm)
            names = reader.schema.names
        except READ_ERRORS as e:
            raise StoreError(f"damaged store {self.path}: cannot read {name}: {first_line(e)}") from None
        if columns is not None and list(names) != list(columns):
            raise StoreError(f"damaged store {self.path}: {name} has columns {', '.join(names)}, expected "
                             f"{', '.join(columns)}")
        return reader

    def _read_table(self, name):
        with self._reading(name):
            return self._readers[name].read_all()

    def _reading(self, name):
        return Reading(self, name)

    def _check_structure(self):
        """Counts and ranges that tie the files to each other and to the manifest (metadata only)."""
        nseg = len(self._seg_edges)
        n = self.n_vertices
        if len(self._seg_partition) and (
                (self._seg_edges < 0).any() or (self._seg_groups < 0).any() or (self._seg_first < 0).any()
                or (self._seg_first > self._seg_last).any() or (self._seg_last >= n).any()):
            raise self._damaged("segments.arrow", "holds values out of range")
        if len(self._idx_rows) and ((self._idx_rows <= 0).any() or (self._idx_first < 0).any()
                                    or (self._idx_first > self._idx_last).any() or (self._idx_last >= n).any()):
            raise self._damaged("vindex_batches.arrow", "holds values out of range")
        expect = {"pcsr_groups.arrow": nseg, "pcsr_ci.arrow": nseg, "vindex.arrow": len(self._idx_rows)}
        n_vseg = -(-n // self.sig_segment_vertices) if n else 0
        expect["vertex_labels.arrow"] = n_vseg
        expect["signatures.arrow"] = n_vseg * self.n_buckets
        for name, k in expect.items():
            got = self._readers[name].num_record_batches
            if got != k:
                raise self._damaged(name, f"has {got} batches, the store needs {k}")
        vid = self._readers["vertex_ids.arrow"]
        with self._reading("vertex_ids.arrow"):
            rows = sum(vid.get_batch(i).num_rows for i in range(vid.num_record_batches))
        if rows != n:
            raise self._damaged("vertex_ids.arrow", f"has {rows} ids, the store has {n} vertices")
        for key, info in self.manifest["partitions"].items():
            info = self.manifest["partitions"].get(info.get("alias"), info)
            (s0, ns), (i0, ni) = info["segments"], info["vindex"]
            if s0 + ns > nseg or i0 + ni > len(self._idx_rows):
                raise StoreError(f"damaged store {self.path}: {fmt.MANIFEST} names segments or index batches "
                                 f"of partition {key} that segments.arrow or vindex_batches.arrow lack")

    # -- files ----------------------------------------------------------------------

    def _reader(self, name):
        r = self._readers.get(name)
        if r is None:
            if name in ARROW_FILES:
                raise StoreError(f"store {self.path} is closed")
            raise StoreError(f"store {self.path} has no file {name}")
        return r

    def _batch(self, name, batch, rows=None):
        with self._reading(name):
            rb = self._reader(name).get_batch(int(batch))
        if rows is not None and rb.num_rows != rows:
            raise self._damaged(name, f"batch {int(batch)} has {rb.num_rows} rows, the store needs {rows}")
        return rb

    def _column(self, name, batch, col=0, rows=None):
        rb = self._batch(name, batch, rows)
        with self._reading(name):
            return rb.column(col).to_numpy(zero_copy_only=False)

    def verify(self):
        """Check every file's size and checksum (the deltas' too); raises StoreError naming the first bad file."""
        from .delta import verify_deltas
        verify_files(self.path, self._base_manifest)
        verify_deltas(self.path, self.versions, self.base_version)

    def find_damage(self):
        """The StoreError :meth:`verify` would raise, or None for a sound store."""
        try:
            self.verify()
        except StoreError as e:
            return e
        return None

    # -- labels ---------------------------------------------------------------------

    def edge_label_id(self, label: str):
        """Id of an edge label written in a pattern, or None when the store has none such."""
        return self._edge_label_ids.get(label)

    def vertex_label_id(self, label: str):
        return self._vertex_label_ids.get(label)

    def label_names(self, kind: str) -> list:
        """The store's ``"vertex"`` or ``"edge"`` labels as a pattern writes them, most frequent first."""
        ids = self._vertex_label_ids if kind == "vertex" else self._edge_label_ids
        freq = self.manifest[f"{kind}_labels"].get("frequency", [])
        return sorted(ids, key=lambda k: (-int(freq[ids[k]]) if ids[k] < len(freq) else 0, k))

    @property
    def has_edge_labels(self) -> bool:
        return bool(self.manifest["edge_labels"]["present"])

    # -- partitions and segments -----------------------------------------------------

    def partition(self, label_id: int, direction: str) -> Partition:
        if self._view is not None:
            return self._view.partition(label_id, direction)
        key = fmt.partition_key(label_id, direction)
        p = self._partitions.get(key)
        if p is None:
            info = self.manifest["partitions"].get(key)
            if info is None:
                if not self.lean:
                    raise StoreError(f"damaged store {self.path}: {fmt.MANIFEST} lacks partition {key}")
                what = [w for w, missing in (("unlabeled", label_id == fmt.ANY_LABEL and len(self.edge_label_freq) > 1),
                                             ("undirected", direction == "both" and not self.undirected)) if missing]
                raise PatternError(f"the pattern has {' '.join(what)} edges, and store {self.path} was built lean "
                                   f"(labelled, directed partitions only): rebuild it without --lean to match them")
            p = self._base_partition(key)
            self._partitions[key] = p
        return p

    def _base_partition(self, key):
        """The partition of the base files under ``key`` (aliases resolved), or None."""
        parts = self._base_manifest["partitions"]
        info = parts.get(key)
        if info is None:
            return None
        target = info.get("alias", key)
        p = self._base_parts.get(target)
        if p is None:
            info = parts[target]
            s0, ns = info["segments"]
            i0, ni = info["vindex"]
            seg_ids = np.arange(s0, s0 + ns)
            idx = np.arange(i0, i0 + ni)
            p = Partition(target, int(info["edges"]), int(info["vertices"]), int(info["max_degree"]), seg_ids,
                          self._seg_first[seg_ids], self._seg_last[seg_ids], self._seg_edges[seg_ids],
                          idx, self._idx_first[idx], self._idx_last[idx])
            self._base_parts[target] = p
        return p

    def _empty_partition(self, key):
        z = np.zeros(0, np.int64)
        return Partition(key, 0, 0, 0, z, z, z, z, z, z, z)

    def _add_segment(self, key, first, last, groups, ci):
        """A segment held in memory; returns its number."""
        with self._lock:
            sid = self._next_segment
            self._next_segment += 1
            self._virtual[sid] = (groups, ci, None, None, int(groups.shape[0]), int(ci.size))
        return sid

    def _add_masked(self, seg, vertices):
        """Base segment ``seg`` without the lists of ``vertices``, under a new number."""
        with self._lock:
            sid = self._next_segment
            self._next_segment += 1
            self._virtual[sid] = (None, None, int(seg), vertices, int(self._seg_groups[seg]), int(self._seg_edges[seg]))
        return sid

    def _add_index(self, key, v, d):
        """A degree index batch held in memory; returns (its number, first vertex, last vertex)."""
        with self._lock:
            bid = self._next_index
            self._next_index += 1
            self._vindex[bid] = (v, d)
        return bid, int(v[0]), int(v[-1])

    def _virtual_segment(self, seg_id):
        try:
            groups, ci, base, verts, ng, ne = self._virtual[seg_id]
        except KeyError:
            raise StoreError(f"store {self.path} has no segment {seg_id}") from None
        if groups is not None:
            return groups, ci
        with self._lock:
            hit = self._masked.pop(seg_id, None)
            if hit is not None:
                self._masked[seg_id] = hit                  # the most recent
                return hit
        groups, ci = self._base_segment(base)
        hide = pcsr.slots(groups, verts)          # found by their hash: no pass over the segment
        groups = groups.copy()
        groups.reshape(-1, 2)[hide, 0] = -1
        with self._lock:
            self._masked[seg_id] = (groups, ci)
            # Masked copies are kept within a quarter of the build's budget (at least two segments).
            cap = max(2 * self._base_max_segment_bytes, self.build_budget // 4)
            while len(self._masked) > 1 and sum(g.nbytes for g, _c in self._masked.values()) > cap:
                self._masked.pop(next(iter(self._masked)))  # the least recent
        return groups, ci

    def reads_direct_segment(self, seg_id: int) -> bool:
        """Whether segment ``seg_id`` can be read with pread(2) or from the file maps (not one
        held in memory: the changes of a version after the base)."""
        return self.reads_direct and int(seg_id) < self._n_base_segments

    def vertex_label_ids(self, dense) -> np.ndarray:
        """Label ids (int32, -1: none) of dense vertex ids, read by vertex segment."""
        dense = np.asarray(dense, np.int64)
        if not dense.size:
            return np.zeros(0, np.int32)
        step = self.sig_segment_vertices
        seg = dense // step
        used = np.flatnonzero(np.bincount(seg))
        if used.size == 1:                  # one segment: its labels as read, not a copy
            k = int(used[0])
            return np.asarray(self.vertex_labels(k), np.int32)[dense - k * step]
        parts = [self.vertex_labels(k) for k in used.tolist()]           # a loop over segments
        at = np.zeros(int(used[-1]) + 1, np.int64)
        at[used] = np.cumsum([0] + [len(p) for p in parts[:-1]])
        return np.concatenate(parts).astype(np.int32, copy=False)[at[seg] + dense - seg * step]

    def segment_lists(self, seg_id: int):
        """(groups, ci, hidden) to read a segment's lists with: a masked one is its base segment,
        less the lists of the sorted vertices ``hidden`` (None for the others); no masked copy."""
        if seg_id >= self._n_base_segments:
            groups, ci, base, verts, _ng, _ne = self._virtual[int(seg_id)]
            if base is not None:
                return (*self._base_segment(base), verts)
            return groups, ci, None
        return (*self._base_segment(seg_id), None)

    def segment(self, seg_id: int):
        """(groups, ci) of a segment: views over the memory-mapped files, or arrays in memory
        for the segments of a version's changes.

        Checked when first read: batch lengths, and that every PCSR offset
        lies inside the segment's column index (they size allocations).
        """
        if seg_id >= self._n_base_segments:
            return self._virtual_segment(int(seg_id))
        return self._base_segment(seg_id)

    def _base_segment(self, seg_id: int, check=True):
        """``check=False``: not checked whole (nor kept) when first read, for a few lists whose
        offsets :func:`~.lists.lists_in` checks (an update: a whole check would read every segment)."""
        hit = self._segments.get(seg_id)
        if hit is not None:
            return hit
        group_rows, ci_rows = self._segment_rows(seg_id)
        groups = self._column("pcsr_groups.arrow", seg_id, rows=group_rows)
        ci = self._column("pcsr_ci.arrow", seg_id, rows=ci_rows)
        groups = groups.reshape(-1, self.theta, 2)
        if not check:
            return groups, ci
        self.check_segment(seg_id, groups)
        self._segments[seg_id] = (groups, ci)   # views: they cost no memory of their own
        return groups, ci

    def check_segment(self, seg_id: int, groups, xp=np):
        """The checks of a segment's groups on first read, on NumPy or CuPy arrays.

        Every PCSR offset lies inside the segment's column index, in order
        within a group; vertex ids and overflow links are in range. These
        values size allocations and index arrays, so a damaged file must
        fail here, with a StoreError naming it.
        """
        if not groups.size or seg_id in self._checked_segments or seg_id >= self._n_base_segments:
            return
        n_groups, n_edges = int(self._seg_groups[seg_id]), int(self._seg_edges[seg_id])
        off = groups[:, :, 1]
        head = groups[:, :-1, 0]
        gid = groups[:, -1, 0]
        if (int(off.min()) < 0 or int(off.max()) > n_edges or bool((xp.diff(off, axis=1) < 0).any())
                or int(head.min()) < -1 or int(head.max()) >= self.n_vertices
                or int(gid.min()) < -1 or int(gid.max()) >= n_groups):
            raise self._damaged("pcsr_groups.arrow", f"holds values out of range in segment {seg_id}")
        self._checked_segments.add(seg_id)

    def _segment_rows(self, seg_id: int):
        """(int32 values of the groups, of the ci) of a segment, from its entry in segments.arrow."""
        if seg_id >= self._n_base_segments:
            v = self._virtual[int(seg_id)]
            return v[4] * self.theta * 2, v[5]
        return int(self._seg_groups[seg_id]) * self.theta * 2, int(self._seg_edges[seg_id])

    def segment_key(self, seg_id: int):
        """The token of ``seg_id`` in the caches' keys: the base files' for a base segment (the
        same in every version's opening), this opening's for one held in memory."""
        return self.base_token if seg_id < self._n_base_segments else self.token

    def shares_files(self, other) -> bool:
        """Whether ``other`` is an opening of the same base files (made by :meth:`newest` or
        :meth:`at` from this one or its kin), open."""
        return other is not None and bool(self._readers) and other._readers is self._readers

    def segment_sizes(self, seg_id: int):
        """(groups bytes, ci bytes) of a segment."""
        return tuple(4 * r for r in self._segment_rows(seg_id))

    @property
    def reads_direct(self) -> bool:
        """Whether :meth:`read_segment` can read segments with pread(2) (not on an empty store)."""
        return hasattr(os, "preadv") and len(self._maps) == len(_READ_DIRECT)

    def segment_spans(self, seg_id: int):
        """Where a segment's bytes lie in its files: ``[(file name, offset, bytes)]`` for its
        groups then its ci (empty parts left out). The values are not checked here (see
        :meth:`check_segment`)."""
        if seg_id >= self._n_base_segments:
            raise StoreError(f"store {self.path}: segment {seg_id} is held in memory (see reads_direct_segment)")
        spans = []
        for name, rows in zip(_READ_DIRECT, self._segment_rows(seg_id)):
            if not rows:
                continue
            rb = self._batch(name, seg_id, rows)
            mm, base = self._maps.get(name, (None, 0))
            if mm is None:
                raise StoreError(f"store {self.path} is closed")
            with self._reading(name):
                arr = rb.column(0)
                if arr.type != pa.int32() or arr.null_count:
                    raise self._damaged(name, f"batch {seg_id} is not a column of int32 without nulls")
                offset = arr.buffers()[1].address + 4 * arr.offset - base
            spans.append((name, offset, 4 * rows))
        return spans

    def segment_table(self, seg_ids):
        """The base segments ``seg_ids`` as a :class:`~.lists.SegmentTable` (their groups and lists
        read where they lie in the files, for a test over many segments at once). Where a segment
        lies is found on its first use and kept while the files are (a batch header read a segment)."""
        ids = np.asarray(seg_ids, np.int64)
        off = self._offsets
        for seg in np.unique(ids[off[ids, 0] < 0]).tolist():     # a loop over segments not yet seen
            found = [0, 0]
            for name, offset, _nbytes in self.segment_spans(seg):
                if offset % 4:
                    raise self._damaged(name, f"batch {seg} is not aligned to its int32 values")
                found[_READ_DIRECT.index(name)] = offset // 4
            off[seg] = found
        groups, ci = (self._file_view(name) for name in _READ_DIRECT)
        return SegmentTable(ids, groups, ci, off[ids, 0], off[ids, 1], self._seg_groups[ids], self._seg_edges[ids],
                            self.theta)

    def _file_view(self, name):
        """An int32 array over the whole of ``name`` through the map its segments are read from
        (its pages touched already where they were read: a second map of the file paid a page
        fault a page, and a 100K-edge update's presence test 40 ms more on a 10M-edge store)."""
        view = self._views.get((name, "int32"))
        if view is None:
            if name not in self._maps:
                raise StoreError(f"store {self.path} is closed or has no map of {name}")
            mm, base = self._maps[name]
            size = mm.size() // 4 * 4
            view = np.frombuffer(pa.foreign_buffer(base, size, base=mm), np.int32) if size else np.zeros(0, np.int32)
            self._views[(name, "int32")] = view
        return view

    def map_buffer(self, name):
        """A read-only uint8 array over the whole of ``name`` (one of the segment files), through
        a Python ``mmap`` of the file the store opened; holding it keeps the map alive after the
        store is closed. The GPU backend registers its pages with CUDA: ``cudaHostRegister``
        did not return on the pyarrow map of some files where it took a Python map of the same
        file in milliseconds (probe hostregister_probe, in git history)."""
        view = self._views.get(name)
        if view is None:
            if name not in self._maps:
                raise StoreError(f"store {self.path} is closed or has no map of {name}")
            import mmap
            view = np.frombuffer(mmap.mmap(self._maps[name][0].fileno(), 0, access=mmap.ACCESS_READ), np.uint8)
            self._views[name] = view
        return view

    def on_close(self, fn):
        """Call ``fn(store)`` when the store is closed (before its maps are let go)."""
        self._close_hooks.append(fn)

    def segment_shape(self, seg_id: int):
        """Shape of a segment's groups array: (groups, theta, 2)."""
        if seg_id >= self._n_base_segments:
            return (self._virtual[int(seg_id)][4], self.theta, 2)
        return (int(self._seg_groups[seg_id]), self.theta, 2)

    def read_segment(self, seg_id: int, out: np.ndarray):
        """Read a segment's groups then ci into the uint8 buffer ``out``, with pread(2).

        For copies into pinned buffers: pread copies from the page cache in
        the kernel, without the page faults of a first touch through the
        memory map, and large segments are read by several threads. The
        values are not checked here (see :meth:`check_segment`). Returns
        (groups bytes, ci bytes, groups shape).
        """
        if seg_id >= self._n_base_segments:
            groups, ci = self.segment(seg_id)
            g = groups.reshape(-1).view(np.uint8)
            out[:g.size] = g
            out[g.size:g.size + ci.nbytes] = ci.view(np.uint8)
            return g.size, ci.nbytes, groups.shape
        pieces, at = [], 0
        for name, offset, nbytes in self.segment_spans(seg_id):
            fd = self._maps[name][0].fileno()
            for a in range(0, nbytes, _PREAD_PIECE):
                pieces.append((fd, offset + a, at + a, min(_PREAD_PIECE, nbytes - a)))
            at += nbytes
        try:
            if len(pieces) == 1:
                pread(out, *pieces[0])
            elif pieces:
                list(pread_threads().map(lambda p: pread(out, *p), pieces))
        except OSError as e:
            raise self._damaged("pcsr_groups.arrow or pcsr_ci.arrow", f"cannot be read at segment {seg_id} ({e})")
        g_bytes, c_bytes = self.segment_sizes(seg_id)
        return g_bytes, c_bytes, self.segment_shape(seg_id)

    def segment_bytes(self, seg_id: int) -> int:
        """Bytes of a segment's groups and ci together."""
        return sum(self.segment_sizes(seg_id))

    def index_batch(self, batch_id: int):
        """(vertex, degree) arrays of one degree-index batch (sorted by vertex).

        Checked when first read: its length, that its vertices lie in the
        range vindex_batches.arrow gives, and that every degree is at most
        the partition's maximum degree (degrees size allocations).
        """
        batch_id = int(batch_id)
        if batch_id >= self._n_base_index:
            try:
                return self._vindex[batch_id]
            except KeyError:
                raise StoreError(f"store {self.path} has no index batch {batch_id}") from None
        return self._base_index_batch(batch_id)

    def _base_index_batch(self, batch_id: int):
        rows = int(self._idx_rows[batch_id])
        rb = self._batch("vindex.arrow", batch_id, rows)
        with self._reading("vindex.arrow"):
            v, d = rb.column(0).to_numpy(), rb.column(1).to_numpy()
        if batch_id not in self._checked_index:
            key = self._idx_partition[batch_id]
            info = self._base_manifest["partitions"].get(key)
            top = int(info["max_degree"]) if isinstance(info, dict) and "max_degree" in info else None
            if (top is None or int(v[0]) != int(self._idx_first[batch_id]) or int(v[-1]) != int(self._idx_last[batch_id])
                    or (np.diff(v) <= 0).any() or int(d.min()) < 1 or int(d.max()) > top):
                raise self._damaged("vindex.arrow", f"holds values out of range in batch {batch_id}")
            self._checked_index.add(batch_id)
        return v, d

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

    def _vertex_segment_rows(self, seg):
        return min(self.sig_segment_vertices, self._base_n - int(seg) * self.sig_segment_vertices)

    def vertex_labels(self, seg: int):
        if self._view is not None:
            return self._view.vertex_labels(seg)
        return self._base_vertex_labels(seg)

    def _base_vertex_labels(self, seg: int):
        return self._column("vertex_labels.arrow", seg, rows=self._vertex_segment_rows(seg))

    def signature_columns(self, seg: int, bucket: int):
        """The word columns of one (vertex segment, bucket) piece."""
        if self._view is not None:
            return self._view.signature_columns(seg, bucket)
        return self._base_signature_columns(seg, bucket)

    def _base_signature_columns(self, seg: int, bucket: int):
        rb = self._batch("signatures.arrow", seg * self.n_buckets + bucket, self._vertex_segment_rows(seg))
        if rb.num_columns != self.bucket_columns:
            raise self._damaged("signatures.arrow", f"has {rb.num_columns} columns, the store needs "
                                                    f"{self.bucket_columns}")
        with self._reading("signatures.arrow"):
            return [rb.column(c).to_numpy() for c in range(rb.num_columns)]

    def vertex_ids(self, dense: np.ndarray) -> pa.Array:
        """Original vertex ids of dense ids (Arrow array of the original type)."""
        ids = self._vertex_id_table()
        with self._reading("vertex_ids.arrow"):
            idx = np.asarray(dense)
            if idx.dtype != np.int32:       # the engine's columns are int32: taken as they are
                idx = idx.astype(np.int64)
            out = ids.take(pa.array(idx))
            return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out

    def _vertex_id_table(self):
        t = self._vid
        if t is None:
            with self._lock:
                t = self._vid
                if t is None:
                    with self._reading("vertex_ids.arrow"):
                        t = self._reader("vertex_ids.arrow").read_all().column(0)
                        # Arrow trusts the offsets of a string column read from a file; a damaged
                        # one would make take() read out of bounds. Checked once, here.
                        t.validate(full=True)
                        if t.num_chunks == 1:
                            t = t.chunk(0)
                        elif t.num_chunks == 0:
                            t = pa.array([], t.type)
                        else:       # several batches: one array, so that take() gives an Array
                            try:
                                t = pa.concat_arrays(t.chunks)
                            except (pa.ArrowInvalid, pa.ArrowCapacityError):
                                pass    # > 2 GiB of string ids: vertex_ids() combines each result
                    if self._view is not None and len(self._view.new_ids):
                        base = t.chunks if isinstance(t, pa.ChunkedArray) else [t]
                        t = pa.chunked_array(base + [self._view.new_ids], t.type)
                        try:
                            t = pa.concat_arrays(t.chunks)
                        except (pa.ArrowInvalid, pa.ArrowCapacityError):
                            pass
                    self._vid = t
        return t

    @property
    def vertex_id_type(self) -> pa.DataType:
        return self._reader("vertex_ids.arrow").schema.field(0).type

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run (its files are let go)."""
        return not self._readers

    def close(self):
        hooks, self._close_hooks = getattr(self, "_close_hooks", []), []
        for fn in hooks:
            fn(self)
        self._readers = {}
        self._maps = {}
        self._views = {}
        self._partitions = {}
        self._segments = {}
        self._vid = None
        self._older = None
