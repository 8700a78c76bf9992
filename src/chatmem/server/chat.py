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

This module holds the requests' shapes and the routes; the steps live beside it, shared with
the Responses API: ``injection`` (whose memory, retrieve and inject), ``turns`` (what a
request adds to its session) and ``upstream`` (the model requests are forwarded to).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from chatmem.messages import Message
from chatmem.server.deps import ReaderDep, RuntimeDep
from chatmem.server.injection import (
    DEFAULT_SESSION,
    SESSION_HEADER,
    USER_HEADER,
    MemoryContext,
    MemoryOptions,
    Prepared,
    memory_user,
    prepare,
    system_text_name,
)
from chatmem.server.runtime import Runtime
from chatmem.server.turns import check_length, check_lengths, new_turn, store_turn, turn_messages
from chatmem.server.upstream import (
    collect_line,
    forward,
    passthrough,
    unreachable,
    upstream_client,
    upstream_headers,
    upstream_url,
)

logger = logging.getLogger("chatmem.server.chat")

router = APIRouter(tags=["chat"])


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
                if collect_line(line, pieces, calls):
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


_PASSED: dict[int | str, dict[str, Any]] = {
    200: {"description": "The upstream's answer, passed through."},
    502: {"description": "The upstream could not be reached."},
}


@router.get("/v1/models", responses=_PASSED)
async def list_models(request: Request, runtime: RuntimeDep, _: ReaderDep) -> Response:
    """The upstream's models, as it lists them."""
    return await forward(request, runtime, "GET", "/models")


@router.post("/v1/embeddings", responses=_PASSED)
async def create_embeddings(
    body: Annotated[EmbeddingRequest, Body()], request: Request, runtime: RuntimeDep, _: ReaderDep
) -> Response:
    """Embeddings from the upstream, as it makes them (memory plays no part)."""
    return await forward(request, runtime, "POST", "/embeddings", body.model_dump())


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


# The names of chatmem.server.injection, turns and upstream that this module named before
# they moved there (chatmem.mcp.http takes USER_HEADER from here).
__all__ = [
    "DEFAULT_SESSION",
    "SESSION_HEADER",
    "USER_HEADER",
    "ChatMessageIn",
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
    "router",
    "store_turn",
    "system_text_name",
    "turn_messages",
    "upstream_client",
]
