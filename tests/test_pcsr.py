"""PCSR of one segment (sgsi.partition.pcsr, §4 of the paper).

Checks ``build`` + ``lookup`` on random segments for every Θ in 2..16,
hash-collision overflow chains, the Claim-1 bound, ``ragged_indices``
against a plain Python reference, and the structure invariants of the
group table (END values, unused slots, sorted neighbour lists).
"""

import ast
import glob
import math
import os

import numpy as np
import pytest

from sgsi.partition import pcsr

THETAS = list(range(2, 17))


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def random_segment(rng, n_src, max_deg, id_space):
    """A random segment: (src, dst) sorted by (src, dst), no duplicate edges.

    Returns src, dst (int32) and the reference adjacency {v: sorted list}.
    """
    verts = np.sort(rng.choice(id_space, size=n_src, replace=False))
    adj = {}
    for v in verts:
        k = int(rng.integers(1, max_deg + 1))
        adj[int(v)] = sorted(int(x) for x in rng.choice(id_space, size=k, replace=False))
    src = np.array([v for v in adj for _ in adj[v]], np.int32)
    dst = np.array([x for v in adj for x in adj[v]], np.int32)
    return src, dst, adj


def edges_of(adj):
    src = np.array([v for v in sorted(adj) for _ in adj[v]], np.int32)
    dst = np.array([x for v in sorted(adj) for x in adj[v]], np.int32)
    return src, dst


def check_lookup_all(groups, ci, adj):
    """Every vertex is found with exactly its sorted neighbour list."""
    verts = np.array(sorted(adj), np.int64)
    start, end = pcsr.lookup(groups, verts)
    for v, s, e in zip(verts.tolist(), start.tolist(), end.tolist()):
        assert ci[s:e].tolist() == adj[v], f"vertex {v}: got {ci[s:e].tolist()}, want {adj[v]}"


def home_groups(groups):
    """{home group: [chain of groups]} following GID from every group that owns vertices."""
    n_groups, theta, _ = groups.shape
    cap = theta - 1
    chains = {}
    for g in range(n_groups):
        chain = [g]
        seen = {g}
        nxt = int(groups[g, cap, 0])
        while nxt != -1:
            assert 0 <= nxt < n_groups, f"GID {nxt} of group {chain[-1]} out of range"
            assert nxt not in seen, f"GID cycle from group {g}"
            seen.add(nxt)
            chain.append(nxt)
            nxt = int(groups[nxt, cap, 0])
        chains[g] = chain
    return chains


def check_structure(groups, ci, adj, theta):
    """Structure invariants of a built PCSR."""
    n_groups = len(adj)
    cap = theta - 1
    assert groups.dtype == np.int32 and ci.dtype == np.int32
    assert groups.shape == (n_groups, theta, 2)
    assert len(ci) == sum(len(x) for x in adj.values())

    verts_in_table = []
    prev_end = 0
    for g in range(n_groups):
        end = int(groups[g, cap, 1])
        slots = groups[g, :cap]
        used = slots[:, 0] != -1
        # Used slots come first, unused ones are (-1, END).
        k = int(used.sum())
        assert used[:k].all() and not used[k:].any(), f"group {g}: used slots not contiguous: {slots[:, 0]}"
        assert (slots[k:, 1] == end).all(), f"group {g}: unused slots are not (-1, END={end})"
        # Offsets: the group starts where the previous one ended; each slot's list
        # ends at the next slot's offset; END closes the last one.
        offs = [int(x) for x in slots[:k, 1]] + [end]
        if k:
            assert offs[0] == prev_end, f"group {g} starts at {offs[0]}, previous group ended at {prev_end}"
        else:
            assert end == prev_end, f"empty group {g} has END {end}, previous group ended at {prev_end}"
        for s in range(k):
            v = int(slots[s, 0])
            lst = ci[offs[s]:offs[s + 1]].tolist()
            assert lst == adj[v], f"group {g} slot {s} vertex {v}: {lst} != {adj[v]}"
            assert lst == sorted(lst)
            verts_in_table.append(v)
        prev_end = end
    assert prev_end == len(ci)
    # Every vertex exactly once.
    assert sorted(verts_in_table) == sorted(adj)

    # Each vertex sits in its hash group or in that group's overflow chain.
    h = pcsr.vertex_hash(np.array(sorted(adj), np.int64), n_groups)
    home = dict(zip(sorted(adj), h.tolist()))
    chains = home_groups(groups)
    where = {}
    for g in range(n_groups):
        for s in range(cap):
            v = int(groups[g, s, 0])
            if v != -1:
                where[v] = g
    for v, hg in home.items():
        assert where[v] in chains[hg], f"vertex {v} in group {where[v]}, not on the chain of its home {hg}"
    # A chain group holds only vertices of its home, and the home group is full
    # before overflowing.
    homes = set(home.values())
    for hg in homes:
        chain = chains[hg]
        if len(chain) > 1:
            assert (groups[hg, :cap, 0] != -1).all(), f"group {hg} overflows before it is full"
            for g in chain[1:]:
                assert g not in homes, f"overflow group {g} of home {hg} is itself a home group"
                for s in range(cap):
                    v = int(groups[g, s, 0])
                    if v != -1:
                        assert home[v] == hg


# ---------------------------------------------------------------------------
# Random segments, every Θ
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("theta", THETAS)
@pytest.mark.parametrize("shape", ["small", "dense_ids", "sparse_ids", "one_vertex"])
def test_build_lookup_random(theta, shape):
    rng = np.random.default_rng(1000 * theta + ["small", "dense_ids", "sparse_ids", "one_vertex"].index(shape))
    if shape == "small":
        src, dst, adj = random_segment(rng, 7, 4, 50)
    elif shape == "dense_ids":
        src, dst, adj = random_segment(rng, 300, 12, 300)
    elif shape == "sparse_ids":
        src, dst, adj = random_segment(rng, 500, 6, 2**31 - 1)
    else:
        src, dst, adj = random_segment(rng, 1, 30, 100)
    groups, ci = pcsr.build(src, dst, theta)
    check_structure(groups, ci, adj, theta)
    check_lookup_all(groups, ci, adj)

    # Absent non-negative vertices: (0, 0).
    present = set(adj)
    absent = [x for x in rng.integers(0, 2**31 - 1, size=400).tolist() if x not in present]
    absent += [x for x in range(0, 50) if x not in present]
    st, en = pcsr.lookup(groups, np.array(absent, np.int64))
    assert (st == 0).all() and (en == 0).all()

    # Negative and huge ids (beyond int32, and present ids + 2**32, which hash
    # to the same group as the present vertex) are absent: empty ranges.
    weird = [-1, -2, -(2**31), -(2**40), 2**31, 2**32, 2**40, 2**62]
    weird += [v + 2**32 for v in list(present)[:20]] + [v - 2**32 for v in list(present)[:20]]
    st, en = pcsr.lookup(groups, np.array(weird, np.int64))
    assert (st == en).all(), list(zip(weird, st.tolist(), en.tolist()))


@pytest.mark.parametrize("theta", THETAS)
def test_lookup_mixed_query_order_and_duplicates(theta):
    """A query array with repeats, absent ids and any order gives per-entry answers."""
    rng = np.random.default_rng(theta)
    src, dst, adj = random_segment(rng, 120, 5, 1000)
    groups, ci = pcsr.build(src, dst, theta)
    q = rng.integers(0, 1000, size=2000)
    st, en = pcsr.lookup(groups, q)
    for v, s, e in zip(q.tolist(), st.tolist(), en.tolist()):
        assert ci[s:e].tolist() == adj.get(v, [])


def test_lookup_int32_queries():
    rng = np.random.default_rng(7)
    src, dst, adj = random_segment(rng, 200, 5, 10**6)
    groups, ci = pcsr.build(src, dst, 5)
    q = np.array(sorted(adj), np.int32)
    st, en = pcsr.lookup(groups, q)
    for v, s, e in zip(q.tolist(), st.tolist(), en.tolist()):
        assert ci[s:e].tolist() == adj[v]


def test_docstring_example():
    g, ci = pcsr.build(np.array([0, 0, 5]), np.array([1, 2, 0]), theta=2)
    assert sorted(ci.tolist()) == [0, 1, 2]
    st, en = pcsr.lookup(g, np.array([0, 5, 3]))
    assert ci[st[0]:en[0]].tolist() == [1, 2]
    assert ci[st[1]:en[1]].tolist() == [0]
    assert st[2] == en[2] == 0


def test_empty_segment():
    for theta in THETAS:
        g, ci = pcsr.build(np.zeros(0, np.int32), np.zeros(0, np.int32), theta)
        assert g.shape == (0, theta, 2) and ci.shape == (0,)
        st, en = pcsr.lookup(g, np.array([0, 1, -1]))
        assert st.tolist() == [0, 0, 0] and en.tolist() == [0, 0, 0]


@pytest.mark.parametrize("theta", [4, 16])
def test_bug_lookup_minus_one_is_not_0_0(theta):
    """Minor BUG (documented contract): pcsr.lookup's docstring promises
    ``start == end == 0`` for an absent vertex, but v = -1 equals the marker
    of unused slots (-1, END), so lookup returns (END, END) of a group with a
    free slot (sgsi/partition/pcsr.py lookup: ``hit = grp[:, :cap, 0] == v``).
    The range is empty, so the engine is unaffected; a caller that trusts
    ``start == 0`` is not."""
    g, ci = pcsr.build(np.array([0, 0, 5]), np.array([1, 2, 0]), theta)
    st, en = pcsr.lookup(g, np.array([-1]))
    assert st[0] == en[0]                      # empty: holds
    assert st[0] == 0 and en[0] == 0           # documented: fails


def test_lookup_empty_query():
    g, ci = pcsr.build(np.array([1, 2]), np.array([2, 1]), 4)
    st, en = pcsr.lookup(g, np.zeros(0, np.int64))
    assert st.size == 0 and en.size == 0


@pytest.mark.parametrize("theta", [0, 1, 17, 32, -3])
def test_bad_theta(theta):
    with pytest.raises(ValueError, match="theta"):
        pcsr.build(np.array([0]), np.array([1]), theta)


def test_self_loops_and_zero_vertex():
    adj = {0: [0, 3], 3: [0, 3], 7: [7]}
    src, dst = edges_of(adj)
    for theta in THETAS:
        g, ci = pcsr.build(src, dst, theta)
        check_structure(g, ci, adj, theta)
        check_lookup_all(g, ci, adj)


# ---------------------------------------------------------------------------
# Overflow chains: vertex sets built to collide on the hash
# ---------------------------------------------------------------------------


_HASHES = {}


def _hashes(n_groups, search):
    key = (n_groups, search)
    if key not in _HASHES:
        _HASHES[key] = pcsr.vertex_hash(np.arange(search, dtype=np.int64), n_groups)
    return _HASHES[key]


def colliding_ids(n_groups, target, k, exclude=(), search=1_000_000):
    """k ids in 0..search whose group among n_groups is ``target``."""
    h = _hashes(n_groups, search)
    hit = np.flatnonzero(h == target)
    hit = hit[~np.isin(hit, np.array(sorted(exclude), np.int64))]
    assert hit.size >= k
    return hit[:k].tolist()


def non_colliding_ids(n_groups, k, avoid_groups, exclude=(), search=1_000_000):
    """k ids hashing to k distinct groups, none of them in avoid_groups."""
    h = _hashes(n_groups, search)
    ok = ~np.isin(h, np.array(sorted(avoid_groups), np.int64))
    ok[np.array(sorted(exclude), np.int64)] = False
    ids = np.flatnonzero(ok)
    _, first = np.unique(h[ids], return_index=True)
    out = np.sort(ids[first])
    assert out.size >= k, "not enough ids"
    return out[:k].tolist()


def adj_for(verts, rng):
    return {int(v): sorted(int(x) for x in rng.choice(10**6, size=int(rng.integers(1, 6)), replace=False))
            for v in verts}


@pytest.mark.parametrize("theta", THETAS)
def test_overflow_chain_one_hot_group(theta):
    """30 of 40 vertices hash to group 0: group 0 overflows into a chain."""
    rng = np.random.default_rng(theta)
    n, hot = 40, 30
    coll = colliding_ids(n, 0, hot)
    rest = non_colliding_ids(n, n - hot, {0}, exclude=set(coll))
    adj = adj_for(coll + rest, rng)
    assert len(adj) == n
    src, dst = edges_of(adj)
    groups, ci = pcsr.build(src, dst, theta)
    cap = theta - 1
    check_structure(groups, ci, adj, theta)
    check_lookup_all(groups, ci, adj)
    chain = home_groups(groups)[0]
    want_extra = math.ceil((hot - cap) / cap) if hot > cap else 0
    assert len(chain) - 1 == want_extra
    if want_extra:
        assert groups[0, cap, 0] != -1
    # The colliding vertices all live on group 0's chain.
    where = {int(groups[g, s, 0]): g for g in range(n) for s in range(cap) if groups[g, s, 0] != -1}
    assert {where[v] for v in coll} == set(chain)


@pytest.mark.parametrize("theta", [2, 3, 4, 16])
def test_lookup_of_one_vertex_is_the_vectorized_lookup(theta):
    """A query of one vertex (probed as Python scalars) answers as the same vertex among others
    (the vectorized probe): present, absent (some on the overflow chain's group), negative and
    huge ids. 30 of 40 vertices hash to group 0, so that its chain is followed."""
    rng = np.random.default_rng(50 + theta)
    n, hot = 40, 30
    coll = colliding_ids(n, 0, hot + 5)
    adj = adj_for(coll[:hot] + non_colliding_ids(n, n - hot, {0}, exclude=set(coll)), rng)
    groups, ci = pcsr.build(*edges_of(adj), theta)
    assert len(home_groups(groups)[0]) > 1
    q = sorted(adj) + coll[hot:] + list(range(-3, 60)) + [2**31 - 1, 2**32, 2**40, 2**62, -(2**31), -(2**40)]
    q += [v + 2**32 for v in coll[:10]]
    st, en = pcsr.lookup(groups, np.array(q, np.int64))
    for k, v in enumerate(q):
        one = [np.array([v], np.int64)] + ([np.array([v], np.int32)] if -2**31 <= v < 2**31 else [])
        for arr in one:
            s1, e1 = pcsr.lookup(groups, arr)
            assert s1.shape == e1.shape == (1,) and s1.dtype == e1.dtype == np.int64
            assert (s1[0], e1[0]) == (st[k], en[k]), v
        assert ci[st[k]:en[k]].tolist() == adj.get(v, [])


@pytest.mark.parametrize("theta", THETAS)
def test_overflow_all_in_one_group(theta):
    """The worst case: every vertex hashes to one group (Claim 1 at its limit)."""
    rng = np.random.default_rng(100 + theta)
    n = 3 * theta + 5
    target = int(rng.integers(0, n))
    coll = colliding_ids(n, target, n)
    adj = adj_for(coll, rng)
    src, dst = edges_of(adj)
    groups, ci = pcsr.build(src, dst, theta)
    check_structure(groups, ci, adj, theta)
    check_lookup_all(groups, ci, adj)
    cap = theta - 1
    chain = home_groups(groups)[target]
    assert len(chain) - 1 == math.ceil((n - cap) / cap)
    assert (groups[:, cap, 0] != -1).sum() == len(chain) - 1
    # Absent ids that hash to the same hot group walk the whole chain and miss.
    absent = colliding_ids(n, target, 50, exclude=set(coll))
    st, en = pcsr.lookup(groups, np.array(absent))
    assert (st == 0).all() and (en == 0).all()


@pytest.mark.parametrize("theta", [2, 3, 4, 8, 16])
def test_overflow_several_hot_groups(theta):
    """Several groups overflow at once, each needing its own chain."""
    rng = np.random.default_rng(200 + theta)
    n = 200
    sizes = {3: 25, 17: 2 * theta + 1, 50: theta, 99: theta - 1, 100: 40}
    verts, taken = [], set()
    for g, k in sizes.items():
        ids = colliding_ids(n, g, k, exclude=taken)
        verts += ids
        taken |= set(ids)
    verts += non_colliding_ids(n, n - len(verts), set(sizes), exclude=taken)
    adj = adj_for(verts, rng)
    assert len(adj) == n
    src, dst = edges_of(adj)
    groups, ci = pcsr.build(src, dst, theta)
    check_structure(groups, ci, adj, theta)
    check_lookup_all(groups, ci, adj)
    cap = theta - 1
    chains = home_groups(groups)
    for g, k in sizes.items():
        assert len(chains[g]) - 1 == (math.ceil((k - cap) / cap) if k > cap else 0), (g, k)
    assert (groups[:, cap, 0] != -1).any()


@pytest.mark.parametrize("theta", [2, 3, 5, 16])
def test_random_segments_exercise_chains(theta):
    """Random sparse ids: chains occur naturally for small Θ, and lookups work."""
    rng = np.random.default_rng(300 + theta)
    src, dst, adj = random_segment(rng, 2000, 3, 2**31 - 1)
    groups, ci = pcsr.build(src, dst, theta)
    check_structure(groups, ci, adj, theta)
    check_lookup_all(groups, ci, adj)
    if theta <= 3:
        assert (groups[:, theta - 1, 0] != -1).any()


# ---------------------------------------------------------------------------
# Claim 1
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("theta", THETAS)
def test_claim1_arithmetic(theta):
    """A group of c >= Θ vertices needs ceil((c-Θ+1)/(Θ-1)) <= c-1 extra groups,
    so with Δ = |V(D)| groups the empty ones always suffice."""
    for c in range(theta, 400):
        need = math.ceil((c - theta + 1) / (theta - 1))
        assert need <= c - 1
    rng = np.random.default_rng(theta)
    for _ in range(200):
        n = int(rng.integers(1, 300))
        h = rng.integers(0, n, size=n)             # any hashing of n vertices into n groups
        c = np.bincount(h, minlength=n)
        empty = int((c == 0).sum())
        assert empty == int((c[c > 0] - 1).sum())
        need = sum(math.ceil((x - theta + 1) / (theta - 1)) for x in c if x >= theta)
        assert need <= empty


@pytest.mark.parametrize("theta", THETAS)
def test_claim1_build_never_runs_out(theta):
    """Random skewed hashings (few hot groups) never exhaust the empty groups, and
    the number of groups used equals home groups + Σ chain lengths."""
    rng = np.random.default_rng(400 + theta)
    for trial in range(6):
        n = int(rng.integers(theta, 5 * theta + 20))
        n_hot = int(rng.integers(1, 4))
        hot = rng.choice(n, size=n_hot, replace=False).tolist()
        split = np.sort(rng.choice(np.arange(1, n), size=n_hot - 1, replace=False)).tolist() if n_hot > 1 else []
        parts = np.diff([0] + split + [n]).tolist()
        verts, taken = [], set()
        for g, k in zip(hot, parts):
            ids = colliding_ids(n, g, k, exclude=taken)
            verts += ids
            taken |= set(ids)
        adj = adj_for(verts, rng)
        src, dst = edges_of(adj)
        groups, ci = pcsr.build(src, dst, theta)
        check_structure(groups, ci, adj, theta)
        check_lookup_all(groups, ci, adj)
        cap = theta - 1
        used_groups = int((groups[:, :cap, 0] != -1).any(axis=1).sum())
        expect = sum(1 + (math.ceil((k - cap) / cap) if k > cap else 0) for k in parts)
        assert used_groups == expect <= n


# ---------------------------------------------------------------------------
# ragged_indices
# ---------------------------------------------------------------------------


def ragged_reference(starts, counts):
    out = []
    for s, c in zip(starts, counts):
        out.extend(range(s, s + c))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_ragged_indices_random(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 60))
    starts = rng.integers(0, 10**6, size=k)
    counts = rng.integers(0, 8, size=k) * (rng.random(k) < 0.7)
    got = pcsr.ragged_indices(starts, counts)
    assert got.dtype in (np.int32, np.int64)
    assert got.tolist() == ragged_reference(starts.tolist(), counts.tolist())


def test_ragged_indices_past_int32():
    """Indices that do not fit int32 come back as int64, exact."""
    starts = np.array([2**31 - 3, 5, 2**40], dtype=np.int64)
    counts = np.array([6, 2, 3], dtype=np.int64)
    got = pcsr.ragged_indices(starts, counts)
    assert got.dtype == np.int64
    assert got.tolist() == ragged_reference(starts.tolist(), counts.tolist())


@pytest.mark.parametrize("start, count", [(0, 0), (5, 0), (0, 1), (100, 3), (2**31 - 2, 1), (2**31 - 2, 3),
                                          (2**40, 2)])
def test_ragged_indices_of_one_row_as_of_several(start, count):
    """One row (a single arange) gives the indices and the dtype of the same row among others."""
    got = pcsr.ragged_indices(np.array([start]), np.array([count]))
    want = pcsr.ragged_indices(np.array([start, 0]), np.array([count, 0]))
    assert got.dtype == want.dtype
    assert got.tolist() == want.tolist() == list(range(start, start + count))


@pytest.mark.parametrize("starts, counts", [
    ([], []),
    ([5], [0]),
    ([5], [3]),
    ([0, 0, 0], [0, 0, 0]),
    ([3, 10, 2], [0, 0, 4]),          # leading empty rows
    ([3, 10, 2], [2, 0, 0]),          # trailing empty rows
    ([9, 1, 1, 7], [2, 3, 0, 1]),     # going backwards
    ([4, 4, 4], [2, 2, 2]),           # overlapping ranges
    ([0], [1]),
    ([2**40], [3]),                   # beyond int32
])
def test_ragged_indices_edge_cases(starts, counts):
    got = pcsr.ragged_indices(np.array(starts, np.int64), np.array(counts, np.int64))
    assert got.tolist() == ragged_reference(starts, counts)


def test_ragged_indices_int32_inputs():
    starts = np.array([100, 5, 70], np.int32)
    counts = np.array([3, 0, 2], np.int32)
    assert pcsr.ragged_indices(starts, counts).tolist() == [100, 101, 102, 70, 71]


def test_partition_imports_nothing_above_it():
    """sgsi.partition sits below the join and the front ends: none of its modules imports them."""
    allowed = {"sgsi.partition", "sgsi.errors", "sgsi.budget"}
    for path in glob.glob(os.path.join(os.path.dirname(pcsr.__file__), "*.py")):
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = "sgsi.partition".rsplit(".", node.level - 1)[0] if node.level > 1 else "sgsi.partition"
                names = [f"{base}.{node.module}" if node.module else base]
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            else:
                continue
            for name in names:
                if name.startswith("sgsi"):
                    assert any(name == a or name.startswith(a + ".") for a in allowed), (path, name)


# ---------------------------------------------------------------------------
# vertex_hash
# ---------------------------------------------------------------------------


def test_vertex_hash_formula():
    v = np.array([0, 1, 2, 12345, 2**31 - 1], np.int64)
    for n in (1, 7, 1000, 2**20):
        want = [((x * 2654435761) % 2**32) % n for x in v.tolist()]
        assert pcsr.vertex_hash(v, n).tolist() == want


@pytest.mark.parametrize("theta", [2, 4, 8])
def test_slots_are_the_pairs_that_hold_the_vertices(theta):
    """pcsr.slots finds each vertex's pair by its hash (overflow chains too): the pairs whose
    vertex an isin over the whole segment would pick, absent and negative ids left out."""
    rng = np.random.default_rng(theta)
    src = np.sort(np.concatenate([rng.integers(0, 300, 2000), np.full(50, 7)]))
    groups, _ci = pcsr.build(src, rng.integers(0, 300, src.size), theta)
    v = np.unique(np.concatenate([rng.integers(-1, 400, 120), [7]]))
    pairs = groups.reshape(-1, 2)
    want = np.flatnonzero(np.isin(pairs[:, 0], v[v >= 0]) & (np.arange(len(pairs)) % theta != theta - 1))
    got = pcsr.slots(groups, v)
    assert want.size > 50 and sorted(got.tolist()) == want.tolist()
