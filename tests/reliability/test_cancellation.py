"""Cancellation: a query stopped early stops the engine, frees its memory and leaves no files.

The queries here have astronomically many matches (a 7-vertex path on a
dense random graph), so only a working stop ends them; each bound below
is a liveness bound, generous on a slow 2-core CI machine, not a speed
measurement.
"""

import gc
import linecache
import os
import signal
import threading
import time
import tracemalloc

import duckdb
import pyarrow as pa
import pytest

import reliability_helpers as rh
import sgsi
from sgsi.errors import Cancelled

#: Seconds a stopped query may take to end (a full run would take days).
STOP_BOUND = 20


def _q(s):
    return "'" + str(s).replace("'", "''") + "'"


@pytest.fixture(scope="module")
def dgraph(dense):
    g = sgsi.open(dense["store"])
    # warm up (lazy imports, the store's caches) so that what a query leaves behind can be measured
    g.match(rh.HUGE, device="cpu", memory_budget=dense["budget"], max_rows=100).read_all()
    yield g
    g.close()


def _traced(fn):
    """Run fn with tracemalloc on; return (fn(), memory still held after gc)."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        linecache.clearcache()          # pyarrow formats a stream's error with its source lines
        gc.collect()
        return result, tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("how", ["close", "with", "del", "limit"])
def test_stopping_a_reader_early_stops_the_engine(dgraph, dense, how):
    finished = []

    def run():
        dgraph.last_stats = {}
        if how == "limit":
            t = dgraph.match(rh.HUGE, device="cpu", memory_budget=dense["budget"], max_rows=5000).read_all()
            assert t.num_rows == 5000
        else:
            reader = dgraph.match(rh.HUGE, device="cpu", memory_budget=dense["budget"])
            if how == "with":
                with reader:
                    for _ in range(3):
                        reader.read_next_batch()
            else:
                for _ in range(3):
                    reader.read_next_batch()
                if how == "close":
                    reader.close()
                    # the engine ended at close(), while the reader object is still referenced
                    finished.append(bool(dgraph.last_stats))
                    with pytest.raises(Exception):
                        reader.read_next_batch()
                del reader
        finished.append(bool(dgraph.last_stats))
    _, held = _traced(run)
    assert all(finished)                   # the generator's finally ran: the engine is gone
    assert held < 256 * 1024, held         # and so is what it held
    assert dgraph.count("(a)-->(b)", device="cpu") > 0      # the Graph is still fine


def test_cancel_event_stops_count_and_match(dgraph, dense):
    for run in (lambda ev: dgraph.count(rh.HUGE, device="cpu", memory_budget=dense["budget"], cancel=ev),
                lambda ev: dgraph.match(rh.HUGE, device="cpu", memory_budget=dense["budget"], cancel=ev).read_all()):
        ev = threading.Event()
        timer = threading.Timer(0.5, ev.set)
        timer.start()
        t0 = time.monotonic()

        def go():
            # match(): the error reaches the reader through pyarrow's stream interface (see Graph.match)
            with pytest.raises((Cancelled, pa.ArrowInvalid), match="query cancelled"):
                run(ev)
        _, held = _traced(go)
        assert time.monotonic() - t0 < STOP_BOUND
        assert held < 256 * 1024, held
    assert dgraph.count("(a)-->(b)", device="cpu") > 0


def test_cancel_callable_and_bad_cancel(dgraph):
    deadline = time.monotonic() + 0.3
    with pytest.raises(Cancelled, match="cancelled"):
        dgraph.count(rh.HUGE, device="cpu", cancel=lambda: time.monotonic() > deadline)
    with pytest.raises(sgsi.SgsiError, match="cancel must be"):
        dgraph.count("(a)-->(b)", device="cpu", cancel=5)
    # already set: nothing runs
    ev = threading.Event()
    ev.set()
    with pytest.raises(Cancelled):
        dgraph.count("(a)-->(b)", device="cpu", cancel=ev)


@pytest.mark.parametrize("unit", ["segments", "candidate_sets", "extend", "pack_rows"])
def test_cancel_is_checked_at_each_unit_of_work(social, unit, monkeypatch):
    """A cancel= that answers True only when asked from inside one unit of work (a segment
    read, the candidate sets filtered, an output slice extended, a light piece's buffers
    packed) stops the query: each unit checks it. The steps of this small query are light;
    for ``extend`` none is, so that the output is extended by slices."""
    import inspect

    from sgsi.join.backends.cpu import CpuBackend
    if unit == "extend":
        monkeypatch.setattr(CpuBackend, "light_entries", 0)

    def asked_inside():
        return any(f.function == unit for f in inspect.stack()[1:6])

    g = sgsi.open(social["store"])
    pattern = "(a:0)-[:E0]->(b)-[:E1]->(c:1)"
    assert g.count(pattern, device="cpu") > 0
    with pytest.raises((Cancelled, pa.ArrowInvalid), match="cancelled"):
        g.match(pattern, device="cpu", cancel=asked_inside).read_all()
    g.close()


@pytest.mark.parametrize("work", ["_degrees", "_row_counts"])
def test_cancel_is_checked_inside_a_steps_array_work(social, work, monkeypatch):
    """A cancel= that answers True only when asked from a step's array work (the degrees of its
    candidate sets, the factored vertices' counts per row: no segment read, slice or round)
    stops the query: the watched backend checks before each of its methods."""
    import inspect

    from sgsi.join.backends.cpu import CpuBackend
    monkeypatch.setattr(CpuBackend, "light_entries", 0)       # no step row by row
    asked = []

    def asked_inside():
        inside = any(f.function == work for f in inspect.stack()[1:6])
        asked.append(inside)
        return inside

    g = sgsi.open(social["store"])
    pattern = "(a:0)-[:E0]->(b)-[:E1]->(c:1)"
    assert g.count(pattern, device="cpu") > 0
    with pytest.raises(Cancelled, match="cancelled"):
        g.count(pattern, device="cpu", cancel=asked_inside)
    assert any(asked)
    g.close()


def test_cancel_is_checked_inside_a_backend_call(social, monkeypatch):
    """A cancel= that answers True only when asked from a backend method's own passes (its
    ``cancel_point``, e.g. between the lists a step intersects) stops the query: a call of the
    watched backend gives its passes the query's check, and only while it runs."""
    import inspect

    from sgsi.join.backends.base import WATCH
    from sgsi.join.backends.cpu import CpuBackend
    monkeypatch.setattr(CpuBackend, "light_entries", 0)       # lists intersected, not row by row
    asked = []

    def asked_inside():
        inside = any(f.function == "cancel_point" for f in inspect.stack()[1:4])
        asked.append(inside)
        return inside

    g = sgsi.open(social["store"])
    pattern = "(a)-[:E0]->(b)-[:E1]->(c)-[:E0]->(a)"
    assert g.count(pattern, device="cpu", homomorphism=True) > 0
    with pytest.raises(Cancelled, match="cancelled"):
        g.count(pattern, device="cpu", cancel=asked_inside, homomorphism=True)
    assert any(asked)
    assert WATCH.check is None                  # not left set after the query
    assert g.count(pattern, device="cpu", homomorphism=True) > 0
    g.close()


def _interrupt_after(con, seconds, use_registration=None):
    def fire():
        time.sleep(seconds)
        if use_registration is not None:
            use_registration.interrupt()
        else:
            con.interrupt()
    t = threading.Thread(target=fire)
    t.start()
    return t


@pytest.mark.parametrize("sql", [
    "SELECT count(*) FROM match({g}, {p})",
    "SELECT * FROM match({g}, {p}) LIMIT 3",
    "SELECT match_count({g}, {p})",
])
def test_duckdb_interrupt_stops_the_query(dense, scratch_root, sql):
    con = duckdb.connect()
    reg = sgsi.register(con, device="cpu", memory_budget=dense["budget"])
    t = _interrupt_after(con, 0.7)
    t0 = time.monotonic()
    with pytest.raises(duckdb.Error) as err:
        con.execute(sql.format(g=_q(dense["store"]), p=_q(rh.HUGE))).fetchall()
    assert time.monotonic() - t0 < STOP_BOUND
    t.join()
    assert "cancel" in str(err.value).lower() or "interrupt" in str(err.value).lower(), err.value
    # no scratch files left, and the connection still works
    d = reg.scratch_dir
    assert d is None or not os.path.exists(d) or not any(os.scandir(d)), os.listdir(d)
    assert con.execute("SELECT 42").fetchall() == [(42,)]
    (n,), = con.execute(f"SELECT match_count({_q(dense['store'])}, '(a)-->(b)')").fetchall()
    assert n > 0
    rows = con.execute(f"SELECT count(*) FROM match({_q(dense['store'])}, '(a)-->(b)')").fetchall()
    assert rows == [(n,)]
    con.close()
    assert list(scratch_root.iterdir()) == []


def test_registration_interrupt_on_a_cursor(dense, scratch_root):
    con = duckdb.connect()
    cur = con.cursor()
    reg = sgsi.register(cur, device="cpu", memory_budget=dense["budget"])
    t = _interrupt_after(cur, 0.7, use_registration=reg)
    with pytest.raises(duckdb.Error):
        cur.execute(f"SELECT count(*) FROM match({_q(dense['store'])}, {_q(rh.HUGE)})").fetchall()
    t.join()
    assert cur.execute("SELECT 1").fetchall() == [(1,)]
    cur.close()
    con.close()
    assert list(scratch_root.iterdir()) == []


def test_interrupt_of_an_idle_connection_is_harmless(social):
    con = duckdb.connect()
    sgsi.register(con, device="cpu")
    con.interrupt()
    (n,), = con.execute(f"SELECT match_count({_q(social['store'])}, '(a)-->(b)')").fetchall()
    assert n == len(rh.expected_rows(social, "(a)-->(b)"))
    con.close()


# ---------------------------------------------------------------------------
# The command line: Ctrl-C and SIGTERM
# ---------------------------------------------------------------------------


#: Seconds a query runs, once started, before it is signalled.
RUNNING = 0.3


def _start_and_signal(args, sig, started):
    """Start `sgsi ARGS`, wait until ``started(p)`` (past start-up: the query runs, and would for
    days) and RUNNING seconds more, then send ``sig``; (returncode, stdout, stderr, seconds)."""
    p = rh.spawn_sgsi(*args)
    deadline = time.monotonic() + STOP_BOUND
    while not started(p):
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "the query did not start"
        time.sleep(0.02)
    time.sleep(RUNNING)
    assert p.poll() is None, p.communicate()
    p.send_signal(sig)
    return rh.wait_exit(p, STOP_BOUND)


def _has_open(directory):
    """started() for _start_and_signal: the process holds a file under ``directory`` open (its store,
    opened after the signal handlers are set). Where there is no /proc/PID/fd: after 2.5 s."""
    directory = os.path.realpath(directory) + os.sep
    t0 = time.monotonic()

    def started(p):
        try:
            fds = os.listdir(f"/proc/{p.pid}/fd")
        except OSError:
            return time.monotonic() - t0 > 2.5
        for fd in fds:
            try:
                if os.readlink(f"/proc/{p.pid}/fd/{fd}").startswith(directory):
                    return True
            except OSError:
                continue
        return False
    return started


def test_ctrl_c_stops_sgsi_count(dense):
    rc, out, err, _ = _start_and_signal(["count", dense["store"], rh.HUGE, "--device", "cpu",
                                         "--memory-budget", dense["budget"]], signal.SIGINT,
                                        _has_open(dense["store"]))
    assert rc == 130, err
    assert rh.assert_one_line(err, "sgsi: interrupted")
    assert out == ""


@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_interrupted_match_output_leaves_no_file(dense, tmp_path, sig, code, word):
    """Signalled while it writes the output (its temporary file is there), `sgsi match` removes it."""
    out = tmp_path / "out.parquet"
    rc, _, err, _ = _start_and_signal(["match", dense["store"], rh.HUGE, "--output", out, "--device", "cpu",
                                       "--memory-budget", dense["budget"]], sig,
                                      lambda p: any(tmp_path.iterdir()))
    assert rc == code, err
    rh.assert_one_line(err, f"sgsi: {word}")
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_during_build_leaves_nothing(tmp_path):
    """SIGINT in the middle of a build: exit 130, one line, nothing left behind. A build
    that finishes before the signal lands is tried again on an input four times larger."""
    import shutil

    import numpy as np
    rng = np.random.default_rng(5)
    for n in (400_000, 1_600_000, 6_400_000):
        e = rh.write_edges(tmp_path / "e.parquet", rng.integers(0, 50_000, n), rng.integers(0, 50_000, n),
                           rng.choice(["A", "B", "C"], n))
        out = tmp_path / "g.sgsi"
        p = rh.spawn_sgsi("build", "--edges", e, "--out", out, "--memory-budget", "256KB")
        for line in p.stderr:          # progress lines: stop it in the middle
            if "partitions" in line or "signatures" in line:
                break
        p.send_signal(signal.SIGINT)
        rc, _, err, _ = rh.wait_exit(p, STOP_BOUND)
        if rc != 0:
            break
        shutil.rmtree(out)             # finished first: again, larger
    assert rc == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "sgsi: interrupted", err
    assert sorted(x.name for x in tmp_path.iterdir()) == ["e.parquet"]


@pytest.mark.gpu
def test_cancel_and_close_free_device_memory_gpu(dense):
    """On the GPU backend: cancel= and closing a reader stop the engine; the device memory
    the query used goes back to the pool (what stays is the Graph's segment cache)."""
    from sgsi.join.backends import gpu_available
    if not gpu_available():
        pytest.skip("no CUDA GPU")
    import cupy as cp
    pool = cp.get_default_memory_pool()
    with sgsi.open(dense["store"]) as g:
        g.match(rh.HUGE, device="gpu", memory_budget="1GB", max_rows=100).read_all()        # warm the cache
        cp.cuda.Device().synchronize()
        base = pool.used_bytes()
        ev = threading.Event()
        threading.Timer(0.5, ev.set).start()
        t0 = time.monotonic()
        with pytest.raises(Cancelled, match="query cancelled"):
            g.count(rh.HUGE, device="gpu", memory_budget="1GB", cancel=ev)
        assert time.monotonic() - t0 < STOP_BOUND
        reader = g.match(rh.HUGE, device="gpu", memory_budget="1GB")
        for _ in range(3):
            reader.read_next_batch()
        reader.close()
        del reader
        gc.collect()
        cp.cuda.Device().synchronize()
        assert pool.used_bytes() <= base + (1 << 20), (pool.used_bytes(), base)
        assert g.count("(a)-->(b)", device="gpu") == g.count("(a)-->(b)", device="cpu")
