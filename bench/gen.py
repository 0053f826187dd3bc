"""Synthetic labeled graphs and queries for the sgsi benchmarks.

Two generators:

- :func:`rmat`: a vectorized R-MAT edge generator (Chakrabarti et al. 2004;
  ``a=0.57, b=0.19, c=0.19, d=0.05`` by default) with bounded Zipf
  (power-law) vertex and edge labels. Edges are made and written in chunks,
  so 100M+ edges stream to Parquet in bounded memory. It runs on NumPy, or
  on CuPy when CuPy imports and a GPU is present (``device="auto"``); one
  seed gives the same graph on one device, not across devices.
- :func:`random_walk_queries`: the query generator of the SGSI paper: a
  random walk from a random data vertex until ``k`` distinct vertices are
  visited; the visited vertices (with their labels) and every traversed edge
  (with its label and direction) form the query, written in sgsi's pattern
  language, e.g. ``(v0:L3)-[:E5]->(v1:L7), (v1)<-[:E2]-(v2)``.

Shapes (label counts) named after the data sets of the paper:

========== ============ ============== ==========================================
shape      edge labels  vertex labels  note
========== ============ ============== ==========================================
small      4            8              non-trivial counts for small patterns
watdiv     86           1,000          WatDiv's predicate / class counts
friendster 1,000        1,000          paper: 1,000 random edge labels; the
                                       vertex label count is our choice
========== ============ ============== ==========================================

Command line::

    python bench/gen.py rmat --edges 1000000 --shape small --out DIR [--scale S] [--seed 1]
    python bench/gen.py queries DIR --k 5 --n 10 [--seed 1]

``DIR`` receives ``edges.parquet`` (``src``, ``dst``, ``label``),
``vertices.parquet`` (``id``, ``label``) and ``meta.json``. Vertex ids are
the integers ``0 .. 2**scale - 1`` (scrambled by a bijection so that id and
degree are unrelated); every id gets a row in ``vertices.parquet``, so
R-MAT's isolated vertices are part of the graph. Labels are strings
``L<rank>`` (vertices) and ``E<rank>`` (edges), rank 0 the most frequent,
or integers with ``--label-type int``. Duplicate edges and self-loops are
kept as R-MAT makes them (sgsi treats parallel edges with one label as one
edge).

Module use::

    import gen
    meta = gen.rmat("out/", edges=10**6, shape="small", seed=1)
    for q in gen.random_walk_queries("out/", k=5, n=3, seed=7):
        print(q.pattern)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: Label counts of the preset shapes.
SHAPES = {
    "small": {"edge_labels": 4, "vertex_labels": 8},
    "watdiv": {"edge_labels": 86, "vertex_labels": 1000},
    "friendster": {"edge_labels": 1000, "vertex_labels": 1000},
}

DEFAULT_CHUNK = 1 << 22   # edges (or vertices) generated per chunk


# ---------------------------------------------------------------------------
# Array module selection
# ---------------------------------------------------------------------------


def _gpu_xp():
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            return cupy
    except Exception:  # noqa: BLE001 - no usable CuPy / GPU
        pass
    return None


def array_module(device="auto"):
    """NumPy, or CuPy for ``device="gpu"`` (or ``"auto"`` when a GPU is present)."""
    if device not in ("auto", "cpu", "gpu"):
        raise ValueError(f"device must be auto, cpu or gpu, not {device!r}")
    if device == "cpu":
        return np
    xp = _gpu_xp()
    if xp is None:
        if device == "gpu":
            raise RuntimeError("device='gpu' asked for, but CuPy with a CUDA GPU is not available")
        return np
    return xp


def _to_host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


# ---------------------------------------------------------------------------
# Building blocks (vectorized, NumPy or CuPy)
# ---------------------------------------------------------------------------


def zipf_cdf(n_labels: int, exponent: float = 1.0) -> np.ndarray:
    """Cumulative distribution of a bounded Zipf law over ranks ``0..n-1``: P(k) ~ 1/(k+1)**s."""
    if n_labels < 1:
        raise ValueError("need at least one label")
    w = 1.0 / np.arange(1, n_labels + 1, dtype=np.float64) ** exponent
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    cdf[-1] = 1.0
    return cdf


def zipf_sample(xp, rng, cdf, size):
    """``size`` label ranks drawn from the Zipf ``cdf`` by inverse transform."""
    u = rng.random(size)
    r = xp.searchsorted(xp.asarray(cdf), u, side="right")
    return xp.minimum(r, len(cdf) - 1).astype(xp.int32)


def rmat_edges(xp, rng, scale, size, a=0.57, b=0.19, c=0.19):
    """``size`` R-MAT edges over ``2**scale`` vertices: one quadrant choice per bit, vectorized."""
    src = xp.zeros(size, dtype=xp.int64)
    dst = xp.zeros(size, dtype=xp.int64)
    ab, abc = a + b, a + b + c
    for bit in range(scale):   # a loop over the id bits, not over edges
        r = rng.random(size)
        sbit = r >= ab                                   # quadrants c, d: lower half for the source
        dbit = ((r >= a) & (r < ab)) | (r >= abc)        # quadrants b, d: right half for the target
        src |= sbit.astype(xp.int64) << bit
        dst |= dbit.astype(xp.int64) << bit
    return src, dst


def _mix_constants(seed, scale):
    r = np.random.default_rng([int(seed), 0x5C4A])
    odd = [int(x) | 1 for x in r.integers(1, 2**62, size=2)]
    return odd, max(1, (scale + 1) // 2)


def scramble(xp, ids, scale, consts):
    """A bijection of ``0..2**scale-1`` (multiply by odd / xor-shift rounds) hiding R-MAT's id order."""
    (m1, m2), sh = consts
    mask = np.uint64((1 << scale) - 1)
    x = ids.astype(xp.uint64)
    for m in (m1, m2):
        x = (x * np.uint64(m)) & mask
        x ^= x >> np.uint64(sh)
    return x.astype(xp.int64)


def _label_array(ranks_host, prefix, label_type):
    """Label ranks -> an Arrow column: strings ``prefix<rank>`` (via a dictionary take) or int32."""
    ranks_host = np.asarray(ranks_host, dtype=np.int32)
    if label_type == "int":
        return pa.array(ranks_host, pa.int32())
    n = int(ranks_host.max()) + 1 if ranks_host.size else 1
    dictionary = pa.array([f"{prefix}{i}" for i in range(n)], pa.string())   # n labels, not n rows
    return pc.take(dictionary, pa.array(ranks_host))


# ---------------------------------------------------------------------------
# R-MAT graph to Parquet
# ---------------------------------------------------------------------------


def default_scale(n_edges: int, edge_factor: int = 16) -> int:
    """log2 of the vertex count for ``n_edges`` at the Graph500 edge factor (16)."""
    return max(1, math.ceil(math.log2(max(2, n_edges / edge_factor))))


def cached_rmat(data_dir, edges: int, shape: str, seed: int = 7, say=print) -> str:
    """The folder ``<data_dir>/rmat-<shape>-<edges>`` holding an R-MAT graph's Parquet
    files (edges.parquet, vertices.parquet), generated on first use."""
    import time
    gdir = os.path.join(data_dir, f"rmat-{shape}-{int(edges)}")
    if not os.path.exists(os.path.join(gdir, "edges.parquet")):
        t = time.perf_counter()
        rmat(gdir, int(edges), shape=shape, seed=seed)
        say(f"generated {int(edges):,} edges in {time.perf_counter() - t:.1f}s")
    return gdir


def rmat(out, edges, *, scale=None, shape="small", edge_labels=None, vertex_labels=None,
         edge_label_exponent=1.0, vertex_label_exponent=1.0, a=0.57, b=0.19, c=0.19, d=0.05,
         seed=1, label_type="str", chunk=DEFAULT_CHUNK, device="auto", progress=None,
         row_group=1 << 20):
    """Write an R-MAT graph with Zipf vertex and edge labels as Parquet.

    Parameters
    ----------
    out : str
        Output directory (created); receives ``edges.parquet``,
        ``vertices.parquet`` and ``meta.json``.
    edges : int
        Number of generated edge rows (before any deduplication).
    scale : int, optional
        ``2**scale`` vertices; default :func:`default_scale` (edge factor 16).
    shape : str
        ``small``, ``watdiv`` or ``friendster`` (see :data:`SHAPES`);
        ``edge_labels`` / ``vertex_labels`` override its label counts
        (``0`` vertex labels: no label column in the vertex file).
    edge_label_exponent, vertex_label_exponent : float
        Zipf exponents of the label distributions.
    a, b, c, d : float
        R-MAT quadrant probabilities (must sum to 1).
    seed : int
        Seed; one seed gives one graph (per device and chunk size).
    label_type : ``"str"`` or ``"int"``
    chunk : int
        Edges (and vertices) generated and written per step.
    device : ``"auto"``, ``"cpu"`` or ``"gpu"``
    progress : callable, optional
        Called with one line of text per chunk.

    Returns
    -------
    dict
        The metadata also written to ``meta.json``.
    """
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose from {', '.join(SHAPES)}")
    if abs(a + b + c + d - 1.0) > 1e-9 or min(a, b, c, d) < 0:
        raise ValueError(f"R-MAT probabilities must be >= 0 and sum to 1 (got {a}+{b}+{c}+{d})")
    if label_type not in ("str", "int"):
        raise ValueError("label_type must be 'str' or 'int'")
    edges = int(edges)
    scale = default_scale(edges) if scale is None else int(scale)
    if not 1 <= scale <= 40:
        raise ValueError("scale must be in 1..40")
    n_el = SHAPES[shape]["edge_labels"] if edge_labels is None else int(edge_labels)
    n_vl = SHAPES[shape]["vertex_labels"] if vertex_labels is None else int(vertex_labels)
    xp = array_module(device)
    report = progress or (lambda msg: None)
    os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    consts = _mix_constants(seed, scale)
    ecdf = zipf_cdf(max(n_el, 1), edge_label_exponent)
    vcdf = zipf_cdf(max(n_vl, 1), vertex_label_exponent)

    ltype = pa.string() if label_type == "str" else pa.int32()
    eschema = pa.schema([("src", pa.int64()), ("dst", pa.int64())] + ([("label", ltype)] if n_el > 0 else []))
    epath = os.path.join(out, "edges.parquet")
    with pq.ParquetWriter(epath, eschema, compression="zstd") as w:
        done = 0
        for i, start in enumerate(range(0, edges, chunk)):
            size = min(chunk, edges - start)
            rng = xp.random.default_rng(np.random.SeedSequence([int(seed), 1, i]).generate_state(1)[0])
            src, dst = rmat_edges(xp, rng, scale, size, a, b, c)
            src, dst = scramble(xp, src, scale, consts), scramble(xp, dst, scale, consts)
            cols = [pa.array(_to_host(src)), pa.array(_to_host(dst))]
            if n_el > 0:
                cols.append(_label_array(_to_host(zipf_sample(xp, rng, ecdf, size)), "E", label_type))
            w.write_table(pa.Table.from_arrays(cols, schema=eschema), row_group_size=row_group)
            done += size
            report(f"[{time.perf_counter() - t0:7.1f}s] edges {done:,}/{edges:,}")

    n_vertices = 1 << scale
    vschema = pa.schema([("id", pa.int64())] + ([("label", ltype)] if n_vl > 0 else []))
    vpath = os.path.join(out, "vertices.parquet")
    with pq.ParquetWriter(vpath, vschema, compression="zstd") as w:
        for i, start in enumerate(range(0, n_vertices, chunk)):
            size = min(chunk, n_vertices - start)
            cols = [pa.array(np.arange(start, start + size, dtype=np.int64))]
            if n_vl > 0:
                rng = xp.random.default_rng(np.random.SeedSequence([int(seed), 2, i]).generate_state(1)[0])
                cols.append(_label_array(_to_host(zipf_sample(xp, rng, vcdf, size)), "L", label_type))
            w.write_table(pa.Table.from_arrays(cols, schema=vschema), row_group_size=row_group)
    report(f"[{time.perf_counter() - t0:7.1f}s] vertices {n_vertices:,}")

    meta = {
        "generator": "rmat", "edges": edges, "scale": scale, "vertices": n_vertices,
        "a": a, "b": b, "c": c, "d": d, "shape": shape, "edge_labels": n_el, "vertex_labels": n_vl,
        "edge_label_exponent": edge_label_exponent, "vertex_label_exponent": vertex_label_exponent,
        "seed": seed, "label_type": label_type, "chunk": chunk,
        "device": "gpu" if xp is not np else "cpu",
        "files": {"edges": "edges.parquet", "vertices": "vertices.parquet"},
        "seconds": round(time.perf_counter() - t0, 3),
    }
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    return meta


# ---------------------------------------------------------------------------
# Queries
# ---------------------------------------------------------------------------


def _is_ident(s):
    return bool(s) and (s[0] == "_" or s[0].isascii() and s[0].isalpha()) and \
        all(ch == "_" or (ch.isascii() and ch.isalnum()) for ch in s)


def label_text(label) -> str:
    """A label as written after ``:`` in a pattern: ``L3``, ``3`` or a backtick-quoted name."""
    if isinstance(label, (int, np.integer)) and not isinstance(label, bool):
        return str(int(label)) if label >= 0 else "`" + str(int(label)) + "`"
    s = str(label)
    if _is_ident(s):
        return s
    return "`" + s.replace("`", "``") + "`"


@dataclass
class Query:
    """A small labeled query graph.

    ``vertex_labels[i]`` is the label of pattern vertex ``v<i>`` (None: any);
    ``edges`` are ``(i, j, label)`` directed ``v<i> -> v<j>`` (label None: any).
    """

    vertex_labels: list
    edges: list
    name: str = ""
    info: dict = field(default_factory=dict)

    @property
    def k(self):
        return len(self.vertex_labels)

    @property
    def pattern(self) -> str:
        """The query in sgsi's pattern language; each vertex's label is written at its first use."""
        seen = set()

        def vert(i):
            lab = self.vertex_labels[i]
            if i in seen or lab is None:
                seen.add(i)
                return f"(v{i})"
            seen.add(i)
            return f"(v{i}:{label_text(lab)})"

        parts = []
        for i, j, lab in self.edges:
            body = "" if lab is None else f"[:{label_text(lab)}]"
            # write the path from whichever end was seen first (or the lower index), so the
            # vertices appear in walk order: v0, v1, ... are the output columns in that order
            if (j in seen and i not in seen) or (i not in seen and j not in seen and j < i):
                parts.append(f"{vert(j)}<-{body}-{vert(i)}")
            else:
                parts.append(f"{vert(i)}-{body}->{vert(j)}")
        return ", ".join(parts)

    def __str__(self):
        return self.pattern


class _WalkGraph:
    """Edges as an arc CSR (both directions) with dense vertex ids, for random walks."""

    def __init__(self, src, dst, elabel, vlabel_of_dense, n):
        keep = src != dst                       # a self-loop cannot be part of a pattern
        src, dst = src[keep], dst[keep]
        elabel = None if elabel is None else elabel[keep]
        # arcs: forward (u = src) and backward (u = dst); arc id -> edge id and direction
        u = np.concatenate([src, dst])
        order = np.argsort(u, kind="stable")
        self.arc_edge = (order % src.size).astype(np.int64)
        self.arc_fwd = order < src.size
        self.indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(u, minlength=n), out=self.indptr[1:])
        self.src, self.dst, self.elabel = src, dst, elabel
        self.vlabel = vlabel_of_dense
        self.starts = np.flatnonzero(np.diff(self.indptr) > 0)

    def walk(self, rng, k, max_steps):
        if self.starts.size == 0:
            raise ValueError("the graph has no edges")
        v = int(self.starts[rng.integers(self.starts.size)])
        index = {v: 0}
        order = [v]
        edges = {}
        for _ in range(max_steps):
            lo, hi = self.indptr[v], self.indptr[v + 1]
            arc = int(rng.integers(lo, hi))
            e = int(self.arc_edge[arc])
            s, d = int(self.src[e]), int(self.dst[e])
            w = d if self.arc_fwd[arc] else s
            if w not in index:
                index[w] = len(order)
                order.append(w)
            lab = None if self.elabel is None else self.elabel[e]
            edges.setdefault((index[s], index[d], lab), None)
            v = w
            if len(order) == k:
                return order, list(edges)
        return None


def _dense_ids(src, dst, vid=None):
    """Map ids (ints or strings, as Arrow arrays) to dense 0..n-1; returns (src, dst, vid_pos, n, values)."""
    parts = [src, dst] + ([vid] if vid is not None else [])
    allids = pa.chunked_array([p for arr in parts for p in (arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr])])
    enc = pc.dictionary_encode(allids.combine_chunks())
    codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    ns, nd = len(src), len(dst)
    return codes[:ns], codes[ns:ns + nd], (codes[ns + nd:] if vid is not None else None), len(enc.dictionary), enc.dictionary


def _labels_to_python(arr):
    """An Arrow label column -> object array of Python values (few distinct values, cheap)."""
    enc = pc.dictionary_encode(arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr)
    values = np.array(enc.dictionary.to_pylist() + [None], dtype=object)
    idx = enc.indices.fill_null(len(values) - 1).to_numpy(zero_copy_only=False)
    return values[idx]


def _load_walk_graph(edges, vertices=None, src="src", dst="dst", label="label", id="id", vertex_label="label"):
    """Accepts a generator output directory, Parquet path(s), a pyarrow Table or a dict of arrays."""
    if isinstance(edges, (str, os.PathLike)) and os.path.isdir(edges) and \
            os.path.exists(os.path.join(edges, "edges.parquet")):
        d = os.fspath(edges)
        vertices = vertices if vertices is not None else (
            os.path.join(d, "vertices.parquet") if os.path.exists(os.path.join(d, "vertices.parquet")) else None)
        edges = os.path.join(d, "edges.parquet")

    def table(x, cols):
        if isinstance(x, pa.Table):
            return x
        if isinstance(x, dict):
            return pa.table({k: pa.array(np.asarray(v)) if not isinstance(v, (pa.Array, pa.ChunkedArray)) else v
                             for k, v in x.items()})
        if isinstance(x, (list, tuple)) and x and all(isinstance(p, (str, os.PathLike)) for p in x):
            return pa.concat_tables([table(p, cols) for p in x])
        names = pq.read_schema(x).names
        return pq.read_table(x, columns=[c for c in cols if c in names])

    et = table(edges, [src, dst, label])
    vt = table(vertices, [id, vertex_label]) if vertices is not None else None
    s, d, v, n, _ = _dense_ids(et[src], et[dst], vt[id] if vt is not None else None)
    elab = _labels_to_python(et[label]) if label in et.column_names else None
    vlabel = np.full(n, None, dtype=object)
    if vt is not None and vertex_label in vt.column_names:
        vlabel[v] = _labels_to_python(vt[vertex_label])
    return _WalkGraph(s, d, elab, vlabel, n)


def random_walk_queries(edges, k, n, seed=0, *, vertices=None, max_steps=None, max_tries=1000, **columns):
    """Queries made by random walks, as in the SGSI paper's experiments.

    A walk starts at a uniformly random non-isolated data vertex and moves
    along a uniformly random incident edge (either direction, self-loops
    excluded) until ``k`` distinct vertices are visited. The visited
    vertices, with their labels, and every traversed edge, with its label
    and direction, form the query; each query has at least one embedding.

    Parameters
    ----------
    edges : str, list of str, pyarrow.Table or dict
        A :func:`rmat` output directory, edge Parquet file(s), or a table /
        dict with ``src``, ``dst`` and optionally ``label`` columns.
    k : int
        Query vertices.
    n : int
        Number of queries.
    seed : int
    vertices : optional
        Vertex Parquet file(s) or table with ``id`` and ``label`` (found in
        a :func:`rmat` directory automatically).
    max_steps : int, optional
        Steps before a walk gives up and restarts elsewhere (default ``50 * k``).
    **columns
        Column names: ``src``, ``dst``, ``label``, ``id``, ``vertex_label``.

    Returns
    -------
    list of Query
        ``q.pattern`` is the pattern text, e.g.
        ``(v0:L3)-[:E5]->(v1:L7), (v1)<-[:E2]-(v2)``.
    """
    if k < 2:
        raise ValueError("k must be at least 2")
    g = edges if isinstance(edges, _WalkGraph) else _load_walk_graph(edges, vertices, **columns)
    rng = np.random.default_rng(seed)
    max_steps = max_steps or 50 * k
    out = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > max_tries * max(n, 1):
            raise RuntimeError(f"no walk reached {k} distinct vertices in {tries} tries")
        r = g.walk(rng, k, max_steps)
        if r is None:
            continue
        order, qedges = r
        labels = [g.vlabel[v] for v in order]
        labels = [None if lab is None else (int(lab) if isinstance(lab, (int, np.integer)) else lab)
                  for lab in labels]
        qedges = [(i, j, None if lab is None else (int(lab) if isinstance(lab, (int, np.integer)) else lab))
                  for i, j, lab in qedges]
        out.append(Query(labels, qedges, name=f"rw{k}_{len(out)}", info={"start": int(order[0])}))
    return out


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def main(argv=None):
    p = argparse.ArgumentParser(prog="gen.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rmat", help="write an R-MAT graph with Zipf labels as Parquet")
    r.add_argument("--edges", type=float, required=True, help="edge rows (e.g. 1e6)")
    r.add_argument("--scale", type=int, default=None, help="log2 vertices (default: edge factor 16)")
    r.add_argument("--shape", choices=sorted(SHAPES), default="small")
    r.add_argument("--edge-labels", type=int, default=None)
    r.add_argument("--vertex-labels", type=int, default=None)
    r.add_argument("--edge-label-exponent", type=float, default=1.0)
    r.add_argument("--vertex-label-exponent", type=float, default=1.0)
    r.add_argument("--abcd", type=float, nargs=4, default=(0.57, 0.19, 0.19, 0.05), metavar=("A", "B", "C", "D"))
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--label-type", choices=("str", "int"), default="str")
    r.add_argument("--chunk", type=int, default=DEFAULT_CHUNK)
    r.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    r.add_argument("--out", required=True)
    q = sub.add_parser("queries", help="random-walk queries over a generated graph (one pattern per line)")
    q.add_argument("graph", help="rmat output directory or edge Parquet file")
    q.add_argument("--vertices", default=None)
    q.add_argument("--k", type=int, required=True)
    q.add_argument("--n", type=int, default=10)
    q.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.cmd == "rmat":
        a, b, c, d = args.abcd
        meta = rmat(args.out, int(args.edges), scale=args.scale, shape=args.shape, edge_labels=args.edge_labels,
                    vertex_labels=args.vertex_labels, edge_label_exponent=args.edge_label_exponent,
                    vertex_label_exponent=args.vertex_label_exponent, a=a, b=b, c=c, d=d, seed=args.seed,
                    label_type=args.label_type, chunk=args.chunk, device=args.device,
                    progress=lambda m: print(m, file=sys.stderr, flush=True))
        print(json.dumps(meta, indent=2))
    else:
        for qq in random_walk_queries(args.graph, args.k, args.n, args.seed, vertices=args.vertices):
            print(qq.pattern)


if __name__ == "__main__":
    main()
