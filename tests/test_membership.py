"""Later linking edges (sgsi.join.backends.membership.member) against a brute-force set test.

Random graphs and entries; caps small enough to force every path: one
bitset, blocks of linking vertices, and the binary-search fallback (also
where the bitsets would be too sparse for the entries), with values tested
as ids and as ranks among a candidate set.
"""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sgsi
from sgsi.join.backends import membership
from sgsi.join.backends.cpu import CpuBackend


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("member")
    rng = np.random.default_rng(11)
    n, m = 2000, 20000
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = src != dst
    pq.write_table(pa.table({"src": src[keep], "dst": dst[keep], "label": np.where(src[keep] % 3 == 0, "a", "b")}),
                   d / "e.parquet")
    g = sgsi.build(str(d / "g.sgsi"), edges=str(d / "e.parquet"), memory_budget="64KB")
    yield g
    g.close()


def neighbours(g, label, direction):
    """dense id -> set of dense neighbour ids, from the store's own lists (one partition)."""
    from sgsi.join.stream import neighbour_lists
    be = CpuBackend()
    p = g.store.partition(g.store.edge_label_id(label), direction)
    allv = np.arange(g.store.n_vertices, dtype=np.int32)
    out = {}
    for lo, _hi, nb, owner in neighbour_lists(g.store, be, p, allv):
        for o, x in zip((owner + lo).tolist(), nb.tolist()):
            out.setdefault(o, set()).add(x)
    return out


class _Link:
    def __init__(self, label_id, direction):
        self.label_id, self.direction = label_id, direction


@pytest.mark.parametrize("cap", [1 << 20, 4096, 64, 1])
@pytest.mark.parametrize("ranked", [False, True])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("sparse", [False, True], ids=["", "searched"])
def test_member_vs_brute_force(store, cap, ranked, seed, sparse, monkeypatch):
    if sparse:                  # bitsets deemed too sparse for the entries: searched whatever the cap
        monkeypatch.setattr(membership, "SEARCH_PAST", 0)
    rng = np.random.default_rng(seed)
    be = CpuBackend()
    nv = store.store.n_vertices
    truth = neighbours(store, "b", "out")
    # Tuples: a linking vertex each; entries sorted by tuple, then by value.
    n_t = 300
    vcol = rng.integers(0, nv, n_t).astype(np.int32)
    cand = np.zeros(nv, bool)
    cand[rng.choice(nv, nv // 3, replace=False)] = True
    pool = np.flatnonzero(cand).astype(np.int32) if ranked else np.arange(nv, dtype=np.int32)
    counts = rng.integers(0, 40, n_t)
    erow = np.repeat(np.arange(n_t), counts)
    evals = np.concatenate([np.sort(rng.choice(pool, c, replace=False)) for c in counts]).astype(np.int32)
    # Some true neighbours among the entries, so that both answers occur.
    for t in range(0, n_t, 3):
        lst = sorted(x for x in truth.get(int(vcol[t]), ()) if not ranked or cand[x])
        if lst and counts[t]:
            i = np.flatnonzero(erow == t)[0]
            evals[i] = lst[0]
    for t in range(n_t):       # keep each tuple's values sorted and distinct after the edits
        sel = np.flatnonzero(erow == t)
        evals[sel] = np.sort(evals[sel])
    ok_rows = np.ones(evals.size, bool)
    for t in range(n_t):
        sel = np.flatnonzero(erow == t)
        ok_rows[sel[1:]] = evals[sel][1:] != evals[sel][:-1]
    erow, evals, = erow[ok_rows], evals[ok_rows]
    ecount = np.bincount(erow, minlength=n_t)
    want = np.array([int(x) in truth.get(int(vcol[t]), ()) for t, x in zip(erow, evals)], bool)
    link = _Link(store.store.edge_label_id("b"), "out")
    cbits = be.pack_bits(cand) if ranked else None
    for ec in (None, ecount):
        got = membership.member(be, store.store, link, vcol, erow, evals, cap, ecount=ec, cbits=cbits)
        assert got.dtype == bool and got.shape == want.shape
        assert (got == want).all()
    assert want.any() and not want.all()


@pytest.mark.parametrize("lengths,gathered", [
    ([40, 40], None),
    ([5, 300, 2000], None),
    ([300, 3, 60, 60], [True, False, True, True]),
    ([50] * 18, None),                          # more lists than the GPU kernel keeps windows for
    ([0, 10], None),
])
def test_intersect_ranked_matches_sets(lengths, gathered):
    """The CPU backend's intersection of gathered lists (the GPU kernel's reference) against
    Python sets: each tuple gets exactly the values common to its lists, sorted; links left
    out are reported untested."""
    from oracle import random_gathered_lists
    rng = np.random.default_rng(sum(lengths))
    be = CpuBackend()
    lists, expect = random_gathered_lists(rng, 200, lengths, gathered, universe=max(lengths) * 3 + 1)
    etuple, evals, probes, untested = be.intersect_lists(lists, bitcap=1 << 30)
    assert untested == [j for j, L in enumerate(lists) if L is None]
    assert probes >= evals.size
    got = [set() for _ in expect]
    for t, v in zip(etuple.tolist(), evals.tolist()):
        got[t].add(v)
    assert got == expect
    assert len(evals) == sum(len(s) for s in expect)
    key = etuple.astype(np.int64) * 2 ** 32 + evals
    assert np.all(np.diff(key) > 0)                 # sorted by tuple, then value
    # A bitset cap too small for any later list: nothing to intersect by bitsets.
    assert be.intersect_lists(lists, bitcap=0) is None
    assert be.intersect_lists([lists[0]] + [None] * (len(lists) - 1), bitcap=1 << 30) is None
