"""The inspector's search explains what the proxy would do: the memories it marks kept and
injected are the ones ``Retriever.retrieve`` injects, a remark said again after the others
(``RankingConfig.repeats_last``) included."""

from __future__ import annotations

from pathlib import Path

from chatmem import LocalEmbedder, LongTermMemory
from chatmem.records import MemoryRecord
from chatmem.retrieval import Retriever
from chatmem.server.auth import Reader
from chatmem.server.ui.explain import SearchForm, explain
from chatmem.stores import SQLiteStore

SAID = [
    "Work has been so busy, I really need a holiday!",
    "work has been SO busy - I really need a holiday",
    "I really need a holiday, work has been so busy",
    "We booked the holiday flights to Crete for June",
    "My holiday budget is 900 euros",
]


def test_the_inspector_keeps_what_the_proxy_injects(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    with LongTermMemory(SQLiteStore(tmp_path / "m.db"), embedder) as memory:
        memory.add_records(
            [
                MemoryRecord(user_id="ana", content={"raw": text}, context={"speaker": "Ana"})
                for text in SAID
            ]
        )
        retriever = Retriever(memory, k=2, threshold=0.0, hops=0)
        try:
            asked = "has work been so busy that I need a holiday?"
            injected = retriever.retrieve([{"role": "user", "content": asked}], user_id="ana")
            shown = explain(
                retriever,
                Reader("default", None),
                "ana",
                SearchForm(q=asked, k="2", threshold="0", force="1"),
            )
        finally:
            retriever.close()
    proxy = [m.record.id for m in injected.results]
    assert len(proxy) == 2 and len({m.record.text[:8].lower() for m in injected.results}) == 2
    assert injected.degraded is None
    assert {h.result.record.id for h in shown.hits if h.kept} == set(proxy)
    assert shown.injected_ids == set(proxy)
