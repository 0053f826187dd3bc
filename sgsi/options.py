"""One vocabulary of options for Python, SQL and the command line.

Every option has one name, spelled the way each interface spells names::

    Python                   SQL                        command line
    homomorphism=True        homomorphism := true       --homomorphism
    max_rows=10              max_rows := 10             --max-rows 10
    device="cpu"             device := 'cpu'            --device cpu
    memory_budget="2GB"      memory_budget := '2GB'     --memory-budget 2GB
    force=True               force := true              --force
    workers=4                workers := 4               --workers 4
    scheduler="tcp://h:8786" scheduler := 'tcp://h:8786' --scheduler tcp://h:8786

``homomorphism`` is what Cypher and graph databases call non-injective
matching. The row limit is ``max_rows`` (DuckDB's ``.maxrows``, JDBC's
``setMaxRows``) rather than ``limit``: LIMIT is a reserved word in SQL, and
DuckDB does not parse ``limit := 10`` as a named argument.

Deprecated, for one release: ``injective=`` (the opposite of
``homomorphism``) and ``limit=`` in :meth:`sgsi.Graph.count` and
:meth:`sgsi.Graph.match` (a :class:`DeprecationWarning`), and ``--limit``
on the command line (a note on stderr).

Error messages are written with the command line's spelling (``use
--force``) wherever they are raised. :class:`~sgsi.errors.SgsiError` shows
them in the spelling of the interface the user is in (:func:`respell`):
Python by default; the SQL functions and the command line mark the errors
that reach them.
"""

from __future__ import annotations

import re

#: Options that take no value on the command line (``--force``): True in Python and SQL.
FLAGS = frozenset({"force", "lean", "undirected", "homomorphism", "verify"})

#: Options that take a value; ``--memory-budget`` is ``memory_budget`` in Python and SQL.
VALUED = frozenset({"device", "memory-budget", "max-rows", "graph", "edges", "vertices", "src", "dst", "label",
                    "id", "vertex-label", "theta", "workers", "scheduler"})

INTERFACES = ("python", "sql", "cli")

_CLI_OPTION = re.compile(r"(?<!\S)--([a-z][a-z-]*)(?: (cpu|gpu|auto)\b)?")


def spell(name, value=None, interface="python") -> str:
    """Option ``name`` (with ``value``: a flag's True, or a device) as ``interface`` writes it.

    >>> spell("force", True, "sql"), spell("device", "cpu", "python"), spell("memory_budget", None, "cli")
    ('force := true', 'device="cpu"', '--memory-budget')
    """
    if interface not in INTERFACES:
        raise ValueError(f"unknown interface {interface!r}")
    if interface == "cli":
        flag = "--" + name.replace("_", "-")
        return flag if value is None or value is True else f"{flag} {value}"
    name = name.replace("-", "_")
    if value is None:
        return name
    if interface == "sql":
        v = ("true" if value else "false") if isinstance(value, bool) else f"'{value}'"
        return f"{name} := {v}"
    return f"{name}={value!r}" if not isinstance(value, str) else f'{name}="{value}"'


def respell(message, interface) -> str:
    """``message``, written with the command line's options, in ``interface``'s spelling.

    A command in backquotes (```sgsi info --verify G```) is left as it is.

    >>> respell("output path exists: g.sgsi (use --force to replace it)", "sql")
    'output path exists: g.sgsi (use force := true to replace it)'
    """
    if interface == "cli" or "--" not in message:
        return message
    parts = message.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = _CLI_OPTION.sub(lambda m: _respelled(m, interface), parts[i])
    return "`".join(parts)


def _respelled(m, interface):
    name, value = m.group(1), m.group(2)
    if name in FLAGS:
        return spell(name, True, interface) + (f" {value}" if value else "")
    if name == "device":
        return spell(name, value, interface)
    if name in VALUED:
        return spell(name, None, interface) + (f" {value}" if value else "")
    return m.group(0)
