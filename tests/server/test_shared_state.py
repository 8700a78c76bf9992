"""With a PostgreSQL memory store the service state goes to the same database (issue 15.1):
two services on one PostgreSQL with separate data dirs share keys, response chains, sessions
and the outbox, and their data dirs hold no service.db. The SQLite default is unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from chatmem.server.runtime import service_location
from tests.server.conftest import ADMIN_KEY, ServiceFactory


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        (None, None),
        ("sqlite:///x.db", None),
        ("/data/chatmem.db", None),
        ("milvus://h:19530", None),
        ("postgresql://u:p@h/db", ("postgresql://u:p@h/db", "chatmem_service")),
        (
            "postgres://h/db?prefix=acme&sslmode=require&cache=redis://r&cache_ttl=5",
            ("postgres://h/db?sslmode=require", "acme_service"),
        ),
    ],
)
def test_the_service_state_follows_a_postgresql_memory_store(
    uri: str | None, expected: tuple[str, str] | None
) -> None:
    assert service_location(uri) == expected


@pytest.fixture
def service_schema(postgres_uri: str, pg_schema: str) -> Iterator[str]:
    """The services' state schema, dropped once they are closed."""
    pytest.importorskip("psycopg")
    yield f"{pg_schema}_service"
    from tests.pg_server import drop_schema

    drop_schema(postgres_uri, f"{pg_schema}_service")


@pytest.fixture
def two_services(
    postgres_uri: str,
    pg_schema: str,
    service_schema: str,
    make_service: ServiceFactory,
    tmp_path: Path,
) -> tuple[TestClient, TestClient]:
    """Two services on one PostgreSQL (closed by make_service before the schemas go)."""
    separator = "&" if "?" in postgres_uri else "?"
    store = f"{postgres_uri}{separator}prefix={pg_schema}"
    a, b = (
        make_service(server={"data_dir": str(tmp_path / name)}, memory={"store": store})
        for name in ("a", "b")
    )
    return a, b


ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.mark.postgres
def test_two_services_on_one_postgresql_share_their_state(
    two_services: tuple[TestClient, TestClient], tmp_path: Path
) -> None:
    a, b = two_services
    runtime = a.app.state.runtime
    assert type(runtime.outbox).__name__ == "PostgresOutbox"
    assert type(runtime.short_term.store).__name__ == "PostgresSessionStore"
    made = a.post("/v1/admin/keys", json={"tenant_id": "acme"}, headers=ADMIN).json()
    key = {"Authorization": f"Bearer {made['key']}"}
    assert b.get("/v1/memory", params={"user_id": "anna"}, headers=key).status_code == 200
    first = a.post(
        "/v1/responses",
        json={"model": "m", "input": "My PIN is 4321.", "memory_context": {"user_id": "anna"}},
        headers=key,
    ).json()
    second = b.post(
        "/v1/responses",
        json={"model": "m", "input": "And again?", "previous_response_id": first["id"],
              "memory_context": {"user_id": "anna"}},
        headers=key,
    )  # fmt: skip
    assert second.status_code == 200, second.text
    assert b.get("/v1/sessions", params={"user_id": "anna"}, headers=key).json()["sessions"]
    assert b.delete("/v1/memory", params={"user_id": "anna"}, headers=key).status_code == 200
    assert a.get(f"/v1/responses/{first['id']}", headers=key).status_code == 404
    assert a.get("/v1/sessions", params={"user_id": "anna"}, headers=key).json() == {"sessions": []}
    assert not (tmp_path / "a" / "service.db").exists()
    assert not (tmp_path / "b" / "service.db").exists()
