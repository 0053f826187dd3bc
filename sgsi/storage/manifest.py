"""Reading a store's manifest and checking its files against it (works on a store too damaged
to open), and the small checks of manifest values that :class:`~sgsi.storage.store.Store` uses."""

from __future__ import annotations

import json
import os

import numpy as np

from ..errors import StoreError
from . import format as fmt
from .format import STORE_FILES


def verify_files(path, manifest=None):
    """Check every file of the store at ``path`` against the sizes and checksums of its manifest.

    Works on a store too damaged to open; raises StoreError naming the
    first bad file.
    """
    path = os.fspath(path)
    if manifest is None:
        manifest = read_manifest(path, check_files=False)
    for name, info in manifest["files"].items():
        fp = os.path.join(path, name)
        try:
            size = os.path.getsize(fp)
            crc = fmt.file_crc32(fp)
        except OSError as e:
            raise StoreError(f"damaged store {path}: cannot read {name}: {e.strerror or e}") from None
        if size != info["bytes"]:
            raise StoreError(f"damaged store {path}: {name} has {size} bytes, manifest says {info['bytes']}")
        if crc != info["crc32"]:
            raise StoreError(f"damaged store {path}: {name} fails its checksum "
                             f"(crc32 {crc}, manifest says {info['crc32']})")


def identity(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def first_line(e) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def what_field(e) -> str:
    if isinstance(e, KeyError):
        return repr(e.args[0]) if e.args else "a field"
    return f"a field ({first_line(e)})"


def count_field(value, what) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} = {value!r}")
    return value


def int_column(column) -> np.ndarray:
    if column.null_count:
        raise ValueError("null values")
    return column.to_numpy()


def label_key(v) -> str:
    return str(v)


def read_manifest(path, check_files=True):
    if not os.path.isdir(path):
        raise StoreError(f"no graph store at {path}" + (" (it is a file)" if os.path.exists(path) else ""))
    mpath = os.path.join(path, fmt.MANIFEST)
    if not os.path.isfile(mpath):
        raise StoreError(f"{path} is not a graph store: {fmt.MANIFEST} is missing")
    try:
        with open(mpath, encoding="utf-8") as f:
            m = json.load(f)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise StoreError(f"damaged store {path}: {fmt.MANIFEST} is not valid JSON ({first_line(e)})") from None
    except OSError as e:
        raise StoreError(f"cannot read {os.path.join(path, fmt.MANIFEST)}: {e.strerror or e}") from None
    if not isinstance(m, dict) or m.get("format") != "sgsi-store":
        raise StoreError(f"{path} is not a graph store: {fmt.MANIFEST} is not an sgsi manifest")
    if m.get("version") != fmt.FORMAT_VERSION:
        raise StoreError(f"store {path} has format version {m.get('version')}; this sgsi reads version "
                         f"{fmt.FORMAT_VERSION} (rebuild the store)")
    files = m.get("files")
    if not isinstance(files, dict):
        raise StoreError(f"damaged store {path}: {fmt.MANIFEST} lists no files")
    for name in STORE_FILES:
        if name not in files:
            raise StoreError(f"damaged store {path}: {fmt.MANIFEST} does not list {name}")
    for name, info in files.items():
        if (not isinstance(name, str) or os.path.basename(name) != name or name in (".", "..")
                or not isinstance(info, dict) or not isinstance(info.get("bytes"), int)
                or not isinstance(info.get("crc32"), str)):
            raise StoreError(f"damaged store {path}: {fmt.MANIFEST} has a bad entry for file {name!r}")
        if not check_files:
            continue
        fp = os.path.join(path, name)
        if not os.path.isfile(fp):
            raise StoreError(f"damaged store {path}: {name} is missing")
        size = os.path.getsize(fp)
        if size != info["bytes"]:
            raise StoreError(f"damaged store {path}: {name} has {size} bytes, manifest says {info['bytes']}")
    return m
