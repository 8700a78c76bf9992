"""Redis-only behaviour: key layout and escaping, TTL, many clients at once, an unreachable
server. Each test works under its own key prefix and deletes it afterwards."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from chatmem.errors import StoreUnavailableError, ValidationError
from chatmem.messages import SessionKey, now_ms
from chatmem.sessions import SessionState, SessionStore, open_session_store
from tests.sessions.helpers import (
    REDIS_URL,
    append_under_contention,
    check_contended_log,
    drop_redis_prefix,
    message,
    open_redis,
    require_redis,
)

pytestmark = pytest.mark.redis
redis = pytest.importorskip("redis", reason="redis-py is not installed")


@pytest.fixture
def prefix() -> Iterator[str]:
    require_redis()
    name = f"chatmem-test-{uuid.uuid4().hex[:12]}"
    yield name
    drop_redis_prefix(name)


@pytest.fixture
def raw() -> Iterator[Any]:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def store(prefix: str) -> Iterator[SessionStore]:
    opened = open_redis(prefix)
    yield opened
    opened.close()


def _keys(raw: Any, prefix: str) -> set[str]:
    return set(raw.scan_iter(match=f"{prefix}:*"))


def test_every_key_of_a_session_gets_the_ttl_and_each_write_refreshes_it(
    prefix: str, raw: Any
) -> None:
    store = open_redis(prefix, ttl_s=60)
    key = SessionKey("t", "u", "s")
    store.append(key, [message("a", 1)])
    store.save_state(key, SessionState(window_start=1))
    store.put_text("t", "persona", "kept")
    session_keys = _keys(raw, prefix) - {f"{prefix}:text:t"}
    assert session_keys == {
        f"{prefix}:s:t:u:s:log",
        f"{prefix}:s:t:u:s:meta",
        f"{prefix}:u:t:u",
        f"{prefix}:idle",
    }
    assert all(0 < raw.ttl(name) <= 60 for name in session_keys)
    assert raw.ttl(f"{prefix}:text:t") == -1  # texts are configuration, not session data
    for name in session_keys:
        raw.expire(name, 5)
    store.append(key, [message("b", 1)])
    assert all(raw.ttl(name) > 5 for name in session_keys)
    for name in session_keys:
        raw.expire(name, 5)
    store.save_state(key, store.state(key))
    assert all(raw.ttl(name) > 5 for name in session_keys)
    store.close()


def test_a_store_without_ttl_sets_none(store: SessionStore, raw: Any, prefix: str) -> None:
    store.append(SessionKey("t", "u", "s"), [message("a")])
    assert {raw.ttl(name) for name in _keys(raw, prefix)} == {-1}


def test_expired_sessions_drop_out_of_the_indexes(
    store: SessionStore, raw: Any, prefix: str
) -> None:
    gone, kept = SessionKey("t", "u", "gone"), SessionKey("t", "u", "kept")
    store.append(gone, [message("a")])
    store.append(kept, [message("b")])
    # What a TTL does to a session whose user and idle indexes live on through other writes.
    raw.delete(f"{prefix}:s:t:u:gone:log", f"{prefix}:s:t:u:gone:meta")
    assert [info.session_id for info in store.sessions("t", "u")] == ["kept"]
    assert store.idle(now_ms() + 1) == [kept]
    assert raw.zrange(f"{prefix}:u:t:u", 0, -1) == ["kept"]
    assert raw.zrange(f"{prefix}:idle", 0, -1) == ["t:u:kept"]
    assert store.delete_user("t", "u") == 1


def test_a_real_expiry_empties_the_session(prefix: str) -> None:
    store = open_redis(prefix, ttl_s=1)
    key = SessionKey("t", "u", "s")
    store.append(key, [message("a", 1)])
    time.sleep(1.2)
    assert store.length(key) == 0 and store.sessions("t", "u") == []
    assert store.idle(now_ms()) == []
    store.close()


COLLIDING = [
    SessionKey("a:b", "c", "d"),
    SessionKey("a", "b:c", "d"),
    SessionKey("a", "b", "c:d"),
    SessionKey("a", "b", "c"),
    SessionKey("a", "*", "*"),
    SessionKey("*", "*", "*"),
    SessionKey("a%3Ab", "c", "d"),
    SessionKey("a", "b", "c:log"),
    SessionKey("a", "u:t", "x"),
    SessionKey("{a}", "b c", "ünï/cøde"),
]


def test_ids_with_separators_and_wildcards_never_collide(
    store: SessionStore, raw: Any, prefix: str
) -> None:
    for index, key in enumerate(COLLIDING):
        store.append(key, [message(repr(key))] * (index + 1))
        store.save_state(key, SessionState(window_start=index))
        store.put_text(key.tenant_id, "name", repr(key.tenant_id))
    for index, key in enumerate(COLLIDING):
        assert [m.content for m in store.read(key)] == [repr(key)] * (index + 1)
        assert store.state(key).window_start == index
        assert store.get_text(key.tenant_id, "name") == repr(key.tenant_id)
        infos = store.sessions(key.tenant_id, key.user_id)
        assert [i.session_id for i in infos if i.session_id == key.session_id] == [key.session_id]
    found = store.idle(now_ms() + 1, limit=100)
    assert sorted(found) == sorted(COLLIDING)
    assert store.delete_user("a", "*") == 1
    assert store.delete_user("a", "b") == 3  # c:d, c and c:log
    survivors = [k for k in COLLIDING if (k.tenant_id, k.user_id) not in {("a", "*"), ("a", "b")}]
    assert all(store.length(key) > 0 for key in survivors)
    assert sorted(store.idle(now_ms() + 1, limit=100)) == sorted(survivors)


def test_a_batch_larger_than_one_push_is_stored_whole(store: SessionStore) -> None:
    key = SessionKey("t", "u", "big")
    store.append(key, [message("first", 0)])
    batch = [message(f"m{i}", 1 + i // 1000) for i in range(2500)]
    assert store.append(key, batch) == 2501
    assert store.read(key, 1) == batch
    with pytest.raises(ValidationError):  # the server's check, on a batch of many pushes
        store.append(key, [message(f"late {i}", 1) for i in range(2000)])
    assert store.length(key) == 2501


def test_eight_threads_contend_for_one_session(store: SessionStore) -> None:
    key = SessionKey("t", "u", "busy")
    writers = [f"w{i}" for i in range(8)]
    errors: list[BaseException] = []
    refused: list[int] = []

    def work(writer: str) -> None:
        try:
            refused.append(append_under_contention(store, key, writer, 50).refused_stale)
        except BaseException as exc:  # boundary: collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    check_contended_log(store, key, writers, 50)
    assert sum(refused) >= 8 * 49  # every stale append was refused


def test_two_clients_share_sessions_under_one_prefix(store: SessionStore, prefix: str) -> None:
    other = open_redis(prefix)
    key = SessionKey("t", "u", "s")
    store.append(key, [message("from one", 1)])
    other.append(key, [message("from two", 2)])
    assert [m.content for m in store.read(key)] == ["from one", "from two"]
    saved = other.save_state(key, SessionState(window_start=1))
    assert store.state(key) == saved
    other.close()


def test_an_unreachable_server_is_store_unavailable() -> None:
    from chatmem.sessions.redis import RedisSessionStore

    with pytest.raises(StoreUnavailableError) as caught:
        RedisSessionStore("redis://127.0.0.1:1/0")
    assert isinstance(caught.value.__cause__, redis.ConnectionError)
    with pytest.raises(StoreUnavailableError):
        open_session_store("redis://127.0.0.1:1/0?prefix=x&ttl=5")


def test_the_uri_sets_prefix_ttl_and_database(prefix: str, raw: Any) -> None:
    from chatmem.sessions.redis import RedisSessionStore

    opened = open_session_store(f"{REDIS_URL.rsplit('/', 1)[0]}/0?prefix={prefix}&ttl=30")
    assert isinstance(opened, RedisSessionStore)
    assert (opened.prefix, opened.ttl_s) == (prefix, 30)
    opened.append(SessionKey("t", "u", "s"), [message("a")])
    assert 0 < raw.ttl(f"{prefix}:s:t:u:s:log") <= 30
    opened.close()
