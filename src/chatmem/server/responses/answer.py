"""The upstream's answer, read from a chat completion, and the Response object made from it
(its output items, their ids, its status and usage)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from chatmem.records import new_id
from chatmem.server.injection import Prepared
from chatmem.server.responses.objects import (
    FunctionCallItem,
    IncompleteDetails,
    InputTokensDetails,
    MemorySummary,
    OutputMessage,
    OutputText,
    OutputTokensDetails,
    ResponseObject,
    Usage,
)
from chatmem.server.responses.request import ResponseRequest, TextOptions
from chatmem.server.translate import chat_tool_calls, function_call_item


class Answer(BaseModel):
    """The part of a chat completion a Response is made from."""

    text: str
    finish_reason: str | None
    model: str | None
    usage: Usage | None
    #: Chat-completions tool calls (``{"id", "type", "function": {"name", "arguments"}}``).
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)


def read_completion(data: Any) -> Answer | None:
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
    return Answer(
        text=text or "",
        finish_reason=choice.get("finish_reason"),
        model=model if isinstance(model, str) else None,
        usage=usage_of(data.get("usage")),
        tool_calls=calls,
    )


def usage_of(usage: Any) -> Usage | None:
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
    answer: Answer, status: Literal["completed", "incomplete"], ids: ItemIds
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
    answer: Answer,
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


__all__ = ["Answer", "ItemIds", "output_items", "read_completion", "response_object", "usage_of"]
