"""Chat messages as the retrieval steps read them: who spoke, what text they said, and
whether the turn is a tool call; OpenAI-shaped dicts and ``chatmem.Message`` alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from chatmem.formats import render_message
from chatmem.messages import Message

#: A chat message: OpenAI-shaped (``role``, ``content`` …) or a ``chatmem.Message``.
ChatMessage = Mapping[str, Any] | Message


class Turn(NamedTuple):
    """One message reduced to what retrieval needs."""

    role: str
    text: str
    tool_call: bool


def read_turns(messages: Sequence[ChatMessage]) -> list[Turn]:
    """Each message as a ``Turn``: its role, its text parts joined, whether it calls a tool."""
    read = []
    for message in messages:
        if isinstance(message, Message):
            read.append(Turn(message.role.value, message.content, bool(message.tool_calls)))
        else:
            calls = bool(message.get("tool_calls") or message.get("function_call"))
            read.append(Turn(str(message.get("role", "")), _text(message.get("content")), calls))
    return read


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, Mapping) and p.get("type") in ("text", "input_text")
        )
    return ""


def as_dict(message: ChatMessage) -> dict[str, Any]:
    """``message`` as an OpenAI dict (a copy; the input is not changed)."""
    return render_message(message) if isinstance(message, Message) else dict(message)


def normal(text: str) -> str:
    """``text`` lower-cased, with typographic apostrophes straightened and whitespace
    collapsed: the form the decision and query patterns are matched against."""
    return " ".join(text.lower().replace("’", "'").split())
