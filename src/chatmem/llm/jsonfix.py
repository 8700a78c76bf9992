"""Reading almost-JSON from small models, and one repair round-trip when that fails.

Small models wrap JSON in code fences or prose, leave trailing commas, use single quotes or
Python literals, and return an object where an array was asked for (OpenAI's JSON mode even
forces one). :func:`parse_lenient` undoes those slips without touching valid JSON;
:func:`complete_json` asks a model for JSON and, when even the lenient parser fails, sends the
bad answer back once with an instruction to fix it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import Any, Literal

from chatmem.errors import LLMResponseError
from chatmem.llm.base import ChatModel

logger = logging.getLogger("chatmem.llm")

Expect = Literal["array", "object"]

#: Sent after a bad answer; ``{error}`` is why it failed, ``{shape}`` "JSON array" or "JSON object".
REPAIR_PROMPT = (
    "Your previous answer could not be read as JSON ({error}). Reply again with only the "
    "{shape}: valid JSON with double quotes, no trailing commas, no comments and no text "
    "before or after it."
)

#: Keys under which models wrap the array they were asked for.
WRAPPER_KEYS = ("facts", "memories", "items", "results", "data", "output", "answer")

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)
_WORD = re.compile(r"[^\W\d]\w*")  # a letter or underscore, then word characters
_PYTHON_LITERALS = {"True": "true", "False": "false", "None": "null"}
_CLOSERS = {"[": "]", "{": "}"}
# Where a value or key can start: a single quote here opens a string, not an apostrophe.
_VALUE_START = frozenset("{[,:")
_SINGLE_STRING_END = re.compile(r"'\s*(?=[,:\]}]|$)")
_UNESCAPED_DOUBLE = re.compile(r'(?<!\\)"')


def parse_lenient(text: str) -> Any:
    """Parse ``text`` as JSON, repairing the usual slips of small models.

    Valid JSON comes back exactly as ``json.loads`` reads it. Otherwise: ``<think>`` blocks,
    code fences and prose around the JSON are dropped; trailing commas, single-quoted strings
    and keys, bare keys and Python's True/False/None are fixed; several objects in a row (JSON
    lines) become an array. Raises ``ValueError`` when nothing JSON-like is left.
    """
    try:
        return json.loads(text)
    except ValueError:
        pass  # the lenient passes below are the point of this function
    cleaned = _THINK.sub("", text)
    candidates = [match.group(1) for match in _FENCE.finditer(cleaned)] + [cleaned]
    for candidate in candidates:
        found, value = _parse_candidate(candidate)
        if found:
            return value
    raise ValueError("no JSON value found in the answer")


def shape(value: Any, expect: Expect) -> Any:
    """Bring a parsed value to the expected shape, or raise ``ValueError``.

    For ``"array"``: an object wrapping a list (under ``facts``, ``items``… or as its only
    value) is unwrapped, an empty object is an empty list, and any other object is wrapped
    as a one-element list. For ``"object"``: a one-element list holding an object is unwrapped.
    """
    if expect == "array":
        if isinstance(value, list):
            return value
        if isinstance(value, dict):
            return _unwrap_array(value)
        raise ValueError(f"expected a JSON array, got {type(value).__name__}")
    if isinstance(value, dict):
        return value
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        return value[0]
    raise ValueError(f"expected a JSON object, got {type(value).__name__}")


def complete_json(
    model: ChatModel,
    messages: Sequence[dict[str, Any]],
    *,
    expect: Expect = "array",
    repair_prompt: str = REPAIR_PROMPT,
) -> Any:
    """Ask ``model`` for JSON and return it parsed and shaped (see :func:`shape`).

    One call with ``json=True``; if its answer cannot be read even leniently, exactly one
    repair call (the bad answer sent back with ``repair_prompt``). Raises ``LLMResponseError``
    carrying the last raw answer when that fails too; errors of the model itself propagate.
    """
    raw = model.complete(messages, json=True)
    try:
        return shape(parse_lenient(raw), expect)
    except ValueError as exc:
        logger.info("model answer is not valid JSON (%s); asking once for a repair", exc)
        error = str(exc)
    kind = "JSON array" if expect == "array" else "JSON object"
    repair = [
        *messages,
        {"role": "assistant", "content": raw},
        {"role": "user", "content": repair_prompt.format(error=error, shape=kind)},
    ]
    raw = model.complete(repair, json=True)
    try:
        return shape(parse_lenient(raw), expect)
    except ValueError as exc:
        raise LLMResponseError(f"no valid {kind} after one repair retry: {exc}", raw=raw) from exc


def _unwrap_array(value: dict[str, Any]) -> list[Any]:
    if not value:
        return []
    for key in WRAPPER_KEYS:
        if isinstance(value.get(key), list):
            wrapped: list[Any] = value[key]
            return wrapped
    only = next(iter(value.values()))
    if len(value) == 1 and isinstance(only, list):
        return only
    return [value]


def _parse_candidate(text: str) -> tuple[bool, Any]:
    """(True, value) for the first JSON value in ``text``, else (False, None)."""
    try:
        return True, json.loads(text)
    except ValueError:
        pass  # not clean JSON: look for bracketed spans inside it
    spans = _balanced_spans(text)
    for index, (start, end) in enumerate(spans):
        found, value = _loads_repaired(text[start:end])
        if not found:
            continue
        if isinstance(value, dict):
            rows = _following_objects(text, spans[index:], value)
            if len(rows) > 1:
                return True, rows
        return True, value
    return False, None


def _following_objects(
    text: str, spans: list[tuple[int, int]], first: dict[str, Any]
) -> list[dict[str, Any]]:
    """``first`` and the objects right after it (JSON lines, or objects with commas between)."""
    rows = [first]
    for (_, previous_end), (start, end) in zip(spans, spans[1:], strict=False):
        if text[previous_end:start].strip(" \t\r\n,"):
            break
        found, value = _loads_repaired(text[start:end])
        if not found or not isinstance(value, dict):
            break
        rows.append(value)
    return rows


def _loads_repaired(span: str) -> tuple[bool, Any]:
    try:
        # strict=False: models put raw newlines and tabs inside strings.
        return True, json.loads(_repair(span), strict=False)
    except ValueError:
        return False, None


def _balanced_spans(text: str) -> list[tuple[int, int]]:
    """Top-level ``[...]`` and ``{...}`` spans of ``text`` whose brackets match."""
    spans: list[tuple[int, int]] = []
    index = 0
    while index < len(text):
        if text[index] in _CLOSERS:
            end = _span_end(text, index)
            if end is not None:
                spans.append((index, end))
                index = end
                continue
        index += 1
    return spans


def _span_end(text: str, start: int) -> int | None:
    """Index just past the bracket closing the one at ``start``, or None if it never closes."""
    stack: list[str] = []
    previous = ""
    index = start
    while index < len(text):
        char = text[index]
        if char == '"':
            index = _double_string_end(text, index)
        elif char == "'" and previous in _VALUE_START:
            index = _single_string_end(text, index) or index + 1
        else:
            if char in _CLOSERS:
                stack.append(_CLOSERS[char])
            elif char in "]}":
                if not stack or stack.pop() != char:
                    return None
                if not stack:
                    return index + 1
            index += 1
        if not char.isspace():
            previous = char
    return None


def _double_string_end(text: str, start: int) -> int:
    """Index just past the double-quoted string opening at ``start`` (or the text's end)."""
    index = start + 1
    while index < len(text):
        if text[index] == "\\":
            index += 2
        elif text[index] == '"':
            return index + 1
        else:
            index += 1
    return len(text)


def _single_string_end(text: str, start: int) -> int | None:
    """Index just past a single-quoted string at ``start``: it ends at a quote followed by
    ``,`` ``:`` ``]`` ``}`` or the end, so apostrophes inside ("User's") stay text."""
    match = _SINGLE_STRING_END.search(text, start + 1)
    return match.start() + 1 if match else None


def _repair(span: str) -> str:
    """Rewrite the slips of a JSON-like span as JSON; valid JSON passes through unchanged."""
    out: list[str] = []
    previous = ""
    index = 0
    while index < len(span):
        char = span[index]
        if char == '"':
            end = _double_string_end(span, index)
            out.append(span[index:end])
        elif (
            char == "'" and previous in _VALUE_START and (found := _single_string_end(span, index))
        ):
            end = found
            out.append(_requote(span[index + 1 : end - 1]))
        elif char == "," and _next_significant(span, index + 1) in ("]", "}"):
            end = index + 1  # a trailing comma: drop it
        elif (word := _WORD.match(span, index)) is not None:
            end = word.end()
            out.append(_repair_word(word.group(), previous, _next_significant(span, end)))
        else:
            end = index + 1
            out.append(char)
        if not char.isspace() and out:
            previous = out[-1][-1:]
        index = end
    return "".join(out)


def _repair_word(word: str, previous: str, following: str) -> str:
    if previous in ("{", ",") and following == ":":
        return json.dumps(word)  # a bare key
    return _PYTHON_LITERALS.get(word, word)


def _requote(inner: str) -> str:
    """A single-quoted string's content as a double-quoted JSON string."""
    return '"' + _UNESCAPED_DOUBLE.sub('\\\\"', inner.replace("\\'", "'")) + '"'


def _next_significant(text: str, start: int) -> str:
    for char in text[start:]:
        if not char.isspace():
            return char
    return ""


__all__ = ["REPAIR_PROMPT", "WRAPPER_KEYS", "Expect", "complete_json", "parse_lenient", "shape"]
