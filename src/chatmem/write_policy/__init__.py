"""The write policy (SPEC L4): what each extracted fact does to a user's memories.

Every fact of a batch, in order, is

1. **screened**: dropped when its importance is under ``min_importance`` (0.3), its confidence
   under ``min_confidence`` (0.4), or when it reads as an instruction to the model (SPEC L9).
   A fact accusing someone else ("User's neighbour Tom is a thief") is first rewritten as the
   user's attributed claim, at confidence 0.4 with the ``claim`` tag
   (:func:`chatmem.extraction.poisoning.as_claim`).
   A fact that another fact of the batch, of another type, restates (:func:`duplicates`) is
   dropped too: the more specific type is kept ("User's dog is named Pixel", a profile, over
   "User's dog's name is Pixel");
2. **compared** with the user's *current* memories of the same type (``valid_to`` unset or in
   the future): the nearest by vector, and those with the same ``subject``; and with the
   nearest of the other fact types;
3. **decided** (:func:`decide`, pure). A restatement must keep the old memory's *details*
   (numbers, codes, names, dates: :mod:`chatmem.details`), so "visited the museum CHT29X"
   never replaces "… CHT77X", however close their vectors:

   - same subject, same value (their shared structured values agree) and the details
     agree → ``UPDATE`` that memory;
   - same subject, another value or other details → ``SUPERSEDE``: a new memory becomes
     current with an ``updates`` relation to the old one, which gets ``valid_to`` and stays
     stored, so ``Filter(valid_at=<before>)`` still answers "what was my budget before?"
     (SPEC X3);
   - cosine above ``update_similarity`` (0.9) and the details agree → ``UPDATE`` (version + 1,
     the store keeps the old version in the history);
   - a memory of another type says the same (the same details, and cosine above
     ``update_similarity`` or the same words) → ``SKIP``, or ``UPDATE`` it to the fact's
     type when that is the more specific (:func:`restated_across_types`);
   - otherwise → ``CREATE``.

   With a ``model``, one call per batch decides every fact that has candidates
   (:data:`DECISION_PROMPT`); an answer that names no valid action or target falls back to
   the rules, and so does the whole batch when the call fails.
4. **applied**, idempotently per batch: a created memory's id is derived from (batch id, fact
   index), and every memory the batch writes carries ``user_metadata["write_batch"]`` and
   ``["write_facts"]``. A batch run again after a crash (between the writes and the queue's
   ``complete``) skips the facts it already applied and finishes any half-done supersede, so
   it creates and updates nothing twice even when the memories live in another database than
   the queue.

One log line per batch (logger ``chatmem.write_policy``):
``Memory: stored N, updated M, superseded S, skipped K``.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple

import numpy as np

from chatmem import text as textlib
from chatmem.details import agree, details_of
from chatmem.errors import LLMError, ValidationError
from chatmem.extraction.base import Fact
from chatmem.extraction.poisoning import as_claim, is_instruction_to_model
from chatmem.llm.base import ChatModel
from chatmem.llm.jsonfix import complete_json
from chatmem.long_term import LongTermMemory
from chatmem.messages import SessionKey
from chatmem.records import (
    EmbeddingInfo,
    Entry,
    Filter,
    MemoryRecord,
    MemoryType,
    RelationType,
    Vector,
    new_id,
    utcnow,
)
from chatmem.stores.base import Change, SearchQuery

logger = logging.getLogger("chatmem.write_policy")

#: ``user_metadata`` keys the policy writes: what the memory is about (normalised), and the
#: batch that last wrote it with the indexes of that batch's facts it holds.
SUBJECT_KEY = "subject"
BATCH_KEY = "write_batch"
FACTS_KEY = "write_facts"
#: Structured keys that say *when*, not *what*: a differing date is not another value.
_TIME_KEYS = frozenset({"date", "when", "time"})
_MAX_TAGS = 64
#: How specific each fact type is: of two memories of different types that say the same,
#: the more specific one is kept. Reflective memories (insights) are never compared.
_SPECIFICITY = {
    MemoryType.PROFILE: 3,
    MemoryType.PREFERENCE: 2,
    MemoryType.EPISODIC: 2,
    MemoryType.PROCEDURAL: 2,
    MemoryType.SEMANTIC: 1,
}
_WORDS = re.compile(r"\w+")

#: The system message of the batched write decision. The user message lists each new fact
#: with the existing memories it may touch (see :func:`decision_request`).
DECISION_PROMPT = """\
You keep a user's long-term memory consistent. For each NEW fact below you see the user's \
EXISTING memories that may be about the same thing. Decide what the new fact does:
- "create": it is new information; the existing memories stay as they are.
- "update": it says the same as one existing memory (restated, refined or more precise); \
that memory takes the new wording.
- "supersede": it is about the same thing as one or more existing memories but the value \
changed (a new budget, a new city, a changed preference); the new fact becomes current and \
the old ones are kept as history.
- "skip": an existing memory already says exactly this; nothing to store.

Return only a JSON object: {"decisions": [{"fact": <fact number>, "action": \
"create|update|supersede|skip", "targets": ["<id of an existing memory>", ...]}]}. \
"update" names exactly one target, "supersede" one or more, "create" and "skip" none. \
Use only the ids shown for that fact.
"""


class Action(StrEnum):
    """What a fact does to the user's memories."""

    CREATE = "create"
    UPDATE = "update"
    SUPERSEDE = "supersede"
    SKIP = "skip"


@dataclass(frozen=True)
class WriteConfig:
    """Thresholds of the write policy (defaults from SPEC L4 and seed 002 section 6)."""

    min_importance: float = 0.3
    min_confidence: float = 0.4
    #: Cosine similarity above which a fact updates the existing memory.
    update_similarity: float = 0.9
    #: Nearest memories at or above this similarity are shown to the decision model.
    related_similarity: float = 0.6
    #: How many nearest memories a fact is compared with.
    candidates: int = 10

    def __post_init__(self) -> None:
        for name in ("min_importance", "min_confidence", "update_similarity"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValidationError("must be between 0 and 1", field=name)
        if not -1.0 <= self.related_similarity <= 1.0:
            raise ValidationError("must be between -1 and 1", field="related_similarity")
        if self.candidates < 1:
            raise ValidationError("must be at least 1", field="candidates")


@dataclass(frozen=True)
class Existing:
    """A current memory a fact may touch; ``similarity`` is the cosine (None when it was
    found by subject only)."""

    record: MemoryRecord
    similarity: float | None = None


@dataclass(frozen=True)
class Decision:
    """What one fact does: the action, the memories it touches, and why (for the logs)."""

    action: Action
    targets: tuple[str, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class WriteReport:
    """What one batch did. ``skipped_reasons`` counts the skipped facts by reason."""

    stored: int = 0
    updated: int = 0
    superseded: int = 0
    skipped: int = 0
    skipped_reasons: dict[str, int] = field(default_factory=dict)
    #: Ids of the memories created or updated, in order.
    memory_ids: tuple[str, ...] = ()

    def line(self) -> str:
        """The batch's log line (the seed's success criterion)."""
        return (
            f"Memory: stored {self.stored}, updated {self.updated}, "
            f"superseded {self.superseded}, skipped {self.skipped}"
        )


# -- pure decisions --------------------------------------------------------------------------


def screen(fact: Fact, config: WriteConfig) -> str | None:
    """Why ``fact`` is not stored at all, or None when it goes on to the decision."""
    if fact.importance < config.min_importance:
        return "low importance"
    if fact.confidence < config.min_confidence:
        return "low confidence"
    reason = is_instruction_to_model(fact.text)
    if reason is not None:
        logger.warning("not storing a fact that %s: %r", reason, fact.text)
        return "instruction to the model"
    return None


def subject_key(subject: str | None) -> str | None:
    """A subject as it is stored and compared: lower case, single spaces."""
    if subject is None:
        return None
    key = " ".join(subject.lower().split())
    return key or None


def values_differ(fact: Fact, record: MemoryRecord) -> bool:
    """Whether ``fact`` gives its subject another value than ``record`` does.

    The structured values under their shared keys decide (dates aside); without shared keys,
    the texts do (case and spacing aside).
    """
    theirs = record.content.structured or {}
    shared = (set(fact.structured) & set(theirs)) - _TIME_KEYS
    if shared:
        return any(_norm(fact.structured[key]) != _norm(theirs[key]) for key in shared)
    return _norm(fact.text) != _norm(record.content.raw)


def _norm(value: Any) -> str:
    return " ".join(str(value).lower().split())


def keeps_details(fact: Fact, record: MemoryRecord) -> bool:
    """Whether ``fact`` could restate ``record`` without losing or changing a number, code,
    name or date of it (:func:`chatmem.details.agree`)."""
    return agree(details_of(fact.text), details_of(record.content.raw))


def says_the_same(text: str, other: str, similarity: float | None, config: WriteConfig) -> bool:
    """Whether two texts state one fact: the same details, and a cosine above
    ``update_similarity`` or the same words (case and punctuation aside)."""
    if details_of(text) != details_of(other):
        return False
    if similarity is not None and similarity > config.update_similarity:
        return True
    return _WORDS.findall(text.lower()) == _WORDS.findall(other.lower())


def decide(
    fact: Fact,
    nearest: Sequence[Existing],
    same_subject: Sequence[Existing],
    config: WriteConfig,
    elsewhere: Sequence[Existing] = (),
) -> Decision:
    """The rule decision for one screened fact (see the module docstring). ``elsewhere``
    holds the nearest current memories of the other fact types."""
    if same_subject:
        agreeing = [
            e
            for e in same_subject
            if not values_differ(fact, e.record) and keeps_details(fact, e.record)
        ]
        if agreeing:
            return Decision(Action.UPDATE, (agreeing[0].record.id,), "same subject, same value")
        ids = tuple(e.record.id for e in same_subject)
        return Decision(Action.SUPERSEDE, ids, "same subject, another value")
    similar = [
        e
        for e in nearest
        if (e.similarity or 0.0) > config.update_similarity and keeps_details(fact, e.record)
    ]
    best = max(similar, key=lambda e: e.similarity or 0.0, default=None)
    if best is not None:
        return Decision(Action.UPDATE, (best.record.id,), f"similarity {best.similarity:.3f}")
    return restated_across_types(fact, elsewhere, config) or Decision(Action.CREATE, (), "new")


def restated_across_types(
    fact: Fact, elsewhere: Sequence[Existing], config: WriteConfig
) -> Decision | None:
    """What ``fact`` does when a memory of another type already says it: nothing (``SKIP``)
    when that memory's type is as specific, else ``UPDATE`` it to the fact's type. None when
    no memory of ``elsewhere`` says the same (:func:`says_the_same`)."""
    same = [
        e for e in elsewhere if says_the_same(fact.text, e.record.content.raw, e.similarity, config)
    ]
    if not same:
        return None
    best = max(same, key=lambda e: (_specificity(e.record.type), e.similarity or 0.0))
    reason = f"restates a {best.record.type} memory"
    if _specificity(fact.type) > _specificity(best.record.type):
        return Decision(Action.UPDATE, (best.record.id,), reason)
    return Decision(Action.SKIP, (best.record.id,), reason)


def duplicates(facts: Sequence[Fact], vectors: Sequence[Vector], config: WriteConfig) -> set[int]:
    """Positions of the facts of one batch that another fact of another type restates (see
    :func:`says_the_same`; the same subject with the same details counts too). Of two, the
    more specific type is kept, else the earlier fact."""
    dropped: set[int] = set()
    for i, j in itertools.combinations(range(len(facts)), 2):
        first, second = facts[i], facts[j]
        if i in dropped or j in dropped or first.type == second.type:
            continue
        if _restate_each_other(first, second, _cosine(vectors[i], vectors[j]), config):
            keep_second = _specificity(second.type) > _specificity(first.type)
            dropped.add(i if keep_second else j)
    return dropped


def _restate_each_other(first: Fact, second: Fact, cosine: float, config: WriteConfig) -> bool:
    if says_the_same(first.text, second.text, cosine, config):
        return True
    subject = subject_key(first.subject)
    return (
        subject is not None
        and subject == subject_key(second.subject)
        and details_of(first.text) == details_of(second.text)
    )


def _cosine(a: Vector, b: Vector) -> float:
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b)) / norms if norms else 0.0


def _specificity(kind: MemoryType) -> int:
    return _SPECIFICITY.get(kind, 0)


def memory_id(batch_id: str, index: int) -> str:
    """The id of the memory that fact ``index`` of batch ``batch_id`` creates: the same on
    every run of the batch, so a second run finds what the first one wrote."""
    return hashlib.blake2b(f"{batch_id}\x1f{index}".encode(), digest_size=16).hexdigest()


def close_time(old: MemoryRecord, new_from: datetime) -> datetime:
    """When a superseded memory stops being valid: where the new one starts, but never
    before the old one started (a record's interval cannot end before it begins)."""
    started = old.time.valid_from
    return new_from if started is None or started <= new_from else started


def created_record(
    fact: Fact,
    key: SessionKey,
    index: int,
    batch_id: str,
    now: datetime,
    supersedes: Sequence[str] = (),
    project_id: str | None = None,
) -> MemoryRecord:
    """The memory fact ``index`` creates (in ``project_id`` when given); with ``supersedes``,
    it links to the memories it replaces and starts being valid when the fact says (at the
    latest, now)."""
    valid_from = fact.valid_from
    if supersedes:
        valid_from = now if valid_from is None or valid_from > now else valid_from
    user_metadata: dict[str, Any] = {BATCH_KEY: batch_id, FACTS_KEY: [index]}
    subject = subject_key(fact.subject)
    if subject is not None:
        user_metadata[SUBJECT_KEY] = subject
    return MemoryRecord.checked(
        {
            "id": memory_id(batch_id, index),
            "tenant_id": key.tenant_id,
            "user_id": key.user_id,
            "session_id": key.session_id,
            "project_id": project_id,
            "type": fact.type,
            "content": {
                "raw": textlib.clip(fact.text),
                "structured": dict(fact.structured) or None,
            },
            "metadata": {
                "importance": fact.importance,
                "confidence": fact.confidence,
                "tags": list(dict.fromkeys(fact.tags))[:_MAX_TAGS],
                "source": fact.source,
            },
            "time": {"created_at": now, "updated_at": now, "valid_from": valid_from},
            "relations": [{"type": RelationType.UPDATES, "target_id": t} for t in supersedes],
            "provenance": list(dict.fromkeys(fact.provenance)),
            "user_metadata": user_metadata,
        },
        "fact",
    )


def updated_record(
    old: MemoryRecord, fact: Fact, index: int, batch_id: str, now: datetime
) -> MemoryRecord:
    """``old`` restated by ``fact``: the newer wording and values, the stronger scores, the
    union of tags and provenance, version + 1."""
    same_batch = old.user_metadata.get(BATCH_KEY) == batch_id
    earlier = old.user_metadata.get(FACTS_KEY) if same_batch else None
    facts = sorted({*(earlier if isinstance(earlier, list) else []), index})
    user_metadata = {**old.user_metadata, BATCH_KEY: batch_id, FACTS_KEY: facts}
    subject = subject_key(fact.subject)
    if subject is not None:
        user_metadata[SUBJECT_KEY] = subject
    structured = {**(old.content.structured or {}), **fact.structured}
    return MemoryRecord.checked(
        {
            **old.model_dump(),
            # A restatement across types moves the memory to the fact's (more specific) type.
            "type": fact.type,
            "content": {"raw": textlib.clip(fact.text), "structured": structured or None},
            "metadata": {
                "importance": max(old.metadata.importance, fact.importance),
                "confidence": max(old.metadata.confidence, fact.confidence),
                "tags": list(dict.fromkeys([*old.metadata.tags, *fact.tags]))[:_MAX_TAGS],
                "source": fact.source,
                "version": old.metadata.version + 1,
            },
            "time": {**old.time.model_dump(), "updated_at": now},
            "provenance": list(dict.fromkeys([*old.provenance, *fact.provenance])),
            "user_metadata": user_metadata,
        },
        "fact",
    )


def closed_record(old: MemoryRecord, at: datetime, now: datetime) -> MemoryRecord:
    """``old`` no longer valid from ``at`` on (superseded), version + 1."""
    return MemoryRecord.checked(
        {
            **old.model_dump(),
            "metadata": {**old.metadata.model_dump(), "version": old.metadata.version + 1},
            "time": {**old.time.model_dump(), "updated_at": now, "valid_to": at},
        }
    )


def is_current(record: MemoryRecord, now: datetime) -> bool:
    """Not superseded at ``now``. A memory that starts in the future (a plan) counts."""
    return record.time.valid_to is None or record.time.valid_to > now


# -- the batched decision of a model ---------------------------------------------------------


@dataclass(frozen=True)
class Question:
    """One fact put to the decision model, with the memories it may touch."""

    index: int
    fact: Fact
    candidates: tuple[Existing, ...]


def decision_request(questions: Sequence[Question], prompt: str) -> list[dict[str, Any]]:
    """The chat messages asking the model about ``questions`` (pure)."""
    lines: list[str] = []
    for question in questions:
        lines.append(f"NEW fact {question.index}: {question.fact.text}")
        for existing in question.candidates:
            lines.append(f"  EXISTING [{existing.record.id}] {existing.record.content.raw}")
    return [
        {"role": "system", "content": prompt},
        {"role": "user", "content": "\n".join(lines)},
    ]


def parse_decisions(value: Any, questions: Sequence[Question]) -> dict[int, Decision]:
    """The model's valid decisions by fact index; anything malformed is left out (the rules
    decide those facts)."""
    allowed = {q.index: {e.record.id for e in q.candidates} for q in questions}
    decisions: dict[int, Decision] = {}
    items = value if isinstance(value, list) else []
    for item in items:
        parsed = _parse_decision(item, allowed)
        if parsed is not None and parsed[0] not in decisions:
            decisions[parsed[0]] = parsed[1]
    return decisions


def _parse_decision(item: Any, allowed: Mapping[int, set[str]]) -> tuple[int, Decision] | None:
    if not isinstance(item, Mapping):
        return None
    index = item.get("fact")
    if isinstance(index, str) and index.strip().isdigit():
        index = int(index)
    if not isinstance(index, int) or isinstance(index, bool) or index not in allowed:
        return None
    try:
        action = Action(str(item.get("action", "")).strip().lower())
    except ValueError:
        return None
    raw = item.get("targets", item.get("target"))
    named = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    targets = tuple(dict.fromkeys(str(t) for t in named if str(t) in allowed[index]))
    valid = {
        Action.CREATE: True,
        Action.SKIP: True,
        Action.UPDATE: len(targets) == 1,
        Action.SUPERSEDE: len(targets) >= 1,
    }[action]
    if not valid:
        return None
    kept = targets if action in (Action.UPDATE, Action.SUPERSEDE) else ()
    return index, Decision(action, kept, "model")


# -- the applier -----------------------------------------------------------------------------


class WritePolicy:
    """Applies the write policy to a batch of facts (see the module docstring).

    ``model`` makes one batched decision call per batch; without it the rules decide.
    """

    def __init__(
        self,
        config: WriteConfig | None = None,
        *,
        model: ChatModel | None = None,
        prompt: str = DECISION_PROMPT,
    ) -> None:
        self.config = config or WriteConfig()
        self.model = model
        self.prompt = prompt

    def apply(
        self,
        long_term: LongTermMemory,
        key: SessionKey,
        facts: Sequence[Fact],
        *,
        batch_id: str | None = None,
        now: datetime | None = None,
        project_id: str | None = None,
    ) -> WriteReport:
        """Store ``facts`` for ``key``'s user and log one line. Give the queue's
        ``batch_id`` to make a second run of the same batch write nothing new. With
        ``project_id``, the facts are that project's: compared with its memories only, and
        stored in it."""
        batch = _Batch(self, long_term, key, batch_id or new_id(), now or utcnow(), project_id)
        report = batch.run(facts)
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(report.skipped_reasons.items()))
        logger.info(
            "%s (batch %s, user %s%s)",
            report.line(),
            batch.batch_id,
            key.user_id,
            f"; skipped: {reasons}" if reasons else "",
            extra={
                "batch_id": batch.batch_id,
                "tenant_id": key.tenant_id,
                "user_id": key.user_id,
                "stored": report.stored,
                "updated": report.updated,
                "superseded": report.superseded,
                "skipped": report.skipped,
            },
        )
        return report

    def ask_model(self, questions: Sequence[Question]) -> dict[int, Decision]:
        """The model's decisions for ``questions`` (one call); none when there is no model,
        no question, or the call fails (the rules decide then; a warning is logged)."""
        if self.model is None or not questions:
            return {}
        try:
            value = complete_json(
                self.model, decision_request(questions, self.prompt), expect="array"
            )
        except LLMError as exc:
            logger.warning("write decision by the model failed, the rules decide: %s", exc)
            return {}
        return parse_decisions(value, questions)


class _Candidates(NamedTuple):
    """What one fact is compared with (see :meth:`_Batch._candidates`)."""

    nearest: list[Existing]
    same: list[Existing]
    elsewhere: list[Existing]


class _Batch:
    """One run of the policy over one batch: its scope, clock, counters and store calls."""

    def __init__(
        self,
        policy: WritePolicy,
        long_term: LongTermMemory,
        key: SessionKey,
        batch_id: str,
        now: datetime,
        project_id: str | None = None,
    ) -> None:
        self.policy = policy
        self.config = policy.config
        self.store = long_term.store
        self.embedder = long_term.embedder
        self.key = key
        self.batch_id = batch_id
        self.now = now
        self.project_id = project_id
        self.scope = Filter(tenant_id=key.tenant_id, user_id=key.user_id, project_id=project_id)
        self.info = EmbeddingInfo(model=self.embedder.model, dimension=self.embedder.dimension)
        self.counts: Counter[Action] = Counter()
        self.skipped: Counter[str] = Counter()
        self.touched: list[str] = []

    def run(self, facts: Sequence[Fact]) -> WriteReport:
        # A claim of wrongdoing by someone else is kept as the user's word (SPEC L9).
        facts = [as_claim(fact) for fact in facts]
        applied = self._applied_facts()
        todo: list[int] = []
        for index, fact in enumerate(facts):
            reason = "already applied" if index in applied else screen(fact, self.config)
            if reason is None:
                todo.append(index)
            else:
                self.skipped[reason] += 1
        vectors = self._embed([facts[i] for i in todo])
        dropped = duplicates([facts[i] for i in todo], vectors, self.config)
        if dropped:
            self.skipped["duplicate in batch"] += len(dropped)
            todo = [i for n, i in enumerate(todo) if n not in dropped]
            vectors = [v for n, v in enumerate(vectors) if n not in dropped]
        advice = self._advice(facts, todo, vectors)
        for index, vector in zip(todo, vectors, strict=True):
            self._write(index, facts[index], vector, advice.get(index))
        return WriteReport(
            stored=self.counts[Action.CREATE],
            updated=self.counts[Action.UPDATE],
            superseded=self.counts[Action.SUPERSEDE],
            skipped=sum(self.skipped.values()),
            skipped_reasons=dict(self.skipped),
            memory_ids=tuple(self.touched),
        )

    def _embed(self, facts: Sequence[Fact]) -> list[Vector]:
        if not facts:
            return []
        return list(self.embedder.embed([fact.text for fact in facts]))

    # -- idempotency ---------------------------------------------------------------------

    def _applied_facts(self) -> set[int]:
        """Indexes of facts an earlier run of this batch wrote; finishes any supersede that
        run left half done (new memory stored, old one not yet closed)."""
        scope = self.scope.model_copy(update={"metadata": {BATCH_KEY: self.batch_id}})
        written = self._all(scope)
        applied: set[int] = set()
        for record in written:
            marker = record.user_metadata.get(FACTS_KEY)
            applied.update(i for i in marker or [] if isinstance(i, int))
            targets = [r.target_id for r in record.relations if r.type is RelationType.UPDATES]
            self._close(targets, by=record)
        return applied

    def _all(self, scope: Filter) -> list[MemoryRecord]:
        records: list[MemoryRecord] = []
        cursor: str | None = None
        while True:
            page = self.store.list(scope, 500, cursor)
            records.extend(page.records)
            if page.next_cursor is None:
                return records
            cursor = page.next_cursor

    # -- candidates and decisions --------------------------------------------------------

    def _candidates(self, fact: Fact, vector: Vector) -> _Candidates:
        """The nearest current memories of the fact's type, those with its subject, and the
        nearest of the other fact types."""
        typed = self.scope.model_copy(update={"types": frozenset({fact.type})})
        nearest, cosine = self._nearest(typed, vector)
        subject = subject_key(fact.subject)
        same: list[Existing] = []
        if subject is not None:
            by_subject = typed.model_copy(update={"metadata": {SUBJECT_KEY: subject}})
            # Every page: a long history of superseded values must not hide the current one.
            matches = self._all(by_subject)
            same = [Existing(r, cosine.get(r.id)) for r in matches if is_current(r, self.now)]
        others = frozenset(_SPECIFICITY) - {fact.type}
        elsewhere, _ = self._nearest(self.scope.model_copy(update={"types": others}), vector)
        return _Candidates(nearest, same, elsewhere)

    def _nearest(
        self, scope: Filter, vector: Vector
    ) -> tuple[list[Existing], dict[str, float | None]]:
        """The current memories of ``scope`` nearest to ``vector``, and every cosine found."""
        found = self.store.search(
            SearchQuery(filter=scope, vector=vector, candidates=self.config.candidates)
        )
        cosine = {c.id: c.vector_score for c in found}
        records = self.store.get(list(cosine), scope)
        return [Existing(r, cosine[r.id]) for r in records if is_current(r, self.now)], cosine

    def _advice(
        self, facts: Sequence[Fact], todo: Sequence[int], vectors: Sequence[Vector]
    ) -> dict[int, Decision]:
        """The model's decisions, asked once for every fact that has candidates."""
        if self.policy.model is None:
            return {}
        questions = []
        for index, vector in zip(todo, vectors, strict=True):
            found = self._candidates(facts[index], vector)
            related = [
                e for e in found.nearest if (e.similarity or 0.0) >= self.config.related_similarity
            ]
            shown = {e.record.id: e for e in [*found.same, *related]}
            if shown:
                questions.append(Question(index, facts[index], tuple(shown.values())))
        return self.policy.ask_model(questions)

    def _decision(self, fact: Fact, found: _Candidates, advice: Decision | None) -> Decision:
        """The model's advice when it still fits what is stored now, else the rules'.

        Advice is dropped when a target stopped being current, or when a memory this batch
        wrote is among the candidates (the model was asked before it existed). The model
        sees memories of the fact's type only: a ``CREATE`` it advises still yields to a
        memory of another type that says the same.
        """
        live = {e.record.id: e.record for e in [*found.nearest, *found.same]}
        ours = any(r.user_metadata.get(BATCH_KEY) == self.batch_id for r in live.values())
        if advice is not None and not ours and all(t in live for t in advice.targets):
            if advice.action is Action.CREATE:
                return restated_across_types(fact, found.elsewhere, self.config) or advice
            return advice
        return decide(fact, found.nearest, found.same, self.config, found.elsewhere)

    # -- writes --------------------------------------------------------------------------

    def _write(self, index: int, fact: Fact, vector: Vector, advice: Decision | None) -> None:
        found = self._candidates(fact, vector)
        decision = self._decision(fact, found, advice)
        live = {e.record.id: e.record for e in [*found.nearest, *found.same, *found.elsewhere]}
        if decision.action is Action.SKIP:
            self.skipped["already known"] += 1
            return
        if decision.action is Action.UPDATE:
            old = live[decision.targets[0]]
            new = updated_record(old, fact, index, self.batch_id, self.now)
            reason = f"write policy: {decision.reason} (batch {self.batch_id})"
            self.store.update([Change(new, vector, old.metadata.version, reason)])
            self.touched.append(new.id)
        else:
            supersedes = decision.targets if decision.action is Action.SUPERSEDE else ()
            record = created_record(
                fact, self.key, index, self.batch_id, self.now, supersedes, self.project_id
            )
            self.store.put([Entry(record.model_copy(update={"embedding": self.info}), vector)])
            self.touched.append(record.id)
            self._close(list(supersedes), by=record)
        self.counts[decision.action] += 1

    def _close(self, ids: Sequence[str], by: MemoryRecord | None = None) -> None:
        """End the validity of the still-current memories among ``ids`` (superseded)."""
        if not ids:
            return
        olds = [r for r in self.store.get(list(ids), self.scope) if is_current(r, self.now)]
        if not olds:
            return
        new_from = self.now
        if by is not None and by.time.valid_from is not None:
            new_from = by.time.valid_from
        reason = f"write policy: superseded{f' by {by.id}' if by else ''} (batch {self.batch_id})"
        self.store.update(
            [
                Change(
                    closed_record(old, close_time(old, new_from), self.now),
                    None,
                    old.metadata.version,
                    reason,
                )
                for old in olds
            ]
        )


__all__ = [
    "BATCH_KEY",
    "DECISION_PROMPT",
    "FACTS_KEY",
    "SUBJECT_KEY",
    "Action",
    "Decision",
    "Existing",
    "Question",
    "WriteConfig",
    "WritePolicy",
    "WriteReport",
    "close_time",
    "closed_record",
    "created_record",
    "decide",
    "decision_request",
    "duplicates",
    "is_current",
    "keeps_details",
    "memory_id",
    "parse_decisions",
    "restated_across_types",
    "says_the_same",
    "screen",
    "subject_key",
    "updated_record",
    "values_differ",
]
