"""Sharding a query by the candidates of one or two pattern vertices.

A :class:`Shard` keeps, of the candidate set C(u) of each of its pattern
vertices u, the vertices whose ids lie in a range. The ranges of one vertex
tile ``[0, n)``, so they partition C(u) whatever C(u) is; the shards of a
query take every combination of one range per vertex, so they partition
its matches (a match maps each pattern vertex to one data vertex). The
shards' counts therefore sum to the query's, and their rows are the query's
rows, each once, whatever chunking or replanning each shard's engine does:
every plan of a shard (``make_plan(shard=...)``, the refined one too)
restricts the sets, and keeps the order of the plan that was split (a
restricted vertex would otherwise move to the front and change the join,
at worst tenfold on yeast).

:func:`split` cuts the refined plan by the first vertex of its order with a
few candidates, and by its widest vertex: the work of a hard query often
sits under one candidate of the first vertices (on many yeast queries) and
spreads over those of the widest. Each vertex's ids are cut into ranges of
about equal estimated cost (a candidate costs ``(1 + its degree over u's
pattern edges)**2``: a hub gets a range of its own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .sets import carried
from .stream import degree_index

#: Fewest candidates (refined) a second vertex needs to be cut by.
MIN_CANDIDATES = 4
#: Partial matches a task gets at least when a query is split by them.
SEED_ROWS_PER_TASK = 16
#: Partial matches a task gets where the driver can: it joins deeper until it has these, so that
#: a heavy partial match splits over the tasks (at 16 a task, one held 27% of a query's work).
AMPLE_ROWS_PER_TASK = 512
#: Groups of partial matches a worker gets at least where a count's are grouped (:func:`split_rows`'s
#: ``group_by``); with fewer, the rows are shuffled as a match's.
GROUPS_PER_WORKER = 2
#: How many times the partial matches of the depth taken a count's seeds may grow where the driver
#: joins deeper for groups (:func:`split_rows`): past that, the groups it has.
DEEPER_ROWS = 8
#: Most partial matches the driver makes to split a query by them (else it cuts candidate ranges).
MAX_SEED_ROWS = 1 << 20
#: Where a query is split by partial matches for ``workers`` workers, its tasks come in rounds of
#: one a worker, each round's tasks this many times smaller than the round's before (the last
#: tasks are small, so the workers finish together; 1: all of one size).
ROUND_RATIO = 2.0


@dataclass(frozen=True)
class Shard:
    """C(v) restricted to ids in [lo, hi) for each (v, lo, hi) of ``ranges``; ``index``: the task's number."""

    ranges: tuple
    index: int = 0
    cost: float = 0.0
    order: tuple = ()       # the order of the plan split: every plan of the shard keeps it
    seed: tuple = ()        # ((u, int32 column), ...): partial matches of the order's first vertices
    symmetry: tuple = ((), 1)   # a count's (pairs m(v) < m(w), |H|): every task joins one per orbit

    def apply(self, xp, bits):
        """The candidate bitsets ``bits`` (a list, uint32 words) with this shard's restrictions."""
        bits = list(bits)
        for v, lo, hi in self.ranges:
            bits[v] = restrict(xp, bits[v], lo, hi)
        return bits


@dataclass(frozen=True)
class SplitSets:
    """The refined candidate bitsets (host uint32 words, a pattern vertex each) a query was split
    on: sent to every worker once, so that its tasks need not filter and refine again."""

    bits: tuple


def restrict(xp, bits, lo, hi):
    """``bits`` (bit ``v & 31`` of word ``v >> 5`` is vertex v) without the ids outside [lo, hi)."""
    start = xp.arange(bits.size, dtype=xp.int64) * 32
    low = xp.clip(lo - start, 0, 32).astype(xp.uint64)
    high = xp.clip(hi - start, 0, 32).astype(xp.uint64)
    one = xp.ones_like(high)
    mask = ((one << high) - one) ^ ((one << low) - one)           # bits [low, high) of each word
    return bits & mask.astype(xp.uint32)


def kept_to_end(plan):
    """The vertices of a count's core whose columns it carries from their step to its end: rows
    that differ in one of them never merge (:mod:`.merge`)."""
    steps = plan.steps
    keep = carried(plan, steps)
    return {u for j, u in enumerate(plan.order[:len(steps) + 1]) if all(u in keep[k] for k in range(j, len(steps)))}


def _grouped(key, n):
    """(a permutation of ``n`` rows putting the rows equal on the columns ``key`` together, the
    groups shuffled with a fixed seed; the groups' starts in it, with ``n`` last). No column:
    one group."""
    if not key:
        return np.arange(n), np.array([0, n])
    group, card = np.zeros(n, dtype=np.int64), 1
    for col in key:                 # mixed radix of the columns' ranks, renumbered before int64 could overflow
        values, rank = np.unique(col, return_inverse=True)
        if card * values.size >= 1 << 62:
            group = np.unique(group, return_inverse=True)[1].reshape(-1)
            card = int(group.max()) + 1
        group, card = group * values.size + rank.reshape(-1), card * values.size
    group = np.unique(group, return_inverse=True)[1].reshape(-1)
    shuffled = np.random.default_rng(0).permutation(int(group.max()) + 1)[group]
    perm = np.argsort(shuffled, kind="stable")
    ranks = shuffled[perm]
    starts = np.flatnonzero(np.concatenate([[True], ranks[1:] != ranks[:-1], [True]]))
    return perm, starts


def split_rows(plan, prefix, tasks: int, workers=None, group_by=()):
    """``tasks`` shards of ``plan`` (a refined one) by the partial matches of its order's first
    vertices, or None where those are too few or too many to cut.

    ``prefix(depth, seed)`` yields the partial matches of the first ``depth + 1`` vertices in
    host chunks, joined from ``seed``, those of the first ``depth`` (``()``: from the roots;
    :meth:`~sgsi.join.engine.Engine.prefix`); the least depth that gives
    :data:`AMPLE_ROWS_PER_TASK` a task is taken, else the deepest with
    :data:`SEED_ROWS_PER_TASK` a task and at most :data:`MAX_SEED_ROWS` in all, at most the
    core's last but one, so that every task joins. The rows are shuffled (with a fixed seed)
    before they are cut into slices (:func:`row_cuts`, for ``workers``): a heavy vertex's rows
    are spread over the tasks. Each match extends exactly one partial match, so the tasks
    partition the matches. ``group_by``: vertices (a count's :func:`kept_to_end`) whose values
    each go to one task: the rows equal on those of them that are seeded stay together (the
    groups shuffled, each cut moved to a group's start), so that the rows a task's steps merge
    are not merged again in another task's (one yeast count, 4 tasks: 3.2 s of tasks against 1.3
    s in one process, its deep levels' merged rows the same in every task). Under
    :data:`GROUPS_PER_WORKER` groups a worker, the driver joins deeper for more (at most
    :data:`DEEPER_ROWS` times the rows), else takes the groups it has, fewer tasks; one group:
    shuffled."""
    core = len(plan.order) - plan.factored
    rows, best = (), None           # ((u, column), ...) of the last depth; (rows, n) of the deepest that cuts
    for depth in range(1, core - 1):
        rows, n = _joined(plan, prefix, depth, rows, MAX_SEED_ROWS)
        if n == 0:
            return []
        if rows is None:
            break
        if n >= SEED_ROWS_PER_TASK * tasks:
            best = (rows, n)
            if n >= AMPLE_ROWS_PER_TASK * tasks:
                break
    if best is None:
        return None
    rows, n = best
    grouped = group_by and _groups(plan, prefix, rows, n, group_by,
                                   GROUPS_PER_WORKER * min(workers or tasks, tasks), core)
    if grouped:
        rows, n, (perm, starts) = grouped
    else:                           # a match's, or a count's of one group
        perm, starts = np.random.default_rng(0).permutation(n), None
    rows = [(u, c[perm]) for u, c in rows]
    cuts = row_cuts(n, tasks, workers)
    if starts is not None:          # each cut at the group start nearest it
        at = np.clip(np.searchsorted(starts, cuts), 1, starts.size - 1)
        cuts = np.where(np.asarray(cuts) - starts[at - 1] < starts[at] - np.asarray(cuts), starts[at - 1],
                        starts[at]).tolist()
    bounds = [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
    return [Shard((), i, (b - a) / n, tuple(plan.order), tuple((u, c[a:b]) for u, c in rows))
            for i, (a, b) in enumerate(bounds)]


def _joined(plan, prefix, depth, rows, most):
    """(the partial matches of the first ``depth + 1`` vertices joined from ``rows``, those of
    the first ``depth``, as ((u, column), ...); their number), or (None, n) past ``most``."""
    chunks, n = [], 0
    for chunk in prefix(depth, rows):
        chunks.append(chunk)
        n += int(next(iter(chunk.values())).size)
        if n > most:
            return None, n
    return tuple((u, np.concatenate([c[u] for c in chunks]) if chunks else np.zeros(0, np.int32))
                 for u in plan.order[:depth + 1]), n


def _groups(plan, prefix, rows, n, group_by, enough, core):
    """(rows, n, their groups by the seeded vertices of ``group_by``): ``rows``' where they have
    ``enough`` groups, else those of the least depth past them that has, within
    :data:`DEEPER_ROWS` times ``n`` rows (and :data:`MAX_SEED_ROWS`) and the core's last but one,
    else ``rows``' again; None where that is one group."""
    first = (rows, n, _grouped([c for u, c in rows if u in group_by], n))
    if first[2][1].size - 1 >= enough:
        return first
    most = min(MAX_SEED_ROWS, DEEPER_ROWS * n)
    for depth in range(len(rows), core - 1):
        rows, n = _joined(plan, prefix, depth, rows, most)
        if rows is None or n == 0:
            break
        groups = _grouped([c for u, c in rows if u in group_by], n)
        if groups[1].size - 1 >= enough:
            return rows, n, groups
    return first if first[2][1].size - 1 >= 2 else None


def row_cuts(n: int, tasks: int, workers=None) -> list:
    """The bounds of ``tasks`` slices of ``n`` rows, the largest first: in rounds of ``workers``
    slices (None: one round), each round's :data:`ROUND_RATIO` times smaller than the one before."""
    workers = min(workers or tasks, tasks)
    sizes = ROUND_RATIO ** -(np.arange(tasks) // workers).astype(np.float64)
    return np.round(np.concatenate([[0.0], np.cumsum(sizes)]) * n / sizes.sum()).astype(np.int64).tolist()


def split(store, plan, backend, tasks: int) -> list[Shard]:
    """About ``tasks`` shards of ``plan`` (a refined one), the most costly first; ``backend``
    computes on the host."""
    levels = _levels(plan)
    per = max(1, round(tasks ** (1 / len(levels))))
    cuts = [_ranges(store, plan, backend, u, per) for u in levels]
    shards = []
    for combo in _product(cuts):
        shards.append(Shard(tuple((u, lo, hi) for u, (lo, hi, _c) in zip(levels, combo)), len(shards),
                            math.prod(c for _lo, _hi, c in combo), tuple(plan.order)))
    return sorted(shards, key=lambda s: -s.cost)


def _levels(plan):
    """The vertices to cut by: the first of the order with :data:`MIN_CANDIDATES` candidates or more,
    and the one with the most (a count's factored vertices are left whole: cut, they would be
    joined instead of counted)."""
    core = plan.order[:len(plan.order) - plan.factored]
    first = [u for u in core if plan.candidate_counts[u] >= MIN_CANDIDATES][:1]
    widest = max(core, key=lambda u: (plan.candidate_counts[u], -core.index(u)))
    return first + [widest] if first and first[0] != widest else [widest]


def _product(cuts):
    out = [()]
    for ranges in cuts:
        out = [p + (r,) for p in out for r in ranges]
    return out


def _ranges(store, plan, backend, u, parts):
    """At most ``parts`` (lo, hi, share of the cost) tiling [0, n), of about equal cost of C(u)."""
    n = store.n_vertices
    ids = backend.to_host(backend.bits_to_ids(plan.candidates[u], n, plan.candidate_counts[u])).astype(np.int64)
    deg = np.zeros(ids.size, dtype=np.float64)
    for lab, direction in {(lab, d) for a, _b, lab, d in plan.incident if a == u}:
        for bid in store.partition(lab, direction).idx_batches:
            v, d = (backend.to_host(x) for x in degree_index(store, backend, bid))
            at = np.searchsorted(ids, v)
            hit = at < ids.size
            hit[hit] = ids[at[hit]] == v[hit]
            np.add.at(deg, at[hit], d[hit])
    cum = np.cumsum((1.0 + deg) ** 2)
    total = float(cum[-1]) if cum.size else 0.0
    cuts = np.searchsorted(cum, total * np.arange(1, parts) / parts, side="right")
    cuts = np.unique(cuts[(cuts > 0) & (cuts < ids.size)])
    bounds = np.concatenate([[0], ids[cuts], [n]]).astype(np.int64)
    ends = np.concatenate([cuts, [ids.size]]).astype(np.int64)
    costs = np.diff(np.concatenate([[0.0], cum[ends - 1]])) / total if total else np.ones(1)
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), costs.tolist()))
