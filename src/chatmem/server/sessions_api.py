"""Short-term memory over HTTP, ``/v1/sessions`` (SPEC S1, S2, S5, A5).

Append messages to a session (OpenAI, Vercel or rich shape), read its whole history back
with its running summary and window, list a user's sessions, end a session (its episodic
summary is kept for the next session, and the ``session_end`` webhook is sent), and set the
session's injected system memory at runtime: the chat proxy puts it in front of the next
request. Sessions live in the caller's tenant; memory off (F1) leaves them working.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from fastapi import APIRouter, BackgroundTasks, Body, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from chatmem.client.models import EndedSession, SessionInfo, SessionView
from chatmem.errors import NotFoundError
from chatmem.formats import Format, parse_messages, render_message, render_messages
from chatmem.messages import SessionKey
from chatmem.records import from_ms
from chatmem.server.deps import ReaderDep, RuntimeDep, TenantDep
from chatmem.server.errors import ApiError
from chatmem.server.injection import system_text_name
from chatmem.server.runtime import Runtime
from chatmem.server.visibility import may_see_all, visible_session

logger = logging.getLogger("chatmem.server.sessions")

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])

#: Longest runtime system memory of a session, in characters.
MAX_SYSTEM_CHARS = 32_000

Id = Annotated[str, Field(min_length=1, max_length=256)]
SessionId = Annotated[str, Path(min_length=1, max_length=256)]
UserQuery = Annotated[str, Query(min_length=1, max_length=256)]
FormatQuery = Annotated[Literal["openai", "vercel", "rich"], Query()]


class AppendMessages(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: Id
    messages: list[dict[str, Any]] = Field(min_length=1, max_length=1000)
    format: Literal["openai", "vercel", "rich"] = "openai"


class SystemMemory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: Id
    content: str = Field(min_length=1, max_length=MAX_SYSTEM_CHARS)


class Appended(BaseModel):
    session_id: str
    #: The session's length after the append, in messages.
    length: int


class SessionList(BaseModel):
    sessions: list[SessionInfo]


class SystemMemoryView(BaseModel):
    session_id: str
    content: str


class Removed(BaseModel):
    deleted: bool


def _key(tenant_id: str, user_id: str, session_id: str) -> SessionKey:
    return SessionKey.of(tenant_id, user_id, session_id)


def _existing(runtime: Runtime, key: SessionKey) -> int:
    length = runtime.short_term.store.length(key)
    if length == 0:
        raise NotFoundError(key.session_id, what="session")
    return length


@router.post("/{session_id}/messages", status_code=201)
def append_messages(
    session_id: SessionId,
    body: AppendMessages,
    runtime: RuntimeDep,
    tenant_id: TenantDep,
    tasks: BackgroundTasks,
) -> Appended:
    """Append messages (all or none); extraction is queued after the response."""
    key = _key(tenant_id, body.user_id, session_id)
    format: Format = body.format
    parsed = parse_messages(body.messages, format)
    length = runtime.short_term.append(key, parsed)
    tasks.add_task(runtime.observe, key, parsed)
    return Appended(session_id=session_id, length=length)


@router.get("")
def list_sessions(runtime: RuntimeDep, tenant_id: TenantDep, user_id: UserQuery) -> SessionList:
    """A user's sessions, most recently updated first."""
    infos = runtime.short_term.store.sessions(tenant_id, user_id)
    return SessionList(sessions=[SessionInfo(**info._asdict()) for info in infos])


@router.get("/{session_id}")
def read_session(
    session_id: SessionId,
    runtime: RuntimeDep,
    reader: ReaderDep,
    user_id: UserQuery,
    format: FormatQuery = "rich",
) -> SessionView:
    """The whole history, oldest first, with the summary and window start. An answer built
    on memories restricted to roles the key lacks is shown with its content withheld, and
    so is a summary of it (SPEC L7)."""
    key = _key(reader.tenant_id, user_id, session_id)
    _existing(runtime, key)
    history = runtime.short_term.history(key)
    window = runtime.short_term.window(key)
    state = runtime.short_term.store.state(key)
    shown = visible_session(reader.roles, history, window, state)
    return SessionView(
        session_id=session_id,
        messages=render_messages(shown.messages, format),
        summary=render_message(shown.summary, format) if shown.summary else None,
        window_start=window.start,
        working_state=shown.working_state,
        episode=render_message(shown.episode, format) if shown.episode else None,
        ended_at=from_ms(state.ended_at) if state.ended_at is not None else None,
    )


class EndSession(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: Id


@router.post("/{session_id}/end")
def end_session(
    session_id: SessionId,
    runtime: RuntimeDep,
    reader: ReaderDep,
    body: Annotated[EndSession | None, Body()] = None,
    user_id: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
) -> EndedSession:
    """End the session: keep its episodic summary for the next one, queue its extraction,
    and send the ``session.ended`` webhook (queued; a slow receiver never delays this).
    The user is named in the body (``{"user_id": …}``, as for an append) or the query.
    The summary is null when it stands for an answer the key may not read (SPEC L7)."""
    named = {body.user_id if body else None, user_id} - {None}
    if len(named) != 1:
        why = "is required, in the body or the query" if not named else "differs in body and query"
        raise ApiError(400, f"user_id: {why}", param="user_id", code="validation_error")
    key = _key(reader.tenant_id, str(named.pop()), session_id)
    length = _existing(runtime, key)
    episode = runtime.end_session(key)
    summary = None
    if episode is not None and may_see_all(reader.roles, runtime.short_term.history(key)):
        summary = episode.content
    return EndedSession(session_id=session_id, length=length, summary=summary)


@router.delete("/{session_id}")
def delete_session(
    session_id: SessionId, runtime: RuntimeDep, tenant_id: TenantDep, user_id: UserQuery
) -> Removed:
    """Forget a session: its messages, its state and its runtime system memory."""
    key = _key(tenant_id, user_id, session_id)
    existed = runtime.short_term.store.length(key) > 0
    runtime.short_term.clear(key)
    had_system = runtime.short_term.store.delete_text(tenant_id, system_text_name(key))
    if not (existed or had_system):
        raise NotFoundError(session_id, what="session")
    return Removed(deleted=True)


@router.put("/{session_id}/system")
def put_system_memory(
    session_id: SessionId, body: SystemMemory, runtime: RuntimeDep, tenant_id: TenantDep
) -> SystemMemoryView:
    """Set the session's injected system memory (A5); the next chat request carries it."""
    key = _key(tenant_id, body.user_id, session_id)
    runtime.short_term.store.put_text(tenant_id, system_text_name(key), body.content)
    return SystemMemoryView(session_id=session_id, content=body.content)


@router.get("/{session_id}/system")
def get_system_memory(
    session_id: SessionId, runtime: RuntimeDep, tenant_id: TenantDep, user_id: UserQuery
) -> SystemMemoryView:
    """The session's injected system memory."""
    key = _key(tenant_id, user_id, session_id)
    content = runtime.short_term.store.get_text(tenant_id, system_text_name(key))
    if content is None:
        raise NotFoundError(session_id, what="system memory of session")
    return SystemMemoryView(session_id=session_id, content=content)


@router.delete("/{session_id}/system")
def delete_system_memory(
    session_id: SessionId, runtime: RuntimeDep, tenant_id: TenantDep, user_id: UserQuery
) -> Removed:
    """Stop injecting the session's system memory."""
    key = _key(tenant_id, user_id, session_id)
    if not runtime.short_term.store.delete_text(tenant_id, system_text_name(key)):
        raise NotFoundError(session_id, what="system memory of session")
    return Removed(deleted=True)


__all__ = ["router"]
