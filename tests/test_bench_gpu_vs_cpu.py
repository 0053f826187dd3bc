"""bench/gpu_vs_cpu.py runs end to end without a GPU (its hidden --gpu-device cpu: both sides count on
the CPU), keeping the best of --runs runs per setting."""

import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import gpu_vs_cpu  # noqa: E402


def test_gpu_vs_cpu_bench_counts_alike_and_keeps_the_best_run(tmp_path, monkeypatch):
    import _common
    calls = []
    real = _common.CountWorker.count

    def count(self, pattern, timeout=None, **kw):
        calls.append((pattern, kw.get("device"), (kw.get("env") or {}).get("SGSI_LOAD_BALANCE")))
        return real(self, pattern, timeout, **kw)

    monkeypatch.setattr(_common.CountWorker, "count", count)
    gpu_vs_cpu.main(["--edges", "3e4", "--sizes", "3", "--queries", "2", "--runs", "3", "--gpu-device", "cpu",
                     "--warm", "0", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out")])
    with open(tmp_path / "out" / "gpu_vs_cpu.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    for r in rows:
        assert int(r["matches"]) > 0 and float(r["gpu_s"]) > 0 and float(r["cpu_s"]) > 0
        assert float(r["gpu_median_s"]) >= float(r["gpu_s"]) and float(r["cpu_median_s"]) >= float(r["cpu_s"])
        # one untimed count, three timed runs balanced, three warp-only, then one untimed and three
        # timed on the CPU
        mine = [c for c in calls if c[0] == r["pattern"]]
        assert [c[2] for c in mine] == ["1"] * 4 + ["0"] * 3 + [None] * 4
    text = (tmp_path / "out" / "gpu_vs_cpu.md").read_text()
    assert "each time is the best of 3 runs" in text and "--runs 3" in text and "--warm 0" in text
    assert "The same from the medians of the 3 runs" in text


class _Worker:
    """Counts taking ``seconds`` each; None (stopped) from count number ``stop_at`` on."""

    def __init__(self, seconds, stop_at=None):
        self.seconds, self.stop_at, self.calls = seconds, stop_at, 0

    def count(self, pattern, timeout=None, **kw):
        self.calls += 1
        if self.stop_at is not None and self.calls >= self.stop_at:
            return None
        return (7, self.seconds, {})


def test_warm_up_counts_until_its_seconds_have_passed():
    w = _Worker(0.1)
    assert gpu_vs_cpu._warm(w, "(a)-->(b)", 0.35) and w.calls == 4
    w = _Worker(2.0)
    assert gpu_vs_cpu._warm(w, "(a)-->(b)", 0.35) and w.calls == 1      # at least one, however long
    w = _Worker(0.1, stop_at=2)
    assert not gpu_vs_cpu._warm(w, "(a)-->(b)", 0.35) and w.calls == 2   # a stopped count stops it


def test_gpu_vs_cpu_pins_both_workers_to_the_cores_given(tmp_path, monkeypatch):
    """--cores: both workers run on those CPU cores only, and the record says so."""
    import os

    import _common
    pids = []
    real = _common.CountWorker.count

    def count(self, pattern, timeout=None, **kw):
        got = real(self, pattern, timeout, **kw)
        pids.append(os.sched_getaffinity(self.proc.pid))
        return got

    monkeypatch.setattr(_common.CountWorker, "count", count)
    core = min(os.sched_getaffinity(0))
    gpu_vs_cpu.main(["--edges", "3e4", "--sizes", "3", "--queries", "1", "--gpu-device", "cpu", "--warm", "0",
                     "--cores", str(core), "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out")])
    assert pids and all(p == {core} for p in pids)
    text = (tmp_path / "out" / "gpu_vs_cpu.md").read_text()
    assert f"--cores {core}" in text and f"both workers on CPU cores [{core}]" in text
