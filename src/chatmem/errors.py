"""The one exception tree of chatmem.

Every error chatmem raises on purpose derives from :class:`ChatmemError`::

    ChatmemError
    ├── ConfigError              bad store URI, unknown backend, missing optional extra
    ├── ValidationError          bad input; ``field`` names what was wrong
    │   ├── DimensionError       a vector whose length is not the store's dimension
    │   └── ImportFormatError    a malformed line in an import file (``line`` is 1-based)
    ├── NotFoundError            no memory with that id for that tenant and user
    ├── ConflictError            an update raced another one (stale version)
    ├── EmbeddingError           the embedder failed
    │   └── EmbedderMismatchError  the store was built with another model or dimension
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
    """No memory with that id is visible to the caller."""

    def __init__(self, memory_id: str) -> None:
        self.memory_id = memory_id
        super().__init__(f"memory {memory_id!r} not found")


class ConflictError(ChatmemError):
    """A write was based on a version of the memory that is no longer current."""


class EmbeddingError(ChatmemError):
    """The embedder could not produce vectors."""


class EmbedderMismatchError(EmbeddingError):
    """The store was created with a different embedding model or dimension."""


class StoreError(ChatmemError):
    """The storage backend failed."""


class StoreUnavailableError(StoreError):
    """The storage backend cannot be reached or opened."""
