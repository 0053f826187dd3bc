"""Compaction: a store's newest version written as new base files, swapped in atomically.

The final edge set (dense ids, read segment by segment from the labelled
``out`` partitions) and a vertex file listing every dense id with its label
go through the ordinary build (:mod:`.build`): integer ids that fill a range
map by subtraction, so dense ids stay what they were. The original ids are
then written back into ``vertices.parquet`` and ``vertex_ids.arrow``. The
result replaces the store as ``build --force`` does (:mod:`.atomic`): open
readers keep the files they mapped. The manifest keeps the list of versions
and records ``base_version``; versions before it can no longer be opened,
nor be the ``since`` of :meth:`~sgsi.storage.store.Store.changed_pairs`.
Label ids are those a build gives (by label value), so a label added by an
update may get another id, and one left without edges is dropped.
"""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import atomic, sources
from . import format as fmt
from .build import build_store
from .delta import write_manifest_atomic, writer_lock
from .lists import segment_pairs
from .store import Store


def compact_store(path, progress=None):
    """Merge the deltas of the store at ``path`` into new base files; returns a summary dict."""
    path = os.fspath(path)
    t0 = time.perf_counter()
    Store(path).close()                              # no store there: a StoreError before any lock
    with writer_lock(path):
        parent = os.path.dirname(os.path.abspath(path))
        atomic.sweep_stale(parent, os.path.basename(os.path.abspath(path)))
        st = Store(path)
        try:
            if st.version == st.base_version:
                return {"version": st.version, "compacted": False, "seconds": round(time.perf_counter() - t0, 6)}
            out = atomic.temp_name(path)
            try:
                with atomic.scratch_dir(os.path.dirname(os.path.abspath(path))) as tmp:
                    efile, vfile, has_vl = _write_inputs(st, tmp)
                    p = st.manifest["parameters"]
                    build_store(out, edges=[efile], vertices=[vfile], src="src", dst="dst",
                                label="label" if st.has_edge_labels else None, id="id",
                                vertex_label="label" if has_vl else None, undirected=st.undirected, lean=st.lean,
                                memory_budget=int(p["memory_budget"]), theta=st.theta,
                                signature_bits=st.signature_bits, label_bits=st.label_bits, progress=progress)
                _restore_ids(st, out)
                atomic._move_into_place(out, path, True)
            except BaseException:
                shutil.rmtree(out, ignore_errors=True)
                raise
            summary = {"version": st.version, "compacted": True, "vertices": st.n_vertices, "edges": st.n_edges}
        finally:
            st.close()
    summary["seconds"] = round(time.perf_counter() - t0, 6)
    return summary


def _write_inputs(st, tmp):
    """The final edges (dense ids, label values) and every vertex with its label, as Parquet."""
    evalues = pa.array(st.manifest["edge_labels"]["values"]) if st.has_edge_labels else None
    efile = os.path.join(tmp, "edges.parquet")
    schema = pa.schema([("src", pa.int32()), ("dst", pa.int32())]
                       + ([("label", evalues.type)] if evalues is not None else []))
    with pq.ParquetWriter(efile, schema) as w:
        for lab in range(len(st.manifest["edge_labels"]["values"])):        # a loop over labels
            p = st.partition(lab, "out")
            for seg in p.seg_ids.tolist():                                   # and segments
                s, d = segment_pairs(*st.segment(seg))
                if st.undirected:
                    keep = s <= d
                    s, d = s[keep], d[keep]
                if not len(s):
                    continue
                cols = [pa.array(s), pa.array(d)]
                if evalues is not None:
                    cols.append(evalues.take(pa.array(np.full(len(s), lab, np.int32))))
                w.write_batch(pa.record_batch(cols, schema=schema))
    vvalues = st.manifest["vertex_labels"]["values"]
    n = st.n_vertices
    labels = np.concatenate([st.vertex_labels(k) for _a, _n, k in st.vertex_segments()] + [np.zeros(0, np.int32)])
    cols = {"id": pa.array(np.arange(n, dtype=np.int32))}
    if vvalues:
        va = pa.array(vvalues)
        cols["label"] = va.take(pa.array(np.maximum(labels, 0), mask=labels < 0))
    vfile = os.path.join(tmp, "vertices.parquet")
    pq.write_table(pa.table(cols), vfile)
    return efile, vfile, bool(vvalues)


def _restore_ids(st, out):
    """Put the original vertex ids back into the built store at ``out`` and record the versions."""
    m = _read_json(os.path.join(out, fmt.MANIFEST))
    if m["vertices"] != st.n_vertices:
        raise RuntimeError(f"compaction of {st.path} gave {m['vertices']} vertices, expected {st.n_vertices}")
    ids = st.vertex_ids(np.arange(st.n_vertices, dtype=np.int64))
    labels = pq.read_table(os.path.join(out, "vertices.parquet")).column("label") \
        if "label" in pq.read_schema(os.path.join(out, "vertices.parquet")).names else pa.nulls(len(ids))
    pq.write_table(pa.table({"id": ids, "label": labels}), os.path.join(out, "vertices.parquet"))
    out_ids = fmt.BatchFile(os.path.join(out, "vertex_ids.arrow"), pa.schema([("id", ids.type)]))
    for a in range(0, max(len(ids), 1), sources.BATCH_ROWS) if len(ids) else []:
        out_ids.write([ids.slice(a, sources.BATCH_ROWS)])
    out_ids.close()
    for name in ("vertices.parquet", "vertex_ids.arrow"):
        fp = os.path.join(out, name)
        m["files"][name] = {"bytes": os.path.getsize(fp), "crc32": fmt.file_crc32(fp)}
    m["sources"] = [st.path]
    if pa.types.is_integer(ids.type) and len(ids) > 1:
        x = ids.to_numpy()
        m["vertex_ids_sorted"] = bool((x[1:] > x[:-1]).all())
    versions = [dict(e, compacted=True) for e in st.versions]
    versions[-1] = {"version": st.version, "created": m["created"], "vertices": m["vertices"],
                    "edges": m["edges"], "edge_labels": m["edge_labels"], "vertex_labels": m["vertex_labels"],
                    "compacted_from": st.base_version}
    m["versions"] = versions
    m["base_version"] = st.version
    write_manifest_atomic(out, m)


def _read_json(fp):
    import json
    with open(fp) as f:
        return json.load(f)
