"""The OpenAI Responses API with memory: ``POST /v1/responses``, ``GET`` and ``DELETE
/v1/responses/{id}`` (SPEC A2).

One request: read the input (a string, or a list of message items) → continue the chain of
``previous_response_id`` when given (the tenant's own responses only) → retrieve and inject
the user's memories as the chat proxy does → send the chain, the new input and the memories
to the upstream's ``/chat/completions`` → answer with a Response object → keep it for the
next link of the chain (unless ``store`` is false) → then, off the request path, append the
turn to the session and queue extraction (``memory_config.auto_store``).

The memory user is ``memory_context.user_id``, else the previous response's user, else
``user``, else the ``X-Chatmem-User`` header. The session is ``memory_context.session_id``,
else the ``X-Chatmem-Session`` header, else the chain's (the id of its first response), so
one chain is one session.

With ``stream: true`` the upstream is asked for a chat-completions stream and the answer is
sent as OpenAI's Responses events (``response.created`` … ``response.output_text.delta`` …
``response.completed``). The response is kept and the turn stored only once the upstream has
finished; a stream the upstream breaks off ends with ``response.failed`` and keeps nothing,
and so does one the client leaves before the upstream finishes.

Not supported yet: tools, and input other than text messages. Accepted and ignored, so OpenAI
clients that send them work: ``include``, ``parallel_tool_calls``, ``truncation``,
``service_tier``, ``prompt_cache_key``, ``safety_identifier`` and ``stream_options``. Any other
unknown field is a 400 naming it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, Body, Path, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from chatmem.errors import ChatmemError
from chatmem.messages import Message
from chatmem.records import new_id
from chatmem.server.app import ApiError, ReaderDep, RuntimeDep, TenantDep, error_response
from chatmem.server.auth import Reader
from chatmem.server.chat import (
    SESSION_HEADER,
    USER_HEADER,
    MemoryContext,
    MemoryOptions,
    Prepared,
    _collect,
    check_length,
    new_turn,
    passthrough,
    prepare,
    store_turn,
    unreachable,
    upstream_headers,
    upstream_url,
)
from chatmem.server.response_store import ResponseStore, StoredResponse
from chatmem.server.runtime import Runtime

logger = logging.getLogger("chatmem.server.responses")

#: OpenAI request fields accepted and ignored (they change nothing chatmem does).
IGNORED_FIELDS = (
    "include",
    "parallel_tool_calls",
    "truncation",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
    "stream_options",
)
_INPUT_ROLES = ("user", "assistant", "system", "developer")
_TEXT_PARTS = ("input_text", "output_text")

ResponseId = Annotated[str, Path(min_length=1, max_length=256)]


class ResponseRequest(BaseModel):
    """A Responses API request with chatmem's ``memory_config`` and ``memory_context``."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    input: str | list[Any]
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=256)
    memory_config: MemoryOptions | None = None
    memory_context: MemoryContext | None = None
    user: str | None = Field(default=None, min_length=1, max_length=256)
    stream: bool = False
    store: bool = True
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    max_output_tokens: int | None = Field(default=None, ge=1)
    metadata: (
        dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]] | None
    ) = Field(default=None, max_length=16)
    # Accepted and ignored (IGNORED_FIELDS).
    include: list[str] | None = None
    parallel_tool_calls: bool | None = None
    truncation: Literal["auto", "disabled"] | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    stream_options: dict[str, Any] | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _string_or_items(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, list) and value:
            return value
        raise ValueError("must be a non-empty string or a non-empty list of input items")


class OutputText(BaseModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)


class OutputMessage(BaseModel):
    type: Literal["message"] = "message"
    id: str
    status: Literal["completed", "incomplete"]
    role: Literal["assistant"] = "assistant"
    content: list[OutputText]


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class Usage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens", "content_filter"]


class MemorySummary(BaseModel):
    """What memory did for the request (chatmem's addition to the Response object)."""

    outcome: str
    reason: str | None = None
    memories: list[dict[str, Any]] = Field(default_factory=list)


class ResponseObject(BaseModel):
    """An OpenAI Response object (text output only), plus ``memory``."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    completed_at: int | None = None
    status: Literal["completed", "incomplete"]
    error: None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[OutputMessage]
    parallel_tool_calls: bool = False
    previous_response_id: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: Literal["none"] = "none"
    tools: list[Any] = Field(default_factory=list)
    truncation: Literal["disabled"] = "disabled"
    usage: Usage | None = None
    user: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    memory: MemorySummary


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response.deleted"] = "response.deleted"
    deleted: bool = True


router = APIRouter(tags=["responses"])


def store_of(request: Request) -> ResponseStore:
    """The runtime's response store (a table in service.db, or memory when that database is
    unavailable)."""
    store: ResponseStore = request.app.state.runtime.responses
    return store


def input_messages(value: str | Sequence[Any]) -> list[dict[str, Any]]:
    """The request's input as chat messages (``developer`` becomes ``system``, which every
    OpenAI-compatible server knows); a 400 naming the item that is not a text message."""
    if isinstance(value, str):
        return [{"role": "user", "content": check_length(value, "input")}]
    return [_message(item, f"input[{index}]") for index, item in enumerate(value)]


def _message(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, Mapping):
        raise _invalid(where, "must be a message item (an object with role and content)")
    kind = item.get("type", "message")
    if kind != "message":
        raise _invalid(f"{where}.type", f"only message items are supported, not {kind!r}")
    role = item.get("role")
    if role not in _INPUT_ROLES:
        raise _invalid(f"{where}.role", f"must be one of {list(_INPUT_ROLES)}")
    content = check_length(_content(item.get("content"), f"{where}.content"), f"{where}.content")
    return {"role": "system" if role == "developer" else role, "content": content}


def _content(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise _invalid(where, "must be a string or a non-empty list of text parts")
    texts = []
    for index, part in enumerate(content):
        if not isinstance(part, Mapping) or part.get("type") not in _TEXT_PARTS:
            raise _invalid(f"{where}[{index}].type", f"must be one of {list(_TEXT_PARTS)}")
        text = part.get("text")
        if not isinstance(text, str):
            raise _invalid(f"{where}[{index}].text", "must be a string")
        texts.append(text)
    return "\n".join(texts)


def _invalid(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param, code="invalid_input")


def memory_identity(
    body: ResponseRequest, request: Request, previous: StoredResponse | None, response_id: str
) -> tuple[str | None, str]:
    """The memory user and session of a request (user None: memory is off for it)."""
    context = body.memory_context
    header_user = request.headers.get(USER_HEADER) or None
    if context is not None:
        user_id: str | None = context.user_id
    else:
        user_id = (previous.user_id if previous else None) or body.user or header_user
    session = (context.session_id if context else None) or request.headers.get(SESSION_HEADER)
    session_id = session or (previous.session_id if previous else response_id)
    for name, value in (("user", user_id), ("session", session_id)):
        if value is not None and len(value) > 256:
            raise ApiError(
                400,
                f"the memory {name} id is longer than 256 characters",
                param=name,
                code="validation_error",
            )
    return user_id, session_id


def named_user(body: ResponseRequest, request: Request) -> str | None:
    """The user a request names, wherever it names one; None when it names none."""
    context_user = body.memory_context.user_id if body.memory_context else None
    return context_user or body.user or request.headers.get(USER_HEADER) or None


async def _previous(
    store: ResponseStore, tenant_id: str, response_id: str | None, user_id: str | None
) -> StoredResponse | None:
    """The response a request continues. A chain is bound to its user: a request that names
    another user (or names one for a chain made without) is answered as for an id that does
    not exist, so one user's conversation is never sent upstream for another. A request
    that names no user continues as the chain's user."""
    if response_id is None:
        return None
    previous = await asyncio.to_thread(store.get, tenant_id, response_id)
    if previous is None or (user_id is not None and previous.user_id != user_id):
        raise ApiError(
            404,
            f"previous_response_id: no response {response_id!r}",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    return previous


def _chat_payload(body: ResponseRequest, messages: list[dict[str, Any]]) -> dict[str, Any]:
    payload: dict[str, Any] = {"model": body.model, "messages": messages}
    optional = {
        "temperature": body.temperature,
        "top_p": body.top_p,
        "max_tokens": body.max_output_tokens,
        "user": body.user,
    }
    payload.update({name: value for name, value in optional.items() if value is not None})
    return payload


class _Answer(BaseModel):
    """The part of a chat completion a Response is made from."""

    text: str
    finish_reason: str | None
    model: str | None
    usage: Usage | None


def read_completion(data: Any) -> _Answer | None:
    """The first choice's text, finish reason and usage; None when ``data`` is not a chat
    completion."""
    try:
        choice = data["choices"][0]
        text = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    if text is not None and not isinstance(text, str):
        return None
    model = data.get("model")
    return _Answer(
        text=text or "",
        finish_reason=choice.get("finish_reason"),
        model=model if isinstance(model, str) else None,
        usage=_usage(data.get("usage")),
    )


def _usage(usage: Any) -> Usage | None:
    if not isinstance(usage, Mapping):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    total = usage.get("total_tokens")
    return Usage(
        input_tokens=prompt,
        input_tokens_details=InputTokensDetails(cached_tokens=int(cached)),
        output_tokens=completion,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=int(reasoning)),
        total_tokens=total if isinstance(total, int) else prompt + completion,
    )


def response_object(
    response_id: str,
    body: ResponseRequest,
    answer: _Answer,
    prepared: Prepared,
    *,
    created_at: int,
    message_id: str | None = None,
) -> ResponseObject:
    now = int(time.time())
    cut = {"length": "max_output_tokens", "content_filter": "content_filter"}
    reason = cut.get(answer.finish_reason or "")
    status: Literal["completed", "incomplete"] = "incomplete" if reason else "completed"
    message = OutputMessage(
        id=message_id or f"msg_{new_id()}", status=status, content=[OutputText(text=answer.text)]
    )
    return ResponseObject(
        id=response_id,
        created_at=created_at,
        completed_at=now,
        status=status,
        incomplete_details=IncompleteDetails.model_validate({"reason": reason}) if reason else None,
        instructions=body.instructions,
        max_output_tokens=body.max_output_tokens,
        model=answer.model or body.model,
        output=[message],
        previous_response_id=body.previous_response_id,
        temperature=body.temperature,
        top_p=body.top_p,
        usage=answer.usage,
        user=body.user,
        metadata=body.metadata or {},
        memory=MemorySummary.model_validate(prepared.summary()),
    )


@dataclass(frozen=True)
class _Exchange:
    """One request, read: whose memory it uses, the conversation it continues, what memory
    did for it, and what its turn adds to the session."""

    body: ResponseRequest
    response_id: str
    tenant_id: str
    user_id: str | None
    session_id: str
    history: list[dict[str, Any]]  # the chain's messages, then the new input
    prepared: Prepared
    turn: list[Message]
    created_at: int = field(default_factory=lambda: int(time.time()))

    def respond(self, answer: _Answer, message_id: str | None = None) -> dict[str, Any]:
        """The Response object for ``answer``, as JSON."""
        made = response_object(
            self.response_id,
            self.body,
            answer,
            self.prepared,
            created_at=self.created_at,
            message_id=message_id,
        )
        return made.model_dump(mode="json")

    def kept(self, made: dict[str, Any], text: str) -> StoredResponse:
        said = [*self.history, {"role": "assistant", "content": text}]
        return StoredResponse(
            self.response_id,
            self.tenant_id,
            self.user_id,
            self.session_id,
            said,
            made,
            self.created_at,
        )


async def _exchange(
    body: ResponseRequest,
    new: list[dict[str, Any]],
    request: Request,
    runtime: Runtime,
    reader: Reader,
) -> _Exchange:
    """Continue the chain with the new input messages and retrieve the user's memories (404
    for an unknown ``previous_response_id``)."""
    tenant_id = reader.tenant_id
    previous = await _previous(
        store_of(request), tenant_id, body.previous_response_id, named_user(body, request)
    )
    response_id = f"resp_{new_id()}"
    user_id, session_id = memory_identity(body, request, previous, response_id)
    history = (previous.messages if previous else []) + new
    instructions = [{"role": "system", "content": body.instructions}] if body.instructions else []
    project_id = body.memory_context.project_id if body.memory_context else None
    prepared = await prepare(
        runtime,
        reader,
        user_id,
        session_id,
        instructions + history,
        body.memory_config,
        project_id,
    )
    turn = new_turn(new, project_id) if prepared.store else []
    return _Exchange(body, response_id, tenant_id, user_id, session_id, history, prepared, turn)


async def _keep(store: ResponseStore, exchange: _Exchange, made: dict[str, Any], text: str) -> None:
    """Keep a finished response for the chain's next link (unless ``store`` is false)."""
    if not exchange.body.store:
        return
    try:
        await asyncio.to_thread(store.put, exchange.kept(made, text))
    except ChatmemError as exc:  # boundary: the answer is made; a lost link is logged (F4)
        logger.error("response %s could not be stored: %s", exchange.response_id, exc)


@router.post(
    "/v1/responses",
    response_model=ResponseObject,
    responses={
        200: {
            "description": "The Response object; with stream true, server-sent events in "
            "OpenAI's Responses streaming shape, ending with response.completed (or "
            "response.incomplete, or response.failed when the upstream breaks off).",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        404: {"description": "previous_response_id names no response of this tenant."},
        502: {"description": "The upstream could not be reached."},
    },
)
async def create_response(
    body: Annotated[ResponseRequest, Body()],
    request: Request,
    runtime: RuntimeDep,
    reader: ReaderDep,
) -> Response:
    """A model response with the user's memories injected, chained by
    ``previous_response_id``, streamed when ``stream`` is true; the turn is stored in memory
    afterwards."""
    new = input_messages(body.input)  # checked before any memory work
    if body.instructions is not None:
        check_length(body.instructions, "instructions")
    url = upstream_url(runtime, "/chat/completions")
    exchange = await _exchange(body, new, request, runtime, reader)
    client: httpx.AsyncClient = request.app.state.upstream
    payload = _chat_payload(body, exchange.prepared.messages)
    headers = upstream_headers(runtime, request)
    if body.stream:
        payload.update(stream=True, stream_options={"include_usage": True})
        upstream = client.build_request("POST", url, json=payload, headers=headers)
        return await _stream(client, upstream, runtime, store_of(request), exchange)
    try:
        reply = await client.post(url, json=payload, headers=headers)
    except httpx.HTTPError as exc:
        return unreachable(exc, exchange.prepared.headers())
    if reply.status_code != 200:
        return passthrough(reply, exchange.prepared.headers())
    try:
        answer = read_completion(reply.json())
    except ValueError:
        answer = None
    if answer is None:
        failed = error_response(
            502, "the upstream's answer is not a chat completion", code="upstream_invalid"
        )
        failed.headers.update(exchange.prepared.headers())
        return failed
    made = exchange.respond(answer)
    await _keep(store_of(request), exchange, made, answer.text)
    await store_turn(runtime, exchange.prepared, exchange.turn, answer.text)
    return JSONResponse(made, headers=exchange.prepared.headers())


# -- streaming --------------------------------------------------------------------------------


async def _stream(
    client: httpx.AsyncClient,
    upstream_request: httpx.Request,
    runtime: Runtime,
    store: ResponseStore,
    exchange: _Exchange,
) -> Response:
    """Open the upstream's stream; its error status or a failure to reach it is answered as
    the non-streaming path answers it, before any event is sent."""
    extra = exchange.prepared.headers()
    try:
        upstream = await client.send(upstream_request, stream=True)
        if upstream.status_code != 200:
            try:
                await upstream.aread()
            finally:
                await upstream.aclose()
            return passthrough(upstream, extra)
    except httpx.HTTPError as exc:
        return unreachable(exc, extra)
    events = _relay(upstream, runtime, store, exchange)
    return StreamingResponse(
        events, media_type="text/event-stream", headers={**extra, "Cache-Control": "no-cache"}
    )


@dataclass
class _Streamed:
    """What the upstream's chat-completions stream has said so far."""

    pieces: list[str] = field(default_factory=list)
    done: bool = False  # [DONE] came
    finish_reason: str | None = None
    model: str | None = None
    usage: Usage | None = None
    error: str | None = None  # why the stream failed, when it did

    def read(self, line: str) -> str:
        """Fold one line of the stream in; the answer text it adds ('' for none)."""
        before = len(self.pieces)
        self.done = _collect(line, self.pieces) or self.done
        chunk = _chunk(line)
        if chunk is not None:
            self._note(chunk)
        return "".join(self.pieces[before:])

    def _note(self, chunk: Mapping[str, Any]) -> None:
        error = chunk.get("error")
        if error:  # some servers report a failure inside the stream
            message = error.get("message") if isinstance(error, Mapping) else error
            self.error = f"the upstream failed mid-stream: {message}"
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        self.usage = _usage(chunk.get("usage")) or self.usage
        for choice in chunk.get("choices") or []:
            if isinstance(choice, Mapping) and choice.get("index", 0) == 0:
                reason = choice.get("finish_reason")
                self.finish_reason = reason if isinstance(reason, str) else self.finish_reason

    @property
    def finished(self) -> bool:
        """Whether the upstream finished its answer (a stream ended cleanly after the finish
        reason counts, for servers that send no [DONE])."""
        return self.error is None and (self.done or self.finish_reason is not None)

    def answer(self) -> _Answer:
        text = "".join(self.pieces)
        return _Answer(
            text=text, finish_reason=self.finish_reason, model=self.model, usage=self.usage
        )


def _chunk(line: str) -> Mapping[str, Any] | None:
    if not line.startswith("data:"):
        return None
    try:
        chunk = json.loads(line[5:])
    except ValueError:
        return None
    return chunk if isinstance(chunk, Mapping) else None


async def _relay(
    upstream: httpx.Response, runtime: Runtime, store: ResponseStore, exchange: _Exchange
) -> AsyncIterator[bytes]:
    """The upstream's chat-completions stream as Responses events; the response is kept and
    the turn stored only when the upstream finished (a client that leaves first stops this
    generator at a yield, so nothing is kept)."""
    events = _Events(exchange)
    streamed = _Streamed()
    try:
        yield events.opening()
        async for line in upstream.aiter_lines():
            text = streamed.read(line)
            if text:
                yield events.delta(text)
            if streamed.done or streamed.error:
                break
    except httpx.HTTPError as exc:
        logger.warning("upstream stream broke off: %s", exc)
        streamed.error = f"the upstream's stream broke off: {type(exc).__name__}: {exc}"
    finally:
        await upstream.aclose()
    if not streamed.finished:
        logger.warning("response %s failed: %s", exchange.response_id, streamed.error)
        yield events.failed(streamed.error or "the upstream's stream ended before its answer")
        return
    answer = streamed.answer()
    made = exchange.respond(answer, events.message_id)
    # Both before the last events: a client may hang up on them, or chain from this one at once.
    await store_turn(runtime, exchange.prepared, exchange.turn, answer.text)
    await _keep(store, exchange, made, answer.text)
    yield events.closing(made)


class _Events:
    """Server-sent events in OpenAI's Responses streaming shape, numbered in order, for a
    response with one output message of one text part."""

    def __init__(self, exchange: _Exchange) -> None:
        self.message_id = f"msg_{new_id()}"
        self._running = _running(exchange)
        self._numbers = itertools.count()

    def opening(self) -> bytes:
        item = {
            "type": "message",
            "id": self.message_id,
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        part = OutputText(text="").model_dump(mode="json")
        return b"".join(
            [
                self._event("response.created", response=self._running),
                self._event("response.in_progress", response=self._running),
                self._event("response.output_item.added", output_index=0, item=item),
                self._event("response.content_part.added", **self._where(), part=part),
            ]
        )

    def delta(self, text: str) -> bytes:
        return self._event("response.output_text.delta", **self._where(), delta=text, logprobs=[])

    def closing(self, made: dict[str, Any]) -> bytes:
        """The text, part and item done, then the Response as the non-streaming path makes it
        (``response.incomplete`` when the answer was cut short)."""
        message = made["output"][0]
        part = message["content"][0]
        last = "response.completed" if made["status"] == "completed" else "response.incomplete"
        where = self._where()
        return b"".join(
            [
                self._event("response.output_text.done", **where, text=part["text"], logprobs=[]),
                self._event("response.content_part.done", **where, part=part),
                self._event("response.output_item.done", output_index=0, item=message),
                self._event(last, response=made),
            ]
        )

    def failed(self, message: str) -> bytes:
        error = {"code": "server_error", "message": message}
        response = {**self._running, "status": "failed", "error": error}
        return self._event("response.failed", response=response)

    def _where(self) -> dict[str, Any]:
        return {"item_id": self.message_id, "output_index": 0, "content_index": 0}

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = json.dumps({"type": kind, "sequence_number": next(self._numbers), **fields})
        return f"event: {kind}\ndata: {data}\n\n".encode()


def _running(exchange: _Exchange) -> dict[str, Any]:
    """The Response while the answer streams: no output yet, no usage."""
    empty = _Answer(text="", finish_reason=None, model=None, usage=None)
    made = exchange.respond(empty)
    return {**made, "status": "in_progress", "completed_at": None, "output": []}


@router.get("/v1/responses/{response_id}", response_model=ResponseObject)
async def get_response(response_id: ResponseId, request: Request, tenant_id: TenantDep) -> Any:
    """A stored response of this tenant, as it was returned."""
    found = await asyncio.to_thread(store_of(request).get, tenant_id, response_id)
    if found is None:
        raise ApiError(404, f"no response {response_id!r}", code="not_found")
    return JSONResponse(found.body)


@router.delete("/v1/responses/{response_id}")
async def delete_response(
    response_id: ResponseId, request: Request, tenant_id: TenantDep
) -> DeletedResponse:
    """Forget a stored response (a chain can no longer continue from it)."""
    if not await asyncio.to_thread(store_of(request).delete, tenant_id, response_id):
        raise ApiError(404, f"no response {response_id!r}", code="not_found")
    return DeletedResponse(id=response_id)


__all__ = [
    "IGNORED_FIELDS",
    "ResponseObject",
    "ResponseRequest",
    "input_messages",
    "memory_identity",
    "read_completion",
    "router",
]
