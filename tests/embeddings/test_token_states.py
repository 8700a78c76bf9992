"""The word-piece states the local embedder keeps for the late rerank
(``chatmem.embeddings.tokens``)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from chatmem.embeddings import LocalEmbedder
from chatmem.embeddings.tokens import (
    MAX_ROWS,
    STOPWORDS,
    States,
    digest,
    kept,
    late_scores,
    packed,
)


def _states(*rows: list[float]) -> States:
    found = packed(np.array(rows, dtype=np.float32), list(range(len(rows))))
    assert found is not None
    return found


def test_only_content_word_pieces_are_kept() -> None:
    pieces = ["[CLS]", "what", "did", "mel", "##anie", "paint", "?", "[SEP]"]
    assert [pieces[i] for i in kept(pieces)] == ["mel", "paint"]
    assert "what" in STOPWORDS and "paint" not in STOPWORDS
    # A text of stopwords alone keeps its real pieces: it still has something to match.
    only = ["[CLS]", "what", "is", "it", "[SEP]"]
    assert [only[i] for i in kept(only)] == ["what", "is", "it"]


def test_states_are_unit_rows_in_int8_close_to_the_model_s() -> None:
    rng = np.random.default_rng(7)
    hidden = rng.standard_normal((6, 384)).astype(np.float32) * 3
    states = packed(hidden, [1, 3, 4])
    assert states is not None
    assert states.rows.dtype == np.int8 and states.rows.shape == (3, 384)
    exact = hidden[[1, 3, 4]] / np.linalg.norm(hidden[[1, 3, 4]], axis=1, keepdims=True)
    cosines = (states.unpacked() * exact).sum(axis=1)
    assert cosines.min() > 0.999
    assert packed(hidden, []) is None


def test_a_text_scores_the_mean_of_each_query_piece_s_best_match() -> None:
    query = _states([1, 0, 0], [0, 1, 0])
    both = _states([0, 0, 1], [1, 0, 0], [0, 1, 0])  # each query piece matched exactly
    one = _states([1, 0, 0])  # the first matched, the second not at all
    half = _states([0.6, 0.8, 0])  # each matched in part
    scores = late_scores(query, [both, one, half])
    assert scores == pytest.approx([1.0, 0.5, 0.7], abs=0.01)
    assert len(late_scores(query, [])) == 0


def test_the_embedder_keeps_what_it_embeds_and_computes_what_it_lacks() -> None:
    embedder = LocalEmbedder(cache_size=0)
    memory, query = "Ana: I practised the cello for two hours", "which instrument does Ana play?"
    embedder.embed([memory])
    embedder.embed_queries([query, "which instrument does play?"])
    held = embedder.token_states.get(memory)
    asked = embedder.token_states.get(query)
    assert held is not None and asked is not None
    assert len(held.rows) == len(kept([p for p in _pieces(embedder, memory)]))
    # The cello matches the question's instrument better than a text about the weather.
    weather = "Ana: it rained all afternoon"
    assert embedder.token_states.get(weather) is None
    (computed,) = embedder.states_of([weather])
    assert computed is not None and embedder.token_states.get(weather) is computed
    cello, rain = late_scores(asked, [held, computed])
    assert cello > rain


def test_no_states_are_kept_with_no_budget() -> None:
    embedder = LocalEmbedder(token_bytes=0)
    embedder.embed(["Ana: I practised the cello"])
    assert len(embedder.token_states) == 0


def _pieces(embedder: LocalEmbedder, text: str) -> list[str]:
    tokens: list[str] = embedder._model()[1].encode(text).tokens
    return tokens


def test_the_states_held_stay_within_their_budget() -> None:
    embedder = LocalEmbedder(token_bytes=64 * 1024)
    texts = [f"Ana: on day {n} I practised the cello for {n} hours" for n in range(40)]
    embedder.embed(texts)
    held = embedder.token_states
    assert 0 < held.bytes <= held.max_bytes
    assert 0 < len(held) < len(texts)  # the oldest were let go for the newest
    assert held.get(texts[-1]) is not None and held.get(texts[0]) is None


def test_states_kept_as_bytes_come_back_only_for_their_own_text() -> None:
    rng = np.random.default_rng(3)
    states = packed(rng.standard_normal((5, 384)).astype(np.float32), [0, 2, 3])
    assert states is not None
    text = "Omar: I play the cello"
    blob = states.to_bytes(text)
    back = States.from_bytes(blob, text, 384)
    assert back is not None
    assert np.array_equal(back.rows, states.rows) and np.array_equal(back.scales, states.scales)
    # Another text (a memory edited since), another model's width, a cut blob, another
    # format: nothing.
    assert States.from_bytes(blob, text + "!", 384) is None
    assert States.from_bytes(blob, text, 768) is None
    assert States.from_bytes(blob[:-1], text, 384) is None
    assert States.from_bytes(blob[:5], text, 384) is None
    assert States.from_bytes(b"X9" + blob[2:], text, 384) is None


def _forged(count: int, width: int, scales: list[float], text: str) -> bytes:
    """A blob with a right header for ``text`` and whatever else."""
    header = struct.pack("<2s8sHH", b"S1", digest(text), count, width)
    return header + np.array(scales, dtype="<f4").tobytes() + bytes(count * width)


def test_bytes_that_are_not_whole_states_give_none_never_an_error() -> None:
    text = "Omar: hi"
    assert States.from_bytes(_forged(1, 384, [0.01], text), text, 384) is not None
    assert States.from_bytes(_forged(0, 384, [], text), text, 384) is None
    assert States.from_bytes(_forged(1, 0, [0.01], text), text, 0) is None
    assert States.from_bytes(_forged(1, 384, [float("nan")], text), text, 384) is None
    too_many = MAX_ROWS + 1
    assert States.from_bytes(_forged(too_many, 384, [0.01] * too_many, text), text, 384) is None
    assert States.from_bytes("not bytes", text, 384) is None  # type: ignore[arg-type]
