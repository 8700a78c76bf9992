"""The Milvus store's reads: records and vectors by id, counts, users, history, and lists.

Every read re-checks ``Filter.matches`` on what the expression selected (SPEC L7, defence in
depth); a read by id asks for the ids alone (``read_expression``: what Milvus Lite answers
from its key index) and the check applies the rest of the filter. Milvus has no ORDER BY:
``list`` (oldest first, ties by id) reads the ids and creation times of every matching
record after the cursor, sorts them here, and then reads the bodies of one page: a page
costs O(matching records), fine per user, slow for a tenant-wide listing of millions. Reads
past Milvus' 16,384-row query window go through a query iterator.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from chatmem.records import Filter, HistoryEntry, MemoryRecord, Page, Vector
from chatmem.stores.milvus.expressions import filter_expression, literal, owner, read_expression
from chatmem.stores.milvus.rows import HISTORY_FIELDS, MEMORY_FIELDS, history_entry, record_of
from chatmem.stores.milvus.schema import MilvusCollections
from chatmem.stores.vectordb.order import encode_cursor
from chatmem.stores.vectordb.writes import chunks


def _rows_by_id(
    db: MilvusCollections, ids: Sequence[str], scope: Filter, fields: list[str]
) -> Iterator[tuple[dict[str, Any], MemoryRecord]]:
    """The rows of ``ids`` (with ``fields``, ``body`` among them) that ``scope`` matches,
    with their records."""
    for chunk in chunks(ids):
        narrowed = scope.model_copy(update={"ids": tuple(chunk)})
        for row in db.conn.scan(db.memories, read_expression(narrowed, expiry=db.expiry), fields):
            record = record_of(row["body"])
            if narrowed.matches(record):
                yield row, record


def _by_id(db: MilvusCollections, ids: Sequence[str], scope: Filter) -> dict[str, MemoryRecord]:
    return {record.id: record for _, record in _rows_by_id(db, ids, scope, MEMORY_FIELDS)}


def get(db: MilvusCollections, ids: Sequence[str], scope: Filter) -> list[MemoryRecord]:
    """The records of ``ids`` that ``scope`` matches, in the order asked."""
    found = _by_id(db, sorted(set(ids)), scope)
    return [found[i] for i in ids if i in found]


def vectors(db: MilvusCollections, ids: Sequence[str], scope: Filter) -> dict[str, Vector]:
    """The stored embeddings of the memories of ``ids`` that ``scope`` matches."""
    rows = _rows_by_id(db, sorted(set(ids)), scope, ["id", "body", "embedding"])
    return {record.id: np.asarray(row["embedding"], dtype=np.float32) for row, record in rows}


def count(db: MilvusCollections, scope: Filter) -> int:
    """How many memories ``scope`` matches."""
    expression = filter_expression(scope, expiry=db.expiry)
    return int(db.conn.query(db.memories, expression, ["count(*)"])[0]["count(*)"])


def users(db: MilvusCollections, tenant_id: str, after: str | None, limit: int) -> list[str]:
    """The tenant's users with memories, in order, after ``after``."""
    # Milvus has no DISTINCT: the user ids of the tenant's rows, and no other field.
    rows = db.conn.scan(db.memories, f"tenant_id == {literal(tenant_id)}", ["user_id"])
    found = {str(row["user_id"]) for row in rows}
    return sorted(u for u in found if after is None or u > after)[:limit]


def history(db: MilvusCollections, memory_id: str, scope: Filter) -> list[HistoryEntry]:
    """The changes of one memory within ``scope``'s tenant (and user), oldest first."""
    conditions = [f"memory_id == {literal(memory_id)}", *owner(scope.tenant_id, scope.user_id)]
    rows = db.conn.scan(db.history, " and ".join(conditions), HISTORY_FIELDS)
    rows.sort(key=lambda row: (int(row["seq"]), str(row["id"])))
    return [history_entry(row) for row in rows]


def page(db: MilvusCollections, scope: Filter, limit: int, after: tuple[int, str] | None) -> Page:
    """One page of a list, oldest first, ties by id, after the (creation ms, id) ``after``."""
    expression = filter_expression(scope, expiry=db.expiry)
    if after is not None:
        created, last_id = after
        expression += (
            f" and (created_at > {created} or"
            f" (created_at == {created} and id > {literal(last_id)}))"
        )
    keys = sorted(
        (int(row["created_at"]), str(row["id"]))
        for row in db.conn.scan(db.memories, expression, ["id", "created_at"])
    )
    shown = keys[:limit]
    found = _by_id(db, [memory_id for _, memory_id in shown], scope)
    records = [found[memory_id] for _, memory_id in shown if memory_id in found]
    next_cursor = encode_cursor(*shown[-1]) if len(keys) > limit else None
    return Page(records, next_cursor)
