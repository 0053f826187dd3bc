"""Applying one batch of updates: the net change against the newest version, written as a delta.

Deletions apply before insertions. The net edges come from looking the
batch's edges up in the store (the base lists of their sources, and the net
change since the base); the new signatures from the lists of the vertices
whose neighbourhood changed, in each label's ``out`` and ``in`` partitions,
read the same way (:mod:`.touched`). The delta and the manifest are written
by :mod:`.delta`.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ..errors import InputError
from . import delta, touched
from . import format as fmt
from .lists import canonical, edge_isin, sorted_unique, unique_edges
from .update_inputs import Inputs


def update_store(path, insert=None, delete=None, vertices=None, *, src="src", dst="dst", label=None, id="id",
                 vertex_label=None, store=None, keep=False):
    """Apply one batch of updates to the store at ``path``; returns a summary dict (see :meth:`sgsi.Graph.update`).
    ``store``: an opening of it, brought to the newest version (:meth:`Store.newest`), not opened again;
    ``keep``: returns (summary, ``store`` at the new version, from the manifest written: no read)."""
    from .manifest import read_manifest
    from .store import Store
    path = os.fspath(path)
    if insert is None and delete is None and vertices is None:
        raise InputError("nothing to update: give insert, delete or vertices files")
    t0 = time.perf_counter()
    if store is None or not os.path.isfile(os.path.join(path, fmt.MANIFEST)):
        read_manifest(path, check_files=False)      # no store there: a StoreError before any lock
    with delta.writer_lock(path):
        given = store
        store = Store(path) if given is None else given.newest()
        newer = None
        try:
            summary, manifest = _Update(store, Inputs(store, src, dst, label, id, vertex_label)).run(
                insert, delete, vertices)
            newer = store.newest(manifest) if keep else None
        finally:
            if store is not given and (newer is None or newer._older is not store):    # else it serves newer
                store.close()
    summary["seconds"] = round(time.perf_counter() - t0, 6)
    return (summary, newer) if keep else summary


class _Update:
    def __init__(self, store, inputs):
        self.st, self.inp = store, inputs
        self.n = store.n_vertices
        self.n_labels = len(inputs.elabels) if inputs.has_labels else 1
        v = store._view                                  # the net change since the base
        self.net = (v.added, v.removed) if v is not None else ((np.zeros(0, np.int32),) * 3,) * 2

    def run(self, insert, delete, vertices):
        st, inp = self.st, self.inp
        edges = inp.encode(insert, delete, vertices)
        (i_s, i_d, i_l), (d_s, d_d, d_l) = self._clean(*edges["ins"]), self._clean(*edges["del"])
        there = self._present(*(np.concatenate(x) for x in ((d_s, i_s), (d_d, i_d), (d_l, i_l))))
        d_present, i_there = there[:len(d_s)], there[len(d_s):]      # before the batch
        del_net = tuple(x[d_present] for x in (d_s, d_d, d_l))
        ins_net = tuple(x[~(i_there & ~edge_isin(i_s, i_d, i_l, *del_net))] for x in (i_s, i_d, i_l))
        back = edge_isin(*del_net, *ins_net)          # deleted, then inserted again: no change
        if back.any():
            keep = ~edge_isin(*ins_net, *del_net)
            del_net, ins_net = tuple(x[~back] for x in del_net), tuple(x[keep] for x in ins_net)
        n_new = len(inp.new_ids)
        changed = sorted_unique(np.concatenate([ins_net[0], ins_net[1], del_net[0], del_net[1],
                                                np.arange(self.n, self.n + n_new, dtype=np.int32)]),
                                kind=None).astype(np.int32)
        words = touched.signatures_of(st, changed, (ins_net, del_net), self._labels_of,
                                      len(inp.vlabels) + len(inp.new_vlabels))
        version = int(st.versions[-1]["version"]) + 1
        entry = self._entry(version, ins_net, del_net)
        if entry["vertex_labels"] == st.manifest["vertex_labels"]:
            del entry["vertex_labels"]              # unchanged: the manifest grows by the batch, not the labels
        summary = {"version": version, **entry["changes"], "new_edge_labels": len(inp.new_elabels),
                   "vertices": entry["vertices"], "edges": entry["edges"]}
        entry["changes"].update(already_present=int(i_there.sum()) + len(edges["ins"][0]) - len(i_s),
                                absent=int((~d_present).sum()) + len(edges["del"][0]) - len(d_s))
        summary.update(entry["changes"])
        t = time.perf_counter()
        manifest = delta.write_version(st, version, entry, delta.delta_tables(
            ins_net, del_net, inp.new_ids, inp.new_labels, changed, words))
        summary["write_seconds"] = round(time.perf_counter() - t, 6)       # of ``seconds``: the delta's writing
        return summary, manifest

    def _clean(self, s, d, l):
        """Known, distinct edges (in an undirected store as (min, max)), int32."""
        s, d, l = (np.asarray(x, np.int64) for x in (s, d, l))
        ok = (s >= 0) & (d >= 0) & (l >= 0)
        s, d, l = s[ok].astype(np.int32), d[ok].astype(np.int32), l[ok].astype(np.int32)
        if self.st.undirected:
            s, d = canonical(s, d)
        return unique_edges(s, d, l)

    def _entry(self, version, ins, dele):
        """The manifest's entry of the new version: its counts and label dictionaries."""
        st, inp = self.st, self.inp
        m = st.manifest
        freq = np.zeros(self.n_labels + len(inp.new_elabels), np.int64)
        freq[:len(m["edge_labels"]["frequency"])] = m["edge_labels"]["frequency"]
        for (s, d, l), sign in ((ins, 1), (dele, -1)):
            w = (2 - (s == d)) if st.undirected else np.ones(len(s), np.int64)
            freq += sign * np.bincount(l, weights=w, minlength=freq.size).astype(np.int64)
        vfreq = np.zeros(len(inp.vlabels) + len(inp.new_vlabels), np.int64)
        vfreq[:len(m["vertex_labels"]["frequency"])] = m["vertex_labels"]["frequency"]
        new_lab = inp.new_labels
        vfreq += np.bincount(new_lab[new_lab >= 0], minlength=vfreq.size)
        return {
            "version": version,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "delta": f"{delta.DELTAS}/{version}",
            "vertices": self.n + len(new_lab),
            "edges": int(freq.sum()),
            "edge_labels": {"present": inp.has_labels,
                            "values": (inp.elabels + inp.new_elabels) if inp.has_labels else [None],
                            "frequency": freq.tolist()},
            "vertex_labels": {"values": inp.vlabels + inp.new_vlabels, "frequency": vfreq.tolist(),
                              "unlabeled": int(m["vertex_labels"].get("unlabeled", 0)) + int((new_lab < 0).sum())},
            "changes": {"inserted": len(ins[0]), "deleted": len(dele[0]), "new_vertices": len(new_lab)},
        }

    def _present(self, s, d, l):
        """Whether each edge is in the store at this version."""
        out = np.zeros(len(s), bool)
        known = (s < self.n) & (d < self.n) & (l < self.n_labels)
        out[known] = touched.present(self.st, self.net, s[known], d[known], l[known])
        return out

    def _labels_of(self, v):
        """Label ids of dense ids after the update (new vertices' from the inputs)."""
        v = np.asarray(v, np.int64)
        out = np.empty(v.size, np.int32)
        old = v < self.n
        out[old] = self.st.vertex_label_ids(v[old])
        out[~old] = self.inp.new_labels[v[~old] - self.n]
        return out
