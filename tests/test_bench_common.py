"""bench/_common.py: the kernel warm-up of the benchmark workers, run through bench/hprd_suite.py."""

import subprocess
import sys
from pathlib import Path

import pytest

from sgsi.join.backends import gpu_available

SUITE = Path(__file__).resolve().parents[1] / "bench" / "hprd_suite.py"


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU with CuPy on this machine")
def test_warm_up_counts_the_fewest_matches_of_each_yeast_family(tmp_path):
    """A GPU worker first counts the queries with the fewest matches of each yeast family, exactly, at
    two budgets (warm_up_kernels raises on a wrong count: the worker exits and the suite fails)."""
    got = subprocess.run([sys.executable, str(SUITE), "--set", "yeast", "--device", "gpu", "--limit", "1",
                          "--runs", "1", "--data", str(tmp_path / "data"), "--results", str(tmp_path / "out")],
                         capture_output=True, text=True)
    assert got.returncode == 0, got.stderr[-2000:]
    assert (tmp_path / "out" / "yeast_gpu_suite.md").exists()


def test_warm_up_merge_keeps_every_row_on_the_cpu():
    """The merge's warm-up (one and several key words, then weighted) runs on the CPU's NumPy
    reference too, and its merged rows still stand for all 4,096 (it asserts so)."""
    sys.path.insert(0, str(SUITE.parent))
    import _common
    from sgsi.join.backends.cpu import CpuBackend
    _common.warm_up_merge(CpuBackend())
