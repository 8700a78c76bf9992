"""The late rerank (``chatmem.long_term.late``): among a search's first memories, what
matches the query's word pieces one by one better than the others gains on its fused score
(``RankingConfig.late_weight``); what lacks word-piece states keeps its place and gets them
in the background."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from chatmem import LongTermMemory, RankingConfig
from chatmem.embeddings import LocalEmbedder
from chatmem.embeddings.tokens import States, TokenStates, late_scores, packed
from chatmem.errors import StoreError, ValidationError
from chatmem.extraction.base import Fact
from chatmem.long_term.late import LateRerank
from chatmem.long_term.write_policy import WritePolicy
from chatmem.messages import SessionKey
from chatmem.ranking import SPEAKER_READ, Scored
from chatmem.records import Filter, MemoryRecord
from chatmem.stores import SQLiteStore
from chatmem.stores.base import Head
from chatmem.text import said_text
from tests.retrieval.conftest import OMAR_CHAT as CHAT

QUESTION = "Which instruments does Omar play?"
SAID = datetime(2024, 5, 1, tzinfo=UTC)
SCOPE = Filter(tenant_id="default", user_id="u")


class _Held:
    """An embedder of hand-made states (the ``KeepsStates`` protocol), which records the
    texts it was asked to compute."""

    def __init__(self, states: dict[str, States]) -> None:
        self.token_states = TokenStates()
        for text, found in states.items():
            self.token_states.put(text, found)
        self.asked: list[str] = []

    def states_of(self, texts: Sequence[str]) -> list[States | None]:
        self.asked.extend(texts)
        return [self.token_states.get(t) for t in texts]


def _states(*rows: list[float]) -> States:
    found = packed(np.array(rows, dtype=np.float32), list(range(len(rows))))
    assert found is not None
    return found


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    """A store that holds none of the memories a test ranks: no states are kept."""
    return SQLiteStore(tmp_path / "empty.db")


def _reader(texts: dict[str, str]) -> Callable[[list[str]], dict[str, Head]]:
    def read(ids: list[str]) -> dict[str, Head]:
        return {i: Head(None, texts[i], 0.5, SAID, None, None, False) for i in ids if i in texts}

    return read


def test_what_matches_the_query_word_by_word_gains_on_its_score(store: SQLiteStore) -> None:
    held = _Held(
        {
            "query": _states([1, 0, 0], [0, 1, 0]),
            "both words": _states([1, 0, 0], [0, 1, 0]),  # match 1.0
            "one word": _states([1, 0, 0], [0, 0, 1]),  # match 0.5
            "no word": _states([0, 0, 1]),  # match 0.0
        }
    )
    ranked = [
        Scored("a", 0.58, 0.6, None),
        Scored("b", 0.55, 0.5, None),
        Scored("c", 0.52, 0.5, None),
        Scored("missing", 0.50, 0.5, None),
    ]
    read = _reader({"a": "no word", "b": "one word", "c": "both words", "missing": "unheld"})
    out = LateRerank(held, store).reranked(ranked, "query", SCOPE, read, 0.2)
    # The mean match of the three held is 0.5: +0.1 for "both words", -0.1 for "no word".
    assert [(s.id, round(s.score, 4)) for s in out] == [
        ("c", 0.62),
        ("b", 0.55),
        ("missing", 0.50),
        ("a", 0.48),
    ]
    # The one without states kept its score and was handed to the background to compute.
    deadline = time.monotonic() + 5
    while "unheld" not in held.asked and time.monotonic() < deadline:
        time.sleep(0.01)
    assert held.asked == ["unheld"]


def test_nothing_moves_without_the_query_s_states_or_with_no_weight(store: SQLiteStore) -> None:
    held = _Held({"query": _states([1, 0]), "x": _states([1, 0]), "y": _states([0, 1])})
    ranked = [Scored("y", 0.6, 0.6, None), Scored("x", 0.59, 0.5, None)]
    read = _reader({"x": "x", "y": "y"})
    rerank = LateRerank(held, store)
    assert rerank.reranked(ranked, "query", SCOPE, read, 0.0) == ranked
    assert rerank.reranked(ranked, "another query", SCOPE, read, 0.2) == ranked
    assert [s.id for s in rerank.reranked(ranked, "query", SCOPE, read, 0.2)] == ["x", "y"]


def test_only_the_first_memories_are_reordered(store: SQLiteStore) -> None:
    texts = {f"m{n}": "far" for n in range(SPEAKER_READ + 5)}
    texts[f"m{SPEAKER_READ + 1}"] = "near"
    held = _Held({"query": _states([1, 0]), "far": _states([0, 1]), "near": _states([1, 0])})
    ranked = [Scored(f"m{n}", 0.9 - n / 100, 0.5, None) for n in range(SPEAKER_READ + 5)]
    out = LateRerank(held, store).reranked(ranked, "query", SCOPE, _reader(texts), 1.0)
    # Every one of the head matches alike: none moves; the near one past it is not read.
    assert [s.id for s in out] == [s.id for s in ranked]


def _memory(path: Path, embedder: LocalEmbedder, weight: float) -> LongTermMemory:
    memory = LongTermMemory(
        SQLiteStore(path), embedder, ranking_config=RankingConfig(late_weight=weight)
    )
    return memory


@pytest.fixture
def omar(tmp_path: Path) -> tuple[Path, LocalEmbedder]:
    embedder = LocalEmbedder()
    path = tmp_path / "omar.db"
    with _memory(path, embedder, 0.2) as memory:
        for speaker, text in CHAT:
            memory.add(
                [{"role": "user", "name": speaker, "content": text}], user_id="u", session_id="s"
            )
    return path, embedder


#: A search's results as text and score.
Found = list[tuple[str, float]]


def _search(path: Path, embedder: LocalEmbedder, weight: float, question: str = QUESTION) -> Found:
    with _memory(path, embedder, weight) as memory:
        found = memory.search(question, user_id="u", k=len(CHAT), threshold=0.0)
    return [(f.record.text, f.score) for f in found]


def test_a_search_adds_each_memory_s_match_above_the_mean_to_its_score(
    omar: tuple[Path, LocalEmbedder],
) -> None:
    path, embedder = omar
    plain = dict(_search(path, embedder, 0.0))
    late = _search(path, embedder, 0.2)
    speakers = dict((text, speaker) for speaker, text in CHAT)
    states = [embedder.token_states.get(said_text(speakers[t], t)) for t, _ in late]
    asked = embedder.token_states.get(QUESTION)
    assert asked is not None and all(s is not None for s in states)
    matches = late_scores(asked, [s for s in states if s is not None])
    expected = [
        min(max(plain[t] + 0.2 * (m - matches.mean()), 0.0), 1.0)
        for (t, _), m in zip(late, matches, strict=True)
    ]
    assert [score for _, score in late] == pytest.approx(expected, abs=1e-5)
    assert [score for _, score in late] == sorted((score for _, score in late), reverse=True)
    # The word-by-word match moved scores (whether it swaps a near tie here depends on
    # the CPU's int8 kernels: on an AMD EPYC without AVX-512 this question's order holds).
    assert max(abs(score - plain[t]) for t, score in late) > 0.02


def _restarted(embedder: LocalEmbedder, question: str) -> None:
    """As after a restart: the question's states are held, no memory's are."""
    kept = embedder.token_states
    embedder.token_states = TokenStates()
    embedder.token_states.put(question, kept.get(question))


def _kept_states(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM memory_word_states").fetchone()[0])


#: A question that names nobody: a process's first search of the user and its later ones
#: embed it alike (a named speaker's name is left out once the process knows it).
NAMELESS = "what music does he make?"


def _late_and_plain(path: Path, embedder: LocalEmbedder) -> tuple[Found, Found]:
    """``NAMELESS`` searched with the rerank, then without; the two orders differ."""
    late = _search(path, embedder, 0.2, NAMELESS)
    plain = _search(path, embedder, 0.0, NAMELESS)
    assert [t for t, _ in late] != [t for t, _ in plain]
    return late, plain


def test_a_new_process_ranks_as_the_one_that_embedded_the_memories(
    omar: tuple[Path, LocalEmbedder],
) -> None:
    path, embedder = omar
    question = NAMELESS
    late, _ = _late_and_plain(path, embedder)
    assert _kept_states(path) == len(CHAT)
    _restarted(embedder, question)
    # The first search of the new process reads the states kept beside the memories.
    first = _search(path, embedder, 0.2, question)
    assert [t for t, _ in first] == [t for t, _ in late]
    assert [score for _, score in first] == pytest.approx([score for _, score in late])


def test_memories_without_states_keep_their_places_until_computed(
    omar: tuple[Path, LocalEmbedder],
) -> None:
    path, embedder = omar
    question = NAMELESS
    late, plain = _late_and_plain(path, embedder)
    # As a store written before states were kept: none is held, none kept.
    _restarted(embedder, question)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM memory_word_states")
    texts = [said_text(speaker, text) for speaker, text in CHAT]
    with _memory(path, embedder, 0.2) as memory:  # one process, as a service is

        def search() -> list[tuple[str, float]]:
            found = memory.search(question, user_id="u", k=len(CHAT), threshold=0.0)
            return [(f.record.text, f.score) for f in found]

        assert search() == plain
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all(embedder.token_states.get(t) is not None for t in texts):
                break
            time.sleep(0.05)
        again = search()
        assert [t for t, _ in again] == [t for t, _ in late]
        assert [score for _, score in again] == pytest.approx([score for _, score in late])
    # What was computed is kept (closing wrote what the background had not yet).
    assert _kept_states(path) == len(CHAT)


def test_states_go_with_their_memory_and_an_edit_replaces_them(
    omar: tuple[Path, LocalEmbedder],
) -> None:
    path, embedder = omar
    with _memory(path, embedder, 0.2) as memory:
        found = {r.text: r for r in memory.list(SCOPE).records}
        guitar = found["Bought new strings for my old guitar today."]
        memory.update(guitar.id, "Sold my old guitar today.", user_id="u")
    with _memory(path, embedder, 0.2) as memory:
        kept = memory.store.word_states([guitar.id], SCOPE)
        assert States.from_bytes(kept[guitar.id], "Omar: Sold my old guitar today.", 384)
        assert States.from_bytes(kept[guitar.id], "Omar: " + guitar.text, 384) is None
        memory.delete(guitar.id, user_id="u")
        assert memory.store.word_states([guitar.id], SCOPE) == {}
        assert _kept_states(path) == len(CHAT) - 1
        memory.delete_all(SCOPE)
    assert _kept_states(path) == 0


def test_the_weight_is_checked() -> None:
    for wrong in (-0.1, 1.5):
        with pytest.raises(ValidationError) as raised:
            RankingConfig(late_weight=wrong)
        assert raised.value.field == "ranking.late_weight"


class _Slow(_Held):
    """States computed one text a call, each taking a while."""

    def states_of(self, texts: Sequence[str]) -> list[States | None]:
        time.sleep(0.05)
        return super().states_of(texts)


def test_closing_stops_the_background_after_the_text_in_hand(store: SQLiteStore) -> None:
    held = _Slow({"query": _states([1, 0]), "x": _states([1, 0]), "y": _states([0, 1])})
    texts = {"x": "x", "y": "y"} | {f"m{n}": f"unheld {n}" for n in range(40)}
    ranked = [Scored(i, 0.5, 0.5, None) for i in texts]
    rerank = LateRerank(held, store)
    rerank.reranked(ranked, "query", SCOPE, _reader(texts), 0.2)
    deadline = time.monotonic() + 5
    while not held.asked and time.monotonic() < deadline:
        time.sleep(0.005)
    began = time.monotonic()
    rerank.close()
    # 40 texts of 50 ms each would take 2 s; close waited for the one in hand.
    assert time.monotonic() - began < 0.5
    assert 1 <= len(held.asked) < 40
    rerank.reranked(ranked, "query", SCOPE, _reader(texts), 0.2)  # closed: nothing more is computed
    assert len(held.asked) < 40


def _busy_when_handed_over(
    path: Path, count: int
) -> tuple[SQLiteStore, list[MemoryRecord], _Slow, dict[str, str], LateRerank]:
    """A rerank whose background is computing ``count`` unheld texts when the states of the
    store's memories (none kept yet) are handed over to it."""
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM memory_word_states")
    store = SQLiteStore(path)
    records = store.list(SCOPE).records
    said = {said_text(r.context.speaker if r.context else None, r.text) for r in records}
    held = _Slow({"query": _states([1, 0])} | {t: _states([0, 1]) for t in said})
    texts = {f"m{n}": f"unheld {n}" for n in range(count)}
    rerank = LateRerank(held, store)
    rerank.reranked([Scored(i, 0.5, 0.5, None) for i in texts], "query", SCOPE, _reader(texts), 0.2)
    rerank.stored(records)
    return store, records, held, texts, rerank


def test_closing_writes_the_states_not_yet_kept(omar: tuple[Path, LocalEmbedder]) -> None:
    store, records, held, _, rerank = _busy_when_handed_over(omar[0], 40)
    rerank.close()
    kept = store.word_states([r.id for r in records], SCOPE)
    store.close()
    assert len(kept) == len(records) == len(CHAT)
    assert len(held.asked) < 40


def test_waiting_returns_once_what_was_started_is_computed_and_kept(
    omar: tuple[Path, LocalEmbedder],
) -> None:
    store, records, held, texts, rerank = _busy_when_handed_over(omar[0], 8)
    rerank.wait()
    assert sorted(held.asked) == sorted(texts.values())  # all 8 computed, none twice
    assert len(store.word_states([r.id for r in records], SCOPE)) == len(CHAT)
    rerank.close()
    store.close()


def test_without_the_rerank_no_states_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "plain.db"
    with _memory(path, LocalEmbedder(), 0.0) as memory:
        memory.add("I play the cello.", user_id="u")
    assert _kept_states(path) == 0


def test_facts_the_write_policy_stores_or_updates_keep_their_states(tmp_path: Path) -> None:
    path = tmp_path / "facts.db"
    key = SessionKey("default", "u", "s1")
    said = {"importance": 0.7, "confidence": 0.8, "subject": "budget"}
    facts = [
        Fact(text="User's budget is $10,000", structured={"amount": 10000}, **said),
        # Same subject, same value: the policy updates the memory's text (a new vector).
        Fact(text="User's budget is 10,000 dollars", structured={"amount": 10000}, **said),
        # Same subject, another value: a new memory supersedes it.
        Fact(text="User's budget is $12,000", structured={"amount": 12000}, **said),
    ]
    with _memory(path, LocalEmbedder(), 0.2) as memory:
        for one in facts:
            WritePolicy().apply(memory, key, [one])
        records = memory.list(SCOPE).records
    assert sorted(r.text for r in records) == sorted([facts[1].text, facts[2].text])
    with _memory(path, LocalEmbedder(), 0.2) as memory:
        kept = memory.store.word_states([r.id for r in records], SCOPE)
    # Each fact's states are of its text as it stands now, whichever write made it.
    assert all(States.from_bytes(kept[r.id], r.text, 384) is not None for r in records)


class _Unreadable(SQLiteStore):
    """A store whose kept states cannot be read (a database gone away)."""

    def word_states(self, ids: Sequence[str], scope: Filter) -> dict[str, bytes]:
        raise StoreError("the database went away")


def test_a_store_that_fails_to_give_states_leaves_the_search_standing(tmp_path: Path) -> None:
    held = _Held({"query": _states([1, 0]), "x": _states([1, 0]), "y": _states([0, 1])})
    ranked = [Scored("y", 0.6, 0.6, None), Scored("x", 0.59, 0.5, None)]
    texts = {"x": "x", "y": "y", "z": "unheld"}
    rerank = LateRerank(held, _Unreadable(tmp_path / "gone.db"))
    out = rerank.reranked(
        [*ranked, Scored("z", 0.1, 0.1, None)], "query", SCOPE, _reader(texts), 0.2
    )
    rerank.close()
    assert [s.id for s in out] == ["x", "y", "z"]
