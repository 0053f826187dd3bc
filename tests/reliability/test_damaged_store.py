"""Damaged stores: files truncated, deleted, altered; manifests tampered with.

Opening checks what is cheap (sizes, Arrow structure, the small tables'
checksums); each batch is checked for lengths and value ranges when first
read; ``verify()`` checks every checksum. Whatever the damage, sgsi raises a
StoreError naming the file, or answers (correctly, unless the damage keeps
every value in range: then only verify() can tell, and it does).
"""

import json
import os
import random
import resource
import shutil
import subprocess
import sys

import duckdb
import pytest

import reliability_helpers as rh
import sgsi
from sgsi.cli import main as cli_main
from sgsi.errors import StoreError
from sgsi.storage.format import STORE_FILES

HERE = os.path.dirname(os.path.abspath(__file__))
PATTERNS = ["(a)-[:E0]->(b)", "(a:0)-[:E0]->(b)-[:E1]->(c:1)", "(a)--(b)--(c), (a)--(c)", "(x:1)"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store with many segments and index batches (a 16KB budget) over a few hundred vertices."""
    d = tmp_path_factory.mktemp("damaged")
    g = rh.social_graph(d, seed=21, n=300, m=2500, budget="16KB")
    return g


@pytest.fixture
def copy(store, tmp_path):
    dst = tmp_path / "copy.sgsi"
    shutil.copytree(store["store"], dst)
    return dst


def _named(name):
    return pytest.raises(StoreError, match=name.replace(".", r"\."))


@pytest.mark.parametrize("name", STORE_FILES)
def test_truncated_file_is_refused_on_open(copy, name):
    p = copy / name
    with open(p, "r+b") as f:
        f.truncate(p.stat().st_size - 1)
    with _named(name):
        sgsi.open(str(copy))


@pytest.mark.parametrize("name", STORE_FILES)
def test_deleted_file_is_refused_on_open(copy, name):
    (copy / name).unlink()
    with _named(name):
        sgsi.open(str(copy))


@pytest.mark.parametrize("name", STORE_FILES)
def test_altered_file_is_named_by_verify(copy, name, capsys):
    """verify() and `sgsi info --verify` name the altered file: the command line in this
    process (its error path is the same), and in a process of its own for the first file."""
    p = copy / name
    data = bytearray(p.read_bytes())
    data[len(data) // 3] ^= 0x10
    p.write_bytes(bytes(data))
    with _named(name):
        sgsi.open(str(copy), verify=True)
    if name == STORE_FILES[0]:
        rc, _, err = rh.run_sgsi("info", copy, "--verify")
    else:
        capsys.readouterr()
        rc, err = cli_main(["info", str(copy), "--verify"]), capsys.readouterr().err
    assert rc == 1
    assert name in rh.assert_one_line(err, "sgsi: error: ")


def test_small_tables_are_checked_on_open(copy):
    """segments.arrow and vindex_batches.arrow are read whole on open: their checksums are checked then."""
    for name in ("segments.arrow", "vindex_batches.arrow"):
        p = copy / name
        good = p.read_bytes()
        data = bytearray(good)
        data[-200] ^= 0x01
        p.write_bytes(bytes(data))
        with _named(name):
            sgsi.open(str(copy))
        p.write_bytes(good)
    sgsi.open(str(copy)).close()


def test_damage_fuzz_never_crashes(store, tmp_path):
    """Random damage to every file, in a subprocess limited to 2 GiB of address space.

    Each damaged copy either is refused with a StoreError naming the file,
    or answers; and verify() names the file whenever its bytes changed.
    """
    work = tmp_path / "work"
    work.mkdir()
    limit = 3 << 30

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    r = subprocess.run([sys.executable, os.path.join(HERE, "damage_worker.py"), store["store"], str(work),
                        os.environ.get("SGSI_TEST_SEED", "1"), "8", json.dumps(PATTERNS), store["budget"],
                        str(len(STORE_FILES) * 3)],
                       capture_output=True, text=True, env=rh.sgsi_env(), preexec_fn=cap, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    recs = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert len(recs) >= len(STORE_FILES) * 3, len(recs)
    bad = [x for x in recs if x["outcome"] not in ("refused", "same", "different")]
    assert not bad, json.dumps(bad[:3], indent=1)
    for x in recs:
        if x["changed"]:
            assert x["verify"] == "names the file", x
        else:
            assert x["outcome"] == "same", x
    # Most damage is caught when opening or reading, without verify().
    caught = sum(x["outcome"] == "refused" for x in recs if x["changed"])
    assert caught >= len([x for x in recs if x["changed"]]) // 2


MANIFEST_EDITS = [
    ("vertices", lambda m: m.__setitem__("vertices", m["vertices"] + 1)),
    ("vertices", lambda m: m.__setitem__("vertices", -1)),
    ("vertices", lambda m: m.__setitem__("vertices", "300")),
    ("parameters", lambda m: m.__delitem__("parameters")),
    ("theta", lambda m: m["parameters"].__setitem__("theta", 99)),
    ("signature_bucket_columns", lambda m: m["parameters"].__setitem__("signature_bucket_columns", 3)),
    ("signature_segment_vertices", lambda m: m["parameters"].__setitem__("signature_segment_vertices", 7)),
    ("partitions", lambda m: m["partitions"][next(iter(m["partitions"]))].__setitem__("segments", [10**9, 5])),
    ("partitions", lambda m: m["partitions"][next(iter(m["partitions"]))].__setitem__("segments", "x")),
    ("files", lambda m: m["files"].__delitem__("pcsr_ci.arrow")),
    ("files", lambda m: m["files"].__setitem__("../../etc/passwd", {"bytes": 1, "crc32": "0"})),
    ("files", lambda m: m["files"]["vindex.arrow"].__setitem__("bytes", "many")),
    ("edge_labels", lambda m: m.__setitem__("edge_labels", [])),
    ("max_degree", lambda m: [p.__setitem__("max_degree", 0) for p in m["partitions"].values() if "alias" not in p]),
]


@pytest.mark.parametrize("what, edit", MANIFEST_EDITS, ids=[f"{w}-{i}" for i, (w, _) in enumerate(MANIFEST_EDITS)])
def test_tampered_manifest(copy, what, edit):
    mp = copy / "manifest.json"
    m = json.loads(mp.read_text())
    edit(m)
    mp.write_text(json.dumps(m))
    with pytest.raises(StoreError) as err:
        with sgsi.open(str(copy)) as g:
            for p in PATTERNS:
                g.count(p, device="cpu")
    msg = str(err.value)
    assert "manifest.json" in msg or ".arrow" in msg or ".parquet" in msg, msg


def test_manifest_that_is_not_json_or_huge_nesting(copy):
    mp = copy / "manifest.json"
    mp.write_text("[" * 100000 + "]" * 100000)
    with _named("manifest.json"):
        sgsi.open(str(copy))
    mp.write_bytes(b"\xff\xfe\x00garbage")
    with _named("manifest.json"):
        sgsi.open(str(copy))


def test_damaged_store_in_sql_and_cli(copy, store):
    (copy / "vindex.arrow").unlink()
    con = duckdb.connect()
    sgsi.register(con, device="cpu")
    with pytest.raises(duckdb.Error, match=r"vindex\.arrow"):
        con.execute(f"SELECT * FROM match('{copy}', '(a)-->(b)')").fetchall()
    with pytest.raises(duckdb.Error, match=r"vindex\.arrow"):
        con.execute(f"SELECT match_count('{copy}', '(a)-->(b)')").fetchall()
    assert con.execute(f"SELECT match_count('{store['store']}', '(a)-[:E0]->(b)')").fetchall() == [
        (len(rh.expected_rows(store, "(a)-[:E0]->(b)")),)]
    con.close()
    rc, _, err = rh.run_sgsi("count", copy, "(a)-->(b)", "--device", "cpu")
    assert rc == 1 and "vindex.arrow" in rh.assert_one_line(err, "sgsi: error: ")


def test_value_damage_found_during_a_query_is_named(copy):
    """Neighbour ids in pcsr_ci.arrow overwritten with ids past the last vertex, sizes kept:
    the store still opens, and the query that meets them names the file (not an IndexError)."""
    p = copy / "pcsr_ci.arrow"
    data = bytearray(p.read_bytes())
    rng = random.Random(3)
    marker = (2**31 - 5).to_bytes(4, "little")
    changed = 0
    for i in range(len(data) // 4):
        word = int.from_bytes(data[4 * i:4 * i + 4], "little")
        if 0 < word < 300 and rng.random() < 0.3:
            data[4 * i:4 * i + 4] = marker
            changed += 1
    p.write_bytes(bytes(data))
    assert changed
    with _named("pcsr_ci.arrow"):
        with sgsi.open(str(copy)) as g:
            for q in PATTERNS:
                g.count(q, device="cpu")
