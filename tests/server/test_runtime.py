"""What a running service does on its own: ending idle sessions, queueing extraction."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from fastapi.testclient import TestClient

from chatmem.embeddings.local import LocalEmbedder
from chatmem.messages import Message, Role, SessionKey
from chatmem.server import Runtime, ServiceConfig
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


def test_replicas_racing_to_queue_a_session_put_each_turn_in_one_batch(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    """Two replicas on one service database share the session log and the outbox, not the
    lock around queueing: one read the log with two turns, the other with four, both from
    the same extraction mark. Every turn still goes to exactly one batch (issue 15: a fact
    extracted from two overlapping batches was stored twice)."""
    config = ServiceConfig.parse(
        {
            "server": {"data_dir": str(tmp_path)},
            "maintenance": {"enabled": False},
            "memory": {"extraction_batch_size": 100, "auto_store": True},
        }
    )
    first = Runtime.start(config, embedder=embedder)
    second = Runtime.start(config, embedder=embedder)
    try:
        key = SessionKey("default", "anna", "s1")
        said = [
            Message(role=Role.USER, content=f"Turn {n}: I like tea number {n}.") for n in range(4)
        ]
        first.short_term.append(key, said[:2])
        # The second replica read two turns and queued them; its mark is not yet moved.
        second.outbox.enqueue(key, first.short_term.store.read(key))
        first.short_term.append(key, said[2:])
        first.queue_pending(key)  # reads four turns from the same mark
        second.queue_pending(key)
        first.queue_pending(key)
        batched = Counter(m.id for b in first.outbox.batches(limit=100) for m in b.messages)
        assert batched == Counter(m.id for m in said)
        assert first.short_term.store.state(key).extracted_upto == 4
    finally:
        first.close()
        second.close()


def test_a_start_warms_the_heaviest_users_caches(tmp_path: Path, embedder: LocalEmbedder) -> None:
    """The users with the most memories get their vectors read at start, in the background,
    not at their first search (issue 14: a heavy user's first search at 1M memories)."""
    config = ServiceConfig.parse(
        {"server": {"data_dir": str(tmp_path)}, "maintenance": {"enabled": False}}
    )
    first = Runtime.start(config, embedder=embedder)
    assert first.long_term is not None
    for user, count in (("busy", 12), ("quiet", 3)):
        first.long_term.add(
            [{"role": "user", "content": f"Note {n} from {user}."} for n in range(count)],
            user_id=user,
        )
    first.close()
    again = Runtime.start(config, embedder=embedder)
    try:
        assert again._warmer is not None
        again._warmer.join(30)
        assert again.warmed == [("default", "busy"), ("default", "quiet")]
    finally:
        again.close()
