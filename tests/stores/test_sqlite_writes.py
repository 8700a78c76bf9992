"""The SQLite store's write path (``stores/sqlite/writes.py``): a taken id is refused by the
id's own UNIQUE index, the batch with it rolled back whole; history keeps each version's
JSON exactly as its row held it."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from chatmem.errors import ValidationError
from chatmem.records import EmbeddingInfo, Entry, Filter, MemoryRecord
from chatmem.stores import SQLiteStore
from chatmem.stores.base import Change
from chatmem.stores.sqlite.file import sqlite3

EMBEDDING = EmbeddingInfo(model="test", dimension=4)


def _store(path: Path) -> SQLiteStore:
    store = SQLiteStore(path)
    store.bind_embedding(EMBEDDING)
    return store


def _entry(text: str, user: str = "u") -> Entry:
    return Entry(MemoryRecord(user_id=user, content={"raw": text}), np.ones(4, np.float32) / 2)


def _rows(path: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn, conn:
        return conn.execute(sql, params).fetchall()


def test_a_taken_id_refuses_its_whole_batch_and_names_the_id(tmp_path: Path) -> None:
    store = _store(tmp_path / "m.db")
    held = _entry("held")
    store.put([held])
    fresh = _entry("fresh")
    with pytest.raises(ValidationError, match=f"memory '{held.record.id}' already exists"):
        store.put([fresh, held])  # the fresh one is written first, then rolled back
    assert [r.text for r in store.list(Filter(user_id="u")).records] == ["held"]
    assert store.history(fresh.record.id, Filter()) == []
    assert _rows(tmp_path / "m.db", "SELECT COUNT(*) FROM memory_vectors") == [(1,)]
    store.close()


def test_history_keeps_each_version_as_its_row_held_it(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    store = _store(path)
    entry = _entry("v1")
    store.put([entry])
    # A body as an older chatmem wrote it: a field it did not have yet is absent (parsing
    # it fills the default; dumping the parsed record again would add the field).
    stored = json.loads(_rows(path, "SELECT body FROM memories")[0][0])
    del stored["user_metadata"]
    older = json.dumps(stored)
    _rows(path, "UPDATE memories SET body = ?", older)
    v1 = store.get([entry.record.id], Filter())[0]
    v2 = v1.model_copy(
        update={
            "content": v1.content.model_copy(update={"raw": "v2"}),
            "metadata": v1.metadata.model_copy(update={"version": 2}),
        }
    )
    store.update([Change(v2, None, expected_version=1)])
    v2_body = _rows(path, "SELECT body FROM memories")[0][0]
    store.delete(Filter(ids=(entry.record.id,)))
    history = _rows(path, "SELECT event, old, new FROM memory_history ORDER BY seq")
    assert history[1:] == [("update", older, v2_body), ("delete", v2_body, None)]
    assert [h.old for h in store.history(entry.record.id, Filter())][1:] == [v1, v2]
    store.close()


def test_an_update_sets_the_columns_that_changed_and_keeps_the_others(tmp_path: Path) -> None:
    store = _store(tmp_path / "m.db")
    entry = _entry("v1")
    store.put([entry])
    v1 = entry.record
    moved = v1.model_copy(
        update={
            "session_id": "s2",
            "metadata": v1.metadata.model_copy(update={"version": 2}),
        }
    )
    store.update([Change(moved, None, expected_version=1)])
    assert store.count(Filter(user_id="u", session_id="s2")) == 1
    told = moved.model_copy(
        update={
            "content": moved.content.model_copy(update={"raw": "v3"}),
            "metadata": moved.metadata.model_copy(update={"version": 3}),
        }
    )
    store.update([Change(told, None, expected_version=2)])
    columns = _rows(tmp_path / "m.db", "SELECT session_id, version, type FROM memories")
    assert columns == [("s2", 3, "semantic")]
    assert store.get([v1.id], Filter(user_id="u", session_id="s2")) == [told]
    store.close()
