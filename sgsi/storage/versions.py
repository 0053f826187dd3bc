"""A store's versions: the base, the deltas after it, and the one an opening presents.

:class:`Versions` is the part of :class:`~sgsi.storage.store.Store` that reads the manifest's
versions and the deltas (:mod:`.delta`), presents one version through its
:class:`~sgsi.storage.overlay.VersionView`, and makes other openings of the same files: at
another version it holds (:meth:`Versions.at_version`), or at the newest on disk after an update
(:meth:`Versions.newest`).
"""

from __future__ import annotations

import copy
import itertools
import threading

import numpy as np

from ..errors import StoreError
from . import format as fmt
from .manifest import count_field, identity, label_key, read_manifest, what_field

#: Numbers the openings of stores (a token's second half: the caches' keys).
OPENINGS = itertools.count()


class Versions:
    """Version handling of an opened store (mixed into :class:`~sgsi.storage.store.Store`)."""

    def _open_versions(self):
        """Read the manifest's versions and every delta after the base; present the one asked for."""
        from .delta import read_deltas
        m = self._base_manifest
        self.base_version = int(m.get("base_version", 1))
        self.versions = m.get("versions") or [{"version": 1, "vertices": m["vertices"], "edges": m["edges"]}]
        newest = int(self.versions[-1]["version"])
        self._deltas = read_deltas(self.path, self.versions, self.base_version)
        self._set_version(newest if self._want_version is None else self._want_version)

    def _set_version(self, version, prior=None):
        """Present ``version``; ``prior``: the view of an earlier version of the same base, whose net
        change the deltas after it are merged onto (:class:`~.overlay.VersionView`)."""
        self._changed = {}              # changed_pairs' answers at this version
        from .overlay import VersionView
        newest = int(self.versions[-1]["version"])
        if not self.base_version <= version <= newest:
            if 1 <= version < self.base_version:
                raise StoreError(f"store {self.path}: version {version} was compacted into the base; it holds "
                                 f"versions {self.base_version}..{newest}")
            raise StoreError(f"store {self.path} has no version {version} (it holds versions "
                             f"{self.base_version}..{newest})")
        self.version = version
        self._virtual, self._vindex, self._masked = {}, {}, {}
        self._next_segment, self._next_index = self._n_base_segments, self._n_base_index
        self._base_parts = {}
        self._view = None
        m = dict(self._base_manifest)
        try:
            if version != self.base_version:
                e = self.version_entry(version)
                for field in ("vertices", "edges", "edge_labels", "vertex_labels"):
                    m[field] = e[field]
            self.manifest = m
            self.n_vertices, self.n_edges = count_field(m["vertices"], "vertices"), count_field(m["edges"], "edges")
            present = bool(m["edge_labels"]["present"])
            self._edge_label_ids = {label_key(v): i for i, v in enumerate(m["edge_labels"]["values"]) if present}
            self._vertex_label_ids = {label_key(v): i for i, v in enumerate(m["vertex_labels"]["values"])}
            self.edge_label_freq = np.asarray(m["edge_labels"]["frequency"], np.int64)
            if self.n_vertices < self._base_n:
                raise ValueError("fewer vertices than the base")
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise StoreError(f"damaged store {self.path}: {fmt.MANIFEST} has a bad entry for version {version} "
                             f"({what_field(e)})") from None
        self.max_segment_bytes = self._base_max_segment_bytes
        if version == self.base_version:
            return
        first = self.base_version + 1 if prior is None else prior.version + 1
        self._view = VersionView(self, version, [self._deltas[v] for v in range(first, version + 1)], prior)
        # Segments of the changes hold at most segment_edges edges, each of at most one group, and no
        # more than a partition of this version: two pairs an edge (both ways). segment_edges alone
        # (sized for the build's budget) put a 100-edge store's floor at 1.5 GiB after one update.
        step = min(int(m["parameters"].get("segment_edges", 0)), 2 * self.n_edges)
        self.max_segment_bytes = max(self.max_segment_bytes, step * (4 + 8 * self.theta))

    def version_entry(self, version) -> dict:
        """The manifest's entry of one version (counts, label dictionaries, its delta's files); an
        update leaves out ``vertex_labels`` when unchanged: the latest entry before it that has them."""
        for i, e in enumerate(self.versions):
            if int(e["version"]) == int(version):
                if "vertex_labels" in e:
                    return e
                had = [x for x in self.versions[:i] if "vertex_labels" in x]
                return {**e, "vertex_labels": (had[-1] if had else self._base_manifest)["vertex_labels"]}
        raise StoreError(f"store {self.path} has no version {version}")

    def at_version(self, version):
        """This opening of the store at another version it holds (sharing its base files): the opening
        :meth:`newest` made this one from, where that is the version asked for."""
        version = int(version)
        if version == self.version:
            return self
        older = self._older
        if older is not None and older.version == version and not older.closed:
            return older
        s = self._siblings.get(version)
        if s is None:
            s = self._siblings[version] = self._sibling()
            s._set_version(version)
        return s

    def newest(self, manifest=None):
        """This store at the newest version on disk (``manifest``: the one there, where the caller
        wrote it, not read again). Where only versions were added since it was
        opened (not compacted, not rebuilt), an opening that shares its base files and the deltas
        it has read, reading the new ones only: an update opened every delta twice (10 ms a 1K
        batch with two before it, and growing with every version)."""
        from .delta import read_deltas
        m = read_manifest(self.path) if manifest is None else manifest
        base = ("versions", "base_version")
        if identity(self.path) != self._identity or int(m.get("base_version", 1)) != self.base_version \
                or {k: v for k, v in m.items() if k not in base} != \
                {k: v for k, v in self._base_manifest.items() if k not in base}:
            return type(self)(self.path)
        versions = m.get("versions") or self.versions
        if versions == self.versions and self.version == int(versions[-1]["version"]):
            return self
        s = self._sibling()
        s._base_manifest, s.versions, s._want_version = m, versions, None
        s._deltas = {**self._deltas, **read_deltas(self.path, [e for e in versions if int(e["version"])
                                                               not in self._deltas], self.base_version)}
        s._set_version(int(versions[-1]["version"]), prior=self._view)    # merged with the new deltas only
        # This opening serves the new one's queries at its version (a delta since it), its partitions
        # built and its caches kept (1K+1K updates of a 2M-edge R-MAT: a first delta 1.5x faster),
        # while it is open. One opening back only: this one lets go of its own older one.
        s._older, self._older = self, None
        return s

    def changed_pairs(self, since, label_id, direction):
        """(added_src, added_dst, removed_src, removed_dst), int32: the pairs of partition
        (``label_id``, ``direction``) present at this version and not at version ``since``, and
        the reverse. ``since`` must be a version this store holds (not one compacted away).
        Kept per (since, label, direction), read-only: every query of a batch asks the same."""
        key = (int(since), int(label_id), direction)
        hit = self._changed.get(key)
        if hit is None:
            from .overlay import changed_pairs
            hit = tuple(changed_pairs(self, since, label_id, direction))
            for a in hit:
                a.flags.writeable = False
            self._changed[key] = hit
        return hit

    def _sibling(self):
        """A copy of this opening that shares its base files and the deltas read, with a token, a
        lock and caches of its own (a version is then set on it)."""
        s = copy.copy(self)
        s.token = (self.path, next(OPENINGS))
        s._lock = threading.Lock()
        s._siblings, s._segments, s._partitions, s._close_hooks, s._vid = {}, {}, {}, [], None
        s._older = None
        return s
