"""chatmem as a drop-in for agent frameworks: an ``agents.Agent`` with a function tool runs
through chatmem (both of the SDK's model classes, plain and streamed) against a scripted
upstream that calls the tool; ``/v1/responses`` translates tools, tool choice, tool-call
items both ways, ``text.format`` and ``reasoning`` to chat completions, and answers what
cannot pass with a 400 that says so; ``/v1/models`` and ``/v1/embeddings`` pass through."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from fastapi.testclient import TestClient
from openai import AsyncOpenAI
from pydantic import BaseModel

from chatmem import LocalEmbedder
from chatmem.messages import Role, SessionKey
from chatmem.records import MemoryType
from chatmem.server import Runtime, ServiceConfig, create_app
from chatmem.server.serving import ServiceThread
from chatmem.testing import ScriptedOpenAIServer, ToolCalls
from tests.server.conftest import ServiceFactory, runtime_of, settle
from tests.server.test_responses import RawUpstream, sse

WEATHER = ToolCalls((("get_weather", '{"city": "Paris"}'),))
FINAL = "It is sunny in Paris, Ana."
TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": False,
}


@pytest.fixture(autouse=True)
def no_tracing() -> None:
    set_tracing_disabled(True)  # no network: traces would go to OpenAI


@pytest.fixture
def served(
    tmp_path: Path, embedder: LocalEmbedder, upstream: ScriptedOpenAIServer
) -> Iterator[tuple[str, Runtime]]:
    """chatmem serving on loopback (an AsyncOpenAI client needs a real server): its base URL
    and runtime."""
    config = ServiceConfig.parse(
        {
            "server": {"data_dir": str(tmp_path / "data")},
            "upstream": {"base_url": upstream.base_url},
            "memory": {"extraction_batch_size": 1, "search_budget_ms": 5000},
        }
    )
    runtime = Runtime.start(config, embedder=embedder)
    with ServiceThread(create_app(runtime=runtime)) as service:
        yield service.url, runtime


def chat_tools(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools", [])]


def memory_text(request: dict[str, Any]) -> str:
    return "\n".join(
        m["content"]
        for m in request["messages"]
        if m["role"] == "system" and "User's relevant context" in str(m["content"])
    )


# -- an agent through chatmem -----------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("model_class", [OpenAIResponsesModel, OpenAIChatCompletionsModel])
def test_an_agent_calls_its_tool_through_chatmem(
    served: tuple[str, Runtime],
    upstream: ScriptedOpenAIServer,
    model_class: type[OpenAIResponsesModel | OpenAIChatCompletionsModel],
    streamed: bool,
) -> None:
    base_url, runtime = served
    assert runtime.long_term is not None
    runtime.long_term.add("Ana lives in Paris.", user_id="ana", type=MemoryType.PROFILE)
    upstream.script_chat(WEATHER, FINAL)
    ran: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return f"sunny in {city}"

    client = AsyncOpenAI(
        base_url=f"{base_url}/v1",
        api_key="unused",
        max_retries=0,
        default_headers={"X-Chatmem-User": "ana", "X-Chatmem-Session": "trip"},
    )
    model = model_class(model="scripted-model", openai_client=client)
    agent = Agent(name="helper", instructions="Be brief.", model=model, tools=[get_weather])

    async def run() -> Any:
        async with client:
            if not streamed:
                return await Runner.run(agent, "What's the weather where I live?")
            result = Runner.run_streamed(agent, "What's the weather where I live?")
            async for _ in result.stream_events():
                pass
            return result

    result = asyncio.run(run())

    assert ran == ["Paris"]
    assert result.final_output == FINAL
    asking, answering = upstream.chat_requests
    assert chat_tools(asking) == chat_tools(answering) == ["get_weather"]
    assert "Ana lives in Paris." in memory_text(asking)
    called, output = answering["messages"][-2:]
    assert called["tool_calls"][0]["id"] == "call_0"
    assert called["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    assert (output["role"], output["tool_call_id"], output["content"]) == (
        "tool",
        "call_0",
        "sunny in Paris",
    )
    # The turn is one session of ana's, its tool call kept as structure.
    settle()
    log = runtime.short_term.history(SessionKey("default", "ana", "trip"))
    assert [m.role for m in log] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert log[0].content == "What's the weather where I live?"
    assert log[1].tool_calls is not None and log[1].tool_calls[0].function.name == "get_weather"
    assert (log[2].tool_call_id, log[2].content) == ("call_0", "sunny in Paris")
    assert log[3].content == FINAL


def test_an_agent_with_an_output_type_gets_json_through_chatmem(
    served: tuple[str, Runtime], upstream: ScriptedOpenAIServer
) -> None:
    class Weather(BaseModel):
        city: str
        sunny: bool

    upstream.script_chat('{"city": "Paris", "sunny": true}')
    client = AsyncOpenAI(base_url=f"{served[0]}/v1", api_key="unused", max_retries=0)
    model = OpenAIResponsesModel(model="scripted-model", openai_client=client)
    settings = ModelSettings(tool_choice="none")
    agent = Agent(name="w", model=model, output_type=Weather, model_settings=settings)

    async def run() -> Any:
        async with client:
            return await Runner.run(agent, "Is it sunny in Paris?")

    result = asyncio.run(run())

    assert result.final_output == Weather(city="Paris", sunny=True)
    sent = upstream.chat_requests[-1]
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["name"] == "final_output"
    assert sent["response_format"]["json_schema"]["schema"]["required"] == ["city", "sunny"]


# -- the translation --------------------------------------------------------------------------


def create(client: TestClient, **body: Any) -> httpx.Response:
    return client.post("/v1/responses", json={"model": "m", **body})


def test_tools_and_choices_are_sent_in_the_chat_shape(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    upstream.script_chat("fine", "fine", "fine", "fine")
    choices = [
        ("auto", "auto"),
        ("required", "required"),
        (
            {"type": "function", "name": "get_weather"},
            {"type": "function", "function": {"name": "get_weather"}},
        ),
        (
            {"type": "allowed_tools", "mode": "auto", "tools": [TOOL]},
            {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "auto",
                    "tools": [{"type": "function", "function": {"name": "get_weather"}}],
                },
            },
        ),
    ]
    for given, sent in choices:
        body = {"tools": [TOOL], "tool_choice": given, "parallel_tool_calls": False}
        answer = create(service, input="Weather?", **body)
        assert answer.status_code == 200, answer.text
        request = upstream.chat_requests[-1]
        assert request["tools"] == [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "The weather in a city.",
                    "parameters": TOOL["parameters"],
                    "strict": False,
                },
            }
        ]
        assert (request["tool_choice"], request["parallel_tool_calls"]) == (sent, False)
        made = answer.json()
        assert (made["tools"], made["tool_choice"], made["parallel_tool_calls"]) == (
            [TOOL],
            given,
            False,
        )


def test_text_format_verbosity_and_reasoning_effort_are_sent(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    upstream.script_chat('{"a": 1}', "{}", "plain")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    text = {
        "format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True},
        "verbosity": "low",
    }
    reasoning = {"effort": "low", "summary": "auto"}
    made = create(service, input="One?", text=text, reasoning=reasoning).json()
    sent = upstream.chat_requests[-1]
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema, "strict": True},
    }
    assert (sent["verbosity"], sent["reasoning_effort"]) == ("low", "low")
    assert made["text"] == text and made["reasoning"] == reasoning

    create(service, input="Any?", text={"format": {"type": "json_object"}})
    assert upstream.chat_requests[-1]["response_format"] == {"type": "json_object"}
    create(service, input="Plain?", text={"format": {"type": "text"}})
    assert "response_format" not in upstream.chat_requests[-1]


def test_without_tools_nothing_of_them_is_sent(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    """What the OpenAI SDKs send by default (an empty tool list, parallel calls on) adds
    nothing to the chat request; chat completions refuses parallel_tool_calls alone."""
    assert create(service, input="hi", tools=[], parallel_tool_calls=True).status_code == 200
    assert set(upstream.chat_requests[-1]) == {"model", "messages"}


def test_tool_calls_come_back_as_function_call_items_and_continue_the_chain(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    upstream.script_chat(
        ToolCalls((("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Oslo"}'))),
        "Sunny in both.",
    )
    client = openai.OpenAI(base_url=f"{service.base_url}/v1", api_key="k", http_client=service)
    first = client.responses.create(
        model="m",
        input="Paris and Oslo?",
        tools=[TOOL],
        user="ana",  # type: ignore[list-item]
    )
    calls = [item for item in first.output if item.type == "function_call"]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        ("call_0", "get_weather", '{"city": "Paris"}'),
        ("call_1", "get_weather", '{"city": "Oslo"}'),
    ]
    assert all(c.id and c.id.startswith("fc_") for c in calls)
    assert [item.type for item in first.output] == ["function_call"] * 2
    assert first.status == "completed"

    outputs = [
        {"type": "function_call_output", "call_id": c.call_id, "output": f"sunny ({n})"}
        for n, c in enumerate(calls)
    ]
    second = client.responses.create(
        model="m",
        input=outputs,  # type: ignore[arg-type]
        previous_response_id=first.id,
        tools=[TOOL],  # type: ignore[list-item]
    )
    assert second.output_text == "Sunny in both."
    sent = upstream.chat_requests[-1]["messages"]
    assert [m["role"] for m in sent[-4:]] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in sent[-3]["tool_calls"]] == ["call_0", "call_1"]
    assert [(m["tool_call_id"], m["content"]) for m in sent[-2:]] == [
        ("call_0", "sunny (0)"),
        ("call_1", "sunny (1)"),
    ]
    settle()
    log = runtime_of(service).short_term.history(SessionKey("default", "ana", first.id))
    assert [m.role for m in log] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.TOOL,
        Role.ASSISTANT,
    ]
    assert log[1].tool_calls is not None and len(log[1].tool_calls) == 2


def test_input_items_of_a_whole_tool_turn_are_sent_as_chat_messages(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    upstream.script_chat("Sunny.")
    items = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}],
        },
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "w", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    ]
    assert create(service, input=items, tools=[TOOL]).status_code == 200
    call = {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
    assert upstream.chat_requests[-1]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]


def test_a_streamed_tool_call_arrives_as_function_call_events(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    upstream.script_chat(WEATHER)
    client = openai.OpenAI(base_url=f"{service.base_url}/v1", api_key="k", http_client=service)
    with client.responses.stream(
        model="m",
        input="Weather in Paris?",
        tools=[TOOL],  # type: ignore[list-item]
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    (call,) = final.output
    assert call.type == "function_call"
    assert (call.call_id, call.name, call.arguments) == (
        "call_0",
        "get_weather",
        '{"city": "Paris"}',
    )
    added = events[2]
    assert added.type == "response.output_item.added" and added.item.id == call.id
    # Kept for the chain, with its call.
    kept = service.get(f"/v1/responses/{final.id}").json()
    assert kept["output"][0]["call_id"] == "call_0"


def test_a_streamed_answer_with_text_and_a_call_numbers_its_items(
    make_service: ServiceFactory,
) -> None:
    """Text, then a call (what ScriptedOpenAIServer does not stream): the message is output
    0 and the call output 1, in the events and in the final response."""
    call = {"index": 0, **WEATHER.as_openai()[0]}
    raw = RawUpstream(
        sse(
            {"choices": [{"index": 0, "delta": {"content": "Looking."}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
            "[DONE]",
        )
    )
    try:
        service = make_service(upstream={"base_url": raw.base_url})
        client = openai.OpenAI(base_url=f"{service.base_url}/v1", api_key="k", http_client=service)
        with client.responses.stream(model="m", input="Weather?", tools=[TOOL]) as stream:  # type: ignore[list-item]
            events = list(stream)
            final = stream.get_final_response()
    finally:
        raw.close()
    added = [
        (e.output_index, e.item.type) for e in events if e.type == "response.output_item.added"
    ]
    assert added == [(0, "message"), (1, "function_call")]
    assert [item.type for item in final.output] == ["message", "function_call"]
    assert final.output_text == "Looking."
    assert [e.type for e in events][-4:] == [
        "response.output_item.done",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]


# -- what cannot pass -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["v"]}]}, "tools[0].type"),
        ({"tools": [{**TOOL, "defer_loading": True}]}, "tools[0].defer_loading"),
        ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice.type"),
        ({"background": True}, "background"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        (
            {
                "input": [
                    {
                        "type": "function_call_output",
                        "call_id": "c",
                        "output": [{"type": "input_file", "file_id": "file_1"}],
                    }
                ]
            },
            "input[0].output[0].type",
        ),
    ],
)
def test_what_cannot_pass_is_a_400_that_says_so(
    service: TestClient, upstream: ScriptedOpenAIServer, body: dict[str, Any], param: str
) -> None:
    answer = create(service, **{"input": "hi", **body})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["param"], error["code"]) == (param, "unsupported_parameter")
    assert "chat completions" in error["message"]
    assert upstream.chat_requests == []


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": [{"type": "function"}]}, "tools[0].name"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"tool_choice": {"type": "function"}}, "tool_choice.name"),
        ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
        ({"text": {"format": {"type": "json_schema", "name": "a"}}}, "text.format.schema"),
        ({"reasoning": {"effort": "huge"}}, "reasoning.effort"),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "w"}]}, "input[0].arguments"),
        ({"input": [{"type": "reasoning", "id": "rs", "summary": []}]}, "input"),
    ],
)
def test_a_bad_tool_field_is_a_400_naming_it(
    service: TestClient, upstream: ScriptedOpenAIServer, body: dict[str, Any], param: str
) -> None:
    answer = create(service, **{"input": "hi", **body})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param
    assert upstream.chat_requests == []


# -- models and embeddings --------------------------------------------------------------------


def test_models_and_embeddings_pass_through(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    client = openai.OpenAI(base_url=f"{service.base_url}/v1", api_key="k", http_client=service)
    assert [m.id for m in client.models.list()] == ["scripted-model"]
    made = client.embeddings.create(model="e", input=["one", "two"])
    assert [len(e.embedding) for e in made.data] == [upstream.dimension] * 2
    assert upstream.requests[-1] == {
        "model": "e",
        "input": ["one", "two"],
        "encoding_format": "base64",
    }


def test_models_and_embeddings_need_a_key_as_chat_does(make_service: ServiceFactory) -> None:
    service = make_service(auth={"anonymous_tenant": None})
    assert service.get("/v1/models").status_code == 401
    assert service.post("/v1/embeddings", json={"model": "e", "input": "x"}).status_code == 401


def test_an_upstream_error_on_embeddings_passes_through(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    upstream.fail_next(429, {"error": {"message": "slow down"}})
    answer = service.post("/v1/embeddings", json={"model": "e", "input": "x"})
    assert (answer.status_code, answer.json()) == (429, {"error": {"message": "slow down"}})
