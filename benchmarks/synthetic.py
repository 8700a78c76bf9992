"""Synthetic multi-session recall check (issue 18): long conversations written by a seeded
script, in which facts are stated, changed and combined across sessions, and questions that
carry their gold evidence turns. No tuning ever looked at them: a held-out check beside LoCoMo.

Each user has ``--sessions`` dated sessions of ``--turns`` turns (the user and an assistant in
turn): small talk, remarks about other people's moves, jobs and pets, and the user's own facts.
Some facts are stated once (an instrument, an allergy, a sport, a sibling's name); others
change (a move to a new city, a new job there, a break-up and a new partner, a new pet, a new
favourite food). Questions, worded by templates with the seeded RNG (paraphrases, pronouns):

- single-fact: a fact stated once; gold is its turn;
- updated-fact: the current value; gold is the latest turn only, the older value's turn is
  ``stale`` and never gold ("stale first" reports how often a stale turn ranks above it;
  "stale alone", the part of those with no gold turn in the top 10 at all);
- multi-hop: two turns from different sessions (the move and the new job "here"; the new
  partner and, later, what that partner does; the sibling and, later, where the sibling went);
- temporal: the city before the move, when the move happened, the job before it, and what
  happened in a given month (only the session dates say which turns those are).

chatmem adds each turn in its own ``LongTermMemory.add`` call (the live path of
``locomo_retrieval.py --ingest live``, its ``ChatmemSystem``); BM25 and dense MiniLM are that
benchmark's baselines, indexing "Speaker: text", all in the same run. Scores: recall@10 and
all@10 (every gold turn in the top 10), by category; and the same within chatmem's injection
of 1,000 cl100k tokens (``--budget-tokens``; see ``_injection``).

    python benchmarks/synthetic.py --json docs/results/synthetic-<date>.json   # full size
    python benchmarks/synthetic.py --users 6 --sessions 8 --turns 16            # the CI size
    python benchmarks/synthetic.py --long-replies 1000-3000                     # long replies

``--long-replies`` keeps every fact, turn id and question and makes each of the assistant's
replies that many characters long, as a chat model answers: the short reply, what the user
just told restated (``RESTATE``), then advice on anything (``ADVICE``). A long reply is never
gold; it shares the words of the facts next to it and of questions it has nothing to do with.

The words (value pools, how each fact is said, replies, small talk, question wordings) are in
``_synthetic_text.py``. BM25 is rank_bm25's BM25Okapi when it is installed, else ``Okapi``
below (the same formula), so the check runs in the dev venv.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _injection  # noqa: E402
import locomo_retrieval as lr  # noqa: E402
from _locomo import Turn, percentile_ms  # noqa: E402
from _synthetic_text import (  # noqa: E402
    ADVICE,
    ALLERGENS,
    ASK,
    BRANDS,
    CITIES,
    CUISINES,
    EVENTS,
    GENERIC_REPLY,
    GOLD,
    INSTRUMENTS,
    JOBS,
    NAMES,
    OTHERS,
    OTHERS_SAY,
    PETS,
    REPLY,
    RESTATE,
    SAY,
    SIBLINGS,
    SMALL_TALK,
    SPECIES,
    SPORTS,
)

CATEGORIES = ("single-fact", "updated-fact", "multi-hop", "temporal")
SYSTEMS = ("chatmem", "bm25", "dense")
K = 10
ASSISTANT = "Assistant"


# --- the generator -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    """A question about one user; ``evidence`` are the gold turn ids, ``stale`` the turns of a
    value that has since changed (never gold)."""

    text: str
    category: str
    kind: str
    evidence: frozenset[str]
    stale: frozenset[str] = frozenset()


@dataclass
class Conversation:
    user_id: str
    name: str
    turns: list[Turn]
    questions: list[Question]


@dataclass(frozen=True)
class Size:
    users: int = 12
    sessions: int = 30
    turns: int = 32  # per session, the user's and the assistant's together
    seed: int = 18
    #: The assistant's replies made this many characters long, at least and at most (None:
    #: the short replies); the rest of the conversation is the same either way.
    long_replies: tuple[int, int] | None = None

    def check(self) -> None:
        """Raise ValueError when the size cannot hold every fact in order."""
        if self.users < 1 or self.sessions < 6 or self.turns < 8:
            raise ValueError("need --users >= 1, --sessions >= 6 and --turns >= 8")
        if self.long_replies is not None and not 0 < self.long_replies[0] <= self.long_replies[1]:
            raise ValueError("--long-replies takes LOW-HIGH, 0 < LOW <= HIGH")


def generate(size: Size) -> list[Conversation]:
    """``size.users`` conversations, the same for the same size and seed."""
    size.check()
    return [_conversation(size, index) for index in range(size.users)]


def _conversation(size: Size, index: int) -> Conversation:
    rng = random.Random(f"chatmem-synthetic:{size.seed}:{index}")
    persona = _persona(rng, index)
    at = _schedule(rng, size.sessions, capacity=(size.turns + 1) // 2)
    dates = _dates(rng, size.sessions)
    turns: list[Turn] = []
    where: dict[str, str] = {}
    for number, when in enumerate(dates, start=1):
        here = sorted(kind for kind, session in at.items() if session == number - 1)
        made, placed = _session(rng, persona, number, when, here, size.turns)
        turns += made
        where.update(placed)
    month_of = {kind: dates[session].strftime("%B %Y") for kind, session in at.items()}
    questions = _questions(rng, persona, where, month_of)
    if size.long_replies is not None:
        turns = _lengthened(size, index, persona, turns, where, size.long_replies)
    return Conversation(f"synthetic-{index}", persona.slots["name"]["name"], turns, questions)


@dataclass(frozen=True)
class Persona:
    """Each fact kind's slot values ("name" holds the questions'), and the values the user
    has, which other people's remarks never use."""

    slots: dict[str, dict[str, str]]
    used: frozenset[str]


def _persona(rng: random.Random, index: int) -> Persona:
    name, pro = NAMES[index % len(NAMES)]
    city1, city2, sib_city = rng.sample(CITIES, 3)
    (role1, kind1), (role2, kind2), (partner_role, _) = rng.sample(JOBS, 3)
    brand1, brand2 = rng.sample(BRANDS, 2)
    partner1, partner2, sibling = rng.sample(OTHERS, 3)
    pp1, pp2 = rng.choice(("he", "she")), rng.choice(("he", "she"))
    (species1, species2), (pet1, pet2) = rng.sample(SPECIES, 2), rng.sample(PETS, 2)
    cuisine1, cuisine2 = rng.sample(CUISINES, 2)
    sibling_rel, sp = rng.choice(SIBLINGS)
    instrument = rng.choice(INSTRUMENTS)
    used = {city1, city2, sib_city, role1, role2, partner_role, partner1, partner2, sibling}
    used |= {pet1, pet2, cuisine1, cuisine2, instrument}
    slots = {
        "name": {"name": name, "pro": pro, "pos": _possessive(pro), "sibling_rel": sibling_rel},
        "home": {"city": city1},
        "move": {"city": city2},
        "job1": {"a_role": _a(role1), "employer": f"{brand1} {kind1}"},
        "job2": {"a_role": _a(role2), "employer": f"{brand2} {kind2}"},
        "partner1": {"partner": partner1, "pp": pp1, "partner_word": _partner_word(pp1)},
        "breakup": {"old_partner": partner1},
        "partner2": {"partner": partner2},
        "partner_job": {
            "partner": partner2,
            "pp": pp2,
            "ppos": _possessive(pp2),
            "a_partner_role": _a(partner_role),
        },
        "pet1": {"species": species1, "pet": pet1},
        "pet2": {"species": species2, "pet": pet2},
        "cuisine1": {"cuisine": cuisine1},
        "cuisine2": {"cuisine": cuisine2, "old_cuisine": cuisine1},
        "sibling": {"sibling_rel": sibling_rel, "sibling": sibling},
        "sib_city": {"sibling": sibling, "spos": _possessive(sp), "sib_city": sib_city},
        "instrument": {"instrument": instrument},
        "allergy": {"allergen": rng.choice(ALLERGENS)},
        "sport": {"sport": rng.choice(SPORTS)},
    }
    return Persona(slots, frozenset(used))


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def _possessive(pronoun: str) -> str:
    return {"he": "his", "she": "her"}[pronoun]


def _partner_word(pronoun: str) -> str:
    return {"he": "boyfriend", "she": "girlfriend"}[pronoun]


def _schedule(rng: random.Random, sessions: int, capacity: int) -> dict[str, int]:
    """The session (0-based) of each fact: first values early, changes later, each change
    after what it changes, at most ``capacity`` facts in one session."""
    third = sessions // 3
    load: Counter[int] = Counter()
    at: dict[str, int] = {}

    def put(kind: str, low: int, high: int) -> None:
        free = [s for s in range(low, high) if load[s] < capacity]
        if not free:
            raise ValueError(f"--turns too small to place {kind!r}")
        at[kind] = rng.choice(free)
        load[at[kind]] += 1

    for kind in ("home", "job1", "partner1", "pet1", "cuisine1", "sibling"):
        put(kind, 0, third)
    for kind in ("instrument", "allergy", "sport"):
        put(kind, 0, sessions)
    put("move", third, 2 * third)
    put("job2", at["move"] + 1, sessions)
    put("breakup", third, sessions - 2)
    put("partner2", at["breakup"] + 1, sessions - 1)
    put("partner_job", at["partner2"] + 1, sessions)
    put("pet2", third, sessions)
    put("cuisine2", third, sessions)
    put("sib_city", at["sibling"] + 1, sessions)
    return at


def _dates(rng: random.Random, sessions: int) -> list[datetime]:
    start = datetime(2023, 1, 2, tzinfo=UTC) + timedelta(
        days=rng.randrange(120), hours=rng.randrange(9, 21), minutes=rng.randrange(60)
    )
    dates = [start]
    for _ in range(sessions - 1):
        dates.append(dates[-1] + timedelta(days=rng.randint(6, 24), minutes=rng.randrange(-90, 90)))
    return dates


def _session(
    rng: random.Random,
    persona: Persona,
    number: int,
    when: datetime,
    facts: list[str],
    size: int,
) -> tuple[list[Turn], dict[str, str]]:
    """One session's turns (the user's at even positions), and the turn id of each fact."""
    slots = rng.sample(range((size + 1) // 2), len(facts))
    by_slot = dict(zip(slots, facts, strict=True))
    stamp = session_date(when)
    name = persona.slots["name"]["name"]
    turns: list[Turn] = []
    placed: dict[str, str] = {}
    for i in range(size):
        kind = by_slot.get(i // 2)
        dia_id = f"D{number}:{i + 1}"
        if i % 2 == 0:
            text = _say(rng, kind, persona) if kind else _small_talk(rng, persona)
            if kind:
                placed[kind] = dia_id
        else:
            text = _reply(rng, kind, persona)
        ms = int(when.timestamp() * 1000) + i * 30_000
        speaker = name if i % 2 == 0 else ASSISTANT
        turns.append(Turn(dia_id, speaker, text, number, stamp, ms))
    return turns, placed


def _lengthened(
    size: Size,
    index: int,
    persona: Persona,
    turns: list[Turn],
    where: dict[str, str],
    chars: tuple[int, int],
) -> list[Turn]:
    """``turns`` with each of the assistant's replies made ``chars`` characters long: the
    reply, then what the user just told restated (``RESTATE``), then advice on anything
    (``ADVICE``), as a chat model answers. A generator of its own, so the facts, their turns
    and the questions are those of the short replies."""
    rng = random.Random(f"chatmem-synthetic-long:{size.seed}:{index}")
    told = {dia_id: kind for kind, dia_id in where.items()}
    out: list[Turn] = []
    for n, turn in enumerate(turns):
        if turn.speaker != ASSISTANT:
            out.append(turn)
            continue
        kind = told.get(turns[n - 1].dia_id) if n else None
        target = rng.randint(*chars)
        parts = [turn.text]
        if kind:
            parts += [s.format(**persona.slots[kind]) for s in RESTATE[kind]]
        advice = rng.sample(ADVICE, len(ADVICE))
        while sum(len(p) + 1 for p in parts) < target:
            parts.append(advice.pop() if advice else rng.choice(ADVICE))
        out.append(replace(turn, text=" ".join(parts)[: chars[1]].rstrip()))
    return out


def session_date(when: datetime) -> str:
    """LoCoMo's way of writing a session's date: "1:56 pm on 8 May, 2023"."""
    hour = when.hour % 12 or 12
    noon = "am" if when.hour < 12 else "pm"
    return f"{hour}:{when.minute:02d} {noon} on {when.day} {when:%B}, {when.year}"


def _say(rng: random.Random, kind: str, persona: Persona) -> str:
    return rng.choice(SAY[kind]).format(**persona.slots[kind])


def _reply(rng: random.Random, kind: str | None, persona: Persona) -> str:
    if kind is None:
        return rng.choice(GENERIC_REPLY)
    text, echo = REPLY[kind]
    slots = persona.slots[kind]
    return text.format(echo=echo.format(**slots) if rng.random() < 0.5 else "", **slots)


def _small_talk(rng: random.Random, persona: Persona) -> str:
    if rng.random() >= 0.25:
        return rng.choice(SMALL_TALK)

    def pick(pool: Sequence[str]) -> str:
        return rng.choice([v for v in pool if v not in persona.used])

    role, kind = rng.choice([job for job in JOBS if job[0] not in persona.used])
    return rng.choice(OTHERS_SAY).format(
        other=pick(OTHERS),
        city=pick(CITIES),
        a_role=_a(role),
        employer=f"{rng.choice(BRANDS)} {kind}",
        species=rng.choice(SPECIES),
        pet=pick(PETS),
        cuisine=pick(CUISINES),
        instrument=pick(INSTRUMENTS),
    )


def _questions(
    rng: random.Random,
    persona: Persona,
    where: dict[str, str],
    month_of: dict[str, str],
) -> list[Question]:
    """One question of each kind, worded at random; "month" asks about the month of one
    change, and every change of that month is gold."""
    event = rng.choice(EVENTS)
    slots = persona.slots["name"] | {
        "city2": persona.slots["move"]["city"],
        "month": month_of[event],
    }
    questions = []
    for kind, (category, wordings) in ASK.items():
        text = rng.choice(wordings).format(**slots)
        if kind == "month":
            gold = tuple(e for e in EVENTS if month_of[e] == month_of[event])
            stale: tuple[str, ...] = ()
        else:
            gold, stale = GOLD[kind]
        evidence = frozenset(where[k] for k in gold)
        questions.append(
            Question(text, category, kind, evidence, frozenset(where[k] for k in stale))
        )
    return questions


def digest(conversations: Sequence[Conversation]) -> str:
    """A short hash of everything generated, to tell two generated sets apart."""
    data = json.dumps([asdict(c) for c in conversations], sort_keys=True, default=sorted)
    return hashlib.sha256(data.encode()).hexdigest()[:16]


# --- the systems -------------------------------------------------------------------------------


class Okapi:
    """rank_bm25's BM25Okapi (k1=1.5, b=0.75, epsilon=0.25), the same formula, for where
    rank_bm25 is not installed: a word in more than half the documents gets epsilon times
    the mean idf."""

    def __init__(
        self, corpus: Sequence[Sequence[str]], k1: float = 1.5, b: float = 0.75, eps: float = 0.25
    ) -> None:
        self.k1, self.b = k1, b
        self.doc_freqs = [Counter(doc) for doc in corpus]
        self.doc_len = np.array([len(doc) for doc in corpus], dtype=np.float64)
        self.avgdl = float(self.doc_len.sum()) / len(corpus)
        holding = Counter(word for freqs in self.doc_freqs for word in freqs)
        n = len(corpus)
        self.idf = {w: math.log(n - f + 0.5) - math.log(f + 0.5) for w, f in holding.items()}
        floor = eps * sum(self.idf.values()) / len(self.idf)
        self.idf = {w: floor if idf < 0 else idf for w, idf in self.idf.items()}

    def get_scores(self, query: Sequence[str]) -> np.ndarray:
        score = np.zeros(len(self.doc_freqs))
        norm = self.k1 * (1 - self.b + self.b * self.doc_len / self.avgdl)
        for word in query:
            freq = np.array([doc.get(word, 0) for doc in self.doc_freqs], dtype=np.float64)
            score += self.idf.get(word, 0.0) * (freq * (self.k1 + 1) / (freq + norm))
        return score


class BM25System(lr.BM25System):
    """LoCoMo's BM25 baseline ("Speaker: text", the same tokens), on rank_bm25 when it is
    installed and on ``Okapi`` otherwise (the parent's constructor insists on rank_bm25)."""

    def __init__(self) -> None:
        try:
            from rank_bm25 import BM25Okapi  # type: ignore[import-untyped, unused-ignore]
        except ImportError:
            self._cls: Any = Okapi
        else:
            self._cls = BM25Okapi
        self._docs: dict[str, list[list[str]]] = {}
        self._ids: dict[str, list[str]] = {}
        self._index: dict[str, Any] = {}
        self._said = {}
        self._text = Turn.spoken
        implementation = f"{self._cls.__module__}.{self._cls.__name__}"
        self.info: dict[str, Any] = {"implementation": implementation}


def build_system(name: str, workdir: Path, store: str | None = None) -> lr.System:
    if name == "chatmem":
        return lr.ChatmemSystem(workdir, store=store)
    if name == "bm25":
        return BM25System()
    if name == "dense":
        return lr.DenseSystem()
    raise ValueError(f"unknown system {name!r}; choose from {SYSTEMS}")


# --- the run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scored:
    user: str
    kind: str
    category: str
    recall: float
    all_found: bool
    stale_first: bool | None  # a stale turn ranked above every gold turn (updated-fact)
    within: _injection.Scores | None = None  # recall within the injection's token budget
    #: Of ``stale_first``: no gold turn in the top K at all (the old value alone), against
    #: a gold turn found below the old value's.
    stale_alone: bool | None = None


def score(question: Question, got: Sequence[str], user: str = "") -> Scored:
    """recall@K and all@K of one answer list, and whether a stale turn came first."""
    top = list(got[:K])
    found = question.evidence.intersection(top)
    stale_first = stale_alone = None
    if question.stale:
        first_gold = min((top.index(t) for t in found), default=K)
        stale_first = any(top.index(t) < first_gold for t in question.stale.intersection(top))
        stale_alone = stale_first and not found
    return Scored(
        user,
        question.kind,
        question.category,
        len(found) / len(question.evidence),
        found == question.evidence,
        stale_first,
        stale_alone=stale_alone,
    )


@dataclass
class Run:
    scored: list[Scored] = field(default_factory=list)
    add_s: float = 0.0
    turns: int = 0
    search_s: list[float] = field(default_factory=list)


def run_system(
    system: lr.System,
    conversations: Iterable[Conversation],
    live: bool,
    counter: _injection.TokenCounter | None = None,
    budget_tokens: int = _injection.BUDGET_TOKENS,
) -> Run:
    """Add every conversation (``live``: one ``add_one`` per turn, else one ``ingest``), then
    ask its questions; with a ``counter``, also what of the top ``INJECT_K`` chatmem's
    injection keeps within ``budget_tokens`` (untimed, a search of its own)."""
    run = Run()
    for conv in conversations:
        t0 = time.perf_counter()
        if live:
            for turn in conv.turns:
                system.add_one(conv.user_id, turn)
        else:
            system.ingest(conv.user_id, conv.turns)
        run.add_s += time.perf_counter() - t0
        run.turns += len(conv.turns)
        for question in conv.questions:
            t0 = time.perf_counter()
            got = system.search(conv.user_id, question.text, K)
            run.search_s.append(time.perf_counter() - t0)
            scored = score(question, got, conv.user_id)
            if counter is not None:
                injection = system.injection(
                    conv.user_id, question.text, _injection.INJECT_K, counter, budget_tokens
                )
                scored = replace(scored, within=_injection.score(question.evidence, injection))
            run.scored.append(scored)
    return run


def summary(run: Run) -> dict[str, Any]:
    """recall@K and all@K overall and by category, the stale-first share, and timings (which
    are not comparable across a shared machine's runs)."""

    def mean(values: Iterable[float]) -> float | None:
        kept = list(values)
        return round(float(np.mean(kept)), 4) if kept else None

    def of(category: str) -> list[Scored]:
        return [s for s in run.scored if s.category == category]

    stale = [s.stale_first for s in run.scored if s.stale_first is not None]
    return {
        f"recall@{K}": mean(s.recall for s in run.scored),
        f"all@{K}": mean(float(s.all_found) for s in run.scored),
        f"recall@{K}_by_category": {c: mean(s.recall for s in of(c)) for c in CATEGORIES},
        f"all@{K}_by_category": {c: mean(float(s.all_found) for s in of(c)) for c in CATEGORIES},
        "n_by_category": {c: len(of(c)) for c in CATEGORIES},
        **_injection.summary(
            [s.within for s in run.scored], {c: [s.within for s in of(c)] for c in CATEGORIES}
        ),
        "stale_first_updated": mean(float(v) for v in stale),
        # Of those: the old value's turn with no gold turn in the top K (a reorder of the
        # top K cannot mend these), as a share of all updated-fact questions.
        "stale_alone_updated": mean(
            float(bool(s.stale_alone)) for s in run.scored if s.stale_first is not None
        ),
        "add_per_s": round(run.turns / run.add_s, 1) if run.add_s else None,
        "search_p50_ms": percentile_ms(run.search_s, 50),
        "questions": [[s.user, s.kind, round(s.recall, 3)] for s in run.scored],
    }


def run_all(
    conversations: Sequence[Conversation],
    systems: Sequence[str] = SYSTEMS,
    log: Callable[[str], None] = lambda _: None,
    counter: _injection.TokenCounter | None = None,
    budget_tokens: int = _injection.BUDGET_TOKENS,
    store: str | None = None,
) -> dict[str, dict[str, Any]]:
    """Every system over the same conversations, one after another, each in a fresh temporary
    directory; chatmem adds turn by turn (live), the baselines index each turn alone. With a
    ``counter``, recall within a ``budget_tokens`` injection too. ``store``: chatmem's store
    URI (``locomo_retrieval.store_uri``; default SQLite)."""
    results: dict[str, dict[str, Any]] = {}
    for name in systems:
        workdir = Path(tempfile.mkdtemp(prefix=f"synthetic-{name}-"))
        try:
            system = build_system(name, workdir, store)
            try:
                run = run_system(system, conversations, name == "chatmem", counter, budget_tokens)
            finally:
                system.close()
            results[name] = summary(run) | {"info": dict(system.info)}
            results[name]["ingest"] = "live" if name == "chatmem" else "per turn"
            log(f"{name}: recall@{K} {results[name][f'recall@{K}']}")
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            gc.collect()
    return results


# --- report ------------------------------------------------------------------------------------


def tables(results: dict[str, dict[str, Any]]) -> list[lr.TableSpec]:
    cols = ["system", f"R@{K}", f"all@{K}"]
    cols += [f"R@{K} {c}" for c in CATEGORIES] + [f"all@{K} {c}" for c in CATEGORIES]
    cols += ["stale first", "stale alone"]
    rows = [
        [name, r[f"recall@{K}"], r[f"all@{K}"]]
        + [r[f"recall@{K}_by_category"][c] for c in CATEGORIES]
        + [r[f"all@{K}_by_category"][c] for c in CATEGORIES]
        + [r["stale_first_updated"], r.get("stale_alone_updated")]
        for name, r in results.items()
    ]
    found = [("Synthetic multi-session check", cols, rows)]
    budget = lr.budget_of(results)
    if budget:
        recall, every = _injection.keys(budget)
        measured = {name: r for name, r in results.items() if recall in r}
        labels = (f"R@{budget}tok", f"all@{budget}tok")
        cols, rows = lr.by_category(measured, recall, every, labels, {c: c for c in CATEGORIES})
        cols += ["memories", "tokens", "budget cut"]
        for row, r in zip(rows, measured.values(), strict=True):
            row += [r["injected_memories"], r["injected_tokens"], r["budget_cut"]]
        found.append((f"Within a {budget:,}-token injection", cols, rows))
    return found


def markdown(results: dict[str, dict[str, Any]]) -> str:
    """The tables as Markdown, for docs/benchmarks.md."""
    out = []
    for title, cols, rows in tables(results):
        lines = [f"{title}:", ""]
        lines += ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
        lines += ["| " + " | ".join(lr._fmt(v) for v in row) + " |" for row in rows]
        out.append("\n".join(lines))
    return "\n\n".join(out)


def counts(conversations: Sequence[Conversation]) -> dict[str, Any]:
    questions = [q for c in conversations for q in c.questions]
    return {
        "users": len(conversations),
        "turns": sum(len(c.turns) for c in conversations),
        "questions": len(questions),
        "questions_by_category": dict(Counter(q.category for q in questions)),
        "gold_turns_per_question": round(
            sum(len(q.evidence) for q in questions) / max(len(questions), 1), 3
        ),
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    default = Size()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=default.users)
    p.add_argument("--sessions", type=int, default=default.sessions)
    p.add_argument("--turns", type=int, default=default.turns, help="turns per session")
    p.add_argument("--seed", type=int, default=default.seed)
    p.add_argument(
        "--long-replies",
        type=_span,
        default=None,
        metavar="LOW-HIGH",
        help="the assistant's replies this many characters long, e.g. 1000-3000 (default: short)",
    )
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated")
    p.add_argument(
        "--budget-tokens",
        type=int,
        default=_injection.BUDGET_TOKENS,
        help="recall within chatmem's injection of this many cl100k tokens (0 skips; 1000)",
    )
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown too")
    p.add_argument(
        "--store", default=None, help="chatmem's store URI, as locomo_retrieval.py's --store"
    )
    return p.parse_args(argv)


def _span(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    try:
        return int(low), int(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes LOW-HIGH, e.g. 1000-3000, not {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    size = Size(args.users, args.sessions, args.turns, args.seed, args.long_replies)
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    try:
        size.check()
        if unknown := set(names) - set(SYSTEMS):
            raise ValueError(f"unknown systems {sorted(unknown)}; choose from {SYSTEMS}")
        conversations = generate(size)
        counter = _injection.cl100k() if args.budget_tokens > 0 else None
    except (ValueError, _injection.ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    log = lr._logger("synthetic")
    log(f"{counts(conversations)}, digest {digest(conversations)}")
    results = run_all(conversations, names, log, counter, args.budget_tokens, args.store)
    lr.print_tables(tables(results))
    if args.markdown:
        print(markdown(results))
    if args.json:
        meta = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"nproc": os.cpu_count(), "python": platform.python_version()},
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "size": asdict(size),
            "digest": digest(conversations),
            "counts": counts(conversations),
            "k": K,
            "budget_tokens": args.budget_tokens or None,
            "inject_k": _injection.INJECT_K,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"systems": results, "meta": meta}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
