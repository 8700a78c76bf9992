"""Packing within a token limit: never over, priorities honoured, nothing silently lost."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from chatmem.formats import render_message
from chatmem.memory.context import BlockItems, Packer, memory_text
from chatmem.messages import Message, Role
from chatmem.tokens import TRUNCATION_MARKER, default_counter, request_tokens

COUNTER = default_counter()

VOCABULARY = ["the", "trip", "budget", "Lisbon", "hotel", "3,000", "Maya", "June", "river"]
words = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=60).map(" ".join)


@st.composite
def sessions(draw: st.DrawFn) -> list[Message]:
    roles = draw(st.lists(st.sampled_from([Role.USER, Role.ASSISTANT]), min_size=1, max_size=30))
    messages = [Message(role=role, content=draw(words)) for role in roles]
    if not any(m.role is Role.USER for m in messages):
        messages.append(Message(role=Role.USER, content=draw(words)))
    return messages


blocks = st.lists(
    st.builds(
        BlockItems,
        name=st.sampled_from(["static", "facts", "retrieved", "notes"]),
        priority=st.integers(min_value=0, max_value=3),
        items=st.lists(words, max_size=8),
    ),
    max_size=4,
    unique_by=lambda b: b.name,
)


def packer(limit: int, ratio: float, insert: Any = "system") -> Packer:
    return Packer(COUNTER, limit, ratio, lambda m: render_message(m), insert)


@settings(max_examples=150, deadline=None)
@given(
    window=sessions(),
    offered=blocks,
    limit=st.integers(min_value=64, max_value=1500),
    ratio=st.floats(min_value=0.1, max_value=1.0),
    insert=st.sampled_from(["system", "user"]),
)
def test_the_context_never_exceeds_the_limit_and_cuts_higher_numbers_first(
    window: list[Message], offered: list[BlockItems], limit: int, ratio: float, insert: Any
) -> None:
    p = packer(limit, ratio, insert)
    copies = [BlockItems(b.name, b.priority, list(b.items)) for b in offered]
    plan = p.pack(window, [], [], copies)
    out = p.fit(plan)
    assert request_tokens(COUNTER, out) <= limit
    kept = {b.name: len(b.items) for b in plan.blocks}
    for block in offered:
        if block.priority > 0 and kept.get(block.name, 0) < len(block.items):
            higher = [b for b in offered if b.priority > block.priority]
            assert all(kept.get(b.name, 0) == 0 for b in higher), (block, kept)
    newest_user = next(m for m in reversed(window) if m.role is Role.USER)
    said = [m["content"] for m in out if m["role"] == "user"]
    assert any(
        newest_user.content in text
        or text.endswith(TRUNCATION_MARKER)
        and newest_user.content.startswith(text.removesuffix(TRUNCATION_MARKER)[:20])
        for text in said
    ), "the newest user message is in, whole or visibly truncated"


@settings(max_examples=60, deadline=None)
@given(window=sessions(), offered=blocks)
def test_priority_zero_is_whole_whenever_it_fits(
    window: list[Message], offered: list[BlockItems]
) -> None:
    p = packer(4000, 0.5)
    plan = p.pack(window, [], [], [BlockItems(b.name, b.priority, list(b.items)) for b in offered])
    out = p.fit(plan)
    text = "\n".join(m["content"] for m in out if m["role"] == "system")
    for block in offered:
        if block.priority == 0:
            assert all(item in text for item in block.items)


def test_a_message_larger_than_the_whole_budget_is_truncated_visibly() -> None:
    huge = Message(role=Role.USER, content="budget " * 3000)
    p = packer(200, 0.7)
    out = p.fit(p.pack([huge], [], [], []))
    assert request_tokens(COUNTER, out) <= 200
    assert out[-1]["role"] == "user" and out[-1]["content"].endswith(TRUNCATION_MARKER)


def test_older_turns_stay_within_the_short_term_share() -> None:
    turns = []
    for i in range(40):
        turns += [Message(role=Role.USER, content=f"question {i} " * 5),
                  Message(role=Role.ASSISTANT, content=f"answer {i} " * 5)]  # fmt: skip
    p = packer(1000, 0.3)
    out = p.fit(p.pack(turns, [], [], []))
    spent = request_tokens(COUNTER, out)
    assert spent <= 0.3 * 1000 + 10
    assert out[-1]["content"] == turns[-1].content
    assert out[-2]["content"] == turns[-2].content, "a turn is kept whole"


def test_memory_goes_into_the_newest_user_message_with_insert_method_user() -> None:
    window = [Message(role=Role.USER, content="hi"), Message(role=Role.ASSISTANT, content="yo"),
              Message(role=Role.USER, content="what do I like?")]  # fmt: skip
    p = packer(1000, 0.7, "user")
    out = p.fit(p.pack(window, [], [], [BlockItems("facts", 1, ["User likes figs."])]))
    assert out[-1]["content"] == (
        memory_text([BlockItems("facts", 1, ["User likes figs."])]) + "\n\nwhat do I like?"
    )
    assert all(m["role"] != "system" for m in out)
