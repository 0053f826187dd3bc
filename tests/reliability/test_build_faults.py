"""Faults during a build: killed at any moment, or out of disk space.

A store is written to a temporary directory beside its target and renamed
into place when complete, so whatever happens the target is either absent
or a complete store that opens, passes verify() and answers correctly.
"""

import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import reliability_helpers as rh
import sgsi
from sgsi.errors import StoreError
from sgsi.storage import format as fmt
from sgsi.storage.store import Store

PATTERNS = ["(a)-[:A]->(b)", "(a)-[:A]->(b)-[:B]->(c)", "(a)-->(b)-->(c)-->(a)"]
#: Progress lines of `sgsi build` after which a build is killed (the stages of ingest).
STAGES = ["building the vertex dictionary", "encoding edges", "writing both partitions",
          "computing vertex signatures", "checksumming files", "done:"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Two edge files of different graphs, and the counts of each one's store."""
    d = tmp_path_factory.mktemp("faults")
    out = {"dir": d}
    for name, seed, n in (("one", 1, 400_000), ("two", 2, 50_000)):
        rng = np.random.default_rng(seed)
        e = rh.write_edges(d / f"{name}.parquet", rng.integers(0, 40_000, n), rng.integers(0, 40_000, n),
                           rng.choice(["A", "B", "C"], n))
        with sgsi.build(str(d / f"{name}.sgsi"), edges=e, memory_budget="1MB") as g:
            out[name] = {"edges": e, "counts": [g.count(p, device="cpu") for p in PATTERNS],
                         "store": str(d / f"{name}.sgsi")}
    return out


def _check_complete(path, counts):
    """The store at ``path`` opens, verifies, and gives ``counts``."""
    with sgsi.open(str(path), verify=True) as g:
        assert [g.count(p, device="cpu") for p in PATTERNS] == counts


def _kill_build(args, trigger=None, delay=0.0):
    """Start `sgsi build ARGS`, SIGKILL it after the progress line ``trigger`` (+ delay) or after ``delay``."""
    p = rh.spawn_sgsi("build", *args, "--memory-budget", "1MB")
    if trigger is not None:
        for line in p.stderr:
            if trigger in line:
                break
    time.sleep(delay)
    p.send_signal(signal.SIGKILL)
    p.communicate()
    return p.returncode


def _assert_absent_or_complete(out, counts):
    if os.path.exists(out):
        _check_complete(out, counts)
        return "complete"
    with pytest.raises(StoreError, match="no graph store"):
        sgsi.open(str(out))
    return "absent"


def test_sigkill_at_each_stage(inputs, tmp_path):
    rng = random.Random(11)
    out = tmp_path / "g.sgsi"
    seen = []
    for stage in STAGES:
        _kill_build(["--edges", inputs["one"]["edges"], "--out", out], stage, rng.uniform(0, 0.05))
        seen.append(_assert_absent_or_complete(out, inputs["one"]["counts"]))
        # Leftover temporary directories are never taken for the store, and never open as
        # half a store: one either refuses to open or (killed between its last write and the
        # rename) is complete...
        for name in rh.leftovers(tmp_path, "g.sgsi"):
            try:
                sgsi.open(str(tmp_path / name)).close()
            except StoreError:
                continue
            _check_complete(tmp_path / name, inputs["one"]["counts"])
        shutil.rmtree(out, ignore_errors=True)
    assert "absent" in seen
    # ... and do not stop the next build.
    with sgsi.build(str(out), edges=inputs["one"]["edges"], memory_budget="1MB") as g:
        assert [g.count(p, device="cpu") for p in PATTERNS] == inputs["one"]["counts"]


def test_sigkill_at_random_moments(inputs, tmp_path):
    rng = random.Random(int(os.environ.get("SGSI_TEST_SEED", "1")))
    t0 = time.monotonic()
    rc, _, err = rh.run_sgsi("build", "--edges", inputs["one"]["edges"], "--out", tmp_path / "timing.sgsi",
                             "--memory-budget", "1MB", "-q")
    assert rc == 0, err
    whole = time.monotonic() - t0
    out = tmp_path / "g.sgsi"
    for _ in range(3):
        _kill_build(["--edges", inputs["one"]["edges"], "--out", out], None, rng.uniform(0.0, whole * 1.1))
        _assert_absent_or_complete(out, inputs["one"]["counts"])
        shutil.rmtree(out, ignore_errors=True)


def test_sigkill_during_a_forced_rebuild_keeps_a_complete_store(inputs, tmp_path):
    """--force over a store: after a kill the path holds the old store or the new one."""
    rng = random.Random(12)
    out = tmp_path / "g.sgsi"
    for stage in STAGES[2:5]:
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(inputs["two"]["store"], out)
        _kill_build(["--edges", inputs["one"]["edges"], "--out", out, "--force"], stage, rng.uniform(0, 0.05))
        if os.path.exists(out):
            with sgsi.open(str(out), verify=True) as g:
                got = [g.count(p, device="cpu") for p in PATTERNS]
            assert got in (inputs["one"]["counts"], inputs["two"]["counts"])
        else:
            # Killed between two renames (only where there is no atomic exchange):
            # the old store is beside it, whole.
            old = [n for n in os.listdir(tmp_path) if n.endswith(".old")]
            assert old, os.listdir(tmp_path)
            _check_complete(tmp_path / old[0], inputs["two"]["counts"])


def test_force_rebuild_is_atomic(inputs, tmp_path, monkeypatch):
    """`build --force` replaces a store in one atomic step: after every step the path opens as a store.

    sgsi.storage.atomic swaps the two directories with renameat2(RENAME_EXCHANGE) where
    the system has it (two renames left a moment with no store at the path:
    a concurrent open failed, and a crash there left the old store only
    under `.NAME.tmp-XXXX.old`). Every rename and exchange a forced build
    makes is watched here.
    """
    from sgsi.storage import atomic
    out = tmp_path / "g.sgsi"
    shutil.copytree(inputs["two"]["store"], out)
    states = []

    def look():
        try:
            Store(str(out)).close()
            states.append("store")
        except StoreError as e:
            states.append(f"no store ({e})")

    def watch(fn):
        def watched(*args, **kw):
            result = fn(*args, **kw)
            look()
            return result
        return watched

    monkeypatch.setattr(os, "rename", watch(os.rename))
    if hasattr(atomic, "_exchange"):
        monkeypatch.setattr(atomic, "_exchange", watch(atomic._exchange))
    sgsi.build(str(out), edges=inputs["one"]["edges"], memory_budget="1MB", force=True).close()
    monkeypatch.undo()
    _check_complete(out, inputs["one"]["counts"])
    assert states and all(s == "store" for s in states), states


def test_stale_temporary_directories_are_removed(inputs, tmp_path):
    """A build removes what killed builds of the same target left behind.

    A build killed with SIGKILL leaves its `.NAME.tmp-*` directory (a partial
    store, never opened as one) and DuckDB's `sgsi-spill-*` directory beside
    the target, as large as the store; the next build of that target sweeps
    those of builds that no longer run.
    """
    out = tmp_path / "g.sgsi"
    _kill_build(["--edges", inputs["one"]["edges"], "--out", out], "writing both partitions")
    assert rh.leftovers(tmp_path, "g.sgsi"), "the kill came too late to leave anything"
    sgsi.build(str(out), edges=inputs["two"]["edges"], memory_budget="1MB").close()
    assert rh.leftovers(tmp_path, "g.sgsi") == []


# ---------------------------------------------------------------------------
# Out of disk space
# ---------------------------------------------------------------------------


def test_disk_full_during_build_cleans_up(inputs, tmp_path, monkeypatch):
    """Every file the store writes fails with ENOSPC in turn: a clear error, no leftovers, the old store kept."""
    out = tmp_path / "g.sgsi"
    shutil.copytree(inputs["two"]["store"], out)
    real_write = fmt.BatchFile.write
    failures = 0
    for fail_at in (0, 3, 40, 400):
        calls = [0]

        def failing_write(self, columns, fail_at=fail_at, calls=calls):
            calls[0] += 1
            if calls[0] > fail_at:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)
            return real_write(self, columns)

        monkeypatch.setattr(fmt.BatchFile, "write", failing_write)
        try:
            sgsi.build(str(out), edges=inputs["one"]["edges"], memory_budget="1MB", force=True).close()
        except OSError as e:
            assert e.errno == errno.ENOSPC and "No space left on device" in str(e)
            failures += 1
        except sgsi.SgsiError as e:
            assert "No space left on device" in str(e), e
            failures += 1
        monkeypatch.undo()
        assert sorted(os.listdir(tmp_path)) == ["g.sgsi"], os.listdir(tmp_path)
        _check_complete(out, inputs["two"]["counts"])
    assert failures >= 3


def _unshare_tmpfs_available():
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    r = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                        "d=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs $d && umount $d && rmdir $d"],
                       capture_output=True)
    return r.returncode == 0


needs_tmpfs = pytest.mark.skipif(not _unshare_tmpfs_available(),
                                 reason="cannot mount a private tmpfs (unshare --user --mount)")


def run_on_tmpfs(tmp_path, size, script):
    """Run a shell ``script`` with $FS a fresh tmpfs of ``size``; prints `ls -A $FS` at the end."""
    fs = tmp_path / "fs"
    fs.mkdir()
    wrapped = (f"mount -t tmpfs -o size={size} tmpfs {fs} || exit 99\nFS={fs}\nexport FS\n{script}\n"
               f"echo LEFT:$(ls -A {fs} | tr '\\n' ' ')")
    r = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", wrapped],
                       capture_output=True, text=True, env=rh.sgsi_env(), timeout=120)
    assert r.returncode != 99, r.stderr
    return r


@needs_tmpfs
def test_build_on_a_full_disk(inputs, tmp_path):
    """A real full disk (a 4MB tmpfs): the first build fits, a bigger forced rebuild fails cleanly."""
    py = sys.executable
    small = rh.write_edges(tmp_path / "small.parquet", [1, 2, 3], [2, 3, 1], ["A", "A", "B"])
    r = run_on_tmpfs(tmp_path, "4m", f"""
{py} -m sgsi build --edges {small} --out $FS/g.sgsi -q || exit 1
{py} -m sgsi build --edges {inputs['one']['edges']} --out $FS/g.sgsi --force -q; echo RC:$?
{py} -m sgsi info $FS/g.sgsi --verify >/dev/null; echo VERIFY:$?
{py} -m sgsi count $FS/g.sgsi '(a)-[:A]->(b)' --device cpu 2>/dev/null | tail -1
""")
    out = r.stdout
    assert "RC:1" in out, (out, r.stderr)
    assert "No space left on device" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert "VERIFY:0" in out, out                       # the old store, whole
    assert out.strip().splitlines()[-2] == "2", out     # and still answering
    assert out.strip().splitlines()[-1] == "LEFT:g.sgsi", out


def test_manifest_lists_every_file(inputs):
    """The manifest of a finished store lists every file with its size and checksum."""
    with open(os.path.join(inputs["one"]["store"], "manifest.json")) as f:
        m = json.load(f)
    assert set(m["files"]) >= set(os.listdir(inputs["one"]["store"])) - {"manifest.json"}
    for name, info in m["files"].items():
        p = os.path.join(inputs["one"]["store"], name)
        assert os.path.getsize(p) == info["bytes"]
        assert fmt.file_crc32(p) == info["crc32"]
