"""Writing a file or directory under a temporary name and renaming it into place.

What is written goes to ``.NAME.tmp-PID-XXXXXXXX`` beside its target
``NAME`` and is renamed to ``NAME`` only when complete, so ``NAME`` never
holds a partial store or file; on failure the temporary is removed.
Replacing a directory swaps the two in one step where the system can
(Linux ``renameat2(RENAME_EXCHANGE)``). Scratch directories for spilling
(``sgsi-spill-PID-*``) are made beside the target as well. A process
killed outright leaves its temporaries behind; the next build of the same
target removes those of processes that no longer run (:func:`sweep_stale`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import uuid

from ..errors import InputError

SCRATCH_PREFIX = "sgsi-spill-"


def refuse_existing(out: str, force: bool) -> None:
    """Raise :class:`InputError` where ``out`` exists and ``force`` is off."""
    if os.path.exists(out) and not force:
        raise InputError(f"output path exists: {out} (use --force to replace it)")


def temp_name(path: str) -> str:
    """A fresh temporary name beside ``path``, which tells the process that owns it."""
    parent, name = os.path.split(os.path.abspath(path))
    return os.path.join(parent, f".{name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")


@contextlib.contextmanager
def replacing_dir(out: str, force: bool = False):
    """A new directory beside ``out``, renamed to ``out`` when the block ends without error.

    Parameters
    ----------
    out : str
        The target; its parent directory must exist.
    force : bool
        Replace an existing ``out`` (atomically where the system can).

    Yields
    ------
    str
        The temporary directory, to fill.

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> with replacing_dir(os.path.join(d, "s")) as tmp:
    ...     open(os.path.join(tmp, "f"), "w").close()
    >>> os.listdir(d), os.listdir(os.path.join(d, "s"))
    (['s'], ['f'])
    """
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise InputError(f"output directory does not exist: {parent}")
    sweep_stale(parent, os.path.basename(out))
    tmp = temp_name(out)
    os.mkdir(tmp)
    try:
        yield tmp
        _move_into_place(tmp, out, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def replacing_file(path: str):
    """A temporary path beside ``path``, moved over ``path`` when the block ends without error."""
    tmp = temp_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


@contextlib.contextmanager
def scratch_dir(parent: str):
    """A scratch directory in ``parent``, removed when the block ends (or by :func:`sweep_stale`)."""
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=parent) as d:
        yield d


def sweep_stale(parent: str, name: str | None = None, prefix: str = SCRATCH_PREFIX) -> None:
    """Remove from ``parent`` what processes that no longer run left there.

    That is their scratch directories (``PREFIX`` + pid + ``-``...) and,
    where ``name`` is given, their temporaries of ``name``.
    """
    alternatives = [re.escape(prefix)] + ([rf"\.{re.escape(name)}\.tmp-"] if name is not None else [])
    pattern = re.compile(rf"^(?:{'|'.join(alternatives)})(\d+)-")
    for entry in os.listdir(parent):
        m = pattern.match(entry)
        if not m:
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue                      # its owner is still running
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError, ValueError):
            continue
        shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)


def _move_into_place(tmp, out, force):
    """Rename the finished directory into place; with ``force``, swap it in atomically."""
    if os.path.exists(out):
        refuse_existing(out, force)
        if not _exchange(tmp, out):
            trash = f"{tmp}.old"          # no atomic exchange here: two renames
            os.rename(out, trash)
            os.rename(tmp, out)
            tmp = trash
        shutil.rmtree(tmp, ignore_errors=True) if os.path.isdir(tmp) else os.remove(tmp)
    else:
        os.rename(tmp, out)


def _exchange(a, b) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def fsync_path(path):
    """fsync(2) a file or a directory by its path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
