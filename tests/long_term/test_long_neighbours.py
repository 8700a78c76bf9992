"""A chat turn's neighbours as its context: the part nearest the turn (issue 18,
docs/benchmarks.md "Long replies").

A neighbour is kept whole up to ``MAX_CONTEXT_CHARS``: the end of a turn before, the start of
a turn after. The keyword half indexes only the ``INDEXED_CONTEXT_CHARS`` of them nearest the
turn, so that a long answer next to small talk does not lend it the words of the whole answer.
"""

from __future__ import annotations

from chatmem import LongTermMemory
from chatmem.long_term import MAX_CONTEXT_CHARS
from chatmem.records import Filter
from chatmem.text import INDEXED_CONTEXT_CHARS, index_fields

#: An assistant's long answer: a word far from its end, filler, and a word at its end.
FAR, NEAR = "zeppelin", "kayak"
FILLER = "Keep a simple routine every day. "


def answer(fillers: int) -> str:
    return f"Try a {FAR} tour first. " + FILLER * fillers + f"And book the {NEAR} early."


#: Longer than a neighbour kept as context; shorter, but longer than what is indexed.
LONG, MIDDLING = answer(90), answer(40)


def _chat(
    memory: LongTermMemory, said_back: str, one_call: bool = False, user: str = "u"
) -> tuple[str, str, str]:
    """A question, the answer ``said_back``, and a short reply; the ids of the three."""
    said = [
        {"role": "user", "content": "Any ideas for the holiday?"},
        {"role": "assistant", "content": said_back},
        {"role": "user", "content": "Sounds good, thanks!"},
    ]
    if one_call:
        added = memory.add(said, user_id=user, session_id="s")
    else:
        added = [memory.add([m], user_id=user, session_id="s")[0] for m in said]
    question, answer, reply = (r.id for r in added)
    return question, answer, reply


def test_a_turn_before_keeps_its_end_and_a_turn_after_its_start(memory: LongTermMemory) -> None:
    for one_call in (True, False):
        user = f"u-{one_call}"
        question, _, reply = _chat(memory, LONG, one_call, user)
        got = {r.id: r for r in memory.store.get([question, reply], Filter(user_id=user))}
        before = got[reply].context.before  # type: ignore[union-attr]
        after = got[question].context.after  # type: ignore[union-attr]
        assert before is not None and after is not None
        assert len(before) == len(after) == MAX_CONTEXT_CHARS, one_call
        assert before.startswith("assistant: …") and before.endswith(f"{NEAR} early."), one_call
        assert after.startswith(f"assistant: Try a {FAR} tour"), one_call


def test_the_index_holds_the_neighbours_nearest_part(memory: LongTermMemory) -> None:
    question, _, reply = _chat(memory, MIDDLING)
    got = {r.id: r for r in memory.store.get([question, reply], Filter(user_id="u"))}
    # Kept whole as context (under MAX_CONTEXT_CHARS), indexed in part.
    assert got[reply].context.before == f"assistant: {MIDDLING}"  # type: ignore[union-attr]
    fields = index_fields(got[reply])
    assert len(fields.before) == INDEXED_CONTEXT_CHARS and NEAR in fields.before
    assert FAR not in fields.before
    fields = index_fields(got[question])
    assert len(fields.after) == INDEXED_CONTEXT_CHARS and FAR in fields.after
    assert NEAR not in fields.after


def test_a_short_reply_is_found_by_the_answers_last_words_not_its_first(
    memory: LongTermMemory,
) -> None:
    question, said, reply = _chat(memory, MIDDLING)
    near = {h.record.id: h for h in memory.search(NEAR, user_id="u", k=3)}
    far = {h.record.id: h for h in memory.search(FAR, user_id="u", k=3)}
    # Both words are the answer's own; the reply holds the one said just before it.
    assert near[said].keyword_score is not None and far[said].keyword_score is not None
    assert near[reply].keyword_score is not None
    assert reply not in far or far[reply].keyword_score is None
    # The question before the answer holds the answer's start, not its end.
    assert far[question].keyword_score is not None
    assert question not in near or near[question].keyword_score is None
