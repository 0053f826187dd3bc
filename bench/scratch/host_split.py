"""Where a GPU count's wall time goes, by engine function, with no profiler (probe).

    python bench/scratch/host_split.py --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 \
        --sizes 8 12 --queries 3 --only 0 1 4 --counts 20

cProfile costs about a microsecond a Python call and slows a light count 1.4x; this wraps only
the functions named in ``WATCHED`` (a perf_counter pair and a stack push each, about 1 us a
call). Each wrapped function is charged its own time: its wall time less that of the wrapped
functions it called (a generator function's time is that of its ``next`` calls). Time spent
waiting for the device in a read is charged to the function that read. Prints per query the
plain time (min / median of ``--counts`` counts, unwrapped), then, wrapped, per function: calls
a count and us a count (the median count's split).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import device_sync, ensure_importable, probe_parser, probe_walks, report  # noqa: E402

ensure_importable()

#: (module, qualified name) of the functions timed.
WATCHED = [
    ("sgsi.graph", "Graph._engine"), ("sgsi.graph", "Graph._take_backend"), ("sgsi.graph", "Graph._finished"),
    ("sgsi.graph", "Graph._give_back"), ("sgsi.pattern", "load_pattern"), ("sgsi.budget", "resolve_budget"),
    ("sgsi.join.plan", "make_plan"), ("sgsi.join.plan", "_filtered_sets"), ("sgsi.join.plan", "_candidates"), ("sgsi.join.plan", "_order"),
    ("sgsi.join.plan", "_factored_vertices"), ("sgsi.join.plan", "_step"), ("sgsi.join.plan", "_leaf_group"),
    ("sgsi.join.plan", "_dense_cost_jobs"), ("sgsi.join.plan", "_degree_mask"),
    ("sgsi.join.engine", "Engine.__init__"), ("sgsi.join.engine", "Engine._run"),
    ("sgsi.join.engine", "Engine._roots"), ("sgsi.join.engine", "Engine._step"),
    ("sgsi.join.engine", "Engine._pieces_with_sets"), ("sgsi.join.engine", "Engine._pieces"),
    ("sgsi.join.engine", "Engine._sets"), ("sgsi.join.engine", "Engine._row_sets"),
    ("sgsi.join.engine", "Engine._sets_whole"), ("sgsi.join.engine", "Engine._finish"),
    ("sgsi.join.engine", "Engine._extension"), ("sgsi.join.engine", "Engine._count_leaves"),
    ("sgsi.join.engine", "Engine._block_sizes"), ("sgsi.join.engine", "Engine._subtree_counts"),
    ("sgsi.join.engine", "Engine._weighted_rows"), ("sgsi.join.engine", "Engine._extended_rows"),
    ("sgsi.join.engine", "Engine._add_counts"), ("sgsi.join.engine", "Engine._groups_product"),
    ("sgsi.join.engine", "Engine._member"), ("sgsi.join.engine", "_rows_kept"), ("sgsi.join.engine", "_taken"),
    ("sgsi.join.engine", "_TuplesOf.__init__"), ("sgsi.join.engine", "_exact_product"),
    ("sgsi.join.engine", "_sum_bound"), ("sgsi.join.engine", "_maxes"),
    ("sgsi.join.stream", "segments_spanning"), ("sgsi.join.stream", "segments_of"),
    ("sgsi.join.backend", "host_ints"), ("sgsi.join.backend", "exclusive_sum"),
    ("sgsi.join.backend", "prefix_sum"), ("sgsi.join.backend", "nonzero_index"),
    ("sgsi.join.backend", "take_columns"), ("sgsi.join.backend", "distinct_index"),
    ("sgsi.join.gpu", "scan"), ("sgsi.join.gpu", "flatnonzero"), ("sgsi.join.gpu", "read_ints"),
    ("sgsi.join.gpu", "GpuBackend.piece_degrees"), ("sgsi.join.gpu", "GpuBackend.piece_summary"),
    ("sgsi.join.gpu", "GpuBackend.row_lists"), ("sgsi.join.gpu", "GpuBackend.pack_rows"),
    ("sgsi.join.gpu", "GpuBackend.bits_to_ids"), ("sgsi.join.gpu", "GpuBackend.candidate_bits"),
    ("sgsi.join.gpu", "GpuBackend.counts_and_overlaps"), ("sgsi.join.gpu", "GpuBackend.candidate_sets"), ("sgsi.join.gpu", "GpuBackend.extend"),
    ("sgsi.join.gpu", "GpuBackend.member"), ("sgsi.join.gpu", "GpuBackend.segments"),
    ("sgsi.join.gpu", "GpuBackend.dense_degrees"), ("sgsi.join.gpu", "GpuBackend.add_at"),
    ("sgsi.join.gpu", "GpuBackend.distinct_sum"), ("sgsi.join.gpu", "GpuBackend.run"),
    ("sgsi.join.gpu", "GpuBackend.intersect_lists"), ("sgsi.join.gpu", "GpuBackend.sizes_less_own"),
    ("sgsi.join.gpu", "GpuBackend.bincount"), ("sgsi.join.gpu", "GpuBackend.repeat_index"),
]

_clock = time.perf_counter
_stack = []           # [start, time of wrapped callees] per open call
_spent = {}           # name -> [calls, own seconds]


def _charge(name, start, inner):
    dt = _clock() - start
    r = _spent.setdefault(name, [0, 0.0])
    r[0] += 1
    r[1] += dt - inner
    if _stack:
        _stack[-1][1] += dt


def _wrap(name, fn):
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*args, **kwargs):
            it = fn(*args, **kwargs)
            while True:
                _stack.append([_clock(), 0.0])
                try:
                    item = next(it)
                except StopIteration:
                    start, inner = _stack.pop()
                    _charge(name, start, inner)
                    return
                start, inner = _stack.pop()
                _charge(name, start, inner)
                _spent[name][0] -= 1          # a call is its first next only
                yield item
        return gen

    @functools.wraps(fn)
    def call(*args, **kwargs):
        _stack.append([_clock(), 0.0])
        try:
            return fn(*args, **kwargs)
        finally:
            start, inner = _stack.pop()
            _charge(name, start, inner)
    return call


def _patch():
    """Wrap every WATCHED function where it is defined and where another module imported it."""
    import sgsi
    mods = [m for n, m in list(sys.modules.items()) if n.startswith("sgsi") and m is not None]
    for modname, qual in WATCHED:
        try:
            mod = importlib.import_module(modname)
        except ImportError:             # the GPU backend's, where CuPy is missing
            continue
        owner, attr = mod, qual
        if "." in qual:
            cls, attr = qual.split(".")
            owner = getattr(mod, cls)
        fn = owner.__dict__[attr]
        wrapped = _wrap(qual, fn)
        setattr(owner, attr, wrapped)
        if owner is mod:
            for m in mods:
                if m.__dict__.get(attr) is fn:
                    setattr(m, attr, wrapped)
    return sgsi


def _profiled(qi, count, counts):
    """cProfile over ``counts`` counts: the top functions by own time, us a count, and their callers."""
    import cProfile
    import pstats
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(counts):
        count()
    pr.disable()
    st = pstats.Stats(pr)
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])
    report(f"\n## query {qi} under cProfile ({st.total_calls / counts:.0f} calls a count): own us, cumulative us, "
           f"calls a count, function, its largest callers")
    for (file, line, name), (_cc, nc, tt, ct, callers) in rows[:120]:
        top = sorted(callers.items(), key=lambda kv: -kv[1][2])[:3]
        who = ", ".join(f"{os.path.basename(f)}:{ln}:{fn}" for (f, ln, fn), _v in top)
        report(f"   {tt / counts * 1e6:8.1f} {ct / counts * 1e6:8.1f} {nc / counts:6.1f}  "
               f"{os.path.basename(file)}:{line}:{name}  <- {who}")
    report(f"\n## query {qi} under cProfile, by cumulative time (sgsi functions)")
    rows = sorted(((k, v) for k, v in st.stats.items() if "sgsi" in k[0]), key=lambda kv: -kv[1][3])
    for (file, line, name), (_cc, nc, tt, ct, callers) in rows[:70]:
        report(f"   {tt / counts * 1e6:8.1f} {ct / counts * 1e6:8.1f} {nc / counts:6.1f}  "
               f"{os.path.basename(file)}:{line}:{name}")


def main(argv=None):
    ap = probe_parser(__doc__)
    ap.add_argument("--counts", type=int, default=20)
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--profile", type=int, nargs="*", default=[],
                    help="queries also counted under cProfile: own and cumulative us a count of the top functions")
    args = ap.parse_args(argv)
    _gdir, g, walks = probe_walks(args)
    sync = device_sync(args.device)

    def timed(pat):
        sync()
        t = _clock()
        n = g.count(pat, device=args.device)
        sync()
        return n, _clock() - t

    plain = {}
    for qi, pat in walks:
        for _ in range(3):
            timed(pat)
        plain[qi] = [timed(pat) for _ in range(args.counts)]
    for qi, pat in walks:
        if qi in args.profile:
            _profiled(qi, lambda: timed(pat), args.counts)
    _patch()
    for qi, pat in walks:
        for _ in range(3):
            timed(pat)
        splits = []
        for _ in range(args.counts):
            _spent.clear()
            n, dt = timed(pat)
            splits.append((dt, {k: tuple(v) for k, v in _spent.items()}))
        splits.sort(key=lambda s: s[0])
        dt, split = splits[len(splits) // 2]
        ts = [t for _n, t in plain[qi]]
        inside = sum(v[1] for v in split.values())
        report(f"\n## query {qi}: {n:,} matches; plain {min(ts) * 1e3:.2f} / {statistics.median(ts) * 1e3:.2f} ms "
               f"(min / median); wrapped, the median count: {dt * 1e3:.2f} ms, of which {inside * 1e3:.2f} "
               f"ms inside the wrapped functions")
        for name, (calls, own) in sorted(split.items(), key=lambda kv: -kv[1][1]):
            report(f"   {own * 1e6:8.1f} us  {calls:4d}  {name}")


if __name__ == "__main__":
    main()
