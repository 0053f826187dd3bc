-- sgsi in DuckDB SQL: the macros that sgsi.register(con) creates on a connection.
--
-- DuckDB's Python client has no table functions written in Python, so
-- match() is a table macro over scalar Python functions that sgsi registers:
--
--   sgsi_match_files(...)  runs the query once, streams its result batches
--                          into Parquet files in a scratch directory (bounded
--                          memory), and returns a glob over them; DuckDB
--                          evaluates it while binding read_parquet().
--   sgsi_count(...)        the number of matches (no result rows are made).
--   sgsi_match_delta_files(...), sgsi_count_delta(...)
--                          the same for the matches gained and lost since a
--                          version of the store (match_delta, match_count_delta).
--   sgsi_build_store(...)  builds a graph store from Parquet files or queries.
--   sgsi_update_store(...), sgsi_compact_store(...)  a store's updates and compaction.
--
-- The macros are TEMP (this connection only). ${token} names the connection
-- so that its cached results are kept apart from other connections'; the
-- transaction id lets sgsi tell statements apart, so one statement runs the
-- engine once however often DuckDB binds the macro, and old results are
-- removed. workers := N and scheduler := 'tcp://host:8786' shard the query
-- over Dask (README). ${device}, ${memory_budget} and ${homomorphism} are the defaults
-- given to sgsi.register(con, ...). The placeholders are filled in by
-- sgsi/db/registration.py.

-- SELECT * FROM match('G.sgsi', '(a:Person)-[:KNOWS]->(b)');
-- One row per embedding; one column per named pattern vertex, in order of
-- first appearance, holding original vertex ids in their original type.
CREATE OR REPLACE TEMP MACRO match(graph, pattern,
                                   device := ${device},
                                   memory_budget := ${memory_budget},
                                   homomorphism := ${homomorphism},
                                   max_rows := NULL,
                                   workers := NULL,
                                   scheduler := NULL) AS TABLE
    SELECT * FROM read_parquet(
        sgsi_match_files(${token}, txid_current(),
                         CAST(graph AS VARCHAR), CAST(pattern AS VARCHAR), CAST(device AS VARCHAR),
                         CAST(memory_budget AS VARCHAR), CAST(homomorphism AS BOOLEAN),
                         CAST(max_rows AS BIGINT), CAST(workers AS BIGINT), CAST(scheduler AS VARCHAR)),
        hive_partitioning := false);

-- SELECT match_count('G.sgsi', '(a)-[:KNOWS]->(b)-[:KNOWS]->(a)');
CREATE OR REPLACE TEMP MACRO match_count(graph, pattern,
                                         device := ${device},
                                         memory_budget := ${memory_budget},
                                         homomorphism := ${homomorphism},
                                         workers := NULL,
                                         scheduler := NULL) AS
    sgsi_count(${token}, txid_current(),
               CAST(graph AS VARCHAR), CAST(pattern AS VARCHAR), CAST(device AS VARCHAR),
               CAST(memory_budget AS VARCHAR), CAST(homomorphism AS BOOLEAN),
               CAST(workers AS BIGINT), CAST(scheduler AS VARCHAR));

-- SELECT * FROM match_delta('G.sgsi', '(a)-[:KNOWS]->(b)-[:KNOWS]->(a)', since := 3);
-- The embeddings gained (sign = 1) and lost (sign = -1) from version `since` of
-- the store to its latest one: match()'s columns and an int8 column sign.
CREATE OR REPLACE TEMP MACRO match_delta(graph, pattern,
                                         since := NULL,
                                         device := ${device},
                                         memory_budget := ${memory_budget},
                                         homomorphism := ${homomorphism},
                                         max_rows := NULL) AS TABLE
    SELECT * FROM read_parquet(
        sgsi_match_delta_files(${token}, txid_current(),
                               CAST(graph AS VARCHAR), CAST(pattern AS VARCHAR), CAST(since AS BIGINT),
                               CAST(device AS VARCHAR), CAST(memory_budget AS VARCHAR),
                               CAST(homomorphism AS BOOLEAN), CAST(max_rows AS BIGINT)),
        hive_partitioning := false);

-- SELECT match_count_delta('G.sgsi', '(a)-[:KNOWS]->(b)', since := 3);
-- A STRUCT(added BIGINT, removed BIGINT): the embeddings gained and lost.
CREATE OR REPLACE TEMP MACRO match_count_delta(graph, pattern,
                                               since := NULL,
                                               device := ${device},
                                               memory_budget := ${memory_budget},
                                               homomorphism := ${homomorphism}) AS
    sgsi_count_delta(${token}, txid_current(),
                     CAST(graph AS VARCHAR), CAST(pattern AS VARCHAR), CAST(since AS BIGINT),
                     CAST(device AS VARCHAR), CAST(memory_budget AS VARCHAR), CAST(homomorphism AS BOOLEAN));

-- SELECT sgsi_build('G.sgsi', edges := 'edges/*.parquet', vertices := 'v.parquet');
-- SELECT sgsi_build('G.sgsi', edges_query := 'SELECT a AS src, b AS dst, rel AS label FROM knows');
-- edges/vertices take a path, a glob or a list of them; edges_query and
-- vertices_query take a SELECT over this database's tables (committed
-- data of persistent tables; TEMP tables are not visible, see README).
CREATE OR REPLACE TEMP MACRO sgsi_build(store,
                                        edges := NULL,
                                        vertices := NULL,
                                        graph := NULL,
                                        edges_query := NULL,
                                        vertices_query := NULL,
                                        src := 'src',
                                        dst := 'dst',
                                        label := NULL,
                                        id := 'id',
                                        vertex_label := NULL,
                                        undirected := false,
                                        lean := false,
                                        memory_budget := NULL,
                                        force := false) AS
    sgsi_build_store(${token},
                     CAST(store AS VARCHAR), CAST(to_json(edges) AS VARCHAR), CAST(to_json(vertices) AS VARCHAR),
                     CAST(graph AS VARCHAR), CAST(edges_query AS VARCHAR), CAST(vertices_query AS VARCHAR),
                     CAST(src AS VARCHAR), CAST(dst AS VARCHAR), CAST(label AS VARCHAR), CAST(id AS VARCHAR),
                     CAST(vertex_label AS VARCHAR), CAST(undirected AS BOOLEAN), CAST(lean AS BOOLEAN),
                     CAST(memory_budget AS VARCHAR), CAST(force AS BOOLEAN));

-- SELECT sgsi_update('G.sgsi', insert := 'new.parquet', delete := 'gone.parquet');
-- One batch of edge insertions and deletions as a new store version; the
-- columns are the build's (src, dst, label; vertex files id, label). Returns
-- a JSON summary (version, inserted, deleted, already_present, absent, ...).
CREATE OR REPLACE TEMP MACRO sgsi_update(store,
                                         insert := NULL,
                                         delete := NULL,
                                         vertices := NULL,
                                         src := 'src',
                                         dst := 'dst',
                                         label := NULL,
                                         id := 'id',
                                         vertex_label := NULL) AS
    sgsi_update_store(${token},
                      CAST(store AS VARCHAR), CAST(to_json(insert) AS VARCHAR), CAST(to_json(delete) AS VARCHAR),
                      CAST(to_json(vertices) AS VARCHAR), CAST(src AS VARCHAR), CAST(dst AS VARCHAR),
                      CAST(label AS VARCHAR), CAST(id AS VARCHAR), CAST(vertex_label AS VARCHAR));

-- SELECT sgsi_compact('G.sgsi');
-- Merge the store's deltas into new base files (atomically); a JSON summary.
CREATE OR REPLACE TEMP MACRO sgsi_compact(store) AS
    sgsi_compact_store(${token}, CAST(store AS VARCHAR));
