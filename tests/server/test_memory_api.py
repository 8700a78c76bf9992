"""The memory REST API (SPEC A3, L2, L7) over a real service: SQLite files, the local
embedder, the offline extractor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from chatmem.worker import BatchState
from tests.server.conftest import ADMIN_KEY, ServiceFactory, drain, runtime_of
from tests.server.test_admin import assert_error, new_key

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def create(client: TestClient, headers: dict[str, str] | None = None, **body: Any) -> list[Any]:
    made = client.post("/v1/memory", json=body, headers=headers or {})
    assert made.status_code == 201, made.text
    memories: list[Any] = made.json()["memories"]
    return memories


def contents(client: TestClient, headers: dict[str, str] | None = None, **query: Any) -> list[str]:
    listed = client.get("/v1/memory", params={"limit": 500, **query}, headers=headers or {})
    assert listed.status_code == 200, listed.text
    return [m["content"]["raw"] for m in listed.json()["memories"]]


def test_create_read_update_delete_round_trip(service: TestClient) -> None:
    [made] = create(
        service,
        user_id="alice",
        content="Alice's budget for the Hawaii trip is $10,000.",
        type="semantic",
        importance=0.9,
        tags=["travel"],
        metadata={"channel": "web"},
        project_id="trips",
    )
    assert made["tenant_id"] == "default"
    assert made["metadata"]["importance"] == 0.9
    assert made["user_metadata"] == {"channel": "web"}

    read = service.get(f"/v1/memory/{made['id']}")
    assert read.status_code == 200
    assert read.json() == made

    changed = service.patch(
        f"/v1/memory/{made['id']}",
        json={"content": "Alice's budget for the Hawaii trip is $12,000.", "tags": ["budget"]},
    )
    assert changed.status_code == 200
    assert changed.json()["content"]["raw"].endswith("$12,000.")
    assert changed.json()["metadata"]["version"] == 2
    assert changed.json()["metadata"]["tags"] == ["budget"]
    assert service.get(f"/v1/memory/{made['id']}").json() == changed.json()

    deleted = service.delete(f"/v1/memory/{made['id']}")
    assert deleted.status_code == 200
    assert deleted.json() == {"deleted": 1}
    assert_error(service.get(f"/v1/memory/{made['id']}"), 404, code="not_found")
    assert_error(service.delete(f"/v1/memory/{made['id']}"), 404, code="not_found")


def test_a_chat_becomes_one_episodic_memory_per_message(service: TestClient) -> None:
    made = create(
        service,
        user_id="alice",
        messages=[
            {"role": "user", "content": "We land in Honolulu on the 3rd.", "id": "m1"},
            {"role": "assistant", "content": "Noted, the 3rd."},
        ],
        session_id="s1",
    )
    assert [m["type"] for m in made] == ["episodic", "episodic"]
    assert made[0]["provenance"] == ["m1"]
    assert made[0]["context"]["after"] == "assistant: Noted, the 3rd."
    assert made[1]["session_id"] == "s1"


def test_search_returns_the_relevant_memories_with_scores(service: TestClient) -> None:
    create(service, user_id="alice", content="Alice is allergic to peanuts.", type="profile")
    create(service, user_id="alice", content="Alice's favourite colour is green.")
    create(service, user_id="alice", content="Alice drives a red bicycle to work.")
    create(service, user_id="bob", content="Bob is allergic to peanuts.")

    found = service.post(
        "/v1/memory/search", json={"user_id": "alice", "query": "peanut allergy", "k": 2}
    )

    assert found.status_code == 200
    results = found.json()["results"]
    assert len(results) == 2
    assert results[0]["record"]["content"]["raw"] == "Alice is allergic to peanuts."
    assert results[0]["score"] >= results[1]["score"]
    assert all(r["record"]["user_id"] == "alice" for r in results)
    typed = service.post(
        "/v1/memory/search",
        json={"user_id": "alice", "query": "peanut allergy", "types": ["semantic"], "k": 5},
    ).json()["results"]
    assert typed and all(r["record"]["type"] == "semantic" for r in typed)
    strict = service.post(
        "/v1/memory/search", json={"user_id": "alice", "query": "peanut allergy", "threshold": 1}
    )
    assert strict.json()["results"] == []


def test_pagination_walks_every_memory_once(service: TestClient) -> None:
    made = create(
        service,
        user_id="alice",
        messages=[{"role": "user", "content": f"Note number {i}."} for i in range(7)],
    )
    create(service, user_id="bob", content="Bob's note.")
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        query: dict[str, Any] = {"user_id": "alice", "limit": 3}
        if cursor:
            query["cursor"] = cursor
        page = service.get("/v1/memory", params=query).json()
        seen += [m["id"] for m in page["memories"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert len(seen) == len(set(seen)) == 7
    assert seen == [m["id"] for m in made]
    assert_error(
        service.get("/v1/memory", params={"cursor": "not-a-cursor"}),
        400,
        param="cursor",
        code="validation_error",
    )


def test_list_filters_by_project_and_type(service: TestClient) -> None:
    create(service, user_id="alice", content="Trip fact.", project_id="trips")
    create(service, user_id="alice", content="Work fact.", project_id="work", type="procedural")
    assert contents(service, user_id="alice", project_id="trips") == ["Trip fact."]
    assert contents(service, user_id="alice", type="procedural") == ["Work fact."]
    assert contents(service) == ["Trip fact.", "Work fact."]


def test_history_keeps_every_version(service: TestClient) -> None:
    [made] = create(service, user_id="alice", content="Alice lives in Lisbon.")
    service.patch(
        f"/v1/memory/{made['id']}", json={"content": "Alice lives in Porto.", "reason": "moved"}
    )
    service.delete(f"/v1/memory/{made['id']}")

    history = service.get(f"/v1/memory/{made['id']}/history")

    assert history.status_code == 200
    entries = history.json()["entries"]
    assert [e["event"] for e in entries] == ["add", "update", "delete"]
    assert entries[1]["old"]["content"]["raw"] == "Alice lives in Lisbon."
    assert entries[1]["new"]["content"]["raw"] == "Alice lives in Porto."
    assert entries[1]["reason"] == "moved"
    assert_error(service.get("/v1/memory/nope/history"), 404, code="not_found")


def test_export_then_import_into_a_fresh_service_round_trips(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    first = make_service()
    create(first, user_id="alice", content="Alice is allergic to peanuts.", tags=["health"])
    create(
        first,
        user_id="alice",
        messages=[{"role": "user", "content": "I moved to Porto."}],
        metadata={"channel": "voice"},
    )
    create(first, user_id="bob", content="Bob likes jazz.")

    exported = first.get("/v1/memory/export", params={"user_id": "alice"})

    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    lines = exported.text.splitlines()
    assert len(lines) == 2
    fresh = make_service(server={"data_dir": str(tmp_path / "fresh")})
    imported = fresh.post(
        "/v1/memory/import",
        content=exported.content,
        headers={"Content-Type": "application/x-ndjson"},
    )
    assert imported.status_code == 200, imported.text
    assert imported.json() == {"imported": 2}
    again = fresh.get("/v1/memory/export", params={"user_id": "alice"})
    assert again.text == exported.text
    found = fresh.post("/v1/memory/search", json={"user_id": "alice", "query": "peanuts"})
    assert found.json()["results"][0]["record"]["content"]["raw"] == (
        "Alice is allergic to peanuts."
    )


def test_a_bad_import_line_stores_nothing(service: TestClient) -> None:
    create(service, user_id="alice", content="Alice likes tea.")
    good = service.get("/v1/memory/export", params={"user_id": "alice"}).text
    service.delete("/v1/memory", params={"user_id": "alice"})

    for bad, param in (
        ("{not json", None),
        (
            json.dumps({"format": "chatmem.export/1", "record": {"user_id": "alice"}}),
            "record.content",
        ),
        (json.dumps({"format": "other"}), "format"),
    ):
        answered = service.post("/v1/memory/import", content=good + bad + "\n")
        assert answered.status_code == 400, answered.text
        error = answered.json()["error"]
        assert "line 2: " in error["message"]
        assert error["param"] == param
        assert contents(service, user_id="alice") == []
    assert_error(
        service.post("/v1/memory/import", content=b"\xff\xfe"), 400, code="invalid_encoding"
    )


def test_one_tenant_cannot_touch_another_tenants_memories(service: TestClient) -> None:
    acme, globex = new_key(service, "acme"), new_key(service, "globex")
    [secret] = create(service, acme, user_id="alice", content="Alice's PIN is 4321.")
    memory_id = secret["id"]
    exported = service.get("/v1/memory/export", params={"user_id": "alice"}, headers=acme).text

    assert_error(service.get(f"/v1/memory/{memory_id}", headers=globex), 404, code="not_found")
    assert_error(
        service.get(f"/v1/memory/{memory_id}/history", headers=globex), 404, code="not_found"
    )
    assert_error(
        service.patch(f"/v1/memory/{memory_id}", json={"content": "PIN 0000"}, headers=globex),
        404,
        code="not_found",
    )
    assert_error(service.delete(f"/v1/memory/{memory_id}", headers=globex), 404, code="not_found")
    assert contents(service, globex, user_id="alice") == []
    assert contents(service, globex) == []
    searched = service.post(
        "/v1/memory/search", json={"user_id": "alice", "query": "PIN"}, headers=globex
    )
    assert searched.json()["results"] == []
    assert service.get("/v1/memory/export", params={"user_id": "alice"}, headers=globex).text == ""
    forgot = service.delete("/v1/memory", params={"user_id": "alice"}, headers=globex)
    assert forgot.json() == {"deleted": 0}
    # Importing acme's own export with globex's key cannot write into acme (or anywhere).
    assert_error(
        service.post("/v1/memory/import", content=exported, headers=globex),
        400,
        param="record.tenant_id",
        code="wrong_tenant",
    )
    # Nor can a line rewritten to globex reuse acme's memory id to replace acme's record:
    # it is stored as a new memory of globex, answered as for an id nobody holds.
    line = json.loads(exported)
    line["record"]["tenant_id"] = "globex"
    line["record"]["content"]["raw"] = "Alice's PIN is 0000."
    reused = service.post("/v1/memory/import", content=json.dumps(line), headers=globex)
    assert reused.json() == {"imported": 1}

    still = service.get(f"/v1/memory/{memory_id}", headers=acme).json()
    assert still["content"]["raw"] == "Alice's PIN is 4321."
    assert still["metadata"]["version"] == 1
    assert still["tenant_id"] == "acme"
    assert contents(service, globex) == ["Alice's PIN is 0000."]
    assert_error(service.get(f"/v1/memory/{memory_id}", headers=globex), 404, code="not_found")


def test_an_import_line_without_a_tenant_lands_in_the_callers(service: TestClient) -> None:
    acme = new_key(service, "acme")
    record = {"user_id": "alice", "content": {"raw": "Alice likes tea."}}
    line = json.dumps({"format": "chatmem.export/1", "record": record, "vector": None})

    imported = service.post("/v1/memory/import", content=line, headers=acme)

    assert imported.json() == {"imported": 1}
    [memory] = service.get("/v1/memory", headers=acme).json()["memories"]
    assert memory["tenant_id"] == "acme"
    assert contents(service) == []  # the anonymous tenant got nothing


def test_forgetting_a_user_removes_memories_sessions_and_queued_extraction(
    service: TestClient,
) -> None:
    runtime = runtime_of(service)
    assert runtime.worker is not None
    runtime.worker.stop()  # batches stay queued until drain runs them here
    for user in ("alice", "bob"):
        create(service, user_id=user, content=f"{user} has a cat.", project_id="pets")
        appended = service.post(
            "/v1/sessions/s1/messages",
            json={
                "user_id": user,
                "messages": [{"role": "user", "content": "I am allergic to peanuts."}],
            },
        )
        assert appended.status_code == 201
    assert runtime.outbox.counts()[BatchState.PENDING] == 2

    forgot = service.delete("/v1/memory", params={"user_id": "alice"})

    assert forgot.json() == {"deleted": 1}
    assert contents(service, user_id="alice") == []
    assert service.get("/v1/sessions", params={"user_id": "alice"}).json()["sessions"] == []
    assert runtime.outbox.counts()[BatchState.PENDING] == 1  # bob's
    drain(service)
    assert contents(service, user_id="alice") == []
    assert "User is allergic to peanuts" in contents(service, user_id="bob")


def test_forgetting_a_project_keeps_the_rest(service: TestClient) -> None:
    create(service, user_id="alice", content="Trip fact.", project_id="trips")
    create(service, user_id="alice", content="Other fact.")
    service.post(
        "/v1/sessions/s1/messages",
        json={"user_id": "alice", "messages": [{"role": "user", "content": "Hello there."}]},
    )

    forgot = service.delete("/v1/memory", params={"user_id": "alice", "project_id": "trips"})

    assert forgot.json() == {"deleted": 1}
    assert contents(service, user_id="alice") == ["Other fact."]
    assert len(service.get("/v1/sessions", params={"user_id": "alice"}).json()["sessions"]) == 1


def test_roles_hide_a_memory_from_keys_without_them(service: TestClient) -> None:
    hr, staff = new_key(service, "acme", ["hr"]), new_key(service, "acme")
    [salary] = create(
        service, hr, user_id="alice", content="Alice's salary is 90k.", allowed_roles=["hr"]
    )
    create(service, hr, user_id="alice", content="Alice's salary review is in May.")
    assert salary["access_control"]["allowed_roles"] == ["hr"]
    hidden = salary["id"]

    assert_error(service.get(f"/v1/memory/{hidden}", headers=staff), 404, code="not_found")
    assert_error(service.get(f"/v1/memory/{hidden}/history", headers=staff), 404, code="not_found")
    assert_error(
        service.patch(f"/v1/memory/{hidden}", json={"importance": 0.1}, headers=staff),
        404,
        code="not_found",
    )
    assert_error(service.delete(f"/v1/memory/{hidden}", headers=staff), 404, code="not_found")
    assert contents(service, staff, user_id="alice") == ["Alice's salary review is in May."]
    searched = service.post(
        "/v1/memory/search", json={"user_id": "alice", "query": "salary", "k": 1}, headers=staff
    ).json()["results"]
    assert [r["record"]["content"]["raw"] for r in searched] == ["Alice's salary review is in May."]
    exported = service.get("/v1/memory/export", params={"user_id": "alice"}, headers=staff).text
    assert "90k" not in exported and len(exported.splitlines()) == 1

    for reader in (hr, {**ADMIN, "X-Chatmem-Tenant": "acme"}):
        assert service.get(f"/v1/memory/{hidden}", headers=reader).status_code == 200
        assert len(contents(service, reader, user_id="alice")) == 2


BAD_REQUESTS = [
    ("POST", "/v1/memory", {"content": "No user."}, "user_id"),
    ("POST", "/v1/memory", {"user_id": "a", "content": "x", "surprise": 1}, "surprise"),
    ("POST", "/v1/memory", {"user_id": "a", "content": "x", "type": "gossip"}, "type"),
    ("POST", "/v1/memory", {"user_id": "a", "content": "x", "importance": 2}, "importance"),
    ("POST", "/v1/memory", {"user_id": "a"}, None),
    ("POST", "/v1/memory", {"user_id": "a", "content": "x", "messages": []}, "messages"),
    ("POST", "/v1/memory", {"user_id": "", "content": "x"}, "user_id"),
    (
        "POST",
        "/v1/memory",
        {"user_id": "a", "messages": [{"role": "bot", "content": "x"}]},
        "messages[0].role",
    ),
    (
        "POST",
        "/v1/memory",
        {"user_id": "a", "content": "x", "metadata": {"bad key": 1}},
        "metadata",
    ),
    ("POST", "/v1/memory/search", {"query": "tea"}, "user_id"),
    ("POST", "/v1/memory/search", {"user_id": "a", "query": "tea", "k": 0}, "k"),
    ("POST", "/v1/memory/search", {"user_id": "a", "query": "tea", "k": 101}, "k"),
    ("POST", "/v1/memory/search", {"user_id": "a", "query": ""}, "query"),
    ("POST", "/v1/memory/search", {"user_id": "a", "query": "tea", "types": ["x"]}, "types[0]"),
    ("PATCH", "/v1/memory/some-id", {"user_id": "a"}, None),
    ("GET", "/v1/memory?limit=0", None, "limit"),
    ("GET", "/v1/memory?type=gossip", None, "type"),
    ("GET", "/v1/memory/export", None, "user_id"),
    ("DELETE", "/v1/memory", None, "user_id"),
]


@pytest.mark.parametrize(("method", "path", "body", "param"), BAD_REQUESTS)
def test_bad_input_is_400_naming_the_field_and_stores_nothing(
    service: TestClient, method: str, path: str, body: dict[str, Any] | None, param: str | None
) -> None:
    answered = service.request(method, path, json=body)

    assert answered.status_code == 400, answered.text
    error = answered.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    if param:
        assert param in error["message"]
    assert contents(service) == []


def test_memory_routes_answer_503_when_memory_is_off(make_service: ServiceFactory) -> None:
    service = make_service(memory={"enabled": False})
    for method, path, body in (
        ("POST", "/v1/memory", {"user_id": "a", "content": "x"}),
        ("GET", "/v1/memory/some-id", None),
        ("GET", "/v1/memory", None),
        ("POST", "/v1/memory/search", {"user_id": "a", "query": "x"}),
        ("PATCH", "/v1/memory/some-id", {"content": "y"}),
        ("GET", "/v1/memory/some-id/history", None),
        ("GET", "/v1/memory/export?user_id=a", None),
        ("POST", "/v1/memory/import", None),
        ("DELETE", "/v1/memory/some-id", None),
        ("DELETE", "/v1/memory?user_id=a", None),
    ):
        answered = service.request(method, path, json=body)
        assert_error(answered, 503, code="memory_unavailable")
        assert "memory.enabled is false" in answered.json()["error"]["message"]
    # Short-term memory still works.
    appended = service.post(
        "/v1/sessions/s1/messages",
        json={"user_id": "a", "messages": [{"role": "user", "content": "Hi."}]},
    )
    assert appended.status_code == 201


def test_the_openapi_spec_documents_every_memory_route(service: TestClient) -> None:
    spec = service.get("/openapi.json").json()
    paths = spec["paths"]
    assert set(paths["/v1/memory"]) == {"get", "post", "delete"}
    assert set(paths["/v1/memory/{memory_id}"]) == {"get", "patch", "delete"}
    for path in ("/v1/memory/search", "/v1/memory/export", "/v1/memory/import"):
        assert path in paths
    created = paths["/v1/memory"]["post"]["responses"]["201"]["content"]["application/json"]
    assert created["schema"] == {"$ref": "#/components/schemas/Memories"}
    assert "application/x-ndjson" in paths["/v1/memory/import"]["post"]["requestBody"]["content"]


def test_list_count_and_export_share_every_filter(service: TestClient) -> None:
    create(service, user_id="alice", content="Trip fact.", project_id="trips", session_id="s1")
    create(service, user_id="alice", content="Work fact.", type="procedural", session_id="s2")
    create(service, user_id="alice", content="Agent fact.", agent_id="helper", type="profile")
    filters: list[tuple[dict[str, Any], list[str]]] = [
        ({"session_id": "s1"}, ["Trip fact."]),
        ({"agent_id": "helper"}, ["Agent fact."]),
        ({"type": ["procedural", "profile"]}, ["Work fact.", "Agent fact."]),
        ({"created_after": "2999-01-01T00:00:00Z"}, []),
        (
            {"created_before": "2999-01-01T00:00:00Z", "current": True},
            ["Trip fact.", "Work fact.", "Agent fact."],
        ),
    ]
    for query, expected in filters:
        assert contents(service, user_id="alice", **query) == expected, query
        counted = service.get("/v1/memory/count", params={"user_id": "alice", **query})
        assert counted.json() == {"count": len(expected)}, query
        exported = service.get("/v1/memory/export", params={"user_id": "alice", **query}).text
        assert [
            json.loads(line)["record"]["content"]["raw"] for line in exported.splitlines()
        ] == expected
    bad = service.get("/v1/memory/count", params={"type": "nonsense"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "type"


def test_import_on_conflict_skips_or_replaces(service: TestClient) -> None:
    (made,) = create(service, user_id="alice", content="Budget is $10,000.")
    line = service.get("/v1/memory/export", params={"user_id": "alice"}).text
    again = service.post("/v1/memory/import", content=line)
    assert again.status_code == 400  # fail: nothing stored
    skipped = service.post("/v1/memory/import", content=line, params={"on_conflict": "skip"})
    assert skipped.json() == {"imported": 0}
    changed = line.replace("Budget is $10,000.", "Budget is $12,000.")
    replaced = service.post("/v1/memory/import", content=changed, params={"on_conflict": "replace"})
    assert replaced.json() == {"imported": 1}
    got = service.get(f"/v1/memory/{made['id']}").json()
    assert got["content"]["raw"] == "Budget is $12,000." and got["metadata"]["version"] == 2
    wrong = service.post("/v1/memory/import", content=line, params={"on_conflict": "merge"})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "on_conflict"


def test_a_delete_keeps_its_reason_in_the_history(service: TestClient) -> None:
    (made,) = create(service, user_id="alice", content="Old address.")
    gone = service.delete(f"/v1/memory/{made['id']}", params={"reason": "user moved"})
    assert gone.status_code == 200
    entries = service.get(f"/v1/memory/{made['id']}/history").json()["entries"]
    assert entries[-1]["event"] == "delete" and entries[-1]["reason"] == "user moved"


def test_search_as_of_a_moment_leaves_out_what_was_said_after_it(service: TestClient) -> None:
    """``as_of`` asks what was known then (issue 18): the move said in June is not known in
    May, though a chat turn is valid from whenever; without it, both come back."""
    for text, said in (
        ("I live in Lisbon, near the river.", "2023-05-01T10:00:00Z"),
        ("I moved to Porto last week, I live there now.", "2023-06-20T10:00:00Z"),
    ):
        create(service, user_id="alice", session_id="s1",
               messages=[{"role": "user", "content": text, "timestamp": said}])  # fmt: skip
    query = {"user_id": "alice", "query": "Where do I live?", "k": 5, "threshold": 0.0}

    def found(**extra: Any) -> list[str]:
        answer = service.post("/v1/memory/search", json={**query, **extra})
        assert answer.status_code == 200, answer.text
        return [hit["record"]["content"]["raw"] for hit in answer.json()["results"]]

    assert len(found()) == 2
    assert found(as_of="2023-05-15T00:00:00Z") == ["I live in Lisbon, near the river."]
    assert found(as_of="2023-04-01T00:00:00+02:00") == []
    assert len(found(as_of="2023-07-01T00:00:00Z")) == 2
    bad = service.post("/v1/memory/search", json={**query, "as_of": "last May"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "as_of"
