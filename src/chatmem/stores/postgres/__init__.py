"""The PostgreSQL store (SPEC B2): pgvector for vectors, PostgreSQL full-text search for words.

Layout, in one PostgreSQL schema per store (``<prefix>``, default ``chatmem``, so several
stores can share a database):

- ``memories``: one row per record; the filterable fields as columns, ``user_metadata`` as
  JSONB for metadata filters, the full record as JSON text in ``body``, ``search`` (a weighted
  ``tsvector`` of ``text.index_fields``) and ``embedding`` (a pgvector ``vector``).
- ``memory_history``: every add, update and delete, with the record before and after.
- ``chatmem_meta``: the bound embedding model; ``chatmem_schema``: applied schema versions
  (:mod:`chatmem.stores.schema_versions`; the store's component is ``chatmem``).

Migrations are append-only (``MIGRATIONS``) and run under an advisory lock, so several
processes may open a new database at once. ``embedding`` gets its dimension, and an HNSW index
with cosine distance, when an embedding model is bound (pgvector indexes need a fixed
dimension; past ``HNSW_MAX_DIMENSIONS`` there is no index and every search is exact).

Vector search. Every query is restricted to one tenant and user in SQL. An HNSW index scan
filters *after* it walks the graph, so with a WHERE on the user it can return fewer rows than
asked. This store therefore scores a user's rows exactly (a scan of the user's rows through
the ``(tenant_id, user_id)`` index, ordered by an expression the HNSW index cannot serve)
while the user has at most ``exact_search_rows`` memories (default 10,000; measured p50 2 ms
at 1,000 and 16 ms at 10,000 memories of 384 dimensions on a busy 2-core machine). Larger
users go through HNSW with ``hnsw.iterative_scan = relaxed_order`` (pgvector >= 0.8), which
keeps scanning until enough rows pass the filter; their results are approximate, as HNSW is.
With an older pgvector every search is exact.

Keyword search: ``search`` holds the memory's text (weight A), the previous turn (B), the next
turn (C) and the day it was said (D), analysed with the ``english`` configuration (Snowball
stems, stop words). A query's content words (``text.query_terms``) are OR-ed; a hit's score
is each word's ``ts_rank`` (under ``RANK_WEIGHTS``, the SQLite store's FTS weights, and length
normalisation) times the word's idf among the user's memories, as FTS5's ``bm25()`` weighs
it, so the user's own name, in most memories, weighs next to nothing; only the words above
the idf floor find rows, where the query has any. The counts behind the idf are kept per
user for 30 s (:mod:`~chatmem.stores.postgres.words`), and counted again once this process
has written 2 % of the user's memories since (after any write, for a user of fewer than
200); a word not counted yet is counted before the statement that ranks the rows. Keyword
hits carry their cosine too when the query has a vector.

Answers. A candidate chat turn that answers a question (the turn before it in its session
asks something, and both are admitted) is scored at least as the two together, as in the
SQLite store; the answer to a candidate question joins the candidates
(``search.answer_pairs``, through the index ``memories_by_session``). The SQLite store does
this for every row of the user, this store for the candidates of each half.

Each write is one transaction on a pooled connection (psycopg 3, ``psycopg_pool``); updates
lock the row and check its version (optimistic concurrency). Keeping the HNSW index current
costs about 2 to 5 ms per inserted memory (384 dimensions, 2 cores). PostgreSQL text cannot
hold NUL characters: they are dropped from the keyword index, and refused in ids and metadata.

Modules: :mod:`~chatmem.stores.postgres.schema` (tables, migrations, pgvector and the HNSW
index), :mod:`~chatmem.stores.postgres.filters` (a ``Filter`` in SQL),
:mod:`~chatmem.stores.postgres.writes` (rows, history, vectors on the wire),
:mod:`~chatmem.stores.postgres.search` (the vector and keyword halves, the answers),
:mod:`~chatmem.stores.postgres.words` (each user's word counts, for the idf) and
:mod:`~chatmem.stores.postgres.store` (``PostgresStore``). The pool, error translation and
migrations are :mod:`chatmem.stores.postgres_db`'s, shared with the service state.
"""

from __future__ import annotations

from chatmem.stores.postgres.schema import (
    HNSW_MAX_DIMENSIONS,
    INDEXED_METADATA,
    MIGRATIONS,
    TEXT_SEARCH_CONFIG,
)
from chatmem.stores.postgres.search import (
    EXACT_SEARCH_ROWS,
    MAX_EF_SEARCH,
    RANK_NORMALISATION,
    RANK_WEIGHTS,
)
from chatmem.stores.postgres.store import PostgresStore
from chatmem.stores.postgres.writes import VectorDumper
from chatmem.stores.postgres_db import MIGRATION_LOCK, Connection

__all__ = [
    "EXACT_SEARCH_ROWS",
    "HNSW_MAX_DIMENSIONS",
    "INDEXED_METADATA",
    "MAX_EF_SEARCH",
    "MIGRATIONS",
    "MIGRATION_LOCK",
    "RANK_NORMALISATION",
    "RANK_WEIGHTS",
    "TEXT_SEARCH_CONFIG",
    "Connection",
    "PostgresStore",
    "VectorDumper",
]
