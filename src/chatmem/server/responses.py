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

Agent frameworks (the OpenAI Agents SDK among them) work through it: function ``tools``,
``tool_choice``, ``parallel_tool_calls``, ``text.format`` and ``reasoning.effort`` are passed
to the upstream in their chat-completions shape, the answer's tool calls come back as
``function_call`` output items (streamed too), and ``function_call`` and
``function_call_output`` input items go up as the assistant's tool calls and ``tool``
messages (``chatmem.server.translate`` says what maps to what, and what cannot pass: a 400
with code ``unsupported_parameter``). ``background: true`` is such a 400: chatmem answers
within the request. Accepted and ignored, so OpenAI clients that send them work:
``include``, ``truncation``, ``service_tier``, ``prompt_cache_key``, ``safety_identifier`` and
``stream_options``. Any other unknown field is a 400 naming it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, NamedTuple

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
from chatmem.server.translate import (
    assistant_message,
    cannot_pass,
    chat_messages,
    chat_tool_calls,
    chat_tool_choice,
    chat_tools,
    function_call_item,
    response_format,
)

logger = logging.getLogger("chatmem.server.responses")

#: OpenAI request fields accepted and ignored (they change nothing chatmem does).
IGNORED_FIELDS = (
    "include",
    "truncation",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
    "stream_options",
)
ResponseId = Annotated[str, Path(min_length=1, max_length=256)]


class TextOptions(BaseModel):
    """``text``: the answer's format (``text``, ``json_object`` or ``json_schema``, sent as
    ``response_format``) and verbosity."""

    model_config = ConfigDict(extra="forbid")

    format: dict[str, Any] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningOptions(BaseModel):
    """``reasoning``: the effort is sent as ``reasoning_effort``; a summary is accepted but
    none comes back (chat completions gives none)."""

    model_config = ConfigDict(extra="forbid")

    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


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
    #: Function tools (``chatmem.server.translate``: others are a 400).
    tools: list[dict[str, Any]] | None = Field(default=None, max_length=128)
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextOptions | None = None
    reasoning: ReasoningOptions | None = None
    #: Only false: chatmem answers within the request.
    background: bool | None = None
    # Accepted and ignored (IGNORED_FIELDS).
    include: list[str] | None = None
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


class FunctionCallItem(BaseModel):
    """A tool call of the answer: the client runs the function and sends its result back as
    a ``function_call_output`` item with the same ``call_id``."""

    type: Literal["function_call"] = "function_call"
    id: str
    call_id: str
    name: str
    arguments: str
    status: Literal["completed", "incomplete"] = "completed"


OutputItem = Annotated[OutputMessage | FunctionCallItem, Field(discriminator="type")]


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
    """An OpenAI Response object (a message, function calls), plus ``memory``."""

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
    output: list[OutputItem]
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
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
    OpenAI-compatible server knows; tool calls and their outputs as the assistant's
    ``tool_calls`` and ``tool`` messages); a 400 naming the item that cannot pass."""
    return chat_messages(value)


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


def check_request(body: ResponseRequest) -> None:
    """Refuse, before any memory work, what cannot pass to the upstream."""
    if body.background:
        raise cannot_pass(
            "background",
            "background responses are not supported: chatmem answers within the request, "
            "so send background false (or leave it out)",
        )
    if body.instructions is not None:
        check_length(body.instructions, "instructions")


def _chat_payload(body: ResponseRequest, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat-completions request for ``body`` (``chatmem.server.translate``)."""
    payload: dict[str, Any] = {"model": body.model, "messages": messages}
    tools = chat_tools(body.tools) if body.tools else None
    text = body.text or TextOptions()
    optional = {
        "temperature": body.temperature,
        "top_p": body.top_p,
        "max_tokens": body.max_output_tokens,
        "user": body.user,
        "tools": tools,
        # Chat completions refuses parallel_tool_calls without tools.
        "parallel_tool_calls": body.parallel_tool_calls if tools else None,
        "tool_choice": chat_tool_choice(body.tool_choice) if body.tool_choice else None,
        "response_format": response_format(text.format),
        "verbosity": text.verbosity,
        "reasoning_effort": body.reasoning.effort if body.reasoning else None,
    }
    payload.update({name: value for name, value in optional.items() if value is not None})
    return payload


class _Answer(BaseModel):
    """The part of a chat completion a Response is made from."""

    text: str
    finish_reason: str | None
    model: str | None
    usage: Usage | None
    #: Chat-completions tool calls (``{"id", "type", "function": {"name", "arguments"}}``).
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)


def read_completion(data: Any) -> _Answer | None:
    """The first choice's text, tool calls, finish reason and usage; None when ``data`` is
    not a chat completion."""
    try:
        choice = data["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(message, Mapping) or not ("content" in message or "tool_calls" in message):
        return None
    text = message.get("content")
    if text is not None and not isinstance(text, str):
        return None
    calls = chat_tool_calls(message)
    if calls is None:
        return None
    model = data.get("model")
    return _Answer(
        text=text or "",
        finish_reason=choice.get("finish_reason"),
        model=model if isinstance(model, str) else None,
        usage=_usage(data.get("usage")),
        tool_calls=calls,
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


@dataclass(frozen=True)
class ItemIds:
    """The ids of a response's output items: its message's, and its function calls' in the
    order of the answer's tool calls (made here when not given)."""

    message: str = field(default_factory=lambda: f"msg_{new_id()}")
    calls: tuple[str, ...] = ()

    def call(self, index: int) -> str:
        """The id of the answer's ``index``-th tool call."""
        return self.calls[index] if index < len(self.calls) else f"fc_{new_id()}"


def output_items(
    answer: _Answer, status: Literal["completed", "incomplete"], ids: ItemIds
) -> list[OutputMessage | FunctionCallItem]:
    """The answer's text as one message item (left out when the answer only calls tools),
    then one ``function_call`` item per tool call."""
    items: list[OutputMessage | FunctionCallItem] = []
    if answer.text or not answer.tool_calls:
        text = OutputText(text=answer.text)
        items.append(OutputMessage(id=ids.message, status=status, content=[text]))
    for index, call in enumerate(answer.tool_calls):
        item = function_call_item(call, ids.call(index), status)
        items.append(FunctionCallItem.model_validate(item))
    return items


def response_object(
    response_id: str,
    body: ResponseRequest,
    answer: _Answer,
    prepared: Prepared,
    *,
    created_at: int,
    ids: ItemIds | None = None,
) -> ResponseObject:
    now = int(time.time())
    cut = {"length": "max_output_tokens", "content_filter": "content_filter"}
    reason = cut.get(answer.finish_reason or "")
    status: Literal["completed", "incomplete"] = "incomplete" if reason else "completed"
    text = body.text or TextOptions()
    reasoning = body.reasoning.model_dump(exclude_none=True) if body.reasoning else None
    return ResponseObject(
        id=response_id,
        created_at=created_at,
        completed_at=now,
        status=status,
        incomplete_details=IncompleteDetails.model_validate({"reason": reason}) if reason else None,
        instructions=body.instructions,
        max_output_tokens=body.max_output_tokens,
        model=answer.model or body.model,
        output=output_items(answer, status, ids or ItemIds()),
        parallel_tool_calls=body.parallel_tool_calls is not False,
        previous_response_id=body.previous_response_id,
        reasoning=reasoning,
        temperature=body.temperature,
        top_p=body.top_p,
        text=text.model_dump(exclude_none=True) | {"format": text.format or {"type": "text"}},
        tool_choice=body.tool_choice or "auto",
        tools=body.tools or [],
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

    def respond(self, answer: _Answer, ids: ItemIds | None = None) -> dict[str, Any]:
        """The Response object for ``answer``, as JSON."""
        made = response_object(
            self.response_id,
            self.body,
            answer,
            self.prepared,
            created_at=self.created_at,
            ids=ids,
        )
        return made.model_dump(mode="json")

    def kept(self, made: dict[str, Any], answer: _Answer) -> StoredResponse:
        said = [*self.history, assistant_message(answer.text, answer.tool_calls)]
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


async def _keep(
    store: ResponseStore, exchange: _Exchange, made: dict[str, Any], answer: _Answer
) -> None:
    """Keep a finished response for the chain's next link (unless ``store`` is false)."""
    if not exchange.body.store:
        return
    try:
        await asyncio.to_thread(store.put, exchange.kept(made, answer))
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
        400: {
            "description": "A field that is invalid, or that cannot pass to a "
            "chat-completions upstream (code unsupported_parameter): tools other than "
            "functions, input other than text, background true."
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
    ``previous_response_id``, streamed when ``stream`` is true, calling the request's
    function tools when the model does; the turn is stored in memory afterwards."""
    new = input_messages(body.input)  # checked before any memory work
    check_request(body)
    _chat_payload(body, new)  # tools, tool_choice and text.format, checked before it too
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
    await _keep(store_of(request), exchange, made, answer)
    await store_turn(
        runtime, exchange.prepared, exchange.turn, answer.text, answer.tool_calls or None
    )
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


class _Said(NamedTuple):
    """What one line of the upstream's stream added: text, the tool calls it started (their
    indexes), and pieces of their arguments."""

    text: str
    started: list[int]
    arguments: list[tuple[int, str]]


@dataclass
class _Streamed:
    """What the upstream's chat-completions stream has said so far."""

    pieces: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)  # by the upstream's index
    done: bool = False  # [DONE] came
    finish_reason: str | None = None
    model: str | None = None
    usage: Usage | None = None
    error: str | None = None  # why the stream failed, when it did

    def read(self, line: str) -> _Said:
        """Fold one line of the stream in; what it adds."""
        before = len(self.pieces)
        known = {i: len(call["function"]["arguments"]) for i, call in self.calls.items()}
        self.done = _collect(line, self.pieces, self.calls) or self.done
        chunk = _chunk(line)
        if chunk is not None:
            self._note(chunk)
        arguments = [
            (index, call["function"]["arguments"][known.get(index, 0) :])
            for index, call in sorted(self.calls.items())
        ]
        return _Said(
            "".join(self.pieces[before:]),
            [index for index in sorted(self.calls) if index not in known],
            [(index, piece) for index, piece in arguments if piece],
        )

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
        return _Answer(
            text="".join(self.pieces),
            finish_reason=self.finish_reason,
            model=self.model,
            usage=self.usage,
            tool_calls=[self.calls[index] for index in sorted(self.calls)],
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
            said = streamed.read(line)
            if said.text:
                yield events.delta(said.text)
            for index in said.started:
                yield events.call_added(index, streamed.calls[index])
            for index, piece in said.arguments:
                yield events.arguments_delta(index, piece)
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
    made = events.arrange(exchange.respond(answer, events.ids(len(answer.tool_calls))))
    # Both before the last events: a client may hang up on them, or chain from this one at once.
    await store_turn(
        runtime, exchange.prepared, exchange.turn, answer.text, answer.tool_calls or None
    )
    await _keep(store, exchange, made, answer)
    yield events.closing(made)


class _Events:
    """Server-sent events in OpenAI's Responses streaming shape, numbered in order: the
    message item opens at the answer's first text, a function call item at the call's first
    piece, each taking the next output index."""

    def __init__(self, exchange: _Exchange) -> None:
        self.message_id = f"msg_{new_id()}"
        self._call_ids: dict[int, str] = {}  # the upstream's call index → item id
        self._opened: list[str] = []  # item ids, in output order
        self._running = _running(exchange)
        self._numbers = itertools.count()

    def ids(self, calls: int) -> ItemIds:
        """The ids the events gave the output items (the answer's calls in index order)."""
        ordered = [self._call_ids[index] for index in sorted(self._call_ids)]
        return ItemIds(self.message_id, tuple(ordered[:calls]))

    def opening(self) -> bytes:
        return b"".join(
            [
                self._event("response.created", response=self._running),
                self._event("response.in_progress", response=self._running),
            ]
        )

    def delta(self, text: str) -> bytes:
        opened = b"" if self.message_id in self._opened else self._open_message()
        where = self._where(self.message_id)
        delta = self._event("response.output_text.delta", **where, delta=text, logprobs=[])
        return opened + delta

    def call_added(self, index: int, call: Mapping[str, Any]) -> bytes:
        item_id = self._call_ids[index] = f"fc_{new_id()}"
        item = function_call_item(call, item_id, "in_progress") | {"arguments": ""}
        return self._open(item)

    def arguments_delta(self, index: int, piece: str) -> bytes:
        item_id = self._call_ids[index]
        return self._event(
            "response.function_call_arguments.delta",
            item_id=item_id,
            output_index=self._opened.index(item_id),
            delta=piece,
        )

    def arrange(self, made: dict[str, Any]) -> dict[str, Any]:
        """``made`` with its output in the order the events opened the items (an item none
        opened, an empty message, goes last)."""
        rank = {item_id: n for n, item_id in enumerate(self._opened)}
        output = sorted(made["output"], key=lambda item: rank.get(item["id"], len(rank)))
        return {**made, "output": output}

    def closing(self, made: dict[str, Any]) -> bytes:
        """Each item done, then the Response as the non-streaming path makes it
        (``response.incomplete`` when the answer was cut short)."""
        events = []
        for item in made["output"]:
            if item["id"] not in self._opened:  # an empty answer: its message opens now
                events.append(self._open_message())
            events.append(self._done(item))
        last = "response.completed" if made["status"] == "completed" else "response.incomplete"
        events.append(self._event(last, response=made))
        return b"".join(events)

    def failed(self, message: str) -> bytes:
        error = {"code": "server_error", "message": message}
        response = {**self._running, "status": "failed", "error": error}
        return self._event("response.failed", response=response)

    def _open_message(self) -> bytes:
        item = {
            "type": "message",
            "id": self.message_id,
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        part = OutputText(text="").model_dump(mode="json")
        opened = self._open(item)
        where = self._where(self.message_id)
        return opened + self._event("response.content_part.added", **where, part=part)

    def _open(self, item: dict[str, Any]) -> bytes:
        self._opened.append(item["id"])
        index = len(self._opened) - 1
        return self._event("response.output_item.added", output_index=index, item=item)

    def _done(self, item: dict[str, Any]) -> bytes:
        index = self._opened.index(item["id"])
        if item["type"] == "function_call":
            arguments = self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                name=item["name"],
                arguments=item["arguments"],
            )
            done = self._event("response.output_item.done", output_index=index, item=item)
            return arguments + done
        part = item["content"][0]
        where = self._where(item["id"])
        return b"".join(
            [
                self._event("response.output_text.done", **where, text=part["text"], logprobs=[]),
                self._event("response.content_part.done", **where, part=part),
                self._event("response.output_item.done", output_index=index, item=item),
            ]
        )

    def _where(self, item_id: str) -> dict[str, Any]:
        return {"item_id": item_id, "output_index": self._opened.index(item_id), "content_index": 0}

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
    "FunctionCallItem",
    "ItemIds",
    "ResponseObject",
    "ResponseRequest",
    "check_request",
    "input_messages",
    "memory_identity",
    "read_completion",
    "router",
]
