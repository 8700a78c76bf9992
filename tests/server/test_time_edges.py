"""The service takes a chat said at either edge of the calendar, and the inspector lists a
user's memories up to its last day (``records.shifted``; tests/test_time_edges.py has the
library's cases): both were an ``OverflowError``, a 500."""

from __future__ import annotations

import httpx
from fastapi.testclient import TestClient

from chatmem.server.ui.login import COOKIE
from tests.server.conftest import ADMIN_KEY, ServiceFactory


def test_the_service_takes_a_chat_said_at_each_edge_and_the_inspector_its_last_day(
    make_service: ServiceFactory,
) -> None:
    client = make_service()
    for when in ("9999-12-31T23:59:59.999Z", "0001-01-01T00:00:00Z"):
        for text in ("See you tomorrow!", f"I moved to Porto last week ({when[:4]})."):
            said = client.post(
                "/v1/memory",
                json={
                    "user_id": "u",
                    "session_id": f"s{when[:4]}",
                    "messages": [{"role": "user", "content": text, "timestamp": when}],
                },
            )
            assert said.status_code == 201, said.text
    found = client.post("/v1/memory/search", json={"user_id": "u", "query": "Where now?"})
    assert found.status_code == 200 and len(found.json()["results"]) == 4
    page = _inspector(client, "/ui/users/u/memories?since=0001-01-01&until=9999-12-31")
    assert page.status_code == 200, page.text
    # The last day's list holds what was said at its last millisecond.
    assert "I moved to Porto last week (9999)." in page.text
    assert "I moved to Porto last week (0001)." in page.text
    last = _inspector(client, "/ui/users/u/memories?since=9999-12-31&until=9999-12-31")
    assert last.status_code == 200 and "(9999)" in last.text and "(0001)" not in last.text


def _inspector(client: TestClient, path: str) -> httpx.Response:
    token = client.app.state.ui_sessions.open(ADMIN_KEY, "default")  # type: ignore[attr-defined]
    client.cookies.clear()
    try:
        return client.get(path, headers={"Cookie": f"{COOKIE}={token}"})
    finally:
        client.cookies.clear()
