"""Query planning: resolve a pattern against a store, filter, and order.

* Labels of the pattern are resolved to the store's label ids; a label the
  store does not have means the query has no match.
* Filtering (§3.1) gives each pattern vertex its candidate set C(u): the
  vertex label, the degree per (edge label, direction) and the signature
  test, computed segment by segment over the signature buckets and held as
  a bitset.
* Ordering is Algorithm 1: start at argmin |C(u)| / deg(u); then take the
  connected vertex of least score, where joining u_c multiplies the score of
  each neighbour u' by freq(label(u_c u')).
* Each join step lists its linking edges with the least frequent first
  (e0 of Algorithm 3).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..partition import signatures
from ..pattern import Pattern
from ..storage.format import ANY_LABEL
from .stream import neighbour_lists

_FLIP = {"out": "in", "in": "out", "both": "both"}


@dataclass(frozen=True)
class Link:
    """A linking edge of a join step, seen from the matched vertex ``other``."""

    other: int          # pattern vertex already matched
    label_id: int       # store edge label id, or ANY_LABEL
    direction: str      # out / in / both, from ``other`` towards the new vertex
    edges: int          # size of the partition: the frequency used to order links


@dataclass
class Step:
    vertex: int
    links: list[Link]
    conflicts: list[int] = field(default_factory=list)  # matched vertices that may collide with this one


@dataclass
class QueryPlan:
    pattern: Pattern
    empty: bool                      # a label is unknown: no match at all
    order: list[int]
    steps: list[Step]
    candidates: list                 # bitset (uint32 words) per pattern vertex
    candidate_counts: list[int]
    injective: bool


def _incident(pattern: Pattern, edge_ids):
    """(vertex, other, label, direction seen from vertex) for both ends of each edge."""
    for e in pattern.edges:
        lab = edge_ids[e]
        if e.directed:
            yield e.src, e.dst, lab, "out"
            yield e.dst, e.src, lab, "in"
        else:
            yield e.src, e.dst, lab, "both"
            yield e.dst, e.src, lab, "both"


def make_plan(store, pattern: Pattern, backend, injective=True, refine_rounds=2) -> QueryPlan:
    """Resolve, filter and order ``pattern`` on ``store``."""
    n = len(pattern.vertices)
    vlabel = []
    empty = False
    for v in pattern.vertices:
        if v.label is None:
            vlabel.append(None)
        else:
            lid = store.vertex_label_id(v.label)
            empty |= lid is None
            vlabel.append(lid)
    edge_ids = {}
    for e in pattern.edges:
        if e.label is None:
            edge_ids[e] = ANY_LABEL
        else:
            lid = store.edge_label_id(e.label)
            empty |= lid is None
            edge_ids[e] = lid
    if empty:
        return QueryPlan(pattern, True, [], [], [], [], injective)

    inc = list(_incident(pattern, edge_ids))
    degree_masks = {}
    cand = [_candidates(store, backend, u, vlabel, inc, injective, degree_masks) for u in range(n)]
    bits = [c[0] for c in cand]
    for _ in range(refine_rounds):
        bits = _refine(store, backend, bits, inc)
    counts = [int(backend.popcount(b)) for b in bits]
    order = _order(store, pattern, inc, counts)
    steps = []
    joined = [order[0]]
    for u in order[1:]:
        links = []
        for (a, b, lab, direction) in inc:
            if b == u and a in joined:
                p = store.partition(lab, direction)
                links.append(Link(a, lab, direction, p.edges))
        links.sort(key=lambda k: (k.edges, joined.index(k.other)))
        conflicts = []
        if injective:
            for w in joined:
                both = bits[w] & bits[u]
                if bool(backend.xp.any(both)):
                    conflicts.append(w)
        steps.append(Step(u, links, conflicts))
        joined.append(u)
    return QueryPlan(pattern, False, order, steps, bits, counts, injective)


def _candidates(store, backend, u, vlabel, inc, injective, degree_masks):
    """C(u) as a bitset over all data vertices, and its size."""
    xp = backend.xp
    n = store.n_vertices
    # Degree requirements per (label, direction): distinct pattern neighbours.
    need = {}
    pairs = []
    seen_undirected = set()
    for (a, b, lab, direction) in inc:
        if a != u:
            continue
        need[(lab, direction)] = need.get((lab, direction), 0) + 1
        # Signature keys are sound only for labeled, directed (or undirected-store) edges to labeled vertices.
        if lab != ANY_LABEL and vlabel[b] is not None:
            if store.undirected:
                # u->w and w->u land on one stored undirected edge: count w once.
                if (lab, b) not in seen_undirected:
                    seen_undirected.add((lab, b))
                    pairs.append((lab, signatures.UNDIRECTED, vlabel[b]))
            elif direction != "both":
                pairs.append((lab, signatures.OUT if direction == "out" else signatures.IN, vlabel[b]))
    qsig = signatures.query_signature(vlabel[u], pairs, store.signature_bits, store.label_bits, injective)
    cols = store.bucket_columns
    mask = xp.ones(n, dtype=bool)
    for start, count, seg in store.vertex_segments():
        labels = (backend.store_array((store.path, "labels", seg), store.vertex_labels(seg))
                  if vlabel[u] is not None else None)
        part = mask[start:start + count]
        for b in range(store.n_buckets):
            q = qsig[b * cols:(b + 1) * cols]
            if not q.any() and labels is None:
                continue
            words = ([backend.store_array((store.path, "sig", seg, b, c), col)
                      for c, col in enumerate(store.signature_columns(seg, b))] if q.any() else [])
            backend.signature_filter(part, words, q if q.any() else q[:0], labels, vlabel[u])
            labels = None           # the label test is done once per segment
        if labels is not None:
            backend.signature_filter(part, [], qsig[:0], labels, vlabel[u])
    for (lab, direction), k in need.items():
        k = k if injective else 1
        has = degree_masks.get((lab, direction, k))
        if has is None:     # vertices with at least k l-neighbours in this direction
            p = store.partition(lab, direction)
            has = xp.zeros(n, dtype=bool)
            for bid in p.idx_batches:
                v, d = store.index_batch(bid)
                v = backend.store_array((store.path, "index-v", bid), v)
                d = backend.store_array((store.path, "index-d", bid), d)
                has[v[d >= k]] = True
            degree_masks[(lab, direction, k)] = has
        mask &= has
    return backend.pack_bits(mask), int(mask.sum())


def _refine(store, backend, bits, inc):
    """One round of neighbourhood refinement of the candidate bitsets.

    v stays in C(u) only if, for every pattern edge (u, u') of label l, v has
    an l-neighbour (in that direction) in C(u'). The neighbour lists of C(u)
    are read through the PCSR of the segments that hold them, streamed in
    order. Sound for isomorphism and homomorphism alike.
    """
    xp = backend.xp
    new = list(bits)
    by_list = {}
    for (a, b, lab, direction) in inc:          # read each N(C(a), l) once for all its edges
        by_list.setdefault((a, lab, direction), []).append(b)
    for (a, lab, direction), others in by_list.items():
        ids = backend.bits_to_ids(new[a], store.n_vertices)
        if ids.size == 0:
            continue
        p = store.partition(lab, direction)
        found = xp.zeros((len(others), ids.size), dtype=bool)
        for lo, hi, nb, owner in neighbour_lists(store, backend, p, ids):
            for j, b in enumerate(others):
                ok = backend.test_bits(new[b], nb)
                found[j, lo:hi] |= backend.bincount(owner[ok], hi - lo) > 0
        keep = found.all(axis=0)
        mask = xp.zeros(store.n_vertices, dtype=bool)
        mask[ids[keep]] = True
        new[a] = backend.pack_bits(mask)
    return new


def _order(store, pattern, inc, counts):
    n = len(pattern.vertices)
    deg = np.zeros(n)
    for (a, _b, _lab, _d) in inc:
        deg[a] += 1
    score = np.array([counts[u] / max(deg[u], 1) for u in range(n)], dtype=float)
    total = max(store.n_edges, 1)
    order = [int(np.argmin(score))]
    adjacent = {u: set() for u in range(n)}
    for (a, b, lab, direction) in inc:
        adjacent[a].add((b, lab))
    for (b, lab) in adjacent[order[0]]:
        score[b] *= _freq(store, lab, total)
    while len(order) < n:
        frontier = sorted({b for u in order for (b, _l) in adjacent[u]} - set(order))
        uc = min(frontier, key=lambda u: (score[u], u))
        order.append(uc)
        for (b, lab) in adjacent[uc]:
            score[b] *= _freq(store, lab, total)
    return order


def _freq(store, lab, total):
    if lab == ANY_LABEL:
        return 1.0
    return float(store.edge_label_freq[lab]) / total
