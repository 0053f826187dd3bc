"""Reading a store's files: pread(2) in pieces on a few threads, and errors of a damaged file
turned into a StoreError naming it."""

from __future__ import annotations

import os
import threading

import pyarrow as pa

from ..errors import StoreError
from .manifest import first_line

#: Errors of reading a damaged file (Arrow raises several kinds).
READ_ERRORS = (pa.ArrowException, OSError, ValueError, KeyError, IndexError, TypeError, SystemError,
               UnicodeDecodeError, OverflowError)
_pread_pool = None
_pread_lock = threading.Lock()


def pread_threads():
    global _pread_pool
    with _pread_lock:
        if _pread_pool is None:
            from concurrent.futures import ThreadPoolExecutor
            _pread_pool = ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1),
                                             thread_name_prefix="sgsi-pread")
        return _pread_pool


def pread(out, fd, offset, at, n):
    """Read n bytes of file ``fd`` at ``offset`` into ``out[at:at+n]`` (all of them, or an OSError)."""
    view = memoryview(out)[at:at + n]
    while len(view):
        got = os.preadv(fd, [view], offset)
        if got <= 0:
            raise OSError(f"short read at offset {offset}")
        view, offset = view[got:], offset + got


class Reading:
    """``with store._reading(name):`` turns errors of reading ``name`` into a StoreError naming it."""

    __slots__ = ("name", "store")

    def __init__(self, store, name):
        self.store, self.name = store, name

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is not None and isinstance(exc, READ_ERRORS) and not isinstance(exc, StoreError):
            raise StoreError(f"damaged store {self.store.path}: cannot read {self.name}: "
                             f"{first_line(exc)}") from None
        return False
