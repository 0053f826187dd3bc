"""Helpers of the reliability suite: graphs, store fingerprints, the command line in a subprocess."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import sgsi
from oracle import oracle_matches, random_graph
from sgsi.pattern import parse_pattern

REPO = Path(__file__).resolve().parent.parent.parent

#: Patterns over the social graph (labels E0/E1 on edges, 0/1 on vertices).
SOCIAL_PATTERNS = [
    "(a)-[:E0]->(b)",
    "(a:0)-[:E0]->(b)-[:E1]->(c:1)",
    "(a)-->(b)-->(c)-->(a)",
    "(a)--(b)--(c), (a)--(c)",
    "(a:1)<-[:E1]-(b)-[:E0]->(c), (a)-[:E0]-(c)",
    "(a)-[:E0]->(b)<-[:E0]-(c)-[:E1]->(d)",
    "(x)",
]

#: A pattern with an astronomical number of matches on the dense graph.
HUGE = "(a)--(b)--(c)--(d)--(e)--(f)--(g)"


def write_edges(path, src, dst, label=None, **extra):
    cols = {"src": src, "dst": dst}
    if label is not None:
        cols["label"] = label
    cols.update(extra)
    pq.write_table(pa.table(cols), str(path))
    return str(path)


def social_graph(d, seed=7, n=40, m=140, budget="16KB"):
    rng = random.Random(seed)
    edges, vlabels = random_graph(rng, n, m, 2, 2, string_ids=True)
    ep = write_edges(Path(d) / "e.parquet", [s for s, _, _ in edges], [t for _, t, _ in edges],
                     [str(l) for _, _, l in edges])
    ids = sorted(vlabels)
    vp = str(Path(d) / "v.parquet")
    pq.write_table(pa.table({"id": ids, "label": [vlabels[i] for i in ids]}), vp)
    store = str(Path(d) / "social.sgsi")
    sgsi.build(store, edges=ep, vertices=vp, memory_budget=budget).close()
    return {"dir": Path(d), "store": store, "edges": edges, "vlabels": vlabels, "efile": ep, "vfile": vp,
            "budget": budget}


def expected_rows(graph, pattern, injective=True):
    p = parse_pattern(pattern)
    cols = p.output_vertices
    return sorted(tuple(m[i] for i in cols)
                  for m in oracle_matches(graph["edges"], graph["vlabels"], p, injective=injective))


def dense_graph(d, seed=3, n=600, m=24000, budget="256KB"):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    ep = write_edges(Path(d) / "dense.parquet", src, dst)
    store = str(Path(d) / "dense.sgsi")
    sgsi.build(store, edges=ep, memory_budget=budget).close()
    return {"dir": Path(d), "store": store, "efile": ep, "budget": budget}


def rows_of(reader_or_table):
    t = reader_or_table.read_all() if hasattr(reader_or_table, "read_all") else reader_or_table
    cols = [c.to_pylist() for c in t.columns]
    return sorted(zip(*cols)) if cols else []


# ---------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------


def fingerprint(path) -> dict:
    """Every file under ``path`` (and the directory itself): size, mtime, checksum."""
    path = Path(path)
    out = {".": (path.stat().st_mtime_ns, path.stat().st_ino)}
    for p in sorted(path.rglob("*")):
        st = p.stat()
        if p.is_file():
            out[str(p.relative_to(path))] = (st.st_size, st.st_mtime_ns, zlib.crc32(p.read_bytes()))
        else:
            out[str(p.relative_to(path))] = ("dir", st.st_mtime_ns)
    return out


def leftovers(directory, name) -> list[str]:
    """Temporary entries a build or a match of ``name`` may leave in ``directory``."""
    return sorted(e for e in os.listdir(directory)
                  if (e.startswith(f".{name}.tmp-") or e.startswith("sgsi-spill-")))


# ---------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------


def _child_setup(fsize=None):
    def setup():
        # A shell or a CI runner may start us with SIGINT ignored; the child must see Ctrl-C.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if fsize is not None:
            import resource
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # writes past the limit fail with EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return setup


def sgsi_env(**extra):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def spawn_sgsi(*args, fsize=None, env=None, cwd=None):
    """``python -m sgsi ARGS`` from this checkout, as a Popen with text pipes."""
    return subprocess.Popen([sys.executable, "-m", "sgsi", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            env=env or sgsi_env(), cwd=cwd, preexec_fn=_child_setup(fsize))


def run_sgsi(*args, timeout=120, **kw):
    p = spawn_sgsi(*args, **kw)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"sgsi {' '.join(map(str, args))} ran past {timeout} s: {err[-2000:]}") from None
    return p.returncode, out, err


def wait_exit(p, timeout):
    """(returncode, stdout, stderr, seconds) of a process expected to end within ``timeout``."""
    t0 = time.monotonic()
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"process did not exit within {timeout} s; stderr: {err[-2000:]}") from None
    return p.returncode, out, err, time.monotonic() - t0


def assert_one_line(stderr, prefix):
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, stderr
    assert lines[0].startswith(prefix), stderr
    return lines[0]
