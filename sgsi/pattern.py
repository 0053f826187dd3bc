"""Patterns: the query graphs that sgsi matches.

A pattern is a small graph of :class:`PatternVertex` and :class:`PatternEdge`.
It comes from the Cypher-style pattern language (:func:`parse_pattern`) or
from a query file in the benchmark text format (:func:`read_query_file`);
:func:`load_pattern` accepts either.

Labels are kept as the strings written in the pattern; the store resolves
them against its label dictionaries (an integer label ``3`` in the data is
written ``:3`` in a pattern); a label the store lacks is an error naming the
closest it has (:func:`unknown_label`), except in a benchmark query file,
where it matches nothing. A bare integer label is read as an integer, so
``:03`` is the label ``"3"``; a backtick-quoted label is taken verbatim.
"""

from __future__ import annotations

import difflib
import functools
import os
from collections import namedtuple
from dataclasses import dataclass

from .errors import PatternError


@dataclass(frozen=True)
class PatternVertex:
    """One pattern vertex: ``name`` is None for an anonymous ``()``."""

    name: str | None
    label: str | None


@dataclass(frozen=True)
class PatternEdge:
    """One pattern edge between vertex indices ``src`` and ``dst``.

    ``label`` None means any edge label; ``directed`` False means an edge in
    either direction (``-[:L]-`` or ``--``).
    """

    src: int
    dst: int
    label: str | None
    directed: bool


@dataclass(frozen=True)
class Pattern:
    """A connected pattern graph without self-loops.

    ``vertices`` are in order of first appearance; ``edges`` hold no
    duplicates (an undirected edge is stored with ``src < dst``).
    ``strict_labels``: a label the store lacks is a :class:`PatternError`
    (the pattern language); False for a benchmark ``t/v/e`` query, where
    such a label just matches nothing (count 0).
    """

    vertices: tuple[PatternVertex, ...]
    edges: tuple[PatternEdge, ...]
    strict_labels: bool = True

    @property
    def output_vertices(self) -> list[int]:
        """Indices of the named vertices, the result columns, in order."""
        return [i for i, v in enumerate(self.vertices) if v.name is not None]

    @property
    def output_names(self) -> list[str]:
        return [self.vertices[i].name for i in self.output_vertices]


# ---------------------------------------------------------------------------
# The pattern language: tokenizer
# ---------------------------------------------------------------------------

#: Token kinds. Punctuation tokens use their own character as their kind.
_IDENT = "identifier"
_INT = "integer"
_QUOTED = "quoted"
_END = "end"
_PUNCTUATION = frozenset("()[]:,-<>")

_Token = namedtuple("_Token", "kind text pos")


def _is_ident_start(ch):
    return ch == "_" or ("a" <= ch <= "z") or ("A" <= ch <= "Z")


def _is_ident_char(ch):
    return _is_ident_start(ch) or ("0" <= ch <= "9")


def _is_digit(ch):
    return "0" <= ch <= "9"


def _clean(text, limit=60):
    """``text`` fit for a one-line message: control and invisible characters escaped, long text cut."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return out if len(out) <= limit else out[:limit] + "..."


def _describe(token):
    """How an error message names ``token``: ``'['``, ``'abc'``, ``end of pattern``."""
    if token.kind == _END:
        return "end of pattern"
    if token.kind == _QUOTED:
        return "quoted name `" + _clean(token.text.replace("`", "``")) + "`"
    return repr(_clean(token.text))


class _Lexer:
    """Splits pattern text into tokens on demand, one token of lookahead.

    Tokens are read lazily so that the first problem in the text, reading
    left to right, is the one reported.
    """

    def __init__(self, text):
        self.text = text
        self.pos = 0
        self._peeked = None

    def peek(self):
        """The next token, without consuming it."""
        if self._peeked is None:
            self._peeked = self._scan()
        return self._peeked

    def next(self):
        """Consume and return the next token."""
        token = self.peek()
        self._peeked = None
        return token

    def _scan(self):
        text, n = self.text, len(self.text)
        while self.pos < n and text[self.pos].isspace():
            self.pos += 1
        start = self.pos
        if start == n:
            return _Token(_END, "", start)
        ch = text[start]
        if ch in _PUNCTUATION:
            self.pos += 1
            return _Token(ch, ch, start)
        if _is_ident_start(ch):
            return self._scan_run(_IDENT, _is_ident_char)
        if _is_digit(ch):
            return self._scan_run(_INT, _is_digit)
        if ch == "`":
            return self._scan_quoted()
        raise PatternError(f"unexpected character {ch!r} in pattern", start)

    def _scan_run(self, kind, accept):
        start = self.pos
        while self.pos < len(self.text) and accept(self.text[self.pos]):
            self.pos += 1
        return _Token(kind, self.text[start:self.pos], start)

    def _scan_quoted(self):
        """A backtick-quoted name; a doubled backtick stands for one backtick."""
        text, start = self.text, self.pos
        pieces = []
        i = start + 1
        while True:
            close = text.find("`", i)
            if close < 0:
                raise PatternError(
                    "unterminated backtick-quoted name: no closing '`'", start)
            pieces.append(text[i:close])
            if text.startswith("``", close):
                pieces.append("`")
                i = close + 2
                continue
            self.pos = close + 1
            return _Token(_QUOTED, "".join(pieces), start)


# ---------------------------------------------------------------------------
# The pattern language: parser
# ---------------------------------------------------------------------------


class _PatternBuilder:
    """Collects vertices and edges while the parser walks the text."""

    def __init__(self):
        self.names = []        # vertex index -> name or None
        self.labels = []       # vertex index -> label or None
        self.first_pos = []    # vertex index -> position of first mention
        self.index = {}        # name -> vertex index
        self.edges = []        # PatternEdge, in order of appearance
        self.edge_pos = []     # position of each edge in the text

    def vertex(self, name, label, pos, label_pos):
        """The index of the vertex mentioned at ``pos``, creating it if new."""
        if name is None or name not in self.index:
            self.names.append(name)
            self.labels.append(label)
            self.first_pos.append(pos)
            if name is not None:
                self.index[name] = len(self.names) - 1
            return len(self.names) - 1
        i = self.index[name]
        if label is not None:
            old = self.labels[i]
            if old is None:
                self.labels[i] = label
            elif old != label:
                raise PatternError(
                    f"conflicting labels for vertex {_show_name(name)}: "
                    f"{_show_label(old)} and {_show_label(label)}", label_pos)
        return i

    def edge(self, src, dst, label, directed, pos):
        if src == dst:
            raise PatternError(
                f"self-loop on vertex {self.display(src)}: an edge must join "
                f"two different vertices", pos)
        if not directed and src > dst:
            src, dst = dst, src
        self.edges.append(PatternEdge(src, dst, label, directed))
        self.edge_pos.append(pos)

    def display(self, i):
        name = self.names[i]
        return _show_name(name) if name is not None else f"() at position {self.first_pos[i]}"

    def build(self, strict_labels=True):
        vertices = tuple(PatternVertex(n, l) for n, l in zip(self.names, self.labels))
        edges = tuple(dict.fromkeys(self.edges))   # drop duplicates, keep order
        return Pattern(vertices, edges, strict_labels)


def _show_label(label):
    """A label as it would be written in a pattern: ``:Person``, ``:`a b```."""
    if _is_plain_label(label):
        return ":" + _clean(label)
    return ":`" + _clean(label.replace("`", "``")) + "`"


def _show_name(name):
    """A vertex name as it would be written in a pattern: ``a``, ```a b```."""
    if _is_ident_start(name[0]) and all(_is_ident_char(c) for c in name):
        return _clean(name)
    return "`" + _clean(name.replace("`", "``")) + "`"


def _show_bare_label(label):
    """A label as written after the ``:``: ``Person``, ```a b```; a long one cut (read only its start)."""
    return _show_label(label[:61])[1:]


#: Longest label that :func:`unknown_label` compares with difflib (its matcher is quadratic).
_FUZZY_LABEL = 200


def unknown_label(kind, label, known, suggest=3, listed=5):
    """The error for a pattern label that the store lacks, naming the closest it has.

    Parameters
    ----------
    kind : {"vertex", "edge"}
    label : str
        The label as the pattern gives it.
    known : list of str
        The store's labels of that kind, most frequent first.
    suggest, listed : int
        At most ``suggest`` close labels are offered (those equal but for
        case first, then those :func:`difflib.get_close_matches` finds);
        with none close, the first ``listed`` of ``known`` are.

    Returns
    -------
    PatternError

    Examples
    --------
    >>> str(unknown_label("edge", "KNWOS", ["KNOWS", "LIKES"]))
    'unknown edge label KNWOS; did you mean KNOWS?'
    >>> str(unknown_label("vertex", "person", ["Person", "Company"]))
    'unknown vertex label person; did you mean Person?'
    """
    head = f"unknown {kind} label {_show_bare_label(label)}"
    if not known:
        return PatternError(f"{head}; the store has no {kind} labels")
    folded = label.casefold()
    by_fold = {}
    for k in known:
        by_fold.setdefault(k.casefold(), []).append(k)
    close = [k for k in known if k.casefold() == folded]
    if len(label) <= _FUZZY_LABEL:
        close += difflib.get_close_matches(label, known, n=suggest)
        close += [k for f in difflib.get_close_matches(folded, list(by_fold), n=suggest) for k in by_fold[f]]
    close = list(dict.fromkeys(close))[:suggest]
    if close:
        names = [_show_bare_label(k) for k in close]
        either = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        return PatternError(f"{head}; did you mean {either}?")
    names = ", ".join(_show_bare_label(k) for k in known[:listed])
    more = f" and {len(known) - listed:,} more" if len(known) > listed else ""
    return PatternError(f"{head}; the store's {kind} labels are {names}{more}")


def _is_plain_label(label):
    if not label:
        return False
    if all(_is_digit(c) for c in label):
        return str(int(label)) == label
    return _is_ident_start(label[0]) and all(_is_ident_char(c) for c in label)


class _Parser:
    """Recursive-descent parser for the pattern grammar::

        pattern := path ("," path)* END
        path    := vertex (edge vertex)*
        vertex  := "(" [IDENT | QUOTED] [":" label] ")"
        edge    := "-" [body] "-" [">"]  |  "<" "-" [body] "-"
        body    := "[" [":" label] "]"
        label   := IDENT | INTEGER | QUOTED
    """

    def __init__(self, text):
        self.lexer = _Lexer(text)
        self.builder = _PatternBuilder()

    # -- token helpers ------------------------------------------------------

    def _accept(self, kind):
        """Consume the next token if it is of ``kind``; return it or None."""
        if self.lexer.peek().kind == kind:
            return self.lexer.next()
        return None

    def _expect(self, kind, what=None):
        token = self.lexer.next()
        if token.kind != kind:
            self._fail(token, what or repr(kind))
        return token

    @staticmethod
    def _fail(token, expected):
        raise PatternError(f"expected {expected}, found {_describe(token)}", token.pos)

    # -- grammar rules ------------------------------------------------------

    def pattern(self):
        first = self.lexer.peek()
        if first.kind == _END:
            raise PatternError("empty pattern: expected a vertex such as '(a)'", 0)
        self.path()
        while self._accept(","):
            self.path()
        token = self.lexer.next()
        if token.kind != _END:
            self._fail(token, "',' or end of pattern")
        return self.builder.build()

    def path(self):
        left = self.vertex()
        while self.lexer.peek().kind in ("-", "<"):
            src_to_dst, label, directed, pos = self.edge()
            right = self.vertex()
            src, dst = (left, right) if src_to_dst else (right, left)
            self.builder.edge(src, dst, label, directed, pos)
            left = right

    def vertex(self):
        open_ = self._expect("(", "'(' to start a vertex")
        name = None
        token = self._accept(_IDENT) or self._accept(_QUOTED)
        if token is not None:
            name = token.text
            if name == "":
                raise PatternError("empty vertex name ``", token.pos)
        label, label_pos = None, None
        if self.lexer.peek().kind == ":":
            label_pos = self.lexer.peek().pos
            label = self.label()
        close = self.lexer.next()
        if close.kind != ")":
            expected = "')'" if label is not None else (
                "':' or ')'" if name is not None else "a vertex name, ':' or ')'")
            self._fail(close, expected)
        return self.builder.vertex(name, label, open_.pos, label_pos)

    def edge(self):
        """Parse one edge; return (left_is_src, label, directed, position)."""
        start = self.lexer.peek()
        left_arrow = self._accept("<") is not None
        self._expect("-", "'-' after '<'" if left_arrow else "'-'")
        label = None
        if self._accept("[") is not None:
            label = self.edge_body()
        self._expect("-", "'-' to continue the edge")
        right_arrow = self._accept(">")
        if left_arrow and right_arrow is not None:
            raise PatternError(
                "an edge cannot point both ways; write '-[...]-' for an edge in "
                "either direction", start.pos)
        directed = left_arrow or right_arrow is not None
        return not left_arrow, label, directed, start.pos

    def edge_body(self):
        """The inside of ``[...]`` after the ``[``; returns the label or None."""
        token = self.lexer.peek()
        if token.kind in (_IDENT, _QUOTED):
            raise PatternError(
                f"edge variables are not supported: found {_describe(token)} "
                f"in an edge; write '-[:LABEL]->' instead", token.pos)
        label = None
        if token.kind == ":":
            label = self.label()
        self._expect("]", "']' to close the edge" if label else "':' or ']'")
        return label

    def label(self):
        """``":" label``; an integer label is normalised (``:03`` is ``3``)."""
        self._expect(":")
        token = self.lexer.next()
        if token.kind == _IDENT:
            return token.text
        if token.kind == _INT:
            return str(int(token.text))
        if token.kind == _QUOTED:
            if token.text == "":
                raise PatternError("empty label ``", token.pos)
            return token.text
        self._fail(token, "a label (a name, an integer or a `quoted name`) after ':'")


def _components(n, edges):
    """The connected components of vertices ``0..n-1``, ordered by first vertex."""
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for e in edges:
        parent[find(e.src)] = find(e.dst)
    components = {}
    for v in range(n):
        components.setdefault(find(v), []).append(v)
    return list(components.values())


def _check_connected(builder, where="", with_position=True):
    """Raise PatternError if the pattern's vertices fall apart into pieces."""
    components = _components(len(builder.names), builder.edges)
    if len(components) <= 1:
        return
    first, second = components[:2]

    def show(vs):
        return "{" + ", ".join(builder.display(v) for v in vs) + "}"

    more = f" (and {len(components) - 2} more pieces)" if len(components) > 2 else ""
    position = builder.first_pos[second[0]] if with_position else None
    raise PatternError(
        f"{where}pattern is disconnected: {show(first)} and {show(second)} share "
        f"no edge{more}; join them with an edge or run separate queries", position)


def _with_prefix(err, prefix):
    """A copy of PatternError ``err`` whose message starts with ``prefix``."""
    message = err.args[0]
    suffix = f" (at position {err.position})"
    if err.position is not None and message.endswith(suffix):
        message = message[:-len(suffix)]
    return PatternError(prefix + message, err.position)


def parse_pattern(text: str) -> Pattern:
    """Parse a pattern written in the Cypher / SQL-PGQ style pattern language.

    Parameters
    ----------
    text : str
        One or more paths separated by commas. A path alternates vertices
        ``(name:Label)`` and edges ``-[:L]->``, ``<-[:L]-``, ``-[:L]-``
        (undirected), ``-->``, ``<--``, ``--`` (any label). Names and labels
        are optional; a name is an identifier or a backtick-quoted string, a
        label an identifier, an integer or a backtick-quoted string (a
        doubled backtick is a literal backtick).
        A name used again refers to the same vertex; each ``()`` is a new,
        anonymous vertex.

    Returns
    -------
    Pattern
        Vertices in order of first appearance; edges in order of appearance
        with duplicates dropped; an undirected edge has ``src < dst``.

    Raises
    ------
    PatternError
        If the text does not parse, is empty, names two labels for one
        vertex, has a self-loop or is disconnected. ``position`` is the
        zero-based character offset of the problem.

    Examples
    --------
    >>> p = parse_pattern("(a:Person)-[:KNOWS]->(b)<-[:WORKS_AT]-(:Company)")
    >>> p.output_names
    ['a', 'b']
    >>> p.edges[1]
    PatternEdge(src=2, dst=1, label='WORKS_AT', directed=True)
    """
    if not isinstance(text, str):
        raise TypeError(f"pattern must be a str, not {type(text).__name__}")
    parser = _Parser(text)
    pattern = parser.pattern()
    _check_connected(parser.builder)
    return pattern


# ---------------------------------------------------------------------------
# The benchmark query format
# ---------------------------------------------------------------------------


def parse_query_text(text: str, source: str | None = None) -> Pattern:
    """Parse a query graph in the benchmark text format.

    The format is one ``t N M`` header, then ``v ID LABEL [DEGREE]`` and
    ``e U V`` lines in any order (a trailing extra column is ignored)::

        t 3 2
        v 0 8 1
        v 1 3 2
        v 2 8 1
        e 0 1
        e 1 2

    Parameters
    ----------
    text : str
        The file's text.
    source : str, optional
        A name for the text (a file name) used in error messages.

    Returns
    -------
    Pattern
        Vertex ``i`` is named ``u{i}`` and carries ``str(LABEL)``; every edge
        is undirected and unlabeled. ``strict_labels`` is False: a label the
        data lacks matches nothing, as the benchmarks count it.

    Raises
    ------
    PatternError
        Naming the line and what is wrong with it: an unknown line type,
        a missing or repeated header, a vertex id out of range or given
        twice, a degree that does not match the edges, counts that disagree
        with the header, a self-loop, or a disconnected query graph.

    Examples
    --------
    >>> p = parse_query_text("t 2 1\\nv 0 5 1\\nv 1 7 1\\ne 0 1\\n")
    >>> p.vertices[1], p.edges
    (PatternVertex(name='u1', label='7'), (PatternEdge(src=0, dst=1, label=None, directed=False),))
    """
    return _QueryReader(text, source).read()


class _QueryReader:
    """Reads one query graph in the ``t/v/e`` format, line by line."""

    def __init__(self, text, source):
        self.text = text
        self.where = f"{source}: " if source else ""
        self.header = None          # (n, m, line number, offset)
        self.labels = {}            # id -> label
        self.degrees = {}           # id -> (degree, line number, offset)
        self.edges = []             # (u, v, line number, offset)

    def fail(self, lineno, offset, message):
        raise PatternError(f"{self.where}line {lineno}: {message}", offset)

    def read(self):
        offset = 0
        for lineno, line in enumerate(self.text.splitlines(keepends=True), 1):
            fields = line.split()
            if fields and not fields[0].startswith("#"):
                self.line(fields, lineno, offset)
            offset += len(line)
        return self.finish(offset)

    def line(self, fields, lineno, offset):
        kind = fields[0]
        if self.header is None and kind != "t":
            self.fail(lineno, offset, f"expected the header 't N M', found {kind!r}")
        handler = {"t": self.t_line, "v": self.v_line, "e": self.e_line}.get(kind)
        if handler is None:
            self.fail(lineno, offset,
                      f"unknown line type {kind!r}; expected 't', 'v' or 'e'")
        handler(fields, lineno, offset)

    def ints(self, fields, count, lineno, offset, form):
        """The ``count`` integer fields after the line type."""
        if len(fields) < count + 1:
            self.fail(lineno, offset, f"expected '{form}', found {' '.join(fields)!r}")
        try:
            return [int(f) for f in fields[1:count + 1]]
        except ValueError:
            self.fail(lineno, offset,
                      f"expected integers in '{form}', found {' '.join(fields)!r}")

    def t_line(self, fields, lineno, offset):
        if self.header is not None:
            self.fail(lineno, offset,
                      f"a second 't' header (the first is on line {self.header[2]}); "
                      f"a query file holds one graph")
        n, m = self.ints(fields, 2, lineno, offset, "t N M")
        if n < 1 or m < 0:
            self.fail(lineno, offset, f"header needs N >= 1 and M >= 0, found N={n} M={m}")
        self.header = (n, m, lineno, offset)

    def v_line(self, fields, lineno, offset):
        n = self.header[0]
        (vid,) = self.ints(fields, 1, lineno, offset, "v ID LABEL DEGREE")
        if len(fields) < 3:
            self.fail(lineno, offset, "expected 'v ID LABEL DEGREE', the label is missing")
        if not 0 <= vid < n:
            self.fail(lineno, offset, f"vertex id {vid} out of range 0..{n - 1}")
        if vid in self.labels:
            self.fail(lineno, offset, f"vertex {vid} is given twice")
        label = fields[2]
        self.labels[vid] = str(int(label)) if _is_int(label) else label
        if len(fields) >= 4:
            if not _is_int(fields[3]):
                self.fail(lineno, offset, f"vertex degree {fields[3]!r} is not an integer")
            self.degrees[vid] = (int(fields[3]), lineno, offset)

    def e_line(self, fields, lineno, offset):
        n = self.header[0]
        u, v = self.ints(fields, 2, lineno, offset, "e U V")
        for x in (u, v):
            if not 0 <= x < n:
                self.fail(lineno, offset, f"edge endpoint {x} out of range 0..{n - 1}")
        if u == v:
            self.fail(lineno, offset, f"self-loop on vertex {u}")
        self.edges.append((u, v, lineno, offset))

    def finish(self, end):
        if self.header is None:
            raise PatternError(f"{self.where}empty query file: no 't N M' header", 0)
        n, m, lineno, offset = self.header
        if len(self.labels) != n:
            missing = min(set(range(n)) - set(self.labels))
            self.fail(lineno, offset, f"header says {n} vertices but the file has "
                      f"{len(self.labels)} 'v' lines (vertex {missing} is missing)")
        if len(self.edges) != m:
            self.fail(lineno, offset, f"header says {m} edges but the file has "
                      f"{len(self.edges)} 'e' lines")
        self.check_degrees()
        builder = _PatternBuilder()
        for i in range(n):
            builder.vertex(f"u{i}", self.labels[i], 0, None)
        for u, v, _, eoffset in self.edges:
            builder.edge(u, v, None, False, eoffset)
        _check_connected(builder, where=self.where, with_position=False)
        return builder.build(strict_labels=False)      # benchmark semantics: an absent label counts 0

    def check_degrees(self):
        """A given DEGREE must equal the number of distinct neighbours."""
        neighbours = {}
        for u, v, _, _ in self.edges:
            neighbours.setdefault(u, set()).add(v)
            neighbours.setdefault(v, set()).add(u)
        for vid, (degree, lineno, offset) in sorted(self.degrees.items()):
            actual = len(neighbours.get(vid, ()))
            if degree != actual:
                self.fail(lineno, offset, f"vertex {vid} says degree {degree} but "
                          f"has {actual} edges")


def _is_int(field):
    try:
        int(field)
    except ValueError:
        return False
    return True


def read_query_file(path) -> Pattern:
    """Read a query graph file in the benchmark ``t/v/e`` text format.

    Parameters
    ----------
    path : str or os.PathLike
        The query file.

    Returns
    -------
    Pattern
        See :func:`parse_query_text`.

    Raises
    ------
    PatternError
        If the file is missing, unreadable or malformed; the message names
        the file and the line.
    """
    return parse_query_text(_read_text(path), source=os.fspath(path))


def _read_text(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise PatternError(f"query file not found: {os.fspath(path)}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise PatternError(f"cannot read query file {os.fspath(path)}: {err}") from None


def load_pattern(pattern_or_path) -> Pattern:
    """Turn a pattern, pattern text or query file into a :class:`Pattern`.

    Parameters
    ----------
    pattern_or_path : Pattern, str or os.PathLike
        A :class:`Pattern` is returned as is. A path to an existing file is
        read: as the benchmark format if its first non-blank line starts
        with ``t``, else as pattern-language text. Any other string is
        parsed as pattern-language text.

    Returns
    -------
    Pattern

    Raises
    ------
    PatternError
        If the text or file is not a valid pattern, or a path-like object
        names no file.

    Examples
    --------
    >>> load_pattern("(a)-->(b)").output_names
    ['a', 'b']
    """
    if isinstance(pattern_or_path, Pattern):
        return pattern_or_path
    if not isinstance(pattern_or_path, (str, os.PathLike)):
        raise TypeError("expected a Pattern, pattern text or a query file path, "
                        f"not {type(pattern_or_path).__name__}")
    if os.path.isfile(pattern_or_path):
        return _load_file(pattern_or_path)
    if not isinstance(pattern_or_path, str):
        raise PatternError(f"query file not found: {os.fspath(pattern_or_path)}")
    try:
        return _parse_cached(pattern_or_path) if len(pattern_or_path) <= _CACHED_TEXT else \
            parse_pattern(pattern_or_path)
    except PatternError as err:
        if "(" in pattern_or_path:
            raise
        raise _with_prefix(err, f"{_clean(pattern_or_path)!r} is neither an existing "
                                f"query file nor a pattern: ") from None


#: Longest pattern text whose parse is kept (:func:`_parse_cached`).
_CACHED_TEXT = 4096


@functools.lru_cache(maxsize=256)
def _parse_cached(text: str) -> Pattern:
    """:func:`parse_pattern`, its result kept for the texts asked for most recently (a
    :class:`Pattern` is immutable). A query repeated, as a dashboard or a benchmark does, is
    not parsed again: the parse takes 107-171 us on the 8- and 12-vertex walks of
    bench/gpu_vs_cpu.py (the development machine), 1-3% of a light count on the GPU, and a
    cached one about 1 us. Errors are not kept: a bad text raises each time."""
    return parse_pattern(text)


def _load_file(path):
    text = _read_text(path)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if first == "t" or first.startswith(("t ", "t\t")):
        return parse_query_text(text, source=os.fspath(path))
    try:
        return parse_pattern(text)
    except PatternError as err:
        raise _with_prefix(err, f"{os.fspath(path)}: ") from None
