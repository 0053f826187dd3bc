"""Shared helpers of the benchmark scripts: machine description, commit, result files."""

from __future__ import annotations

import csv
import os
import platform
import subprocess
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(BENCH_DIR)
RESULTS_DIR = os.path.join(BENCH_DIR, "results")
DATA_DIR = os.path.join(BENCH_DIR, "data")


def git_commit() -> str:
    """Short commit of the working tree, with ``+dirty`` when sgsi/ has uncommitted edits."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_DIR, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    try:
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "sgsi"], cwd=REPO_DIR,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        dirty = ""
    return head + ("+dirty(sgsi/)" if dirty else "")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def ram_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def machine() -> dict:
    import duckdb
    import numpy
    import pyarrow
    return {
        "nproc": os.cpu_count(),
        "ram_gib": round(ram_bytes() / 2**30, 1),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "pyarrow": pyarrow.__version__,
        "duckdb": duckdb.__version__,
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def machine_at_end(start: dict) -> dict:
    """:func:`machine` now, with the commit of ``start`` (the code a run loaded) and a note if it moved."""
    m = machine()
    if m["commit"] != start["commit"]:
        m["commit"] = f"{start['commit']} at the start of the run ({m['commit']} at its end)"
    else:
        m["commit"] = start["commit"]
    m["loadavg"] = f"{start['loadavg']} at the start, {m['loadavg']} at the end"
    return m


def machine_md(m: dict) -> str:
    return (f"- machine: {m['nproc']} cores (`nproc`), {m['ram_gib']} GiB RAM, CPU `{m['cpu']}`\n"
            f"- software: Python {m['python']}, NumPy {m['numpy']}, PyArrow {m['pyarrow']}, DuckDB {m['duckdb']}\n"
            f"- commit: `{m['commit']}`\n"
            f"- date: {m['date']}; load average (1/5/15 min) when recorded: {m['loadavg']} "
            f"on {m['nproc']} cores (other jobs share this machine; above {m['nproc']} means contention)\n")


def peak_rss_bytes() -> int:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def write_csv(path, rows, fields=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fields = fields or list(rows[0])
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in fields})


def write_text(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def say(*args):
    print(*args, file=sys.stderr, flush=True)


def ensure_importable():
    """Let ``python bench/x.py`` import sgsi from the repository and gen from bench/."""
    for p in (REPO_DIR, BENCH_DIR):
        if p not in sys.path:
            sys.path.insert(0, p)


def build_store(gdir):
    """Build ``<gdir>.sgsi`` from a generated graph's edges.parquet and vertices.parquet (replacing
    any store there); returns the open graph and the build's seconds."""
    import sgsi
    t = time.perf_counter()
    g = sgsi.build(gdir + ".sgsi", edges=os.path.join(gdir, "edges.parquet"),
                   vertices=os.path.join(gdir, "vertices.parquet"), force=True)
    build_s = time.perf_counter() - t
    say(f"built {g} in {build_s:.1f}s")
    return g, build_s


def add_walk_options(ap, edges, queries):
    """The options of a bench over one generated R-MAT graph and random-walk queries drawn from it
    (read back by :func:`walk_graph`, :func:`walk_queries` and :func:`walk_options`)."""
    ap.add_argument("--edges", type=float, default=edges)
    ap.add_argument("--shape", default="watdiv")
    ap.add_argument("--edge-labels", type=int, default=None, help="edge label count (default: the shape's)")
    ap.add_argument("--vertex-labels", type=int, default=None, help="vertex label count (default: the shape's)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 6, 8])
    ap.add_argument("--queries", type=int, default=queries, help="queries per size")


def walk_graph(args):
    """The directory of the R-MAT graph the walk options of ``args`` name (generated when missing)."""
    import gen
    return gen.cached_rmat(args.data, int(args.edges), args.shape, say=say, edge_labels=args.edge_labels,
                           vertex_labels=args.vertex_labels)


def walk_queries(gdir, args):
    """(vertices, pattern) of the random walks of ``args.sizes`` drawn from graph ``gdir``, seeded by
    their size: every bench given the same options draws the same queries."""
    import gen
    return [(k, q.pattern if hasattr(q, "pattern") else str(q))
            for k in args.sizes for q in gen.random_walk_queries(gdir, k, args.queries, seed=k)]


def walk_options(args):
    """The walk options of ``args`` as they go on a command line."""
    return (f"--edges {args.edges:g} --shape {args.shape}"
            + (f" --edge-labels {args.edge_labels}" if args.edge_labels else "")
            + (f" --vertex-labels {args.vertex_labels}" if args.vertex_labels else "")
            + f" --sizes {' '.join(map(str, args.sizes))} --queries {args.queries}")


def expected_counts(set_dir):
    """{query file name: expected count} from ``<set_dir>/expected.txt``."""
    expected = {}
    with open(os.path.join(set_dir, "expected.txt")) as f:
        for line in f:
            if line.strip():
                name, count = line.split()
                expected[name] = int(count)
    return expected


def warm_up_kernels(device, per_family=2):
    """Count a spread of yeast queries (the ``per_family`` with the fewest matches of each
    family, at the default budget and at 64KB) on a store of the bundled yeast graph built at 64KB in a
    temporary folder. On a fresh machine CuPy compiles each kernel at its first use in a
    process; a worker that warms up this way keeps those compiles out of its timed queries.
    Returns the queries counted."""
    import tempfile

    import sgsi
    yeast = os.path.join(REPO_DIR, "tests", "data", "benchmarks", "yeast")
    expected = {name: c for name, c in expected_counts(yeast).items() if c > 0}
    families = {}
    for name in sorted(expected, key=lambda n: (expected[n], n)):
        family = name.rsplit("_", 1)[0]
        if len(families.setdefault(family, [])) < per_family:
            families[family].append(name)
    picked = [n for names in families.values() for n in names]
    with tempfile.TemporaryDirectory() as d:
        g = sgsi.build(os.path.join(d, "yeast.sgsi"), graph=os.path.join(yeast, "data.graph"), memory_budget="64KB")
        for name in picked:
            for budget in (None, "64KB"):
                c = g.count(os.path.join(yeast, "queries", name), device=device, memory_budget=budget)
                if c != expected[name]:
                    raise RuntimeError(f"warm-up: {name} counted {c}, expected {expected[name]}")
        g.close()
    if device == "gpu":
        from sgsi.join.backends.gpu.backend import GpuBackend
        warm_up_merge(GpuBackend())
    return picked


def warm_up_merge(backend):
    """Merge chunks of one and of several key words, with and without weights, on ``backend``: a count
    merges equal rows (``sgsi.join.merge``) only where its rows allow, so the counts above may not
    compile every kernel of it (one H200: dense_32_31 took 4.28 s once in a run, 0.05 s
    before merging; not reproduced, likely compiling)."""
    import numpy as np
    from sgsi.join import merge
    rng = np.random.default_rng(0)
    for shift in (0, 27):                       # spans of 3 and of 30 bits a column
        chunk = {u: backend.to_device((rng.integers(0, 8, 4096) << shift).astype(np.int32)) for u in range(4)}
        once = merge.merged(backend, chunk)
        twice = merge.merged(backend, once)
        assert merge.rows_counted(backend, twice) == 4096
        merge.weighted_sum(backend, twice[merge.WEIGHT], twice[merge.WEIGHT])


def _count_worker_main(conn, store, warm_device, cores=None):
    """Child process of :class:`CountWorker`: open the store once, then count what it is sent
    (on the CPU cores ``cores`` only, where given)."""
    import faulthandler
    import signal
    faulthandler.register(signal.SIGUSR1)     # kill -USR1 PID: stack of a long query to stderr
    if cores:
        os.sched_setaffinity(0, cores)
    ensure_importable()
    import sgsi
    if warm_device != "cpu":
        warm_up_kernels(warm_device)                  # kernels compiled at first use
    g = sgsi.open(store)
    g.count("(a)-->(b)-->(c)", device=warm_device)   # warm up: imports, this store's arrays
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            break
        pattern, device, budget, env = msg
        os.environ.update(env)
        t = time.perf_counter()
        c = g.count(pattern, device=device, memory_budget=budget)
        conn.send((c, time.perf_counter() - t, dict(g.last_stats)))
    g.close()


class CountWorker:
    """Counts run in a child process, so that a query past its timeout can be stopped.

    The child opens ``store`` once and serves every query; it is replaced
    only after a timeout. Times are measured in the child, around
    ``Graph.count``. ``env`` is the child's environment on top of this
    process's (e.g. ``CUDA_VISIBLE_DEVICES``), from its start, restarts
    included. ``cores``: the CPU cores the child runs on (None: any). The
    child warms up while the constructor returns; the first query waits for
    it (:meth:`wait_ready`).

    :meth:`count` sends a query and waits for its answer; a dispatcher over
    several workers uses :meth:`submit` and :meth:`result` instead, and
    passes the workers themselves (they have a ``fileno``) to
    ``multiprocessing.connection.wait``.
    """

    def __init__(self, store, warm_device="cpu", env=None, cores=None):
        import multiprocessing as mp
        self._ctx = mp.get_context("spawn")
        self._args = (store, warm_device, sorted(cores) if cores else None)
        self.env = dict(env or {})
        self.submitted = None     # perf_counter() when the pending query was sent; None when none is
        self._start()

    def _start(self):
        """Start the child; it warms up on its own (see :meth:`wait_ready`)."""
        self.conn, child = self._ctx.Pipe()
        self.proc = self._ctx.Process(target=_count_worker_main, args=(child, *self._args), daemon=True)
        # A spawned child starts with this process's environment, so ``env`` is in place before the
        # child imports anything (it re-runs the main script's imports before _count_worker_main).
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            self.proc.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        child.close()
        self._ready = False

    def fileno(self):
        return self.conn.fileno()

    def wait_ready(self, timeout=None) -> bool:
        """Whether the child has opened the store and warmed up, waiting up to ``timeout`` s for it
        (None: until it has; 0: just look)."""
        if not self._ready and self.conn.poll(timeout):
            try:
                self.conn.recv()      # "ready": imports done and the store open, before any timing
            except EOFError:
                raise RuntimeError(f"count worker (env {self.env}) exited while starting; "
                                   "see its error above") from None
            self._ready = True
        return self._ready

    def submit(self, pattern, *, device="cpu", memory_budget=None, env=None):
        """Send one query to the child, once it is ready; :meth:`result` collects the answer."""
        if self.submitted is not None:
            raise RuntimeError("CountWorker.submit: the previous query's result was not collected")
        self.wait_ready()
        self.conn.send((pattern, device, memory_budget, dict(env or {})))
        self.submitted = time.perf_counter()

    def result(self, timeout=None):
        """(count, seconds, stats) of the submitted query, or None when it was not done ``timeout``
        seconds after :meth:`submit` (the child is then killed and a new one started). Waits at most
        until then: at once when that time has passed; no limit when ``timeout`` is falsy."""
        sent, self.submitted = self.submitted, None
        if sent is None:
            raise RuntimeError("CountWorker.result: nothing was submitted")
        if timeout and not self.conn.poll(max(0.0, sent + timeout - time.perf_counter())):
            self.proc.kill()
            self.proc.join()
            self._start()
            return None
        return self.conn.recv()

    def count(self, pattern, timeout=None, *, device="cpu", memory_budget=None, env=None):
        """(count, seconds, stats), or None when ``timeout`` seconds passed first (the
        child is then killed and a new one started)."""
        self.submit(pattern, device=device, memory_budget=memory_budget, env=env)
        return self.result(timeout)

    def close(self, force=False):
        if force:
            self.proc.kill()
            self.proc.join()
            return
        try:
            self.conn.send(None)
            self.proc.join(10)
        except (OSError, EOFError):
            pass
        if self.proc.is_alive():
            self.proc.kill()
