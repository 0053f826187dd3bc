"""Query planning: resolve a pattern against a store, filter, and order.

* Labels of the pattern are resolved to the store's label ids; a label the
  store does not have is a PatternError naming the closest ones (a benchmark
  query file's label that the data lacks means no match).
* Filtering (§3.1) gives each pattern vertex its candidate set C(u): the
  vertex label, the degree per (edge label, direction) and the signature
  test, computed segment by segment over the signature buckets and held as
  a bitset. Up to two rounds of neighbourhood refinement follow (not in the paper; see :func:`_refine`):
  on yeast they turn a 12M-row intermediate table into a few thousand.
* Ordering is Algorithm 1: start at argmin |C(u)| / deg(u); then take the
  connected vertex of least score, where joining u_c multiplies the score of
  each neighbour u' by freq(label(u_c u')).
* Each join step lists its linking edges with the least frequent first
  (e0 of Algorithm 3).
* For a count, the pattern's leaves and the last vertices of the order,
  no two adjacent (:func:`_factored_vertices`), go last, and the engine
  multiplies their numbers of matches per row instead of enumerating them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..partition import signatures
from ..pattern import Pattern, unknown_label
from ..storage.format import ANY_LABEL
from .backends.base import union_bits
from .stream import degree_index




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
    steps: list[Step]                # one per vertex of ``order`` after the first, but the factored ones
    candidates: list                 # bitset (uint32 words) per pattern vertex
    candidate_counts: list[int]
    injective: bool
    incident: list = field(default_factory=list)   # _incident() of the pattern, label ids resolved
    factored: int = 0           # the last ``factored`` vertices of ``order`` are counted per row (count only)
    leaf_groups: list = field(default_factory=list)   # the factored vertices, as :class:`LeafGroup`
    subtrees: list = field(default_factory=list)      # factored vertices with leaves, as :class:`Subtree`
    # :func:`refine_cost` of this plan, where the planner found it already (or a function giving it:
    # the GPU's sum, read when first asked)
    refine_cost: object = None
    row_filters: list = field(default_factory=list)   # RowFilter (anchored queries), OrderFilter (symmetry)
    symmetry: int = 1           # a count's row filters keep one embedding of each orbit of this many
    meets: object = None        # the candidate sets' Overlaps (whether two may share a data vertex)


#: Most vertices a :class:`LeafGroup` counts together (its terms are the set partitions of
#: its vertices: 52 for 5).
MAX_LEAF_GROUP = 5


@dataclass
class LeafGroup:
    """Factored vertices whose candidate sets overlap, counted together (count only).

    The factored vertices are leaves, or the last vertices of the join
    order, no two adjacent (:func:`_factored_vertices`); "leaf" below stands
    for any of them: its candidates S_u depend on the row's core vertices only.

    Per row m of the rest of the pattern, the ways to give the group's
    leaves distinct vertices number Σ_π μ(π) Π_{B ∈ π} |S_B \\ m| over the set
    partitions π of the leaves, where S_B = ∩_{u ∈ B} S_u holds the vertices
    that every leaf of block B may take and μ(π) = Π_B (-1)^(|B|-1) (|B|-1)!
    (inclusion-exclusion over which leaves coincide: Möbius inversion on the
    partition lattice). A single leaf is its own group: |S_u \\ m|.
    """

    leaves: list[int]
    blocks: list[Step]      # the step whose sets are S_B, per block that may be non-empty
    terms: list             # (μ(π), [index into blocks per block of π]) per partition with no empty block


@dataclass
class Subtree:
    """A factored vertex with leaves of its own, counted per row of the core (count only); a
    wide one also with the groups of factored vertices that may take its vertex or share its
    leaves' (their neighbours are all in the core or the root).

    Per core row m, the root u takes each x of S_u \\ m, and its groups are counted per
    (m, x) as any leaf group: the subtree counts Σ_x Π_groups. Its vertices' candidate sets
    meet no other factored vertex's (under injective matching), so the subtree's count
    multiplies with the others'.
    """

    root: int
    step: Step              # the root's join step over the core
    groups: list            # its :class:`LeafGroup`, their blocks joined to the core and the root
    # A wide one's count by inclusion-exclusion over its meeting leaves (see :func:`_split`), or
    # None: (sign, narrow :class:`Subtree`, indices of the groups that multiply it) a term.
    terms: list | None = None

    @property
    def meeting(self) -> list[int]:
        """Indices of the groups with no link to the root (they meet it; a wide subtree's)."""
        return [gi for gi, g in enumerate(self.groups)
                if not any(k.other == self.root for b in g.blocks for k in b.links)]


#: Most meeting leaves a wide subtree is split over (2^k terms; :func:`_split`).
MAX_MEETING = 3


def _split(backend, bits, core, tree: Subtree) -> Subtree:
    """``tree`` with its :attr:`~Subtree.terms` where it is wide only by single leaves that meet its
    root r (each linked to the core only; at most :data:`MAX_MEETING`), and its own group is one
    leaf of r's: else as it is.

    Per core row m, such a leaf l takes S_l(m) less the root's vertex v, so the subtree counts
    Σ_v W(m, v) Π_l (G_l(m) - [v ∈ S_l(m)]) (W: the product of r's own groups, G_l: l's block
    size). Expanded: Σ over the sets T of meeting leaves of (-1)^|T| Π_{l ∉ T} G_l(m) times the
    narrow subtree whose root must also be each l ∈ T: r's step with l's links, its candidates
    C(r) ∩ C(l) (a new bitset, a new vertex q for r). Each term is a one-leaf subtree, counted
    from weights where the root's sets fan out (:meth:`~sgsi.join.counting.Counting._weighted_rows`),
    where the wide one extended the core's rows by the root. With groups of r's own of more
    leaves, each term would extend them (yeast's sparse_32_78: 1.5x slower split), and the
    subtree stays wide."""
    r = tree.root
    meeting = tree.meeting
    if not meeting or len(meeting) > MAX_MEETING or len(meeting) == len(tree.groups):
        return tree
    if any(len(tree.groups[gi].leaves) != 1 or len(tree.groups[gi].blocks) != 1 for gi in meeting):
        return tree
    own = [g for gi, g in enumerate(tree.groups) if gi not in meeting]
    if not (len(own) == 1 and len(own[0].leaves) == 1 and all(k.other == r for k in own[0].blocks[0].links)):
        return tree                     # its terms would each extend the rows by the root
    terms = [(1, Subtree(r, tree.step, own), meeting)]
    for mask in range(1, 1 << len(meeting)):
        taken = [gi for i, gi in enumerate(meeting) if mask >> i & 1]
        shared = bits[r]
        for gi in taken:
            shared = shared & bits[tree.groups[gi].blocks[0].vertex]
        if not backend.popcount(shared):
            continue                    # the root can be none of them: the term is 0
        q = len(bits)
        bits.append(shared)
        links = {(k.other, k.label_id, k.direction): k for k in tree.step.links}
        conflicts = set(tree.step.conflicts)
        for gi in taken:
            block = tree.groups[gi].blocks[0]
            links.update({(k.other, k.label_id, k.direction): k for k in block.links})
            conflicts |= set(block.conflicts) - {r}
        step = Step(q, sorted(links.values(), key=lambda k: (k.edges, core.index(k.other))),
                    [c for c in core if c in conflicts])
        rest = [gi for gi in meeting if gi not in taken]
        terms.append(((-1) ** len(taken), Subtree(q, step, [_rooted(g, r, q) for g in own]), rest))
    return Subtree(r, tree.step, tree.groups, terms)


def _rooted(group, r, q):
    """A :class:`LeafGroup` whose blocks read vertex q where they read r."""
    def swap(u):
        return q if u == r else u
    return LeafGroup(group.leaves, [Step(b.vertex, [Link(swap(k.other), k.label_id, k.direction, k.edges)
                                                    for k in b.links], [swap(c) for c in b.conflicts])
                                    for b in group.blocks], group.terms)


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


#: Rounds of candidate refinement a refined plan runs (each reads at most :func:`refine_cost` entries).
REFINE_ROUNDS = 2


def make_plan(store, pattern: Pattern, backend, injective=True, refine_rounds=REFINE_ROUNDS,
              factor_leaves=False, filtered=None, shard=None, anchor=None, order=None) -> QueryPlan:
    """Resolve, filter and order ``pattern`` on ``store``.

    ``factor_leaves`` (count only): the vertices that :func:`_factored_vertices`
    picks (leaves, and vertices at the end of the order) are joined last, so
    that the engine can count their matches per row of the rest as a product
    instead of enumerating them. ``filtered``: the candidate bitsets of a plan of
    the same pattern, store and ``injective`` made with no refinement (the
    signature filter's and degree tests' sets): refinement starts from them
    instead of filtering again. ``shard``: a :class:`~sgsi.join.shard.Shard`, whose vertices keep
    only their candidates in its ranges (before refinement), in its order. ``anchor``: an
    :class:`~sgsi.join.delta.Anchor`, whose edge's ends keep only the ends of its pairs and
    start the order, and whose row filters the plan carries (their vertices are not factored).
    ``order``: the join order to take instead of Algorithm 1's (:mod:`~sgsi.join.ordering`'s).
    """
    vlabel = []
    empty = False
    for v in pattern.vertices:
        if v.label is None:
            vlabel.append(None)
        else:
            lid = store.vertex_label_id(v.label)
            empty |= _absent(store, pattern, "vertex", v.label, lid)
            vlabel.append(lid)
    edge_ids = {}
    for e in pattern.edges:
        if e.label is None:
            edge_ids[e] = ANY_LABEL
        else:
            lid = store.edge_label_id(e.label)
            empty |= _absent(store, pattern, "edge", e.label, lid)
            edge_ids[e] = lid
    if empty:                           # a benchmark query's label the data lacks: no match
        return QueryPlan(pattern, True, [], [], [], [], injective)

    inc = list(_incident(pattern, edge_ids))
    # A backend that keeps every partition's degrees on the device finds refine_cost with the
    # counts, in their read (the engine asks for it once the join outgrows the candidate sets).
    early_cost = refine_rounds == 0 and backend.early_refine_cost
    if filtered is None and refine_rounds == 0 and shard is None and anchor is None:
        # The filter and what the order asks of its sets (sizes, overlaps) in one call.
        bits, counts, meets, cost = _filtered_sets(store, backend, vlabel, inc, injective, early_cost)
    else:
        bits = list(filtered) if filtered is not None else _candidates(store, backend, vlabel, inc, injective)
        if shard is not None:
            bits = shard.apply(backend.xp, bits)
        if anchor is not None:
            bits = anchor.apply(backend, store, bits)
        for r in range(refine_rounds):
            # Whether a round changed the sets decides only whether another follows.
            bits, changed = _refine(store, backend, bits, inc, check=r + 1 < refine_rounds)
            if not changed:
                break
        cost_jobs = _dense_cost_jobs(store, backend, inc) if early_cost else None
        if cost_jobs is None:
            counts, meets = backend.counts_and_overlaps(bits)
            cost = None
        else:
            counts, meets, cost = backend.counts_and_overlaps(bits, cost_jobs)
    # Sets of different vertex labels share no vertex: the CPU's overlaps answer those pairs
    # without reading the sets (the GPU's find every pair in one launch anyway).
    meets.labels = list(vlabel)
    if order is not None:
        order = list(order)
    elif shard is not None and shard.order:
        order = list(shard.order)
    else:
        order = _order(store, pattern, inc, counts, anchor.start if anchor is not None else ())
    seeded = {u for u, _c in shard.seed} if shard is not None else set()      # joined by the driver
    if shard is not None:
        seeded |= {v for pair in shard.symmetry[0] for v in pair}           # read by the row filters
    if anchor is not None:
        seeded |= anchor.pinned                 # read by the row filters: joined
    groups, trees = _factored_vertices(pattern, meets, injective, order, seeded) if factor_leaves else ([], [])
    tail = [u for g in groups for u in g] + [u for root, kids in trees for u in [root] + [w for g in kids for w in g]]
    order = [u for u in order if u not in tail] + tail
    core = order[:len(order) - len(tail)]
    steps = []                          # the core's: the factored vertices are counted, not joined
    for i, u in enumerate(core[1:], 1):
        steps.append(_step(store, inc, meets, u, [u], core[:i], injective))
    leaf_groups = [_leaf_group(store, backend, inc, bits, meets, g, core, injective) for g in groups]
    subtrees = [_split(backend, bits, core, Subtree(root, _step(store, inc, meets, root, [root], core, injective),
                        [_leaf_group(store, backend, inc, bits, meets, g, core + [root], injective) for g in kids]))
                for root, kids in trees]
    filters = anchor.filters(backend, order) if anchor is not None else []
    return QueryPlan(pattern, False, order, steps, bits, counts, injective, inc, len(tail), leaf_groups, subtrees,
                     cost, filters, meets=meets)


def _absent(store, pattern, kind, label, lid):
    """Whether ``label`` (id ``lid``) is absent from ``store``; raises for a pattern with strict labels.

    Raises
    ------
    PatternError
        Naming the label and the store's closest ones (:func:`~sgsi.pattern.unknown_label`).
    """
    if lid is not None:
        return False
    if pattern.strict_labels:
        raise unknown_label(kind, label, store.label_names(kind))
    return True


def _step(store, inc, meets, vertex, joins, joined, injective):
    """The join step that matches ``vertex`` after the vertices ``joined``: its linking edges
    are those of the pattern vertices ``joins`` to ``joined`` (one vertex; several for a
    block of leaves, whose candidates are then the leaves' shared ones). ``meets``: the
    :class:`~sgsi.join.backends.base.Overlaps` of the candidate bitsets."""
    links = {}
    for (a, b, lab, direction) in inc:
        if b in joins and a in joined:
            links[(a, lab, direction)] = Link(a, lab, direction, store.partition(lab, direction).edges)
    links = sorted(links.values(), key=lambda k: (k.edges, joined.index(k.other)))
    conflicts = []
    if injective:
        for w in joined:
            if meets(w, vertex):
                conflicts.append(w)
    return Step(vertex, links, conflicts)


def _meet(meets, us, ws):
    """Whether a candidate set of ``us`` and one of ``ws`` share a data vertex."""
    return any(meets(u, w) for u in us for w in ws)


def _leaf_group(store, backend, inc, bits, meets, group, core, injective):
    """The :class:`LeafGroup` of factored vertices ``group``: a step per block of them that may
    share a vertex (its candidates, the AND of theirs, appended to ``bits``), and the terms."""
    block_of = {}                      # bitmask of leaves -> index in blocks
    blocks = []
    for mask in range(1, 1 << len(group)):
        members = [u for i, u in enumerate(group) if mask >> i & 1]
        if len(members) == 1:
            vertex = members[0]
        else:
            shared = bits[members[0]]
            for u in members[1:]:
                shared = shared & bits[u]
            if not backend.popcount(shared):
                continue               # no vertex is a candidate of them all: the block is empty
            vertex = len(bits)
            bits.append(shared)
        block_of[mask] = len(blocks)
        blocks.append(_step(store, inc, meets, vertex, members, core, injective))
    terms = []
    for partition in _set_partitions((1 << len(group)) - 1):
        if all(b in block_of for b in partition):
            coef = 1
            for b in partition:
                size = bin(b).count("1")
                coef *= (-1) ** (size - 1) * math.factorial(size - 1)
            terms.append((coef, [block_of[b] for b in partition]))
    return LeafGroup(list(group), blocks, terms)


def _set_partitions(mask):
    """The set partitions of the bits of ``mask``, each as a list of bitmasks (blocks)."""
    if mask == 0:
        yield []
        return
    low = mask & -mask                 # the block holding the lowest member
    rest = mask ^ low
    sub = rest
    while True:                        # every subset of the rest joins it
        for tail in _set_partitions(rest ^ sub):
            yield [low | sub] + tail
        if sub == 0:
            break
        sub = (sub - 1) & rest


def _factored_vertices(pattern: Pattern, meets, injective, order, keep=frozenset(), wide=True):
    """Pattern vertices whose matches a count takes per row of the rest, without enumerating them.

    A vertex u none of whose neighbours is factored has, given a row m of the
    rest (the core), the candidates S = C(u) ∩ N(m_w, l) over its pattern
    edges (w, u), whatever the other factored vertices take; so the numbers
    of factored vertices whose candidate sets are disjoint multiply (their
    rows' own vertices are subtracted per row, as in any last step). Under
    injective matching, vertices whose candidate sets overlap (as vertices of
    one label do) are grouped, and a group is counted by inclusion-exclusion
    over its set partitions (:class:`LeafGroup`); a group holds at most
    ``MAX_LEAF_GROUP`` vertices.

    Picked, no two adjacent:

    * leaves (one neighbour), wherever they are in ``order``: a leaf
      connects nothing, so the core's order stays connected without it;
    * then the last vertices of the core's order, from its end, as long as
      each is adjacent to no picked vertex and fits its group: the core keeps
      the order's prefix, so it is joined exactly as before (a vertex from
      the middle of the order would take its pruning away from the steps
      after it).

    * a last vertex of the core's order whose factored neighbours are all leaves of its own
      becomes the root of a :class:`Subtree` with them, where their candidates meet no
      other factored vertex's;
    * else a last vertex with factored neighbours becomes the root of one that takes their
      groups and those whose candidates meet its own (their vertices' neighbours are all in
      the core or the root), where none of it meets another subtree, and only where a vertex
      before it is factored too: a root joins as many rows as the core would with it, and it
      takes the pattern's symmetries that would move it away (:mod:`.symmetry`).

    Returns the groups (lists of vertices) and the subtrees ((root, its groups)),
    or none when fewer than two vertices qualify. The vertices ``keep`` stay in the core;
    ``wide``: whether wide subtrees are taken.
    """
    n = len(pattern.vertices)
    nbrs = [set() for _ in range(n)]
    for e in pattern.edges:
        nbrs[e.src].add(e.dst)
        nbrs[e.dst].add(e.src)
    groups = []
    picked = set()

    def pick(u):
        """Add ``u`` to the groups (merging those its candidates meet); False if too large."""
        nonlocal groups
        meet = [g for g in groups if injective and _meet(meets, [u], g)]
        if sum(len(g) for g in meet) + 1 > MAX_LEAF_GROUP:
            return False
        groups = [g for g in groups if g not in meet] + [[w for g in meet for w in g] + [u]]
        picked.add(u)
        return True

    for u in range(n):
        if len(nbrs[u]) == 1 and not nbrs[u] & picked and u not in keep:
            pick(u)
    leaves = set(picked)
    trees = []                          # (root, its leaves' groups)
    in_trees = set()

    def meets_trees(us):
        return injective and _meet(meets, us, in_trees)

    core = [u for u in order if u not in picked]
    undo = None                         # the state before the wide roots last picked
    for u in reversed(core[1:]):        # the core keeps at least its first vertex
        if u in keep:
            break
        kids = nbrs[u] & picked
        if not kids:
            if meets_trees([u]) or not pick(u):
                break
            undo = None
            continue
        # A root: no other factored vertex may take the subtree's vertices (its count then
        # multiplies with theirs). Its own leaves alone, or (a wide root) with the groups that
        # would meet it, kept only where a vertex before it is factored too.
        if kids & in_trees:
            break
        own = [g for g in groups if set(g) & kids]
        others = [w for g in groups if g not in own for w in g]
        sub = [u] + sorted(kids)
        narrow = kids <= leaves and all(set(g) <= kids for g in own) and not (
            injective and _meet(meets, sub, others))
        if not narrow and not wide:
            break
        if not narrow:
            own = [g for g in groups if set(g) & kids or injective and _meet(meets, [u], g)]
            sub = [u] + [w for g in own for w in g]
        if meets_trees(sub):
            break
        if not narrow and not undo:
            undo = (list(groups), list(trees), set(in_trees), set(picked))     # undone if it is the last
        groups = [g for g in groups if g not in own]
        trees.append((u, own))
        in_trees.update(sub)
        picked.add(u)
        if narrow:
            undo = None
    if undo:                            # the last vertices picked are wide roots: none of them
        groups, trees, in_trees, picked = undo
    if not (2 <= len(picked) < n):
        return [], []
    return groups, trees


def _candidates(store, backend, vlabel, inc, injective):
    """C(u) of every pattern vertex u, as bitsets over all data vertices: the label test, the
    signature filter over the column-first buckets and the degree tests, for all the pattern's
    vertices at once (``backend.candidate_bits``, one pass over each vertex segment)."""
    return backend.candidate_bits(*_filter_args(store, backend, vlabel, inc, injective))


def _filtered_sets(store, backend, vlabel, inc, injective, early_cost):
    """(:func:`_candidates`, their sizes, their overlaps, refine_cost or None) in one
    ``backend.candidate_sets`` call; ``early_cost``: find refine_cost too, where the backend
    keeps every partition's degrees (its jobs are built while the filter runs)."""
    return backend.candidate_sets(*_filter_args(store, backend, vlabel, inc, injective),
                                  cost_jobs=(lambda: _dense_cost_jobs(store, backend, inc)) if early_cost else None)


def _filter_args(store, backend, vlabel, inc, injective):
    """The arguments (vertices, parts, degree masks) of ``backend.candidate_bits`` for
    :func:`_candidates`."""
    specs = [_query_signature(store, u, vlabel, inc, injective) for u in range(len(vlabel))]
    parts = []
    for start, count, seg in store.vertex_segments():
        labels = backend.vertex_labels(store, seg) if any(lab is not None for _q, lab, _need in specs) else None
        words = {}                      # bucket -> its columns, read where a query word asks for them
        tests = []
        for qsig, lab, _need in specs:
            pairs = []
            for c in np.flatnonzero(qsig):
                b = int(c) // store.bucket_columns
                if b not in words:
                    words[b] = backend.store_arrays([(store.token, "sig", seg, b, k) for k in range(store.bucket_columns)],
                                                    lambda: store.signature_columns(seg, b))
                pairs.append((words[b][int(c) % store.bucket_columns], int(qsig[c])))
            tests.append((labels if lab is not None else None, lab, pairs))
        parts.append((start, count, tests))
    ands = [[backend.derived((store.token, "degree-mask", lab, direction, k),
                             lambda: _degree_mask(store, backend, lab, direction, k))
             for (lab, direction), k in need.items()] for _q, _lab, need in specs]
    return store.n_vertices, parts, ands


def _query_signature(store, u, vlabel, inc, injective):
    """(signature words, label id or None, {(edge label, direction): least degree}) of C(u)."""
    need = {}                   # degree requirements per (label, direction): distinct pattern neighbours
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
    return qsig, vlabel[u], {key: (k if injective else 1) for key, k in need.items()}


def _degree_mask(store, backend, lab, direction, k):
    """The vertices with at least ``k`` neighbours through edges of ``lab`` in ``direction``."""
    has = backend.xp.zeros(store.n_vertices, dtype=bool)
    for bid in store.partition(lab, direction).idx_batches:
        v, d = degree_index(store, backend, bid)
        has[v[d >= k]] = True
    return has


def _refine(store, backend, bits, inc, check=True):
    """One round of neighbourhood refinement of the candidate bitsets.

    v stays in C(u) only if, for every pattern edge (u, u') of label l, v has
    an l-neighbour (in that direction) in C(u'). For each partition used by
    the pattern, the lists of its users' candidates are read once, streamed
    segment by segment through the PCSR; each vertex gets one bit per other end
    u' (a neighbour in C(u')), and a candidate of u survives when it has the
    bits of all of u's ends (``backend.refine_drop``, every partition's in one
    ``backend.refine_round``). Sound for isomorphism and
    homomorphism alike.

    Returns the new bitsets and whether any of them shrank (True, unread, where not ``check``).
    """
    stacked = backend.stack(bits)                                   # (pattern vertices, words)
    keep = stacked.copy()
    jobs = []
    for (lab, direction), pairs in _by_partition(inc).items():
        ends = sorted({b for _, b in pairs})
        p = store.partition(lab, direction)
        for first in range(0, len(ends), 32):                    # 32 ends per hit word
            chunk = ends[first:first + 32]
            needs = {a: sum(1 << k for k, b in enumerate(chunk) if (a, b) in pairs) for a, _ in pairs}
            users = sorted(a for a, need in needs.items() if need)
            if users:
                jobs.append((p, users, chunk, [needs[a] for a in users]))
    backend.refine_round(store, stacked, keep, jobs)
    changed = bool((keep != stacked).any()) if check else True       # a read: only where asked
    return [keep[i] for i in range(len(bits))], changed


def _by_partition(inc):
    """(label, direction) -> the (vertex, other end) pairs of the incident edges read through it."""
    by_partition = {}
    for (a, b, lab, direction) in inc:
        by_partition.setdefault((lab, direction), set()).add((a, b))
    return by_partition


def refine_cost(store, backend, plan: QueryPlan) -> int:
    """Neighbour-list entries one round of :func:`_refine` would read for ``plan``.

    For each partition the pattern uses, the degrees (from the degree
    index) of the union of its users' candidates: what refinement streams.
    """
    if callable(plan.refine_cost):
        plan.refine_cost = int(plan.refine_cost())
    if plan.refine_cost is not None:
        return plan.refine_cost
    xp = backend.xp
    total = xp.zeros(1, dtype=xp.int64)             # summed where the backend computes, read once
    dense_jobs = []                                 # (users, every vertex's degree kept on the device)
    for users, p, dense in _cost_partitions(store, backend, plan.incident):
        if dense is not None:
            dense_jobs.append((users, dense))
            continue
        union = union_bits(plan.candidates, users)
        for bid in p.idx_batches:
            v, d = degree_index(store, backend, bid)
            backend.add_bits_weight(total, union, v, d)
    backend.add_union_degrees(total, plan.candidates, dense_jobs)
    return int(total[0])


def _cost_partitions(store, backend, inc):
    """(users, partition, every vertex's degree where the backend keeps it, else None) of each
    partition the pattern's incident edges ``inc`` read: :func:`refine_cost`'s terms."""
    for (lab, direction), pairs in _by_partition(inc).items():
        p = store.partition(lab, direction)
        yield sorted({a for a, _b in pairs}), p, backend.dense_degrees(store, p)


def _dense_cost_jobs(store, backend, inc):
    """:func:`refine_cost`'s jobs (users, every vertex's degree) for ``backend.add_union_degrees``,
    or None where a partition's degrees are not kept whole by the backend."""
    jobs = [(users, dense) for users, _p, dense in _cost_partitions(store, backend, inc)]
    return None if any(dense is None for _users, dense in jobs) else jobs


def _order(store, pattern, inc, counts, start=()):
    """Algorithm 1's order; ``start``: its first vertices, given (an anchored query's edge)."""
    n = len(pattern.vertices)
    deg = np.zeros(n)
    for (a, _b, _lab, _d) in inc:
        deg[a] += 1
    score = np.array([counts[u] / max(deg[u], 1) for u in range(n)], dtype=float)
    total = max(store.n_edges, 1)
    order = list(start) or [int(np.argmin(score))]
    adjacent = {u: set() for u in range(n)}
    for (a, b, lab, direction) in inc:
        adjacent[a].add((b, lab))
    for u in order:
        for (b, lab) in adjacent[u]:
            score[b] *= _freq(store, lab, total)
    while len(order) < n:
        frontier = sorted({b for u in order for (b, _l) in adjacent[u]} - set(order))
        uc = min(frontier, key=lambda u: (score[u], u))
        order.append(uc)
        for (b, lab) in adjacent[uc]:
            score[b] *= _freq(store, lab, total)
    return order


def _freq(store, lab, total):
    """freq(l): the fraction of ordered vertex pairs joined by an l edge.

    It is proportional to the label's share of the edges, as in the paper,
    and stays below one on single-label graphs, so that there too a vertex
    with more edges into the matched part is joined first.
    """
    n = float(max(store.n_vertices, 1))
    edges = float(total) if lab == ANY_LABEL else float(store.edge_label_freq[lab])
    return edges / (n * n)
