"""A question about time favours the memories that say when (``RankingConfig.time_bonus``,
issue 18): "when was the charity tournament?" is answered by the turn that says it happened "last
weekend", not by the later turns that only talk about it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from chatmem import LongTermMemory, RankingConfig, ValidationError, ranking
from chatmem.embeddings import LocalEmbedder
from chatmem.ranking import SAYS_WHEN_KEPT, SPEAKER_READ, Scored, asks_when, favour, says_when
from chatmem.stores.sqlite import SQLiteStore
from tests.retrieval.conftest import CountingStore, store_chat


@pytest.mark.parametrize(
    ("query", "asks"),
    [
        ("When did John organize the charity tournament?", True),
        ("when was ana's birthday party", True),
        ("How long has Ana lived in Lisbon?", True),
        ("How many weeks passed between the two adoptions?", True),
        ("Which year did Tim move?", True),
        ("What did Caroline paint in May 2023?", True),
        ("Where was Calvin in August?", True),
        ("What did Jon do two years ago?", True),
        ("What may Caroline like?", False),
        ("May I ask what Ana likes?", False),
        ("Where does Ana live?", False),
        ("How many pets does Andrew have?", False),
    ],
)
def test_the_questions_that_ask_about_time(query: str, asks: bool) -> None:
    assert asks_when(query) is asks


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("I held a gaming tourney with my buddies last night.", True),
        ("Yesterday my partner and I got back from Rio.", True),
        ("Let's paint next Saturday!", True),
        ("I plan to return on July 20.", True),
        ("I adopted another pup a few weeks ago.", True),
        ("We moved in 2022, in June.", True),
        ("I recently started pottery.", True),
        ("We put together a tournament for our friends.", False),
        ("I may go, we'll see.", False),
        ("That's so cool, congrats!", False),
        # Only the first TIME_CHARS are read: a long text's start says when, or nothing does.
        ("YESTERDAY we " + "talked about the project. " * 100, True),
        ("We " + "talked about the project. " * 100 + "That was yesterday.", False),
    ],
)
def test_the_memories_that_say_when(text: str, says: bool) -> None:
    assert says_when(text) is says


def test_what_says_when_is_remembered_within_its_bound_and_answered_alike() -> None:
    """A search reads the same memories' starts again and again: their answers are kept,
    for at most ``SAYS_WHEN_KEPT`` starts."""
    said = [f"Note {i}: we met last night." for i in range(SAYS_WHEN_KEPT + 50)]
    silent = [f"Note {i}: we met." for i in range(50)]
    assert all(says_when(t) for t in said) and not any(says_when(t) for t in silent)
    kept = ranking._start_says_when.cache_info()
    assert kept.maxsize == SAYS_WHEN_KEPT and kept.currsize == SAYS_WHEN_KEPT
    # Asked again, the latest remembered and the first long forgotten, the same answers.
    assert not any(says_when(t) for t in silent) and all(says_when(t) for t in said[:50])
    assert ranking._start_says_when.cache_info().hits == kept.hits + len(silent)


def test_favour_adds_each_memorys_extra_and_keeps_the_order_of_ties() -> None:
    head = [Scored("a", 0.70, 0.7, None), Scored("b", 0.66, 0.6, None)]
    head += [Scored("c", 0.66, 0.6, None), Scored("d", 0.98, 0.9, 1.0)]
    out = favour(head, {"b": 0.05, "c": 0.05, "d": 0.05})
    assert [s.id for s in out] == ["d", "b", "c", "a"]
    assert [s.score for s in out] == pytest.approx([1.0, 0.71, 0.71, 0.70])
    assert favour(head, {}) == head


def test_a_time_bonus_outside_0_1_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError) as raised:
        RankingConfig(time_bonus=1.5)
    assert raised.value.field == "ranking.time_bonus"


# -- through LongTermMemory, on a real SQLite store with MiniLM --------------------------------

CHAT = [
    ("John", "Last weekend my friends and I organized a charity tournament."),
    ("James", "No way, what did you play?"),
    (
        "John",
        "Fortnite. John's charity tournament with friends raised a lot, organizing it was fun.",
    ),
    ("James", "Organizing charity tournaments is awesome, John!"),
]
WHEN = "when was the charity tournament?"
SAYS = CHAT[0][1]


@pytest.fixture
def chat(tmp_path: Path, embedder: LocalEmbedder) -> Path:
    return store_chat(tmp_path / "chat.db", embedder, CHAT, datetime(2023, 10, 2, 18, tzinfo=UTC))


def _first(path: Path, embedder: LocalEmbedder, query: str, bonus: float) -> list[str]:
    ranking = RankingConfig(time_bonus=bonus, late_weight=0.0)  # the time bonus alone
    with LongTermMemory(SQLiteStore(path), embedder, ranking_config=ranking) as memory:
        return [h.record.text for h in memory.search(query, user_id="u", k=3)]


def test_the_turn_that_says_when_comes_before_those_that_only_talk_about_it(
    chat: Path, embedder: LocalEmbedder
) -> None:
    without = _first(chat, embedder, WHEN, 0.0)
    with_bonus = _first(chat, embedder, WHEN, RankingConfig().time_bonus)
    # Without the bonus James's reply, which only talks about it, ranks first.
    assert without[0] == CHAT[3][1] and without[1] == SAYS
    assert with_bonus[:2] == [SAYS, CHAT[3][1]]


def test_a_question_not_about_time_is_ranked_as_without_the_bonus(
    chat: Path, embedder: LocalEmbedder
) -> None:
    asked = "What did John organize with his friends?"
    assert _first(chat, embedder, asked, RankingConfig().time_bonus) == _first(
        chat, embedder, asked, 0.0
    )


def test_a_time_question_naming_nobody_reads_the_head_once(
    chat: Path, embedder: LocalEmbedder
) -> None:
    store = CountingStore(chat)
    with LongTermMemory(store, embedder) as memory:
        memory.search("what did they play?", user_id="u", k=2)  # learns the speakers
        store.asked.clear()
        store.asked_heads.clear()
        memory.search("what did they play?", user_id="u", k=2)
        # The late rerank reads the head's texts once; only the two returned whole.
        assert [len(ids) for ids in store.asked] == [2]
        assert [len(ids) for ids in store.asked_heads] == [min(len(CHAT), SPEAKER_READ)]
        store.asked.clear()
        store.asked_heads.clear()
        found = memory.search(WHEN, user_id="u", k=2)
    # What the head says is read once; only the two records returned are read whole.
    assert [len(ids) for ids in store.asked_heads] == [min(len(CHAT), SPEAKER_READ)]
    assert [len(ids) for ids in store.asked] == [2]
    assert found[0].record.text == SAYS
