"""bench/reference.py end to end, with a stand-in for the compiled reference: its output parsed,
a query past the timeout stopped, the table set beside a hard.py run."""

import csv
import os
import stat
import subprocess
import sys
from pathlib import Path

REF = Path(__file__).resolve().parents[1] / "bench" / "reference.py"
DATA = Path(__file__).resolve().parent / "data" / "benchmarks"
sys.path.insert(0, str(REF.parent))
import hard  # noqa: E402

# Prints the expected count as the reference prints its own; sleeps on dense_8 (past the timeout);
# a wrong count on sparse_8; no count (a crash) on dense_16.
STAND_IN = """#!{python}
import os, sys, time
q = sys.argv[sys.argv.index("-q") + 1]
name = os.path.basename(q)
if "dense_8_" in name:
    time.sleep(30)
if "dense_16_" in name:
    sys.exit("Segmentation fault")
want = dict(l.split() for l in open(os.path.join(os.path.dirname(os.path.dirname(q)), "expected.txt")))
n = int(want[name]) + ("sparse_8_" in name)
print("Total time (seconds): 0.0012")
print("#Embeddings: %d" % n)
"""


def test_reference_run_parses_stops_and_compares(tmp_path):
    binary = tmp_path / "ref"
    binary.write_text(STAND_IN.format(python=sys.executable))
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    names = ["query_dense_4_1.graph", "query_dense_8_1.graph", "query_dense_16_1.graph", "query_sparse_8_1.graph"]
    (tmp_path / "names.txt").write_text("\n".join(names))
    sgsi_csv = tmp_path / "sgsi.csv"
    with open(sgsi_csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=hard.FIELDS)
        w.writeheader()
        for n, status, secs in zip(names, ["ok", "ok", "ok", "cancelled"], [0.01, 0.5, 2.0, 1.0]):
            w.writerow({"query": n, "group": hard.group_of(n), "status": status, "count": 720 if n == names[0] else 1,
                        "seconds": secs})
    out = tmp_path / "ref.csv"
    md = subprocess.run([sys.executable, str(REF), "--binary", str(binary), "--data", str(DATA / "yeast"),
                         "--set", "yeast", "--names", str(tmp_path / "names.txt"), "--timeout", "2",
                         "--out", str(out), "--sgsi", str(sgsi_csv)],
                        check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""}).stdout
    rows = {r["query"]: r for r in csv.DictReader(open(out))}
    assert [rows[n]["status"] for n in names] == ["ok", "cancelled", "error", "ok"]
    assert rows[names[0]]["count"] == "720" and rows[names[0]]["match"] == "True"
    assert rows[names[3]]["match"] == "False" and rows[names[0]]["reported_s"] == "0.0012"
    assert 2 <= float(rows[names[1]]["seconds"]) < 10
    table = {line.split(" | ")[0].strip("| "): line.rstrip(" |").split(" | ") for line in md.splitlines()
             if line.startswith("| ")}
    assert table["**all**"][1:6] == ["4", "2 (50%)", "2 (50%)", "2 (50%)", "3 (75%)"]
    assert "differing: 0" in md and "reference counts unlike the expected: 1 ['query_sparse_8_1.graph']" in md
    again = subprocess.run([sys.executable, str(REF), "--binary", "unused", "--data", str(DATA / "yeast"),
                            "--timeout", "2", "--table", str(out), "--sgsi", str(sgsi_csv)],
                           check=True, capture_output=True, text=True).stdout
    assert [line for line in again.splitlines() if line.startswith("| ")] == \
        [line for line in md.splitlines() if line.startswith("| ")]
    assert "unlike the expected: 1" in again
