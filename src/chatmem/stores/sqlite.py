"""The embedded default store: one SQLite file (WAL), FTS5 for words, vectors scored in memory.

Layout:
- ``memories``: one row per record; filterable fields as columns, the full record as JSON.
- ``memory_vectors``: each record's vector (float32 blob). Searches score a user's vectors
  in memory (``vector_cache``): one matrix product, exact, and kept in step with other
  connections by ``user_versions``, which every write transaction bumps.
- ``memory_fts_0`` … ``memory_fts_f``: FTS5 (porter stemming) over the fields of
  ``text.index_fields``, sharded by user (``FTS_SHARDS``), plus a per-user token column so a
  keyword search never scores another user's rows.
- ``memory_history``: every add, update and delete, with the record before and after.

Writes are ``BEGIN IMMEDIATE`` transactions on per-thread connections with a busy timeout,
retried on a busy database, so concurrent threads and processes wait rather than fail.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from chatmem import text as textlib
from chatmem.errors import (
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
    from_ms,
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
from chatmem.stores.gate import Gate
from chatmem.stores.vector_cache import DEFAULT_BUDGET_BYTES, VectorCache

try:  # The stdlib module of many Pythons cannot load extensions; pysqlite3 can.
    import pysqlite3.dbapi2 as sqlite3
except ImportError:  # pragma: no cover - exercised only where pysqlite3 is absent
    import sqlite3

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000
#: How long a write keeps retrying a busy database before it gives up.
WRITE_RETRY_SECONDS = 120.0
#: FTS5 column weights (ukey, said, prev, nxt, day): the memory's own words count most, the
#: messages around it less. Tuned on half of LoCoMo, checked on the other half.
FTS_WEIGHTS = (0.0, 1.0, 0.5, 0.3, 1.0)

#: Keyword indexes: one FTS5 table per first hex digit of the user token. A keyword search
#: walks the posting lists of its terms within one table, so sharding makes them 16 times
#: shorter at any size of store (at 1M memories, "trip" was in 136,277 rows of one table).
#: BM25's statistics are per table; users land in tables at random, so they stay alike.
FTS_SHARDS = "0123456789abcdef"
_FTS_COLUMNS = "ukey, said, prev, nxt, day"
_SHARD_FTS = (
    "\n".join(
        f"CREATE VIRTUAL TABLE memory_fts_{digit} USING fts5({_FTS_COLUMNS},"
        " tokenize = 'porter unicode61 remove_diacritics 2');"
        f" INSERT INTO memory_fts_{digit} (rowid, {_FTS_COLUMNS})"
        f" SELECT rowid, {_FTS_COLUMNS} FROM memory_fts WHERE substr(ukey, 2, 1) = '{digit}';"
        for digit in FTS_SHARDS
    )
    + "\nDROP TABLE memory_fts;"
)

#: Whether a row's memory names roles (``access_control.allowed_roles`` not empty); written
#: exactly as the partial index ``memories_restricted`` is, so SQLite can use it.
_RESTRICTED = "json_array_length({alias}.body, '$.access_control.allowed_roles') > 0"
_ROLES_PATH = "$.access_control.allowed_roles"

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE chatmem_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE memories (
        rowid INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        agent_id TEXT,
        project_id TEXT,
        session_id TEXT,
        type TEXT NOT NULL,
        scope TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        valid_from INTEGER,
        valid_to INTEGER,
        version INTEGER NOT NULL,
        body TEXT NOT NULL
    );
    CREATE INDEX memories_by_user ON memories (tenant_id, user_id, created_at, rowid);
    CREATE TABLE memory_history (
        seq INTEGER PRIMARY KEY,
        memory_id TEXT NOT NULL,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        event TEXT NOT NULL,
        old TEXT,
        new TEXT,
        reason TEXT,
        at INTEGER NOT NULL
    );
    CREATE INDEX history_by_memory ON memory_history (memory_id, seq);
    CREATE TABLE memory_vectors (rowid INTEGER PRIMARY KEY, embedding BLOB NOT NULL);
    CREATE TABLE user_versions (
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        appended INTEGER NOT NULL DEFAULT 0,
        changed INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (tenant_id, user_id)
    );
    CREATE VIRTUAL TABLE memory_fts USING fts5(
        ukey, said, prev, nxt, day, tokenize = 'porter unicode61 remove_diacritics 2'
    );
    """,
    _SHARD_FTS,
    # The write policy looks a user's memories up by these user_metadata keys on every
    # extraction batch; without an index each lookup parsed every one of the user's rows.
    """
    CREATE INDEX memories_by_write_batch ON memories
        (tenant_id, user_id, json_extract(body, '$.user_metadata."write_batch"'), created_at);
    CREATE INDEX memories_by_subject ON memories
        (tenant_id, user_id, json_extract(body, '$.user_metadata."subject"'), created_at);
    """,
    # Role-restricted memories (SPEC L7) are few; a search finds a user's with this index
    # instead of reading every row's roles.
    f"""
    CREATE INDEX memories_restricted ON memories (tenant_id, user_id, rowid)
        WHERE {_RESTRICTED.format(alias="memories")};
    """,
    # A search with a filter narrower than the user reads which of the user's rows pass from
    # this index alone (4.4 -> 0.9 ms for 10,000 rows), never the rows themselves.
    """
    CREATE INDEX memories_by_user_fields ON memories (tenant_id, user_id, type, project_id,
        session_id, agent_id, scope, created_at, valid_from, valid_to);
    """,
    # A memory's TTL (time.expires_at). Few memories have one: a search finds a user's
    # expired ones through this partial index, as it does the role-restricted ones.
    """
    ALTER TABLE memories ADD COLUMN expires_at INTEGER;
    CREATE INDEX memories_expiring ON memories (tenant_id, user_id, expires_at)
        WHERE expires_at IS NOT NULL;
    """,
)
#: user_metadata keys with an index (migration 3); a filter on one of them is written with
#: the index's own expression, so SQLite can use it.
INDEXED_METADATA = frozenset({"write_batch", "subject"})


def user_key(tenant_id: str, user_id: str) -> str:
    """The partition of one user of one tenant."""
    return f"{tenant_id}\x1f{user_id}"


def _user_token(tenant_id: str, user_id: str) -> str:
    digest = hashlib.blake2b(user_key(tenant_id, user_id).encode(), digest_size=12).hexdigest()
    return f"u{digest}"


def _fts_table(token: str) -> str:
    """The keyword table of a user token (``u`` and 24 hex digits)."""
    return f"memory_fts_{token[1]}"


def _fts_of(record: MemoryRecord) -> str:
    return _fts_table(_user_token(record.tenant_id, record.user_id))


def _bump(conn: sqlite3.Connection, record: MemoryRecord, counter: str) -> None:
    """Tell every reader's vector cache that this user's vectors moved on."""
    conn.execute(
        f"INSERT INTO user_versions (tenant_id, user_id, {counter}) VALUES (?, ?, 1)"
        f" ON CONFLICT (tenant_id, user_id) DO UPDATE SET {counter} = {counter} + 1",
        (record.tenant_id, record.user_id),
    )


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    message = str(exc).lower()
    return "locked" in message or "busy" in message


def _where(scope: Filter, alias: str = "m") -> tuple[str, list[Any]]:
    """SQL conditions (over ``memories AS alias``) equivalent to ``Filter.matches``."""
    # With ids given, the unique index on id is the way in; a unary + keeps the planner
    # from scanning a user's whole (tenant_id, user_id) index instead.
    owner = "+" if scope.ids is not None else ""
    conditions = [f"{owner}{alias}.tenant_id = ?"]
    params: list[Any] = [scope.tenant_id]
    for column in ("user_id", "agent_id", "project_id", "session_id"):
        value = getattr(scope, column)
        if value is not None:
            conditions.append(f"{owner}{alias}.{column} = ?")
            params.append(value)
    for column, values in (("id", scope.ids), ("type", scope.types), ("scope", scope.scopes)):
        if values is not None:
            items = sorted(str(v) for v in values)
            conditions.append(f"{alias}.{column} IN ({', '.join('?' * len(items)) or 'NULL'})")
            params.extend(items)
    if scope.created_after is not None:
        conditions.append(f"{alias}.created_at >= ?")
        params.append(to_ms(scope.created_after))
    if scope.created_before is not None:
        conditions.append(f"{alias}.created_at < ?")
        params.append(to_ms(scope.created_before))
    if scope.valid_at is not None:
        moment = to_ms(scope.valid_at)
        conditions.append(
            f"({alias}.valid_from IS NULL OR {alias}.valid_from <= ?)"
            f" AND ({alias}.valid_to IS NULL OR ? < {alias}.valid_to)"
        )
        params.extend([moment, moment])
    for key, value in (scope.metadata or {}).items():
        if key in INDEXED_METADATA:
            path = f"""json_extract({alias}.body, '$.user_metadata."{key}"')"""
        else:
            path = f"json_extract({alias}.body, ?)"
            params.append(f'$.user_metadata."{key}"')
        if value is None:
            conditions.append(f"{path} IS NULL")
        else:
            conditions.append(f"{path} = ?")
            params.append(value)
    if scope.expired is not None:
        conditions.append(
            f"{alias}.expires_at <= ?"
            if scope.expired
            else f"({alias}.expires_at IS NULL OR {alias}.expires_at > ?)"
        )
        params.append(to_ms(utcnow()))
    if scope.reader_roles is not None:
        roles = sorted(scope.reader_roles)
        conditions.append(
            f"(NOT {_RESTRICTED.format(alias=alias)} OR EXISTS (SELECT 1 FROM"
            f" json_each({alias}.body, '{_ROLES_PATH}') WHERE value IN"
            f" ({', '.join('?' * len(roles)) or 'NULL'})))"
        )
        params.extend(roles)
    return " AND ".join(conditions), params


def _hidden(conn: sqlite3.Connection, scope: Filter) -> set[int]:
    """The rows of ``scope``'s user that its reader may not see (restricted to roles the
    reader lacks, found through the ``memories_restricted`` index) or that expired (through
    ``memories_expiring``)."""
    expired = conn.execute(
        "SELECT rowid FROM memories WHERE tenant_id = ? AND user_id = ?"
        " AND expires_at IS NOT NULL AND expires_at <= ?",
        (scope.tenant_id, scope.user_id, to_ms(utcnow())),
    ).fetchall()
    return {rowid for (rowid,) in expired} | _hidden_by_roles(conn, scope)


def _hidden_by_roles(conn: sqlite3.Connection, scope: Filter) -> set[int]:
    if scope.reader_roles is None:
        return set()
    rows = conn.execute(
        f"SELECT m.rowid, json_extract(m.body, '{_ROLES_PATH}') FROM memories AS m"
        f" WHERE m.tenant_id = ? AND m.user_id = ? AND {_RESTRICTED.format(alias='m')}",
        (scope.tenant_id, scope.user_id),
    ).fetchall()
    return {rowid for rowid, roles in rows if scope.reader_roles.isdisjoint(json.loads(roles))}


class _Admitted(NamedTuple):
    """Which of a user's rows a search may return: ``only`` these (a filter narrower than
    tenant and user), or all but ``hidden`` (those the reader's roles do not open)."""

    only: set[int] | None
    hidden: set[int]

    def admits(self, rowid: int) -> bool:
        return (self.only is None or rowid in self.only) and rowid not in self.hidden


def _admitted(conn: sqlite3.Connection, scope: Filter) -> _Admitted:
    """The rows of ``scope``'s user that a search may return. A narrower filter is one query
    over the user's rows (by the ``memories_by_user`` index), run once for both halves;
    without one, only the few rows hidden by roles are read (SPEC L7)."""
    if not _has_extra_conditions(scope):
        return _Admitted(None, _hidden(conn, scope))
    where, params = _where(scope)
    rows = conn.execute(f"SELECT m.rowid FROM memories AS m WHERE {where}", params)
    return _Admitted({rowid for (rowid,) in rows}, set())


def _array(rowids: set[int]) -> npt.NDArray[np.int64]:
    return np.fromiter(rowids, dtype=np.int64, count=len(rowids))


def _has_extra_conditions(scope: Filter) -> bool:
    """Whether ``scope`` narrows a user's memories further than tenant and user."""
    narrowing = scope.model_dump(
        exclude={"tenant_id", "user_id", "reader_roles", "expired"}, exclude_none=True
    )
    # Leaving out expired memories is done like the roles' check (``_hidden``).
    return bool(narrowing) or scope.expired is not False


def _record(body: str) -> MemoryRecord:
    return MemoryRecord.model_validate_json(body)


def _blob(vector: Vector) -> bytes:
    return np.ascontiguousarray(vector, dtype=np.float32).tobytes()


class SQLiteFile:
    """One SQLite file opened per thread (WAL, busy timeout), with retried ``BEGIN IMMEDIATE``
    writes and versioned migrations. Shared by the long-term and the session stores, which may
    live in the same file: each keeps its own migrations table."""

    def __init__(self, path: str | Path, *, synchronous: str = "NORMAL") -> None:
        self.path = str(path)
        if synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ValidationError("must be OFF, NORMAL, FULL or EXTRA", field="synchronous")
        self._synchronous = synchronous.upper()
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._gate = Gate(f"SQLite file {self.path}")
        if self.path != ":memory:":
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreUnavailableError(f"cannot create {self.path!r}: {exc}") from exc

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (autocommit; transactions are explicit)."""
        self._gate.check()
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self.retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot open SQLite store {self.path!r}: {exc}") from exc
        self._local.conn = conn
        with self._connections_lock:
            self._connections.append(conn)
        return conn

    @staticmethod
    def retry(action: Callable[[], T]) -> T:
        """Run ``action`` again while the database is busy, up to ``WRITE_RETRY_SECONDS``."""
        deadline = time.monotonic() + WRITE_RETRY_SECONDS
        delay = 0.005
        while True:
            try:
                return action()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() > deadline:
                    raise StoreError(f"SQLite error: {exc}") from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.25)

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, with SQLite errors translated to StoreError. Use it
        only inside the ``with``: ``close`` waits for the block to end."""
        with self._gate.passage():
            conn = self.connection()
            try:
                yield conn
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite error: {exc}") from exc

    def write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` in one IMMEDIATE transaction, retrying while the database is busy."""
        with self._gate.passage():
            return self._write(work)

    def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        conn = self.connection()

        def attempt() -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = work(conn)
            except BaseException:  # boundary: roll back, then re-raise
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result

        try:
            return self.retry(attempt)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite error: {exc}") from exc

    def migrate(self, migrations: Sequence[str], table: str = "chatmem_migrations") -> None:
        """Apply the scripts of ``migrations`` not yet recorded in ``table``, in one write."""

        def apply(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {table}"
                " (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)"
            )
            row = conn.execute(f"SELECT MAX(version) FROM {table}").fetchone()
            current = row[0] or 0
            if current > len(migrations):
                raise StoreError(
                    f"store schema version {current} is newer than this chatmem "
                    f"({len(migrations)}); upgrade chatmem"
                )
            for version, script in enumerate(migrations[current:], start=current + 1):
                for statement in script.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"INSERT INTO {table} VALUES (?, ?)", (version, to_ms(utcnow())))

        self.write(apply)

    @property
    def closed(self) -> bool:
        return self._gate.closed

    def close(self) -> None:
        """Refuse new calls (they raise StoreError), wait for the ones running, then close
        every thread's connection. A connection still in use past the wait is left open
        rather than freed under its thread."""
        if self._gate.close():
            with self._connections_lock:
                for conn in self._connections:
                    conn.close()
                self._connections.clear()
        self._local = threading.local()


class SQLiteStore(MemoryStore):
    """A store in one SQLite file; safe for many threads and processes at once."""

    capabilities = Capabilities(keyword_search=True, multi_process=True)

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "NORMAL",
        vector_cache_bytes: int = DEFAULT_BUDGET_BYTES,
    ) -> None:
        self.path = str(path)
        self._file = SQLiteFile(path, synchronous=synchronous)
        self._vector_cache = VectorCache(vector_cache_bytes)
        self._file.migrate(MIGRATIONS)
        self._embedding = self._read_embedding()

    # -- embedding binding -----------------------------------------------------------------

    def _read_embedding(self) -> EmbeddingInfo | None:
        with self._file.read() as conn:
            row = conn.execute("SELECT value FROM chatmem_meta WHERE key = 'embedding'").fetchone()
        return EmbeddingInfo.model_validate_json(row[0]) if row else None

    @property
    def embedding(self) -> EmbeddingInfo | None:
        return self._embedding

    def bind_embedding(self, info: EmbeddingInfo) -> None:
        def bind(conn: sqlite3.Connection) -> EmbeddingInfo:
            row = conn.execute("SELECT value FROM chatmem_meta WHERE key = 'embedding'").fetchone()
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
        ids = [entry.record.id for entry in entries]

        def insert(conn: sqlite3.Connection) -> None:
            placeholders = ", ".join("?" * len(ids))
            taken = conn.execute(
                f"SELECT id FROM memories WHERE id IN ({placeholders})", ids
            ).fetchall()
            if taken:
                raise ValidationError(f"memory {taken[0][0]!r} already exists", field="id")
            for record, vector in entries:
                rowid = self._insert_row(conn, record, vector)
                self._index_text(conn, rowid, record)
                self._add_history(conn, HistoryEvent.ADD, None, record, None)

        self._file.write(insert)

    def _insert_row(self, conn: sqlite3.Connection, record: MemoryRecord, vector: Vector) -> int:
        cursor = conn.execute(
            "INSERT INTO memories (id, tenant_id, user_id, agent_id, project_id, session_id,"
            " type, scope, created_at, valid_from, valid_to, version, expires_at, body)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*self._columns(record), record.model_dump_json()),
        )
        rowid = int(cursor.lastrowid or 0)
        conn.execute("INSERT INTO memory_vectors VALUES (?, ?)", (rowid, _blob(vector)))
        _bump(conn, record, "appended")
        return rowid

    @staticmethod
    def _columns(record: MemoryRecord) -> tuple[Any, ...]:
        valid_from = record.time.valid_from
        valid_to = record.time.valid_to
        return (
            record.id,
            record.tenant_id,
            record.user_id,
            record.agent_id,
            record.project_id,
            record.session_id,
            record.type.value,
            record.scope.value,
            to_ms(record.time.created_at),
            to_ms(valid_from) if valid_from else None,
            to_ms(valid_to) if valid_to else None,
            record.metadata.version,
            to_ms(expires_at) if (expires_at := record.time.expires_at) else None,
        )

    @staticmethod
    def _index_text(conn: sqlite3.Connection, rowid: int, record: MemoryRecord) -> None:
        token = _user_token(record.tenant_id, record.user_id)
        conn.execute(
            f"INSERT INTO {_fts_table(token)} (rowid, {_FTS_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
            (rowid, token, *textlib.index_fields(record)),
        )

    @staticmethod
    def _add_history(
        conn: sqlite3.Connection,
        event: HistoryEvent,
        old: MemoryRecord | None,
        new: MemoryRecord | None,
        reason: str | None,
    ) -> None:
        subject = new or old
        assert subject is not None
        conn.execute(
            "INSERT INTO memory_history (memory_id, tenant_id, user_id, version, event, old, new,"
            " reason, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                subject.id,
                subject.tenant_id,
                subject.user_id,
                subject.metadata.version,
                event.value,
                old.model_dump_json() if old else None,
                new.model_dump_json() if new else None,
                reason,
                to_ms(utcnow()),
            ),
        )

    def update(self, changes: Sequence[Change]) -> None:
        for change in changes:
            if change.vector is not None:
                self._check_vector(change.vector)

        def apply(conn: sqlite3.Connection) -> None:
            for change in changes:
                self._apply_change(conn, change)

        self._file.write(apply)

    def _apply_change(self, conn: sqlite3.Connection, change: Change) -> None:
        new = change.record
        row = conn.execute(
            "SELECT rowid, version, body FROM memories WHERE id = ? AND tenant_id = ?"
            " AND user_id = ?",
            (new.id, new.tenant_id, new.user_id),
        ).fetchone()
        if row is None:
            raise NotFoundError(new.id)
        rowid, version, body = row
        if version != change.expected_version:
            raise ConflictError(
                f"memory {new.id!r} is at version {version}, not {change.expected_version}"
            )
        conn.execute(
            "UPDATE memories SET agent_id = ?, project_id = ?, session_id = ?, type = ?,"
            " scope = ?, created_at = ?, valid_from = ?, valid_to = ?, version = ?,"
            " expires_at = ?, body = ?"
            " WHERE rowid = ?",
            (*self._columns(new)[3:], new.model_dump_json(), rowid),
        )
        if change.vector is not None:
            conn.execute(
                "UPDATE memory_vectors SET embedding = ? WHERE rowid = ?",
                (_blob(change.vector), rowid),
            )
            _bump(conn, new, "changed")
        conn.execute(f"DELETE FROM {_fts_of(new)} WHERE rowid = ?", (rowid,))
        self._index_text(conn, rowid, new)
        self._add_history(conn, HistoryEvent.UPDATE, _record(body), new, change.reason)

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
            changed = Usage.written([_record(body) for (body,) in rows], uses)
            conn.executemany(
                "UPDATE memories SET body = ? WHERE id = ?",
                [(record.model_dump_json(), memory_id) for memory_id, record in changed.items()],
            )
            return builtins.list(changed)

        return self._file.write(apply)

    def delete(self, scope: Filter, reason: str | None = None) -> list[str]:
        where, params = _where(scope)

        def remove(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                f"SELECT m.rowid, m.body FROM memories AS m WHERE {where}", params
            ).fetchall()
            for rowid, body in rows:
                gone = _record(body)
                conn.execute("DELETE FROM memories WHERE rowid = ?", (rowid,))
                for table in ("memory_vectors", _fts_of(gone)):
                    conn.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
                _bump(conn, gone, "changed")
                self._add_history(conn, HistoryEvent.DELETE, gone, None, reason)
            return [_record(body).id for _, body in rows]

        return self._file.write(remove)

    # -- reads -----------------------------------------------------------------------------

    def get(self, ids: Sequence[str], scope: Filter) -> list[MemoryRecord]:
        if not ids:
            return []
        narrowed = scope.model_copy(update={"ids": tuple(ids)})
        where, params = _where(narrowed)
        with self._file.read() as conn:
            rows = conn.execute(f"SELECT m.body FROM memories AS m WHERE {where}", params)
            found = {record.id: record for record in map(_record, (r[0] for r in rows))}
        return [found[i] for i in ids if i in found]

    def vectors(self, ids: Sequence[str], scope: Filter) -> dict[str, Vector]:
        if not ids:
            return {}
        narrowed = scope.model_copy(update={"ids": tuple(ids)})
        where, params = _where(narrowed)
        with self._file.read() as conn:
            rows = conn.execute(
                f"SELECT m.id, v.embedding FROM memories AS m"
                f" JOIN memory_vectors AS v ON v.rowid = m.rowid WHERE {where}",
                params,
            ).fetchall()
        return {memory_id: np.frombuffer(blob, dtype=np.float32).copy() for memory_id, blob in rows}

    def list(self, scope: Filter, limit: int = 100, cursor: str | None = None) -> Page:
        if limit < 1:
            raise ValidationError("must be at least 1", field="limit")
        where, params = _where(scope)
        if cursor is not None:
            where += " AND (m.created_at, m.rowid) > (?, ?)"
            params += [*read_cursor(cursor)]
        with self._file.read() as conn:
            rows = conn.execute(
                f"SELECT m.created_at, m.rowid, m.body FROM memories AS m WHERE {where}"
                " ORDER BY m.created_at, m.rowid LIMIT ?",
                [*params, limit + 1],
            ).fetchall()
        records = [_record(body) for _, _, body in rows[:limit]]
        more = len(rows) > limit
        next_cursor = write_cursor(rows[limit - 1][0], rows[limit - 1][1]) if more else None
        return Page(records, next_cursor)

    def count(self, scope: Filter) -> int:
        where, params = _where(scope)
        with self._file.read() as conn:
            row = conn.execute(f"SELECT COUNT(*) FROM memories AS m WHERE {where}", params)
            return int(row.fetchone()[0])

    def users(
        self, tenant_id: str, *, after: str | None = None, limit: int = 1000
    ) -> builtins.list[str]:
        if limit < 1:
            raise ValidationError("must be at least 1", field="limit")
        with self._file.read() as conn:
            rows = conn.execute(
                "SELECT DISTINCT user_id FROM memories WHERE tenant_id = ? AND user_id > ?"
                " ORDER BY user_id LIMIT ?",
                (tenant_id, after or "", limit),
            ).fetchall()
        return [user for (user,) in rows]

    def history(self, memory_id: str, scope: Filter) -> builtins.list[HistoryEntry]:
        conditions = ["memory_id = ?", "tenant_id = ?"]
        params: list[Any] = [memory_id, scope.tenant_id]
        if scope.user_id is not None:
            conditions.append("user_id = ?")
            params.append(scope.user_id)
        with self._file.read() as conn:
            rows = conn.execute(
                "SELECT memory_id, version, event, old, new, reason, at FROM memory_history"
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
                at=from_ms(row[6]),
            )
            for row in rows
        ]

    # -- search ----------------------------------------------------------------------------

    def search(self, query: SearchQuery) -> builtins.list[Candidate]:
        user = query.filter.require_user()
        with self._file.read() as conn:
            conn.execute("BEGIN")  # one snapshot for versions, vectors and words
            try:
                admitted = _admitted(conn, query.filter)
                keyword: dict[int, float] = {}
                if query.text:
                    keyword = dict(self._keyword_half(conn, query, user, admitted))
                # Asked for only now: an embedding started before the search ran meanwhile.
                vector = query.query_vector()
                cosine: dict[int, float] = {}
                if vector is not None and self._embedding is not None:
                    self._check_vector(vector)
                    cosine = self._vector_half(conn, query, vector, user, admitted, set(keyword))
                ids = self._ids_by_rowid(conn, set(cosine) | set(keyword))
            finally:
                conn.execute("COMMIT")
        return [
            Candidate(ids[rowid], cosine.get(rowid), keyword.get(rowid)) for rowid in sorted(ids)
        ]

    def _vector_half(
        self,
        conn: sqlite3.Connection,
        query: SearchQuery,
        vector: Vector,
        user: str,
        admitted: _Admitted,
        also: set[int],
    ) -> dict[int, float]:
        """The ``candidates`` nearest rows that the filter ``admitted``, plus the cosine of
        ``also``."""
        tenant = query.filter.tenant_id
        row = conn.execute(
            "SELECT appended, changed FROM user_versions WHERE tenant_id = ? AND user_id = ?",
            (tenant, user),
        ).fetchone()
        versions = (int(row[0]), int(row[1])) if row else (0, 0)

        def read(after: int) -> builtins.list[tuple[int, bytes]]:
            rows: builtins.list[tuple[int, bytes]] = conn.execute(
                "SELECT v.rowid, v.embedding FROM memories AS m JOIN memory_vectors AS v"
                " ON v.rowid = m.rowid WHERE m.tenant_id = ? AND m.user_id = ? AND m.rowid > ?"
                " ORDER BY m.rowid",
                (tenant, user, after),
            ).fetchall()
            return rows

        vectors = self._vector_cache.vectors(
            user_key(tenant, user), versions, self._dimension(), read
        )
        scores = vectors.scores(vector)
        pool = np.arange(len(vectors.rowids))
        if admitted.only is not None:
            pool = np.flatnonzero(np.isin(vectors.rowids, _array(admitted.only)))
        elif admitted.hidden:
            pool = pool[~np.isin(vectors.rowids, _array(admitted.hidden))]
        if len(pool) > query.candidates:
            best = np.argpartition(-scores[pool], query.candidates - 1)[: query.candidates]
            pool = pool[best]
        found = {int(vectors.rowids[i]): float(scores[i]) for i in pool}
        wanted = np.fromiter(sorted(also - set(found)), dtype=np.int64)
        for position, rowid in zip(vectors.positions(wanted), wanted, strict=True):
            found[int(rowid)] = float(scores[position])
        return found

    def _keyword_half(
        self,
        conn: sqlite3.Connection,
        query: SearchQuery,
        user: str,
        admitted: _Admitted,
    ) -> builtins.list[tuple[int, float]]:
        """The ``candidates`` best keyword matches that the filter ``admitted``. The match runs
        on the full-text table alone (joined to ``memories``, SQLite would run it once per
        row of the user); rows the filter leaves out are dropped after, asking for more
        while a page came back full and too few were kept."""
        assert query.text is not None
        terms = textlib.query_terms(query.text)
        if not terms:
            return []
        token = _user_token(query.filter.tenant_id, user)
        table = _fts_table(token)
        match = f'ukey : "{token}" AND {{said prev nxt day}} : ({textlib.fts5_any(terms)})'
        weights = ", ".join(str(w) for w in FTS_WEIGHTS)
        wanted = query.candidates
        limit = wanted + len(admitted.hidden) if admitted.only is None else 4 * wanted
        while True:
            rows = conn.execute(
                f"SELECT rowid, bm25({table}, {weights}) AS s FROM {table}"
                f" WHERE {table} MATCH ? ORDER BY s LIMIT ?",
                (match, limit),
            ).fetchall()
            kept = [row for row in rows if admitted.admits(row[0])]
            if len(kept) >= wanted or len(rows) < limit:
                rows = kept[:wanted]
                break
            limit *= 4
        # FTS5's bm25() is negative, lower is better; flip it so higher is better.
        return [(rowid, -score) for rowid, score in rows]

    @staticmethod
    def _ids_by_rowid(conn: sqlite3.Connection, rowids: set[int]) -> dict[int, str]:
        if not rowids:
            return {}
        ordered = sorted(rowids)
        rows = conn.execute(
            f"SELECT rowid, id FROM memories WHERE rowid IN ({', '.join('?' * len(ordered))})",
            ordered,
        ).fetchall()
        return dict(rows)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        self._file.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"
