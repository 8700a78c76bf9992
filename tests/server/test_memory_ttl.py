"""A memory's TTL through the REST API: ``expires_at`` on create and patch, honoured by
every read route."""

from __future__ import annotations

import time
from datetime import timedelta

from fastapi.testclient import TestClient

from chatmem.records import utcnow


def _visible(client: TestClient, memory_id: str) -> dict[str, bool]:
    search = client.post("/v1/memory/search", json={"user_id": "alice", "query": "voucher"})
    listed = client.get("/v1/memory", params={"user_id": "alice"})
    return {
        "get": client.get(f"/v1/memory/{memory_id}").status_code == 200,
        "search": any(r["record"]["id"] == memory_id for r in search.json()["results"]),
        "list": any(m["id"] == memory_id for m in listed.json()["memories"]),
    }


def test_create_with_expires_at_is_read_until_then(service: TestClient) -> None:
    # The create and the reads before the expiry run within the TTL: with 800 ms, one CI run
    # found the memory already expired at the first read, and with 2 s one on a machine
    # running two other test processes (they take 0.1-0.2 s alone). The wait after is to
    # the expiry.
    soon = utcnow() + timedelta(seconds=5)
    created = service.post(
        "/v1/memory",
        json={
            "user_id": "alice",
            "content": "my voucher code is 1234",
            "expires_at": soon.isoformat(),
        },
    )
    assert created.status_code == 201, created.text
    (memory,) = created.json()["memories"]
    assert memory["time"]["expires_at"] is not None
    assert all(_visible(service, memory["id"]).values())
    time.sleep(max(0.0, (soon - utcnow()).total_seconds()) + 0.2)
    assert not any(_visible(service, memory["id"]).values())
    assert service.get("/v1/memory/count", params={"user_id": "alice"}).json()["count"] == 0


def test_patch_sets_and_removes_expires_at(service: TestClient) -> None:
    created = service.post("/v1/memory", json={"user_id": "alice", "content": "my voucher code"})
    memory_id = created.json()["memories"][0]["id"]
    later = "2100-01-01T00:00:00Z"
    patched = service.patch(f"/v1/memory/{memory_id}", json={"expires_at": later})
    assert patched.status_code == 200, patched.text
    assert patched.json()["time"]["expires_at"].startswith("2100-01-01T00:00:00")
    cleared = service.patch(f"/v1/memory/{memory_id}", json={"expires_at": None})
    assert cleared.json()["time"]["expires_at"] is None
    past = (utcnow() - timedelta(seconds=1)).isoformat()
    service.patch(f"/v1/memory/{memory_id}", json={"expires_at": past})
    assert service.get(f"/v1/memory/{memory_id}").status_code == 404
    assert service.patch(f"/v1/memory/{memory_id}", json={"expires_at": None}).status_code == 404


def test_an_expires_at_that_is_not_a_time_is_refused(service: TestClient) -> None:
    answer = service.post(
        "/v1/memory", json={"user_id": "alice", "content": "x", "expires_at": "soon"}
    )
    assert answer.status_code == 400 and "expires_at" in answer.text
