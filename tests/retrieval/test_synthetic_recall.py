"""The synthetic multi-session check of ``benchmarks/synthetic.py`` (issue 18) at CI size.

Conversations written by a seeded script, in which facts are stated, changed and combined
across sessions; no tuning looked at them. chatmem adds each turn on its own (the live path)
and must never find less of the gold evidence in its top 10 than plain BM25 or dense search
in the same run, category by category (any of it, and all of it), nor put an old value
first more often. The full size runs as a benchmark
(docs/benchmarks.md, "Synthetic multi-session check").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from benchmarks import synthetic
from benchmarks._locomo import bm25_tokens, parse_session_date
from benchmarks._synthetic_text import CITIES

SIZE = synthetic.Size(users=6, sessions=8, turns=16, seed=18)


@pytest.fixture(scope="module")
def conversations() -> list[synthetic.Conversation]:
    return synthetic.generate(SIZE)


@pytest.fixture(scope="module")
def results(conversations: list[synthetic.Conversation]) -> dict[str, dict[str, Any]]:
    return synthetic.run_all(conversations, synthetic.SYSTEMS)


def test_the_same_seed_writes_the_same_conversations() -> None:
    first, again = synthetic.generate(SIZE), synthetic.generate(SIZE)
    assert first == again
    assert synthetic.digest(first) == synthetic.digest(again)
    other = synthetic.generate(synthetic.Size(SIZE.users, SIZE.sessions, SIZE.turns, seed=19))
    assert synthetic.digest(other) != synthetic.digest(first)


def test_every_question_names_turns_that_exist(
    conversations: list[synthetic.Conversation],
) -> None:
    for conv in conversations:
        turns = {t.dia_id: t for t in conv.turns}
        assert len(turns) == len(conv.turns) == SIZE.sessions * SIZE.turns
        assert {q.category for q in conv.questions} == set(synthetic.CATEGORIES)
        for q in conv.questions:
            assert q.evidence and q.evidence <= turns.keys(), q
            assert q.stale <= turns.keys() and not q.stale & q.evidence, q
            assert all(turns[e].speaker == conv.name for e in q.evidence | q.stale), q


def test_changes_come_after_what_they_change(
    conversations: list[synthetic.Conversation],
) -> None:
    for conv in conversations:
        session = {t.dia_id: t.session for t in conv.turns}
        for q in conv.questions:
            if q.category == "updated-fact":
                assert min(session[e] for e in q.evidence) > max(session[s] for s in q.stale), q
            if q.category == "multi-hop":
                assert len({session[e] for e in q.evidence}) == 2, q


def test_long_replies_change_only_the_assistant_turns(
    conversations: list[synthetic.Conversation],
) -> None:
    long = synthetic.generate(replace(SIZE, long_replies=(1000, 3000)))
    assert synthetic.digest(long) != synthetic.digest(conversations)
    for short, longer in zip(conversations, long, strict=True):
        assert longer.questions == short.questions
        for was, now in zip(short.turns, longer.turns, strict=True):
            assert now.dia_id == was.dia_id and now.speaker == was.speaker
            if now.speaker == synthetic.ASSISTANT:
                assert 1000 <= len(now.text) <= 3000 and now.text.startswith(was.text)
            else:
                assert now == was
    # The reply right after a fact restates the fact's value (a chat model's echo).
    conv, shorter = long[0], conversations[0]
    where = {t.dia_id: n for n, t in enumerate(conv.turns)}
    move = next(q for q in shorter.questions if q.kind == "city_now")
    (told,) = move.evidence
    reply = conv.turns[where[told] + 1].text
    city = next(c for c in CITIES if c in conv.turns[where[told]].text)
    assert city in reply[len(shorter.turns[where[told] + 1].text) :]
    assert synthetic.generate(replace(SIZE, long_replies=(1000, 3000))) == long


def test_sessions_are_dated_as_locomo_dates_them(
    conversations: list[synthetic.Conversation],
) -> None:
    for conv in conversations:
        dates = [parse_session_date(t.session_date) for t in conv.turns]
        assert None not in dates
        stamps = [t.timestamp_ms for t in conv.turns]
        assert stamps == sorted(stamps)
        month = next(q for q in conv.questions if q.kind == "month")
        months = {
            f"{parse_session_date(t.session_date):%B %Y}"
            for t in conv.turns
            if t.dia_id in month.evidence
        }
        assert len(months) == 1 and months.pop() in month.text


def test_questions_are_not_copies_of_their_evidence(
    conversations: list[synthetic.Conversation],
) -> None:
    """Most of a question's words are not in its evidence (paraphrases, pronouns)."""
    shares = []
    for conv in conversations:
        turns = {t.dia_id: t.text for t in conv.turns}
        for q in conv.questions:
            asked = set(bm25_tokens(q.text)) - set(bm25_tokens(conv.name))
            said = set().union(*(bm25_tokens(turns[e]) for e in q.evidence))
            shares.append(len(asked & said) / len(asked))
    assert sum(shares) / len(shares) < 0.3


def test_a_size_too_small_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert synthetic.main(["--sessions", "3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def _cases() -> list[Any]:
    """Each category against each baseline; a loss measured at this size is kept visible as
    a strict xfail with its figures (the check is held out: it is reported, not tuned on)."""
    # None since the day left the memories' vectors (2026-11-27: multi-hop 0.778 against
    # dense's 0.750, where it was 0.639; docs/benchmarks.md, "The day out of the vector").
    losses: dict[tuple[str, str], str] = {}
    return [
        pytest.param(
            category,
            baseline,
            marks=[pytest.mark.xfail(strict=True, reason=losses[category, baseline])]
            if (category, baseline) in losses
            else [],
        )
        for category in synthetic.CATEGORIES
        for baseline in ("bm25", "dense")
    ]


@pytest.mark.parametrize("key", ["recall@10_by_category", "all@10_by_category"])
@pytest.mark.parametrize(("category", "baseline"), _cases())
def test_chatmem_finds_as_much_as_each_baseline(
    results: dict[str, dict[str, Any]], category: str, baseline: str, key: str
) -> None:
    ours, theirs = results["chatmem"][key][category], results[baseline][key][category]
    assert ours >= theirs, f"{key} {category}: chatmem {ours} < {baseline} {theirs}"


@pytest.mark.parametrize("baseline", ["bm25", "dense"])
def test_chatmem_puts_an_old_value_first_no_more_often_than_each_baseline(
    results: dict[str, dict[str, Any]], baseline: str
) -> None:
    """For "where does she live now?", the old home above the move (or without it) is a
    wrong answer first: chatmem 0.067 at this size, against 0.233 before the latest word
    (``RankingConfig.latest_word``); bm25 0.267 and dense 0.400."""
    ours = results["chatmem"]["stale_first_updated"]
    theirs = results[baseline]["stale_first_updated"]
    assert ours <= theirs, f"stale first: chatmem {ours} > {baseline} {theirs}"
