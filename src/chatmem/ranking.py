"""Hybrid ranking as pure functions: how a store's candidates become one ranked list.

The fused score of a candidate is ``vector_weight * v + keyword_weight * k * g`` where

- ``v`` is the cosine similarity of query and memory, clipped to [0, 1]; every candidate has
  one, keyword-only finds included, so a word match on an unrelated memory is not enough;
- ``k`` is the candidate's BM25 score divided by the best BM25 score among the candidates
  (0 for memories the keyword half did not find), and counts as 0 for every candidate when
  that best score is at most ``keyword_floor`` (``Scored`` still reports it);
- ``g = min(1, v / keyword_cosine)``: a memory whose meaning is far from the query's gets
  only part of its word match.

The weights sum to 1, so the score lies in [0, 1]. Defaults (0.6 / 0.4, 50 candidates a half)
were tuned on LoCoMo conversations 0-4 and checked on 5-9 (docs/benchmarks.md): convex fusion
beat reciprocal rank fusion there (0.768 against 0.745 recall@10 on the tuning half).

The last two terms keep the keyword half from outvoting a clear vector match on words that
carry no topic (docs/benchmarks.md, "Never below dense (issue 18)"). A word in more than
half of the indexed memories (a user's name, which every one of their turns starts with)
gets an idf of 1e-6 from SQLite's FTS5, so a keyword half that matched only such words
scores about 1e-6: divided by its own best, it would still give every one of those memories
the full keyword weight, in an order set by text length alone. And a keyword hit whose
cosine is under 0.15 (within MiniLM's cosines for unrelated text) is most often a reply that
matched only through its neighbours' words, or filler that shares one common word with the
query; a real answer phrased differently from the question scores above it.

``Repeats`` spreads a ranking: a memory whose speaker said the same words in one ranked above
it (``RankingConfig.repeats_last``) gives its place to the next, so the same remark said on
three days fills one place of a top k, not three, and leaves the others to the rest of an
answer (docs/benchmarks.md, "Multi-hop without an LLM (2026-11-27)").

``favour_named`` gives ``RankingConfig.speaker_bonus`` to memories said by someone the query
names ("What kind of art does Caroline make?" favours what Caroline said over what was said
to her), among the first of a ranking (docs/benchmarks.md, "Who said it (issue 18)").
``RankingConfig.time_bonus`` likewise favours, for a question that asks about time
(``asks_when``: "When did John organize the tournament?"), the memories that place
something in time (``says_when``: "I held a gaming tourney last night"), over later turns
that only talk about it (docs/benchmarks.md, "When: a memory that says when"); for any other
query, ``RankingConfig.question_penalty`` sets what ends by asking (``ends_asking``: "Pottery
sounds fun! What made you try it?") after what tells (docs/benchmarks.md, "What ends by
asking comes after what tells"). A question about the present (``asks_now``: "Where does
she live now?") orders the k memories a search found by ``RankingConfig.present_bonus``
times how late in their time span each was said (``latest_first``): what she says since
she moved answers it, what she said of her old city does not; which k were found does not
change (docs/benchmarks.md, "Now: the latest of what was found first").
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, TypeVar

from chatmem import checks
from chatmem.errors import ValidationError
from chatmem.records import Candidate
from chatmem.text import STOP_WORDS

T = TypeVar("T")


@dataclass(frozen=True)
class RankingConfig:
    """Weights of the hybrid ranking; see the module docstring for the formula."""

    vector_weight: float = 0.6
    keyword_weight: float = 0.4
    #: How many candidates each half of the search returns before fusion.
    candidates: int = 50
    #: A best BM25 score under this means the keyword half matched only words that most
    #: memories hold: it then counts for nothing (0 keeps every keyword half)...
    keyword_floor: float = 1e-3
    #: ...when it matched at least this many memories. FTS5 gives any word in more than
    #: half of the rows an idf of 1e-6, so for a user with a handful of memories a real
    #: match ("where I live" against "Ana lives in Paris.", the only one) scores under the
    #: floor too; a word that is in most of a few memories still tells them apart.
    keyword_floor_hits: int = 8
    #: Keyword credit is scaled by ``min(1, cosine / keyword_cosine)`` (0: never scaled).
    keyword_cosine: float = 0.15
    #: A memory whose speaker said the same words in one ranked above it comes after the
    #: others (``Repeats``): the same remark on three days takes one place of a top k.
    repeats_last: bool = True
    #: Added to the fused score of a memory said by someone the query names
    #: (``favour_named``), among the first ``SPEAKER_READ`` (at least k) of a search; 0: off.
    speaker_bonus: float = 0.15
    #: The share of the query vector taken from the query without the names of the
    #: speakers it names (``long_term.speakers``); 0: the query as asked.
    name_free_share: float = 0.85
    #: Added to the fused score of a memory that says when something happened
    #: (``says_when``), among the first ``SPEAKER_READ`` (at least k) of a search whose
    #: query asks about time (``asks_when``); 0: off.
    time_bonus: float = 0.05
    #: Taken off the fused score of a memory that ends by asking (``ends_asking``: "Wow!
    #: What made you try pottery?"), among the first ``SPEAKER_READ`` (at least k) of a
    #: search whose query does not ask about time: a turn that hands the conversation over
    #: says less than one that tells; 0: off.
    question_penalty: float = 0.1
    #: Among a search's first ``SPEAKER_READ``, how much a memory's word-piece match with
    #: the query (``long_term.late``) above their mean adds to its fused score; 0: off.
    late_weight: float = 0.2
    #: Added, times its ``lateness`` (0 for the earliest said, 1 for the latest), to the
    #: score of each of the k memories a search finds when its query asks about the
    #: present (``asks_now``), which reorders them and lets none in (``latest_first``);
    #: 0: off. Chosen, not tuned: LoCoMo asks of the present 16 times in 1,535
    #: questions, and its answers are not the latest said.
    present_bonus: float = 0.1
    #: For a query about the present, the latest word on the memory found first goes above
    #: it: what its speaker said later about the same thing (``long_term.latest``); the
    #: old home above the move is what a search finds by the words of "where does she
    #: live now?". False: off.
    latest_word: bool = True

    def __post_init__(self) -> None:
        for name in _FRACTIONS:
            checks.number(getattr(self, name), f"ranking.{name}", low=0, high=1)
        # A count written with a point (50.0, as a config file may give it) is kept as int.
        object.__setattr__(
            self, "candidates", checks.whole(self.candidates, "ranking.candidates", low=1)
        )
        hits = checks.whole(
            self.keyword_floor_hits,
            "ranking.keyword_floor_hits",
            low=0,
            message="must be non-negative",
        )
        object.__setattr__(self, "keyword_floor_hits", hits)
        checks.flag(self.repeats_last, "ranking.repeats_last")
        checks.flag(self.latest_word, "ranking.latest_word")
        checks.number(
            self.keyword_floor,
            "ranking.keyword_floor",
            low=0,
            message="must be a non-negative number",
        )
        if abs(self.vector_weight + self.keyword_weight - 1.0) > 1e-6:
            raise ValidationError("vector_weight + keyword_weight must be 1", field="ranking")


#: The settings of ``RankingConfig`` that are shares or bonuses: a number from 0 to 1.
_FRACTIONS = (
    "vector_weight",
    "keyword_weight",
    "keyword_cosine",
    "speaker_bonus",
    "name_free_share",
    "time_bonus",
    "question_penalty",
    "late_weight",
    "present_bonus",
)


DEFAULT_RANKING = RankingConfig()


class Scored(NamedTuple):
    """A candidate with its fused score and the two normalised parts it came from (the
    keyword part as found, before ``keyword_floor`` and ``keyword_cosine`` weigh it)."""

    id: str
    score: float
    vector_score: float | None
    keyword_score: float | None


def fuse(candidates: list[Candidate], config: RankingConfig = DEFAULT_RANKING) -> list[Scored]:
    """Score every candidate, best first (ties broken by id, so the order is stable)."""
    best = max((c.keyword_score or 0.0 for c in candidates), default=0.0)
    # Only words that most memories hold matched: what the keyword half found is still
    # reported, but it is no evidence.
    hits = sum(1 for c in candidates if c.keyword_score is not None)
    evidence = best > config.keyword_floor or hits < config.keyword_floor_hits
    scored = []
    for candidate in candidates:
        vector = None
        if candidate.vector_score is not None:
            vector = min(max(candidate.vector_score, 0.0), 1.0)
        keyword = None
        if candidate.keyword_score is not None and best > 0:
            keyword = max(candidate.keyword_score, 0.0) / best
        credit = 0.0
        if keyword is not None and evidence:
            credit = keyword * _meaning_share(vector, config.keyword_cosine)
        score = config.vector_weight * (vector or 0.0) + config.keyword_weight * credit
        scored.append(Scored(candidate.id, score, vector, keyword))
    scored.sort(key=lambda s: (-s.score, s.id))
    return scored


def _meaning_share(vector: float | None, cosine: float) -> float:
    """The share of its keyword score a candidate keeps: all of it at a cosine of at least
    ``cosine`` (or when there is no query vector), less the further below it is."""
    if vector is None or cosine <= 0:
        return 1.0
    return min(1.0, vector / cosine)


#: What tells two memories apart as repeats: who said them, and their words.
Said = tuple[str | None, frozenset[str]]


#: A word, as ``chatmem.text.words`` reads them (its possessive rule aside: one
#: ``findall`` costs a third of it, and a search reads a key for each memory it returns).
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


@functools.lru_cache(maxsize=512)
def said(speaker: str | None, text: str) -> Said:
    """The speaker and the set of words (lower-cased, punctuation and order aside) of a
    memory (remembered: the memories a user's searches return come back again and again;
    only those of at most ``REPEAT_CHARS`` are asked for)."""
    return speaker, frozenset(_WORD.findall(text.lower().replace("’", "'")))


#: Only a memory this short can be a repeat: the remarks said again and again in a chat
#: ("Haha, that's awesome!") are short, and reading the words of 50 memories of 1-3K
#: characters took 3.9 ms of a k = 50 search.
REPEAT_CHARS = 500


class Repeats:
    """Tells repeats apart while a ranking is read best first (``RankingConfig.repeats_last``):
    a memory is a repeat when its speaker said the same words in one read before it. A
    memory without words (an emoji), or longer than ``REPEAT_CHARS``, repeats nothing."""

    def __init__(self) -> None:
        self._said: set[Said] = set()

    def heard(self, speaker: str | None, text: str) -> bool:
        """Whether ``speaker`` said ``text`` in one read before; it is remembered if not."""
        if len(text) > REPEAT_CHARS:
            return False
        key = said(speaker, text)
        if not key[1]:
            return False
        if key in self._said:
            return True
        self._said.add(key)
        return False


def repeats_last(
    items: Sequence[T], k: int, said: Callable[[T], tuple[str | None, str]]
) -> list[T]:
    """``items`` (a ranking, best first) with its first ``k`` that repeat none above them
    (``Repeats``; ``said`` gives each one's speaker and text) first, then the repeats passed
    on the way, then the rest as they were: what follows the k-th is not looked at."""
    repeats = Repeats()
    kept: list[T] = []
    aside: list[T] = []
    for n, item in enumerate(items):
        if len(kept) == k:
            return kept + aside + list(items[n:])
        (aside if repeats.heard(*said(item)) else kept).append(item)
    return kept + aside


#: How many of a ranking's first memories ``favour_named`` and the late rerank
#: (``long_term.late``) reorder (k where k is more). 20 before the late rerank, which reads
#: these 50 anyway: over 50, the bonuses lifted both halves of LoCoMo with it
#: (docs/benchmarks.md, "Words matched one by one").
SPEAKER_READ = 50

#: A word as a name is written: letters and digits, inner apostrophes kept.
NAME_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")


def name_words(text: str) -> Iterator[str]:
    """The words of ``text`` as written (``NAME_WORD``), a possessive 's removed, in order."""
    for match in NAME_WORD.finditer(text):
        word = match.group(0)
        yield word[:-2] if word[-2:] in ("'s", "’s") else word


def named(query: str) -> frozenset[str]:
    """The words of ``query`` that may name someone: those of two or more characters that
    start with a capital letter, a possessive 's removed; the first word only when it is no
    stop word ("What", "Did")."""
    found = set()
    for n, word in enumerate(name_words(query)):
        if len(word) > 1 and word[0].isupper() and not (n == 0 and word.lower() in STOP_WORDS):
            found.add(word)
    return frozenset(found)


def said_by(speaker: str | None, names: frozenset[str]) -> bool:
    """Whether one of ``names`` is a word of ``speaker``, case aside ("Mary" and "mary" name
    "Mary Ann Lee")."""
    if not speaker or not names:
        return False
    held = names if isinstance(names, frozenset) else frozenset(names)  # a set can't be a key
    return not _lowered(held).isdisjoint(speaker_words(speaker))


@functools.lru_cache(maxsize=4096)
def speaker_words(speaker: str) -> frozenset[str]:
    """The words of a speaker's name, lower-cased (remembered: a search asks for each of
    its first 50 memories, and a user has few speakers)."""
    return frozenset(w.lower() for w in NAME_WORD.findall(speaker))


@functools.lru_cache(maxsize=256)
def _lowered(names: frozenset[str]) -> frozenset[str]:
    return frozenset(n.lower() for n in names)


def favour_named(
    head: list[Scored], speakers: Mapping[str, str | None], names: frozenset[str], bonus: float
) -> list[Scored]:
    """``head`` reordered with ``bonus`` added to the score of each memory said by someone
    of ``names`` (``speakers``: the speaker of each id); see ``favour``."""
    if not names or bonus <= 0:
        return head
    return favour(head, {s.id: bonus for s in head if said_by(speakers.get(s.id), names)})


def favour(head: list[Scored], extra: Mapping[str, float]) -> list[Scored]:
    """``head`` reordered by each memory's score plus its ``extra`` (by id, negative takes
    off); ties keep ``head``'s order. A score stays within [0, 1] as reported; the order
    follows the sum."""
    if not extra:
        return head
    ordered = []
    for place, s in enumerate(head):
        total = s.score + extra.get(s.id, 0.0)
        clipped = min(max(total, 0.0), 1.0)
        if clipped != s.score:  # built anew only where the score moves (``_replace`` costs 3x)
            s = Scored(s.id, clipped, s.vector_score, s.keyword_score)
        ordered.append((-total, place, s))
    ordered.sort()  # places differ: the memories themselves are never compared
    return [t[2] for t in ordered]


_MONTHS = "january|february|march|april|june|july|august|september|october|november|december"
_SPANS = (
    "monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend|week|month|year|night"
    "|summer|winter|spring|fall|autumn|morning|evening|afternoon"
)
#: A question about time: "when", "what date", "how long", "how many weeks", "which year",
#: a month ("May" only as a month: "in May", "May 2023") or a year, "ago".
ASKS_TIME = re.compile(
    r"\b(?:when|what (?:date|day|time|year|month)|how long"
    r"|how many (?:days|weeks|months|years)|which (?:year|month|day|week)"
    rf"|{_MONTHS}|(?:in|of|since|during|early|late|mid) may|may,? \d|(?:19|20)\d\d|ago)\b",
    re.IGNORECASE,
)
#: What places something in time: "yesterday", "last night", "next Saturday", "two weeks
#: ago", "recently", "in June", "July 20", "on Friday", "2022"; matched in lower case.
SAYS_TIME = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|recently|lately|the other day|ago"
    rf"|(?:last|next|this|that|past|coming) (?:{_SPANS})s?"
    rf"|(?:on|in|since|by|until|during) (?:{_MONTHS}|may)|(?:{_MONTHS}|may),? \d"
    rf"|(?:on|by|until|since) (?:{_SPANS})s?|(?:19|20)\d\d)\b"
)
#: Only a memory's first characters are read for it: what a chat turn says of when is near
#: its start, and matching 50 memories of 1-3K characters whole took 8 ms of a k = 50
#: search (3 ms in lower case without ``re.IGNORECASE``).
TIME_CHARS = 500


def asks_when(query: str) -> bool:
    """Whether ``query`` asks about time (``ASKS_TIME``; English)."""
    return ASKS_TIME.search(query) is not None


#: How many memories' starts ``says_when`` remembers the answer for (at most
#: ``TIME_CHARS`` characters each: about 2.5 MB when all are full).
SAYS_WHEN_KEPT = 4096


def says_when(text: str) -> bool:
    """Whether the first ``TIME_CHARS`` of ``text`` place something in time
    (``SAYS_TIME``; English)."""
    return _start_says_when(text[:TIME_CHARS])


@functools.lru_cache(maxsize=SAYS_WHEN_KEPT)
def _start_says_when(start: str) -> bool:
    """``says_when`` of a text's start, remembered: the match took 22 us a memory of 1-3K
    characters (1.1 ms a k = 50 search that asks when), and a search reads the same heads
    again and again (a head's text, held by the head cache, is one string whose hash Python
    keeps: a lookup is a fraction of a microsecond)."""
    return SAYS_TIME.search(start.lower()) is not None


#: Only a memory's last characters are read by ``ends_asking``: how a text ends is in them,
#: and a memory of 1-3K characters is not read whole for it (as ``TIME_CHARS``, but its end).
END_CHARS = 500
#: A trailing note in brackets ("[shares a photo of a lake]", "[image]") is not what a
#: text ends by saying: ``ends_asking`` reads the words before it.
_TRAILING_NOTE = re.compile(r"\s*\[[^\[\]]*\]\s*$")


def ends_asking(text: str) -> bool:
    """Whether ``text`` ends with a question ("That's great! How long have you had
    them?"), a trailing bracketed note aside; a question inside it does not count. Only
    the last ``END_CHARS`` are read."""
    end = text[-END_CHARS:].rstrip()
    if end.endswith("]"):  # the regular expression only where there is a note to drop
        end = _TRAILING_NOTE.sub("", end).rstrip()
    return end.endswith("?")


#: A question about the present state of things, which a later memory answers over an
#: earlier one: "now", "currently", "these days", "at the moment", "still", "any more",
#: "latest", "newest", "most recently", "lately". Not a bare "recent(ly)": "what did she
#: recently paint?" asks about an event, not a state that changed.
ASKS_NOW = re.compile(
    r"\b(?:now|currently|current|these days|at the moment|at present|presently|nowadays"
    r"|still|any ?more|latest|newest|most recent(?:ly)?|lately)\b",
    re.IGNORECASE,
)


def asks_now(query: str) -> bool:
    """Whether ``query`` asks about the present state of things (``ASKS_NOW``; English)."""
    return ASKS_NOW.search(query) is not None


def lateness(times: Mapping[str, datetime]) -> dict[str, float]:
    """Where in the span of ``times`` each falls, 0 for the earliest to 1 for the latest;
    empty when they are all the same moment."""
    if not times:
        return {}
    seconds = {i: t.timestamp() for i, t in times.items()}
    first, last = min(seconds.values()), max(seconds.values())
    if last <= first:
        return {}
    return {i: (s - first) / (last - first) for i, s in seconds.items()}


def latest_first(
    ranked: list[Scored],
    k: int,
    bonus: float,
    times: Callable[[list[str]], Mapping[str, datetime]],
) -> list[Scored]:
    """``ranked`` with its first ``k`` reordered for a question about the present: each
    gains ``bonus`` times its ``lateness`` among them (``times`` tells when each was
    said). Which memories are the first k does not change, only their order: the
    relevance found them, the time tells which of them answers "now"."""
    head = ranked[:k]
    late = lateness(times([s.id for s in head]))
    if not late:
        return ranked
    return favour(head, {i: bonus * place for i, place in late.items()}) + ranked[k:]


def bonuses(
    said: Mapping[str, tuple[str | None, str]],
    names: frozenset[str],
    asks_time: bool,
    config: RankingConfig = DEFAULT_RANKING,
) -> dict[str, float]:
    """What ``favour`` adds to each memory of ``said`` (its id: its speaker and text):
    ``speaker_bonus`` when someone of ``names`` said it, ``time_bonus`` when the query
    ``asks_time`` and the memory ``says_when``; for a query not about time, less
    ``question_penalty`` when the memory ``ends_asking`` ("Wasn't your recital last
    Friday?" can say when); memories whose score does not move are left out."""
    extra: dict[str, float] = {}
    for memory_id, (speaker, text) in said.items():
        bonus = config.speaker_bonus if said_by(speaker, names) else 0.0
        if asks_time and config.time_bonus > 0 and says_when(text):
            bonus += config.time_bonus
        if not asks_time and config.question_penalty > 0 and ends_asking(text):
            bonus -= config.question_penalty
        if bonus:
            extra[memory_id] = bonus
    return extra


def select(scored: list[Scored], k: int, threshold: float | None = None) -> list[Scored]:
    """The best ``k`` at or above ``threshold``."""
    kept = scored if threshold is None else [s for s in scored if s.score >= threshold]
    return kept[:k]


#: Decay defaults (SPEC L5): a memory nobody uses loses half its freshness in 30 days; a use
#: is remembered with a half-life of 14 days.
DEFAULT_HALF_LIFE_S = 30 * 86_400.0
DEFAULT_ACCESS_HALF_LIFE_S = 14 * 86_400.0
#: An importance of 1 stretches the half-life of age to (1 + IMPORTANCE_STRETCH) times.
IMPORTANCE_STRETCH = 2.0
#: Each use multiplies the score by 1 + ACCESS_BOOST * ln(1 + uses).
ACCESS_BOOST = 0.25


def decay_score(
    age_s: float,
    since_access_s: float | None,
    access_count: int,
    importance: float,
    *,
    half_life_s: float = DEFAULT_HALF_LIFE_S,
    access_half_life_s: float = DEFAULT_ACCESS_HALF_LIFE_S,
) -> float:
    """How worth keeping a memory is, in [0, 1] (1 = fresh, under 0.2 = forgettable).

    ``score = min(1, freshness * (1 + ACCESS_BOOST * ln(1 + access_count)))`` where
    ``freshness = max(0.5 ** (age_s / (half_life_s * (1 + IMPORTANCE_STRETCH * importance))),
    0.5 ** (since_access_s / access_half_life_s))``: age decays exponentially, more slowly the
    more important the memory; a recent use refreshes it (``since_access_s`` None: never
    used); many uses slow the fall. With the defaults an unused memory of importance 0.5 falls
    under 0.2 after about 139 days, one of importance 0.9 after about 195 days.
    """
    for name, half_life in (
        ("half_life_s", half_life_s),
        ("access_half_life_s", access_half_life_s),
    ):
        checks.number(half_life, name, positive=True, message="half-lives must be positive")
    weight = min(max(importance, 0.0), 1.0)
    stretched = half_life_s * (1.0 + IMPORTANCE_STRETCH * weight)
    freshness: float = 0.5 ** (max(age_s, 0.0) / stretched)
    if since_access_s is not None:
        freshness = max(freshness, 0.5 ** (max(since_access_s, 0.0) / access_half_life_s))
    boost = 1.0 + ACCESS_BOOST * math.log1p(max(access_count, 0))
    return min(1.0, max(0.0, freshness * boost))
