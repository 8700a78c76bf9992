"""Short-term memory over HTTP (SPEC S1, S2, S5, A5) and the session-end webhook, with a
real receiver on loopback."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastapi.testclient import TestClient

from chatmem.messages import SessionKey
from chatmem.server.webhooks import SIGNATURE_HEADER, verify
from chatmem.testing import ScriptedOpenAIServer
from chatmem.worker import BatchState
from tests.conftest import long_document
from tests.server.conftest import ServiceFactory, drain, runtime_of, wait_for
from tests.server.test_admin import assert_error, new_key

SECRET = "s3cret-0123456789"


def said(*texts: str) -> list[dict[str, str]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)
    ]


def append(
    client: TestClient,
    session: str,
    messages: list[Any],
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> int:
    answered = client.post(
        f"/v1/sessions/{session}/messages",
        json={"user_id": "alice", "messages": messages, **extra},
        headers=headers or {},
    )
    assert answered.status_code == 201, answered.text
    length: int = answered.json()["length"]
    return length


class Receiver:
    """A webhook receiver on loopback; ``answer(n)`` is the status of the n-th request (from
    1), after ``hold`` is set when ``hold`` is given."""

    def __init__(self, answer: Callable[[int], int], hold: threading.Event | None = None):
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.arrived = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((dict(self.headers), body))
                receiver.arrived.set()
                if hold is not None:
                    hold.wait(10)
                self.send_response(answer(len(receiver.requests)))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    @contextmanager
    def running(self) -> Iterator[Receiver]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()


def with_webhook(make_service: ServiceFactory, url: str, **target: Any) -> TestClient:
    return make_service(webhooks={"session_end": {"url": url, "secret": SECRET, **target}})


def test_append_read_list_and_end_a_session(service: TestClient) -> None:
    assert append(service, "trip", said("We fly to Hawaii in March.", "Lovely!")) == 2
    rich = [
        {
            "role": "assistant",
            "content": "Your budget is",
            "turn_id": 3,
            "timestamp": 1_700_000_000_000,
            "metadata": {"source": "llm", "interrupted": True, "original": "Your budget is $10k."},
        }
    ]
    assert append(service, "trip", rich, format="rich") == 3
    vercel = [{"id": "v1", "role": "user", "parts": [{"type": "text", "text": "And hotels?"}]}]
    assert append(service, "trip", vercel, format="vercel") == 4
    append(service, "other", said("Unrelated."))

    read = service.get("/v1/sessions/trip", params={"user_id": "alice"})

    assert read.status_code == 200
    view = read.json()
    assert [m["content"] for m in view["messages"]] == [
        "We fly to Hawaii in March.",
        "Lovely!",
        "Your budget is",
        "And hotels?",
    ]
    assert view["messages"][2]["turn_id"] == 3
    assert view["messages"][2]["metadata"]["original"] == "Your budget is $10k."
    assert view["window_start"] == 0 and view["summary"] is None and view["ended_at"] is None
    as_openai = service.get("/v1/sessions/trip", params={"user_id": "alice", "format": "openai"})
    assert as_openai.json()["messages"][0] == {
        "role": "user",
        "content": "We fly to Hawaii in March.",
    }
    sessions = service.get("/v1/sessions", params={"user_id": "alice"}).json()["sessions"]
    assert {s["session_id"]: s["length"] for s in sessions} == {"trip": 4, "other": 1}

    ended = service.post("/v1/sessions/trip/end", params={"user_id": "alice"})

    assert ended.status_code == 200
    assert ended.json()["length"] == 4
    assert ended.json()["summary"]
    after = service.get("/v1/sessions/trip", params={"user_id": "alice"}).json()
    assert after["ended_at"] is not None
    assert after["episode"]["content"] == ended.json()["summary"]
    assert len(after["messages"]) == 4


def test_a_long_session_is_summarised_but_its_history_stays(make_service: ServiceFactory) -> None:
    service = make_service(memory={"sessions": {"max_turns": 4}})
    for turn in range(6):
        append(service, "long", said(f"Question {turn}?", f"Answer {turn}."))

    view = service.get("/v1/sessions/long", params={"user_id": "alice"}).json()

    assert len(view["messages"]) == 12
    assert view["window_start"] > 0
    assert view["summary"]["role"] == "system"


def test_unknown_sessions_and_bad_messages(service: TestClient) -> None:
    for answered in (
        service.get("/v1/sessions/none", params={"user_id": "alice"}),
        service.post("/v1/sessions/none/end", params={"user_id": "alice"}),
        service.delete("/v1/sessions/none", params={"user_id": "alice"}),
        service.get("/v1/sessions/none/system", params={"user_id": "alice"}),
    ):
        assert_error(answered, 404, code="not_found")
    for body, param in (
        ({"messages": said("Hi.")}, "user_id"),
        ({"user_id": "alice", "messages": said("Hi."), "format": "xml"}, "format"),
        ({"user_id": "alice", "messages": []}, "messages"),
        ({"user_id": "alice", "messages": [{"role": "bot", "content": "x"}]}, "messages[0].role"),
        ({"user_id": "alice", "messages": said("Hi."), "extra": 1}, "extra"),
    ):
        answered = service.post("/v1/sessions/s/messages", json=body)
        assert answered.status_code == 400, answered.text
        assert answered.json()["error"]["param"] == param
    assert_error(service.get("/v1/sessions/s"), 400, param="user_id", code="validation_error")
    assert service.get("/v1/sessions", params={"user_id": "alice"}).json()["sessions"] == []


def test_a_tenant_never_sees_another_tenants_sessions(service: TestClient) -> None:
    acme, globex = new_key(service, "acme"), new_key(service, "globex")
    append(service, "s1", said("Acme secret."), headers=acme)
    service.put("/v1/sessions/s1/system", json={"user_id": "alice", "content": "x"}, headers=acme)
    query = {"user_id": "alice"}

    assert_error(
        service.get("/v1/sessions/s1", params=query, headers=globex), 404, code="not_found"
    )
    assert service.get("/v1/sessions", params=query, headers=globex).json()["sessions"] == []
    assert_error(
        service.get("/v1/sessions/s1/system", params=query, headers=globex), 404, code="not_found"
    )
    assert_error(
        service.delete("/v1/sessions/s1", params=query, headers=globex), 404, code="not_found"
    )
    assert len(service.get("/v1/sessions/s1", params=query, headers=acme).json()["messages"]) == 1


def test_deleting_a_session_forgets_it(service: TestClient) -> None:
    append(service, "s1", said("Hello."))
    append(service, "s2", said("Other."))

    deleted = service.delete("/v1/sessions/s1", params={"user_id": "alice"})

    assert deleted.json() == {"deleted": True}
    assert_error(service.get("/v1/sessions/s1", params={"user_id": "alice"}), 404, code="not_found")
    sessions = service.get("/v1/sessions", params={"user_id": "alice"}).json()["sessions"]
    assert [s["session_id"] for s in sessions] == ["s2"]


def test_system_memory_set_at_runtime_reaches_the_next_chat(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    def chat() -> list[dict[str, Any]]:
        answered = service.post(
            "/v1/chat/completions",
            json={
                "model": "m",
                "messages": [{"role": "user", "content": "Hello there."}],
                "memory_context": {"user_id": "alice", "session_id": "s1"},
            },
        )
        assert answered.status_code == 200, answered.text
        sent: list[dict[str, Any]] = upstream.chat_requests[-1]["messages"]
        return sent

    put = service.put(
        "/v1/sessions/s1/system", json={"user_id": "alice", "content": "Speak like a pirate."}
    )
    assert put.status_code == 200
    sent = chat()
    assert sent[0]["role"] == "system" and "Speak like a pirate." in sent[0]["content"]

    service.put("/v1/sessions/s1/system", json={"user_id": "alice", "content": "Be formal."})
    sent = chat()
    system = "\n".join(m["content"] for m in sent if m["role"] == "system")
    assert "Be formal." in system and "pirate" not in system
    got = service.get("/v1/sessions/s1/system", params={"user_id": "alice"})
    assert got.json() == {"session_id": "s1", "content": "Be formal."}

    assert service.delete("/v1/sessions/s1/system", params={"user_id": "alice"}).status_code == 200
    sent = chat()
    assert all("Be formal." not in str(m["content"]) for m in sent)
    assert_error(
        service.put("/v1/sessions/s1/system", json={"user_id": "alice", "content": ""}),
        400,
        param="content",
        code="validation_error",
    )


def test_ending_a_session_sends_a_signed_webhook(make_service: ServiceFactory) -> None:
    with Receiver(lambda n: 200).running() as receiver:
        service = with_webhook(make_service, receiver.url)
        append(service, "trip", said("My budget for the Hawaii trip is $10,000.", "Noted."))

        ended = service.post("/v1/sessions/trip/end", params={"user_id": "alice"})

        webhooks = runtime_of(service).webhooks
        assert webhooks is not None and webhooks.wait_idle(10)
    [(headers, body)] = receiver.requests
    assert verify(SECRET, body, headers[SIGNATURE_HEADER])
    assert not verify("another-secret-000", body, headers[SIGNATURE_HEADER])
    event = json.loads(body)
    assert event["event"] == "session.ended"
    assert datetime.fromisoformat(event["created_at"]).utcoffset() == timedelta(0)  # ISO, UTC
    assert (event["tenant_id"], event["user_id"], event["session_id"]) == (
        "default",
        "alice",
        "trip",
    )
    assert event["summary"] == ended.json()["summary"]
    assert [m["content"] for m in event["messages"]] == [
        "My budget for the Hawaii trip is $10,000.",
        "Noted.",
    ]
    assert {"id", "timestamp", "role"} <= set(event["messages"][0])


def test_a_failing_receiver_is_retried_until_it_accepts(make_service: ServiceFactory) -> None:
    with Receiver(lambda n: 500 if n <= 2 else 200).running() as receiver:
        service = with_webhook(make_service, receiver.url, backoff_s=0.01, max_attempts=5)
        append(service, "s1", said("Hello."))
        service.post("/v1/sessions/s1/end", params={"user_id": "alice"})
        webhooks = runtime_of(service).webhooks
        assert webhooks is not None and webhooks.wait_idle(10)
    assert len(receiver.requests) == 3
    bodies = {body for _, body in receiver.requests}
    assert len(bodies) == 1  # the same event each time
    assert all(verify(SECRET, body, h[SIGNATURE_HEADER]) for h, body in receiver.requests)


def test_a_hanging_receiver_does_not_slow_a_session_end(make_service: ServiceFactory) -> None:
    hold = threading.Event()
    with Receiver(lambda n: 200, hold).running() as receiver:
        service = with_webhook(make_service, receiver.url, timeout_s=30, max_attempts=1)
        append(service, "s1", said("Hello."))
        began = time.perf_counter()
        ended = service.post("/v1/sessions/s1/end", params={"user_id": "alice"})
        took = time.perf_counter() - began
        try:
            assert ended.status_code == 200
            assert receiver.arrived.wait(10)  # the delivery is under way, and held
            # A delivery on the request path would have waited for the 30 s timeout.
            assert took < 5
        finally:
            hold.set()
        webhooks = runtime_of(service).webhooks
        assert webhooks is not None and webhooks.wait_idle(10)


@pytest.mark.parametrize("path", ["/v1/sessions/s1/end", "/v1/sessions/s1/messages"])
def test_session_routes_need_a_user(service: TestClient, path: str) -> None:
    answered = service.post(path, json={"messages": said("x")})
    assert answered.status_code == 400
    assert answered.json()["error"]["param"] == "user_id"


def test_a_webhook_not_delivered_before_a_restart_is_delivered_after_it(
    make_service: ServiceFactory,
) -> None:
    """The queue is in the service database: an event whose retry falls after the service
    stopped is sent by the next start, once, with the same id."""
    with Receiver(lambda n: 503 if n == 1 else 200).running() as receiver:
        first = with_webhook(make_service, receiver.url, backoff_s=1.0, max_attempts=3)
        webhooks = runtime_of(first).webhooks
        assert webhooks is not None and webhooks.durable
        append(first, "s1", said("Hello."))
        first.post("/v1/sessions/s1/end", params={"user_id": "alice"})
        # The first attempt was refused and its retry is due in a second.
        wait_for(lambda: (webhooks.next_attempt_at() or 0) > time.time())
        first.__exit__(None, None, None)
        assert len(receiver.requests) == 1

        second = with_webhook(make_service, receiver.url, backoff_s=1.0, max_attempts=3)
        again = runtime_of(second).webhooks
        assert again is not None and again.wait_idle(10)
    assert len(receiver.requests) == 2
    ids = {json.loads(body)["id"] for _, body in receiver.requests}
    assert len(ids) == 1
    assert again.pending() == 0


def test_a_webhook_given_up_on_is_kept_as_failed(make_service: ServiceFactory) -> None:
    with Receiver(lambda n: 400).running() as receiver:
        service = with_webhook(make_service, receiver.url, max_attempts=3)
        append(service, "s1", said("Hello."))
        service.post("/v1/sessions/s1/end", params={"user_id": "alice"})
        webhooks = runtime_of(service).webhooks
        assert webhooks is not None and webhooks.wait_idle(10)
    assert len(receiver.requests) == 1  # a 400 is final: not retried
    data_dir = runtime_of(service).config.server.data_dir
    assert data_dir is not None
    conn = sqlite3.connect(f"{data_dir}/service.db")
    rows = conn.execute("SELECT state, attempts, error FROM webhook_deliveries").fetchall()
    conn.close()
    assert rows == [("failed", 1, "HTTP 400")]


def test_a_long_message_is_appended_ended_and_extracted(service: TestClient) -> None:
    document = long_document(100_000)
    assert append(service, "report", said(document, "Thanks, I have read it.")) == 2

    ended = service.post("/v1/sessions/report/end", params={"user_id": "alice"})

    assert ended.status_code == 200, ended.text
    assert ended.json()["length"] == 2 and ended.json()["summary"]
    read = service.get("/v1/sessions/report", params={"user_id": "alice"}).json()
    assert read["messages"][0]["content"] == document
    drain(service)
    runtime = runtime_of(service)
    assert runtime.outbox.counts()[BatchState.DEAD] == 0
    assert runtime.long_term is not None
    hits = runtime.long_term.search("peanut allergy", user_id="alice", k=3)
    assert [hit.record.text for hit in hits] == ["User is allergic to peanuts"]
    assert hits[0].record.session_id == "report"
    assert (
        runtime.short_term.history(SessionKey("default", "alice", "report"))[0].content == document
    )


def test_ending_a_session_names_the_user_in_the_body_as_an_append_does(
    service: TestClient,
) -> None:
    append(service, "trip", said("We fly to Hawaii in March.", "Noted."))
    ended = service.post("/v1/sessions/trip/end", json={"user_id": "alice"})
    assert ended.status_code == 200 and ended.json()["length"] == 2
    missing = service.post("/v1/sessions/trip/end")
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "user_id"
    both = service.post("/v1/sessions/trip/end", json={"user_id": "bob"}, params={"user_id": "al"})
    assert both.status_code == 400 and "differs" in both.json()["error"]["message"]
    unknown = service.post("/v1/sessions/trip/end", json={"user": "alice"})
    assert unknown.status_code == 400
