"""Settings of the whole suite: how many pytest-xdist workers ``-n auto`` (pyproject.toml) starts."""

import importlib.util
import os

import pytest


def _gpu_tests_run_here():
    """An NVIDIA driver is loaded and CuPy is installed: the GPU tests run here, on one device."""
    driver = os.path.exists("/proc/driver/nvidia/gpus") or os.path.exists("/dev/nvidiactl")
    return driver and importlib.util.find_spec("cupy") is not None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """One worker per CPU core this process may use (xdist's own count takes physical cores,
    1 on a CI runner of 2 hyperthreads), and none (the tests in this process, one at a time)
    where the GPU tests run: they are not written to share the device. The variable
    PYTEST_XDIST_AUTO_NUM_WORKERS, where set, decides instead (as pytest-xdist documents)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    if _gpu_tests_run_here():
        return 0
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                  # not Linux
        return os.cpu_count() or 1


def pytest_collection_finish(session):
    """The objects of collection (modules, parameters) move out of the collector's reach: a
    failed query's ``gc.collect`` (the backends' ``end``) then walks the query's objects, not the
    suite's (each took 30-40 ms in a test process)."""
    import gc
    gc.freeze()
