"""``MilvusStore``: the store interface over Milvus Lite or a Milvus server (SPEC B1).

The store opens the connection and the collections, binds the embedding model, and hands
each call to its path: ``writes``, ``reads`` or ``search``, under the store's write lock for
the writes (see the package docstring for what Milvus lacks and what the store does).
On a server without BM25 (before Milvus 2.5) the store is dense-only (``features``): its
``capabilities.keyword_search`` is False, and opening it logs a warning saying so.
"""

from __future__ import annotations

import builtins
import logging
import re
from collections.abc import Sequence
from pathlib import Path

from chatmem.errors import ConfigError, EmbedderMismatchError
from chatmem.records import (
    Candidate,
    EmbeddingInfo,
    Entry,
    Filter,
    HistoryEntry,
    MemoryRecord,
    Page,
    Vector,
    check_count,
)
from chatmem.stores.base import Capabilities, Change, SearchQuery, Usage
from chatmem.stores.milvus import reads, writes
from chatmem.stores.milvus.connection import MilvusConnection, load_pymilvus
from chatmem.stores.milvus.rows import ANALYSIS
from chatmem.stores.milvus.schema import SCHEMA_VERSION, MilvusCollections
from chatmem.stores.milvus.search import search
from chatmem.stores.vectordb.order import decode_cursor
from chatmem.stores.vectordb.store import VectorDBStore

_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,200}$")
log = logging.getLogger(__name__)


class MilvusStore(VectorDBStore):
    """Memories in Milvus (Lite or server); see the package docstring for the layout."""

    def __init__(
        self,
        uri: str | Path,
        *,
        token: str | None = None,
        db_name: str | None = None,
        collection_prefix: str = "chatmem",
        timeout: float = 30.0,
    ) -> None:
        if not _PREFIX.match(collection_prefix):
            raise ConfigError(
                f"collection prefix {collection_prefix!r} must match {_PREFIX.pattern}"
            )
        super().__init__()
        load_pymilvus()
        ANALYSIS.load_stemmer()  # fail at open, not at the first write
        self._conn = MilvusConnection(uri, token=token, db_name=db_name, timeout=timeout)
        self.uri = self._conn.uri
        self._client = self._conn.client
        try:
            self._db = MilvusCollections(self._conn, collection_prefix, self._conn.features())
            self._memories, self._history = self._db.memories, self._db.history
            self._embedding = self._prepare()
        except BaseException:  # boundary: close what we opened, then re-raise
            self.close()
            raise
        self.capabilities = Capabilities(
            keyword_search=self._db.keywords, multi_process=self._conn.lite_path is None
        )
        if not self._db.keywords:
            self._warn_dense_only()

    def _prepare(self) -> EmbeddingInfo | None:
        self._db.make_meta_and_history()
        self._check_schema(SCHEMA_VERSION)
        embedding = self._read_embedding()
        if self._db.load_memories() and embedding is not None:
            self._check_dimension(embedding)
        return embedding

    def _warn_dense_only(self) -> None:
        if self._db.features.bm25:
            why = f"collection {self._memories!r} was made on a Milvus without BM25"
        else:
            why = f"Milvus at {self.uri!r} is {self._conn.version}"
        log.warning(
            "%s: hybrid search needs Milvus 2.5+; this store searches by embedding only", why
        )

    # -- hooks of VectorDBStore ------------------------------------------------------------

    def _read_meta(self, key: str) -> str | None:
        return self._db.read_meta(key)

    def _write_meta(self, key: str, value: str) -> None:
        self._db.write_meta(key, value)

    def _memories_made(self) -> bool:
        return self._db.has(self._memories)

    def _make_memories(self, info: EmbeddingInfo) -> None:
        self._db.make_memories(info.dimension)

    def _check_dimension(self, info: EmbeddingInfo) -> None:
        dimension = self._db.vector_dimension()
        if dimension != info.dimension:
            raise EmbedderMismatchError(
                f"collection {self._memories!r} holds {dimension}-dimensional vectors;"
                f" the embedder {info.model} gives {info.dimension}"
            )

    def _release(self) -> None:
        self._conn.close()

    # -- writes ----------------------------------------------------------------------------

    def put(self, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        self._check_batch(entries)
        with self._writing():
            writes.put(self._db, entries, self._next_seq)

    def update(self, changes: Sequence[Change]) -> None:
        if not changes:
            return
        for change in changes:
            if change.vector is not None:
                self._check_vector(change.vector)
        with self._writing():
            writes.update(self._db, changes, self._next_seq)

    def touch(self, uses: Sequence[Usage], scope: Filter) -> builtins.list[str]:
        user = scope.require_user()
        if not uses:
            return []
        with self._writing():
            if not self._has_memories():
                return []
            return writes.touch(self._db, uses, scope, user)

    def delete(self, scope: Filter, reason: str | None = None) -> list[str]:
        with self._writing():
            if not self._has_memories():
                return []
            return writes.delete(self._db, scope, reason, self._next_seq)

    # -- reads -----------------------------------------------------------------------------

    def get(self, ids: Sequence[str], scope: Filter) -> list[MemoryRecord]:
        if not ids or not self._has_memories():
            return []
        return reads.get(self._db, ids, scope)

    def vectors(self, ids: Sequence[str], scope: Filter) -> dict[str, Vector]:
        if not ids or not self._has_memories():
            return {}
        return reads.vectors(self._db, ids, scope)

    def count(self, scope: Filter) -> int:
        if not self._has_memories():
            return 0
        return reads.count(self._db, scope)

    def users(
        self, tenant_id: str, *, after: str | None = None, limit: int = 1000
    ) -> builtins.list[str]:
        limit = check_count(limit, "limit")
        if not self._has_memories():
            return []
        return reads.users(self._db, tenant_id, after, limit)

    def history(self, memory_id: str, scope: Filter) -> list[HistoryEntry]:
        return reads.history(self._db, memory_id, scope)

    def search(self, query: SearchQuery) -> builtins.list[Candidate]:
        query = query.with_vector()
        vector = self._search_vector(query)
        if query.candidates < 1 or not self._has_memories():
            return []
        return search(self._db, query, vector)

    # Defined last: inside the class body, ``list`` names this method from here on.
    def list(self, scope: Filter, limit: int = 100, cursor: str | None = None) -> Page:
        limit = check_count(limit, "limit")
        after = decode_cursor(cursor) if cursor is not None else None
        if not self._has_memories():
            return Page([], None)
        return reads.page(self._db, scope, limit, after)

    def __repr__(self) -> str:
        return f"MilvusStore({self.uri!r})"
