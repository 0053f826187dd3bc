"""Join orders from sampled run-time counts (adaptive ordering).

Algorithm 1 scores a vertex by its candidate count over its degree, times the
frequencies of its edges into the matched part: on hard queries that guess is
off by orders of magnitude, and which of the usual orders (Algorithm 1's,
least candidates first, most back edges first) is best changes from query to
query. A query whose refined plan has run past ``backend.reorder_work``
(:class:`~sgsi.join.engine.Engine`) runs the join on samples instead:

* level by level, at most :data:`SAMPLE_ROWS` partial matches of the order's
  prefix, drawn uniformly from the extensions of the level before, each
  standing for ``weight`` partial matches (the prefix's estimated number over
  the rows drawn);
* each vertex that may come next (adjacent to the prefix) is counted by the
  engine's count-only step over those rows, exactly for the sample: the
  estimated partial matches with it joined are ``weight`` times that count,
  and the step's estimated work (entries read and rows) ``weight`` times the
  engine's work over the sample;
* the greedy order takes the vertex with the fewest partial matches next; an
  order's cost is the estimated work of its steps; a count's, of its core's
  steps and of each factored vertex's count over the core's rows, a subtree's
  root joined to them and its leaves counted over those (one leaf: at most a
  block over the core's rows per collision, as the engine weights it; an order
  whose core makes more rows pays for them in every factored count: costed
  up to the first factored vertex only, 5 of 37 reordered yeast queries ran
  1.3-2.1x slower), over the order of its core's symmetry group where the
  count breaks it;
* a count costs each of the two orders again with its *expanding* vertices
  (those whose sampled step made more partial matches than it took) moved to
  its end, no two adjacent, where the plan then factors them
  (:meth:`_Sampler.deferred`): such a vertex prunes little where it was, and
  counted per row of the core it multiplies no row (on 44 of yeast's slow
  GPU queries 12 cancelled ones finish; one of 32 ran slower, 0.82x); and
  again on the moved order's own levels (:data:`DEFER_ROUNDS`: on 125 slow
  CPU queries 8 more finish within 10 s, one fewer); each way twice, the
  vertices moved as factored by narrow subtrees only and then by wide ones
  too (:func:`~sgsi.join.plan._factored_vertices`): the wide rule alone took
  one greedy path away from a 14x cheaper order (yeast's sparse_16_188).

:func:`choose` estimates the plan's order and the greedy one from the same
first vertex (and, for a count, both with their expanding vertices last); the
query starts again on the cheapest where it costs at most a :data:`GAIN`-th
of what is left of the plan's (on yeast, a query that had run past its
plan's estimate started again and took 1.4x as long). The
draws have a fixed seed: a query plans the same each time. Leaves (one
neighbour) stay out of the search, after the rest in the plan's order: they
prune nothing, and a count factors them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from . import counting, symmetry
from .plan import QueryPlan, _factored_vertices, _step

#: Partial matches drawn at each level of a sampled join (the search's time is the steps'
#: launches more than their rows: 4x the rows took 1.1-1.4x the time on yeast's slow queries).
SAMPLE_ROWS = 1024
#: Most extensions of the drawn rows a level materialises to draw the next level's from (past
#: it, fewer parent rows are extended: the level's estimate is the count over all of them).
MATERIALISE_ROWS = 1 << 16
#: The random draws' seed.
SEED = 41
#: How many times cheaper the greedy order has to be estimated for a query to take it.
GAIN = 2.0
#: Rounds of moving expanding vertices last, each on the levels of the order the last one made.
DEFER_ROUNDS = 2
#: Streams of draws the greedy path is sampled on (each its own path and deferrals), the second
#: only where the work left by the cheapest order found is ``EXPLORE`` times the search's
#: ``least`` (twice ``search_work``) or more.
STREAMS = 2
EXPLORE = 8


@dataclass
class Choice:
    """The cheapest order searched and its estimated cost (the work of its steps), with the plan's."""

    order: list
    cost: float
    planned_cost: float
    tried: int              # sampled steps run (counts and materialisations)
    seconds: float
    switch: bool            # whether the query starts again on ``order``
    deferred: int = 0       # vertices ``order`` moved to its end to be counted, not joined

    @property
    def stats(self) -> dict:
        """The search in ``last_stats["order_search"]``."""
        return {"planned_cost": self.planned_cost, "greedy_cost": self.cost, "steps": self.tried,
                "seconds": round(self.seconds, 4), "switched": self.switch, "deferred": self.deferred}


def choose(store, backend, plan: QueryPlan, budget: int, count: bool, done: float = 0.0,
           least: float = 0.0, symmetric: bool = False, seed=(), keep=(), ahead=None) -> Choice:
    """The greedy order from ``plan``'s first vertex, and for a count both it and ``plan``'s with
    their expanding vertices last: the cheapest of them by its sampled cost, and the cost of
    ``plan``'s order (over the plan's candidate sets; ``count``: a count's), ``done`` of whose
    work has run. A query switches where the cheapest order's whole cost is a :data:`GAIN`-th or
    less of what is left of its own; no order is searched where what is left by the estimate is
    ``least`` or less. ``symmetric``: the count breaks its core's symmetry (each
    order's cost is then divided by the order of its core's group, :mod:`.symmetry`).
    ``seed``: the plan joins from these partial matches of its first vertices ((vertex, host
    ids), as the engine's ``seed``: an anchored query's pairs), which every order keeps first;
    ``keep``: vertices the plan joins, never factors (its row filters read them). Where the cheapest
    order found leaves :data:`EXPLORE` times ``least`` or more, the greedy path and its deferrals
    are sampled again on a second stream of draws (:data:`STREAMS`) and weighed with the first's.
    ``ahead`` (:class:`Ahead`): started once the first order found leaves the search undecided
    (not in its ``seconds``), dropped once an order is found that it will switch to."""
    start = time.perf_counter()
    sampler = _Sampler(store, backend, plan, budget, symmetric, seed, keep)
    core = [u for u in plan.order if u not in sampler.leaves]
    rest = [u for u in plan.order if u in sampler.leaves]
    planned_levels = sampler.levels(core)
    planned = sampler.cost(core, planned_levels, rest, count)
    left = planned - done
    if left <= least:
        return Choice(core + rest, planned, planned, sampler.tried, time.perf_counter() - start, False)
    options, costed = [], set()
    tried = 0
    beside = _Beside(ahead, left)

    def add(option):
        options.append(option)
        beside.found(option[0])
    for stream in range(STREAMS):
        if stream:
            # The greedy path again on other draws, where the work left is many searches' worth:
            # an order's estimate varies up to 10x with the draws, and each path weighs others.
            if least <= 0 or min(left, min(o[0] for o in options)) < EXPLORE * least:
                break
            tried += sampler.tried
            sampler = _Sampler(store, backend, plan, budget, symmetric, seed, keep, SEED + stream)
        order, levels = sampler.greedy(core[0], core)
        if tuple(order) not in costed:
            costed.add(tuple(order))
            add((sampler.cost(order, levels, rest, count), 0, order))
        if not count:
            continue
        # each order with its expanding vertices counted last, where a count factors them (the
        # plan's own on the first stream's levels only)
        bases = [(order, levels)] if stream else [(core, planned_levels), (order, levels)]
        for base, known in bases:
            # The vertices moved as factored by narrow subtrees, then by wide ones too: each a
            # greedy path, which the wide rule alone may take away from a cheaper order.
            for wide in (False, True):
                at, at_levels = base, known
                for _round in range(DEFER_ROUNDS):     # again on the moved order's own levels
                    late = sampler.deferred(at, at_levels, rest, wide)
                    moved = [u for u in at if u not in late] + late
                    if not late or moved == at:
                        break
                    moved_levels = sampler.levels(moved, at, at_levels)
                    if tuple(moved) not in costed:
                        costed.add(tuple(moved))
                        add((sampler.cost(moved, moved_levels, rest, count), len(late), moved))
                    at, at_levels = moved, moved_levels
    tried += sampler.tried
    cost, deferred, order = min(options, key=lambda o: o[0])
    return Choice(order + rest, cost, planned, tried, time.perf_counter() - start - beside.seconds,
                  cost * GAIN <= left, deferred)


class Ahead:
    """What runs beside an order search (:func:`choose`'s ``ahead``), on the plan's order: begun
    where the first order found leaves the search undecided, dropped once it finds an order it
    will switch to."""

    def start(self):
        pass

    def drop(self):
        pass


class _Beside:
    """:func:`choose`'s use of an :class:`Ahead` as it finds orders: no start where the first one
    decides a switch already (on yeast most switches are the greedy path's), and no drop after
    the switch is decided (``seconds``: ``start``'s own time, not the search's)."""

    def __init__(self, ahead, left):
        self.ahead, self.left = ahead, left
        self.started = self.decided = ahead is None
        self.seconds = 0.0

    def found(self, cost):
        """An order of estimated ``cost`` was found."""
        if self.decided:
            return
        if cost * GAIN <= self.left:            # the query switches: to this order or a cheaper one
            self.decided = True
            if self.started:
                self.ahead.drop()
        elif not self.started:
            self.started = True
            begun = time.perf_counter()
            self.ahead.start()
            self.seconds += time.perf_counter() - begun


class _Sampler:
    """Sampled joins over one plan's candidate sets."""

    def __init__(self, store, backend, plan, budget, symmetric=False, seed=(), keep=(), draws=SEED):
        self.store, self.backend, self.plan, self.budget = store, backend, plan, budget
        self.symmetric = symmetric and plan.injective     # costs over the core's symmetry group
        self.seed = tuple(seed)
        self.keep = frozenset(keep) | {u for u, _ids in self.seed}     # never factored nor moved
        n = len(plan.pattern.vertices)
        self.adj = [set() for _ in range(n)]
        for (a, b, _lab, _d) in plan.incident:
            self.adj[a].add(b)
        core_size = sum(len(a) > 1 for a in self.adj)
        self.leaves = {u for u in range(n) if len(self.adj[u]) == 1} if core_size > 1 else set()
        self.leaves -= {u for u, _ids in self.seed}
        self.rng = np.random.default_rng(draws)
        self.tried = 0
        self._steps = {}        # (prefix, vertex) -> its Step
        self._plans = {}        # order -> the plan that joins it

    def levels(self, order, like=(), known=()):
        """The sampled level of each prefix of ``order`` (none past a level found empty); those of
        the prefix it shares with order ``like`` are taken from ``like``'s levels ``known``."""
        same = 0
        while same < min(len(order), len(like), len(known)) and order[same] == like[same]:
            same += 1
        out = list(known[:same]) or self._first(order)
        level = out[-1]
        for u in order[len(out):]:
            if level.rows is None:      # nothing found: the rest of the order joins nothing
                break
            level = self._next(level, u)
            out.append(level)
        return out

    def greedy(self, start, core):
        """(order, its sampled levels): from ``start``, the vertex of fewest estimated partial
        matches next."""
        out = self._first([start] + [u for u in core if u != start])
        order, level = list(out[-1].order), out[-1]
        while len(order) < len(core) and level.rows is not None:
            frontier = [u for u in core if u not in order and self.adj[u] & set(order)]
            if not frontier:
                break
            counted = [self._count(level, u) for u in frontier]
            i = min(range(len(frontier)), key=lambda k: counted[k][0])
            level = self._next(level, frontier[i], counted[i])
            order.append(frontier[i])
            out.append(level)
        return order + [u for u in core if u not in order], out

    def deferred(self, order, levels, rest, wide=True):
        """Vertices of ``order`` to join last, where a count factors them: those whose step makes
        more partial matches than it takes (most first), no two adjacent, each leaving the
        order's prefix connected and factored with the others (:func:`_factored_vertices`, with
        wide subtrees or not). A vertex counted per row of the core prunes nothing, but its
        matches multiply no row."""
        if len(levels) < len(order) or any(level.rows is None for level in levels):
            return []
        growth = {u: levels[i].estimate / max(levels[i - 1].estimate, 1.0) for i, u in enumerate(order[1:], 1)}
        late = []
        for u in sorted((u for u in order[1:] if growth[u] > 1), key=lambda u: -growth[u]):
            if u in self.keep or self.adj[u] & set(late):
                continue
            trial = sorted(late + [u], key=order.index)
            head = [v for v in order if v not in trial]
            if not all(self.adj[v] & set(head[:i]) for i, v in enumerate(head[1:], 1)):
                continue
            if set(trial) <= _all_factored(*self._factored(head + trial + rest, wide)):
                late = trial
        return late

    def _factored(self, order, wide=True):
        """(the vertices a count's plan on ``order`` counts per row of the core, its subtrees as
        (root, the vertices counted per row of the core and the root))."""
        plan = self.plan
        groups, trees = _factored_vertices(plan.pattern, plan.meets, plan.injective, order, self.keep, wide)
        return [u for g in groups for u in g], [(root, [k for g in kids for k in g]) for root, kids in trees]

    def cost(self, order, levels, rest, count):
        """The estimated work of joining ``order`` (then ``rest``), given its sampled ``levels``:
        a count's steps up to its core, the count of each factored vertex whose neighbours are
        all in the core, over the core's rows, and the work of each subtree over them."""
        if not count:
            return float(sum(level.work for level in levels))
        plan = self.plan
        grouped, trees = self._factored(order + rest)
        factored = _all_factored(grouped, trees)
        core = [u for u in order if u not in factored]
        work = float(sum(level.work for level in levels[:len(core)]))
        last = levels[len(core) - 1] if len(levels) >= len(core) else None
        if last is not None and last.rows is not None:
            for u in grouped:
                if self.adj[u] <= set(core):
                    work += last.weight * self._count(last, u)[1]
            for root, kids in trees:
                work += self._subtree_work(last, root, kids, core)
        if self.symmetric:              # the count joins one embedding an orbit of its core's group
            work /= symmetry.constraints(plan.pattern, core, [u for u in order + rest if u not in core])[1]
        return work

    def _subtree_work(self, last, root, kids, core):
        """The estimated work of counting a subtree over the core's rows (``last``, its drawn
        level): the core's rows extended by ``root``, and each leaf of it counted over those;
        a subtree of one leaf at most a block over the core's rows per core vertex the leaf may
        collide with, as the engine counts it from the root's sets and weights where that pays
        (uncosted, query_dense_16_48's plan was estimated at 4.0e5 of its 1.8e7; costed as
        extended, query_sparse_32_13 kept an order that took 7.6 s, not 0.9)."""
        if not self.adj[root] - set(kids) <= set(core):
            return 0.0
        rooted = self._next(last, root)
        if rooted.rows is None:
            return rooted.work
        leaves = sum(rooted.weight * self._count(rooted, k)[1] for k in kids)
        if len(kids) == 1 and self.adj[kids[0]] == {root} and counting.WEIGHTED_SUBTREES:
            leaves = min(leaves, counting.collisions(self._step(tuple(core) + (root,), kids[0]), root) * rooted.work)
        return rooted.work + leaves

    # -- levels ----------------------------------------------------------------------

    def _first(self, order):
        """The levels of ``order``'s first vertex, or of the seed's vertices (which ``order`` starts
        with): partial matches given, not joined (no work)."""
        if not self.seed:
            return [self._roots(order[0])]
        assert [u for u, _ids in self.seed] == list(order[:len(self.seed)]), "an order keeps its seed first"
        rows = {u: np.asarray(ids, np.int32) for u, ids in self.seed}
        return [self._drawn(tuple(order[:k]), {u: rows[u] for u in order[:k]}, float(_size(rows)), 0.0)
                for k in range(1, len(self.seed) + 1)]

    def _roots(self, u):
        ids = self.backend.to_host(self.backend.bits_to_ids(self.plan.candidates[u], self.store.n_vertices,
                                                           self.plan.candidate_counts[u]))
        return self._drawn((u,), {u: ids.astype(np.int32)}, float(ids.size), float(ids.size))

    def _next(self, level, u, counted=None):
        """The level after ``level`` with ``u`` joined (``counted``: its :meth:`_count`, if known;
        else the rows are extended at once, and counted first only where that passes
        :data:`MATERIALISE_ROWS`: no level of 1,573 on 20 slow yeast queries did)."""
        if level.rows is None:
            return level
        order = level.order + (u,)
        out = None
        if counted is None:
            out, work = self._extended(order, level.rows, MATERIALISE_ROWS)
            counted = (_size(out), work) if out is not None else self._count(level, u)
        count, work = counted
        work *= level.weight
        if count == 0:
            return _Level(order, None, 0.0, 0.0, work)
        estimate = level.weight * count
        if out is None:
            rows = level.rows
            n = _size(rows)
            if count > MATERIALISE_ROWS:    # extend a share of the rows only
                keep = max(1, int(n * MATERIALISE_ROWS / count))
                rows = _take(rows, np.sort(self.rng.choice(n, size=keep, replace=False)))
            out = self._extended(order, rows)[0]
        if _size(out) == 0:
            return _Level(order, None, estimate, 0.0, work)
        return self._drawn(order, out, estimate, work)

    def _extended(self, order, rows, most=None):
        """(``rows`` extended by the last vertex of ``order``, host columns; the step's work),
        None for the columns where they are more than ``most`` rows."""
        self.tried += 1
        engine = self._engine(order, rows)
        chunks, n = [], 0
        for chunk in engine.prefix(len(order) - 1):
            chunks.append(chunk)
            n += _size(chunk)
            if most is not None and n > most:
                return None, engine.work
        if len(chunks) < 2:
            return ({w: chunks[0][w] for w in order} if chunks else
                    {w: np.zeros(0, dtype=np.int32) for w in order}), engine.work
        return {w: np.concatenate([c[w] for c in chunks]) for w in order}, engine.work

    def _drawn(self, order, rows, estimate, work):
        n = _size(rows)
        if n == 0:                      # no candidate: nothing to join
            return _Level(tuple(order), None, 0.0, 0.0, work)
        if n > SAMPLE_ROWS:
            rows = _take(rows, np.sort(self.rng.choice(n, size=SAMPLE_ROWS, replace=False)))
        return _Level(tuple(order), rows, estimate, estimate / _size(rows), work)

    def _count(self, level, u):
        """(extensions of ``level``'s drawn rows by ``u``, the step's work: entries and rows),
        exact over them."""
        self.tried += 1
        engine = self._engine(level.order + (u,), level.rows)
        return engine.count(), engine.work

    def _step(self, prefix, u):
        """The join step of ``u`` after the vertices ``prefix`` (a tuple), built once: each sampled
        count's engine takes the steps of its whole prefix (a third of a search's time, built anew;
        7% looked up step by step)."""
        step = self._steps.get((prefix, u))
        if step is None:
            plan = self.plan
            step = self._steps[(prefix, u)] = _step(self.store, plan.incident, plan.meets, u, [u], list(prefix),
                                                    plan.injective)
        return step

    def _joined(self, order):
        """The plan that joins ``order`` (a tuple), built once, on its prefix's steps."""
        sub = self._plans.get(order)
        if sub is None:
            steps = self._joined(order[:-1]).steps + [self._step(order[:-1], order[-1])] if len(order) > 1 else []
            sub = self._plans[order] = replace(self.plan, order=list(order), steps=steps, factored=0,
                                               leaf_groups=[], subtrees=[], row_filters=[], symmetry=1)
        return sub

    def _engine(self, order, rows):
        from .engine import Engine
        seed = tuple((w, rows[w]) for w in order[:-1])
        return Engine(self.store, self._joined(order), self.backend, self.budget, seed=seed)


@dataclass
class _Level:
    order: tuple
    rows: dict | None       # drawn partial matches (host int32 columns); None: none found
    estimate: float         # estimated partial matches of ``order``
    weight: float           # partial matches each drawn row stands for
    work: float             # estimated work (entries and rows) of the step that made it


def _all_factored(grouped, trees):
    """Every vertex of :meth:`_Sampler._factored`'s groups and subtrees (roots too), as a set."""
    return set(grouped).union(*([root] + kids for root, kids in trees))


def _size(rows):
    return int(next(iter(rows.values())).size)


def _take(rows, idx):
    return {u: c[idx] for u, c in rows.items()}
