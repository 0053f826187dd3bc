"""Scaling plots from the runs of bench/billion.py: time per query against |E| and against the budget.

    python bench/scaling.py [--results bench/results] [--out bench/results]

Reads every ``billion-<edges>.csv`` under ``--results`` (one per graph size;
rows of status ``ok`` only) and writes

- ``scaling.csv``: edges, budget, queries, mean and median seconds per query,
  bytes copied to the GPU per query;
- ``scaling_edges.png``: median time per query against |E| (log-log), one
  line per memory budget (the median: the first queries of a process also
  compile kernels and read the store's pages from disk);
- ``scaling_budget.png``: median time per query against the memory budget, one
  line per graph size (a budget below the store's size streams segments, one
  above it keeps them on the device).

The plots need matplotlib (``pip install matplotlib``); without it only the
CSV is written.
"""

from __future__ import annotations

import argparse
import csv
import glob
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

C.ensure_importable()
from sgsi.budget import parse_size  # noqa: E402


def load(results):
    """{(edges, budget): [rows]} of the ok rows of every billion-<edges>.csv."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(results, "billion-*.csv"))):
        m = re.match(r"billion-(\d+(?:\.\d+)?(?:e\d+)?)\.csv$", os.path.basename(path))
        if not m:
            continue
        edges = int(float(m.group(1)))
        with open(path) as f:
            for row in csv.DictReader(f):
                if row["status"] == "ok":
                    runs.setdefault((edges, row["budget"]), []).append(row)
    return runs


def summarize(runs):
    out = []
    for (edges, budget), rows in sorted(runs.items(), key=lambda kv: (kv[0][0], parse_size(kv[0][1]))):
        secs = [float(r["seconds"]) for r in rows]
        h2d = [float(r["h2d_bytes"] or 0) for r in rows]
        out.append({"edges": edges, "budget": budget, "budget_bytes": parse_size(budget), "queries": len(rows),
                    "mean_s": round(statistics.mean(secs), 4), "median_s": round(statistics.median(secs), 4),
                    "h2d_bytes_per_query": int(statistics.mean(h2d))})
    return out


def _figure(plt, lines, path, xlabel, title, xscale, yscale="linear"):
    """One plot of ``lines`` = [(label, [(x, y)])], saved as ``path``."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, pts in lines:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xscale(xscale[0], **(xscale[1] if len(xscale) > 1 else {}))
    ax.set_yscale(yscale)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("median seconds per query")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot(summary, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        C.say("matplotlib is not installed: CSV only")
        return []
    by_budget = [(f"budget {b}", sorted((s["edges"], s["median_s"]) for s in summary if s["budget"] == b))
                 for b in sorted({s["budget"] for s in summary}, key=parse_size)]
    by_edges = [(f"{e:,} edges", sorted((s["budget_bytes"] / 2**30, s["median_s"]) for s in summary if s["edges"] == e))
                for e in sorted({s["edges"] for s in summary})]
    return [_figure(plt, by_budget, os.path.join(out, "scaling_edges.png"), "edges |E|",
                    "12-vertex random-walk queries, match_count from DuckDB", ("log",), "log"),
            _figure(plt, by_edges, os.path.join(out, "scaling_budget.png"), "memory budget (GiB)",
                    "in-core (large budget) vs streamed segments (small)", ("log", {"base": 2}))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=C.RESULTS_DIR)
    ap.add_argument("--out", default=C.RESULTS_DIR)
    args = ap.parse_args(argv)
    summary = summarize(load(args.results))
    if not summary:
        raise SystemExit(f"no billion-*.csv with completed queries under {args.results}")
    C.write_csv(os.path.join(args.out, "scaling.csv"), summary)
    for s in summary:
        C.say(s)
    for path in plot(summary, args.out):
        C.say(f"wrote {path}")


if __name__ == "__main__":
    main()
