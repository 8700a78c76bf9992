"""The two doors the CLI prints through, and how text is made safe for them.

People read a ``PlainConsole`` (``out``, and ``err`` on stderr): no string is ever taken
as Rich markup, and control characters are shown escaped, so a stored ``[/]``, a
``[link=…]`` or an ESC sequence prints as the text it is. Programs read ``print_json``.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

# C0 and C1 control characters but tab and newline, DEL, bidirectional overrides, and the
# lone surrogates that stand for bytes that were not UTF-8.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def printable(text: str) -> str:
    """``text`` with its control characters (ESC, CR, C1, bidi overrides) and lone
    surrogates written as escapes (``\\x1b``), so stored text cannot drive the terminal."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class PlainConsole(Console):
    """A Rich console that renders every string as plain, printable text: never markup,
    never emoji codes, control characters escaped. Style comes only from ``Text`` objects
    the CLI builds itself from its own words."""

    def render_str(self, text: str, **options: Any) -> Text:
        options.update(markup=False, emoji=False, highlight=False)
        return super().render_str(printable(text), **options)


out = PlainConsole(highlight=False)
err = PlainConsole(stderr=True, highlight=False)


def print_json(data: Any) -> None:
    """``data`` as JSON for programs: text as UTF-8, control characters and lone surrogates
    as ``\\u`` escapes."""
    text = json.dumps(data, indent=2, ensure_ascii=False)
    sys.stdout.write(_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n")


def print_error(message: str) -> None:
    """``error: message`` on stderr, on one line however long: never wrapped."""
    line = Text.assemble(("error:", "bold red"), " ", " ".join(printable(message).split()))
    err.print(line, soft_wrap=True)


def count(n: int, noun: str = "memory", plural: str = "memories") -> str:
    """``1 memory``, ``2 memories``."""
    return f"{n} {noun if n == 1 else plural}"


__all__ = ["PlainConsole", "count", "err", "out", "print_error", "print_json", "printable"]
