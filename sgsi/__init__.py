"""sgsi: out-of-core, GPU-friendly subgraph matching for labeled graphs, from DuckDB SQL.

>>> import sgsi
>>> g = sgsi.open("social.sgsi")                                  # doctest: +SKIP
>>> g.count("(a:Person)-[:KNOWS]->(b)-[:KNOWS]->(a)")              # doctest: +SKIP
"""

from .errors import BudgetError, InputError, PatternError, SgsiError, StoreError
from .graph import Graph, build, open
from .pattern import Pattern, load_pattern, parse_pattern

__version__ = "0.1.0"


def register(con, **defaults):
    """Register match(), match_count() and sgsi_build() on a DuckDB connection."""
    from .db import register as _register
    return _register(con, **defaults)


__all__ = ["build", "open", "register", "Graph", "Pattern", "parse_pattern", "load_pattern",
           "SgsiError", "InputError", "StoreError", "PatternError", "BudgetError", "__version__"]
