"""Consolidation and reflection (SPEC L10): extractive and model paths."""

from __future__ import annotations

import json
from datetime import timedelta

import numpy as np
import pytest

from chatmem import Filter, LongTermMemory, MemoryRecord, MemoryType, RelationType, Source
from chatmem.errors import LLMUnavailableError, ValidationError
from chatmem.long_term.consolidation import (
    MAX_SUMMARY_CHARS,
    PATTERN_KEY,
    SUMMARY_KEY,
    clusters,
    consolidate,
    extractive_summary,
    find_patterns,
    reflect,
)
from chatmem.records import utcnow
from chatmem.testing import ScriptedChatModel

HIKING = [
    "User loves hiking in the Alps",
    "User went hiking in the Swiss Alps last summer",
    "User wants to hike in the Alps again next year",
    "User enjoys mountain hiking in the Alps",
]
HAWAII = [
    "User's budget for the Hawaii trip is $10,000",
    "User is flying to Hawaii in March",
    "User booked a hotel in Honolulu",
]


def record(text: str, **fields: object) -> MemoryRecord:
    return MemoryRecord.model_validate({"user_id": "anna", "content": {"raw": text}, **fields})


def store(memory: LongTermMemory, *texts: str, **fields: object) -> list[MemoryRecord]:
    return memory.add_records([record(t, **fields) for t in texts])


def current(memory: LongTermMemory) -> list[MemoryRecord]:
    return memory.list(Filter(user_id="anna", valid_at=utcnow()), limit=1000).records


# -- pure parts ------------------------------------------------------------------------------


def test_clusters_group_rows_around_a_leader_most_central_first() -> None:
    vectors = np.array(
        [[1, 0, 0], [0.9, 0.1, 0], [0.95, 0.05, 0], [0, 1, 0], [0, 0.9, 0.1], [0, 0, 1]],
        dtype=np.float32,
    )
    assert clusters(vectors, 0.9, 2) == [[2, 0, 1], [3, 4]]
    assert clusters(vectors, 0.9, 3) == [[2, 0, 1]]
    assert clusters(vectors, 0.9, 4) == []
    assert clusters(np.zeros((0, 3), dtype=np.float32), 0.9, 2) == []


def test_an_extractive_summary_joins_distinct_texts_within_a_limit() -> None:
    assert extractive_summary(["User likes tea.", "user likes tea", "User likes cake"]) == (
        "User likes tea; User likes cake"
    )
    long = extractive_summary([f"User fact {i} " + "x" * 300 for i in range(20)])
    assert len(long) <= MAX_SUMMARY_CHARS and long.startswith("User fact 0")


def test_patterns_come_from_subjects_tags_and_words() -> None:
    records = [
        record("User flew to Hawaii", metadata={"tags": ["travel", "fact"]}),
        record("User loves Hawaii beaches", metadata={"tags": ["travel"]}),
        record("User's Hawaii budget is $10,000", metadata={"tags": ["travel", "fact"]}),
        record("User likes tea", metadata={"tags": ["fact"]}, user_metadata={"subject": "tea"}),
        record("User likes tea a lot", user_metadata={"subject": "tea"}),
    ]
    patterns = find_patterns(records, min_evidence=3)
    # "word:hawaii" has the same evidence as "tag:travel" and "fact" is too generic.
    assert [(p.key, len(p.evidence)) for p in patterns] == [("tag:travel", 3)]
    two = find_patterns(records, min_evidence=2)
    assert [p.key for p in two][:2] == ["subject:tea", "tag:travel"]
    assert "word:likes" not in {p.key for p in two}


# -- consolidation ---------------------------------------------------------------------------


def test_a_cluster_becomes_one_summary_linked_to_its_sources(memory: LongTermMemory) -> None:
    hiking = store(memory, *HIKING, provenance=["m1"])
    hiking[1:2] = [memory.update(hiking[1].id, importance=0.9, user_id="anna")]
    others = store(memory, *HAWAII, "User likes green tea")
    before = utcnow()
    [summary] = consolidate(memory, "anna", now=utcnow() + timedelta(milliseconds=5))

    assert summary.type is MemoryType.SEMANTIC
    assert summary.metadata.source is Source.SYSTEM_GENERATED
    assert summary.metadata.importance == 0.9
    assert summary.user_metadata == {SUMMARY_KEY: 4, "method": "extractive"}
    assert summary.provenance == ["m1"]
    assert all(text in summary.content.raw for text in HIKING)
    assert {(r.type, r.target_id) for r in summary.relations} == {
        (RelationType.RELATED_TO, h.id) for h in hiking
    }
    for source in hiking:
        stored = memory.get(source.id, user_id="anna")
        assert (RelationType.PART_OF, summary.id) in {
            (r.type, r.target_id) for r in stored.relations
        }
        assert stored.time.valid_to is not None
        assert "consolidated into" in (memory.history(source.id, user_id="anna")[-1].reason or "")
    later = {
        r.id
        for r in memory.list(
            Filter(user_id="anna", valid_at=utcnow() + timedelta(seconds=1))
        ).records
    }
    assert later == {summary.id, *(o.id for o in others)}
    then = {r.id for r in memory.list(Filter(user_id="anna", valid_at=before)).records}
    assert {h.id for h in hiking} <= then and summary.id not in then
    # The summary is found by search like any memory.
    found = memory.search(
        "hiking in the Alps",
        user_id="anna",
        filter=Filter(valid_at=utcnow() + timedelta(seconds=1)),
    )
    assert found[0].record.id == summary.id


def test_consolidation_keeps_types_apart_and_can_keep_sources(memory: LongTermMemory) -> None:
    store(memory, *HIKING[:2])
    store(memory, HIKING[2], type=MemoryType.EPISODIC)
    assert consolidate(memory, "anna") == []  # only two of the same type
    store(memory, *HAWAII)
    [summary] = consolidate(memory, "anna", similarity=0.5, close_sources=False)
    assert summary.content.raw.count("Hawaii") >= 2
    assert len(current(memory)) == 3 + 3 + 1
    with pytest.raises(ValidationError):
        consolidate(memory, "anna", min_cluster=1)


def test_consolidation_does_not_merge_again(memory: LongTermMemory) -> None:
    store(memory, *HIKING)
    assert len(consolidate(memory, "anna")) == 1
    assert consolidate(memory, "anna", now=utcnow() + timedelta(seconds=1)) == []


def test_a_model_writes_the_summary_in_one_call_per_cluster(memory: LongTermMemory) -> None:
    store(memory, *HIKING, metadata={"tags": ["hiking"]})
    answer = {"text": "User is an avid Alpine hiker who plans to return", "tags": ["Alps"]}
    model = ScriptedChatModel([json.dumps(answer)])
    [summary] = consolidate(memory, "anna", model=model)
    assert summary.content.raw == answer["text"]
    assert summary.metadata.tags == ["hiking", "alps"]
    assert summary.user_metadata["method"] == "llm"
    assert len(model.calls) == 1
    assert all(text in model.calls[0].messages[1]["content"] for text in HIKING)


@pytest.mark.parametrize("reply", [LLMUnavailableError("down"), json.dumps({"tags": ["x"]})])
def test_without_a_usable_answer_the_summary_is_extractive(
    memory: LongTermMemory, reply: str | BaseException
) -> None:
    store(memory, *HIKING)
    [summary] = consolidate(memory, "anna", model=ScriptedChatModel([reply]))
    assert all(text in summary.content.raw for text in HIKING)


# -- reflection ------------------------------------------------------------------------------


def test_a_recurring_theme_becomes_a_reflective_memory(memory: LongTermMemory) -> None:
    travel = store(memory, *HAWAII, metadata={"tags": ["travel"]})
    store(memory, "User likes green tea")
    [insight] = reflect(memory, "anna")
    assert insight.type is MemoryType.REFLECTIVE
    assert insight.user_metadata == {PATTERN_KEY: "tag:travel", "method": "extractive"}
    assert insight.content.raw.startswith("Recurring theme in the user's memories: travel (3")
    assert {(r.type, r.target_id) for r in insight.relations} == {
        (RelationType.RELATED_TO, t.id) for t in travel
    }
    assert memory.get(insight.id, user_id="anna").type is MemoryType.REFLECTIVE
    # Nothing new: nothing written. New evidence: the insight is updated, not duplicated.
    assert reflect(memory, "anna") == []
    more = store(memory, "User is planning a trip to Japan", metadata={"tags": ["travel"]})
    [updated] = reflect(memory, "anna")
    assert updated.id == insight.id and updated.metadata.version == 2
    assert more[0].id in {r.target_id for r in updated.relations}
    reflective = [r for r in current(memory) if r.type is MemoryType.REFLECTIVE]
    assert len(reflective) == 1


def test_a_model_words_every_insight_in_one_call(memory: LongTermMemory) -> None:
    store(memory, *HAWAII, metadata={"tags": ["travel"]})
    store(memory, *HIKING[:3], metadata={"tags": ["outdoors"]})
    answer = {"insights": [{"pattern": "tag:travel", "text": "User travels often: suggest deals"}]}
    model = ScriptedChatModel([json.dumps(answer)])
    insights = reflect(memory, "anna", model=model)
    assert len(model.calls) == 1
    texts = {i.user_metadata[PATTERN_KEY]: i.content.raw for i in insights}
    assert texts["tag:travel"] == "User travels often: suggest deals"
    assert texts["tag:outdoors"].startswith("Recurring theme")  # not answered: extractive
    with pytest.raises(ValidationError):
        reflect(memory, "anna", min_evidence=1)


# -- access control (SPEC L7) ----------------------------------------------------------------


def test_consolidation_never_merges_memories_open_to_different_readers(
    memory: LongTermMemory,
) -> None:
    store(memory, *HIKING[:2])
    store(memory, *HIKING[2:], access_control={"allowed_roles": ["hr"]})
    summaries = consolidate(memory, "anna", min_cluster=2)
    assert len(summaries) == 2
    by_roles = {tuple(s.access_control.allowed_roles): s for s in summaries}
    assert set(by_roles) == {(), ("hr",)}
    open_summary = by_roles[()].content.raw
    assert all(text not in open_summary for text in HIKING[2:])
    assert all(text in by_roles[("hr",)].content.raw for text in HIKING[2:])
    # A reader without the role finds no trace of the restricted memories.
    readable = memory.list(Filter(user_id="anna", reader_roles=frozenset()), limit=100).records
    assert not any(text in r.content.raw for r in readable for text in HIKING[2:])


def test_reflection_keeps_each_insight_to_the_readers_of_its_evidence(
    memory: LongTermMemory,
) -> None:
    store(memory, *HIKING[:3], metadata={"tags": ["hiking"]})
    store(memory, *HIKING, access_control={"allowed_roles": ["hr"]}, metadata={"tags": ["hiking"]})
    insights = reflect(memory, "anna", min_evidence=3)
    assert insights
    for insight in insights:
        evidence = memory.store.get(
            [r.target_id for r in insight.relations], Filter(tenant_id="default")
        )
        roles = {tuple(r.access_control.allowed_roles) for r in evidence}
        assert roles == {tuple(insight.access_control.allowed_roles)}
