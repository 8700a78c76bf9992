"""Backends for the conformance suite. Every test gets a fresh tenant, so one store can
serve a whole module (Milvus Lite takes seconds to start)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chatmem.records import EmbeddingInfo
from chatmem.stores import MemoryStore, SQLiteStore

DIM = 8
EMBEDDING = EmbeddingInfo(model="test-geometry", dimension=DIM)

StoreFactory = Callable[[Path], MemoryStore]


def _sqlite(path: Path) -> MemoryStore:
    return SQLiteStore(path / "chatmem.db")


def _milvus(path: Path) -> MemoryStore:
    pytest.importorskip("pymilvus")
    from chatmem.stores.milvus import MilvusStore

    return MilvusStore(str(path / "milvus.db"))


BACKENDS: dict[str, StoreFactory] = {"sqlite": _sqlite, "milvus": _milvus}


@pytest.fixture(scope="module", params=[pytest.param("milvus", marks=pytest.mark.milvus), "sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def store(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryStore]:
    opened = BACKENDS[backend](tmp_path_factory.mktemp(backend))
    opened.bind_embedding(EMBEDDING)
    yield opened
    opened.close()


@pytest.fixture
def make_store(backend: str) -> StoreFactory:
    return BACKENDS[backend]


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"
