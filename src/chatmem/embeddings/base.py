"""The embedder interface. Stores record ``model`` and ``dimension`` and refuse others."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from chatmem.records import Vector


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of shape (len(texts), dimension)."""

    @property
    def model(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Vector:
        """Embed ``texts``: one normalised row per text."""
        ...


def embed_query(embedder: Embedder, text: str) -> Vector:
    """One search query's vector (1-D): the embedder's own ``embed_query`` when it has one
    (the local embedder runs queries on a faster model), else ``embed``."""
    own = getattr(embedder, "embed_query", None)
    if callable(own):
        vector: Vector = own(text)
        return vector
    row: Vector = embedder.embed([text])[0]
    return row


def embed_queries(embedder: Embedder, texts: Sequence[str]) -> list[Vector]:
    """Several search queries' vectors: in one call where the embedder can
    (``LocalEmbedder.embed_queries``, or ``embed`` of an embedder with no query model of
    its own: one request to an endpoint), else one ``embed_query`` each."""
    together = getattr(embedder, "embed_queries", None)
    if callable(together):
        return list(together(texts))
    if callable(getattr(embedder, "embed_query", None)):
        return [embed_query(embedder, text) for text in texts]
    return list(embedder.embed(list(texts))) if texts else []
