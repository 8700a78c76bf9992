"""Backends for the session conformance suite. One store serves a whole module; every test
uses its own tenant, and the Redis store its own key prefix, deleted afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from chatmem.messages import SessionKey
from chatmem.sessions import SessionStore
from tests.sessions.helpers import (
    POSTGRES,
    drop_redis_prefix,
    open_backend,
    postgres_schema,
    random_key,
)


@pytest.fixture(
    scope="module",
    params=[
        "memory",
        "sqlite",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ],
)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        pytest.importorskip("psycopg", reason="psycopg is not installed (chatmem[postgres])")
        POSTGRES["uri"] = request.getfixturevalue("postgres_uri")
    return str(request.param)


@pytest.fixture(scope="module")
def store(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionStore]:
    prefix = f"chatmem-test-{uuid.uuid4().hex[:12]}"
    opened = open_backend(backend, tmp_path_factory.mktemp(backend), prefix)
    try:
        yield opened
    finally:
        opened.close()
        if backend == "redis":
            drop_redis_prefix(prefix)
        if backend == "postgres":
            from tests.pg_server import drop_schema

            drop_schema(POSTGRES["uri"], postgres_schema(prefix))


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def key(tenant: str) -> SessionKey:
    return random_key(tenant)
