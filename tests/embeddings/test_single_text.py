"""One text at a time (a single add, a lone query) takes the local embedder's short path:
no padding to build, a plain mean to pool. Its vectors must be the very floats of the
general path, and its cache entries counted as ``caches.size_of`` counts them."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from chatmem import LocalEmbedder
from chatmem.caches import ENTRY_OVERHEAD, size_of
from chatmem.embeddings import local

TEXTS = [
    "hi",
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "Melanie: " + "We painted a sunrise by the lake, the kids loved it. " * 12,
]


def _hidden(embedder: LocalEmbedder, text: str) -> np.ndarray:
    """The model's token states for ``text`` alone (the fast copy, as memories use)."""
    encoding = embedder._model()[1].encode(text)
    ids = np.array([encoding.ids], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    feeds["token_type_ids"] = np.zeros_like(ids)
    session = embedder._documents()
    assert session is not None
    hidden: np.ndarray = session.run(None, feeds)[0]
    return hidden


def test_one_rows_plain_mean_is_the_masked_mean_to_the_bit(embedder: LocalEmbedder) -> None:
    for text in TEXTS:
        hidden = _hidden(embedder, text)
        alone = local._pooled(hidden, np.ones(hidden.shape[:2], dtype=np.int64))
        # The same states twice: the general path (weights from the mask), no padding.
        pair = np.concatenate([hidden, hidden])
        general = local._pooled(pair, np.ones(pair.shape[:2], dtype=np.int64))
        assert np.array_equal(alone[0], general[0]) and np.array_equal(alone[0], general[1])


def test_a_memory_embedded_alone_has_the_vector_of_the_short_path(
    embedder: LocalEmbedder,
) -> None:
    for text in TEXTS:
        hidden = _hidden(embedder, text)
        pair = np.concatenate([hidden, hidden])
        expected = local._pooled(pair, np.ones(pair.shape[:2], dtype=np.int64))[0]
        fresh = LocalEmbedder()
        fresh._loaded, fresh._query_session = embedder._model(), embedder._fast()
        assert np.array_equal(fresh.embed([text])[0], expected)


def test_cached_vectors_are_counted_as_size_of_counts_them(embedder: LocalEmbedder) -> None:
    fresh = LocalEmbedder()
    fresh._loaded, fresh._query_session = embedder._model(), embedder._fast()
    memory, query = fresh.embed([TEXTS[1]])[0], fresh.embed_query(TEXTS[2])
    expected = sum(
        size_of(key) + size_of(vector) + ENTRY_OVERHEAD
        for key, vector in (((False, TEXTS[1]), memory), ((True, TEXTS[2]), query))
    )
    assert fresh._cache.bytes == expected


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=1200))
def test_one_text_encoded_alone_is_the_batchs_encoding(embedder: LocalEmbedder, text: str) -> None:
    # A single text is encoded with ``encode`` (no thread pool); it must be what
    # ``encode_batch`` gives, truncated alike, for any text.
    tokenizer = embedder._model()[1]
    alone, batched = tokenizer.encode(text), tokenizer.encode_batch([text])[0]
    assert alone.ids == batched.ids and alone.tokens == batched.tokens
    assert len(alone.ids) <= local.MAX_TOKENS
