"""chatmem: a memory layer for chat agents that runs offline."""

from chatmem.embeddings import Embedder, LocalEmbedder, OpenAIEmbedder
from chatmem.errors import (
    ChatmemError,
    ConfigError,
    ConflictError,
    DimensionError,
    EmbedderMismatchError,
    EmbeddingError,
    ImportFormatError,
    NotFoundError,
    StoreError,
    StoreUnavailableError,
    ValidationError,
)
from chatmem.long_term import AsyncLongTermMemory, LongTermMemory
from chatmem.ranking import RankingConfig
from chatmem.records import (
    AccessControl,
    Content,
    Filter,
    HistoryEntry,
    HistoryEvent,
    MemoryMetadata,
    MemoryRecord,
    MemoryType,
    Page,
    Relation,
    RelationType,
    Scope,
    SearchResult,
    Source,
    TimeInfo,
)
from chatmem.stores import MemoryStore, open_store

__version__ = "0.1.0"

__all__ = [
    "AccessControl",
    "AsyncLongTermMemory",
    "ChatmemError",
    "ConfigError",
    "ConflictError",
    "Content",
    "DimensionError",
    "EmbedderMismatchError",
    "Embedder",
    "EmbeddingError",
    "Filter",
    "HistoryEntry",
    "HistoryEvent",
    "ImportFormatError",
    "LocalEmbedder",
    "LongTermMemory",
    "MemoryMetadata",
    "MemoryRecord",
    "MemoryStore",
    "MemoryType",
    "NotFoundError",
    "OpenAIEmbedder",
    "Page",
    "RankingConfig",
    "Relation",
    "RelationType",
    "Scope",
    "SearchResult",
    "Source",
    "StoreError",
    "StoreUnavailableError",
    "TimeInfo",
    "ValidationError",
    "__version__",
    "open_store",
]
