"""Loading and launching the CUDA kernels of ``cuda/*.cu``.

Each source file holds the kernels of one stage (``primitives``, ``filter``, ``join``,
``expand``, ``calibration``) and is compiled by CuPy as one ``RawModule`` on first use, with
``cuda/common.cuh`` put in place of its ``#include`` line. The launchers of a stage sit in the
Python module of the same name beside this one. Every kernel has a vectorized array version
that is its reference (the ``reference`` named in its comment); the conformance tests compare
the two on random inputs. Importing this module needs no GPU.
"""

from __future__ import annotations

import os
import threading

import numpy as np

#: The kernels' sources, and the header each includes.
CUDA_DIR = os.path.join(os.path.dirname(__file__), "cuda")
HEADER = "common.cuh"
#: Compile options of every source.
OPTIONS = ("--std=c++14",)
#: Threads of a block, where a launcher does not say otherwise.
BLOCK = 256


def grid(n_threads):
    """The blocks of ``BLOCK`` threads covering ``n_threads`` (at least one), as a grid."""
    return (max(1, (int(n_threads) + BLOCK - 1) // BLOCK),)


def source(stage):
    """The text of ``cuda/<stage>.cu`` with the header's text in place of its ``#include`` line (so
    that CuPy's kernel cache, keyed by the source, sees a change of the header)."""
    with open(os.path.join(CUDA_DIR, HEADER)) as f:
        header = f.read()
    with open(os.path.join(CUDA_DIR, stage + ".cu")) as f:
        text = f.read()
    return text.replace(f'#include "{HEADER}"\n', header, 1)


_modules = {}


def module(stage):
    """The compiled RawModule of ``cuda/<stage>.cu`` (compiled once, on first use)."""
    global _cupy, _ndarray, _driver
    mod = _modules.get(stage)
    if mod is None:
        import cupy
        from cupy_backends.cuda.api import driver
        _cupy, _ndarray, _driver = cupy, cupy.ndarray, driver
        mod = _modules[stage] = cupy.RawModule(code=source(stage), options=OPTIONS)
    return mod


class Kernels:
    """The kernels of one stage's source, by name: ``Kernels("join")("pcsr_lookup")`` is a
    :class:`Launch` (looked up in the module once)."""

    def __init__(self, stage):
        self.stage = stage
        self._functions = {}

    def __call__(self, name):
        fn = self._functions.get(name)
        if fn is None:
            fn = self._functions[name] = Launch(module(self.stage).get_function(name))
        return fn


#: Parameter slots of a thread's (8 bytes each, :class:`Launch`): the most arguments a launch takes.
_SLOTS = 64

_U64 = (1 << 64) - 1


class Launch:
    """A kernel of the module, called as CuPy calls a ``RawKernel``: ``launch(grid, block, args,
    shared_mem=0)`` on the current stream, through ``cuLaunchKernel`` itself: each argument goes
    into an 8-byte slot of a buffer of the thread's (an array's device address, an integer's value)
    and the driver takes the slots' addresses, where CuPy made a Python object of each argument and
    converted it. 16 arguments, the integers given as Python ints, cost the host 5.8 us, against 9.4
    through CuPy with NumPy scalars (one H100 host, probe launch_probe, in git history), and a light count
    is some 50 to 150 launches that the host issues while the device waits.

    Every parameter of the module's kernels is a pointer or an integer (tests/test_kernels_source.py
    checks the source): the driver copies each parameter's size from the start of its slot, the
    low bytes of the little-endian value, so an ``int`` parameter reads the value the slot holds.
    Arguments may be CuPy arrays (their address, as CuPy passes them), Python ints (the fast case)
    and bools, and NumPy integer scalars."""

    __slots__ = ("raw", "_ptrs")

    def __init__(self, raw):
        self.raw = raw                      # the cupy RawKernel (compiled per device when first asked)
        self._ptrs = {}                     # device id -> CUfunction

    def __call__(self, grid, block, args, shared_mem=0):
        if len(args) > _SLOTS:
            raise ValueError(f"a launch of {len(args)} arguments: Launch takes at most {_SLOTS}")
        cp = _cupy
        dev = cp.cuda.runtime.getDevice()
        fn = self._ptrs.get(dev)
        if fn is None:
            fn = self._ptrs[dev] = int(self.raw.kernel.ptr)
        values = [a if type(a) is int else a.data.ptr if type(a) is _ndarray else int(a) for a in args]
        slots, unsigned, params = _params()
        try:
            slots[:len(values)] = values
        except OverflowError:               # an unsigned 64-bit value past the int64 range
            unsigned[:len(values)] = [v & _U64 for v in values]
        g, b = len(grid), len(block)
        _driver.launchKernel(fn, grid[0], grid[1] if g > 1 else 1, grid[2] if g > 2 else 1,
                             block[0], block[1] if b > 1 else 1, block[2] if b > 2 else 1,
                             shared_mem, cp.cuda.get_current_stream().ptr, params, 0)


_cupy = _ndarray = _driver = None
_slots = threading.local()


def _params():
    """This thread's parameter slots (int64, and the same memory as uint64) and the address of the
    array of pointers to them (``kernelParams``)."""
    got = getattr(_slots, "got", None)
    if got is None:
        slots = np.zeros(_SLOTS, np.int64)
        pointers = np.array([slots.ctypes.data + 8 * i for i in range(_SLOTS)], np.uint64)
        _slots.pointers = pointers          # kept alive with the thread's slots
        got = _slots.got = (slots, slots.view(np.uint64), int(pointers.ctypes.data))
    return got
