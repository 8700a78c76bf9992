"""Repeats set apart (issue 18, docs/benchmarks.md "Multi-hop without an LLM (2026-11-27)"):
a remark said again on another day takes one place of a search's top k, so the other half
of an answer finds room."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from chatmem import LocalEmbedder, LongTermMemory, RankingConfig
from chatmem.ranking import Repeats
from chatmem.records import MemoryRecord, SearchResult
from chatmem.retrieval import rerank, search
from chatmem.stores import SQLiteStore
from chatmem.stores.base import Head

REMARK = "Work has been so busy, I really need a holiday."
JOB = "I started a new job as a nurse at the city hospital."
SAID = [REMARK, REMARK, REMARK, "I moved to Lisbon last month.", JOB, "We watched a film."]


def heard(repeats: Repeats, record: MemoryRecord) -> bool:
    """Whether ``record``'s speaker said its words in one ``repeats`` read before."""
    return repeats.heard(*Head.of(record)[:2])


def memory(text: str, speaker: str | None = "Ana") -> MemoryRecord:
    context = {"speaker": speaker} if speaker else None
    return MemoryRecord(user_id="ana", content={"raw": text}, context=context)


def test_a_repeat_is_the_same_speaker_saying_the_same_words() -> None:
    repeats = Repeats()
    assert not heard(repeats, memory(REMARK))
    # Case, punctuation and word order aside, the same words are a repeat...
    assert heard(repeats, memory("work has been SO busy - I really need a holiday!"))
    assert heard(repeats, memory("I really need a holiday, work has been so busy"))
    assert not heard(repeats, memory("It's fine.")) and heard(repeats, memory("it’s FINE"))
    # ...one word more or less is not, nor the same words said by someone else.
    assert not heard(repeats, memory("Work has been so busy, I really need a long holiday."))
    assert not heard(repeats, memory(REMARK, speaker="Assistant"))
    assert not heard(repeats, memory(REMARK, speaker=None))
    # A memory without words repeats nothing.
    assert not heard(repeats, memory("👍")) and not heard(repeats, memory("👍"))


@pytest.fixture
def chat(tmp_path: Path, embedder: LocalEmbedder) -> Any:
    def open_with(config: RankingConfig) -> LongTermMemory:
        path = tmp_path / f"{config.repeats_last}.db"
        long_term = LongTermMemory(SQLiteStore(path), embedder, ranking_config=config)
        start = datetime(2024, 3, 1, tzinfo=UTC)
        for n, text in enumerate(SAID):
            said = int((start + timedelta(days=9 * n)).timestamp() * 1000)
            message = {"role": "user", "name": "Ana", "content": text, "timestamp": said}
            long_term.add([message], user_id="ana", session_id=f"s{n}")
        return long_term

    return open_with


def asked(long_term: LongTermMemory, k: int) -> list[str]:
    # Threshold 0: the job and the move share no word with the question, and the remark's
    # word match would leave them under the default relevance cut.
    found = search(long_term, "Where do I work now?", user_id="ana", k=k, threshold=0.0)
    return [m.record.text for m in found]


def test_the_same_remark_on_three_days_takes_one_place_of_the_top_k(chat: Any) -> None:
    with chat(RankingConfig()) as long_term:
        found = asked(long_term, 3)
        assert found[0] == REMARK and found.count(REMARK) == 1
        assert JOB in found
        # With fewer others than k, a repeat still comes, after them.
        found = asked(long_term, 5)
        assert found.count(REMARK) == 2 and found[-1] == REMARK


def test_repeats_last_off_keeps_the_ranking_as_fused(chat: Any) -> None:
    with chat(RankingConfig(repeats_last=False)) as long_term:
        assert asked(long_term, 3) == [REMARK, REMARK, REMARK]


def test_the_library_search_sets_repeats_after_the_others_too(chat: Any) -> None:
    """LongTermMemory.search, as the benchmarks and library users call it, ranks as
    retrieval.search does."""
    with chat(RankingConfig()) as long_term:
        found = [
            m.record.text
            for m in long_term.search("Where do I work now?", user_id="ana", k=3, threshold=0.0)
        ]
        assert found[0] == REMARK and found.count(REMARK) == 1 and JOB in found
    with chat(RankingConfig(repeats_last=False)) as long_term:
        found = [
            m.record.text
            for m in long_term.search("Where do I work now?", user_id="ana", k=3, threshold=0.0)
        ]
        assert found == [REMARK, REMARK, REMARK]


def test_a_long_memory_is_never_a_repeat() -> None:
    """Reading the words of long memories cost a k = 50 search 3.9 ms; repeats are remarks."""
    from chatmem.ranking import REPEAT_CHARS, Repeats
    from chatmem.records import MemoryRecord

    repeats = Repeats()
    long_text = "word " * (REPEAT_CHARS // 5 + 1)
    short = "Haha, that's awesome!"
    for text, again in ((long_text, False), (short, True)):
        first = MemoryRecord(user_id="u", content={"raw": text})
        assert not heard(repeats, first)
        assert heard(repeats, MemoryRecord(user_id="u", content={"raw": text})) is again


def test_a_search_reads_at_most_repeats_read_times_k_records_to_set_repeats_aside(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    """Forty copies of one remark above two other memories: a k = 3 search reads
    ``REPEATS_READ`` x k records (12), not all forty, and fills its places with the repeats
    it passed, after the others."""
    from chatmem.long_term.choosing import REPEATS_READ

    store = SQLiteStore(tmp_path / "copies.db")
    read: list[int] = []
    get = store.get

    def counted(ids: Any, scope: Any) -> list[MemoryRecord]:
        read.append(len(ids))
        return get(ids, scope)

    store.get = counted  # type: ignore[method-assign]
    with LongTermMemory(store, embedder) as long_term:
        texts = [REMARK] * 40 + ["I moved to Lisbon last month.", "We watched a film."]
        start = datetime(2024, 3, 1, tzinfo=UTC)
        for n, text in enumerate(texts):
            said = int((start + timedelta(hours=n)).timestamp() * 1000)
            message = {"role": "user", "name": "Ana", "content": text, "timestamp": said}
            long_term.add([message], user_id="ana", session_id=f"s{n}")
        read.clear()
        found = long_term.search("I really need a holiday", user_id="ana", k=3, threshold=0.0)
        assert sum(read) <= REPEATS_READ * 3
        assert [m.record.text for m in found] == [REMARK, REMARK, REMARK]


def test_rerank_with_repeats_keeps_them_after_the_others_as_the_proxy_does() -> None:
    """``rerank(repeats=True)`` (the inspector's, the ``Retriever``'s rule) gives a remark
    said again the place after the others; without it the rerank is the score's alone."""
    now = datetime(2026, 6, 1, tzinfo=UTC)
    again = memory("work has been SO busy - I really need a holiday!")
    found = [
        SearchResult(record=memory(REMARK), score=0.9, vector_score=0.9, keyword_score=None),
        SearchResult(record=again, score=0.85, vector_score=0.85, keyword_score=None),
        SearchResult(record=memory(JOB), score=0.5, vector_score=0.5, keyword_score=None),
    ]
    plain = rerank(found, k=2, threshold=0.0, now=now)
    spread = rerank(found, k=2, threshold=0.0, now=now, repeats=True)
    assert [m.record.text for m in plain] == [REMARK, again.text]
    assert [m.record.text for m in spread] == [REMARK, JOB]
