"""The offline MiniLM and the OpenAI-compatible client against a real loopback server."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from chatmem import EmbeddingError, LocalEmbedder, LongTermMemory, OpenAIEmbedder
from chatmem.stores import SQLiteStore
from chatmem.testing import ScriptedOpenAIServer, hashed_vector


def test_local_embedder_meaning_and_shape(embedder: LocalEmbedder) -> None:
    vectors = embedder.embed(
        [
            "What's my budget for the trip?",
            "User's budget for the Hawaii trip is $10,000",
            "User deploys with docker push",
        ]
    )
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    related, unrelated = vectors[0] @ vectors[1], vectors[0] @ vectors[2]
    assert related > 0.6 and unrelated < 0.2


def test_local_embedder_ignores_padding_and_batching(embedder: LocalEmbedder) -> None:
    short, long = "tea", "a much longer sentence about green tea and mountains " * 3
    alone = embedder.embed([short])[0]
    batched = embedder.embed([long, short, long])[1]
    np.testing.assert_allclose(alone, batched, atol=1e-4)


def test_local_embedder_is_safe_across_threads(embedder: LocalEmbedder) -> None:
    texts = [f"sentence number {i} about hiking" for i in range(24)]
    expected = embedder.embed(texts)
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        results[i] = embedder.embed([texts[i], texts[(i + 1) % 24]])[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i in range(24):
        np.testing.assert_allclose(results[i], expected[i], atol=1e-4)


def test_a_missing_model_file_is_an_embedding_error(tmp_path: Path) -> None:
    broken = LocalEmbedder(model_path=tmp_path / "missing.onnx")
    with pytest.raises(EmbeddingError, match="cannot load"):
        broken.embed(["x", "y"])


def test_openai_embedder_against_a_loopback_server(tmp_path: Path) -> None:
    with ScriptedOpenAIServer(dimension=8) as server:
        embedder = OpenAIEmbedder(
            "test-embed", 8, base_url=server.base_url, api_key="k", batch_size=2
        )
        vectors = embedder.embed(["a", "b", "c"])
        np.testing.assert_allclose(vectors[2], hashed_vector("c", 8), atol=1e-6)
        assert [r["input"] for r in server.requests] == [["a", "b"], ["c"]]
        with LongTermMemory(SQLiteStore(tmp_path / "remote.db"), embedder) as memory:
            memory.add("the remote embedder works", user_id="u")
            assert memory.search("the remote embedder works", user_id="u")[0].score > 0.5
        embedder.close()


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (500, {"error": "boom"}, "500"),
        (200, {"data": [{"index": 0, "embedding": [1.0, 2.0]}]}, "shape"),
        (200, {"unexpected": True}, "data"),
    ],
)
def test_openai_embedder_failures_are_embedding_errors(
    status: int, body: object, message: str
) -> None:
    with ScriptedOpenAIServer(dimension=8) as server:
        server.fail_next(status, body)
        embedder = OpenAIEmbedder("m", 8, base_url=server.base_url)
        with pytest.raises(EmbeddingError, match=message):
            embedder.embed(["x"])
        embedder.close()
