"""Short-term memory: overflow strategies, working state, hand-over (SPEC S4–S6)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from chatmem.errors import LLMUnavailableError, ValidationError
from chatmem.messages import Message, Role, SessionKey
from chatmem.sessions.memory import InMemorySessionStore
from chatmem.short_term import OverflowPolicy, ShortTermMemory, overflow_cut

KEY = SessionKey("t", "ana", "s1")


def turn(i: int, text: str | None = None) -> list[Message]:
    return [
        Message(role=Role.USER, content=text or f"Question {i} about the Lisbon trip?", turn_id=i),
        Message(role=Role.ASSISTANT, content=f"Answer {i}.", turn_id=i),
    ]


class Recorder:
    """A flush target that keeps what it was handed."""

    def __init__(self) -> None:
        self.batches: list[list[Message]] = []

    def __call__(self, key: SessionKey, messages: list[Message]) -> None:
        self.batches.append(messages)


class Scripted:
    """A chat model answering from a list; records every request."""

    def __init__(self, *answers: str | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[Sequence[dict[str, Any]]] = []

    def complete(self, messages: Sequence[dict[str, Any]], *, json: bool = False) -> str:
        self.requests.append(messages)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_trim_keeps_the_newest_turns_and_the_whole_history() -> None:
    stm = ShortTermMemory(policy=OverflowPolicy(max_turns=4, keep_turns=2))
    for i in range(5):
        stm.append(KEY, turn(i))
    window = stm.window(KEY)
    assert [m.turn_id for m in window.messages] == [3, 3, 4, 4]
    assert len(stm.history(KEY)) == 10
    assert window.summary is None


def test_a_cut_never_parts_a_tool_call_from_its_result() -> None:
    call = Message(
        role=Role.ASSISTANT,
        content="",
        tool_calls=[{"id": "c1", "function": {"name": "weather", "arguments": "{}"}}],
    )
    result = Message(role=Role.TOOL, content="sunny", tool_call_id="c1")
    window = [*turn(0), Message(role=Role.USER, content="Weather?"), call, result, *turn(2)]
    cut = overflow_cut(window, OverflowPolicy(max_turns=2, keep_turns=1), lambda m: 1)
    assert window[cut].role is Role.USER
    kept = window[cut:]
    assert (call in kept) == (result in kept)


def test_the_newest_user_message_is_never_cut_even_when_alone_over_budget() -> None:
    stm = ShortTermMemory(policy=OverflowPolicy(max_turns=10, max_tokens=20))
    stm.append(KEY, turn(0))
    stm.append(KEY, [Message(role=Role.USER, content="word " * 200, turn_id=1)])
    window = stm.window(KEY)
    assert window.messages[0].content == "word " * 200
    assert window.start == 2


def test_summarize_without_a_model_folds_earlier_summaries_and_says_how() -> None:
    stm = ShortTermMemory(policy=OverflowPolicy(strategy="summarize", max_turns=2, keep_turns=1))
    stm.append(KEY, turn(0, "My budget for the Lisbon trip is $3,000."))
    stm.append(KEY, turn(1, "I decided to fly on 12 May."))
    stm.append(KEY, turn(2, "Which hotels are near the river?"))
    first = stm.window(KEY).summary
    assert first is not None and first.role is Role.SYSTEM
    assert first.metadata.model_extra == {"summary": True, "covers": 4, "method": "extractive"}
    assert "$3,000" in first.content
    stm.append(KEY, turn(3, "Book the second hotel for 4 nights."))
    stm.append(KEY, turn(4, "And a table for two on Friday."))
    second = stm.window(KEY).summary
    assert second is not None and second.metadata.model_extra is not None
    assert "$3,000" in second.content and "12 May" in second.content
    assert second.metadata.model_extra["covers"] == 8


def test_summarize_with_a_model_sends_the_previous_summary() -> None:
    model = Scripted("The user plans a Lisbon trip with $3,000.", "Also: hotel booked.")
    stm = ShortTermMemory(
        policy=OverflowPolicy(strategy="summarize", max_turns=2, keep_turns=1), summarizer=model
    )
    for i in range(5):
        stm.append(KEY, turn(i))
    summary = stm.window(KEY).summary
    assert summary is not None and summary.content.endswith("Also: hotel booked.")
    assert summary.metadata.model_extra is not None
    assert summary.metadata.model_extra["method"] == "llm"
    assert "The user plans a Lisbon trip" in model.requests[1][1]["content"]


def test_a_failing_model_falls_back_to_an_extractive_summary_and_says_so() -> None:
    model = Scripted(LLMUnavailableError("upstream down"))
    stm = ShortTermMemory(
        policy=OverflowPolicy(strategy="summarize", max_turns=1, keep_turns=1), summarizer=model
    )
    stm.append(KEY, turn(0, "My budget is $3,000 for the trip."))
    stm.append(KEY, turn(1))
    summary = stm.window(KEY).summary
    assert summary is not None and summary.metadata.model_extra is not None
    assert summary.metadata.model_extra["method"] == "extractive"
    assert "upstream down" in summary.metadata.model_extra["fallback_reason"]
    assert "$3,000" in summary.content


def test_flush_hands_each_overflowed_message_over_exactly_once() -> None:
    target = Recorder()
    stm = ShortTermMemory(policy=OverflowPolicy(strategy="flush", max_turns=3), flush=target)
    for i in range(9):
        stm.append(KEY, turn(i))
    flushed = [m.turn_id for batch in target.batches for m in batch]
    window = stm.window(KEY)
    assert flushed == [m.turn_id for m in stm.history(KEY)[: window.start]]
    stm.end(KEY)
    everything = [m.id for batch in target.batches for m in batch]
    assert everything == [m.id for m in stm.history(KEY)]


def test_out_of_order_turns_are_refused_and_leave_the_session_as_it_was() -> None:
    stm = ShortTermMemory()
    stm.append(KEY, turn(5))
    with pytest.raises(ValidationError) as caught:
        stm.append(KEY, [Message(role=Role.USER, content="late", turn_id=7), *turn(6)])
    assert caught.value.field == "messages[1].turn_id"
    assert [m.turn_id for m in stm.history(KEY)] == [5, 5]


def test_the_working_state_follows_every_n_turns() -> None:
    stm = ShortTermMemory(state_every=2)
    stm.append(KEY, turn(0, "Our budget is $3,000."))
    assert stm.window(KEY).working_state is None
    stm.append(KEY, turn(1, "We decided to go with the river hotel. Is breakfast included?"))
    state = stm.window(KEY).working_state
    assert state is not None
    assert state["method"] == "extractive"
    assert any("$3,000" in figure for figure in state["key_figures"])
    assert any("river hotel" in decision for decision in state["decisions"])
    assert state["open_questions"] == ["Is breakfast included?"]


def test_the_working_state_comes_from_the_model_when_one_is_given() -> None:
    answer = '{"topic": "Lisbon trip", "key_figures": ["budget $3,000"], "decisions": [],'
    answer += ' "open_questions": ["hotel?"]}'
    stm = ShortTermMemory(state_every=1, summarizer=Scripted(answer))
    stm.append(KEY, turn(0))
    assert stm.window(KEY).working_state == {
        "topic": "Lisbon trip",
        "key_figures": ["budget $3,000"],
        "decisions": [],
        "open_questions": ["hotel?"],
        "method": "llm",
    }


def test_ending_a_session_hands_over_a_summary_for_the_next_one() -> None:
    target = Recorder()
    store = InMemorySessionStore()
    stm = ShortTermMemory(store=store, flush=target)
    stm.append(KEY, turn(0, "My daughter Maya turns 7 on 3 June."))
    episode = stm.end(KEY)
    assert episode is not None and "Maya" in episode.content
    assert stm.handover("t", "ana") == episode
    assert stm.handover("t", "bob") is None
    assert store.state(KEY).ended_at is not None
    assert sum(len(b) for b in target.batches) == 2
    assert stm.end(KEY) is not None
    assert sum(len(b) for b in target.batches) == 2, "a second end hands nothing over again"


def test_idle_sessions_end_by_themselves() -> None:
    stm = ShortTermMemory()
    stm.append(KEY, turn(0))
    other = SessionKey("t", "ana", "s2")
    stm.append(other, turn(0))
    last = max(m.timestamp for m in stm.history(KEY) + stm.history(other))
    assert stm.end_idle(60_000, now=last + 1_000) == []
    ended = stm.end_idle(60_000, now=last + 3_600_000)
    assert sorted(ended) == sorted([KEY, other])
    assert stm.end_idle(60_000, now=last + 3_600_000) == []


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"strategy": "forget"}, "strategy"),
        ({"max_turns": 0}, "max_turns"),
        ({"max_turns": 4, "keep_turns": 5}, "keep_turns"),
        ({"max_tokens": 0}, "max_tokens"),
    ],
)
def test_a_bad_policy_is_refused(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        OverflowPolicy(**options)
    assert caught.value.field == field
