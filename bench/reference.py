"""The compiled reference on the hard sets: finishing rates of sgsi's CPU backend against it, per core.

The reference is RapidsAtHKUST/SubgraphMatching (Sun & Luo, SIGMOD 2020; C++, one thread): the
GraphQL filter and order, and LFTJ (set-intersection) enumeration, ``-num MAX``. It enumerates
every embedding, so its time grows with the count; sgsi counts without materialising. Build it
(commit 80038f38b71b was measured):

    git clone https://github.com/RapidsAtHKUST/SubgraphMatching && cd SubgraphMatching
    mkdir build && cd build && cmake .. -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-multiple-definition
    make SubgraphMatching.out           # build/matching/; a header defines a lambda each unit links

Each query runs as its own process under ``timeout`` (wall time, graph loading included), one at
a time. The CSV (written row by row) has hard.py's columns where they apply: status (ok /
cancelled / error), count, expected, match, seconds. With ``--sgsi CSV`` (a ``hard.py`` run of the
same queries, same timeout) the summary gives, per group, both finishing rates within 1 s and
within the timeout, and the counts both finished must agree.

    python bench/reference.py --binary SubgraphMatching.out --set yeast --sample 180 --timeout 10 \\
        --out /tmp/ref_yeast.csv --sgsi /tmp/yeast_cpu.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402
import hard  # noqa: E402

FIELDS = ["query", "group", "status", "count", "expected", "match", "seconds", "reported_s", "error"]


def run_one(binary, data, query, timeout):
    """(status, count, wall seconds, the reference's own total seconds, error)."""
    cmd = [binary, "-d", data, "-q", query, "-filter", "GQL", "-order", "GQL", "-engine", "LFTJ", "-num", "MAX"]
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "cancelled", None, time.perf_counter() - t, None, None
    secs = time.perf_counter() - t
    m = re.search(r"#Embeddings: (\d+)", p.stdout)
    if p.returncode != 0 or m is None:
        return "error", None, secs, None, ((p.stderr or p.stdout).strip().splitlines() or [f"rc {p.returncode}"])[-1]
    total = re.search(r"Total time \(seconds\): ([\d.]+)", p.stdout)
    return "ok", int(m.group(1)), secs, float(total.group(1)) if total else None, None


def rates(rows):
    """(finished within 1 s, finished) of ``rows``, each with its share."""
    ok = [r for r in rows if r["status"] == "ok"]
    fast = sum(float(r["seconds"]) <= 1 for r in ok)
    return f"{fast} ({100 * fast / max(len(rows), 1):.0f}%)", f"{len(ok)} ({100 * len(ok) / max(len(rows), 1):.0f}%)"


def summary(args, rows, sgsi_rows, machine):
    """Markdown: per group, each side's finishing within 1 s and within the timeout; disagreements."""
    lines = [f"# The compiled reference (GQL + LFTJ, one thread) and sgsi on the CPU: {args.set}", "",
             f"`python bench/reference.py {' '.join(sys.argv[1:])}`", "", C.machine_md(machine),
             f"| group | queries | reference ≤ 1 s | reference ≤ {args.timeout:g} s | sgsi ≤ 1 s | "
             f"sgsi ≤ {args.timeout:g} s |", "|---|---:|---:|---:|---:|---:|"]
    groups = sorted({r["group"] for r in rows}, key=hard.natural) + ["**all**"]
    for g in groups:
        mine = [r for r in rows if g == "**all**" or r["group"] == g]
        theirs = [sgsi_rows[r["query"]] for r in mine if r["query"] in sgsi_rows]
        cells = rates(theirs) if len(theirs) == len(mine) else ("-", "-")
        lines.append(f"| {g} | {len(mine)} | {' | '.join(rates(mine))} | {' | '.join(cells)} |")
    both = [(r, sgsi_rows[r["query"]]) for r in rows if r["query"] in sgsi_rows
            and r["status"] == "ok" and sgsi_rows[r["query"]]["status"] == "ok"]
    differ = [r["query"] for r, s in both if int(r["count"]) != int(s["count"])]
    wrong = [r["query"] for r in rows if r["match"] is False]
    lines += ["", f"- counts both finished: {len(both)}, differing: {len(differ)} {differ[:5]}; "
              f"reference counts unlike the expected: {len(wrong)} {wrong[:5]}"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", required=True, help="SubgraphMatching.out")
    p.add_argument("--set", default="yeast")
    p.add_argument("--data", help="a benchmark folder instead of --set (its name titles the summary)")
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--sample", type=int, help="N at random (--seed), round-robin over the groups")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--names", help="a file of query file names, one a line")
    p.add_argument("--out", default=None, help="CSV (default /tmp/reference_<set>.csv); the summary beside it")
    p.add_argument("--sgsi", help="a hard.py CSV of the same queries to set beside")
    p.add_argument("--table", metavar="CSV", help="no run: the summary of this earlier run's CSV")
    args = p.parse_args(argv)
    if args.data:                       # the set's name in titles and default paths
        args.set = os.path.basename(os.path.normpath(args.data))
    start = C.machine()
    if args.table:
        rows = [{**r, "match": {"True": True, "False": False}.get(r["match"])}
                for r in csv.DictReader(open(args.table))]
        sgsi_rows = {r["query"]: r for r in csv.DictReader(open(args.sgsi))} if args.sgsi else {}
        print(summary(args, rows, sgsi_rows, start))
        return
    base = hard.data_dir(args)
    names = sorted(os.listdir(os.path.join(base, "queries")), key=hard.natural)
    if args.names:
        wanted = set(open(args.names).read().split())
        names = [n for n in names if n in wanted]
    names = hard.pick(names, args.sample, args.seed if args.sample else None)
    expected = C.expected_counts(base) if os.path.exists(os.path.join(base, "expected.txt")) else {}
    args.out = args.out or f"/tmp/reference_{args.set}.csv"
    rows = []
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for i, name in enumerate(names, 1):
            status, count, secs, reported, err = run_one(args.binary, os.path.join(base, "data.graph"),
                                                         os.path.join(base, "queries", name), args.timeout)
            exp = expected.get(name)
            rows.append({"query": name, "group": hard.group_of(name), "status": status, "count": count,
                         "expected": exp, "match": None if exp is None or count is None else count == exp,
                         "seconds": round(secs, 4), "reported_s": reported, "error": err})
            w.writerow(rows[-1])
            f.flush()
            C.say(f"[{i}/{len(names)}] {name} {status} {'' if count is None else count} {secs:.3f}s")
    sgsi_rows = {r["query"]: r for r in csv.DictReader(open(args.sgsi))} if args.sgsi else {}
    md = summary(args, rows, sgsi_rows, C.machine_at_end(start))
    with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
