"""ChatmemMemoryBlock in the real llama-index-core ``Memory``: messages it flushes land in
chatmem, ``aget`` brings the relevant ones back in the system message, across sessions,
users and roles; and the docs page's example runs."""

from __future__ import annotations

import asyncio
import re
import sys
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory
from llama_index.core.storage.chat_store.base_db import MessageStatus
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from chatmem import Filter, LongTermMemory, MemoryType
from chatmem.integrations.llamaindex import ChatmemMemoryBlock, as_turns

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "llamaindex.md"
T = TypeVar("T")

MONDAY = [
    ("user", "My dog Biscuit is terrified of thunderstorms."),
    ("assistant", "Poor Biscuit! I'll keep that in mind."),
    ("user", "I'm also learning to bake sourdough bread."),
    ("assistant", "Lovely, sourdough takes patience."),
    ("user", "Thanks, that's all for today."),
]


def run(scenario: Callable[[AsyncEngine], Awaitable[T]]) -> T:
    """Run ``scenario`` with an in-memory chat store engine for ``Memory``, disposed after
    (an engine left to the garbage collector warns of unclosed connections)."""

    async def main() -> T:
        engine = create_async_engine("sqlite+aiosqlite:///:memory:")
        try:
            return await scenario(engine)
        finally:
            await engine.dispose()

    return asyncio.run(main())


def memory_of(
    engine: AsyncEngine, session: str, block: ChatmemMemoryBlock, token_limit: int
) -> Memory:
    return Memory.from_defaults(
        session_id=session, token_limit=token_limit, memory_blocks=[block], async_engine=engine
    )


async def say(memory: Memory, turns: list[tuple[str, str]]) -> None:
    for role, text in turns:
        await memory.aput(ChatMessage(role=role, content=text))


def test_flushed_messages_are_stored_in_chatmem(memory: LongTermMemory) -> None:
    block = ChatmemMemoryBlock(long_term=memory, user_id="sam", project_id="pets")

    async def scenario(engine: AsyncEngine) -> list[ChatMessage]:
        monday = memory_of(engine, "monday", block, token_limit=30)
        await say(monday, MONDAY)
        return await monday.aget_all(status=MessageStatus.ACTIVE)

    active = run(scenario)
    stored = memory.list(Filter(user_id="sam")).records
    assert len(stored) == 4, "Memory flushes all but the last turn"
    # What Memory flushed is in chatmem, oldest first; what it kept is not.
    assert [r.text for r in stored] == [text for _, text in MONDAY[: len(stored)]]
    assert [m.content for m in active] == [text for _, text in MONDAY[len(stored) :]]
    first = stored[0]
    assert (first.session_id, first.project_id, first.type) == (
        "monday",
        "pets",
        MemoryType.EPISODIC,
    )
    assert first.user_metadata["role"] == "user"
    assert first.context is not None and first.context.after == (
        "assistant: Poor Biscuit! I'll keep that in mind."
    )


def test_aget_brings_back_the_relevant_memory_in_a_new_session(memory: LongTermMemory) -> None:
    block = ChatmemMemoryBlock(long_term=memory, user_id="sam")

    async def scenario(engine: AsyncEngine) -> tuple[list[ChatMessage], list[ChatMessage]]:
        await say(memory_of(engine, "monday", block, token_limit=30), MONDAY)
        tuesday = memory_of(engine, "tuesday", block, token_limit=2000)
        await tuesday.aput(
            ChatMessage(role="user", content="A storm is coming. Advice for my dog?")
        )
        with_memory = await tuesday.aget()
        by_input = await memory_of(engine, "wednesday", block, 2000).aget(
            input="How is my sourdough baking going?"
        )
        return with_memory, by_input

    tuesday, wednesday = run(scenario)
    system, user = tuesday
    assert (system.role.value, user.role.value) == ("system", "user")
    block_text = re.search(r"<chatmem>\n(.*)\n</chatmem>", system.content or "", flags=re.S)
    assert block_text is not None
    lines = block_text[1].splitlines()
    assert re.fullmatch(
        r"- \[\d{4}-\d\d-\d\d\] My dog Biscuit is terrified of thunderstorms\.", lines[0]
    )
    assert not any("sourdough" in line for line in lines)
    assert "sourdough bread" in (wednesday[0].content or "")


def test_users_and_roles_are_kept_apart(memory: LongTermMemory) -> None:
    vet = ChatmemMemoryBlock(long_term=memory, user_id="sam", allowed_roles={"vet"})
    question = "What is my dog afraid of?"

    async def ask(block: ChatmemMemoryBlock) -> str:
        return await block.aget([ChatMessage(role="user", content=question)])

    async def scenario(engine: AsyncEngine) -> dict[str, str]:
        await say(memory_of(engine, "monday", vet, token_limit=30), MONDAY)
        readers = {
            "owner": ChatmemMemoryBlock(long_term=memory, user_id="sam", roles={"owner"}),
            "vet": ChatmemMemoryBlock(long_term=memory, user_id="sam", roles={"vet", "owner"}),
            "trusted": ChatmemMemoryBlock(long_term=memory, user_id="sam"),
            "bob": ChatmemMemoryBlock(long_term=memory, user_id="bob"),
        }
        return {name: await ask(block) for name, block in readers.items()}

    answers = run(scenario)
    assert "Biscuit" in answers["vet"] and "Biscuit" in answers["trusted"]
    assert answers["owner"] == "" and answers["bob"] == ""
    stored = memory.list(Filter(user_id="sam")).records
    assert stored and all(r.access_control.allowed_roles == ["vet"] for r in stored)


def test_nothing_to_ask_returns_nothing(memory: LongTermMemory) -> None:
    block = ChatmemMemoryBlock(long_term=memory, user_id="sam")
    memory.add("My dog Biscuit is terrified of thunderstorms.", user_id="sam")

    async def scenario(engine: AsyncEngine) -> list[Any]:
        empty = memory_of(engine, "s", block, 2000)
        answers: list[Any] = [await block.aget([]), await block.aget(None), await empty.aget()]
        await empty.aput(ChatMessage(role="assistant", content="Hello! How can I help?"))
        answers.append([m.role.value for m in await empty.aget()])
        return answers

    assert run(scenario) == ["", "", [], ["assistant"]]


def test_a_vague_follow_up_uses_the_earlier_turns(memory: LongTermMemory) -> None:
    memory.add("Biscuit the dog is terrified of thunderstorms.", user_id="sam")
    memory.add("The cat Miso loves sunny windowsills.", user_id="sam")
    block = ChatmemMemoryBlock(long_term=memory, user_id="sam", k=1)
    history = [
        ChatMessage(role="user", content="Tell me about Biscuit the dog."),
        ChatMessage(role="assistant", content="Sure, what would you like to know?"),
        ChatMessage(role="user", content="What scares it?"),
    ]
    assert "Biscuit" in asyncio.run(block.aget(history))


def test_truncation_drops_the_least_relevant_lines(memory: LongTermMemory) -> None:
    block = ChatmemMemoryBlock(long_term=memory, user_id="sam", priority=1)
    content = "- [2025-01-01] first and best\n- [2025-01-01] second\n- [2025-01-01] third"
    assert asyncio.run(block.atruncate(content, 3)) == (
        "- [2025-01-01] first and best\n- [2025-01-01] second"
    )
    assert asyncio.run(block.atruncate(content, 10_000)) is None


def test_as_turns_maps_roles_and_skips_textless_messages() -> None:
    messages = [
        ChatMessage(role="developer", content="Be brief."),
        ChatMessage(role="model", content="Hi."),
        ChatMessage(role="function", content="42"),
        ChatMessage(role="user", content="   "),
        ChatMessage(role="assistant", content=None),
    ]
    assert as_turns(messages) == [
        {"role": "system", "content": "Be brief."},
        {"role": "assistant", "content": "Hi."},
        {"role": "tool", "content": "42"},
    ]


def test_docs_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    (block,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    module = types.ModuleType("llamaindex_docs_example")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(block, str(DOC), "exec"), module.__dict__)
