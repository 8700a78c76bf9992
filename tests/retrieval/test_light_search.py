"""Searches under load (issue 14): a search that starts while others wait for a search
thread is light (``search_pool``'s ``pressed``): no late rerank, and a query that names a
speaker embedded once, so memory stays on for more requests; one that starts with none
waiting ranks in full."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from chatmem import LongTermMemory, RankingConfig, Retriever
from chatmem.embeddings import LocalEmbedder
from chatmem.records import Candidate
from chatmem.retrieval import Retrieval
from chatmem.retrieval.search_pool import SearchPool
from chatmem.stores import SQLiteStore
from chatmem.stores.base import SearchQuery
from tests.retrieval.conftest import OMAR_CHAT as CHAT

QUESTION = "what music does he make?"
#: A question that names a speaker: a full search embeds it with and without the name.
NAMING = "What instruments does Omar play?"


def _wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_search_learns_whether_others_wait_behind_it() -> None:
    pool = SearchPool(1)
    release = threading.Event()
    seen: dict[str, bool] = {}

    def work(name: str) -> Callable[[bool], None]:
        def run(pressed: bool) -> None:
            seen[name] = pressed
            if name == "first":
                release.wait(10)

        return run

    def submit(name: str) -> threading.Thread:
        thread = threading.Thread(
            target=lambda: pool.run(work(name), budget_ms=20_000, queue_ms=20_000)
        )
        thread.start()
        return thread

    try:
        threads = [submit("first")]
        _wait_for(lambda: "first" in seen)
        threads += [submit("second")]
        _wait_for(lambda: pool.in_flight == 2)
        threads += [submit("third")]
        _wait_for(lambda: pool.in_flight == 3)
        assert pool.pressed
        release.set()
        for thread in threads:
            thread.join(10)
    finally:
        pool.close()
    # The first started alone; the second while the third waited; the third alone again.
    assert seen == {"first": False, "second": True, "third": False}
    assert not pool.pressed


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.fixture
def chat_store(tmp_path: Path, embedder: LocalEmbedder) -> Path:
    path = tmp_path / "omar.db"
    with _memory(SQLiteStore(path), embedder, 0.2) as memory:
        for speaker, text in CHAT:
            memory.add(
                [{"role": "user", "name": speaker, "content": text}], user_id="u", session_id="s"
            )
    return path


def _memory(
    store: SQLiteStore, embedder: LocalEmbedder, weight: float, share: float = 0.85
) -> LongTermMemory:
    config = RankingConfig(late_weight=weight, name_free_share=share)
    return LongTermMemory(store, embedder, ranking_config=config)


def _ranked(
    memory: LongTermMemory, late: bool = True, light: bool = False, question: str = QUESTION
) -> list[tuple[str, float]]:
    found = memory.search(question, user_id="u", k=len(CHAT), threshold=0.0, late=late, light=light)
    return [(f.record.text, round(f.score, 6)) for f in found]


def test_a_search_without_the_late_rerank_ranks_as_with_no_weight(
    chat_store: Path, embedder: LocalEmbedder
) -> None:
    with _memory(SQLiteStore(chat_store), embedder, 0.2) as memory:
        late, light = _ranked(memory), _ranked(memory, late=False)
    with _memory(SQLiteStore(chat_store), embedder, 0.0) as memory:
        plain = _ranked(memory)
    assert light == plain
    assert late != plain  # the rerank moves something here


def test_a_light_search_embeds_a_query_that_names_a_speaker_once(
    chat_store: Path, embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Light: no late rerank and the query's vector from its name-free form alone, as
    ``name_free_share=1`` makes it; a full search's vector mixes in the query as asked."""
    # Each memory's first search learns the user's speakers (``Speakers``): a warm-up.
    with _memory(SQLiteStore(chat_store), embedder, 0.2) as memory:
        _ranked(memory, question="who plays?")
        full = _ranked(memory, late=False, question=NAMING)
    with _memory(SQLiteStore(chat_store), embedder, 0.0, share=1.0) as memory:
        _ranked(memory, question="who plays?")
        name_free = _ranked(memory, question=NAMING)
    texts: list[str] = []
    embed = embedder.embed_queries

    def counted(queries: list[str]) -> object:
        texts.extend(queries)
        return embed(queries)

    with _memory(SQLiteStore(chat_store), embedder, 0.2) as memory:
        _ranked(memory, question="who plays?")
        monkeypatch.setattr(embedder, "embed_queries", counted)
        light = _ranked(memory, light=True, question=NAMING + " ")  # not in the cache
    assert len(texts) == 1 and "Omar" not in texts[0]  # one text, the name left out
    assert light == name_free
    assert light != full  # the full search's vector is another here


class _HeldStore(SQLiteStore):
    """The real store, whose first search waits until ``release`` is set."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.entered, self.release = threading.Event(), threading.Event()

    def search(self, query: SearchQuery) -> list[Candidate]:
        if not self.entered.is_set():
            self.entered.set()
            self.release.wait(20)
        return super().search(query)


def _retrieve(retriever: Retriever) -> Retrieval:
    return retriever.retrieve([{"role": "user", "content": QUESTION}], user_id="u", k=3)


def _scores(found: Retrieval) -> list[tuple[str, float]]:
    return [(m.record.text, round(m.score, 6)) for m in found.results]


def _three_at_once(held: _HeldStore, memory: LongTermMemory) -> dict[str, Retrieval]:
    """Three retrievals through one search thread, the first held in the store until the
    other two are in flight (so the second starts while the third waits), then one alone."""
    got: dict[str, Retrieval] = {}

    def run(name: str) -> threading.Thread:
        thread = threading.Thread(target=lambda: got.update({name: _retrieve(retriever)}))
        thread.start()
        return thread

    with Retriever(memory, search_workers=1, search_budget_ms=20_000, threshold=0) as retriever:
        threads = [run("first")]
        assert held.entered.wait(10)
        threads.append(run("second"))
        _wait_for(lambda: retriever._in_flight == 2)
        threads.append(run("third"))
        _wait_for(lambda: retriever._in_flight == 3)
        assert retriever._searches.pressed
        held.release.set()
        for thread in threads:
            thread.join(20)
        got["alone"] = _retrieve(retriever)
    assert all(found.degraded is None and found.results for found in got.values())
    return got


def test_the_retriever_searches_lightly_only_while_others_wait(
    chat_store: Path, embedder: LocalEmbedder
) -> None:
    held = _HeldStore(chat_store)
    with _memory(held, embedder, 0.2) as memory:
        got = _three_at_once(held, memory)
    plain_memory = _memory(SQLiteStore(chat_store), embedder, 0.0)
    with plain_memory, Retriever(plain_memory, threshold=0) as plain_retriever:
        plain = _retrieve(plain_retriever)
    assert [got[n].light for n in ("first", "second", "third", "alone")] == [
        False,
        True,
        False,
        False,
    ]
    # The light one ranked as a search without the rerank; the others with it.
    assert _scores(got["second"]) == _scores(plain)
    assert _scores(got["first"]) == _scores(got["third"]) == _scores(got["alone"])
    assert _scores(got["first"]) != _scores(plain)


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_no_search_is_light_where_there_is_nothing_to_leave_out(
    chat_store: Path, embedder: LocalEmbedder, share: float
) -> None:
    held = _HeldStore(chat_store)
    with _memory(held, embedder, 0.0, share) as memory:
        assert not memory.reranks_late and not memory.lightens
        got = _three_at_once(held, memory)
    # The second started while the third waited, but with late_weight 0 there was no
    # rerank to leave out, and with a name-free share of 0 or 1 one text to embed: none
    # says it searched lightly.
    assert not any(found.light for found in got.values())


def test_a_light_search_is_said_where_only_the_second_embedding_is_left_out(
    chat_store: Path, embedder: LocalEmbedder
) -> None:
    held = _HeldStore(chat_store)
    with _memory(held, embedder, 0.0) as memory:
        assert not memory.reranks_late and memory.lightens
        got = _three_at_once(held, memory)
    assert [got[n].light for n in ("first", "second", "third", "alone")] == [
        False,
        True,
        False,
        False,
    ]
