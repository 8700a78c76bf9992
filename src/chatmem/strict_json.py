"""Strict JSON: what every body and import line that chatmem reads must be.

Python's ``json`` accepts more than JSON and more than chatmem can hold: the literals
``NaN`` and ``Infinity``, numbers that overflow to infinity (``1e400``), integers of any
size, lone UTF-16 surrogates (``"\\ud800"``, which no UTF-8 text can hold) and nesting
deep enough to exhaust the interpreter's stack. ``loads`` refuses each of them with a
``ValidationError`` whose ``field`` is the path of the offending value as the caller wrote
it (``messages[0].content``), before anything downstream sees the value.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from chatmem.errors import ValidationError

#: The deepest nesting of objects and arrays accepted (the top-level value is level 1).
MAX_DEPTH = 64
#: Integers must fit a signed 64-bit column, the widest every backend stores.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_SURROGATE = re.compile("[\ud800-\udfff]")
#: A ``\\u`` escape of a surrogate: without one in the text, no decoded string can hold one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
#: Strings (with a following colon when they are keys) and the structural characters.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"\s*(:)?|[\[\]{},]', re.DOTALL)


class _Refused:
    """A number the parser met that JSON or chatmem cannot hold, found again by the walk."""

    __slots__ = ("literal", "why")

    def __init__(self, literal: str, why: str) -> None:
        self.literal = literal
        self.why = why


def _constant(literal: str) -> _Refused:
    return _Refused(literal, "is not JSON: numbers must be finite")


def _float(literal: str) -> float | _Refused:
    value = float(literal)
    return value if math.isfinite(value) else _Refused(literal, "is out of range for a number")


def _int(literal: str) -> int | _Refused:
    # Past 20 characters ("-" and 19 digits) it cannot fit; int() of it would only cost time.
    value = int(literal) if len(literal) <= 20 else None
    if value is not None and _fits(value):
        return value
    shown = literal if len(literal) <= 40 else f"{literal[:20]}…({len(literal)} digits)"
    return _Refused(shown, "is out of range: integers must fit in 64 bits")


def loads(data: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """``data`` parsed as strict JSON (bytes must be UTF-8); a ValidationError naming the
    offending field otherwise (``field`` None, and a message starting "not", when the text
    as a whole is not JSON)."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValidationError(f"not UTF-8 text: {exc.reason}") from None
    else:
        text = data
    try:
        value = json.loads(text, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except RecursionError:
        raise _too_deep(_deep_path(text, max_depth), max_depth) from None
    except ValueError as exc:  # JSONDecodeError, and integers past Python's digit limit
        raise ValidationError(f"not JSON: {exc}") from None
    # Only an escape can put a surrogate into text decoded from UTF-8; a str may hold one
    # itself (text read with errors="surrogateescape"). Without either, strings are sound.
    escaped = _SURROGATE_ESCAPE.search(text) is not None
    held = isinstance(data, str) and _SURROGATE.search(text) is not None
    check(value, max_depth=max_depth, strings=escaped or held)
    return value


def check(value: Any, *, max_depth: int = MAX_DEPTH, strings: bool = True) -> None:
    """Walk a parsed value: a ValidationError at the first refused number (from ``loads``;
    or, parsed by another reader, an integer past 64 bits or a float not finite), lone
    surrogate (in a string or a key; skipped when ``strings`` is false) or level past
    ``max_depth``."""
    stack: list[tuple[Any, int, _Where]] = [(value, 1, None)]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, str):
            if strings and _SURROGATE.search(item):
                raise _surrogate(where)
        elif isinstance(item, dict):
            if depth > max_depth:
                raise _too_deep(where, max_depth)
            for key in item:
                if strings and _SURROGATE.search(key):
                    raise _surrogate((where, key))
            # Reversed onto the stack: the first problem in the text is the one named.
            stack.extend((item[key], depth + 1, (where, key)) for key in reversed(item))
        elif isinstance(item, list):
            if depth > max_depth:
                raise _too_deep(where, max_depth)
            stack.extend((item[i], depth + 1, (where, i)) for i in range(len(item) - 1, -1, -1))
        elif isinstance(item, _Refused):
            raise ValidationError(f"{item.literal} {item.why}", field=path(where))
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValidationError(f"{item} is not JSON: numbers must be finite", field=path(where))
        elif isinstance(item, int) and not isinstance(item, bool) and not _fits(item):
            # No str() of it: past 4,300 digits Python refuses to write an integer out.
            raise ValidationError(
                "is out of range: integers must fit in 64 bits", field=path(where)
            )


def _fits(value: int) -> bool:
    return INT64_MIN <= value <= INT64_MAX


#: Where a value sits: None at the top, else (where its container sits, its key or index).
_Where = tuple[Any, str | int] | None


def path(where: _Where) -> str | None:
    """A location as chatmem names fields (``messages[0].content``); keys are written with
    any surrogate escaped, so the name itself is always valid text."""
    parts: list[str | int] = []
    while where is not None:
        where, part = where
        parts.append(part)
    named = ""
    for part in reversed(parts):
        if isinstance(part, int):
            named += f"[{part}]"
        else:
            key = part.encode("utf-8", "backslashreplace").decode("utf-8")
            named += f".{key}" if named else key
    return named or None


def _surrogate(where: _Where) -> ValidationError:
    return ValidationError(
        "holds a lone UTF-16 surrogate escape (such as \\ud800), which is not text",
        field=path(where),
    )


def _too_deep(where: _Where, max_depth: int) -> ValidationError:
    return ValidationError(f"nests deeper than {max_depth} levels", field=path(where))


def _deep_path(text: str, max_depth: int) -> _Where:
    """Where nesting first passes ``max_depth`` (for text too deep for the parser to build),
    found by a scan of the structural tokens."""
    frames: list[list[Any]] = []  # per open container: [kind, key or index, where it sits]
    for token in _TOKENS.finditer(text):
        mark = token.group(0)
        if mark[0] == '"':
            if token.group(1) and frames and frames[-1][0] == "{":
                frames[-1][1] = json.loads(mark[: mark.rindex('"') + 1])
            continue
        if mark in "[{":
            inside: _Where = (frames[-1][2], frames[-1][1]) if frames else None
            if len(frames) + 1 > max_depth:
                return inside
            frames.append([mark, 0 if mark == "[" else "", inside])
        elif mark in "]}" and frames:
            frames.pop()
        elif mark == "," and frames and frames[-1][0] == "[":
            frames[-1][1] += 1
    return None


__all__ = ["INT64_MAX", "INT64_MIN", "MAX_DEPTH", "check", "loads", "path"]
