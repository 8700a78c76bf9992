"""Conformance: a memory's TTL (``time.expires_at``) and the users of a tenant, on every
backend. A memory past its ``expires_at`` is never read back, by any read, until a delete
with ``Filter(expired=True)`` (the decay sweep's) removes it."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from chatmem.errors import ValidationError
from chatmem.records import Entry, Filter, HistoryEvent, MemoryRecord, utcnow
from chatmem.stores import Change, MemoryStore, SearchQuery
from tests.stores.conftest import DIM
from tests.stores.helpers import record, unit_vector


def _put(store: MemoryStore, tenant: str, user: str, text: str, expires_at: datetime | None) -> str:
    memory = record(tenant, user, text, time={"expires_at": expires_at})
    store.put([Entry(memory, unit_vector(DIM, 1.0, 0.1))])
    return memory.id


def _visible(store: MemoryStore, scope: Filter, wanted: list[str]) -> dict[str, set[str]]:
    """What each read path returns of ``wanted``."""
    page = store.list(scope, 100)
    query = SearchQuery(
        filter=scope, vector=unit_vector(DIM, 1.0, 0.1), text="hiking boots", candidates=20
    )
    return {
        "get": {r.id for r in store.get(wanted, scope)},
        "list": {r.id for r in page.records},
        "search": {c.id for c in store.search(query)},
        "vectors": set(store.vectors(wanted, scope)),
        "count": {str(store.count(scope))},
    }


def test_an_expired_memory_is_never_read(store: MemoryStore, tenant: str) -> None:
    now = utcnow()
    gone = _put(store, tenant, "alice", "old hiking boots", now - timedelta(seconds=1))
    later = _put(store, tenant, "alice", "new hiking boots", now + timedelta(days=1))
    kept = _put(store, tenant, "alice", "hiking boots forever", None)
    scope = Filter(tenant_id=tenant, user_id="alice")
    seen = _visible(store, scope, [gone, later, kept])
    for path in ("get", "list", "search", "vectors"):
        assert seen[path] == {later, kept}, path
    assert seen["count"] == {"2"}
    # The same on a filter narrower than the user (another query plan on some backends).
    narrow = _visible(store, scope.model_copy(update={"ids": (gone, kept)}), [gone, kept])
    assert narrow["get"] == narrow["list"] == narrow["search"] == {kept}


def test_expired_true_reads_only_expired_and_none_reads_both(
    store: MemoryStore, tenant: str
) -> None:
    now = utcnow()
    gone = _put(store, tenant, "alice", "old hiking boots", now - timedelta(minutes=1))
    kept = _put(store, tenant, "alice", "hiking boots", None)
    expired = Filter(tenant_id=tenant, user_id="alice", expired=True)
    both = Filter(tenant_id=tenant, user_id="alice", expired=None)
    assert [r.id for r in store.list(expired).records] == [gone]
    assert store.count(expired) == 1
    assert {r.id for r in store.list(both).records} == {gone, kept}
    assert store.count(both) == 2


def test_a_memory_expires_while_stored(store: MemoryStore, tenant: str) -> None:
    soon = _put(store, tenant, "alice", "hiking boots", utcnow() + timedelta(milliseconds=600))
    scope = Filter(tenant_id=tenant, user_id="alice")
    assert [r.id for r in store.get([soon], scope)] == [soon]
    time.sleep(0.8)
    assert store.get([soon], scope) == []
    assert store.count(scope) == 0


def test_deleting_the_expired_keeps_the_rest_and_the_history(
    store: MemoryStore, tenant: str
) -> None:
    now = utcnow()
    gone = _put(store, tenant, "alice", "old hiking boots", now - timedelta(minutes=1))
    kept = _put(store, tenant, "alice", "hiking boots", now + timedelta(days=1))
    deleted = store.delete(Filter(tenant_id=tenant, expired=True), "expired")
    assert deleted == [gone]
    both = Filter(tenant_id=tenant, user_id="alice", expired=None)
    assert [r.id for r in store.list(both).records] == [kept]
    last = store.history(gone, Filter(tenant_id=tenant))[-1]
    assert (last.event, last.reason) == (HistoryEvent.DELETE, "expired")


def test_an_update_sets_and_clears_the_ttl(store: MemoryStore, tenant: str) -> None:
    memory_id = _put(store, tenant, "alice", "hiking boots", None)
    scope = Filter(tenant_id=tenant, user_id="alice")
    (old,) = store.get([memory_id], scope)
    past = _retimed(old, utcnow() - timedelta(seconds=1))
    store.update([Change(past, None, expected_version=1)])
    assert store.get([memory_id], scope) == []
    cleared = _retimed(past, None)
    store.update([Change(cleared, None, expected_version=2)])
    (back,) = store.get([memory_id], scope)
    assert back.time.expires_at is None
    assert store.count(scope) == 1


def test_the_ttl_round_trips(store: MemoryStore, tenant: str) -> None:
    at = utcnow() + timedelta(days=3)
    memory_id = _put(store, tenant, "alice", "hiking boots", at)
    (back,) = store.get([memory_id], Filter(tenant_id=tenant, user_id="alice"))
    assert back.time.expires_at == at


def _retimed(old: MemoryRecord, expires_at: datetime | None) -> MemoryRecord:
    data = old.model_dump()
    data["time"]["expires_at"] = expires_at
    data["metadata"]["version"] = old.metadata.version + 1
    return MemoryRecord.model_validate(data)


# -- users --------------------------------------------------------------------------------------


def test_users_lists_each_user_of_a_tenant_once_in_order(store: MemoryStore, tenant: str) -> None:
    for user in ("carol", "alice", "bob", "alice", "Émile"):
        _put(store, tenant, user, f"note of {user}", None)
    _put(store, tenant, "dora", "gone", utcnow() - timedelta(seconds=1))  # expired counts
    _put(store, f"{tenant}-other", "zed", "another tenant", None)
    everyone = ["alice", "bob", "carol", "dora", "Émile"]
    assert store.users(tenant) == sorted(everyone)
    assert store.users(tenant, limit=2) == ["alice", "bob"]
    assert store.users(tenant, after="bob", limit=2) == ["carol", "dora"]
    assert store.users(tenant, after="dora") == ["Émile"]
    assert store.users(f"{tenant}-none") == []
    with pytest.raises(ValidationError):
        store.users(tenant, limit=0)
