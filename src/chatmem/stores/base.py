"""The one store interface (SPEC B5). Retrieval and write logic never see a backend.

A store keeps records, their vectors and their version history. It answers a search with
candidates and their raw scores (cosine similarity, BM25); fusing them is the ranking layer's
job, so every backend ranks the same way.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from chatmem.records import (
    Candidate,
    EmbeddingInfo,
    Entry,
    Filter,
    HistoryEntry,
    MemoryRecord,
    Page,
    Vector,
)


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; the conformance suite skips what a backend lacks."""

    keyword_search: bool = True
    #: Several processes may open the same store at once.
    multi_process: bool = True


@dataclass(frozen=True)
class SearchQuery:
    """A search over one user's memories. ``candidates`` is the size of each half's list."""

    filter: Filter
    vector: Vector | None = None
    text: str | None = None
    candidates: int = 50


@dataclass(frozen=True)
class Change:
    """A new version of a record, replacing the stored one of the same id.

    ``vector`` is None when the indexed text did not change. ``expected_version`` guards
    against lost updates: the write fails if the stored version differs.
    """

    record: MemoryRecord
    vector: Vector | None
    expected_version: int
    reason: str | None = None


class MemoryStore(ABC):
    """Durable storage of memory records. All methods are thread-safe."""

    capabilities = Capabilities()

    @abstractmethod
    def bind_embedding(self, info: EmbeddingInfo) -> None:
        """Record the embedding model on first use; refuse a different one afterwards
        (raises EmbedderMismatchError)."""

    @property
    @abstractmethod
    def embedding(self) -> EmbeddingInfo | None:
        """The model and dimension this store was built with, if any."""

    @abstractmethod
    def put(self, entries: Sequence[Entry]) -> None:
        """Insert new records atomically: all of the batch or none of it."""

    @abstractmethod
    def get(self, ids: Sequence[str], scope: Filter) -> list[MemoryRecord]:
        """The records with these ids that match ``scope``, in the order of ``ids``."""

    @abstractmethod
    def vectors(self, ids: Sequence[str], scope: Filter) -> dict[str, Vector]:
        """The stored vectors of these ids (for export)."""

    @abstractmethod
    def search(self, query: SearchQuery) -> builtins.list[Candidate]:
        """Candidates within ``query.filter`` (which must name a user): the nearest
        ``candidates`` by vector and the best ``candidates`` by keywords, each with its cosine
        similarity when the query has a vector (see ``Candidate``)."""

    @abstractmethod
    def update(self, changes: Sequence[Change]) -> None:
        """Replace records atomically, writing one history row per change
        (raises NotFoundError, ConflictError)."""

    @abstractmethod
    def delete(self, scope: Filter, reason: str | None = None) -> list[str]:
        """Delete every record matching ``scope``; history rows are kept. Returns the ids."""

    @abstractmethod
    def list(self, scope: Filter, limit: int = 100, cursor: str | None = None) -> Page:
        """Records matching ``scope`` oldest first, ``limit`` at a time."""

    @abstractmethod
    def count(self, scope: Filter) -> int:
        """How many records match ``scope``."""

    @abstractmethod
    def history(self, memory_id: str, scope: Filter) -> builtins.list[HistoryEntry]:
        """Every version of a memory, oldest first, including its deletion."""

    @abstractmethod
    def close(self) -> None:
        """Release connections and files."""

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
