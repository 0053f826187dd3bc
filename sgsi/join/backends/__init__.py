"""The backends: where every array step of the engine runs (:class:`~.base.Backend`).

``cpu``: NumPy (:mod:`.cpu`). ``gpu``: CuPy and CUDA kernels (:mod:`.gpu`), imported only when a
GPU backend is asked for, so CPU users never need CuPy.
"""

from __future__ import annotations

from ...errors import SgsiError
from .cpu import CpuBackend


def gpu_available() -> bool:
    """True where CuPy imports and sees a CUDA device."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - any failure means no usable GPU
        return False


def search_gate(device: str) -> tuple[int, int]:
    """``reorder_work`` and ``search_work`` of the ``cpu`` or ``gpu`` backend (without CuPy)."""
    if device == "gpu":
        from .gpu import REORDER_WORK, SEARCH_WORK
        return REORDER_WORK, SEARCH_WORK
    return CpuBackend.reorder_work, CpuBackend.search_work


def get_backend(device: str = "auto", memory_budget: int | None = None):
    """The backend for ``device``: ``cpu``, ``gpu`` or ``auto`` (GPU where present)."""
    if device not in ("cpu", "gpu", "auto"):
        raise SgsiError(f"unknown device {device!r}: use cpu, gpu or auto")
    if device == "auto":
        device = "gpu" if gpu_available() else "cpu"
    if device == "cpu":
        return CpuBackend(memory_budget)
    if not gpu_available():
        raise SgsiError("device 'gpu' asked for, but no CUDA GPU with CuPy is available "
                        "(install sgsi[gpu], or use --device cpu)")
    from .gpu.backend import GpuBackend
    return GpuBackend(memory_budget)
