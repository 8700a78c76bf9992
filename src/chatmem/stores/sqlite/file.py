"""One SQLite file opened per thread (WAL, busy timeout), with retried ``BEGIN IMMEDIATE``
writes and versioned migrations recorded in the file's one ``chatmem_schema`` table
(:mod:`chatmem.stores.schema_versions`).

Shared by every component that keeps tables in SQLite (the memory store, sessions, the
outbox, the service's keys, responses, webhooks and leases), which may live in one file.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from chatmem.errors import StoreError, StoreUnavailableError, ValidationError
from chatmem.records import to_ms, utcnow
from chatmem.stores.gate import Gate
from chatmem.stores.schema_versions import SCHEMA_TABLE, check_known, component_of, legacy_table
from chatmem.stores.sqlite.heap import bound_heap

try:  # The stdlib module of many Pythons cannot load extensions; pysqlite3 can.
    import pysqlite3.dbapi2 as sqlite3
except ImportError:  # pragma: no cover - exercised only where pysqlite3 is absent
    import sqlite3

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000
#: How long a write keeps retrying a busy database before it gives up.
WRITE_RETRY_SECONDS = 120.0


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    message = str(exc).lower()
    return "locked" in message or "busy" in message


class SQLiteFile:
    """One SQLite file opened per thread (WAL, busy timeout), with retried ``BEGIN IMMEDIATE``
    writes and versioned migrations. Shared by the long-term and the session stores, which may
    live in the same file: each records its versions under its own component name."""

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
            bound_heap(conn)
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
        """Apply the scripts of ``migrations`` not yet recorded for the component ``table``
        names (see :func:`~chatmem.stores.schema_versions.component_of`), in one write."""
        component = component_of(table)
        legacy = legacy_table(table)

        def apply(conn: sqlite3.Connection) -> None:
            current = _recorded_version(conn, component, legacy)
            check_known(component, current, len(migrations))
            for version, script in enumerate(migrations[current:], start=current + 1):
                for statement in script.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(
                    f"INSERT INTO {SCHEMA_TABLE} VALUES (?, ?, ?)",
                    (component, version, to_ms(utcnow())),
                )

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


def _recorded_version(conn: sqlite3.Connection, component: str, legacy: str | None) -> int:
    """The component's latest applied version, after moving the versions of its ``legacy``
    table (when there is one) into ``chatmem_schema`` and dropping it."""
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (component TEXT NOT NULL,"
        " version INTEGER NOT NULL, applied_at INTEGER NOT NULL,"
        " PRIMARY KEY (component, version))"
    )
    if (
        legacy is not None
        and conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (legacy,)
        ).fetchone()
    ):
        conn.execute(
            f"INSERT OR IGNORE INTO {SCHEMA_TABLE} (component, version, applied_at)"
            f" SELECT ?, version, applied_at FROM {legacy}",
            (component,),
        )
        conn.execute(f"DROP TABLE {legacy}")
    row = conn.execute(
        f"SELECT MAX(version) FROM {SCHEMA_TABLE} WHERE component = ?", (component,)
    ).fetchone()
    return int(row[0] or 0)


__all__ = ["BUSY_TIMEOUT_MS", "WRITE_RETRY_SECONDS", "SQLiteFile", "sqlite3"]
