"""The one exception tree of chatmem.

Every error chatmem raises on purpose derives from :class:`ChatmemError`::

    ChatmemError
    ├── ConfigError              bad store URI, unknown backend, missing optional extra
    ├── ValidationError          bad input; ``field`` names what was wrong
    │   ├── DimensionError       a vector whose length is not the store's dimension
    │   └── ImportFormatError    a malformed line in an import file (``line`` is 1-based)
    ├── NotFoundError            no memory with that id for that tenant and user
    ├── ConflictError            an update raced another one (stale version)
    ├── AuthenticationError      the service refused the key: none, unknown or revoked (401),
    │                            or one that may not do this (403); ``status_code`` says which
    ├── EmbeddingError           the embedder failed
    │   └── EmbedderMismatchError  the store was built with another model or dimension
    ├── LLMError                 a language model gave no usable answer
    │   ├── LLMUnavailableError  HTTP error, timeout or connection failure, after the retries
    │   └── LLMResponseError     an answer came but was not usable (empty, or no valid JSON
    │                            after the one repair retry); ``raw`` holds its text, truncated
    └── StoreError               the backend failed; the backend's exception is ``__cause__``
        └── StoreUnavailableError  the backend cannot be reached or opened

Backend exceptions are translated at the store boundary with ``raise ... from exc``.
"""

from __future__ import annotations


class ChatmemError(Exception):
    """Root of every error chatmem raises on purpose."""


class ConfigError(ChatmemError):
    """A configuration value (store URI, option, missing extra) is not usable."""


class ValidationError(ChatmemError):
    """Input was rejected. ``field`` is the dotted path of the offending field, if known."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.message = message
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class DimensionError(ValidationError):
    """A vector's length does not match the store's embedding dimension."""


class ImportFormatError(ValidationError):
    """A line of an import file could not be read as a memory record."""

    def __init__(self, message: str, *, line: int, field: str | None = None) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}", field=field)


class NotFoundError(ChatmemError):
    """No memory (or other ``what``: a key, a response) with that id is visible to the
    caller."""

    def __init__(self, memory_id: str, *, what: str = "memory") -> None:
        self.memory_id = memory_id
        self.what = what
        super().__init__(f"{what} {memory_id!r} not found")


class ConflictError(ChatmemError):
    """A write was based on a version of the memory that is no longer current."""


class AuthenticationError(ChatmemError):
    """The service refused the caller's key (``chatmem.Client``): missing, unknown or revoked
    (``status_code`` 401), or not allowed to do this, such as an admin route (403)."""

    def __init__(self, message: str, *, status_code: int) -> None:
        self.status_code = status_code
        super().__init__(message)


class EmbeddingError(ChatmemError):
    """The embedder could not produce vectors."""


class EmbedderMismatchError(EmbeddingError):
    """The store was created with a different embedding model or dimension."""


class LLMError(ChatmemError):
    """A language model gave no usable answer."""


class LLMUnavailableError(LLMError):
    """The model could not be reached or kept failing (HTTP error, timeout, connection).

    ``status_code`` is the last HTTP status, when an answer came at all.
    """

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        self.status_code = status_code
        super().__init__(message)


class LLMResponseError(LLMError):
    """The model answered, but not usably. ``raw`` is the answer's text, truncated."""

    #: Most characters of the raw answer kept on the error (answers can be long).
    RAW_LIMIT = 2000

    def __init__(self, message: str, *, raw: str | None = None) -> None:
        self.raw = raw if raw is None or len(raw) <= self.RAW_LIMIT else raw[: self.RAW_LIMIT] + "…"
        super().__init__(message)


class StoreError(ChatmemError):
    """The storage backend failed."""


class StoreUnavailableError(StoreError):
    """The storage backend cannot be reached or opened."""
