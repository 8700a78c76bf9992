"""The memory REST API, ``/v1/memory`` (SPEC A3, L2, L7).

Create, read, search, update, list, history, export and import of long-term memories, and
forgetting one memory or a whole user. Every route acts in the tenant of the caller's key
(``ReaderDep``); ids in the body or the query only narrow within it, so another tenant's ids
answer 404 exactly as ids that do not exist. A memory whose ``access_control.allowed_roles``
is not empty is visible only to keys holding one of those roles: hidden from get, list,
search, history and export, and answered 404 to update and delete.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from chatmem.errors import ValidationError
from chatmem.long_term import LongTermMemory, OnConflict
from chatmem.records import (
    MAX_TEXT_CHARS,
    HistoryEntry,
    MemoryRecord,
    MemoryType,
    SearchResult,
    utc_ms,
    utcnow,
)
from chatmem.server.auth import Reader
from chatmem.server.deps import MemoryRuntimeDep, ReaderDep
from chatmem.server.errors import ApiError

router = APIRouter(prefix="/v1/memory", tags=["memory"])

#: The media type of an export and of an import's body: one JSON record a line.
JSONL = "application/x-ndjson"
#: Largest import body accepted, in bytes.
MAX_IMPORT_BYTES = 64 * 1024 * 1024
#: The route that reads JSON lines (the request guard checks each line).
IMPORT_PATH = "/v1/memory/import"

Id = Annotated[str, Field(min_length=1, max_length=256)]
Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
Tag = Annotated[str, Field(min_length=1, max_length=64)]
Unit = Annotated[float, Field(ge=0.0, le=1.0)]
#: An ISO 8601 time (naive: UTC), refused by name when UTC cannot hold it.
UtcTime = Annotated[datetime, AfterValidator(utc_ms)]
IdQuery = Annotated[str, Query(min_length=1, max_length=256)]
OptionalIdQuery = Annotated[str | None, Query(min_length=1, max_length=256)]
MemoryId = Annotated[str, Path(min_length=1, max_length=256)]

_UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    503: {"description": "Memory is off, or its store is unavailable."}
}


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChatMessageIn(_Body):
    """A chat message to remember (each becomes an episodic memory with its neighbours as
    context)."""

    role: Literal["user", "assistant", "system", "tool"]
    content: Text | list[dict[str, Any]]
    name: Id | None = None
    id: Id | None = None
    #: Milliseconds since the epoch, or an ISO 8601 time.
    timestamp: int | str | None = None
    metadata: dict[str, Any] | None = None


class CreateMemory(_Body):
    """A text (one semantic memory unless ``type`` says otherwise) or a chat."""

    user_id: Id
    content: Text | None = None
    messages: list[ChatMessageIn] | None = Field(default=None, min_length=1, max_length=1000)
    type: MemoryType | None = None
    metadata: dict[str, Any] | None = None
    importance: Unit | None = None
    tags: list[Tag] | None = Field(default=None, max_length=64)
    agent_id: Id | None = None
    project_id: Id | None = None
    session_id: Id | None = None
    #: Only keys holding one of these roles will see the memories (empty: every key).
    allowed_roles: list[Id] | None = Field(default=None, max_length=64)
    #: The memories' TTL (ISO 8601; no zone: UTC): no read returns them after it, and the
    #: decay sweep deletes them.
    expires_at: UtcTime | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> CreateMemory:
        if (self.content is None) == (self.messages is None):
            raise ValueError("give exactly one of content and messages")
        return self


class SearchMemories(_Body):
    user_id: Id
    query: Text
    k: int = Field(default=5, ge=1, le=100)
    threshold: Unit | None = None
    types: list[MemoryType] | None = Field(default=None, min_length=1)
    project_id: Id | None = None
    include_superseded: bool = False
    #: As of this moment (ISO 8601): only what was known then, as it was then (a memory
    #: recorded later, or a fact superseded before it, is left out).
    as_of: UtcTime | None = None


class UpdateMemory(_Body):
    """New text and/or fields; ``metadata`` keys merge into the free-form metadata."""

    user_id: Id | None = None
    content: Text | None = None
    metadata: dict[str, Any] | None = None
    importance: Unit | None = None
    confidence: Unit | None = None
    tags: list[Tag] | None = Field(default=None, max_length=64)
    reason: str | None = Field(default=None, max_length=1000)
    #: A new TTL (ISO 8601); null removes the memory's TTL; absent leaves it.
    expires_at: UtcTime | None = None

    @model_validator(mode="after")
    def _something(self) -> UpdateMemory:
        changes = (self.content, self.metadata, self.importance, self.confidence, self.tags)
        if all(value is None for value in changes) and "expires_at" not in self.model_fields_set:
            raise ValueError(
                "nothing to update: give content, metadata, importance, confidence, tags"
                " or expires_at"
            )
        return self

    def ttl(self) -> datetime | Literal["never"] | None:
        """``expires_at`` as ``LongTermMemory.update`` takes it."""
        if "expires_at" not in self.model_fields_set:
            return None
        return self.expires_at or "never"


class Memories(BaseModel):
    memories: list[MemoryRecord]


class MemoryPage(BaseModel):
    """One page; follow ``next_cursor`` until it is null. A page may hold fewer than
    ``limit`` memories when some are hidden from the key by their roles."""

    memories: list[MemoryRecord]
    next_cursor: str | None


class SearchResults(BaseModel):
    results: list[SearchResult]


class History(BaseModel):
    memory_id: str
    entries: list[HistoryEntry]


class Deleted(BaseModel):
    deleted: int


class Imported(BaseModel):
    imported: int


class Counted(BaseModel):
    count: int


@dataclass(frozen=True)
class Narrow:
    """The filters a list, a count and an export share (beside the user)."""

    project_id: str | None
    session_id: str | None
    agent_id: str | None
    types: list[MemoryType] | None
    created_after: UtcTime | None
    created_before: UtcTime | None
    current: bool

    def fields(self) -> dict[str, Any]:
        return {
            "project_id": self.project_id,
            "session_id": self.session_id,
            "agent_id": self.agent_id,
            "types": frozenset(self.types) if self.types else None,
            "created_after": self.created_after,
            "created_before": self.created_before,
            "valid_at": utcnow() if self.current else None,
        }


def narrow_of(
    project_id: OptionalIdQuery = None,
    session_id: OptionalIdQuery = None,
    agent_id: OptionalIdQuery = None,
    type: Annotated[list[MemoryType] | None, Query(max_length=8)] = None,
    created_after: Annotated[UtcTime | None, Query()] = None,
    created_before: Annotated[UtcTime | None, Query()] = None,
    current: Annotated[bool, Query()] = False,
) -> Narrow:
    """``type`` may repeat; times are ISO 8601; ``current`` keeps memories valid now."""
    return Narrow(project_id, session_id, agent_id, type, created_after, created_before, current)


NarrowDep = Annotated[Narrow, Depends(narrow_of)]


def long_term_of(runtime: MemoryRuntimeDep) -> LongTermMemory:
    memory = runtime.long_term
    if memory is None:  # require_memory already answered; memory went off since
        raise ApiError(503, "memory is off", code="memory_unavailable")
    return memory


LongTermDep = Annotated[LongTermMemory, Depends(long_term_of)]


def visible_record(
    memory: LongTermMemory, reader: Reader, memory_id: str, user_id: str | None
) -> MemoryRecord:
    """The record, or NotFoundError when it is absent or hidden from ``reader``."""
    return memory.get(memory_id, tenant_id=reader.tenant_id, user_id=user_id, roles=reader.roles)


# Fixed paths come before /{memory_id}, which would otherwise take "export" as an id.


@router.get(
    "/export",
    response_class=Response,
    responses={200: {"content": {JSONL: {}}, "description": "One memory a line."}, **_UNAVAILABLE},
)
def export_memories(
    memory: LongTermDep, reader: ReaderDep, user_id: IdQuery, narrow: NarrowDep
) -> Response:
    """A user's memories as JSON lines (record and vector), for ``POST /v1/memory/import``;
    the list's filters narrow it."""
    out = io.StringIO()
    written = memory.export_jsonl(reader.filter(user_id=user_id, **narrow.fields()), out)
    disposition = f'attachment; filename="memories-{written}.jsonl"'
    return Response(out.getvalue(), media_type=JSONL, headers={"Content-Disposition": disposition})


@router.post(
    "/import",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {JSONL: {"schema": {"type": "string"}}},
            "description": "Lines written by GET /v1/memory/export.",
        }
    },
    responses={413: {"description": "The body is too large."}, **_UNAVAILABLE},
)
async def import_memories(
    request: Request,
    memory: LongTermDep,
    reader: ReaderDep,
    on_conflict: Annotated[OnConflict, Query()] = "fail",
) -> Imported:
    """Store the lines of an export, all or none, in the caller's tenant. A line whose
    record names another tenant is refused: a key never writes into another tenant.
    ``on_conflict`` says what to do with a memory whose id the user already holds: ``fail``
    (nothing is stored), ``skip`` it, or ``replace`` it (a new version; history keeps the
    old). An id that only a memory hidden from the key holds is stored under a new id, as
    one another tenant holds; a record may name only roles the key holds."""
    tenant_id = reader.tenant_id
    raw = await request.body()
    if len(raw) > MAX_IMPORT_BYTES:
        raise ApiError(413, f"an import is at most {MAX_IMPORT_BYTES} bytes", code="too_large")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"the body is not UTF-8: {exc}", code="invalid_encoding") from None
    lines = in_tenant(text.splitlines(), tenant_id)
    imported = await asyncio.to_thread(
        memory.import_jsonl, lines, on_conflict=on_conflict, roles=reader.roles
    )
    return Imported(imported=imported)


def in_tenant(lines: Sequence[str], tenant_id: str) -> list[str]:
    """``lines`` with every record placed in ``tenant_id``; ApiError 400 for a line whose
    record names another tenant. Lines that are not records are left for the importer to
    refuse, naming the line."""
    placed = []
    for number, text in enumerate(lines, 1):
        try:
            line = json.loads(text) if text.strip() else None
        except json.JSONDecodeError:
            line = None
        record = line.get("record") if isinstance(line, dict) else None
        if isinstance(record, dict):
            named = record.setdefault("tenant_id", tenant_id)
            if named != tenant_id:
                raise ApiError(
                    400,
                    f"line {number}: the record belongs to another tenant; a key imports "
                    "only into its own tenant",
                    param="record.tenant_id",
                    code="wrong_tenant",
                )
            text = json.dumps(line, separators=(",", ":"))
        placed.append(text)
    return placed


@router.post("/search", responses=_UNAVAILABLE)
def search_memories(body: SearchMemories, memory: LongTermDep, reader: ReaderDep) -> SearchResults:
    """A user's memories most relevant to ``query``, best first, with their scores."""
    scope = reader.filter(
        project_id=body.project_id,
        types=frozenset(body.types) if body.types else None,
        known_at=body.as_of,
    )
    found = memory.search(
        body.query,
        user_id=body.user_id,
        tenant_id=reader.tenant_id,
        k=body.k,
        threshold=body.threshold,
        filter=scope,
        include_superseded=body.include_superseded,
    )
    return SearchResults(results=found)


@router.post("", status_code=201, responses=_UNAVAILABLE)
def create_memory(body: CreateMemory, memory: LongTermDep, reader: ReaderDep) -> Memories:
    """Remember a text or each message of a chat, in one atomic write. ``allowed_roles``
    may name only roles the key holds (the admin's: any)."""
    reader.check_grant(body.allowed_roles)
    tenant_id = reader.tenant_id
    said: str | list[dict[str, Any]] = (
        body.content
        if body.content is not None
        else [m.model_dump(exclude_none=True) for m in body.messages or []]
    )
    options: dict[str, Any] = {
        "user_id": body.user_id,
        "tenant_id": tenant_id,
        "agent_id": body.agent_id,
        "project_id": body.project_id,
        "session_id": body.session_id,
        "metadata": body.metadata,
        "type": body.type,
        "importance": body.importance,
        "tags": body.tags,
    }
    try:
        added = memory.add(
            said,
            **options,
            allowed_roles=body.allowed_roles or None,
            expires_at=body.expires_at,
        )
        return Memories(memories=added)
    except ValidationError as exc:
        # A text is "messages[0]" to LongTermMemory.add; name the field the caller sent.
        if body.content is not None and (exc.field or "").endswith(".user_metadata"):
            raise ValidationError(exc.message, field="metadata") from None
        raise


@router.get("", responses=_UNAVAILABLE)
def list_memories(
    memory: LongTermDep,
    reader: ReaderDep,
    narrow: NarrowDep,
    user_id: OptionalIdQuery = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(min_length=1, max_length=1024)] = None,
) -> MemoryPage:
    """The tenant's memories (or one user's), oldest first, a page at a time."""
    scope = reader.filter(user_id=user_id, **narrow.fields())
    page = memory.list(scope, limit=limit, cursor=cursor)
    return MemoryPage(memories=page.records, next_cursor=page.next_cursor)


@router.get("/count", responses=_UNAVAILABLE)
def count_memories(
    memory: LongTermDep, reader: ReaderDep, narrow: NarrowDep, user_id: OptionalIdQuery = None
) -> Counted:
    """How many memories the list with the same filters would show, in one call."""
    return Counted(count=memory.count(reader.filter(user_id=user_id, **narrow.fields())))


@router.delete("", responses=_UNAVAILABLE)
def forget_user(
    runtime: MemoryRuntimeDep,
    reader: ReaderDep,
    user_id: IdQuery,
    project_id: OptionalIdQuery = None,
) -> Deleted:
    """Forget a user's memories (or one project's of them): those the key may read (the
    admin's: all). Without ``project_id`` the user's sessions and queued extraction go
    too, so nothing comes back later."""
    forgotten = runtime.forget_user(reader.tenant_id, user_id, project_id, reader.roles)
    return Deleted(deleted=forgotten)


@router.get("/{memory_id}", responses=_UNAVAILABLE)
def get_memory(
    memory_id: MemoryId,
    memory: LongTermDep,
    reader: ReaderDep,
    user_id: OptionalIdQuery = None,
) -> MemoryRecord:
    """One memory by id."""
    return visible_record(memory, reader, memory_id, user_id)


@router.patch(
    "/{memory_id}", responses={409: {"description": "A concurrent update won."}, **_UNAVAILABLE}
)
def update_memory(
    memory_id: MemoryId,
    body: UpdateMemory,
    memory: LongTermDep,
    reader: ReaderDep,
) -> MemoryRecord:
    """Change a memory's text and/or fields; its version goes up and history keeps the old."""
    visible_record(memory, reader, memory_id, body.user_id)
    return memory.update(
        memory_id,
        body.content,
        tenant_id=reader.tenant_id,
        user_id=body.user_id,
        metadata=body.metadata,
        importance=body.importance,
        confidence=body.confidence,
        tags=body.tags,
        reason=body.reason,
        expires_at=body.ttl(),
    )


@router.get("/{memory_id}/history", responses=_UNAVAILABLE)
def memory_history(
    memory_id: MemoryId,
    memory: LongTermDep,
    reader: ReaderDep,
    user_id: OptionalIdQuery = None,
) -> History:
    """Every version of a memory, oldest first, its deletion included."""
    entries = memory.history(
        memory_id, tenant_id=reader.tenant_id, user_id=user_id, roles=reader.roles
    )
    return History(memory_id=memory_id, entries=entries)


@router.delete("/{memory_id}", responses=_UNAVAILABLE)
def delete_memory(
    memory_id: MemoryId,
    memory: LongTermDep,
    reader: ReaderDep,
    user_id: OptionalIdQuery = None,
    reason: Annotated[str | None, Query(min_length=1, max_length=500)] = None,
) -> Deleted:
    """Forget one memory (its history stays, with ``reason`` when given)."""
    visible_record(memory, reader, memory_id, user_id)
    memory.delete(
        memory_id, tenant_id=reader.tenant_id, user_id=user_id, reason=reason or "deleted by API"
    )
    return Deleted(deleted=1)


__all__ = ["in_tenant", "router"]
