"""The retrieval pipeline (SPEC R1-R5, L6, L7, F2, X3) over a real SQLite long-term memory
and the real local embedder."""

from __future__ import annotations

import asyncio
import logging
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatmem import LocalEmbedder, LongTermMemory
from chatmem.errors import EmbeddingError, LLMResponseError, LLMUnavailableError, ValidationError
from chatmem.messages import Message, Role
from chatmem.records import (
    Filter,
    HistoryEvent,
    MemoryRecord,
    MemoryType,
    RelationType,
    SearchResult,
    Vector,
)
from chatmem.retrieval import (
    DEFAULT_HEADER,
    HYDE_PROMPT,
    QUEUE_DEPTH,
    REWRITE_PROMPT,
    AsyncRetriever,
    Decision,
    DecisionRules,
    RerankWeights,
    RetrievedMemory,
    Retriever,
    UsageRecorder,
    build_query,
    context_terms,
    decide,
    expand,
    inject,
    is_self_contained,
    pack,
    recency_score,
    relevance_scores,
    render_memory,
    rerank,
    search,
)
from chatmem.stores import SQLiteStore, Usage
from chatmem.testing import ScriptedChatModel
from chatmem.tokens import default_counter, message_tokens

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
#: Long enough that a loaded test machine never trips it; the timeout test sets its own.
GENEROUS_MS = 30_000.0


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def fact(
    text: str,
    *,
    user_id: str = "alice",
    id: str | None = None,
    created: datetime = NOW - timedelta(days=10),
    importance: float = 0.5,
    type: MemoryType = MemoryType.SEMANTIC,
    relations: Sequence[tuple[RelationType, str]] = (),
    valid_from: datetime | None = None,
    valid_to: datetime | None = None,
) -> MemoryRecord:
    fields: dict[str, Any] = {
        "user_id": user_id,
        "type": type,
        "content": {"raw": text},
        "metadata": {"importance": importance},
        "time": {
            "created_at": created,
            "updated_at": created,
            "valid_from": valid_from,
            "valid_to": valid_to,
        },
        "relations": [{"type": t, "target_id": target} for t, target in relations],
    }
    if id is not None:
        fields["id"] = id
    return MemoryRecord.checked(fields)


def hit(record: MemoryRecord, score: float) -> SearchResult:
    return SearchResult(record=record, score=score)


# -- 1. decision (R1) ---------------------------------------------------------------------------

SKIPPED = [
    ("hi", "greeting"),
    ("Hello there!", "greeting"),
    ("hey", "greeting"),
    ("Good morning!", "greeting"),
    ("what's up?", "greeting"),
    ("bye, see you later", "greeting"),
    ("thanks", "thanks"),
    ("Thank you so much!", "thanks"),
    ("thx", "thanks"),
    ("ok thanks 🙏", "thanks"),
    ("ok", "acknowledgement"),
    ("Okay.", "acknowledgement"),
    ("cool", "acknowledgement"),
    ("got it", "acknowledgement"),
    ("sounds good!", "acknowledgement"),
    ("I see", "acknowledgement"),
    ("👍", "acknowledgement"),
    ("👍👍", "acknowledgement"),
    ("yes", "acknowledgement"),
    ("What is the capital of France?", "general knowledge"),
    ("how does TCP work", "general knowledge"),
    ("How do vaccines work?", "general knowledge"),
    ("What is a monad?", "general knowledge"),
    ("what's an API gateway?", "general knowledge"),
    ("Who wrote Hamlet?", "general knowledge"),
    ("When was Einstein born?", "general knowledge"),
    ("What does HTTP stand for?", "general knowledge"),
    ("what is the population of Tokyo", "general knowledge"),
    ("What's 17 * 23?", "general knowledge"),
    ("translate 'good night' into French", "general knowledge"),
    ("Tell me a joke", "general knowledge"),
    ("How many bones are in the human body?", "general knowledge"),
    ("Explain how DNS works", "general knowledge"),
    ("?", "too short"),
    ("", "empty"),
    ("   ", "empty"),
]

SEARCHED = [
    ("What's my budget for the trip?", "personal"),
    ("Hi, what's my budget?", "personal"),
    ("thanks, and what did I say about Hawaii?", "personal"),
    ("Do you remember the hotel we liked?", "personal"),
    ("What did I tell you about my sister?", "personal"),
    ("What is the capital of France, where I studied?", "personal"),
    ("how does my pension plan work", "personal"),
    ("What is my favourite food?", "personal"),
    ("Where do we keep the spare key?", "personal"),
    ("Remind me of the dentist appointment", "personal"),
    ("Is mine the blue one?", "personal"),
    ("How much?", "default"),
    ("and the other one?", "default"),
    ("What is a good gift for Anna?", "default"),
    ("Who is Anna?", "default"),
    ("When is the meeting?", "default"),
    ("ok, book the usual place", "default"),
    ("Recommend a movie for tonight", "default"),
    ("привет, как дела с бюджетом?", "default"),
]


@pytest.mark.parametrize(("text", "reason"), SKIPPED)
def test_decide_skips(text: str, reason: str) -> None:
    assert decide([user(text)]) == Decision(False, reason)


@pytest.mark.parametrize(("text", "reason"), SEARCHED)
def test_decide_searches(text: str, reason: str) -> None:
    assert decide([user(text)]) == Decision(True, reason)


def test_tool_turns_are_skipped() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
        ],
    }
    result = {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 21}'}
    asked = user("What's the weather where I live?")
    assert decide([asked, call]) == Decision(False, "tool call")
    assert decide([asked, call, result]) == Decision(False, "tool result")


def test_a_turn_not_from_the_user_is_skipped() -> None:
    assert decide([]) == Decision(False, "no messages")
    assert decide([user("my budget?"), assistant("It is $10,000.")]).search is False


def test_decide_reads_messages_and_content_parts() -> None:
    parts = {"role": "user", "content": [{"type": "text", "text": "What is my budget?"}]}
    assert decide([parts]) == Decision(True, "personal")
    assert decide([Message(role=Role.USER, content="thanks!")]) == Decision(False, "thanks")


def test_every_skip_is_logged_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="chatmem.retrieval")
    decide([user("thanks!")])
    decide([user("What's my budget?")])
    skips = [r for r in caplog.records if r.name == "chatmem.retrieval"]
    assert [r.getMessage() for r in skips] == ["Memory: skipping search (thanks)"]


def test_rules_are_configurable() -> None:
    rules = DecisionRules(
        greetings=("moin",),
        general_knowledge=(r"^wie\s+funktioniert\b",),
        min_chars=5,
    )
    assert decide([user("moin!")], rules) == Decision(False, "greeting")
    assert decide([user("hi")], rules) == Decision(False, "too short")
    assert decide([user("hello there")], rules) == Decision(True, "default")
    assert decide([user("Wie funktioniert TCP?")], rules) == Decision(False, "general knowledge")
    assert decide([user("What is the capital of France?")], rules).search


def test_bad_rules_are_refused() -> None:
    with pytest.raises(ValidationError):
        DecisionRules(general_knowledge=("(unclosed",))
    with pytest.raises(ValidationError):
        DecisionRules(min_chars=-1)


# -- 2. query (R2) ------------------------------------------------------------------------------

PLANNING = [
    user("I'm planning a vacation"),
    assistant("Nice! Where to?"),
    user("Hawaii sounds nice"),
    assistant("It is lovely in spring."),
]


@pytest.mark.parametrize(
    ("text", "alone"),
    [
        ("How much?", False),
        ("and the other one?", False),
        ("what about then?", False),
        ("Is it expensive?", False),
        ("Did she like it?", False),
        ("Tell me more about that", False),
        ("which one?", False),
        ("What's my budget for the Hawaii trip?", True),
        ("Where do I live?", True),
        ("What did I say about the hotel in Lisbon?", True),
        ("When is my sister's wedding?", True),
    ],
)
def test_self_contained(text: str, alone: bool) -> None:
    assert is_self_contained(text) is alone


def test_a_vague_query_gets_the_recent_key_terms() -> None:
    query = build_query([*PLANNING, user("How much?")])
    assert query.method == "context"
    assert query.original == "How much?"
    assert query.text == "planning vacation hawaii sounds nice How much?"


def test_context_terms_are_from_the_last_user_turns_newest_kept() -> None:
    said = [user("Berlin trip"), user("Lisbon hotel"), user("Porto wine"), user("and?")]
    assert context_terms(said, turns=2) == ["lisbon", "hotel", "porto", "wine"]
    assert context_terms(said, turns=3, limit=3) == ["hotel", "porto", "wine"]


def test_a_self_contained_query_is_kept_as_it_is() -> None:
    query = build_query([*PLANNING, user("What's my budget for the Hawaii trip?")])
    assert query == ("What's my budget for the Hawaii trip?",) * 2 + ("original",)


def test_a_vague_query_without_history_stays_as_it_is() -> None:
    model = ScriptedChatModel(["should not be asked"])
    assert build_query([user("How much?")], rewriter=model).method == "original"
    assert model.calls == []


def test_the_model_rewrites_a_vague_query() -> None:
    model = ScriptedChatModel(['"What is the budget for the Hawaii vacation?"\n'])
    query = build_query([*PLANNING, user("How much?")], rewriter=model)
    assert query.text == "What is the budget for the Hawaii vacation?"
    assert query.method == "rewrite"
    (call,) = model.calls
    assert call.messages[0] == {"role": "system", "content": REWRITE_PROMPT}
    assert "user: Hawaii sounds nice" in call.messages[1]["content"]
    assert call.messages[1]["content"].endswith("Last message: How much?")


def test_the_model_is_not_asked_for_a_self_contained_query() -> None:
    model = ScriptedChatModel(["unused"])
    query = build_query([*PLANNING, user("What is my Hawaii budget?")], rewriter=model)
    assert query.method == "original"
    assert model.calls == []


@pytest.mark.parametrize(
    "failure", [LLMUnavailableError("down"), LLMResponseError("garbage", raw="")]
)
def test_a_failed_rewrite_falls_back_to_context(
    failure: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="chatmem.retrieval")
    query = build_query([*PLANNING, user("How much?")], rewriter=ScriptedChatModel([failure]))
    assert query.method == "context"
    assert "query rewrite failed, using the context query" in caplog.text


def test_an_empty_rewrite_falls_back_to_context() -> None:
    query = build_query([*PLANNING, user("How much?")], rewriter=ScriptedChatModel(['  ""  ']))
    assert query.method == "context"


def test_hyde_searches_a_hypothetical_answer() -> None:
    model = ScriptedChatModel(
        ["What is the Hawaii vacation budget?", "User's budget for Hawaii is about $10,000."]
    )
    query = build_query([*PLANNING, user("How much?")], rewriter=model, hyde=True)
    assert query == ("User's budget for Hawaii is about $10,000.", "How much?", "hyde")
    assert model.calls[1].messages[0]["content"] == HYDE_PROMPT
    assert (
        model.calls[1]
        .messages[1]["content"]
        .endswith("Last message: What is the Hawaii vacation budget?")
    )


def test_a_failed_hyde_keeps_the_query_it_had(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="chatmem.retrieval")
    model = ScriptedChatModel([LLMUnavailableError("down")])
    query = build_query([user("What is my budget?")], rewriter=model, hyde=True)
    assert query.method == "original"
    assert "query hyde failed" in caplog.text


def test_hyde_needs_a_model_and_the_query_a_user_message() -> None:
    with pytest.raises(ValidationError):
        build_query([user("How much?")], hyde=True)
    with pytest.raises(ValidationError):
        build_query([assistant("Hello")])


# -- 3. rerank (R3, pure) -----------------------------------------------------------------------


def test_relevance_is_relative_to_the_best_or_to_the_reference() -> None:
    assert relevance_scores([0.8, 0.4, 0.2]) == pytest.approx([1.0, 0.5, 0.25])
    assert relevance_scores([0.2, 0.1]) == pytest.approx([0.6, 0.3])
    assert relevance_scores([]) == []


def test_the_threshold_applies_to_relevance_not_to_the_final_score() -> None:
    strong = fact("User's budget for the Hawaii trip is $10,000", importance=0.0)
    weak = fact("User is thinking about a weekend trip", created=NOW, importance=1.0)
    ranked = rerank([hit(strong, 0.8), hit(weak, 0.4)], k=5, threshold=0.6, now=NOW)
    assert [m.record.id for m in ranked] == [strong.id]  # 0.5 relevance, however fresh
    ranked = rerank([hit(strong, 0.8), hit(weak, 0.4)], k=5, threshold=0.5, now=NOW)
    assert [m.record.id for m in ranked] == [strong.id, weak.id]


def test_recency_and_importance_reorder_what_passed() -> None:
    old = fact("old fact", created=NOW - timedelta(days=300), importance=0.1)
    new = fact("new fact", created=NOW - timedelta(days=1), importance=0.9)
    ranked = rerank([hit(old, 0.80), hit(new, 0.72)], k=5, threshold=0.6, now=NOW)
    assert [m.record.text for m in ranked] == ["new fact", "old fact"]
    only_relevance = RerankWeights(relevance=1.0, recency=0.0, importance=0.0)
    ranked = rerank(
        [hit(old, 0.80), hit(new, 0.72)], k=5, threshold=0.6, weights=only_relevance, now=NOW
    )
    assert [m.record.text for m in ranked] == ["old fact", "new fact"]
    assert ranked[0].score == pytest.approx(1.0)


def test_rerank_keeps_k() -> None:
    records = [fact(f"fact {i}") for i in range(8)]
    ranked = rerank(
        [hit(r, 0.9 - i * 0.01) for i, r in enumerate(records)], k=3, threshold=0.0, now=NOW
    )
    assert [m.record.text for m in ranked] == ["fact 0", "fact 1", "fact 2"]


def test_recency_halves_every_half_life_from_valid_from() -> None:
    record = fact("x", created=NOW - timedelta(days=90), valid_from=NOW - timedelta(days=30))
    assert recency_score(record, NOW, 30.0) == pytest.approx(0.5)
    assert recency_score(fact("y", created=NOW + timedelta(days=3)), NOW, 30.0) == 1.0


def test_weights_are_checked() -> None:
    with pytest.raises(ValidationError):
        RerankWeights(relevance=0.9, recency=0.2, importance=0.0)
    with pytest.raises(ValidationError):
        RerankWeights(half_life_days=0)


def test_superseded_hits_are_marked_never_current() -> None:
    ended = NOW - timedelta(days=20)
    old = fact("User's budget was $8,000", id="old", valid_to=ended)
    new = fact("User's budget is $10,000", relations=[(RelationType.UPDATES, "old")])
    ranked = rerank([hit(old, 0.8), hit(new, 0.8)], k=5, threshold=0.6, now=NOW)
    by_text = {m.record.text: m for m in ranked}
    assert by_text["User's budget was $8,000"].superseded_until == ended
    assert by_text["User's budget is $10,000"].current


def test_an_updated_hit_is_marked_even_without_valid_to() -> None:
    old = fact("User's budget was $8,000", id="old", created=NOW - timedelta(days=40))
    new = fact(
        "User's budget is $10,000",
        created=NOW - timedelta(days=5),
        relations=[(RelationType.UPDATES, "old")],
    )
    ranked = rerank([hit(old, 0.8), hit(new, 0.8)], k=5, threshold=0.6, now=NOW)
    marked = next(m for m in ranked if m.record.id == "old")
    assert marked.superseded_until == new.time.created_at
    assert render_memory(marked) == "- (earlier, until 2024-05-27) User's budget was $8,000"


# -- 3. search (R3, real store and embedder) ----------------------------------------------------

FACTS = [
    "User's budget for the Hawaii trip is $10,000",
    "User lives in Berlin with two cats",
    "User is allergic to peanuts",
    "User's sister Anna is getting married in June",
    "User prefers window seats on flights",
    "User is learning to play the violin",
]


def store_facts(memory: LongTermMemory, user_id: str = "alice") -> list[MemoryRecord]:
    return memory.add_records([fact(text, user_id=user_id) for text in FACTS])


def test_search_finds_the_fact_and_scores_it(memory: LongTermMemory) -> None:
    store_facts(memory)
    found = search(memory, "What's my budget for the trip?", user_id="alice", now=NOW)
    assert found[0].record.text == FACTS[0]
    assert found[0].relevance == 1.0
    assert 0.5 < found[0].fused <= 1.0


def test_an_unrelated_query_finds_nothing_at_the_default_threshold(memory: LongTermMemory) -> None:
    store_facts(memory)
    assert search(memory, "What is my blood type?", user_id="alice", now=NOW) == []
    assert search(memory, "What is my blood type?", user_id="alice", threshold=0.0, now=NOW)


def test_noise_sharing_a_word_with_a_strong_hit_is_cut(memory: LongTermMemory) -> None:
    store_facts(memory)
    noise = "User is thinking about a weekend trip to Tokyo"
    memory.add_records([fact(noise)])
    found = search(memory, "What's my budget for the trip?", user_id="alice", now=NOW)
    assert [m.record.text for m in found] == [FACTS[0]]
    loose = search(memory, "What's my budget for the trip?", user_id="alice", threshold=0.3)
    assert [m.record.text for m in loose] == [FACTS[0], noise]
    assert loose[1].fused > 0.3  # a fixed cut on the fused score would not drop it at 0.3


def test_search_filters_by_type_and_time(memory: LongTermMemory) -> None:
    memory.add_records(
        [
            fact("User's budget for Hawaii is $10,000", created=NOW - timedelta(days=40)),
            fact(
                "User's Hawaii budget spreadsheet steps: open, fill, save",
                type=MemoryType.PROCEDURAL,
                created=NOW - timedelta(days=2),
            ),
        ]
    )
    ask = "What is my Hawaii budget?"
    both = search(memory, ask, user_id="alice", threshold=0.0, now=NOW)
    assert len(both) == 2
    typed = search(memory, ask, user_id="alice", types=[MemoryType.PROCEDURAL], threshold=0.0)
    assert [m.record.type for m in typed] == [MemoryType.PROCEDURAL]
    recent = search(memory, ask, user_id="alice", since=NOW - timedelta(days=7), threshold=0.0)
    assert [m.record.text for m in recent] == [
        "User's Hawaii budget spreadsheet steps: open, fill, save"
    ]
    older = search(memory, ask, user_id="alice", until=NOW - timedelta(days=7), threshold=0.0)
    assert [m.record.text for m in older] == ["User's budget for Hawaii is $10,000"]


def test_superseded_memories_are_left_out_unless_asked(memory: LongTermMemory) -> None:
    ended = NOW - timedelta(days=20)
    memory.add_records(
        [
            fact("User's budget for the Hawaii trip was $8,000", valid_to=ended),
            fact("User's budget for the Hawaii trip is $10,000", valid_from=ended),
        ]
    )
    ask = "What's my budget for the Hawaii trip?"
    found = search(memory, ask, user_id="alice", now=NOW)
    assert [m.record.text for m in found] == ["User's budget for the Hawaii trip is $10,000"]
    found = search(memory, ask, user_id="alice", now=NOW, include_superseded=True)
    assert {m.record.text: m.current for m in found} == {
        "User's budget for the Hawaii trip is $10,000": True,
        "User's budget for the Hawaii trip was $8,000": False,
    }
    before = search(memory, ask, user_id="alice", now=ended - timedelta(days=1))
    assert "User's budget for the Hawaii trip was $8,000" in [m.record.text for m in before]


def test_search_arguments_are_checked(memory: LongTermMemory) -> None:
    with pytest.raises(ValidationError):
        search(memory, "x", user_id="alice", k=0)
    with pytest.raises(ValidationError):
        search(memory, "x", user_id="alice", threshold=1.5)


# -- 4. relations (L6) --------------------------------------------------------------------------


def test_expand_follows_typed_links_one_hop(memory: LongTermMemory) -> None:
    memory.add_records(
        [
            fact("User's budget was $8,000", id="old", created=NOW - timedelta(days=60)),
            fact("User is going to Hawaii with Anna", id="trip"),
            fact("Anna is User's sister", id="anna"),
            fact(
                "User's budget for the Hawaii trip is $10,000",
                id="new",
                created=NOW - timedelta(days=5),
                relations=[(RelationType.UPDATES, "old"), (RelationType.PART_OF, "trip")],
            ),
        ]
    )
    hits = search(memory, "What's my budget for Hawaii?", user_id="alice", k=1, now=NOW)
    assert [m.record.id for m in hits] == ["new"]
    linked = expand(memory, hits, user_id="alice", now=NOW)
    assert [(m.record.id, m.via) for m in linked] == [
        ("old", RelationType.UPDATES),
        ("trip", RelationType.PART_OF),
    ]
    old, trip = linked
    assert old.superseded_until == hits[0].record.time.created_at
    assert render_memory(old) == "- (earlier, until 2024-05-27) User's budget was $8,000"
    assert trip.current and trip.linked_from == "new"
    only = expand(memory, hits, user_id="alice", types={RelationType.PART_OF}, now=NOW)
    assert [m.record.id for m in only] == ["trip"]


def test_expand_follows_more_hops_when_asked(memory: LongTermMemory) -> None:
    memory.add_records(
        [
            fact("Anna is User's sister", id="anna"),
            fact(
                "User is going to Hawaii", id="trip", relations=[(RelationType.RELATED_TO, "anna")]
            ),
            fact(
                "User's Hawaii budget is $10,000",
                id="new",
                relations=[(RelationType.PART_OF, "trip")],
            ),
        ]
    )
    start = [RetrievedMemory(memory.get("new", user_id="alice"), 1.0, 1.0, 1.0, 1.0)]
    assert [m.record.id for m in expand(memory, start, user_id="alice", hops=2)] == ["trip", "anna"]
    assert [m.record.id for m in expand(memory, start, user_id="alice", hops=2, limit=1)] == [
        "trip"
    ]


def test_expand_never_crosses_users(memory: LongTermMemory) -> None:
    bobs = memory.add_records([fact("Bob's secret: the safe code is 4711", user_id="bob")])
    memory.add_records(
        [
            fact(
                "User's budget is $10,000",
                id="a1",
                relations=[(RelationType.RELATED_TO, bobs[0].id)],
            )
        ]
    )
    start = [RetrievedMemory(memory.get("a1", user_id="alice"), 1.0, 1.0, 1.0, 1.0)]
    assert expand(memory, start, user_id="alice") == []


def test_a_contradicted_older_memory_is_marked_earlier(memory: LongTermMemory) -> None:
    memory.add_records(
        [
            fact("User is vegetarian", id="veg", created=NOW - timedelta(days=100)),
            fact(
                "User eats fish now",
                id="fish",
                created=NOW - timedelta(days=3),
                relations=[(RelationType.CONTRADICTS, "veg")],
            ),
        ]
    )
    start = [RetrievedMemory(memory.get("fish", user_id="alice"), 1.0, 1.0, 1.0, 1.0)]
    (veg,) = expand(memory, start, user_id="alice", now=NOW)
    assert render_memory(veg).startswith("- (earlier, until 2024-05-29) User is vegetarian")


# -- 5. injection (R4) --------------------------------------------------------------------------


def memories(*texts: str) -> list[RetrievedMemory]:
    return [
        RetrievedMemory(fact(t, created=datetime(2024, 5, 8, tzinfo=UTC)), 1.0, 1.0, 1.0, 1.0)
        for t in texts
    ]


def test_inject_adds_one_system_message_after_the_apps_own() -> None:
    said = [
        {"role": "system", "content": "You are a travel agent."},
        {"role": "developer", "content": "Be brief."},
        user("What's my budget?"),
    ]
    out = inject(said, memories("User's budget for the Hawaii trip is $10,000", "User likes sun"))
    assert out[:2] == said[:2] and out[3] == said[2]
    assert out[2] == {
        "role": "system",
        "content": f"{DEFAULT_HEADER}:\n"
        "- [2024-05-08] User's budget for the Hawaii trip is $10,000\n"
        "- [2024-05-08] User likes sun",
    }
    assert len(said) == 3  # the input is not changed


def test_inject_with_nothing_returns_the_messages() -> None:
    said = [user("hello")]
    assert inject(said, []) == said
    assert inject(said, memories("a fact"), budget_tokens=3) == said


def test_inject_renders_chatmem_messages() -> None:
    out = inject([Message(role=Role.USER, content="hi")], memories("fact"))
    assert out[0]["role"] == "system" and out[1] == {"role": "user", "content": "hi"}


def test_inject_through_a_template() -> None:
    out = inject(
        [user("q")],
        memories("fact one"),
        template="<memories>\n{memories}\n</memories>",
    )
    assert out[0]["content"] == "<memories>\n- [2024-05-08] fact one\n</memories>"
    with pytest.raises(ValidationError):
        inject([user("q")], memories("x"), template="no field")


def test_inject_cuts_item_by_item_and_skips_what_does_not_fit() -> None:
    counter = default_counter()
    long = "User wrote a very long note " + "about many things " * 40
    items = memories("first fact", long, "third fact")
    out = inject([user("q")], items, counter=counter, budget_tokens=40)
    assert out[0]["content"].splitlines()[1:] == [
        "- [2024-05-08] first fact",
        "- [2024-05-08] third fact",
    ]
    assert message_tokens(counter, out[0]) <= 40


def test_pack_reports_what_it_kept() -> None:
    counter = default_counter()
    packed = pack(["- a", "- b"], counter=counter, budget_tokens=1000)
    assert packed.kept == [0, 1]
    assert pack(["- a"], counter=counter, budget_tokens=0).kept == []


@settings(max_examples=150, deadline=None)
@given(
    texts=st.lists(
        st.text(min_size=1, max_size=300).filter(lambda t: bool(t.strip())), max_size=12
    ),
    budget=st.integers(min_value=0, max_value=400),
    template=st.sampled_from([None, "Known about the user:\n{memories}\n(end)", "{memories}"]),
)
def test_inject_never_exceeds_the_budget(
    texts: list[str], budget: int, template: str | None
) -> None:
    counter = default_counter()
    said = [{"role": "system", "content": "app"}, user("question")]
    out = inject(said, memories(*texts), counter=counter, budget_tokens=budget, template=template)
    if len(out) == len(said):
        assert out == said
        return
    assert out[0] == said[0] and out[2] == said[1]
    assert message_tokens(counter, out[1]) <= budget


# -- 6. use (R5) --------------------------------------------------------------------------------


@pytest.fixture
def usage(memory: LongTermMemory) -> Iterator[UsageRecorder]:
    with UsageRecorder(memory, flush_every_s=60) as recorder:
        yield recorder


def test_usage_is_written_in_batches_without_a_new_version(
    memory: LongTermMemory, usage: UsageRecorder
) -> None:
    first, second = memory.add_records([fact("fact one"), fact("fact two")])
    seen = datetime(2024, 6, 2, 9, 30, tzinfo=UTC)
    usage.record([first.id, second.id], user_id="alice", at=seen - timedelta(hours=1))
    usage.record([first.id], user_id="alice", at=seen)
    assert usage.pending() == 2
    assert memory.get(first.id, user_id="alice").access_count == 0  # nothing written yet
    assert usage.flush() == 2
    one = memory.get(first.id, user_id="alice")
    assert (one.access_count, one.time.last_accessed) == (2, seen)
    assert one.metadata.version == 1 and one.time.updated_at == first.time.updated_at
    assert memory.get(second.id, user_id="alice").access_count == 1
    assert [h.event for h in memory.history(first.id, user_id="alice")] == [HistoryEvent.ADD]
    assert usage.flush() == 0


def test_usage_keeps_the_latest_access(memory: LongTermMemory, usage: UsageRecorder) -> None:
    (one,) = memory.add_records([fact("fact one")])
    later, earlier = NOW, NOW - timedelta(days=1)
    usage.record([one.id], user_id="alice", at=later)
    usage.flush()
    usage.record([one.id], user_id="alice", at=earlier)
    usage.flush()
    stored = memory.get(one.id, user_id="alice")
    assert (stored.access_count, stored.time.last_accessed) == (2, later)


def test_usage_of_deleted_or_other_users_memories_is_dropped(
    memory: LongTermMemory, usage: UsageRecorder
) -> None:
    gone, bobs = memory.add_records([fact("gone"), fact("bob's", user_id="bob")])
    memory.delete(gone.id, user_id="alice")
    usage.record([gone.id, bobs.id, "no-such-id"], user_id="alice")
    assert usage.flush() == 0
    assert memory.get(bobs.id, user_id="bob").access_count == 0


def test_usage_survives_a_concurrent_update(memory: LongTermMemory, usage: UsageRecorder) -> None:
    one, two = memory.add_records([fact("fact one"), fact("fact two")])
    usage.record([one.id, two.id], user_id="alice")
    memory.update(one.id, "fact one, edited", user_id="alice")  # between the use and the flush
    assert usage.flush() == 2
    edited = memory.get(one.id, user_id="alice")
    assert (edited.text, edited.access_count, edited.metadata.version) == ("fact one, edited", 1, 2)


def test_usage_is_kept_when_the_store_fails(tmp_path: Path, embedder: LocalEmbedder) -> None:
    memory = LongTermMemory(SQLiteStore(tmp_path / "m.db"), embedder)
    (one,) = memory.add_records([fact("fact one")])
    recorder = UsageRecorder(memory, flush_every_s=60)
    recorder.record([one.id], user_id="alice")
    memory.close()
    assert recorder.flush() == 0
    assert recorder.pending() == 1
    recorder.close()
    with LongTermMemory(SQLiteStore(tmp_path / "m.db"), embedder) as reopened:
        assert reopened.get(one.id, user_id="alice").access_count == 0


def test_the_background_thread_flushes(memory: LongTermMemory) -> None:
    (one,) = memory.add_records([fact("fact one")])
    with UsageRecorder(memory, flush_every_s=0.05) as recorder:
        recorder.record([one.id], user_id="alice")
        deadline = time.monotonic() + 10
        while memory.get(one.id, user_id="alice").access_count == 0:
            assert time.monotonic() < deadline, "the background flush never came"
            time.sleep(0.02)


def test_a_full_batch_wakes_the_flush(memory: LongTermMemory) -> None:
    records = memory.add_records([fact(f"fact {i}") for i in range(3)])
    with UsageRecorder(memory, flush_every_s=60, max_batch=2) as recorder:
        recorder.record([r.id for r in records], user_id="alice")
        deadline = time.monotonic() + 10
        while recorder.pending():
            assert time.monotonic() < deadline, "a full batch did not wake the flush"
            time.sleep(0.02)
    assert all(memory.get(r.id, user_id="alice").access_count == 1 for r in records)


def test_record_never_waits_for_a_flush(memory: LongTermMemory) -> None:
    (one,) = memory.add_records([fact("fact one")])
    entered, release = threading.Event(), threading.Event()
    real_touch = memory.store.touch

    def slow_touch(uses: Sequence[Usage], scope: Filter) -> list[str]:
        entered.set()
        release.wait(10)
        return real_touch(uses, scope)

    memory.store.touch = slow_touch  # type: ignore[method-assign]
    try:
        with UsageRecorder(memory, flush_every_s=60) as recorder:
            recorder.record([one.id], user_id="alice")
            flusher = threading.Thread(target=recorder.flush)
            flusher.start()
            assert entered.wait(10)  # a flush is now stuck in the store
            began = time.perf_counter()
            for _ in range(10_000):
                recorder.record([one.id], user_id="alice")
            elapsed = time.perf_counter() - began
            release.set()
            flusher.join()
            assert elapsed < 2.0
            assert recorder.pending() == 1
    finally:
        del memory.store.touch
    assert memory.get(one.id, user_id="alice").access_count == 10_001


# -- 7. the pipeline ----------------------------------------------------------------------------


class Switchable:
    """The real embedder, made slow or failing on demand."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner = inner
        self.delay = 0.0
        self.fail = False

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, texts: Sequence[str]) -> Vector:
        if self.fail:
            raise EmbeddingError("the embedder is down")
        time.sleep(self.delay)
        return self.inner.embed(texts)


@pytest.fixture
def switchable(embedder: LocalEmbedder) -> Switchable:
    return Switchable(embedder)


@pytest.fixture
def flaky_memory(tmp_path: Path, switchable: Switchable) -> Iterator[LongTermMemory]:
    with LongTermMemory(SQLiteStore(tmp_path / "flaky.db"), switchable) as opened:
        yield opened


@pytest.fixture
def retriever(memory: LongTermMemory) -> Iterator[Retriever]:
    with Retriever(memory, search_budget_ms=GENEROUS_MS) as opened:
        yield opened


def test_cross_session_recall(memory: LongTermMemory, retriever: Retriever) -> None:
    memory.add(
        [user("My budget for the Hawaii trip is $10,000"), assistant("Noted, $10,000 it is.")],
        user_id="alice",
        session_id="session-a",
    )
    said = [
        {"role": "system", "content": "You plan trips."},
        user("What's my budget for the trip?"),
    ]
    got = retriever.retrieve(said, user_id="alice")
    assert got.decision == Decision(True, "personal")
    assert got.degraded is None
    assert got.results[0].record.text == "My budget for the Hawaii trip is $10,000"
    system = got.injected_messages[1]
    assert system["role"] == "system"
    assert system["content"].startswith(f"{DEFAULT_HEADER}:\n- [")
    assert "My budget for the Hawaii trip is $10,000" in system["content"]
    assert got.injected_messages[0] == said[0] and got.injected_messages[2] == said[1]
    assert set(got.timings_ms) >= {"decision", "query", "search", "expand", "inject", "total"}


def test_user_isolation(memory: LongTermMemory, retriever: Retriever) -> None:
    memory.add_records([fact("User's budget for the Hawaii trip is $10,000", user_id="alice")])
    memory.add_records([fact("User's budget for the Hawaii trip is $99", user_id="bob")])
    for who, mine, theirs in (("alice", "$10,000", "$99"), ("bob", "$99", "$10,000")):
        got = retriever.retrieve([user("What's my budget for the Hawaii trip?")], user_id=who)
        content = got.injected_messages[0]["content"]
        assert mine in content and theirs not in content
        assert all(m.record.user_id == who for m in got.results)
    nobody = retriever.retrieve([user("What's my budget for the Hawaii trip?")], user_id="carol")
    assert nobody.results == [] and nobody.injected_messages == [
        user("What's my budget for the Hawaii trip?")
    ]


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    owners=st.lists(
        st.sampled_from(["alice", "bob", "carol"]), min_size=len(FACTS), max_size=len(FACTS)
    )
)
def test_no_memory_crosses_users(owners: list[str], embedder: LocalEmbedder) -> None:
    with (
        tempfile.TemporaryDirectory() as folder,
        LongTermMemory(SQLiteStore(Path(folder) / "m.db"), embedder) as memory,
    ):
        memory.add_records([fact(t, user_id=o) for t, o in zip(FACTS, owners, strict=True)])
        with Retriever(memory, search_budget_ms=GENEROUS_MS, threshold=0.0) as retriever:
            for who in ("alice", "bob", "carol"):
                got = retriever.retrieve([user("Tell me what I told you")], user_id=who)
                theirs = {t for t, o in zip(FACTS, owners, strict=True) if o != who}
                assert all(m.record.user_id == who for m in got.results)
                injected = "\n".join(str(m["content"]) for m in got.injected_messages)
                assert not any(t in injected for t in theirs)


def test_a_skipped_request_is_returned_unchanged(
    memory: LongTermMemory, retriever: Retriever
) -> None:
    store_facts(memory)
    got = retriever.retrieve([user("thanks!")], user_id="alice")
    assert got.decision == Decision(False, "thanks")
    assert (got.query, got.results, got.injected_messages) == (None, [], [user("thanks!")])
    assert "search" not in got.timings_ms


def test_a_vague_query_is_completed_from_context(
    memory: LongTermMemory, retriever: Retriever
) -> None:
    store_facts(memory)
    got = retriever.retrieve(
        [user("I want to go to Hawaii"), assistant("Great choice!"), user("How much can I spend?")],
        user_id="alice",
    )
    assert got.query is not None and got.query.method == "original"
    got = retriever.retrieve(
        [user("Planning the Hawaii trip budget"), assistant("Sure."), user("How much?")],
        user_id="alice",
    )
    assert got.query is not None and got.query.method == "context"
    assert got.results[0].record.text == FACTS[0]


def test_superseded_facts_are_injected_as_earlier(
    memory: LongTermMemory, retriever: Retriever
) -> None:
    ended = datetime(2024, 5, 8, tzinfo=UTC)
    memory.add_records(
        [
            fact(
                "User's budget for the Hawaii trip was $8,000",
                id="old",
                created=datetime(2024, 3, 15, tzinfo=UTC),
                valid_to=ended,
            ),
            fact(
                "User's budget for the Hawaii trip is $10,000",
                created=ended,
                valid_from=ended,
                relations=[(RelationType.UPDATES, "old")],
            ),
        ]
    )
    got = retriever.retrieve(
        [user("What's my budget for the Hawaii trip?")], user_id="alice", now=NOW
    )
    lines = got.injected_messages[0]["content"].splitlines()
    assert "- [2024-05-08] User's budget for the Hawaii trip is $10,000" in lines
    assert "- (earlier, until 2024-05-08) User's budget for the Hawaii trip was $8,000" in lines
    assert not any(line.startswith("- [") and "$8,000" in line for line in lines)


def test_a_linked_memory_is_injected_after_the_hits(
    memory: LongTermMemory, retriever: Retriever
) -> None:
    memory.add_records(
        [
            fact("User is travelling with their sister Anna", id="anna"),
            fact(
                "User's budget for the Hawaii trip is $10,000",
                relations=[(RelationType.RELATED_TO, "anna")],
            ),
        ]
    )
    got = retriever.retrieve([user("What's my budget for the Hawaii trip?")], user_id="alice")
    assert [m.via for m in got.results] == [None, RelationType.RELATED_TO]
    assert (
        got.injected_messages[0]["content"]
        .splitlines()[-1]
        .endswith("User is travelling with their sister Anna")
    )


def test_the_token_budget_holds_in_the_pipeline(memory: LongTermMemory) -> None:
    store_facts(memory)
    counter = default_counter()
    with Retriever(
        memory, search_budget_ms=GENEROUS_MS, threshold=0.0, budget_tokens=30, counter=counter
    ) as small:
        got = small.retrieve([user("What do I like and where do I live?")], user_id="alice")
    system = got.injected_messages[0]
    assert system["role"] == "system" and message_tokens(counter, system) <= 30
    assert 1 <= len(got.results) < len(FACTS)


def test_types_narrow_the_pipeline(memory: LongTermMemory, retriever: Retriever) -> None:
    store_facts(memory)
    got = retriever.retrieve(
        [user("What's my budget for the Hawaii trip?")], user_id="alice", types=[MemoryType.PROFILE]
    )
    assert got.results == [] and got.degraded is None


def test_a_project_narrows_the_pipeline(memory: LongTermMemory, retriever: Retriever) -> None:
    memory.add_records(
        [
            fact("User's budget for the Hawaii trip is $10,000").model_copy(
                update={"project_id": "travel"}
            ),
            fact("User's budget for the office move is $2,000").model_copy(
                update={"project_id": "work"}
            ),
        ]
    )
    ask = [user("What's my budget?")]
    texts = [
        m.record.text for m in retriever.retrieve(ask, user_id="alice", project_id="work").results
    ]
    assert texts == ["User's budget for the office move is $2,000"]
    both = retriever.retrieve(ask, user_id="alice", threshold=0.0).results
    assert len(both) == 2


def test_use_is_recorded_for_what_was_injected(memory: LongTermMemory) -> None:
    store_facts(memory)
    with (
        UsageRecorder(memory, flush_every_s=60) as usage,
        Retriever(memory, search_budget_ms=GENEROUS_MS, usage=usage) as retriever,
    ):
        got = retriever.retrieve([user("What's my budget for the trip?")], user_id="alice")
        usage.flush()
    for shown in got.results:
        assert memory.get(shown.record.id, user_id="alice").access_count == 1


def test_a_closed_store_degrades(
    tmp_path: Path, embedder: LocalEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="chatmem.retrieval")
    memory = LongTermMemory(SQLiteStore(tmp_path / "m.db"), embedder)
    store_facts(memory)
    memory.close()
    said = [user("What's my budget for the trip?")]
    with Retriever(memory, search_budget_ms=GENEROUS_MS) as retriever:
        got = retriever.retrieve(said, user_id="alice")
    assert got.degraded is not None and got.degraded.startswith("store error")
    assert got.injected_messages == said and got.results == []
    assert "going on without memory" in caplog.text


def test_an_embedding_failure_degrades(
    flaky_memory: LongTermMemory, switchable: Switchable, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="chatmem.retrieval")
    store_facts(flaky_memory)
    switchable.fail = True
    with Retriever(flaky_memory, search_budget_ms=GENEROUS_MS) as retriever:
        got = retriever.retrieve([user("What's my budget for the trip?")], user_id="alice")
    assert got.degraded == "embedding error: the embedder is down"
    assert got.injected_messages == [user("What's my budget for the trip?")]
    assert "embedding failed, going on without memory" in caplog.text


def test_a_slow_search_times_out(
    flaky_memory: LongTermMemory, switchable: Switchable, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="chatmem.retrieval")
    store_facts(flaky_memory)
    switchable.delay = 0.5
    with Retriever(flaky_memory, search_budget_ms=50, search_workers=1) as retriever:
        began = time.perf_counter()
        got = retriever.retrieve([user("What's my budget for the trip?")], user_id="alice")
        assert time.perf_counter() - began < 0.45
        assert got.degraded == "timeout"
        assert got.injected_messages == [user("What's my budget for the trip?")]
        assert "Memory search timeout" in caplog.text
        # a second request while the first search still holds the only thread: not queued
        assert retriever.retrieve([user("Where do I live?")], user_id="alice").degraded == "busy"
        switchable.delay = 0.0
    assert threading.active_count() < 50


def test_a_tiny_budget_times_out(flaky_memory: LongTermMemory, switchable: Switchable) -> None:
    store_facts(flaky_memory)
    # The wait ends on time only if the worker lets go of the GIL (as the store and the
    # embedder's native code do); a 20 ms pause makes sure it does.
    switchable.delay = 0.02
    with Retriever(flaky_memory, search_budget_ms=0.001) as retriever:
        got = retriever.retrieve([user("What's my budget for the trip?")], user_id="alice")
    assert got.degraded == "timeout"


def test_with_every_search_thread_taken_past_the_queue_wait_a_request_goes_on(
    flaky_memory: LongTermMemory, switchable: Switchable
) -> None:
    store_facts(flaky_memory)
    switchable.delay = 0.5  # the first search holds the only thread for half a second
    ask = [user("What's my budget for the trip?")]
    with Retriever(flaky_memory, search_budget_ms=20, search_workers=1) as retriever:
        assert retriever.retrieve(ask, user_id="alice").degraded == "timeout"
        got = retriever.retrieve(ask, user_id="alice")
        assert got.degraded == "busy" and got.results == []  # no thread within 20 ms
        switchable.delay = 0.0
        time.sleep(0.6)  # the slow search ends and frees its thread
        assert retriever.retrieve(ask, user_id="alice").degraded is None


def test_the_pool_is_reused(memory: LongTermMemory, retriever: Retriever) -> None:
    store_facts(memory)
    before = threading.active_count()
    for _ in range(20):
        retriever.retrieve([user("What's my budget for the trip?")], user_id="alice")
    assert threading.active_count() <= before + 4


def test_retriever_arguments_are_checked(memory: LongTermMemory) -> None:
    for bad in (
        {"k": 0},
        {"threshold": 2.0},
        {"hyde": True},
        {"search_budget_ms": 0},
        {"template": "no field"},
    ):
        with pytest.raises(ValidationError):
            Retriever(memory, **bad)
    with Retriever(memory) as retriever, pytest.raises(ValidationError):
        retriever.retrieve([user("x")], user_id="")


def test_rewriter_in_the_pipeline(memory: LongTermMemory) -> None:
    store_facts(memory)
    model = ScriptedChatModel(["What is the budget for the Hawaii trip?"])
    with Retriever(memory, rewriter=model, search_budget_ms=GENEROUS_MS) as retriever:
        got = retriever.retrieve(
            [user("Hawaii!"), assistant("Lovely."), user("How much?")], user_id="alice"
        )
    assert got.query is not None and got.query.method == "rewrite"
    assert got.results[0].record.text == FACTS[0]


def test_async_retrieve(memory: LongTermMemory) -> None:
    store_facts(memory)

    async def run() -> Any:
        async with AsyncRetriever(Retriever(memory, search_budget_ms=GENEROUS_MS)) as retriever:
            return await retriever.retrieve(
                [user("What's my budget for the trip?")], user_id="alice"
            )

    got = asyncio.run(run())
    assert got.results[0].record.text == FACTS[0]


def test_a_burst_waits_briefly_for_a_thread_and_keeps_its_memory(
    flaky_memory: LongTermMemory, switchable: Switchable
) -> None:
    """Four requests at once on one search thread: each waits its turn (a 40 ms search,
    a queue wait of up to 1 s) and every one gets its memories; its budget counts from
    when its search starts."""
    store_facts(flaky_memory)
    switchable.delay = 0.04
    ask = [user("What's my budget for the trip?")]
    with (
        Retriever(
            flaky_memory, search_budget_ms=GENEROUS_MS, search_queue_ms=1000, search_workers=1
        ) as retriever,
        ThreadPoolExecutor(4) as pool,
    ):
        got = list(pool.map(lambda _: retriever.retrieve(ask, user_id="alice"), range(4)))
    assert [g.degraded for g in got] == [None] * 4
    assert all(g.results for g in got)


def test_past_the_queue_depth_a_request_goes_on_at_once(
    flaky_memory: LongTermMemory, switchable: Switchable, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="chatmem.retrieval")
    store_facts(flaky_memory)
    switchable.delay = 0.3
    ask = [user("What's my budget for the trip?")]
    with (
        Retriever(
            flaky_memory, search_budget_ms=5000, search_queue_ms=5000, search_workers=1
        ) as retriever,
        ThreadPoolExecutor(QUEUE_DEPTH + 1) as pool,
    ):
        waiting = [
            pool.submit(retriever.retrieve, ask, user_id="alice") for _ in range(QUEUE_DEPTH)
        ]
        deadline = time.monotonic() + 5
        while retriever._in_flight < QUEUE_DEPTH:  # every place in the queue taken
            assert time.monotonic() < deadline
            time.sleep(0.005)
        assert retriever.retrieve(ask, user_id="alice").degraded == "busy"
        # refused on the queue's length, not after waiting out search_queue_ms
        assert "searches waiting per thread" in caplog.text
        assert "no search thread free" not in caplog.text
        switchable.delay = 0.0
        assert all(w.result().degraded is None for w in waiting)
