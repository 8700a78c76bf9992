"""The fast model: derived from the packaged MiniLM on this machine, cached, close to the
exact vectors; it embeds queries, and memories unless ``document_model="exact"``."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from chatmem import EmbeddingError, LocalEmbedder, ValidationError
from chatmem.embeddings import embed_query, quantize
from chatmem.testing import hashed_vector

QUESTIONS = [
    "What's my budget for the Hawaii trip in May?",
    "When did Caroline go to the LGBTQ support group?",
    "hi",
    "Which city does my sister Anna live in, and when is she visiting?",
]


def test_fast_queries_are_close_to_exact_but_come_from_another_model(
    embedder: LocalEmbedder,
) -> None:
    exact = LocalEmbedder(query_model="exact", document_model="exact")
    for question in QUESTIONS:
        fast, precise = embedder.embed_query(question), exact.embed_query(question)
        assert fast.shape == (384,) and fast.dtype == np.float32
        assert abs(float(np.linalg.norm(fast)) - 1.0) < 1e-5
        np.testing.assert_allclose(precise, exact.embed([question])[0], atol=1e-5)
        # Close to the exact vector, but not it: the int8 copy really ran.
        assert 0.97 < float(fast @ precise) < 0.99999


def test_fast_queries_rank_memories_as_exact_ones_do(embedder: LocalEmbedder) -> None:
    memories = embedder.embed(
        [
            "User's budget for the Hawaii trip is $4,000",
            "User's flight to Hawaii leaves on Friday",
            "User deploys with docker push",
            "User is allergic to shellfish",
        ]
    )
    exact = LocalEmbedder(query_model="exact", document_model="exact")
    for question, best in [(QUESTIONS[0], 0), ("Am I allergic to anything?", 3)]:
        fast_scores = memories @ embedder.embed_query(question)
        exact_scores = memories @ exact.embed_query(question)
        assert int(np.argmax(fast_scores)) == int(np.argmax(exact_scores)) == best
        assert np.max(np.abs(fast_scores - exact_scores)) < 0.05


def test_the_derived_model_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATMEM_CACHE_DIR", str(tmp_path / "cache"))
    first = LocalEmbedder().embed_query(QUESTIONS[0])
    cached = list((tmp_path / "cache").glob("minilm-*.onnx"))
    assert len(cached) == 1 and quantize.RECIPE in cached[0].name
    assert not list((tmp_path / "cache").glob("*.partial"))

    def no_derivation(_: Path) -> bytes:
        raise AssertionError("derived again although it was cached")

    monkeypatch.setattr(quantize, "_derive", no_derivation)
    again = LocalEmbedder().embed_query(QUESTIONS[0])
    np.testing.assert_array_equal(first, again)


def test_queries_fall_back_to_the_exact_model_when_it_cannot_be_derived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CHATMEM_CACHE_DIR", str(tmp_path / "empty"))

    def broken(_: Path) -> bytes:
        raise EmbeddingError("cannot derive the fast query model: no onnx here")

    monkeypatch.setattr(quantize, "_derive", broken)
    with caplog.at_level(logging.WARNING, logger="chatmem.embeddings"):
        vector = LocalEmbedder().embed_query(QUESTIONS[0])
    exact = LocalEmbedder(query_model="exact").embed_query(QUESTIONS[0])
    np.testing.assert_allclose(vector, exact, atol=1e-6)
    assert "the packaged embedding model is used throughout" in caplog.text
    assert "no onnx here" in caplog.text


def test_an_unknown_query_model_is_refused() -> None:
    with pytest.raises(ValidationError, match="'fast' or 'exact'") as raised:
        LocalEmbedder(query_model="turbo")  # type: ignore[arg-type]
    assert raised.value.field == "query_model"
    with pytest.raises(ValidationError, match="'fast' or 'exact'") as raised:
        LocalEmbedder(document_model="turbo")  # type: ignore[arg-type]
    assert raised.value.field == "document_model"


MEMORIES = [
    "User's budget for the Hawaii trip is $4,000",
    "[8 May 2023] Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "ok",
]


def test_memories_come_from_the_fast_model_unless_exact_is_asked(
    embedder: LocalEmbedder,
) -> None:
    exact = LocalEmbedder(document_model="exact")
    alone = np.stack([embedder.embed([text])[0] for text in MEMORIES])
    together = embedder.embed(MEMORIES)
    precise = exact.embed(MEMORIES)
    # One model for a single memory (the one-thread session) and a batch (all cores):
    # a memory's vector does not depend on how it was added.
    np.testing.assert_allclose(alone, together, atol=1e-4)
    # The fast copy, as for queries; close to the packaged model's vector, not equal to it.
    for text, vector in zip(MEMORIES, alone, strict=True):
        np.testing.assert_allclose(vector, embedder.embed_query(text), atol=1e-5)
    similarity = np.sum(alone * precise, axis=1)
    assert np.all(similarity > 0.97) and np.all(similarity < 0.99999)
    np.testing.assert_allclose(precise[0], exact.embed([MEMORIES[0]])[0], atol=1e-5)


class _PlainEmbedder:
    model, dimension = "hashed", 8

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.stack([hashed_vector(t, 8) for t in texts])


def test_embed_query_uses_embed_for_embedders_without_a_query_path() -> None:
    vector = embed_query(_PlainEmbedder(), "hello")
    np.testing.assert_array_equal(vector, hashed_vector("hello", 8))
