"""``PostgresStore``: the memory store in a PostgreSQL schema, over a
:class:`~chatmem.stores.postgres_db.PostgresDatabase` pool; its schema, filters, write path
and search halves live in the sibling modules."""

from __future__ import annotations

import builtins
import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from chatmem import checks
from chatmem.errors import ConfigError, EmbedderMismatchError
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
    check_count,
    to_ms,
)
from chatmem.stores.base import (
    COMPLETED_SHARE,
    Capabilities,
    Change,
    Head,
    MemoryStore,
    SearchQuery,
    Usage,
    read_cursor,
)
from chatmem.stores.postgres import search as halves
from chatmem.stores.postgres import writes
from chatmem.stores.postgres.filters import where
from chatmem.stores.postgres.schema import MIGRATIONS, ensure_pgvector, index_vectors
from chatmem.stores.postgres.words import WordCounts
from chatmem.stores.postgres_db import SCHEMA_NAME, Connection, PostgresDatabase
from chatmem.stores.sql_rows import (
    HEAD_PATHS,
    HISTORY_READ,
    head_of,
    history_entry,
    history_where,
    page,
    record_of,
)
from chatmem.stores.vector_cache import ANSWER_MIN_COSINE

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Found: seq -> (id, cosine, keyword score).
_Found = dict[int, tuple[str, float | None, float | None]]


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
        exact_search_rows: int = halves.EXACT_SEARCH_ROWS,
    ) -> None:
        if not SCHEMA_NAME.match(prefix):
            raise ConfigError(f"schema prefix {prefix!r} must match {SCHEMA_NAME.pattern}")
        pool_size = checks.whole(pool_size, "pool_size", low=1)
        connect_timeout = checks.number(connect_timeout, "connect_timeout", positive=True)
        exact_search_rows = checks.whole(exact_search_rows, "exact_search_rows", low=0)
        self._database = PostgresDatabase(
            conninfo,
            schema=prefix,
            pool_size=pool_size,
            connect_timeout=connect_timeout,
            configure=writes.configure,
            open_pool=False,
        )
        self.location = self._database.location
        self._conninfo = self._database.conninfo
        self.schema = prefix
        self._memories = f"{prefix}.memories"
        self._exact_rows = exact_search_rows
        self._words = WordCounts()
        try:
            self._iterative_scan = self._migrate()
            self._database.open()
            self._embedding = self._read_embedding()
        except BaseException:  # boundary: release the pool, then re-raise
            self._database.close()
            raise

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """A pooled connection in one transaction: committed on success, else rolled back."""
        with self._database.transaction() as conn:
            yield conn

    def _migrate(self) -> bool:
        """Create or upgrade the schema; whether pgvector can do iterative index scans."""
        found: builtins.list[tuple[int, ...]] = []

        def pgvector(conn: Connection) -> None:
            found.append(ensure_pgvector(conn, self.location))

        self._database.migrate(MIGRATIONS, "chatmem_migrations", prepare=pgvector)
        return found[0] >= (0, 8)

    # -- embedding binding -----------------------------------------------------------------

    def _bound(self, conn: Connection) -> EmbeddingInfo | None:
        row = conn.execute(
            f"SELECT value FROM {self.schema}.chatmem_meta WHERE key = 'embedding'"
        ).fetchone()
        return EmbeddingInfo.model_validate_json(row[0]) if row else None

    def _read_embedding(self) -> EmbeddingInfo | None:
        with self._transaction() as conn:
            return self._bound(conn)

    @property
    def embedding(self) -> EmbeddingInfo | None:
        return self._embedding

    def bind_embedding(self, info: EmbeddingInfo) -> None:
        with self._transaction() as conn:
            inserted = conn.execute(
                f"INSERT INTO {self.schema}.chatmem_meta VALUES ('embedding', %s)"
                " ON CONFLICT (key) DO NOTHING",
                (info.model_dump_json(),),
            ).rowcount
            if inserted:
                index_vectors(conn, self.schema, info.dimension)
            bound = self._bound(conn)
        assert bound is not None
        if bound != info:
            raise EmbedderMismatchError(
                f"store {self!r} was built with {bound.model} ({bound.dimension} dimensions);"
                f" the embedder given is {info.model} ({info.dimension} dimensions)"
            )
        self._embedding = bound

    # -- writes ----------------------------------------------------------------------------

    def put(self, entries: Sequence[Entry]) -> None:
        self._check_batch(entries)
        if not entries:
            return
        with self._transaction() as conn:
            writes.insert(conn, self.schema, entries)
        self._words.wrote(Counter((e.record.tenant_id, e.record.user_id) for e in entries))

    def update(self, changes: Sequence[Change]) -> None:
        for change in changes:
            if change.vector is not None:
                self._check_vector(change.vector)
        with self._transaction() as conn:
            events = [writes.apply_change(conn, self.schema, change) for change in changes]
            writes.add_history(conn, self.schema, events)
        self._words.wrote(Counter((c.record.tenant_id, c.record.user_id) for c in changes))

    def touch(self, uses: Sequence[Usage], scope: Filter) -> builtins.list[str]:
        user = scope.require_user()
        ids = sorted({use.id for use in uses})
        if not ids:
            return []
        with self._transaction() as conn:
            # Only the JSON body changes: no column mirrors these fields, and the search
            # vector and embedding stay as they are. Sorted ids lock rows in one order.
            rows = conn.execute(
                f"SELECT body FROM {self._memories} WHERE id = ANY(%s)"
                " AND tenant_id = %s AND user_id = %s ORDER BY id FOR UPDATE",
                (ids, scope.tenant_id, user),
            ).fetchall()
            changed = Usage.written([record_of(body) for (body,) in rows], uses)
            if not changed:
                return []
            with conn.cursor() as cursor:
                cursor.executemany(
                    f"UPDATE {self._memories} SET body = %s WHERE id = %s",
                    [(record.model_dump_json(), i) for i, record in changed.items()],
                )
        return builtins.list(changed)

    def delete(self, scope: Filter, reason: str | None = None) -> list[str]:
        conditions, params = where(scope)
        with self._transaction() as conn:
            rows = conn.execute(
                f"DELETE FROM {self._memories} AS m WHERE {conditions} RETURNING m.seq, m.body",
                params,
            ).fetchall()
            gone = [record_of(body) for _, body in sorted(rows)]
            events: builtins.list[writes.Event] = [
                (HistoryEvent.DELETE, record, None, reason) for record in gone
            ]
            writes.add_history(conn, self.schema, events)
        self._words.wrote(Counter((record.tenant_id, record.user_id) for record in gone))
        return [record.id for record in gone]

    # -- reads -----------------------------------------------------------------------------

    def get(self, ids: Sequence[str], scope: Filter) -> list[MemoryRecord]:
        if not ids:
            return []
        conditions, params = where(scope.model_copy(update={"ids": tuple(ids)}))
        with self._transaction() as conn:
            rows = conn.execute(
                f"SELECT m.body FROM {self._memories} AS m WHERE {conditions}", params
            )
            found = {record.id: record for record in (record_of(body) for (body,) in rows)}
        return [found[i] for i in ids if i in found]

    def heads(self, ids: Sequence[str], scope: Filter) -> dict[str, Head]:
        if not ids:
            return {}
        conditions, params = where(scope.model_copy(update={"ids": tuple(ids)}))
        fields = ", ".join(f"b.body #>> '{{{','.join(path)}}}'" for path in HEAD_PATHS[:-1])
        roles = f"b.body #> '{{{','.join(HEAD_PATHS[-1])}}}'"
        with self._transaction() as conn:
            rows = conn.execute(
                f"SELECT m.id, {fields}, {roles} FROM {self._memories} AS m"
                " CROSS JOIN LATERAL (SELECT m.body::jsonb AS body) AS b"
                f" WHERE {conditions}",
                params,
            ).fetchall()
        return {memory_id: head_of(*values) for memory_id, *values in rows}

    def vectors(self, ids: Sequence[str], scope: Filter) -> dict[str, Vector]:
        rows = self._of_ids("m.embedding::real[]", "", ids, scope)
        return {memory_id: np.asarray(values, dtype=np.float32) for memory_id, values in rows}

    def word_states(self, ids: Sequence[str], scope: Filter) -> dict[str, bytes]:
        join = f" JOIN {self.schema}.memory_word_states AS w ON w.seq = m.seq"
        return {
            memory_id: bytes(states)
            for memory_id, states in self._of_ids("w.states", join, ids, scope)
        }

    def _of_ids(
        self, column: str, join: str, ids: Sequence[str], scope: Filter
    ) -> builtins.list[tuple[str, Any]]:
        """Each of ``ids`` within ``scope`` (``join`` holding it) with its ``column``."""
        if not ids:
            return []
        conditions, params = where(scope.model_copy(update={"ids": tuple(ids)}))
        with self._transaction() as conn:
            rows: builtins.list[tuple[str, Any]] = conn.execute(
                f"SELECT m.id, {column} FROM {self._memories} AS m{join} WHERE {conditions}",
                params,
            ).fetchall()
        return rows

    def put_word_states(self, states: Mapping[str, bytes], scope: Filter) -> None:
        if not states:
            return
        user = scope.require_user()
        ids = builtins.list(states)
        # The memories' rows are locked first, in one order, skipping any a delete or an
        # update holds: states are derived, so this write never waits on (or deadlocks
        # with) the user's own writes, and a memory deleted meanwhile gets none.
        with self._transaction() as conn:
            rows = conn.execute(
                f"SELECT id, seq FROM {self._memories} WHERE id = ANY(%s)"
                " AND tenant_id = %s AND user_id = %s ORDER BY seq FOR KEY SHARE SKIP LOCKED",
                (ids, scope.tenant_id, user),
            ).fetchall()
            if not rows:
                return
            conn.execute(
                f"INSERT INTO {self.schema}.memory_word_states (seq, states)"
                " SELECT * FROM unnest(%s::bigint[], %s::bytea[])"
                " ON CONFLICT (seq) DO UPDATE SET states = EXCLUDED.states",
                ([seq for _, seq in rows], [states[i] for i, _ in rows]),
            )

    def list(self, scope: Filter, limit: int = 100, cursor: str | None = None) -> Page:
        limit = check_count(limit, "limit")
        conditions, params = where(scope)
        if cursor is not None:
            created_ms, seq = read_cursor(cursor)
            conditions += " AND (m.created_at, m.seq) > (%s, %s)"
            params += [_EPOCH + timedelta(milliseconds=created_ms), seq]
        with self._transaction() as conn:
            rows = conn.execute(
                f"SELECT m.created_at, m.seq, m.body FROM {self._memories} AS m"
                f" WHERE {conditions} ORDER BY m.created_at, m.seq LIMIT %s",
                [*params, limit + 1],
            ).fetchall()
        return page(rows, limit, to_ms)

    def count(self, scope: Filter) -> int:
        conditions, params = where(scope)
        with self._transaction() as conn:
            row = conn.execute(
                f"SELECT COUNT(*) FROM {self._memories} AS m WHERE {conditions}", params
            ).fetchone()
        assert row is not None
        return int(row[0])

    def users(
        self, tenant_id: str, *, after: str | None = None, limit: int = 1000
    ) -> builtins.list[str]:
        limit = check_count(limit, "limit")
        with self._transaction() as conn:
            rows = conn.execute(
                # Byte order ("C"), which is Python's order of the ids too.
                f'SELECT DISTINCT user_id COLLATE "C" AS u FROM {self._memories}'
                ' WHERE tenant_id = %s AND user_id COLLATE "C" > %s ORDER BY u LIMIT %s',
                (tenant_id, after or "", limit),
            ).fetchall()
        return [str(user) for (user,) in rows]

    def history(self, memory_id: str, scope: Filter) -> builtins.list[HistoryEntry]:
        conditions, params = history_where(memory_id, scope, "%s")
        with self._transaction() as conn:
            rows = conn.execute(
                f"SELECT {HISTORY_READ} FROM {self.schema}.memory_history"
                f" WHERE {conditions} ORDER BY seq",
                params,
            ).fetchall()
        return [history_entry(row, _in_utc) for row in rows]

    # -- search ----------------------------------------------------------------------------

    def search(self, query: SearchQuery) -> builtins.list[Candidate]:
        query = query.with_vector()
        query.filter.require_user()
        vector = query.vector
        if vector is not None:
            self._check_vector(vector)
        with self._transaction() as conn:
            found = self._found(conn, query, vector)
        return [Candidate(*found[seq]) for seq in sorted(found)]

    def _found(self, conn: Connection, query: SearchQuery, vector: Vector | None) -> _Found:
        """Both halves' rows by seq: (id, cosine, keyword score)."""
        scope = where(query.filter)
        found: _Found = {}
        if query.text:
            for seq, memory_id, rank, cosine in halves.keyword_half(
                conn, self._memories, query, vector, scope, self._words
            ):
                found[seq] = (memory_id, cosine, rank)
        if vector is not None:
            exact = not self._iterative_scan or halves.has_few_rows(
                conn, self._memories, query.filter, self._exact_rows
            )
            for seq, memory_id, cosine in halves.vector_half(
                conn, self._memories, query, vector, exact, scope
            ):
                keyword = found[seq][2] if seq in found else None
                found[seq] = (memory_id, cosine, keyword)
            self._answered(conn, query, vector, found)
            if query.text:
                self._completed(conn, query, scope, found)
        return found

    def _completed(
        self,
        conn: Connection,
        query: SearchQuery,
        scope: tuple[str, builtins.list[Any]],
        found: _Found,
    ) -> None:
        """A vector find past the keyword half's cut gets its keyword score when it is at
        least ``COMPLETED_SHARE`` of the best, as in the SQLite store (``KeywordHits``)."""
        ranks = [held[2] for held in found.values() if held[2] is not None]
        missing = sorted(seq for seq, held in found.items() if held[2] is None)
        if not ranks or not missing:
            return
        floor = COMPLETED_SHARE * max(ranks)
        got = halves.keyword_ranks(conn, self._memories, query, scope, self._words, missing)
        for seq, rank in got.items():
            if rank >= floor:
                memory_id, cosine, _ = found[seq]
                found[seq] = (memory_id, cosine, rank)

    def _answered(
        self, conn: Connection, query: SearchQuery, vector: Vector, found: _Found
    ) -> None:
        """A candidate chat turn that answers a question scored at least as the two
        together, as in the SQLite store (``answered``): the answer to a candidate question
        joins the candidates."""
        seqs = sorted(found)
        for seq, memory_id, answer, question, alike in halves.answer_pairs(
            conn, self._memories, query.filter, vector, seqs
        ):
            if alike < ANSWER_MIN_COSINE:
                continue
            together = (answer + question) / math.sqrt(2.0 + 2.0 * alike)
            held = found.get(seq)
            best = max(answer, together, (held[1] or 0.0) if held else answer)
            found[seq] = (memory_id, best, held[2] if held else None)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        self._database.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r}, prefix={self.schema!r})"


def _in_utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


__all__ = ["PostgresStore"]
