"""The Qdrant store (SPEC B2): a Qdrant server, or qdrant-client's local mode in a directory.

``QdrantStore("http://host:6333")`` connects to a server; any other target is a directory for
local mode: qdrant-client's own implementation of Qdrant's API, in Python, in this process
(exact search, no payload indexes; see ``qdrant_connect``).

Layout (``<prefix>`` defaults to ``chatmem``):

- ``<prefix>_memories``: one point per record (its id the UUID5 of the memory id), made when an
  embedding model is bound. ``dense`` is the embedding (COSINE; Qdrant stores it normalised,
  so ``vectors`` returns unit vectors); ``keywords`` holds BM25 term weights under Qdrant's IDF
  modifier (``qdrant_filters``). The payload holds the filterable fields (``user_key`` is
  tenant + ``\\x1f`` + user), metadata and role terms (``meta_terms``) and the record's JSON.
- ``<prefix>_history``: one point (no vector) per add, update and delete, with the record
  before and after. ``<prefix>_meta``: the schema version and the bound embedding model.

On a server, ``user_key`` is a tenant index (``is_tenant``) and HNSW graphs are built per user
(``payload_m`` 16, global ``m`` 0: every search names a user); every filtered field has a
payload index. What Qdrant lacks, and what this store does instead (as the Milvus store does):

- **Transactions.** A batch is one upsert of its memories, then one of its history points; if
  a step fails, what may have been written is deleted (or the previous points restored) before
  StoreError is raised, a failed clean-up noted on the error. A bulk delete goes in chunks of
  ``ID_CHUNK``, each record's history point written first.
- **Conditional writes.** Version and duplicate-id checks read, then write, under a lock: safe
  between threads of one process, not between processes on one server.
- **ORDER BY two keys.** ``list`` scrolls ordered by ``created_at`` and reads the whole run of
  equal times at a page's ends to order ties by id: a page costs O(page + ties).
- **Per-user BM25 statistics.** IDF counts the whole collection, as in Milvus and SQLite.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from qdrant_client.http import models

from chatmem.errors import ConfigError, EmbedderMismatchError, StoreError, ValidationError
from chatmem.records import (
    Candidate,
    EmbeddingInfo,
    Entry,
    Filter,
    HistoryEntry,
    HistoryEvent,
    MemoryRecord,
    Page,
    Vector,
    check_count,
    utcnow,
)
from chatmem.stores import qdrant_filters as qf
from chatmem.stores.base import COMPLETED_SHARE, Capabilities, Change, SearchQuery, Usage
from chatmem.stores.qdrant_connect import LOCAL_ENGINES, SERVER_SCHEMES, connect, translated
from chatmem.stores.vectordb.hybrid import candidates
from chatmem.stores.vectordb.order import sort_key
from chatmem.stores.vectordb.store import VectorDBStore
from chatmem.stores.vectordb.writes import ID_CHUNK as ID_CHUNK
from chatmem.stores.vectordb.writes import Stored, changed_vector, chunks, current, undo

T = TypeVar("T")

SCHEMA_VERSION = 1
#: Points per page of a scroll.
SCAN_BATCH = 1_024
#: Search breadth on a server (HNSW ``ef``) at least this.
MIN_EF = 64
DENSE, SPARSE = qf.DENSE, qf.SPARSE
_PREFIX_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_KEYS = ["id", "created_at"]


def _ids(points: Sequence[models.PointStruct]) -> builtins.list[str]:
    return [str(point.id) for point in points]


def _scored(points: Sequence[models.ScoredPoint]) -> dict[str, float]:
    """Each point's memory id and score."""
    return {str((p.payload or {})["id"]): p.score for p in points}


class QdrantStore(VectorDBStore):
    """Memories in Qdrant (server or local mode); see the module docstring for the layout."""

    def __init__(
        self,
        target: str | Path,
        *,
        api_key: str | None = None,
        collection_prefix: str = "chatmem",
        timeout: float = 30.0,
    ) -> None:
        if not collection_prefix or not set(collection_prefix) <= _PREFIX_CHARS:
            raise ConfigError(
                f"collection prefix {collection_prefix!r} must be letters, digits, _ and -"
            )
        super().__init__()
        qf.load_stemmer()  # fail at open, not at the first write
        text = str(target)
        self.remote = text.startswith(SERVER_SCHEMES)
        self.uri = text if self.remote else str(Path(text).expanduser().absolute())
        self.capabilities = Capabilities(keyword_search=True, multi_process=self.remote)
        self._memories = f"{collection_prefix}_memories"
        self._history = f"{collection_prefix}_history"
        self._meta = f"{collection_prefix}_meta"
        self._client, self._engine_lock = connect(self.uri, api_key, timeout)
        try:
            self._embedding = self._prepare()
        except BaseException:  # boundary: close what we opened, then re-raise
            self.close()
            raise

    def _call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call qdrant-client, translating its errors into chatmem's."""
        if self._closed:
            raise StoreError("store is closed")
        with self._engine_lock, translated(self.uri, self.remote):
            return method(*args, **kwargs)

    # -- collections ---------------------------------------------------------------------

    def _prepare(self) -> EmbeddingInfo | None:
        self._ensure(self._meta, lambda: {"vectors_config": {}})
        self._ensure(self._history, lambda: {"vectors_config": {}})
        self._check_schema(SCHEMA_VERSION)
        embedding = self._read_embedding()
        if embedding is not None and self._has_memories():
            self._check_dimension(embedding)
        return embedding

    def _memories_made(self) -> bool:
        return self._call(self._client.collection_exists, self._memories)

    def _make_memories(self, info: EmbeddingInfo) -> None:
        self._ensure(self._memories, lambda: qf.memories_config(info.dimension, self.remote))

    def _ensure(self, name: str, config: Callable[[], dict[str, Any]]) -> None:
        if self._call(self._client.collection_exists, name):
            return
        try:
            self._call(self._client.create_collection, name, **config())
        except StoreError:
            if not self._call(self._client.collection_exists, name):  # not made meanwhile
                raise
            return
        if self.remote:  # local mode has no payload indexes (and warns about them)
            kind = "memories" if name == self._memories else "history"
            for field, schema in qf.payload_indexes(kind) if name != self._meta else []:
                self._call(
                    self._client.create_payload_index, name, field, field_schema=schema, wait=True
                )

    def _check_dimension(self, info: EmbeddingInfo) -> None:
        described = self._call(self._client.get_collection, self._memories)
        vectors = described.config.params.vectors
        dense = vectors.get(DENSE) if isinstance(vectors, dict) else None
        if dense is None:
            raise StoreError(f"collection {self._memories!r} has no {DENSE!r} vector")
        if dense.size != info.dimension:
            raise EmbedderMismatchError(
                f"collection {self._memories!r} holds {dense.size}-dimensional vectors;"
                f" the embedder {info.model} gives {info.dimension}"
            )

    # -- embedding binding -----------------------------------------------------------------

    def _read_meta(self, key: str) -> str | None:
        points = self._call(self._client.retrieve, self._meta, ids=[qf.point_id(key)])
        return str(points[0].payload["value"]) if points and points[0].payload else None

    def _write_meta(self, key: str, value: str) -> None:
        point = models.PointStruct(id=qf.point_id(key), vector={}, payload={"value": value})
        self._call(self._client.upsert, self._meta, [point], wait=True)

    # -- writes ----------------------------------------------------------------------------

    def _upsert(self, collection: str, points: Sequence[models.PointStruct]) -> None:
        for chunk in chunks(points):
            self._call(self._client.upsert, collection, list(chunk), wait=True)

    def _remove(self, collection: str, point_ids: Sequence[str]) -> None:
        for chunk in chunks(point_ids):
            selector = models.PointIdsList(points=list(chunk))
            self._call(self._client.delete, collection, points_selector=selector, wait=True)

    def _write(
        self,
        points: Sequence[models.PointStruct],
        history: Sequence[models.PointStruct],
        restore: Callable[[], object],
    ) -> None:
        """Write memories, then their history; on failure ``restore`` the memories, drop the
        history written, and re-raise."""
        try:
            self._upsert(self._memories, points)
            self._upsert(self._history, history)
        except StoreError as exc:
            undo(exc, restore)
            undo(exc, lambda: self._remove(self._history, [str(h.id) for h in history]))
            raise

    def put(self, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        self._check_batch(entries)
        now = utcnow()
        with self._writing():
            points = [qf.memory_point(record, vector.tolist()) for record, vector in entries]
            history = [
                qf.history_point(HistoryEvent.ADD, None, r, None, now, self._next_seq())
                for r, _ in entries
            ]
            taken = self._stored([entry.record.id for entry in entries], vectors=False)
            if taken:
                raise ValidationError(f"memory {next(iter(taken))!r} already exists", field="id")
            self._write(points, history, lambda: self._remove(self._memories, _ids(points)))

    def update(self, changes: Sequence[Change]) -> None:
        if not changes:
            return
        for change in changes:
            if change.vector is not None:
                self._check_vector(change.vector)
        now = utcnow()
        with self._writing():
            originals = self._stored([change.record.id for change in changes])
            state = dict(originals)
            points: dict[str, models.PointStruct] = {}
            history = []
            for change in changes:
                found = current(state, change)
                vector = changed_vector(change, found)
                points[change.record.id] = qf.memory_point(change.record, vector)
                history.append(
                    qf.history_point(
                        HistoryEvent.UPDATE,
                        *(found.record, change.record, change.reason, now, self._next_seq()),
                    )
                )
                state[change.record.id] = Stored(change.record, vector)
            restore = [qf.memory_point(s.record, s.vector) for s in originals.values()]
            self._write(
                list(points.values()), history, lambda: self._upsert(self._memories, restore)
            )

    def touch(self, uses: Sequence[Usage], scope: Filter) -> builtins.list[str]:
        user = scope.require_user()
        if not uses:
            return []
        with self._writing():
            if not self._has_memories():
                return []
            owned = [
                stored.record
                for stored in self._stored([use.id for use in uses], vectors=False).values()
                if (stored.record.tenant_id, stored.record.user_id) == (scope.tenant_id, user)
            ]
            changed = Usage.written(owned, uses)
            if not changed:
                return []
            try:
                self._set_bodies(changed.values())
            except StoreError as exc:
                undo(exc, lambda: self._set_bodies(owned))
                raise
        return builtins.list(changed)

    def _set_bodies(self, records: Iterable[MemoryRecord]) -> None:
        """Rewrite the stored JSON of records whose indexed fields are unchanged: one request."""
        operations = [
            models.SetPayloadOperation(
                set_payload=models.SetPayload(
                    payload={"body": record.model_dump_json()}, points=[qf.point_id(record.id)]
                )
            )
            for record in records
        ]
        self._call(self._client.batch_update_points, self._memories, operations, wait=True)

    def delete(self, scope: Filter, reason: str | None = None) -> list[str]:
        with self._writing():
            if not self._has_memories():
                return []
            records = sorted(
                (r for r in self._scan_records(qf.filter_for(scope)) if scope.matches(r)),
                key=sort_key,
            )
            now = utcnow()
            for chunk in chunks(records):
                self._delete_chunk(chunk, reason, now)
        return [record.id for record in records]

    def _delete_chunk(
        self, records: Sequence[MemoryRecord], reason: str | None, at: datetime
    ) -> None:
        history = [
            qf.history_point(HistoryEvent.DELETE, r, None, reason, at, self._next_seq())
            for r in records
        ]
        self._upsert(self._history, history)
        try:
            self._remove(self._memories, [qf.point_id(record.id) for record in records])
        except StoreError as exc:
            undo(exc, lambda: self._remove(self._history, _ids(history)))
            raise

    # -- reads -----------------------------------------------------------------------------

    def _stored(self, ids: Sequence[str], *, vectors: bool = True) -> dict[str, Stored]:
        """The stored memories of these ids, whoever owns them."""
        found: dict[str, Stored] = {}
        for chunk in chunks(sorted(set(ids))):
            points = self._call(
                self._client.retrieve,
                self._memories,
                ids=[qf.point_id(i) for i in chunk],
                with_payload=["body"],
                with_vectors=[DENSE] if vectors else False,
            )
            for point in points:
                record = qf.record_of(point.payload)
                found[record.id] = Stored(record, qf.dense_of(point))
        return {i: found[i] for i in ids if i in found}

    def _scroll(
        self,
        collection: str,
        where: models.Filter,
        fields: builtins.list[str] | bool,
        **extra: Any,
    ) -> Iterator[models.Record]:
        """Every point matching ``where``, page by page."""
        offset: Any = None
        while True:
            points, offset = self._call(
                self._client.scroll,
                collection,
                scroll_filter=where,
                limit=SCAN_BATCH,
                offset=offset,
                with_payload=fields,
                **extra,
            )
            yield from points
            if offset is None:
                return

    def _scan_records(self, where: models.Filter) -> Iterator[MemoryRecord]:
        for point in self._scroll(self._memories, where, ["body"]):
            yield qf.record_of(point.payload)

    def get(self, ids: Sequence[str], scope: Filter) -> list[MemoryRecord]:
        if not ids or not self._has_memories():
            return []
        found: dict[str, MemoryRecord] = {}
        for chunk in chunks(sorted(set(ids))):
            narrowed = scope.model_copy(update={"ids": tuple(chunk)})
            # Defence in depth (SPEC L7): the filter already selects exactly these.
            matching = self._scan_records(qf.filter_for(narrowed))
            found.update((r.id, r) for r in matching if narrowed.matches(r))
        return [found[i] for i in ids if i in found]

    def vectors(self, ids: Sequence[str], scope: Filter) -> dict[str, Vector]:
        if not ids or not self._has_memories():
            return {}
        found: dict[str, Vector] = {}
        for chunk in chunks(sorted(set(ids))):
            narrowed = scope.model_copy(update={"ids": tuple(chunk)})
            where = qf.filter_for(narrowed)
            for point in self._scroll(self._memories, where, ["body"], with_vectors=[DENSE]):
                record = qf.record_of(point.payload)
                if narrowed.matches(record):
                    found[record.id] = np.asarray(qf.dense_of(point), dtype=np.float32)
        return found

    def count(self, scope: Filter) -> int:
        if not self._has_memories():
            return 0
        where = qf.filter_for(scope)
        result = self._call(self._client.count, self._memories, count_filter=where, exact=True)
        return int(result.count)

    def history(self, memory_id: str, scope: Filter) -> list[HistoryEntry]:
        where = qf.history_filter(memory_id, scope)
        return qf.history_entries(list(self._scroll(self._history, where, True)))

    # -- search ----------------------------------------------------------------------------

    def search(self, query: SearchQuery) -> builtins.list[Candidate]:
        query = query.with_vector()
        vector = self._search_vector(query)
        if query.candidates < 1 or not self._has_memories():
            return []
        where = qf.filter_for(query.filter)
        keywords = qf.keyword_query(query.text) if query.text else None
        requests = []
        if vector is not None:
            dense = [float(x) for x in vector]
            requests.append(self._request(where, dense, DENSE, query.candidates))
        if keywords is not None:
            requests.append(self._request(where, keywords, SPARSE, query.candidates))
        if not requests:
            return []
        answers = self._call(self._client.query_batch_points, self._memories, requests=requests)
        scores = [_scored(a.points) for a in answers]
        cosine = scores[0] if vector is not None else {}
        keyword = scores[-1] if keywords is not None else {}
        if keywords is not None and keyword and cosine.keys() - keyword.keys():
            keyword.update(self._keywords_past_the_cut(query, keywords, cosine, keyword))
        return candidates(cosine, keyword, vector, self._cosines)

    def _keywords_past_the_cut(
        self,
        query: SearchQuery,
        keywords: models.SparseVector,
        cosine: dict[str, float],
        keyword: dict[str, float],
    ) -> dict[str, float]:
        """The keyword scores of the vector half's finds that the keyword half left out, at
        least ``COMPLETED_SHARE`` of the best (as the SQL stores give them)."""
        missing = sorted(cosine.keys() - keyword.keys())
        narrowed = query.filter.model_copy(update={"ids": tuple(missing)})
        request = self._request(qf.filter_for(narrowed), keywords, SPARSE, len(missing))
        (answer,) = self._call(self._client.query_batch_points, self._memories, requests=[request])
        floor = COMPLETED_SHARE * max(keyword.values())
        return {i: score for i, score in _scored(answer.points).items() if score >= floor}

    def _request(self, where: models.Filter, data: Any, using: str, limit: int) -> Any:
        # Local mode is always exact (and warns about search parameters).
        exact = not self.remote or using == SPARSE
        params = None if exact else models.SearchParams(hnsw_ef=max(limit, MIN_EF))
        return models.QueryRequest(
            query=data, using=using, filter=where, limit=limit, with_payload=["id"], params=params
        )

    def _cosines(self, ids: Sequence[str], vector: Vector) -> dict[str, float]:
        """Cosine similarities of stored memories (kept normalised) to ``vector``."""
        norm = float(np.linalg.norm(vector))
        return {
            memory_id: float(np.asarray(stored.vector, dtype=np.float32) @ vector) / norm
            if norm
            else 0.0
            for memory_id, stored in self._stored(ids).items()
        }

    # -- list ------------------------------------------------------------------------------

    def _keys(self, where: models.Filter) -> builtins.list[tuple[int, str]]:
        points = self._scroll(self._memories, where, _KEYS)
        return sorted(
            (int(p.payload["created_at"]), str(p.payload["id"])) for p in points if p.payload
        )

    def _page_keys(
        self, where: models.Filter, want: int, after: tuple[int, str] | None
    ) -> builtins.list[tuple[int, str]]:
        """The first ``want`` (creation ms, id) keys after ``after``, in order."""
        keys: builtins.list[tuple[int, str]] = []
        start = None
        if after is not None:
            created, last_id = after
            ties = self._keys(qf.narrowed(where, qf.created_at(equal=created)))
            keys = [key for key in ties if key[1] > last_id]
            start = created + 1
        if len(keys) >= want:
            return keys
        bounded = where if start is None else qf.narrowed(where, qf.created_at(at_least=start))
        ordered, _ = self._call(
            self._client.scroll,
            self._memories,
            scroll_filter=bounded,
            limit=want - len(keys),
            order_by=models.OrderBy(key="created_at"),
            with_payload=_KEYS,
        )
        if not ordered:
            return keys
        last = int((ordered[-1].payload or {})["created_at"])
        # Points of the last time may continue past this scroll, in any id order: read them all.
        head = [(int(p.payload["created_at"]), str(p.payload["id"])) for p in ordered if p.payload]
        tail = self._keys(qf.narrowed(where, qf.created_at(equal=last)))
        return keys + sorted(key for key in head if key[0] < last) + tail

    # Defined last: inside the class body, ``list`` names this method from here on.
    def list(self, scope: Filter, limit: int = 100, cursor: str | None = None) -> Page:
        limit = check_count(limit, "limit")
        after = qf.decode_cursor(cursor) if cursor is not None else None
        if not self._has_memories():
            return Page([], None)
        keys = self._page_keys(qf.filter_for(scope), limit + 1, after)
        page = keys[:limit]
        stored = self._stored([memory_id for _, memory_id in page], vectors=False)
        records = [s.record for s in stored.values() if scope.matches(s.record)]
        next_cursor = qf.encode_cursor(*page[-1]) if len(keys) > limit else None
        return Page(records, next_cursor)

    # -- lifecycle ---------------------------------------------------------------------------

    def _release(self) -> None:
        if self.remote:
            self._client.close()
        else:
            LOCAL_ENGINES.release(self.uri)

    def __repr__(self) -> str:
        return f"QdrantStore({self.uri!r})"
