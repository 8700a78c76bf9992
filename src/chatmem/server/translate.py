"""Between the Responses API and chat completions: what ``/v1/responses`` receives, turned
into what an upstream that speaks only chat completions reads, and its answer turned back.

Into chat completions:

- input items: messages (``developer`` becomes ``system``; text parts, and an assistant's
  refusals, as text); ``function_call`` items become an assistant message's ``tool_calls``
  (calls in a row join one message, with the assistant text just before them);
  ``function_call_output`` items become ``tool`` messages; ``reasoning`` items are left out
  (a chat-completions upstream cannot take them back, and an answer made without them is
  what OpenAI gives when they are dropped);
- ``tools``: function tools, ``{"type": "function", "name", "description", "parameters",
  "strict"}`` → ``{"type": "function", "function": {...}}``;
- ``tool_choice``: ``none``, ``auto``, ``required``, ``{"type": "function", "name"}`` and
  ``{"type": "allowed_tools", ...}``, each in its chat-completions shape;
- ``text.format`` → ``response_format`` (``json_object``, ``json_schema``; ``text`` sends
  none) and ``text.verbosity`` → ``verbosity``;
- ``reasoning.effort`` → ``reasoning_effort`` (a summary cannot be asked for: chat
  completions returns none, so ``reasoning.summary`` is accepted and no summary comes back).

Out of chat completions (``output_items``): the answer's text is one ``message`` item, each
tool call a ``function_call`` item after it.

What cannot pass is a 400 with code ``unsupported_parameter`` naming it: tools other than
functions (web and file search, computer use, MCP, code interpreter, custom tools…),
``tool_choice`` for them, input content other than text (images, files, audio), input items
other than those above (``item_reference``, hosted tools' calls…), and tool fields chat
completions has no place for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chatmem.server.errors import ApiError
from chatmem.server.turns import check_length

#: The ``code`` of a 400 for a field chatmem cannot pass to a chat-completions upstream.
UNSUPPORTED = "unsupported_parameter"

_INPUT_ROLES = ("user", "assistant", "system", "developer")
_TEXT_PARTS = ("input_text", "output_text")
_TOOL_CHOICES = ("none", "auto", "required")
_FUNCTION_FIELDS = ("description", "parameters", "strict")
_ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")


def invalid(param: str, message: str, code: str = "invalid_input") -> ApiError:
    """A 400 naming ``param``."""
    return ApiError(400, f"{param}: {message}", param=param, code=code)


def cannot_pass(param: str, message: str) -> ApiError:
    """A 400 for what a chat-completions upstream has no place for."""
    return invalid(param, f"{message} (chatmem's upstream speaks chat completions)", UNSUPPORTED)


# -- input ------------------------------------------------------------------------------------


def chat_messages(value: str | Sequence[Any]) -> list[dict[str, Any]]:
    """The request's input as chat messages; a 400 naming the item that cannot pass."""
    if isinstance(value, str):
        return [{"role": "user", "content": check_length(value, "input")}]
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        _add_item(messages, item, f"input[{index}]")
    if not messages:
        raise invalid("input", "has no message, tool call or tool output (only reasoning)")
    return messages


def _add_item(messages: list[dict[str, Any]], item: Any, where: str) -> None:
    if not isinstance(item, Mapping):
        raise invalid(where, "must be an input item (an object, such as a message)")
    kind = item.get("type", "message")
    if kind == "message":
        messages.append(_message(item, where))
    elif kind == "function_call":
        _add_call(messages, item, where)
    elif kind == "function_call_output":
        messages.append(_call_output(item, where))
    elif kind != "reasoning":
        raise cannot_pass(
            f"{where}.type", f"{kind!r} items cannot pass; items: {list(_ITEM_TYPES)}"
        )


def _message(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in _INPUT_ROLES:
        raise invalid(f"{where}.role", f"must be one of {list(_INPUT_ROLES)}")
    content = check_length(_text(item.get("content"), f"{where}.content"), f"{where}.content")
    return {"role": "system" if role == "developer" else role, "content": content}


def _text(content: Any, where: str) -> str:
    """A message's or a tool output's text: a string, or text parts joined by newlines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise invalid(where, "must be a string or a non-empty list of text parts")
    texts = []
    for index, part in enumerate(content):
        place = f"{where}[{index}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
            continue
        if kind not in _TEXT_PARTS:
            if isinstance(kind, str) and kind.startswith("input_"):
                raise cannot_pass(f"{place}.type", f"only text parts pass, not {kind!r}")
            raise invalid(f"{place}.type", f"must be one of {list(_TEXT_PARTS)}")
        text = part.get("text")
        if not isinstance(text, str):
            raise invalid(f"{place}.text", "must be a string")
        texts.append(text)
    return "\n".join(texts)


def _add_call(messages: list[dict[str, Any]], item: Mapping[str, Any], where: str) -> None:
    """A ``function_call`` item as a tool call of the assistant message it continues (the
    text just before it, or the calls before it), else of a new one."""
    call = {
        "id": _string(item, "call_id", where),
        "type": "function",
        "function": {"name": _string(item, "name", where), "arguments": _arguments(item, where)},
    }
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _call_output(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    output = check_length(_text(item.get("output"), f"{where}.output"), f"{where}.output")
    return {"role": "tool", "tool_call_id": _string(item, "call_id", where), "content": output}


def _string(item: Mapping[str, Any], name: str, where: str) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value or len(value) > 256:
        raise invalid(f"{where}.{name}", "must be a string of 1 to 256 characters")
    return value


def _arguments(item: Mapping[str, Any], where: str) -> str:
    value = item.get("arguments")
    if not isinstance(value, str):
        raise invalid(f"{where}.arguments", "must be a string (the arguments as JSON)")
    return check_length(value, f"{where}.arguments")


# -- tools, tool choice, format, reasoning ----------------------------------------------------


def chat_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Responses function tools as chat-completions tools."""
    return [_chat_tool(tool, f"tools[{index}]") for index, tool in enumerate(tools)]


def _chat_tool(tool: Mapping[str, Any], where: str) -> dict[str, Any]:
    kind = tool.get("type")
    if kind != "function":
        raise cannot_pass(f"{where}.type", f"only function tools pass, not {kind!r}")
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise invalid(f"{where}.name", "must be a non-empty string")
    function: dict[str, Any] = {"name": name}
    for field_name, value in tool.items():
        if field_name in ("type", "name") or value is None:
            continue
        if field_name not in _FUNCTION_FIELDS:
            raise cannot_pass(f"{where}.{field_name}", "a function tool's field without a place")
        function[field_name] = value
    return {"type": "function", "function": function}


def chat_tool_choice(choice: str | Mapping[str, Any]) -> str | dict[str, Any]:
    """A Responses ``tool_choice`` in its chat-completions shape."""
    if isinstance(choice, str):
        if choice not in _TOOL_CHOICES:
            raise invalid("tool_choice", f"must be one of {list(_TOOL_CHOICES)} or an object")
        return choice
    kind = choice.get("type")
    if kind == "function":
        return {"type": "function", "function": {"name": _string(choice, "name", "tool_choice")}}
    if kind == "allowed_tools":
        return _allowed_tools(choice)
    raise cannot_pass("tool_choice.type", f"only functions can be chosen, not {kind!r}")


def _allowed_tools(choice: Mapping[str, Any]) -> dict[str, Any]:
    mode, tools = choice.get("mode"), choice.get("tools")
    if mode not in ("auto", "required"):
        raise invalid("tool_choice.mode", "must be 'auto' or 'required'")
    if not isinstance(tools, list) or not tools:
        raise invalid("tool_choice.tools", "must be a non-empty list of tools")
    named = []
    for index, tool in enumerate(tools):
        where = f"tool_choice.tools[{index}]"
        if not isinstance(tool, Mapping) or tool.get("type") != "function":
            raise cannot_pass(f"{where}.type", "only function tools can be allowed")
        named.append({"type": "function", "function": {"name": _string(tool, "name", where)}})
    return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": named}}


def response_format(text_format: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``text.format`` as chat completions' ``response_format`` (None: plain text, sent as
    no ``response_format`` at all, which every server takes)."""
    if text_format is None:
        return None
    kind = text_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        raise invalid("text.format.type", "must be 'text', 'json_object' or 'json_schema'")
    schema = text_format.get("schema")
    if not isinstance(schema, Mapping):
        raise invalid("text.format.schema", "must be a JSON schema (an object)")
    named = {"name": _string(text_format, "name", "text.format"), "schema": schema}
    for field_name in ("description", "strict"):
        if text_format.get(field_name) is not None:
            named[field_name] = text_format[field_name]
    return {"type": "json_schema", "json_schema": named}


# -- output -----------------------------------------------------------------------------------


def chat_tool_calls(message: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The tool calls of a chat completion's message, each ``{"id", "type", "function":
    {"name", "arguments"}}``; [] for none; None when they are malformed."""
    calls = message.get("tool_calls")
    if calls is None:
        return []
    if not isinstance(calls, list):
        return None
    read = []
    for call in calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(call.get("id"), str):
            return None
        name, arguments = function.get("name"), function.get("arguments", "")
        if not isinstance(name, str) or not isinstance(arguments, str):
            return None
        read.append(
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        )
    return read


def function_call_item(
    call: Mapping[str, Any], item_id: str, status: str = "completed"
) -> dict[str, Any]:
    """A chat tool call as a Responses ``function_call`` output item."""
    function = call["function"]
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call["id"],
        "name": function["name"],
        "arguments": function["arguments"],
        "status": status,
    }


def assistant_message(text: str, tool_calls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The answer as the chat message that continues a chain."""
    if not tool_calls:
        return {"role": "assistant", "content": text}
    return {"role": "assistant", "content": text or None, "tool_calls": list(tool_calls)}


__all__ = [
    "UNSUPPORTED",
    "assistant_message",
    "cannot_pass",
    "chat_messages",
    "chat_tool_calls",
    "chat_tool_choice",
    "chat_tools",
    "function_call_item",
    "invalid",
    "response_format",
]
