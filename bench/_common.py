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
