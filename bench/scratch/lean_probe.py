"""How much of a light step is the engine's machinery (probe).

    python bench/scratch/lean_probe.py --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 \
        --sizes 8 12 --queries 3 --only 0 1 4

Per query: the plain count (min / median of ``--counts``), then the same count with the core's
join steps run by a bare loop over the same backend calls (piece_degrees, row_lists, pack_rows,
take_columns) while they are light and of one link, the rest left to the engine
(``_count_leaves`` on the last level). Both must give the same number. A prototype: no replanning,
no budget levels, one piece a step.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import ensure_importable, probe_parser, probe_walks, report  # noqa: E402

ensure_importable()


def lean_count(g, pat):
    import cupy as cp
    from sgsi.join import engine as E
    from sgsi.join.backend import take_columns
    from sgsi.join.stream import segments_spanning
    key, backend = g._take_backend("gpu", None)
    _p, eng = g._prepare(key, backend, pat, None, True, None, count=True)
    steps = eng.plan.steps
    done = [0]

    def run():
        if eng.plan.empty or not eng.plan.factored:
            return None
        eng.counting = True
        lim = eng._limits(0)
        first = eng.plan.order[0]
        ids = backend.bits_to_ids(eng.plan.candidates[first], g.store.n_vertices, eng.plan.candidate_counts[first])
        chunk = {first: ids}
        store = g.store
        for k, step in enumerate(steps):
            if len(step.links) != 1:
                return None
            e0 = step.links[0]
            col = chunk[e0.other]
            n = int(col.size)
            if n == 0:
                return 0
            p = store.partition(e0.label_id, e0.direction)
            dense = backend.dense_degrees(store, p)
            deg, (total, longest, lo, hi, _d), offsets, _zeros = backend.piece_degrees(dense, col)
            if not (total <= min(lim.gba_entries, lim.chunk_rows, backend.light_entries)
                    and longest <= E.LIGHT_MAX_LIST) or offsets is None:
                return None
            gba = cp.empty(total, cp.int32)
            fill = cp.zeros(n, cp.int64)
            cbits = eng.plan.candidates[step.vertex]
            conflicts = [chunk[c] for c in step.conflicts]
            for groups, ci in segments_spanning(store, backend, p, lo, hi):
                backend.row_lists(groups, ci, col, cbits, conflicts, offsets, fill, gba)
            erow, evals = backend.pack_rows(gba, offsets, fill)
            if evals.size == 0:
                return 0
            keep = E._columns_read(steps[k + 1:], eng.plan)
            names = [u for u in chunk if u in keep]
            chunk = dict(zip(names, take_columns(cp, [chunk[u] for u in names], erow)))
            chunk[step.vertex] = evals
        done[0] += 1
        return eng._count_leaves(chunk, lim)

    with backend.measuring_memory():
        n = g._guard(backend.run, run)
    g._finished(backend, eng)
    g._give_back(key, backend)
    return n


def main(argv=None):
    ap = probe_parser(__doc__)
    ap.add_argument("--counts", type=int, default=20)
    args = ap.parse_args(argv)
    import cupy as cp
    _gdir, g, walks = probe_walks(args)

    def timed(fn):
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        n = fn()
        cp.cuda.Device().synchronize()
        return n, time.perf_counter() - t

    for qi, pat in walks:
        plain = lambda: g.count(pat, device="gpu")  # noqa: E731
        lean = lambda: lean_count(g, pat)  # noqa: E731
        n0 = plain()
        n1 = lean()
        if n1 is None:
            report(f"## query {qi}: {n0:,} matches; the lean loop does not apply")
            continue
        if n1 != n0:
            report(f"## query {qi}: DIFFERS: plain {n0:,}, lean {n1:,}")
            continue
        a, b = [], []
        for _ in range(args.counts):
            a.append(timed(plain)[1])
            b.append(timed(lean)[1])
        report(f"## query {qi}: {n0:,} matches; plain {min(a) * 1e3:.2f} / {statistics.median(a) * 1e3:.2f} ms, "
               f"lean core {min(b) * 1e3:.2f} / {statistics.median(b) * 1e3:.2f} ms (min / median); "
               f"core steps {len(g.last_stats and [0]) and g.last_stats.get('steps')}")
    g.close()


if __name__ == "__main__":
    main()
