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
from concurrent.futures import ThreadPoolExecutor
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
# Array module selection, threads
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


def _n_threads():
    """The number of CPUs this process may run on (NumPy's sorts and ufuncs release the GIL,
    so the CPU paths below split work over that many threads)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def _pmap(fn, items, threads=None):
    """``[fn(x) for x in items]``, on a thread pool when there is more than one item."""
    items = list(items)
    threads = min(threads or _n_threads(), len(items))
    if threads <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(threads) as ex:
        return list(ex.map(fn, items))


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
    if xp is np:
        return _rmat_edges_numpy(lambda bit: rng.random(size), scale, size, a, b, c)
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


def _rmat_edges_numpy(draw, scale, size, a, b, c):
    """:func:`rmat_edges` on NumPy with fewer passes over memory; the same edges for the same draws.

    ``draw(bit)`` returns the ``size`` uniform draws of one bit (``rng.random(size)``).
    Per bit: bool masks written in place and the bit added as ``mask * 2**bit`` into
    uint32 ids (the bits are disjoint, so ``+`` is ``|``).
    """
    ab, abc = a + b, a + b + c
    acc = np.uint32 if scale <= 32 else np.uint64
    src = np.zeros(size, dtype=acc)
    dst = np.zeros(size, dtype=acc)
    m = np.empty(size, dtype=bool)
    t = np.empty(size, dtype=bool)
    for bit in range(scale):
        r = draw(bit)
        w = acc(1 << bit)
        np.greater_equal(r, ab, out=m)                 # quadrants c, d: lower half for the source
        src += m.view(np.uint8) * w
        # quadrants b, d: right half for the target, i.e. a <= r < ab or r >= abc; as
        # a <= ab <= abc that is (r >= a) xor (r >= ab) xor (r >= abc)
        np.greater_equal(r, a, out=t)
        t ^= m
        np.greater_equal(r, abc, out=m)
        t ^= m
        dst += t.view(np.uint8) * w
    return src.astype(np.int64), dst.astype(np.int64)


def _rng_at(seed, skip):
    """``np.random.default_rng(seed)`` as it is after ``skip`` draws of ``random()``.

    Each float64 of ``Generator.random`` takes one 64-bit PCG64 output, and PCG64
    jumps ahead in O(log skip) (``advance``); so threads can each draw their piece of
    one random stream and together get exactly the numbers of the serial draws.
    """
    bg = np.random.PCG64(seed)
    bg.advance(int(skip))
    return np.random.Generator(bg)


def _pieces(size, min_piece=1 << 18):
    """``[(lo, hi)]`` splitting ``range(size)`` into about one piece per thread."""
    step = max(min_piece, -(-size // _n_threads()))
    return [(lo, min(lo + step, size)) for lo in range(0, size, step)]


def _rmat_chunk_numpy(seed, scale, size, a, b, c, consts, ecdf):
    """One chunk of :func:`rmat` on NumPy, in threads: ``(src, dst, label ranks or None)``.

    The same numbers as the serial ``rng = default_rng(seed)``; ``rmat_edges(np, rng,
    ...)``; ``scramble``; ``zipf_sample(np, rng, ecdf, size)``: the chunk's draws
    are ``scale`` blocks of ``size`` (one per bit), then ``size`` for the labels, and
    each piece ``lo..hi`` of the chunk reads its part of every block (:func:`_rng_at`).
    """
    src = np.empty(size, dtype=np.int64)
    dst = np.empty(size, dtype=np.int64)
    ranks = np.empty(size, dtype=np.int32) if ecdf is not None else None

    def piece(lohi):
        lo, hi = lohi
        s, d = _rmat_edges_numpy(lambda bit: _rng_at(seed, bit * size + lo).random(hi - lo), scale, hi - lo, a, b, c)
        src[lo:hi] = scramble(np, s, scale, consts)
        dst[lo:hi] = scramble(np, d, scale, consts)
        if ranks is not None:
            ranks[lo:hi] = zipf_sample(np, _rng_at(seed, scale * size + lo), ecdf, hi - lo)

    _pmap(piece, _pieces(size))
    return src, dst, ranks


def _zipf_numpy(seed, cdf, size):
    """``zipf_sample(np, default_rng(seed), cdf, size)``, in threads (see :func:`_rng_at`)."""
    ranks = np.empty(size, dtype=np.int32)

    def piece(lohi):
        lo, hi = lohi
        ranks[lo:hi] = zipf_sample(np, _rng_at(seed, lo), cdf, hi - lo)

    _pmap(piece, _pieces(size))
    return ranks


class _BackgroundWriter:
    """``ParquetWriter.write_table`` on a thread, so that the next chunk is made meanwhile
    (Arrow encodes and compresses without the GIL); at most ``depth`` tables wait."""

    def __init__(self, writer, depth=2):
        self.writer, self.depth = writer, depth
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="gen-parquet")
        self.pending = []

    def write(self, table, **kw):
        while len(self.pending) >= self.depth:
            self.pending.pop(0).result()
        self.pending.append(self.pool.submit(self.writer.write_table, table, **kw))

    def close(self):
        try:
            for f in self.pending:
                f.result()              # raises a write's error
        finally:
            self.pool.shutdown(wait=True)


def scramble(xp, ids, scale, consts):
    """A bijection of ``0..2**scale-1`` (multiply by odd / xor-shift rounds) hiding R-MAT's id order."""
    (m1, m2), sh = consts
    mask = np.uint64((1 << scale) - 1)
    x = ids.astype(xp.uint64)
    for m in (m1, m2):        # in place: uint64 products wrap (mod 2**64) as in ``x * m``
        x *= np.uint64(m)
        x &= mask
        x ^= x >> np.uint64(sh)
    return x.view(xp.int64)   # values < 2**scale <= 2**40: the same numbers as int64


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


def cached_rmat(data_dir, edges: int, shape: str, seed: int = 7, say=print, edge_labels=None,
                vertex_labels=None) -> str:
    """The folder ``<data_dir>/rmat-<shape>-<edges>`` holding an R-MAT graph's Parquet
    files (edges.parquet, vertices.parquet), generated on first use. Label counts
    other than the shape's make ``rmat-<edge labels>x<vertex labels>-<edges>``."""
    import time
    el = SHAPES[shape]["edge_labels"] if edge_labels is None else int(edge_labels)
    vl = SHAPES[shape]["vertex_labels"] if vertex_labels is None else int(vertex_labels)
    name = shape if (el, vl) == (SHAPES[shape]["edge_labels"], SHAPES[shape]["vertex_labels"]) else f"{el}x{vl}"
    gdir = os.path.join(data_dir, f"rmat-{name}-{int(edges)}")
    if not os.path.exists(os.path.join(gdir, "edges.parquet")):
        t = time.perf_counter()
        rmat(gdir, int(edges), shape=shape, seed=seed, edge_labels=el, vertex_labels=vl)
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
    # dictionary encoding for the labels only: ids are nearly all distinct, and trying it on
    # them (the default) costs time before Parquet falls back to plain encoding anyway
    with pq.ParquetWriter(epath, eschema, compression="zstd", use_dictionary=["label"] if n_el > 0 else False) as pw:
        w = _BackgroundWriter(pw)
        try:
            done = 0
            for i, start in enumerate(range(0, edges, chunk)):
                size = min(chunk, edges - start)
                cseed = np.random.SeedSequence([int(seed), 1, i]).generate_state(1)[0]
                if xp is np:
                    src, dst, ranks = _rmat_chunk_numpy(cseed, scale, size, a, b, c, consts,
                                                        ecdf if n_el > 0 else None)
                else:
                    rng = xp.random.default_rng(cseed)
                    src, dst = rmat_edges(xp, rng, scale, size, a, b, c)
                    src, dst = scramble(xp, src, scale, consts), scramble(xp, dst, scale, consts)
                    ranks = zipf_sample(xp, rng, ecdf, size) if n_el > 0 else None
                cols = [pa.array(_to_host(src)), pa.array(_to_host(dst))]
                if n_el > 0:
                    cols.append(_label_array(_to_host(ranks), "E", label_type))
                w.write(pa.Table.from_arrays(cols, schema=eschema), row_group_size=row_group)
                done += size
                report(f"[{time.perf_counter() - t0:7.1f}s] edges {done:,}/{edges:,}")
        finally:
            w.close()

    n_vertices = 1 << scale
    vschema = pa.schema([("id", pa.int64())] + ([("label", ltype)] if n_vl > 0 else []))
    vpath = os.path.join(out, "vertices.parquet")
    with pq.ParquetWriter(vpath, vschema, compression="zstd", use_dictionary=["label"] if n_vl > 0 else False) as pw:
        w = _BackgroundWriter(pw)
        try:
            for i, start in enumerate(range(0, n_vertices, chunk)):
                size = min(chunk, n_vertices - start)
                cols = [pa.array(np.arange(start, start + size, dtype=np.int64))]
                if n_vl > 0:
                    cseed = np.random.SeedSequence([int(seed), 2, i]).generate_state(1)[0]
                    ranks = _zipf_numpy(cseed, vcdf, size) if xp is np else \
                        zipf_sample(xp, xp.random.default_rng(cseed), vcdf, size)
                    cols.append(_label_array(_to_host(ranks), "L", label_type))
                w.write(pa.Table.from_arrays(cols, schema=vschema), row_group_size=row_group)
        finally:
            w.close()
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


# Loading a graph for random walks. Built for 100M-1B edges: Parquet row groups are read in
# threads, ids become int32 vertex keys (no hashing when the ids are integers in a compact
# range), labels stay dictionary codes (int32 per edge and per vertex; only the labels a walk
# visits become Python values), and the arc CSR is built by a radix sort in threads (NumPy's
# and Arrow's sorts release the GIL) or on a GPU.


def _chunks_of(arr):
    """The chunks of an Arrow Array / ChunkedArray with their row offsets: ``[(offset, chunk)]``."""
    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    out, off = [], 0
    for c in chunks:
        if len(c):
            out.append((off, c))
        off += len(c)
    return out


def _fill(out, arr, convert):
    """``out[i:j] = convert(chunk)`` for each chunk of the Arrow column ``arr`` (rows i..j), in threads;
    ``convert`` returns a NumPy array that is cast (unsafely: the caller checked the range) to out's dtype."""
    def one(item):
        off, c = item
        np.copyto(out[off:off + len(c)], convert(c), casting="unsafe")
    _pmap(one, _chunks_of(arr))
    return out


def _label_codes(col):
    """A label column -> ``(codes, values)``: int32 codes (-1 where null) and the Python value of each code.

    Dictionary columns (Parquet string labels are read that way) keep their codes;
    integers in a small range are coded as ``value - min``; anything else is
    dictionary-encoded by Arrow. Only ``values`` (a short list) holds Python objects.
    """
    if isinstance(col, pa.Array):
        col = pa.chunked_array([col])
    codes = np.empty(len(col), dtype=np.int32)
    if pa.types.is_integer(col.type) and len(col) - col.null_count > 0:
        mm = pc.min_max(col)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if hi - lo < 1 << 20 and -2**62 < lo and hi < 2**62:
            def small_int(c):
                a = pc.subtract(c.cast(pa.int64()), lo)     # null stays null
                return pc.fill_null(a, -1).to_numpy() if c.null_count else a.to_numpy()
            _fill(codes, col, small_int)
            return codes, [v for v in range(lo, hi + 1)]
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)            # one dictionary shared by all chunks
    chunks = _chunks_of(col)
    if not chunks:
        return codes, []
    first = chunks[0][1].dictionary
    if all(c.dictionary.equals(first) for _, c in chunks[1:]):
        values, remap = first.to_pylist(), None
    elif pa.types.is_string(first.type) or pa.types.is_large_string(first.type) or pa.types.is_binary(first.type):
        # one dictionary per Parquet row group: number the values over all of them and
        # translate each chunk's codes through a small table (in threads; Arrow's
        # unify_dictionaries does the same on one thread)
        index, remap = {}, []
        for _, c in chunks:
            r = [index.setdefault(v, len(index)) for v in c.dictionary.to_pylist()]
            remap.append(np.array(r + [-1], dtype=np.int32))    # last entry: code -1 for null
        values = list(index)
    else:
        return _label_codes(pa.table({"c": col}).unify_dictionaries()["c"])
    at = {off: i for i, (off, _) in enumerate(chunks)}

    def one(item):
        off, c = item
        idx = pc.fill_null(c.indices, -1).to_numpy() if c.null_count else c.indices.to_numpy()
        codes[off:off + len(c)] = idx if remap is None else remap[at[off]][idx]

    _pmap(one, chunks)
    return codes, values


def _vertex_keys(src, dst, vid=None):
    """Vertex ids (Arrow columns) -> int keys ``0..n_keys-1``: ``(keys, vkeys, n_keys)``.

    ``keys`` holds the keys of ``src`` then of ``dst`` (2E values, int32 where they
    fit); ``vkeys`` the keys of ``vid`` (int64; values outside ``0..n_keys-1`` name
    vertices that no edge touches). Integer ids whose range is at most about the
    arc count are keyed as ``id - min`` (no hashing); other ids are dictionary-encoded
    over ``src, dst, vid`` as before. Key order is not the dense id order of
    :class:`_WalkGraph` (first appearance), which is derived from the arcs later.
    """
    n_arcs = len(src) + len(dst)
    same_int = pa.types.is_integer(src.type) and src.type == dst.type and (vid is None or vid.type == src.type)
    if same_int and n_arcs:
        if src.null_count or dst.null_count:
            raise ValueError("edge ids must not be null")
        mm = _pmap(lambda item: (item[1].to_numpy().min(), item[1].to_numpy().max()), _chunks_of(src) + _chunks_of(dst))
        lo, hi = int(min(m for m, _ in mm)), int(max(m for _, m in mm))
        n_keys = hi - lo + 1
        if n_keys <= n_arcs + (1 << 20) and n_keys < 2**31 - 1 and hi < 2**63:
            keys = np.empty(n_arcs, dtype=np.int32)
            def shift(c):
                return np.subtract(c.to_numpy(), lo, dtype=np.int64, casting="unsafe") if lo else c.to_numpy()
            _fill(keys[:len(src)], src, shift)
            _fill(keys[len(src):], dst, shift)
            vkeys = None
            if vid is not None:
                # (a uint64 id >= 2**63 wraps to a negative key: no edge has it)
                vkeys = pc.subtract(vid.cast(pa.int64(), safe=False), lo).to_numpy() if len(vid) \
                    else np.zeros(0, np.int64)
            return keys, vkeys, n_keys
    # strings, sparse integers, ...: hash them (numbered by first appearance, as the old code did)
    parts = [src, dst] + ([vid] if vid is not None else [])
    allids = pa.chunked_array([c for p in parts for _, c in _chunks_of(p)], type=src.type)
    if allids.null_count:
        raise ValueError("vertex ids must not be null")
    enc = pc.dictionary_encode(allids)
    n_keys = len(enc.chunk(0).dictionary) if enc.num_chunks else 0
    codes = np.empty(len(allids), dtype=np.int32 if n_keys < 2**31 - 1 else np.int64)
    _fill(codes, enc, lambda c: c.indices.to_numpy())
    vkeys = codes[n_arcs:].astype(np.int64) if vid is not None else None
    return codes[:n_arcs], vkeys, n_keys


_RADIX = 16   # bits sorted per radix pass: NumPy's stable argsort is a counting (radix) sort for 16-bit ints
# Below this many arcs the CPU sort beats the GPU's: on an H200 host (16 CPUs) a fresh process
# spends seconds starting CUDA and compiling CuPy's kernels, and copies run at ~2-4 GB/s.
_GPU_MIN_ARCS = 1 << 29
#: pyarrow's ``sort_indices`` (stable) is a counting sort for integers spanning at most this
#: many values: 4-8 times NumPy's radix ``argsort`` on millions of 16-bit keys (measured).
_ARROW_COUNTING_SORT_MAX = 4096


def _stable_order(b, n_values):
    """``np.argsort(b, kind="stable")`` for ints ``0 <= b < n_values`` (int64; may be read-only)."""
    if n_values <= _ARROW_COUNTING_SORT_MAX:
        return pc.sort_indices(pa.array(b)).to_numpy().view(np.int64)
    return np.argsort(b, kind="stable")


def _sorted(a):
    """``np.sort(a)`` in threads: a sample's quantiles split the values into ranges, one per
    thread, each selected and sorted on its own."""
    t = _n_threads()
    if t == 1 or a.size < 1 << 22:
        return np.sort(a)
    sample = np.sort(a[::a.size // 65536])
    cuts = [None] + list(sample[np.arange(1, t) * sample.size // t]) + [None]

    def part(i):
        lo, hi = cuts[i], cuts[i + 1]
        sel = a if lo is None else a[a >= lo]
        sel = sel if hi is None else sel[sel < hi]
        return np.sort(sel)

    return np.concatenate(_pmap(part, range(t)))


def _arc_csr(keys, n_edges, n_keys, device="auto"):
    """The arc CSR of a graph: ``(indptr, arcs, loops)``.

    ``keys`` are the vertex keys of the ``src`` then the ``dst`` column (so arc
    ``p < E`` is edge ``p`` forward, arc ``p >= E`` edge ``p - E`` backward). Self-loops
    are left out; ``arcs[indptr[v]:indptr[v + 1]]`` are the arcs of vertex ``v`` in
    increasing ``p`` -- exactly ``np.argsort(keys, kind="stable")`` without the
    self-loop arcs. ``loops`` are the self-loop edge ids, ascending.

    On a GPU (``device="gpu"``, or ``"auto"`` for large graphs when CuPy and a GPU
    with room are there) this is one stable argsort. On the CPU it is a two-level radix
    sort in threads: (1) the arcs are split into buckets of ``2**16`` consecutive keys
    (per chunk of a few million arcs: a stable counting sort of the bucket numbers,
    then each arc scattered to its place in its bucket, chunks in order), and (2) each
    bucket is stably sorted by the low 16 key bits. Both levels are stable, so ties
    keep arc order; both paths give the same arrays.
    """
    if device not in ("auto", "cpu", "gpu"):
        raise ValueError(f"device must be auto, cpu or gpu, not {device!r}")
    n_arcs = 2 * n_edges
    adtype = np.uint32 if n_arcs < 2**32 else np.int64
    if device == "gpu" or (device == "auto" and n_arcs >= _GPU_MIN_ARCS):
        cp = _gpu_xp()
        if cp is None and device == "gpu":
            raise RuntimeError("device='gpu' asked for, but CuPy with a CUDA GPU is not available")
        if cp is not None:
            r = _arc_csr_gpu(cp, keys, n_edges, n_keys, adtype, must=device == "gpu")
            if r is not None:
                return r
    # self-loops, per chunk of edges in threads (chunks of at most 2**22 edges: the sorts
    # below run 3-4 times faster per arc on a few million arcs than on tens of millions)
    step = min(1 << 22, max(1 << 20, -(-n_edges // (2 * _n_threads()))))
    edge_chunks = [(s, min(s + step, n_edges)) for s in range(0, n_edges, step)]

    def find_loops(chunk):
        lo, hi = chunk
        return np.flatnonzero(keys[lo:hi] == keys[n_edges + lo:n_edges + hi]) + lo

    loops = np.concatenate(_pmap(find_loops, edge_chunks) + [np.zeros(0, np.int64)])
    n_buckets = (max(n_keys, 1) - 1 >> _RADIX) + 1
    loop_bucket = n_buckets                          # self-loop arcs go to an extra last bucket, dropped
    bdtype = np.uint8 if n_buckets < 1 << 8 else np.uint16 if n_buckets < 1 << 16 else None
    if bdtype is None:                               # > 2**32 keys: never met in practice; plain sort
        u = keys.copy()
        u[loops], u[loops + n_edges] = n_keys, n_keys
        order = np.argsort(u, kind="stable")
        indptr = np.zeros(n_keys + 1, dtype=np.int64)
        np.cumsum(np.bincount(u, minlength=n_keys + 1)[:n_keys], out=indptr[1:])
        return indptr, order[:indptr[-1]].astype(adtype), loops

    # chunks of arcs, none across the forward / backward boundary
    chunks = [(h * n_edges + lo, h * n_edges + hi) for h in (0, 1) for lo, hi in edge_chunks]

    def buckets(lo, hi):
        b = (keys[lo:hi] >> _RADIX).astype(bdtype)
        e = lo - n_edges if lo >= n_edges else lo     # arcs lo..hi-1 are of edges e..
        i, j = np.searchsorted(loops, [e, e + hi - lo])
        b[loops[i:j] - e] = loop_bucket
        return b

    counts = np.array(_pmap(lambda c: np.bincount(buckets(*c), minlength=n_buckets + 1), chunks),
                      dtype=np.int64).reshape(len(chunks), n_buckets + 1)
    # out offsets: bucket-major, then chunk order
    bstart = np.zeros(n_buckets + 2, dtype=np.int64)
    np.cumsum(counts.sum(axis=0), out=bstart[1:])
    offsets = bstart[:-1] + np.cumsum(counts, axis=0) - counts     # [chunk, bucket]
    n_out = int(bstart[n_buckets])                                 # arcs that are not self-loops
    arcs = np.empty(n_out, dtype=adtype)
    low_bits = np.empty(n_out, dtype=np.uint16)                    # low key bits of each placed arc

    def place(i):
        lo, hi = chunks[i]
        c = counts[i, :n_buckets]
        m = int(c.sum())                                   # the chunk's arcs, self-loops left out
        order = _stable_order(buckets(lo, hi), n_buckets + 1)[:m]    # (self-loop arcs sort last)
        # the k-th arc in this order, of bucket j, goes to offsets[i, j] + k - (its bucket's first k)
        dest = np.repeat(offsets[i, :n_buckets] - (np.cumsum(c) - c), c)
        dest += np.arange(m)
        low_bits[dest] = keys[lo:hi].astype(np.uint16)[order]    # (an integer cast keeps the low 16 bits)
        arcs[dest] = order + lo

    _pmap(place, range(len(chunks)))
    deg = np.zeros(n_buckets << _RADIX, dtype=np.int64)

    def sort_bucket(j):
        s, e = bstart[j], bstart[j + 1]
        if e > s:
            lb = low_bits[s:e]
            arcs[s:e] = arcs[s:e][np.argsort(lb, kind="stable")]
            deg[j << _RADIX:(j + 1) << _RADIX] = np.bincount(lb, minlength=1 << _RADIX)

    _pmap(sort_bucket, range(n_buckets))
    low_bits = None                                                # (free it)
    indptr = np.zeros(n_keys + 1, dtype=np.int64)
    np.cumsum(deg[:n_keys], out=indptr[1:])
    return indptr, arcs, loops


def _arc_csr_gpu(cp, keys, n_edges, n_keys, adtype, must=False):
    """:func:`_arc_csr` on a GPU: self-loop arcs get the key ``n_keys`` (sorted last, cut
    off) and CuPy's argsort, a stable radix sort, does the rest. None (use the CPU) if
    the GPU lacks the ~30 bytes per arc that this takes, or fails, unless ``must``."""
    n_arcs = 2 * n_edges
    pool = cp.get_default_memory_pool()
    try:
        if not must and cp.cuda.runtime.memGetInfo()[0] < 32 * n_arcs + (1 << 30):
            return None
        k = cp.asarray(keys)
        loops = cp.flatnonzero(k[:n_edges] == k[n_edges:])
        k[loops] = n_keys
        k[loops + n_edges] = n_keys
        deg = cp.bincount(k, minlength=n_keys + 1)[:n_keys]
        order = cp.argsort(k)
        del k
        arcs = cp.asnumpy(order[:n_arcs - 2 * loops.size].astype(adtype))
        del order
        indptr = np.zeros(n_keys + 1, dtype=np.int64)
        np.cumsum(cp.asnumpy(deg), out=indptr[1:])
        return indptr, arcs, cp.asnumpy(loops)
    except Exception:  # noqa: BLE001 - out of GPU memory, driver trouble: the CPU path does the same
        if must:
            raise
        return None
    finally:
        pool.free_all_blocks()    # leave the GPU's memory to whatever runs next (sgsi itself)


class _WalkGraph:
    """A graph for random walks: an arc CSR over int vertex keys, labels as dictionary codes.

    ``keys[e]`` / ``keys[E + e]`` are the source / target keys of edge ``e``;
    ``arcs[indptr[v]:indptr[v + 1]]`` the arcs of vertex ``v`` (see :func:`_arc_csr`;
    self-loops excluded). ``ecodes`` / ``vcodes`` are int32 label codes per edge / per
    key (-1: no label) into the Python value lists ``evalues`` / ``vvalues``.

    Dense vertex ids number the vertices by first appearance in ``src, dst`` (the
    order of the earlier version, which dictionary-encoded the ids): the walk's start
    is ``starts[rng.integers(starts.size)]`` with ``starts`` in that order, so one seed
    keeps giving the same queries. The order is recovered from the CSR: a vertex's
    first arc (arcs are in increasing position) or its first self-loop is its first
    appearance.
    """

    def __init__(self, keys, n_edges, n_keys, ecodes=None, evalues=(), vcodes=None, vvalues=(), device="auto"):
        self.keys, self.n_edges = keys, n_edges
        self.ecodes, self.evalues = ecodes, list(evalues)
        self.vcodes, self.vvalues = vcodes, list(vvalues)
        self.indptr, self.arcs, loops = _arc_csr(keys, n_edges, n_keys, device)
        # first position of each vertex key in src, dst (int64 max: absent)
        none = np.iinfo(np.int64).max
        first = np.full(n_keys, none, dtype=np.int64)
        has = self.indptr[1:] > self.indptr[:-1]
        first[has] = self.arcs[self.indptr[:-1][has]]
        loop_only = np.zeros(0, dtype=np.int64)
        if loops.size:                      # self-loop edge e appears first at position e (as src)
            lk, at = np.unique(keys[loops], return_index=True)
            first[lk] = np.minimum(first[lk], loops[at])
            loop_only = lk[~has[lk]]        # vertices with self-loops only: no walk starts there
        self.first = first
        self.first_sorted = _sorted(first[first != none])      # dense id -> first position
        # the keys with an arc, in dense order (a gather in increasing position)
        skip = np.searchsorted(self.first_sorted, np.sort(first[loop_only]))
        self.starts = keys[np.delete(self.first_sorted, skip)]

    def dense_id(self, v):
        """The dense id (rank by first appearance in src, dst) of vertex key ``v``."""
        return int(np.searchsorted(self.first_sorted, self.first[v]))

    def vertex_label(self, v):
        code = -1 if self.vcodes is None else int(self.vcodes[v])
        return None if code < 0 else self.vvalues[code]

    def edge_label(self, e):
        code = -1 if self.ecodes is None else int(self.ecodes[e])
        return None if code < 0 else self.evalues[code]

    def walk(self, rng, k, max_steps):
        if self.starts.size == 0:
            raise ValueError("the graph has no edges")
        n_edges = self.n_edges
        v = int(self.starts[rng.integers(self.starts.size)])
        index = {v: 0}
        order = [v]
        edges = {}
        for _ in range(max_steps):
            lo, hi = self.indptr[v], self.indptr[v + 1]
            p = int(self.arcs[int(rng.integers(lo, hi))])   # arc p: edge p forward, or edge p - E backward
            e = p if p < n_edges else p - n_edges
            s, d = int(self.keys[e]), int(self.keys[n_edges + e])
            w = d if p < n_edges else s
            if w not in index:
                index[w] = len(order)
                order.append(w)
            edges.setdefault((index[s], index[d], self.edge_label(e)), None)
            v = w
            if len(order) == k:
                return order, list(edges)
        return None


def _read_parquet(path, columns, dict_cols):
    """``pq.read_table(path, columns=columns, read_dictionary=dict_cols)`` for one file, with
    its row groups read in threads (pyarrow's reader runs one thread per column)."""
    pf = pq.ParquetFile(path, read_dictionary=dict_cols or None)
    meta = pf.metadata
    n = meta.num_row_groups
    if n <= 1:
        return pf.read(columns=columns)
    per = -(-n // (2 * _n_threads()))

    def read(first):
        f = pq.ParquetFile(path, read_dictionary=dict_cols or None, metadata=meta)   # a handle per thread
        return f.read_row_groups(range(first, min(first + per, n)), columns=columns, use_threads=False)

    return pa.concat_tables(_pmap(read, range(0, n, per)))


def _read_table(x, cols, dict_cols=()):
    """A pyarrow Table from a Table, a dict of arrays, or Parquet path(s) (only ``cols``; string
    columns of ``dict_cols`` are read as dictionary arrays: codes, no per-row strings)."""
    if isinstance(x, pa.Table):
        return x
    if isinstance(x, dict):
        return pa.table({k: pa.array(np.asarray(v)) if not isinstance(v, (pa.Array, pa.ChunkedArray)) else v
                         for k, v in x.items()})
    if isinstance(x, (list, tuple)) and x and all(isinstance(p, (str, os.PathLike)) for p in x):
        return pa.concat_tables([_read_table(p, cols, dict_cols) for p in x])
    schema = pq.read_schema(x)
    names = [c for c in cols if c in schema.names]
    as_dict = [c for c in dict_cols if c in names and
               (pa.types.is_string(schema.field(c).type) or pa.types.is_large_string(schema.field(c).type) or
                pa.types.is_binary(schema.field(c).type))]
    if isinstance(x, (str, os.PathLike)) and os.path.isfile(x):
        return _read_parquet(x, names, as_dict)
    return pq.read_table(x, columns=names, read_dictionary=as_dict or None)


def _load_walk_graph(edges, vertices=None, src="src", dst="dst", label="label", id="id", vertex_label="label",
                     device="auto"):
    """Accepts a generator output directory, Parquet path(s), a pyarrow Table or a dict of arrays."""
    if isinstance(edges, (str, os.PathLike)) and os.path.isdir(edges) and \
            os.path.exists(os.path.join(edges, "edges.parquet")):
        d = os.fspath(edges)
        vertices = vertices if vertices is not None else (
            os.path.join(d, "vertices.parquet") if os.path.exists(os.path.join(d, "vertices.parquet")) else None)
        edges = os.path.join(d, "edges.parquet")

    et = _read_table(edges, [src, dst, label], [label])
    vt = _read_table(vertices, [id, vertex_label], [vertex_label]) if vertices is not None else None
    n_edges = et.num_rows
    keys, vkeys, n_keys = _vertex_keys(et[src], et[dst], vt[id] if vt is not None else None)
    ecodes, evalues = _label_codes(et[label]) if label in et.column_names else (None, ())
    del et
    pa.default_memory_pool().release_unused()   # give the Arrow buffers of the edge table back to the OS
    vcodes, vvalues = None, ()
    if vt is not None and vertex_label in vt.column_names:
        codes, vvalues = _label_codes(vt[vertex_label])
        vcodes = np.full(n_keys, -1, dtype=np.int32)
        inside = (vkeys >= 0) & (vkeys < n_keys)
        if inside.all():
            vcodes[vkeys] = codes            # repeated ids: the last row wins, as before
        else:                                # ids that no edge has cannot be visited
            vcodes[vkeys[inside]] = codes[inside]
    return _WalkGraph(keys, n_edges, n_keys, ecodes, evalues, vcodes, vvalues, device)


def random_walk_queries(edges, k, n, seed=0, *, vertices=None, max_steps=None, max_tries=1000, device="auto",
                        **columns):
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
    device : ``"auto"``, ``"cpu"`` or ``"gpu"``
        Where the graph's arcs are sorted while it loads (``"auto"``: on a GPU when
        CuPy and a GPU with room are there); the queries are the same either way.
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
    g = edges if isinstance(edges, _WalkGraph) else _load_walk_graph(edges, vertices, device=device, **columns)
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
        labels = [g.vertex_label(v) for v in order]
        labels = [None if lab is None else (int(lab) if isinstance(lab, (int, np.integer)) else lab)
                  for lab in labels]
        qedges = [(i, j, None if lab is None else (int(lab) if isinstance(lab, (int, np.integer)) else lab))
                  for i, j, lab in qedges]
        out.append(Query(labels, qedges, name=f"rw{k}_{len(out)}", info={"start": g.dense_id(order[0])}))
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
    q.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto", help="where the arcs are sorted")
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
        for qq in random_walk_queries(args.graph, args.k, args.n, args.seed, vertices=args.vertices,
                                      device=args.device):
            print(qq.pattern)


if __name__ == "__main__":
    main()
