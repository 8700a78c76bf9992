"""The Memory object: blocks over real long-term memory, snapshots, bad input (M1–M4, S5)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatmem import LocalEmbedder, LongTermMemory
from chatmem.errors import ValidationError
from chatmem.extraction.base import Fact
from chatmem.memory import Memory
from chatmem.memory.blocks import FactExtractionBlock, StaticBlock, VectorBlock
from chatmem.messages import Message, SessionKey
from chatmem.records import Filter
from chatmem.sessions.memory import InMemorySessionStore
from chatmem.stores import SQLiteStore
from chatmem.tokens import default_counter, request_tokens
from tests.conftest import long_document


class KeywordExtractor:
    """Facts from user messages that say "remember"; subject = the word after it."""

    def extract(self, messages: list[Message]) -> list[Fact]:
        return [
            Fact(text=m.content, subject=m.content.split()[1], provenance=(m.id,))
            for m in messages
            if m.role.value == "user" and m.content.startswith("remember")
        ]


def chat(memory: Memory, turns: list[str]) -> None:
    for text in turns:
        memory.add([{"role": "user", "content": text}, {"role": "assistant", "content": "OK."}])


def system_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(m["content"] for m in messages if m["role"] == "system")


def test_a_fact_from_one_session_is_recalled_in_the_next(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    with LongTermMemory(SQLiteStore(tmp_path / "ltm.db"), embedder) as long_term:
        first = Memory(
            session_id="A", user_id="ana", token_limit=400, blocks=[VectorBlock(long_term)]
        )
        chat(first, ["My sister Maya lives in Porto and teaches violin."])
        chat(first, [f"Tell me about topic {i} in some detail please." for i in range(30)])
        first.end_session()
        second = Memory(
            session_id="B", user_id="ana", token_limit=400, blocks=[VectorBlock(long_term)]
        )
        second.add({"role": "user", "content": "Where does my sister Maya live?"})
        assert "Porto" in system_text(second.get_llm())
        stranger = Memory(
            session_id="C", user_id="bob", token_limit=400, blocks=[VectorBlock(long_term)]
        )
        stranger.add({"role": "user", "content": "Where does my sister Maya live?"})
        assert "Porto" not in system_text(stranger.get_llm())


def test_get_returns_everything_and_get_llm_stays_within_the_limit() -> None:
    memory = Memory(token_limit=300, blocks=[StaticBlock("Ana is a vegan chef.")])
    chat(memory, [f"Message number {i} about cooking lentils." for i in range(50)])
    assert len(memory.get()) == 100
    sent = memory.get_llm()
    assert request_tokens(default_counter(), sent) <= 300
    assert "Ana is a vegan chef." in system_text(sent)
    assert sent[-1]["content"] == "OK." and sent[-2]["content"].startswith("Message number 49")


def test_transient_messages_are_sent_but_not_stored() -> None:
    memory = Memory()
    memory.add({"role": "user", "content": "hi"})
    sent = memory.get_llm([{"role": "system", "content": "Be brief."}])
    assert sent[0] == {"role": "system", "content": "Be brief."}
    assert len(memory.get()) == 1


def test_a_static_block_kept_in_a_store_can_be_edited_while_running(tmp_path: Path) -> None:
    from chatmem.sessions.sqlite import SQLiteSessionStore

    store = SQLiteSessionStore(tmp_path / "sessions.db")
    try:
        block = StaticBlock("Office hours: 9 to 5.", name="policy", store=store)
        memory = Memory(sessions=store, blocks=[block])
        memory.add({"role": "user", "content": "When are you open?"})
        assert "9 to 5" in system_text(memory.get_llm())
        StaticBlock(name="policy", store=store).set("default", "Office hours: 8 to 8.")
        assert "8 to 8" in system_text(memory.get_llm())
    finally:
        store.close()


def test_facts_outlive_the_session_and_keep_one_value_per_subject(tmp_path: Path) -> None:
    from chatmem.sessions.sqlite import SQLiteSessionStore

    store = SQLiteSessionStore(tmp_path / "sessions.db")
    try:
        facts = FactExtractionBlock(KeywordExtractor(), store=store, max_facts=3)
        memory = Memory(session_id="A", user_id="ana", sessions=store, blocks=[facts])
        chat(memory, ["remember budget is 3000", "remember city is Lisbon"])
        chat(memory, ["remember budget is 4000", "remember pet is a cat", "remember car is red"])
        memory.end_session()
        kept = FactExtractionBlock(KeywordExtractor(), store=store).facts("default", "ana")
        assert "remember budget is 4000" in kept and "remember budget is 3000" not in kept
        assert len(kept) <= 3
        later = Memory(session_id="B", user_id="ana", sessions=store, blocks=[facts])
        later.add({"role": "user", "content": "What do you know?"})
        assert "remember budget is 4000" in system_text(later.get_llm())
    finally:
        store.close()


def test_the_default_fact_block_uses_the_offline_extractor() -> None:
    block = FactExtractionBlock()
    memory = Memory(user_id="ana", blocks=[block], overflow="flush")
    chat(memory, ["My name is Ana and I love hiking in the Alps."])
    memory.end_session()
    assert block.facts("default", "ana"), "the offline extractor found a fact"


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def test_the_session_and_its_window_survive_a_restart(tmp_path: Path, backend: str) -> None:
    from tests.sessions.helpers import drop_redis_prefix, open_backend

    prefix = f"chatmem-test-{uuid.uuid4().hex[:12]}"
    store = open_backend(backend, tmp_path, prefix)
    try:
        before = Memory(session_id="s", sessions=store, token_limit=100, overflow="summarize")
        chat(before, ["My budget for Lisbon is $3,000."] + [f"filler {i}" for i in range(30)])
        sent, everything = before.get_llm(), before.get()
        store.close()
        store = open_backend(backend, tmp_path, prefix)
        after = Memory(session_id="s", sessions=store, token_limit=100, overflow="summarize")
        assert after.get() == everything
        assert len(everything) == 62
        assert after.get_llm() == sent
    finally:
        store.close()
        if backend == "redis":
            drop_redis_prefix(prefix)


def test_summarize_overflow_puts_the_summary_before_the_recent_turns() -> None:
    memory = Memory(token_limit=200, overflow="summarize")
    chat(memory, ["My budget for Lisbon is $3,000."] + [f"Filler turn {i}." for i in range(40)])
    sent = memory.get_llm()
    assert any(m["role"] == "system" and "$3,000" in m["content"] for m in sent)
    assert request_tokens(default_counter(), sent) <= 200


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"token_limit": 10}, "token_limit"),
        ({"short_term_ratio": 0}, "short_term_ratio"),
        ({"user_id": ""}, "user_id"),
        ({"blocks": [StaticBlock("a"), StaticBlock("b")]}, "blocks"),
    ],
)
def test_bad_settings_are_refused(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Memory(**options)
    assert caught.value.field == field


def test_a_bad_message_in_a_batch_stores_none_of_it() -> None:
    memory = Memory()
    memory.add({"role": "user", "content": "kept"})
    with pytest.raises(ValidationError):
        memory.add([{"role": "user", "content": "new"}, {"role": "wizard", "content": "x"}])
    assert [m["content"] for m in memory.get()] == ["kept"]


# -- snapshots ---------------------------------------------------------------------------------

message_dicts = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=60)},
    optional={"metadata": st.fixed_dictionaries({}, optional={"source": st.just("asr")})},
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(st.lists(message_dicts, min_size=1, max_size=4), max_size=8),
    strategy=st.sampled_from(["trim", "summarize", "flush"]),
)
def test_snapshots_round_trip_exactly(batches: list[list[dict[str, Any]]], strategy: Any) -> None:
    memory = Memory(
        token_limit=120, overflow=strategy, blocks=[StaticBlock("fixed"), FactExtractionBlock()]
    )
    for batch in batches:
        memory.add(batch)
    snapshot = json.loads(json.dumps(memory.snapshot()))
    loaded = Memory.load(snapshot, blocks=[StaticBlock("other"), FactExtractionBlock()])
    assert loaded.snapshot() == snapshot
    assert loaded.get() == memory.get()
    assert loaded.get_llm() == memory.get_llm()


def _snapshot() -> dict[str, Any]:
    memory = Memory(session_id="s", blocks=[StaticBlock("fixed")])
    chat(memory, ["hello", "again"])
    return memory.snapshot()


def _altered(change: Any) -> dict[str, Any]:
    snapshot = _snapshot()
    change(snapshot)
    return snapshot


@pytest.mark.parametrize(
    ("snapshot", "field"),
    [
        ("not a snapshot", "snapshot"),
        ({"format": "mem0/1"}, "snapshot.format"),
        (_altered(lambda s: s["messages"].pop()), "snapshot.checksum"),
        (_altered(lambda s: s.update(token_limit=5)), "snapshot.checksum"),
    ],
)
def test_a_corrupted_or_foreign_snapshot_is_refused_and_nothing_is_written(
    snapshot: Any, field: str
) -> None:
    store = InMemorySessionStore()
    with pytest.raises(ValidationError) as caught:
        Memory.load(snapshot, blocks=[StaticBlock("fixed")], sessions=store)
    assert caught.value.field == field
    assert store.sessions("default", "default") == []


def test_a_snapshot_does_not_overwrite_a_live_session() -> None:
    store = InMemorySessionStore()
    live = Memory(session_id="s", sessions=store, blocks=[StaticBlock("fixed")])
    live.add({"role": "user", "content": "live message"})
    with pytest.raises(ValidationError):
        Memory.load(_snapshot(), blocks=[StaticBlock("fixed")], sessions=store)
    assert [m["content"] for m in live.get()] == ["live message"]


def test_a_snapshot_needs_its_blocks_back() -> None:
    with pytest.raises(ValidationError) as caught:
        Memory.load(_snapshot(), blocks=[])
    assert caught.value.field == "blocks"


def test_a_long_trimmed_session_sends_its_working_state_with_the_recent_turns() -> None:
    memory = Memory(token_limit=200, overflow="trim", working_state_every=2)
    chat(memory, ["Our budget for the Lisbon trip is $3,000.", "We decided to take the train."])
    assert "Working state" not in system_text(memory.get_llm()), "nothing has left the window"
    chat(memory, [f"Filler turn number {i}." for i in range(30)])
    state = system_text(memory.get_llm())
    assert "Working state of this conversation" in state
    assert "$3,000" in state and "take the train" in state


def test_summaries_come_from_an_openai_compatible_model_over_http() -> None:
    from chatmem import ModelConfig, OpenAIChatModel
    from chatmem.testing import ScriptedOpenAIServer

    with ScriptedOpenAIServer() as server:
        server.script_chat(*["The user plans Lisbon on a $3,000 budget."] * 20)
        model = OpenAIChatModel(ModelConfig(endpoint=server.base_url, model="scripted"))
        try:
            memory = Memory(
                token_limit=200, overflow="summarize", summarizer=model, working_state_every=None
            )
            chat(memory, ["My budget for Lisbon is $3,000."] + [f"Filler {i}." for i in range(30)])
            sent = memory.get_llm()
        finally:
            model.close()
    summary = next(m for m in sent if m["content"].startswith("Summary of the earlier"))
    assert summary["content"].endswith("The user plans Lisbon on a $3,000 budget.")
    first = server.chat_requests[0]["messages"]
    assert "My budget for Lisbon is $3,000." in first[-1]["content"]
    assert len(server.chat_requests) < 10, "a summary runs once per overflow, not per turn"


def test_extraction_is_queued_by_add_and_applied_by_the_worker(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    from chatmem import Extraction, OfflineExtractor, SQLiteOutbox, Triggers, Worker
    from chatmem.worker import ExtractionScheduler

    outbox = SQLiteOutbox(tmp_path / "queue.db")
    with LongTermMemory(SQLiteStore(tmp_path / "ltm.db"), embedder) as long_term:
        extraction = Extraction(outbox, ExtractionScheduler(Triggers(every_turns=2)))
        monday = Memory(session_id="mon", user_id="ana", extraction=extraction,
                        blocks=[VectorBlock(long_term, top_k=3)])  # fmt: skip
        chat(monday, ["Hi there.", "My favourite city is Lisbon."])
        assert long_term.count(long_term._scope("default", "ana")) == 0, "nothing on the path"
        assert sum(outbox.counts().values()) == 1
        worker = Worker(outbox, long_term, OfflineExtractor())
        worker.drain()
        facts = long_term.search("favourite city", user_id="ana", k=5)
        assert any("Lisbon" in hit.record.text for hit in facts)
        monday.end_session()
        worker.drain()
        tuesday = Memory(session_id="tue", user_id="ana", blocks=[VectorBlock(long_term)])
        tuesday.add({"role": "user", "content": "Which city do I like best?"})
        assert "Lisbon" in system_text(tuesday.get_llm())
        episodes = long_term.search("favourite city Lisbon", user_id="ana", k=20)
        summary = [hit.record for hit in episodes if hit.record.user_metadata.get("episode")]
        assert len(summary) == 1 and summary[0].session_id == "mon"
        assert "Lisbon" in summary[0].text
    outbox.close()


def test_forgetting_a_user_empties_their_facts_and_no_one_elses(tmp_path: Path) -> None:
    from chatmem.sessions.sqlite import SQLiteSessionStore

    store = SQLiteSessionStore(tmp_path / "sessions.db")
    try:
        block = FactExtractionBlock(KeywordExtractor(), store=store)
        for user in ("ana", "bob"):
            memory = Memory(user_id=user, sessions=store, blocks=[block])
            chat(memory, ["remember city is Lisbon"])
            memory.end_session()
        block.forget("default", "ana")
        assert block.facts("default", "ana") == []
        assert block.facts("default", "bob") == ["remember city is Lisbon"]
    finally:
        store.close()


def stored_text(long_term: LongTermMemory, user_id: str, session_id: str) -> str:
    """The session's memories, their parts in order, as one whitespace-normalised text."""
    records = long_term.list(Filter(user_id=user_id, session_id=session_id), limit=500).records
    parts = sorted(
        (r for r in records if "part" in r.user_metadata), key=lambda r: r.user_metadata["part"]
    )
    return " ".join(" ".join(r.text.split()) for r in parts)


def test_a_long_pasted_document_reaches_long_term_memory_at_session_end(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    document = long_document(100_000)
    with LongTermMemory(SQLiteStore(tmp_path / "ltm.db"), embedder) as long_term:
        facts = FactExtractionBlock()
        monday = Memory(session_id="A", user_id="ana", blocks=[facts, VectorBlock(long_term)])
        monday.add(
            [{"role": "user", "content": document}, {"role": "assistant", "content": "Noted."}]
        )
        monday.end_session()

        assert stored_text(long_term, "ana", "A") == " ".join(document.split())
        assert facts.facts("default", "ana") == ["User is allergic to peanuts"]
        tuesday = Memory(session_id="B", user_id="ana", blocks=[VectorBlock(long_term)])
        tuesday.add({"role": "user", "content": "What did the report say about region400?"})
        assert "region400." in system_text(tuesday.get_llm())


def test_a_long_message_does_not_break_a_session_with_a_token_limit(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    """The document leaves the window at the next user turn and is flushed to the blocks;
    that flush, and every later ``add``, must go through."""
    document = long_document(100_000)
    with LongTermMemory(SQLiteStore(tmp_path / "ltm.db"), embedder) as long_term:
        facts = FactExtractionBlock()
        blocks = [facts, VectorBlock(long_term)]
        memory = Memory(
            session_id="A", user_id="ana", token_limit=2000, overflow="flush", blocks=blocks
        )
        memory.add({"role": "user", "content": document})
        chat(memory, [f"Question {i} about the report." for i in range(3)])

        assert len(memory.get()) == 7
        assert stored_text(long_term, "ana", "A") == " ".join(document.split())
        assert facts.facts("default", "ana") == ["User is allergic to peanuts"]
        sent = memory.get_llm()
        assert request_tokens(default_counter(), sent) <= 2000
        assert sent[-2]["content"] == "Question 2 about the report."


def test_the_blocks_take_a_long_message_directly(tmp_path: Path, embedder: LocalEmbedder) -> None:
    document = long_document(100_000)
    key = SessionKey("default", "ana", "A")
    said = [Message(role="user", content=document, id="doc")]
    with LongTermMemory(SQLiteStore(tmp_path / "ltm.db"), embedder) as long_term:
        VectorBlock(long_term).take(key, said)
        facts = FactExtractionBlock()
        facts.take(key, said)
        assert long_term.count(Filter(user_id="ana", metadata={"part_of": "doc"})) > 1
        assert stored_text(long_term, "ana", "A") == " ".join(document.split())
        assert facts.facts("default", "ana") == ["User is allergic to peanuts"]
