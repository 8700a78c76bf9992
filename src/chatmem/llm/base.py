"""What chatmem needs of a language model: one chat call that returns text.

The OpenAI-compatible HTTP client implements it, and so can a small callable in tests
(``chatmem.testing``). Roles name what a model is used for, so each can be configured apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable


class ModelRole(StrEnum):
    """What a configured model is used for; each role can point at a different model."""

    MEMORY_EXTRACTION = "memory_extraction"
    MEMORY_REWRITE = "memory_rewrite"
    SUMMARIZATION = "summarization"


@runtime_checkable
class ChatModel(Protocol):
    """A chat model. ``json=True`` asks for a JSON answer where the server can enforce it.

    Raises ``LLMError`` (or a subclass) when no usable answer came back.
    """

    def complete(self, messages: Sequence[dict[str, Any]], *, json: bool = False) -> str:
        """The model's answer to OpenAI-shaped ``messages``."""
        ...


__all__ = ["ChatModel", "ModelRole"]
