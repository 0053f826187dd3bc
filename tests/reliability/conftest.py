"""Fixtures of the reliability suite: stores built once per session.

Every random input comes from a fixed seed, so a failure reproduces.
"""

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))      # tests/: the oracle
sys.path.insert(0, str(HERE))             # reliability_helpers

import reliability_helpers as rh  # noqa: E402


@pytest.fixture(scope="session")
def social(tmp_path_factory):
    """A small random labeled graph with string ids, built at a 16KB budget (many segments)."""
    d = tmp_path_factory.mktemp("social")
    g = rh.social_graph(d)
    return g


@pytest.fixture(scope="session")
def dense(tmp_path_factory):
    """A dense random graph on which long paths have astronomically many matches."""
    d = tmp_path_factory.mktemp("dense")
    return rh.dense_graph(d)


@pytest.fixture
def scratch_root(tmp_path, monkeypatch):
    """A private temporary directory for DuckDB match() scratch files, to see what is left there."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setenv("TMPDIR", str(root))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "test_needs_engine_" in item.name:
            item.add_marker(pytest.mark.needs_engine)


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_engine: fails until a change in the engine or ingest lands "
                                       "(see the test's docstring)")
    os.environ.setdefault("SGSI_TEST_SEED", "20240607")
