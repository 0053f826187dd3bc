"""An independent brute-force subgraph matcher: the test oracle.

Plain Python backtracking over a dict-of-sets graph. It shares nothing with
the engine except the :class:`~sgsi.pattern.Pattern` data classes (and the
parser, when a pattern is given as text), and it is written to be obviously
correct rather than fast: every pattern edge between two matched vertices is
checked directly against the set of data edges. Adjacency is used only to
propose candidates, and the matching order only decides how soon a dead end
is found, never which maps are accepted. One exception, for speed:
:func:`oracle_count` takes the last vertex of the order as the set of data
vertices joined to its matched neighbours by edges of the right label and
direction (tests/test_oracle.py checks it against exhaustive enumeration).

Semantics (DESIGN.md, "Semantics"):

- a pattern vertex with a label needs a data vertex whose ``str(label)`` is
  equal to it; an unlabeled pattern vertex matches any data vertex;
- a directed pattern edge ``u -[:L]-> w`` needs a data edge
  ``(f(u), f(w), L)``; label ``None`` accepts any label; an undirected
  pattern edge accepts a data edge in either direction;
- the map is injective unless ``injective=False`` (homomorphism);
- parallel data edges with one label are one edge.

It also makes random test inputs: :func:`random_graph` and
:func:`random_pattern`, and writes them as Parquet (:func:`write_graph_files`).
"""

from __future__ import annotations

from sgsi.pattern import Pattern, parse_pattern

# ---------------------------------------------------------------------------
# The data graph
# ---------------------------------------------------------------------------


class _Graph:
    """A directed, edge-labeled graph as dicts of sets.

    ``out[x][y]`` and ``inc[y][x]`` are the sets of ``str(label)`` of the
    edges ``x -> y``.
    """

    def __init__(self, edges, vertex_labels):
        self.out = {}
        self.inc = {}
        self.vertex_label = {v: str(l) for v, l in vertex_labels.items() if l is not None}
        self.vertices = set(vertex_labels)
        self._degree = {}
        self._labeled = {}
        for src, dst, label in edges:
            self.out.setdefault(src, {}).setdefault(dst, set()).add(str(label))
            self.inc.setdefault(dst, {}).setdefault(src, set()).add(str(label))
            self.vertices.update((src, dst))

    def has_edge(self, x, y, label, directed):
        """True if a data edge fits the pattern edge ``x -> y`` (or ``x -- y``)."""
        if self._has_directed(x, y, label):
            return True
        return not directed and self._has_directed(y, x, label)

    def _has_directed(self, x, y, label):
        labels = self.out.get(x, {}).get(y)
        if labels is None:
            return False
        return label is None or label in labels

    def neighbours(self, x, outgoing, incoming):
        """The data vertices joined to ``x`` by an out- and/or in-edge."""
        found = set()
        if outgoing:
            found.update(self.out.get(x, ()))
        if incoming:
            found.update(self.inc.get(x, ()))
        return found

    def labeled_neighbours(self, x, label, outgoing):
        """The data vertices ``y`` with an edge ``x -> y`` (``outgoing``) or ``y -> x`` labeled
        ``label`` (any label where it is None), as a set (kept for the next call)."""
        key = (x, label, outgoing)
        if key not in self._labeled:
            adj = (self.out if outgoing else self.inc).get(x, {})
            self._labeled[key] = {y for y, labels in adj.items() if label is None or label in labels}
        return self._labeled[key]

    def degree(self, x):
        """The number of distinct vertices other than ``x`` joined to ``x``."""
        if x not in self._degree:
            self._degree[x] = len(self.neighbours(x, True, True) - {x})
        return self._degree[x]


# ---------------------------------------------------------------------------
# Matching
# ---------------------------------------------------------------------------


def _pattern_neighbours(pattern):
    """Vertex index -> set of the indices it shares an edge with."""
    adj = {i: set() for i in range(len(pattern.vertices))}
    for e in pattern.edges:
        adj[e.src].add(e.dst)
        adj[e.dst].add(e.src)
    return adj


def _candidates(graph, pattern, injective):
    """Vertex index -> list of data vertices that pass the local filters.

    The label must match; for injective matching a data vertex also needs at
    least as many distinct neighbours as the pattern vertex (distinct pattern
    neighbours map to distinct data neighbours).
    """
    adj = _pattern_neighbours(pattern)
    result = {}
    for i, pv in enumerate(pattern.vertices):
        cands = []
        for x in graph.vertices:
            if pv.label is not None and graph.vertex_label.get(x) != pv.label:
                continue
            if injective and graph.degree(x) < len(adj[i]):
                continue
            cands.append(x)
        result[i] = cands
    return result


def _matching_order(pattern, candidates):
    """A connected order: start at the vertex with fewest candidates, then
    repeatedly take the vertex with most already-ordered neighbours
    (ties: fewer candidates, then lower index)."""
    adj = _pattern_neighbours(pattern)
    n = len(pattern.vertices)
    order = [min(range(n), key=lambda i: (len(candidates[i]), -len(adj[i]), i))]
    placed = set(order)
    while len(order) < n:
        frontier = [i for i in range(n) if i not in placed and adj[i] & placed]
        if not frontier:   # disconnected pattern: just continue anywhere
            frontier = [i for i in range(n) if i not in placed]
        nxt = min(frontier, key=lambda i: (-len(adj[i] & placed), len(candidates[i]), i))
        order.append(nxt)
        placed.add(nxt)
    return order


def _edges_back(pattern, order):
    """For each step, the pattern edges joining that vertex to earlier ones."""
    position = {v: k for k, v in enumerate(order)}
    back = [[] for _ in order]
    for e in pattern.edges:
        later = max(position[e.src], position[e.dst])
        back[later].append(e)
    return back


def _proposals(graph, pattern_vertex, back_edges, mapping, candidate_set):
    """Data vertices worth trying for ``pattern_vertex`` given ``mapping``: those of
    ``candidate_set`` joined to the matched end of every edge back by an edge of its label and
    direction (:func:`_fitting`), else (an edge joins ``pattern_vertex`` to itself) the
    neighbours of the first edge's matched end. Only a narrowing: :func:`_fits` still checks
    every edge of each."""
    if not back_edges:
        return candidate_set
    fit = _fitting(graph, pattern_vertex, back_edges, mapping, candidate_set)
    if fit is not None:
        return fit
    e = back_edges[0]
    if e.src == pattern_vertex:      # pattern edge v -> matched vertex
        anchor = mapping[e.dst]
        found = graph.neighbours(anchor, outgoing=not e.directed, incoming=True)
    else:                            # pattern edge matched vertex -> v
        anchor = mapping[e.src]
        found = graph.neighbours(anchor, outgoing=True, incoming=not e.directed)
    return found & candidate_set


def _fits(graph, back_edges, mapping):
    """Every pattern edge to already-matched vertices has a data edge."""
    return all(graph.has_edge(mapping[e.src], mapping[e.dst], e.label, e.directed)
               for e in back_edges)


def _search(graph, order, back, candidate_sets, injective):
    """Yield every complete mapping (a dict vertex index -> data vertex)."""
    mapping = {}
    used = set()

    def extend(step):
        if step == len(order):
            yield dict(mapping)
            return
        v = order[step]
        for x in _proposals(graph, v, back[step], mapping, candidate_sets[v]):
            if injective and x in used:
                continue
            mapping[v] = x
            if _fits(graph, back[step], mapping):
                used.add(x)
                yield from extend(step + 1)
                used.discard(x)
            del mapping[v]

    yield from extend(0)


def oracle_matches(edges, vertex_labels, pattern, injective=True):
    """Every embedding of ``pattern`` in a data graph, by backtracking.

    Parameters
    ----------
    edges : iterable of (src, dst, label)
        Directed data edges over hashable vertex ids; labels are compared to
        pattern labels as ``str(label)``. Repeated edges count once.
    vertex_labels : dict
        Vertex id -> label (``str(label)`` is compared). A vertex that is
        missing, or maps to None, has no label. Vertices listed here but on
        no edge are data vertices too.
    pattern : Pattern or str
        The pattern, or pattern-language text.
    injective : bool, default True
        False counts homomorphisms (pattern vertices may share a data vertex).

    Returns
    -------
    list of tuple
        One tuple per embedding holding the data vertex of every pattern
        vertex (anonymous ones included) in pattern vertex order.

    Examples
    --------
    >>> edges = [(1, 2, "K"), (2, 3, "K"), (3, 1, "K")]
    >>> sorted(oracle_matches(edges, {}, "(a)-[:K]->(b)-[:K]->(c)"))
    [(1, 2, 3), (2, 3, 1), (3, 1, 2)]
    """
    pattern, graph, order, back, candidate_sets = _prepare(edges, vertex_labels, pattern, injective)
    n = len(pattern.vertices)
    return [tuple(m[i] for i in range(n))
            for m in _search(graph, order, back, candidate_sets, injective)]


def _fitting(graph, pattern_vertex, back_edges, mapping, candidate_set):
    """The data vertices ``x`` that fit ``pattern_vertex`` given ``mapping``: those of
    ``candidate_set`` with, for every edge in ``back_edges``, a data edge between ``x`` and the
    edge's matched end with the edge's label (either way round where it is undirected). None
    where an edge joins ``pattern_vertex`` to itself (then each ``x`` is tried by :func:`_fits`)."""
    fit = candidate_set
    for e in back_edges:
        if e.src == e.dst:
            return None
        if e.src == pattern_vertex:      # pattern edge v -> matched vertex: x -> anchor
            anchor, forward = mapping[e.dst], False
        else:                            # pattern edge matched vertex -> v: anchor -> x
            anchor, forward = mapping[e.src], True
        ends = graph.labeled_neighbours(anchor, e.label, forward)
        if not e.directed:
            ends = ends | graph.labeled_neighbours(anchor, e.label, not forward)
        fit = fit & ends
    return fit


def _count(graph, order, back, candidate_sets, injective):
    """The number of complete mappings :func:`_search` yields, by the same backtracking without
    building them: the last step counts the data vertices that fit (:func:`_fitting`, less those
    already used where the map is injective) instead of extending the mapping by each."""
    mapping = {}
    used = set()
    last = len(order) - 1

    def extend(step):
        v = order[step]
        if step == last:
            fit = _fitting(graph, v, back[step], mapping, candidate_sets[v])
            if fit is not None:
                return len(fit - used) if injective else len(fit)
        found = 0
        for x in _proposals(graph, v, back[step], mapping, candidate_sets[v]):
            if injective and x in used:
                continue
            mapping[v] = x
            if _fits(graph, back[step], mapping):
                if step == last:
                    found += 1
                else:
                    used.add(x)
                    found += extend(step + 1)
                    used.discard(x)
            del mapping[v]
        return found

    return extend(0)


def _prepare(edges, vertex_labels, pattern, injective):
    """The data graph, the matching order, each step's edges back and the candidate sets."""
    if isinstance(pattern, str):
        pattern = parse_pattern(pattern)
    if not isinstance(pattern, Pattern):
        raise TypeError("pattern must be a Pattern or pattern text")
    graph = _Graph(edges, vertex_labels)
    candidates = _candidates(graph, pattern, injective)
    order = _matching_order(pattern, candidates)
    back = _edges_back(pattern, order)
    candidate_sets = {i: set(c) for i, c in candidates.items()}
    return pattern, graph, order, back, candidate_sets


def oracle_count(edges, vertex_labels, pattern, injective=True):
    """The number of embeddings; see :func:`oracle_matches`. The same search, counted without
    listing the embeddings (``len(oracle_matches(...))``, faster: by 1.5x on the engine tests'
    random trees, by far more where the last vertex of the order takes many data vertices).

    Examples
    --------
    >>> oracle_count([(1, 2, "K"), (2, 1, "K")], {}, "(a)--(b)")
    2
    """
    _pattern, graph, order, back, candidate_sets = _prepare(edges, vertex_labels, pattern, injective)
    return _count(graph, order, back, candidate_sets, injective)


# ---------------------------------------------------------------------------
# Random inputs
# ---------------------------------------------------------------------------


def random_graph(rng, n, m, n_vlabels, n_elabels, string_ids=False):
    """A random directed, labeled data graph.

    Parameters
    ----------
    rng : random.Random
        The source of randomness.
    n, m : int
        Vertices and edge records. Edges are drawn with replacement between
        distinct vertices, so a few may repeat (they count once).
    n_vlabels : int
        Vertex labels are the ints ``0..n_vlabels-1``; with 0 no vertex has a
        label (an empty dict is returned).
    n_elabels : int
        Edge labels are the strings ``"E0".."E{n_elabels-1}"`` (at least one).
    string_ids : bool, default False
        Vertex ids are ``"v0".."v{n-1}"`` instead of ints.

    Returns
    -------
    edges : list of (src, dst, label)
    vertex_labels : dict
        id -> label for every vertex (isolated vertices included).
    """
    if n < 2:
        raise ValueError("random_graph needs n >= 2")
    ids = [f"v{i}" for i in range(n)] if string_ids else list(range(n))
    elabels = [f"E{i}" for i in range(max(1, n_elabels))]
    edges = []
    for _ in range(m):
        src, dst = rng.sample(ids, 2)
        edges.append((src, dst, rng.choice(elabels)))
    vertex_labels = {v: rng.randrange(n_vlabels) for v in ids} if n_vlabels > 0 else {}
    return edges, vertex_labels


def random_pattern(rng, k, vertex_labels=(), edge_labels=(), *, extra_edges=None,
                   p_vertex_label=0.4, p_edge_label=0.5, p_directed=0.6,
                   p_anonymous=0.3, p_space=0.2):
    """Random connected pattern TEXT in the pattern language.

    A random spanning tree over ``k`` vertices plus a few extra edges, written
    as comma-separated paths. Edges are a mix of directed both ways,
    undirected, labeled and unlabeled (``-->``, ``-[]->``, ``--`` ...).
    Leaves may be anonymous ``()``; a vertex label is written at one random
    mention of the vertex (sometimes repeated at another). Whitespace is
    sprinkled between tokens.

    Parameters
    ----------
    rng : random.Random
    k : int
        Number of pattern vertices (>= 1).
    vertex_labels, edge_labels : iterable
        Labels to draw from (use the data graph's, so that matches exist
        sometimes); written via ``str``. Empty: no labels of that kind.
    extra_edges : int, optional
        Edges beyond the spanning tree; default random in ``0..k-1``.
    p_vertex_label, p_edge_label, p_directed, p_anonymous, p_space : float
        Probabilities of a labeled vertex, a labeled edge, a directed edge,
        an anonymous leaf, and a space between two tokens.

    Returns
    -------
    str
    """
    vlabels = sorted({str(l) for l in vertex_labels})
    elabels = sorted({str(l) for l in edge_labels})
    edges = _random_edges(rng, k, extra_edges)
    anonymous = _anonymous_leaves(rng, k, edges, p_anonymous)
    vlabel = {v: rng.choice(vlabels) for v in range(k)
              if vlabels and rng.random() < p_vertex_label}
    writer = _PatternWriter(rng, vlabel, anonymous, p_space)
    for u, w in edges:
        label = rng.choice(elabels) if elabels and rng.random() < p_edge_label else None
        directed = rng.random() < p_directed
        writer.edge_kind[(u, w)] = (label, directed)
    return writer.write(k, edges)


def _random_edges(rng, k, extra_edges):
    """Tree edges (parent, child) plus extra edges between distinct vertices."""
    edges = [(rng.randrange(i), i) for i in range(1, k)]
    if k < 2:
        return edges
    extra = rng.randrange(k) if extra_edges is None else extra_edges
    for _ in range(extra):
        u, w = rng.sample(range(k), 2)
        if (u, w) not in edges and (w, u) not in edges:
            edges.append((u, w))
    rng.shuffle(edges)
    return [(u, w) if rng.random() < 0.5 else (w, u) for u, w in edges]


def _anonymous_leaves(rng, k, edges, p_anonymous):
    """Vertices of degree one chosen to be written as ``()``."""
    degree = [0] * k
    for u, w in edges:
        degree[u] += 1
        degree[w] += 1
    return {v for v in range(k) if degree[v] == 1 and rng.random() < p_anonymous}


class _PatternWriter:
    """Writes pattern edges as chains of paths, in the pattern language."""

    def __init__(self, rng, vlabel, anonymous, p_space):
        self.rng = rng
        self.vlabel = vlabel
        self.anonymous = anonymous
        self.p_space = p_space
        self.edge_kind = {}
        self.label_written = set()

    def write(self, k, edges):
        if not edges:
            return self.vertex(0, last_mention=True)
        mentions = self._count_mentions(edges)
        paths = []
        remaining = list(edges)
        while remaining:
            paths.append(self._path(remaining, mentions))
        return self._sep(",").join(paths)

    def _count_mentions(self, edges):
        count = {}
        for u, w in edges:
            count[u] = count.get(u, 0) + 1
            count[w] = count.get(w, 0) + 1
        return count

    def _path(self, remaining, mentions):
        """Take a chain of edges off ``remaining`` and write it."""
        u, w = remaining.pop(0)
        start = u if self.rng.random() < 0.5 else w
        parts = [self._mention(start, mentions)]
        edge, here = (u, w), start
        while edge is not None:
            there = edge[1] if edge[0] == here else edge[0]
            parts.append(self._edge(edge, here))
            parts.append(self._mention(there, mentions))
            here = there
            edge = self._continue(remaining, here)
        return "".join(parts)

    def _continue(self, remaining, here):
        """Another unused edge at ``here``, or None to end the path."""
        if self.rng.random() < 0.3:
            return None
        for i, (u, w) in enumerate(remaining):
            if here in (u, w):
                return remaining.pop(i)
        return None

    def _mention(self, v, mentions):
        mentions[v] -= 1
        return self.vertex(v, last_mention=mentions[v] == 0)

    def vertex(self, v, last_mention):
        if v in self.anonymous:
            label = self.vlabel.get(v)
            return "(" + (self._label(label) if label else "") + ")"
        text = f"v{v}"
        label = self.vlabel.get(v)
        if label is not None and self._write_label_now(v, last_mention):
            text += self._sep("") + self._label(label)
        return "(" + self._sep("") + text + self._sep("") + ")"

    def _write_label_now(self, v, last_mention):
        if v in self.label_written:
            return self.rng.random() < 0.3            # repeat it sometimes
        if last_mention or self.rng.random() < 0.5:
            self.label_written.add(v)
            return True
        return False

    def _edge(self, edge, here):
        label, directed = self.edge_kind[edge]
        forward = edge[0] == here
        if label is None and self.rng.random() < 0.7:
            body = ""
        else:
            body = "[" + (self._label(label) if label else "") + "]"
        s = self._sep
        if not directed:
            return s("-") + body + "-"
        if forward:
            return s("-") + body + s("-") + ">"
        return s("<") + "-" + body + s("-")

    def _label(self, label):
        if label.isascii() and (label.isidentifier() or label.isdigit()):
            return ":" + label
        return ":`" + label.replace("`", "``") + "`"

    def _sep(self, token):
        """``token`` with a random space before it."""
        return (" " if self.rng.random() < self.p_space else "") + token


def write_edges(path, edges, labels=True):
    """A Parquet file of ``edges`` ((src, dst, label) tuples) at ``path``: columns src, dst and,
    where ``labels``, label (an update's insert or delete file); returns its path as a string."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    cols = {"src": [e[0] for e in edges], "dst": [e[1] for e in edges]}
    if labels:
        cols["label"] = [e[2] for e in edges]
    pq.write_table(pa.table(cols), path)
    return str(path)


def write_graph_files(d, edges, vlabels, edge_labels=True):
    """Parquet files ``e.parquet`` (src, dst[, label]) and ``v.parquet`` (id, label; None: no vertex
    file) of a :func:`random_graph` in directory ``d`` (a pathlib.Path); returns their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    d.mkdir(parents=True, exist_ok=True)
    e = write_edges(d / "e.parquet", edges, edge_labels)
    if vlabels is None:
        return e, None
    pq.write_table(pa.table({"id": list(vlabels), "label": list(vlabels.values())}), d / "v.parquet")
    return e, str(d / "v.parquet")


def build_stores(d, edges, vlabels, budgets=(None, "16KB")):
    """The stores of a :func:`random_graph` (its files written in ``d``), one a memory budget
    (None: the default), as ``{budget: Graph}``; the caller closes them."""
    import sgsi
    e, v = write_graph_files(d, edges, vlabels)
    return {b: sgsi.build(str(d / f"g-{b or 'default'}.sgsi"), edges=e, vertices=v, memory_budget=b)
            for b in budgets}


def random_gathered_lists(rng, n_tuples, lengths, gathered=None, universe=3000):
    """Random inputs of ``intersect_lists``: per link, the gathered lists of its distinct
    vertices (``sgsi.join.engine._Lists``: sorted distinct values in a GBA whose slots past
    each list's count hold garbage), each tuple pointing at one of them. ``lengths[j]`` is the
    longest list of link j; ``gathered[j]`` False leaves link j out (None). Returns
    (lists, the expected set of each tuple as Python sets)."""
    import numpy as np
    from sgsi.join.sets import _Lists
    lists, per_tuple = [], []
    for j, longest in enumerate(lengths):
        if gathered is not None and not gathered[j]:
            lists.append(None)
            continue
        n_dist = int(rng.integers(1, max(2, n_tuples // 2) + 1))
        count = rng.integers(0, longest + 1, n_dist)
        count[0] = longest
        reserved = count + rng.integers(0, 4, n_dist)            # slots never written
        start = np.cumsum(reserved) - reserved
        values = rng.integers(-5, 2 ** 31 - 1, int(reserved.sum())).astype(np.int32)
        sets = []
        for d in range(n_dist):        # a test helper: a loop over a few hundred lists is fine
            # Values from one shared small range, so that lists of different links overlap.
            v = np.sort(rng.choice(universe, int(count[d]), replace=False)).astype(np.int32)
            values[start[d]:start[d] + count[d]] = v
            sets.append(set(v.tolist()))
        of_tuple = rng.integers(0, n_dist, n_tuples).astype(np.int64)
        lists.append(_Lists(of_tuple, start.astype(np.int64), count.astype(np.int64), values,
                            int(reserved.sum())))
        per_tuple.append([sets[d] for d in of_tuple])
    expect = [set.intersection(*(p[t] for p in per_tuple)) for t in range(n_tuples)]
    return lists, expect
