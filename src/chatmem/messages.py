"""Chat messages as short-term memory keeps them (SPEC S1, S2).

A message has the OpenAI chat fields (role, content, name, tool calls) and the rich fields of
a voice or chat agent: a turn id, a millisecond timestamp, and metadata saying where it came
from and whether it was interrupted. Turn ids never go backwards within a session; a user
message and the assistant's reply usually share one.
"""

from __future__ import annotations

import json
import time
from enum import StrEnum
from typing import Annotated, Any, NamedTuple

from pydantic import ConfigDict, Field, field_validator, model_validator

from chatmem.errors import ValidationError
from chatmem.records import _Checked, _Model, new_id
from chatmem.strict_json import INT64_MAX

#: Largest message content kept, in characters. Budgets truncate far below this when packing.
MAX_MESSAGE_CHARS = 1_000_000
#: The latest time a message may carry: 9999-12-31T23:59:59.999Z, in milliseconds since the
#: epoch (the last moment a ``datetime`` holds; extraction dates every message).
MAX_TIMESTAMP_MS = 253_402_300_799_999

NonEmpty = Annotated[str, Field(min_length=1, max_length=256)]


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class MessageSource(StrEnum):
    """How a message was produced (the seed's voice-agent sources)."""

    ASR = "asr"
    MESSAGE = "message"
    COMMAND = "command"
    LLM = "llm"
    GREETING = "greeting"
    LLM_FAILURE = "llm_failure"
    SILENCE = "silence"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class MessageMetadata(_Model):
    """The rich fields of S2. Other keys are kept as given (they must be JSON)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    source: MessageSource | None = None
    interrupted: bool = False
    #: When the user cut the reply off, in milliseconds since the epoch.
    interrupt_timestamp: int | None = Field(default=None, ge=0, le=MAX_TIMESTAMP_MS)
    #: The whole text an interrupted reply would have had.
    original: str | None = None
    #: The end user who spoke, when it differs from the session's user.
    user: str | None = None

    @model_validator(mode="after")
    def _extras_are_json(self) -> MessageMetadata:
        extra = self.model_extra or {}
        try:
            json.dumps(extra, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"metadata must be JSON: {exc}") from None
        return self


class FunctionCall(_Model):
    name: NonEmpty
    arguments: str = ""


class ToolCall(_Model):
    """An OpenAI tool call made by an assistant message."""

    id: NonEmpty
    type: str = "function"
    function: FunctionCall


class Message(_Checked):
    """One chat message. ``id`` and ``timestamp`` are filled in when not given."""

    role: Role
    content: str = Field(max_length=MAX_MESSAGE_CHARS)
    id: NonEmpty = Field(default_factory=new_id)
    turn_id: int | None = Field(default=None, ge=0, le=INT64_MAX)
    #: Milliseconds since the epoch.
    timestamp: int = Field(default_factory=now_ms, ge=0, le=MAX_TIMESTAMP_MS)
    metadata: MessageMetadata = Field(default_factory=MessageMetadata)
    name: str | None = Field(default=None, max_length=256)
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = Field(default=None, max_length=256)
    #: Content parts other than text (files, images, tool UI), kept verbatim for round trips.
    parts: list[dict[str, Any]] | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _content_is_text(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("content is required (use an empty string for none)")
        return value

    @model_validator(mode="after")
    def _tool_fields_fit_the_role(self) -> Message:
        if self.role is Role.TOOL and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id it answers")
        if self.tool_calls and self.role is not Role.ASSISTANT:
            raise ValueError("only an assistant message makes tool calls")
        return self


class SessionKey(NamedTuple):
    """Where a session lives: tenant → user → session."""

    tenant_id: str
    user_id: str
    session_id: str

    @classmethod
    def of(cls, tenant_id: str, user_id: str, session_id: str) -> SessionKey:
        """A key whose parts are checked (non-empty, at most 256 characters)."""
        for field, value in (
            ("tenant_id", tenant_id),
            ("user_id", user_id),
            ("session_id", session_id),
        ):
            if not isinstance(value, str) or not value or len(value) > 256:
                raise ValidationError("must be 1 to 256 characters", field=field)
        return cls(tenant_id, user_id, session_id)


def check_turn_order(previous: int | None, messages: list[Message]) -> None:
    """Refuse turn ids that go backwards, against the stored last one and within the batch."""
    last = previous
    for index, message in enumerate(messages):
        if message.turn_id is None:
            continue
        if last is not None and message.turn_id < last:
            raise ValidationError(
                f"turn {message.turn_id} comes after turn {last}",
                field=f"messages[{index}].turn_id",
            )
        last = message.turn_id


#: The metadata key of a message built on restricted memories: the ``allowed_roles`` of
#: each (``chatmem.server.visibility``). Only readers holding them may see the message, and
#: extraction passes it over, so no memory open to others is made from it (SPEC L7).
MEMORY_ACL = "memory_acl"


def is_restricted(message: Message) -> bool:
    """Whether ``message`` was built on restricted memories (it names a ``MEMORY_ACL``)."""
    return bool((message.metadata.model_extra or {}).get(MEMORY_ACL))


def last_turn_id(messages: list[Message]) -> int | None:
    """The newest turn id among ``messages`` (None when none carries one)."""
    for message in reversed(messages):
        if message.turn_id is not None:
            return message.turn_id
    return None


__all__ = [
    "MAX_MESSAGE_CHARS",
    "MEMORY_ACL",
    "MAX_TIMESTAMP_MS",
    "FunctionCall",
    "Message",
    "MessageMetadata",
    "MessageSource",
    "Role",
    "SessionKey",
    "ToolCall",
    "check_turn_order",
    "is_restricted",
    "last_turn_id",
    "now_ms",
]
