"""Records as the Milvus store's rows, and back: memory rows, history rows, stored values.

VARCHAR holds at most 65,535 bytes: a record whose JSON is larger is stored zlib-compressed;
one that is still too large is refused (ValidationError). The keyword text is analysed here
(``vectordb.keywords``) and cut at that size: Milvus has one BM25 field, so the fields of
``text.index_fields`` are not weighted apart as SQLite's columns are. Milvus has no NULL: in a
history row "" stands for "no record" and for "no reason"; a reason is stored as a JSON
string, so that an empty reason round-trips too.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from chatmem import text as textlib
from chatmem.errors import ValidationError
from chatmem.records import HistoryEntry, HistoryEvent, MemoryRecord, from_ms, new_id
from chatmem.stores.milvus.schema import DUMMY_VECTOR, MAX_TERMS, MAX_VARCHAR_BYTES
from chatmem.stores.vectordb.fields import expires_ms, history_fields, memory_fields
from chatmem.stores.vectordb.keywords import KeywordAnalyzer

ANALYSIS = KeywordAnalyzer("Milvus", "milvus")
#: Fields of a memory row read back as a record, and of a history row.
MEMORY_FIELDS = ["id", "body"]
HISTORY_FIELDS = ["id", "seq", "memory_id", "version", "event", "old", "new", "reason", "at"]
_COMPRESSED = "z:"


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _pack(document: str, field: str) -> str:
    """``document`` as it fits a VARCHAR: as is, or compressed."""
    if utf8_size(document) <= MAX_VARCHAR_BYTES:
        return document
    compressed = zlib.compress(document.encode("utf-8", "surrogatepass"), 9)
    packed = _COMPRESSED + base64.b64encode(compressed).decode("ascii")
    if len(packed) > MAX_VARCHAR_BYTES:
        raise ValidationError(
            f"is too large for the Milvus store ({utf8_size(document)} bytes of JSON)",
            field=field,
        )
    return packed


def _unpack(stored: str) -> str:
    if stored.startswith(_COMPRESSED):
        return zlib.decompress(base64.b64decode(stored[len(_COMPRESSED) :])).decode(
            "utf-8", "surrogatepass"
        )
    return stored


def record_of(stored: str) -> MemoryRecord:
    """The record a row's ``body`` (or a history row's ``old``, ``new``) holds."""
    return MemoryRecord.stored(_unpack(stored))


def _truncate_utf8(text: str, limit: int) -> str:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


def keyword_document(record: MemoryRecord) -> str:
    """The terms of ``text.index_fields(record)``, as the BM25 function indexes them.

    Milvus has one BM25 field, so the fields are not weighted apart as SQLite's columns are.
    """
    stems = ANALYSIS.document_stems("\n".join(textlib.index_fields(record)))
    return _truncate_utf8(" ".join(stems), MAX_VARCHAR_BYTES)


def keyword_query(text: str) -> str:
    """The terms of a keyword query, analysed like a record's; "" when it has none."""
    return " ".join(dict.fromkeys(ANALYSIS.query_stems(text)))


def memory_row(
    record: MemoryRecord,
    vector: Sequence[float],
    *,
    expiry: bool,
    collection: str,
    keywords: bool = True,
) -> dict[str, Any]:
    """A record's row in ``collection``; ``expiry``: the collection has ``expires_at``,
    ``keywords``: it has the BM25 ``text``."""
    document = record.model_dump_json()
    row = memory_fields(record, document)
    if len(row["meta_terms"]) > MAX_TERMS:
        raise ValidationError(
            f"has more keys than the Milvus store can index ({MAX_TERMS // 2})",
            field="user_metadata",
        )
    row["body"] = _pack(document, "record")
    if keywords:
        row["text"] = keyword_document(record)
    row["embedding"] = [float(x) for x in vector]
    if expiry:
        row["expires_at"] = expires_ms(record)
    elif record.time.expires_at is not None:
        raise ValidationError(
            f"collection {collection!r} predates TTLs; export and import the"
            " memories into a new collection to set one",
            field="time.expires_at",
        )
    return row


def history_row(
    event: HistoryEvent,
    old: MemoryRecord | None,
    new: MemoryRecord | None,
    reason: str | None,
    at: datetime,
    seq: int,
) -> dict[str, Any]:
    """One history row: the record before and after a change, and why."""
    subject = new or old
    assert subject is not None
    stored_reason = json.dumps(reason, ensure_ascii=False) if reason is not None else ""
    if utf8_size(stored_reason) > MAX_VARCHAR_BYTES:
        raise ValidationError(f"is longer than {MAX_VARCHAR_BYTES} bytes", field="reason")
    return {
        "id": new_id(),
        **history_fields(event, subject, seq, at),
        "old": _pack(old.model_dump_json(), "record") if old else "",
        "new": _pack(new.model_dump_json(), "record") if new else "",
        "reason": stored_reason,
        "vec": DUMMY_VECTOR,
    }


def history_entry(row: dict[str, Any]) -> HistoryEntry:
    """A history row as an entry."""
    return HistoryEntry(
        memory_id=str(row["memory_id"]),
        version=int(row["version"]),
        event=HistoryEvent(row["event"]),
        old=record_of(row["old"]) if row["old"] else None,
        new=record_of(row["new"]) if row["new"] else None,
        reason=json.loads(row["reason"]) if row["reason"] else None,
        at=from_ms(int(row["at"])),
    )
