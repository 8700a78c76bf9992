"""``SQLiteStore``: the embedded default memory store over one ``SQLiteFile``; its
schema, filters, write path and search halves live in the sibling modules."""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from chatmem import checks
from chatmem.errors import EmbedderMismatchError
from chatmem.records import (
    Candidate,
    EmbeddingInfo,
    Entry,
    Filter,
    HistoryEntry,
    MemoryRecord,
    Page,
    Vector,
    check_count,
    from_ms,
)
from chatmem.stores.base import (
    Capabilities,
    Change,
    Head,
    MemoryStore,
    SearchQuery,
    Usage,
    check_then,
    read_cursor,
)
from chatmem.stores.sql_rows import (
    HEAD_PATHS,
    HISTORY_READ,
    head_of,
    history_entry,
    history_where,
    page,
    record_of,
)
from chatmem.stores.sqlite import search as halves
from chatmem.stores.sqlite import writes
from chatmem.stores.sqlite.field_cache import DEFAULT_BUDGET_BYTES as FIELDS_BUDGET_BYTES
from chatmem.stores.sqlite.field_cache import FieldCache
from chatmem.stores.sqlite.file import SQLiteFile, sqlite3
from chatmem.stores.sqlite.filters import Admitted, admitted, narrows, where
from chatmem.stores.sqlite.head_cache import DEFAULT_BUDGET_BYTES as HEADS_BUDGET_BYTES
from chatmem.stores.sqlite.head_cache import HeadCache
from chatmem.stores.sqlite.keyword_cache import DEFAULT_BUDGET_BYTES as WORDS_BUDGET_BYTES
from chatmem.stores.sqlite.keyword_cache import MIN_ROWS, KeywordCache, UserWords, read_texts
from chatmem.stores.sqlite.schema import MIGRATIONS, fts_table, user_key, user_token
from chatmem.stores.sqlite.vector_snapshots import MIN_ROWS as COPY_MIN_ROWS
from chatmem.stores.sqlite.vector_snapshots import VectorSnapshots
from chatmem.stores.vector_cache import DEFAULT_BUDGET_BYTES, UserVectors, VectorCache

_EMBEDDING = "SELECT value FROM chatmem_meta WHERE key = 'embedding'"


#: Joins the JSON bodies that one read gathers into one value (``get``): JSON escapes every
#: control character inside its strings, so a body never holds it raw. Each row a cursor
#: steps through lets go of the interpreter lock and waits to take it back; with other
#: threads busy (a service under load) each wait lasts up to the switch interval (5 ms),
#: and reading 20 records row by row took 134 ms where one row took 11 (0.1 alone;
#: docs/benchmarks.md, "Reads that keep the interpreter lock").
BODY_SEPARATOR = "\x1e"


class SQLiteStore(MemoryStore):
    """A store in one SQLite file; safe for many threads and processes at once."""

    capabilities = Capabilities(keyword_search=True, multi_process=True)

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "NORMAL",
        vector_cache_bytes: int = DEFAULT_BUDGET_BYTES,
        field_cache_bytes: int = FIELDS_BUDGET_BYTES,
        keyword_cache_bytes: int = WORDS_BUDGET_BYTES,
        keyword_cache_rows: int = MIN_ROWS,
        head_cache_bytes: int = HEADS_BUDGET_BYTES,
        vector_copy_rows: int | None = COPY_MIN_ROWS,
    ) -> None:
        budgets = {
            "vector_cache_bytes": vector_cache_bytes,
            "field_cache_bytes": field_cache_bytes,
            "keyword_cache_bytes": keyword_cache_bytes,
            "head_cache_bytes": head_cache_bytes,
        }
        for name, budget in budgets.items():
            checks.whole(budget, name, low=0)
        checks.whole(keyword_cache_rows, "keyword_cache_rows")
        if vector_copy_rows is not None:
            checks.whole(vector_copy_rows, "vector_copy_rows", low=1)
        self.path = str(path)
        self._file = SQLiteFile(path, synchronous=synchronous)
        self._vector_cache = VectorCache(vector_cache_bytes)
        self._field_cache = FieldCache(field_cache_bytes)
        self._keyword_cache = KeywordCache(keyword_cache_bytes, keyword_cache_rows)
        self._head_cache = HeadCache(head_cache_bytes)
        self._copies = VectorSnapshots(self._file, vector_copy_rows)
        self._file.migrate(MIGRATIONS)
        self._embedding = self._read_embedding()

    # -- embedding binding -----------------------------------------------------------------

    def _read_embedding(self) -> EmbeddingInfo | None:
        with self._file.read() as conn:
            row = conn.execute(_EMBEDDING).fetchone()
        return EmbeddingInfo.model_validate_json(row[0]) if row else None

    @property
    def embedding(self) -> EmbeddingInfo | None:
        return self._embedding

    def bind_embedding(self, info: EmbeddingInfo) -> None:
        def bind(conn: sqlite3.Connection) -> EmbeddingInfo:
            row = conn.execute(_EMBEDDING).fetchone()
            if row:
                return EmbeddingInfo.model_validate_json(row[0])
            conn.execute(
                "INSERT INTO chatmem_meta VALUES ('embedding', ?)", (info.model_dump_json(),)
            )
            return info

        bound = self._file.write(bind)
        if bound != info:
            raise EmbedderMismatchError(
                f"store {self.path!r} was built with {bound.model} ({bound.dimension} dimensions);"
                f" the embedder given is {info.model} ({info.dimension} dimensions)"
            )
        self._embedding = bound

    # -- writes ----------------------------------------------------------------------------

    def put(self, entries: Sequence[Entry]) -> None:
        self._check_batch(entries)
        self._file.write(lambda conn: writes.insert(conn, entries))

    def put_with(
        self,
        entries: Sequence[Entry],
        *,
        states: Mapping[str, bytes] | None = None,
        then: Sequence[Change] = (),
    ) -> bool:
        """As ``MemoryStore.put_with``, in one transaction: the records, their states and
        ``then`` are committed together (``then`` left out alone when it no longer
        applies)."""
        self._check_batch(entries)
        self._check_changes(then)
        check_then(then)
        kept = states or {}

        def work(conn: sqlite3.Connection) -> bool:
            # The earlier rows first: FTS5 flushes its pending rows when a lower rowid comes
            # after a higher (in a trace of a bare FTS5 table, 3 segment writes against 5).
            told = not then or writes.apply_all_or_none(conn, then)
            rowids = writes.insert(conn, entries)
            writes.keep_states(
                conn,
                [
                    (rowid, kept[entry.record.id])
                    for entry, rowid in zip(entries, rowids, strict=True)
                    if entry.record.id in kept
                ],
            )
            return told

        return self._file.write(work)

    def _check_changes(self, changes: Sequence[Change]) -> None:
        for change in changes:
            if change.vector is not None:
                self._check_vector(change.vector)

    def update(self, changes: Sequence[Change]) -> None:
        self._check_changes(changes)

        def apply(conn: sqlite3.Connection) -> None:
            for change in changes:
                writes.apply_change(conn, change)

        self._file.write(apply)

    def touch(self, uses: Sequence[Usage], scope: Filter) -> builtins.list[str]:
        user = scope.require_user()
        ids = sorted({use.id for use in uses})
        if not ids:
            return []

        def apply(conn: sqlite3.Connection) -> builtins.list[str]:
            # Only the JSON body changes: no column, vector or FTS row mirrors these fields.
            rows = conn.execute(
                f"SELECT body FROM memories WHERE id IN ({', '.join('?' * len(ids))})"
                " AND +tenant_id = ? AND +user_id = ?",
                [*ids, scope.tenant_id, user],
            ).fetchall()
            changed = Usage.written([record_of(body) for (body,) in rows], uses)
            conn.executemany(
                "UPDATE memories SET body = ? WHERE id = ?",
                [(record.model_dump_json(), memory_id) for memory_id, record in changed.items()],
            )
            return builtins.list(changed)

        return self._file.write(apply)

    def delete(self, scope: Filter, reason: str | None = None) -> list[str]:
        conditions, params = where(scope)

        def remove(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                f"SELECT m.rowid, m.body FROM memories AS m WHERE {conditions}", params
            ).fetchall()
            writes.remove(conn, rows, reason)
            return [record_of(body).id for _, body in rows]

        return self._file.write(remove)

    # -- reads -----------------------------------------------------------------------------

    def get(self, ids: Sequence[str], scope: Filter) -> list[MemoryRecord]:
        if not ids:
            return []
        conditions, params = where(scope.model_copy(update={"ids": tuple(ids)}))
        with self._file.read() as conn:
            (joined,) = conn.execute(
                f"SELECT group_concat(m.body, char({ord(BODY_SEPARATOR)}))"
                f" FROM memories AS m WHERE {conditions}",
                params,
            ).fetchone()
        bodies = joined.split(BODY_SEPARATOR) if joined else []
        found = {record.id: record for record in map(record_of, bodies)}
        return [found[i] for i in ids if i in found]

    def heads(self, ids: Sequence[str], scope: Filter) -> dict[str, Head]:
        if not ids:
            return {}
        with self._file.read() as conn:
            if scope.user_id is None or narrows(scope):
                return {i: head for i, head, _ in _head_rows(conn, scope, ids)}
            conn.execute("BEGIN")  # the versions and the heads read in one snapshot
            try:
                versions = halves.user_versions(conn, scope.tenant_id, scope.user_id)
                every = scope.model_copy(update={"expired": None})  # the cache judges the TTL
                return self._head_cache.heads(
                    scope.tenant_id,
                    scope.user_id,
                    ids,
                    versions,
                    lambda missing: _head_rows(conn, every, missing),
                )
            finally:
                conn.execute("COMMIT")

    def vectors(self, ids: Sequence[str], scope: Filter) -> dict[str, Vector]:
        rows = self._blobs("memory_vectors", "embedding", ids, scope)
        return {memory_id: np.frombuffer(blob, dtype=np.float32).copy() for memory_id, blob in rows}

    def word_states(self, ids: Sequence[str], scope: Filter) -> dict[str, bytes]:
        return dict(self._blobs("memory_word_states", "states", ids, scope))

    def _blobs(
        self, table: str, column: str, ids: Sequence[str], scope: Filter
    ) -> builtins.list[tuple[str, bytes]]:
        """Each of ``ids`` within ``scope`` that ``table`` holds, with its ``column``."""
        if not ids:
            return []
        conditions, params = where(scope.model_copy(update={"ids": tuple(ids)}))
        with self._file.read() as conn:
            rows: builtins.list[tuple[str, bytes]] = conn.execute(
                f"SELECT m.id, t.{column} FROM memories AS m"
                f" JOIN {table} AS t ON t.rowid = m.rowid WHERE {conditions}",
                params,
            ).fetchall()
        return rows

    def put_word_states(self, states: Mapping[str, bytes], scope: Filter) -> None:
        scope.require_user()
        if not states:
            return
        conditions, params = where(scope.model_copy(update={"ids": tuple(states)}))

        def keep(conn: sqlite3.Connection) -> None:
            rowids = conn.execute(
                f"SELECT m.id, m.rowid FROM memories AS m WHERE {conditions}", params
            ).fetchall()
            writes.keep_states(conn, [(rowid, states[memory_id]) for memory_id, rowid in rowids])

        self._file.write(keep)

    def list(self, scope: Filter, limit: int = 100, cursor: str | None = None) -> Page:
        limit = check_count(limit, "limit")
        conditions, params = where(scope)
        if cursor is not None:
            conditions += " AND (m.created_at, m.rowid) > (?, ?)"
            params += [*read_cursor(cursor)]
        with self._file.read() as conn:
            rows = conn.execute(
                f"SELECT m.created_at, m.rowid, m.body FROM memories AS m WHERE {conditions}"
                " ORDER BY m.created_at, m.rowid LIMIT ?",
                [*params, limit + 1],
            ).fetchall()
        return page(rows, limit, int)

    def count(self, scope: Filter) -> int:
        conditions, params = where(scope)
        with self._file.read() as conn:
            row = conn.execute(f"SELECT COUNT(*) FROM memories AS m WHERE {conditions}", params)
            return int(row.fetchone()[0])

    def users(
        self, tenant_id: str, *, after: str | None = None, limit: int = 1000
    ) -> builtins.list[str]:
        limit = check_count(limit, "limit")
        with self._file.read() as conn:
            rows = conn.execute(
                "SELECT DISTINCT user_id FROM memories WHERE tenant_id = ? AND user_id > ?"
                " ORDER BY user_id LIMIT ?",
                (tenant_id, after or "", limit),
            ).fetchall()
        return [user for (user,) in rows]

    def history(self, memory_id: str, scope: Filter) -> builtins.list[HistoryEntry]:
        conditions, params = history_where(memory_id, scope, "?")
        with self._file.read() as conn:
            rows = conn.execute(
                f"SELECT {HISTORY_READ} FROM memory_history WHERE {conditions} ORDER BY seq",
                params,
            ).fetchall()
        return [history_entry(row, from_ms) for row in rows]

    # -- search ----------------------------------------------------------------------------

    def search(self, query: SearchQuery) -> builtins.list[Candidate]:
        user = query.filter.require_user()
        with self._file.read() as conn:
            conn.execute("BEGIN")  # one snapshot for versions, vectors and words
            try:
                cosine, keyword, vectors = self._scores(conn, query, user)
                ids = halves.ids_by_rowid(conn, set(cosine) | set(keyword), vectors)
            finally:
                conn.execute("COMMIT")
        return [
            Candidate(ids[rowid], cosine.get(rowid), keyword.get(rowid)) for rowid in sorted(ids)
        ]

    def _scores(
        self, conn: sqlite3.Connection, query: SearchQuery, user: str
    ) -> tuple[dict[int, float], dict[int, float], UserVectors | None]:
        """Cosine and keyword scores by rowid, within one read transaction, and the user's
        vectors when the vector half read them."""
        versions = halves.user_versions(conn, query.filter.tenant_id, user)
        allowed = admitted(conn, query.filter, self._field_cache, versions)
        hits = self._keyword_half(conn, query, user, versions, allowed) if query.text else None
        keyword = dict(hits.best) if hits is not None else {}
        if hits is not None and query.read_ahead > 0 and query.waits_for_vector():
            self._read_ahead(conn, query, [rowid for rowid, _ in hits.best[: query.read_ahead]])
        # Asked for only now: where the keyword half was FTS5's, it ran meanwhile.
        vector = query.query_vector()
        cosine: dict[int, float] = {}
        vectors = None
        if vector is not None and self._embedding is not None:
            self._check_vector(vector)
            cosine, vectors = halves.vector_half(
                conn,
                self._vector_cache,
                self._dimension(),
                query,
                vector,
                versions,
                allowed,
                set(keyword),
                self._copies,
            )
            if hits is not None:  # a vector find the keyword half matched further down
                keyword.update(hits.of(cosine.keys() - keyword.keys()))
        return cosine, keyword, vectors

    @staticmethod
    def _read_ahead(
        conn: sqlite3.Connection, query: SearchQuery, rowids: builtins.list[int]
    ) -> None:
        """Parse into ``query.ahead`` the records of ``rowids`` within the query's filter (the
        conditions ``get`` reads by), while the query vector is computed in its thread."""
        if query.ahead is None or not rowids:
            return
        conditions, params = where(query.filter)
        rows = conn.execute(
            f"SELECT m.body FROM memories AS m WHERE m.rowid IN ({', '.join('?' * len(rowids))})"
            f" AND {conditions}",
            [*rowids, *params],
        ).fetchall()
        for (body,) in rows:
            record = record_of(body)
            query.ahead[record.id] = record

    def _keyword_half(
        self,
        conn: sqlite3.Connection,
        query: SearchQuery,
        user: str,
        versions: halves.Versions,
        allowed: Admitted,
    ) -> halves.KeywordHits:
        """From the user's postings in memory when the user is big enough to have them
        (``keyword_cache``), else from FTS5."""
        assert query.text is not None
        tenant = query.filter.tenant_id
        table = fts_table(user_token(tenant, user))
        words = self._keyword_cache.words(
            conn, tenant, user, versions, table, lambda: self._build_words(tenant, user, table)
        )
        # Small users never reach the tokenizer: their words are FTS5's alone.
        terms = None if words is None else self._keyword_cache.terms(query.text)
        if words is None or terms is None:
            query.start_embedding()  # FTS5 leaves the interpreter lock free meanwhile
            return halves.keyword_half(conn, query, user, allowed)
        return halves.cached_keyword_half(words, terms, query, allowed)

    def preload(self, scope: Filter) -> None:
        """Hold the user's keyword postings in memory now, whatever the user's size (a
        user's first searches otherwise start their build in the background and are
        answered by FTS5 meanwhile): for a server's heaviest users at start, and for
        benchmarks."""
        tenant, user = scope.tenant_id, scope.require_user()
        words = self._build_words(tenant, user, fts_table(user_token(tenant, user)))
        self._keyword_cache.keep(user_key(tenant, user), words)

    def warm(self, scope: Filter) -> None:
        """Read the user's vectors and filterable fields into their caches now, and start
        the background build of its keyword postings (a user of ``keyword_cache_rows`` or
        more): what the user's first search would read otherwise. A heavy user's vectors
        lie scattered through the file: at 1M memories the 20 heaviest users' first searches
        took 1.6 s at p95 cold and 11.6 ms warmed (docs/benchmarks.md)."""
        tenant, user = scope.tenant_id, scope.require_user()
        table = fts_table(user_token(tenant, user))
        with self._file.read() as conn:
            conn.execute("BEGIN")  # one snapshot, as a search reads
            try:
                versions = halves.user_versions(conn, tenant, user)
                self._field_cache.fields(conn, tenant, user, versions)
                if self._embedding is not None:
                    halves.user_vectors(
                        conn,
                        self._vector_cache,
                        self._dimension(),
                        tenant,
                        user,
                        versions,
                        self._copies,
                    )
                self._keyword_cache.words(
                    conn,
                    tenant,
                    user,
                    versions,
                    table,
                    lambda: self._build_words(tenant, user, table),
                )
            finally:
                conn.execute("COMMIT")

    def heaviest(self, limit: int) -> builtins.list[tuple[str, str, int]]:
        """The ``limit`` users with the most memories, most first: (tenant, user, count)."""
        limit = check_count(limit, "limit")
        with self._file.read() as conn:
            rows = conn.execute(
                "SELECT tenant_id, user_id, count(*) AS n FROM memories"
                " GROUP BY tenant_id, user_id ORDER BY n DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [(str(t), str(u), int(n)) for t, u, n in rows]

    def warm_heaviest(
        self, limit: int = 20, stop: Callable[[], bool] = lambda: False
    ) -> builtins.list[tuple[str, str]]:
        """``warm`` the heaviest users, most memories first, while their vectors fit in
        three quarters of the vector cache's budget (the rest is left to the users who
        search); ``stop`` is asked between users. Returns the users warmed. A service calls
        this at start."""
        warmed: builtins.list[tuple[str, str]] = []
        room = self._vector_cache.budget_bytes * 3 // 4
        for tenant, user, count in self.heaviest(limit):
            room -= count * (4 * self._dimension() + 8 + 90) if self._embedding else 0
            if room < 0 or stop():
                break
            self.warm(Filter(tenant_id=tenant, user_id=user))
            warmed.append((tenant, user))
        return warmed

    def wait_for_keywords(self) -> None:
        """Until every keyword postings build started so far is done (benchmarks, tests)."""
        self._keyword_cache.wait()

    def wait_for_vector_copies(self) -> None:
        """Until every big user's vector copy started so far is written (benchmarks, tests)."""
        self._copies.wait()

    def _build_words(self, tenant: str, user: str, table: str) -> UserWords:
        """The user's postings, read in one snapshot (in the keyword cache's thread)."""
        with self._file.read() as conn:
            conn.execute("BEGIN")
            try:
                versions = halves.user_versions(conn, tenant, user)
                texts = read_texts(conn, table, tenant, user)
            finally:
                conn.execute("COMMIT")
        return UserWords.built(tenant, user, versions, texts, self._keyword_cache.tokenizer)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        self._keyword_cache.close()  # its builder reads the file: it stops first
        self._copies.close()  # as does the copies' writer
        self._file.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"


#: A head's fields, taken out of a body by one ``json_extract`` (one parse of the body).
_HEAD_FIELDS = ", ".join(f"'$.{'.'.join(path)}'" for path in HEAD_PATHS)


def _head_rows(
    conn: sqlite3.Connection, scope: Filter, ids: Sequence[str]
) -> builtins.list[tuple[str, Head, int | None]]:
    """The heads of ``ids`` within ``scope``, each with its ``expires_at``, read as one row
    (as ``get`` reads: BODY_SEPARATOR)."""
    conditions, params = where(scope.model_copy(update={"ids": tuple(ids)}))
    (joined,) = conn.execute(
        f"SELECT json_group_array(json_array(m.id, m.expires_at,"
        f" json_extract(m.body, {_HEAD_FIELDS}))) FROM memories AS m WHERE {conditions}",
        params,
    ).fetchone()
    # json_extract of several paths gives a JSON array, which json_array nests as one.
    return [(memory_id, head_of(*values), ends) for memory_id, ends, values in json.loads(joined)]


__all__ = ["SQLiteStore"]
