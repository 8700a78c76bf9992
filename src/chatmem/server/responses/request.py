"""A Responses API request: its fields, what is refused before any memory work, and its
translation to the chat-completions request sent upstream (``chatmem.server.translate`` maps
the items, tools and formats)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from chatmem.server.injection import MemoryContext, MemoryOptions
from chatmem.server.translate import (
    cannot_pass,
    chat_messages,
    chat_tool_choice,
    chat_tools,
    response_format,
)
from chatmem.server.turns import check_length

#: OpenAI request fields accepted and ignored (they change nothing chatmem does).
IGNORED_FIELDS = (
    "include",
    "truncation",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
    "stream_options",
)


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


def input_messages(value: str | Sequence[Any]) -> list[dict[str, Any]]:
    """The request's input as chat messages (``developer`` becomes ``system``, which every
    OpenAI-compatible server knows; tool calls and their outputs as the assistant's
    ``tool_calls`` and ``tool`` messages); a 400 naming the item that cannot pass."""
    return chat_messages(value)


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


def chat_payload(body: ResponseRequest, messages: list[dict[str, Any]]) -> dict[str, Any]:
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


__all__ = [
    "IGNORED_FIELDS",
    "ReasoningOptions",
    "ResponseRequest",
    "TextOptions",
    "chat_payload",
    "check_request",
    "input_messages",
]
