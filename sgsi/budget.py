"""Memory budgets: parsing sizes such as ``64KB`` and choosing defaults.

A budget is a number of bytes that one join step may hold on the device
(GPU memory, or RAM for the CPU backend): two segments, two intermediate
columns and the Prealloc-Combine buffers. Segment and chunk sizes are
derived from it, so a tiny budget gives many small segments and chunks and
the same results.
"""

from __future__ import annotations

import os
import re

from .errors import BudgetError

_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2,
          "mib": 1024**2, "g": 1024**3, "gb": 1024**3, "gib": 1024**3, "t": 1024**4,
          "tb": 1024**4, "tib": 1024**4}

#: The smallest budget that still leaves room for a few edges per segment.
MIN_BUDGET = 16 * 1024


def parse_size(value) -> int:
    """Return a size in bytes from ``123``, ``"64KB"``, ``"2 GiB"`` or ``"1.5GB"``.

    >>> parse_size("64KB")
    65536
    """
    if isinstance(value, bool):
        raise BudgetError(f"not a size: {value!r}")
    if isinstance(value, (int, float)):
        n = int(value)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(value))
        if not m or m.group(2).lower() not in _UNITS:
            raise BudgetError(f"not a size: {value!r} (use e.g. 64KB, 512MB, 2GB)")
        n = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if n < MIN_BUDGET:
        raise BudgetError(f"memory budget {n} bytes is below the minimum of {MIN_BUDGET} bytes (16KB)")
    return n


def format_size(n: int) -> str:
    """Human-readable bytes: ``format_size(65536) == '64.0 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def host_memory_bytes() -> int:
    """Physical memory of this machine (bytes)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # pragma: no cover - non-POSIX
        return 8 * 1024**3


def default_budget() -> int:
    """The host's default budget: a quarter of RAM. (A GPU's is half of what the device has for
    sgsi: :meth:`sgsi.join.backends.gpu.memory.DeviceMemory.default_budget`.)"""
    return max(MIN_BUDGET, host_memory_bytes() // 4)


def resolve_budget(value) -> int:
    """``value`` parsed, or the host's default when it is None."""
    return default_budget() if value is None else parse_size(value)
