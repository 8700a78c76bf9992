"""The chat proxy over HTTP, through the official openai SDK where a client would use it."""

from __future__ import annotations

import json
import logging
import re
import socket
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi.testclient import TestClient

from chatmem.embeddings import OpenAIEmbedder
from chatmem.messages import SessionKey
from chatmem.records import Filter
from chatmem.server import Runtime, ServiceConfig, create_app
from chatmem.server.injection import LIGHT_REASON, Prepared, _record
from chatmem.testing import ScriptedOpenAIServer, ToolCalls
from tests.conftest import long_document
from tests.server.conftest import ADMIN_KEY, ServiceFactory, drain, runtime_of, settle, wait_for


def sdk(client: TestClient, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{client.base_url}/v1", api_key=key, http_client=client)


def ask(service: TestClient, text: str, *, user: str | None = None) -> httpx.Response:
    """One user message through the proxy, over plain HTTP (no SDK)."""
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": text}]}
    if user is not None:
        body["user"] = user
    return service.post("/v1/chat/completions", json=body)


def test_a_fact_told_in_one_session_is_injected_in_the_next(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    chat = sdk(service)
    told = chat.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "My budget for the Hawaii trip is $10,000."}],
        extra_body={"memory_context": {"user_id": "alice", "session_id": "march-15"}},
    )
    assert told.choices[0].message.content == "seen: My budget for the Hawaii trip is $10,000."
    drain(service)
    asked = chat.chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": "What's my budget for the trip?"}],
        extra_body={"memory_context": {"user_id": "alice", "session_id": "march-20"}},
    )
    assert asked.headers["x-chatmem-memory"] == "injected"
    sent = upstream.chat_requests[-1]["messages"]
    assert sent[0]["role"] == "system"
    assert "User's relevant context" in sent[0]["content"]
    assert "$10,000" in sent[0]["content"]
    assert sent[1] == {"role": "user", "content": "What's my budget for the trip?"}


def test_streaming_passes_through_and_the_streamed_answer_is_stored(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    upstream.script_chat("Your budget is ten thousand dollars.")
    stream = sdk(service).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Remind me of my budget please"}],
        stream=True,
        user="alice",
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "Your budget is ten thousand dollars."
    assert upstream.chat_requests[-1]["stream"] is True
    key = SessionKey("default", "alice", "default")
    short_term = runtime_of(service).short_term
    wait_for(lambda: len(short_term.history(key)) == 2)
    assert [(m.role.value, m.content) for m in short_term.history(key)] == [
        ("user", "Remind me of my budget please"),
        ("assistant", "Your budget is ten thousand dollars."),
    ]


def test_only_the_new_turn_is_appended_when_the_client_resends_history(
    service: TestClient,
) -> None:
    chat = sdk(service)
    first = [{"role": "user", "content": "I like green tea."}]
    answer = chat.chat.completions.create(model="m", messages=first, user="carol")
    second = [
        *first,
        {"role": "assistant", "content": answer.choices[0].message.content},
        {"role": "user", "content": "And I live in Lisbon."},
    ]
    chat.chat.completions.create(model="m", messages=second, user="carol")
    settle()
    history = runtime_of(service).short_term.history(SessionKey("default", "carol", "default"))
    assert [m.content for m in history if m.role.value == "user"] == [
        "I like green tea.",
        "And I live in Lisbon.",
    ]
    assert len(history) == 4


def test_one_users_facts_never_reach_another_user(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    chat = sdk(service)
    chat.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "My passport number is X1234567."}],
        user="alice",
    )
    drain(service)
    asked = chat.chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": "What is my passport number?"}],
        user="bob",
    )
    assert asked.headers["x-chatmem-memory"] == "empty"
    assert "X1234567" not in json.dumps(upstream.chat_requests[-1])


def test_tenants_are_apart_whatever_user_ids_they_send(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    keys = runtime_of(service).keys
    acme, _ = keys.create("acme", [])
    globex, _ = keys.create("globex", [])
    sdk(service, acme).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "My favourite colour is teal."}],
        user="alice",
    )
    drain(service)
    sdk(service, globex).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "What is my favourite colour?"}],
        user="alice",
    )
    assert "teal" not in json.dumps(upstream.chat_requests[-1])
    sdk(service, acme).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "What is my favourite colour?"}],
        user="alice",
    )
    assert "teal" in json.dumps(upstream.chat_requests[-1])


def test_greetings_are_not_searched_and_say_why(service: TestClient) -> None:
    raw = sdk(service).chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "thanks!"}], user="alice"
    )
    assert raw.headers["x-chatmem-memory"] == "skipped"
    assert raw.headers["x-chatmem-memory-reason"]


def test_memory_is_off_without_a_user_and_nothing_is_stored(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    raw = sdk(service).chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "My budget is $5."}]
    )
    assert raw.headers["x-chatmem-memory"] == "off"
    assert upstream.chat_requests[-1]["messages"] == [
        {"role": "user", "content": "My budget is $5."}
    ]
    assert runtime_of(service).short_term.store.sessions("default", "default") == []


def test_fields_chatmem_does_not_read_pass_through_and_its_own_do_not(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    sdk(service).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi there, what's my name"}],
        temperature=0.25,
        max_tokens=7,
        extra_body={
            "memory_context": {"user_id": "alice"},
            "memory_config": {"retrieval_limit": 2},
            "seed": 11,
        },
    )
    sent = upstream.chat_requests[-1]
    assert (sent["temperature"], sent["max_tokens"], sent["seed"]) == (0.25, 7, 11)
    assert "memory_context" not in sent and "memory_config" not in sent


def test_memory_config_options_are_honoured(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    chat = sdk(service)
    for text in ("My budget for Hawaii is $10,000.", "My budget for Rome is $3,000."):
        chat.chat.completions.create(
            model="m", messages=[{"role": "user", "content": text}], user="dora"
        )
    drain(service)
    question = [{"role": "user", "content": "What is my budget for the trips?"}]
    raw = chat.chat.completions.with_raw_response.create(
        model="m", messages=question, extra_body={"memory_context": {"user_id": "dora"},
                                                 "memory_config": {"retrieval_limit": 1}}
    )  # fmt: skip
    assert raw.headers["x-chatmem-memory-count"] == "1"
    raw = chat.chat.completions.with_raw_response.create(
        model="m", messages=question, extra_body={"memory_context": {"user_id": "dora"},
                                                 "memory_config": {"enabled": False}}
    )  # fmt: skip
    assert raw.headers["x-chatmem-memory"] == "off"
    assert upstream.chat_requests[-1]["messages"] == question
    raw = chat.chat.completions.with_raw_response.create(
        model="m", messages=question, extra_body={"memory_context": {"user_id": "dora"},
                                                 "memory_config": {"memory_types": ["procedural"]}}
    )  # fmt: skip
    assert raw.headers["x-chatmem-memory"] == "empty"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"model": "m", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}],
             "memory_config": {"retrieval_limit": 0}},
            "memory_config.retrieval_limit",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}],
             "memory_context": {"user_id": ""}},
            "memory_context.user_id",
        ),
    ],
)  # fmt: skip
def test_bad_requests_get_a_400_naming_the_field(
    service: TestClient, upstream: ScriptedOpenAIServer, body: dict[str, Any], param: str
) -> None:
    answer = service.post("/v1/chat/completions", json=body)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == param and param in error["message"]
    assert upstream.chat_requests == []


def test_upstream_errors_pass_through_faithfully(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    body = {"error": {"message": "slow down", "type": "rate_limit", "code": "429"}}
    upstream.fail_next(429, body, headers={"Retry-After": "0"})
    answer = ask(service, "hi, my name?")
    assert answer.status_code == 429 and answer.json() == body
    with pytest.raises(openai.BadRequestError, match="no such model"):
        upstream.fail_next(400, {"error": {"message": "no such model"}})
        sdk(service).with_options(max_retries=0).chat.completions.create(
            model="nope", messages=[{"role": "user", "content": "x"}]
        )


def test_an_unreachable_upstream_is_a_502_that_names_it(make_service: ServiceFactory) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    service = make_service(upstream={"base_url": f"http://127.0.0.1:{port}/v1"})
    answer = ask(service, "hello")
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "upstream_unreachable"


# -- graceful degradation (F1, F2, F4) ----------------------------------------------------------


def test_an_unreachable_sqlite_store_at_start_turns_memory_off_and_chat_still_works(
    make_service: ServiceFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the store's folder should be")
    with caplog.at_level(logging.ERROR, logger="chatmem.server"):
        service = make_service(memory={"store": f"sqlite:///{blocker}/chatmem.db"})
    assert "memory store unavailable, memory disabled" in caplog.text
    answer = ask(service, "What's my budget?", user="alice")
    assert answer.status_code == 200
    assert answer.headers["x-chatmem-memory"] == "off"
    assert answer.json()["choices"][0]["message"]["content"] == "seen: What's my budget?"
    ready = service.get("/readyz", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()
    assert ready["memory"] == "off" and "not-a-directory" in ready["memory_error"]
    assert service.get("/v1/memory", params={"user_id": "alice"}).status_code == 503


def test_a_store_that_fails_mid_run_degrades_that_request_only(
    service: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = runtime_of(service)
    assert runtime.long_term is not None
    runtime.long_term.store.close()  # every later call raises StoreError
    with caplog.at_level(logging.WARNING, logger="chatmem.retrieval"):
        answer = ask(service, "What's my budget?", user="alice")
    assert answer.status_code == 200
    assert answer.headers["x-chatmem-memory"] == "degraded"
    assert "going on without memory" in caplog.text


@pytest.mark.milvus
def test_milvus_lite_stopped_mid_run_leaves_chat_working(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    pytest.importorskip("pymilvus")
    manager = pytest.importorskip("milvus_lite.server_manager")
    path = tmp_path / "milvus.db"
    service = make_service(memory={"store": f"milvus:///{path}", "extraction_batch_size": 1})
    chat = sdk(service)
    chat.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "My budget is $10,000."}], user="al"
    )
    drain(service)
    manager.server_manager_instance.release_server(str(path))  # the Lite server is gone
    answer = chat.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "What's my budget?"}], user="al"
    )
    assert answer.status_code == 200
    assert answer.headers["x-chatmem-memory"] == "degraded"
    assert answer.parse().choices[0].message.content == "seen: What's my budget?"


def test_a_slow_search_is_cut_at_its_budget(tmp_path: Path, upstream: ScriptedOpenAIServer) -> None:
    """The query's embedding comes from the scripted upstream, answered a second late: the
    search cannot finish in its 50 ms, whatever the machine's load (a budget of 1 ms over a
    fast search was a race the waiting thread could lose)."""
    config = ServiceConfig.parse(
        {
            "server": {"data_dir": str(tmp_path / "data")},
            "upstream": {"base_url": upstream.base_url},
            "memory": {"search_budget_ms": 50},
        }
    )
    embedder = OpenAIEmbedder("scripted", 8, base_url=upstream.base_url)
    with TestClient(create_app(runtime=Runtime.start(config, embedder=embedder))) as service:
        runtime = runtime_of(service)
        assert runtime.long_term is not None
        runtime.long_term.add("I drive a red car.", user_id="alice")
        upstream.delay_next(1.0)  # the next upstream call: the query's embedding
        answer = ask(service, "Which car do I drive?", user="alice")
    assert answer.status_code == 200
    assert answer.headers["x-chatmem-memory"] == "degraded"
    assert answer.headers["x-chatmem-memory-reason"] == "timeout"


def test_a_sessions_turns_are_stored_in_the_order_they_were_answered(
    service: TestClient,
) -> None:
    """Turns are stored after the answer, off the request; a client that sends its next
    turn at once must still find its session in order."""
    chat = sdk(service)
    said = [f"Note number {n} for today." for n in range(12)]
    for text in said:
        chat.chat.completions.create(
            model="m", messages=[{"role": "user", "content": text}], user="dora"
        )
    settle()
    history = runtime_of(service).short_term.history(SessionKey("default", "dora", "default"))
    assert [m.content for m in history if m.role.value == "user"] == said
    assert [m.role.value for m in history] == ["user", "assistant"] * len(said)


def test_extraction_shows_in_the_logs(
    service: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="chatmem.write_policy"):
        sdk(service).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "I'm allergic to peanuts."}],
            user="alice",
        )  # fmt: skip
        drain(service)
    assert re.search(r"Memory: stored [1-9]\d*", caplog.text)


def test_metrics_count_requests_hits_and_skips(service: TestClient) -> None:
    chat = sdk(service)
    chat.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "My dog is called Rex."}], user="al"
    )
    drain(service)
    chat.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "What's my dog called?"}], user="al"
    )
    chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "ok"}], user="al")
    drain(service)  # the turns are stored after the answers; the gauge is read once they ran
    text = service.get("/metrics").text
    assert 'chatmem_memory_requests_total{outcome="injected"} 1.0' in text
    assert re.search(r"chatmem_memory_hits_total [1-9]", text)
    assert re.search(r'chatmem_memory_skips_total\{reason="[^"]+"\} 1.0', text)
    assert 'route="/v1/chat/completions"' in text
    assert "chatmem_extraction_queue_depth 0.0" in text


def test_request_latency_is_recorded_by_route_and_status(service: TestClient) -> None:
    sdk(service).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello there"}], user="eve"
    )
    service.post("/v1/chat/completions", json={"model": "m", "messages": []})
    text = service.get("/metrics").text
    ok = 'chatmem_request_seconds_count{method="POST",route="/v1/chat/completions",status="2xx"}'
    bad = 'chatmem_request_seconds_count{method="POST",route="/v1/chat/completions",status="4xx"}'
    assert f"{ok} 1.0" in text
    assert f"{bad} 1.0" in text


def _in_project(service: TestClient, text: str, project: str | None) -> httpx.Response:
    context: dict[str, Any] = {"user_id": "pam", "session_id": f"s-{project}"}
    if project is not None:
        context["project_id"] = project
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return service.post("/v1/chat/completions", json={**body, "memory_context": context})


def _injected(upstream: ScriptedOpenAIServer) -> str:
    first = upstream.chat_requests[-1]["messages"][0]
    return str(first["content"]) if first["role"] == "system" else ""


def test_memory_context_project_id_keeps_facts_and_recall_in_the_project(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    """Facts told in a project are stored in it; a request naming a project recalls only
    that project's memories; one naming none recalls all of the user's."""
    _in_project(service, "Remember that my budget for the Hawaii trip is $4,000.", "trip")
    _in_project(service, "Remember that my budget for the office party is $300.", "work")
    drain(service)
    stored = runtime_of(service).long_term
    assert stored is not None
    by_project = {
        r.project_id: r.text
        for r in stored.list(Filter(tenant_id="default", user_id="pam")).records
    }
    assert "$4,000" in by_project["trip"] and "$300" in by_project["work"]
    assert set(by_project) == {"trip", "work"}

    asked = _in_project(service, "What's my budget?", "trip")
    assert asked.headers["x-chatmem-memory"] == "injected"
    assert "$4,000" in _injected(upstream) and "$300" not in _injected(upstream)
    asked = _in_project(service, "What's my budget?", "work")
    assert "$300" in _injected(upstream) and "$4,000" not in _injected(upstream)
    asked = _in_project(service, "What's my budget?", None)
    assert "$300" in _injected(upstream) and "$4,000" in _injected(upstream)
    history = runtime_of(service).short_term.history(SessionKey("default", "pam", "s-trip"))
    assert {m.metadata.model_extra.get("project_id") for m in history} == {"trip"}


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_and_their_results_are_kept_in_the_session(
    service: TestClient, upstream: ScriptedOpenAIServer, stream: bool
) -> None:
    """The assistant's tool calls (streamed in pieces or not) and the client's tool results
    are stored in order with the final answer; the upstream sees the requests unchanged."""
    arguments = '{"city": "Porto", "unit": "celsius"}'
    upstream.script_chat(ToolCalls((("get_weather", arguments),)), "It is 21 degrees in Porto.")
    chat = sdk(service)
    context = {"memory_context": {"user_id": "tess", "session_id": f"tools-{stream}"}}
    question = {"role": "user", "content": "What's the weather in Porto?"}

    def create(messages: list[dict[str, Any]]) -> tuple[str | None, list[Any]]:
        if not stream:
            made = chat.chat.completions.create(model="m", messages=messages, extra_body=context)
            message = made.choices[0].message
            return message.content, [c.model_dump() for c in message.tool_calls or []]
        text, calls = "", []
        for chunk in chat.chat.completions.create(
            model="m", messages=messages, extra_body=context, stream=True
        ):
            delta = chunk.choices[0].delta if chunk.choices else None
            text += (delta.content or "") if delta else ""
            calls += [c.model_dump() for c in (delta.tool_calls or [])] if delta else []
        return text or None, calls

    _, calls = create([question])
    assert calls and calls[0]["id"] == "call_0"
    call = {"id": "call_0", "type": "function",
            "function": {"name": "get_weather", "arguments": arguments}}  # fmt: skip
    answer, _ = create(
        [
            question,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "content": "21 C, sunny"},
        ]
    )
    assert answer == "It is 21 degrees in Porto."
    assert upstream.chat_requests[-1]["messages"][-1]["role"] == "tool"
    settle()
    key = SessionKey("default", "tess", f"tools-{stream}")
    history = runtime_of(service).short_term.history(key)
    assert [m.role.value for m in history] == ["user", "assistant", "tool", "assistant"]
    kept = history[1].tool_calls
    assert kept is not None and len(kept) == 1
    assert (kept[0].id, kept[0].function.name, kept[0].function.arguments) == (
        "call_0", "get_weather", arguments,
    )  # fmt: skip
    assert (history[2].tool_call_id, history[2].content) == ("call_0", "21 C, sunny")
    assert history[3].content == "It is 21 degrees in Porto."


def test_a_long_user_message_is_answered_stored_and_extracted(
    service: TestClient, upstream: ScriptedOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    document = long_document(100_000)
    context = {"memory_context": {"user_id": "alice", "session_id": "report"}}
    with caplog.at_level(logging.INFO, logger="chatmem"):
        answered = sdk(service).chat.completions.create(
            model="m", messages=[{"role": "user", "content": document}], extra_body=context
        )
        drain(service)

    assert answered.choices[0].message.content == f"seen: {document}"
    assert upstream.chat_requests[-1]["messages"][-1]["content"] == document
    runtime = runtime_of(service)
    history = runtime.short_term.history(SessionKey("default", "alice", "report"))
    assert [m.content for m in history] == [document, f"seen: {document}"]
    assert runtime.long_term is not None
    hits = runtime.long_term.search("peanut allergy", user_id="alice", k=3)
    assert [hit.record.text for hit in hits] == ["User is allergic to peanuts"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


# -- what became of the turn ------------------------------------------------------------------


def _said(user: str | None, text: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": text}]}
    if user is not None:
        body["user"] = user
    return body


def test_an_answer_says_whether_its_turn_was_stored(make_service: ServiceFactory) -> None:
    service = make_service()
    answer = service.post("/v1/chat/completions", json=_said("alice", "I keep bees."))
    assert answer.status_code == 200 and answer.headers["X-Chatmem-Turn"] == "stored"
    # No memory user: nothing is kept, and the answer claims nothing.
    anonymous = service.post("/v1/chat/completions", json=_said(None, "Hello."))
    assert anonymous.status_code == 200 and "X-Chatmem-Turn" not in anonymous.headers
    # The session store refuses the turn (it is closed): the answer still goes out (F4),
    # and says that its turn was not stored, as the client may not assume it was.
    runtime_of(service).short_term.store.close()
    refused = service.post("/v1/chat/completions", json=_said("alice", "I keep wasps too."))
    assert refused.status_code == 200 and refused.headers["X-Chatmem-Turn"] == "not-stored"
    responses = service.post(
        "/v1/responses",
        json={"model": "m", "input": "And ants.", "memory_context": {"user_id": "alice"}},
    )
    assert responses.status_code == 200 and responses.headers["X-Chatmem-Turn"] == "not-stored"


def test_an_unreachable_session_store_keeps_turns_in_memory_and_says_so(
    make_service: ServiceFactory,
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    service = make_service(memory={"sessions": {"store": f"redis://127.0.0.1:{port}/0"}})
    answer = service.post("/v1/chat/completions", json=_said("alice", "I keep bees."))
    assert answer.status_code == 200 and answer.headers["X-Chatmem-Turn"] == "memory-only"
    ready = service.get("/readyz", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert ready.json()["sessions"].startswith("memory only: ")
    assert ready.json()["sessions"] != "ok"


def test_a_search_under_load_says_so_in_its_reason_and_the_metrics(service: TestClient) -> None:
    """What the proxy makes of a search that ran while others waited for a search thread
    (``Retrieval.light``: no late rerank; ``tests/retrieval/test_light_search.py`` makes
    one happen): memory was on, and the reason and a counter say it was searched lightly."""
    runtime = runtime_of(service)
    runtime.long_term.add("My dog is called Rex.", user_id="al")
    asked = [{"role": "user", "content": "What is my dog called?"}]
    found = runtime.retriever.retrieve(asked, user_id="al", threshold=0.0)
    for light in (False, True):
        prepared = Prepared(asked, "off")
        _record(runtime, prepared, replace(found, light=light), "al")
        assert prepared.outcome == "injected"
        headers = prepared.headers()
        assert ("x-chatmem-memory-reason" in {h.lower() for h in headers}) is light
        if light:
            assert headers["X-Chatmem-Memory-Reason"] == LIGHT_REASON
    assert "chatmem_memory_light_total 1.0" in service.get("/metrics").text
