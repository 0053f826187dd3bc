"""The GPU backend on CuPy (:class:`.backend.GpuBackend`), its modules split by purpose and its
CUDA kernels in ``cuda/*.cu``. This package's ``__init__`` imports nothing: CuPy is imported by
its modules, and only where a GPU backend is asked for; the constants below are read without it
(a sharded query's driver gates its order search by its GPU tasks' backend)."""

#: Join work (entries and rows) a query's refined plan does before its order is sampled
#: (:mod:`~sgsi.join.ordering`, on the CPU): about an eighth of a second of an H100's.
REORDER_WORK = 1 << 28
#: Join work a 32-vertex order search costs about (0.2-0.3 s on the host of an H100; no
#: search where under twice it is left).
SEARCH_WORK = 1 << 29
