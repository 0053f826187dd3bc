"""Resource limits: tiny memory budgets, and results larger than the scratch disk.

A query at the smallest budget (16KB) gives the same answer in many small
chunks; a result that does not fit on the scratch disk fails with a clear
message and leaves nothing behind.
"""

import errno
import os
import sys

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import reliability_helpers as rh
import sgsi
from sgsi import results
from sgsi.errors import BudgetError

from test_build_faults import needs_tmpfs, run_on_tmpfs  # noqa: F401 - shared helpers


def _q(s):
    return "'" + str(s).replace("'", "''") + "'"


def test_tiny_budget_gives_the_same_answers_in_more_chunks(social):
    with sgsi.open(social["store"]) as g:
        for p in rh.SOCIAL_PATTERNS:
            want = rh.expected_rows(social, p)
            big = g.count(p, device="cpu")
            big_chunks = g.last_stats.get("chunks", 0)
            assert big == len(want)
            assert g.count(p, device="cpu", memory_budget="16KB") == len(want), p
            assert rh.rows_of(g.match(p, device="cpu", memory_budget="16KB")) == want, p
            assert g.last_stats.get("chunks", 0) >= big_chunks


def test_tiny_budget_on_many_matches(dense, tmp_path):
    """Half the dense graph at 16KB: 7,561 matches in 500 small chunks, one exact count.

    (Half: the whole graph's 57,581 matches took 808 chunks and five times as long.)
    """
    half = rh.write_edges(tmp_path / "half.parquet", *pq.read_table(dense["efile"]).slice(0, 12_000).columns)
    with sgsi.build(str(tmp_path / "d16.sgsi"), edges=half, memory_budget="16KB") as g:
        p = "(a)-->(b)-->(c), (a)-->(c)"
        n16 = g.count(p, device="cpu", memory_budget="16KB")
        chunks16 = g.last_stats["chunks"]
        assert n16 == g.count(p, device="cpu", memory_budget="64MB")
        assert chunks16 > 10 * g.last_stats["chunks"]
        assert g.match(p, device="cpu", memory_budget="16KB").read_all().num_rows == n16


def test_budget_smaller_than_the_stores_segments_is_a_clear_error(dense):
    with sgsi.build(str(dense["dir"] / "d8.sgsi"), edges=dense["efile"], memory_budget="8MB") as g:
        with pytest.raises(BudgetError, match="below this store's floor.*smaller memory_budget"):
            g.count("(a)-->(b)", device="cpu", memory_budget="16KB")
    with sgsi.open(dense["store"]) as g:
        with pytest.raises(BudgetError, match="minimum"):
            g.count("(a)-->(b)", device="cpu", memory_budget="1KB")
        with pytest.raises(BudgetError, match="not a size"):
            g.count("(a)-->(b)", device="cpu", memory_budget="lots")


# ---------------------------------------------------------------------------
# A result larger than the scratch disk
# ---------------------------------------------------------------------------


def _fail_after(monkeypatch, rows, err=errno.ENOSPC):
    """Make result writing fail with ``err`` once ``rows`` rows have been written."""
    real = results._RowGroupWriter.write
    written = [0]

    def write(self, batch):
        written[0] += batch.num_rows
        if written[0] > rows:
            raise OSError(err, os.strerror(err))
        return real(self, batch)

    monkeypatch.setattr(results._RowGroupWriter, "write", write)


def test_sql_result_larger_than_scratch_disk(dense, scratch_root, monkeypatch):
    con = duckdb.connect()
    reg = sgsi.register(con, device="cpu", memory_budget=dense["budget"])
    _fail_after(monkeypatch, 50_000)
    with pytest.raises(duckdb.Error) as err:
        con.execute(f"SELECT count(*) FROM match({_q(dense['store'])}, {_q(rh.HUGE)})").fetchall()
    msg = str(err.value)
    assert "No space left on device" in msg and "scratch directory" in msg and "max_rows" in msg, msg
    assert "Traceback" not in msg
    monkeypatch.undo()
    d = reg.scratch_dir
    assert d is None or not os.path.exists(d) or not any(os.scandir(d)), os.listdir(d)
    # the connection works, and a result that fits is fine
    assert con.execute(f"SELECT count(*) FROM match({_q(dense['store'])}, {_q(rh.HUGE)}, max_rows := 1000)"
                       ).fetchall() == [(1000,)]
    con.close()
    assert list(scratch_root.iterdir()) == []


def test_cli_match_output_larger_than_disk(dense, tmp_path):
    """`sgsi match --output` past a file-size limit (EFBIG, as a full disk gives ENOSPC): one line, no file.

    (256KB: the file passes it after about 7 row groups; 2MB took 56, four times as long.)
    """
    out = tmp_path / "out.parquet"
    p = rh.spawn_sgsi("match", dense["store"], rh.HUGE, "--output", out, "--device", "cpu",
                      "--memory-budget", dense["budget"], fsize=256 << 10)
    rc, stdout, err, _ = rh.wait_exit(p, 120)
    assert rc == 1, err
    line = rh.assert_one_line(err, "sgsi: error: ")
    assert "File too large" in line and "out.parquet" in line, line
    assert list(tmp_path.iterdir()) == []


def test_results_writer_reports_the_first_error(tmp_path, monkeypatch):
    """A write that fails on a full disk raises its OSError, not the "closed file" error of the cleanup after it."""
    schema = pa.schema([("a", pa.int64())])
    real = results.pq.ParquetWriter

    class FullDisk(real):
        """Fails like pyarrow on a full disk: the first write raises, the file is closed after it."""
        failed = False

        def write_table(self, *a, **k):
            if not FullDisk.failed:
                FullDisk.failed = True
                raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")
            raise pa.ArrowInvalid("Operation on closed file")      # what pyarrow says next (seen on a tmpfs)

    monkeypatch.setattr(results.pq, "ParquetWriter", FullDisk)
    batches = [pa.record_batch([pa.array(range(results.ROW_GROUP_ROWS))], schema=schema)] * 2
    with pytest.raises(OSError) as err:
        results.write_parquet(pa.RecordBatchReader.from_batches(schema, iter(batches)), tmp_path / "o.parquet")
    assert err.value.errno == errno.ENOSPC, repr(err.value)
    assert list(tmp_path.iterdir()) == []
    FullDisk.failed = False
    with pytest.raises(OSError) as err:
        results.write_parquet_parts(pa.RecordBatchReader.from_batches(schema, iter(batches)), tmp_path)
    assert err.value.errno == errno.ENOSPC, repr(err.value)


def test_python_match_to_parquet_on_a_full_disk(dense, tmp_path, monkeypatch):
    out = tmp_path / "out.parquet"
    _fail_after(monkeypatch, 20_000)
    with sgsi.open(dense["store"]) as g:
        with pytest.raises(OSError) as err:
            results.write_parquet(g.match(rh.HUGE, device="cpu", memory_budget=dense["budget"]), out)
        assert err.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


@needs_tmpfs
def test_sql_scratch_on_a_real_full_disk(dense, tmp_path):
    """TMPDIR on a 512KB tmpfs: match() of a large result fails clearly and empties its scratch
    (room enough for the 23,145 rows of the query after it)."""
    script = f"""
import duckdb, sgsi
con = duckdb.connect()
sgsi.register(con, device="cpu", memory_budget={dense['budget']!r})
try:
    con.execute("SELECT count(*) FROM match({_q(dense['store'])}, {_q(rh.HUGE)})").fetchall()
    print("NO ERROR")
except duckdb.Error as e:
    print("ERROR", str(e).splitlines()[0])
print(con.execute("SELECT count(*) FROM match({_q(dense['store'])}, '(a)-->(b)')").fetchall())
con.close()
"""
    f = tmp_path / "s.py"
    f.write_text(script)
    r = run_on_tmpfs(tmp_path, "512k", f"TMPDIR=$FS {sys.executable} {f}")
    out = r.stdout
    assert "ERROR" in out and "No space left on device" in out and "scratch" in out, (out, r.stderr[-2000:])
    assert "[(" in out, out                          # the connection went on working
    assert out.strip().splitlines()[-1] == "LEFT:", out


# ---------------------------------------------------------------------------
# What the engine itself needs
# ---------------------------------------------------------------------------


def _ring(tmp_path, n, budget):
    """A directed cycle of n vertices: a path pattern of k vertices matches exactly n times."""
    src = np.arange(n, dtype=np.int64)
    e = rh.write_edges(tmp_path / "ring.parquet", src, (src + 1) % n)
    return sgsi.build(str(tmp_path / "ring.sgsi"), edges=e, memory_budget=budget)


def _path(k):
    return "".join(f"(v{i})-->" for i in range(k - 1)) + f"(v{k - 1})"






