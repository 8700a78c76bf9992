"""One PostgreSQL database shared by the service's state (issue 15): API keys, response
chains, the extraction outbox, webhook deliveries and sessions.

A :class:`PostgresDatabase` is a connection pool to one database and one schema (default
``chatmem_service``, beside the memory store's ``chatmem``, which opens one of its own). Each
part of the state is a :class:`PostgresTables`: it records its append-only migrations under
its component's name in the schema's one ``chatmem_schema`` table
(:mod:`chatmem.stores.schema_versions`), runs them under the advisory lock every chatmem
store takes (so replicas starting at once never race), and lets its calls in through its
own :class:`~chatmem.stores.gate.Gate` (a call after ``close`` raises ``StoreError``).
Parts may share one database (one pool per replica) or open their own from a conninfo.
psycopg's errors are translated here, at the boundary, into chatmem's tree.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from chatmem.errors import (
    ConfigError,
    ConflictError,
    StoreError,
    StoreUnavailableError,
    ValidationError,
)
from chatmem.records import utcnow
from chatmem.stores.gate import Gate
from chatmem.stores.schema_versions import SCHEMA_TABLE, check_known, component_of, legacy_table

Connection = psycopg.Connection[Any]

#: Key of the advisory lock that serialises migrations of every chatmem store in a database.
MIGRATION_LOCK = 0x63686D6D  # "chmm"

#: The schema of the service state unless one is named.
SERVICE_SCHEMA = "chatmem_service"

#: What a schema name may be (it is written into SQL).
SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def describe(conninfo: str) -> str:
    """``host:port/dbname`` of a conninfo, for messages; never the password."""
    params = conninfo_to_dict(conninfo)
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port") or "5432"
    return f"{host}:{port}/{params.get('dbname') or params.get('user') or ''}"


@contextmanager
def translated(location: str, timeout: float) -> Iterator[None]:
    """Translate psycopg's errors into chatmem's."""
    try:
        yield
    except PoolTimeout as exc:
        raise StoreUnavailableError(
            f"no PostgreSQL connection to {location} within {timeout:g} s: {exc}"
        ) from exc
    except (pg_errors.SerializationFailure, pg_errors.DeadlockDetected) as exc:
        raise ConflictError(f"a concurrent write got in the way; retry: {exc}") from exc
    except pg_errors.QueryCanceled as exc:
        raise StoreError(f"PostgreSQL cancelled the statement: {exc}") from exc
    except psycopg.OperationalError as exc:
        raise StoreUnavailableError(f"cannot reach PostgreSQL at {location}: {exc}") from exc
    except psycopg.IntegrityError as exc:
        raise ConflictError(f"PostgreSQL refused the write: {exc}") from exc
    except psycopg.DataError as exc:
        raise ValidationError(f"PostgreSQL cannot store this value: {exc}") from exc
    except psycopg.Error as exc:
        raise StoreError(f"PostgreSQL error: {exc}") from exc


class PostgresDatabase:
    """A pool of connections to one database, for the tables of one ``schema``.

    ``pool_size`` bounds the open connections (one replica's whole service state shares
    them); ``connect_timeout`` (seconds) bounds connecting and waiting for a connection.
    ``configure`` readies each new connection. With ``open_pool=False`` the pool waits for
    ``open``; ``migrate`` before then runs on a connection of its own (the memory store
    migrates before it opens its pool, so a server it cannot reach says so at once).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = SERVICE_SCHEMA,
        pool_size: int = 8,
        connect_timeout: float = 10.0,
        configure: Callable[[Connection], None] | None = None,
        open_pool: bool = True,
    ) -> None:
        if not SCHEMA_NAME.match(schema):
            raise ConfigError(f"schema {schema!r} must match {SCHEMA_NAME.pattern}")
        try:
            self.location = describe(conninfo)
            params = conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as exc:
            raise ConfigError(f"not a PostgreSQL connection string: {exc}") from exc
        # libpq takes whole seconds, and treats anything under 2 as 2.
        params.setdefault("connect_timeout", str(max(2, math.ceil(connect_timeout))))
        self.conninfo = make_conninfo("", **params)
        self.schema = schema
        self._timeout = connect_timeout
        self._gate = Gate(f"PostgreSQL {self.location} ({schema})")
        self._pool: ConnectionPool[Connection] = ConnectionPool(
            self.conninfo,
            min_size=1,
            max_size=pool_size,
            timeout=connect_timeout,
            open=False,
            # A connection that died with the server is replaced, not handed out.
            check=ConnectionPool.check_connection,
            configure=configure,
            name=f"chatmem-{schema}",
        )
        if open_pool:
            self.open()

    def open(self) -> None:
        """Open the pool, waiting for its first connection."""
        try:
            with self.translated():
                self._pool.open(wait=True, timeout=self._timeout)
        except BaseException:  # boundary: stop the pool's workers, then re-raise
            self._pool.close()
            raise

    def translated(self) -> AbstractContextManager[None]:
        """A context that translates psycopg's errors for this database."""
        return translated(self.location, self._timeout)

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A pooled connection in one transaction: committed on success, else rolled back."""
        with self._gate.passage(), self.translated(), self._pool.connection() as conn:
            yield conn

    def migrate(
        self,
        migrations: Sequence[str],
        table: str,
        *,
        prepare: Callable[[Connection], None] | None = None,
    ) -> None:
        """Apply the scripts of ``migrations`` (``{schema}`` is filled in) not yet recorded
        for the component ``table`` names (see
        :func:`~chatmem.stores.schema_versions.component_of`), in one transaction under the
        migration lock; ``prepare`` runs first in it (the memory store makes pgvector)."""
        with self._migration_transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            if prepare is not None:
                prepare(conn)
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
            apply_migrations(conn, self.schema, migrations, table)

    @contextmanager
    def _migration_transaction(self) -> Iterator[Connection]:
        if not self._pool.closed:
            with self.transaction() as conn:
                yield conn
            return
        with self._gate.passage(), self.translated(), psycopg.connect(self.conninfo) as conn:
            yield conn

    @property
    def closed(self) -> bool:
        return self._gate.closed

    def close(self) -> None:
        """Refuse new calls, wait for the running ones, then close the pool."""
        if self._gate.closed:
            return
        if self._gate.close():
            self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresDatabase({self.location!r}, schema={self.schema!r})"


def apply_migrations(conn: Connection, schema: str, migrations: Sequence[str], table: str) -> None:
    """Inside the caller's transaction, which holds the migration lock: the component's
    new migrations, recorded in ``{schema}.chatmem_schema``."""
    component = component_of(table)
    versions = f"{schema}.{SCHEMA_TABLE}"
    current = _recorded_version(conn, schema, component, legacy_table(table))
    check_known(component, current, len(migrations))
    for number, script in enumerate(migrations[current:], start=current + 1):
        conn.execute(script.format(schema=schema))
        conn.execute(f"INSERT INTO {versions} VALUES (%s, %s, %s)", (component, number, utcnow()))


def _recorded_version(conn: Connection, schema: str, component: str, legacy: str | None) -> int:
    """The component's latest applied version, after moving the versions of its ``legacy``
    table (when there is one) into ``chatmem_schema`` and dropping it."""
    versions = f"{schema}.{SCHEMA_TABLE}"
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {versions} (component TEXT NOT NULL,"
        " version INTEGER NOT NULL, applied_at TIMESTAMPTZ NOT NULL,"
        " PRIMARY KEY (component, version))"
    )
    if legacy is not None and _exists(conn, f"{schema}.{legacy}"):
        conn.execute(
            f"INSERT INTO {versions} (component, version, applied_at)"
            f" SELECT %s, version, applied_at FROM {schema}.{legacy} ON CONFLICT DO NOTHING",
            (component,),
        )
        conn.execute(f"DROP TABLE {schema}.{legacy}")
    row = conn.execute(
        f"SELECT MAX(version) FROM {versions} WHERE component = %s", (component,)
    ).fetchone()
    return int(row[0]) if row and row[0] else 0


def _exists(conn: Connection, table: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
    return row is not None and row[0] is not None


class PostgresTables:
    """One part of the state in a :class:`PostgresDatabase`: its migrations, and a gate of
    its own, so closing the part refuses its calls even while the database stays open for
    the other parts. Opened from a conninfo, the part owns its database (in ``schema``) and
    closes it."""

    def __init__(
        self,
        database: PostgresDatabase | str,
        migrations: Sequence[str],
        *,
        table: str,
        what: str = "PostgreSQL tables",
        schema: str = SERVICE_SCHEMA,
    ) -> None:
        owns = isinstance(database, str)
        if isinstance(database, str):
            database = PostgresDatabase(database, schema=schema, pool_size=4)
        self.database = database
        self._owns = owns
        self._gate = Gate(f"{what} in {self.database.location}")
        self.schema = self.database.schema
        try:
            self.database.migrate(migrations, table)
        except BaseException:  # boundary: release what was opened, then re-raise
            if owns:
                self.database.close()
            raise

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction on a pooled connection, through this part's gate."""
        with self._gate.passage(), self.database.transaction() as conn:
            yield conn

    def close(self) -> None:
        """Later calls raise StoreError; the database closes too when this part owns it."""
        if self._gate.close() and self._owns:
            self.database.close()


__all__ = [
    "MIGRATION_LOCK",
    "SCHEMA_NAME",
    "SERVICE_SCHEMA",
    "Connection",
    "PostgresDatabase",
    "PostgresTables",
    "apply_migrations",
    "describe",
    "translated",
]
