"""Word-piece states kept beside their memories (``MemoryStore.word_states``), for the late
rerank (``chatmem.long_term.late``): the SQL stores keep them, scoped as the memories are,
and let them go with their memory or its old text; the vector databases keep none."""

from __future__ import annotations

import pytest

from chatmem.errors import ValidationError
from chatmem.records import Entry, Filter
from chatmem.stores import Change, MemoryStore
from tests.stores.conftest import DIM
from tests.stores.helpers import record, unit_vector

#: The backends that keep states; the others answer every read with none.
KEEPING = {"sqlite", "postgres", "cached-sqlite"}


def test_states_are_kept_per_memory_within_its_user(
    store: MemoryStore, backend: str, tenant: str
) -> None:
    a, b = record(tenant, "u", "cello"), record(tenant, "u", "guitar")
    other = record(tenant, "v", "drums")
    store.put([Entry(r, unit_vector(DIM, 1)) for r in (a, b, other)])
    mine = Filter(tenant_id=tenant, user_id="u")
    store.put_word_states({a.id: b"\x00a", b.id: b"b", other.id: b"c", "missing": b"d"}, mine)
    if backend not in KEEPING:
        assert store.word_states([a.id, b.id], mine) == {}
        return
    # Bytes come back as written, NUL included; another user's id was not written for u.
    assert store.word_states([a.id, b.id, other.id], mine) == {a.id: b"\x00a", b.id: b"b"}
    theirs = Filter(tenant_id=tenant, user_id="v")
    assert store.word_states([a.id, other.id], theirs) == {}
    store.put_word_states({a.id: b"a2"}, mine)
    assert store.word_states([a.id], mine) == {a.id: b"a2"}
    with pytest.raises(ValidationError):  # states are written for one user at a time
        store.put_word_states({a.id: b"a3"}, Filter(tenant_id=tenant))


@pytest.mark.parametrize("edit", ["text", "fields"])
def test_states_go_with_their_memory_and_with_its_old_vector(
    store: MemoryStore, backend: str, tenant: str, edit: str
) -> None:
    if backend not in KEEPING:
        pytest.skip(f"{backend} keeps no word-piece states")
    a, b = record(tenant, "u", "cello"), record(tenant, "u", "guitar")
    store.put([Entry(r, unit_vector(DIM, 1)) for r in (a, b)])
    mine = Filter(tenant_id=tenant, user_id="u")
    store.put_word_states({a.id: b"a", b.id: b"b"}, mine)
    new = a.model_copy(update={"metadata": a.metadata.model_copy(update={"version": 2})})
    vector = unit_vector(DIM, 0, 1) if edit == "text" else None
    store.update([Change(new, vector, expected_version=1)])
    kept = {b.id: b"b"} | ({} if edit == "text" else {a.id: b"a"})
    assert store.word_states([a.id, b.id], mine) == kept
    store.delete(Filter(tenant_id=tenant, user_id="u", ids=(b.id,)))
    assert store.word_states([b.id], mine) == {}
