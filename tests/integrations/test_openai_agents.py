"""ChatmemSession against the real openai-agents package: Runner.run keeps its conversation
in chatmem over several runs, holds exactly the items the SDK's own SQLiteSession holds
(messages, function calls and their outputs), pops and clears, survives a restart on SQLite,
hands its turns to extraction, and the docs page's example runs.

The model is agents' OpenAIChatCompletionsModel on an AsyncOpenAI client whose base URL is
chatmem's ScriptedOpenAIServer on loopback: the only stand-in, for the LLM.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)
from agents.memory import Session, SessionSettings
from openai import AsyncOpenAI

from chatmem import ValidationError
from chatmem.integrations.openai_agents import ITEM_KEY, ChatmemSession, items_of
from chatmem.memory import Extraction, Memory
from chatmem.messages import Role
from chatmem.sessions import SQLiteSessionStore
from chatmem.short_term import ShortTermMemory
from chatmem.testing import ScriptedOpenAIServer, ToolCalls
from chatmem.worker import InMemoryOutbox

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "openai-agents.md"


@pytest.fixture(autouse=True)
def no_tracing() -> None:
    set_tracing_disabled(True)  # no network: traces would go to OpenAI


@pytest.fixture
def upstream() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as server:
        yield server


def agent_on(tools: list[Any] | None = None) -> Agent[Any]:
    return Agent(name="helper", instructions="Be brief.", tools=tools or [])


def run(upstream: ScriptedOpenAIServer, agent: Agent[Any], text: str, session: Any) -> Any:
    """One ``Runner.run`` on the scripted upstream, with a client of its own event loop."""

    async def go() -> Any:
        async with AsyncOpenAI(base_url=upstream.base_url, api_key="x", max_retries=0) as client:
            model = OpenAIChatCompletionsModel(model="scripted-model", openai_client=client)
            return await Runner.run(agent.clone(model=model), text, session=session)

    return asyncio.run(go())


def weather_tool(calls: list[str]) -> Any:
    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"sunny in {city}"

    return get_weather


def test_it_is_a_session() -> None:
    assert isinstance(ChatmemSession("s"), Session)


def test_the_second_run_sees_the_first(upstream: ScriptedOpenAIServer) -> None:
    upstream.script_chat("Nice to meet you, Ana.", "Your name is Ana.")
    session = ChatmemSession("trip", user_id="ana")
    agent = agent_on()

    assert run(upstream, agent, "My name is Ana.", session).final_output == "Nice to meet you, Ana."
    second = run(upstream, agent, "What is my name?", session)

    assert second.final_output == "Your name is Ana."
    sent = [(m["role"], m["content"]) for m in upstream.chat_requests[1]["messages"]]
    assert sent == [
        ("system", "Be brief."),
        ("user", "My name is Ana."),
        ("assistant", "Nice to meet you, Ana."),
        ("user", "What is my name?"),
    ]
    # The conversation is a chatmem session: tenant, user, session id.
    log = session.short_term.history(session.key)
    assert [(m.role, m.content) for m in log] == [
        (Role.USER, "My name is Ana."),
        (Role.ASSISTANT, "Nice to meet you, Ana."),
        (Role.USER, "What is my name?"),
        (Role.ASSISTANT, "Your name is Ana."),
    ]
    assert tuple(session.key) == ("default", "ana", "trip")


def test_items_are_kept_exactly_as_the_sdks_own_session_keeps_them(
    upstream: ScriptedOpenAIServer,
) -> None:
    """The same two runs (a tool call, then a plain answer) through ChatmemSession and
    through agents' SQLiteSession hold equal items."""
    calls: list[str] = []
    agent = agent_on([weather_tool(calls)])
    script = [
        ToolCalls((("get_weather", '{"city": "Paris"}'),)),
        "It is sunny in Paris.",
        "You asked about Paris.",
    ]
    held = []
    for session in (ChatmemSession("weather"), SQLiteSession("weather")):
        upstream.script_chat(*script)
        run(upstream, agent, "Weather in Paris?", session)
        run(upstream, agent, "Which city did I ask about?", session)
        held.append(asyncio.run(session.get_items()))
    ours, theirs = held
    assert ours == theirs
    assert calls == ["Paris", "Paris"]
    kinds = [item.get("type", "message") for item in ours]
    assert kinds == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
        "message",
    ]


def test_tool_turns_are_chatmem_messages(upstream: ScriptedOpenAIServer) -> None:
    upstream.script_chat(ToolCalls((("get_weather", '{"city": "Oslo"}'),)), "It is sunny in Oslo.")
    session = ChatmemSession("weather")
    run(upstream, agent_on([weather_tool([])]), "Weather in Oslo?", session)

    user, call, output, answer = session.short_term.history(session.key)
    assert (user.role, user.content) == (Role.USER, "Weather in Oslo?")
    assert call.role is Role.ASSISTANT and call.tool_calls is not None
    assert (call.tool_calls[0].id, call.tool_calls[0].function.name) == ("call_0", "get_weather")
    assert (output.role, output.tool_call_id, output.content) == (
        Role.TOOL,
        "call_0",
        "sunny in Oslo",
    )
    assert (answer.role, answer.content) == (Role.ASSISTANT, "It is sunny in Oslo.")
    # Each keeps its item whole.
    assert (call.metadata.model_extra or {})[ITEM_KEY]["type"] == "function_call"


def test_limit_pop_and_clear(upstream: ScriptedOpenAIServer) -> None:
    upstream.script_chat("one", "two")
    session = ChatmemSession("s")
    agent = agent_on()
    run(upstream, agent, "first", session)
    run(upstream, agent, "second", session)
    items = asyncio.run(session.get_items())
    assert len(items) == 4

    assert asyncio.run(session.get_items(limit=2)) == items[-2:]
    limited = ChatmemSession(
        "s", short_term=session.short_term, session_settings=SessionSettings(1)
    )
    assert asyncio.run(limited.get_items()) == items[-1:]

    assert asyncio.run(session.pop_item()) == items[-1]
    assert asyncio.run(session.get_items()) == items[:-1]
    assert asyncio.run(session.pop_item()) == items[-2]
    asyncio.run(session.add_items([items[-2]]))
    assert asyncio.run(session.get_items()) == items[:-1]

    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []
    assert asyncio.run(session.pop_item()) is None


def test_a_pop_keeps_the_session_state(upstream: ScriptedOpenAIServer) -> None:
    session = ChatmemSession("s")
    asyncio.run(session.add_items([{"role": "user", "content": f"turn {n}"} for n in range(3)]))
    store = session.short_term.store
    marked = store.state(session.key).model_copy(update={"extracted_upto": 3, "window_start": 1})
    store.save_state(session.key, marked)

    asyncio.run(session.pop_item())

    state = store.state(session.key)
    assert (state.window_start, state.extracted_upto) == (1, 2)
    assert [m.content for m in session.short_term.history(session.key)] == ["turn 0", "turn 1"]


def test_messages_of_other_doors_are_read_as_items() -> None:
    """A session carried on by the chat proxy or Memory.add reads as the items it says."""
    memory = Memory(session_id="s", user_id="ana")
    memory.add(
        [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": "Let me look.",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ]
    )
    session = ChatmemSession.of(memory)
    assert asyncio.run(session.get_items()) == [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me look."},
        {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    ]
    # Popping the assistant message's call leaves its text.
    asyncio.run(session.pop_item())
    popped = asyncio.run(session.pop_item())
    assert popped == {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"}
    assert asyncio.run(session.get_items())[-1] == {"role": "assistant", "content": "Let me look."}


def test_a_session_survives_a_restart_on_sqlite(
    upstream: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    upstream.script_chat("Noted: the blue one.")
    path = tmp_path / "sessions.db"
    first = ChatmemSession("s", user_id="ana", short_term=ShortTermMemory(SQLiteSessionStore(path)))
    run(upstream, agent_on(), "I prefer the blue one.", first)
    before = asyncio.run(first.get_items())
    first.short_term.store.close()

    again = ChatmemSession("s", user_id="ana", short_term=ShortTermMemory(SQLiteSessionStore(path)))
    assert asyncio.run(again.get_items()) == before
    assert before[0] == {"content": "I prefer the blue one.", "role": "user"}
    again.short_term.store.close()


def test_turns_go_to_extraction_and_to_the_memory(upstream: ScriptedOpenAIServer) -> None:
    upstream.script_chat("Noted.", "Enjoy!")
    outbox = InMemoryOutbox()
    memory = Memory(session_id="s", user_id="ana", extraction=Extraction(outbox))
    session = ChatmemSession.of(memory)
    agent = agent_on()
    run(upstream, agent, "Remember that I am vegan.", session)  # explicit: queued at once
    assert sum(outbox.counts().values()) == 1
    run(upstream, agent, "Plan my dinner.", session)
    asyncio.run(session.end_session())  # the session's end queues the rest

    batches = outbox.batches()
    said = [m.content for batch in batches for m in batch.messages]
    assert said == ["Remember that I am vegan.", "Noted.", "Plan my dinner.", "Enjoy!"]
    assert {tuple(batch.key) for batch in batches} == {("default", "ana", "s")}
    # The Memory object packs the same conversation for a model.
    assert [m["content"] for m in memory.get_llm()][-2:] == ["Plan my dinner.", "Enjoy!"]


def test_a_bad_item_adds_nothing() -> None:
    session = ChatmemSession("s")
    with pytest.raises(ValidationError):
        asyncio.run(session.add_items([{"role": "user", "content": "ok"}, {"x": float("nan")}]))
    assert asyncio.run(session.get_items()) == []


def test_items_of_gives_copies() -> None:
    session = ChatmemSession("s")
    asyncio.run(session.add_items([{"role": "user", "content": "hi"}]))
    (item,) = asyncio.run(session.get_items())
    item["content"] = "changed"
    (message,) = session.short_term.history(session.key)
    assert items_of(message) == [{"role": "user", "content": "hi"}]


def test_docs_example_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    monkeypatch.chdir(tmp_path)
    for number, block in enumerate(blocks):
        module = types.ModuleType(f"openai_agents_docs_example_{number}")
        monkeypatch.setitem(sys.modules, module.__name__, module)
        exec(compile(block, str(DOC), "exec"), module.__dict__)


def test_import_chatmem_pulls_in_no_agents() -> None:
    code = (
        "import sys, chatmem, chatmem.integrations, chatmem.server\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'agents'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
