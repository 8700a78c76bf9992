"""The hybrid ranking's pure functions (``chatmem.ranking.fuse``), and the two terms that keep
the keyword half from outvoting a clear vector match on words that carry no topic (issue 18)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatmem import LongTermMemory, RankingConfig, ValidationError
from chatmem.ranking import DEFAULT_RANKING, fuse
from chatmem.records import Candidate

#: The ranking before issue 18: plain convex fusion, BM25 divided by the best.
PLAIN = RankingConfig(keyword_floor=0.0, keyword_cosine=0.0)


def order(candidates: list[Candidate], config: RankingConfig = DEFAULT_RANKING) -> list[str]:
    return [s.id for s in fuse(candidates, config)]


def test_plain_fusion_is_the_weighted_sum_of_cosine_and_relative_bm25() -> None:
    scored = fuse([Candidate("a", 0.5, 4.0), Candidate("b", 0.25, 8.0)], PLAIN)
    assert [s.id for s in scored] == ["b", "a"]
    assert [s.score for s in scored] == pytest.approx([0.6 * 0.25 + 0.4, 0.6 * 0.5 + 0.4 * 0.5])


def test_a_keyword_half_that_matched_only_words_every_memory_holds_counts_for_nothing() -> None:
    # FTS5 gives a word found in more than half of the memories (the user's name, which
    # starts every turn) an idf of 1e-6: such scores differ by text length alone.
    fillers = [Candidate(f"filler-{n}", 0.40 - n / 100, 1.3e-6 - n * 1e-8) for n in range(9)]
    candidates = [Candidate("answer", 0.62, 0.6e-6), *fillers]
    assert order(candidates, PLAIN)[0] == "filler-0"
    scored = fuse(candidates)
    assert [s.id for s in scored][:3] == ["answer", "filler-0", "filler-1"]
    assert [s.score for s in scored][:3] == pytest.approx([0.6 * 0.62, 0.6 * 0.40, 0.6 * 0.39])
    assert scored[1].keyword_score == 1.0  # what the keyword half found is still reported


def test_a_keyword_match_among_a_few_memories_counts_though_its_idf_is_tiny() -> None:
    """With a handful of memories, any word matched is in more than half of them, so FTS5
    scores it 1e-6 too; a match among fewer than ``keyword_floor_hits`` still counts
    ("What's the weather where I live?" must find "Ana lives in Paris.", her only one)."""
    candidates = [Candidate("lives-in-paris", 0.14, 0.9e-6), Candidate("other", 0.20, None)]
    scored = fuse(candidates)
    assert [s.id for s in scored] == ["lives-in-paris", "other"]
    assert scored[0].score == pytest.approx(0.6 * 0.14 + 0.4 * (0.14 / 0.15))


def test_a_word_match_on_a_memory_far_in_meaning_cannot_outrank_a_clear_vector_match() -> None:
    candidates = [Candidate("answer", 0.60, None), Candidate("reply-next-to-a-match", 0.05, 9.0)]
    assert order(candidates, PLAIN) == ["reply-next-to-a-match", "answer"]
    scored = fuse(candidates)
    assert [s.id for s in scored] == ["answer", "reply-next-to-a-match"]
    assert scored[1].score == pytest.approx(0.6 * 0.05 + 0.4 * (0.05 / 0.15))
    assert scored[1].keyword_score == 1.0  # the normalised part is reported unscaled


def test_a_word_match_on_a_memory_near_the_query_keeps_its_full_weight() -> None:
    candidates = [Candidate("match", 0.3, 9.0), Candidate("vector", 0.7, None)]
    assert fuse(candidates) == fuse(candidates, PLAIN)
    assert order(candidates) == ["match", "vector"]


def test_without_a_query_vector_the_keyword_half_ranks_alone() -> None:
    scored = fuse([Candidate("a", None, 2.0), Candidate("b", None, 6.0)])
    assert [s.id for s in scored] == ["b", "a"]
    assert [s.score for s in scored] == pytest.approx([0.4, 0.4 / 3])


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"keyword_floor": -1.0}, "ranking.keyword_floor"),
        ({"keyword_floor": float("nan")}, "ranking.keyword_floor"),
        ({"keyword_cosine": 1.5}, "ranking.keyword_cosine"),
        ({"keyword_cosine": -0.1}, "ranking.keyword_cosine"),
    ],
)
def test_bad_ranking_settings_are_refused_naming_the_field(
    options: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        RankingConfig(**options)
    assert caught.value.field == field


scores = st.one_of(st.none(), st.floats(-1.0, 2.0, allow_nan=False))
bm25 = st.one_of(st.none(), st.floats(0.0, 50.0, allow_nan=False))


@given(st.lists(st.tuples(scores, bm25), max_size=30))
def test_scores_lie_in_0_1_best_first_and_never_above_plain_fusion(
    parts: list[tuple[float | None, float | None]],
) -> None:
    candidates = [Candidate(f"m{i}", v, k) for i, (v, k) in enumerate(parts)]
    scored = fuse(candidates)
    plain = {s.id: s.score for s in fuse(candidates, PLAIN)}
    assert sorted(s.id for s in scored) == sorted(c.id for c in candidates)
    assert all(0.0 <= s.score <= 1.0 + 1e-9 for s in scored)
    assert all(a.score >= b.score for a, b in zip(scored, scored[1:], strict=False))
    assert all(s.score <= plain[s.id] + 1e-12 for s in scored)


SMALL_TALK = [
    "I could eat Thai food every single day, honestly.",
    "My plants are dying, I think I overwater them.",
    "How do I get coffee stains out of a white shirt?",
    "The traffic this morning was unbelievable.",
    "Went to a farmers' market and bought way too many tomatoes.",
]
ALLERGY = "Ended up with hives after a salad; turns out it had hazelnut in it. Never again."


def test_a_question_whose_only_matching_word_is_the_users_name_finds_the_paraphrased_fact(
    memory: LongTermMemory,
) -> None:
    """Real SQLite store and MiniLM, turns added one at a time as a live chat adds them:
    "Priya" is in every turn, "allergic" in none. Before issue 18 the keyword half's 1e-6
    scores, divided by their best, gave sixty short turns about 0.4 over the allergy turn,
    and it fell out of the top 10."""
    said = SMALL_TALK * 6 + [ALLERGY] + SMALL_TALK * 6
    start = datetime(2024, 5, 1, 9, tzinfo=UTC)
    for minute, text in enumerate(said):
        message = {"role": "user", "name": "Priya", "content": text}
        memory.add(
            [message | {"timestamp": start + timedelta(minutes=minute)}],
            user_id="priya",
            session_id="s1",
        )
    hits = memory.search("What is Priya allergic to?", user_id="priya", k=10)
    assert hits[0].record.content.raw == ALLERGY
    # No keyword credit; the question names Priya, who said it (``speaker_bonus``); with
    # the late rerank off, nothing else is in the score.
    memory.ranking = RankingConfig(late_weight=0)
    hits = memory.search("What is Priya allergic to?", user_id="priya", k=10)
    assert hits[0].record.content.raw == ALLERGY
    bonus = DEFAULT_RANKING.speaker_bonus
    assert hits[0].score == pytest.approx(0.6 * (hits[0].vector_score or 0.0) + bonus)
