"""What ends by asking comes after what tells (``RankingConfig.question_penalty``, issue 18):
"Did you make anything in the pottery class yet?" shares every word of "what did they make
in pottery?" and says nothing of what was made; the turn that answers it should come first.
A question about time is left as it was: a turn that asks can say when."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from chatmem import LongTermMemory, RankingConfig, ValidationError
from chatmem.embeddings import LocalEmbedder
from chatmem.ranking import bonuses, ends_asking
from chatmem.stores.sqlite import SQLiteStore
from tests.retrieval.conftest import store_chat


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("Wow! What made you try pottery?", True),
        ("How long have you had them?  ", True),
        ("Did you see it? [shares a photo of a lake at sunrise]", True),
        ("I painted it last year. [shares a photo of a lake at sunrise]", False),
        ("Did you go? I did, and loved it.", False),  # asks inside, ends by telling
        ("Is it [the blue one]? No, the red.", False),
        ("I'm vegetarian.", False),
        ("", False),
        # Only the last characters are read: a long text's end asks, or it does not.
        ("We talked about the project. " * 100 + "Coming?", True),
    ],
)
def test_the_memories_that_end_by_asking(text: str, asks: bool) -> None:
    assert ends_asking(text) is asks


def test_the_penalty_is_taken_off_what_ends_by_asking_and_added_to_the_rest() -> None:
    said = {
        "asks": ("Ben", "Pottery sounds fun! What made you try it?"),
        "tells": ("Ana", "My sister got me into it, she makes bowls."),
        "both": ("Ana", "Did you go? I went last weekend."),
        "named-asks": ("Ana", "Do you like it?"),
    }
    config = RankingConfig(question_penalty=0.1, speaker_bonus=0.15)
    extra = bonuses(said, frozenset({"Ana"}), False, config)
    assert extra == pytest.approx({"asks": -0.1, "tells": 0.15, "both": 0.15, "named-asks": 0.05})
    assert bonuses(said, frozenset(), False, RankingConfig(question_penalty=0.0)) == {}
    # A question about time takes nothing off: "Wasn't your recital last Friday?" says when.
    assert bonuses(said, frozenset(), True, RankingConfig(time_bonus=0.0)) == {}


def test_a_penalty_outside_0_1_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError) as raised:
        RankingConfig(question_penalty=-0.1)
    assert raised.value.field == "ranking.question_penalty"


# -- through LongTermMemory, on a real SQLite store with MiniLM --------------------------------

CHAT = [
    ("Ana", "I finally signed up for a pottery class last week, it's so calming."),
    ("Ben", "Pottery sounds fun! What made you try a pottery class?"),
    ("Ana", "My sister got me into it, she makes bowls."),
    ("Ben", "Did you make anything in the pottery class yet? Was it hard?"),
    ("Ana", "I made a small blue bowl on my second day."),
]
ASKED = "what did they make in pottery?"  # names nobody: no speaker bonus moves anything


@pytest.fixture
def chat(tmp_path: Path, embedder: LocalEmbedder) -> Path:
    return store_chat(tmp_path / "chat.db", embedder, CHAT, datetime(2023, 5, 2, 18, tzinfo=UTC))


def _found(
    path: Path, embedder: LocalEmbedder, penalty: float, asked: str = ASKED
) -> dict[str, float]:
    ranking = RankingConfig(question_penalty=penalty, late_weight=0.0)  # the penalty alone
    with LongTermMemory(SQLiteStore(path), embedder, ranking_config=ranking) as memory:
        hits = memory.search(asked, user_id="u", k=len(CHAT), threshold=0.0)
        return {h.record.text: h.score for h in hits}


def test_the_turn_that_tells_comes_before_the_questions_that_share_its_words(
    chat: Path, embedder: LocalEmbedder
) -> None:
    without = _found(chat, embedder, 0.0)
    penalty = RankingConfig().question_penalty
    with_penalty = _found(chat, embedder, penalty)
    asking = {text for _, text in CHAT if ends_asking(text)}
    assert asking == {CHAT[1][1], CHAT[3][1]}
    # Without it Ben's question, which only repeats the words, ranks first.
    assert next(iter(without)) == CHAT[3][1]
    first_telling = next(text for text in with_penalty if text not in asking)
    assert next(iter(with_penalty)) == first_telling
    # Each question lost exactly the penalty as reported; what tells kept its score.
    for text, score in without.items():
        moved = score - penalty if text in asking else score
        assert with_penalty[text] == pytest.approx(moved, abs=1e-6)


def test_a_question_about_time_is_ranked_as_without_the_penalty(
    chat: Path, embedder: LocalEmbedder
) -> None:
    asked = "when did they make something in pottery?"
    with_penalty = _found(chat, embedder, RankingConfig().question_penalty, asked)
    assert list(with_penalty.items()) == list(_found(chat, embedder, 0.0, asked).items())
    assert any(ends_asking(text) for text in list(with_penalty)[:2])  # a question ranks high
