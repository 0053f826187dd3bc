"""Store versions: updates written as deltas, read as base + deltas, and compaction.

The store at each version must present exactly what a fresh build of that
version's edge set presents: every partition's lists (through the segments
the engine reads), its degree index, signatures and vertex labels, compared
by original ids; pattern counts then agree with the oracle. Readers keep
their version across updates and compaction; a crash at any step of an
update leaves the old version or the new one; ``changed_pairs`` is the set
difference of two versions' partitions.
"""

import collections
import gc
import itertools
import os
import random
import subprocess
import sys
import threading

import duckdb
import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sgsi
from oracle import oracle_count, random_graph, random_pattern, write_graph_files
from oracle import write_edges as _write_edges
from sgsi.cli import main as cli_main
from sgsi.errors import InputError, StoreError
from sgsi.join.backends import gpu_available
from sgsi.partition.signatures import n_groups as signature_groups
from sgsi.partition.signatures import pair_group
from sgsi.storage import delta as delta_mod
from sgsi.storage import overlay, pairhash, touched
from sgsi.partition import pcsr
from sgsi.storage.lists import SegmentTable, has_pairs_in, has_pairs_mapped, lists_in, partition_lists
from sgsi.join.backends.cpu import CpuBackend
from sgsi.join.plan import _degree_mask
from sgsi.join.query import memory_floor
from sgsi.storage.store import Partition, Store

BUDGET = "16KB"


class Model:
    """The edge set of a version as Python sets of original ids (an undirected edge once)."""

    def __init__(self, edges, vlabels, undirected):
        self.und = undirected
        self.edges = {self.key(e) for e in edges}
        self.vlabels = dict(vlabels)

    def key(self, e):
        s, d, l = e
        return (min(s, d), max(s, d), l) if self.und else (s, d, l)

    def apply(self, ins, dele, new_vlabels=None):
        for v, l in (new_vlabels or {}).items():
            self.vlabels.setdefault(v, l)
        for e in dele:
            self.edges.discard(self.key(e))
        for e in ins:
            self.edges.add(self.key(e))
            for v in e[:2]:
                self.vlabels.setdefault(v, None)

    def pairs(self, label, direction):
        """The (src, nb) pairs of a partition: label None = any."""
        out = set()
        for s, d, l in self.edges:
            if label is not None and l != label:
                continue
            if self.und or direction == "both":
                out |= {(s, d), (d, s)}
            else:
                out.add((s, d) if direction == "out" else (d, s))
        return out


def _fresh(d, model, name, labels=True, **kw):
    vl = {v: l for v, l in model.vlabels.items()}
    e, v = write_graph_files(d / name, sorted(model.edges, key=str), vl, edge_labels=labels)
    return Store(sgsi.build(str(d / name / "g.sgsi"), edges=e, vertices=v, memory_budget=BUDGET, **kw).path)


def _random_batch(rng, model, ids, elabels, new_ids, new_label=None):
    """Insertions (new vertices, a new label, repeats, edges already there) and deletions (present,
    absent, of unknown vertices)."""
    pool = list(ids) + list(new_ids)
    labels = list(elabels) + ([new_label] if new_label else [])
    ins = [(*rng.sample(pool, 2), rng.choice(labels)) for _ in range(rng.randint(5, 25))]
    ins += rng.sample(ins, 3) + rng.sample(sorted(model.edges, key=str), 3)
    present = sorted(model.edges, key=str)
    dele = rng.sample(present, min(len(present), rng.randint(3, 20)))
    dele += [(*rng.sample(list(ids), 2), rng.choice(elabels)) for _ in range(4)]
    dele += [(new_ids[0] if not isinstance(new_ids[0], str) else "nowhere", pool[0], elabels[0])]
    return ins, dele


def _partition_pairs(st, lid, direction):
    """A partition's pairs by original id, checking what the engine relies on: lists sorted per
    vertex across segments, ascending segment ranges, the degree index, the counts."""
    p = st.partition(lid, direction)
    n = st.n_vertices
    owner, nb = partition_lists(st, p, np.arange(n, dtype=np.int32))
    if owner.size:
        assert (owner[1:] >= owner[:-1]).all(), "lists not by owner"
        same = owner[1:] == owner[:-1]
        assert (nb[1:][same] > nb[:-1][same]).all(), "a list is not sorted and distinct"
    assert (np.diff(p.first_src) >= 0).all() and (np.diff(p.last_src) >= 0).all()
    assert (p.first_src <= p.last_src).all()
    deg = np.bincount(owner, minlength=n)
    seen = np.zeros(n, np.int64)
    last = -1
    for k, b in enumerate(p.idx_batches):
        v, d = st.index_batch(b)
        assert v[0] == p.idx_first[k] and v[-1] == p.idx_last[k] and v[0] > last and (np.diff(v) > 0).all()
        last = int(v[-1])
        seen[v] = d
    assert (seen == deg).all(), "degree index differs from the lists"
    assert p.edges == owner.size and p.vertices == int((deg > 0).sum()) and p.max_degree >= deg.max(initial=0)
    ids = st.vertex_ids(np.arange(n)).to_pylist()
    return {(ids[a], ids[b]) for a, b in zip(owner.tolist(), nb.tolist())}


def _signatures(st):
    ids = st.vertex_ids(np.arange(st.n_vertices)).to_pylist()
    rows, labels = [], []
    for _start, _count, seg in st.vertex_segments():
        rows.append(np.stack([c for b in range(st.n_buckets) for c in st.signature_columns(seg, b)], 1))
        labels.append(st.vertex_labels(seg))
    w, lab = np.concatenate(rows), np.concatenate(labels)
    values = st.manifest["vertex_labels"]["values"]
    return ({i: tuple(r) for i, r in zip(ids, w.tolist())},
            {i: (values[x] if x >= 0 else None) for i, x in zip(ids, lab.tolist())})


def _directions(st, lid):
    lean, und = st.lean, st.undirected
    multi = len(st.manifest["edge_labels"]["values"]) > 1
    if lid == -1 and lean and multi:
        return []
    return [d for d in ("out", "in", "both") if not (lean and d == "both" and not und)]


def assert_same(st, fresh, model, exact_signatures=False):
    """``st`` presents exactly the edge set of ``model``, as the fresh build ``fresh`` (if given) does.
    Its signatures equal the fresh build's (``exact_signatures``: a compacted store, or one whose
    updates deleted nothing), or count at least as many pairs in each group, the same where under
    the cap (an update leaves a saturated group saturated, whatever it deleted)."""
    assert st.n_vertices == len(model.vlabels)
    assert st.n_edges == sum(2 if st.undirected and s != d else 1 for s, d, _l in model.edges)
    values = st.manifest["edge_labels"]["values"]
    labels = [(i, v) for i, v in enumerate(values)] + [(-1, None)]
    ids = st.vertex_ids(np.arange(st.n_vertices)).to_pylist()
    cpu = CpuBackend("64MB")
    for lid, value in labels:
        for direction in _directions(st, lid):
            got = _partition_pairs(st, lid, direction)
            assert got == model.pairs(value if st.has_edge_labels and lid >= 0 else None, direction), \
                (lid, direction)
            degree = collections.Counter(a for a, _b in got)
            for k in (1, 2, 3):         # the filter's degree masks: the base's, patched at a version
                want = np.array([degree[i] >= k for i in ids], bool)
                assert np.array_equal(_degree_mask(st, cpu, lid, direction, k), want), (lid, direction, k)
            if fresh is not None and (value is None or fresh.edge_label_id(str(value)) is not None):
                fl = -1 if lid == -1 else fresh.edge_label_id(str(value)) if st.has_edge_labels else 0
                assert got == _partition_pairs(fresh, fl, direction)
    if fresh is None:
        return
    assert st.n_vertices == fresh.n_vertices and st.n_edges == fresh.n_edges
    sig, vlab = _signatures(st)
    fsig, fvlab = _signatures(fresh)
    assert vlab == fvlab
    if (values == fresh.manifest["edge_labels"]["values"]
            and st.manifest["vertex_labels"]["values"] == fresh.manifest["vertex_labels"]["values"]):
        if exact_signatures:
            assert sig == fsig, "signatures differ from a fresh build's"
        else:
            assert sig.keys() == fsig.keys()
            got, want = (_pair_counts(st, [d[i] for i in fsig]) for d in (sig, fsig))
            assert (got >= want).all() and (got[got < 2] == want[got < 2]).all(), "signatures miss pairs"
            label = _label_words(st)
            assert ([tuple(np.array(r) & label) for r in sig.values()]
                    == [tuple(np.array(fsig[i]) & label) for i in sig]), "label bits differ"


def _pair_counts(st, rows):
    groups = signature_groups(st.signature_bits, st.label_bits)
    return touched._counts_of(np.array(rows, np.uint32).reshape(len(rows), -1), st.label_bits, groups)


def _label_words(st):
    """The mask of a signature's label bits (its first ``label_bits``, low bits first), per word."""
    mask = np.zeros(st.signature_bits // 32, np.uint32)
    for i in range(st.label_bits):
        mask[i // 32] |= np.uint32(1 << (i % 32))
    return mask


CASES = {
    "directed": dict(undirected=False, lean=False, n_el=3, string_ids=False),
    "undirected": dict(undirected=True, lean=False, n_el=2, string_ids=False),
    "lean": dict(undirected=False, lean=True, n_el=3, string_ids=False),
    "strings-one-label": dict(undirected=False, lean=False, n_el=1, string_ids=True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_versions_match_fresh_builds_and_survive_compaction(tmp_path, case):
    check_versions(tmp_path, case, seed=list(CASES).index(case))


def check_versions(tmp_path, case, seed):
    c = CASES[case]
    rng = random.Random(seed)
    n = 36
    edges, vl = random_graph(rng, n, 200, 3, c["n_el"], string_ids=c["string_ids"])
    ids = list(vl)
    labels = c["n_el"] > 1
    e, v = write_graph_files(tmp_path / "base", edges, vl, edge_labels=labels)
    kw = dict(undirected=c["undirected"], lean=c["lean"])
    g = sgsi.build(str(tmp_path / "g.sgsi"), edges=e, vertices=v, memory_budget=BUDGET, **kw)
    model = Model(edges if labels else [(s, d, "E0") for s, d, _ in edges], vl, c["undirected"])
    elabels = sorted({x[2] for x in model.edges})
    patterns = [random_pattern(rng, rng.randint(2, 4), [0, 1, 2], elabels if labels else [],
                               p_edge_label=1.0 if c["lean"] else 0.5, p_directed=1.0 if c["lean"] else 0.6)
                for _ in range(4)]
    readers, expected, kinds = {}, {}, set()
    for step in range(3):
        new_ids = [f"new{step}_{i}" if c["string_ids"] else 1000 + 10 * step + i for i in range(4)]
        ins, dele = _random_batch(rng, model, ids, elabels, new_ids, "E9" if labels and step == 1 else None)
        vfile = tmp_path / f"v{step}.parquet"
        pq.write_table(pa.table({"id": new_ids[:2], "label": [1, None]}), vfile)
        before = model.edges.copy()
        model.apply(ins, dele, {new_ids[0]: 1, new_ids[1]: None})
        summary = g.update(insert=_write_edges(tmp_path / f"i{step}.parquet", ins, labels),
                           delete=_write_edges(tmp_path / f"d{step}.parquet", dele, labels), vertices=str(vfile))
        assert summary["version"] == step + 2 == g.store.version
        assert summary["inserted"] == len(model.edges - before) and summary["deleted"] == len(before - model.edges)
        assert summary["inserted"] + summary["already_present"] == len(ins)
        if labels:
            elabels = sorted({*elabels, *(x[2] for x in ins)})
        fresh = _fresh(tmp_path, model, f"fresh{step}", labels, **kw) if step == 2 else None
        assert_same(g.store, fresh, model)
        if fresh is not None:
            fresh.close()
        edges_now = [(s, d, l) for s, d, l in model.edges]
        if c["undirected"]:
            edges_now += [(d, s, l) for s, d, l in model.edges]
        want = {p: oracle_count(edges_now, model.vlabels, p) for p in patterns}
        assert {p: g.count(p, device="cpu", progress=False) for p in patterns} == want
        kinds.update("masked" if x[2] is not None else "piece" for x in g.store._virtual.values())
        readers[g.store.version] = sgsi.open(g.path, version=g.store.version)
        expected[g.store.version] = want
    assert kinds == {"masked", "piece"}
    old = sgsi.open(g.path, version=2)
    assert old.store.version == 2 and old.store.versions[-1]["version"] == 4
    ids_before = g.store.vertex_ids(np.arange(g.store.n_vertices)).to_pylist()
    r = g.compact()
    assert r["compacted"] and g.store.version == g.store.base_version == 4
    assert g.store.vertex_ids(np.arange(g.store.n_vertices)).to_pylist() == ids_before      # ids kept
    fresh = _fresh(tmp_path, model, "fresh-c", labels, **kw)
    assert_same(g.store, fresh, model, exact_signatures=True)
    fresh.close()
    assert {p: g.count(p, device="cpu", progress=False) for p in patterns} == expected[4]
    for version, reader in readers.items():              # opened before the compaction: unchanged
        assert reader.store.version == version
        assert {p: reader.count(p, device="cpu", progress=False) for p in patterns} == expected[version]
        reader.close()
    assert {p: old.count(p, device="cpu", progress=False) for p in patterns} == expected[2]
    with pytest.raises(StoreError, match="compacted"):
        Store(g.path, version=2)
    # An update after the compaction.
    ins = [(ids[0], ids[1], elabels[0]), (ids[2], "x" if c["string_ids"] else 5000, elabels[-1])]
    model.apply(ins, [])
    g.update(insert=_write_edges(tmp_path / "after.parquet", ins, labels))
    fresh = _fresh(tmp_path, model, "fresh-after", labels, **kw)
    assert g.store.version == 5
    assert_same(g.store, fresh, model, exact_signatures=True)
    fresh.close()
    g.close()


def _small(tmp_path, undirected=False, n_el=2, seed=5):
    rng = random.Random(seed)
    edges, vl = random_graph(rng, 30, 120, 2, n_el)
    e, v = write_graph_files(tmp_path / "base", edges, vl)
    g = sgsi.build(str(tmp_path / "g.sgsi"), edges=e, vertices=v, memory_budget=BUDGET, undirected=undirected)
    return g, Model(edges, vl, undirected), rng


@pytest.mark.parametrize("undirected", [False, True], ids=["directed", "undirected"])
def test_changed_pairs_is_the_set_difference_of_two_versions(tmp_path, undirected):
    check_changed_pairs(tmp_path, undirected, 5)


def check_changed_pairs(tmp_path, undirected, seed):
    g, model, rng = _small(tmp_path, undirected, seed=seed)
    ids, elabels = list(model.vlabels), ["E0", "E1"]
    states = {1: model.edges.copy()}
    for step in range(3):
        ins, dele = _random_batch(rng, model, ids, elabels, [500 + step, 600 + step])
        model.apply(ins, dele)
        g.update(insert=_write_edges(tmp_path / f"i{step}.parquet", ins),
                 delete=_write_edges(tmp_path / f"d{step}.parquet", dele))
        states[g.store.version] = model.edges.copy()
    st = g.store
    vid = st.vertex_ids(np.arange(st.n_vertices)).to_pylist()
    for since, lid, direction in itertools.product([1, 2, 3, 4], [0, 1, -1], ["out", "in", "both"]):
        then = Model([], {}, undirected)
        then.edges = states[since]
        new = model.pairs(elabels[lid] if lid >= 0 else None, direction)
        old = then.pairs(elabels[lid] if lid >= 0 else None, direction)
        a_s, a_d, r_s, r_d = st.changed_pairs(since, lid, direction)
        assert all(x.dtype == np.int32 for x in (a_s, a_d, r_s, r_d))
        got_a = {(vid[a], vid[b]) for a, b in zip(a_s.tolist(), a_d.tolist())}
        got_r = {(vid[a], vid[b]) for a, b in zip(r_s.tolist(), r_d.tolist())}
        assert len(got_a) == a_s.size and len(got_r) == r_s.size
        assert got_a == new - old and got_r == old - new, (since, lid, direction)
    # From an older reader's point of view, a later version is "since" too (the reverse).
    early = Store(g.path, version=2)
    a_s, a_d, r_s, r_d = early.changed_pairs(4, 0, "out")
    b = g.store.changed_pairs(2, 0, "out")
    assert set(zip(a_s.tolist(), a_d.tolist())) == set(zip(b[2].tolist(), b[3].tolist()))
    early.close()
    with pytest.raises(StoreError, match="no version 9"):
        st.changed_pairs(9, 0, "out")
    g.close()


def test_readers_go_on_during_updates_and_compaction(tmp_path):
    g, model, rng = _small(tmp_path, seed=13)
    pattern = "(a)-[:E0]->(b)-->(c)"
    counts = {1: g.count(pattern, device="cpu", progress=False)}
    first = sgsi.open(g.path)
    stop, errors, seen = threading.Event(), [], []

    def read():
        try:
            while not stop.is_set():
                assert first.count(pattern, device="cpu", progress=False) == counts[1]
                with sgsi.open(g.path) as h:              # whatever version is newest now
                    seen.append((h.store.version, h.count(pattern, device="cpu", progress=False)))
        except Exception as e:          # noqa: BLE001 - reported below
            errors.append(e)
    t = threading.Thread(target=read)
    t.start()
    try:
        for step in range(3):
            ins, dele = _random_batch(rng, model, list(model.vlabels), ["E0", "E1"], [300 + step, 400 + step])
            g.update(insert=_write_edges(tmp_path / f"i{step}.parquet", ins),
                     delete=_write_edges(tmp_path / f"d{step}.parquet", dele))
            counts[g.store.version] = g.count(pattern, device="cpu", progress=False)
        g.compact()
    finally:
        stop.set()
        t.join()
    assert not errors, errors[0]
    assert seen and all(counts[v] == c for v, c in seen)
    assert first.count(pattern, device="cpu", progress=False) == counts[1]
    first.close()
    g.close()


def test_an_update_reads_only_the_deltas_it_lacks(tmp_path, monkeypatch):
    """Graph.update brings its opening to the new version sharing its base files and reading only
    the deltas it has not read (its own, another writer's, those after the version a Graph was
    opened at); after another's compaction it opens the store again. Counts follow the oracle."""
    g, model, rng = _small(tmp_path, seed=21)
    other, older = sgsi.open(g.path), sgsi.open(g.path, version=1)
    pattern = "(a)-[:E0]->(b)-->(c)"
    reads, real = [], delta_mod._read_delta
    monkeypatch.setattr(delta_mod, "_read_delta", lambda path, e: reads.append(int(e["version"])) or real(path, e))
    base = {h: h.store._readers for h in (g, older)}
    steps = [(g, [2]), (other, [2, 3]), (g, [3, 4]), (older, [2, 3, 4, 5]), ("compact", [6])]
    for step, (writer, read) in enumerate(steps):
        if writer == "compact":
            other.compact()
            writer = g
        reads.clear()
        ins, dele = _random_batch(rng, model, list(model.vlabels), ["E0", "E1"], [300 + step, 400 + step])
        model.apply(ins, dele)
        writer.update(insert=_write_edges(tmp_path / f"i{step}.parquet", ins),
                      delete=_write_edges(tmp_path / f"d{step}.parquet", dele))
        assert reads == read and writer.store.version == step + 2
        assert (writer.store._readers is base.get(writer)) == (writer is not other and step < 4)
        if writer is not other:
            assert writer.count(pattern, device="cpu", progress=False) == \
                oracle_count(list(model.edges), model.vlabels, pattern)
    with sgsi.open(g.path) as fresh:
        assert fresh.store.manifest == g.store.manifest and fresh.store.versions == g.store.versions
    for h in (other, older, g):
        h.close()


def test_an_updates_view_merges_only_its_new_delta(tmp_path, monkeypatch):
    """An update's new opening merges its one new delta into its older opening's net change (not
    every delta again) and presents what a fresh opening of the store and a fresh build do, over
    batches that delete what earlier ones inserted and insert what they deleted."""
    g, model, rng = _small(tmp_path, seed=23)
    merged, real = [], overlay.VersionView.__init__
    monkeypatch.setattr(overlay.VersionView, "__init__", lambda self, st, v, deltas, prior=None: (
        merged.append((v, len(deltas), prior is not None)), real(self, st, v, deltas, prior))[1])
    inserted, deleted = set(), set()
    for step in range(5):
        ins, dele = _random_batch(rng, model, list(model.vlabels), ["E0", "E1"], [500 + step, 600 + step])
        dele += rng.sample(sorted(inserted & model.edges, key=str), min(2, len(inserted & model.edges)))
        ins += rng.sample(sorted(deleted - model.edges, key=str), min(2, len(deleted - model.edges)))
        inserted |= set(ins)
        deleted |= set(dele)
        model.apply(ins, dele)
        g.update(insert=_write_edges(tmp_path / f"i{step}.parquet", ins),
                 delete=_write_edges(tmp_path / f"d{step}.parquet", dele))
        assert merged[-1] == (step + 2, 1, step > 0)        # the first: onto the base, no view
        with sgsi.open(g.path) as fresh:
            a, b = g.store._view, fresh.store._view
            for name in ("added", "removed"):
                assert all(np.array_equal(x, y) for x, y in zip(getattr(a, name), getattr(b, name))), name
            assert a.new_ids.equals(b.new_ids) and np.array_equal(a.new_labels, b.new_labels)
            assert np.array_equal(a.sig_vertex, b.sig_vertex) and np.array_equal(a.sig_words, b.sig_words)
        assert g.count("(a)-[:E0]->(b)-->(c)", device="cpu", progress=False) == \
            oracle_count(list(model.edges), model.vlabels, "(a)-[:E0]->(b)-->(c)")
    assert_same(g.store, _fresh(tmp_path, model, "fresh"), model)
    g.close()


def test_a_delta_since_the_last_update_reads_the_opening_before_it(tmp_path):
    """After an update, the version before it is the opening the update came from (its partitions
    built once, not again), one opening back only, or a new one where that was closed; deltas
    since it equal the recounts' difference, at the default budget and at 16KB."""
    g, model, rng = _small(tmp_path, seed=29)
    pats = ["(a)-[:E0]->(b)-->(c)", "(a:0)-[:E0]->(b)", "(a:1)-->(b:0)<--(c)"]
    before = [oracle_count(list(model.edges), model.vlabels, p) for p in pats]
    for step in range(3):
        old, v0 = g.store, g.version
        old.partition(old.edge_label_id("E0"), "out")             # built at the old version
        ins, dele = _random_batch(rng, model, list(model.vlabels), ["E0", "E1"], [700 + step, 800 + step])
        model.apply(ins, dele)
        g.update(insert=_write_edges(tmp_path / f"i{step}.parquet", ins),
                 delete=_write_edges(tmp_path / f"d{step}.parquet", dele))
        assert g.store.at_version(v0) is old and old._older is None
        if step == 2:
            old.close()                                           # a sibling of the new one instead
            at = g.store.at_version(v0)
            assert at is not old and at.version == v0 and not at.closed
        after = [oracle_count(list(model.edges), model.vlabels, p) for p in pats]
        for p, b, a in zip(pats, before, after):
            for budget in (None, "16KB"):
                d = g.count_delta(p, since=v0, device="cpu", progress=False, memory_budget=budget)
                assert d["added"] - d["removed"] == a - b, (p, budget)
        before = after
    g.close()
    assert g.store._older is None


def test_an_update_keeps_a_small_stores_floor_small(tmp_path):
    """A store built for a large budget (segments sized for it) and updated still answers at a
    small budget: its changes' segments are bounded by its edges, not by the build's segment size."""
    rng = random.Random(31)
    edges, vl = random_graph(rng, 30, 100, 2, 2)
    e, v = write_graph_files(tmp_path / "base", edges, vl)
    g = sgsi.build(str(tmp_path / "g.sgsi"), edges=e, vertices=v, memory_budget="4GB")
    model = Model(edges, vl, False)
    floor = memory_floor(g.store)
    model.apply([(0, 1, "E0"), (2, 3, "E1")], [])
    g.update(insert=_write_edges(tmp_path / "i.parquet", [(0, 1, "E0"), (2, 3, "E1")]))
    per = g.store.manifest["parameters"]["segment_edges"]                   # sized for 4GB: a floor
    assert 2 * per * (4 + 8 * g.store.theta) > 64 << 20                    # by it would refuse 64MB
    assert memory_floor(g.store) <= max(floor, 2 * 2 * g.store.n_edges * (4 + 8 * g.store.theta) + (1 << 12))
    for p in ("(a)-[:E0]->(b)", "(a:0)-->(b)-->(c)"):
        assert g.count(p, device="cpu", memory_budget="64MB", progress=False) == \
            oracle_count(list(model.edges), model.vlabels, p)
    g.close()


@pytest.mark.parametrize("table_keys", [touched._TABLE_KEYS, 0])
def test_update_signatures_match_a_fresh_build(tmp_path, monkeypatch, table_keys):
    """An update reads base lists plus the net change since the base, never an overlay; its
    signatures equal a fresh build's after three batches (pair groups by table or by np.unique)."""
    g, model, rng = _small(tmp_path, seed=21)
    with monkeypatch.context() as m:
        m.setattr(touched, "_TABLE_KEYS", table_keys)
        m.setattr(overlay.VersionView, "_build", lambda *a: pytest.fail("an update built an overlay"))
        for step in range(3):
            ins, dele = _random_batch(rng, model, list(model.vlabels), ["E0", "E1"], [900 + step, 950 + step])
            model.apply(ins, dele)
            g.update(insert=_write_edges(tmp_path / f"i{step}.parquet", ins),
                     delete=_write_edges(tmp_path / f"d{step}.parquet", dele))
    fresh = _fresh(tmp_path, model, "fresh")
    assert_same(g.store, fresh, model)
    fresh.close()
    st = g.store                                          # masked base segments: an LRU within a bound
    for sid in list(st._virtual):
        st.segment(sid)
    held = sum(x[0].nbytes for x in st._masked.values())
    assert st._masked and (len(st._masked) == 1 or held <= max(2 * st._base_max_segment_bytes, st.build_budget // 4))
    g.close()


def test_unchanged_vertex_labels_are_not_repeated_per_version(tmp_path):
    g, model, rng = _small(tmp_path, seed=23)
    g.update(insert=_write_edges(tmp_path / "a.parquet", [(0, 1, "E1")]))
    g.update(insert=_write_edges(tmp_path / "b.parquet", [(2, 3, "E0"), (4, 999, "E0")]))   # a new vertex
    entries = g.store.versions
    assert "vertex_labels" not in entries[1] and "vertex_labels" in entries[2]
    base = Store(g.path, version=1).manifest["vertex_labels"]
    assert Store(g.path, version=2).manifest["vertex_labels"] == base
    assert g.store.manifest["vertex_labels"]["unlabeled"] == base.get("unlabeled", 0) + 1
    g.close()


def test_lists_read_unchecked_check_their_offsets():
    """An update reads base segments without the whole-segment check; the offsets it uses are checked."""
    groups, ci = pcsr.build(np.array([1, 1, 2], np.int32), np.array([5, 6, 7], np.int32), 4)
    owner, nb = lists_in([0], [1], [2], lambda k: (groups, ci), np.array([1, 2], np.int32))
    assert owner.tolist() == [0, 0, 1] and nb.tolist() == [5, 6, 7]
    bad = groups.copy()
    bad[:, :-1, 1] = np.where(bad[:, :-1, 0] >= 0, 99, bad[:, :-1, 1])
    with pytest.raises(StoreError, match="segment 0 holds values out of range"):
        lists_in([0], [1], [2], lambda k: (bad, ci), np.array([1, 2], np.int32))


def test_has_pairs_searches_lists_across_segments():
    rng = np.random.default_rng(1)
    k = np.unique((rng.integers(0, 50, 2000) << 32) | rng.integers(0, 500, 2000))
    s, d = (k >> 32).astype(np.int32), (k & 0xFFFFFFFF).astype(np.int32)
    segs = [pcsr.build(s[:1000], d[:1000], 4), pcsr.build(s[1000:], d[1000:], 4)]     # a list spans both
    z = np.zeros(0, np.int64)
    p = Partition("0:out", len(s), 0, 0, np.array([0, 1]), np.array([s[0], s[1000]]), np.array([s[999], s[-1]]),
                  np.array([1000, len(s) - 1000]), z, z, z)
    qs, qd = rng.integers(0, 55, 3000).astype(np.int32), rng.integers(0, 500, 3000).astype(np.int32)
    want = np.isin((qs.astype(np.int64) << 32) | qd, k)
    assert want.any() and (has_pairs_in(p, lambda i: segs[i], qs, qd) == want).all()


def _table(segs):
    """A SegmentTable over PCSR segments laid back to back, as a store's files hold them."""
    flat = np.concatenate([g.reshape(-1) for g, _ci in segs])
    goff = np.cumsum([0] + [g.size for g, _ci in segs[:-1]])
    coff = np.cumsum([0] + [ci.size for _g, ci in segs[:-1]])
    return SegmentTable(np.arange(len(segs)) + 7, flat, np.concatenate([ci for _g, ci in segs]), goff, coff,
                        np.array([g.shape[0] for g, _ci in segs]), np.array([ci.size for _g, ci in segs]), 4)


def test_pairs_are_searched_in_many_segments_at_once():
    """has_pairs_mapped reads each pair's segment in the files' arrays (its groups and lists at their
    offsets): the same answers as a search of each segment, and a bad offset names its segment."""
    rng = np.random.default_rng(2)
    k = np.unique((rng.integers(0, 60, 3000) << 32) | rng.integers(0, 500, 3000))
    s, d = (k >> 32).astype(np.int32), (k & 0xFFFFFFFF).astype(np.int32)
    cut = [0, 700, 1500, len(s)]
    segs = [pcsr.build(s[a:b], d[a:b], 4) for a, b in zip(cut[:-1], cut[1:])]
    qs, qd = rng.integers(0, 65, 4000).astype(np.int32), rng.integers(0, 500, 4000).astype(np.int32)
    at = rng.integers(0, len(segs), qs.size)
    want = np.zeros(qs.size, bool)
    for i, (a, b) in enumerate(zip(cut[:-1], cut[1:])):
        mine = at == i
        want[mine] = np.isin((qs[mine].astype(np.int64) << 32) | qd[mine], k[a:b])
    assert want.sum() > 100 and (has_pairs_mapped(_table(segs), at, qs, qd) == want).all()
    bad = segs[1][0].copy()
    bad[:, :-1, 1] = np.where(bad[:, :-1, 0] >= 0, 10 ** 6, bad[:, :-1, 1])
    with pytest.raises(StoreError, match="segment 8 holds values out of range"):
        has_pairs_mapped(_table([segs[0], (bad, segs[1][1]), segs[2]]), at, qs, qd)


def test_an_update_finds_its_edges_in_lists_that_span_segments(tmp_path):
    """touched.present over a store of many small segments a label (a hub's list spans several): each
    edge's presence is the model's, for pairs present and absent, of every label."""
    rng = random.Random(4)
    edges = {(rng.randrange(40) if rng.random() < 0.5 else 0, rng.randrange(40), rng.choice(["E0", "E1", "E2"]))
             for _ in range(900)}
    edges = sorted(edges)
    e, v = write_graph_files(tmp_path / "base", edges, {i: 0 for i in range(40)})
    g = sgsi.build(str(tmp_path / "g.sgsi"), edges=e, vertices=v, memory_budget=BUDGET)
    st = g.store
    spans = [p for lab in range(3) for p in [st.partition(lab, "out")]]
    assert max(len(p.seg_ids) for p in spans) > 2
    labels = {name: st.edge_label_id(name) for name in ("E0", "E1", "E2")}
    q = [(rng.randrange(40) if rng.random() < 0.5 else 0, rng.randrange(40), rng.choice(list(labels)))
         for _ in range(2000)]
    dense = {x: i for i, x in enumerate(st.vertex_ids(np.arange(st.n_vertices)).to_pylist())}
    qs, qd = (np.array([dense[x[j]] for x in q], np.int32) for j in (0, 1))
    ql = np.array([labels[x] for _a, _b, x in q], np.int32)
    empty = (np.zeros(0, np.int32),) * 3
    got = touched.present(st, (empty, empty), qs, qd, ql)
    want = np.array([x in set(edges) for x in q])
    assert want.any() and (~want).any() and (got == want).all()
    g.close()


def test_pair_groups_hash_as_pair_group():
    rng = np.random.default_rng(3)
    e, n = rng.integers(0, 5000, 3000), rng.integers(-1, 20000, 3000)
    d = rng.choice(["o", "i", "u"], 3000)
    want = [pair_group(int(a), b, int(c), 56) for a, b, c in zip(e, d, n)]
    assert pairhash.pair_groups(e, d, n, 56).tolist() == want
    words = ["", "a", "ab", "abc", "abcd", "abcde", "x|o|12345678"]
    assert pairhash.murmur3(pa.array(words)).tolist() == [mmh3.hash(w, signed=False) for w in words]


STEPS = ["delta-file", "delta-rename", "manifest-write", "manifest-rename"]


@pytest.mark.parametrize("step", STEPS)
def test_a_crash_at_any_step_leaves_the_old_version_or_the_new(tmp_path, step, monkeypatch):
    g, model, rng = _small(tmp_path, seed=9)
    ins, dele = _random_batch(rng, model, list(model.vlabels), ["E0", "E1"], [700, 701])
    fi, fd = _write_edges(tmp_path / "i.parquet", ins), _write_edges(tmp_path / "d.parquet", dele)
    pattern = "(a)-[:E0]->(b)-->(c)"
    before = g.count(pattern, device="cpu", progress=False)

    def boom(name):
        if name == step:
            raise RuntimeError(f"crash at {name}")
    monkeypatch.setattr(delta_mod, "STEP_HOOK", boom)
    with pytest.raises(RuntimeError, match="crash"):
        g.update(insert=fi, delete=fd)
    monkeypatch.setattr(delta_mod, "STEP_HOOK", None)
    with sgsi.open(g.path) as again:
        assert again.store.version == 1 and again.count(pattern, device="cpu", progress=False) == before
    left = os.listdir(os.path.join(g.path, "deltas")) if os.path.isdir(os.path.join(g.path, "deltas")) else []
    assert not [x for x in left if x.startswith(".tmp-")]
    model.apply(ins, dele)
    assert g.update(insert=fi, delete=fd)["version"] == 2            # the next update goes through
    edges = list(model.edges)
    assert g.count(pattern, device="cpu", progress=False) == oracle_count(edges, model.vlabels, pattern)
    g.close()


def test_a_killed_update_leaves_the_old_version(tmp_path):
    g, model, rng = _small(tmp_path, seed=11)
    ins, _ = _random_batch(rng, model, list(model.vlabels), ["E0", "E1"], [800, 801])
    fi = _write_edges(tmp_path / "i.parquet", ins)
    code = ("import os, sys; from sgsi.storage import delta, update\n"
            "delta.STEP_HOOK = lambda name: os._exit(3) if name == 'manifest-rename' else None\n"
            f"update.update_store({g.path!r}, insert={fi!r})\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(sgsi.__file__)),
                                                       os.environ.get("PYTHONPATH", "")]))
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 3
    st = Store(g.path)
    assert st.version == 1 and os.path.isdir(os.path.join(g.path, "deltas", "2"))     # an orphan delta
    st.close()
    assert g.update(insert=fi)["version"] == 2
    model.apply(ins, [])
    assert g.count("(a)-->(b)", device="cpu", progress=False) == oracle_count(list(model.edges), model.vlabels,
                                                                              "(a)-->(b)")
    g.close()


def test_update_errors_name_the_file(tmp_path):
    g, model, rng = _small(tmp_path, seed=3)
    with pytest.raises(InputError, match="nothing to update"):
        g.update()
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"src": ["a"], "dst": ["b"], "label": ["E0"]}), bad)
    with pytest.raises(InputError, match="bad.parquet: vertex ids are strings"):
        g.update(insert=str(bad))
    nolab = tmp_path / "nolab.parquet"
    pq.write_table(pa.table({"src": [1], "dst": [2]}), nolab)
    with pytest.raises(InputError, match="nolab.parquet: no edge label column"):
        g.update(insert=str(nolab))
    missing = tmp_path / "m.parquet"
    pq.write_table(pa.table({"from": [1], "dst": [2], "label": ["E0"]}), missing)
    with pytest.raises(InputError, match="m.parquet: missing column 'src'"):
        g.update(delete=str(missing))
    relabel = tmp_path / "rl.parquet"
    v0 = next(iter(model.vlabels))
    pq.write_table(pa.table({"id": [v0], "label": [(model.vlabels[v0] + 1) % 2]}), relabel)
    with pytest.raises(InputError, match="cannot change a vertex's label"):
        g.update(vertices=str(relabel))
    with pytest.raises(StoreError, match="no version 7"):
        Store(g.path, version=7)
    assert g.store.version == 1
    g.update(insert=_write_edges(tmp_path / "ok.parquet", [(0, 1, "E1")]))
    fp = os.path.join(g.path, "deltas", "2", "inserted.arrow")
    with open(fp, "r+b") as f:
        f.truncate(10)
    with pytest.raises(StoreError, match="deltas/2/inserted.arrow has 10 bytes"):
        Store(g.path)
    g.close()


def test_new_vertices_from_a_vertex_file_and_other_versions_of_one_opening(tmp_path):
    g, model, rng = _small(tmp_path, seed=17)
    vf = tmp_path / "nv.parquet"
    pq.write_table(pa.table({"id": [77, 78, 0], "label": [1, None, model.vlabels[0]]}), vf)
    r = g.update(vertices=str(vf))
    assert (r["new_vertices"], r["inserted"], r["version"]) == (2, 0, 2)
    st = g.store
    assert st.n_vertices == len(model.vlabels) + 2
    assert st.vertex_ids(np.array([st.n_vertices - 2, st.n_vertices - 1])).to_pylist() == [77, 78]
    assert g.count("(:1)", device="cpu", progress=False) == sum(1 for x in model.vlabels.values() if x == 1) + 1
    fi = _write_edges(tmp_path / "i.parquet", [(77, 78, "E1")])
    g.update(insert=fi)
    assert g.count("(a:1)-[:E1]->(b)", device="cpu", progress=False) >= 1
    v2 = g.store.at_version(2)                    # the same open files, another version
    assert v2.version == 2 and v2.token != g.store.token and g.store.at_version(3) is g.store
    assert not any(v2.reads_direct_segment(s) is None for s in v2.partition(1, "out").seg_ids)
    virtual = [s for s in g.store.partition(1, "out").seg_ids if s >= g.store._n_base_segments]
    assert virtual and not any(g.store.reads_direct_segment(s) for s in virtual)
    g.close()


def test_cli_and_sql(tmp_path, capsys):
    g, model, rng = _small(tmp_path, seed=21)
    fi = _write_edges(tmp_path / "i.parquet", [(0, 999, "E0"), (0, 999, "E0")])
    fd = _write_edges(tmp_path / "d.parquet", [(0, 1, "E7")])
    assert cli_main(["update", g.path, "--insert", fi, "--delete", fd]) == 0
    out = capsys.readouterr().out
    assert "version 2: +1 -0 edges (1 already present, 1 absent), 1 new vertices" in out
    assert cli_main(["info", g.path]) == 0
    assert "store version  2" in capsys.readouterr().out
    con = duckdb.connect()
    sgsi.register(con)
    fi2 = _write_edges(tmp_path / "i2.parquet", [(999, 0, "E1")])
    (r,), = con.execute(f"SELECT sgsi_update('{g.path}', insert := '{fi2}')").fetchall()
    assert '"version": 3' in r and '"inserted": 1' in r
    count = "SELECT match_count('{}', '(a)-[:E0]->(b)-[:E1]->(a)', device := 'cpu')".format(g.path)
    n = con.execute(count).fetchone()[0]
    (r,), = con.execute(f"SELECT sgsi_compact('{g.path}')").fetchall()
    assert '"compacted": true' in r
    assert con.execute(count).fetchone()[0] == n >= 1
    assert cli_main(["compact", g.path, "-q"]) == 0
    assert "nothing to compact" in capsys.readouterr().out
    con.close()
    g.close()


def test_sql_brings_its_open_store_to_an_update(tmp_path):
    """A database's open store, updated since its last query, is brought to the new version
    sharing its base files (the delta read, not the store again); queries see the update."""
    g, model, rng = _small(tmp_path, seed=23)
    con = duckdb.connect()
    reg = sgsi.register(con, device="cpu")
    pattern = "(a)-[:E0]->(b)-->(c)"
    count = f"SELECT match_count('{g.path}', '{pattern}')"
    stores = reg._state.stores.open
    for step in range(3):
        assert con.execute(count).fetchone()[0] == oracle_count(list(model.edges), model.vlabels, pattern)
        (kept,) = stores.values()
        readers, version = kept.graph.store._readers, kept.graph.store.version
        ins, dele = _random_batch(rng, model, list(model.vlabels), ["E0", "E1"], [300 + step, 400 + step])
        model.apply(ins, dele)
        con.execute(f"SELECT sgsi_update('{g.path}', insert := '{_write_edges(tmp_path / f'i{step}.parquet', ins)}', "
                    f"delete := '{_write_edges(tmp_path / f'd{step}.parquet', dele)}')").fetchall()
        assert con.execute(count).fetchone()[0] == oracle_count(list(model.edges), model.vlabels, pattern)
        (now,) = stores.values()
        assert now.graph.store.version == version + 1 and now.graph.store._readers is readers
        assert kept.graph.store._readers == {}                # the older one closed, being idle
    con.close()
    g.close()


def test_a_worker_brings_its_kept_store_to_an_update(tmp_path):
    """A Dask worker's kept store (``shard.tasks``), updated since its last task, is brought to the
    new version sharing its base files; the older one is closed, being idle."""
    from sgsi.shard import tasks
    g, model, rng = _small(tmp_path, seed=29)
    with tasks._STORES.use(g.path) as kept:
        first, readers = kept.store, kept.store._readers
    g.update(insert=_write_edges(tmp_path / "i.parquet", [(0, 1, "E0"), (2, 3, "E1")]))
    with tasks._STORES.use(g.path) as now:
        assert now.store.version == first.version + 1 == g.store.version and now.store._readers is readers
        assert now.store.n_edges == g.store.n_edges
    assert first._readers == {}
    tasks._STORES.close_idle()
    g.close()


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU with CuPy on this machine")
@pytest.mark.parametrize("undirected", [False, True], ids=["directed", "undirected"])
def test_gpu_reads_versions(tmp_path, undirected):
    """The GPU copies segments held in memory through its pinned buffers and the base ones from the
    file maps; every version and the compacted store count as on the CPU."""
    g, model, rng = _small(tmp_path, undirected, seed=31)
    patterns = [random_pattern(random.Random(i), rng.randint(2, 4), [0, 1], ["E0", "E1"]) for i in range(6)]
    readers = []
    for step in range(2):
        ins, dele = _random_batch(rng, model, list(model.vlabels), ["E0", "E1"], [900 + step, 950 + step],
                                  "E5" if step else None)
        g.update(insert=_write_edges(tmp_path / f"i{step}.parquet", ins),
                 delete=_write_edges(tmp_path / f"d{step}.parquet", dele))
        readers.append(sgsi.open(g.path, version=g.store.version))
    for r in readers:
        for p in patterns:
            for budget in (None, "64KB"):
                assert r.count(p, device="gpu", memory_budget=budget, progress=False) == \
                    r.count(p, device="cpu", memory_budget=budget, progress=False), (r.store.version, p, budget)
    # The partitions' overlays are made when a query first reads them: some segments came from memory.
    assert any(not r.store.reads_direct_segment(s) for r in readers for s in r.store._virtual)
    want = [readers[-1].count(p, device="cpu", progress=False) for p in patterns]
    g.compact()
    assert [g.count(p, device="gpu", progress=False) for p in patterns] == want
    assert [readers[-1].count(p, device="gpu", progress=False) for p in patterns] == want
    for r in readers:
        r.close()
    g.close()


def test_a_new_version_keeps_the_graphs_backends(tmp_path):
    """Graph.update and Graph.newest read the new version with the backends the Graph had (their
    buffers and caches; a base segment keyed alike in every version's opening); a compaction, which
    writes new base files, starts afresh. Counts stay the oracle's."""
    g, model, rng = _small(tmp_path, seed=41)
    pattern = "(a)-[:E0]->(b)-->(c)"
    assert g.count(pattern, device="cpu", progress=False) == oracle_count(list(model.edges), model.vlabels, pattern)
    backends, first = g._backends, g.store
    ins, dele = _random_batch(rng, model, list(model.vlabels), ["E0", "E1"], [300, 301])
    model.apply(ins, dele)
    g.update(insert=_write_edges(tmp_path / "i.parquet", ins), delete=_write_edges(tmp_path / "d.parquet", dele))
    idle = backends._idle.get("cpu")
    assert idle is not None and g._backends is backends and g.store.shares_files(first)
    assert g.count(pattern, device="cpu", progress=False) == oracle_count(list(model.edges), model.vlabels, pattern)
    assert backends._idle.get("cpu") is idle
    seg = int(first.partition(0, "out").seg_ids[0])
    assert g.store.segment_key(seg) == first.segment_key(seg) != g.store.segment_key(g.store._next_segment - 1)
    follower = sgsi.open(g.path, version=1)
    assert follower.newest()._backends is follower._backends
    g.compact()
    assert not backends._idle and not g.store.shares_files(first)
    assert follower.newest()._backends is not follower._backends      # the compacted files: opened anew
    follower.close()
    g.close()


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU with CuPy on this machine")
def test_gpu_keeps_base_segments_for_a_new_version(tmp_path):
    """A new version's first query copies no base segment it already holds (the base files' token
    keys them), only those of its changes; the base entries go when the last opening of the files
    does."""
    from sgsi.join.backends.gpu.memory import device_memory
    g, model, rng = _small(tmp_path, seed=43)
    pattern = "(a)-[:E0]->(b)-[:E0]->(c)"
    g.count(pattern, device="gpu", progress=False)
    assert g.last_stats["h2d_segment_bytes"] > 0
    base = g.store.base_token
    ins = [(a, b, "E1") for a, b, _l in sorted(model.edges, key=str)[:3]]      # E1 only: E0 untouched
    ins = [(b, a, "E1") for a, b, _l in ins]
    model.apply(ins, [])
    g.update(insert=_write_edges(tmp_path / "i.parquet", ins))
    assert g.count(pattern, device="gpu", progress=False) == oracle_count(list(model.edges), model.vlabels, pattern)
    assert g.last_stats["h2d_segment_bytes"] == 0 and g.last_stats["segments"] > 0
    mem = device_memory()
    assert any(k[0] == base for k in mem.cache.keys())
    g.close()
    gc.collect()
    assert not any(k[0] == base for k in mem.cache.keys())


def test_deleting_from_a_saturated_group_keeps_it_until_compaction(tmp_path):
    """Vertex 0 has two E0 edges to label-1 vertices: their group is saturated (two pairs or
    more). A version that deletes one keeps the group saturated (no list is read; 0 still passes a
    filter that wants two such pairs) and counts exactly; compaction makes the signature exact."""
    edges = [(0, 1, "E0"), (0, 2, "E0"), (3, 1, "E0"), (3, 2, "E0"), (1, 2, "E1")]
    vl = {0: 0, 1: 1, 2: 1, 3: 0}
    e, v = write_graph_files(tmp_path / "base", edges, vl)
    g = sgsi.build(str(tmp_path / "g.sgsi"), edges=e, vertices=v, memory_budget=BUDGET)
    two = "(x:0)-[:E0]->(y:1), (x)-[:E0]->(z:1)"
    assert g.count(two, device="cpu") == 4
    g.update(delete=_write_edges(tmp_path / "d.parquet", [(0, 1, "E0")]))
    st = g.store
    groups = signature_groups(st.signature_bits, st.label_bits)
    key = pair_group(st.edge_label_id("E0"), "o", st.vertex_label_id("1"), groups)

    def count_of(store, vertex):
        return int(_pair_counts(store, [_signatures(store)[0][vertex]])[0, key])
    assert count_of(st, 0) == 2                         # saturated, though one pair is left
    assert g.count(two, device="cpu") == 2              # vertex 3's two orders only
    model = Model([x for x in edges if x != (0, 1, "E0")], vl, False)
    fresh = _fresh(tmp_path, model, "fresh")
    assert count_of(fresh, 0) == 1
    assert_same(g.store, fresh, model)
    g.compact()
    assert count_of(g.store, 0) == 1
    assert_same(g.store, fresh, model, exact_signatures=True)
    assert g.count(two, device="cpu") == 2
    fresh.close()
    g.close()


def test_edge_isin_matches_a_set():
    """Same pair, other label: not in; repeats on both sides; an empty side."""
    from sgsi.storage.lists import edge_isin
    rng = np.random.default_rng(3)
    a = [rng.integers(0, 9, 400).astype(np.int32) for _ in range(2)] + [rng.integers(0, 3, 400).astype(np.int32)]
    b = [rng.integers(0, 9, 300).astype(np.int32) for _ in range(2)] + [rng.integers(0, 3, 300).astype(np.int32)]
    theirs = set(zip(*(x.tolist() for x in b)))
    want = [e in theirs for e in zip(*(x.tolist() for x in a))]
    got = edge_isin(*a, *b)
    assert got.tolist() == want and 0 < got.sum() < len(want)
    assert not edge_isin(*a, *(x[:0] for x in b)).any() and edge_isin(*(x[:0] for x in a), *b).size == 0


def test_in_sorted_matches_a_set():
    """in_sorted against Python sets: a unsorted into b, and a sorted (with repeats, the longer)
    by b's runs in it; empty sides."""
    from sgsi.storage.lists import in_sorted
    rng = np.random.default_rng(7)
    for n, m in ((500, 40), (40, 500), (300, 300)):
        a, b = rng.integers(0, 200, n), np.unique(rng.integers(0, 200, m))
        want = [x in set(b.tolist()) for x in a.tolist()]
        assert in_sorted(a, b).tolist() == want and 0 < sum(want) < n
        s = np.sort(a)
        assert in_sorted(s, b, a_sorted=True).tolist() == [x in set(b.tolist()) for x in s.tolist()]
    assert in_sorted(np.arange(5), np.arange(0)).tolist() == [False] * 5
    assert in_sorted(np.arange(0), np.arange(5), a_sorted=True).size == 0


@pytest.mark.parametrize("offset", [0, 2 ** 30])
def test_edge_sets_match_python_sets(offset):
    """unique_edges, edge_isin and net_events against Python sets, with ids that fit one int64
    key with the label (offset 0) and ids that do not (2**30: the columns are sorted instead)."""
    from sgsi.storage.lists import EdgeKeys, edge_isin, net_events, unique_edges
    rng = np.random.default_rng(5)

    def edges(n):
        return tuple(np.array(x, np.int32) for x in (rng.integers(0, 9, n) + offset, rng.integers(0, 9, n) + offset,
                                                     rng.integers(0, 3, n)))

    def triples(e):
        return list(zip(*(x.tolist() for x in e)))
    a, b = edges(400), edges(300)
    assert (EdgeKeys.of(a, b) is None) == (offset > 0)
    theirs = set(triples(b))
    assert edge_isin(*a, *b).tolist() == [e in theirs for e in triples(a)]
    assert triples(unique_edges(*a)) == sorted(set(triples(a)))
    now = start = set(triples(a))
    versions = []
    for _ in range(4):                            # each version net against the one before
        gone = {e for e in now if rng.random() < 0.3}
        new = set(triples(edges(60))) - now
        versions.append(tuple(tuple(np.array(c, np.int32).reshape(-1) for c in zip(*sorted(x))) if x else
                              (np.zeros(0, np.int32),) * 3 for x in (new, gone)))
        now = (now - gone) | new
    added, removed = net_events(versions)
    assert triples(added) == sorted(now - start) and triples(removed) == sorted(start - now)


@pytest.mark.parametrize("shuffled", [False, True], ids=["by-source", "out-of-order"])
def test_final_lists_are_the_sorted_union_less_the_removed(shuffled):
    """overlay._final_lists: the changed vertices' base pairs less the removed ones, with the added
    ones (some already there) in their places, as a sort of all the keys gives them; base pairs out
    of order (a layout the search does not expect) are sorted first."""
    from sgsi.storage.lists import pair_keys, sorted_unique, split_keys
    rng = np.random.default_rng(3)
    base = sorted_unique(pair_keys(rng.integers(0, 50, 3000), rng.integers(0, 400, 3000)))
    src, nb = split_keys(base)
    ak = sorted_unique(np.concatenate([pair_keys(rng.integers(0, 60, 300), rng.integers(0, 400, 300)),
                                       rng.choice(base, 40)]))
    rk = sorted_unique(rng.choice(base, 200))
    rk = rk[~np.isin(rk, ak)]
    if shuffled:
        o = rng.permutation(src.size)
        src, nb = src[o], nb[o]
    fs, fd = overlay._final_lists(src, nb, ak, rk)
    want = sorted_unique(np.concatenate([base[~np.isin(base, rk)], ak]))
    assert fs.dtype == np.int32 and fd.dtype == np.int32
    assert np.array_equal(pair_keys(fs, fd), want)
