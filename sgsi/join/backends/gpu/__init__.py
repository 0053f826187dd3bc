"""The GPU backend on CuPy (:class:`.backend.GpuBackend`), its modules split by purpose and its
CUDA kernels in ``cuda/*.cu``. This package's ``__init__`` imports nothing: CuPy is imported by
its modules, and only where a GPU backend is asked for."""
