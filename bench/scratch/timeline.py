"""Where the wall time of one GPU count goes: host work, host waiting on the device, device busy (probe).

    python bench/scratch/timeline.py --edges 1e8 --shape watdiv --edge-labels 16 --vertex-labels 64 \
        --sizes 8 12 --queries 3 --only 0 1 --out DIR

One count per query under torch's profiler (CUPTI: the CUDA runtime and driver calls the host
made, and the kernels, copies and memsets the device ran). Reports per query:

- the count's wall time (from its first API call to its last);
- the time inside API calls by name (a device-to-host copy into pageable memory blocks until the
  queued work is done: its time is the host waiting);
- the device's busy time (the union of its kernel, copy and memset intervals) and the longest
  kernels;
- the events in order (``DIR/timeline_<q>.txt``): start (us from the first), duration, the gap of
  host time before a call, and the name.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import ensure_importable, probe_parser, probe_walks, report  # noqa: E402

ensure_importable()


def _union(intervals):
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def profile_count(count):
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.init()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        count()
    host, dev = [], []
    for ev in prof.events():
        row = (ev.time_range.start, ev.time_range.end, ev.name)
        if ev.device_type.name == "CUDA":
            dev.append(row)
        elif ev.name.startswith("cu"):
            host.append(row)
    return sorted(host), sorted(dev)


def summarise(qi, host, dev, out_dir):
    t0 = min(h[0] for h in host)
    t1 = max(max(h[1] for h in host), max(d[1] for d in dev) if dev else 0)
    wall = t1 - t0
    by = {}
    for a, b, name in host:
        r = by.setdefault(name, [0, 0.0])
        r[0] += 1
        r[1] += b - a
    in_api = sum(r[1] for r in by.values())
    busy = _union([(a, b) for a, b, _n in dev])
    kern = {}
    for a, b, name in dev:
        r = kern.setdefault(name[:50], [0, 0.0])
        r[0] += 1
        r[1] += b - a
    report(f"\n## query {qi}: wall {wall / 1e3:.2f} ms; in API calls {in_api / 1e3:.2f} ms "
           f"({len(host)} calls); host outside them {(wall - in_api) / 1e3:.2f} ms; "
           f"device busy {busy / 1e3:.2f} ms ({len(dev)} device events)")
    for name, (n, us) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        report(f"   API {name:<40} {n:>5} {us / 1e3:>8.3f} ms  ({us / max(n, 1):.1f} us each)")
    for name, (n, us) in sorted(kern.items(), key=lambda kv: -kv[1][1])[:15]:
        report(f"   dev {name:<50} {n:>5} {us / 1e3:>8.3f} ms")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        events = [(a, b, "H", n) for a, b, n in host] + [(a, b, "D", n) for a, b, n in dev]
        with open(os.path.join(out_dir, f"timeline_{qi}.txt"), "w") as f:
            last_end = t0
            for a, b, kind, name in sorted(events):
                gap = a - last_end if kind == "H" else 0.0
                if kind == "H":
                    last_end = b
                f.write(f"{a - t0:10.1f} {b - a:9.1f} {gap:8.1f} {kind} {name[:90]}\n")


def main(argv=None):
    ap = probe_parser(__doc__)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    _gdir, g, walks = probe_walks(args)
    for qi, pat in walks:
        for _ in range(3):
            g.count(pat, device="gpu")
        host, dev = profile_count(lambda: g.count(pat, device="gpu"))
        summarise(qi, host, dev, args.out)
    g.close()


if __name__ == "__main__":
    main()
