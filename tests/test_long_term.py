"""LongTermMemory over the real SQLite store and the real offline embedder."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chatmem import (
    AsyncLongTermMemory,
    EmbedderMismatchError,
    Filter,
    HistoryEvent,
    ImportFormatError,
    LocalEmbedder,
    LongTermMemory,
    MemoryType,
    NotFoundError,
    OpenAIEmbedder,
    Source,
    ValidationError,
)
from chatmem.long_term import MAX_CONTEXT_CHARS, NEXT_TURN_REASON, SESSION_LOOKBACK
from chatmem.records import MAX_TEXT_CHARS, MemoryRecord, Vector
from chatmem.stores import SQLiteStore, Usage
from chatmem.text import PART_CHARS, embedding_text, index_fields
from tests.conftest import long_document
from tests.pg_server import postgres_server
from tests.stores.conftest import BACKENDS, REDIS_URL, redis_reachable


def test_cross_session_recall_finds_the_fact(memory: LongTermMemory) -> None:
    memory.add("My budget for the Hawaii trip is $10,000", user_id="alice", session_id="A")
    memory.add("I deploy the payment service with docker push", user_id="alice")
    memory.add("I prefer window seats on long flights", user_id="alice")
    hits = memory.search("What's my budget for the trip?", user_id="alice", k=3)
    assert hits[0].record.text == "My budget for the Hawaii trip is $10,000"
    assert hits[0].score > hits[1].score
    assert 0.0 <= hits[-1].score <= hits[0].score <= 1.0


def test_search_never_returns_another_users_memory(memory: LongTermMemory) -> None:
    memory.add("Alice's budget for the Hawaii trip is $10,000", user_id="alice")
    memory.add("Bob's budget for the Hawaii trip is $3,000", user_id="bob")
    memory.add("Budget for the Hawaii trip is $99", user_id="alice", tenant_id="acme")
    hits = memory.search("budget for the Hawaii trip", user_id="alice", k=10)
    assert [h.record.text for h in hits] == ["Alice's budget for the Hawaii trip is $10,000"]


def test_threshold_cuts_weak_results(memory: LongTermMemory) -> None:
    memory.add("My budget for the Hawaii trip is $10,000", user_id="u")
    memory.add("The cat sleeps on the sofa", user_id="u")
    everything = memory.search("Hawaii trip budget", user_id="u", k=5)
    assert len(everything) == 2
    strong = memory.search("Hawaii trip budget", user_id="u", k=5, threshold=everything[0].score)
    assert [h.record.text for h in strong] == [everything[0].record.text]


def test_chat_messages_become_episodic_memories_with_context(memory: LongTermMemory) -> None:
    records = memory.add(
        [
            {
                "role": "user",
                "content": "Where should I go in March?",
                "id": "m1",
                "timestamp": 1_700_000_000_000,
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Try Lisbon."}],
                "name": "guide",
                "metadata": {"turn": 2},
            },
        ],
        user_id="u",
        session_id="s",
        metadata={"channel": "web"},
    )
    first, second = records
    assert first.type == MemoryType.EPISODIC and first.provenance == ["m1"]
    assert first.time.created_at.year == 2023
    assert first.metadata.source == Source.EXPLICIT_USER_INPUT
    assert second.metadata.source == Source.SYSTEM_GENERATED
    assert second.user_metadata == {
        "channel": "web",
        "turn": 2,
        "role": "assistant",
        "name": "guide",
    }
    assert second.context is not None and second.context.speaker == "guide"
    assert second.context.before == "user: Where should I go in March?"
    assert first.context is not None and first.context.after == "guide: Try Lisbon."
    assert memory.get(second.id, user_id="u") == second


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"role": "wizard", "content": "hi"}, "messages[1].role"),
        ({"role": "user", "content": 42}, "messages[1].content"),
        ({"role": "user"}, "messages[1].content"),
        ({"role": "user", "content": "ok", "timestamp": "yesterday"}, "messages[1].timestamp"),
        (
            {"role": "user", "content": "ok", "metadata": ["not", "a", "map"]},
            "messages[1].metadata",
        ),
    ],
)
def test_bad_message_is_refused_and_nothing_of_the_batch_is_stored(
    memory: LongTermMemory, bad: dict[str, object], field: str
) -> None:
    memory.add("kept", user_id="u")
    with pytest.raises(ValidationError) as raised:
        memory.add([{"role": "user", "content": "valid first"}, bad], user_id="u")
    assert raised.value.field == field
    assert [r.text for r in memory.list(Filter(user_id="u")).records] == ["kept"]


def test_empty_input_is_refused(memory: LongTermMemory) -> None:
    with pytest.raises(ValidationError, match="nothing to add"):
        memory.add([], user_id="u")
    with pytest.raises(ValidationError, match="content.raw"):
        memory.add("", user_id="u")
    with pytest.raises(ValidationError, match="query"):
        memory.search("  ", user_id="u")


def test_bad_metadata_and_ids_are_refused(memory: LongTermMemory) -> None:
    with pytest.raises(ValidationError, match="user_id"):
        memory.add("x", user_id="")
    with pytest.raises(ValidationError, match="metadata"):
        memory.add("x", user_id="u", metadata={"bad key!": 1})
    with pytest.raises(ValidationError, match="importance"):
        memory.add("x", user_id="u", importance=1.5)
    with pytest.raises(ValidationError):
        Filter(user_id="u", colour="red")  # type: ignore[call-arg]


def test_update_versions_and_history(memory: LongTermMemory) -> None:
    (fact,) = memory.add("Budget for Hawaii is $10,000", user_id="u", importance=0.7)
    updated = memory.update(
        fact.id,
        "Budget for Hawaii is $12,000",
        user_id="u",
        metadata={"checked": True},
        reason="user corrected",
    )
    assert updated.metadata.version == 2 and updated.metadata.importance == 0.7
    assert updated.user_metadata == {"checked": True}
    history = memory.history(fact.id, user_id="u")
    assert [h.event for h in history] == [HistoryEvent.ADD, HistoryEvent.UPDATE]
    assert history[1].old is not None and history[1].old.text == "Budget for Hawaii is $10,000"
    hits = memory.search("How much is the Hawaii budget?", user_id="u")
    assert hits[0].record.text == "Budget for Hawaii is $12,000"
    with pytest.raises(ValidationError):
        memory.update(fact.id, "", user_id="u")
    assert memory.get(fact.id).metadata.version == 2


def test_record_access_writes_uses_without_a_version(memory: LongTermMemory) -> None:
    (fact,) = memory.add("User likes tea", user_id="u")
    (other,) = memory.add("User likes coffee", user_id="v")
    seen = datetime(2026, 3, 1, tzinfo=UTC)
    uses = [Usage(fact.id, 2, seen, 0.4), Usage(other.id, 1, seen)]
    assert memory.record_access(uses, user_id="u") == [fact.id]
    used = memory.get(fact.id, user_id="u")
    assert (used.access_count, used.time.last_accessed, used.time.decay_score) == (2, seen, 0.4)
    assert used.metadata.version == 1
    assert [h.event for h in memory.history(fact.id, user_id="u")] == [HistoryEvent.ADD]
    assert memory.get(other.id, user_id="v") == other
    assert memory.record_access(uses, user_id="u", tenant_id="elsewhere") == []


def test_delete_and_forget_by_scope(memory: LongTermMemory) -> None:
    (one,) = memory.add("one", user_id="u", project_id="p")
    memory.add("two", user_id="u", project_id="q")
    memory.add("three", user_id="v", project_id="p")
    memory.delete(one.id, user_id="u")
    with pytest.raises(NotFoundError):
        memory.get(one.id)
    with pytest.raises(NotFoundError):
        memory.delete(one.id, user_id="u")
    assert memory.history(one.id)[-1].event == HistoryEvent.DELETE
    assert memory.delete_all(Filter(project_id="p")) == 1
    assert [r.text for r in memory.list(Filter()).records] == ["two"]


def test_get_and_delete_are_scoped_to_the_user(memory: LongTermMemory) -> None:
    (mine,) = memory.add("mine", user_id="alice")
    with pytest.raises(NotFoundError):
        memory.get(mine.id, user_id="bob")
    with pytest.raises(NotFoundError):
        memory.delete(mine.id, user_id="bob")
    with pytest.raises(NotFoundError):
        memory.get(mine.id, tenant_id="other")
    assert memory.get(mine.id, user_id="alice") == mine


def test_export_then_import_round_trips_exactly(
    memory: LongTermMemory, tmp_path: Path, embedder: LocalEmbedder
) -> None:
    memory.add(
        [
            {"role": "user", "content": "I live in Porto"},
            {"role": "assistant", "content": "Lovely city"},
        ],
        user_id="u",
        session_id="s",
    )
    (fact,) = memory.add("Prefers green tea", user_id="u", tags=["drinks"])
    memory.update(fact.id, "Prefers jasmine tea", user_id="u")
    out = io.StringIO()
    assert memory.export_jsonl(Filter(user_id="u"), out, page_size=2) == 3
    with LongTermMemory(SQLiteStore(tmp_path / "copy.db"), embedder) as copy:
        assert copy.import_jsonl(out.getvalue().splitlines()) == 3
        original = memory.list(Filter(user_id="u")).records
        assert copy.list(Filter(user_id="u")).records == original
        again = io.StringIO()
        copy.export_jsonl(Filter(user_id="u"), again)
        assert again.getvalue() == out.getvalue()


def test_import_is_all_or_nothing(memory: LongTermMemory) -> None:
    memory.add("x", user_id="u")
    out = io.StringIO()
    memory.export_jsonl(Filter(user_id="u"), out)
    good = json.loads(out.getvalue())
    good["record"]["id"] = "fresh"
    bad_vector = dict(good, record=dict(good["record"], id="bad"), vector=[1.0, 2.0])
    cases = [
        ("{not json", 2, None),
        (json.dumps({"format": "other"}), 2, "format"),
        (json.dumps(dict(good, record=dict(good["record"], user_id=""))), 2, "record.user_id"),
        (json.dumps(bad_vector), 2, "vector"),
    ]
    for bad, line, field in cases:
        with pytest.raises(ImportFormatError) as raised:
            memory.import_jsonl([json.dumps(good), bad])
        assert raised.value.line == line and raised.value.field == field
    assert memory.count(Filter(user_id="u")) == 1


def test_opening_with_another_embedder_is_refused(tmp_path: Path, embedder: LocalEmbedder) -> None:
    path = tmp_path / "m.db"
    LongTermMemory(SQLiteStore(path), embedder).close()
    other = OpenAIEmbedder("text-embedding-3-small", 1536, base_url="http://127.0.0.1:9")
    with pytest.raises(EmbedderMismatchError, match="all-MiniLM-L6-v2"):
        LongTermMemory(SQLiteStore(path), other)
    other.close()


def test_open_by_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATMEM_STORE", f"sqlite:///{tmp_path}/env.db")
    with LongTermMemory.open() as opened:
        opened.add("from env", user_id="u")
    assert (tmp_path / "env.db").exists()


def test_async_api_runs_the_same_logic(tmp_path: Path, embedder: LocalEmbedder) -> None:
    async def scenario() -> list[str]:
        memory = AsyncLongTermMemory(LongTermMemory(SQLiteStore(tmp_path / "a.db"), embedder))
        async with memory:
            await asyncio.gather(*(memory.add(f"fact number {i}", user_id="u") for i in range(8)))
            hits = await memory.search("fact number 3", user_id="u", k=1)
            touched = await memory.record_access([Usage(hits[0].record.id, 1)], user_id="u")
            assert touched == [hits[0].record.id]
            return [h.record.text for h in hits]

    assert asyncio.run(scenario()) == ["fact number 3"]


def test_superseded_facts_stay_answerable_but_are_not_shown_as_current(
    memory: LongTermMemory,
) -> None:
    from datetime import UTC, datetime

    from chatmem import Content, MemoryRecord, TimeInfo

    changed = datetime(2024, 5, 8, tzinfo=UTC)
    old, new = memory.add_records(
        [
            MemoryRecord(
                user_id="u",
                content=Content(raw="User's budget for the Hawaii trip is $10,000"),
                time=TimeInfo(valid_from=datetime(2024, 1, 1, tzinfo=UTC), valid_to=changed),
            ),
            MemoryRecord(
                user_id="u",
                content=Content(raw="User's budget for the Hawaii trip is $15,000"),
                time=TimeInfo(valid_from=changed),
            ),
        ]
    )
    query = "What is my budget for the Hawaii trip?"
    assert [hit.record.id for hit in memory.search(query, user_id="u")] == [new.id]
    everything = memory.search(query, user_id="u", include_superseded=True)
    assert {hit.record.id for hit in everything} == {old.id, new.id}
    before = memory.search(query, user_id="u", filter=Filter(valid_at=datetime(2024, 3, 1)))
    assert [hit.record.id for hit in before] == [old.id]


WEATHER_CALL = {
    "id": "call_0",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Porto"}'},
}


def test_turns_without_text_are_skipped_and_tool_calls_kept_as_structure(
    memory: LongTermMemory,
) -> None:
    """An assistant tool call (content null, OpenAI's shape), empty and blank turns and an
    image alone store nothing of their own; every turn with text is stored, and the calls
    are kept: in the context of the turns around them, and in the structured content of a
    turn that also has text."""
    forecast = {"id": "call_1", "type": "function",
                "function": {"name": "get_forecast", "arguments": {"days": 3}}}  # fmt: skip
    records = memory.add(
        [
            {"role": "user", "content": "What's the weather in Porto?"},
            {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
            {"role": "tool", "tool_call_id": "call_0", "content": "21 C, sunny"},
            {"role": "assistant", "content": ""},
            {"role": "assistant", "content": " \n "},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x.png"}}]},
            {"role": "assistant", "content": "And the forecast:", "tool_calls": [forecast]},
            {"role": "assistant", "content": "It is 21 degrees in Porto."},
        ],
        user_id="u",
        session_id="s",
    )

    assert [r.text for r in records] == [
        "What's the weather in Porto?",
        "21 C, sunny",
        "And the forecast:",
        "It is 21 degrees in Porto.",
    ]
    question, result, forecasting, answer = records
    called = 'assistant: [called get_weather({"city": "Porto"})]'
    assert question.context is not None and question.context.after == called
    assert result.context is not None and result.context.before == called
    assert result.user_metadata["role"] == "tool"
    assert result.content.structured == {"tool_call_id": "call_0"}
    assert forecasting.content.structured == {
        "tool_calls": [{"id": "call_1", "name": "get_forecast", "arguments": '{"days": 3}'}]
    }
    assert answer.context is not None
    assert (
        answer.context.before == 'assistant: And the forecast: [called get_forecast({"days": 3})]'
    )
    assert memory.count(Filter(user_id="u")) == 4


def test_a_chat_in_which_no_turn_has_text_stores_nothing(memory: LongTermMemory) -> None:
    """Not an error: an agent that hands every turn to memory must not fail on a turn that
    only calls a tool. A plain text, a missing content and an empty call still are."""
    silent = [
        {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
        {"role": "assistant", "content": "   "},
        {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]},
    ]
    assert memory.add(silent, user_id="u") == []
    assert memory.add({"role": "assistant", "tool_calls": [WEATHER_CALL]}, user_id="u") == []
    assert memory.count(Filter(user_id="u")) == 0
    with pytest.raises(ValidationError, match="content.raw"):
        memory.add(" ", user_id="u")
    with pytest.raises(ValidationError) as raised:
        memory.add([{"role": "user"}], user_id="u")
    assert raised.value.field == "messages[0].content"
    with pytest.raises(ValidationError, match="nothing to add"):
        memory.add([], user_id="u")


class RecordingEmbedder:
    """An embedder that remembers every text it was given."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner = inner
        self.model = inner.model
        self.dimension = inner.dimension
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> Vector:
        self.texts.extend(texts)
        return self.inner.embed(texts)


def test_a_message_too_long_for_one_memory_is_stored_as_linked_parts(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    document = long_document(100_000)
    recording = RecordingEmbedder(embedder)
    with LongTermMemory(SQLiteStore(tmp_path / "chatmem.db"), recording) as memory:
        records = memory.add(
            [
                {"role": "user", "content": "Here is the quarterly report.", "id": "m0"},
                {"role": "user", "content": document, "id": "m1"},
                {"role": "assistant", "content": "Thanks, I have read it.", "id": "m2"},
            ],
            user_id="u",
            session_id="s",
        )

        intro, *parts, reply = records
        assert len(parts) >= len(document) // PART_CHARS
        assert all(0 < len(p.text) <= PART_CHARS for p in parts)
        assert [p.user_metadata["part"] for p in parts] == list(range(1, len(parts) + 1))
        assert {p.user_metadata["parts"] for p in parts} == {len(parts)}
        assert {p.user_metadata["part_of"] for p in parts} == {"m1"}
        assert all(p.provenance == ["m1"] and p.type is MemoryType.EPISODIC for p in parts)
        # Cut between paragraphs, and nothing lost.
        assert all(p.text.endswith(".") and p.text[0].isupper() for p in parts[:-1])
        assert " ".join(p.text for p in parts).split() == document.split()
        assert intro.context is not None and intro.context.after is not None
        assert intro.context.after.startswith("user: Section 0 covers")
        assert reply.context is not None and reply.context.before is not None
        assert len(reply.context.before) <= 2_000
        # The embedder sees parts, never the whole document.
        assert max(len(text) for text in recording.texts) < PART_CHARS + 100

        (hit,) = memory.search("the quarterly report of region500", user_id="u", k=1)
        assert "region500." in hit.record.text and hit.record.user_metadata["part_of"] == "m1"
        assert memory.count(Filter(user_id="u", metadata={"part_of": "m1"})) == len(parts)

        plain = memory.add(document, user_id="v")
        assert len(plain) == len(parts) and len({r.user_metadata["part_of"] for r in plain}) == 1
        assert all(r.type is MemoryType.SEMANTIC for r in plain)


def test_an_imported_record_too_long_for_one_memory_is_refused_naming_it(
    memory: LongTermMemory,
) -> None:
    """An import restores records exactly (ids, versions, history), so a text too long for
    one memory is refused, not split; ``add`` is the way to store it as parts."""
    memory.add("x", user_id="u")
    out = io.StringIO()
    memory.export_jsonl(Filter(user_id="u"), out)
    line = json.loads(out.getvalue())
    line["record"].update(id="long", content={"raw": long_document(100_000)})
    line["vector"] = None
    with pytest.raises(
        ImportFormatError, match=f"100000 characters.*at most {MAX_TEXT_CHARS}"
    ) as raised:
        memory.import_jsonl([json.dumps(line)])
    assert (raised.value.line, raised.value.field) == (1, "record.content.raw")
    assert memory.count(Filter(user_id="u")) == 1


def test_update_replaces_structured_content_and_roles_keeping_history(
    memory: LongTermMemory,
) -> None:
    (fact,) = memory.add("Salary review: a 3% raise", user_id="u", allowed_roles=["hr"])
    opened = memory.update(fact.id, user_id="u", allowed_roles=[], structured={"raise": 3})
    assert opened.access_control.allowed_roles == []
    assert opened.content.raw == fact.content.raw and opened.content.structured == {"raise": 3}
    assert memory.get(fact.id, user_id="u", roles=frozenset()).id == fact.id
    closed = memory.update(fact.id, user_id="u", allowed_roles=["hr", "hr", "legal"])
    assert closed.access_control.allowed_roles == ["hr", "legal"]
    assert closed.content.structured == {"raise": 3}
    with pytest.raises(NotFoundError):
        memory.get(fact.id, user_id="u", roles=frozenset({"ops"}))
    versions = [e.new.access_control.allowed_roles for e in memory.history(fact.id) if e.new]
    assert versions == [["hr"], [], ["hr", "legal"]]


# -- a chat added one message at a time, as the chat proxy and live agents add it ----------


def _chat(spaced_s: int = 0) -> list[dict[str, Any]]:
    """A session's turns, said ``spaced_s`` seconds apart (0: all at the session's time,
    as LoCoMo dates them)."""
    said = [
        ("Caroline", "What did you cook for the family dinner on Sunday?"),
        ("Melanie", "A mushroom risotto, and the kids asked for seconds."),
        ("Caroline", "Nice! I painted a sunrise over the lake that weekend."),
        ("Melanie", "You should hang it in the hallway."),
    ]
    start = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    return [
        {
            "role": "user",
            "name": name,
            "content": text,
            "timestamp": start + timedelta(seconds=spaced_s * i),
        }
        for i, (name, text) in enumerate(said)
    ]


def _add_live(memory: LongTermMemory, turns: list[dict[str, Any]], **scope: Any) -> list[str]:
    return [memory.add(turn, **scope)[0].id for turn in turns]


def _stored(memory: LongTermMemory, ids: list[str], user_id: str) -> list[MemoryRecord]:
    return memory.store.get(ids, Filter(user_id=user_id))


@pytest.mark.parametrize("spaced_s", [0, 30])
def test_a_chat_added_one_message_at_a_time_is_indexed_as_if_added_whole(
    memory: LongTermMemory, spaced_s: int
) -> None:
    turns = _chat(spaced_s)
    whole = memory.add(turns, user_id="bulk", session_id="s1")
    live = _stored(memory, _add_live(memory, turns, user_id="live", session_id="s1"), "live")
    assert [index_fields(r) for r in live] == [index_fields(r) for r in whole]
    assert [r.metadata.version for r in live] == [2, 2, 2, 1]
    history = memory.history(live[0].id, user_id="live")
    assert [(e.version, e.reason) for e in history] == [(1, None), (2, NEXT_TURN_REASON)]
    assert history[0].new is not None and history[0].new.context is not None
    assert history[0].new.context.after is None
    # The embedded text holds no neighbour, so the vector stays the one the turn got.
    vector = memory.store.vectors([live[0].id], Filter(user_id="live"))[live[0].id]
    assert np.allclose(vector, memory.embedder.embed([embedding_text(live[0])])[0], atol=1e-6)


def test_the_previous_turn_is_found_by_the_words_of_the_turn_after_it(
    memory: LongTermMemory,
) -> None:
    first, *_ = _add_live(memory, _chat()[:2], user_id="u", session_id="s")
    hits = memory.search("risotto", user_id="u", k=5)
    question = next(h for h in hits if h.record.id == first)
    assert question.keyword_score is not None  # its index entry was refreshed


def test_live_context_never_crosses_sessions_users_tenants_or_readers(
    memory: LongTermMemory,
) -> None:
    first, second = _chat()[:2]
    (earlier,) = _add_live(memory, [first], user_id="u", session_id="A")
    elsewhere = [
        {"user_id": "u", "session_id": "B"},
        {"user_id": "v", "session_id": "A"},
        {"user_id": "u", "session_id": "A", "tenant_id": "other"},
        {"user_id": "u", "session_id": "A", "allowed_roles": ["hr"]},
        {"user_id": "u"},
    ]
    for scope in elsewhere:
        (added,) = memory.add(second, **scope)
        assert added.context is not None and added.context.before is None, scope
    (kept,) = _stored(memory, [earlier], "u")
    assert kept.context is not None and kept.context.after is None
    assert kept.metadata.version == 1


def test_a_turn_long_after_its_sessions_last_one_gets_no_context_from_it(
    memory: LongTermMemory,
) -> None:
    first, second, third = _chat()[:3]
    later = SESSION_LOOKBACK[-1] + timedelta(minutes=1)
    _add_live(memory, [first], user_id="u", session_id="s")
    (next_day,) = memory.add(
        {**second, "timestamp": first["timestamp"] + timedelta(days=1)}, user_id="u", session_id="s"
    )
    assert next_day.context is not None and next_day.context.before == (
        "Caroline: " + first["content"]
    )
    (too_late,) = memory.add(
        {**third, "timestamp": second["timestamp"] + timedelta(days=1) + later},
        user_id="u",
        session_id="s",
    )
    assert too_late.context is not None and too_late.context.before is None


def test_a_long_previous_message_gives_all_its_parts_the_next_turn(
    memory: LongTermMemory,
) -> None:
    document = {"role": "user", "name": "Caroline", "content": long_document(3 * MAX_TEXT_CHARS)}
    parts = memory.add(document, user_id="u", session_id="s")
    (reply,) = memory.add(
        {"role": "assistant", "content": "Thanks, I read it."}, user_id="u", session_id="s"
    )
    assert reply.context is not None and reply.context.before is not None
    # The end of the message, what was said just before the reply, within the context's cut.
    assert reply.context.before.startswith("Caroline: …")
    assert reply.context.before.endswith(parts[-1].text[-200:])
    assert len(reply.context.before) == MAX_CONTEXT_CHARS
    for part in _stored(memory, [p.id for p in parts], "u"):
        assert part.context is not None and part.context.after == "assistant: Thanks, I read it."


@pytest.fixture(scope="module")
def postgres_uri() -> Iterator[str]:
    with postgres_server() as uri:
        yield uri


@pytest.fixture(scope="module")
def redis_url() -> str:
    if reason := redis_reachable(REDIS_URL):
        pytest.skip(reason)
    return REDIS_URL


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("milvus", marks=pytest.mark.milvus),
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("cached-sqlite", marks=pytest.mark.redis),
    ],
)
def test_live_context_on_every_backend(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, embedder: LocalEmbedder
) -> None:
    """Turns said at one moment (Milvus orders those by id, not by insertion) and turns
    said apart both chain up as one chat added whole would."""
    with LongTermMemory(BACKENDS[backend](request)(tmp_path), embedder) as memory:
        for spaced_s in (0, 30):
            turns = _chat(spaced_s)
            whole = memory.add(turns, user_id=f"bulk{spaced_s}", session_id="s")
            user = f"live{spaced_s}"
            ids = _add_live(memory, turns, user_id=user, session_id="s")
            live = _stored(memory, ids, user)
            assert [index_fields(r) for r in live] == [index_fields(r) for r in whole]
            hits = memory.search("risotto", user_id=user, k=5)
            assert next(h for h in hits if h.record.id == ids[0]).keyword_score is not None


def test_two_writers_of_one_session_chain_its_turns_as_one(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    """Each writer remembers the session's last turn it stored; a turn the other added
    since (its ``after`` filled in) sends it back to the store."""
    path = tmp_path / "shared.db"
    turns = _chat()
    with (
        LongTermMemory(SQLiteStore(path), embedder) as one,
        LongTermMemory(SQLiteStore(path), embedder) as two,
    ):
        whole = one.add(turns, user_id="bulk", session_id="s")
        ids = [
            writer.add(turn, user_id="live", session_id="s")[0].id
            for writer, turn in zip([one, two, one, two], turns, strict=True)
        ]
        live = _stored(one, ids, "live")
    assert [index_fields(r) for r in live] == [index_fields(r) for r in whole]


def test_a_turn_restricted_after_it_was_said_is_no_context_for_an_open_one(
    memory: LongTermMemory,
) -> None:
    said = {"user_id": "u", "session_id": "s"}
    (first,) = memory.add([{"role": "user", "content": "Salary review Kdeadbeef"}], **said)
    memory.update(first.id, user_id="u", allowed_roles=["hr"])  # its readers change
    (later,) = memory.add([{"role": "user", "content": "What is the weather?"}], **said)
    assert later.context is not None
    assert "Kdeadbeef" not in (later.context.before or "")


def test_importing_a_line_whose_id_others_hold_again_meets_the_same_memory(
    memory: LongTermMemory,
) -> None:
    """An id held by a memory the importer may not see (hr-only) or by another user is
    stored under an id derived from it: importing the line again is skipped, refused or
    replaced, as a line with an unused id would be, never a new copy each time (which also
    told the importer that someone held the id)."""
    (secret,) = memory.add("Salary review: 3% raise", user_id="ana", allowed_roles=["hr"])
    (other,) = memory.add("Ben's locker is 12", user_id="ben")
    out = io.StringIO()
    memory.export_jsonl(Filter(ids=(secret.id, other.id)), out)
    lines = [
        line.replace('"allowed_roles":["hr"]', '"allowed_roles":[]').replace('"ben"', '"ana"')
        for line in out.getvalue().splitlines()
    ]
    unused = io.StringIO()
    memory.export_jsonl(Filter(ids=(memory.add("Fresh", user_id="zed")[0].id,)), unused)
    fresh = [unused.getvalue().replace('"zed"', '"ana"').replace("Fresh", "Fresh copy")]
    memory.delete_all(Filter(user_id="zed"))
    ops = Filter(user_id="ana", reader_roles=frozenset({"ops"}))
    for batch in (lines, fresh):
        assert memory.import_jsonl(batch, roles=["ops"]) == len(batch)
        assert memory.import_jsonl(batch, on_conflict="skip", roles=["ops"]) == 0
        assert memory.import_jsonl(batch, on_conflict="replace", roles=["ops"]) == len(batch)
        with pytest.raises(ValidationError, match="already exists"):
            memory.import_jsonl(batch, roles=["ops"])
    assert sorted(r.text for r in memory.list(ops).records) == sorted(
        ["Salary review: 3% raise", "Ben's locker is 12", "Fresh copy"]
    )
    assert memory.get(secret.id, user_id="ana").text == "Salary review: 3% raise"
    assert memory.get(other.id, user_id="ben").text == "Ben's locker is 12"


def test_search_returns_k_current_facts_however_many_superseded_ones_rank_above(
    memory: LongTermMemory,
) -> None:
    """Superseded facts are left out of a search, and the next ones read instead, until k
    current facts are found: it used to read 2k and return fewer when more than k of them
    were superseded (it now reads k records when none is)."""
    said = [f"User drinks green tea number {n} every morning" for n in range(8)]
    said += [f"User once drank black coffee {n}" for n in range(4)]
    for text in said:
        memory.add(text, user_id="u")
    out = io.StringIO()
    memory.export_jsonl(Filter(user_id="u"), out)
    ended = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    lines = []
    for line in out.getvalue().splitlines():
        row = json.loads(line)
        if "tea" in row["record"]["content"]["raw"]:
            row["record"]["time"]["valid_to"] = ended  # the tea facts were superseded
        lines.append(json.dumps(row))
    memory.delete_all(Filter(user_id="u"))
    memory.import_jsonl(lines)
    found = memory.search("What tea does the user drink?", user_id="u", k=3, threshold=0.0)
    assert len(found) == 3 and all("coffee" in r.record.text for r in found)
    everything = memory.search(
        "What tea does the user drink?", user_id="u", k=3, threshold=0.0, include_superseded=True
    )
    assert all("tea" in r.record.text for r in everything)  # they do rank above
