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

Not supported yet: ``stream: true`` (a 400; ``/v1/chat/completions`` streams), tools, and
input other than text messages. Accepted and ignored, so OpenAI clients that send them work:
``include``, ``parallel_tool_calls``, ``truncation``, ``service_tier``, ``prompt_cache_key``
and ``safety_identifier``. Any other unknown field is a 400 naming it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, BackgroundTasks, Body, Path, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from chatmem.errors import ChatmemError
from chatmem.records import new_id
from chatmem.server.app import ApiError, RuntimeDep, TenantDep, error_response
from chatmem.server.chat import (
    SESSION_HEADER,
    USER_HEADER,
    MemoryContext,
    MemoryOptions,
    Prepared,
    new_turn,
    passthrough,
    prepare,
    record_turn,
    unreachable,
    upstream_headers,
    upstream_url,
)
from chatmem.server.response_store import ResponseStore, StoredResponse

logger = logging.getLogger("chatmem.server.responses")

#: OpenAI request fields accepted and ignored (they change nothing chatmem does).
IGNORED_FIELDS = (
    "include",
    "parallel_tool_calls",
    "truncation",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
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
        return [{"role": "user", "content": value}]
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
    content = _content(item.get("content"), f"{where}.content")
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


async def _previous(
    store: ResponseStore, tenant_id: str, response_id: str | None
) -> StoredResponse | None:
    if response_id is None:
        return None
    previous = await asyncio.to_thread(store.get, tenant_id, response_id)
    if previous is None:
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
    response_id: str, body: ResponseRequest, answer: _Answer, prepared: Prepared
) -> ResponseObject:
    now = int(time.time())
    cut = {"length": "max_output_tokens", "content_filter": "content_filter"}
    reason = cut.get(answer.finish_reason or "")
    status: Literal["completed", "incomplete"] = "incomplete" if reason else "completed"
    message = OutputMessage(
        id=f"msg_{new_id()}", status=status, content=[OutputText(text=answer.text)]
    )
    return ResponseObject(
        id=response_id,
        created_at=now,
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


async def _keep(store: ResponseStore, stored: StoredResponse) -> None:
    try:
        await asyncio.to_thread(store.put, stored)
    except ChatmemError as exc:  # boundary: the answer is made; a lost link is logged (F4)
        logger.error("response %s could not be stored: %s", stored.response_id, exc)


@router.post(
    "/v1/responses",
    response_model=ResponseObject,
    responses={
        404: {"description": "previous_response_id names no response of this tenant."},
        502: {"description": "The upstream could not be reached."},
    },
)
async def create_response(
    body: Annotated[ResponseRequest, Body()],
    request: Request,
    runtime: RuntimeDep,
    tenant_id: TenantDep,
    tasks: BackgroundTasks,
) -> Response:
    """A model response with the user's memories injected, chained by
    ``previous_response_id``; the turn is stored in memory afterwards."""
    if body.stream:
        raise ApiError(
            400,
            "stream: streaming is not supported on /v1/responses yet (send stream: false, or "
            "use /v1/chat/completions, which streams)",
            param="stream",
            code="unsupported_parameter",
        )
    new = input_messages(body.input)
    store = store_of(request)
    url = upstream_url(runtime, "/chat/completions")
    previous = await _previous(store, tenant_id, body.previous_response_id)
    response_id = f"resp_{new_id()}"
    user_id, session_id = memory_identity(body, request, previous, response_id)
    history = (previous.messages if previous else []) + new
    instructions = [{"role": "system", "content": body.instructions}] if body.instructions else []
    prepared = await prepare(
        runtime, tenant_id, user_id, session_id, instructions + history, body.memory_config
    )
    client: httpx.AsyncClient = request.app.state.upstream
    try:
        reply = await client.post(
            url,
            json=_chat_payload(body, prepared.messages),
            headers=upstream_headers(runtime, request),
        )
    except httpx.HTTPError as exc:
        return unreachable(exc, prepared.headers())
    if reply.status_code != 200:
        return passthrough(reply, prepared.headers())
    try:
        answer = read_completion(reply.json())
    except ValueError:
        answer = None
    if answer is None:
        failed = error_response(
            502, "the upstream's answer is not a chat completion", code="upstream_invalid"
        )
        failed.headers.update(prepared.headers())
        return failed
    made = response_object(response_id, body, answer, prepared).model_dump(mode="json")
    if body.store:
        said = [*history, {"role": "assistant", "content": answer.text}]
        stored = StoredResponse(
            response_id, tenant_id, user_id, session_id, said, made, made["created_at"]
        )
        await _keep(store, stored)
    turn = new_turn(new) if prepared.store else []
    tasks.add_task(record_turn, runtime, prepared, turn, answer.text)
    return JSONResponse(made, headers=prepared.headers())


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
