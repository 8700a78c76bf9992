"""Databases written by chatmem before the one migrations table open and migrate forward.

The fixtures (``tests/fixtures/make_legacy_db.py``) were written by the code of commit
53d7afb, whose components each kept their schema versions in a table of their own. Opening
them with today's code must keep every record readable, move every component's versions
into ``chatmem_schema`` (under the component's name) and drop the old tables; opening them
again changes nothing. PostgreSQL: the fixture is a ``pg_dump`` of the same state, loaded
into a database made for the test.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from chatmem.messages import SessionKey
from chatmem.records import Filter, MemoryRecord
from chatmem.stores.base import MemoryStore, SearchQuery
from chatmem.stores.schema_versions import SCHEMA_TABLE, component_of
from chatmem.stores.sqlite import SQLiteStore
from chatmem.stores.sqlite.file import sqlite3

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SCOPE = Filter(tenant_id="acme", user_id="alice")

#: Versions by component: {component: {version: applied_at}}.
Versions = dict[str, dict[int, Any]]


def _expected(name: str) -> dict[str, Any]:
    written: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return written


# -- what every backend must still hold --------------------------------------------------------


def check_memories(store: MemoryStore, written: dict[str, Any]) -> None:
    records = {record.id: record for record in store.list(SCOPE, limit=100).records}
    assert sorted(records) == written["memories"]
    assert store.get([written["deleted"]], SCOPE) == []
    budget = records["m-budget"]
    assert budget.text == "My budget for the trip is $1200"
    assert budget.metadata.version == 2
    city, porto = records["m-city"], records["m-city-2"]
    assert city.time.valid_to is not None and city.time.valid_to == porto.time.valid_from
    assert [r.target_id for r in porto.relations] == ["m-city"]
    assert porto.user_metadata == {"subject": "home"}
    assert records["m-salary"].access_control.allowed_roles == ["hr"]
    assert records["m-ttl"].time.expires_at is not None
    for memory_id, events in written["history"].items():
        history = store.history(memory_id, SCOPE)
        assert [entry.event.value for entry in history] == events
        assert history[-1].new == records[memory_id]
    assert store.embedding is not None and store.embedding.model == "legacy-fixture"
    _check_search(store, records)


def _check_search(store: MemoryStore, records: dict[str, MemoryRecord]) -> None:
    vectors = store.vectors(["m-city-2"], SCOPE)
    found = store.search(
        SearchQuery(
            SCOPE.model_copy(update={"reader_roles": frozenset()}),
            vector=vectors["m-city-2"],
            text="Porto",
            candidates=10,
        )
    )
    by_id = {candidate.id: candidate for candidate in found}
    assert by_id["m-city-2"].keyword_score is not None
    assert by_id["m-city-2"].vector_score == pytest.approx(1.0, abs=1e-5)
    assert "m-salary" not in by_id  # restricted to a role the reader lacks
    assert set(by_id) <= set(records)


def check_state(parts: dict[str, Any], written: dict[str, Any]) -> None:
    """The service state: a key, a response, a webhook delivery, an outbox batch, a lease
    and a session."""
    principal = parts["keys"].authenticate(written["api_key"])
    assert principal is not None and principal.key_id == written["key_id"]
    response = parts["responses"].get("acme", written["response_id"])
    assert response is not None and response.body["output_text"] == "In Porto."
    deliveries = parts["deliveries"]
    assert deliveries.pending() == 1
    claim = deliveries.claim(2_000_000_000.0, 30.0)
    assert claim is not None and claim.event_id == written["event_id"]
    deliveries.retry(claim, 1_740_830_403.0)  # leave it as it was found
    batch = parts["outbox"].get(written["batch_id"])
    assert batch is not None and [m.content for m in batch.messages] == written["messages"]
    (lease,) = [lease for lease in parts["leases"].leases() if lease.job == written["lease"]]
    assert (lease.holder, lease.next_due_ms, lease.last_ms) == (None, 86_400_000, 2_000)
    key = SessionKey(*written["session"])
    sessions = parts["sessions"]
    assert [m.content for m in sessions.read(key)] == written["messages"]
    assert sessions.get_text("acme", written["text"][0]) == written["text"][1]


# -- SQLite ------------------------------------------------------------------------------------


def _sqlite_versions(path: Path) -> tuple[Versions, Versions]:
    """(versions in legacy tables by their component, versions in ``chatmem_schema``)."""
    with closing(sqlite3.connect(str(path))) as conn:
        tables = [
            name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        legacy = {
            component_of(table): dict(conn.execute(f"SELECT version, applied_at FROM {table}"))
            for table in tables
            if table.endswith("_migrations")
        }
        current: Versions = {}
        if SCHEMA_TABLE in tables:
            for component, version, at in conn.execute(f"SELECT * FROM {SCHEMA_TABLE}"):
                current.setdefault(component, {})[version] = at
    return legacy, current


def _sqlite_schema(path: Path) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(str(path))) as conn:
        return conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()


def _sqlite_state(path: Path) -> dict[str, Any]:
    from chatmem.server.auth import KeyStore
    from chatmem.server.leases import SQLiteLeases
    from chatmem.server.response_store import ResponseStore
    from chatmem.server.webhooks import _SQLiteDeliveries
    from chatmem.sessions.sqlite import SQLiteSessionStore
    from chatmem.worker import SQLiteOutbox

    written = _expected("legacy.json")
    return {
        "keys": KeyStore(path),
        "responses": ResponseStore(path, limit=100),
        "deliveries": _SQLiteDeliveries(path, written["webhook_url"]),
        "outbox": SQLiteOutbox(path),
        "leases": SQLiteLeases(path),
        "sessions": SQLiteSessionStore(path),
    }


def _check_moved(before: Versions, after: Versions) -> None:
    """Every legacy version is in ``chatmem_schema`` as it was; no legacy table is left."""
    for component, versions in before.items():
        assert after[component].items() >= versions.items(), component
        assert sorted(after[component]) == list(range(1, len(after[component]) + 1))


@pytest.fixture
def legacy_sqlite(tmp_path: Path) -> tuple[Path, Path]:
    memories, service = tmp_path / "chatmem.db", tmp_path / "service.db"
    shutil.copyfile(FIXTURES / "legacy_chatmem.db", memories)
    shutil.copyfile(FIXTURES / "legacy_service.db", service)
    return memories, service


@contextmanager
def _open_sqlite(memories: Path, service: Path) -> Iterator[tuple[SQLiteStore, dict[str, Any]]]:
    store = SQLiteStore(memories)
    parts = _sqlite_state(service)
    try:
        yield store, parts
    finally:
        store.close()
        for part in parts.values():
            part.close()


def test_a_legacy_sqlite_database_opens_and_migrates(legacy_sqlite: tuple[Path, Path]) -> None:
    memories, service = legacy_sqlite
    before = {path: _sqlite_versions(path)[0] for path in legacy_sqlite}
    assert set(before[memories]) == {"chatmem"}
    assert set(before[service]) == {"keys", "responses", "webhook", "outbox", "leases", "session"}
    written = _expected("legacy.json")
    with _open_sqlite(memories, service) as (store, parts):
        check_memories(store, written)
        check_state(parts, written)
    for path in legacy_sqlite:
        legacy, current = _sqlite_versions(path)
        assert legacy == {}
        assert set(current) == set(before[path])
        _check_moved(before[path], current)
    # Opening again is a no-op: the same versions, the same tables.
    first = {path: (_sqlite_versions(path), _sqlite_schema(path)) for path in legacy_sqlite}
    with _open_sqlite(memories, service) as (store, _):
        check_memories(store, written)
    assert {path: (_sqlite_versions(path), _sqlite_schema(path)) for path in legacy_sqlite} == first


# -- PostgreSQL --------------------------------------------------------------------------------


@pytest.fixture
def legacy_postgres(postgres_uri: str) -> Iterator[str]:
    """A database made for the test, holding the legacy dump."""
    psycopg = pytest.importorskip("psycopg")
    from psycopg.conninfo import make_conninfo

    name = f"legacy_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(postgres_uri, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
    except psycopg.errors.InsufficientPrivilege as exc:
        pytest.skip(f"cannot create a database for the legacy dump: {exc}")
    conninfo = make_conninfo(postgres_uri, dbname=name)
    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            conn.execute((FIXTURES / "legacy_postgres.sql").read_text())
        yield conninfo
    finally:
        with psycopg.connect(postgres_uri, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _pg_versions(conninfo: str, schema: str) -> tuple[Versions, Versions]:
    import psycopg

    with psycopg.connect(conninfo) as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
            )
        ]
        legacy = {
            component_of(table): dict(
                conn.execute(f"SELECT version, applied_at FROM {schema}.{table}").fetchall()
            )
            for table in tables
            if table.endswith("_migrations")
        }
        current: Versions = {}
        if SCHEMA_TABLE in tables:
            for component, version, at in conn.execute(f"SELECT * FROM {schema}.{SCHEMA_TABLE}"):
                current.setdefault(component, {})[version] = at
    return legacy, current


def _pg_tables(conninfo: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(conninfo) as conn:
        return conn.execute(
            "SELECT schemaname, tablename FROM pg_tables"
            " WHERE schemaname IN ('chatmem', 'chatmem_service') ORDER BY 1, 2"
        ).fetchall()


@contextmanager
def _open_postgres(conninfo: str) -> Iterator[tuple[MemoryStore, dict[str, Any]]]:
    from chatmem.server.auth import KeyStore
    from chatmem.server.leases import PostgresLeases
    from chatmem.server.pg_state import PostgresState
    from chatmem.server.response_store import ResponseStore
    from chatmem.stores.postgres import PostgresStore

    written = _expected("legacy_postgres.json")
    store = PostgresStore(conninfo)
    state = PostgresState(conninfo)
    tables: dict[str, Callable[[], Any]] = {
        "keys": state.keys,
        "responses": state.responses,
        "deliveries": lambda: state.deliveries(written["webhook_url"]),
        "outbox": state.outbox,
        "leases": lambda: PostgresLeases(state.database),
        "sessions": state.sessions,
    }
    parts = {name: make() for name, make in tables.items()}
    try:
        yield (
            store,
            {
                **parts,
                "keys": KeyStore(None, table=parts["keys"]),
                "responses": ResponseStore(None, limit=100, table=parts["responses"]),
            },
        )
    finally:
        store.close()
        for part in parts.values():
            part.close()
        state.close()


def test_a_legacy_postgres_database_opens_and_migrates(legacy_postgres: str) -> None:
    schemas = ("chatmem", "chatmem_service")
    before = {schema: _pg_versions(legacy_postgres, schema)[0] for schema in schemas}
    assert set(before["chatmem"]) == {"chatmem"}
    assert set(before["chatmem_service"]) == {
        "key",
        "response",
        "webhook",
        "outbox",
        "lease",
        "session",
    }
    written = _expected("legacy_postgres.json")
    with _open_postgres(legacy_postgres) as (store, parts):
        check_memories(store, written)
        check_state(parts, written)
    for schema in schemas:
        legacy, current = _pg_versions(legacy_postgres, schema)
        assert legacy == {}
        assert set(current) == set(before[schema])
        _check_moved(before[schema], current)
    first = ({s: _pg_versions(legacy_postgres, s) for s in schemas}, _pg_tables(legacy_postgres))
    with _open_postgres(legacy_postgres) as (store, _):
        check_memories(store, written)
    assert (
        {s: _pg_versions(legacy_postgres, s) for s in schemas},
        _pg_tables(legacy_postgres),
    ) == first
