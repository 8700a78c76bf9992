"""Each operation of the client as a request to build and an answer to read: no I/O here, so
``Client`` and ``AsyncClient`` share every route, body and parser and differ only in how
they send.

A ``Call`` says how safe it is to send again (``Safety``), which the retry loop obeys
(``call``). The operations are grouped by route: ``memory`` (``MemoryCalls``),
``sessions`` (``SessionCalls``) and ``admin`` (``AdminCalls``).
"""

from chatmem.client.calls.admin import AdminCalls
from chatmem.client.calls.call import (
    ADMIN,
    EXPORT_PATH,
    IMPORT_PATH,
    MAX_PAGE,
    MEMORY,
    SESSIONS,
    TENANT_HEADER,
    Call,
    Safety,
)
from chatmem.client.calls.memory import LIST_FIELDS, MemoryCalls
from chatmem.client.calls.sessions import SessionCalls, SessionFormat
from chatmem.client.chunks import CHUNK_BYTES, Chunker, jsonl_chunks

__all__ = [
    "ADMIN",
    "CHUNK_BYTES",
    "EXPORT_PATH",
    "IMPORT_PATH",
    "LIST_FIELDS",
    "MAX_PAGE",
    "MEMORY",
    "SESSIONS",
    "TENANT_HEADER",
    "AdminCalls",
    "Call",
    "Chunker",
    "MemoryCalls",
    "Safety",
    "SessionCalls",
    "SessionFormat",
    "jsonl_chunks",
]
