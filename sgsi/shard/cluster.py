"""The Dask cluster of a sharded query: one the caller gives, one at an address, or a local one.

A local cluster is started for the query and closed when it ends: on the CPU,
``workers`` single-threaded processes; on the GPU, one worker per GPU with
dask-cuda's LocalCUDACluster. Its workers get no Dask memory limit: sgsi
bounds its own memory (the budget), and a memory-mapped store's pages, which
count in a process's RSS, would make Dask's nanny pause or kill a worker.
"""

from __future__ import annotations

import contextlib
import logging

from ..errors import SgsiError

#: Seconds to wait for a scheduler given by address.
CONNECT_TIMEOUT = 10


def need_dask():
    """The ``distributed`` module, or an SgsiError saying how to install it."""
    try:
        import distributed
    except ImportError:
        raise SgsiError("--workers and --scheduler need Dask (dask and distributed): "
                        "pip install 'sgsi[dask]'") from None
    return distributed


def check_device(device):
    """An SgsiError for a device other than cpu, gpu and auto."""
    if device not in ("cpu", "gpu", "auto"):
        raise SgsiError(f"unknown device {device!r}: use cpu, gpu or auto")


def gpu_wanted(device) -> bool:
    """Whether a local cluster for ``device`` is one of GPUs (``auto``: where this host has one)."""
    check_device(device)
    if device == "cpu":
        return False
    from ..join.backends import gpu_available      # CuPy and a driver: none on a CPU host
    if not gpu_available() and device == "gpu":
        raise SgsiError("device 'gpu' asked for, but no CUDA GPU with CuPy is available "
                        "(install sgsi[gpu], or use --device cpu)")
    return gpu_available()


@contextlib.contextmanager
def connect(workers=None, scheduler=None, client=None, device="auto"):
    """``with connect(...) as client:`` ``client``, a Client of ``scheduler`` (an address), or one
    of a local cluster of ``workers`` workers; what was started here is closed at the end."""
    distributed = need_dask()
    if client is not None:
        if not isinstance(client, distributed.Client):
            raise SgsiError(f"client must be a dask.distributed.Client, not {type(client).__name__}")
        yield client
        return
    with contextlib.ExitStack() as stack:
        if scheduler is not None:
            try:
                c = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT, set_as_default=False)
            except (OSError, ValueError, TypeError) as e:
                raise SgsiError(f"cannot reach the Dask scheduler at {scheduler}: {e}") from None
        else:
            try:
                cluster = stack.enter_context(_local_cluster(workers, gpu_wanted(device)))
            except (RuntimeError, OSError, TimeoutError) as e:
                raise SgsiError(f"the local Dask cluster of {workers} workers did not start: {e} (its workers "
                                f"are new Python processes, which run a script's main module again: a script "
                                f"must start queries under `if __name__ == \"__main__\":`)") from None
            c = distributed.Client(cluster, set_as_default=False)
        stack.callback(c.close)
        yield c


def _local_cluster(workers, gpu):
    import dask
    # No dashboard; the scheduler's HTTP server (health checks) on a free port, not 8787; no
    # statistical profiler in the workers (it samples the task's stack every 10 ms, GIL held).
    quiet = {"dashboard_address": None, "scheduler_kwargs": {"dashboard_address": ":0"},
             "silence_logs": logging.CRITICAL, "memory_limit": 0}
    with dask.config.set({"distributed.worker.profile.enabled": False}):
        if gpu:
            try:
                from dask_cuda import LocalCUDACluster
            except ImportError:
                raise SgsiError("--workers on the GPU needs dask-cuda (one worker per GPU): "
                                "pip install 'sgsi[dask-gpu]', or use --device cpu") from None
            return LocalCUDACluster(n_workers=workers, threads_per_worker=1, **quiet)
        from distributed import LocalCluster
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, **quiet)


def slots(client) -> int:
    """Tasks the cluster runs at once (its workers' threads; at least 1)."""
    return max(1, sum(client.nthreads().values()))
