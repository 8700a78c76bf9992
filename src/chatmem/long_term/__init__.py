"""Long-term memory over one store and one embedder: add, search, update, forget, history,
export and import (SPEC L2). ``AsyncLongTermMemory`` runs the same code in worker threads.

- ``facade``: ``LongTermMemory``, every call a user or a tenant makes;
- ``choosing``: how a search reads its way down its ranking to the k it gives;
- ``inputs``: the texts and chat messages ``add`` accepts, checked;
- ``message_records``: the memory records a message is stored as (context, parts, TTL);
- ``session_tails``: a session's earlier turns as the context of its new messages;
- ``jsonl``: export and import as JSON lines;
- ``aio``: ``AsyncLongTermMemory``.
"""

from __future__ import annotations

from chatmem.long_term.aio import AsyncLongTermMemory
from chatmem.long_term.choosing import Shortlisted
from chatmem.long_term.facade import DEFAULT_CONTEXT_WINDOW, EMBEDDING_THREADS, LongTermMemory
from chatmem.long_term.inputs import MAX_CONTEXT_CHARS, ROLES, TEXT_PART_TYPES, MessageLike
from chatmem.long_term.jsonl import EXPORT_FORMAT, UNIT_TOLERANCE, OnConflict
from chatmem.long_term.message_records import PART_KEY, PART_OF_KEY, PARTS_KEY
from chatmem.long_term.session_tails import (
    LOOKUP_PAGE,
    NEXT_TURN_REASON,
    SESSION_LOOKBACK,
    SESSION_TAILS_BYTES,
)

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "EMBEDDING_THREADS",
    "EXPORT_FORMAT",
    "LOOKUP_PAGE",
    "MAX_CONTEXT_CHARS",
    "NEXT_TURN_REASON",
    "PARTS_KEY",
    "PART_KEY",
    "PART_OF_KEY",
    "ROLES",
    "SESSION_LOOKBACK",
    "SESSION_TAILS_BYTES",
    "Shortlisted",
    "TEXT_PART_TYPES",
    "UNIT_TOLERANCE",
    "AsyncLongTermMemory",
    "LongTermMemory",
    "MessageLike",
    "OnConflict",
]
