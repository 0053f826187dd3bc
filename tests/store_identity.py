"""Byte-identity check of stores built by two versions of sgsi (a tool, not a test).

Builds a fixed set of stores (Parquet with labels, string ids, the yeast
text graph, lean, undirected, both sorts, PCSR worker threads, other
parameters) with whichever sgsi is first on PYTHONPATH, and compares two
such sets file by file; manifests must be equal but for "created"::

    git archive BASE | tar -x -C /tmp/base
    PYTHONPATH=/tmp/base python tests/store_identity.py build /tmp/id/in /tmp/id/base
    PYTHONPATH=. python tests/store_identity.py build /tmp/id/in /tmp/id/new
    python tests/store_identity.py compare /tmp/id/base /tmp/id/new

Both builds must use the same inputs directory (its paths are recorded in
the manifests); the first build writes the inputs there, the yeast graph
of tests/data included.
"""

import filecmp
import os
import random
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
YEAST = os.path.join(HERE, "data", "benchmarks", "yeast", "data.graph")


def make_inputs(inputs):
    import pyarrow as pa
    import pyarrow.parquet as pq
    rng = random.Random(7)
    n, m = 400, 5000
    s = [rng.randrange(n) for _ in range(m)]
    d = [rng.randrange(n) for _ in range(m)]
    lab = [rng.choice(["KNOWS", "LIKES", "WORKS_AT"]) for _ in range(m)]
    half = m // 2
    pq.write_table(pa.table({"src": pa.array(s[:half], pa.int64()), "dst": pa.array(d[:half], pa.int64()),
                             "label": lab[:half]}), f"{inputs}/e1.parquet")
    pq.write_table(pa.table({"src": pa.array(s[half:], pa.int32()), "dst": pa.array(d[half:], pa.int32()),
                             "label": lab[half:]}), f"{inputs}/e2.parquet")       # mixed int widths
    pq.write_table(pa.table({"id": pa.array(range(n), pa.int64()),
                             "label": [rng.choice(["Person", "Company", None]) for _ in range(n)]}),
                   f"{inputs}/v.parquet")
    ids = [f"user-{rng.randrange(10**6)}" for _ in range(n)]
    kinds = {"KNOWS": 3, "LIKES": 1, "WORKS_AT": 4}
    pq.write_table(pa.table({"a": [ids[x] for x in s], "b": [ids[x] for x in d],
                             "kind": pa.array([kinds[x] for x in lab], pa.int16())}), f"{inputs}/es.parquet")
    pq.write_table(pa.table({"id": ids, "vl": [rng.randrange(4) for _ in range(n)]}), f"{inputs}/vs.parquet")
    pq.write_table(pa.table({"src": s, "dst": d}), f"{inputs}/eu.parquet")
    shutil.copy(YEAST, f"{inputs}/yeast.graph")         # manifests record the path


def cases(inputs):
    e, v = [f"{inputs}/e1.parquet", f"{inputs}/e2.parquet"], f"{inputs}/v.parquet"
    return {
        "labelled": dict(edges=e, vertices=v),
        "labelled_16k": dict(edges=e, vertices=v, memory_budget="16KB"),
        "strings": dict(edges=f"{inputs}/es.parquet", vertices=f"{inputs}/vs.parquet", src="a", dst="b",
                        label="kind", vertex_label="vl", memory_budget="64KB"),
        "yeast": dict(graph=f"{inputs}/yeast.graph"),
        "yeast_64k": dict(graph=f"{inputs}/yeast.graph", memory_budget="64KB"),
        "lean": dict(edges=e, vertices=v, lean=True, memory_budget="32KB"),
        "lean_vertex_passes": dict(edges=e, vertices=v, lean=True, _sig_table=0),
        "undirected": dict(edges=e, vertices=v, undirected=True, memory_budget="32KB"),
        "undirected_unlabelled": dict(edges=f"{inputs}/eu.parquet", undirected=True),
        "single_label": dict(edges=f"{inputs}/eu.parquet", memory_budget="16KB"),
        "duckdb_sort": dict(edges=e, vertices=v, memory_budget="16KB", _env={"SGSI_BUILD_SORT": "duckdb"}),
        "duckdb_sort_lean": dict(edges=e, vertices=v, lean=True, _env={"SGSI_BUILD_SORT": "duckdb"}),
        "workers": dict(edges=e, vertices=v, memory_budget="16KB", _env={"SGSI_BUILD_WORKERS": "3"}),
        "theta_bits": dict(edges=e, vertices=v, theta=6, signature_bits=128, label_bits=16),
    }


def build(inputs, out):
    import sgsi
    try:
        from sgsi.storage.build import _Builder
    except ImportError:                          # before the split of sgsi/storage/ingest.py
        from sgsi.storage.ingest import _Builder
    os.makedirs(inputs, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    if not os.path.exists(f"{inputs}/eu.parquet"):
        make_inputs(inputs)
    for name, kw in cases(inputs).items():
        kw = dict(kw)
        env = kw.pop("_env", {})
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        table = _Builder.max_signature_table
        _Builder.max_signature_table = kw.pop("_sig_table", table)
        try:
            sgsi.build(os.path.join(out, name + ".sgsi"), force=True, **kw).close()
        finally:
            _Builder.max_signature_table = table
            for k, x in saved.items():
                os.environ.pop(k) if x is None else os.environ.__setitem__(k, x)
        print("built", name, flush=True)


def compare(a, b):
    stores = sorted(os.listdir(a))
    assert stores == sorted(os.listdir(b)), (stores, sorted(os.listdir(b)))
    bad = n_files = 0
    for s in stores:
        fa, fb = sorted(os.listdir(os.path.join(a, s))), sorted(os.listdir(os.path.join(b, s)))
        if fa != fb:
            print("different files", s, fa, fb)
            bad += 1
            continue
        for f in fa:
            pa_, pb_ = os.path.join(a, s, f), os.path.join(b, s, f)
            n_files += 1
            if f == "manifest.json":
                ta, tb = (re.sub(r'\n\s*"created": "[^"]*",', "", open(p).read()) for p in (pa_, pb_))
                same = ta == tb and ta != open(pa_).read()
            else:
                same = filecmp.cmp(pa_, pb_, shallow=False)
            if not same:
                print("differs", s, f)
                bad += 1
    print(f"{len(stores)} stores, {n_files} files compared, {bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("build", "compare"):
        sys.exit(__doc__)
    sys.exit(build(*sys.argv[2:]) if sys.argv[1] == "build" else compare(*sys.argv[2:]))
