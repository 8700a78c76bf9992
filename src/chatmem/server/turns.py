"""What a proxied request adds to its session (SPEC S1, F4): the new turn read from the
request's messages, the answer joined to it, and both appended after the answer is sent.

``check_length`` refuses a message longer than a session keeps, before any memory work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError as PydanticError

from chatmem.errors import ChatmemError, ValidationError
from chatmem.messages import MAX_MESSAGE_CHARS, Message, MessageMetadata, Role, SessionKey
from chatmem.server.errors import ApiError
from chatmem.server.injection import Prepared
from chatmem.server.runtime import Runtime
from chatmem.server.visibility import with_acl

logger = logging.getLogger("chatmem.server.chat")


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
    """The request's new messages and the answer (its text, or the tools it calls). The
    answer carries the ACL of the memories it was built on (``metadata.memory_acl``), so
    the session shows it only to readers who may read them (``chatmem.server.visibility``)."""
    said = list(turn)
    metadata = with_acl(_project_metadata(prepared.project_id), prepared.memory_acl)
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
    the request; a stop waits for both (``AfterAnswer.drain``). ``prepared.turn`` then says
    whether the turn was stored (the answer goes out either way, F4)."""
    key = prepared.key
    if not prepared.store or key is None:
        return
    said = turn_messages(prepared, turn, answer, tool_calls)
    if not said:
        return

    def append() -> None:
        runtime.short_term.append(key, said)
        prepared.turn = "memory-only" if runtime.sessions_error else "stored"

    prepared.turn = "not-stored"  # until the append returns
    appended = runtime.after_answer.run(
        key,
        _guarded("storing the turn", key, append),
        _guarded(
            "queueing extraction",
            key,
            lambda: runtime.observe(key, said, extract=prepared.extract),
        ),
    )
    await asyncio.shield(appended)


__all__ = [
    "check_length",
    "check_lengths",
    "new_turn",
    "store_turn",
    "text_of",
    "turn_messages",
]
