"""What ``LongTermMemory.add`` accepts: a plain text, or chat messages (OpenAI's shapes),
checked and read into ``InputMessage``s.

A chat message with no text (``content`` null, empty or blank, or content parts none of
which is text: an assistant's tool call, an image) is skipped, never refused. Tool calls are
kept: in the context of the messages around them (``[called name(args)]``) and, with a tool
result's ``tool_call_id``, in ``content.structured`` of a message that has text. A chat in
which no message has text stores nothing and returns ``[]``; a blank plain text, a message
without ``content`` (unless it calls tools) or with content of another type is a
ValidationError. ``check_search`` checks what ``search`` takes besides.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from chatmem import checks
from chatmem import text as textlib
from chatmem.errors import ValidationError
from chatmem.records import Source, check_count, from_ms, utc_ms

#: Message roles accepted by ``add``.
ROLES = frozenset({"user", "assistant", "system", "tool"})
#: A neighbouring message is cut to this many characters when it serves as context.
MAX_CONTEXT_CHARS = 2_000

MessageLike = str | Mapping[str, Any]
#: Content part types whose ``text`` is a message's text (chat completions and responses).
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})


class InputMessage:
    """One message of an ``add`` call; ``content`` is "" when it has no text."""

    __slots__ = (
        "role",
        "content",
        "name",
        "id",
        "timestamp",
        "metadata",
        "source",
        "field",
        "tool_calls",
        "tool_call_id",
    )

    def __init__(
        self,
        role: str | None,
        content: str,
        name: str | None,
        id: str | None,
        timestamp: datetime | None,
        metadata: dict[str, Any],
        *,
        field: str,
        tool_calls: list[dict[str, str]] | None = None,
        tool_call_id: str | None = None,
    ) -> None:
        self.role = role
        self.content = content
        self.name = name
        self.id = id
        self.timestamp = timestamp
        self.metadata = metadata
        self.source = (
            Source.EXPLICIT_USER_INPUT if role in (None, "user") else Source.SYSTEM_GENERATED
        )
        self.field = field
        self.tool_calls = tool_calls or []
        self.tool_call_id = tool_call_id

    def speaks(self) -> bool:
        """Whether the message says anything: a text, or a tool call."""
        return bool(self.content.strip() or self.tool_calls)

    def spoken(self, *, before: bool = False) -> str:
        """``"<speaker>: <text> [called <tool>(<arguments>)]"``, cut to ``MAX_CONTEXT_CHARS``
        (it is context, not content): its end when it comes ``before`` the turn it is the
        context of, else its start; the part nearest that turn either way."""
        calls = (f"[called {call['name']}({call['arguments']})]" for call in self.tool_calls)
        said = " ".join(filter(None, [self.content.strip(), *calls]))
        return context_text(self.name or self.role, said, before=before)

    def structured(self) -> dict[str, Any] | None:
        """The tool calls the message makes, or the call it answers, if any."""
        kept: dict[str, Any] = {}
        if self.tool_calls:
            kept["tool_calls"] = self.tool_calls
        if self.tool_call_id:
            kept["tool_call_id"] = self.tool_call_id
        return kept or None


def message_items(messages: MessageLike | Sequence[MessageLike]) -> list[MessageLike]:
    """``add``'s ``messages`` as a list: one text or message, or each of a chat's."""
    items = [messages] if isinstance(messages, str | Mapping) else list(messages)
    if not items:
        raise ValidationError("nothing to add", field="messages")
    return items


def heard_messages(items: Sequence[MessageLike]) -> list[InputMessage]:
    """The messages of ``items`` that say something (plain texts always count). Turns that
    say nothing are left out, also as their neighbours' context."""
    said = [parse_message(item, f"messages[{i}]") for i, item in enumerate(items)]
    return [m for m in said if m.role is None or m.speaks()]


def parse_message(item: MessageLike, field: str) -> InputMessage:
    """One text or chat message, checked; ``field`` names it in errors."""
    if isinstance(item, str):
        return InputMessage(None, item, None, None, None, {}, field=field)
    role = item.get("role")
    if not isinstance(role, str) or role not in ROLES:  # a list or dict cannot be looked up
        raise ValidationError(
            f"role must be one of {sorted(ROLES)}, got {role!r}", field=f"{field}.role"
        )
    calls = _tool_calls(item)
    if "content" not in item and not calls:
        raise ValidationError(
            "is required (null when the message has no text)", field=f"{field}.content"
        )
    content = _text_of(item.get("content"), f"{field}.content")
    metadata = item.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise ValidationError("must be an object", field=f"{field}.metadata")
    name = item.get("name")
    message_id = item.get("id") or item.get("turn_id")
    answers = item.get("tool_call_id")
    return InputMessage(
        role,
        content,
        str(name) if name is not None else None,
        str(message_id) if message_id is not None else None,
        _timestamp(item.get("timestamp"), f"{field}.timestamp"),
        dict(metadata),
        field=field,
        tool_calls=calls,
        tool_call_id=str(answers) if answers is not None else None,
    )


def _text_of(content: Any, field: str) -> str:
    """A message's text: a string, or the text parts of an OpenAI content list joined; ""
    for null content or a list without text (an image, audio)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            p.get("text")
            for p in content
            if isinstance(p, Mapping)
            and isinstance(p.get("type"), str)
            and p.get("type") in TEXT_PART_TYPES
        ]
        return "\n".join(t for t in texts if isinstance(t, str) and t)
    raise ValidationError("must be a text, null or a list of content parts", field=field)


def _tool_calls(item: Mapping[str, Any]) -> list[dict[str, str]]:
    """The tool calls a message makes (OpenAI ``tool_calls``, or a legacy
    ``function_call``) as id, name and arguments; a call without a function name is left
    out, and long arguments are clipped."""
    raw = item.get("tool_calls")
    calls = list(raw) if isinstance(raw, list) else []
    if isinstance(item.get("function_call"), Mapping):
        calls.append({"function": item["function_call"]})
    kept = []
    for call in calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            continue
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, default=str)
        entry = {"name": function["name"], "arguments": textlib.clip(arguments)}
        if isinstance(call.get("id"), str):
            entry = {"id": call["id"], **entry}
        if entry["name"]:
            kept.append(entry)
    return kept


def _timestamp(value: Any, field: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        try:
            return utc_ms(value)
        except ValueError as exc:  # 9999-12-31T23:59:59-14:00: no year 10000 in UTC
            raise ValidationError(str(exc), field=field) from None
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            if isinstance(value, int):
                return utc_ms(from_ms(value))  # exact: a float is a millisecond off near 9999
            return datetime.fromtimestamp(value / 1000, tz=UTC)
        except (OverflowError, OSError, ValueError):  # past the years datetime holds
            raise ValidationError("is out of range for a time", field=field) from None
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            return _timestamp(moment, field)
    raise ValidationError("must be milliseconds since the epoch or an ISO 8601 time", field=field)


def context_text(speaker: str | None, said: str, *, before: bool) -> str:
    """What a neighbouring turn that said ``said`` gives as context: ``"<speaker>: <said>"``
    within ``MAX_CONTEXT_CHARS``, its end kept when it comes ``before`` the turn whose context
    it is (what was said just before), else its start (what was said just after)."""
    text = f"{speaker}: {said}" if speaker else said
    if len(text) <= MAX_CONTEXT_CHARS or not before:
        return text[:MAX_CONTEXT_CHARS]
    prefix = f"{speaker}: …" if speaker else "…"
    return prefix + said[len(prefix) - MAX_CONTEXT_CHARS :]


def check_search(
    query: str,
    k: int,
    threshold: float | None,
    include_superseded: bool,
    late: bool,
    light: bool = False,
) -> int:
    """``k`` as an ``int``; refuse a blank query, a ``k`` that is not a whole number from 1
    to ``MAX_RESULTS``, a ``threshold`` that is not a number and a flag that is not a bool
    (a ValidationError naming it)."""
    if not query or not query.strip():
        raise ValidationError("query is empty", field="query")
    checks.optional_number(threshold, "threshold")
    checks.flag(include_superseded, "include_superseded")
    checks.flag(late, "late")
    checks.flag(light, "light")
    return check_count(k, "k")
