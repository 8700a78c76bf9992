"""What a running service does on its own: ending idle sessions."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from chatmem.messages import SessionKey
from tests.server.conftest import ServiceFactory, drain, runtime_of


def test_a_quiet_session_is_ended_and_its_turns_extracted(make_service: ServiceFactory) -> None:
    service: TestClient = make_service(
        memory={"extraction_batch_size": 50, "sessions": {"idle_minutes": 0.001}}
    )
    service.post(
        "/v1/chat/completions",
        json={"model": "m", "user": "alice",
              "messages": [{"role": "user", "content": "I live in Lisbon with my two cats."}]},
    )  # fmt: skip
    runtime = runtime_of(service)
    key = SessionKey("default", "alice", "default")
    assert runtime.queue_depth() == 0  # 1 turn of 50: nothing queued yet
    time.sleep(0.1)
    assert runtime.end_idle_sessions() == [key]
    assert runtime.short_term.store.state(key).ended_at is not None
    drain(service)
    assert runtime.long_term is not None
    found = runtime.long_term.search("Where does the user live?", user_id="alice")
    assert any("Lisbon" in hit.record.text for hit in found)
    assert runtime.end_idle_sessions() == []  # ended once


def test_forgetting_a_user_forgets_their_response_chains(service: TestClient) -> None:
    made = service.post(
        "/v1/responses",
        json={"model": "m", "input": "My PIN is 4321.", "memory_context": {"user_id": "alice"}},
    ).json()
    other = service.post(
        "/v1/responses",
        json={"model": "m", "input": "Hello.", "memory_context": {"user_id": "bob"}},
    ).json()
    assert service.get(f"/v1/responses/{made['id']}").status_code == 200
    assert service.delete("/v1/memory", params={"user_id": "alice"}).status_code == 200
    assert service.get(f"/v1/responses/{made['id']}").status_code == 404
    assert service.get(f"/v1/responses/{other['id']}").status_code == 200
