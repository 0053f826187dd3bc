"""Name the option a SQL user got wrong, which DuckDB's own error does not.

A DuckDB macro called with a named argument it lacks fails with the generic
``Binder Error: Macro match_count() does not support the supplied
arguments`` plus the macro's candidate signatures, without the name at
fault; ``limit := 10`` (LIMIT is a reserved word) is a parser error. The
client wrapper in :mod:`sgsi.db.hooks` hands such an error and the statement
to :func:`explain`, which finds the calls of the macro in the statement text
and, where it can tell, says which argument is wrong and which options there
are. The valid options come from the candidates DuckDB lists, so they follow
``sql/match.sql``.
"""

from __future__ import annotations

import difflib
import re

#: The macros whose errors are explained.
MACROS = ("match", "match_count", "match_delta", "match_count_delta", "sgsi_build", "sgsi_update",
          "sgsi_compact")

#: Names users try for an option the macros spell otherwise.
_SYNONYMS = {"limit": "max_rows", "injective": "homomorphism", "homomorphic": "homomorphism",
             "budget": "memory_budget", "memory": "memory_budget", "replace": "force", "overwrite": "force",
             "n_workers": "workers", "processes": "workers", "client": "scheduler", "address": "scheduler"}

_BINDER = re.compile(r'Macro "?(\w+)"?\(\) does not support the supplied arguments')
_PARSER = re.compile(r'syntax error at or near "(\w+)"', re.IGNORECASE)
_CANDIDATE = re.compile(r'^\s*"?(\w+)"?\((.*)\)\s*$')
_TOKEN = re.compile(r"""
    (?P<space>\s+|--[^\n]*|/\*.*?\*/)
  | (?P<string>[eE]?'(?:[^']|'')*'?)
  | (?P<quoted>"(?:[^"]|"")*"?)
  | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
  | (?P<named>:=|=>)
  | (?P<punct>.)
""", re.VERBOSE | re.DOTALL)


def explain(message, statement):
    """A clearer message for DuckDB's error ``message`` on ``statement``, or None to keep DuckDB's."""
    if not isinstance(statement, str):
        return None
    m = _BINDER.search(message)
    if m and m.group(1).lower() in MACROS:
        return _unsupported(m.group(1).lower(), _candidates(message), statement)
    m = _PARSER.search(message)
    if m and m.group(1).lower() == "limit":
        for name, _positional, named in _calls(statement, MACROS):
            if "limit" in named:
                if name == "match":
                    return ("Parser Error: LIMIT is a reserved word in SQL, so match() calls its row limit "
                            "max_rows: write max_rows := N (a LIMIT clause after the query also works, but the "
                            "whole result is computed first)")
                return f"Parser Error: {name}() has no option limit (LIMIT is a reserved word in SQL)"
    return None


def _unsupported(macro, candidates, statement):
    """The message for a call of ``macro`` that no candidate signature accepts."""
    if not candidates:
        return None
    positional = max(candidates, key=len)[0]
    options = []
    for _pos, opts in candidates:
        options += [o for o in opts if o not in options]
    listed = ", ".join(options)
    for name, n_positional, named in _calls(statement, (macro,)):
        for arg in named:
            if arg not in options and arg not in positional:
                hint = _SYNONYMS.get(arg) if _SYNONYMS.get(arg) in options else None
                close = [hint] if hint else difflib.get_close_matches(arg, options, n=1, cutoff=0.6)
                mean = f" (did you mean {close[0]}?)" if close else ""
                return (f"Binder Error: {macro}() has no option {arg!r}{mean}; its options are {listed} "
                        f"(name := value, after {', '.join(positional)})")
        if n_positional < len(positional):
            given = f"{n_positional} argument" + ("" if n_positional == 1 else "s")
            return f"Binder Error: {macro}() needs {' and '.join(positional)} first, got {given}"
        if n_positional > len(positional) + len(options):
            return (f"Binder Error: {macro}() takes at most {len(positional) + len(options)} arguments "
                    f"({', '.join(positional + options)}), got {n_positional}")
    return None


def _candidates(message):
    """[(positional parameter names, option names)] of the candidate macros listed in ``message``."""
    out = []
    lines = message.split("Candidate macros:", 1)
    for line in lines[1].splitlines() if len(lines) == 2 else ():
        m = _CANDIDATE.match(line)
        if m is None:
            if out:
                break
            continue
        positional, options = [], []
        for param in _split(m.group(2)):
            name = param.split(":=", 1)[0].strip().strip('"').lower()
            (options if ":=" in param else positional).append(name)
        out.append((positional, options))
    return out


def _split(text):
    """``text`` split at its top-level commas (outside brackets and quotes)."""
    parts, depth, start = [], 0, 0
    for tok in _TOKEN.finditer(text):
        c = tok.group()
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:tok.start()])
            start = tok.end()
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _calls(statement, names):
    """Each call in ``statement`` of a function in ``names``: (name, positional count, named argument names)."""
    toks = [(t.lastgroup, t.group()) for t in _TOKEN.finditer(statement) if t.lastgroup != "space"]
    for i, (kind, text) in enumerate(toks):
        if kind != "word" or text.lower() not in names or i + 1 >= len(toks) or toks[i + 1][1] != "(":
            continue
        depth, n_positional, named, arg_start, prev = 0, 0, [], True, (None, None)
        for kind2, text2 in toks[i + 1:]:
            if arg_start and depth == 1 and text2 != ")":
                arg_start = False
                n_positional += 1           # undone below for a named argument
            if text2 in "([{" and kind2 == "punct":
                depth += 1
            elif text2 in ")]}" and kind2 == "punct":
                depth -= 1
                if depth == 0:
                    break
            elif text2 == "," and depth == 1:
                arg_start = True
            elif kind2 == "named" and depth == 1 and prev[0] in ("word", "quoted"):
                name = prev[1][1:-1].replace('""', '"') if prev[0] == "quoted" else prev[1]
                named.append(name.lower())        # DuckDB matches names case-insensitively, quoted or not
                n_positional -= 1
            prev = (kind2, text2)
        yield text.lower(), n_positional, named
