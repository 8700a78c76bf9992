"""The PostgreSQL memory store's tables (in one schema per store): their append-only
migrations, the pgvector extension they need, and the vector column's dimension and HNSW
index, fixed when an embedding model is bound.

- ``memories``: one row per record; the filterable fields as columns, ``user_metadata`` as
  JSONB for metadata filters, the full record as JSON text in ``body``, ``search`` (a
  weighted ``tsvector`` of ``text.index_fields``) and ``embedding`` (a pgvector ``vector``).
- ``memory_history``: every add, update and delete, with the record before and after.
- ``chatmem_meta``: the bound embedding model.
- ``memory_word_states``: the word-piece states of a memory's text, by its ``seq``; deleted
  with their memory, and when its vector changes.
"""

from __future__ import annotations

import re

import psycopg

from chatmem.errors import StoreUnavailableError
from chatmem.stores.postgres_db import Connection

#: pgvector's HNSW index takes ``vector`` columns of at most this many dimensions.
HNSW_MAX_DIMENSIONS = 2_000
TEXT_SEARCH_CONFIG = "english"

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE {schema}.chatmem_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE {schema}.memories (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        agent_id TEXT,
        project_id TEXT,
        session_id TEXT,
        type TEXT NOT NULL,
        scope TEXT NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        valid_from TIMESTAMPTZ,
        valid_to TIMESTAMPTZ,
        version INTEGER NOT NULL,
        user_metadata JSONB NOT NULL,
        body TEXT NOT NULL,
        search TSVECTOR NOT NULL,
        embedding vector NOT NULL
    );
    CREATE INDEX memories_by_user ON {schema}.memories (tenant_id, user_id, created_at, seq);
    CREATE INDEX memories_search ON {schema}.memories USING gin (search);
    CREATE TABLE {schema}.memory_history (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        memory_id TEXT NOT NULL,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        event TEXT NOT NULL,
        old TEXT,
        new TEXT,
        reason TEXT,
        at TIMESTAMPTZ NOT NULL
    );
    CREATE INDEX history_by_memory ON {schema}.memory_history (memory_id, seq);
    """,
    # The write policy looks a user's memories up by these user_metadata keys on every
    # extraction batch; without an index each lookup read every row of the user.
    """
    CREATE INDEX memories_by_write_batch ON {schema}.memories (tenant_id, user_id,
        (COALESCE(user_metadata -> 'write_batch', 'null'::jsonb)), created_at);
    CREATE INDEX memories_by_subject ON {schema}.memories (tenant_id, user_id,
        (COALESCE(user_metadata -> 'subject', 'null'::jsonb)), created_at);
    """,
    # A memory's TTL (time.expires_at); the sweep finds the expired ones by this index.
    """
    ALTER TABLE {schema}.memories ADD COLUMN expires_at TIMESTAMPTZ;
    CREATE INDEX memories_expiring ON {schema}.memories (tenant_id, user_id, expires_at)
        WHERE expires_at IS NOT NULL;
    """,
    # A search scores an answer with its question: the chat turn before or after a
    # candidate in its session is looked up by this index (``search.answer_pairs``).
    """
    CREATE INDEX memories_by_session ON {schema}.memories (tenant_id, user_id, session_id, seq)
        WHERE session_id IS NOT NULL AND type = 'episodic';
    """,
    # The word-piece states of a memory's text (``embeddings.tokens``), for the late
    # rerank: kept so that every process ranks as the one that embedded the memory did.
    """
    CREATE TABLE {schema}.memory_word_states (
        seq BIGINT PRIMARY KEY REFERENCES {schema}.memories (seq) ON DELETE CASCADE,
        states BYTEA NOT NULL
    );
    """,
)
#: user_metadata keys with an index (migration 2); a filter on one of them names the key in
#: the SQL text, the index's own expression, so the planner can use it.
INDEXED_METADATA = frozenset({"write_batch", "subject"})


def index_text(value: str) -> str:
    """Text as the keyword index takes it: PostgreSQL text cannot hold NUL characters."""
    return value.replace("\x00", " ")


def pgvector_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def ensure_pgvector(conn: Connection, location: str) -> tuple[int, ...]:
    """pgvector's version, after creating the extension where it is missing."""
    version = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
    row = conn.execute(version).fetchone()
    if row is None:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            raise StoreUnavailableError(
                f"PostgreSQL at {location} lacks the pgvector extension and it could"
                f" not be created ({exc}); install pgvector and run CREATE EXTENSION vector"
                " as a superuser"
            ) from exc
        row = conn.execute(version).fetchone()
    assert row is not None
    return pgvector_version(str(row[0]))


def index_vectors(conn: Connection, schema: str, dimension: int) -> None:
    """Fix the vector column's dimension and build its HNSW index (empty table: instant).

    pgvector's default storage moves vectors out of line (TOAST) once a row passes 2 kB,
    which made an exact scan 5x slower; MAIN keeps them in the row unless it cannot fit.
    """
    conn.execute(
        f"ALTER TABLE {schema}.memories ALTER COLUMN embedding TYPE vector({dimension}),"
        " ALTER COLUMN embedding SET STORAGE MAIN"
    )
    if dimension <= HNSW_MAX_DIMENSIONS:
        conn.execute(
            f"CREATE INDEX IF NOT EXISTS memories_embedding ON {schema}.memories"
            " USING hnsw (embedding vector_cosine_ops)"
        )


__all__ = [
    "HNSW_MAX_DIMENSIONS",
    "INDEXED_METADATA",
    "MIGRATIONS",
    "TEXT_SEARCH_CONFIG",
    "ensure_pgvector",
    "index_text",
    "index_vectors",
    "pgvector_version",
]
