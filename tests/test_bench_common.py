"""bench/_common.py: the kernel warm-up of the benchmark workers."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import _common  # noqa: E402


def test_warm_up_counts_the_fewest_matches_of_each_yeast_family():
    """One query per family (the one with the fewest matches), each counted exactly at two
    budgets (warm_up_kernels raises on a wrong count)."""
    picked = _common.warm_up_kernels("cpu", per_family=1)
    families = [name.rsplit("_", 1)[0] for name in picked]
    assert len(families) == len(set(families)) == 9
    assert "query_dense_4" in families and "query_sparse_32" in families
