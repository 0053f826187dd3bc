"""A count's equal rows merged with weights (sgsi/join/merge.py): the merge against a
Counter on both backends, the int64 guards, and counts with merging forced against the oracle."""

import random
from collections import Counter

import numpy as np
import pytest

from sgsi.join import merge
from sgsi.join.backends import gpu_available
from sgsi.join.backends.cpu import CpuBackend

from test_engine import CPU, DEVICES, cases  # noqa: F401  (fixture)

_NO_GPU = pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU with CuPy on this machine")


@pytest.fixture(scope="module", params=["cpu", pytest.param("gpu", marks=[pytest.mark.gpu, _NO_GPU])])
def backend(request):
    if request.param == "cpu":
        return CpuBackend()
    from sgsi.join.backends.gpu.backend import GpuBackend
    return GpuBackend()


def _rows(backend, chunk):
    """Counter of (row -> weight) of a chunk (weight 1 where it has none)."""
    names = sorted(u for u in chunk if u != merge.WEIGHT)
    cols = [backend.to_host(chunk[u]).tolist() for u in names]
    w = backend.to_host(chunk[merge.WEIGHT]).tolist() if merge.WEIGHT in chunk else [1] * len(cols[0])
    out = Counter()
    for row, x in zip(zip(*cols), w):
        out[row] += x
    return out


@pytest.mark.parametrize("spans", [[3, 5], [3000] * 7, [2 ** 30, 2 ** 31 - 1, 5, 2 ** 29]],
                         ids=["one-word", "two-words", "wide"])
@pytest.mark.parametrize("weighted", [False, True])
def test_merged_sums_the_weights_of_equal_rows(backend, spans, weighted):
    """Each distinct row once, its weight the sum of its copies' (packed in one word, in two
    folded by rank, and from ids near int32's top)."""
    rng = np.random.default_rng(len(spans) + weighted)
    n = 5000
    base = rng.integers(0, [min(s, 40) for s in spans], size=(n // 4, len(spans)))
    rows = base[rng.integers(0, base.shape[0], n)] + np.array([s - min(s, 40) for s in spans])
    keys = [3, 0, 7, 5, 8, 9, 10][:len(spans)]                  # pattern vertices, in no order
    chunk = {u: backend.to_device(rows[:, i].astype(np.int32)) for i, u in enumerate(keys)}
    if weighted:
        chunk[merge.WEIGHT] = backend.to_device(rng.integers(1, 1 << 40, n).astype(np.int64))
    got = merge.merged(backend, chunk)
    assert got is not None and set(got) == set(chunk) | {merge.WEIGHT}
    m = int(got[merge.WEIGHT].size)
    assert m < n and _rows(backend, got) == _rows(backend, chunk)
    assert len(_rows(backend, got)) == m                   # each row once


def test_merged_declines_weights_that_could_pass_int64(backend):
    chunk = {0: backend.to_device(np.zeros(8, np.int32)),
             merge.WEIGHT: backend.to_device(np.full(8, 1 << 59, np.int64))}
    assert merge.merged(backend, chunk) is None
    chunk[merge.WEIGHT] = backend.to_device(np.full(8, 1 << 58, np.int64))
    assert backend.to_host(merge.merged(backend, chunk)[merge.WEIGHT]).tolist() == [1 << 61]


def test_weighted_sums_past_int64(backend):
    counts = backend.to_device(np.array([1 << 40, 3, 1 << 40], np.int64))
    w = backend.to_device(np.array([1 << 30, 5, 1 << 33], np.int64))
    assert merge.weighted_sum(backend, counts, w) == (1 << 70) + 15 + (1 << 73)
    assert merge.weighted_sum(backend, counts, None) == (1 << 41) + 3
    chunk = {0: counts, merge.WEIGHT: backend.to_device(np.array([1 << 61, 1 << 61, 2], np.int64))}
    assert merge.rows_counted(backend, chunk) == (1 << 62) + 2


def _rings(seed, n):
    """Cycles of 5-7 vertices (random labels, some none, random edge labels and directions),
    some with a chord or a pendant leaf: long cores whose early columns are dropped."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(5, 7)
        names = [f"v{i}" + rng.choice(["", ":0", ":1", ":2"]) for i in range(k)]
        edge = lambda: rng.choice(["-[]-", "-[]->", "<-[]-", "-[:E0]-", "-[:E1]->"])      # noqa: E731
        parts = [f"({names[i]}){edge()}(v{(i + 1) % k})" for i in range(k)]
        if rng.random() < 0.4:
            parts.append(f"(v0){edge()}(v{k // 2})")
        if rng.random() < 0.4:
            parts.append(f"(v{k - 1}){edge()}(x{rng.choice(['', ':1'])})")
        out.append(", ".join(parts))
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("budget", [None, "16KB"], ids=["default", "16KB"])
@pytest.mark.parametrize("injective", [True, False], ids=["iso", "hom"])
def test_counts_with_rows_merged_vs_oracle(cases, budget, injective, device, monkeypatch):
    """Rings counted with every step that drops a column merging its rows (none judged not
    worth it) give the oracle's counts, and rows are merged (weights past one)."""
    from sgsi.join import query
    monkeypatch.setattr(CpuBackend, "merge_gain", 1.0)
    if device != CPU:
        from sgsi.join.backends.gpu.backend import GpuBackend
        monkeypatch.setattr(GpuBackend, "merge_gain", 1.0)
    monkeypatch.setattr(query, "REORDER", False)
    case = cases["int"]
    g = case.graphs[budget]
    merged = nonzero = 0
    for p in _rings(61 + injective, 16):
        want = case.count(p, injective)
        assert g.count(p, device=device, memory_budget=budget, homomorphism=not injective) == want, p
        merged += g.last_stats["rows_merged"] > 0
        nonzero += want > 0
    assert merged >= 2 and nonzero >= 8


def test_counts_with_rows_merged_at_each_level(cases, monkeypatch):
    """Merging judged per level: a level whose probe merged nothing stops merging, and the
    counts stay the oracle's either way (the default gain, a probe of 8 rows)."""
    from sgsi.join import query
    monkeypatch.setattr(merge, "MERGE_PROBE_ROWS", 8)
    monkeypatch.setattr(merge, "MERGE_RETRY", 3)
    monkeypatch.setattr(query, "REORDER", False)
    case = cases["hub"]
    g = case.graphs["16KB"]
    for p in _rings(63, 10):
        assert g.count(p, device=CPU, memory_budget="16KB", homomorphism=True) == case.count(p, False), p


@pytest.mark.parametrize("growth", [False, True])
def test_a_probe_grows_its_distinct_rows_to_its_slices(backend, growth, monkeypatch):
    """Rows drawn at random from half as many values: the first 2^16 hold 1.27x as many rows as
    distinct ones (under the CPU's gain of 1.5), the whole 2^18 2.3x. Judged by the probe's own
    count the slice keeps its rows; grown at the rate the probe's distinct rows grew (about 1.6x),
    it is merged, its weights the rows' counts."""
    monkeypatch.setattr(type(backend), "merge_gain", 1.5)
    monkeypatch.setattr(type(backend), "merge_probe_growth", growth)
    n = 1 << 18
    values = np.random.default_rng(3).integers(0, n // 2, n).astype(np.int32)
    out = {0: backend.to_device(values), 1: backend.to_device(values // 7)}
    got, cut = merge.Merges(backend).slice(out, 3)
    want = Counter(zip(values.tolist(), (values // 7).tolist()))
    assert cut == (n - len(want) if growth else 0)
    assert _rows(backend, got) == want
