"""One time format on the wire (issue 17): every time chatmem's own JSON routes return is an
ISO 8601 UTC string, never an integer. The OpenAI-shaped routes keep OpenAI's shapes (a
Response's ``created_at`` is Unix seconds, as the OpenAI SDKs read it), and a rich message's
``timestamp`` is the message format's own (milliseconds, as it is sent in)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from fastapi.testclient import TestClient

from chatmem.client.models import ApiKey, SessionInfo
from tests.server.conftest import ADMIN_KEY

AS_ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}", "X-Chatmem-Tenant": "default"}
#: Routes in OpenAI's shapes, and routes that answer something other than JSON.
NOT_CHATMEMS_SHAPE = re.compile(r"^/v1/(responses|chat|models|embeddings)|^/(docs|ui|mcp|metrics)")
#: ``*_ms`` fields that are durations, not times.
DURATIONS = {"took_ms"}


def _times(value: Any, where: str = "") -> list[tuple[str, Any]]:
    """Every time field in a JSON value: a key ending in ``_at`` or ``_ms`` (a message's
    ``timestamp`` is the message format's, left out)."""
    found: list[tuple[str, Any]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key.endswith(("_at", "_ms")) and key not in DURATIONS:
                found.append((f"{where}.{key}", item))
            elif key != "messages":
                found += _times(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _times(item, f"{where}[{index}]")
    return found


def _fill(path: str, ids: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: ids[m.group(1)], path)


def _seed(service: TestClient) -> tuple[dict[str, str], list[Any]]:
    """A memory, an ended session with a system memory, a key and a maintenance run; the
    ids to read them by, and what the writes answered."""
    made = service.post("/v1/memory", json={"user_id": "alice", "content": "Likes tea."})
    appended = service.post(
        "/v1/sessions/trip/messages",
        json={"user_id": "alice", "messages": [{"role": "user", "content": "Hi"}]},
    )
    ended = service.post("/v1/sessions/trip/end", json={"user_id": "alice"})
    system = service.put("/v1/sessions/trip/system", json={"user_id": "alice", "content": "Hi"})
    key = service.post("/v1/admin/keys", json={"tenant_id": "acme"}, headers=AS_ADMIN)
    run = service.post("/v1/admin/maintenance/decay", headers=AS_ADMIN)
    answers = [made, appended, ended, system, key, run]
    assert all(answer.status_code < 300 for answer in answers), [a.text for a in answers]
    ids = {
        "memory_id": made.json()["memories"][0]["id"],
        "session_id": "trip",
        "key_id": key.json()["key_id"],
        "job": "decay",
    }
    return ids, [answer.json() for answer in answers]


def test_every_json_route_answers_times_as_iso_strings(service: TestClient) -> None:
    ids, answers = _seed(service)
    paths = service.get("/openapi.json").json()["paths"]
    read = 0
    for path, methods in paths.items():
        if "get" not in methods or NOT_CHATMEMS_SHAPE.search(path):
            continue
        answer = service.get(_fill(path, ids), params={"user_id": "alice"}, headers=AS_ADMIN)
        if answer.headers.get("content-type", "").startswith("application/json"):
            assert answer.status_code == 200, f"GET {path}: {answer.text}"
            answers.append(answer.json())
            read += 1
    assert read >= 10
    times = [time for answer in answers for time in _times(answer)]
    assert {name.rsplit(".", 1)[-1] for name, _ in times} >= {
        "created_at",
        "updated_at",
        "ended_at",
        "next_due_at",
        "last_run_at",
    }
    for name, value in times:
        assert value is None or isinstance(value, str), f"{name} = {value!r}"
        if value is not None:
            moment = datetime.fromisoformat(value)
            assert moment.utcoffset() is not None and not moment.utcoffset(), (name, value)


def test_a_session_time_is_the_memory_apis_format(service: TestClient) -> None:
    made = service.post("/v1/memory", json={"user_id": "alice", "content": "Likes tea."}).json()
    made = made["memories"][0]
    service.post(
        "/v1/sessions/trip/messages",
        json={"user_id": "alice", "messages": [{"role": "user", "content": "Hi"}]},
    )
    listed = service.get("/v1/sessions", params={"user_id": "alice"}).json()["sessions"]
    shape = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z$")
    assert shape.match(made["time"]["created_at"]) and shape.match(listed[0]["updated_at"])


def test_the_models_read_iso_times_and_an_older_services_milliseconds() -> None:
    at = datetime(2026, 11, 24, 10, 15, 30, 123000, tzinfo=UTC)
    for sent in ("2026-11-24T10:15:30.123000Z", 1795515330123):
        info = SessionInfo.model_validate(
            {"session_id": "s", "length": 1, "updated_at": sent, "ended_at": None}
        )
        assert info.updated_at == at
    key = ApiKey.model_validate(
        {
            "key_id": "k",
            "tenant_id": "t",
            "roles": [],
            "name": None,
            "created_at": 0,
            "revoked": False,
            "source": "config",
        }
    )
    assert key.created_at == datetime(1970, 1, 1, tzinfo=UTC)


def test_a_time_query_takes_iso_or_epoch_milliseconds(service: TestClient) -> None:
    service.post("/v1/memory", json={"user_id": "alice", "content": "Likes tea."})
    for after in ("2000-01-01T00:00:00Z", "946684800000"):
        listed = service.get("/v1/memory", params={"user_id": "alice", "created_after": after})
        assert listed.status_code == 200 and len(listed.json()["memories"]) == 1, listed.text
    for after in ("2999-01-01T00:00:00Z", "32472144000000"):
        listed = service.get("/v1/memory", params={"user_id": "alice", "created_after": after})
        assert listed.status_code == 200 and listed.json()["memories"] == [], listed.text
