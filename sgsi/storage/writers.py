"""Writing a store's vertex files and manifest, and checksumming its files.

``vertices.parquet`` is the vertex dictionary (row i: the original id and
label of dense id i) and ``vertex_ids.arrow`` the original ids again, to
map them back memory-mapped. The manifest records the counts, the label
dictionaries, the build parameters, the partitions and every file's size
and crc32 (computed in the background as the files are finished).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from . import format as fmt
from .sources import sql_str, stream


def write_vertices(con, directory):
    """Write the vertex files from ``vdict`` and ``vraw``; returns {name: None} of each."""
    con.execute(f"COPY (SELECT d.id, v.label FROM vdict d LEFT JOIN (SELECT DISTINCT id, label FROM vraw) v "
                f"ON d.id = v.id ORDER BY d.vid) TO {sql_str(os.path.join(directory, 'vertices.parquet'))} "
                f"(FORMAT parquet)")
    reader = stream(con, "SELECT id FROM vdict ORDER BY vid")
    out = None
    for batch in reader:
        if out is None:
            out = fmt.BatchFile(os.path.join(directory, "vertex_ids.arrow"),
                                pa.schema([("id", batch.schema.field(0).type)]))
        out.write([batch.column(0)])
    if out is None:
        out = fmt.BatchFile(os.path.join(directory, "vertex_ids.arrow"), pa.schema([("id", pa.int64())]))
    out.close()
    return {"vertices.parquet": None, "vertex_ids.arrow": None}


def manifest(*, n_vertices, n_input, undirected, has_edge_labels, edge_labels, vertex_labels, parameters,
             partitions):
    """A store's manifest, less its ``files`` and ``sources``.

    Parameters
    ----------
    edge_labels : list of (value, id)
        The edge labels, in id order.
    vertex_labels : list of (value, id, vertices)
        The vertex labels, in id order, with their number of vertices.
    parameters : dict
        The build's parameters (budget, sizes of the plan).
    partitions : dict
        The partitions and their aliases, by key.
    """
    freq = [partitions[fmt.partition_key(eid, "out")]["edges"] for _, eid in edge_labels]
    return {
        "format": "sgsi-store",
        "version": fmt.FORMAT_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "vertices": n_vertices,
        "edges": sum(freq),
        "input_rows": n_input,
        "undirected": undirected,
        "edge_labels": {
            "present": has_edge_labels,
            "values": [_json_label(x[0]) for x in edge_labels] if has_edge_labels else [None],
            "frequency": freq,
        },
        "vertex_labels": {
            "values": [_json_label(x[0]) for x in vertex_labels],
            "frequency": [x[2] for x in vertex_labels],
            "unlabeled": n_vertices - sum(x[2] for x in vertex_labels),
        },
        "parameters": parameters,
        "partitions": partitions,
        "degree": _degree_stats(partitions),
    }


def _degree_stats(partitions):
    stats = {}
    for key, p in partitions.items():
        if "alias" in p:
            continue
        stats[key] = {"max": p["max_degree"], "mean": (p["edges"] / p["vertices"]) if p["vertices"] else 0.0}
    return stats


def _json_label(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    return x


class Checksums:
    """crc32 of finished files, computed in a background thread while the build goes on."""

    def __init__(self, directory):
        self.dir = directory
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sgsi-crc")
        self.futures = {}

    def add(self, *names):
        for name in names:
            self.futures[name] = self.pool.submit(fmt.file_crc32, os.path.join(self.dir, name))

    def result(self, names):
        for name in names:
            if name not in self.futures:
                self.add(name)
        return {name: self.futures[name].result() for name in names}

    def entries(self, names):
        """The manifest's ``files``: size and crc32 of each of ``names``, by name."""
        sums = self.result(sorted(names))
        return {name: {"bytes": os.path.getsize(os.path.join(self.dir, name)), "crc32": sums[name]}
                for name in sorted(names)}

    def close(self):
        self.pool.shutdown(wait=True, cancel_futures=True)
