"""The part of a store over a vector database that does not depend on the database.

Both stores keep a ``<prefix>_meta`` collection of key/value pairs: the schema version, and
the embedding model bound to the store (the memories collection is made when one is bound,
sized to its dimension). Writes take one lock, which makes the read-then-write checks of
``writes`` safe between threads, and number their history rows from one clock.
"""

from __future__ import annotations

import threading
import time
from abc import abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager

from chatmem.errors import EmbedderMismatchError, StoreError
from chatmem.records import EmbeddingInfo, Vector
from chatmem.stores.base import MemoryStore, SearchQuery


class VectorDBStore(MemoryStore):
    """A ``MemoryStore`` whose database keeps its meta pairs and memories in collections."""

    uri: str
    _embedding: EmbeddingInfo | None

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._last_seq = 0
        self._closed = False
        self._memories_exist = False

    @abstractmethod
    def _read_meta(self, key: str) -> str | None:
        """The value of a meta pair, None when it is not set."""

    @abstractmethod
    def _write_meta(self, key: str, value: str) -> None:
        """Set a meta pair."""

    @abstractmethod
    def _memories_made(self) -> bool:
        """Whether the memories collection exists now (asks the database)."""

    @abstractmethod
    def _make_memories(self, info: EmbeddingInfo) -> None:
        """Create the memories collection for ``info``'s vectors."""

    @abstractmethod
    def _check_dimension(self, info: EmbeddingInfo) -> None:
        """EmbedderMismatchError when the memories collection holds other vectors."""

    @abstractmethod
    def _release(self) -> None:
        """Close the client (or give back the local engine) once the store is closed."""

    def _check_schema(self, supported: int) -> None:
        """Record the schema version in a new store; refuse a store made by a newer chatmem."""
        version = self._read_meta("schema_version")
        if version is None:
            self._write_meta("schema_version", str(supported))
        elif int(version) > supported:
            raise StoreError(
                f"store schema version {version} is newer than this chatmem ({supported});"
                " upgrade chatmem"
            )

    def _has_memories(self) -> bool:
        """Whether records can exist yet: the collection is made when a model is bound."""
        if not self._memories_exist:
            self._memories_exist = self._memories_made()
        return self._memories_exist

    def _read_embedding(self) -> EmbeddingInfo | None:
        value = self._read_meta("embedding")
        return EmbeddingInfo.model_validate_json(value) if value else None

    @property
    def embedding(self) -> EmbeddingInfo | None:
        return self._embedding

    def bind_embedding(self, info: EmbeddingInfo) -> None:
        with self._lock:
            recorded = self._read_embedding()
            bound = recorded or info
            if bound == info:
                if self._memories_made():
                    self._check_dimension(info)
                else:
                    self._make_memories(info)
                if recorded is None:
                    self._write_meta("embedding", info.model_dump_json())
        if bound != info:
            raise EmbedderMismatchError(
                f"store {self.uri!r} was built with {bound.model} ({bound.dimension} dimensions);"
                f" the embedder given is {info.model} ({info.dimension} dimensions)"
            )
        self._embedding = bound

    def _next_seq(self) -> int:
        """The next history sequence number: increasing, and near the clock in nanoseconds."""
        with self._lock:
            self._last_seq = max(self._last_seq + 1, time.time_ns())
            return self._last_seq

    @contextmanager
    def _writing(self) -> Iterator[None]:
        with self._lock:
            if self._closed:
                raise StoreError("store is closed")
            yield

    def _search_vector(self, query: SearchQuery) -> Vector | None:
        """The vector a resolved query searches by (none before a model is bound), checked;
        a query must name its user."""
        query.filter.require_user()
        vector = query.vector if self._embedding is not None else None
        if vector is not None:
            self._check_vector(vector)
        return vector

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._release()
