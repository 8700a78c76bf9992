"""The PostgreSQL store (SPEC B2): pgvector for vectors, PostgreSQL full-text search for words.

Layout, in one PostgreSQL schema per store (``<prefix>``, default ``chatmem``, so several
stores can share a database):

- ``memories``: one row per record; the filterable fields as columns, ``user_metadata`` as
  JSONB for metadata filters, the full record as JSON text in ``body``, ``search`` (a weighted
  ``tsvector`` of ``text.index_fields``) and ``embedding`` (a pgvector ``vector``).
- ``memory_history``: every add, update and delete, with the record before and after.
- ``chatmem_meta``: the bound embedding model; ``chatmem_migrations``: applied schema versions.

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
stems, stop words). A query's content words (``text.query_terms``) are OR-ed, and hits are
ranked with ``ts_rank`` under ``RANK_WEIGHTS`` (the SQLite store's FTS weights) and length
normalisation. Keyword hits carry their cosine too when the query has a vector.

Each write is one transaction on a pooled connection (psycopg 3, ``psycopg_pool``); updates
lock the row and check its version (optimistic concurrency). Keeping the HNSW index current
costs about 2 to 5 ms per inserted memory (384 dimensions, 2 cores). PostgreSQL text cannot
hold NUL characters: they are dropped from the keyword index, and refused in ids and metadata.
"""

from __future__ import annotations

import builtins
import json
import math
import re
import struct
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
from psycopg import errors as pg_errors
from psycopg.adapt import Dumper
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import Format
from psycopg_pool import ConnectionPool, PoolTimeout
from pydantic_core import to_json

from chatmem import text as textlib
from chatmem.errors import (
    ConfigError,
    ConflictError,
    EmbedderMismatchError,
    NotFoundError,
    StoreError,
    StoreUnavailableError,
    ValidationError,
)
from chatmem.records import (
    Candidate,
    EmbeddingInfo,
    Entry,
    Filter,
    HistoryEntry,
    HistoryEvent,
    MemoryRecord,
    Page,
    Vector,
    to_ms,
    utcnow,
)
from chatmem.stores.base import (
    Capabilities,
    Change,
    MemoryStore,
    SearchQuery,
    Usage,
    read_cursor,
    write_cursor,
)

Connection = psycopg.Connection[Any]

#: Users with at most this many memories are scored exactly (see the module docstring).
EXACT_SEARCH_ROWS = 10_000
#: pgvector's HNSW index takes ``vector`` columns of at most this many dimensions.
HNSW_MAX_DIMENSIONS = 2_000
#: ``hnsw.ef_search`` may not exceed this.
MAX_EF_SEARCH = 1_000
TEXT_SEARCH_CONFIG = "english"
#: ts_rank weights in PostgreSQL's order {D, C, B, A}: day 1.0, next turn 0.3, previous turn
#: 0.5, text 1.0, as the SQLite store's FTS weights.
RANK_WEIGHTS = "{1.0, 0.3, 0.5, 1.0}"
#: ts_rank normalisation 1: divide by 1 + log(document length), as BM25 favours short texts.
RANK_NORMALISATION = 1
#: Key of the advisory lock that serialises migrations of every chatmem store in a database.
MIGRATION_LOCK = 0x63686D6D  # "chmm"

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

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
)
#: user_metadata keys with an index (migration 2); a filter on one of them names the key in
#: the SQL text, the index's own expression, so the planner can use it.
INDEXED_METADATA = frozenset({"write_batch", "subject"})

_INSERT_COLUMNS = (
    "id, tenant_id, user_id, agent_id, project_id, session_id, type, scope, created_at,"
    " valid_from, valid_to, version, expires_at, user_metadata, body, search, embedding"
)
_SEARCH_VECTOR = (
    f"setweight(to_tsvector('{TEXT_SEARCH_CONFIG}', %s), 'A')"
    f" || setweight(to_tsvector('{TEXT_SEARCH_CONFIG}', %s), 'B')"
    f" || setweight(to_tsvector('{TEXT_SEARCH_CONFIG}', %s), 'C')"
    f" || setweight(to_tsvector('{TEXT_SEARCH_CONFIG}', %s), 'D')"
)
#: Placeholders for ``_INSERT_COLUMNS``: ``_columns``, then ``_search_fields``, then the vector.
_INSERT_VALUES = ", ".join(["%s"] * 13 + ["%s::jsonb", "%s", _SEARCH_VECTOR, "%s::vector"])


# -- pure helpers ----------------------------------------------------------------------------


def _python_equals(value: Any) -> builtins.list[str]:
    """The JSON values (as JSON text) that Python finds equal to ``value``: ``True == 1 ==
    1.0``, and None stands for a missing key as well as a JSON null."""
    if isinstance(value, bool):
        return [json.dumps(value), json.dumps(int(value))]
    if isinstance(value, int | float):
        if isinstance(value, float) and math.isnan(value):
            return []  # NaN equals nothing, itself included
        same = [json.dumps(value)]
        if value in (0, 1):
            same.append(json.dumps(bool(value)))
        return same
    return [json.dumps(value)]


def _where(scope: Filter, alias: str = "m") -> tuple[str, builtins.list[Any]]:
    """SQL conditions (over ``memories AS alias``) equivalent to ``Filter.matches``."""
    conditions = [f"{alias}.tenant_id = %s"]
    params: builtins.list[Any] = [scope.tenant_id]
    for column in ("user_id", "agent_id", "project_id", "session_id"):
        value = getattr(scope, column)
        if value is not None:
            conditions.append(f"{alias}.{column} = %s")
            params.append(value)
    for column, values in (("id", scope.ids), ("type", scope.types), ("scope", scope.scopes)):
        if values is not None:
            conditions.append(f"{alias}.{column} = ANY(%s)")
            params.append(sorted(str(v) for v in values))
    if scope.created_after is not None:
        conditions.append(f"{alias}.created_at >= %s")
        params.append(scope.created_after)
    if scope.created_before is not None:
        conditions.append(f"{alias}.created_at < %s")
        params.append(scope.created_before)
    if scope.valid_at is not None:
        conditions.append(
            f"({alias}.valid_from IS NULL OR {alias}.valid_from <= %s)"
            f" AND ({alias}.valid_to IS NULL OR %s < {alias}.valid_to)"
        )
        params.extend([scope.valid_at, scope.valid_at])
    for key, value in (scope.metadata or {}).items():
        same = _python_equals(value)
        if not same:
            conditions.append("FALSE")
            continue
        choices = ", ".join(["%s::jsonb"] * len(same))
        if key in INDEXED_METADATA:
            path = f"{alias}.user_metadata -> '{key}'"
        else:
            path = f"{alias}.user_metadata -> %s"
            params.append(key)
        conditions.append(f"COALESCE({path}, 'null'::jsonb) IN ({choices})")
        params.extend(same)
    if scope.expired is not None:
        conditions.append(
            f"{alias}.expires_at <= %s"
            if scope.expired
            else f"({alias}.expires_at IS NULL OR {alias}.expires_at > %s)"
        )
        params.append(utcnow())
    if scope.reader_roles is not None:
        # SPEC L7: a memory that names roles only for a reader holding one of them.
        roles = f"({alias}.body::jsonb -> 'access_control' -> 'allowed_roles')"
        conditions.append(
            f"(COALESCE(jsonb_array_length({roles}), 0) = 0 OR {roles} ?| %s::text[])"
        )
        params.append(sorted(scope.reader_roles))
    return " AND ".join(conditions), params


class VectorDumper(Dumper):
    """Sends a numpy vector in pgvector's binary form: the dimension, a reserved int16, then
    big-endian float32s (100x faster than its text form). The type oid is left to the
    server, so every parameter it fills is cast: ``%s::vector``."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        vector = np.asarray(obj, dtype=">f4")
        return struct.pack(">HH", len(vector), 0) + vector.tobytes()


def _configure(conn: Connection) -> None:
    conn.adapters.register_dumper(np.ndarray, VectorDumper)


def _index_text(value: str) -> str:
    return value.replace("\x00", " ")


def _record(body: str) -> MemoryRecord:
    return MemoryRecord.model_validate_json(body)


def _columns(record: MemoryRecord) -> tuple[Any, ...]:
    """The column values of ``record`` in ``_INSERT_COLUMNS`` order, up to ``body``."""
    return (
        record.id,
        record.tenant_id,
        record.user_id,
        record.agent_id,
        record.project_id,
        record.session_id,
        record.type.value,
        record.scope.value,
        record.time.created_at,
        record.time.valid_from,
        record.time.valid_to,
        record.metadata.version,
        record.time.expires_at,
        to_json(record.user_metadata).decode(),
        record.model_dump_json(),
    )


def _search_fields(record: MemoryRecord) -> tuple[str, ...]:
    return tuple(_index_text(field) for field in textlib.index_fields(record))


def _describe(conninfo: str) -> str:
    """``host:port/dbname`` of a conninfo, for messages; never the password."""
    params = conninfo_to_dict(conninfo)
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port") or "5432"
    return f"{host}:{port}/{params.get('dbname') or params.get('user') or ''}"


def _pgvector_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


# -- the store -------------------------------------------------------------------------------


class PostgresStore(MemoryStore):
    """A store in a PostgreSQL database with pgvector; safe for many threads and processes.

    ``conninfo`` is a libpq connection string or ``postgresql://`` URI. ``prefix`` names the
    schema holding this store's tables. ``pool_size`` bounds the open connections;
    ``connect_timeout`` (seconds) bounds connecting and waiting for a pooled connection.
    """

    capabilities = Capabilities(keyword_search=True, multi_process=True)

    def __init__(
        self,
        conninfo: str,
        *,
        prefix: str = "chatmem",
        pool_size: int = 10,
        connect_timeout: float = 10.0,
        exact_search_rows: int = EXACT_SEARCH_ROWS,
    ) -> None:
        if not _SCHEMA_NAME.match(prefix):
            raise ConfigError(f"schema prefix {prefix!r} must match {_SCHEMA_NAME.pattern}")
        if pool_size < 1:
            raise ValidationError("must be at least 1", field="pool_size")
        try:
            self.location = _describe(conninfo)
            params = conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as exc:
            raise ConfigError(f"not a PostgreSQL connection string: {exc}") from exc
        # libpq takes whole seconds, and treats anything under 2 as 2.
        params.setdefault("connect_timeout", str(max(2, math.ceil(connect_timeout))))
        self._conninfo = make_conninfo("", **params)
        self.schema = prefix
        self._timeout = connect_timeout
        self._exact_rows = exact_search_rows
        self._closed = False
        self._lock = threading.Lock()
        self._iterative_scan = self._migrate()
        self._pool = self._open_pool(pool_size)
        try:
            self._embedding = self._read_embedding()
        except BaseException:  # boundary: release the pool, then re-raise
            self._pool.close()
            raise

    def _open_pool(self, size: int) -> ConnectionPool[Connection]:
        pool: ConnectionPool[Connection] = ConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=size,
            timeout=self._timeout,
            open=False,
            # A connection that died with the server is replaced, not handed out.
            check=ConnectionPool.check_connection,
            configure=_configure,
            name=f"chatmem-{self.schema}",
        )
        try:
            with self._translated():
                pool.open(wait=True, timeout=self._timeout)
        except BaseException:  # boundary: stop the pool's workers, then re-raise
            pool.close()
            raise
        return pool

    # -- connections and errors -------------------------------------------------------------

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """Translate psycopg's errors into chatmem's at the store boundary."""
        try:
            yield
        except PoolTimeout as exc:
            raise StoreUnavailableError(
                f"no PostgreSQL connection to {self.location} within {self._timeout:g} s: {exc}"
            ) from exc
        except (pg_errors.SerializationFailure, pg_errors.DeadlockDetected) as exc:
            raise ConflictError(f"a concurrent write got in the way; retry: {exc}") from exc
        except pg_errors.QueryCanceled as exc:
            raise StoreError(f"PostgreSQL cancelled the statement: {exc}") from exc
        except psycopg.OperationalError as exc:
            raise StoreUnavailableError(
                f"cannot reach PostgreSQL at {self.location}: {exc}"
            ) from exc
        except psycopg.IntegrityError as exc:
            raise ConflictError(f"PostgreSQL refused the write: {exc}") from exc
        except psycopg.DataError as exc:
            raise ValidationError(f"PostgreSQL cannot store this value: {exc}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL error: {exc}") from exc

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """A pooled connection in one transaction: committed on success, else rolled back."""
        if self._closed:
            raise StoreError("store is closed")
        with self._translated(), self._pool.connection() as conn:
            yield conn

    def _migrate(self) -> bool:
        """Create or upgrade the schema; whether pgvector can do iterative index scans."""
        schema = self.schema
        with self._translated(), psycopg.connect(self._conninfo) as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            version = self._ensure_pgvector(conn)
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {schema}.chatmem_migrations"
                " (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)"
            )
            row = conn.execute(f"SELECT MAX(version) FROM {schema}.chatmem_migrations").fetchone()
            current = row[0] if row and row[0] else 0
            if current > len(MIGRATIONS):
                raise StoreError(
                    f"store schema version {current} is newer than this chatmem "
                    f"({len(MIGRATIONS)}); upgrade chatmem"
                )
            for number, script in enumerate(MIGRATIONS[current:], start=current + 1):
                conn.execute(script.format(schema=schema))
                conn.execute(
                    f"INSERT INTO {schema}.chatmem_migrations VALUES (%s, %s)", (number, utcnow())
                )
        return version >= (0, 8)

    def _ensure_pgvector(self, conn: Connection) -> tuple[int, ...]:
        """pgvector's version, after creating the extension where it is missing."""
        version = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        row = conn.execute(version).fetchone()
        if row is None:
            try:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.Error as exc:
                raise StoreUnavailableError(
                    f"PostgreSQL at {self.location} lacks the pgvector extension and it could"
                    f" not be created ({exc}); install pgvector and run CREATE EXTENSION vector"
                    " as a superuser"
                ) from exc
            row = conn.execute(version).fetchone()
        assert row is not None
        return _pgvector_version(str(row[0]))

    # -- embedding binding -----------------------------------------------------------------

    def _read_embedding(self) -> EmbeddingInfo | None:
        with self._transaction() as conn:
            row = conn.execute(
                f"SELECT value FROM {self.schema}.chatmem_meta WHERE key = 'embedding'"
            ).fetchone()
        return EmbeddingInfo.model_validate_json(row[0]) if row else None

    @property
    def embedding(self) -> EmbeddingInfo | None:
        return self._embedding

    def bind_embedding(self, info: EmbeddingInfo) -> None:
        schema = self.schema
        with self._transaction() as conn:
            inserted = conn.execute(
                f"INSERT INTO {schema}.chatmem_meta VALUES ('embedding', %s)"
                " ON CONFLICT (key) DO NOTHING",
                (info.model_dump_json(),),
            ).rowcount
            if inserted:
                self._index_vectors(conn, info.dimension)
            row = conn.execute(
                f"SELECT value FROM {schema}.chatmem_meta WHERE key = 'embedding'"
            ).fetchone()
        assert row is not None
        bound = EmbeddingInfo.model_validate_json(row[0])
        if bound != info:
            raise EmbedderMismatchError(
                f"store {self!r} was built with {bound.model} ({bound.dimension} dimensions);"
                f" the embedder given is {info.model} ({info.dimension} dimensions)"
            )
        self._embedding = bound

    def _index_vectors(self, conn: Connection, dimension: int) -> None:
        """Fix the vector column's dimension and build its HNSW index (empty table: instant).

        pgvector's default storage moves vectors out of line (TOAST) once a row passes 2 kB,
        which made an exact scan 5x slower; MAIN keeps them in the row unless it cannot fit.
        """
        conn.execute(
            f"ALTER TABLE {self.schema}.memories ALTER COLUMN embedding TYPE vector({dimension}),"
            " ALTER COLUMN embedding SET STORAGE MAIN"
        )
        if dimension <= HNSW_MAX_DIMENSIONS:
            conn.execute(
                f"CREATE INDEX IF NOT EXISTS memories_embedding ON {self.schema}.memories"
                " USING hnsw (embedding vector_cosine_ops)"
            )

    # -- writes ----------------------------------------------------------------------------

    def put(self, entries: Sequence[Entry]) -> None:
        self._check_batch(entries)
        ids = [entry.record.id for entry in entries]
        if not entries:
            return
        rows = [(*_columns(record), *_search_fields(record), vector) for record, vector in entries]
        with self._transaction() as conn, conn.cursor() as cursor:
            # ON CONFLICT DO NOTHING: a taken id (even one a concurrent writer just took)
            # returns no row, and the whole batch rolls back.
            cursor.executemany(
                f"INSERT INTO {self.schema}.memories ({_INSERT_COLUMNS})"
                f" VALUES ({_INSERT_VALUES}) ON CONFLICT (id) DO NOTHING RETURNING id",
                rows,
                returning=True,
            )
            for memory_id in ids:
                if cursor.fetchone() is None:
                    raise ValidationError(f"memory {memory_id!r} already exists", field="id")
                cursor.nextset()
            self._add_history(
                conn, [(HistoryEvent.ADD, None, record, None) for record, _ in entries]
            )

    def _add_history(
        self,
        conn: Connection,
        events: Sequence[tuple[HistoryEvent, MemoryRecord | None, MemoryRecord | None, str | None]],
    ) -> None:
        rows = []
        at = utcnow()
        for event, old, new, reason in events:
            subject = new or old
            assert subject is not None
            rows.append(
                (
                    subject.id,
                    subject.tenant_id,
                    subject.user_id,
                    subject.metadata.version,
                    event.value,
                    old.model_dump_json() if old else None,
                    new.model_dump_json() if new else None,
                    reason,
                    at,
                )
            )
        with conn.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {self.schema}.memory_history (memory_id, tenant_id, user_id,"
                " version, event, old, new, reason, at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                rows,
            )

    def update(self, changes: Sequence[Change]) -> None:
        for change in changes:
            if change.vector is not None:
                self._check_vector(change.vector)
        with self._transaction() as conn:
            events = [self._apply_change(conn, change) for change in changes]
            self._add_history(conn, events)

    def _apply_change(
        self, conn: Connection, change: Change
    ) -> tuple[HistoryEvent, MemoryRecord, MemoryRecord, str | None]:
        new = change.record
        row = conn.execute(
            f"SELECT version, body FROM {self.schema}.memories"
            " WHERE id = %s AND tenant_id = %s AND user_id = %s FOR UPDATE",
            (new.id, new.tenant_id, new.user_id),
        ).fetchone()
        if row is None:
            raise NotFoundError(new.id)
        version, body = row
        if version != change.expected_version:
            raise ConflictError(
                f"memory {new.id!r} is at version {version}, not {change.expected_version}"
            )
        conn.execute(
            f"UPDATE {self.schema}.memories SET agent_id = %s, project_id = %s,"
            " session_id = %s, type = %s, scope = %s, created_at = %s, valid_from = %s,"
            " valid_to = %s, version = %s, expires_at = %s, user_metadata = %s::jsonb,"
            " body = %s,"
            f" search = {_SEARCH_VECTOR}, embedding = COALESCE(%s::vector, embedding)"
            " WHERE id = %s",
            (*_columns(new)[3:], *_search_fields(new), change.vector, new.id),
        )
        return HistoryEvent.UPDATE, _record(body), new, change.reason

    def touch(self, uses: Sequence[Usage], scope: Filter) -> builtins.list[str]:
        user = scope.require_user()
        ids = sorted({use.id for use in uses})
        if not ids:
            return []
        with self._transaction() as conn:
            # Only the JSON body changes: no column mirrors these fields, and the search
            # vector and embedding stay as they are. Sorted ids lock rows in one order.
            rows = conn.execute(
                f"SELECT body FROM {self.schema}.memories WHERE id = ANY(%s)"
                " AND tenant_id = %s AND user_id = %s ORDER BY id FOR UPDATE",
                (ids, scope.tenant_id, user),
            ).fetchall()
            changed = Usage.written([_record(body) for (body,) in rows], uses)
            if not changed:
                return []
            with conn.cursor() as cursor:
                cursor.executemany(
                    f"UPDATE {self.schema}.memories SET body = %s WHERE id = %s",
                    [(record.model_dump_json(), i) for i, record in changed.items()],
                )
        return builtins.list(changed)

    def delete(self, scope: Filter, reason: str | None = None) -> list[str]:
        where, params = _where(scope)
        with self._transaction() as conn:
            rows = conn.execute(
                f"DELETE FROM {self.schema}.memories AS m WHERE {where} RETURNING m.seq, m.body",
                params,
            ).fetchall()
            gone = [_record(body) for _, body in sorted(rows)]
            self._add_history(conn, [(HistoryEvent.DELETE, r, None, reason) for r in gone])
        return [record.id for record in gone]

    # -- reads -----------------------------------------------------------------------------

    def get(self, ids: Sequence[str], scope: Filter) -> list[MemoryRecord]:
        if not ids:
            return []
        where, params = _where(scope.model_copy(update={"ids": tuple(ids)}))
        with self._transaction() as conn:
            rows = conn.execute(
                f"SELECT m.body FROM {self.schema}.memories AS m WHERE {where}", params
            )
            found = {record.id: record for record in (_record(body) for (body,) in rows)}
        return [found[i] for i in ids if i in found]

    def vectors(self, ids: Sequence[str], scope: Filter) -> dict[str, Vector]:
        if not ids:
            return {}
        where, params = _where(scope.model_copy(update={"ids": tuple(ids)}))
        with self._transaction() as conn:
            rows = conn.execute(
                f"SELECT m.id, m.embedding::real[] FROM {self.schema}.memories AS m WHERE {where}",
                params,
            ).fetchall()
        return {memory_id: np.asarray(values, dtype=np.float32) for memory_id, values in rows}

    def list(self, scope: Filter, limit: int = 100, cursor: str | None = None) -> Page:
        if limit < 1:
            raise ValidationError("must be at least 1", field="limit")
        where, params = _where(scope)
        if cursor is not None:
            created_ms, seq = read_cursor(cursor)
            where += " AND (m.created_at, m.seq) > (%s, %s)"
            params += [_EPOCH + timedelta(milliseconds=created_ms), seq]
        with self._transaction() as conn:
            rows = conn.execute(
                f"SELECT m.created_at, m.seq, m.body FROM {self.schema}.memories AS m"
                f" WHERE {where} ORDER BY m.created_at, m.seq LIMIT %s",
                [*params, limit + 1],
            ).fetchall()
        records = [_record(body) for _, _, body in rows[:limit]]
        more = len(rows) > limit
        next_cursor = write_cursor(to_ms(rows[limit - 1][0]), rows[limit - 1][1]) if more else None
        return Page(records, next_cursor)

    def count(self, scope: Filter) -> int:
        where, params = _where(scope)
        with self._transaction() as conn:
            row = conn.execute(
                f"SELECT COUNT(*) FROM {self.schema}.memories AS m WHERE {where}", params
            ).fetchone()
        assert row is not None
        return int(row[0])

    def users(
        self, tenant_id: str, *, after: str | None = None, limit: int = 1000
    ) -> builtins.list[str]:
        if limit < 1:
            raise ValidationError("must be at least 1", field="limit")
        with self._transaction() as conn:
            rows = conn.execute(
                # Byte order ("C"), which is Python's order of the ids too.
                f'SELECT DISTINCT user_id COLLATE "C" AS u FROM {self.schema}.memories'
                ' WHERE tenant_id = %s AND user_id COLLATE "C" > %s ORDER BY u LIMIT %s',
                (tenant_id, after or "", limit),
            ).fetchall()
        return [str(user) for (user,) in rows]

    def history(self, memory_id: str, scope: Filter) -> builtins.list[HistoryEntry]:
        conditions = ["memory_id = %s", "tenant_id = %s"]
        params: builtins.list[Any] = [memory_id, scope.tenant_id]
        if scope.user_id is not None:
            conditions.append("user_id = %s")
            params.append(scope.user_id)
        with self._transaction() as conn:
            rows = conn.execute(
                "SELECT memory_id, version, event, old, new, reason, at"
                f" FROM {self.schema}.memory_history"
                f" WHERE {' AND '.join(conditions)} ORDER BY seq",
                params,
            ).fetchall()
        return [
            HistoryEntry(
                memory_id=row[0],
                version=row[1],
                event=HistoryEvent(row[2]),
                old=_record(row[3]) if row[3] else None,
                new=_record(row[4]) if row[4] else None,
                reason=row[5],
                at=row[6].astimezone(UTC),
            )
            for row in rows
        ]

    # -- search ----------------------------------------------------------------------------

    def search(self, query: SearchQuery) -> builtins.list[Candidate]:
        query = query.with_vector()
        query.filter.require_user()
        vector = query.vector
        if vector is not None:
            self._check_vector(vector)
        where, params = _where(query.filter)
        # seq -> (id, cosine, keyword score)
        found: dict[int, tuple[str, float | None, float | None]] = {}
        with self._transaction() as conn:
            if query.text:
                for seq, memory_id, rank, cosine in self._keyword_half(
                    conn, query, vector, where, params
                ):
                    found[seq] = (memory_id, cosine, rank)
            if vector is not None:
                for seq, memory_id, cosine in self._vector_half(conn, query, vector, where, params):
                    keyword = found[seq][2] if seq in found else None
                    found[seq] = (memory_id, cosine, keyword)
        return [Candidate(*found[seq]) for seq in sorted(found)]

    def _vector_half(
        self,
        conn: Connection,
        query: SearchQuery,
        vector: Vector,
        where: str,
        params: builtins.list[Any],
    ) -> builtins.list[tuple[int, str, float]]:
        """The ``candidates`` nearest rows within the filter, with their cosine."""
        memories = f"{self.schema}.memories"
        if self._exact(conn, query.filter):
            # Ordering by the similarity, not the distance operator, keeps the planner off
            # the HNSW index: this is an exact scan of the user's (filtered) rows.
            sql = (
                f"SELECT m.seq, m.id, 1 - (m.embedding <=> %s::vector) AS cosine"
                f" FROM {memories} AS m WHERE {where} ORDER BY cosine DESC LIMIT %s"
            )
            rows = conn.execute(sql, [vector, *params, query.candidates]).fetchall()
        else:
            ef_search = min(MAX_EF_SEARCH, max(40, query.candidates))
            conn.execute(
                "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),"
                " set_config('hnsw.ef_search', %s, true)",
                (str(ef_search),),
            )
            sql = (
                f"SELECT m.seq, m.id, 1 - (m.embedding <=> %s::vector) FROM {memories} AS m"
                f" WHERE {where} ORDER BY m.embedding <=> %s::vector LIMIT %s"
            )
            rows = conn.execute(sql, [vector, *params, vector, query.candidates]).fetchall()
        return [(int(seq), str(memory_id), float(cosine)) for seq, memory_id, cosine in rows]

    def _exact(self, conn: Connection, scope: Filter) -> bool:
        """Whether to score exactly: the user has few memories, or HNSW cannot filter well."""
        if not self._iterative_scan:
            return True
        row = conn.execute(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM {self.schema}.memories"
            " WHERE tenant_id = %s AND user_id = %s LIMIT %s) AS mine",
            (scope.tenant_id, scope.user_id, self._exact_rows + 1),
        ).fetchone()
        assert row is not None
        return int(row[0]) <= self._exact_rows

    def _keyword_half(
        self,
        conn: Connection,
        query: SearchQuery,
        vector: Vector | None,
        where: str,
        params: builtins.list[Any],
    ) -> builtins.list[tuple[int, str, float, float | None]]:
        """The best ``candidates`` rows by words, with their cosine when there is a vector."""
        assert query.text is not None
        terms = textlib.query_terms(query.text)
        if not terms:
            return []
        # The terms are words (letters, digits, inner apostrophes), so the only operator
        # websearch_to_tsquery sees is the "or" between them.
        words = " or ".join(_index_text(term) for term in terms)
        # The cosine is computed outside the ranked subquery: only for the rows kept.
        cosine = "1 - (best.embedding <=> %s::vector)" if vector is not None else "NULL::float8"
        sql = (
            f"SELECT best.seq, best.id, best.rank, {cosine} FROM ("
            f"SELECT m.seq, m.id, m.embedding,"
            f" ts_rank('{RANK_WEIGHTS}', m.search, q, {RANK_NORMALISATION}) AS rank"
            f" FROM {self.schema}.memories AS m,"
            f" websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', %s) AS q"
            f" WHERE {where} AND m.search @@ q ORDER BY rank DESC, m.seq LIMIT %s) AS best"
        )
        head = [vector] if vector is not None else []
        rows = conn.execute(sql, [*head, words, *params, query.candidates]).fetchall()
        return [
            (int(seq), str(memory_id), float(rank), None if cos is None else float(cos))
            for seq, memory_id, rank, cos in rows
        ]

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r}, prefix={self.schema!r})"
