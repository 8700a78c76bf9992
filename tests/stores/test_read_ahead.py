"""Records read while the query vector is computed (``SearchQuery.read_ahead``): the SQLite
store, waiting on the vector after FTS5's keyword half, parses the records of the keyword
half's best within the query's filter, as ``get`` would; a search then reads fewer records
after, and returns exactly what it returned without."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from chatmem import LocalEmbedder, LongTermMemory
from chatmem.records import Entry, Filter, MemoryRecord, Vector
from chatmem.stores import SearchQuery, SQLiteStore
from tests.stores.conftest import EMBEDDING
from tests.stores.helpers import record, unit_vector

DIM = EMBEDDING.dimension


def _store(tmp_path: Path) -> tuple[SQLiteStore, list[MemoryRecord]]:
    store = SQLiteStore(tmp_path / "m.db")
    store.bind_embedding(EMBEDDING)
    records = [
        record("t", "u", "the pottery class by the river"),
        record("t", "u", "pottery for the team", access_control={"allowed_roles": ["hr"]}),
        record("t", "u", "a pottery wheel, bought used"),
        record("t", "u", "the train times to Porto"),
        record("t", "v", "pottery is what v likes"),
    ]
    store.put([Entry(r, unit_vector(DIM, i + 1)) for i, r in enumerate(records)])
    return store, records


def _query(
    scope: Filter, vector: Vector, *, waiting: bool, ahead: dict[str, MemoryRecord]
) -> SearchQuery:
    return SearchQuery(
        filter=scope,
        text="pottery",
        candidates=10,
        embed=lambda: vector,
        prefetch=lambda: None,
        ready=lambda: not waiting,
        read_ahead=5,
        ahead=ahead,
    )


def test_the_keyword_halfs_best_are_read_within_the_filter_while_the_vector_is_awaited(
    tmp_path: Path,
) -> None:
    store, records = _store(tmp_path)
    reader = Filter(tenant_id="t", user_id="u", reader_roles=frozenset({"sales"}))
    ahead: dict[str, MemoryRecord] = {}
    found = store.search(_query(reader, unit_vector(DIM, 1), waiting=True, ahead=ahead))
    # The two pottery memories the reader may see; not hr's, not v's, not the train.
    assert set(ahead) == {records[0].id, records[2].id}
    assert ahead[records[0].id] == store.get([records[0].id], reader)[0]
    idle: dict[str, MemoryRecord] = {}
    again = store.search(_query(reader, unit_vector(DIM, 1), waiting=False, ahead=idle))
    assert idle == {} and again == found  # a vector already there: nothing to wait through
    store.close()


def test_a_search_that_waits_for_its_vector_reads_fewer_records_after_and_finds_the_same(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    with LongTermMemory(SQLiteStore(tmp_path / "l.db"), embedder) as memory:
        for text in ("Ana booked the pottery class", "Ben fixed the bike", "pottery on Friday"):
            memory.add(text, user_id="u")
        asked: list[list[str]] = []
        store = memory.store
        get = store.get
        store.get = lambda ids, scope: asked.append(list(ids)) or get(ids, scope)  # type: ignore[method-assign]
        plain = [(h.record, h.score) for h in memory.search("pottery class", user_id="u", k=50)]
        asked.clear()  # (the vector may or may not have been there in time)
        embed = memory._embed_queries
        slow = threading.Event()

        def slower(texts: list[str]) -> list[Vector]:
            time.sleep(0.05)  # the vector still to come when FTS5 is done
            slow.set()
            return embed(texts)

        memory._embed_queries = slower  # type: ignore[method-assign]
        waited = [(h.record, h.score) for h in memory.search("pottery class ", user_id="u", k=50)]
        assert slow.is_set()
        assert [r.id for r, _ in waited] == [r.id for r, _ in plain]
        assert np.allclose([s for _, s in waited], [s for _, s in plain], atol=1e-4)
        assert waited[0][0] == plain[0][0]
        # The two that match "pottery" were read while the vector was computed; the bike,
        # found by the vector half alone, after.
        assert len(waited) == 3 and sum(map(len, asked)) == 1
        asked.clear()
        small = [h.record.id for h in memory.search("pottery class  ", user_id="u", k=2)]
        # Under 50 asked for, none is read ahead: only the records returned are read whole.
        assert small == [r.id for r, _ in plain[:2]] and asked == [small]
