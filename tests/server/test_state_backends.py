"""The service state's tables behave alike on SQLite (``service.db``) and PostgreSQL (issue
15): API keys, response chains and webhook deliveries, one suite over both, and each closes
behind its gate (issue 20). Real SQLite files and a real PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chatmem.errors import NotFoundError, StoreError
from chatmem.server.auth import KeyStore, SQLiteKeyTable
from chatmem.server.response_store import ResponseStore, SQLiteResponses, StoredResponse
from chatmem.server.webhooks import _SQLiteDeliveries

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

#: Makes one part of the state: ``make(kind)`` with kind "keys", "responses" or "webhooks".
Maker = Callable[..., Any]


@pytest.fixture(params=BACKENDS)
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Maker]:
    """Opens parts on one backend; on PostgreSQL they share one pool, as a replica's do."""
    made: list[Any] = []
    if request.param == "sqlite":
        path = tmp_path / "service.db"
        makers: dict[str, Maker] = {
            "keys": lambda: SQLiteKeyTable(path),
            "responses": lambda: SQLiteResponses(path),
            "webhooks": lambda url: _SQLiteDeliveries(path, url),
        }
        shared = None
    else:
        pytest.importorskip("psycopg")
        from chatmem.server.pg_state import PostgresState

        shared = PostgresState(
            request.getfixturevalue("postgres_uri"),
            schema=request.getfixturevalue("pg_schema"),
            pool_size=4,
        )
        makers = {
            "keys": shared.keys,
            "responses": shared.responses,
            "webhooks": shared.deliveries,
        }

    def opened(kind: str, *args: Any) -> Any:
        part = makers[kind](*args)
        made.append(part)
        return part

    yield opened
    for part in made:
        part.close()
    if shared is not None:
        shared.close()


def test_a_key_made_through_one_store_works_through_another(make: Maker) -> None:
    first = KeyStore(None, table=make("keys"))
    second = KeyStore(None, table=make("keys"), cache_s=0.2)
    key, info = first.create("acme", ["support", "support"], name="bot")
    principal = second.authenticate(key)
    assert principal is not None and principal.tenant_id == "acme"
    assert principal.roles == frozenset({"support"}) and principal.key_id == info.key_id
    assert [k.key_id for k in second.keys("acme")] == [info.key_id]
    assert second.authenticate(key + "x") is None
    first.revoke(info.key_id)
    time.sleep(0.25)  # the second store's cached answer runs out
    assert second.authenticate(key) is None
    assert second.keys("acme")[0].revoked
    with pytest.raises(NotFoundError):
        second.revoke("key_unknown")


def _response(rid: str, tenant: str = "acme", user: str | None = "anna") -> StoredResponse:
    messages = [
        {"role": "user", "content": "héllo \u0000 👋"},
        {"role": "assistant", "content": "hi"},
    ]
    return StoredResponse(rid, tenant, user, "s1", messages, {"id": rid, "n": 1.5}, 1_700_000)


def test_responses_round_trip_per_tenant_and_keep_the_newest(make: Maker) -> None:
    store = ResponseStore(None, limit=3, table=make("responses"))
    assert store.durable
    for n in range(5):
        store.put(_response(f"r{n}"))
    store.put(_response("other", tenant="globex"))
    assert store.count("acme") == 3
    assert store.get("acme", "r0") is None and store.get("acme", "r4") == _response("r4")
    assert store.get("globex", "r4") is None  # another tenant's id is not found
    assert store.delete("acme", "r4") and not store.delete("acme", "r4")
    store.put(_response("ben1", user="ben"))
    assert store.delete_user("acme", "anna") == 2
    assert store.count("acme") == 1 and store.count("globex") == 1


def test_deliveries_are_claimed_once_across_senders(make: Maker) -> None:
    url = "http://127.0.0.1:9/hook"
    first, second = make("webhooks", url), make("webhooks", url)
    now = time.time()
    for n in range(20):
        assert first.add(f"evt_{n}", b'{"n": %d}' % n, now)
    claimed: list[str] = []
    lock = threading.Lock()

    def claim_all(queue: Any) -> None:
        while (claim := queue.claim(time.time(), 5.0)) is not None:
            with lock:
                claimed.append(claim.event_id)
            queue.end(claim, None)

    threads = [threading.Thread(target=claim_all, args=(q,)) for q in (first, second) * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(claimed) == sorted(f"evt_{n}" for n in range(20))
    assert first.pending() == 0 and first.next_due() is None


def test_a_delivery_retried_waits_and_one_given_up_is_kept_as_failed(make: Maker) -> None:
    queue = make("webhooks", "http://127.0.0.1:9/hook")
    now = time.time()
    queue.add("evt_a", b"{}", now)
    claim = queue.claim(now, 5.0)
    assert claim is not None and queue.claim(now, 5.0) is None  # leased
    queue.retry(claim, now + 60)
    assert queue.claim(now + 1, 5.0) is None
    assert queue.next_due() == pytest.approx(now + 60, abs=0.01)
    again = queue.claim(now + 61, 5.0)
    assert again is not None and again.attempts == 1
    queue.end(again, "HTTP 410")
    assert queue.pending() == 0


@pytest.mark.parametrize("kind", ["keys", "responses", "webhooks"])
def test_a_closed_part_refuses_every_call_with_store_error(make: Maker, kind: str) -> None:
    part = make(kind, "http://127.0.0.1:9/hook") if kind == "webhooks" else make(kind)
    part.close()
    calls: dict[str, Callable[[], Any]] = {
        "keys": lambda: part.lookup("x"),
        "responses": lambda: part.get("acme", "r1"),
        "webhooks": lambda: part.pending(),
    }
    with pytest.raises(StoreError):
        calls[kind]()
    part.close()  # twice is harmless
