"""The Redis hot cache (SPEC B3), on a real Redis: hits, invalidation, and Redis failing.

The conformance suite also runs over CachedStore(SQLiteStore) (the ``cached-sqlite``
backend). Every test here uses a key prefix of its own and deletes its keys afterwards.
"""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from chatmem.errors import ConfigError, ValidationError
from chatmem.records import Candidate, EmbeddingInfo, Entry, Filter, MemoryRecord, MemoryType
from chatmem.stores import Change, MemoryStore, SearchQuery, SQLiteStore, open_store
from tests.stores.conftest import drop_redis_prefix
from tests.stores.helpers import record, unit_vector

redis = pytest.importorskip("redis")

from chatmem.stores.cached import CachedStore  # noqa: E402 - after the importorskip

pytestmark = pytest.mark.redis

DIM = 4
EMBEDDING = EmbeddingInfo(model="test-cache", dimension=DIM)
ALICE = Filter(tenant_id="t", user_id="alice")


class CountingSQLite(SQLiteStore):
    """A real SQLite store that counts the reads reaching it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.reads: Counter[str] = Counter()

    def get(self, ids: Sequence[str], scope: Filter) -> list[MemoryRecord]:
        self.reads["get"] += 1
        return super().get(ids, scope)

    def search(self, query: SearchQuery) -> list[Candidate]:
        self.reads["search"] += 1
        return super().search(query)


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    name = f"chatmem-test:{uuid.uuid4().hex}"
    yield name
    drop_redis_prefix(redis_url, name)


@pytest.fixture
def inner(tmp_path: Path) -> CountingSQLite:
    store = CountingSQLite(tmp_path / "chatmem.db")
    store.bind_embedding(EMBEDDING)
    return store


@pytest.fixture
def cached(inner: CountingSQLite, redis_url: str, prefix: str) -> Iterator[CachedStore]:
    with CachedStore(inner, redis_url, prefix=prefix) as store:
        assert isinstance(store, CachedStore)
        yield store


def unit(*weights: float) -> SearchQuery:
    return SearchQuery(ALICE, vector=unit_vector(DIM, *weights), text="kayaking")


def put(store: MemoryStore, text: str, user: str = "alice", **fields: object) -> MemoryRecord:
    made = record("t", user, text, **fields)
    store.put([Entry(made, unit_vector(DIM, 1))])
    return made


# -- hits -------------------------------------------------------------------------------------


def test_repeated_reads_are_served_from_redis(cached: CachedStore, inner: CountingSQLite) -> None:
    made = put(cached, "we went kayaking")
    for _ in range(3):
        assert cached.get([made.id], ALICE) == [made]
        assert [c.id for c in cached.search(unit(1))] == [made.id]
    assert inner.reads == Counter(get=1, search=1)


def test_a_get_without_a_user_goes_to_the_inner_store(
    cached: CachedStore, inner: CountingSQLite
) -> None:
    made = put(cached, "x")
    for _ in range(2):
        assert cached.get([made.id], Filter(tenant_id="t")) == [made]
    assert inner.reads["get"] == 2


def test_cached_records_still_answer_to_the_filter(cached: CachedStore) -> None:
    made = put(cached, "a preference", type=MemoryType.PREFERENCE)
    assert cached.get([made.id], ALICE) == [made]
    episodic = Filter(tenant_id="t", user_id="alice", types=frozenset({MemoryType.EPISODIC}))
    assert cached.get([made.id], episodic) == []
    assert cached.get([made.id], Filter(tenant_id="t", user_id="bob")) == []


def test_searches_with_other_filters_are_cached_apart(cached: CachedStore) -> None:
    preference = put(cached, "kayaking is fun", type=MemoryType.PREFERENCE)
    fact = put(cached, "kayaking in May")
    assert {c.id for c in cached.search(unit(1))} == {preference.id, fact.id}
    only = ALICE.model_copy(update={"types": frozenset({MemoryType.PREFERENCE})})
    narrowed = SearchQuery(only, vector=unit_vector(DIM, 1), text="kayaking")
    assert [c.id for c in cached.search(narrowed)] == [preference.id]


def test_tenants_and_users_with_separators_in_their_names_never_share_entries(
    cached: CachedStore,
) -> None:
    mine = record("a:b", "c", "mine")
    theirs = record("a", "b:c", "theirs", id=f"{mine.id}-2")
    cached.put([Entry(mine, unit_vector(DIM, 1)), Entry(theirs, unit_vector(DIM, 1))])
    for _ in range(2):
        assert cached.get([mine.id], Filter(tenant_id="a:b", user_id="c")) == [mine]
        assert cached.get([mine.id], Filter(tenant_id="a", user_id="b:c")) == []


def test_entries_expire(inner: CountingSQLite, redis_url: str, prefix: str) -> None:
    with CachedStore(inner, redis_url, ttl_s=7, prefix=prefix) as store:
        made = put(store, "x")
        store.get([made.id], ALICE)
        client = redis.Redis.from_url(redis_url)
        try:
            ttls = [client.ttl(key) for key in client.scan_iter(match=f"{prefix}:record:*")]
        finally:
            client.close()
    assert len(ttls) == 1 and 0 < ttls[0] <= 7


# -- invalidation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "forget",
    [
        pytest.param(lambda m: Filter(tenant_id="t", user_id="alice", ids=(m.id,)), id="by-id"),
        pytest.param(lambda m: Filter(tenant_id="t", user_id="alice"), id="the-user"),
        pytest.param(lambda m: Filter(tenant_id="t"), id="the-tenant"),
    ],
)
def test_a_forgotten_memory_is_never_served_from_the_cache(
    cached: CachedStore, forget: object
) -> None:
    made = put(cached, "we went kayaking")
    kept = put(cached, "kayaking again", user="bob")
    assert cached.get([made.id], ALICE) == [made]
    assert [c.id for c in cached.search(unit(1))] == [made.id]
    assert callable(forget)
    assert made.id in cached.delete(forget(made))
    assert cached.get([made.id], ALICE) == []
    assert cached.search(unit(1)) == []
    if forget(made).user_id is not None:  # bob's entries outlived alice's forgetting
        assert cached.get([kept.id], Filter(tenant_id="t", user_id="bob")) == [kept]


def test_a_memory_forgotten_through_another_process_is_not_served(
    inner: CountingSQLite, redis_url: str, prefix: str
) -> None:
    """Two CachedStores over one SQLite file and one Redis, as two processes would be."""
    reader = CachedStore(inner, redis_url, prefix=prefix)
    writer = CachedStore(SQLiteStore(inner.path), redis_url, prefix=prefix)
    try:
        made = put(writer, "we went kayaking")
        assert reader.get([made.id], ALICE) == [made]
        assert [c.id for c in reader.search(unit(1))] == [made.id]
        writer.delete(Filter(tenant_id="t", user_id="alice", ids=(made.id,)))
        assert reader.get([made.id], ALICE) == []
        assert reader.search(unit(1)) == []
    finally:
        reader.close()
        writer.close()


def test_an_update_is_seen_at_once(cached: CachedStore) -> None:
    made = put(cached, "budget is $10,000")
    assert cached.get([made.id], ALICE) == [made]
    data = made.model_dump()
    data["content"]["raw"] = "budget is $12,000"
    data["metadata"]["version"] = 2
    new = MemoryRecord.model_validate(data)
    cached.update([Change(new, None, expected_version=1)])
    assert cached.get([made.id], ALICE) == [new]


def test_clear_retires_every_entry(cached: CachedStore, inner: CountingSQLite) -> None:
    made = put(cached, "x")
    cached.get([made.id], ALICE)
    cached.clear()
    cached.get([made.id], ALICE)
    assert inner.reads["get"] == 2


# -- Redis failing ----------------------------------------------------------------------------


def test_without_redis_every_operation_goes_to_the_inner_store(
    inner: CountingSQLite, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="chatmem.stores.cached"),
        CachedStore(inner, "redis://127.0.0.1:1/0", retry_after_s=0) as store,
    ):
        made = put(store, "we went kayaking")
        assert store.get([made.id], ALICE) == [made]
        assert [c.id for c in store.search(unit(1))] == [made.id]
        assert store.delete(ALICE) == [made.id]
        assert store.get([made.id], ALICE) == []
    assert "Redis cache unavailable" in caplog.text


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def private_redis() -> Iterator[str]:
    """A Redis server of this test's own, which it may pause."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    port = _free_port()
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield url
    finally:
        client.close()
        server.terminate()
        server.wait(10)


def test_invalidations_missed_while_redis_hung_are_sent_before_the_next_cached_read(
    inner: CountingSQLite, private_redis: str, caplog: pytest.LogCaptureFixture
) -> None:
    admin = redis.Redis.from_url(private_redis)
    store = CachedStore(inner, private_redis, retry_after_s=0.1)
    try:
        made = put(store, "we went kayaking")
        assert store.get([made.id], ALICE) == [made]
        admin.execute_command("CLIENT", "PAUSE", "1500", "ALL")
        with caplog.at_level(logging.WARNING, logger="chatmem.stores.cached"):
            store.delete(ALICE)  # the invalidation times out: Redis still holds the entry
        assert "Redis cache unavailable" in caplog.text
        time.sleep(1.6)  # the pause is over and the stale entry is still in Redis
        assert store.get([made.id], ALICE) == []
    finally:
        store.close()
        admin.close()


# -- opening ----------------------------------------------------------------------------------


def test_open_store_wraps_any_store_in_a_cache(tmp_path: Path, redis_url: str, prefix: str) -> None:
    uri = f"sqlite:///{tmp_path}/x.db?cache={redis_url}&cache_ttl=60&cache_prefix={prefix}"
    with open_store(uri) as opened:
        assert isinstance(opened, CachedStore)
        assert isinstance(opened.inner, SQLiteStore)
        assert (opened.ttl_s, opened.prefix) == (60, prefix)


def test_open_store_refuses_bad_cache_options(tmp_path: Path, redis_url: str) -> None:
    with pytest.raises(ConfigError, match="cache_ttl"):
        open_store(f"sqlite:///{tmp_path}/x.db?cache={redis_url}&cache_ttl=soon")
    with pytest.raises(ConfigError, match="Redis URL"):
        open_store(f"sqlite:///{tmp_path}/x.db?cache=http://nowhere")
    with SQLiteStore(tmp_path / "y.db") as inner, pytest.raises(ValidationError):
        CachedStore(inner, redis_url, ttl_s=0)
