"""Batch-dynamic matching (issue 44 item 4): incremental matches per batch against recomputing.

The continuous-matching papers' protocol: build a store from 90% of a graph's edges (a random
90%, seeded), then stream the other 10% as batches of insertions (``--batches``: 1K, 10K, 100K,
1M edges, each cut to what is left), then batches that mix insertions with deletions of edges
already in the store (``--mixed``, half of each). Per batch: the update's apply time
(``Graph.update``), and per query the incremental time (``Graph.count_delta(since=the version
before the batch)``) against counting from scratch on the new version (``Graph.count``), checked
exactly: the count before plus added minus removed is the count after. At the end, the
compaction time (``Graph.compact``, else ``sgsi compact``) and every query counted again on the
compacted store (the same counts).

    python bench/dynamic.py --graph hprd --device cpu --sample 10             # a protein graph (t/v/e)

The 100M-edge R-MAT on one GPU in about 8 minutes (0.1% batch: 100K; heavier walks, whose recount
is not a few ms; no compaction, about 100 s there; ``--timeout`` caps each delta and recount):

    python bench/dynamic.py --graph rmat --edges 1e8 --device gpu --edge-labels 16 --vertex-labels 64 \
        --sizes 8 12 --queries 2 --batches 1000 100000 --mixed 100000 --timeout 20 --no-compact

Per query: ``changed_s`` (the store's changed pairs) and ``filter_s`` (the candidate filter of
each side), the parts of ``delta_s`` outside the anchored joins (``Graph.last_stats``).

Graphs: ``rmat`` (bench/gen.py's, walks drawn from it as queries: ``--sizes``, ``--queries``), or a
benchmark set's ``data.graph`` (``hprd``, ``yeast``: undirected, vertex labels; ``--sample`` of
its query files). Writes ``bench/results/dynamic_<graph>_<device>[_stream].csv`` and ``.md``.
``--stream``: one Graph applies every batch and runs its deltas, a second one follows the versions
and recounts (caches warm, each paying its version's first reads), as processes that stream updates
would; else each delta and recount opens the store anew.
Each query stops after ``--timeout`` s (status ``cancelled``). On a GPU, each query's delta and count
first run untimed on a throwaway copy of the store after an insert and a mixed batch (``--no-warm``
skips it): a machine's first GPU queries compile kernels, up to a second each.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

C.ensure_importable()
import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import sgsi  # noqa: E402
from sgsi.errors import Cancelled  # noqa: E402

FIELDS = ["graph", "batch", "kind", "inserted", "deleted", "since", "version", "apply_s", "query", "status",
          "delta_s", "recompute_s", "speedup", "added", "removed", "count_before", "count_after", "exact",
          "anchored_queries", "changed_s", "filter_s", "delta_path"]


# -- the graph and its split ---------------------------------------------------------------


def load_graph(args):
    """(edges table, vertices table, undirected, queries [(name, pattern)]) of ``args.graph``."""
    if args.graph == "rmat":
        gdir = C.walk_graph(args)
        edges = pq.read_table(os.path.join(gdir, "edges.parquet"))
        vertices = pq.read_table(os.path.join(gdir, "vertices.parquet"))
        return edges, vertices, False, [(f"walk{k}-{i}", q) for i, (k, q) in enumerate(C.walk_queries(gdir, args))]
    import duckdb
    set_dir = _set_dir(args.graph)
    path = os.path.join(set_dir, "data.graph")
    rows = ("read_csv('{}', delim=' ', header=false, null_padding=true, auto_detect=false, "
            "columns={{'k': 'VARCHAR', 'a': 'BIGINT', 'b': 'BIGINT', 'c': 'BIGINT', 'x': 'BIGINT'}})").format(path)
    con = duckdb.connect()
    edges = con.sql(f"SELECT a AS src, b AS dst FROM {rows} WHERE k = 'e'").to_arrow_table()
    vertices = con.sql(f"SELECT a AS id, CAST(b AS VARCHAR) AS label FROM {rows} WHERE k = 'v'").to_arrow_table()
    con.close()
    names = sorted(os.listdir(os.path.join(set_dir, "queries")))
    picked = [names[i] for i in np.random.default_rng(args.seed).permutation(len(names))[:args.sample]]
    if args.names:
        missing = sorted(set(args.names) - set(names))
        if missing:
            raise SystemExit(f"not query files of {args.graph}: {', '.join(missing)}")
        picked = args.names
    return edges, vertices, True, [(n, os.path.join(set_dir, "queries", n)) for n in sorted(picked)]


def pattern_queries(args):
    """[(name, pattern)] of the ``--pattern`` queries."""
    return [(f"pattern{i}", p) for i, p in enumerate(args.pattern)]


def _set_dir(name):
    for root in (os.environ.get("SGSI_BENCHMARKS"), "/work/shared/benchmarks",
                 os.path.join(C.REPO_DIR, "tests", "data", "benchmarks")):
        if root and os.path.isdir(os.path.join(root, name)):
            return os.path.join(root, name)
    raise SystemExit(f"benchmark set {name!r} not found")


def plan_batches(n_stream, n_base, args):
    """[(label, kind, inserted, deleted)]: the insert batches, then the mixed ones, cut to the stream."""
    out, left = [], n_stream
    for size in args.batches:
        take = min(size, left)
        if take:
            out.append((_label(size), "insert", take, 0))
            left -= take
    for size in args.mixed:
        ins = min(size // 2, left)
        dels = min(size - size // 2, n_base // 4)
        if ins or dels:
            out.append((_label(size), "mixed", ins, dels))
            left -= ins
    return out


def _label(n):
    return f"{n // 1000000}M" if n >= 1000000 and n % 1000000 == 0 else (f"{n // 1000}K" if n % 1000 == 0 else str(n))


# -- timing ------------------------------------------------------------------------------


def timed(fn, timeout):
    """(status, value, seconds) of ``fn(cancel)``, cancelled after ``timeout`` s."""
    ev = threading.Event()
    timer = threading.Timer(timeout, ev.set)
    timer.start()
    t = time.perf_counter()
    try:
        value = fn(ev)
        return "ok", value, time.perf_counter() - t
    except Cancelled:
        return "cancelled", None, time.perf_counter() - t
    finally:
        timer.cancel()


def apply_update(path, insert, delete):
    """Seconds of ``Graph.update`` with the Parquet files ``insert`` and ``delete`` (None: none)."""
    with sgsi.open(path) as g:
        t = time.perf_counter()
        g.update(insert=insert, delete=delete)
        return time.perf_counter() - t


def compact(path):
    """Seconds of compacting the store at ``path`` (``Graph.compact``, else ``sgsi compact``)."""
    with sgsi.open(path) as g:
        if hasattr(g, "compact"):
            t = time.perf_counter()
            g.compact()
            return time.perf_counter() - t
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sgsi", "compact", path], check=True)
    return time.perf_counter() - t


@contextlib.contextmanager
def _opening(path, kept):
    """``kept`` (a Graph kept open), or the store opened for one query and closed after it."""
    if kept is not None:
        yield kept
        return
    with sgsi.open(path) as g:
        yield g


def _follow(g):
    """``g`` brought to the store's newest version (the Graph left behind closed)."""
    newer = g.newest()
    if newer.store is not g.store:
        g.close()
    return newer


def version_of(path):
    with sgsi.open(path) as g:
        return g.store.version


# -- the run -----------------------------------------------------------------------------


def run(args):
    start = C.machine()
    edges, vertices, undirected, queries = load_graph(args)
    queries += pattern_queries(args)
    n = edges.num_rows
    perm = np.random.default_rng(args.seed).permutation(n)
    n_base = int(round(n * 0.9))
    base, stream = edges.take(perm[:n_base]), edges.take(perm[n_base:])
    work = os.path.join(args.work, f"dynamic-{args.graph}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    pq.write_table(base, os.path.join(work, "base.parquet"))
    pq.write_table(vertices, os.path.join(work, "vertices.parquet"))
    path = os.path.join(work, "g.sgsi")
    t = time.perf_counter()
    sgsi.build(path, edges=os.path.join(work, "base.parquet"), vertices=os.path.join(work, "vertices.parquet"),
               undirected=undirected, memory_budget=args.build_budget).close()
    C.say(f"built {n_base:,} of {n:,} edges in {time.perf_counter() - t:.1f}s; {len(queries)} queries")
    opts = dict(device=args.device, memory_budget=args.memory_budget, progress=False)
    if args.warm and args.device != "cpu":
        warm_kernels(path, work, stream, base, queries, opts, args.timeout)
    with sgsi.open(path) as g:
        before = {name: timed(lambda ev, q=q: g.count(q, cancel=ev, **opts), args.timeout) for name, q in queries}
    counts = {name: c for name, (s, c, _t) in before.items() if s == "ok"}

    rows, at, deleted_at = [], 0, 0
    # --stream: one Graph applies the batches and runs the deltas, a second follows the versions and
    # recounts: each pays its version's first reads once, as a process doing only that would.
    kept, counter = (sgsi.open(path), sgsi.open(path)) if args.stream else (None, None)
    for g in (kept, counter) if args.stream else ():     # warm: every query counted once in each
        for _name, q in queries:
            timed(lambda ev, q=q, g=g: g.count(q, cancel=ev, **opts), args.timeout)
    gone = base.take(np.random.default_rng(args.seed + 1).permutation(n_base))      # deletions, in this order
    for label, kind, n_ins, n_del in plan_batches(stream.num_rows, n_base, args):
        ins = os.path.join(work, "insert.parquet")
        dele = os.path.join(work, "delete.parquet") if n_del else None
        pq.write_table(stream.slice(at, n_ins), ins)
        if dele:
            pq.write_table(gone.slice(deleted_at, n_del), dele)
        at, deleted_at = at + n_ins, deleted_at + n_del
        if kept is not None:            # one Graph throughout: the update and the queries after it
            since = kept.version
            t = time.perf_counter()
            kept.update(insert=ins, delete=dele)
            apply_s, version = time.perf_counter() - t, kept.version
            counter = _follow(counter)
        else:
            since = version_of(path)
            apply_s = apply_update(path, ins, dele)
            version = version_of(path)
        C.say(f"batch {label} {kind}: +{n_ins:,} -{n_del:,} applied in {apply_s:.3f}s (version {version})")
        for name, q in queries:       # each in a store opened for it, or in the streaming Graphs
            row = {"graph": args.graph, "batch": label, "kind": kind, "inserted": n_ins, "deleted": n_del,
                   "since": since, "version": version, "apply_s": round(apply_s, 4), "query": name}
            with _opening(path, kept) as g:
                s1, d, t1 = timed(lambda ev, q=q: g.count_delta(q, since=since, cancel=ev, **opts), args.timeout)
                row["anchored_queries"] = g.last_stats.get("anchored_queries")
                row["delta_path"] = g.last_stats.get("delta_path")      # anchored, or recount (join/race.py)
                row.update(changed_s=round(g.last_stats.get("delta_changed_s", 0), 5),
                           filter_s=round(g.last_stats.get("delta_filter_s", 0), 5))
            with _opening(path, counter) as g:
                s2, c, t2 = timed(lambda ev, q=q: g.count(q, cancel=ev, **opts), args.timeout)
            row.update(status=s1 if s1 != "ok" else s2, delta_s=round(t1, 5), recompute_s=round(t2, 5),
                       count_before=counts.get(name), count_after=c)
            if s1 == "ok":
                row.update(added=d["added"], removed=d["removed"])
            if s1 == s2 == "ok":
                row["speedup"] = float(f"{t2 / max(t1, 1e-9):.3g}")
                if counts.get(name) is not None:        # None: a recount before was cancelled
                    row["exact"] = counts[name] + d["added"] - d["removed"] == c
            counts[name] = c if s2 == "ok" else None
            rows.append(row)
            C.say(f"  {name}: delta {t1:.4f}s ({s1}), recompute {t2:.4f}s ({s2}), exact {row.get('exact')}")
    if kept is not None:
        kept.close()
        counter.close()
    compact_s = compacted_exact = None
    if args.compact:
        compact_s = compact(path)
        C.say(f"compacted in {compact_s:.2f}s")
        with sgsi.open(path) as g:
            after = {name: timed(lambda ev, q=q: g.count(q, cancel=ev, **opts), args.timeout) for name, q in queries}
        compacted_exact = all(after[name][1] == c for name, c in counts.items()
                              if c is not None and after[name][0] == "ok")
    write(args, rows, compact_s, compacted_exact, C.machine_at_end(start), n, n_base, len(queries))


def warm_kernels(path, work, stream, base, queries, opts, timeout):
    """Each query's delta after an insert and after a mixed batch, and its count, on a throwaway
    copy of the store: the GPU's kernels compiled (once a machine, then from CuPy's disk cache)
    before anything is timed."""
    t = time.perf_counter()
    copy = os.path.join(work, "warm.sgsi")
    shutil.copytree(path, copy)
    k = min(100, stream.num_rows)
    ins, dele = os.path.join(work, "warm_insert.parquet"), os.path.join(work, "warm_delete.parquet")
    with sgsi.open(copy) as g:
        for batch in (stream.slice(0, k), stream.slice(k, k)):
            pq.write_table(batch, ins)
            pq.write_table(base.slice(0, k), dele)
            since = g.version
            g.update(insert=ins, delete=dele if since > 1 else None)
            for _name, q in queries:
                timed(lambda ev, q=q: g.count_delta(q, since=since, cancel=ev, **opts), timeout)
                timed(lambda ev, q=q: g.count(q, cancel=ev, **opts), timeout)
    shutil.rmtree(copy)
    C.say(f"kernels warmed in {time.perf_counter() - t:.1f}s (deltas and counts on a copy, not timed)")


def write(args, rows, compact_s, compacted_exact, m, n, n_base, n_queries):
    stem = os.path.join(args.results, f"dynamic_{args.graph}_{args.device}{'_stream' if args.stream else ''}")
    C.write_csv(stem + ".csv", rows or [{}], FIELDS)
    lines = [f"# Batch-dynamic matching: {args.graph}, {args.device}\n",
             f"Built from {n_base:,} of {n:,} edges (90%, seed {args.seed}); the rest streamed in batches. "
             f"{n_queries} queries; timeout {args.timeout:g} s; memory budget {args.memory_budget or 'default'}.\n",
             C.machine_md(m),
             f"- command: `python bench/dynamic.py {shlex.join(sys.argv[1:])}`\n",
             "| batch | kind | +edges | -edges | apply s | delta s (median) | changed pairs s | filter s | "
             "recompute s (median) | speedup (median, min) | exact |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for (label, kind), group in _groups(rows):
        ok = [r for r in group if r.get("speedup") is not None]
        sp = [r["speedup"] for r in ok]
        first = group[0]
        lines.append(f"| {label} | {kind} | {first['inserted']:,} | {first['deleted']:,} | {first['apply_s']} | "
                     f"{_median([r['delta_s'] for r in ok])} | {_median([r['changed_s'] for r in ok])} | "
                     f"{_median([r['filter_s'] for r in ok])} | {_median([r['recompute_s'] for r in ok])} | "
                     f"{_median(sp)}x, {min(sp) if sp else '-'}x | "
                     f"{sum(r.get('exact') is True for r in group)}/{len(group)} |")
    lines.append("\nchanged pairs s, filter s: medians of the delta's parts outside its anchored joins "
                 "(the store's changed pairs; the candidate filter of each side).\n")
    where = ("in a Graph kept open: the deltas in the one that applied the batch, the recounts in a second "
             "one following the versions" if args.stream else "in a store opened for it")
    lines += [f"Per query (each timed {where}):\n",
              "| batch | kind | query | added | removed | delta s | recompute s | speedup | exact |",
              "|---|---|---|---:|---:|---:|---:|---:|---|"]
    names = {name: f"`{p}`" for name, p in pattern_queries(args)}
    for r in rows:
        q = names.get(r["query"], r["query"])
        lines.append(f"| {r['batch']} | {r['kind']} | {q} | {r.get('added', '-')} | {r.get('removed', '-')} | "
                     f"{r['delta_s']} | {r['recompute_s']} | {r.get('speedup', '-')}x | {r.get('exact', '-')} |")
    lines.append("")
    lines.append(f"Compaction: {compact_s:.2f} s; counts after it equal those before: {compacted_exact}.\n"
                 if compact_s is not None else "Compaction: not run (--no-compact).\n")
    C.write_text(stem + ".md", "\n".join(lines) + "\n")
    C.say(f"wrote {stem}.csv and .md")


def _groups(rows):
    out = {}
    for r in rows:
        out.setdefault((r["batch"], r["kind"]), []).append(r)
    return out.items()


def _median(xs):
    return f"{float(np.median(xs)):.4f}" if xs else "-"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", default="rmat", help="rmat, or a benchmark set with a data.graph (hprd, yeast)")
    C.add_walk_options(ap, edges=1e8, queries=5)
    ap.add_argument("--data", default=C.DATA_DIR, help="where generated graphs are kept")
    ap.add_argument("--sample", type=int, default=10, help="query files of a benchmark set")
    ap.add_argument("--names", nargs="+", default=None,
                    help="query files of the benchmark set to run (not --sample's draw), e.g. its heavy ones")
    ap.add_argument("--pattern", action="append", default=[],
                    help="a pattern to add to the queries (repeatable), e.g. a cycle of one edge label")
    ap.add_argument("--batches", type=int, nargs="+", default=[1000, 10000, 100000, 1000000])
    ap.add_argument("--mixed", type=int, nargs="*", default=[10000, 100000], help="mixed batches, half deletions")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--memory-budget", default=None)
    ap.add_argument("--build-budget", default=None, help="the build's memory budget (segment sizes)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds for each delta and each recount")
    ap.add_argument("--no-compact", dest="compact", action="store_false", help="skip the compaction at the end")
    ap.add_argument("--stream", action="store_true",
                    help="Graphs kept open: one applies each batch and runs the deltas, one follows and "
                         "recounts (warm caches); default: a fresh opening each")
    ap.add_argument("--no-warm", dest="warm", action="store_false",
                    help="time the GPU's first queries with its kernels' compiling (default: warmed on a copy)")
    ap.add_argument("--seed", type=int, default=44)
    ap.add_argument("--work", default=os.environ.get("TMPDIR", "/tmp"))
    ap.add_argument("--results", default=C.RESULTS_DIR)
    run(ap.parse_args(argv))


if __name__ == "__main__":
    main()
