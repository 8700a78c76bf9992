"""``MemoryStore.put_with``: a batch stored with its word-piece states and changes of
records stored before, the changes applied all together or, where one's record changed or
went meanwhile, not at all; on every backend (SQLite in one transaction)."""

from __future__ import annotations

import pytest

from chatmem.errors import ValidationError
from chatmem.records import Entry, Filter, HistoryEvent, MemoryRecord
from chatmem.stores import Change, MemoryStore
from tests.stores.conftest import DIM
from tests.stores.helpers import record, unit_vector
from tests.stores.test_word_states import KEEPING


def _next(old: MemoryRecord, text: str) -> MemoryRecord:
    data = old.model_dump()
    data["content"]["raw"] = text
    data["metadata"]["version"] = old.metadata.version + 1
    return MemoryRecord.model_validate(data)


def _texts(store: MemoryStore, tenant: str, *records: MemoryRecord) -> list[str]:
    found = store.get([r.id for r in records], Filter(tenant_id=tenant))
    return [r.text for r in found]


def test_the_batch_is_stored_with_its_states_and_the_changes_that_still_apply(
    store: MemoryStore, backend: str, tenant: str
) -> None:
    a, b = record(tenant, "u", "a1"), record(tenant, "u", "b1")
    store.put([Entry(r, unit_vector(DIM, 1)) for r in (a, b)])
    new = record(tenant, "u", "c1")
    then = [Change(_next(a, "a2"), None, 1, "told"), Change(_next(b, "b2"), None, 1, "told")]
    assert store.put_with([Entry(new, unit_vector(DIM, 2))], states={new.id: b"s"}, then=then)
    assert _texts(store, tenant, new, a, b) == ["c1", "a2", "b2"]
    events = [(h.event, h.reason) for h in store.history(a.id, Filter(tenant_id=tenant))]
    assert events == [(HistoryEvent.ADD, None), (HistoryEvent.UPDATE, "told")]
    kept = store.word_states([new.id], Filter(tenant_id=tenant, user_id="u"))
    assert kept == ({new.id: b"s"} if backend in KEEPING else {})


@pytest.mark.parametrize("stale", ["changed", "gone"])
def test_changes_of_which_one_no_longer_applies_are_left_out_together(
    store: MemoryStore, tenant: str, stale: str
) -> None:
    a, b = record(tenant, "u", "a1"), record(tenant, "u", "b1")
    store.put([Entry(r, unit_vector(DIM, 1)) for r in (a, b)])
    if stale == "changed":  # another writer got to b first
        store.update([Change(_next(b, "b by someone else"), None, 1)])
    else:
        store.delete(Filter(tenant_id=tenant, user_id="u", ids=(b.id,)))
    new = record(tenant, "u", "c1")
    then = [Change(_next(a, "a2"), None, 1), Change(_next(b, "b2"), None, 1)]
    assert not store.put_with([Entry(new, unit_vector(DIM, 2))], then=then)
    # The batch is stored all the same; a, whose change did apply alone, is untouched.
    left = {"changed": ["b by someone else"], "gone": []}[stale]
    assert _texts(store, tenant, new, a, b) == ["c1", "a1", *left]
    assert len(store.history(a.id, Filter(tenant_id=tenant))) == 1


def test_a_batch_refused_leaves_the_changes_unapplied(store: MemoryStore, tenant: str) -> None:
    a = record(tenant, "u", "a1")
    store.put([Entry(a, unit_vector(DIM, 1))])
    taken = record(tenant, "u", "c1")
    store.put([Entry(taken, unit_vector(DIM, 2))])
    with pytest.raises(ValidationError):
        store.put_with([Entry(taken, unit_vector(DIM, 2))], then=[Change(_next(a, "a2"), None, 1)])
    assert _texts(store, tenant, a) == ["a1"]
    twice = [Change(_next(a, "a2"), None, 1), Change(_next(a, "a3"), None, 1)]
    fresh = record(tenant, "u", "d1")
    with pytest.raises(ValidationError) as raised:
        store.put_with([Entry(fresh, unit_vector(DIM, 3))], then=twice)
    assert raised.value.field == "then"
    assert _texts(store, tenant, a, fresh) == ["a1"]  # refused before any write
