"""bench/convert_dct.py: a DiversityComputationTool dataset in the benchmark layout, read back by
sgsi's query parser and counted like the same graph written by hand."""

import sys
from pathlib import Path

import sgsi

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
import convert_dct  # noqa: E402

# A square 0-1-2-3 with a chord 0-2, edge 0-1 given twice (both ways) and a self-loop on 3.
DATA = "t 0 4\nv 0 5\nv 1 7\nv 2 5\nv 3 7\ne 0 1 0\ne 1 0 0\ne 1 2 0\ne 2 3 0\ne 3 0 0\ne 0 2 0\ne 3 3 0\n"
QUERY = "t 0 3\nv 0 5\nv 1 7\nv 2 5\ne 0 1 0\ne 1 2 0\ne 0 2 0\n"


def test_convert_dct_writes_the_benchmark_layout(tmp_path):
    text, dropped = convert_dct.convert(DATA)
    assert dropped == 2
    assert text.splitlines()[:5] == ["t 4 5", "v 0 5 3", "v 1 7 2", "v 2 5 3", "v 3 7 2"]
    src = tmp_path / "dct" / "human"
    (src / "data_graph").mkdir(parents=True)
    (src / "query_graph").mkdir()
    (src / "data_graph" / "human.graph").write_text(DATA)
    (src / "query_graph" / "query_dense_3_1.graph").write_text(QUERY)
    out = tmp_path / "human"
    convert_dct.main([str(src), str(out)])
    g = sgsi.build(str(tmp_path / "h.sgsi"), graph=str(out / "data.graph"))
    # Triangles 0-1-2 and 0-3-2 (labels 5, 7, 5 through the chord), each twice (0 and 2 swap);
    # the self-loop on 3 and the repeated edge add none.
    assert g.count(str(out / "queries" / "query_dense_3_1.graph"), device="cpu") == 4
    g.close()
