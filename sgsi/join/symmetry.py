"""Symmetry breaking for counts: the pattern's automorphisms count once, then multiply.

A subgroup H of the labeled pattern's automorphism group acts freely on the
embeddings (an injective match composed with a non-trivial automorphism is
another match), so the embeddings number |H| times those that satisfy
ordering constraints picking one per orbit. The constraints come from a
stabilizer chain along the join order (Grochow and Kellis, RECOMB 2007): for
each joined vertex v, m(v) < m(w) for every other w of v's orbit under the
automorphisms that fix the vertices before v; |H| is the product of those
orbits' sizes. H fixes the plan's factored vertices, which are counted per
row, not joined: only joined vertices are constrained. Each constraint is a
row filter at the level where its later vertex is joined (:class:`OrderFilter`).

An automorphism here keeps vertex labels and, for every ordered pair of
vertices, the edges between them (label, direction, or undirected). Whether
one maps v to w and fixes a set is found by a backtracking search over the
pattern's vertices (pattern-sized, not data-sized), with colours from
refinement; past :data:`MAX_NODES` search nodes the chain stops where it is
(fewer constraints: still exact).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

#: Search nodes the automorphism tests of one plan may take in all.
MAX_NODES = 200_000


@dataclass(frozen=True)
class OrderFilter:
    """Keep the rows with m(u) < m(w) (dense ids); ``level``: where both are joined."""

    level: int
    u: int
    w: int

    def mask(self, xp, chunk):
        return chunk[self.u] < chunk[self.w]


def broken(plan, given=None):
    """``plan`` (a count's, injective) with the ordering constraints of its joined vertices as
    row filters and ``symmetry`` = |H|: its engine counts one embedding of each orbit.
    ``given``: (pairs, |H|) of :func:`of_plan` for another plan of the query (a sharded one's
    tasks all take their driver's, whose vertices they join)."""
    if plan.empty or not plan.injective:
        return plan
    pairs, size = of_plan(plan) if given is None else given
    if size == 1:
        return plan
    return replace(plan, row_filters=list(plan.row_filters) + filters(pairs, plan.order), symmetry=size)


def of_plan(plan):
    """(pairs, |H|) of :func:`constraints` for ``plan``'s joined vertices, its factored ones fixed."""
    if plan.empty or not plan.injective:
        return [], 1
    core = plan.order[:len(plan.order) - plan.factored]
    return constraints(plan.pattern, core, plan.order[len(core):])


def constraints(pattern, order, fixed):
    """([(v, w), ...] meaning m(v) < m(w), |H|) for the joined vertices ``order`` (in join order)
    with the vertices ``fixed`` (the factored ones) fixed by H."""
    rel = _relations(pattern)
    colour = _colours(pattern, rel)
    search = _Search(rel, colour, [v.label for v in pattern.vertices])
    pinned = set(fixed)
    pairs, size = [], 1
    for v in order:
        orbit = [v]
        for w in order:
            if w in pinned or w == v or colour[w] != colour[v] or search.labels[w] != search.labels[v]:
                continue
            found = search.maps(pinned, v, w)
            if found is None:           # out of search budget: the chain stops here
                return pairs, size
            if found:
                orbit.append(w)
        pairs += [(v, w) for w in orbit[1:]]
        size *= len(orbit)
        pinned.add(v)
    return pairs, size


def filters(pairs, order):
    """The :class:`OrderFilter` of each constraint, at the level of its later vertex in ``order``."""
    pos = {u: i for i, u in enumerate(order)}
    return [OrderFilter(max(pos[v], pos[w]), v, w) for v, w in pairs]


def _relations(pattern):
    """``rel[a][b]``: the sorted (label, kind) of the edges between a and b seen from a (kind:
    ``out``, ``in`` or ``both``); pairs without edges are absent."""
    rel = [dict() for _ in pattern.vertices]
    for e in pattern.edges:
        label = "" if e.label is None else "L" + e.label       # any label differs from every label
        a, b = (("out", "in") if e.directed else ("both", "both"))
        rel[e.src].setdefault(e.dst, []).append((label, a))
        rel[e.dst].setdefault(e.src, []).append((label, b))
    return [{b: tuple(sorted(x)) for b, x in r.items()} for r in rel]


def _colours(pattern, rel):
    """Colour refinement: vertices an automorphism can swap have equal colours."""
    colour = [hash(("" if v.label is None else "L" + v.label,)) for v in pattern.vertices]
    for _ in range(len(colour)):
        new = [hash((colour[a], tuple(sorted((r, colour[b]) for b, r in rel[a].items()))))
               for a in range(len(colour))]
        if len(set(new)) == len(set(colour)):
            return new
        colour = new
    return colour


class _Search:
    """Backtracking tests of automorphisms, sharing :data:`MAX_NODES` between them."""

    def __init__(self, rel, colour, labels):
        self.rel, self.colour, self.labels, self.n = rel, colour, labels, len(labels)
        self.left = MAX_NODES
        self.by_class = {}                  # (colour, label) -> its vertices
        for u in range(self.n):
            self.by_class.setdefault((colour[u], labels[u]), []).append(u)
        # Vertices in an order where each has a placed neighbour where it can (connected patterns).
        seen, self.order = set(), []
        for start in range(self.n):
            stack = [start]
            while stack:
                a = stack.pop()
                if a in seen:
                    continue
                seen.add(a)
                self.order.append(a)
                stack += sorted(rel[a], reverse=True)

    def maps(self, fixed, v, w):
        """Whether an automorphism fixes every vertex of ``fixed`` and maps v to w; None where
        the search budget ran out."""
        phi = {u: u for u in fixed}
        phi[v] = w
        inv = {y: u for u, y in phi.items()}
        if len(inv) < len(phi) or not self._consistent(phi, inv, v):
            return False
        rest = [u for u in self.order if u not in phi]
        try:
            return self._extend(phi, inv, rest, 0)
        except _OutOfBudget:
            return None

    def _consistent(self, phi, inv, a):
        """Whether a's edges to the placed vertices match its image's, both ways."""
        ra, rb = self.rel[a], self.rel[phi[a]]
        for b, x in ra.items():
            if b in phi and rb.get(phi[b]) != x:
                return False
        for y, x in rb.items():
            if y in inv and ra.get(inv[y]) != x:
                return False
        return True

    def _extend(self, phi, inv, rest, i):
        if i == len(rest):
            return True
        self.left -= 1
        if self.left < 0:
            raise _OutOfBudget
        a = rest[i]
        for y in self.by_class[(self.colour[a], self.labels[a])]:
            if y in inv:
                continue
            phi[a], inv[y] = y, a
            if self._consistent(phi, inv, a) and self._extend(phi, inv, rest, i + 1):
                return True
            del phi[a], inv[y]
        return False


class _OutOfBudget(Exception):
    pass
