"""A memory said by someone the query names comes first (``RankingConfig.speaker_bonus``,
issue 18): "What kind of art does Caroline make?" asks what Caroline said, not what was said
to her about art."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatmem import LongTermMemory, RankingConfig
from chatmem.embeddings import LocalEmbedder
from chatmem.ranking import SPEAKER_READ, Scored, favour_named, named, said_by
from chatmem.stores.sqlite import SQLiteStore
from tests.retrieval.conftest import CountingStore, store_chat


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("What kind of art does Caroline make?", {"Caroline"}),
        ("Caroline's paintings: what are they of?", {"Caroline"}),
        ("Which city have both Jean and John visited?", {"Jean", "John"}),
        ("What did Melanie’s kids like?", {"Melanie"}),
        ("where do I work?", set()),
        ("What's my sister's name?", set()),
        ("Did Zoë go to Łódź?", {"Zoë", "Łódź"}),
    ],
)
def test_the_words_that_may_name_someone(query: str, names: set[str]) -> None:
    assert named(query) == names


def test_a_speaker_is_named_by_any_word_of_their_name() -> None:
    assert said_by("Mary Ann Lee", frozenset({"Mary"}))
    assert said_by("Mary Ann Lee", frozenset({"Lee"}))
    assert not said_by("Maryanne", frozenset({"Mary"}))
    assert not said_by(None, frozenset({"Mary"}))
    assert not said_by("", frozenset({"Mary"}))


def test_the_named_speakers_memories_gain_the_bonus_and_the_head_is_sorted_again() -> None:
    head = [Scored("to-her", 0.70, 0.7, None), Scored("hers", 0.65, 0.6, 0.1)]
    head += [Scored("far", 0.20, 0.2, None), Scored("top", 0.95, 0.9, 1.0)]
    speakers = {"to-her": "Melanie", "hers": "Caroline", "far": "Caroline", "top": "Caroline"}
    out = favour_named(head, speakers, frozenset({"Caroline"}), 0.1)
    assert [s.id for s in out] == ["top", "hers", "to-her", "far"]
    # Reported scores stay within [0, 1]; the parts are kept as they were.
    assert [s.score for s in out] == pytest.approx([1.0, 0.75, 0.70, 0.30])
    assert out[1].vector_score == 0.6 and out[1].keyword_score == 0.1
    assert favour_named(head, speakers, frozenset(), 0.1) == head
    assert favour_named(head, speakers, frozenset({"Caroline"}), 0.0) == head


scores = st.floats(min_value=0.0, max_value=1.0)


@given(st.lists(st.tuples(scores, st.booleans()), max_size=30), scores)
def test_favouring_keeps_every_memory_moves_none_of_the_others_and_stays_in_0_1(
    parts: list[tuple[float, bool]], bonus: float
) -> None:
    head = sorted(
        (Scored(f"m{i}", score, score, None) for i, (score, _) in enumerate(parts)),
        key=lambda s: (-s.score, s.id),
    )
    speakers = {f"m{i}": "Ana" if hers else "Ben" for i, (_, hers) in enumerate(parts)}
    out = favour_named(head, speakers, frozenset({"Ana"}), bonus)
    assert sorted(s.id for s in out) == sorted(s.id for s in head)
    assert all(0.0 <= s.score <= 1.0 for s in out)
    # Neither group is reordered within itself: only Ana's memories move, all by the same.
    for who in ("Ana", "Ben"):
        mine = [s.id for s in head if speakers[s.id] == who]
        assert [s.id for s in out if speakers[s.id] == who] == mine


# -- through LongTermMemory, on a real SQLite store with MiniLM --------------------------------

CHAT = [
    ("Caroline", "I just finished a watercolour of the lake at dawn, my third this month."),
    ("Melanie", "Caroline, I love your art, it is so inspiring to me!"),
    ("Caroline", "Thanks! Mostly landscapes, and I sketch portraits of friends sometimes."),
    ("Melanie", "My kids made art at school today, lots of finger painting and glitter."),
    ("Caroline", "I'm thinking of going to the beach this weekend with the dogs."),
    ("Melanie", "We went camping last week, the kids loved the campfire stories."),
]
QUESTION = "What kind of art does Caroline make?"


@pytest.fixture
def chat(tmp_path: Path, embedder: LocalEmbedder) -> tuple[Path, LocalEmbedder]:
    start = datetime(2024, 5, 1, 9, tzinfo=UTC)
    return store_chat(tmp_path / "chat.db", embedder, CHAT, start), embedder


def _ranked(
    path: Path, embedder: LocalEmbedder, bonus: float, query: str
) -> list[tuple[str, str, float]]:
    """Every memory of the chat, best first, as (id, speaker, score), in a fresh process."""
    ranking = RankingConfig(speaker_bonus=bonus)
    with LongTermMemory(SQLiteStore(path), embedder, ranking_config=ranking) as memory:
        hits = memory.search(query, user_id="u", k=len(CHAT))
    return [
        (h.record.id, h.record.context.speaker or "" if h.record.context else "", h.score)
        for h in hits
    ]


def _gains(path: Path, embedder: LocalEmbedder, query: str, bonus: float = 0.15) -> None:
    """What the named speaker said gains ``bonus`` and nothing else moves by itself; the
    first memory is Caroline's, and a remark of Melanie's that ranked above a memory of
    Caroline's now ranks below it. (Which remark flips depends on the CPU's int8 kernels:
    an AVX-512 machine ranks Melanie's "I love your art" second, an AVX2 one third.)"""
    plain = _ranked(path, embedder, 0.0, query)
    favoured = _ranked(path, embedder, bonus, query)
    assert len(plain) == len(favoured) == len(CHAT)
    before = {memory_id: score for memory_id, _, score in plain}
    for memory_id, speaker, score in favoured:
        gained = bonus if speaker == "Caroline" else 0.0
        assert score == pytest.approx(min(1.0, before[memory_id] + gained), abs=1e-6)
    assert favoured[0][1] == "Caroline"
    was = {memory_id: n for n, (memory_id, _, _) in enumerate(plain)}
    now = {memory_id: n for n, (memory_id, _, _) in enumerate(favoured)}
    flipped = [
        (hers, theirs)
        for hers, speaker, _ in plain
        if speaker == "Caroline"
        for theirs, other, _ in plain
        if other == "Melanie" and was[theirs] < was[hers] and now[theirs] > now[hers]
    ]
    assert flipped  # without the bonus, a remark of Melanie's ranked above one of Caroline's


def test_what_the_named_speaker_said_comes_before_what_was_said_to_them(
    chat: tuple[Path, LocalEmbedder],
) -> None:
    path, embedder = chat
    # Without the bonus, what Melanie said to Caroline about art ranks above Caroline's
    # own memories; with it, Caroline's come first.
    _gains(path, embedder, QUESTION)


def test_a_query_naming_nobody_reads_only_the_records_it_returns(
    chat: tuple[Path, LocalEmbedder],
) -> None:
    path, embedder = chat
    store = CountingStore(path)
    with LongTermMemory(store, embedder) as memory:
        # A process's first search of a user reads the head's speakers once, to learn them;
        # only the two records returned are read whole.
        memory.search("what kind of art do they make?", user_id="u", k=2)
        assert [len(ids) for ids in store.asked_heads] == [min(len(CHAT), SPEAKER_READ)]
        assert [len(ids) for ids in store.asked] == [2]
        store.asked.clear()
        store.asked_heads.clear()
        memory.search("what kind of art do they make?", user_id="u", k=2)
        # The late rerank reads the head's texts, once: nothing more is read twice.
        assert [len(ids) for ids in store.asked] == [2]
        assert [len(ids) for ids in store.asked_heads] == [min(len(CHAT), SPEAKER_READ)]
        store.asked.clear()
        store.asked_heads.clear()
        found = memory.search(QUESTION, user_id="u", k=2)
    # Who said the head's memories is read once (all six here, under SPEAKER_READ), for
    # the bonus and the late rerank alike; only the two records returned are read whole.
    assert [len(ids) for ids in store.asked_heads] == [min(len(CHAT), SPEAKER_READ)]
    assert [len(ids) for ids in store.asked] == [2]
    assert found[0].record.context and found[0].record.context.speaker == "Caroline"


def test_without_the_late_rerank_and_the_question_penalty_a_query_naming_nobody_reads_no_head(
    chat: tuple[Path, LocalEmbedder],
) -> None:
    path, embedder = chat
    store = CountingStore(path)
    ranking = RankingConfig(late_weight=0, question_penalty=0)
    with LongTermMemory(store, embedder, ranking_config=ranking) as memory:
        memory.search("what kind of art do they make?", user_id="u", k=2)  # learns speakers
        store.asked.clear()
        store.asked_heads.clear()
        memory.search("what kind of art do they make?", user_id="u", k=2)
    assert [len(ids) for ids in store.asked] == [2] and store.asked_heads == []


def test_a_lowercase_name_counts_from_a_fresh_processs_first_search(
    chat: tuple[Path, LocalEmbedder],
) -> None:
    """ "caroline" is a speaker's name only once the process has seen her memories: its
    first search of the user reads the head to learn the user's speakers."""
    path, embedder = chat
    _gains(path, embedder, QUESTION.lower())
