"""The shipped stand-ins: the scripted OpenAI-compatible server and the in-process chat model."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from chatmem.errors import LLMResponseError, LLMUnavailableError
from chatmem.testing import ChatCall, ScriptedChatModel, ScriptedOpenAIServer

MESSAGES = [{"role": "user", "content": "hello there"}]


def _chat(server: ScriptedOpenAIServer, **extra: Any) -> httpx.Response:
    body = {"model": "m", "messages": MESSAGES, **extra}
    return httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=5)


def test_chat_replies_come_from_the_script_in_order() -> None:
    with ScriptedOpenAIServer() as server:
        server.script_chat("first", "second")
        answers = [_chat(server).json() for _ in range(2)]
    assert [a["choices"][0]["message"]["content"] for a in answers] == ["first", "second"]
    assert answers[0]["object"] == "chat.completion"
    assert answers[0]["choices"][0]["finish_reason"] == "stop"
    assert answers[0]["usage"]["completion_tokens"] == 1
    assert server.chat_requests[0]["messages"] == MESSAGES


def test_the_responder_answers_once_the_script_is_used_up() -> None:
    def echo(request: dict[str, Any]) -> str:
        return "echo: " + request["messages"][-1]["content"]

    with ScriptedOpenAIServer(responder=echo) as server:
        server.script_chat("scripted")
        first, second = _chat(server).json(), _chat(server).json()
    assert first["choices"][0]["message"]["content"] == "scripted"
    assert second["choices"][0]["message"]["content"] == "echo: hello there"


def test_a_chat_with_nothing_scripted_is_a_server_error() -> None:
    with ScriptedOpenAIServer() as server:
        response = _chat(server)
    assert response.status_code == 500
    assert "no scripted chat reply" in response.json()["error"]["message"]


def test_streaming_sends_openai_chunks_and_done() -> None:
    text = "Hello  world, streamed"
    with ScriptedOpenAIServer() as server:
        server.script_chat(text)
        response = _chat(server, stream=True)
    assert response.headers["content-type"] == "text/event-stream"
    events = [line[len("data: ") :] for line in response.text.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == text
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(("keep_alive", "connections"), [(False, 3), (True, 1)])
def test_keep_alive_answers_a_clients_requests_on_one_connection(
    keep_alive: bool, connections: int
) -> None:
    with ScriptedOpenAIServer(keep_alive=keep_alive) as server, httpx.Client(timeout=5) as client:
        server.script_chat("one", "two", "three")
        answers = [
            client.post(f"{server.base_url}/chat/completions", json={"messages": MESSAGES})
            for _ in range(3)
        ]
    assert [a.json()["choices"][0]["message"]["content"] for a in answers] == [
        "one",
        "two",
        "three",
    ]
    assert server.connections == connections


def test_a_stream_ends_with_its_connection_under_keep_alive() -> None:
    with ScriptedOpenAIServer(keep_alive=True) as server, httpx.Client(timeout=5) as client:
        server.script_chat("streamed", "after")
        url = f"{server.base_url}/chat/completions"
        streamed = client.post(url, json={"messages": MESSAGES, "stream": True})
        after = client.post(url, json={"messages": MESSAGES})
    assert streamed.headers["connection"] == "close"
    assert streamed.text.rstrip().endswith("data: [DONE]")
    assert after.json()["choices"][0]["message"]["content"] == "after"
    assert server.connections == 2


def test_models_lists_the_configured_model() -> None:
    with ScriptedOpenAIServer(model="tiny-llm") as server:
        response = httpx.get(f"{server.base_url}/models", timeout=5)
    assert [entry["id"] for entry in response.json()["data"]] == ["tiny-llm"]


def test_failures_apply_to_chat_with_their_headers() -> None:
    with ScriptedOpenAIServer() as server:
        server.fail_next(429, {"error": "slow down"}, headers={"Retry-After": "2"})
        server.script_chat("after")
        failed, answered = _chat(server), _chat(server)
    assert failed.status_code == 429
    assert failed.headers["retry-after"] == "2"
    assert answered.json()["choices"][0]["message"]["content"] == "after"


def test_delay_next_answers_late_and_only_once() -> None:
    with ScriptedOpenAIServer() as server:
        server.script_chat("slow", "fast")
        server.delay_next(0.3)
        started = time.perf_counter()
        _chat(server)
        slow = time.perf_counter() - started
        started = time.perf_counter()
        _chat(server)
        fast = time.perf_counter() - started
    assert slow >= 0.3 > fast


def test_a_delayed_answer_does_not_outlive_the_server() -> None:
    with ScriptedOpenAIServer() as server:
        server.delay_next(30)
        with pytest.raises(httpx.ReadTimeout):
            _chat_with_timeout(server, 0.2)
    # Leaving the block woke the sleeping handler; nothing is left waiting 30 s.


def _chat_with_timeout(server: ScriptedOpenAIServer, timeout: float) -> httpx.Response:
    body = {"model": "m", "messages": MESSAGES}
    return httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=timeout)


def test_refusing_response_format_is_a_400_naming_it() -> None:
    with ScriptedOpenAIServer(response_format=False) as server:
        server.script_chat("{}")
        response = _chat(server, response_format={"type": "json_object"})
    assert response.status_code == 400
    assert "response_format" in response.text


def test_request_headers_are_recorded() -> None:
    with ScriptedOpenAIServer() as server:
        server.script_chat("ok")
        httpx.post(
            f"{server.base_url}/chat/completions",
            json={"messages": MESSAGES},
            headers={"Authorization": "Bearer k"},
            timeout=5,
        )
    assert server.request_headers[0]["authorization"] == "Bearer k"


def test_scripted_chat_model_replies_raises_and_records() -> None:
    model = ScriptedChatModel(["one", LLMResponseError("bad")])
    assert model.complete(MESSAGES, json=True) == "one"
    with pytest.raises(LLMResponseError):
        model.complete(MESSAGES)
    with pytest.raises(LLMUnavailableError, match="no scripted reply"):
        model.complete(MESSAGES)
    assert model.calls[0] == ChatCall(MESSAGES, True)
    assert len(model.calls) == 3


def test_scripted_chat_model_passes_a_request_body_to_its_responder() -> None:
    seen: list[dict[str, Any]] = []

    def responder(request: dict[str, Any]) -> str:
        seen.append(request)
        return "fine"

    model = ScriptedChatModel(responder, model="local")
    assert model.complete(MESSAGES, json=True) == "fine"
    assert seen == [
        {"model": "local", "messages": MESSAGES, "response_format": {"type": "json_object"}}
    ]
