"""Convert a dataset of SNUCSE-CTA/DiversityComputationTool to the benchmark layout hard.py reads.

That repository's ``dataset/<name>/`` holds ``data_graph/<name>.graph`` and ``query_graph/*.graph``
as ``t 0 N`` / ``v ID LABEL`` / ``e U V X`` lines; the benchmark layout is ``data.graph`` and
``queries/`` as ``t N M`` / ``v ID LABEL DEGREE`` / ``e U V`` (../shared/benchmarks/README.md).
hprd-hard came from its ``dataset/hprd``; its ``dataset/human`` (4,674 vertices, 86,282 edges,
44 labels; 1,200 queries, dense and sparse, of 12, 16 and 20 vertices, no known counts) is the
protein network the SubgraphMatching studies call their hardest:

    git clone https://github.com/SNUCSE-CTA/DiversityComputationTool /tmp/dct    # 88ff415 measured
    python bench/convert_dct.py /tmp/dct/dataset/human bench/data/human
    python bench/hard.py --data bench/data/human --device gpu --sample 120 --timeout 10
"""

from __future__ import annotations

import argparse
import glob
import os


def convert(text):
    """The benchmark format of one ``t 0 N`` file: undirected edges once each, degrees counted.
    Returns (text, edges dropped as repeats or self-loops)."""
    labels, edges = [], []
    for line in text.splitlines():
        f = line.split()
        if f and f[0] == "v":
            labels.append((int(f[1]), f[2]))
        elif f and f[0] == "e":
            edges.append((int(f[1]), int(f[2])))
    degree = [0] * len(labels)
    kept = set()
    for u, v in edges:
        if u != v and (min(u, v), max(u, v)) not in kept:
            kept.add((min(u, v), max(u, v)))
            degree[u] += 1
            degree[v] += 1
    ordered = sorted(kept)
    lines = [f"t {len(labels)} {len(ordered)}"] + [f"v {i} {lab} {degree[i]}" for i, lab in labels]
    lines += [f"e {u} {v}" for u, v in ordered]
    return "\n".join(lines) + "\n", len(edges) - len(ordered)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", help="a DiversityComputationTool dataset folder, e.g. /tmp/dct/dataset/human")
    p.add_argument("out", help="the benchmark folder to write (data.graph, queries/)")
    args = p.parse_args(argv)
    (data,) = glob.glob(os.path.join(args.dataset, "data_graph", "*.graph"))
    os.makedirs(os.path.join(args.out, "queries"), exist_ok=True)
    with open(data) as f:
        text, dropped = convert(f.read())
    with open(os.path.join(args.out, "data.graph"), "w") as f:
        f.write(text)
    queries = sorted(glob.glob(os.path.join(args.dataset, "query_graph", "*.graph")))
    for path in queries:
        with open(path) as f:
            qtext, qdropped = convert(f.read())
        if qdropped:
            raise SystemExit(f"{path}: {qdropped} repeated edges or self-loops")
        with open(os.path.join(args.out, "queries", os.path.basename(path)), "w") as f:
            f.write(qtext)
    print(f"{args.out}: {text.splitlines()[0]} ({dropped} repeated edges dropped), {len(queries)} queries")


if __name__ == "__main__":
    main()
