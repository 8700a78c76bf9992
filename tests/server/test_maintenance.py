"""The lifecycle jobs in the service: scheduled from the config, one replica at a time (a
lease in the service database), and run now through the admin API."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from chatmem import LocalEmbedder
from chatmem.errors import ConflictError
from chatmem.long_term import LongTermMemory
from chatmem.long_term.maintenance import Job
from chatmem.records import Filter, HistoryEvent, utcnow
from chatmem.server import Runtime, ServiceConfig
from chatmem.server.leases import JobLeases, LocalLeases, PostgresLeases, SQLiteLeases
from chatmem.server.maintenance import Maintenance
from chatmem.stores.postgres_db import PostgresDatabase
from tests.server.conftest import ADMIN_KEY, ServiceFactory

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def _runtime_of(client: TestClient) -> Runtime:
    runtime: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    return runtime


def _long_term(client: TestClient) -> LongTermMemory:
    long_term = _runtime_of(client).long_term
    assert long_term is not None
    return long_term


def _expired_memory(long_term: LongTermMemory, user: str = "alice", tenant: str = "default") -> str:
    past = utcnow() - timedelta(seconds=1)
    (record,) = long_term.add(
        "an old voucher code", user_id=user, tenant_id=tenant, expires_at=past
    )
    return record.id


def _wait_for(check: Any, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


# -- the schedule ---------------------------------------------------------------------------------


def test_a_scheduled_decay_removes_expired_memories(make_service: ServiceFactory) -> None:
    client = make_service(maintenance={"decay_every_minutes": 0.005})  # every 0.3 s
    long_term = _long_term(client)
    gone = _expired_memory(long_term)
    (kept,) = long_term.add(
        "a voucher for later", user_id="alice", expires_at=utcnow() + timedelta(days=1)
    )

    def deleted() -> bool:
        history = long_term.history(gone, user_id="alice")
        return history[-1].event is HistoryEvent.DELETE

    _wait_for(deleted)
    assert long_term.history(gone, user_id="alice")[-1].reason == "expired"
    assert long_term.get(kept.id, user_id="alice").id == kept.id
    leases = client.get("/v1/admin/maintenance", headers=ADMIN).json()["jobs"]
    decay = next(j for j in leases if j["job"] == "decay")
    # The run that deleted it, or (every 0.3 s) a later one that found nothing left.
    assert decay["last_result"]["counts"]["expired"] in (0, 1)
    next_due, last_run = (datetime.fromisoformat(decay[k]) for k in ("next_due_at", "last_run_at"))
    assert next_due > last_run - timedelta(seconds=1)


def test_nothing_is_scheduled_when_disabled(make_service: ServiceFactory) -> None:
    client = make_service(maintenance={"enabled": False, "decay_every_minutes": 0.005})
    gone = _expired_memory(_long_term(client))
    time.sleep(1.0)
    history = _long_term(client).history(gone, user_id="alice")
    assert [e.event for e in history] == [HistoryEvent.ADD]


def test_the_scheduler_stops_before_the_stores_close(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    config = ServiceConfig.parse(
        {"server": {"data_dir": str(tmp_path)}, "maintenance": {"decay_every_minutes": 0.001}}
    )
    runtime = Runtime.start(config, embedder=embedder)
    maintenance = runtime.maintenance
    assert maintenance is not None and maintenance._thread is not None
    time.sleep(0.3)
    runtime.close()
    assert not maintenance._thread.is_alive()


# -- the lease ----------------------------------------------------------------------------------


def test_two_runtimes_on_one_service_db_run_a_job_one_at_a_time(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    config = ServiceConfig.parse(
        {"server": {"data_dir": str(tmp_path)}, "maintenance": {"enabled": False}}
    )
    first = Runtime.start(config, embedder=embedder)
    second = Runtime.start(config, embedder=embedder)
    try:
        a, b = first.maintenance, second.maintenance
        assert a is not None and b is not None and a.holder != b.holder
        # A holds the reflect job: B can run it neither now nor on schedule.
        assert a.leases.claim("reflect", a.holder, _ms(), 60_000, due_only=False)
        with pytest.raises(ConflictError):
            b.run_now(Job.REFLECT)
        assert b.run_due(Job.REFLECT, 60.0) is None
        a.leases.release("reflect", a.holder, _ms(), None, "{}")
        assert b.run_now(Job.REFLECT).job is Job.REFLECT
        # Scheduled: A runs decay, and B finds it not due for another interval.
        assert a.run_due(Job.DECAY, 60.0) is not None
        assert b.run_due(Job.DECAY, 60.0) is None
    finally:
        first.close()
        second.close()


def test_a_lease_left_by_a_dead_replica_is_taken_after_it_runs_out(tmp_path: Path) -> None:
    leases = SQLiteLeases(tmp_path / "service.db")
    try:
        assert leases.claim("decay", "dead", 1_000, 500, due_only=True)
        assert not leases.claim("decay", "alive", 1_400, 500, due_only=True)
        assert leases.claim("decay", "alive", 1_500, 500, due_only=True)
        assert not leases.renew("decay", "dead", 9_000)
    finally:
        leases.close()


def _race(make: Any, count: int = 8) -> list[bool]:
    """``count`` lease tables (each its own connection) claim one job at the same moment."""
    tables: list[JobLeases] = [make() for _ in range(count)]
    start = threading.Barrier(count)
    won: list[bool] = [False] * count

    def claim(i: int) -> None:
        start.wait()
        won[i] = tables[i].claim("consolidate", f"replica-{i}", 10_000, 60_000, due_only=True)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for table in tables:
        table.close()
    return won


def test_of_replicas_claiming_at_once_exactly_one_wins_on_sqlite(tmp_path: Path) -> None:
    SQLiteLeases(tmp_path / "service.db").close()  # migrated once, before the race
    assert sum(_race(lambda: SQLiteLeases(tmp_path / "service.db"))) == 1


@pytest.mark.postgres
def test_of_replicas_claiming_at_once_exactly_one_wins_on_postgres(
    postgres_uri: str, pg_schema: str
) -> None:
    database = PostgresDatabase(postgres_uri, schema=pg_schema, pool_size=8)
    try:
        PostgresLeases(database)  # migrated once, before the race
        assert sum(_race(lambda: PostgresLeases(database))) == 1
        leases = PostgresLeases(database)
        leases.release("consolidate", "nobody", 11_000, 99, "{}")  # not the holder: no-op
        (row,) = leases.leases()
        assert row.holder is not None and row.holder.startswith("replica-")
        leases.release("consolidate", row.holder, 11_000, 70_000, '{"job": "consolidate"}')
        (row,) = leases.leases()
        assert (row.holder, row.next_due_ms, row.last_ms) == (None, 70_000, 11_000)
        assert not leases.claim("consolidate", "late", 69_999, 1, due_only=True)
        assert leases.claim("consolidate", "late", 70_000, 1, due_only=True)
    finally:
        database.close()


def test_local_leases_follow_the_same_rule() -> None:
    leases = LocalLeases()
    assert leases.claim("quota", "a", 0, 100, due_only=True)
    assert not leases.claim("quota", "b", 50, 100, due_only=False)
    leases.release("quota", "a", 60, 1_000, "{}")
    assert not leases.claim("quota", "b", 70, 100, due_only=True)
    assert leases.claim("quota", "b", 70, 100, due_only=False)


def test_a_run_stops_when_its_lease_is_lost(tmp_path: Path, embedder: LocalEmbedder) -> None:
    with LongTermMemory.open(f"sqlite:///{tmp_path / 'm.db'}", embedder=embedder) as memory:
        for user in ("u1", "u2", "u3"):
            memory.add("I like tea", user_id=user)
        leases = LocalLeases()
        maintenance = Maintenance(
            memory,
            leases,
            ServiceConfig().maintenance.model_copy(update={"lease_minutes": 1e-6}),
            lambda: ["default"],
            holder="me",
        )
        stolen = {"done": False}
        real_renew = leases.renew

        def renew(job: str, holder: str, until_ms: int) -> bool:
            if not stolen["done"]:  # another replica took the job meanwhile
                stolen["done"] = True
                leases.release(job, holder, _ms(), None, "{}")
                leases.claim(job, "other", _ms(), 60_000, due_only=False)
            return real_renew(job, holder, until_ms)

        leases.renew = renew  # type: ignore[method-assign]
        report = maintenance.run_now(Job.REFLECT)
        assert report.stopped and report.users < 3


def _ms() -> int:
    return int(time.time() * 1000)


# -- the admin API ------------------------------------------------------------------------------


def test_the_admin_api_runs_a_job_and_says_what_it_did(make_service: ServiceFactory) -> None:
    client = make_service(maintenance={"max_memories_per_user": 1})
    long_term = _long_term(client)
    gone = _expired_memory(long_term)
    answer = client.post("/v1/admin/maintenance/decay", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["job"] == "decay" and body["counts"]["expired"] == 1
    assert "default" in body["tenants"]
    assert long_term.history(gone, user_id="alice")[-1].reason == "expired"
    for text in ("I like tea", "I like coffee", "I live in Oslo"):
        long_term.add(text, user_id="bob")
    quota = client.post(
        "/v1/admin/maintenance/quota", params={"user_id": "bob"}, headers=ADMIN
    ).json()
    assert (quota["users"], quota["counts"]) == (1, {"deleted": 2})
    assert long_term.count(Filter(user_id="bob")) == 1
    for job in ("consolidate", "reflect"):
        assert client.post(f"/v1/admin/maintenance/{job}", headers=ADMIN).status_code == 200


def test_the_admin_api_is_for_the_admin_key_only(make_service: ServiceFactory) -> None:
    client = make_service()
    key = client.post("/v1/admin/keys", json={"tenant_id": "acme"}, headers=ADMIN).json()["key"]
    assert client.post("/v1/admin/maintenance/decay").status_code == 403  # anonymous
    tenant_key = {"Authorization": f"Bearer {key}"}
    assert client.post("/v1/admin/maintenance/decay", headers=tenant_key).status_code == 403
    assert client.get("/v1/admin/maintenance", headers=tenant_key).status_code == 403
    unknown = client.post("/v1/admin/maintenance/vacuum", headers=ADMIN)
    assert unknown.status_code == 400 and "decay" in unknown.text


def test_a_quota_with_no_limit_configured_is_skipped(make_service: ServiceFactory) -> None:
    client = make_service()
    body = client.post("/v1/admin/maintenance/quota", headers=ADMIN).json()
    assert body["skipped"] and body["counts"] == {}


def test_the_admin_api_answers_409_while_a_replica_runs_the_job(
    make_service: ServiceFactory,
) -> None:
    client = make_service()
    maintenance = _runtime_of(client).maintenance
    assert maintenance is not None
    assert maintenance.leases.claim("decay", "another", _ms(), 60_000, due_only=False)
    assert client.post("/v1/admin/maintenance/decay", headers=ADMIN).status_code == 409


def test_jobs_walk_the_tenants_of_the_keys(make_service: ServiceFactory) -> None:
    client = make_service()
    client.post("/v1/admin/keys", json={"tenant_id": "acme"}, headers=ADMIN)
    gone = _expired_memory(_long_term(client), tenant="acme")
    body = client.post("/v1/admin/maintenance/decay", headers=ADMIN).json()
    assert "acme" in body["tenants"] and body["counts"]["expired"] == 1
    history = _long_term(client).history(gone, tenant_id="acme", user_id="alice")
    assert history[-1].reason == "expired"
