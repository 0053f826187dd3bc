"""The ``sgsi`` command line: build, info, count, match, count-delta, match-delta, demo.

Every error a user can cause prints one line, ``sgsi: error: MESSAGE``, on
stderr and exits with status 1; an interrupt exits with 130. Results go to
stdout (``sgsi count`` prints the number of matches as its last line);
progress, timings and statistics go to stderr.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import textwrap
import threading
import time

from . import __version__

_DESCRIPTION = """\
sgsi finds every occurrence of a small labeled pattern graph in a large
labeled graph (subgraph isomorphism), out of core, on the CPU or a GPU.
Build a graph store from Parquet edge files once, then count or list the
matches of patterns written like Cypher:

    (a:Person)-[:KNOWS]->(b:Person)-[:WORKS_AT]->(c:Company), (a)-[:LIKES]->(c)

The same queries run from DuckDB SQL after `sgsi.register(con)`:
    SELECT * FROM match('social.sgsi', '(a)-[:KNOWS]->(b)');
"""

_EPILOG = """\
examples:
  sgsi demo                                        # a 20k-vertex example, end to end
  sgsi build --edges knows.parquet --vertices people.parquet --out social.sgsi
  sgsi info social.sgsi
  sgsi count social.sgsi '(a:Person)-[:KNOWS]->(b)-[:KNOWS]->(a)'
  sgsi match social.sgsi '(a)-[:KNOWS]->(b)' --output pairs.parquet --max-rows 1000

Run `sgsi COMMAND --help` for the options of a command.
"""

_PATTERN_HELP = """\
pattern language:
  (a:Person)-[:KNOWS]->(b)   a directed edge labeled KNOWS from a Person a to b
  (a)<-[:L]-(b)  (a)-[:L]-(b) an edge from b to a; an edge in either direction
  (a)-->(b)  (a)--(b)        an edge of any label, directed or either way
  ()                         an anonymous vertex: matched, not returned
  p1, p2                     comma-separated paths share the vertices they name
Named vertices are the output columns, in order of first appearance. A
path to a query file (pattern text, or the benchmark t/v/e format) works
in place of the pattern.
"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    pass


def _wrap(text):
    return textwrap.fill(text, 78)


def _say(msg=""):
    print(msg, file=sys.stderr, flush=True)


def _add_query_options(p, homomorphism=True, scale=True):
    p.add_argument("--device", choices=("cpu", "gpu", "auto"), default="auto",
                   help="where to run: cpu (NumPy), gpu (CuPy), or auto = the GPU when one is present "
                        "(default: %(default)s)")
    p.add_argument("--memory-budget", metavar="SIZE",
                   help="memory one join step may use on the device, e.g. 512MB or 2GB "
                        "(default: half the free GPU memory, or a quarter of RAM)")
    if homomorphism:
        p.add_argument("--homomorphism", action="store_true",
                       help="allow two pattern vertices to match the same data vertex "
                            "(default: injective matching, i.e. subgraph isomorphism)")
    if not scale:
        return
    p.add_argument("--workers", type=_positive, metavar="N",
                   help="shard the query over a local Dask cluster of N workers (processes on the CPU, one a "
                        "GPU on the GPU); pays off for queries of a second or more (pip install 'sgsi[dask]')")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="shard the query over the Dask cluster at ADDRESS (tcp://host:8786), whose workers "
                        "see the store at the same path")


def _parser():
    from .partition.pcsr import DEFAULT_THETA

    parser = argparse.ArgumentParser(
        prog="sgsi", description=_DESCRIPTION, epilog=_EPILOG, formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"sgsi {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    sub.required = True

    # -- build ----------------------------------------------------------------------
    p = sub.add_parser(
        "build", formatter_class=_Formatter, help="build a graph store from Parquet edge files",
        description=_wrap("Build a graph store (a directory) from Parquet edge files and optional vertex files, "
                          "or from a graph in the benchmark text format. The store is written to a temporary "
                          "directory and renamed into place only when complete."),
        epilog="""\
input columns:
  edge files    SRC and DST (integers or strings), optional LABEL (edge label)
  vertex files  ID, optional LABEL (vertex label); vertices on no edge are kept
Column names default to src, dst, label and id; rename them with the options.

examples:
  sgsi build --edges knows.parquet --edges likes.parquet --out social.sgsi
  sgsi build --edges 'edges/*.parquet' --vertices people.parquet --out social.sgsi
  sgsi build --edges e.parquet --src from --dst to --label type --out g.sgsi --undirected
  sgsi build --graph data.graph --out yeast.sgsi           # t/v/e text format
""")
    p.add_argument("--edges", action="append", metavar="FILE",
                   help="Parquet edge file or glob; repeat for several")
    p.add_argument("--vertices", action="append", metavar="FILE",
                   help="Parquet vertex file or glob (vertex labels); repeat for several")
    p.add_argument("--graph", metavar="FILE", help="a data graph in the benchmark t/v/e text format instead")
    p.add_argument("--out", required=True, metavar="DIR", help="the store to write, e.g. social.sgsi")
    p.add_argument("--src", default="src", help="edge source column (default: %(default)s)")
    p.add_argument("--dst", default="dst", help="edge destination column (default: %(default)s)")
    p.add_argument("--label", help="edge label column (default: 'label' when present)")
    p.add_argument("--id", default="id", help="vertex id column (default: %(default)s)")
    p.add_argument("--vertex-label", help="vertex label column (default: 'label' when present)")
    p.add_argument("--undirected", action="store_true", help="store every edge in both directions")
    p.add_argument("--lean", action="store_true",
                   help="store only what labelled, directed pattern edges need (about a third of the size "
                        "with several edge labels); patterns with unlabeled or undirected edges are refused")
    p.add_argument("--theta", type=int, default=DEFAULT_THETA, metavar="N",
                   help="pairs per PCSR group, 2-16 (default: %(default)s); 2 gives the smallest store, "
                        "larger ones fewer overflow lookups")
    p.add_argument("--memory-budget", metavar="SIZE",
                   help="device memory one join step may use, e.g. 2GB; sets segment sizes "
                        "(default: a quarter of RAM)")
    p.add_argument("--force", action="store_true", help="replace an existing store")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_cmd_build)

    # -- info -----------------------------------------------------------------------
    p = sub.add_parser(
        "info", formatter_class=_Formatter, help="describe a graph store",
        description=_wrap("Describe a graph store: vertices, edges, labels and their frequencies, partitions "
                          "and segments, file sizes, build parameters."),
        epilog="examples:\n  sgsi info social.sgsi\n  sgsi info social.sgsi --verify\n")
    p.add_argument("store", metavar="STORE", help="a graph store directory")
    p.add_argument("--verify", action="store_true", help="also check every file against its checksum")
    p.set_defaults(func=_cmd_info)

    # -- update / compact -------------------------------------------------------------
    p = sub.add_parser(
        "update", formatter_class=_Formatter, help="insert and delete edges as a new store version",
        description=_wrap("Apply one batch of edge insertions and deletions to a graph store as a new version, "
                          "written atomically beside the base files (a delta). Deletions apply before "
                          "insertions; inserting an edge that is there or deleting one that is not is counted, "
                          "not an error. Readers opened before keep their version."),
        epilog="""input columns: as for build (src, dst, optional label; vertex files id, optional label)

examples:
  sgsi update social.sgsi --insert new.parquet --delete gone.parquet
  sgsi update social.sgsi --insert 'day2/*.parquet' --vertices people2.parquet
""")
    p.add_argument("store", metavar="STORE", help="a graph store directory")
    p.add_argument("--insert", action="append", metavar="FILE", help="Parquet edge file or glob to insert")
    p.add_argument("--delete", action="append", metavar="FILE", help="Parquet edge file or glob to delete")
    p.add_argument("--vertices", action="append", metavar="FILE", help="Parquet vertex file: labels of new vertices")
    p.add_argument("--src", default="src", help="edge source column (default: %(default)s)")
    p.add_argument("--dst", default="dst", help="edge destination column (default: %(default)s)")
    p.add_argument("--label", help="edge label column (default: 'label' when present)")
    p.add_argument("--id", default="id", help="vertex id column (default: %(default)s)")
    p.add_argument("--vertex-label", help="vertex label column (default: 'label' when present)")
    p.set_defaults(func=_cmd_update)

    p = sub.add_parser(
        "compact", formatter_class=_Formatter, help="merge a store's deltas into new base files",
        description=_wrap("Rebuild a graph store's base files from its newest version, keeping vertex ids and "
                          "version numbers, and swap them in atomically; open readers go on with the files they "
                          "opened. Versions before the compaction can no longer be opened."),
        epilog="examples:\n  sgsi compact social.sgsi\n")
    p.add_argument("store", metavar="STORE", help="a graph store directory")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_cmd_compact)

    # -- count ----------------------------------------------------------------------
    p = sub.add_parser(
        "count", formatter_class=_Formatter, help="count the matches of a pattern",
        description=_wrap("Count the embeddings of a pattern (every automorphic copy counted). The count is the "
                          "last line of stdout; timings and statistics go to stderr."),
        epilog=_PATTERN_HELP + """
examples:
  sgsi count social.sgsi '(a:Person)-[:KNOWS]->(b:Person)-[:KNOWS]->(a)'
  sgsi count yeast.sgsi queries/query_dense_16_1.graph --device cpu
  sgsi count social.sgsi '(a)--(b)--(c)--(a)' --memory-budget 64MB
  sgsi count social.sgsi '(a)--(b)--(c)--(d)--(a)' --workers 4     # on 4 processes (Dask)
""")
    p.add_argument("store", metavar="STORE", help="a graph store directory")
    p.add_argument("pattern", metavar="PATTERN", help="a pattern, or a query file")
    _add_query_options(p)
    p.set_defaults(func=_cmd_count)

    # -- match ----------------------------------------------------------------------
    p = sub.add_parser(
        "match", formatter_class=_Formatter, help="write the matches of a pattern to Parquet",
        description=_wrap("Write every embedding of a pattern to a Parquet file: one row per embedding, one "
                          "column per named pattern vertex, holding the original vertex ids. Results stream to "
                          "disk in bounded memory; the file appears only when complete."),
        epilog=_PATTERN_HELP + """
examples:
  sgsi match social.sgsi '(a:Person)-[:KNOWS]->(b:Person)' --output knows.parquet
  sgsi match social.sgsi '(a)-[:KNOWS]->(b)-[:KNOWS]->(a)' --output mutual.parquet --max-rows 100
""")
    p.add_argument("store", metavar="STORE", help="a graph store directory")
    p.add_argument("pattern", metavar="PATTERN", help="a pattern, or a query file")
    p.add_argument("--output", "-o", required=True, metavar="FILE", help="the Parquet file to write")
    p.add_argument("--max-rows", type=_non_negative, metavar="N", help="stop after N rows")
    p.add_argument("--limit", type=_non_negative, help=argparse.SUPPRESS)     # deprecated: --max-rows
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    _add_query_options(p)
    p.set_defaults(func=_cmd_match)

    # -- incremental matches ----------------------------------------------------------
    since_help = "the store version to compare with: the delta is from it to the latest version"
    p = sub.add_parser(
        "count-delta", formatter_class=_Formatter, help="count the matches gained and lost since a version",
        description=_wrap("Count the embeddings of a pattern gained and lost from version --since of a store to its "
                          "latest version: an embedding is gained when every pattern edge holds now and one did "
                          "not then. Prints 'added N' and 'removed M' as the last two lines of stdout."),
        epilog=_PATTERN_HELP + """
examples:
  sgsi count-delta social.sgsi '(a)-[:KNOWS]->(b)-[:KNOWS]->(a)' --since 3
""")
    p.add_argument("store", metavar="STORE", help="a graph store directory")
    p.add_argument("pattern", metavar="PATTERN", help="a pattern, or a query file")
    p.add_argument("--since", type=_non_negative, required=True, metavar="VERSION", help=since_help)
    _add_query_options(p, scale=False)
    p.set_defaults(func=_cmd_count_delta)

    p = sub.add_parser(
        "match-delta", formatter_class=_Formatter, help="write the matches gained and lost since a version",
        description=_wrap("Write the embeddings of a pattern gained and lost from version --since of a store to "
                          "its latest version to a Parquet file: one column per named pattern vertex (original "
                          "ids) and an int8 column sign, +1 for a match gained and -1 for one lost."),
        epilog=_PATTERN_HELP + """
examples:
  sgsi match-delta social.sgsi '(a)-[:KNOWS]->(b)-[:KNOWS]->(a)' --since 3 --output mutual-delta.parquet
""")
    p.add_argument("store", metavar="STORE", help="a graph store directory")
    p.add_argument("pattern", metavar="PATTERN", help="a pattern, or a query file")
    p.add_argument("--since", type=_non_negative, required=True, metavar="VERSION", help=since_help)
    p.add_argument("--output", "-o", required=True, metavar="FILE", help="the Parquet file to write")
    p.add_argument("--max-rows", type=_non_negative, metavar="N", help="stop after N rows")
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    _add_query_options(p, scale=False)
    p.set_defaults(func=_cmd_match_delta)

    # -- demo -----------------------------------------------------------------------
    p = sub.add_parser(
        "demo", formatter_class=_Formatter, help="run a small example end to end",
        description=_wrap("Generate a small social graph (20,000 vertices, ~110,000 edges; no download), build a "
                          "store, and run pattern queries through DuckDB SQL. Everything is made in a temporary "
                          "directory and removed afterwards."),
        epilog="examples:\n  sgsi demo\n  sgsi demo --device cpu\n")
    p.add_argument("--device", choices=("cpu", "gpu", "auto"), default="auto",
                   help="where to run the queries (default: %(default)s)")
    p.add_argument("--keep", action="store_true", help="keep the generated files and print where they are")
    p.set_defaults(func=_cmd_demo)
    return parser


def _positive(text):
    n = _non_negative(text)
    if n == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def _non_negative(text):
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {n}")
    return n


# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------


def _cmd_build(args):
    from .errors import InputError
    from .graph import build
    from .storage.build import stderr_progress

    if args.edges and args.graph:
        raise InputError("give --edges (Parquet) or --graph (text format), not both")
    if not args.edges and not args.graph:
        raise InputError("nothing to build from: give --edges FILE (Parquet) or --graph FILE (t/v/e text format)")
    if args.graph and args.vertices:
        raise InputError("--vertices goes with --edges; a --graph file holds its own vertex labels")
    t0 = time.perf_counter()
    g = build(args.out, edges=args.edges, vertices=args.vertices, graph=args.graph, src=args.src, dst=args.dst,
              label=args.label, id=args.id, vertex_label=args.vertex_label, undirected=args.undirected,
              lean=args.lean, theta=args.theta, memory_budget=args.memory_budget, force=args.force,
              progress=None if args.quiet else stderr_progress)
    total = sum(f["bytes"] for f in g.store.manifest["files"].values())
    print(f"built {args.out}: {g.store.n_vertices:,} vertices, {g.store.n_edges:,} edges, "
          f"{_size(total)} in {time.perf_counter() - t0:.1f} s")
    g.close()
    return 0


def _cmd_update(args):
    from .storage.update import update_store

    r = update_store(args.store, args.insert, args.delete, args.vertices, src=args.src, dst=args.dst,
                     label=args.label, id=args.id, vertex_label=args.vertex_label)
    print(f"{args.store}: version {r['version']}: +{r['inserted']:,} -{r['deleted']:,} edges "
          f"({r['already_present']:,} already present, {r['absent']:,} absent), {r['new_vertices']:,} new vertices; "
          f"{r['vertices']:,} vertices, {r['edges']:,} edges in {r['seconds']:.2f} s")
    return 0


def _cmd_compact(args):
    from .storage.build import stderr_progress
    from .storage.compact import compact_store

    r = compact_store(args.store, progress=None if args.quiet else stderr_progress)
    what = "compacted" if r["compacted"] else "nothing to compact"
    print(f"{args.store}: version {r['version']}: {what} in {r['seconds']:.1f} s")
    return 0


def _cmd_info(args):
    from .storage.store import Store, verify_files

    if args.verify:
        verify_files(args.store)     # first, so that a damaged file is named by its checksum
    store = Store(args.store)
    if args.verify:
        store.verify()               # the deltas' files too
    m = store.manifest
    out = []
    out.append(f"store          {os.path.abspath(args.store)}")
    out.append(f"format         version {m['version']}, created {m.get('created', '?')}")
    if len(store.versions) > 1:
        out.append(f"store version  {store.version} (base files: version {store.base_version}, "
                   f"{store.version - store.base_version} deltas after them)")
    out.append(f"vertices       {m['vertices']:,}")
    direction = "undirected (both directions stored)" if m["undirected"] else "directed"
    out.append(f"edges          {m['edges']:,} {direction}, from {m.get('input_rows', 0):,} input rows")
    el = m["edge_labels"]
    if el["present"]:
        out += _label_lines("edge labels", el["values"], el["frequency"])
    else:
        out.append("edge labels    none")
    vl = m["vertex_labels"]
    out += _label_lines("vertex labels", vl["values"], vl["frequency"], unlabeled=vl.get("unlabeled", 0))
    parts = m["partitions"]
    stored = [p for p in parts.values() if "alias" not in p]
    segments = sum(p["segments"][1] for p in stored)
    lean = " (lean: labelled, directed edges only)" if m["parameters"].get("lean") else ""
    out.append(f"partitions     {len(stored)} stored ({len(parts) - len(stored)} aliases), {segments:,} segments{lean}")
    deg = [d["max"] for d in m.get("degree", {}).values()]
    if deg:
        out.append(f"max degree     {max(deg):,}")
    from .join.query import memory_floor
    floor = memory_floor(store)
    out.append(f"memory floor   {_size(floor)} ({floor:,} bytes): the least --memory-budget a query runs at")
    out.append("parameters")
    for k, v in m["parameters"].items():
        if isinstance(v, bool):
            shown = "yes" if v else "no"
        else:
            shown = f"{_size(v)} ({v:,} bytes)" if k == "memory_budget" else (f"{v:,}" if isinstance(v, int) else v)
        out.append(f"  {k:<26} {shown}")
    files = m["files"]
    out.append("files")
    width = max((len(n) for n in files), default=0)
    for name, info in sorted(files.items()):
        out.append(f"  {name:<{width}}  {info['bytes']:>14,} bytes")
    total = sum(f["bytes"] for f in files.values())
    out.append(f"  {'total':<{width}}  {total:>14,} bytes ({_size(total)})")
    if m.get("sources"):
        out.append("sources")
        out += [f"  {s}" for s in m["sources"]]
    print("\n".join(out))
    if args.verify:
        print(f"checksums      all {len(files)} files OK")
    store.close()
    return 0


def _label_lines(title, values, freqs, top=10, unlabeled=0):
    pairs = sorted(zip(values, freqs), key=lambda x: (-x[1], str(x[0])))
    head = f"{title:<14} {len(pairs):,}"
    if unlabeled:
        head += f" (+ {unlabeled:,} unlabeled vertices)"
    lines = [head]
    width = max((len(str(v)) for v, _ in pairs[:top]), default=0)
    for v, f in pairs[:top]:
        lines.append(f"  {str(v):<{width}}  {f:>12,}")
    if len(pairs) > top:
        rest = sum(f for _, f in pairs[top:])
        lines.append(f"  ... {len(pairs) - top:,} more labels with {rest:,} in all")
    return lines


def _progress():
    """Progress lines of a long query on stderr where it is a terminal (not in pipes or logs)."""
    return sys.stderr.isatty()


def _cmd_count(args):
    from .graph import open as open_graph

    with open_graph(args.store) as g:
        t0 = time.perf_counter()
        n = g.count(args.pattern, device=args.device, memory_budget=args.memory_budget,
                    homomorphism=args.homomorphism, progress=_progress(), workers=args.workers,
                    scheduler=args.scheduler)
        dt = time.perf_counter() - t0
        _say(f"sgsi: {_stats_line(g.last_stats)}, {dt:.3f} s")
    print(n)
    return 0


def _cmd_match(args):
    from .errors import InputError
    from .graph import open as open_graph
    from .join.query import with_columns

    max_rows = args.max_rows
    if args.limit is not None:
        if max_rows is not None:
            raise InputError("give --max-rows only (--limit is its deprecated name)")
        _say("sgsi: --limit is deprecated; use --max-rows")
        max_rows = args.limit
    out = args.output
    _check_output(out, args.force)
    with open_graph(args.store) as g:
        t0 = time.perf_counter()
        pattern = with_columns(args.pattern, "there are no columns to write: name one, e.g. (a), or use sgsi count")
        reader, failure = g._match(pattern, device=args.device, memory_budget=args.memory_budget,
                                   injective=not args.homomorphism, limit=max_rows, progress=_progress(),
                                   workers=args.workers, scheduler=args.scheduler)
        rows = _write(reader, failure, out)
        dt = time.perf_counter() - t0
        _say(f"sgsi: {_stats_line(g.last_stats)}, {dt:.3f} s")
    print(f"{rows} rows written to {out}")
    return 0


def _check_output(out, force):
    from .errors import InputError

    if os.path.exists(out) and not force:
        raise InputError(f"output file exists: {out} (use --force to replace it)")
    if os.path.isdir(out):
        raise InputError(f"output path is a directory: {out}")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise InputError(f"output directory does not exist: {parent}")


def _write(reader, failure, out):
    """Write ``reader`` to the Parquet file ``out``; its number of rows. The engine's error is raised
    with its type, a full disk as one line."""
    from .errors import SgsiError, os_error_behind
    from .join.query import reraise_stream_error
    from .results import write_parquet

    try:
        return write_parquet(reader, out)
    except Exception as e:
        reraise_stream_error(failure, e)
        disk = os_error_behind(e)
        if disk is not None and disk.errno:
            raise SgsiError(f"writing {out} failed: {os.strerror(disk.errno)} (nothing was written)") from None
        raise


def _cmd_count_delta(args):
    from .graph import open as open_graph

    with open_graph(args.store) as g:
        t0 = time.perf_counter()
        n = g.count_delta(args.pattern, since=args.since, device=args.device, memory_budget=args.memory_budget,
                          homomorphism=args.homomorphism, progress=_progress())
        _say(f"sgsi: {_stats_line(g.last_stats)}, {time.perf_counter() - t0:.3f} s")
    print(f"added {n['added']}")
    print(f"removed {n['removed']}")
    return 0


def _cmd_match_delta(args):
    from .graph import open as open_graph

    _check_output(args.output, args.force)
    with open_graph(args.store) as g:
        t0 = time.perf_counter()
        reader, failure = g._match_delta(args.pattern, args.since, device=args.device,
                                         memory_budget=args.memory_budget, injective=not args.homomorphism,
                                         limit=args.max_rows, progress=_progress())
        rows = _write(reader, failure, args.output)
        _say(f"sgsi: {_stats_line(g.last_stats)}, {time.perf_counter() - t0:.3f} s")
    print(f"{rows} rows written to {args.output}")
    return 0


def _cmd_demo(args):
    from .demo import run_demo

    return run_demo(device=args.device, keep=args.keep)


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _size(n):
    from .budget import format_size
    return format_size(n)


def _stats_line(stats):
    if not stats:
        return "done"
    parts = [f"device {stats.get('device', '?')}"]
    for key in ("tasks", "anchored_queries", "chunks", "steps", "segments"):
        if key in stats:
            parts.append(f"{key} {stats[key]:,}")
    if "segment_bytes" in stats:
        parts.append(f"segment bytes read {_size(stats['segment_bytes'])}")
    if stats.get("h2d_bytes"):
        seg = stats.get("h2d_segment_bytes", 0)
        rate = seg / stats["h2d_seconds"] / 1e9 if stats.get("h2d_seconds") else 0.0
        parts.append(f"copied to the GPU {_size(stats['h2d_bytes'])}"
                     + (f" (segments {_size(seg)} at {rate:.1f} GB/s)" if rate else ""))
    if stats.get("device_peak_bytes"):
        parts.append(f"device memory peak {_size(stats['device_peak_bytes'])}")
    return ", ".join(parts)


def _one_line(text):
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return lines[0] if lines else "unknown error"


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so that cleanup runs as for Ctrl-C."""


class _Signals:
    """Ctrl-C and SIGTERM while a command runs.

    Both raise in the main thread, so that every ``finally`` and cleanup
    runs (a build removes its temporary directory, ``match`` its partial
    output file). Each records that it came: DuckDB turns a Ctrl-C during
    one of its queries into an error of its own ("Query interrupted"), and
    an error after a signal is reported as the interruption it is. Handlers
    are installed only in the main thread and only over the defaults, so a
    command started with SIGINT ignored (``sgsi build ... &`` in a script)
    keeps ignoring it.
    """

    def __init__(self):
        self.interrupted = False
        self.terminated = False
        self._saved = {}

    def _on_int(self, signum, frame):
        self.interrupted = True
        raise KeyboardInterrupt

    def _on_term(self, signum, frame):
        self.terminated = True
        raise _Terminated

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig, default, handler in ((signal.SIGINT, signal.default_int_handler, self._on_int),
                                      (signal.SIGTERM, signal.SIG_DFL, self._on_term)):
            try:
                if signal.getsignal(sig) is default:
                    self._saved[sig] = signal.signal(sig, handler)
            except (ValueError, OSError):   # pragma: no cover - no signals here
                pass
        return self

    def __exit__(self, *exc):
        for sig, old in self._saved.items():
            signal.signal(sig, old)
        self._saved.clear()
        return False


def main(argv=None):
    """Run the command line; returns the exit status (0 ok, 1 error, 130 interrupted, 143 terminated)."""
    parser = _parser()
    args = parser.parse_args(argv)
    with _Signals() as signals:
        try:
            return _run(args, signals)
        except KeyboardInterrupt:
            pass
        except _Terminated:
            pass
        except BaseException:
            if not (signals.interrupted or signals.terminated):
                raise
        # An error that follows a signal is the interruption (e.g. DuckDB's "Query interrupted").
        if signals.terminated:
            _say("sgsi: terminated")
            return 143
        _say("sgsi: interrupted")
        return 130


def _run(args, signals):
    try:
        return args.func(args) or 0
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, _Terminated)) or signals.interrupted or signals.terminated:
            raise
        return _report(e)


def _report(e):
    """Print one line for an error a user can cause and return the exit status; re-raise others."""
    import duckdb

    from .errors import SgsiError, os_error_behind
    if not isinstance(e, (SgsiError, duckdb.Error, MemoryError)):
        e = os_error_behind(e) or e       # a disk-full error hidden by the writer's failing cleanup
    if isinstance(e, SgsiError):
        e.interface = "cli"               # its options as the command line spells them (--force)
    if isinstance(e, (SgsiError, duckdb.Error)):
        _say(f"sgsi: error: {_one_line(e)}")
    elif isinstance(e, BrokenPipeError):
        # the reader of our output went away (sgsi info | head): not an error
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - kept open until exit
        except OSError:
            pass
        return 0
    elif isinstance(e, MemoryError):
        _say("sgsi: error: out of memory; give a smaller --memory-budget")
    elif isinstance(e, OSError):
        where = f": {e.filename}" if e.filename else ""
        what = e.strerror or (os.strerror(e.errno) if e.errno else _one_line(e))
        _say(f"sgsi: error: {what}{where}")
    else:
        raise e
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
