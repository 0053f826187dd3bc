"""The exceptions sgsi raises for bad input.

Every error a user can cause is an :class:`SgsiError`; its message is a
single line that names the problem (the file, the column, the position in
the pattern). The command line prints that line and exits with code 1.
"""

from .options import respell


class SgsiError(Exception):
    """Base class of every error sgsi reports to a user.

    A message names options as the command line spells them (``use
    --force``); ``str()`` shows them as the interface that the error
    reached spells them (:func:`sgsi.options.respell`).

    Attributes
    ----------
    interface : str
        ``"python"`` (``force=True``; the default), ``"sql"`` (``force :=
        true``; set by the SQL functions) or ``"cli"`` (``--force``; set by
        the command line).
    """

    interface = "python"

    def __str__(self):
        return respell(super().__str__(), self.interface)


class InputError(SgsiError):
    """Bad input files: missing, not Parquet, missing columns, null ids."""


class StoreError(SgsiError):
    """A graph store that is missing, damaged, or of another version."""


class PatternError(SgsiError):
    """A pattern that does not parse or cannot be matched.

    Attributes
    ----------
    position : int or None
        Zero-based character offset in the pattern text where the problem is.
    """

    def __init__(self, message, position=None):
        if position is not None:
            message = f"{message} (at position {position})"
        super().__init__(message)
        self.position = position


class BudgetError(SgsiError):
    """A memory budget that cannot be parsed or is too small for the work."""


class MemoryShortage(BudgetError):
    """A query's work outgrew the memory it may take (the GPU pool's limit, or the host's
    memory): the query is run again on half the budget, down to the store's floor, and this
    reaches the user only below that."""


class Cancelled(SgsiError):
    """A query stopped on request before it finished.

    Raised by :meth:`sgsi.Graph.count` and :meth:`sgsi.Graph.match` when
    their ``cancel`` event is set (or callable returns True), and in SQL when
    ``con.interrupt()`` is called while ``match()`` or ``match_count()``
    runs. Nothing of the query is left behind: its memory is freed and its
    scratch files are removed.
    """


def os_error_behind(exc):
    """The OSError (disk full, file too large, ...) that ``exc`` is, or that it was raised while handling.

    Writers that fail again while cleaning up after a failed write (pyarrow:
    "Operation on closed file") hide the first, telling error; this finds it.
    Returns None when there is none.
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno is not None:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None
