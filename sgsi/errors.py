"""The exceptions sgsi raises for bad input.

Every error a user can cause is an :class:`SgsiError`; its message is a
single line that names the problem (the file, the column, the position in
the pattern). The command line prints that line and exits with code 1.
"""


class SgsiError(Exception):
    """Base class of every error sgsi reports to a user."""


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
