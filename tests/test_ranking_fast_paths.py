"""The ranking's remembered and rebuilt-less paths (issue 14) rank exactly as the plain
definitions they replace: ``said_by`` from each speaker's words remembered, ``favour``
building a new ``Scored`` only where a score moves, ``said`` remembered, and the known
speakers' words remembered (``Speakers.named``)."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st

from chatmem import ranking
from chatmem.long_term.speakers import Speakers
from chatmem.ranking import NAME_WORD, Scored
from chatmem.records import utcnow
from chatmem.stores.base import Head


def plain_said_by(speaker: str | None, names: frozenset[str]) -> bool:
    if not speaker or not names:
        return False
    lowered = {n.lower() for n in names}
    return any(w.lower() in lowered for w in NAME_WORD.findall(speaker))


def plain_favour(head: list[Scored], extra: Mapping[str, float]) -> list[Scored]:
    if not extra:
        return head
    ordered = []
    for place, s in enumerate(head):
        total = s.score + extra.get(s.id, 0.0)
        ordered.append((-total, place, s._replace(score=min(max(total, 0.0), 1.0))))
    ordered.sort(key=lambda t: (t[0], t[1]))
    return [t[2] for t in ordered]


NAMES = st.sampled_from(["Caroline", "caroline", "Mary", "Ann", "Lee", "O'Neil", "Jo", "Zoë"])
SPEAKERS = st.sampled_from(
    [None, "", "Caroline", "Mary Ann Lee", "mary-ann", "O'Neil", "Zoë Ng", "Joanna", "_"]
)


@given(SPEAKERS, st.frozensets(NAMES, max_size=3))
def test_said_by_answers_as_matching_every_word_every_time(
    speaker: str | None, names: frozenset[str]
) -> None:
    # Asked twice: the second answer comes from what was remembered.
    assert ranking.said_by(speaker, names) == plain_said_by(speaker, names)
    assert ranking.said_by(speaker, names) == plain_said_by(speaker, names)
    assert ranking.said_by(speaker, set(names)) == plain_said_by(speaker, names)  # type: ignore[arg-type]


SCORES = st.floats(min_value=-0.5, max_value=1.5, allow_nan=False)


@given(
    st.lists(SCORES, max_size=12),
    st.dictionaries(st.integers(0, 14), st.floats(-1, 1, allow_nan=False), max_size=6),
)
def test_favour_orders_and_scores_as_rebuilding_every_memory(
    scores: list[float], moves: dict[int, float]
) -> None:
    # Ties in score, scores outside [0, 1] and extras for memories not in the head included.
    head = [Scored(f"m{i}", round(s, 1), 0.5, None) for i, s in enumerate(scores)]
    extra = {f"m{i}": round(v, 1) for i, v in moves.items()}
    assert ranking.favour(head, extra) == plain_favour(head, extra)


@given(
    st.sampled_from([None, "Caroline", "Mel"]), st.sampled_from(["Haha, yes!", "Yes haha", "ok"])
)
def test_said_remembered_gives_the_words_as_read(speaker: str | None, text: str) -> None:
    words = frozenset(ranking._WORD.findall(text.lower().replace("’", "'")))
    assert ranking.said(speaker, text) == (speaker, words)
    assert ranking.said(speaker, text) == (speaker, words)


def _head(speaker: str) -> Head:
    return Head(speaker, "hi", 0.5, utcnow(), None, None, False)


def test_a_speaker_learned_later_counts_at_once() -> None:
    # The known speakers' words are remembered by the set of speakers: a new speaker makes a
    # new set, so it is never answered from what an older set gave.
    speakers = Speakers()
    speakers.heard("t", "u", [_head("Caroline Smith")])
    assert speakers.named("t", "u", "what did melanie and caroline paint?") == ["caroline"]
    speakers.heard("t", "u", [_head("Melanie")])
    assert speakers.named("t", "u", "what did melanie and caroline paint?") == [
        "melanie",
        "caroline",
    ]
    assert speakers.named("t", "other", "what did melanie paint?") == []
