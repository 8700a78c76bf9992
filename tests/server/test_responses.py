"""The Responses API over HTTP: the official openai SDK, chains by previous_response_id kept
per tenant in SQLite, and memory through memory_config and memory_context."""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import uvicorn
from fastapi.testclient import TestClient

from chatmem import LocalEmbedder
from chatmem.messages import SessionKey
from chatmem.records import MemoryType
from chatmem.server import Runtime, ServiceConfig, create_app
from chatmem.server.responses import IGNORED_FIELDS
from chatmem.testing import ScriptedOpenAIServer
from tests.server.conftest import ServiceFactory, drain, runtime_of, settle, wait_for

BUDGET = "My budget for the Hawaii trip is $10,000."


def sdk(client: TestClient, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{client.base_url}/v1", api_key=key, http_client=client)


def create(client: TestClient, key: str | None = None, /, **body: Any) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return client.post("/v1/responses", json={"model": "m", **body}, headers=headers)


def sent_messages(upstream: ScriptedOpenAIServer) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = upstream.chat_requests[-1]["messages"]
    return messages


def memory_system(upstream: ScriptedOpenAIServer) -> str:
    """The injected memories the upstream last received ('' when none)."""
    return "\n".join(
        m["content"]
        for m in sent_messages(upstream)
        if m["role"] == "system" and "User's relevant context" in m["content"]
    )


def tenant_key(client: TestClient, tenant: str) -> str:
    key, _ = runtime_of(client).keys.create(tenant, [])
    return key


def add_memory(client: TestClient, text: str, type: MemoryType, user: str = "alice") -> None:
    long_term = runtime_of(client).long_term
    assert long_term is not None
    long_term.add(text, user_id=user, type=type)


# -- the openai SDK ---------------------------------------------------------------------------


def test_the_sdk_creates_a_response_from_a_string(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    made = sdk(service).responses.create(model="m", input="Hello there, how are you?")
    assert made.output_text == "seen: Hello there, how are you?"
    assert made.id.startswith("resp_")
    assert made.object == "response"
    assert made.status == "completed"
    assert made.model == "m"
    assert made.output[0].type == "message"
    assert made.output[0].id.startswith("msg_")
    assert made.usage is not None and made.usage.total_tokens == (
        made.usage.input_tokens + made.usage.output_tokens
    )
    assert sent_messages(upstream) == [{"role": "user", "content": "Hello there, how are you?"}]


def test_the_sdk_creates_a_response_from_a_list_with_instructions(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    made = sdk(service).responses.create(
        model="m",
        instructions="Answer briefly.",
        input=[
            {"role": "developer", "content": "Speak French."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Bonjour"},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Name a"},
                    {"type": "input_text", "text": "river."},
                ],
            },
        ],
        temperature=0.2,
        max_output_tokens=50,
        metadata={"run": "7"},
    )
    expected = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "system", "content": "Speak French."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Bonjour"},
        {"role": "user", "content": "Name a\nriver."},
    ]
    sent = upstream.chat_requests[-1]
    assert sent["messages"] == expected
    assert (sent["temperature"], sent["max_tokens"]) == (0.2, 50)
    assert "metadata" not in sent
    assert made.output_text == "seen: " + " | ".join(m["content"] for m in expected)
    assert (made.instructions, made.metadata, made.max_output_tokens) == (
        "Answer briefly.",
        {"run": "7"},
        50,
    )


def test_the_sdk_reads_and_deletes_a_stored_response(service: TestClient) -> None:
    client = sdk(service)
    made = client.responses.create(model="m", input="Keep this one.")
    again = client.responses.retrieve(made.id)
    assert again.id == made.id
    assert again.output_text == made.output_text
    client.responses.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(made.id)
    assert service.delete(f"/v1/responses/{made.id}").status_code == 404


def test_an_output_item_fed_back_as_input_is_read(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    client = sdk(service)
    first = client.responses.create(model="m", input="Count to two.")
    fed_back: list[Any] = [
        {"role": "user", "content": "Count to two."},
        *[item.model_dump() for item in first.output],
        {"role": "user", "content": "And three?"},
    ]
    client.responses.create(model="m", input=fed_back)
    assert sent_messages(upstream)[1] == {"role": "assistant", "content": first.output_text}


# -- chains -----------------------------------------------------------------------------------


def test_a_chain_of_three_sends_the_whole_history(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    upstream.script_chat("one", "two", "three")
    client = sdk(service)
    first = client.responses.create(model="m", input="First?", instructions="Be terse.")
    second = client.responses.create(model="m", input="Second?", previous_response_id=first.id)
    third = client.responses.create(
        model="m", input="Third?", previous_response_id=second.id, instructions="Be kind."
    )
    assert [first.output_text, second.output_text, third.output_text] == ["one", "two", "three"]
    assert second.previous_response_id == first.id
    # Instructions are not carried along a chain (as OpenAI does).
    assert upstream.chat_requests[1]["messages"][0] == {"role": "user", "content": "First?"}
    assert sent_messages(upstream) == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "First?"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "Second?"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "Third?"},
    ]


def test_a_branch_from_an_earlier_response_leaves_out_the_other_branch(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    upstream.script_chat("a", "b", "c")
    client = sdk(service)
    root = client.responses.create(model="m", input="Root")
    client.responses.create(model="m", input="Left", previous_response_id=root.id)
    client.responses.create(model="m", input="Right", previous_response_id=root.id)
    assert [m["content"] for m in sent_messages(upstream)] == ["Root", "a", "Right"]


def test_a_chain_id_of_another_tenant_is_not_found(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    acme, other = tenant_key(service, "acme"), tenant_key(service, "globex")
    made = create(service, acme, input="A secret plan.").json()
    asked = create(service, other, input="Go on.", previous_response_id=made["id"])
    assert asked.status_code == 404
    assert asked.json()["error"]["param"] == "previous_response_id"
    assert len(upstream.chat_requests) == 1
    headers = {"Authorization": f"Bearer {other}"}
    assert service.get(f"/v1/responses/{made['id']}", headers=headers).status_code == 404
    assert service.delete(f"/v1/responses/{made['id']}", headers=headers).status_code == 404
    own = service.get(f"/v1/responses/{made['id']}", headers={"Authorization": f"Bearer {acme}"})
    assert own.status_code == 200
    assert own.json()["output"][0]["content"][0]["text"] == "seen: A secret plan."


def test_an_unknown_previous_response_is_not_found(service: TestClient) -> None:
    asked = create(service, input="Hi", previous_response_id="resp_nothing")
    assert asked.status_code == 404
    assert asked.json()["error"]["code"] == "previous_response_not_found"


def test_store_false_keeps_nothing(service: TestClient) -> None:
    made = create(service, input="Forget me.", store=False)
    assert made.status_code == 200
    rid = made.json()["id"]
    assert service.get(f"/v1/responses/{rid}").status_code == 404
    assert create(service, input="Next", previous_response_id=rid).status_code == 404


def test_responses_are_kept_in_sqlite_and_survive_a_restart(
    make_service: ServiceFactory, upstream: ScriptedOpenAIServer
) -> None:
    first = make_service()
    made = create(first, input="Remember the chain.").json()
    database = runtime_of(first).data_dir / "service.db"
    first.__exit__(None, None, None)
    with sqlite3.connect(database) as conn:
        rows = conn.execute("SELECT tenant_id FROM responses WHERE response_id = ?", (made["id"],))
        assert rows.fetchall() == [("default",)]
    second = make_service()
    assert second.get(f"/v1/responses/{made['id']}").json() == made
    assert create(second, input="Still here?", previous_response_id=made["id"]).status_code == 200
    assert [m["content"] for m in sent_messages(upstream)] == [
        "Remember the chain.",
        "seen: Remember the chain.",
        "Still here?",
    ]


def test_only_the_newest_responses_of_a_tenant_are_kept(
    make_service: ServiceFactory,
) -> None:
    service = make_service(server={"max_responses": 2})
    other = tenant_key(service, "other")
    kept_elsewhere = create(service, other, input="Other tenant").json()["id"]
    ids = [create(service, input=f"Number {n}").json()["id"] for n in range(3)]
    assert service.get(f"/v1/responses/{ids[0]}").status_code == 404
    assert all(service.get(f"/v1/responses/{rid}").status_code == 200 for rid in ids[1:])
    headers = {"Authorization": f"Bearer {other}"}
    assert service.get(f"/v1/responses/{kept_elsewhere}", headers=headers).status_code == 200


def test_without_a_database_responses_are_kept_in_memory(
    make_service: ServiceFactory, tmp_path: Any
) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the data directory should be")
    service = make_service(server={"data_dir": str(blocked)})
    assert runtime_of(service).database_error is not None
    made = create(service, input="Kept in memory.").json()
    assert service.get(f"/v1/responses/{made['id']}").status_code == 200


# -- memory -----------------------------------------------------------------------------------


def test_a_fact_told_in_one_chain_is_injected_in_a_new_one(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    client = sdk(service)
    client.responses.create(
        model="m", input=BUDGET, extra_body={"memory_context": {"user_id": "alice"}}
    )
    drain(service)
    asked = client.responses.with_raw_response.create(
        model="m",
        input="What's my budget for the trip?",
        extra_body={"memory_context": {"user_id": "alice"}},
    )
    assert asked.headers["x-chatmem-memory"] == "injected"
    sent = sent_messages(upstream)
    assert sent[0]["role"] == "system"
    assert "$10,000" in sent[0]["content"]
    assert sent[1] == {"role": "user", "content": "What's my budget for the trip?"}
    parsed = asked.parse()
    memory = parsed.model_dump()["memory"]
    assert memory["outcome"] == "injected"
    assert any("$10,000" in m["content"] for m in memory["memories"])


def test_another_user_does_not_see_the_fact(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    create(service, input=BUDGET, memory_context={"user_id": "alice"})
    drain(service)
    create(service, input="What's my budget for the trip?", memory_context={"user_id": "bob"})
    assert "$10,000" not in str(sent_messages(upstream))


def test_a_chain_is_one_session_of_its_first_users_memory(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    first = create(service, input=BUDGET, memory_context={"user_id": "alice"}).json()
    second = create(service, input="Thanks, noted.", previous_response_id=first["id"]).json()
    assert second["memory"]["outcome"] != "off"
    # The chain's turns were kept for alice, in one session named after the chain's root.
    key = SessionKey("default", "alice", first["id"])
    settle()
    said = [m.content for m in runtime_of(service).short_term.history(key)]
    assert said == [BUDGET, f"seen: {BUDGET}", "Thanks, noted.", said[3]]
    assert said[3].startswith("seen: ")


def test_memory_context_names_the_session(service: TestClient) -> None:
    context = {"user_id": "alice", "session_id": "trip"}
    first = create(service, input=BUDGET, memory_context=context).json()
    create(service, input="Thanks, noted.", previous_response_id=first["id"])
    key = SessionKey("default", "alice", "trip")
    settle()
    assert len(runtime_of(service).short_term.history(key)) == 4


def test_memory_config_disabled_injects_nothing(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    add_memory(service, BUDGET, MemoryType.SEMANTIC)
    made = create(
        service,
        input="What's my budget for the trip?",
        memory_context={"user_id": "alice"},
        memory_config={"enabled": False},
    )
    assert made.headers["x-chatmem-memory"] == "off"
    assert sent_messages(upstream) == [
        {"role": "user", "content": "What's my budget for the trip?"}
    ]
    assert made.json()["memory"]["reason"] == "memory_config.enabled is false"


def test_retrieval_limit_and_memory_types_are_honoured(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    add_memory(service, "My trip budget is $10,000.", MemoryType.SEMANTIC)
    add_memory(service, "I prefer a trip budget spent on hotels by the sea.", MemoryType.PREFERENCE)
    add_memory(service, "My trip budget for food is $2,000.", MemoryType.SEMANTIC)
    question: dict[str, Any] = {
        "input": "What is my trip budget?",
        "memory_context": {"user_id": "alice"},
    }
    config = {"similarity_threshold": 0.1}
    wide = create(service, **question, memory_config=config).json()["memory"]["memories"]
    assert len(wide) == 3
    one = create(service, **question, memory_config={**config, "retrieval_limit": 1}).json()
    assert len(one["memory"]["memories"]) == 1
    assert memory_system(upstream).count("$") + memory_system(upstream).count("hotels") == 1
    typed = create(service, **question, memory_config={**config, "memory_types": ["preference"]})
    found = typed.json()["memory"]["memories"]
    assert [m["type"] for m in found] == ["preference"]
    assert "hotels" in memory_system(upstream)
    assert "$" not in memory_system(upstream)


def test_a_similarity_threshold_of_one_injects_nothing(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    # A paraphrase (no shared keyword, cosine about 0.36): retrieved at the default
    # threshold, not at 1.0. (The threshold applies to relevance relative to the search's
    # best match when that match is strong, so 1.0 still keeps a strong best match; see
    # chatmem.retrieval.)
    add_memory(service, "User has two cats.", MemoryType.SEMANTIC)
    question: dict[str, Any] = {
        "input": "Do I have any pets?",
        "memory_context": {"user_id": "alice"},
    }
    found = create(service, **question)
    assert found.headers["x-chatmem-memory"] == "injected"
    assert "two cats" in memory_system(upstream)
    made = create(service, **question, memory_config={"similarity_threshold": 1.0})
    assert made.headers["x-chatmem-memory"] == "empty"
    assert memory_system(upstream) == ""


def test_auto_store_false_queues_no_extraction(service: TestClient) -> None:
    outbox = runtime_of(service).outbox
    before = sum(outbox.counts().values())
    create(
        service,
        input=BUDGET,
        memory_context={"user_id": "alice"},
        memory_config={"auto_store": False},
    )
    settle()
    assert sum(outbox.counts().values()) == before
    create(service, input=BUDGET, memory_context={"user_id": "alice"})
    settle()
    assert sum(outbox.counts().values()) == before + 1


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": 7}, "input"),
        ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role"),
        ({"input": ["hi"]}, "input[0]"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
            "input[0].content[0].type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_text"}]}]},
            "input[0].content[0].text",
        ),
        ({"input": [{"role": "user", "content": 3}]}, "input[0].content"),
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": "hi", "temperature": 9}, "temperature"),
        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "hi", "memory_config": {"retrieval_limit": 0}}, "memory_config.retrieval_limit"),
        (
            {"input": "hi", "memory_config": {"memory_types": ["dreams"]}},
            "memory_config.memory_types[0]",
        ),
        (
            {"input": "hi", "memory_config": {"similarity_threshold": 2}},
            "memory_config.similarity_threshold",
        ),
        ({"input": "hi", "memory_context": {"project_id": "p"}}, "memory_context.user_id"),
        ({"input": "hi", "memory_context": {"user_id": "a", "x": 1}}, "memory_context.x"),
        ({"model": "", "input": "hi"}, "model"),
    ],
)
def test_a_bad_request_is_a_400_naming_the_field(
    service: TestClient, upstream: ScriptedOpenAIServer, body: dict[str, Any], param: str
) -> None:
    answer = create(service, **body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param
    assert param in answer.json()["error"]["message"]
    assert upstream.chat_requests == []


def test_the_ignored_openai_fields_are_accepted(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    values: dict[str, Any] = {
        "include": [],
        "truncation": "disabled",
        "service_tier": "auto",
        "prompt_cache_key": "k",
        "safety_identifier": "s",
        "stream_options": {"include_obfuscation": False},
    }
    assert set(values) == set(IGNORED_FIELDS)
    assert create(service, input="hi", **values).status_code == 200
    assert set(upstream.chat_requests[-1]) == {"model", "messages"}


def test_an_upstream_error_passes_through(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    body = {"error": {"message": "slow down", "type": "rate_limit"}}
    upstream.fail_next(429, body)
    answer = create(service, input="hi")
    assert answer.status_code == 429
    assert answer.json() == body
    with pytest.raises(openai.RateLimitError):
        upstream.fail_next(429, body)
        sdk(service).with_options(max_retries=0).responses.create(model="m", input="hi")


def test_an_unreachable_upstream_is_a_502(make_service: ServiceFactory) -> None:
    service = make_service(upstream={"base_url": "http://127.0.0.1:9/v1"})
    answer = create(service, input="hi")
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "upstream_unreachable"


def test_a_response_that_is_not_a_completion_is_a_502(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    upstream.fail_next(200, {"unexpected": True})
    answer = create(service, input="hi")
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "upstream_invalid"


# -- streaming --------------------------------------------------------------------------------

ANSWER = "Your budget is ten thousand dollars."


def stream(client: TestClient, **body: Any) -> httpx.Response:
    return client.post("/v1/responses", json={"model": "m", "stream": True, **body})


def events_of(answer: httpx.Response) -> list[dict[str, Any]]:
    """The server-sent events of a streamed response; each ``event:`` line names its data's
    type, and the sequence numbers count up from 0."""
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/event-stream")
    found = []
    for block in answer.text.strip().split("\n\n"):
        event, data = block.split("\n")
        assert event.startswith("event: ") and data.startswith("data: ")
        found.append(json.loads(data.removeprefix("data: ")))
        assert found[-1]["type"] == event.removeprefix("event: ")
    assert [e["sequence_number"] for e in found] == list(range(len(found)))
    return found


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def history_of(client: TestClient, user: str, session: str) -> list[str]:
    key = SessionKey("default", user, session)
    settle()
    return [m.content for m in runtime_of(client).short_term.history(key)]


def queued(client: TestClient) -> int:
    settle()
    return sum(runtime_of(client).outbox.counts().values())


def test_the_sdk_streams_a_response(service: TestClient, upstream: ScriptedOpenAIServer) -> None:
    upstream.script_chat(ANSWER)
    events = list(sdk(service).responses.create(model="m", input="My budget?", stream=True))
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * len(ANSWER.split(" ")),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert deltas == ["Your ", "budget ", "is ", "ten ", "thousand ", "dollars."]
    created, completed = events[0], events[-1]
    assert created.type == "response.created" and completed.type == "response.completed"
    assert created.response.status == "in_progress"
    assert created.response.output == []
    made = completed.response
    assert (made.id, made.status, made.output_text) == (created.response.id, "completed", ANSWER)
    assert made.id.startswith("resp_")
    assert {e.item_id for e in events if hasattr(e, "item_id")} == {made.output[0].id}
    sent = upstream.chat_requests[-1]
    assert (sent["stream"], sent["stream_options"]) == (True, {"include_usage": True})
    assert sent["messages"] == [{"role": "user", "content": "My budget?"}]


def test_the_sdk_stream_helper_gives_the_final_response(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    upstream.script_chat(ANSWER)
    with sdk(service).responses.stream(model="m", input="My budget?") as events:
        snapshots = [e.snapshot for e in events if e.type == "response.output_text.delta"]
        final = events.get_final_response()
    assert snapshots[0] == "Your " and snapshots[-1] == ANSWER
    assert final.output_text == ANSWER
    assert final.status == "completed"


def test_a_streamed_response_is_kept_chained_from_and_its_turn_stored(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    upstream.script_chat(ANSWER, "Noted.")
    events = events_of(stream(service, input=BUDGET, memory_context={"user_id": "alice"}))
    made = events[-1]["response"]
    assert service.get(f"/v1/responses/{made['id']}").json() == made
    assert made["memory"]["outcome"] != "off"
    create(service, input="Thanks.", previous_response_id=made["id"])
    assert sent_messages(upstream) == [
        {"role": "user", "content": BUDGET},
        {"role": "assistant", "content": ANSWER},
        {"role": "user", "content": "Thanks."},
    ]
    # The chain is alice's session named after its root; both turns were stored in it.
    wait_for(lambda: len(history_of(service, "alice", made["id"])) == 4)
    assert history_of(service, "alice", made["id"]) == [BUDGET, ANSWER, "Thanks.", "Noted."]


def test_memory_is_injected_into_a_streamed_request(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    add_memory(service, BUDGET, MemoryType.SEMANTIC)
    before = queued(service)
    answer = stream(
        service,
        input="What's my budget for the trip?",
        memory_context={"user_id": "alice", "session_id": "trip"},
    )
    assert answer.headers["x-chatmem-memory"] == "injected"
    assert answer.headers["x-chatmem-memory-count"] == "1"
    assert "$10,000" in memory_system(upstream)
    made = events_of(answer)[-1]["response"]
    assert made["memory"]["outcome"] == "injected"
    assert "$10,000" in made["output"][0]["content"][0]["text"]  # the echo saw the memory
    wait_for(lambda: queued(service) == before + 1)
    assert history_of(service, "alice", "trip")[0] == "What's my budget for the trip?"


def test_memory_config_is_honoured_when_streaming(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    add_memory(service, BUDGET, MemoryType.SEMANTIC)
    answer = stream(
        service,
        input="What's my budget for the trip?",
        memory_context={"user_id": "alice"},
        memory_config={"enabled": False},
    )
    assert answer.headers["x-chatmem-memory"] == "off"
    assert events_of(answer)[-1]["response"]["memory"]["reason"] == (
        "memory_config.enabled is false"
    )
    assert memory_system(upstream) == ""


def test_an_upstream_error_before_the_stream_passes_through(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    body = {"error": {"message": "slow down", "type": "rate_limit"}}
    upstream.fail_next(429, body)
    answer = stream(service, input="hi", memory_context={"user_id": "alice"})
    assert answer.status_code == 429
    assert answer.json() == body
    assert answer.headers["x-chatmem-memory"] == "skipped"  # "hi" is a greeting
    upstream.fail_next(429, body)
    with pytest.raises(openai.RateLimitError):
        sdk(service).with_options(max_retries=0).responses.create(
            model="m", input="hi", stream=True
        )
    assert runtime_of(service).responses.count("default") == 0


def test_an_unreachable_upstream_is_a_502_before_the_stream(
    make_service: ServiceFactory,
) -> None:
    service = make_service(upstream={"base_url": "http://127.0.0.1:9/v1"})
    answer = stream(service, input="hi")
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "upstream_unreachable"


class RawUpstream:
    """A chat-completions upstream on loopback that answers every request with ``parts`` of
    server-sent events and closes: what ScriptedOpenAIServer cannot script (a stream cut
    short of its declared length, one that ends without [DONE], an error event, usage, a
    finish reason other than stop). With ``gate``, it waits for it between the parts."""

    def __init__(
        self, *parts: bytes, declared: int | None = None, gate: threading.Event | None = None
    ) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                outer.requests.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                if declared is not None:
                    self.send_header("Content-Length", str(declared))
                self.end_headers()
                for index, part in enumerate(parts):
                    if index and gate is not None:
                        gate.wait(10)
                    self.wfile.write(part)
                    self.wfile.flush()

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def raw_upstream() -> Iterator[Callable[..., RawUpstream]]:
    started: list[RawUpstream] = []

    def start(*parts: bytes, **options: Any) -> RawUpstream:
        started.append(RawUpstream(*parts, **options))
        return started[-1]

    yield start
    for server in started:
        server.close()


def chunk(content: str | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    delta = {"content": content} if content is not None else {}
    choices = [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"object": "chat.completion.chunk", "model": "raw", "choices": choices, **extra}


def sse(*events: Any) -> bytes:
    return b"".join(
        f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events
    )


BEGUN = sse(chunk("Your "), chunk("budget "))


@pytest.mark.parametrize(
    ("parts", "declared", "why"),
    [
        ((BEGUN,), len(BEGUN) + 500, "broke off: RemoteProtocolError"),
        ((BEGUN,), None, "ended before its answer"),
        ((BEGUN, sse({"error": {"message": "overloaded"}})), None, "overloaded"),
    ],
    ids=["cut-short", "no-done", "error-event"],
)
def test_a_stream_broken_midway_fails_and_keeps_nothing(
    make_service: ServiceFactory,
    raw_upstream: Callable[..., RawUpstream],
    parts: tuple[bytes, ...],
    declared: int | None,
    why: str,
) -> None:
    upstream = raw_upstream(*parts, declared=declared)
    service = make_service(upstream={"base_url": upstream.base_url})
    before = queued(service)
    events = events_of(stream(service, input=BUDGET, memory_context={"user_id": "alice"}))
    assert kinds(events)[4:] == ["response.output_text.delta"] * 2 + ["response.failed"]
    failed = events[-1]["response"]
    assert (failed["id"], failed["status"]) == (events[0]["response"]["id"], "failed")
    assert failed["error"]["code"] == "server_error"
    assert why in failed["error"]["message"]
    assert service.get(f"/v1/responses/{failed['id']}").status_code == 404
    assert runtime_of(service).responses.count("default") == 0
    time.sleep(0.2)  # a turn stored in the background would have landed by now
    assert history_of(service, "alice", failed["id"]) == []
    assert queued(service) == before


def test_the_upstreams_usage_and_a_cut_answer_are_reported(
    make_service: ServiceFactory, raw_upstream: Callable[..., RawUpstream]
) -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    upstream = raw_upstream(
        sse(
            chunk("Your "),
            chunk("budget", finish="length"),
            {"object": "chat.completion.chunk", "choices": [], "usage": usage},
            "[DONE]",
        )
    )
    service = make_service(upstream={"base_url": upstream.base_url})
    events = events_of(stream(service, input="My budget?", max_output_tokens=2))
    assert kinds(events)[-2:] == ["response.output_item.done", "response.incomplete"]
    made = events[-1]["response"]
    assert (made["status"], made["incomplete_details"]) == (
        "incomplete",
        {"reason": "max_output_tokens"},
    )
    assert made["output"][0]["content"][0]["text"] == "Your budget"
    assert (made["model"], made["usage"]["input_tokens"], made["usage"]["total_tokens"]) == (
        "raw",
        7,
        9,
    )
    assert service.get(f"/v1/responses/{made['id']}").json() == made
    assert upstream.requests[-1]["max_tokens"] == 2


def test_a_client_that_leaves_mid_stream_keeps_nothing(
    tmp_path: Path, embedder: LocalEmbedder, raw_upstream: Callable[..., RawUpstream]
) -> None:
    gate = threading.Event()
    upstream = raw_upstream(BEGUN, sse(chunk(" is ten.", finish="stop"), "[DONE]"), gate=gate)
    config = ServiceConfig.parse(
        {
            "server": {"data_dir": str(tmp_path / "data")},
            "upstream": {"base_url": upstream.base_url},
        }
    )
    runtime = Runtime.start(config, embedder=embedder)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(runtime=runtime), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1/responses"
        body = {"model": "m", "input": BUDGET, "stream": True, "user": "alice"}
        with httpx.stream("POST", url, json=body, timeout=10) as answer:
            lines = answer.iter_lines()
            created = json.loads(next(line for line in lines if line.startswith("data:"))[5:])
            assert next(line for line in lines if "output_text.delta" in line)
        # The request is over (the upstream still holds its answer back, so only the
        # client's leaving could end it); then the upstream finishes.
        wait_for(lambda: not server.server_state.tasks)
        gate.set()
        time.sleep(0.3)  # what finishing the stream would store has had time to land
        assert runtime.responses.count("default") == 0
        key = SessionKey("default", "alice", created["response"]["id"])
        assert runtime.short_term.history(key) == []
    finally:
        gate.set()
        server.should_exit = True
        thread.join(10)
        listener.close()
