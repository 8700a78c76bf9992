"""A question about the present favours the latest of what answers it
(``RankingConfig.present_bonus``, issue 18): "What food does Ana like these days?" is
answered by what she said since her taste changed, not by what she said a year ago. A
question that does not ask about the present is ranked as before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from chatmem import LongTermMemory, RankingConfig, ValidationError
from chatmem.embeddings import LocalEmbedder
from chatmem.ranking import Scored, asks_now, lateness, latest_first
from chatmem.stores.sqlite import SQLiteStore


@pytest.mark.parametrize(
    ("query", "asks"),
    [
        ("Where does Ana live now?", True),
        ("What is her current job?", True),
        ("Which city is she living in these days?", True),
        ("Who is Ana dating at the moment?", True),
        ("Does she still play the cello?", True),
        ("Doesn't he eat meat any more?", True),
        ("What is the name of her newest pet?", True),
        ("Which animal did he most recently adopt?", True),
        ("What has she been reading lately?", True),
        ("NOW, where does she work?", True),
        # An event, not a state that changed; and words that only hold the letters.
        ("What did Melanie paint recently?", False),
        ("What does Ana know about snow?", False),
        ("Where did Ana live in 2019?", False),
        ("", False),
    ],
)
def test_the_questions_that_ask_about_the_present(query: str, asks: bool) -> None:
    assert asks_now(query) is asks


def test_lateness_runs_from_the_earliest_to_the_latest() -> None:
    t = datetime(2024, 1, 1, tzinfo=UTC)
    times = {"a": t, "b": t + timedelta(days=30), "c": t + timedelta(days=120)}
    assert lateness(times) == pytest.approx({"a": 0.0, "b": 0.25, "c": 1.0})
    assert lateness({"a": t, "b": t}) == {}  # one moment: nothing is later
    assert lateness({}) == {}


def _scored(*pairs: tuple[str, float]) -> list[Scored]:
    return [Scored(i, score, score, None) for i, score in pairs]


def test_the_first_k_are_reordered_by_their_lateness_and_none_let_in() -> None:
    t = datetime(2024, 1, 1, tzinfo=UTC)
    said = {"a": t, "b": t + timedelta(days=5), "c": t + timedelta(days=10), "d": t}
    ranked = _scored(("a", 0.80), ("b", 0.76), ("c", 0.72), ("d", 0.71))
    asked: list[list[str]] = []

    def times(ids: list[str]) -> dict[str, datetime]:
        asked.append(ids)
        return {i: said[i] for i in ids}

    got = latest_first(ranked, 3, 0.1, times)
    assert asked == [["a", "b", "c"]]  # only the first k are read
    # c: 0.72 + 0.1, b: 0.76 + 0.05, a: 0.80 + 0; d, past k, stays last at its score.
    assert [(s.id, round(s.score, 6)) for s in got] == [
        ("c", 0.82),
        ("b", 0.81),
        ("a", 0.8),
        ("d", 0.71),
    ]
    # All said at one moment, nothing is later: the ranking is given back as it was.
    assert latest_first(ranked, 3, 0.1, lambda ids: dict.fromkeys(ids, t)) == ranked
    assert latest_first([], 3, 0.1, times) == []


def test_a_present_bonus_outside_0_1_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError) as raised:
        RankingConfig(present_bonus=1.5)
    assert raised.value.field == "ranking.present_bonus"


# -- through LongTermMemory, on a real SQLite store with MiniLM --------------------------------

START = datetime(2024, 1, 5, 18, tzinfo=UTC)
#: (day, speaker, text): Ana's taste in food changes between the first and the fourth day.
CHAT = [
    (0, "Ana", "My favourite cuisine is Mexican."),
    (0, "Ben", "Same here, tacos are the best."),
    (20, "Ana", "My sister called from Berlin, she says hello."),
    (45, "Ana", "My favourite cuisine is Thai."),
    (45, "Ben", "Pad thai every night, then!"),
    (60, "Ana", "I finally fixed the leaking tap in the kitchen."),
]
OLD, NEW = CHAT[0][2], CHAT[3][2]


@pytest.fixture
def chat(tmp_path: Path, embedder: LocalEmbedder) -> Path:
    path = tmp_path / "chat.db"
    with LongTermMemory(SQLiteStore(path), embedder) as memory:
        for place, (day, speaker, text) in enumerate(CHAT):
            when = START + timedelta(days=day, minutes=place)
            message = {"role": "user", "name": speaker, "content": text, "timestamp": when}
            memory.add([message], user_id="u", session_id=f"day-{day}")
    return path


def _found(path: Path, embedder: LocalEmbedder, bonus: float, asked: str) -> dict[str, float]:
    ranking = RankingConfig(present_bonus=bonus, late_weight=0.0)  # without the late rerank
    with LongTermMemory(SQLiteStore(path), embedder, ranking_config=ranking) as memory:
        hits = memory.search(asked, user_id="u", k=len(CHAT), threshold=0.0)
        return {h.record.text: h.score for h in hits}


def test_the_latest_of_what_answers_comes_first(chat: Path, embedder: LocalEmbedder) -> None:
    asked = "What food does Ana like these days?"
    without = _found(chat, embedder, 0.0, asked)
    bonus = RankingConfig().present_bonus
    with_bonus = _found(chat, embedder, bonus, asked)
    texts = list(without)
    assert texts.index(OLD) < texts.index(NEW)  # without it, what she said first wins
    texts = list(with_bonus)
    assert texts.index(NEW) < texts.index(OLD)

    assert set(with_bonus) == set(without)  # the same found, in another order

    # Each memory gained the bonus times how late in the span of them all it was said.
    def seconds(place: int) -> int:
        return CHAT[place][0] * 86_400 + place * 60

    for place, (_, _, text) in enumerate(CHAT):
        late = seconds(place) / seconds(len(CHAT) - 1)
        assert with_bonus[text] == pytest.approx(min(without[text] + bonus * late, 1.0), abs=1e-6)


def test_a_question_not_about_the_present_is_ranked_as_without_it(
    chat: Path, embedder: LocalEmbedder
) -> None:
    asked = "What food does Ana like?"
    assert not asks_now(asked)
    with_bonus = _found(chat, embedder, RankingConfig().present_bonus, asked)
    assert list(with_bonus.items()) == list(_found(chat, embedder, 0.0, asked).items())


def test_the_reorder_lets_in_nothing_the_threshold_kept_out(
    chat: Path, embedder: LocalEmbedder
) -> None:
    asked = "What food does Ana like these days?"
    latest = CHAT[-1][2]  # said last, of nothing she was asked about: the most to gain
    without = _found(chat, embedder, 0.0, asked)
    threshold = without[latest] + RankingConfig().present_bonus / 2
    ranking = RankingConfig(late_weight=0.0)
    with LongTermMemory(SQLiteStore(chat), embedder, ranking_config=ranking) as memory:
        hits = memory.search(asked, user_id="u", k=len(CHAT), threshold=threshold)
    assert hits and latest not in {h.record.text for h in hits}
    assert {h.record.text for h in hits} == {t for t, s in without.items() if s >= threshold}
