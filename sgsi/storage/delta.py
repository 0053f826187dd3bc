"""Updates: one batch of edge insertions and deletions written as an immutable delta.

``deltas/<version>/`` holds, against the version before it:

* ``inserted.arrow``, ``deleted.arrow``: the net inserted and deleted edges,
  dense int32 (src, dst, label id), sorted; in an undirected store each edge
  once, as (min, max);
* ``vertices.arrow``: the vertices new in this version (original ``id``,
  ``label`` id or -1), which take the dense ids after the last ones;
* ``signatures.arrow``: the new signature (``vertex``, ``w0``..) of every
  vertex whose neighbourhood changed, and of every new vertex.

The delta is written into a temporary directory, synced, renamed into
place, and only then is the manifest (its ``versions`` list) replaced the
same way, so a crash leaves the store at the old version or the new one. A
delta directory the manifest does not list (a crash between the two
renames) is removed by the next update. Updates of one store take a lock
file beside it (``.NAME.lock``) and run one at a time.

Applying an update reads only the lists of the vertices it touches.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InputError, StoreError
from ..partition import signatures
from . import atomic, sources
from . import format as fmt
from .lists import canonical, edge_isin, has_pairs, pair_keys, partition_lists, unique_edges

DELTAS = "deltas"
EDGE_FILES = ("inserted.arrow", "deleted.arrow")
DELTA_FILES = EDGE_FILES + ("vertices.arrow", "signatures.arrow")
#: Vertices whose signatures are counted at once.
_SIGNATURE_BLOCK = 1 << 16
#: Test hook: called with the name of each step of writing an update (see tests).
STEP_HOOK = None


def _step(name):
    if STEP_HOOK is not None:
        STEP_HOOK(name)


class Delta:
    """One version's delta, read into memory."""

    __slots__ = ("version", "inserted", "deleted", "new_ids", "new_labels", "sig_vertex", "sig_words")


def read_deltas(path, versions, base_version):
    """{version: :class:`Delta`} of every version after the base."""
    out = {}
    for e in versions:
        v = int(e["version"])
        if v > base_version:
            out[v] = _read_delta(path, e)
    return out


def _read_delta(path, entry):
    d = Delta()
    d.version = int(entry["version"])
    where = os.path.join(path, entry.get("delta", f"{DELTAS}/{d.version}"))
    tables = {}
    for name in DELTA_FILES:
        fp = os.path.join(where, name)
        rel = os.path.relpath(fp, path)
        want = entry.get("files", {}).get(name, {}).get("bytes")
        try:
            size = os.path.getsize(fp)
            if want is not None and size != want:
                raise StoreError(f"damaged store {path}: {rel} has {size} bytes, manifest says {want}")
            with pa.OSFile(fp) as f:
                tables[name] = pa.ipc.open_file(f).read_all()
        except StoreError:
            raise
        except (OSError, pa.ArrowException) as e:
            raise StoreError(f"damaged store {path}: cannot read {rel}: {str(e).splitlines()[0]}") from None
    try:
        d.inserted, d.deleted = (tuple(_ints(tables[n].column(c)) for c in ("src", "dst", "label"))
                                 for n in EDGE_FILES)
        vt = tables["vertices.arrow"]
        d.new_ids = vt.column("id").combine_chunks()
        d.new_labels = _ints(vt.column("label"))
        st = tables["signatures.arrow"]
        d.sig_vertex = _ints(st.column("vertex"))
        words = [st.column(i).combine_chunks().to_numpy(zero_copy_only=False) for i in range(1, st.num_columns)]
        d.sig_words = (np.stack(words, axis=1) if words else np.zeros((st.num_rows, 0))).astype(np.uint32)
    except (KeyError, pa.ArrowException, ValueError) as e:
        raise StoreError(f"damaged store {path}: delta of version {d.version} lacks a column "
                         f"({str(e).splitlines()[0]})") from None
    return d


def _ints(col):
    return np.asarray(col.combine_chunks().to_numpy(zero_copy_only=False), np.int32)


def verify_deltas(path, versions, base_version):
    """Check the size and checksum of every delta file after the base."""
    for e in versions:
        if int(e["version"]) <= base_version:
            continue
        for name, info in e.get("files", {}).items():
            rel = f"{e['delta']}/{name}"
            fp = os.path.join(path, rel)
            try:
                size, crc = os.path.getsize(fp), fmt.file_crc32(fp)
            except OSError as err:
                raise StoreError(f"damaged store {path}: cannot read {rel}: {err.strerror or err}") from None
            if size != info["bytes"] or crc != info["crc32"]:
                raise StoreError(f"damaged store {path}: {rel} fails its checksum or size")


@contextlib.contextmanager
def writer_lock(path):
    """The lock that lets one update or compaction of a store run at a time (a file beside it)."""
    parent, name = os.path.split(os.path.abspath(path))
    fd = os.open(os.path.join(parent, f".{name}.lock"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def update_store(path, insert=None, delete=None, vertices=None, *, src="src", dst="dst", label=None, id="id",
                 vertex_label=None, progress=None):
    """Apply one batch of updates to the store at ``path``; returns a summary dict (see :meth:`sgsi.Graph.update`)."""
    from .store import Store, _read_manifest
    path = os.fspath(path)
    if insert is None and delete is None and vertices is None:
        raise InputError("nothing to update: give insert, delete or vertices files")
    t0 = time.perf_counter()
    _read_manifest(path, check_files=False)          # no store there: a StoreError before any lock
    with writer_lock(path):
        store = Store(path)
        try:
            summary = _Update(store, src, dst, label, id, vertex_label, progress or (lambda m: None)).run(
                insert, delete, vertices)
        finally:
            store.close()
    summary["seconds"] = round(time.perf_counter() - t0, 6)
    return summary


class _Update:
    def __init__(self, store, src, dst, label, id_col, vertex_label, report):
        self.st, self.src, self.dst, self.label = store, src, dst, label
        self.id_col, self.vertex_label, self.report = id_col, vertex_label, report
        m = store.manifest
        self.n = store.n_vertices
        self.elabels = list(m["edge_labels"]["values"])
        self.has_labels = bool(m["edge_labels"]["present"])
        self.vlabels = list(m["vertex_labels"]["values"])

    # -- inputs -----------------------------------------------------------------------

    def _read(self, files, needed, optional, what, nullable=()):
        files = sources._expand(files, what)
        kinds, opt = sources._check_columns(files, needed, optional, what, nullable=nullable)
        cols = list(needed) + [c for c, has in opt.items() if has]
        tables = []
        for f in files:
            try:
                t = pq.read_table(f, columns=cols)
            except (pa.ArrowException, OSError) as e:
                raise InputError(f"{f} is not a readable Parquet file: {str(e).splitlines()[0]}") from None
            for c in cols:
                if kinds.get(c, "").startswith("integer"):
                    t = t.set_column(t.schema.get_field_index(c), c, t.column(c).cast(pa.int64()))
                if c in needed and t.column(c).null_count:
                    raise InputError(f"{f}: null values in column {c!r}")
            tables.append(t.select(cols))
        table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
        return files, kinds, {c: table.column(c).combine_chunks() for c in cols}

    def _edges(self, files, what):
        if files is None:
            return None
        name = self.label or "label"
        files, kinds, cols = self._read(files, [self.src, self.dst], {name: self.label is not None}, f"{what} edge")
        if name in cols and not self.has_labels:
            raise InputError(f"{files[0]}: column {name!r} gives edge labels, but store {self.st.path} has none")
        if name not in cols and self.has_labels:
            raise InputError(f"{files[0]}: no edge label column {name!r}, and store {self.st.path} has edge labels")
        return files[0], cols[self.src], cols[self.dst], cols.get(name)

    # -- dictionaries -----------------------------------------------------------------

    def _id_type(self, arr, where):
        t = self.st.vertex_id_type
        if pa.types.is_integer(t) != pa.types.is_integer(arr.type):
            raise InputError(f"{where}: vertex ids are {'integers' if pa.types.is_integer(arr.type) else 'strings'}, "
                             f"the store's are {'integers' if pa.types.is_integer(t) else 'strings'}")
        return t

    def _dense(self, arr, where):
        """Dense ids at this version of original ids (-1: not in the store)."""
        st = self.st
        t = self._id_type(arr, where)
        out = np.full(len(arr), -1, np.int64)
        if not len(arr):
            return out
        nb = st._base_n
        new = st._view.new_ids if st._view is not None else pa.array([], t)
        if pa.types.is_integer(t) and st._base_manifest.get("vertex_ids_sorted", True):
            # The base ids are sorted (dense ids are their ranks): a binary search in each batch of
            # the memory-mapped file, which reads a few pages.
            x = arr.cast(pa.int64()).to_numpy()
            reader, at = st._reader("vertex_ids.arrow"), 0
            for i in range(reader.num_record_batches):          # a loop over batches of the file
                with st._reading("vertex_ids.arrow"):
                    b = reader.get_batch(i).column(0).to_numpy()
                if b.size:
                    pos = np.minimum(np.searchsorted(b, x), b.size - 1)
                    hit = (b[pos] == x) & (out < 0)
                    out[hit] = pos[hit] + at
                at += b.size
            ids, first = new, nb
        else:
            base = st._vertex_id_table()
            base = base.combine_chunks() if isinstance(base, pa.ChunkedArray) else base
            ids, first = base, 0                                # every id, new ones included
            if not pa.types.is_integer(t):
                arr = arr.cast(t)
        miss = np.flatnonzero(out < 0)
        if len(ids) and miss.size:
            sub = arr.take(pa.array(miss))
            if pa.types.is_integer(t):
                sub, ids = sub.cast(pa.int64()), ids.cast(pa.int64())
            idx = pc.index_in(sub, value_set=ids).fill_null(-1).to_numpy(zero_copy_only=False)
            out[miss[idx >= 0]] = idx[idx >= 0] + first
        return out

    @staticmethod
    def _label_ids(arr, values, where):
        """Ids of label values among ``values`` (-1: unknown)."""
        if arr is None:
            return None
        if not values:
            return np.full(len(arr), -1, np.int64)
        vs = pa.array(values)
        if pa.types.is_integer(vs.type) != pa.types.is_integer(arr.type):
            raise InputError(f"{where}: labels are {'integers' if pa.types.is_integer(arr.type) else 'strings'}, "
                             f"the store's are not")
        if pa.types.is_integer(vs.type):
            arr, vs = arr.cast(pa.int64()), vs.cast(pa.int64())
        return pc.index_in(arr.cast(vs.type), value_set=vs).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)

    # -- the update -------------------------------------------------------------------

    def run(self, insert, delete, vertices):
        st = self.st
        ins = self._edges(insert, "insert")
        dele = self._edges(delete, "delete")
        vin = None
        if vertices is not None:
            vl = self.vertex_label or "label"
            vfiles, _k, cols = self._read(vertices, [self.id_col], {vl: self.vertex_label is not None}, "vertex",
                                          nullable=[vl])
            vin = (vfiles[0], cols[self.id_col], cols.get(vl))

        # Vertices: known ones by the dictionary, the others new (inserted edges' and the vertex files').
        unknown = []
        dense = {}
        for tag, part in (("ins", ins), ("del", dele)):
            if part is not None:
                dense[tag] = (self._dense(part[1], part[0]), self._dense(part[2], part[0]))
                if tag == "ins":
                    unknown += [part[1].filter(pa.array(dense[tag][0] < 0)), part[2].filter(pa.array(dense[tag][1] < 0))]
        if vin is not None:
            vd = self._dense(vin[1], vin[0])
            unknown.append(vin[1].filter(pa.array(vd < 0)))
        id_type = st.vertex_id_type
        new_ids = pa.array([], id_type)
        if unknown:
            u = pa.concat_arrays([a.cast(id_type) if pa.types.is_integer(id_type) else a.cast(pa.string())
                                  for a in unknown])
            u = pc.unique(u)
            new_ids = u.take(pc.sort_indices(u))
            try:
                new_ids = new_ids.cast(id_type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise InputError(f"new vertex ids do not fit the store's id type {id_type}: {e}") from None
        n_new = len(new_ids)

        def resolve(arr, d):
            miss = np.flatnonzero(d < 0)
            if miss.size and n_new:
                sub = arr.take(pa.array(miss))
                sub = sub.cast(new_ids.type)
                idx = pc.index_in(sub, value_set=new_ids).fill_null(-1).to_numpy(zero_copy_only=False)
                d[miss[idx >= 0]] = idx[idx >= 0] + self.n
            return d

        # Labels: inserted edges may bring new ones (ids after the last).
        n_labels = len(self.elabels) if self.has_labels else 1
        new_elabels = []
        edges = {}
        for tag, part in (("ins", ins), ("del", dele)):
            if part is None:
                edges[tag] = (np.zeros(0, np.int64),) * 3
                continue
            s, d = resolve(part[1], dense[tag][0]), resolve(part[2], dense[tag][1])
            if self.has_labels:
                lab = self._label_ids(part[3], self.elabels + new_elabels, part[0])
                if tag == "ins" and (lab < 0).any():
                    fresh = pc.unique(part[3].filter(pa.array(lab < 0)))
                    fresh = fresh.take(pc.sort_indices(fresh)).to_pylist()    # the new labels only
                    new_elabels += fresh
                    lab = self._label_ids(part[3], self.elabels + new_elabels, part[0])
            else:
                lab = np.zeros(len(s), np.int64)
            edges[tag] = (s, d, lab)
        rows = {t: len(edges[t][0]) for t in edges}

        # Vertex labels of the new vertices (from the vertex files); known vertices keep theirs.
        new_vlabels = []
        new_lab = np.full(n_new, -1, np.int32)
        if vin is not None and vin[2] is not None and not pa.types.is_null(vin[2].type):
            vd = resolve(vin[1], self._dense(vin[1], vin[0]))
            lab = self._label_ids(vin[2], self.vlabels, vin[0])
            has = vin[2].is_valid().to_numpy(zero_copy_only=False)
            if ((lab < 0) & has).any():
                fresh = pc.unique(vin[2].filter(pa.array((lab < 0) & has)))
                new_vlabels = fresh.take(pc.sort_indices(fresh)).to_pylist()
                lab = self._label_ids(vin[2], self.vlabels + new_vlabels, vin[0])
            lab = np.where(has, lab, -1)
            old = vd < self.n
            if old.any():
                now = st.vertex_label_ids(vd[old])
                bad = np.flatnonzero(now != lab[old])
                if bad.size:
                    raise InputError(f"{vin[0]}: vertex {vin[1].filter(pa.array(old))[int(bad[0])].as_py()!r} has "
                                     f"another label in store {st.path}; an update cannot change a vertex's label")
            new_lab[vd[~old] - self.n] = lab[~old]

        # Net edges against this version.
        def clean(s, d, l):
            s, d, l = (np.asarray(x, np.int64) for x in (s, d, l))
            ok = (s >= 0) & (d >= 0) & (l >= 0)
            s, d, l = s[ok].astype(np.int32), d[ok].astype(np.int32), l[ok].astype(np.int32)
            if st.undirected:
                s, d = canonical(s, d)
            return unique_edges(s, d, l)
        i_s, i_d, i_l = clean(*edges["ins"])
        d_s, d_d, d_l = clean(*edges["del"])
        d_present = self._present(d_s, d_d, d_l)
        i_there = self._present(i_s, i_d, i_l)                       # before the batch
        i_present = i_there & ~edge_isin(i_s, i_d, i_l, *(x[d_present] for x in (d_s, d_d, d_l)))
        del_net = tuple(x[d_present] for x in (d_s, d_d, d_l))
        ins_net = tuple(x[~i_present] for x in (i_s, i_d, i_l))
        back = edge_isin(*del_net, *ins_net)          # deleted, then inserted again: no change
        if back.any():
            keep = ~edge_isin(*ins_net, *del_net)
            del_net = tuple(x[~back] for x in del_net)
            ins_net = tuple(x[keep] for x in ins_net)

        n_total = self.n + n_new
        changed = np.unique(np.concatenate([ins_net[0], ins_net[1], del_net[0], del_net[1],
                                            np.arange(self.n, n_total, dtype=np.int32)])).astype(np.int32)
        labels_of = self._labels_fn(new_lab)
        words = self._signatures(changed, ins_net, del_net, labels_of, len(self.vlabels) + len(new_vlabels))

        # Counts of the new version.
        m = st.manifest
        freq = np.zeros(n_labels + len(new_elabels), np.int64)
        freq[:len(m["edge_labels"]["frequency"])] = m["edge_labels"]["frequency"]
        for (s, d, l), sign in ((ins_net, 1), (del_net, -1)):
            w = (2 - (s == d)) if st.undirected else np.ones(len(s), np.int64)
            freq += sign * np.bincount(l, weights=w, minlength=freq.size).astype(np.int64)
        vfreq = np.zeros(len(self.vlabels) + len(new_vlabels), np.int64)
        vfreq[:len(m["vertex_labels"]["frequency"])] = m["vertex_labels"]["frequency"]
        vfreq += np.bincount(new_lab[new_lab >= 0], minlength=vfreq.size)
        version = int(st.versions[-1]["version"]) + 1
        summary = {
            "version": version,
            "inserted": int(len(ins_net[0])),
            "deleted": int(len(del_net[0])),
            "already_present": int(i_there.sum()) + int(rows["ins"] - len(i_s)),
            "absent": int((~d_present).sum()) + int(rows["del"] - len(d_s)),
            "new_vertices": int(n_new),
            "new_edge_labels": len(new_elabels),
            "vertices": int(n_total),
            "edges": int(freq.sum()),
        }
        entry = {
            "version": version,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "delta": f"{DELTAS}/{version}",
            "vertices": int(n_total),
            "edges": int(freq.sum()),
            "edge_labels": {"present": self.has_labels,
                            "values": (self.elabels + new_elabels) if self.has_labels else [None],
                            "frequency": freq.tolist()},
            "vertex_labels": {"values": self.vlabels + new_vlabels, "frequency": vfreq.tolist(),
                              "unlabeled": int(m["vertex_labels"].get("unlabeled", 0)) + int((new_lab < 0).sum())},
            "changes": {k: summary[k] for k in ("inserted", "deleted", "already_present", "absent", "new_vertices")},
        }
        self._write(version, entry, ins_net, del_net, new_ids, new_lab, changed, words)
        return summary

    def _present(self, s, d, l):
        """Whether each edge is in the store at this version."""
        st = self.st
        out = np.zeros(len(s), bool)
        known = (s < self.n) & (d < self.n) & (l < len(self.elabels if self.has_labels else [0]))
        for lab in np.unique(l[known]).tolist():              # a loop over labels
            rows = np.flatnonzero(known & (l == lab))
            out[rows] = has_pairs(st, st.partition(lab, "out"), s[rows], d[rows])
        return out

    def _labels_fn(self, new_lab):
        st, n = self.st, self.n

        def labels_of(v):
            v = np.asarray(v, np.int64)
            out = np.empty(v.size, np.int32)
            old = v < n
            out[old] = st.vertex_label_ids(v[old])
            out[~old] = new_lab[v[~old] - n]
            return out
        return labels_of

    def _signatures(self, changed, ins, dele, labels_of, n_vlabels):
        """The signatures (rows of words) of ``changed`` after the update: per label and direction,
        their lists now (only theirs are read), less the deleted edges, plus the inserted ones."""
        st = self.st
        und = st.undirected
        known = changed[changed < self.n]
        n_old = len(self.elabels) if self.has_labels else 1
        n_lab = max(n_old, int(ins[2].max()) + 1 if len(ins[2]) else 0)
        groups = signatures.n_groups(st.signature_bits, st.label_bits)
        dirs = (("out", signatures.UNDIRECTED),) if und else (("out", signatures.OUT), ("in", signatures.IN))
        parts = []
        for lab in range(n_lab):                                      # a loop over labels
            im, dm = ins[2] == lab, dele[2] == lab
            for direction, code in dirs:
                if lab < n_old:
                    owner, nb = partition_lists(st, st.partition(lab, direction), known)
                    v = known[owner]
                else:
                    v = nb = np.zeros(0, np.int32)
                dv, dn = _orient(dele[0][dm], dele[1][dm], direction, und)
                if dv.size:
                    keep = ~np.isin(pair_keys(v, nb), pair_keys(dv, dn))
                    v, nb = v[keep], nb[keep]
                iv, inb = _orient(ins[0][im], ins[1][im], direction, und)
                v, nb = np.concatenate([v, iv]), np.concatenate([nb, inb])
                if v.size:
                    table = np.array([signatures.pair_group(lab, code, x - 1, groups)      # per vertex label
                                      for x in range(n_vlabels + 1)], np.int64)
                    parts.append((np.searchsorted(changed, v), nb, table))
        words = np.zeros((changed.size, st.n_signature_words), np.uint32)
        vl = labels_of(changed)
        table_bits = signatures.label_bit_table(n_vlabels, st.label_bits)
        if not parts:
            return signatures.words_from_counts(np.zeros((changed.size, groups), np.int64), vl, st.signature_bits,
                                                st.label_bits, table_bits) if changed.size else words
        nl = labels_of(np.concatenate([p[1] for p in parts])) + 1     # the neighbours' labels, at once
        cuts = np.cumsum([0] + [p[1].size for p in parts])
        key = np.concatenate([p[0] * groups + p[2][nl[a:b]] for p, a, b in zip(parts, cuts[:-1], cuts[1:])])
        block = max(1, min(changed.size, _SIGNATURE_BLOCK))
        if block < changed.size:
            key = np.sort(key)
        for a0 in range(0, changed.size, block):                      # blocks of vertices
            b0 = min(changed.size, a0 + block)
            lo, hi = (0, key.size) if block == changed.size else np.searchsorted(key, [a0 * groups, b0 * groups])
            counts = np.bincount(key[lo:hi] - a0 * groups, minlength=(b0 - a0) * groups)
            words[a0:b0] = signatures.words_from_counts(counts.reshape(b0 - a0, groups), vl[a0:b0],
                                                        st.signature_bits, st.label_bits, table_bits)
        return words

    # -- writing ----------------------------------------------------------------------

    def _write(self, version, entry, ins, dele, new_ids, new_lab, changed, words):
        st = self.st
        root = os.path.join(st.path, DELTAS)
        os.makedirs(root, exist_ok=True)
        atomic.sweep_stale(root, prefix=".tmp-")
        final = os.path.join(root, str(version))
        if os.path.exists(final):              # left by an update that crashed before its manifest
            shutil.rmtree(final)
        tmp = os.path.join(root, f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        os.mkdir(tmp)
        try:
            ecols = lambda e: {"src": pa.array(e[0], pa.int32()), "dst": pa.array(e[1], pa.int32()),   # noqa: E731
                               "label": pa.array(e[2], pa.int32())}
            tables = {
                "inserted.arrow": pa.table(ecols(ins)),
                "deleted.arrow": pa.table(ecols(dele)),
                "vertices.arrow": pa.table({"id": new_ids, "label": pa.array(new_lab, pa.int32())}),
                "signatures.arrow": pa.table({"vertex": pa.array(changed, pa.int32()),
                                              **{f"w{i}": pa.array(np.ascontiguousarray(words[:, i])) for i in range(words.shape[1])}}),
            }
            files = {}
            for name, t in tables.items():
                fp = os.path.join(tmp, name)
                with pa.OSFile(fp, "wb") as sink:
                    with pa.ipc.new_file(sink, t.schema) as w:
                        w.write_table(t)
                _fsync(fp)
                files[name] = {"bytes": os.path.getsize(fp), "crc32": fmt.file_crc32(fp)}
                _step("delta-file")
            _fsync(tmp)
            _step("delta-rename")
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _fsync(root)
        entry["files"] = files
        m = dict(st._base_manifest)
        versions = list(st.versions)
        if "edge_labels" not in versions[0]:
            versions[0] = {**versions[0], "created": m.get("created"), "edge_labels": m["edge_labels"],
                           "vertex_labels": m["vertex_labels"]}
        m["versions"] = versions + [entry]
        m.setdefault("base_version", st.base_version)
        _step("manifest-write")
        write_manifest_atomic(st.path, m)


def _orient(s, d, direction, undirected):
    """Edges (s, d) as (vertex, neighbour) of the lists of ``direction`` (both ends when undirected)."""
    if undirected:
        loop = s == d
        return np.concatenate([s, d[~loop]]), np.concatenate([d, s[~loop]])
    return (s, d) if direction == "out" else (d, s)


def write_manifest_atomic(path, manifest):
    """Replace ``path``'s manifest: a temporary file, synced, renamed over it, the directory synced."""
    tmp = os.path.join(path, f".{fmt.MANIFEST}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        _step("manifest-rename")
        os.replace(tmp, os.path.join(path, fmt.MANIFEST))
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    _fsync(path)


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
