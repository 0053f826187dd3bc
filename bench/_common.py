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


def _count_worker_main(conn, store, warm_device):
    """Child process of :class:`CountWorker`: open the store once, then count what it is sent."""
    import faulthandler
    import signal
    faulthandler.register(signal.SIGUSR1)     # kill -USR1 PID: stack of a long query to stderr
    ensure_importable()
    import sgsi
    g = sgsi.open(store)
    g.count("(a)-->(b)-->(c)", device=warm_device)   # warm up: imports, kernels
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
    ``Graph.count``.
    """

    def __init__(self, store, warm_device="cpu"):
        import multiprocessing as mp
        self._ctx = mp.get_context("spawn")
        self._args = (store, warm_device)
        self._start()

    def _start(self):
        self.conn, child = self._ctx.Pipe()
        self.proc = self._ctx.Process(target=_count_worker_main, args=(child, *self._args), daemon=True)
        self.proc.start()
        child.close()
        self.conn.recv()          # "ready": imports done and the store open, before any timing

    def count(self, pattern, timeout=None, *, device="cpu", memory_budget=None, env=None):
        """(count, seconds, stats), or None when ``timeout`` seconds passed first (the
        child is then killed and a new one started)."""
        self.conn.send((pattern, device, memory_budget, dict(env or {})))
        if timeout and not self.conn.poll(timeout):
            self.proc.kill()
            self.proc.join()
            self._start()
            return None
        return self.conn.recv()

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
