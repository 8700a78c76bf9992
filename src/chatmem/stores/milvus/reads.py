"""The Milvus store's reads: records and vectors by id, counts, users, history, and lists.

Every read re-checks ``Filter.matches`` on what the expression selected (SPEC L7, defence in
depth). A read by id asks for the ids alone and applies the rest of the filter here, with
``Filter.matches``, the reference semantics: Milvus Lite answers an expression that is only
``id in [...]`` from its primary-key index, but any other condition beside it makes it
read every row not yet flushed, vectors included (27 ms at 500 rows, 72 ms at 2,000, against
about 1 ms by id; ``docs/benchmarks.md``), and a live ``add`` reads its session's latest turn
by id. Milvus has no ORDER BY: ``list`` (oldest first, ties by id) reads the ids and creation
times of every matching record after the cursor, sorts them here, and then reads the bodies
of one page: a page costs O(matching records), fine per user, slow for a tenant-wide listing
of millions. Reads past Milvus' 16,384-row query window go through a query iterator.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chatmem.records import Filter, HistoryEntry, MemoryRecord, Page, Vector
from chatmem.stores.milvus.expressions import any_of, filter_expression, literal, owner
from chatmem.stores.milvus.rows import HISTORY_FIELDS, MEMORY_FIELDS, history_entry, record_of
from chatmem.stores.milvus.schema import MilvusCollections
from chatmem.stores.vectordb.order import encode_cursor
from chatmem.stores.vectordb.writes import chunks


def _by_id(db: MilvusCollections, ids: Sequence[str], scope: Filter) -> dict[str, MemoryRecord]:
    found: dict[str, MemoryRecord] = {}
    for chunk in chunks(ids):
        for row in db.conn.scan(db.memories, any_of("id", chunk), MEMORY_FIELDS):
            record = record_of(row["body"])
            if scope.matches(record):  # the whole filter, ids included
                found[record.id] = record
    return found


def get(db: MilvusCollections, ids: Sequence[str], scope: Filter) -> list[MemoryRecord]:
    """The records of ``ids`` that ``scope`` matches, in the order asked."""
    found = _by_id(db, sorted(set(ids)), scope)
    return [found[i] for i in ids if i in found]


def vectors(db: MilvusCollections, ids: Sequence[str], scope: Filter) -> dict[str, Vector]:
    """The stored embeddings of the memories of ``ids`` that ``scope`` matches."""
    found: dict[str, Vector] = {}
    for chunk in chunks(sorted(set(ids))):
        for row in db.conn.scan(db.memories, any_of("id", chunk), ["id", "body", "embedding"]):
            if scope.matches(record_of(row["body"])):  # the whole filter, ids included
                found[str(row["id"])] = np.asarray(row["embedding"], dtype=np.float32)
    return found


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
