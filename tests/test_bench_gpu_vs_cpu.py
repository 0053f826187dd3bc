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
                     "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out")])
    with open(tmp_path / "out" / "gpu_vs_cpu.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    for r in rows:
        assert int(r["matches"]) > 0 and float(r["gpu_s"]) > 0 and float(r["cpu_s"]) > 0
        assert float(r["gpu_median_s"]) >= float(r["gpu_s"]) and float(r["cpu_median_s"]) >= float(r["cpu_s"])
        # one untimed count, then three timed runs balanced, three warp-only and three on the CPU
        mine = [c for c in calls if c[0] == r["pattern"]]
        assert [c[2] for c in mine] == ["1"] * 4 + ["0"] * 3 + [None] * 3
    text = (tmp_path / "out" / "gpu_vs_cpu.md").read_text()
    assert "each time is the best of 3 runs" in text and "--runs 3" in text
    assert "The same from the medians of the 3 runs" in text
