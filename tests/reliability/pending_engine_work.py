"""Reproducers of hardening gaps that still need engine or ingest work (issue 7).

Not collected by pytest (the file name does not start with test_): each
function below fails today. Move one back into its test file (named in the
comment above it) once the change its docstring describes has landed.
"""

# ---- from test_resource_limits.py ----
def test_needs_engine_results_writer_reports_the_first_error(tmp_path, monkeypatch):
    """NEEDS sgsi/results.py (outside this task's files): a failed write must raise the write's error.

    When pyarrow's ParquetWriter fails (disk full: ENOSPC, or EFBIG), it
    closes its file; _RowGroupWriter.close() (called from the `finally` of
    write_parquet and write_parquet_parts) then flushes the pending rows
    again and raises ArrowInvalid("Operation on closed file"), which
    replaces the OSError. The command line and match() dig the OSError out
    of __context__ (sgsi.errors.os_error_behind) for now. Fix: after a
    failed write, close() should only close the writer (no flush), e.g. a
    `failed` flag set in write()/_flush() on exception.
    """
    import pyarrow as pa
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

# ---- from test_resource_limits.py ----
def test_needs_engine_memory_bounded_by_budget_across_depth(tmp_path):
    """NEEDS ENGINE: the memory a query holds must stay near its budget, however long the pattern.

    sgsi/join/engine.py _extend runs depth first and keeps, at every level of
    the recursion, the table `new` that the level's join made (up to
    Limits.gba_entries rows of k columns) while it recurses into it; each
    level is bounded by the budget, but the levels add up: a k-vertex
    pattern holds about k/2 budgets (and, with the default budget of a
    quarter of RAM, a 100-vertex homomorphism pattern on a 3-vertex cycle
    was OOM-killed at 20 GB). Limits.from_budget should divide the budget
    among the levels (e.g. chunk_rows and gba_entries per level scaled by
    1/len(steps)), or a level's table should be released (sliced and
    dropped) before the next level runs. Measured here: peak traced memory
    of a 40-vertex path on a 4,000-vertex cycle at a 256KB budget.
    """
    budget = 256 * 1024
    with _ring(tmp_path, 4000, "256KB") as g:
        g.count(_path(3), device="cpu", memory_budget=budget)            # warm caches and imports
        tracemalloc.start()
        try:
            assert g.count(_path(40), device="cpu", memory_budget=budget) == 4000
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak <= 3 * budget, f"peak {peak:,} bytes at a budget of {budget:,}"

# ---- from test_resource_limits.py ----
def test_needs_engine_deep_patterns_without_deep_recursion(tmp_path):
    """NEEDS ENGINE: the join must not recurse once per pattern vertex.

    sgsi/join/engine.py _extend calls itself (`yield from self._extend(sub,
    k + 1, ...)`) for every join step, so the Python stack grows with the
    pattern: a path of ~1,000 vertices raises RecursionError (sgsi.graph
    refuses patterns above MAX_PATTERN_VERTICES = 256 for now). Drive the
    depth-first walk with an explicit stack of (level, piece iterator)
    instead. Measured here: a 120-vertex path with only 100 frames of stack
    to spare (the engine is called directly, past the Graph's size check).
    """
    from sgsi import budget as budget_mod
    from sgsi.join.backend import get_backend
    from sgsi.join.engine import Engine
    from sgsi.join.plan import make_plan
    from sgsi.pattern import parse_pattern

    with _ring(tmp_path, 300, "64KB") as g:
        backend = get_backend("cpu")
        plan = make_plan(g.store, parse_pattern(_path(120)), backend)
        engine = Engine(g.store, plan, backend, budget_mod.parse_size("64KB"))
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(len(inspect.stack()) + 100)
        try:
            n = engine.count()
        finally:
            sys.setrecursionlimit(old)
        assert n == 300

# ---- from test_resource_limits.py ----
def test_needs_engine_hub_rows_share_one_neighbour_stream(tmp_path):
    """NEEDS ENGINE: rows that join through the same high-degree vertex must not each re-read its list.

    sgsi/join/engine.py _pieces sizes pieces by the sum over ROWS of
    |N(v, l0)|, but _join (factorised) allocates the GBA per DISTINCT
    first-link vertex. Rows that all link to one hub are therefore cut into
    one-row pieces (each row alone "exceeds" gba_entries), and every piece
    streams the hub's whole neighbour list again: quadratic in the hub's
    degree (a 200,000-edge star takes ~100 s for `(b)<--(a)-->(c)` at the
    default budget on a store built at 64KB, and ~1 h at a 64KB budget).
    _pieces should budget the distinct first-link vertices' degrees (and
    split one vertex's list across pieces when it alone is too large).
    Measured here: segments read for a 1,500-edge star, against the
    partition's segment count.
    """
    n = 1500
    e = rh.write_edges(tmp_path / "star.parquet", np.zeros(n, np.int64), np.arange(1, n + 1, dtype=np.int64))
    with sgsi.build(str(tmp_path / "star.sgsi"), edges=e, memory_budget="64KB") as g:
        segs = len(g.store._seg_edges)
        assert g.count("(b)<--(a)-->(c)", device="cpu", memory_budget="64KB") == n * (n - 1)
        read = g.last_stats["segments"]
    assert read <= 20 * segs, f"{read:,} segment reads for a store of {segs} segments"

# ---- from test_hostile_parquet.py ----
def test_needs_engine_integer_widths_across_files(tmp_path):
    """NEEDS INGEST: int32 ids in one file and int64 ids above 2^31 in the next must build.

    sgsi/storage/ingest.py _load_parquet marks such a column "integer-mixed"
    and CASTs it to BIGINT, but only after read_parquet([...]) has read every
    file with the first file's type (INTEGER), which fails on the first id
    past 2^31 ("failed to cast column src from BIGINT to INTEGER"). Pass
    `union_by_name=true` to the read_parquet of the edge and of the vertex
    files (DuckDB then reads each file with its own type and unifies them to
    the widest), e.g. only when some column is "integer-mixed".
    """
    a = rh.write_edges(tmp_path / "i32.parquet", pa.array([1, 2], pa.int32()), pa.array([2, 3], pa.int32()))
    b = rh.write_edges(tmp_path / "i64.parquet", pa.array([3, 2**40], pa.int64()), pa.array([2**40, 1], pa.int64()))
    c = rh.write_edges(tmp_path / "u8.parquet", pa.array([7], pa.uint8()), pa.array([1], pa.uint8()))
    with sgsi.build(str(tmp_path / "g.sgsi"), edges=[a, b, c]) as g:
        assert rh.rows_of(g.match("(a)-->(b)-->(c)-->(d)-->(a)", device="cpu")) == sorted(
            [(1, 2, 3, 2**40), (2, 3, 2**40, 1), (3, 2**40, 1, 2), (2**40, 1, 2, 3)])
        assert g.count("(a)-->(b)", device="cpu") == 5

