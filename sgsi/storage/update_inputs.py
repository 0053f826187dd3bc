"""The inputs of an update: Parquet edge and vertex files, in the build's columns, as dense ids.

Known vertices and labels map to their ids at the store's version; the
others are new and take the ids after the last, in order of value. Only the
vertex dictionary is searched (a binary search in the memory-mapped file
where the ids are sorted integers), never an edge list.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InputError
from . import sources


class Inputs:
    """Encodes update files against ``store`` (at its newest version)."""

    def __init__(self, store, src, dst, label, id_col, vertex_label):
        self.st, self.src, self.dst, self.label = store, src, dst, label
        self.id_col, self.vertex_label = id_col, vertex_label
        m = store.manifest
        self.n = store.n_vertices
        self.elabels = list(m["edge_labels"]["values"])
        self.has_labels = bool(m["edge_labels"]["present"])
        self.vlabels = list(m["vertex_labels"]["values"])
        self.new_elabels, self.new_vlabels = [], []
        self.new_ids = pa.array([], store.vertex_id_type)
        self.new_labels = np.zeros(0, np.int32)

    def encode(self, insert, delete, vertices):
        """``{"ins": (s, d, l), "del": (s, d, l)}`` int64 arrays (-1: unknown, in deletions only), and
        the rows of each; sets :attr:`new_ids`, :attr:`new_labels`, :attr:`new_elabels`, :attr:`new_vlabels`."""
        files = {"ins": self._edges(insert, "insert"), "del": self._edges(delete, "delete")}
        vin = self._vertices(vertices)
        cols = [(p[i], p[0]) for p in files.values() if p is not None for i in (1, 2)]
        found = iter(self._dense_all(cols + ([(vin[1], vin[0])] if vin is not None else [])))
        dense = {t: (next(found), next(found)) for t, p in files.items() if p is not None}
        unknown = []
        if files["ins"] is not None:
            p, (s, d) = files["ins"], dense["ins"]
            unknown += [p[1].filter(pa.array(s < 0)), p[2].filter(pa.array(d < 0))]
        if vin is not None:
            vd = next(found)
            unknown.append(vin[1].filter(pa.array(vd < 0)))
        self._new_vertices(unknown)
        edges = {}
        for tag, p in files.items():
            if p is None:
                edges[tag] = (np.zeros(0, np.int64),) * 3
                continue
            s, d = self._resolve(p[1], dense[tag][0]), self._resolve(p[2], dense[tag][1])
            edges[tag] = (s, d, self._edge_labels(p, tag == "ins") if self.has_labels else np.zeros(len(s), np.int64))
        if vin is not None:
            self._vertex_labels(vin, vd)
        return edges

    def _new_vertices(self, unknown):
        t = self.st.vertex_id_type
        if not unknown:
            self.new_labels = np.zeros(0, np.int32)
            return
        try:
            u = pc.unique(pa.concat_arrays([a.cast(t) for a in unknown]))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise InputError(f"new vertex ids do not fit the store's id type {t}: {str(e).splitlines()[0]}") from None
        self.new_ids = u.take(pc.sort_indices(u))
        self.new_labels = np.full(len(self.new_ids), -1, np.int32)

    def _resolve(self, arr, d):
        """Dense ids ``d`` with the new vertices' filled in."""
        miss = np.flatnonzero(d < 0)
        if miss.size and len(self.new_ids):
            sub = arr.take(pa.array(miss)).cast(self.new_ids.type)
            idx = pc.index_in(sub, value_set=self.new_ids).fill_null(-1).to_numpy(zero_copy_only=False)
            d[miss[idx >= 0]] = idx[idx >= 0] + self.n
        return d

    def _edge_labels(self, part, may_add):
        """Label ids of an edge file's rows; inserted edges may bring new labels (ids after the last)."""
        lab = self._label_ids(part[3], self.elabels + self.new_elabels, part[0])
        if may_add and (lab < 0).any():
            fresh = pc.unique(part[3].filter(pa.array(lab < 0)))
            self.new_elabels += fresh.take(pc.sort_indices(fresh)).to_pylist()     # the new labels only
            lab = self._label_ids(part[3], self.elabels + self.new_elabels, part[0])
        return lab

    def _vertex_labels(self, vin, dense):
        """Labels of the new vertices from the vertex files (``dense``: their :meth:`_dense` ids);
        known vertices must keep theirs."""
        where, ids, labels = vin
        if labels is None or pa.types.is_null(labels.type):
            return
        vd = self._resolve(ids, dense.copy())
        lab = self._label_ids(labels, self.vlabels, where)
        has = labels.is_valid().to_numpy(zero_copy_only=False)
        if ((lab < 0) & has).any():
            fresh = pc.unique(labels.filter(pa.array((lab < 0) & has)))
            self.new_vlabels = fresh.take(pc.sort_indices(fresh)).to_pylist()
            lab = self._label_ids(labels, self.vlabels + self.new_vlabels, where)
        lab = np.where(has, lab, -1)
        old = vd < self.n
        if old.any():
            bad = np.flatnonzero(self.st.vertex_label_ids(vd[old]) != lab[old])
            if bad.size:
                raise InputError(f"{where}: vertex {ids.filter(pa.array(old))[int(bad[0])].as_py()!r} has another "
                                 f"label in store {self.st.path}; an update cannot change a vertex's label")
        self.new_labels[vd[~old] - self.n] = lab[~old]

    # -- files ------------------------------------------------------------------------

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

    def _vertices(self, files):
        if files is None:
            return None
        vl = self.vertex_label or "label"
        vfiles, _k, cols = self._read(files, [self.id_col], {vl: self.vertex_label is not None}, "vertex",
                                      nullable=[vl])
        return vfiles[0], cols[self.id_col], cols.get(vl)

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

    def _dense_all(self, parts):
        """:meth:`_dense` of each (array, where) of ``parts``, looked up at once."""
        if not parts:
            return []
        t = self.st.vertex_id_type
        for arr, where in parts:
            self._id_type(arr, where)
        one = pa.concat_arrays([a.cast(pa.int64() if pa.types.is_integer(t) else t) for a, _ in parts])
        return np.split(self._dense(one, parts[0][1]), np.cumsum([len(a) for a, _ in parts])[:-1])

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
            # The base ids are sorted (dense ids are their ranks): the sorted ids searched in each
            # batch of the memory-mapped file, those in its range only, which reads a few pages.
            x = arr.cast(pa.int64()).to_numpy()
            o = np.argsort(x)
            xs = x[o]
            reader, at = st._reader("vertex_ids.arrow"), 0
            for i in range(reader.num_record_batches):          # a loop over batches of the file
                with st._reading("vertex_ids.arrow"):
                    b = reader.get_batch(i).column(0).to_numpy()
                if b.size:
                    lo, hi = np.searchsorted(xs, b[0]), np.searchsorted(xs, b[-1], "right")
                    pos = np.searchsorted(b, xs[lo:hi])               # all in b's range
                    hit = b[pos] == xs[lo:hi]
                    out[o[lo:hi][hit]] = pos[hit] + at
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
        idx = pc.index_in(arr.cast(vs.type), value_set=vs).fill_null(-1)
        return idx.to_numpy(zero_copy_only=False).astype(np.int64)
