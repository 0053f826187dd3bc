"""Writing result streams to Parquet (sgsi.results): row groups and contents."""

import pyarrow as pa
import pyarrow.parquet as pq

from sgsi import results

SIZES = [37, 250, 1, 99, 64, 300, 5]        # 756 rows in batches that straddle row groups


def _reader():
    schema = pa.schema([("a", pa.int64())])
    batches, at = [], 0
    for k in SIZES:
        batches.append(pa.record_batch([pa.array(range(at, at + k), pa.int64())], schema=schema))
        at += k
    return pa.RecordBatchReader.from_batches(schema, iter(batches))


def _groups(path):
    md = pq.ParquetFile(path).metadata
    return [md.row_group(i).num_rows for i in range(md.num_row_groups)]


def test_row_groups_are_full_but_the_last(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "ROW_GROUP_ROWS", 100)
    assert results.write_parquet(_reader(), tmp_path / "o.parquet") == 756
    assert _groups(tmp_path / "o.parquet") == [100] * 7 + [56]
    assert pq.read_table(tmp_path / "o.parquet").column("a").to_pylist() == list(range(756))


def test_parts_hold_full_row_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "ROW_GROUP_ROWS", 100)
    assert results.write_parquet_parts(_reader(), tmp_path, rows_per_file=300) == (756, 3)
    parts = sorted(tmp_path.glob("part-*.parquet"))
    assert [_groups(p) for p in parts] == [[100] * 3, [100] * 3, [100, 56]]
    assert pq.read_table(parts).column("a").to_pylist() == list(range(756))
