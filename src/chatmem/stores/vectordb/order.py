"""The order a list pages in, oldest first with ties by id, and the cursor of a position.

A cursor is the (creation time in milliseconds, id) of the last record of a page, as
URL-safe base64 of its JSON: the next page starts after it.
"""

from __future__ import annotations

import base64
import json

from chatmem.errors import ValidationError
from chatmem.records import MemoryRecord
from chatmem.stores.base import cursor_ms
from chatmem.stores.vectordb.fields import ms_floor

_NOT_A_CURSOR = "is not a cursor this store issued"


def sort_key(record: MemoryRecord) -> tuple[int, str]:
    """Where a record stands in a list: its creation time in milliseconds, then its id."""
    return ms_floor(record.time.created_at), record.id


def encode_cursor(created_ms: int, memory_id: str) -> str:
    """Where the next page of a list starts: after this creation time and id."""
    raw = json.dumps([created_ms, memory_id]).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii")


def decode_cursor(cursor: str) -> tuple[int, str]:
    """The creation time and id of an ``encode_cursor`` cursor; ValidationError otherwise."""
    try:
        created_ms, memory_id = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
    except (ValueError, TypeError) as exc:
        raise ValidationError(_NOT_A_CURSOR, field="cursor") from exc
    if not isinstance(memory_id, str):
        raise ValidationError(_NOT_A_CURSOR, field="cursor")
    return cursor_ms(created_ms), memory_id
