"""The checked options of a query call (:meth:`sgsi.Graph.count`, :meth:`sgsi.Graph.match`, the
SQL functions): the deprecated names applied, wrong values refused (:mod:`sgsi.options` holds
their names and spellings)."""

from __future__ import annotations

import warnings

from .errors import SgsiError


def query_options(method, homomorphism, max_rows, deprecated, stacklevel=3):
    """``(homomorphism, max_rows)`` of a :meth:`Graph.count` or :meth:`Graph.match` call, checked,
    with the deprecated ``injective`` and ``limit`` among ``deprecated`` (its other keywords)
    applied. Raises TypeError for any other keyword, as Python would."""
    known = ("injective", "limit") if method == "match" else ("injective",)
    for key in deprecated:
        if key not in known:
            raise TypeError(f"Graph.{method}() got an unexpected keyword argument {key!r}")
    if "injective" in deprecated:
        injective = deprecated["injective"]
        if injective not in (True, False):
            raise SgsiError(f"injective must be True or False, got {injective!r}")
        warnings.warn(f"Graph.{method}(injective=...) is deprecated: use homomorphism={not injective}",
                      DeprecationWarning, stacklevel=stacklevel)
        if homomorphism and injective:
            raise SgsiError("homomorphism=True and injective=True contradict each other: give homomorphism only")
        homomorphism = not injective
    if "limit" in deprecated:
        warnings.warn("Graph.match(limit=...) is deprecated: use max_rows=...", DeprecationWarning,
                      stacklevel=stacklevel)
        if max_rows is not None:
            raise SgsiError("give max_rows only (limit is its deprecated name)")
        max_rows = deprecated["limit"]
    if homomorphism not in (True, False):
        raise SgsiError(f"homomorphism must be True or False, got {homomorphism!r}")
    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0):
        raise SgsiError(f"max_rows must be a non-negative integer, got {max_rows!r}")
    return bool(homomorphism), max_rows


def since_option(since):
    """The version ``since`` of an incremental match, checked: a non-negative integer."""
    if isinstance(since, bool) or not isinstance(since, int) or since < 0:
        raise SgsiError(f"since must be a store version, a non-negative integer, got {since!r}")
    return since


def scale_options(workers, scheduler, client=None):
    """``(workers, scheduler)`` of a sharded query, checked: ``workers`` a positive integer (a local
    cluster of that many), ``scheduler`` a Dask scheduler's address; at most one of them and
    Python's ``client`` (a ``dask.distributed.Client``). All None: the query runs in this process."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise SgsiError(f"--workers must be a positive integer, got {workers!r}")
    if scheduler is not None and (not isinstance(scheduler, str) or not scheduler.strip()):
        raise SgsiError(f"--scheduler must be a Dask scheduler's address such as tcp://host:8786, got {scheduler!r}")
    if sum(x is not None for x in (workers, scheduler, client)) > 1:
        given = [n for n, x in (("--workers", workers), ("--scheduler", scheduler), ("client", client))
                 if x is not None]
        raise SgsiError(f"give only one of {', '.join(given)}: --workers starts a local cluster, --scheduler "
                        f"and client use a running one")
    return workers, scheduler
