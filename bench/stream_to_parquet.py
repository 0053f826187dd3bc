"""Bounded memory: a result far larger than RAM streams to Parquet through match().

Generates (or reuses) an R-MAT graph with :mod:`gen`, builds (or reopens)
its store, counts a pattern with very many matches (``Graph.count``), then
writes every match to Parquet in a separate process, for each memory budget
and each way in:

- ``cli``: ``python -m sgsi match STORE PATTERN --output FILE --memory-budget B``;
- ``api``: ``Graph.match(pattern, memory_budget=B)`` read batch by batch into a
  ``pyarrow.parquet.ParquetWriter`` (one ``write_batch`` per batch);
- ``drain`` (not in the default ``--modes``): the same batches read and dropped, no
  Parquet: the engine's own memory, without the writer's.

The process is started from a small launcher (so that its peak RSS does not
inherit this script's) which caps its address space with ``RLIMIT_AS`` at
``--ram-cap`` (CPU runs; a GPU process maps far more address space than it
uses, so there the cap is only checked against the measured peak) and
reports its exact peak RSS (``ru_maxrss`` from ``wait4``). While it runs its
RSS is sampled from ``/proc`` every ``--sample`` seconds, to show whether
memory grows with the output. The Parquet file's row count (from its
metadata) must equal the count, and the peak RSS must stay under
``--ram-cap``, or the script exits non-zero. The Parquet output is deleted
after measuring (``--keep`` keeps it).

    python bench/stream_to_parquet.py [--edges 1e5] [--pattern '(a)-->(b)-->(c)-->(d)']
        [--budget 256MB[,1GB..]] [--ram-cap 2GB] [--device cpu] [--modes cli,api] [--out-dir /tmp]

The default (1.18 billion rows of 4 int64 columns: 35 GiB as Arrow, more
than the 23.5 GiB of RAM of the 2-core machine it was made on) takes about
two minutes there, most of it Parquet encoding (``--modes drain`` alone:
18 s). Bigger: ``--edges 1e7 --pattern '(a)-->(b)-->(c)'`` has 8.3 billion
matches (185 GiB as Arrow, more than the 128 GiB of the one-GPU H200 host),
e.g. ``--device gpu --budget 4GB --ram-cap 16GB --modes cli`` (no
``RLIMIT_AS`` on a GPU run: the cap is checked against the peak only).

Results: ``bench/results/stream_to_parquet.md`` and ``.csv``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

C.ensure_importable()

#: Run by ``python -c`` with ``CAP REPORT CMD...``: fork, cap the child's address space, exec CMD,
#: write the child's exit code and exact peak RSS (wait4's ru_maxrss) as JSON to REPORT. The child
#: is forked from this small process, so its ru_maxrss does not start at this script's RSS.
LAUNCHER = r"""
import json, os, resource, sys
cap, report, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
pid = os.fork()
if pid == 0:
    try:
        if cap > 0:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        os.execvp(cmd[0], cmd)
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
with open(report, "w") as f:
    json.dump({"pid": pid, "rc": os.waitstatus_to_exitcode(status), "maxrss_kb": ru.ru_maxrss,
               "user_s": ru.ru_utime, "sys_s": ru.ru_stime}, f)
sys.exit(0)
"""


def api_child(store, pattern, out, budget, device):
    """The ``api`` way: Graph.match() batch by batch into a ParquetWriter (runs in the child)."""
    import pyarrow.parquet as pq

    import sgsi
    t = time.perf_counter()
    rows = batches = 0
    with sgsi.open(store) as g:
        reader = g.match(pattern, device=device, memory_budget=budget)
        if out == "-":          # drain: read and drop every batch (the engine's memory alone)
            for batch in reader:
                rows += batch.num_rows
                batches += 1
        else:
            with pq.ParquetWriter(out, reader.schema, compression="snappy") as w:
                for batch in reader:
                    w.write_batch(batch)
                    rows += batch.num_rows
                    batches += 1
        stats = g.last_stats
    print(json.dumps({"rows": rows, "batches": batches, "seconds": time.perf_counter() - t,
                      "stats": {k: v for k, v in stats.items() if isinstance(v, (int, float, str))}}))


def proc_status(pid):
    """VmRSS, VmHWM and VmPeak of ``pid`` in bytes (empty when it is gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM", "VmPeak"):
                    out[k] = int(v.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return out


def child_pid(launcher_pid):
    try:
        with open(f"/proc/{launcher_pid}/task/{launcher_pid}/children") as f:
            kids = f.read().split()
        return int(kids[0]) if kids else None
    except (OSError, ValueError):
        return None


def run_capped(cmd, cap, sample_s, timeout, env):
    """Run ``cmd`` under the launcher: (rc, stdout, stderr, wall_s, report, samples).

    ``samples`` are (seconds, VmRSS, VmHWM, VmPeak) of the measured process.
    """
    fd, report = tempfile.mkstemp(prefix="stream_report_", suffix=".json")
    os.close(fd)
    samples, done = [], threading.Event()
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(cap), report] + cmd, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)

    def sample():
        pid = None
        while not done.is_set():
            pid = pid or child_pid(p.pid)
            if pid:
                s = proc_status(pid)
                if s:
                    samples.append((time.perf_counter() - t0, s.get("VmRSS", 0), s.get("VmHWM", 0),
                                    s.get("VmPeak", 0)))
            done.wait(sample_s)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)      # the launcher's own session: it and the measured process
        out, err = p.communicate()
        err += f"\n[stream_to_parquet] killed after {timeout} s"
    wall = time.perf_counter() - t0
    done.set()
    th.join()
    try:
        with open(report) as f:
            rep = json.load(f)
    except (OSError, ValueError):
        rep = {"rc": p.returncode if p.returncode else -1, "maxrss_kb": 0}
    finally:
        os.remove(report)
    return rep["rc"], out, err, wall, rep, samples


def rss_profile(samples, parts=4):
    """Highest VmRSS in each of ``parts`` equal spans of the run (bytes), to see growth over time."""
    if not samples:
        return []
    end = samples[-1][0]
    out = []
    for i in range(parts):
        lo, hi = end * i / parts, end * (i + 1) / parts
        xs = [s[1] for s in samples if lo <= s[0] <= hi]
        out.append(max(xs) if xs else 0)
    return out


def mib(n):
    return n / 2**20


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--edges", type=float, default=1e5)
    p.add_argument("--scale", type=int, default=None)
    p.add_argument("--shape", default="small")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--pattern", default="(a)-->(b)-->(c)-->(d)",
                   help="a pattern with very many matches (default: the unlabeled directed 4-vertex path)")
    p.add_argument("--budget", default="256MB", help="sgsi memory budget(s), comma-separated, e.g. 64MB,256MB,1GB")
    p.add_argument("--ram-cap", default="2GB", help="address-space cap of the matching process (CPU), and the "
                   "bound its peak RSS must stay under")
    p.add_argument("--no-rlimit", action="store_true", help="only measure: no RLIMIT_AS on the process")
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu", "auto"))
    p.add_argument("--modes", default="cli,api", help="comma-separated: cli, api, drain (default cli,api)")
    p.add_argument("--min-ratio", type=float, default=2.0,
                   help="warn when the result's Arrow size is under this many times --ram-cap")
    p.add_argument("--sample", type=float, default=0.2, help="RSS sampling interval (s)")
    p.add_argument("--timeout", type=float, default=3600, help="per-run timeout (s)")
    p.add_argument("--out-dir", default=tempfile.gettempdir(), help="where the Parquet output goes")
    p.add_argument("--keep", action="store_true", help="keep the Parquet outputs")
    p.add_argument("--rebuild", action="store_true", help="regenerate the graph and rebuild the store")
    p.add_argument("--data", default=os.path.join(C.DATA_DIR, "stream"))
    p.add_argument("--results", default=C.RESULTS_DIR)
    p.add_argument("--api-child", nargs=5, metavar=("STORE", "PATTERN", "OUT", "BUDGET", "DEVICE"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.api_child:
        api_child(*args.api_child)
        return 0

    import pyarrow.parquet as pq

    import gen
    import sgsi
    from sgsi.budget import format_size, parse_size
    from sgsi.results import ROW_GROUP_ROWS

    m0 = C.machine()      # the commit of the code this run loads
    n_edges = int(args.edges)
    budgets = [b.strip() for b in args.budget.split(",") if b.strip()]
    for b in budgets:
        parse_size(b)
    ram_cap = parse_size(args.ram_cap)
    rlimit = 0 if (args.no_rlimit or args.device != "cpu") else ram_cap
    modes = [x for x in args.modes.split(",") if x]
    if not modes or set(modes) - {"cli", "api", "drain"}:
        raise SystemExit("--modes: comma-separated cli, api, drain")

    gdir = os.path.join(args.data, f"rmat_{args.shape}_{n_edges}_s{args.seed}" +
                        (f"_sc{args.scale}" if args.scale else ""))
    meta_path, store = os.path.join(gdir, "meta.json"), os.path.join(gdir, "g.sgsi")
    if args.rebuild or not os.path.exists(meta_path):
        C.say(f"generating {n_edges:,} R-MAT edges ({args.shape}) into {gdir}")
        meta = gen.rmat(gdir, n_edges, scale=args.scale, shape=args.shape, seed=args.seed,
                        device="cpu" if args.device == "cpu" else "auto")
    else:
        with open(meta_path) as f:
            meta = json.load(f)
    build_s = None
    g = None
    if not args.rebuild:
        try:
            g = sgsi.open(store)
            C.say(f"reusing {g}")
        except sgsi.SgsiError:
            g = None
    if g is None:
        t = time.perf_counter()
        g = sgsi.build(store, edges=os.path.join(gdir, "edges.parquet"),
                       vertices=os.path.join(gdir, "vertices.parquet"), force=True)
        build_s = time.perf_counter() - t
        C.say(f"{g} built in {build_s:.1f} s")
    n_store_edges = g.store.n_edges
    graph_desc = str(g).split(": ", 1)[-1].rstrip(")")

    cols = sgsi.parse_pattern(args.pattern).output_names
    id_bytes = g.store.vertex_id_type.bit_width // 8
    t = time.perf_counter()
    count = g.count(args.pattern, device=args.device, memory_budget=budgets[0])
    count_s = time.perf_counter() - t
    g.close()
    arrow_bytes = count * len(cols) * id_bytes
    C.say(f"count {count:,} in {count_s:.1f} s: {len(cols)} columns of {id_bytes} bytes = "
          f"{format_size(arrow_bytes)} as Arrow; RAM {format_size(C.ram_bytes())}, cap {format_size(ram_cap)}")
    warnings = []
    if arrow_bytes < args.min_ratio * ram_cap:
        warnings.append(f"the result ({format_size(arrow_bytes)} as Arrow) is under {args.min_ratio:g} x the "
                        f"RAM cap ({format_size(ram_cap)}): this run does not show much")

    env = dict(os.environ)
    env["PYTHONPATH"] = C.REPO_DIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out_dir = tempfile.mkdtemp(prefix="sgsi_stream_", dir=args.out_dir)
    rows_out, failures = [], []
    try:
        for budget in budgets:
            for mode in modes:
                out = os.path.join(out_dir, f"{mode}_{budget}.parquet")
                if mode == "cli":
                    cmd = [sys.executable, "-m", "sgsi", "match", store, args.pattern, "--output", out,
                           "--memory-budget", budget, "--device", args.device]
                else:
                    cmd = [sys.executable, os.path.abspath(__file__), "--api-child", store, args.pattern,
                           "-" if mode == "drain" else out, budget, args.device]
                C.say(f"[{mode} budget {budget}] {' '.join(cmd[1:])}")
                rc, so, se, wall, rep, samples = run_capped(cmd, rlimit, args.sample, args.timeout, env)
                peak = rep.get("maxrss_kb", 0) * 1024
                peak_sampled = max((s[2] for s in samples), default=0)
                vmpeak = max((s[3] for s in samples), default=0)
                prof = rss_profile(samples)
                row = {"mode": mode, "budget": budget, "budget_bytes": parse_size(budget), "rc": rc,
                       "wall_s": round(wall, 2), "cpu_s": round(rep.get("user_s", 0) + rep.get("sys_s", 0), 2),
                       "peak_rss_bytes": peak, "peak_rss_sampled_bytes": peak_sampled, "vm_peak_bytes": vmpeak,
                       "rss_quarters_mib": " ".join(f"{mib(x):.0f}" for x in prof), "samples": len(samples)}
                if rc != 0:
                    row["error"] = (se.strip().splitlines() or ["?"])[-1][:300]
                    failures.append(f"{mode} budget {budget}: exit code {rc}: {row['error']}")
                    C.say(se[-3000:])
                    rows_out.append(row)
                    continue
                if mode == "cli":
                    said = [ln for ln in so.splitlines() if "rows written" in ln]
                    reported = int(said[-1].split()[0]) if said else None
                    row["engine"] = next((ln for ln in se.splitlines() if ln.startswith("sgsi:")), "")
                else:
                    info = json.loads(so.strip().splitlines()[-1])
                    reported = info["rows"]
                    row["engine"] = f"batches {info['batches']:,}, " + ", ".join(
                        f"{k} {v:,}" for k, v in info["stats"].items() if k != "device" and isinstance(v, int))
                if mode == "drain":
                    n_rows, groups, size = reported, None, None
                else:
                    md_ = pq.ParquetFile(out).metadata
                    n_rows, groups, size = md_.num_rows, md_.num_row_groups, os.path.getsize(out)
                    if not args.keep:
                        os.remove(out)
                # last quarter's max - second quarter's (startup, not growth, in runs of a few seconds)
                growth = prof[-1] - prof[1] if len(prof) == 4 and wall >= 10 else None
                row.update({"rows": n_rows, "reported_rows": reported, "row_groups": groups, "parquet_bytes": size,
                            "rows_per_s": round(n_rows / wall) if wall else None,
                            "arrow_over_peak": round(arrow_bytes / peak, 1) if peak else None,
                            "rss_growth_2nd_half_bytes": growth,
                            "growth_per_row_group_bytes": round(2 * growth / groups) if groups and growth else None,
                            "ok_count": n_rows == count and reported == n_rows, "ok_cap": 0 < peak <= ram_cap})
                if not row["ok_count"]:
                    failures.append(f"{mode} budget {budget}: ROW COUNT MISMATCH: {'Parquet has' if groups is not None else 'read'} "
                                    f"{n_rows:,} rows, the writer said {reported}, count() says {count:,}")
                if not row["ok_cap"]:
                    failures.append(f"{mode} budget {budget}: peak RSS {format_size(peak)} over the cap "
                                    f"{format_size(ram_cap)}")
                C.say(f"[{mode} budget {budget}] {n_rows:,} rows, "
                      f"{format_size(size) if size is not None else 'no'} Parquet, "
                      f"{wall:.1f} s, peak RSS {format_size(peak)} (sampled {format_size(peak_sampled)}, "
                      f"VmPeak {format_size(vmpeak)}), RSS by quarter (MiB) {row['rss_quarters_mib']}")
                rows_out.append(row)
    finally:
        if not args.keep:
            shutil.rmtree(out_dir, ignore_errors=True)

    m = C.machine_at_end(m0)
    common = {"date": m["date"], "commit": m["commit"], "device": args.device, "graph_edges": n_edges,
              "store_edges": n_store_edges, "scale": meta["scale"], "pattern": args.pattern,
              "columns": len(cols), "count": count, "arrow_bytes": arrow_bytes, "ram_cap_bytes": ram_cap,
              "rlimit_as_bytes": rlimit}
    for r in rows_out:
        r.update(common)
    fields = ["date", "commit", "device", "graph_edges", "store_edges", "scale", "pattern", "columns", "count",
              "arrow_bytes", "ram_cap_bytes", "rlimit_as_bytes", "mode", "budget", "budget_bytes", "rc", "rows",
              "reported_rows", "row_groups", "parquet_bytes", "wall_s", "cpu_s", "rows_per_s", "peak_rss_bytes",
              "peak_rss_sampled_bytes", "vm_peak_bytes", "arrow_over_peak", "rss_quarters_mib",
              "rss_growth_2nd_half_bytes", "growth_per_row_group_bytes", "samples",
              "ok_count", "ok_cap", "engine", "error"]
    C.write_csv(os.path.join(args.results, "stream_to_parquet.csv"), rows_out, fields)

    def fmt_row(r):
        if r["rc"] != 0:
            return f"| {r['mode']} | {r['budget']} | failed (exit {r['rc']}): {r.get('error', '')} |" + " |" * 9
        size = format_size(r["parquet_bytes"]) if r["parquet_bytes"] is not None else "(none)"
        per_group = f"{r['growth_per_row_group_bytes'] / 1024:.1f}" if r["growth_per_row_group_bytes"] else "-"
        growth = r["rss_growth_2nd_half_bytes"]
        growth = f"{mib(growth):.0f}" if growth is not None else "-"
        return (f"| {r['mode']} | {r['budget']} | {r['rows']:,} | {'yes' if r['ok_count'] else '**NO**'} | "
                f"{size} | {r['row_groups'] if r['row_groups'] is not None else '-'} | {r['wall_s']:.1f} | "
                f"{mib(r['peak_rss_bytes']):,.0f} | {r['rss_quarters_mib']} | {growth} | {per_group} | "
                f"{r['arrow_over_peak']:g}x |")

    table = "\n".join(fmt_row(r) for r in rows_out)
    engines = "\n".join(f"- {r['mode']} {r['budget']}: {r.get('engine', '')}; row groups {r.get('row_groups')}; "
                        f"VmPeak {format_size(r['vm_peak_bytes'])}; {r['samples']} RSS samples"
                        for r in rows_out if r["rc"] == 0)
    cmdline = (f"python bench/stream_to_parquet.py --edges {n_edges:g} --pattern '{args.pattern}' "
               f"--budget {args.budget} --ram-cap {args.ram_cap} --device {args.device} --modes {args.modes}")
    verdict = ("**FAILED**:\n" + "\n".join(f"- {x}" for x in failures)) if failures else (
        f"Every run wrote all {count:,} rows (Parquet metadata = `Graph.count`) with peak RSS under the "
        f"{format_size(ram_cap)} cap.")
    warn_txt = ("\n".join(f"> warning: {w}" for w in warnings) + "\n") if warnings else ""
    md = f"""# Bounded memory: streaming a result larger than RAM to Parquet

`{cmdline}`

{C.machine_md(m)}
## Setup

- graph: R-MAT ({args.shape} shape) scale {meta['scale']}, {n_edges:,} edge rows → {graph_desc}
  {'(store built in ' + format(build_s, '.1f') + ' s)' if build_s is not None else '(store reused)'}
- pattern `{args.pattern}`: **{count:,} matches** (`Graph.count`, {count_s:.1f} s), {len(cols)} output columns of
  {id_bytes}-byte ids: **{format_size(arrow_bytes)} as Arrow** if materialised
  ({arrow_bytes / max(C.ram_bytes(), 1):.1f}x this machine's {format_size(C.ram_bytes())} of RAM,
  {arrow_bytes / ram_cap:.1f}x the {format_size(ram_cap)} cap)
- each run is a separate process started from a small launcher;
  {('its address space capped at ' + format_size(rlimit) + ' with `RLIMIT_AS`') if rlimit else 'no `RLIMIT_AS` (GPU, or --no-rlimit): the cap is only checked against the peak'};
  peak RSS = `ru_maxrss` of the process from `wait4` (exact); RSS sampled every {args.sample:g} s from `/proc`
- `cli`: `python -m sgsi match STORE PATTERN --output FILE --memory-budget B --device {args.device}`
  (batches gathered into row groups of {ROW_GROUP_ROWS:,} rows, snappy)
- `api`: `Graph.match(pattern, memory_budget=B, device="{args.device}")`, each batch written with
  `pyarrow.parquet.ParquetWriter.write_batch` (one row group per batch, snappy)
- `drain` (when run): the same batches read and dropped, no Parquet: the engine's own memory
- rows checked with `pyarrow.parquet.ParquetFile(out).metadata.num_rows`; output deleted afterwards

## Results

| way | memory budget | rows written | = count | Parquet size | row groups | wall (s) | peak RSS (MiB) | max RSS (MiB) in each quarter of the run | RSS growth, 2nd quarter to last (MiB) | growth per row group written in the 2nd half (KiB) | Arrow size / peak RSS |
|---|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|
{table}

{verdict}
{warn_txt}
Peak RSS is the whole process: Python, NumPy, PyArrow and the mapped store included. Where it
still creeps up while a file is written, the cause is the Parquet format rather than the engine:
a Parquet file's footer holds the metadata of every row group, and `ParquetWriter` keeps it in
memory until `close()` (a few KiB per row group of {len(cols)} columns: the "growth per row group"
column), so one output file costs memory in proportion to its row groups, a small fraction of the
data. A `drain` run, when present, shows the engine without the writer.

{engines}
"""
    C.write_text(os.path.join(args.results, "stream_to_parquet.md"), md)
    print(md)
    if failures:
        C.say("\n".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
