"""What the Qdrant store writes and asks, as pure functions: filters, points, keyword vectors.

The terms that make ``Filter.metadata`` and ``Filter.reader_roles`` exact (Python's equality,
SPEC L7's roles) are the Milvus store's (``vectordb.fields``): one canonical ``key=value`` term
per scalar, a mark and one term per role, all in one keyword array (``meta_terms``).

Keyword vectors. A memory's keyword half is a sparse vector of BM25 term weights. Its words
are analysed as the Milvus store's are (``vectordb.keywords``: ``chatmem.text``'s words, stop
words dropped, Porter stems), in the four fields of ``text.index_fields`` weighted as the
SQLite store weighs them (text 1.0, previous turn 0.5, next turn 0.3, day 1.0). Each term's
weight is BM25's saturated, length-normalised frequency
``tf (k1 + 1) / (tf + k1 (1 - b + b dl / AVG_DOC_TERMS))`` with a fixed average length; the
collection's sparse vector has Qdrant's IDF modifier, so Qdrant multiplies each matched term
by its inverse document frequency at query time. A query is a vector of 1.0 per distinct
term, so a hit's score is its BM25 score. A term's index is the first 32 bits of its BLAKE2b
hash: two terms that share one count as one (among V distinct terms about V² / 2³³ pairs do:
one pair at 90,000 terms).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
from qdrant_client.http import models

from chatmem import text as textlib
from chatmem.records import Filter, HistoryEntry, HistoryEvent, MemoryRecord, from_ms, utcnow
from chatmem.stores.vectordb.fields import (
    RESTRICTED_TERM,
    ROLE_TERM,
    expires_ms,
    history_fields,
    memory_fields,
    ms_ceil,
    ms_floor,
    user_key,
    value_term,
)
from chatmem.stores.vectordb.keywords import STEMMER as STEMMER
from chatmem.stores.vectordb.keywords import KeywordAnalyzer
from chatmem.stores.vectordb.order import decode_cursor as decode_cursor
from chatmem.stores.vectordb.order import encode_cursor as encode_cursor

#: Memory ids are free text; Qdrant's point ids are UUIDs. A memory's point id is the UUID5
#: of its id in this namespace, and the payload keeps the id itself.
ID_NAMESPACE = uuid.UUID("5c7e0f4e-2b1a-5d3c-9f60-6368617463d0")
#: The memories collection's vectors: the embedding, and the keyword weights.
DENSE, SPARSE = "dense", "keywords"
#: BM25's parameters, and the document length (in weighted terms) taken as average.
BM25_K1 = 1.2
BM25_B = 0.75
AVG_DOC_TERMS = 32.0
#: Weights of ``text.index_fields``' fields: text, previous turn, next turn, day.
FIELD_WEIGHTS = (1.0, 0.5, 0.3, 1.0)
ANALYSIS = KeywordAnalyzer("Qdrant", "qdrant")
#: The snowballstemmer module; a ConfigError naming the ``qdrant`` extra when it is missing.
load_stemmer = ANALYSIS.load_stemmer

#: A condition no memory meets (ids are never empty).
NOTHING = models.FieldCondition(key="id", match=models.MatchValue(value=""))


def point_id(memory_id: str) -> str:
    """The Qdrant point id of a memory."""
    return str(uuid.uuid5(ID_NAMESPACE, memory_id))


# -- filters ----------------------------------------------------------------------------------


def _equals(key: str, value: str) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def _any_of(key: str, values: Sequence[str]) -> models.Condition:
    if not values:
        return NOTHING
    return models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))


def _range(key: str, **bounds: int) -> models.FieldCondition:
    # Stored times are whole milliseconds within years 1 to 9999, exact as floats.
    return models.FieldCondition(key=key, range=models.Range(**bounds))


def _metadata_condition(key: str, value: Any) -> models.Condition:
    term = value_term(key, value)
    if term is None:  # a value no scalar equals (NaN)
        return NOTHING
    has_term = _equals("meta_terms", term)
    if value is None:  # Python: a missing key equals None too.
        return models.Filter(
            should=[has_term, models.Filter(must_not=[_equals("meta_terms", key)])]
        )
    return has_term


def _readable(roles: frozenset[str]) -> models.Filter:
    """Memories a reader holding ``roles`` may see (SPEC L7)."""
    options: list[models.Condition] = [
        models.Filter(must_not=[_equals("meta_terms", RESTRICTED_TERM)])
    ]
    if roles:
        options.append(_any_of("meta_terms", [ROLE_TERM + role for role in sorted(roles)]))
    return models.Filter(should=options)


def filter_for(scope: Filter) -> models.Filter:
    """A Qdrant filter equivalent to ``scope.matches``."""
    must: list[models.Condition] = [_equals("tenant_id", scope.tenant_id)]
    if scope.user_id is not None:
        must.insert(0, _equals("user_key", user_key(scope.tenant_id, scope.user_id)))
    for field in ("agent_id", "project_id", "session_id"):
        value = getattr(scope, field)
        if value is not None:
            must.append(_equals(field, value))
    if scope.ids is not None:
        ids = sorted(set(scope.ids))
        must.append(models.HasIdCondition(has_id=[point_id(i) for i in ids]) if ids else NOTHING)
    if scope.types is not None:
        must.append(_any_of("type", sorted(t.value for t in scope.types)))
    if scope.scopes is not None:
        must.append(_any_of("scope", sorted(s.value for s in scope.scopes)))
    if scope.created_after is not None:
        must.append(_range("created_at", gte=ms_ceil(scope.created_after)))
    if scope.created_before is not None:
        must.append(_range("created_at", lt=ms_ceil(scope.created_before)))
    if scope.valid_at is not None:
        moment = ms_floor(scope.valid_at)
        must += [_range("valid_from", lte=moment), _range("valid_to", gt=moment)]
    if scope.known_at is not None:
        moment = ms_floor(scope.known_at)
        must += [_range("created_at", lte=moment), _range("valid_to", gt=moment)]
    for key, value in (scope.metadata or {}).items():
        must.append(_metadata_condition(key, value))
    if scope.reader_roles is not None:
        must.append(_readable(scope.reader_roles))
    if scope.expired is not None:
        must.append(_expiry(scope.expired))
    return models.Filter(must=must)


def _expiry(expired: bool) -> models.Condition:
    """Memories whose TTL has (or has not) run out now; stored times are whole milliseconds."""
    now = ms_floor(utcnow())
    if expired:
        return _range("expires_at", lte=now)
    # A point written before TTLs existed has no expires_at: it never expires.
    unset = models.IsEmptyCondition(is_empty=models.PayloadField(key="expires_at"))
    return models.Filter(should=[_range("expires_at", gt=now), unset])


def narrowed(base: models.Filter, *conditions: models.Condition) -> models.Filter:
    """``base`` and every one of ``conditions``."""
    return models.Filter(must=[base, *conditions])


def created_at(*, equal: int | None = None, at_least: int | None = None) -> models.Condition:
    """A condition on the creation time in milliseconds."""
    if equal is not None:
        return _range("created_at", gte=equal, lte=equal)
    assert at_least is not None
    return _range("created_at", gte=at_least)


def history_filter(memory_id: str, scope: Filter) -> models.Filter:
    """The history rows of one memory within ``scope``'s tenant (and user)."""
    must: list[models.Condition] = [
        _equals("memory_id", memory_id),
        _equals("tenant_id", scope.tenant_id),
    ]
    if scope.user_id is not None:
        must.insert(0, _equals("user_key", user_key(scope.tenant_id, scope.user_id)))
    return models.Filter(must=must)


# -- payloads ---------------------------------------------------------------------------------


def memory_payload(record: MemoryRecord) -> dict[str, Any]:
    """A memory's payload: its filterable fields, its metadata terms and the record's JSON."""
    document = record.model_dump_json()
    payload = memory_fields(record, document)
    payload["expires_at"] = expires_ms(record)
    payload["body"] = document
    return payload


def record_of(payload: dict[str, Any] | None, key: str = "body") -> MemoryRecord:
    """The record a payload holds under ``key``."""
    assert payload is not None
    return MemoryRecord.stored(payload[key])


def memory_point(record: MemoryRecord, vector: Sequence[float]) -> models.PointStruct:
    """A memory's point: its embedding, its keyword weights (when it has words), its payload."""
    vectors: dict[str, Any] = {DENSE: [float(x) for x in vector]}
    if (keywords := keyword_vector(record)) is not None:
        vectors[SPARSE] = keywords
    return models.PointStruct(
        id=point_id(record.id), vector=vectors, payload=memory_payload(record)
    )


def dense_of(point: models.Record) -> list[float]:
    """A point's embedding as read back (empty when it was not asked for)."""
    vector = point.vector.get(DENSE) if isinstance(point.vector, dict) else None
    if not isinstance(vector, list):
        return []
    values: list[float] = np.asarray(vector, dtype=np.float64).tolist()
    return values


def history_point(
    event: HistoryEvent,
    old: MemoryRecord | None,
    new: MemoryRecord | None,
    reason: str | None,
    at: datetime,
    seq: int,
) -> models.PointStruct:
    """One history row (a point without vectors): the record before and after a change."""
    subject = new or old
    assert subject is not None
    payload = {
        **history_fields(event, subject, seq, at),
        "old": old.model_dump_json() if old else None,
        "new": new.model_dump_json() if new else None,
        "reason": reason,
    }
    return models.PointStruct(id=str(uuid.uuid4()), vector={}, payload=payload)


def history_entries(points: Sequence[models.Record]) -> list[HistoryEntry]:
    """History points as entries, oldest first."""
    ordered = sorted(points, key=lambda point: (int((point.payload or {})["seq"]), str(point.id)))
    entries = []
    for point in ordered:
        row = point.payload or {}
        entries.append(
            HistoryEntry(
                memory_id=str(row["memory_id"]),
                version=int(row["version"]),
                event=HistoryEvent(row["event"]),
                old=record_of(row, "old") if row["old"] is not None else None,
                new=record_of(row, "new") if row["new"] is not None else None,
                reason=row["reason"],
                at=from_ms(int(row["at"])),
            )
        )
    return entries


# -- keyword vectors --------------------------------------------------------------------------


def term_index(term: str) -> int:
    """A term's index in the sparse vectors (32 bits of its hash)."""
    return int.from_bytes(hashlib.blake2b(term.encode(), digest_size=4).digest(), "big")


def _sparse(weights: dict[int, float]) -> models.SparseVector:
    indices = sorted(weights)
    return models.SparseVector(indices=indices, values=[weights[i] for i in indices])


def keyword_vector(record: MemoryRecord) -> models.SparseVector | None:
    """BM25 term weights of ``record``'s indexed text; None when it has no content word."""
    frequency: dict[int, float] = {}
    length = 0.0
    for text, weight in zip(textlib.index_fields(record), FIELD_WEIGHTS, strict=True):
        stems = ANALYSIS.document_stems(text)
        for stem in stems:
            index = term_index(stem)
            frequency[index] = frequency.get(index, 0.0) + weight
        length += weight * len(stems)
    if not frequency:
        return None
    norm = BM25_K1 * (1 - BM25_B + BM25_B * length / AVG_DOC_TERMS)
    return _sparse({i: tf * (BM25_K1 + 1) / (tf + norm) for i, tf in frequency.items()})


def keyword_query(text: str) -> models.SparseVector | None:
    """A query's distinct content terms, 1.0 each; None when it has none (stop words only)."""
    stems = ANALYSIS.query_stems(text)
    if not stems:
        return None
    return _sparse(dict.fromkeys((term_index(stem) for stem in stems), 1.0))


# -- collections ------------------------------------------------------------------------------

#: HNSW on a server: per-user graphs of this degree (``payload_m``), none across users.
HNSW_PAYLOAD_M = 16
HNSW_EF_CONSTRUCT = 200
#: Payload indexes on a server, by collection kind: keyword fields, then integer fields.
_KEYWORD_INDEXED = {
    "memories": (
        *("tenant_id", "id", "agent_id", "project_id", "session_id", "type", "scope"),
        "meta_terms",
    ),
    "history": ("tenant_id", "memory_id"),
}
_INTEGER_INDEXED = {
    "memories": ("created_at", "valid_from", "valid_to", "expires_at"),
    "history": (),
}


def memories_config(dimension: int, remote: bool) -> dict[str, Any]:
    """``create_collection``'s arguments for the memories of ``dimension``-sized vectors."""
    config: dict[str, Any] = {
        "vectors_config": {
            DENSE: models.VectorParams(size=dimension, distance=models.Distance.COSINE)
        },
        "sparse_vectors_config": {SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
    }
    if remote:  # every search names a user: one graph per user, none across them
        config["hnsw_config"] = models.HnswConfigDiff(
            m=0, payload_m=HNSW_PAYLOAD_M, ef_construct=HNSW_EF_CONSTRUCT
        )
    return config


def payload_indexes(kind: str) -> list[tuple[str, models.PayloadSchemaParams]]:
    """The payload indexes a server gets for a collection of ``kind`` (memories, history):
    ``user_key`` first, as the tenant index, then every field a filter or an order tests."""
    tenant = models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)
    indexes: list[tuple[str, models.PayloadSchemaParams]] = [("user_key", tenant)]
    keyword = models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD)
    integer = models.IntegerIndexParams(
        type=models.IntegerIndexType.INTEGER, lookup=True, range=True
    )
    indexes += [(field, keyword) for field in _KEYWORD_INDEXED[kind]]
    indexes += [(field, integer) for field in _INTEGER_INDEXED[kind]]
    return indexes
