"""The SQLite store's heads held between searches (``stores.sqlite.head_cache``, issue 14):
a head read once is not read again, and every write shows at the next read, whether this
store made it or another one on the same file did; a memory whose TTL ran out since, or a
narrower scope, leaves out what SQL would leave out."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from chatmem.records import EmbeddingInfo, Entry, Filter, MemoryRecord, utcnow
from chatmem.stores import Change, SQLiteStore
from chatmem.stores.base import Usage, heads_of
from tests.stores.helpers import record, unit_vector

EMBEDDING = EmbeddingInfo(model="test", dimension=4)
SCOPE = Filter(user_id="u")


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[SQLiteStore, SQLiteStore]]:
    """A reader and a writer on one file, as two processes would hold it."""
    reader, writer = SQLiteStore(tmp_path / "heads.db"), SQLiteStore(tmp_path / "heads.db")
    writer.bind_embedding(EMBEDDING)
    yield reader, writer
    reader.close()
    writer.close()


def _put(store: SQLiteStore, *records: MemoryRecord) -> None:
    store.put([Entry(r, unit_vector(4, 1.0, 0.5)) for r in records])


def _changed(old: MemoryRecord, **fields: Any) -> Change:
    data = old.model_dump() | fields
    data["metadata"]["version"] = old.metadata.version + 1
    return Change(MemoryRecord.model_validate(data), None, old.metadata.version)


def test_a_head_read_once_is_held_and_every_write_shows_at_the_next_read(
    stores: tuple[SQLiteStore, SQLiteStore],
) -> None:
    reader, writer = stores
    kept = [record("default", "u", f"fact {n}", context={"speaker": "Ana"}) for n in range(4)]
    _put(writer, *kept)
    ids = [r.id for r in kept]
    assert reader.heads(ids, SCOPE) == heads_of(kept)
    traced: list[str] = []
    reader._file.connection().set_trace_callback(traced.append)
    assert reader.heads(ids, SCOPE) == heads_of(kept)
    assert not [s for s in traced if "json_extract" in s]  # held: no body read again
    # A use writes no head's field: the heads stay held.
    writer.touch([Usage(ids[0], count=1, at=utcnow())], SCOPE)
    assert reader.heads(ids, SCOPE) == heads_of(kept)
    assert not [s for s in traced if "json_extract" in s]
    # Another store's edit, addition and delete all show at the next read.
    edit = _changed(kept[0], content={"raw": "an edited fact"}, metadata={"importance": 0.9})
    writer.update([edit])
    added = record("default", "u", "a new fact")
    _put(writer, added)
    writer.delete(Filter(user_id="u", ids=(ids[1],), expired=None))
    expected = heads_of([edit.record, kept[2], kept[3], added])
    assert reader.heads([*ids, added.id], SCOPE) == expected
    assert [s for s in traced if "json_extract" in s]  # read again
    assert reader.heads([*ids, added.id], SCOPE)[ids[0]].text == "an edited fact"


def test_a_memory_whose_ttl_ran_out_since_it_was_held_is_left_out(
    stores: tuple[SQLiteStore, SQLiteStore],
) -> None:
    reader, writer = stores
    soon = record(
        "default", "u", "a short-lived fact", time={"expires_at": utcnow() + timedelta(seconds=1)}
    )
    lasting = record("default", "u", "a lasting fact")
    _put(writer, soon, lasting)
    assert set(reader.heads([soon.id, lasting.id], SCOPE)) == {soon.id, lasting.id}
    time.sleep(1.5)
    assert set(reader.heads([soon.id, lasting.id], SCOPE)) == {lasting.id}
    assert reader.heads([soon.id], SCOPE.model_copy(update={"expired": None})) == heads_of([soon])


def test_a_narrower_scope_leaves_out_what_sql_leaves_out(
    stores: tuple[SQLiteStore, SQLiteStore],
) -> None:
    reader, writer = stores
    open_ = record("default", "u", "an open fact", project_id="p1")
    hidden = record("default", "u", "a restricted fact", access_control={"allowed_roles": ["hr"]})
    _put(writer, open_, hidden)
    both = [open_.id, hidden.id]
    assert set(reader.heads(both, SCOPE)) == set(both)  # held for the user's whole scope
    readers = SCOPE.model_copy(update={"reader_roles": frozenset({"ops"})})
    assert set(reader.heads(both, readers)) == {open_.id}
    assert set(reader.heads(both, SCOPE.model_copy(update={"project_id": "p1"}))) == {open_.id}
    assert reader.heads(both, Filter(user_id="someone else")) == {}
