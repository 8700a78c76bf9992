"""The guard's decision: each check, in order, over each view of a text; the first that
holds says why the text is aimed at the model."""

from __future__ import annotations

import re
from collections.abc import Callable

from chatmem.extraction.poisoning.exfiltration import exfiltration
from chatmem.extraction.poisoning.orders import DECODE_ORDER, override, standing_order
from chatmem.extraction.poisoning.privilege import privilege
from chatmem.extraction.poisoning.roles import MARKUP, SYSTEM_PROMPT, persona
from chatmem.extraction.poisoning.views import views


def _pattern(compiled: re.Pattern[str]) -> Callable[[str], bool]:
    return lambda text: compiled.search(text) is not None


#: (reason, check), in the order they are tried; each check reads one view of the text.
_CHECKS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("forges system or tool markup", _pattern(MARKUP)),
    ("refers to the system prompt", _pattern(SYSTEM_PROMPT)),
    ("asks the model to ignore its instructions", override),
    ("tries to change who the model is", persona),
    ("claims authority or privileges on the service", privilege),
    ("asks to send data out", exfiltration),
    ("gives the model a standing order", standing_order),
    ("hides an instruction in an encoding", _pattern(DECODE_ORDER)),
)


def is_instruction_to_model(text: str) -> str | None:
    """Why ``text`` reads as an instruction or a claim aimed at the model rather than a
    statement about the user, or None when it does not."""
    for view in views(text):
        for reason, check in _CHECKS:
            if check(view):
                return reason
    return None


__all__ = ["is_instruction_to_model"]
