"""The retrieval pipeline (SPEC R1-R5, L6, F2): what long-term memory adds to one request.

A request's messages go through small named steps, each a plain function:

1. ``decide`` (R1): search at all? Greetings, thanks, bare acknowledgements, tool turns and
   general-knowledge questions are skipped, unless the query is personal ("my", "I", "do
   you remember" …). Every skip is logged on ``chatmem.retrieval`` with its reason.
2. ``build_query`` (R2): a vague query ("How much?") gets the key terms of the recent user
   turns prepended; with a ``memory_rewrite`` model, the model rewrites it instead; with
   HyDE, the model's hypothetical answer is what gets searched.
3. ``search`` (R3): hybrid search of the user's current memories, then a rerank.
4. ``expand`` (L6): typed links followed one hop from the hits, within the same user.
5. ``inject`` (R4): one system message, "User's relevant context", after the application's
   own leading system messages, cut item by item to a token budget.
6. ``UsageRecorder`` (R5): last_accessed and access_count written in batches, off the
   request path.

``Retriever`` runs them in order for one request. Search and expansion run in a worker
thread with a time budget (default 50 ms): past it, or when the embedder or the store
fails, the request goes on without memory and ``Retrieval.degraded`` says why (F2).

**The score and the threshold.** ``LongTermMemory.search`` gives each memory a fused score
in [0, 1] (0.6 x cosine + 0.4 x BM25 relative to the best keyword match, see
``chatmem.ranking``). On the local MiniLM embedder that score separates badly at a fixed
level: true hits that share a word with the query score 0.54-0.90, true hits that share
none (the question and the fact say it differently: "Do I have any pets?" / "User lives in
Berlin with two cats") only 0.17-0.24, while unrelated memories score 0.08-0.25 and, when
they share a word, up to 0.59. A fixed 0.6 on the fused score keeps half the true hits.
So the threshold applies to the **relevance**::

    relevance = fused / max(best fused score of this search, RELEVANCE_REFERENCE)

with ``RELEVANCE_REFERENCE = 1/3``. When the search found a good match (fused >= 1/3,
which in practice means a keyword match), relevance is relative to it and 0.6 keeps what
scores at least 60 % of the best: noise that merely shares a word with the query falls
away. When the best match is weak, the scale is absolute and 0.6 means a fused score of at
least 0.2: a paraphrase with a cosine of 0.34-0.37 passes ("Do I have any pets?" / "User
has two cats": 0.36), unrelated text (cosine under about 0.25) does not; one at 0.33 is on
the edge, where the fast query model's vectors (within about 0.01 of the exact ones) can
tip it either way. On 20 questions (and 8 with no answer stored) against 15 facts among
500 and 5,000 distractors, 0.6 kept 18-19 of the 20 true hits (with 11-16 unrelated
memories in the 140 slots of top-5), against 10-11 (and none unrelated) for 0.6 on the
fused score. Recency and importance only reorder what passed: an old but relevant fact is
never cut for its age. The final score is ``w_r x relevance + w_t x recency + w_i x importance``
(weights 0.7 / 0.15 / 0.15, summing to 1), recency ``0.5 ** (age / half-life)`` measured
from ``valid_from`` (else ``created_at``), half-life 30 days.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from typing import Any, Literal, NamedTuple, TypeVar

from chatmem import text as textlib
from chatmem.errors import (
    EmbeddingError,
    LLMError,
    LLMResponseError,
    StoreError,
    ValidationError,
)
from chatmem.formats import render_message
from chatmem.llm.base import ChatModel
from chatmem.long_term import LongTermMemory
from chatmem.messages import Message
from chatmem.records import (
    Filter,
    MemoryRecord,
    MemoryType,
    RelationType,
    SearchResult,
    utcnow,
)
from chatmem.stores.base import Usage
from chatmem.tokens import TokenCounter, default_counter, message_tokens

logger = logging.getLogger("chatmem.retrieval")

T = TypeVar("T")

#: A chat message: OpenAI-shaped (``role``, ``content`` …) or a ``chatmem.Message``.
ChatMessage = Mapping[str, Any] | Message

# -- 1. decision (R1) ---------------------------------------------------------------------------

GREETINGS = (
    "hi",
    "hello",
    "hey",
    "hiya",
    "howdy",
    "yo",
    "greetings",
    "good morning",
    "good afternoon",
    "good evening",
    "morning",
    "how are you",
    "how are you doing",
    "how's it going",
    "what's up",
    "sup",
    "bye",
    "goodbye",
    "bye bye",
    "see you",
    "see ya",
    "see you later",
    "good night",
    "take care",
)
THANKS = (
    "thanks",
    "thank you",
    "thank u",
    "thx",
    "ty",
    "tysm",
    "cheers",
    "many thanks",
    "much appreciated",
    "appreciate it",
    "i appreciate it",
)
ACKNOWLEDGEMENTS = (
    "ok",
    "okay",
    "k",
    "kk",
    "okey",
    "cool",
    "great",
    "nice",
    "sure",
    "yes",
    "yeah",
    "yep",
    "yup",
    "no",
    "nope",
    "nah",
    "got it",
    "i see",
    "sounds good",
    "alright",
    "all right",
    "fine",
    "perfect",
    "awesome",
    "noted",
    "understood",
    "makes sense",
    "right",
    "lol",
    "haha",
    "wow",
    "i agree",
    "agreed",
    "good",
    "very good",
)
#: Words allowed between small-talk phrases ("thanks so much", "ok then"), never alone.
FILLERS = (
    "so",
    "much",
    "very",
    "really",
    "again",
    "there",
    "all",
    "everyone",
    "guys",
    "a",
    "lot",
    "then",
    "oh",
    "ah",
    "well",
    "and",
    "for",
    "that",
    "the",
    "help",
    "you",
    "too",
)
#: General-knowledge question forms, matched on the lower-cased query. They are kept narrow
#: on purpose: a miss costs one search, a false match loses the user's memory.
GENERAL_KNOWLEDGE = (
    r"^(what|who|where|which)('s|\s+is|\s+are|\s+was|\s+were)\s+(the\s+)?(capital|population"
    r"|president|prime minister|currency|official language|meaning|definition|origin"
    r"|difference|distance|speed|boiling point|melting point|formula|author|inventor|founder"
    r"|largest|smallest|biggest|tallest|highest|longest|deepest|oldest|fastest)\b",
    # "what is a monad?", not "what is a good gift for Anna?" (that one wants memory)
    r"^(what|who)('s|\s+is|\s+are|\s+was|\s+were)\s+(a|an)\s+(?!(good|great|nice|fun|cheap"
    r"|healthy|quick|easy|better|best|fine|cool|safe|popular)\b)[\w-]+(\s+[\w-]+){0,2}\s*\??$",
    r"^what\s+does\s+.+\s+(mean|stand for)\b",
    r"^(define|explain\s+(what|how|why))\s",
    r"^(how|why)\s+(does|do|did|is|are|can|could)\s+(?!you\b).+\b(work|works|happen|happens"
    r"|function|operate)\b",
    r"^who\s+(wrote|invented|discovered|painted|composed|founded|directed|created|designed"
    r"|won|sang)\b",
    r"^(when|where)\s+(was|were|did|is|are)\s+.+\s+(born|invented|founded|built|signed"
    r"|discovered|written|published|located|fought|died)\b",
    r"\b(capital|population|currency)\s+of\b",
    r"^how\s+many\s+\w+(\s+\w+)?\s+(are|is)\s+(there|in)\b",
    r"^(what\s+is|what's|calculate|compute)\s+[\d.]+\s*[-+*/x×÷^]\s*[\d.]+",
    r"^(translate|convert)\s",
    r"^what\s+(time|day)\s+is\s+it\b",
    r"^tell\s+me\s+a\s+(joke|fun fact)\b",
)
#: First-person words and phrases that make a question about the user, whatever its form.
PERSONAL = (
    r"\b(i|my|mine|myself|i'm|im|i've|i'll|i'd|we|our|ours|ourselves|we're|we've|we'll)\b"
    # "me", but not in "tell me a joke", "show me how TCP works"
    r"|\b(?<!tell )(?<!show )(?<!give )(?<!teach )me\b"
    r"|\b(remember|remind me|recall|last time|you told me|we talked|we discussed|as i said)\b"
)

# A word ("what's" is one) or a run of symbols such as emoji; punctuation separates.
_UNIT = re.compile(r"[^\W_]+(?:'[^\W_]+)*|[^\w\s.,!?;:()\"'~\-]+")


@dataclass(frozen=True)
class DecisionRules:
    """What ``decide`` skips. Word lists are whole phrases; patterns are regular expressions
    matched against the lower-cased query. ``min_chars`` is the fewest letters or digits a
    query needs to be searched."""

    greetings: tuple[str, ...] = GREETINGS
    thanks: tuple[str, ...] = THANKS
    acknowledgements: tuple[str, ...] = ACKNOWLEDGEMENTS
    fillers: tuple[str, ...] = FILLERS
    general_knowledge: tuple[str, ...] = GENERAL_KNOWLEDGE
    personal: str = PERSONAL
    min_chars: int = 2
    #: A message of emoji or symbols alone ("👍", "🙏🙏") counts as an acknowledgement.
    emoji_is_acknowledgement: bool = True

    def __post_init__(self) -> None:
        if self.min_chars < 0:
            raise ValidationError("must be 0 or more", field="min_chars")
        for pattern in (*self.general_knowledge, self.personal):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValidationError(f"bad pattern {pattern!r}: {exc}", field="rules") from None

    @cached_property
    def _phrases(self) -> dict[tuple[str, ...], str]:
        """Each small-talk phrase as words, with its kind (fillers last, so a phrase wins)."""
        kinds = (
            ("greeting", self.greetings),
            ("thanks", self.thanks),
            ("acknowledgement", self.acknowledgements),
            ("filler", self.fillers),
        )
        phrases: dict[tuple[str, ...], str] = {}
        for kind, listed in kinds:
            for phrase in listed:
                phrases.setdefault(tuple(_units(phrase)), kind)
        return phrases

    @cached_property
    def _general(self) -> list[re.Pattern[str]]:
        return [re.compile(p) for p in self.general_knowledge]

    @cached_property
    def _personal(self) -> re.Pattern[str]:
        return re.compile(self.personal)

    def small_talk(self, query: str) -> str | None:
        """The kind of small talk ``query`` is made of alone ("greeting", "thanks",
        "acknowledgement"), else None."""
        units = _units(query)
        if not units:
            return None
        kinds: list[str] = []
        longest = max((len(p) for p in self._phrases), default=1)
        position = 0
        while position < len(units):
            if self.emoji_is_acknowledgement and not _has_alnum(units[position]):
                kinds.append("acknowledgement")
                position += 1
                continue
            for size in range(min(longest, len(units) - position), 0, -1):
                kind = self._phrases.get(tuple(units[position : position + size]))
                if kind is not None:
                    kinds.append(kind)
                    position += size
                    break
            else:
                return None
        for kind in ("greeting", "thanks", "acknowledgement"):
            if kind in kinds:
                return kind
        return None  # fillers alone ("so", "well") are not small talk

    def is_general_knowledge(self, query: str) -> bool:
        """Whether ``query`` has the form of a general-knowledge question."""
        lowered = _normal(query)
        return any(p.search(lowered) for p in self._general)

    def is_personal(self, query: str) -> bool:
        """Whether ``query`` speaks of the user (first person, "do you remember" …)."""
        return self._personal.search(_normal(query)) is not None


DEFAULT_RULES = DecisionRules()


class Decision(NamedTuple):
    """Whether to search memory for a request, and why."""

    search: bool
    reason: str


def decide(messages: Sequence[ChatMessage], rules: DecisionRules = DEFAULT_RULES) -> Decision:
    """Search memory for this request? Skips are logged on ``chatmem.retrieval``."""
    decision = _decision(_turns(messages), rules)
    if not decision.search:
        logger.info("Memory: skipping search (%s)", decision.reason)
    return decision


def _decision(turns: Sequence[_Turn], rules: DecisionRules) -> Decision:
    if not turns:
        return Decision(False, "no messages")
    last = turns[-1]
    if last.role == "tool":
        return Decision(False, "tool result")
    if last.role == "assistant" and last.tool_call:
        return Decision(False, "tool call")
    if last.role != "user":
        return Decision(False, f"last message is from the {last.role}, not the user")
    query = last.text
    kind = rules.small_talk(query)  # before the length: "👍" is short, and small talk
    if kind is not None:
        return Decision(False, kind)
    if sum(ch.isalnum() for ch in query) < rules.min_chars:
        return Decision(False, "too short" if query.strip() else "empty")
    if rules.is_personal(query):
        return Decision(True, "personal")
    if rules.is_general_knowledge(query):
        return Decision(False, "general knowledge")
    return Decision(True, "default")


# -- 2. query (R2) ------------------------------------------------------------------------------

#: The system message of the LLM rewrite of a vague query (seed 002, appendix C, option 2).
REWRITE_PROMPT = """\
You rewrite a user's last message into a self-contained search query for their long-term \
memory. Use the conversation to resolve pronouns and ellipsis ("it", "that one", "how \
much?"). Keep names, places, numbers and dates. Answer with the rewritten query only, on \
one line, without quotes or explanations."""

#: The system message of HyDE: a hypothetical answer, embedded instead of the question.
HYDE_PROMPT = """\
Write a short statement, in the third person ("User ..."), that would answer the user's \
last message as if you remembered the answer from earlier conversations. Invent plausible \
details if needed; one or two sentences, no preamble."""

#: Queries matching these are vague whatever their length (seed 002's ``isSelfContained``).
VAGUE_PATTERNS = (
    r"^how\s+(much|many|long|far|often)\s*\??$",
    r"^(and|or|but|also|so)\b",
    r"^(what|how)\s+about\b",
    r"^(this|that|the\s+other|which)\s+one\b",
    r"^(the\s+)?same\b",
    r"^what\s+else\b",
    r"^why\s*(not)?\s*\??$",
    r"^(really|when|where|who|which)\s*\??$",
)
#: Words that point back to something said before.
ANAPHORS = frozenset(
    [
        "it",
        "its",
        "it's",
        "that",
        "this",
        "these",
        "those",
        "them",
        "they",
        "there",
        "then",
        "one",
        "ones",
        "other",
        "another",
        "he",
        "she",
        "him",
        "her",
        "same",
        "such",
    ]
)
#: Words that carry no topic of their own in a short question.
GENERIC_WORDS = frozenset(
    [
        "much",
        "many",
        "one",
        "ones",
        "else",
        "thing",
        "things",
        "stuff",
        "kind",
        "way",
        "tell",
        "say",
        "said",
        "mean",
        "know",
        "think",
        "thought",
        "get",
        "got",
        "go",
        "make",
        "want",
        "need",
        "ok",
        "okay",
        "yes",
    ]
)
#: A query with an anaphor and at most this many words is vague ("Is it expensive?").
SHORT_QUERY_WORDS = 6
#: Most context terms prepended to a vague query.
MAX_CONTEXT_TERMS = 12
#: Longest rewritten query or hypothetical answer kept, in characters.
MAX_REWRITE_CHARS = 600
#: Longest message text shown to the rewriting model, in characters.
MAX_SHOWN_CHARS = 500

_VAGUE = [re.compile(p) for p in VAGUE_PATTERNS]
_NOT_TOPICAL = GENERIC_WORDS | ANAPHORS

QueryMethod = Literal["original", "context", "rewrite", "hyde"]


class Query(NamedTuple):
    """What is searched (``text``), the user's own words (``original``) and how the one
    came from the other."""

    text: str
    original: str
    method: QueryMethod


def is_self_contained(query: str) -> bool:
    """Whether ``query`` can be searched alone; "How much?", "and the other one?", "Is it
    expensive?" cannot."""
    lowered = _normal(query)
    if any(p.search(lowered) for p in _VAGUE):
        return False
    said = textlib.words(lowered)
    topical = [t for t in textlib.query_terms(lowered) if t not in _NOT_TOPICAL]
    if not topical:
        return False
    return not (len(said) <= SHORT_QUERY_WORDS and any(w in ANAPHORS for w in said))


def context_terms(
    messages: Sequence[ChatMessage], *, turns: int = 3, limit: int = MAX_CONTEXT_TERMS
) -> list[str]:
    """The key terms of the last ``turns`` user messages before the last one, oldest first,
    each once, at most ``limit`` (the newest kept)."""
    said = [t.text for t in _turns(messages)[:-1] if t.role == "user" and t.text.strip()]
    seen: dict[str, None] = {}
    for text in said[-turns:] if turns > 0 else []:
        for term in textlib.query_terms(text):
            if term.split("'")[0] in textlib.STOP_WORDS or term in GENERIC_WORDS:
                continue  # "i'm", "we've", "thing": no topic
            seen.pop(term, None)  # a repeated term moves to its newest place
            seen[term] = None
    return list(seen)[-limit:]


def build_query(
    messages: Sequence[ChatMessage],
    *,
    rewriter: ChatModel | None = None,
    hyde: bool = False,
    context_turns: int = 3,
) -> Query:
    """The query to search for the last user message (see the module docstring). The
    model is asked to rewrite vague queries only; when it fails (``LLMError``) the query
    it would have replaced is kept, with a warning."""
    turns = _turns(messages)
    if not turns or turns[-1].role != "user" or not turns[-1].text.strip():
        raise ValidationError("the last message must be a user message with text", field="messages")
    if hyde and rewriter is None:
        raise ValidationError("HyDE needs a model (rewriter)", field="hyde")
    original = turns[-1].text.strip()
    history = [t for t in turns[:-1] if t.role in ("user", "assistant") and t.text.strip()]
    shown = history[-2 * context_turns :] if context_turns > 0 else []
    query = Query(original, original, "original")
    if not is_self_contained(original):
        terms = context_terms(messages, turns=context_turns)
        if terms:
            query = Query(f"{' '.join(terms)} {original}", original, "context")
        if rewriter is not None and shown:  # with no history there is nothing to resolve
            query = _model_query(rewriter, REWRITE_PROMPT, shown, original, query, "rewrite")
    if hyde and rewriter is not None:
        asked = query.text if query.method == "rewrite" else original
        query = _model_query(rewriter, HYDE_PROMPT, shown, asked, query, "hyde")
    return query


def _model_query(
    model: ChatModel,
    prompt: str,
    history: Sequence[_Turn],
    asked: str,
    fallback: Query,
    method: QueryMethod,
) -> Query:
    """The model's query for ``asked`` given ``history``; ``fallback`` when it fails."""
    lines = [f"{t.role}: {t.text[:MAX_SHOWN_CHARS]}" for t in history]
    said = "\n".join(lines) or "(none)"
    request = [
        {"role": "system", "content": prompt},
        {"role": "user", "content": f"Conversation:\n{said}\n\nLast message: {asked}"},
    ]
    try:
        answer = _one_line(model.complete(request), keep_lines=method == "hyde")
    except LLMError as exc:
        logger.warning(
            "Memory: query %s failed, using the %s query: %s", method, fallback.method, exc
        )
        return fallback
    return Query(answer, fallback.original, method)


def _one_line(answer: str, *, keep_lines: bool) -> str:
    text = answer.strip()
    if not keep_lines:
        text = next((line.strip() for line in text.splitlines() if line.strip()), "")
    text = " ".join(text.split()).strip("\"'“”` ")
    if not text:
        raise LLMResponseError("the model answered with an empty query", raw=answer)
    return text[:MAX_REWRITE_CHARS]


# -- 3. search and rerank (R3) ------------------------------------------------------------------

#: The fused score of a "good" match: relevance is measured against it when the search
#: found nothing better (see the module docstring).
RELEVANCE_REFERENCE = 1 / 3
#: How many more candidates than ``k`` are read from long-term memory before the rerank.
CANDIDATE_FACTOR = 4


@dataclass(frozen=True)
class RerankWeights:
    """How relevance, recency and importance make the final score (they sum to 1), and how
    fast recency fades (``0.5 ** (age / half_life_days)``)."""

    relevance: float = 0.7
    recency: float = 0.15
    importance: float = 0.15
    half_life_days: float = 30.0

    def __post_init__(self) -> None:
        weights = (self.relevance, self.recency, self.importance)
        if min(weights) < 0 or abs(sum(weights) - 1.0) > 1e-6:
            raise ValidationError("weights must be non-negative and sum to 1", field="weights")
        if self.half_life_days <= 0:
            raise ValidationError("must be positive", field="weights.half_life_days")


DEFAULT_WEIGHTS = RerankWeights()


@dataclass(frozen=True)
class RetrievedMemory:
    """A memory chosen for a request, with the parts of its score.

    ``score`` is the final rerank score, ``relevance`` the normalised relevance the
    threshold applies to, ``fused`` long-term memory's own score (all three 0 for a memory
    reached by a link: ``via`` is then the link's type and ``linked_from`` its source).
    ``superseded_until`` is set when the memory is no longer true (it is rendered as
    earlier, never as current).
    """

    record: MemoryRecord
    score: float
    relevance: float
    recency: float
    fused: float
    superseded_until: datetime | None = None
    via: RelationType | None = None
    linked_from: str | None = None

    @property
    def current(self) -> bool:
        """Whether the memory is still true (not superseded)."""
        return self.superseded_until is None


def relevance_scores(fused: Sequence[float], reference: float = RELEVANCE_REFERENCE) -> list[float]:
    """Each fused score relative to the best of them, or to ``reference`` when the best is
    lower, in [0, 1] (see the module docstring)."""
    scale = max(max(fused, default=0.0), reference)
    return [min(max(f / scale, 0.0), 1.0) for f in fused]


def recency_score(record: MemoryRecord, now: datetime, half_life_days: float) -> float:
    """``0.5 ** (age / half-life)``, age from ``valid_from`` (else ``created_at``); a
    memory that starts in the future counts as new."""
    anchor = record.time.valid_from or record.time.created_at
    age_days = max((now - anchor).total_seconds(), 0.0) / 86_400.0
    return float(0.5 ** (age_days / half_life_days))


def superseded_at(record: MemoryRecord, now: datetime) -> datetime | None:
    """When ``record`` stopped being true, if it had by ``now`` (its ``valid_to``)."""
    ends = record.time.valid_to
    return ends if ends is not None and ends <= now else None


def rerank(
    found: Sequence[SearchResult],
    *,
    k: int,
    threshold: float,
    weights: RerankWeights = DEFAULT_WEIGHTS,
    now: datetime,
    reference: float = RELEVANCE_REFERENCE,
) -> list[RetrievedMemory]:
    """The best ``k`` of ``found`` whose relevance is at least ``threshold``, by final
    score (pure; see the module docstring for the formula)."""
    relevance = relevance_scores([r.score for r in found], reference)
    ranked = []
    for result, rel in zip(found, relevance, strict=True):
        if rel < threshold:
            continue
        record = result.record
        recency = recency_score(record, now, weights.half_life_days)
        score = (
            weights.relevance * rel
            + weights.recency * recency
            + weights.importance * record.metadata.importance
        )
        ranked.append(
            RetrievedMemory(record, score, rel, recency, result.score, superseded_at(record, now))
        )
    ranked.sort(key=lambda m: (-m.score, m.record.id))
    return mark_updated(ranked[:k], now)


def mark_updated(memories: Sequence[RetrievedMemory], now: datetime) -> list[RetrievedMemory]:
    """Mark as superseded the memories that another of ``memories`` ``updates`` (when the
    newer one has started by ``now``), even if their ``valid_to`` was never set."""
    by_id = {m.record.id: m for m in memories}
    ends: dict[str, datetime] = {}
    for newer in memories:
        start = newer.record.time.valid_from or newer.record.time.created_at
        if start > now:
            continue
        for relation in newer.record.relations:
            if relation.type is RelationType.UPDATES and relation.target_id in by_id:
                ends[relation.target_id] = min(start, ends.get(relation.target_id, start))
    return [
        replace(m, superseded_until=ends[m.record.id]) if m.current and m.record.id in ends else m
        for m in memories
    ]


def search(
    long_term: LongTermMemory,
    query: Query | str,
    *,
    user_id: str,
    tenant_id: str = "default",
    k: int = 5,
    threshold: float = 0.6,
    types: Collection[MemoryType] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    weights: RerankWeights = DEFAULT_WEIGHTS,
    now: datetime | None = None,
    include_superseded: bool = False,
    project_id: str | None = None,
    session_id: str | None = None,
    roles: Collection[str] | None = None,
) -> list[RetrievedMemory]:
    """Hybrid search of one user's memories, reranked (R3): the best ``k`` whose
    normalised relevance (not the final score; see the module docstring) is at least
    ``threshold``. ``types`` keeps those types, ``project_id`` and ``session_id`` that
    project's or session's memories, ``roles`` those a reader holding them may see
    (``Filter.reader_roles``; None: all);
    ``since`` / ``until`` bound ``created_at`` (``since`` <= created_at < ``until``).

    Memories superseded by ``now`` (``valid_to`` passed) are left out, as long-term memory
    does, unless ``include_superseded``: then they are kept and marked. Either way the
    earlier value comes back through the ``updates`` link of the current one (``expand``).
    """
    _check_search(k, threshold)
    moment = now or utcnow()
    narrow = Filter.checked(
        {
            "types": frozenset(types) if types is not None else None,
            "project_id": project_id,
            "session_id": session_id,
            "created_after": since,
            "created_before": until,
            "reader_roles": frozenset(roles) if roles is not None else None,
        },
        "filter",
    )
    found = long_term.search(
        query.text if isinstance(query, Query) else query,
        user_id=user_id,
        tenant_id=tenant_id,
        k=k * CANDIDATE_FACTOR,
        # A relevance of at least t needs a fused score of at least t x the reference:
        # what scores less can never pass, so it is not even read from the store.
        threshold=threshold * RELEVANCE_REFERENCE,
        filter=narrow,
        # Judged here against ``now`` (long-term memory would use the clock), and before
        # the rerank, so relevance is relative to the best memory that can be shown.
        include_superseded=True,
    )
    if not include_superseded:
        found = [r for r in found if superseded_at(r.record, moment) is None]
    return rerank(found, k=k, threshold=threshold, weights=weights, now=moment)


def _check_search(k: int, threshold: float) -> None:
    if k < 1:
        raise ValidationError("must be at least 1", field="k")
    if not 0.0 <= threshold <= 1.0:
        raise ValidationError("must be between 0 and 1", field="threshold")


# -- 4. relations (L6) --------------------------------------------------------------------------

#: The relation types followed by default.
LINK_TYPES = frozenset(RelationType)
#: Most memories ``expand`` adds by default.
MAX_LINKED = 10


def expand(
    long_term: LongTermMemory,
    results: Sequence[RetrievedMemory],
    *,
    user_id: str,
    tenant_id: str = "default",
    hops: int = 1,
    types: Collection[RelationType] = LINK_TYPES,
    now: datetime | None = None,
    limit: int = MAX_LINKED,
    roles: Collection[str] | None = None,
) -> list[RetrievedMemory]:
    """The memories that ``results`` link to (``types``), ``hops`` links away at most, read
    within the same tenant and user only; those not already in ``results``, at most
    ``limit``, and only those a reader holding ``roles`` may see (None: all). The target
    of an ``updates`` link, or of a ``contradicts`` link from a newer memory, is marked
    superseded."""
    if hops < 0 or limit < 0:
        raise ValidationError("hops and limit must be 0 or more", field="hops")
    moment = now or utcnow()
    readers = frozenset(roles) if roles is not None else None
    scope = Filter.checked(
        {"tenant_id": tenant_id, "user_id": user_id, "reader_roles": readers}, "filter"
    )
    seen = {m.record.id for m in results}
    frontier = list(results)
    linked: list[RetrievedMemory] = []
    for _ in range(hops):
        wanted = _targets(frontier, frozenset(types), seen)
        if not wanted or len(linked) >= limit:
            break
        records = long_term.store.get(list(wanted), scope)
        frontier = []
        for record in records:
            if not scope.matches(record):
                continue  # the store filtered already; never trust one layer alone (L7)
            source, kind = wanted[record.id]
            item = _linked(record, source, kind, moment)
            seen.add(record.id)
            frontier.append(item)
            linked.append(item)
    return linked[:limit]


def _targets(
    sources: Sequence[RetrievedMemory], types: frozenset[RelationType], seen: set[str]
) -> dict[str, tuple[MemoryRecord, RelationType]]:
    wanted: dict[str, tuple[MemoryRecord, RelationType]] = {}
    for source in sources:
        for relation in source.record.relations:
            if relation.type in types and relation.target_id not in seen:
                wanted.setdefault(relation.target_id, (source.record, relation.type))
    return wanted


def _linked(
    record: MemoryRecord, source: MemoryRecord, kind: RelationType, now: datetime
) -> RetrievedMemory:
    ends = superseded_at(record, now)
    started = source.time.valid_from or source.time.created_at
    replaced = kind is RelationType.UPDATES or (
        kind is RelationType.CONTRADICTS and record.time.created_at < source.time.created_at
    )
    if ends is None and replaced and started <= now:
        ends = started
    recency = recency_score(record, now, DEFAULT_WEIGHTS.half_life_days)
    return RetrievedMemory(record, 0.0, 0.0, recency, 0.0, ends, kind, source.id)


# -- 5. injection (R4) --------------------------------------------------------------------------

DEFAULT_HEADER = "User's relevant context"
MEMORIES_FIELD = "{memories}"
HEADER_FIELD = "{header}"


def render_memory(memory: RetrievedMemory) -> str:
    """One line: ``- [2024-05-08] text``, or ``- (earlier, until 2024-05-08) text`` for a
    memory that is no longer true."""
    text = " ".join(memory.record.content.raw.split())
    if memory.superseded_until is not None:
        return f"- (earlier, until {memory.superseded_until.date().isoformat()}) {text}"
    said = memory.record.time.valid_from or memory.record.time.created_at
    return f"- [{said.date().isoformat()}] {text}"


class Packed(NamedTuple):
    """The injected message's content and the indexes of the memories it holds."""

    content: str
    kept: list[int]


def pack(
    lines: Sequence[str],
    *,
    counter: TokenCounter,
    budget_tokens: int,
    template: str | None = None,
    header: str = DEFAULT_HEADER,
) -> Packed:
    """The memory lines, in order, that fit as one system message of at most
    ``budget_tokens`` tokens (counted exactly, message overhead included); a line that does
    not fit is left out and the next ones are still tried."""
    if budget_tokens < 0:
        raise ValidationError("must be 0 or more", field="budget_tokens")
    if template is not None and MEMORIES_FIELD not in template:
        raise ValidationError(f"a template needs the {MEMORIES_FIELD} field", field="template")
    kept: list[int] = []
    content = ""
    for index, line in enumerate(lines):
        candidate = _content([*(lines[i] for i in kept), line], template, header)
        if message_tokens(counter, {"role": "system", "content": candidate}) <= budget_tokens:
            kept.append(index)
            content = candidate
    return Packed(content, kept)


def _content(lines: Sequence[str], template: str | None, header: str) -> str:
    listed = "\n".join(lines)
    if template is None:
        return f"{header}:\n{listed}"
    return template.replace(HEADER_FIELD, header).replace(MEMORIES_FIELD, listed)


def insert_system(messages: Sequence[ChatMessage], content: str) -> list[dict[str, Any]]:
    """``messages`` as OpenAI dicts with a system message of ``content`` after the leading
    system (and developer) messages; the input is not changed."""
    out = [_as_dict(m) for m in messages]
    position = 0
    while position < len(out) and out[position].get("role") in ("system", "developer"):
        position += 1
    out.insert(position, {"role": "system", "content": content})
    return out


def inject(
    messages: Sequence[ChatMessage],
    memories: Sequence[RetrievedMemory],
    *,
    counter: TokenCounter | None = None,
    budget_tokens: int = 1000,
    template: str | None = None,
    header: str = DEFAULT_HEADER,
) -> list[dict[str, Any]]:
    """``messages`` with one system message listing ``memories`` (in the order given,
    most relevant first), within ``budget_tokens``; unchanged (as dicts) when none fits."""
    return _injected(messages, memories, counter, budget_tokens, template, header)[0]


def _injected(
    messages: Sequence[ChatMessage],
    memories: Sequence[RetrievedMemory],
    counter: TokenCounter | None,
    budget_tokens: int,
    template: str | None,
    header: str,
) -> tuple[list[dict[str, Any]], list[RetrievedMemory]]:
    packed = pack(
        [render_memory(m) for m in memories],
        counter=counter or default_counter(),
        budget_tokens=budget_tokens,
        template=template,
        header=header,
    )
    if not packed.kept:
        return [_as_dict(m) for m in messages], []
    return insert_system(messages, packed.content), [memories[i] for i in packed.kept]


# -- 6. use (R5) --------------------------------------------------------------------------------


class _Use(NamedTuple):
    times: int
    last: datetime


_Key = tuple[str, str, str]  # tenant, user, memory id


class UsageRecorder:
    """Counts the uses of memories in memory and writes ``access_count`` and
    ``last_accessed`` in batches from a background thread (R5), so a read never waits on a
    write. ``record`` only touches a dict under a lock; ``flush`` writes now (for tests
    and shutdown); ``close`` stops the thread after a last flush.

    A flush is one usage-only store write per user (``MemoryStore.touch``): a use is not
    a new version and leaves no history row, and it never conflicts with a concurrent edit.
    A memory deleted meanwhile is dropped; when the store fails, the counts are kept for
    the next flush.
    """

    def __init__(
        self, long_term: LongTermMemory, *, flush_every_s: float = 5.0, max_batch: int = 500
    ) -> None:
        if flush_every_s <= 0 or max_batch < 1:
            raise ValidationError("flush_every_s and max_batch must be positive", field="usage")
        self.long_term = long_term
        self.flush_every_s = flush_every_s
        self.max_batch = max_batch
        self._pending: dict[_Key, _Use] = {}
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chatmem-usage", daemon=True)
        self._thread.start()

    def record(
        self,
        ids: Iterable[str],
        *,
        user_id: str,
        tenant_id: str = "default",
        at: datetime | None = None,
    ) -> None:
        """Count one use of each of ``ids`` (memories of that user) at ``at`` (now)."""
        moment = at or utcnow()
        with self._lock:
            for memory_id in ids:
                key = (tenant_id, user_id, memory_id)
                _merge(self._pending, key, _Use(1, moment))
            full = len(self._pending) >= self.max_batch
        if full:
            self._wake.set()

    def pending(self) -> int:
        """How many memories have uses not yet written."""
        with self._lock:
            return len(self._pending)

    def flush(self) -> int:
        """Write every pending use now; returns how many memories were written."""
        with self._flushing:
            with self._lock:
                taken, self._pending = self._pending, {}
            written = 0
            for (tenant_id, user_id), uses in _by_user(taken).items():
                for start in range(0, len(uses), self.max_batch):
                    chunk = dict(list(uses.items())[start : start + self.max_batch])
                    written += self._write(tenant_id, user_id, chunk)
            return written

    def _write(self, tenant_id: str, user_id: str, uses: dict[str, _Use]) -> int:
        batch = [Usage(memory_id, use.times, use.last) for memory_id, use in uses.items()]
        try:
            # Memories deleted meanwhile, or not this user's, are skipped.
            written = self.long_term.record_access(batch, user_id=user_id, tenant_id=tenant_id)
            return len(written)
        except StoreError as exc:
            logger.warning("Memory: writing usage of %d memories failed: %s", len(uses), exc)
            with self._lock:
                for memory_id, use in uses.items():
                    _merge(self._pending, (tenant_id, user_id, memory_id), use)
            return 0

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(self.flush_every_s)
            self._wake.clear()
            if not self._stopped.is_set():
                self.flush()

    def close(self) -> None:
        """Stop the background thread and write what is pending."""
        self._stopped.set()
        self._wake.set()
        self._thread.join()
        self.flush()

    def __enter__(self) -> UsageRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _merge(pending: dict[_Key, _Use], key: _Key, use: _Use) -> None:
    known = pending.get(key)
    if known is None:
        pending[key] = use
    else:
        pending[key] = _Use(known.times + use.times, max(known.last, use.last))


def _by_user(uses: Mapping[_Key, _Use]) -> dict[tuple[str, str], dict[str, _Use]]:
    grouped: dict[tuple[str, str], dict[str, _Use]] = {}
    for (tenant_id, user_id, memory_id), use in uses.items():
        grouped.setdefault((tenant_id, user_id), {})[memory_id] = use
    return grouped


# -- 7. the pipeline ----------------------------------------------------------------------------

#: The steps timed in ``Retrieval.timings_ms``, in order.
STEPS = ("decision", "query", "search", "expand", "inject", "usage")


@dataclass(frozen=True)
class Retrieval:
    """What one request got from memory.

    ``injected_messages`` is what to send to the model (the input, as dicts, when nothing
    was injected). ``results`` are the memories injected, hits first then linked ones.
    ``degraded`` says why memory was left out when it failed ("timeout", "store error: …",
    "embedding error: …"); None otherwise.
    """

    decision: Decision
    query: Query | None
    results: list[RetrievedMemory]
    injected_messages: list[dict[str, Any]]
    timings_ms: dict[str, float] = field(default_factory=dict)
    degraded: str | None = None


#: What a search is narrowed to: types, project, and the reader's roles (None: all).
_Narrow = tuple[Collection[MemoryType] | None, str | None, frozenset[str] | None]


class _Found(NamedTuple):
    hits: list[RetrievedMemory]
    linked: list[RetrievedMemory]
    search_ms: float
    expand_ms: float


def default_search_workers() -> int:
    """One search thread per core (2 to 8): a search is CPU work (the query embedding, the
    vector product, SQLite), so more threads than cores only make every search slower. With 4
    threads on 2 cores under 16 concurrent clients, nearly every search ran past its 50 ms
    budget and was thrown away after its CPU was spent."""
    return min(8, max(2, os.cpu_count() or 2))


#: Searches that may wait for each search thread before a request goes on without memory.
QUEUE_DEPTH = 4


class _Start:
    """When a search began to run in the pool (its budget counts from there)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.at = 0.0

    def running(self, work: Callable[..., _Found], *args: Any) -> _Found:
        self.at = time.perf_counter()
        self.event.set()
        return work(*args)


class Retriever:
    """The retrieval pipeline of one long-term memory (see the module docstring).

    Search and expansion run in a pool of ``search_workers`` threads (default: one per core,
    at least 2 and at most 8), reused across requests; a search still running past
    ``search_budget_ms`` is left to finish there while the request goes on without memory.
    The budget counts from when the search starts: a search waits for a free thread for up
    to ``search_queue_ms`` (default: the budget), so a burst of requests queues for a few
    milliseconds (while the embedder batches their queries) instead of going without
    memory; one that cannot start in that time, or that finds ``QUEUE_DEPTH`` searches
    waiting per thread, goes on without memory (``degraded="busy"``). The budget can be
    overrun by up to Python's thread
    switch interval (5 ms) while the worker runs Python code; the embedder, SQLite and numpy
    let go of the interpreter. Close the retriever (or use it as a context manager) to stop
    the pool; a ``usage`` recorder
    belongs to the caller.
    """

    def __init__(
        self,
        long_term: LongTermMemory,
        *,
        rules: DecisionRules = DEFAULT_RULES,
        rewriter: ChatModel | None = None,
        hyde: bool = False,
        k: int = 5,
        threshold: float = 0.6,
        budget_tokens: int = 1000,
        search_budget_ms: float = 50.0,
        counter: TokenCounter | None = None,
        usage: UsageRecorder | None = None,
        weights: RerankWeights = DEFAULT_WEIGHTS,
        context_turns: int = 3,
        link_types: Collection[RelationType] = LINK_TYPES,
        hops: int = 1,
        template: str | None = None,
        header: str = DEFAULT_HEADER,
        search_workers: int | None = None,
        search_queue_ms: float | None = None,
    ) -> None:
        _check_search(k, threshold)
        if search_workers is None:
            search_workers = default_search_workers()
        if hyde and rewriter is None:
            raise ValidationError("HyDE needs a model (rewriter)", field="hyde")
        if search_budget_ms <= 0 or budget_tokens < 0 or search_workers < 1:
            raise ValidationError(
                "search_budget_ms and search_workers must be positive, budget_tokens 0 or more",
                field="retriever",
            )
        if template is not None and MEMORIES_FIELD not in template:
            raise ValidationError(f"a template needs the {MEMORIES_FIELD} field", field="template")
        self.long_term = long_term
        self.rules = rules
        self.rewriter = rewriter
        self.hyde = hyde
        self.k = k
        self.threshold = threshold
        self.budget_tokens = budget_tokens
        self.search_budget_ms = search_budget_ms
        self.counter = counter or default_counter()
        self.usage = usage
        self.weights = weights
        self.context_turns = context_turns
        self.link_types = frozenset(link_types)
        self.hops = hops
        self.template = template
        self.header = header
        self._pool = ThreadPoolExecutor(search_workers, thread_name_prefix="chatmem-search")
        self._workers = search_workers
        self.search_queue_ms = search_budget_ms if search_queue_ms is None else search_queue_ms
        self._in_flight = 0  # searches submitted and not ended (those past their budget too)
        self._busy_lock = threading.Lock()

    def retrieve(
        self,
        messages: Sequence[ChatMessage],
        *,
        user_id: str,
        tenant_id: str = "default",
        types: Collection[MemoryType] | None = None,
        now: datetime | None = None,
        k: int | None = None,
        threshold: float | None = None,
        project_id: str | None = None,
        roles: Collection[str] | None = None,
    ) -> Retrieval:
        """Decide, build the query, search, expand, inject and record the use, for one
        request of ``user_id`` (within ``project_id`` when given) by a reader holding
        ``roles`` (only memories open to them are found, followed or injected; None: the
        trusted caller, who reads all); ``k`` and ``threshold`` override the retriever's for
        this request. Never raises for a failing store or embedder (F2)."""
        readers = frozenset(roles) if roles is not None else None
        Filter.checked(
            {
                "tenant_id": tenant_id,
                "user_id": user_id,
                "project_id": project_id,
                "reader_roles": readers,
            },
            "filter",
        )
        limits = (self.k if k is None else k, self.threshold if threshold is None else threshold)
        _check_search(*limits)
        timings: dict[str, float] = {}
        began = time.perf_counter()
        decision = _timed(timings, "decision", lambda: decide(messages, self.rules))
        if not decision.search:
            return self._done(decision, None, messages, timings, began)
        query = _timed(timings, "query", lambda: self._query(messages))
        moment = now or utcnow()
        narrow = (types, project_id, readers)
        outcome = self._search(query, user_id, tenant_id, narrow, moment, limits)
        if isinstance(outcome, str):
            timings["search"] = (time.perf_counter() - began) * 1000 - sum(timings.values())
            return self._done(decision, query, messages, timings, began, degraded=outcome)
        timings["search"], timings["expand"] = outcome.search_ms, outcome.expand_ms
        injected, shown = _timed(
            timings,
            "inject",
            lambda: _injected(
                messages,
                [*outcome.hits, *outcome.linked],
                self.counter,
                self.budget_tokens,
                self.template,
                self.header,
            ),
        )
        if self.usage is not None and shown:
            usage = self.usage
            ids = [m.record.id for m in shown]
            _timed(
                timings,
                "usage",
                lambda: usage.record(ids, user_id=user_id, tenant_id=tenant_id),
            )
        logger.debug(
            "Memory: %d found, %d linked, %d injected for user %s",
            len(outcome.hits),
            len(outcome.linked),
            len(shown),
            user_id,
        )
        timings["total"] = (time.perf_counter() - began) * 1000
        return Retrieval(decision, query, shown, injected, timings)

    def _query(self, messages: Sequence[ChatMessage]) -> Query:
        return build_query(
            messages,
            rewriter=self.rewriter,
            hyde=self.hyde,
            context_turns=self.context_turns,
        )

    def _search(
        self,
        query: Query,
        user_id: str,
        tenant_id: str,
        narrow: _Narrow,
        now: datetime,
        limits: tuple[int, float],
    ) -> _Found | str:
        """Search and expand in the pool within the time budget; a string says why not."""
        with self._busy_lock:
            busy = self._in_flight >= self._workers * QUEUE_DEPTH
            if not busy:
                self._in_flight += 1
        if busy:
            logger.warning("Memory: %d searches waiting per thread, going on without memory",
                           QUEUE_DEPTH)  # fmt: skip
            return "busy"
        started = _Start()
        future = self._pool.submit(
            started.running, self._find, query, user_id, tenant_id, narrow, now, limits
        )
        future.add_done_callback(self._search_ended)
        if not started.event.wait(self.search_queue_ms / 1000):
            if future.cancel():
                logger.warning(
                    "Memory: no search thread free within %.0f ms, going on without memory",
                    self.search_queue_ms,
                )
                return "busy"
            started.event.wait()  # it started as the wait ended: its start time is set next
        try:
            left = self.search_budget_ms / 1000 - (time.perf_counter() - started.at)
            return future.result(timeout=max(left, 0.0))
        except FutureTimeout:
            future.cancel()  # not started yet: never run it; running: let it end there
            _log_late(future)
            logger.warning(
                "Memory search timeout (over %.0f ms), going on without memory",
                self.search_budget_ms,
            )
            return "timeout"
        except EmbeddingError as exc:
            logger.warning("Memory: embedding failed, going on without memory: %s", exc)
            return f"embedding error: {exc}"
        except StoreError as exc:
            logger.warning("Memory: store failed, going on without memory: %s", exc)
            return f"store error: {exc}"
        except Exception as exc:  # boundary: memory is an enhancement, never a failure (F4)
            logger.exception("Memory: search failed unexpectedly, going on without memory")
            return f"error: {type(exc).__name__}: {exc}"

    def _search_ended(self, _: Future[_Found]) -> None:
        with self._busy_lock:
            self._in_flight -= 1

    def _find(
        self,
        query: Query,
        user_id: str,
        tenant_id: str,
        narrow: _Narrow,
        now: datetime,
        limits: tuple[int, float],
    ) -> _Found:
        began = time.perf_counter()
        types, project_id, roles = narrow
        hits = search(
            self.long_term,
            query,
            user_id=user_id,
            tenant_id=tenant_id,
            k=limits[0],
            threshold=limits[1],
            types=types,
            project_id=project_id,
            roles=roles,
            weights=self.weights,
            now=now,
        )
        searched = time.perf_counter()
        linked: list[RetrievedMemory] = []
        if hits and self.hops > 0 and self.link_types:
            linked = expand(
                self.long_term,
                hits,
                user_id=user_id,
                tenant_id=tenant_id,
                hops=self.hops,
                types=self.link_types,
                now=now,
                roles=roles,
            )
        ended = time.perf_counter()
        return _Found(hits, linked, (searched - began) * 1000, (ended - searched) * 1000)

    @staticmethod
    def _done(
        decision: Decision,
        query: Query | None,
        messages: Sequence[ChatMessage],
        timings: dict[str, float],
        began: float,
        *,
        degraded: str | None = None,
    ) -> Retrieval:
        timings["total"] = (time.perf_counter() - began) * 1000
        unchanged = [_as_dict(m) for m in messages]
        return Retrieval(decision, query, [], unchanged, timings, degraded)

    def close(self) -> None:
        """Stop the search pool (waits for a search still running; cancels queued ones)."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Retriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRetriever:
    """The async face of ``Retriever``: ``retrieve`` awaited, run in a worker thread."""

    def __init__(self, retriever: Retriever) -> None:
        self.sync = retriever

    async def retrieve(
        self,
        messages: Sequence[ChatMessage],
        *,
        user_id: str,
        tenant_id: str = "default",
        types: Collection[MemoryType] | None = None,
        now: datetime | None = None,
        k: int | None = None,
        threshold: float | None = None,
        project_id: str | None = None,
    ) -> Retrieval:
        """As ``Retriever.retrieve``."""
        return await asyncio.to_thread(
            self.sync.retrieve,
            messages,
            user_id=user_id,
            tenant_id=tenant_id,
            types=types,
            now=now,
            k=k,
            threshold=threshold,
            project_id=project_id,
        )

    async def close(self) -> None:
        """As ``Retriever.close``."""
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncRetriever:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _log_late(future: Future[_Found]) -> None:
    """Log how a search that missed its budget ended, so a slow store shows in the logs
    and its error is never left unretrieved."""

    def ended(done: Future[_Found]) -> None:
        if done.cancelled():
            return
        error = done.exception()
        if error is not None:
            logger.warning("Memory: a search past its budget then failed: %s", error)

    future.add_done_callback(ended)


def _timed(timings: dict[str, float], step: str, call: Callable[[], T]) -> T:
    began = time.perf_counter()
    try:
        return call()
    finally:
        timings[step] = (time.perf_counter() - began) * 1000


# -- message helpers ------------------------------------------------------------------------------


class _Turn(NamedTuple):
    role: str
    text: str
    tool_call: bool


def _turns(messages: Sequence[ChatMessage]) -> list[_Turn]:
    turns = []
    for message in messages:
        if isinstance(message, Message):
            turns.append(_Turn(message.role.value, message.content, bool(message.tool_calls)))
        else:
            calls = bool(message.get("tool_calls") or message.get("function_call"))
            turns.append(_Turn(str(message.get("role", "")), _text(message.get("content")), calls))
    return turns


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, Mapping) and p.get("type") in ("text", "input_text")
        )
    return ""


def _as_dict(message: ChatMessage) -> dict[str, Any]:
    return render_message(message) if isinstance(message, Message) else dict(message)


def _normal(text: str) -> str:
    return " ".join(text.lower().replace("’", "'").split())


def _units(text: str) -> list[str]:
    return _UNIT.findall(_normal(text))


def _has_alnum(unit: str) -> bool:
    return any(ch.isalnum() for ch in unit)


__all__ = [
    "ACKNOWLEDGEMENTS",
    "CANDIDATE_FACTOR",
    "DEFAULT_HEADER",
    "DEFAULT_RULES",
    "DEFAULT_WEIGHTS",
    "GENERAL_KNOWLEDGE",
    "GREETINGS",
    "HYDE_PROMPT",
    "LINK_TYPES",
    "PERSONAL",
    "RELEVANCE_REFERENCE",
    "REWRITE_PROMPT",
    "STEPS",
    "THANKS",
    "AsyncRetriever",
    "ChatMessage",
    "Decision",
    "DecisionRules",
    "Packed",
    "Query",
    "QueryMethod",
    "RerankWeights",
    "Retrieval",
    "RetrievedMemory",
    "Retriever",
    "UsageRecorder",
    "build_query",
    "context_terms",
    "decide",
    "expand",
    "inject",
    "insert_system",
    "is_self_contained",
    "mark_updated",
    "pack",
    "recency_score",
    "relevance_scores",
    "render_memory",
    "rerank",
    "search",
    "superseded_at",
]
