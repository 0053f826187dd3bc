"""Incremental matches between two versions of a store: the matches a batch of updates adds and removes.

A pattern edge e = (u, w) holds for a pair (x, y) when (x, y) is in e's partition (its label, or
any, and "out", or "both" where e is undirected). delta(+) is the embeddings of the new version
with an edge whose pair was not in its partition in the old one, i.e. is among the partition's
added pairs (for an unlabeled or undirected edge that is not the raw edge change: the store gives
the flips per partition); delta(-) the same on the old version with the removed pairs. Rows are
the embeddings projected on the named vertices, as match() gives them, so
``added - removed == count(new) - count(old)``.

Each side is a sum of anchored queries on the engine, one per pattern edge e_i with changed
pairs: the embeddings whose e_i pair is one of them and whose e_j pair, for each j < i, is not one
of e_j's; each embedding is found by the query of its first changed edge, once. An anchored
query (:class:`Anchor`) starts the order with u_i, w_i and its join from the pairs themselves
(the engine's ``seed``: no step reads the anchor vertices' lists), and filters the join's chunks
by pair sets (:class:`~sgsi.join.pairs.RowFilter`) at the first level where an earlier edge's
ends are both matched: counts and rows alike come from filtered joins, with no such vertex
factored. Where another pattern edge joins u_i and w_i (which a seed would not test), it keeps
instead only its pairs' ends in C(u_i), C(w_i) and filters by its own pairs too. The candidate
filter runs once per side, and drops the pairs whose ends are not candidates of the edge's ends
(an edge left with none has no query); an anchored query is refined, on its sets cut to its
pairs' ends, only once its join outgrows its sets (the engine's replan), and searches its order
once past its backend's ``reorder_work`` after that (from its pairs). A count that gets there
while it excludes earlier edges, whose filters keep their vertices joined, is counted another
way (:func:`_unpinned`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from ..errors import Cancelled, PatternError
from ..pattern import unknown_label
from ..storage.format import ANY_LABEL
from . import query as query_module
from . import race, symmetry
from .pairs import RowFilter, id_bits, in_bits, pair_keys
from .plan import REFINE_ROUNDS, make_plan
from .query import Query, drop_frames, load, reraise_stream_error, with_columns

#: The column of a delta row that says whether it was added (+1) or removed (-1).
SIGN = "sign"


def versions(store, since):
    """(the store at version ``since``, ``changed(label_id, direction)``: that partition's pairs
    (added src, added dst, removed src, removed dst) from ``since`` to ``store``'s version, and
    ``close()``, for when the delta is done). The old version is ``store``'s own opening of it
    (``Store.at_version``: shared files, and its caches kept for the next delta; not closed):
    a fresh ``Store`` read every delta file again and filtered candidates on cold caches
    (1e7-edge R-MAT, a 5K+5K batch: 560 ms of a delta on the CPU)."""
    old = store.at_version(since)
    return old, lambda label_id, direction: store.changed_pairs(since, label_id, direction), lambda: None


@dataclass(frozen=True)
class Anchor:
    """The anchored query of pattern edge (u, w): its pair is one of ``keys``; the pair of each
    earlier edge (u', w', keys') of ``exclude`` is not one of keys'. Keys are
    :func:`~sgsi.join.pairs.pair_keys` over ``span``; ``candidates``: the filtered candidate
    bitsets on the host, and ``base`` their copies on each backend's device (both shared by the
    anchors of one side)."""

    u: int
    w: int
    keys: np.ndarray
    exclude: tuple
    span: int
    candidates: list = field(compare=False, repr=False)
    base: dict = field(default_factory=dict, compare=False, repr=False)
    require: tuple = ()     # (u', w', keys') whose pair must be one of keys', as the anchor's
    weight: int = 1         # what each match adds to a count (an inclusion-exclusion term's sign)
    seeded: bool = False    # the join starts from the pairs (no other pattern edge joins u and w)
    symmetry: tuple = ((), 1)   # a count's (pairs m(v) < m(w), |H|), the same for every anchor
    unpin: bool = True      # a heavy count that excludes edges goes back to its delta (:func:`_unpinned`)

    @property
    def seed(self):
        """The engine's ``seed``: the pairs as partial matches of (u, w), or ()."""
        if not self.seeded:
            return ()
        return ((self.u, (self.keys // self.span).astype(np.int32)), (self.w, (self.keys % self.span).astype(np.int32)))

    @property
    def pinned(self):
        """The vertices the row filters read: a count joins them (factors none of them)."""
        return ({self.u, self.w} | {v for u, w, _k in self.exclude + self.require for v in (u, w)}
                | {v for pair in self.symmetry[0] for v in pair})

    @property
    def start(self):
        return (self.u,) if self.u == self.w else (self.u, self.w)

    def apply(self, backend, store, bits, ends=True):
        """The candidate bitsets ``bits`` with C(u), C(w) cut to the pairs' ends (``ends``) and
        those of each required edge."""
        bits = list(bits)
        n = store.n_vertices
        for u, w, keys in ((((self.u, self.w, self.keys),) if ends else ()) + self.require):
            bits[u] = bits[u] & id_bits(backend, keys // self.span, n)
            bits[w] = bits[w] & id_bits(backend, keys % self.span, n)
        return bits

    def filters(self, backend, order):
        """The :class:`RowFilter` of the anchor and of each earlier edge, at their levels of ``order``."""
        pos = {v: i for i, v in enumerate(order)}
        out = [] if self.seeded else [RowFilter(max(pos[self.u], pos[self.w]), self.u, self.w,
                                                backend.to_device(self.keys), self.span, True)]
        out += [RowFilter(max(pos[u], pos[w]), u, w, backend.to_device(keys), self.span, keep)
                for edges, keep in ((self.require, True), (self.exclude, False)) for u, w, keys in edges]
        return out

    def plan(self, store, pattern, backend, injective, count=False, refine_from=None, order=None):
        """The anchored plan on the filtered sets, or refined from ``refine_from``, the candidate
        sets of the first (the engine's replan), or on ``order`` over ``refine_from`` (refined sets
        already: the order a search found); a ``count`` factors the vertices no filter reads."""
        if refine_from is not None:         # from the first plan's sets: cut C(u), C(w) then refine
            return make_plan(store, pattern, backend, injective=injective,
                             refine_rounds=REFINE_ROUNDS if order is None else 0, factor_leaves=count,
                             filtered=refine_from[:len(pattern.vertices)], anchor=self, order=order)
        bits = self.base.get(backend.name)
        if bits is None:
            bits = self.base[backend.name] = [backend.to_device(b) for b in self.candidates]
        if self.seeded:         # the seed holds the pairs: C(u), C(w) as they are
            bits = self.apply(backend, store, bits, ends=False)
        return make_plan(store, pattern, backend, injective=injective, refine_rounds=0, factor_leaves=count,
                         filtered=bits, anchor=self)


class Delta:
    """The incremental matches of ``pattern`` from ``old`` to ``new`` (two versions of a store).

    ``changed(label_id, direction)``: :func:`versions`' function, label ids of ``new``. The
    options are :class:`~sgsi.join.query.Query`'s; ``publish`` receives the anchored queries'
    stats summed, with their number (``anchored_queries``) and the seconds spent getting the
    changed pairs from the store (``delta_changed_s``) and filtering candidates (``delta_filter_s``)."""

    def __init__(self, old, new, backends, pattern, changed, device="auto", memory_budget=None, injective=True,
                 cancel=None, publish=None, progress=True):
        self.old, self.new, self.backends, self.changed = old, new, backends, changed
        self.pattern = load(pattern)
        self.options = dict(device=device, memory_budget=memory_budget, injective=injective, cancel=cancel,
                            progress=progress)
        self.publish = publish or (lambda stats: None)
        self.edges = _edges(new, self.pattern, strict=self.pattern.strict_labels)   # None: no match in new
        self.in_old = _edges(old, self.pattern, strict=False) is not None
        nbrs = [set() for _ in self.pattern.vertices]
        for e in self.pattern.edges:
            nbrs[e.src].add(e.dst)
            nbrs[e.dst].add(e.src)
        self.leaves = {u for u, vs in enumerate(nbrs) if len(vs) == 1}
        # A count's (pairs, |H|): the automorphisms fixing the leaves, whose orbits the edges'
        # changes leave whole (a match with a changed pair maps to one with the image pair);
        # every anchored count joins one embedding an orbit and multiplies (:mod:`.symmetry`).
        self.symmetry = ((), 1)
        if injective and query_module.SYMMETRY:
            rest = [u for u in range(len(self.pattern.vertices)) if u not in self.leaves]
            pairs, size = symmetry.constraints(self.pattern, rest, sorted(self.leaves))
            self.symmetry = (tuple(pairs), size)

    def anchors(self, count=False):
        """(sign, store, :class:`Anchor`) of every anchored query: the new version's, then the old's.
        For a ``count``, an anchor that excludes 1 to :data:`MAX_LEAF_TERMS` earlier edges to leaves
        is replaced by inclusion-exclusion over them (:func:`_leaf_terms`), whose terms leave those
        leaves free to be counted instead of joined."""
        self.times = {"delta_changed_s": 0.0, "delta_filter_s": 0.0}      # stats: the store's part, the filter's
        if self.edges is None:
            return []
        span = max(self.old.n_vertices, self.new.n_vertices, 1)
        pairs = {}
        t = time.perf_counter()
        for _u, _w, lid, direction in self.edges:
            if (lid, direction) not in pairs:
                a_src, a_dst, r_src, r_dst = self.changed(lid, direction)
                pairs[(lid, direction)] = (pair_keys(a_src, a_dst, span), pair_keys(r_src, r_dst, span))
        self.times["delta_changed_s"] = time.perf_counter() - t
        out = []
        for side, sign, store in ((0, 1, self.new), (1, -1, self.old)):
            if side == 1 and not self.in_old:       # a label the old version lacks: no match there
                continue
            if not any(pairs[(lid, d)][side].size for _u, _w, lid, d in self.edges):
                continue
            # Pairs whose ends are not candidates of the edge's ends are in no match: an edge
            # left with none needs no query (nor a filter in the others).
            t = time.perf_counter()
            cands = Query(store, self.backends, self.pattern, **self.options).candidates()
            self.times["delta_filter_s"] += time.perf_counter() - t
            if cands is None:
                continue
            base, earlier = {}, []
            for u, w, lid, direction in self.edges:
                keys = pairs[(lid, direction)][side]
                x, y = keys // span, keys % span
                keep = in_bits(cands[u], x) & in_bits(cands[w], y)
                if self.options["injective"]:       # a data loop maps no pattern edge
                    keep &= x != y
                keys = keys[keep]
                if keys.size:
                    seeded = sum({a, b} == {u, w} for a, b, _l, _d in self.edges) == 1
                    anchor = Anchor(u, w, keys, tuple(earlier), span, cands, base, seeded=seeded,
                                    symmetry=self.symmetry if count else ((), 1))
                    out += [(sign, store, a) for a in (_leaf_terms(anchor, self.leaves) if count else [anchor])]
                    earlier.append((u, w, keys))
        return out

    def count(self) -> dict:
        """{"added": matches gained, "removed": matches lost}: by the anchored queries, or by
        counting both versions where that ends first (:mod:`.race`): the gains less the losses
        are the new count less the old, so a side with no flipped pair is that difference, and
        where both sides have some, the side of fewer anchored queries is counted by them and
        the other is that difference from it."""
        anchors = self.anchors(count=True)
        if not anchors:
            self.publish({**_Stats().total(self.symmetry[1]), **self.times})
            return {"added": 0, "removed": 0}
        out, got = {"added": 0, "removed": 0}, {"added": 0, "removed": 0, "new": 0, "old": 0}
        stats, recount_stats = _Stats(), _Stats()
        # Anchored queries are many and short: a turn ends between two (none is done twice).
        anchored = race.Path("anchored", [self._anchored(item, out, stats) for item in anchors], stoppable=False)
        sides = sorted({sign for sign, _s, _a in anchors}, key=lambda s: sum(a[0] == s for a in anchors))
        versions = [(self.new, "new")] + ([(self.old, "old")] if self.in_old else [])     # else "old" stays 0
        tasks = [self._recount(store, key, got, recount_stats) for store, key in versions]
        if len(sides) == 2:     # the side of fewer anchored queries
            tasks += [self._anchored(item, got, recount_stats) for item in anchors if item[0] == sides[0]]
        path, rounds = race.first_done([anchored, race.Path("recount", tasks)], self.options["cancel"])
        if path is not anchored:
            stats, change = recount_stats, got["new"] - got["old"]
            if len(sides) == 1:     # no flipped pair on the other side: it lost (gained) nothing
                out = {"added": change, "removed": 0} if sides[0] > 0 else {"added": 0, "removed": -change}
            elif sides[0] > 0:
                out = {"added": got["added"], "removed": got["added"] - change}
            else:
                out = {"added": got["removed"] + change, "removed": got["removed"]}
        self.publish({**stats.total(self.symmetry[1]), **self.times, "delta_path": path.name, "delta_rounds": rounds})
        return out

    def _anchored(self, item, out, stats):
        """The :class:`race.Path` task of the anchored count ``item`` (sign, store, anchor), summed
        into ``out``; a heavy one that excludes edges gives back its :func:`_unpinned` terms."""
        sign, store, anchor = item

        def run(stop):
            try:
                n = self._query(store, anchor, stats, stop).count()
            except query_module.HeavyAnchor:
                stats.unpinned += 1
                return [self._anchored((sign, store, a), out, stats) for a in _unpinned(anchor)]
            out["added" if sign > 0 else "removed"] += anchor.weight * n
            return None
        return run

    def _recount(self, store, key, got, stats):
        """The :class:`race.Path` task of the count of the pattern on ``store``, as ``got[key]``;
        stopped, it says how long it needs by the share of its join done."""
        def run(stop):
            query = Query(store, self.backends, self.pattern, publish=stats.add, **{**self.options, "cancel": stop})
            start = time.monotonic()
            try:
                got[key] = query.count()
            except Cancelled as e:     # at its turn's end (or the caller's cancel): how long it needs
                share = query.progress.share() if getattr(query, "progress", None) is not None else 0.0
                e.seconds = (time.monotonic() - start) / share if share > 0 else 0.0
                raise
        return run

    def stream(self, limit=None, on_end=None):
        """The delta rows as a :class:`pyarrow.RecordBatchReader` (the named vertices' original ids
        and an int8 ``sign``), and the list receiving the error that ended it (as
        :meth:`Query.stream`). ``on_end()`` runs when the stream ends, however."""
        why = "its delta has no columns: name one, e.g. (a), or count the delta"
        names = with_columns(self.pattern, why).output_names
        if SIGN in names:
            raise PatternError(f"a pattern vertex is named {SIGN!r}, the name of the delta's sign column: rename it")
        schema = pa.schema([(n, self.new.vertex_id_type) for n in names] + [(SIGN, pa.int8())])
        anchors = self.anchors()
        stats = _Stats()
        first = None
        if anchors and limit != 0:       # the first query starts here: its errors (budget) raise now
            sign, store, anchor = anchors[0]
            first = self._query(store, anchor, stats).stream(limit)
        failure = []
        reader = pa.RecordBatchReader.from_batches(schema, self._batches(anchors, first, limit, schema, stats,
                                                                         failure, on_end))
        from_stream = getattr(pa.RecordBatchReader, "from_stream", None)
        return (from_stream(reader) if from_stream is not None else reader), failure

    def _batches(self, anchors, first, limit, schema, stats, failure, on_end):
        left = limit
        try:
            for k, (sign, store, anchor) in enumerate(anchors):
                if left == 0:
                    break
                reader, fail = first if k == 0 else self._query(store, anchor, stats).stream(left)
                first = None
                try:
                    for batch in reader:
                        n = batch.num_rows
                        cols = [c if c.type == f.type else c.cast(f.type) for c, f in zip(batch.columns, schema)]
                        yield pa.record_batch(cols + [pa.array(np.full(n, sign, np.int8))], schema=schema)
                        if left is not None:
                            left -= n
                except Exception as e:
                    reraise_stream_error(fail, e)
                    raise
                finally:
                    reader.close()
        except BaseException as e:
            drop_frames(e)
            failure.append(e)
            raise
        finally:        # also when stopped early: by the limit, or the reader closed
            if first is not None:
                first[0].close()
            self.publish({**stats.total(), **self.times})
            if on_end is not None:
                on_end()

    def _query(self, store, anchor, stats, cancel=None):
        options = self.options if cancel is None else {**self.options, "cancel": cancel}
        return Query(store, self.backends, self.pattern, publish=stats.add, anchor=anchor, **options)


#: Most excluded edges to leaves an anchored count takes by inclusion-exclusion (2**k terms).
MAX_LEAF_TERMS = 3


def _leaf_terms(anchor, leaves):
    """``anchor``'s count as a signed sum of anchors with no excluded edge to a leaf of ``leaves``:
    "no pair of T is flipped" is the sum over subsets S of T of (-1)**|S| "every pair of S is", and
    the edges of S, required, cut their leaves' candidates to their pairs' ends. ``[anchor]``
    where it excludes no such edge, or more than :data:`MAX_LEAF_TERMS`."""
    ends = {anchor.u, anchor.w}
    free = [i for i, (u, w, _k) in enumerate(anchor.exclude) if {u, w} & leaves - ends]
    if not 1 <= len(free) <= MAX_LEAF_TERMS:
        return [anchor]
    rest = tuple(x for i, x in enumerate(anchor.exclude) if i not in free)
    return [replace(anchor, exclude=rest, require=tuple(anchor.exclude[i] for k, i in enumerate(free) if mask >> k & 1),
                    weight=(-1) ** bin(mask).count("1"))
            for mask in range(1 << len(free))]


def _unpinned(anchor):
    """``anchor``'s count as a signed sum of anchors that exclude fewer edges: its matches whose
    excluded edges T are all unchanged are its matches with T ignored, less, for each edge e_j of
    T, those whose pair at e_j is changed and at no edge before e_j in T is (the first such edge
    of each match). The first term leaves T's vertices free to be factored; the others require
    two changed pairs, where few matches are (and are not split again: 1 + |T| queries)."""
    t = anchor.exclude
    return [replace(anchor, exclude=())] + [
        replace(anchor, exclude=t[:j], require=anchor.require + (t[j],), weight=-anchor.weight, unpin=False)
        for j in range(len(t))]


def _edges(store, pattern, strict):
    """(u, w, label id, direction) of each pattern edge on ``store``, or None where a label of the
    pattern is not the store's (a PatternError where ``strict``)."""
    for v in pattern.vertices:
        if v.label is not None and store.vertex_label_id(v.label) is None:
            if strict:
                raise unknown_label("vertex", v.label, store.label_names("vertex"))
            return None
    out = []
    for e in pattern.edges:
        lid = ANY_LABEL if e.label is None else store.edge_label_id(e.label)
        if lid is None:
            if strict:
                raise unknown_label("edge", e.label, store.label_names("edge"))
            return None
        out.append((e.src, e.dst, lid, "out" if e.directed else "both"))
    # Edges to leaves last: a leaf no earlier edge's filter reads is counted, not joined.
    degree = np.bincount([v for u, w, _l, _d in out for v in (u, w)], minlength=len(pattern.vertices))
    return sorted(out, key=lambda e: min(degree[e[0]], degree[e[1]]) == 1)


class _Stats:
    """The stats of the anchored queries, summed (their device, and their number)."""

    def __init__(self):
        self.sums, self.n = {}, 0
        self.unpinned = 0       # anchored counts given back past their work (:func:`_unpinned`)

    def add(self, stats):
        self.n += 1
        for k, v in stats.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                self.sums[k] = self.sums.get(k, 0) + v
            else:
                self.sums.setdefault(k, v)

    def total(self, symmetry=1):
        """The sums; ``symmetry``: the |H| the anchored counts shared (not a sum)."""
        return {**self.sums, "anchored_queries": self.n, "anchors_unpinned": self.unpinned, "symmetry": symmetry}
