"""Sharded queries on Dask: one query split by the candidates of a pattern vertex into tasks.

``Graph.count(pattern, workers=N)`` (and ``match``; ``--workers`` on the command line,
``workers :=`` in SQL) runs here: :mod:`.driver` splits the query
(:mod:`sgsi.join.shard`), submits one task a shard to a Dask cluster
(:mod:`.cluster`), and sums the counts or reads back the Parquet parts the
tasks write (:mod:`.parts`); :mod:`.tasks` is what the workers run. Dask is
imported only here, and only when a sharded query runs: ``pip install 'sgsi[dask]'``.
"""
