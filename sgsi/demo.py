"""``sgsi demo``: a small social graph, built and queried from DuckDB SQL.

Everything is generated from a fixed seed (no download) in a temporary
directory, which is removed at the end (unless ``keep``). :func:`prepare`
makes the same files and store in a directory of one's choice: the README's
examples run on them (tests/test_readme.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SEED = 20220101
N_PERSON, N_COMPANY, N_CITY = 16_000, 2_000, 2_000
N_COMMUNITIES = 400
N_KNOWS, N_LIKES = 60_000, 20_000

_FIRST = ["Ada", "Alan", "Barbara", "Claude", "Donald", "Edsger", "Frances", "Grace", "Hedy", "Ivan",
          "John", "Katherine", "Leslie", "Margaret", "Niklaus", "Ole", "Radia", "Shafi", "Tim", "Yukihiro"]
_LAST = ["Lovelace", "Turing", "Liskov", "Shannon", "Knuth", "Dijkstra", "Allen", "Hopper", "Lamarr",
         "Sutherland", "Backus", "Johnson", "Lamport", "Hamilton", "Wirth", "Dahl", "Perlman", "Goldwasser",
         "Berners-Lee", "Matsumoto"]
_COMPANY = ["Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vehement", "Massive", "Soylent", "Tyrell", "Wonka"]
_CITY = ["Aachen", "Bergen", "Cork", "Delft", "Espoo", "Florence", "Graz", "Haarlem", "Izmir", "Jena",
         "Krakow", "Lyon", "Malmo", "Nantes", "Oulu", "Porto", "Quimper", "Riga", "Split", "Turin"]

PATTERNS = {
    "triangle": "(a:Person)-[:KNOWS]->(b:Person)-[:KNOWS]->(c:Person), (a)-[:KNOWS]->(c)",
    "friend_works_where_you_like": "(p:Person)-[:KNOWS]->(f:Person)-[:WORKS_AT]->(c:Company), (p)-[:LIKES]->(c)",
    "four_cycle": "(a:Person)-[:KNOWS]->(b:Person)-[:KNOWS]->(c:Person)-[:KNOWS]->(d:Person)-[:KNOWS]->(a)",
    "coworkers_same_city": "(a:Person)-[:WORKS_AT]->(w:Company)<-[:WORKS_AT]-(b:Person), "
                           "(a)-[:LIVES_IN]->(t:City)<-[:LIVES_IN]-(b)",
}


def generate(directory, seed=SEED):
    """Write ``edges.parquet`` and ``vertices.parquet`` of the demo graph; returns a summary dict.

    People form communities: 80% of KNOWS edges stay inside one, so
    triangles and cycles are common. Everyone works at one company and
    lives in one city; LIKES points at companies near one's employer.
    """
    rng = np.random.default_rng(seed)
    community = rng.integers(0, N_COMMUNITIES, N_PERSON)
    by_comm = np.argsort(community, kind="stable")
    sorted_comm = community[by_comm]
    starts = np.searchsorted(sorted_comm, np.arange(N_COMMUNITIES))
    ends = np.searchsorted(sorted_comm, np.arange(N_COMMUNITIES), side="right")

    src = rng.integers(0, N_PERSON, N_KNOWS)
    c = community[src]
    member = by_comm[starts[c] + (rng.random(N_KNOWS) * (ends[c] - starts[c])).astype(np.int64)]
    dst = np.where(rng.random(N_KNOWS) < 0.8, member, rng.integers(0, N_PERSON, N_KNOWS))
    keep = src != dst
    src, dst = src[keep], dst[keep]

    works = rng.integers(0, N_COMPANY, N_PERSON)
    lives = rng.integers(0, N_CITY, N_PERSON)
    liker = rng.integers(0, N_PERSON, N_LIKES)
    liked = (works[liker] + rng.integers(-2, 3, N_LIKES)) % N_COMPANY

    pid = np.char.add("p", np.arange(N_PERSON).astype(str))
    cid = np.char.add("c", np.arange(N_COMPANY).astype(str))
    tid = np.char.add("t", np.arange(N_CITY).astype(str))
    edges = pa.table({
        "src": np.concatenate([pid[src], pid, pid, pid[liker]]),
        "dst": np.concatenate([pid[dst], cid[works], tid[lives], cid[liked]]),
        "label": np.repeat(["KNOWS", "WORKS_AT", "LIVES_IN", "LIKES"], [len(src), N_PERSON, N_PERSON, N_LIKES]),
    })
    first = np.array(_FIRST)[rng.integers(0, len(_FIRST), N_PERSON)]
    last = np.array(_LAST)[rng.integers(0, len(_LAST), N_PERSON)]
    names = np.concatenate([
        np.char.add(np.char.add(first, " "), last),
        [f"{_COMPANY[i % len(_COMPANY)]} {i // len(_COMPANY) + 1}" for i in range(N_COMPANY)],
        [f"{_CITY[i % len(_CITY)]} {i // len(_CITY) + 1}" for i in range(N_CITY)],
    ])
    ages = np.concatenate([rng.integers(18, 80, N_PERSON), np.zeros(N_COMPANY + N_CITY, np.int64)])
    not_person = np.arange(len(ages)) >= N_PERSON
    vertices = pa.table({
        "id": np.concatenate([pid, cid, tid]),
        "label": np.repeat(["Person", "Company", "City"], [N_PERSON, N_COMPANY, N_CITY]),
        "name": names,
        "age": pa.array(ages.astype(np.int32), mask=not_person),   # NULL for companies and cities
    })
    pq.write_table(edges, os.path.join(directory, "edges.parquet"))
    pq.write_table(vertices, os.path.join(directory, "vertices.parquet"))
    return {"edges": edges.num_rows, "knows": int(len(src)), "vertices": vertices.num_rows}


#: The store :func:`prepare` builds, beside the Parquet files.
STORE = "social.sgsi"


def prepare(directory, seed=SEED, progress=None):
    """Write the demo graph's Parquet files into ``directory`` (:func:`generate`) and build the
    store ``social.sgsi`` beside them; returns the summary of :func:`generate` and the open Graph.

    ``sgsi demo --keep`` leaves the same three in the directory it names.
    """
    from .graph import build

    info = generate(directory, seed)
    g = build(os.path.join(directory, STORE), edges=os.path.join(directory, "edges.parquet"),
              vertices=os.path.join(directory, "vertices.parquet"), progress=progress)
    return info, g


def _table(con, sql, max_width=28):
    """Run ``sql``; its result as a small text table, and its number of rows."""
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    rows = cur.fetchall()

    def cell(v):
        s = "NULL" if v is None else (f"{v:,}" if isinstance(v, int) else str(v))
        return s if len(s) <= max_width else s[:max_width - 1] + "…"

    cells = [[cell(v) for v in r] for r in rows]
    widths = [max([len(n)] + [len(r[i]) for r in cells]) for i, n in enumerate(names)]
    numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) and rows for i in range(len(names))]

    def line(vals):
        return " | ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric)).rstrip()

    out = [line(names), "-+-".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    return "\n".join("    " + s for s in out), len(rows)


def _pick_device(device):
    """The backend name to use and a sentence about it."""
    from .join.backends import get_backend, gpu_available

    if device == "auto" and not gpu_available():
        return "cpu", "CPU (NumPy): no CUDA GPU with CuPy found"
    try:
        name = get_backend(device).name
    except ImportError as e:      # a GPU is present but the GPU backend cannot load
        if device == "gpu":
            raise
        return "cpu", f"CPU (NumPy): the GPU backend is not available here ({e})"
    if name == "gpu":
        return "gpu", "GPU (CuPy)"
    return "cpu", "CPU (NumPy)"


def run_demo(device="auto", keep=False, out=print):
    """Generate, build, register, query, clean up; print each query with its rows. Returns 0."""
    import duckdb

    from . import register

    t_start = time.perf_counter()
    work = tempfile.mkdtemp(prefix="sgsi-demo-")
    con = None
    try:
        out("sgsi demo: a generated social graph, built into a store and queried from DuckDB SQL")
        out(f"working directory: {work}" + ("" if keep else " (removed at the end)"))
        out()
        t0 = time.perf_counter()
        info, g = prepare(work)
        out(f"1. Generated from a fixed seed (no download): {info['vertices']:,} vertices ({N_PERSON:,} Person, "
            f"{N_COMPANY:,} Company, {N_CITY:,} City)")
        out(f"   and {info['edges']:,} edges ({info['knows']:,} KNOWS, {N_PERSON:,} WORKS_AT, {N_PERSON:,} LIVES_IN, "
            f"{N_LIKES:,} LIKES)")
        out("   -> edges.parquet (src, dst, label), vertices.parquet (id, label, name, age)")
        out("2. Built: sgsi build --edges edges.parquet --vertices vertices.parquet --out social.sgsi")
        out(f"   {g.store.n_vertices:,} vertices, {g.store.n_edges:,} distinct edges  "
            f"[{time.perf_counter() - t0:.2f} s with step 1]")
        g.close()
        backend, about = _pick_device(device)
        out(f"3. Registered with DuckDB; device: {about}")
        out("   import duckdb, sgsi; con = duckdb.connect(); sgsi.register(con)")
        con = duckdb.connect()
        register(con, device=backend)
        con.execute(f"CREATE TABLE vertices AS SELECT * FROM read_parquet('{_q(os.path.join(work, 'vertices.parquet'))}')")
        out()
        out("4. Queries")
        path = _q(os.path.join(work, STORE))
        queries = [
            ("People in transitive KNOWS triangles (a knows b, b knows c, and a knows c)",
             f"SELECT count(*) AS embeddings, count(DISTINCT a) AS people\n"
             f"FROM match('{path}', '{PATTERNS['triangle']}')"),
            ("Friends who work at a company you like, joined back to the vertex table",
             f"SELECT pv.name AS person, fv.name AS friend, fv.age, cv.name AS company\n"
             f"FROM match('{path}', '{PATTERNS['friend_works_where_you_like']}') m\n"
             f"JOIN vertices pv ON pv.id = m.p JOIN vertices fv ON fv.id = m.f JOIN vertices cv ON cv.id = m.c\n"
             f"WHERE fv.age >= 30\nORDER BY fv.age DESC, person\nLIMIT 5"),
            ("Directed 4-cycles of KNOWS (every rotation counted)",
             f"SELECT match_count('{path}', '{PATTERNS['four_cycle']}') AS four_cycles"),
            ("Coworkers who live in the same city, by city",
             f"SELECT tv.name AS city, count(*) AS pairs\n"
             f"FROM match('{path}', '{PATTERNS['coworkers_same_city']}') m\n"
             f"JOIN vertices tv ON tv.id = m.t\nGROUP BY ALL ORDER BY pairs DESC, city LIMIT 3"),
        ]
        for title, sql in queries:
            out(f"-- {title}")
            out("    " + sql.replace(path, STORE).replace("\n", "\n    ") + ";")
            t0 = time.perf_counter()
            text, n = _table(con, sql)
            out(text)
            out(f"    ({n:,} row{'s' if n != 1 else ''} in {time.perf_counter() - t0:.2f} s on {backend})")
            out()
        con.close()
        con = None
        out(f"done in {time.perf_counter() - t_start:.1f} s" +
            (f"; files kept in {work}" if keep else "; temporary files removed"))
    finally:
        if con is not None:
            con.close()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _q(s):
    return str(s).replace("'", "''")
