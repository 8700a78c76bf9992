"""Leases on the maintenance jobs, so that of several replicas exactly one runs a job at a
time, and the deployment runs it once per interval, not once per replica.

A lease is one row per job in the service database: who holds it (a replica's random id)
and until when, when the job is next due, and when it last ran with what result. A replica
takes a job (``claim``) only while nobody else holds it (or the holder's lease ran out: a
replica that died mid-job frees it after ``lease_ms``) and, for a scheduled run, only once
it is due. A long job keeps its lease (``renew``) between users; ``release`` frees it and
moves the next due time on.

Three implementations of one interface (:class:`JobLeases`), with one rule for who may take
a lease (:func:`may_claim`): :class:`SQLiteLeases` in ``service.db`` (replicas sharing one
data dir: ``BEGIN IMMEDIATE`` serialises them), :class:`PostgresLeases` in the shared
``<prefix>_service`` schema (a row locked ``FOR UPDATE``), and :class:`LocalLeases` in memory
(a service with no database: one process).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from chatmem.stores.sqlite import SQLiteFile

if TYPE_CHECKING:
    from chatmem.stores.postgres_db import PostgresDatabase

MIGRATIONS_TABLE = "chatmem_leases_migrations"

SQLITE_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE maintenance_leases (
        job TEXT PRIMARY KEY,
        holder TEXT,
        until_ms INTEGER NOT NULL DEFAULT 0,
        next_due_ms INTEGER NOT NULL DEFAULT 0,
        last_ms INTEGER,
        last_result TEXT
    );
    """,
)

POSTGRES_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE {schema}.maintenance_leases (
        job TEXT PRIMARY KEY,
        holder TEXT,
        until_ms BIGINT NOT NULL DEFAULT 0,
        next_due_ms BIGINT NOT NULL DEFAULT 0,
        last_ms BIGINT,
        last_result TEXT
    );
    """,
)

_COLUMNS = "job, holder, until_ms, next_due_ms, last_ms, last_result"


@dataclass(frozen=True)
class Lease:
    """One job's row: its holder (None when free) and until when, when it is next due, and
    when it last ended with what result (JSON)."""

    job: str
    holder: str | None = None
    until_ms: int = 0
    next_due_ms: int = 0
    last_ms: int | None = None
    last_result: str | None = None


def may_claim(lease: Lease, holder: str, now_ms: int, *, due_only: bool) -> bool:
    """Whether ``holder`` may take ``lease`` at ``now_ms``: nobody else holds it (or their
    lease ran out) and, for a scheduled run (``due_only``), the job is due."""
    held_by_other = lease.holder not in (None, holder) and lease.until_ms > now_ms
    return not held_by_other and not (due_only and lease.next_due_ms > now_ms)


class JobLeases(Protocol):
    """Where the leases of the maintenance jobs live."""

    def claim(self, job: str, holder: str, now_ms: int, lease_ms: int, *, due_only: bool) -> bool:
        """Take ``job``'s lease until ``now_ms + lease_ms`` if :func:`may_claim` allows it."""

    def renew(self, job: str, holder: str, until_ms: int) -> bool:
        """Keep a lease ``holder`` holds until ``until_ms``; False when it was lost."""

    def release(
        self, job: str, holder: str, now_ms: int, next_due_ms: int | None, result: str
    ) -> None:
        """Free a lease ``holder`` holds, noting the run's end and ``result``; the job is
        next due at ``next_due_ms`` (None: as it was)."""

    def leases(self) -> list[Lease]:
        """Every job's row, by job."""

    def close(self) -> None: ...


def _row(values: Sequence[Any]) -> Lease:
    job, holder, until_ms, next_due_ms, last_ms, last_result = values
    return Lease(job, holder, int(until_ms), int(next_due_ms), last_ms, last_result)


class LocalLeases:
    """Leases in this process's memory, for a service with no database."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, Lease] = {}

    def claim(self, job: str, holder: str, now_ms: int, lease_ms: int, *, due_only: bool) -> bool:
        with self._lock:
            lease = self._rows.get(job, Lease(job))
            if not may_claim(lease, holder, now_ms, due_only=due_only):
                return False
            self._rows[job] = replace(lease, holder=holder, until_ms=now_ms + lease_ms)
            return True

    def renew(self, job: str, holder: str, until_ms: int) -> bool:
        with self._lock:
            lease = self._rows.get(job)
            if lease is None or lease.holder != holder:
                return False
            self._rows[job] = replace(lease, until_ms=until_ms)
            return True

    def release(
        self, job: str, holder: str, now_ms: int, next_due_ms: int | None, result: str
    ) -> None:
        with self._lock:
            lease = self._rows.get(job)
            if lease is None or lease.holder != holder:
                return
            due = lease.next_due_ms if next_due_ms is None else next_due_ms
            self._rows[job] = Lease(job, None, 0, due, now_ms, result)

    def leases(self) -> list[Lease]:
        with self._lock:
            return [self._rows[job] for job in sorted(self._rows)]

    def close(self) -> None:
        pass


class SQLiteLeases:
    """Leases in the service's SQLite file, shared by the processes that open it."""

    def __init__(self, path: str | Path) -> None:
        self._file = SQLiteFile(path)
        try:
            self._file.migrate(SQLITE_MIGRATIONS, table=MIGRATIONS_TABLE)
        except BaseException:  # boundary: close what we opened, then re-raise
            self._file.close()
            raise

    def claim(self, job: str, holder: str, now_ms: int, lease_ms: int, *, due_only: bool) -> bool:
        def take(conn: sqlite3.Connection) -> bool:
            conn.execute("INSERT OR IGNORE INTO maintenance_leases (job) VALUES (?)", (job,))
            lease = _row(
                conn.execute(
                    f"SELECT {_COLUMNS} FROM maintenance_leases WHERE job = ?", (job,)
                ).fetchone()
            )
            if not may_claim(lease, holder, now_ms, due_only=due_only):
                return False
            conn.execute(
                "UPDATE maintenance_leases SET holder = ?, until_ms = ? WHERE job = ?",
                (holder, now_ms + lease_ms, job),
            )
            return True

        return self._file.write(take)

    def renew(self, job: str, holder: str, until_ms: int) -> bool:
        def keep(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE maintenance_leases SET until_ms = ? WHERE job = ? AND holder = ?",
                (until_ms, job, holder),
            )
            return cursor.rowcount == 1

        return self._file.write(keep)

    def release(
        self, job: str, holder: str, now_ms: int, next_due_ms: int | None, result: str
    ) -> None:
        self._file.write(
            lambda conn: conn.execute(
                "UPDATE maintenance_leases SET holder = NULL, until_ms = 0,"
                " next_due_ms = COALESCE(?, next_due_ms), last_ms = ?, last_result = ?"
                " WHERE job = ? AND holder = ?",
                (next_due_ms, now_ms, result, job, holder),
            )
        )

    def leases(self) -> list[Lease]:
        with self._file.read() as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM maintenance_leases ORDER BY job")
            return [_row(row) for row in rows.fetchall()]

    def close(self) -> None:
        self._file.close()


class PostgresLeases:
    """Leases in the PostgreSQL service schema that every replica shares."""

    def __init__(self, database: PostgresDatabase) -> None:
        from chatmem.stores.postgres_db import PostgresTables

        self._tables = PostgresTables(
            database, POSTGRES_MIGRATIONS, table="lease_migrations", what="maintenance leases"
        )
        self._t = f"{self._tables.schema}.maintenance_leases"

    def claim(self, job: str, holder: str, now_ms: int, lease_ms: int, *, due_only: bool) -> bool:
        with self._tables.transaction() as conn:
            conn.execute(f"INSERT INTO {self._t} (job) VALUES (%s) ON CONFLICT DO NOTHING", (job,))
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM {self._t} WHERE job = %s FOR UPDATE", (job,)
            ).fetchone()
            assert row is not None
            if not may_claim(_row(row), holder, now_ms, due_only=due_only):
                return False
            conn.execute(
                f"UPDATE {self._t} SET holder = %s, until_ms = %s WHERE job = %s",
                (holder, now_ms + lease_ms, job),
            )
            return True

    def renew(self, job: str, holder: str, until_ms: int) -> bool:
        with self._tables.transaction() as conn:
            cursor = conn.execute(
                f"UPDATE {self._t} SET until_ms = %s WHERE job = %s AND holder = %s",
                (until_ms, job, holder),
            )
            return cursor.rowcount == 1

    def release(
        self, job: str, holder: str, now_ms: int, next_due_ms: int | None, result: str
    ) -> None:
        with self._tables.transaction() as conn:
            conn.execute(
                f"UPDATE {self._t} SET holder = NULL, until_ms = 0,"
                " next_due_ms = COALESCE(%s::bigint, next_due_ms), last_ms = %s, last_result = %s"
                " WHERE job = %s AND holder = %s",
                (next_due_ms, now_ms, result, job, holder),
            )

    def leases(self) -> list[Lease]:
        with self._tables.transaction() as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM {self._t} ORDER BY job").fetchall()
        return [_row(row) for row in rows]

    def close(self) -> None:
        self._tables.close()


__all__ = [
    "JobLeases",
    "Lease",
    "LocalLeases",
    "PostgresLeases",
    "SQLiteLeases",
    "may_claim",
]
