"""The OpenAI-compatible chat proxy, ``POST /v1/chat/completions`` (SPEC A1, R1–R5, F1–F4).

One request: refuse a message longer than a session keeps (a 400 naming it, before any
memory work) → find the memory user (``memory_context.user_id``, else ``user``, else the
``X-Chatmem-User`` header) → decide, build the query, search and inject (the retrieval
pipeline, within its time budget) → forward to the upstream model, streamed or not → return
its answer as it came → then, off the request path, append the new turn to the session and
queue extraction.

Memory never turns a chat into an error: a failed or slow search sends the request on
without memory (``X-Chatmem-Memory: degraded``). The upstream's own errors are passed through
with their status and body. The headers ``X-Chatmem-Memory`` (injected, empty, skipped,
degraded, off), ``X-Chatmem-Memory-Count`` and ``X-Chatmem-Memory-Reason`` say what memory
did.

``GET /v1/models`` and ``POST /v1/embeddings`` are passed to the upstream as they are, with
the same keys as a chat, so a client pointed at chatmem finds every route it needs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator
from pydantic import ValidationError as PydanticError

from chatmem.errors import ChatmemError, ValidationError
from chatmem.messages import MAX_MESSAGE_CHARS, Message, MessageMetadata, Role, SessionKey
from chatmem.records import MemoryType
from chatmem.retrieval import Retrieval, insert_system
from chatmem.server.app import ApiError, ReaderDep, RuntimeDep, error_response
from chatmem.server.auth import Reader
from chatmem.server.runtime import Runtime

logger = logging.getLogger("chatmem.server.chat")

router = APIRouter(tags=["chat"])

USER_HEADER = "X-Chatmem-User"
SESSION_HEADER = "X-Chatmem-Session"
DEFAULT_SESSION = "default"
#: Request headers passed on to the upstream (the rest are chatmem's or hop-by-hop).
_FORWARDED = ("openai-organization", "openai-project", "openai-beta")

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


_CONTENT_SCHEMA = {
    "anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "object"}},
        {"type": "null"},
    ]
}


class ChatMessageIn(BaseModel):
    """One message of a chat request; its other fields (tool calls, name…) pass through."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Annotated[Any, WithJsonSchema(_CONTENT_SCHEMA)] = None

    @field_validator("content")
    @classmethod
    def _text_or_parts(cls, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, list) and all(isinstance(part, dict) for part in value):
            return value
        raise ValueError("must be a string or a list of content parts")


class ChatRequest(BaseModel):
    """An OpenAI chat completion request; fields chatmem does not read pass through."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[ChatMessageIn] = Field(min_length=1)
    stream: bool = False
    user: str | None = Field(default=None, max_length=256)
    memory_context: MemoryContext | None = None
    memory_config: MemoryOptions | None = None


@dataclass
class Prepared:
    """What memory did for one request, and what to send upstream."""

    messages: list[dict[str, Any]]
    outcome: str  # injected, empty, skipped, degraded, off
    reason: str = ""
    memories: list[dict[str, Any]] = field(default_factory=list)
    key: SessionKey | None = None
    #: ``memory_context.project_id``: retrieval is narrowed to it, and the turn carries it
    #: (in its messages' metadata) so the facts extracted from it are stored in it.
    project_id: str | None = None
    store: bool = False
    extract: bool = False
    memory_ms: float = 0.0

    def headers(self) -> dict[str, str]:
        headers = {
            "X-Chatmem-Memory": self.outcome,
            "X-Chatmem-Memory-Count": str(len(self.memories)),
        }
        if self.reason:
            headers["X-Chatmem-Memory-Reason"] = _header_safe(self.reason)
        return headers

    def summary(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "reason": self.reason or None, "memories": self.memories}


@asynccontextmanager
async def upstream_client(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    """One pooled client per app for the upstream model."""
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    timeout = httpx.Timeout(runtime.config.upstream.timeout_s, connect=10.0)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        yield client


def memory_user(
    context: MemoryContext | None, user: str | None, request: Request
) -> tuple[str | None, str]:
    """The memory user and session of a request (user None: memory is off for it)."""
    header_user = request.headers.get(USER_HEADER) or None
    user_id = context.user_id if context else (user or header_user)
    session = (context.session_id if context else None) or request.headers.get(SESSION_HEADER)
    for name, value in (("user", user_id), ("session", session)):
        if value is not None and len(value) > 256:
            raise ApiError(
                400,
                f"the memory {name} id is longer than 256 characters",
                param=name,
                code="validation_error",
            )
    return user_id, session or DEFAULT_SESSION


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
        return prepared
    if isinstance(found, str):
        prepared.outcome, prepared.reason = "degraded", found
        return prepared
    prepared.memory_ms = (time.perf_counter() - began) * 1000
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
    runtime.metrics.memory_requests.labels(prepared.outcome).inc()
    return prepared


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


def check_length(text: str, field: str) -> str:
    """``text``, or a 400 naming ``field`` when it is longer than a session keeps a message.
    Called before any memory work: a search through a 5 MB text costs seconds."""
    if len(text) > MAX_MESSAGE_CHARS:
        raise ApiError(
            400,
            f"{field}: has {len(text)} characters; a message holds at most "
            f"{MAX_MESSAGE_CHARS} characters",
            param=field,
            code="validation_error",
        )
    return text


def check_lengths(messages: Sequence[Mapping[str, Any]]) -> None:
    """Refuse a request with a message longer than a session keeps, naming it."""
    for index, message in enumerate(messages):
        check_length(text_of(message.get("content")), f"messages[{index}].content")


def new_turn(messages: Sequence[Mapping[str, Any]], project_id: str | None = None) -> list[Message]:
    """The messages a request adds to its session: the user turn (and the results of tools
    the assistant called) after the last assistant message (clients resend the whole
    history; the session keeps each turn once), marked with ``project_id`` when the request
    names one."""
    metadata = _project_metadata(project_id)
    start = 0
    for index, message in enumerate(messages):
        if message.get("role") == "assistant":
            start = index + 1
    turn = []
    for message in messages[start:]:
        role = message.get("role")
        text = text_of(message.get("content"))
        if role == "user" and text.strip():
            turn.append(Message(role=Role.USER, content=text, metadata=metadata))
        elif role == "tool" and isinstance(message.get("tool_call_id"), str):
            try:
                turn.append(
                    Message(
                        role=Role.TOOL,
                        content=text,
                        tool_call_id=message["tool_call_id"],
                        name=message.get("name") if isinstance(message.get("name"), str) else None,
                        metadata=metadata,
                    )
                )
            except ValidationError as exc:  # boundary: the upstream judges it; not kept here
                logger.info("Memory: a tool result is not kept in the session: %s", exc)
    return turn


def _project_metadata(project_id: str | None) -> MessageMetadata:
    return MessageMetadata.model_validate({"project_id": project_id} if project_id else {})


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping)
            and part.get("type") in ("text", "input_text", "output_text")
        ]
        return "\n".join(p for p in parts if p)
    return ""


def turn_messages(
    prepared: Prepared,
    turn: list[Message],
    answer: str | None,
    tool_calls: list[dict[str, Any]] | None = None,
) -> list[Message]:
    """The request's new messages and the answer (its text, or the tools it calls)."""
    said = list(turn)
    metadata = _project_metadata(prepared.project_id)
    if tool_calls:
        try:
            said.append(
                Message.model_validate(
                    {
                        "role": "assistant",
                        "content": answer or "",
                        "tool_calls": tool_calls,
                        "metadata": metadata,
                    }
                )
            )
        except PydanticError as exc:  # boundary: a malformed call is passed on, not kept
            logger.info("Memory: the answer's tool calls are not kept: %s", exc)
    elif answer:
        try:
            said.append(Message(role=Role.ASSISTANT, content=answer, metadata=metadata))
        except ValidationError as exc:  # boundary: the answer is sent; a session keeps less
            logger.warning("Memory: the answer is not kept in the session: %s", exc)
    return said


def _guarded(what: str, key: SessionKey, work: Callable[[], object]) -> Callable[[], None]:
    """``work``, with its failures logged and never raised: the answer is already on its
    way (F4), and a bug here must not kill the service's background tasks."""

    def run() -> None:
        try:
            work()
        except ChatmemError as exc:  # boundary: see above
            logger.warning("Memory: %s of %s failed: %s", what, key.session_id, exc)
        except Exception:  # boundary: see above
            logger.exception("Memory: %s failed unexpectedly", what)

    return run


async def store_turn(
    runtime: Runtime,
    prepared: Prepared,
    turn: list[Message],
    answer: str | None,
    tool_calls: list[dict[str, Any]] | None = None,
) -> None:
    """Append the turn and its answer to the session, after the turns of the session
    answered before it, and return once they are in the log (durable: a crash after this
    loses nothing, ``Runtime.recover`` queues it). Queueing extraction goes on after, off
    the request; a stop waits for both (``AfterAnswer.drain``)."""
    key = prepared.key
    if not prepared.store or key is None:
        return
    said = turn_messages(prepared, turn, answer, tool_calls)
    if not said:
        return
    appended = runtime.after_answer.run(
        key,
        _guarded("storing the turn", key, lambda: runtime.short_term.append(key, said)),
        _guarded(
            "queueing extraction",
            key,
            lambda: runtime.observe(key, said, extract=prepared.extract),
        ),
    )
    await asyncio.shield(appended)


def upstream_headers(runtime: Runtime, request: Request) -> dict[str, str]:
    config = runtime.config.upstream
    headers = {name: request.headers[name] for name in _FORWARDED if name in request.headers}
    key = os.environ.get(config.api_key_env) if config.api_key_env else None
    if key:
        headers["Authorization"] = f"Bearer {key}"
    elif config.pass_authorization and "authorization" in request.headers:
        headers["Authorization"] = request.headers["authorization"]
    return headers


def upstream_url(runtime: Runtime, path: str) -> str:
    base = runtime.config.upstream.base_url
    if base is None:
        raise ApiError(
            503,
            "no upstream model is configured: start chatmem serve with --upstream URL (or "
            "--scripted-upstream, a stand-in that needs no model), or set upstream.base_url",
            code="no_upstream",
            retry=False,
        )
    return f"{base}{path}"


def passthrough(response: httpx.Response, extra: Mapping[str, str]) -> Response:
    """The upstream's answer as it came: status, body and content type."""
    media = response.headers.get("content-type", "application/json")
    return Response(
        response.content, status_code=response.status_code, media_type=media, headers=dict(extra)
    )


def unreachable(exc: httpx.HTTPError, extra: Mapping[str, str]) -> Response:
    status = 504 if isinstance(exc, httpx.TimeoutException) else 502
    logger.warning("upstream %s: %s", "timed out" if status == 504 else "unreachable", exc)
    response = error_response(
        status,
        f"upstream model unreachable: {type(exc).__name__}: {exc}",
        code="upstream_unreachable",
    )
    response.headers.update(extra)
    return response


@router.post(
    "/v1/chat/completions",
    responses={
        200: {
            "description": "The upstream's completion (JSON, or server-sent events "
            "when stream is true), passed through."
        },
        502: {"description": "The upstream could not be reached."},
    },
)
async def chat_completions(
    body: Annotated[ChatRequest, Body()],
    request: Request,
    runtime: RuntimeDep,
    reader: ReaderDep,
) -> Response:
    """An OpenAI chat completion, with the user's memories injected and the turn stored."""
    messages = [m.model_dump(exclude_unset=True) for m in body.messages]
    check_lengths(messages)
    url = upstream_url(runtime, "/chat/completions")
    user_id, session_id = memory_user(body.memory_context, body.user, request)
    project_id = body.memory_context.project_id if body.memory_context else None
    prepared = await prepare(
        runtime, reader, user_id, session_id, messages, body.memory_config, project_id
    )
    payload = body.model_dump(exclude_unset=True, exclude={"memory_context", "memory_config"})
    payload["messages"] = prepared.messages
    turn = new_turn(messages, project_id) if prepared.store else []
    client: httpx.AsyncClient = request.app.state.upstream
    headers = upstream_headers(runtime, request)
    if body.stream:
        return await _stream(client, url, payload, headers, runtime, prepared, turn)
    try:
        answer = await client.post(url, json=payload, headers=headers)
    except httpx.HTTPError as exc:
        return unreachable(exc, prepared.headers())
    if answer.status_code != 200:
        return passthrough(answer, prepared.headers())
    try:
        data = answer.json()
    except ValueError:
        return passthrough(answer, prepared.headers())
    # Not a BackgroundTask: uvicorn holds the connection's next request until those end.
    await store_turn(runtime, prepared, turn, _answer_text(data), _answer_tool_calls(data))
    return JSONResponse(data, headers=prepared.headers())


async def _stream(
    client: httpx.AsyncClient,
    url: str,
    payload: dict[str, Any],
    headers: dict[str, str],
    runtime: Runtime,
    prepared: Prepared,
    turn: list[Message],
) -> Response:
    request = client.build_request("POST", url, json=payload, headers=headers)
    try:
        upstream = await client.send(request, stream=True)
    except httpx.HTTPError as exc:
        return unreachable(exc, prepared.headers())
    if upstream.status_code != 200:
        await upstream.aread()
        await upstream.aclose()
        return passthrough(upstream, prepared.headers())

    async def relay() -> AsyncIterator[bytes]:
        pieces: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        stored = False

        async def store() -> None:
            nonlocal stored
            if not stored and (pieces or calls):
                stored = True
                made = [calls[i] for i in sorted(calls)] or None
                await store_turn(runtime, prepared, turn, "".join(pieces), made)

        try:
            async for line in upstream.aiter_lines():
                if _collect(line, pieces, calls):
                    await store()  # before [DONE] reaches a client that may hang up on it
                yield (line + "\n").encode()
        except httpx.HTTPError as exc:
            logger.warning("upstream stream broke off: %s", exc)
        finally:
            # A stream the upstream ended without [DONE] is kept as far as it went; one the
            # client left is kept only if the upstream had finished it (stored above).
            if not stored and upstream.is_stream_consumed:
                await store()
            await upstream.aclose()

    media = upstream.headers.get("content-type", "text/event-stream")
    return StreamingResponse(relay(), media_type=media, headers=prepared.headers())


class EmbeddingRequest(BaseModel):
    """An OpenAI embeddings request, passed to the upstream as it is."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    #: A text, texts, or token arrays (one or several).
    input: str | list[str] | list[int] | list[list[int]]


async def _forward(
    request: Request, runtime: Runtime, method: str, path: str, body: Any = None
) -> Response:
    """The upstream's answer to the same request, as it came."""
    url = upstream_url(runtime, path)
    client: httpx.AsyncClient = request.app.state.upstream
    headers = upstream_headers(runtime, request)
    try:
        answer = await client.request(method, url, json=body, headers=headers)
    except httpx.HTTPError as exc:
        return unreachable(exc, {})
    return passthrough(answer, {})


_PASSED: dict[int | str, dict[str, Any]] = {
    200: {"description": "The upstream's answer, passed through."},
    502: {"description": "The upstream could not be reached."},
}


@router.get("/v1/models", responses=_PASSED)
async def list_models(request: Request, runtime: RuntimeDep, _: ReaderDep) -> Response:
    """The upstream's models, as it lists them."""
    return await _forward(request, runtime, "GET", "/models")


@router.post("/v1/embeddings", responses=_PASSED)
async def create_embeddings(
    body: Annotated[EmbeddingRequest, Body()], request: Request, runtime: RuntimeDep, _: ReaderDep
) -> Response:
    """Embeddings from the upstream, as it makes them (memory plays no part)."""
    return await _forward(request, runtime, "POST", "/embeddings", body.model_dump())


def _collect(line: str, pieces: list[str], calls: dict[int, dict[str, Any]] | None = None) -> bool:
    """Gather a streamed answer's text (and, given ``calls``, its tool calls by index, their
    arguments joined from the pieces); True at ``[DONE]``."""
    if not line.startswith("data:"):
        return False
    data = line[5:].strip()
    if data == "[DONE]":
        return True
    try:
        chunk = json.loads(data)
    except ValueError:
        return False
    for choice in chunk.get("choices") or []:
        if isinstance(choice, Mapping) and choice.get("index", 0) == 0:
            delta = choice.get("delta") or {}
            if isinstance(delta, Mapping) and isinstance(delta.get("content"), str):
                pieces.append(delta["content"])
            if calls is not None and isinstance(delta, Mapping):
                _collect_calls(delta.get("tool_calls"), calls)
    return False


def _collect_calls(deltas: Any, calls: dict[int, dict[str, Any]]) -> None:
    for piece in deltas if isinstance(deltas, list) else []:
        if not isinstance(piece, Mapping) or not isinstance(piece.get("index"), int):
            continue
        call = calls.setdefault(
            piece["index"],
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        for field_name in ("id", "type"):
            if isinstance(piece.get(field_name), str):
                call[field_name] = piece[field_name]
        function = piece.get("function")
        if isinstance(function, Mapping):
            if isinstance(function.get("name"), str):
                call["function"]["name"] += function["name"]
            if isinstance(function.get("arguments"), str):
                call["function"]["arguments"] += function["arguments"]


def _answer_tool_calls(data: Any) -> list[dict[str, Any]] | None:
    try:
        calls = data["choices"][0]["message"].get("tool_calls")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return calls if isinstance(calls, list) and calls else None


def _answer_text(data: Any) -> str | None:
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


def _header_safe(text: str) -> str:
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in text)[:200]


__all__ = [
    "ChatRequest",
    "EmbeddingRequest",
    "MemoryContext",
    "MemoryOptions",
    "Prepared",
    "check_length",
    "check_lengths",
    "memory_user",
    "new_turn",
    "prepare",
    "turn_messages",
    "router",
    "store_turn",
    "system_text_name",
    "upstream_client",
]
