"""bench/gpu_vs_cpu.py runs end to end without a GPU (its hidden --gpu-device cpu: both sides count on
the CPU), keeping the best of --runs runs per setting."""

import csv
import os
import subprocess
import sys
from pathlib import Path

GPU_VS_CPU = Path(__file__).resolve().parents[1] / "bench" / "gpu_vs_cpu.py"


def test_gpu_vs_cpu_bench_counts_alike_and_keeps_the_best_run(tmp_path):
    subprocess.run([sys.executable, str(GPU_VS_CPU), "--edges", "3e4", "--sizes", "3", "--queries", "2", "--runs", "3",
                    "--gpu-device", "cpu", "--warm", "0", "--data", str(tmp_path / "data"),
                    "--out", str(tmp_path / "out")], check=True)
    with open(tmp_path / "out" / "gpu_vs_cpu.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    for r in rows:
        assert int(r["matches"]) > 0 and float(r["gpu_s"]) > 0 and float(r["cpu_s"]) > 0
        assert float(r["gpu_median_s"]) >= float(r["gpu_s"]) and float(r["cpu_median_s"]) >= float(r["cpu_s"])
    text = (tmp_path / "out" / "gpu_vs_cpu.md").read_text()
    assert "each time is the best of 3 runs" in text and "--runs 3" in text and "--warm 0" in text
    assert "The same from the medians of the 3 runs" in text


def test_gpu_vs_cpu_pins_both_workers_to_the_cores_given(tmp_path):
    """--cores: both workers run on those CPU cores only, and the record says so (with --warm: each
    query counted untimed first for that long)."""
    core = min(os.sched_getaffinity(0))
    subprocess.run([sys.executable, str(GPU_VS_CPU), "--edges", "3e4", "--sizes", "3", "--queries", "1",
                    "--gpu-device", "cpu", "--warm", "0.1", "--cores", str(core), "--data", str(tmp_path / "data"),
                    "--out", str(tmp_path / "out")], check=True)
    text = (tmp_path / "out" / "gpu_vs_cpu.md").read_text()
    assert f"--cores {core}" in text and f"both workers on CPU cores [{core}]" in text
    assert "--warm 0.1" in text
