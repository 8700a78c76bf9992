"""An answer is scored with the question before it (issue 18): "I've had them for 3 years
now" says nothing of the turtles that "How long have you had them?" named, so the SQLite
store's vector half gives a chat turn that answers a question at least the cosine of the two
turns together (``vector_cache.Replies``, ``search.answered``); the PostgreSQL store does
the same for its candidates (``postgres.search.answer_pairs``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from chatmem import LongTermMemory, RankingConfig
from chatmem.embeddings import LocalEmbedder
from chatmem.records import Filter
from chatmem.stores import MemoryStore
from chatmem.stores.sqlite import SQLiteStore
from chatmem.stores.sqlite import search as halves
from chatmem.stores.vector_cache import (
    ANSWER_MIN_COSINE,
    Replies,
    Row,
    SessionNumbers,
    Turns,
    UserVectors,
    VectorCache,
    _replies,
)
from tests.pg_server import drop_schema
from tests.stores.conftest import schema_for
from tests.stores.helpers import Snapshot

#: Opens the same store each time it is called.
Opener = Callable[[], MemoryStore]

CHAT = [
    ("Joanna", "I went hiking in the mountains last weekend, the views were amazing."),
    ("Nate", "That sounds great! I stayed home and played video games all weekend."),
    ("Joanna", "It took me three years to finish my first screenplay, but it was worth it."),
    ("Nate", "My little cat brings me so much joy every single morning."),
    ("Joanna", "Your turtles are so cute in that photo! How long have you had them?"),
    ("Nate", "I've had them for 3 years now and they bring me tons of joy!"),
    ("Joanna", "I've been working at the bookshop for five years now."),
    ("Nate", "I want to adopt a dog someday, maybe a beagle."),
]
QUESTION, ANSWER = CHAT[4][1], CHAT[5][1]
ASKED = "For how long has Nate had his turtles?"


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    m = rng.normal(size=(n, 8)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def _turns(sessions: list[str | None], asks: list[bool]) -> Turns:
    rows = [(n, b"", f"m{n}", s, a) for n, (s, a) in enumerate(zip(sessions, asks, strict=True))]
    return Turns.of(rows, SessionNumbers())


def test_an_answer_is_the_next_turn_of_its_session_after_one_that_asks() -> None:
    matrix = np.tile(np.eye(8, dtype=np.float32)[0], (7, 1))  # all alike: no subject change
    # s1 asks at 0 and 2; s2 asks at 1, is interleaved, and its next turn is 4; row 5 is
    # not a chat turn (no session) and so answers nothing; s1's row 6 follows row 3.
    turns = _turns(["s1", "s2", "s1", "s1", "s2", None, "s1"], [1, 1, 1, 0, 0, 1, 0])
    replies = _replies(matrix, turns)
    pairs = zip(replies.answer.tolist(), replies.question.tolist(), strict=True)
    assert sorted(pairs) == [
        (2, 0),
        (3, 2),
        (4, 1),
    ]
    assert replies.norm == pytest.approx([2.0, 2.0, 2.0])  # |a + q| of two equal unit vectors


def test_a_turn_that_changes_the_subject_answers_nothing() -> None:
    question = np.eye(8, dtype=np.float32)[0]
    close = np.float32([0.6, 0.8, 0, 0, 0, 0, 0, 0])  # cosine 0.6 with the question
    away = np.float32([0.1, np.sqrt(0.99), 0, 0, 0, 0, 0, 0])  # cosine 0.1
    assert 0.1 < ANSWER_MIN_COSINE < 0.6
    turns = _turns(["s", "s", "t", "t"], [True, False, True, False])
    replies = _replies(np.stack([question, close, question, away]), turns)
    assert replies.answer.tolist() == [1]
    assert replies.norm == pytest.approx([np.sqrt(2 + 2 * 0.6)])


def test_the_lift_is_the_cosine_of_the_two_together_and_never_lowers_a_score() -> None:
    rng = np.random.default_rng(5)
    matrix = _unit(rng, 6)
    matrix[1] = (matrix[0] + matrix[1]) / np.linalg.norm(matrix[0] + matrix[1])
    turns = _turns(["s"] * 6, [True, False, False, False, False, False])
    vectors = UserVectors(np.arange(1, 7), matrix, (6, 0, 0), [f"m{n}" for n in range(6)], turns)
    query = _unit(rng, 1)[0]
    plain = matrix @ query
    lifted = halves.answered(vectors, plain, np.arange(6))
    together = (matrix[0] + matrix[1]) / np.linalg.norm(matrix[0] + matrix[1])
    assert lifted[1] == pytest.approx(max(plain[1], float(together @ query)), abs=1e-6)
    assert np.all(lifted >= plain)
    assert np.array_equal(np.delete(lifted, 1), np.delete(plain, 1))
    # A question the filter does not admit lifts nothing.
    assert np.array_equal(halves.answered(vectors, plain, np.arange(1, 6)), plain)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """The store the chat is kept in: a SQLite file, or a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "chat.db")
    from chatmem.stores.postgres import PostgresStore

    uri, schema = str(request.getfixturevalue("postgres_uri")), schema_for(tmp_path)
    request.addfinalizer(lambda: drop_schema(uri, schema))
    return lambda: PostgresStore(uri, prefix=schema, pool_size=2)


def _store(
    opener: Opener, embedder: LocalEmbedder, roles: dict[int, list[str]] | None = None
) -> Opener:
    start = datetime(2024, 5, 1, 9, tzinfo=UTC)
    with LongTermMemory(opener(), embedder) as memory:
        for minute, (speaker, text) in enumerate(CHAT):
            memory.add(
                [{"role": "user", "name": speaker, "content": text, "timestamp": start}],
                user_id="u",
                session_id="s1",
                allowed_roles=(roles or {}).get(minute),
            )
            start += timedelta(minutes=1)
    return opener


def _opened(opener: Opener, embedder: LocalEmbedder) -> LongTermMemory:
    """The store with the question always embedded as asked (no speaker's name left out),
    so a memory's own cosine is that of ``embed_query(ASKED)``."""
    return LongTermMemory(opener(), embedder, ranking_config=RankingConfig(name_free_share=0.0))


def _searched(
    memory: LongTermMemory, roles: frozenset[str] | None = None
) -> dict[str, tuple[int, float, float]]:
    """Each memory found for ``ASKED`` as (rank, vector score, its own cosine), by text."""
    hits = memory.search(ASKED, user_id="u", k=len(CHAT), filter=Filter(reader_roles=roles))
    stored = memory.store.vectors([h.record.id for h in hits], Filter(user_id="u"))
    query = memory.embedder.embed_query(ASKED)
    found: dict[str, tuple[int, float, float]] = {}
    for rank, hit in enumerate(hits):
        assert hit.vector_score is not None
        own = float(stored[hit.record.id] @ query)
        found[hit.record.content.raw] = (rank, hit.vector_score, own)
    return found


def test_the_answer_to_a_question_scores_with_it(opener: Opener, embedder: LocalEmbedder) -> None:
    with _opened(_store(opener, embedder), embedder) as memory:
        found = _searched(memory)
    rank, score, own = found[ANSWER]
    assert score > own + 0.1  # 0.60 against 0.41 on the machines measured
    assert rank <= found[QUESTION][0] + 1
    # Only answers move: every other memory scores its own cosine.
    for text, (_, other, alone) in found.items():
        if text != ANSWER:
            assert other == pytest.approx(alone, abs=1e-5)


def test_a_question_a_reader_may_not_see_lifts_nothing_for_them(
    opener: Opener, embedder: LocalEmbedder
) -> None:
    stored = _store(opener, embedder, roles={4: ["hr"]})  # the question only
    with _opened(stored, embedder) as memory:
        unseen = _searched(memory, frozenset())
        seen = _searched(memory, frozenset({"hr"}))
    assert QUESTION not in unseen and QUESTION in seen
    _, score, own = unseen[ANSWER]
    assert score == pytest.approx(own, abs=1e-5)
    assert seen[ANSWER][1] > own + 0.1


def test_a_deleted_question_no_longer_lifts_its_answer(
    opener: Opener, embedder: LocalEmbedder
) -> None:
    with _opened(_store(opener, embedder), embedder) as memory:
        question = next(
            r for r in memory.list(Filter(user_id="u")).records if r.content.raw == QUESTION
        )
        _, lifted, own = _searched(memory)[ANSWER]  # the user's vectors cached
        memory.delete(question.id, user_id="u")
        # The cached vectors move on past the delete; the answer's turn before is now "My
        # little cat brings me so much joy", which asks nothing.
        _, score, _ = _searched(memory)[ANSWER]
    assert lifted > own + 0.1
    assert score == pytest.approx(own, abs=1e-5)


def _pairs(replies: Replies) -> set[tuple[int, int, float]]:
    return {
        (a, q, round(n, 5))
        for a, q, n in zip(
            replies.answer.tolist(), replies.question.tolist(), replies.norm.tolist(), strict=True
        )
    }


def test_replies_follow_appended_turns_as_a_whole_computation_finds_them() -> None:
    """A chat's next turns add their own pairs to the replies already found (the search
    after each write computes only those); the result is what a fresh computation finds."""
    rng = np.random.default_rng(3)
    base = _unit(rng, 1)[0]
    rows: list[Row] = []
    for n in range(40):  # alike vectors (cosine > 0.2), two sessions, some asking
        vector = base + 0.3 * _unit(rng, 1)[0]
        vector /= np.linalg.norm(vector)
        rows.append(
            (n + 1, vector.astype(np.float32).tobytes(), f"m{n}", "ab"[n % 3 == 0], n % 2 == 0)
        )
    cache = VectorCache()
    first = cache.vectors("u", (25, 0, 0), 8, Snapshot(rows[:25]))
    assert len(first.replies().answer)  # computed, so the next version builds on it
    later = cache.vectors("u", (40, 0, 0), 8, Snapshot(rows))
    assert later.turns.sessions.tolist() == first.turns.sessions.tolist() + [
        first.turns.numbers.of("ab"[n % 3 == 0]) for n in range(25, 40)
    ]
    assert later._answers is not None  # carried over, not computed again
    assert _pairs(later.replies()) == _pairs(_replies(later.matrix, later.turns))
    assert any(a >= 25 for a, _, _ in _pairs(later.replies()))


def test_replies_are_kept_when_only_fields_moved() -> None:
    """Usage is written after every injection (an ``edited`` move, no vector changed): the
    replies found stay, not computed again on the next search."""
    rng = np.random.default_rng(4)
    rows: list[Row] = [
        (n + 1, _unit(rng, 1)[0].tobytes(), f"m{n}", "s", n % 2 == 0) for n in range(10)
    ]
    cache = VectorCache()
    first = cache.vectors("u", (10, 0, 0), 8, Snapshot(rows))
    replies = first.replies()
    later = cache.vectors("u", (10, 0, 1), 8, Snapshot(rows))
    assert later is not first and later.versions == (10, 0, 1)
    assert later._answers is replies
