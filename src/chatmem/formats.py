"""Message formats in and out (SPEC M4, S2): OpenAI chat, the Vercel AI SDK UI message, and
the rich shape of a voice agent's short-term memory.

- ``standard`` output is what any OpenAI-compatible model accepts: role and content (plus
  the tool-call fields a tool exchange needs).
- ``custom`` output carries every field: turn id, timestamp and metadata.
- ``interrupted="original"`` gives an interrupted reply the full text it would have had.

Rich-shape timestamps below 10^11 are read as seconds (the seed's examples use seconds while
its text says milliseconds); chatmem keeps milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Literal

from chatmem.errors import ValidationError
from chatmem.messages import Message, Role
from chatmem.records import from_ms, to_ms

Format = Literal["openai", "vercel", "rich"]
Mode = Literal["standard", "custom"]
Interrupted = Literal["said", "original"]

_SECONDS_LIMIT = 10**11


def parse_message(data: Any, format: Format = "openai", field: str = "message") -> Message:
    """One message from ``format``; a ValidationError names the bad field under ``field``."""
    if isinstance(data, Message):
        return data
    if not isinstance(data, Mapping):
        raise ValidationError(f"expected an object, got {type(data).__name__}", field=field)
    if format == "vercel":
        return _from_vercel(data, field)
    return _from_openai_or_rich(data, field)


def parse_messages(items: Iterable[Any], format: Format = "openai") -> list[Message]:
    """Every message of ``items``, or a ValidationError naming ``messages[i]``."""
    return [parse_message(item, format, f"messages[{i}]") for i, item in enumerate(items)]


def render_message(
    message: Message,
    format: Format = "openai",
    *,
    mode: Mode = "standard",
    interrupted: Interrupted = "said",
) -> dict[str, Any]:
    """``message`` as a plain dict in ``format``."""
    if format == "vercel":
        return _to_vercel(message, interrupted)
    if format == "rich" or mode == "custom":
        return _to_rich(message, interrupted)
    return _to_openai(message, interrupted)


def render_messages(
    messages: Iterable[Message],
    format: Format = "openai",
    *,
    mode: Mode = "standard",
    interrupted: Interrupted = "said",
) -> list[dict[str, Any]]:
    return [render_message(m, format, mode=mode, interrupted=interrupted) for m in messages]


# -- OpenAI and rich -------------------------------------------------------------------------


def _from_openai_or_rich(data: Mapping[str, Any], field: str) -> Message:
    fields = dict(data)
    content = fields.get("content")
    if isinstance(content, list):
        fields["content"] = _joined_text(content, "text")
        fields["parts"] = content
    stamp = fields.get("timestamp")
    if isinstance(stamp, int | float) and 0 <= stamp < _SECONDS_LIMIT:  # seconds: to ms
        fields["timestamp"] = int(stamp * 1000)
    if fields.get("content") is None and fields.get("tool_calls"):
        fields["content"] = ""
    return Message.checked(fields, field)


def _to_openai(message: Message, interrupted: Interrupted) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role.value, "content": _said(message, interrupted)}
    if message.parts is not None and message.role is Role.USER:
        out["content"] = message.parts
    if message.name:
        out["name"] = message.name
    if message.tool_calls:
        out["tool_calls"] = [call.model_dump(mode="json") for call in message.tool_calls]
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    return out


def _to_rich(message: Message, interrupted: Interrupted) -> dict[str, Any]:
    """Every field; defaults the seed hides (interrupted false, empty fields) are left out."""
    out = _to_openai(message, interrupted)
    out["id"] = message.id
    if message.turn_id is not None:
        out["turn_id"] = message.turn_id
    out["timestamp"] = message.timestamp
    metadata = message.metadata.model_dump(mode="json", exclude_none=True)
    if not metadata.get("interrupted"):
        metadata.pop("interrupted", None)
    if metadata:
        out["metadata"] = metadata
    if message.parts is not None:
        out["parts"] = message.parts
    return out


def _said(message: Message, interrupted: Interrupted) -> str:
    if interrupted == "original" and message.metadata.interrupted and message.metadata.original:
        return message.metadata.original
    return message.content


# -- Vercel AI SDK ---------------------------------------------------------------------------

_VERCEL_ROLES = {"user", "assistant", "system"}


def _from_vercel(data: Mapping[str, Any], field: str) -> Message:
    """A UI message (``parts``, AI SDK 5) or a legacy one (``content``, ``createdAt``)."""
    role = data.get("role")
    if role not in _VERCEL_ROLES:
        raise ValidationError(
            f"a Vercel message's role is user, assistant or system, not {role!r}",
            field=f"{field}.role",
        )
    parts = data.get("parts")
    if parts is not None and not isinstance(parts, list):
        raise ValidationError("parts must be a list", field=f"{field}.parts")
    content = data.get("content")
    if content is None:
        if parts is None:
            raise ValidationError("a message needs content or parts", field=f"{field}.content")
        content = _joined_text(parts, "text")
    if parts is not None and all(_is_text(part) for part in parts):
        parts = None  # plain text: the content says it all, and renders back the same
    metadata = dict(data.get("metadata") or {})
    fields: dict[str, Any] = {
        "role": role,
        "content": content,
        "parts": parts,
        "turn_id": metadata.pop("turn_id", None),
        "metadata": metadata.pop("rich", {}) | metadata,
    }
    if data.get("id"):
        fields["id"] = data["id"]
    if (timestamp := _vercel_time(data, metadata, field)) is not None:
        fields["timestamp"] = timestamp
        fields["metadata"].pop("createdAt", None)
    return Message.checked(fields, field)


def _vercel_time(data: Mapping[str, Any], metadata: dict[str, Any], field: str) -> int | None:
    raw = data.get("createdAt", metadata.get("createdAt"))
    if raw is None:
        return None
    if isinstance(raw, int | float):
        return int(raw)
    try:
        moment = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(f"not an ISO date: {raw!r}", field=f"{field}.createdAt") from None
    return to_ms(moment)  # a naive time is UTC


def _to_vercel(message: Message, interrupted: Interrupted) -> dict[str, Any]:
    text = _said(message, interrupted)
    parts = message.parts if message.parts is not None else [{"type": "text", "text": text}]
    if message.role is Role.TOOL:
        role = "assistant"
        parts = [
            {
                "type": "dynamic-tool",
                "toolName": message.name or "tool",
                "toolCallId": message.tool_call_id,
                "state": "output-available",
                "output": text,
            }
        ]
    else:
        role = message.role.value
    metadata: dict[str, Any] = {"createdAt": _iso(message.timestamp)}
    if message.turn_id is not None:
        metadata["turn_id"] = message.turn_id
    rich = message.metadata.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    if rich:
        metadata["rich"] = rich
    return {"id": message.id, "role": role, "parts": parts, "metadata": metadata}


def _iso(ms: int) -> str:
    return from_ms(ms).isoformat(timespec="milliseconds")


def _is_text(part: Any) -> bool:
    return isinstance(part, Mapping) and part.get("type") == "text"


def _joined_text(parts: list[Any], key: str) -> str:
    return "\n".join(str(part.get(key, "")) for part in parts if _is_text(part))


__all__ = [
    "Format",
    "Interrupted",
    "Mode",
    "parse_message",
    "parse_messages",
    "render_message",
    "render_messages",
]
