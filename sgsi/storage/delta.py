"""Store versions on disk: the delta of each update, and the manifest that lists them.

``deltas/<version>/`` holds, against the version before it:

* ``inserted.arrow``, ``deleted.arrow``: the net inserted and deleted edges,
  dense int32 (src, dst, label id), sorted; in an undirected store each edge
  once, as (min, max);
* ``vertices.arrow``: the vertices new in this version (original ``id``,
  ``label`` id or -1), which take the dense ids after the last ones;
* ``signatures.arrow``: the new signature (``vertex``, ``w0``..) of every
  vertex whose neighbourhood changed, and of every new vertex.

The delta is written into a temporary directory, synced, renamed into
place, and only then is the manifest (its ``versions`` list) replaced the
same way, so a crash leaves the store at the old version or the new one. A
delta directory the manifest does not list (a crash between the two
renames) is removed by the next update. Updates of one store take a lock
file beside it (``.NAME.lock``) and run one at a time.

What an update writes is computed in :mod:`.update`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import uuid

import numpy as np
import pyarrow as pa

from ..errors import StoreError
from . import atomic
from . import format as fmt
from .atomic import fsync_path as _fsync

DELTAS = "deltas"
EDGE_FILES = ("inserted.arrow", "deleted.arrow")
DELTA_FILES = EDGE_FILES + ("vertices.arrow", "signatures.arrow")
#: Test hook: called with the name of each step of writing an update (see tests).
STEP_HOOK = None


def _step(name):
    if STEP_HOOK is not None:
        STEP_HOOK(name)


class Delta:
    """One version's delta, read into memory."""

    __slots__ = ("version", "inserted", "deleted", "new_ids", "new_labels", "sig_vertex", "sig_words")


def read_deltas(path, versions, base_version):
    """{version: :class:`Delta`} of every version after the base."""
    out = {}
    for e in versions:
        v = int(e["version"])
        if v > base_version:
            out[v] = _read_delta(path, e)
    return out


def _read_delta(path, entry):
    d = Delta()
    d.version = int(entry["version"])
    where = os.path.join(path, entry.get("delta", f"{DELTAS}/{d.version}"))
    tables = {}
    for name in DELTA_FILES:
        fp = os.path.join(where, name)
        rel = os.path.relpath(fp, path)
        want = entry.get("files", {}).get(name, {}).get("bytes")
        try:
            size = os.path.getsize(fp)
            if want is not None and size != want:
                raise StoreError(f"damaged store {path}: {rel} has {size} bytes, manifest says {want}")
            with pa.OSFile(fp) as f:
                tables[name] = pa.ipc.open_file(f).read_all()
        except StoreError:
            raise
        except (OSError, pa.ArrowException) as e:
            raise StoreError(f"damaged store {path}: cannot read {rel}: {str(e).splitlines()[0]}") from None
    try:
        d.inserted, d.deleted = (tuple(_ints(tables[n].column(c)) for c in ("src", "dst", "label"))
                                 for n in EDGE_FILES)
        vt = tables["vertices.arrow"]
        d.new_ids = vt.column("id").combine_chunks()
        d.new_labels = _ints(vt.column("label"))
        st = tables["signatures.arrow"]
        d.sig_vertex = _ints(st.column("vertex"))
        words = [st.column(i).combine_chunks().to_numpy(zero_copy_only=False) for i in range(1, st.num_columns)]
        d.sig_words = (np.stack(words, axis=1) if words else np.zeros((st.num_rows, 0))).astype(np.uint32)
    except (KeyError, pa.ArrowException, ValueError) as e:
        raise StoreError(f"damaged store {path}: delta of version {d.version} lacks a column "
                         f"({str(e).splitlines()[0]})") from None
    return d


def _ints(col):
    return np.asarray(col.combine_chunks().to_numpy(zero_copy_only=False), np.int32)


def verify_deltas(path, versions, base_version):
    """Check the size and checksum of every delta file after the base."""
    for e in versions:
        if int(e["version"]) <= base_version:
            continue
        for name, info in e.get("files", {}).items():
            rel = f"{e['delta']}/{name}"
            fp = os.path.join(path, rel)
            try:
                size, crc = os.path.getsize(fp), fmt.file_crc32(fp)
            except OSError as err:
                raise StoreError(f"damaged store {path}: cannot read {rel}: {err.strerror or err}") from None
            if size != info["bytes"] or crc != info["crc32"]:
                raise StoreError(f"damaged store {path}: {rel} fails its checksum or size")


@contextlib.contextmanager
def writer_lock(path):
    """The lock that lets one update or compaction of a store run at a time (a file beside it)."""
    parent, name = os.path.split(os.path.abspath(path))
    fd = os.open(os.path.join(parent, f".{name}.lock"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def delta_tables(ins, dele, new_ids, new_labels, changed, words):
    """The Arrow tables of one delta, by file name."""
    def edges(e):
        return pa.table({"src": pa.array(e[0], pa.int32()), "dst": pa.array(e[1], pa.int32()),
                         "label": pa.array(e[2], pa.int32())})
    sig = {"vertex": pa.array(changed, pa.int32())}
    sig.update({f"w{i}": pa.array(np.ascontiguousarray(words[:, i])) for i in range(words.shape[1])})
    return {"inserted.arrow": edges(ins), "deleted.arrow": edges(dele),
            "vertices.arrow": pa.table({"id": new_ids, "label": pa.array(new_labels, pa.int32())}),
            "signatures.arrow": pa.table(sig)}


def write_version(store, version, entry, tables):
    """Write ``deltas/<version>`` from ``tables``, then the manifest with ``entry`` added (each
    atomically); returns the manifest written."""
    root = os.path.join(store.path, DELTAS)
    os.makedirs(root, exist_ok=True)
    atomic.sweep_stale(root, prefix=".tmp-")
    final = os.path.join(root, str(version))
    if os.path.exists(final):              # left by an update that crashed before its manifest
        shutil.rmtree(final)
    tmp = os.path.join(root, f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    os.mkdir(tmp)
    try:
        files = {}
        for name, t in tables.items():
            fp = os.path.join(tmp, name)
            with pa.OSFile(fp, "wb") as sink:
                with pa.ipc.new_file(sink, t.schema) as w:
                    w.write_table(t)
            _fsync(fp)
            files[name] = {"bytes": os.path.getsize(fp), "crc32": fmt.file_crc32(fp)}
            _step("delta-file")
        _fsync(tmp)
        _step("delta-rename")
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync(root)
    entry["files"] = files
    m = dict(store._base_manifest)
    versions = list(store.versions)
    if "edge_labels" not in versions[0]:
        versions[0] = {**versions[0], "created": m.get("created"), "edge_labels": m["edge_labels"],
                       "vertex_labels": m["vertex_labels"]}
    m["versions"] = versions + [entry]
    m.setdefault("base_version", store.base_version)
    _step("manifest-write")
    write_manifest_atomic(store.path, m)
    return m


def write_manifest_atomic(path, manifest):
    """Replace ``path``'s manifest: a temporary file, synced, renamed over it, the directory synced."""
    tmp = os.path.join(path, f".{fmt.MANIFEST}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "w") as f:
            f.write(json.dumps(manifest, sort_keys=True, separators=(",", ":")))    # the C encoder: no indent
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        _step("manifest-rename")
        os.replace(tmp, os.path.join(path, fmt.MANIFEST))
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    _fsync(path)
