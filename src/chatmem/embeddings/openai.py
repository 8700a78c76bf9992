"""Embeddings from any OpenAI-compatible ``/v1/embeddings`` endpoint (vLLM, Ollama, OpenAI)."""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import numpy as np

from chatmem import checks
from chatmem.errors import EmbeddingError
from chatmem.records import Vector


class OpenAIEmbedder:
    """Calls ``POST {base_url}/embeddings``. The dimension must be declared up front, so a
    store can refuse a mismatch at start-up without a network call."""

    def __init__(
        self,
        model: str,
        dimension: int,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        timeout: float = 30.0,
        batch_size: int = 128,
        client: httpx.Client | None = None,
    ) -> None:
        dimension = checks.whole(dimension, "dimension", low=1)
        batch_size = checks.whole(batch_size, "batch_size", low=1)
        timeout = checks.number(timeout, "timeout", positive=True)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout
        )
        self._model = model
        self._dimension = dimension
        self._batch_size = batch_size

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str]) -> Vector:
        """Embed ``texts`` with the endpoint, ``batch_size`` at a time."""
        chunks = [
            self._embed_batch(list(texts[i : i + self._batch_size]))
            for i in range(0, len(texts), self._batch_size)
        ]
        if not chunks:
            return np.empty((0, self._dimension), dtype=np.float32)
        return np.concatenate(chunks)

    def _embed_batch(self, texts: list[str]) -> Vector:
        try:
            response = self._client.post("/embeddings", json={"model": self._model, "input": texts})
            response.raise_for_status()
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = np.asarray([item["embedding"] for item in data], dtype=np.float32)
        except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
            raise EmbeddingError(f"embedding endpoint failed: {exc}") from exc
        if vectors.shape != (len(texts), self._dimension):
            raise EmbeddingError(
                f"endpoint returned vectors of shape {vectors.shape}, "
                f"expected ({len(texts)}, {self._dimension})"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        result: Vector = vectors / np.maximum(norms, 1e-12)
        return result

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()
