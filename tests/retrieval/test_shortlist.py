"""The retrieval's search reranks 4 x k candidates from their heads (``MemoryStore.heads``:
speaker, text, importance, times) and reads whole only the k it keeps; what it returns is
what reranking the whole records gives (issue 14: parsing every record reranked was the
largest single cost of the interpreter lock under 16 clients)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from chatmem import LongTermMemory
from chatmem.embeddings import LocalEmbedder
from chatmem.ranking import SPEAKER_READ, Repeats
from chatmem.records import Filter, MemoryRecord, MemoryType
from chatmem.retrieval.hybrid_search import CANDIDATE_FACTOR, search
from chatmem.retrieval.reranking import (
    DEFAULT_WEIGHTS,
    RELEVANCE_REFERENCE,
    RetrievedMemory,
    mark_updated,
    rank,
    superseded_at,
)
from chatmem.stores.base import Head
from tests.retrieval.conftest import CountingStore

NOW = datetime(2026, 6, 1, tzinfo=UTC)
GARDEN = [
    "I grow tomatoes and basil in the garden",
    "The garden needs watering every morning in July",
    "My tomatoes got blight last summer",
    "We planted an apple tree in the back garden",
    "The basil on the balcony is doing well",
    "I bought a new hose for the garden",
    "Slugs ate half of the lettuce",
    "The community garden meets on Saturdays",
]
REMARK = "the garden is lovely today"


def heard(repeats: Repeats, record: MemoryRecord) -> bool:
    """Whether ``record``'s speaker said its words in one ``repeats`` read before."""
    return repeats.heard(*Head.of(record)[:2])


def _records() -> list[MemoryRecord]:
    """Garden memories of user "u" of every age and importance, one superseded, one
    restricted, a remark said three times, a fact and the one that updates it."""
    out = []
    for n, text in enumerate(GARDEN * 7):  # more memories than a search reads heads of
        said = NOW - timedelta(days=17 * n + 1)
        out.append(
            MemoryRecord.model_validate(
                {
                    "user_id": "u",
                    "content": {"raw": f"{text} ({n})" if n >= len(GARDEN) else text},
                    "type": "episodic" if n % 3 else "semantic",
                    "metadata": {"importance": (n % 5) / 4},
                    "context": {"speaker": "Ana" if n % 2 else "Ben"},
                    "time": {"created_at": said, "updated_at": said},
                }
            )
        )
    for n in range(3):
        said = NOW - timedelta(days=n + 2)
        out.append(
            MemoryRecord.model_validate(
                {
                    "user_id": "u",
                    "content": {"raw": REMARK},
                    "context": {"speaker": "Ana"},
                    "time": {"created_at": said, "updated_at": said},
                }
            )
        )
    old = MemoryRecord.model_validate(
        {
            "user_id": "u",
            "content": {"raw": "The garden plot is on Elm Street"},
            "type": "semantic",
            "time": {"valid_from": NOW - timedelta(days=400), "valid_to": NOW - timedelta(days=30)},
        }
    )
    new = MemoryRecord.model_validate(
        {
            "user_id": "u",
            "content": {"raw": "The garden plot moved to Oak Street"},
            "type": "semantic",
            "metadata": {"importance": 0.9},
            "time": {"valid_from": NOW - timedelta(days=30)},
            "relations": [{"type": "updates", "target_id": old.id}],
        }
    )
    secret = MemoryRecord.model_validate(
        {
            "user_id": "u",
            "content": {"raw": "The garden budget is 300 euros"},
            "access_control": {"allowed_roles": ["hr"]},
        }
    )
    return [*out, old, new, secret]


@pytest.fixture(scope="module")
def garden(tmp_path_factory: pytest.TempPathFactory, embedder: LocalEmbedder) -> Path:
    path = tmp_path_factory.mktemp("shortlist") / "garden.db"
    with LongTermMemory(CountingStore(path), embedder) as memory:
        memory.add_records(_records())
    return path


def _reranked_whole(
    memory: LongTermMemory,
    query: str,
    k: int,
    threshold: float,
    include_superseded: bool,
    narrow: Filter,
) -> list[RetrievedMemory]:
    """The rerank over whole records: what the retrieval's search returned before it read
    heads (every candidate parsed, ``rank`` on the records, repeats told from records)."""
    found = memory.search(
        query,
        user_id="u",
        k=k * CANDIDATE_FACTOR,
        threshold=threshold * RELEVANCE_REFERENCE,
        filter=narrow,
        include_superseded=True,
    )
    if not include_superseded:
        found = [r for r in found if superseded_at(r.record, NOW) is None]
    ranked = rank(found, threshold=threshold, weights=DEFAULT_WEIGHTS, now=NOW)
    repeats = Repeats()
    kept = [m for m in ranked if not heard(repeats, m.record)][:k]
    kept += [m for m in ranked if m not in kept][: k - len(kept)]
    return mark_updated(kept, NOW)


CASES = [
    ("what grows in my garden?", 5, 0.6, False, {}),
    ("what grows in my garden?", 2, 0.0, True, {}),
    ("where is the garden plot?", 3, 0.3, False, {}),
    ("where is the garden plot?", 3, 0.3, True, {}),
    ("garden", 10, 0.0, False, {"reader_roles": frozenset()}),
    ("garden budget", 4, 0.2, False, {"reader_roles": frozenset({"hr"})}),
    ("tomatoes", 4, 0.0, False, {"types": frozenset({MemoryType.SEMANTIC})}),
    ("is the garden lovely?", 5, 0.0, False, {}),
]


@pytest.mark.parametrize(("query", "k", "threshold", "include_superseded", "narrow"), CASES)
def test_the_rerank_from_heads_returns_what_whole_records_give(
    garden: Path,
    embedder: LocalEmbedder,
    query: str,
    k: int,
    threshold: float,
    include_superseded: bool,
    narrow: dict[str, frozenset[str]],
) -> None:
    with LongTermMemory(CountingStore(garden), embedder) as memory:
        expected = _reranked_whole(
            memory, query, k, threshold, include_superseded, Filter(**narrow)
        )
        found = search(
            memory,
            query,
            user_id="u",
            k=k,
            threshold=threshold,
            now=NOW,
            include_superseded=include_superseded,
            types=narrow.get("types"),  # type: ignore[arg-type]
            roles=narrow.get("reader_roles"),
        )
    assert expected, "every case finds something"
    assert found == expected


def test_only_the_records_kept_are_read_whole(garden: Path, embedder: LocalEmbedder) -> None:
    store = CountingStore(garden)
    with LongTermMemory(store, embedder) as memory:
        search(memory, "what grows in my garden?", user_id="u", k=2, threshold=0.0, now=NOW)
        store.asked.clear()
        store.asked_heads.clear()
        found = search(memory, "what grows in my garden?", user_id="u", k=2, threshold=0.0, now=NOW)
    assert len(found) == 2
    # The rerank saw 4 x k candidates (and a few more, past the repeats) by their heads;
    # one read of whole records: the two returned.
    assert sum(len(ids) for ids in store.asked_heads) >= 2 * CANDIDATE_FACTOR
    assert store.asked == [[m.record.id for m in found]]


def test_a_search_whose_results_hold_the_whole_head_reads_it_once_whole(
    garden: Path, embedder: LocalEmbedder
) -> None:
    """With k of at least ``SPEAKER_READ``, the head favouring reads is the results' own:
    it is read whole once, not as heads and then again as records."""
    store = CountingStore(garden)
    with LongTermMemory(store, embedder) as memory:
        # A fresh process favours its first search of the user: it learns the speakers.
        found = memory.search("what grows in my garden?", user_id="u", k=SPEAKER_READ)
    assert len(found) == SPEAKER_READ
    assert store.asked_heads == []
    # The head first, whole; then only what repeats and a superseded fact left to fill.
    assert len(store.asked[0]) == SPEAKER_READ
    read = [memory_id for ids in store.asked for memory_id in ids]
    assert len(read) == len(set(read)) and {r.record.id for r in found} <= set(read)
