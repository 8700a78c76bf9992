"""Memory for one proxied request (SPEC R1–R5, F2, F4): whose memory it is, the retrieval
pipeline run for it, and what memory did (``Prepared``, sent back as the ``X-Chatmem-Memory``
headers).

The memory user is ``memory_context.user_id``, else ``user``, else the ``X-Chatmem-User``
header; the session is ``memory_context.session_id``, else the ``X-Chatmem-Session`` header.
``prepare`` never raises for memory's sake: a failed or slow search sends the request on
without memory (``degraded``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field

from chatmem.errors import ChatmemError
from chatmem.messages import SessionKey
from chatmem.records import MemoryType
from chatmem.retrieval import Retrieval, insert_system
from chatmem.server.auth import Reader
from chatmem.server.deps import header_text
from chatmem.server.errors import ApiError
from chatmem.server.runtime import Runtime
from chatmem.server.visibility import Acl, acl_of

logger = logging.getLogger("chatmem.server.chat")

USER_HEADER = "X-Chatmem-User"
#: ``X-Chatmem-Memory-Reason`` of a search run while others waited for a search thread.
LIGHT_REASON = "under load: a light search (no late rerank, the query embedded once)"
SESSION_HEADER = "X-Chatmem-Session"
DEFAULT_SESSION = "default"

Id = Annotated[str, Field(min_length=1, max_length=256)]


class MemoryContext(BaseModel):
    """Whose memory a request reads and feeds (the design's ``memory_context``)."""

    model_config = ConfigDict(extra="forbid")

    user_id: Id
    project_id: Id | None = None
    session_id: Id | None = None


class MemoryOptions(BaseModel):
    """Per-request memory settings (the design's ``memory_config``); unset fields take the
    service's config."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    memory_types: list[MemoryType] | None = Field(default=None, min_length=1)
    retrieval_limit: int | None = Field(default=None, ge=1, le=100)
    similarity_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    auto_store: bool | None = None


@dataclass
class Prepared:
    """What memory did for one request, and what to send upstream."""

    messages: list[dict[str, Any]]
    outcome: str  # injected, empty, skipped, degraded, off
    reason: str = ""
    memories: list[dict[str, Any]] = field(default_factory=list)
    #: What a reader must hold to see what is built on ``memories`` (and, for a response,
    #: on the chain it continues): ``chatmem.server.visibility``.
    memory_acl: Acl = field(default_factory=list)
    key: SessionKey | None = None
    #: ``memory_context.project_id``: retrieval is narrowed to it, and the turn carries it
    #: (in its messages' metadata) so the facts extracted from it are stored in it.
    project_id: str | None = None
    store: bool = False
    extract: bool = False
    memory_ms: float = 0.0
    #: What became of the turn, once stored (``X-Chatmem-Turn``): ``stored`` (in the
    #: session store: durable, shared by replicas), ``memory-only`` (the configured session
    #: store was unreachable at start; kept in this process, lost when it stops) or
    #: ``not-stored`` (the store refused it; logged). None: the turn is not kept.
    turn: str | None = None

    def headers(self) -> dict[str, str]:
        headers = {
            "X-Chatmem-Memory": self.outcome,
            "X-Chatmem-Memory-Count": str(len(self.memories)),
        }
        if self.reason:
            headers["X-Chatmem-Memory-Reason"] = _header_safe(self.reason)
        if self.turn is not None:
            headers["X-Chatmem-Turn"] = self.turn
        return headers

    def summary(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "reason": self.reason or None, "memories": self.memories}


def memory_user(
    context: MemoryContext | None, user: str | None, request: Request
) -> tuple[str | None, str]:
    """The memory user and session of a request (user None: memory is off for it)."""
    header_user = header_text(request, USER_HEADER) or None
    user_id = context.user_id if context else (user or header_user)
    session = (context.session_id if context else None) or header_text(request, SESSION_HEADER)
    check_memory_ids(user_id, session)
    return user_id, session or DEFAULT_SESSION


def check_memory_ids(user_id: str | None, session_id: str | None) -> None:
    """A 400 for a memory user or session id longer than a session key holds."""
    for name, value in (("user", user_id), ("session", session_id)):
        if value is not None and len(value) > 256:
            raise ApiError(
                400,
                f"the memory {name} id is longer than 256 characters",
                param=name,
                code="validation_error",
            )


async def prepare(
    runtime: Runtime,
    reader: Reader,
    user_id: str | None,
    session_id: str,
    messages: list[dict[str, Any]],
    options: MemoryOptions | None,
    project_id: str | None = None,
) -> Prepared:
    """Retrieve and inject for one request of ``reader`` (its tenant; only memories its
    roles open), within ``project_id``'s memories when given; never raises for memory's
    sake (F2, F4)."""
    options = options or MemoryOptions()
    auto_store = (
        runtime.config.memory.auto_store if options.auto_store is None else options.auto_store
    )
    if user_id is None:
        return Prepared(messages, "off", "no memory user (memory_context, user or X-Chatmem-User)")
    key = SessionKey(reader.tenant_id, user_id, session_id)
    if not options.enabled:
        return Prepared(messages, "off", "memory_config.enabled is false")
    prepared = Prepared(
        messages, "off", key=key, project_id=project_id, store=True, extract=auto_store
    )
    began = time.perf_counter()
    # One trip to a worker thread for both the session's system memory and the search.
    sent, found = await asyncio.to_thread(
        _recall, runtime, key, messages, options, project_id, reader.roles
    )
    prepared.messages = sent
    if found is None:
        prepared.reason = runtime.memory_error or "memory is off"
        runtime.metrics.memory_requests.labels("off").inc()
    elif isinstance(found, str):
        prepared.outcome, prepared.reason = "degraded", found
    else:
        prepared.memory_ms = (time.perf_counter() - began) * 1000
        _record(runtime, prepared, found, user_id)
    return prepared


def _record(runtime: Runtime, prepared: Prepared, found: Retrieval, user_id: str) -> None:
    """Note in ``prepared`` (and in the metrics) what retrieval found and injected."""
    runtime.metrics.memory_seconds.observe(prepared.memory_ms / 1000)
    prepared.memories = [
        {
            "id": m.record.id,
            "content": m.record.text,
            "type": m.record.type.value,
            "score": round(m.score, 4),
            "current": m.current,
        }
        for m in found.results
    ]
    prepared.memory_acl = acl_of(m.record.access_control.allowed_roles for m in found.results)
    if found.degraded is not None:
        prepared.outcome, prepared.reason = "degraded", found.degraded
    elif not found.decision.search:
        prepared.outcome, prepared.reason = "skipped", found.decision.reason
        runtime.metrics.memory_skips.labels(found.decision.reason.split(":")[0]).inc()
    elif found.results:
        prepared.outcome = "injected"
        runtime.metrics.memory_hits.inc(len(found.results))
        logger.info("Memory: injected %d memories for user %s", len(found.results), user_id)
    else:
        prepared.outcome, prepared.reason = "empty", "no memory above the threshold"
    if found.light and found.degraded is None:
        prepared.reason = "; ".join(filter(None, [prepared.reason, LIGHT_REASON]))
        runtime.metrics.memory_light.inc()
    runtime.metrics.memory_requests.labels(prepared.outcome).inc()


def _recall(
    runtime: Runtime,
    key: SessionKey,
    messages: list[dict[str, Any]],
    options: MemoryOptions,
    project_id: str | None,
    roles: frozenset[str] | None,
) -> tuple[list[dict[str, Any]], Retrieval | str | None]:
    """The messages with the session's system memory, and what retrieval made of them (None:
    memory is off; a string: why retrieval refused the request)."""
    system = _system_memory(runtime, key)
    sent = insert_system(messages, system) if system else messages
    retriever = runtime.retriever
    if retriever is None:
        return sent, None
    try:
        found = retriever.retrieve(
            sent,
            user_id=key.user_id,
            tenant_id=key.tenant_id,
            types=options.memory_types,
            k=options.retrieval_limit,
            threshold=options.similarity_threshold,
            project_id=project_id,
            roles=roles,
        )
    except ChatmemError as exc:  # boundary: bad ids or options; memory is left out (F4)
        logger.warning("Memory: retrieval refused, going on without memory: %s", exc)
        return sent, str(exc)
    return found.injected_messages, found


def _system_memory(runtime: Runtime, key: SessionKey) -> str | None:
    try:
        return runtime.short_term.store.get_text(key.tenant_id, system_text_name(key))
    except ChatmemError as exc:  # boundary: a session store error leaves it out (F4)
        logger.warning("Memory: the session's system memory is unreadable: %s", exc)
        return None


def system_text_name(key: SessionKey) -> str:
    """Where a session's runtime system memory (A5) is kept in the session store."""
    return f"system/{json.dumps([key.user_id, key.session_id])}"


def _header_safe(text: str) -> str:
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in text)[:200]


__all__ = [
    "DEFAULT_SESSION",
    "SESSION_HEADER",
    "USER_HEADER",
    "MemoryContext",
    "MemoryOptions",
    "Prepared",
    "check_memory_ids",
    "memory_user",
    "prepare",
    "system_text_name",
]
