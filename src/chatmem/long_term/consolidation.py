"""Consolidation and reflection (SPEC L10): fewer, better memories, and insights.

**consolidate** clusters a user's current memories of one type by the cosine similarity of
their stored vectors (a leader clustering: the memory with the most unclaimed neighbours at
or above ``similarity`` leads a cluster of those neighbours; clusters under ``min_cluster``
are left alone), and merges each cluster into one summary memory:

- with a ``model``, one call per cluster writes the summary (:data:`CONSOLIDATION_PROMPT`);
- without one (or when the call fails), the summary is extractive: the members' distinct
  texts, the most central first.

The summary links ``related_to`` each source; each source gets a ``part_of`` relation to the
summary and, by default, ``valid_to = now``: it leaves the current view but stays stored and
answerable with ``Filter(valid_at=<before>)``, and nothing is deleted. With
``close_sources=False`` the sources stay current.

**reflect** finds recurring patterns (a tag, a subject or a content word shared by at least
``min_evidence`` current memories) and turns each into a ``reflective`` memory linked
``related_to`` its evidence; the model, when given, words all insights in one call
(:data:`REFLECTION_PROMPT`). A pattern already reflected on with the same evidence is not
written again; new evidence updates the insight (version + 1).

Neither mixes readers (SPEC L7): memories are clustered, and patterns found, only among
memories open to the same roles (``access_control.allowed_roles``), and what is written
from them keeps those roles, so a summary or an insight never shows a reader a memory's
words that the memory itself would not.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from chatmem import checks
from chatmem import text as textlib
from chatmem.errors import LLMError
from chatmem.llm.base import ChatModel
from chatmem.llm.jsonfix import complete_json
from chatmem.long_term.facade import LongTermMemory
from chatmem.long_term.write_policy import SUBJECT_KEY, is_current
from chatmem.records import (
    Filter,
    MemoryRecord,
    MemoryType,
    RelationType,
    Source,
    utcnow,
)
from chatmem.stores.base import Change

logger = logging.getLogger("chatmem.consolidation")

#: The system message asking a model to merge one cluster. The user message lists the
#: memories, one per line.
CONSOLIDATION_PROMPT = """\
You merge related memories about a user into ONE memory. Keep every distinct detail \
(names, numbers, dates, places), drop repetition, write in the third person ("User ..."), \
and keep it short. Return only a JSON object: {"text": "<the merged memory>", \
"tags": ["<a few short lowercase keywords>"]}.
"""

#: The system message asking a model to word insights. The user message lists each pattern
#: with its evidence.
REFLECTION_PROMPT = """\
You read patterns found in a user's memories and write one insight per pattern: what it \
says about the user that helps a future conversation ("User cares about budget travel: \
give cost breakdowns"). Stay within what the evidence shows. Return only a JSON object: \
{"insights": [{"pattern": "<the pattern id as given>", "text": "<the insight>"}]}.
"""

#: Most characters of an extractive summary.
MAX_SUMMARY_CHARS = 1500
#: Tags too general to be a pattern on their own (they name a type or a rule family).
GENERIC_TAGS = frozenset({"fact", "preference", "likes", "dislikes", "identity", "event", "plan"})
#: Words too common in third-person facts to be a topic ("User likes …", "User has …").
GENERIC_WORDS = frozenset(
    {
        "user",
        "likes",
        "loves",
        "enjoys",
        "prefers",
        "hates",
        "dislikes",
        "wants",
        "has",
        "had",
        "lives",
        "works",
        "went",
        "goes",
        "going",
        "plans",
        "planning",
        "named",
        "called",
    }
)
#: Marks a summary memory (the number of sources) and a reflective memory (its pattern).
SUMMARY_KEY = "consolidated_from"
PATTERN_KEY = "pattern"
_MAX_TAGS = 16
_MAX_PROVENANCE = 200
#: Kinds of pattern, strongest first: an exact tag or subject beats a shared word.
_PATTERN_KINDS = ("subject", "tag", "word")


# -- pure parts ------------------------------------------------------------------------------


def clusters(
    vectors: npt.NDArray[np.float32], similarity: float, min_cluster: int
) -> list[list[int]]:
    """Groups of row indexes whose vectors are within ``similarity`` (cosine) of their
    cluster's leader; each group has at least ``min_cluster`` rows, most central first."""
    if len(vectors) == 0:
        return []
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = vectors / np.where(norms == 0, 1.0, norms)
    near = (unit @ unit.T) >= similarity
    free = np.ones(len(vectors), dtype=bool)
    found: list[list[int]] = []
    while True:
        counts = (near & free[None, :]).sum(axis=1) * free
        leader = int(np.argmax(counts))
        if counts[leader] < min_cluster:
            return found
        members = np.flatnonzero(near[leader] & free)
        centrality = (unit[members] @ unit[members].T).sum(axis=1)
        found.append([int(members[i]) for i in np.argsort(-centrality, kind="stable")])
        free[members] = False


def extractive_summary(texts: Sequence[str]) -> str:
    """The distinct texts joined, in the order given, within ``MAX_SUMMARY_CHARS``."""
    kept: list[str] = []
    seen: set[str] = set()
    length = 0
    for text in texts:
        clean = " ".join(text.split()).rstrip(".")
        if clean.lower() in seen:
            continue
        if kept and length + len(clean) + 2 > MAX_SUMMARY_CHARS:
            break
        seen.add(clean.lower())
        kept.append(clean)
        length += len(clean) + 2
    return "; ".join(kept)[:MAX_SUMMARY_CHARS]


@dataclass(frozen=True)
class Pattern:
    """A recurring pattern: ``key`` is ``"<kind>:<value>"``, ``evidence`` the memory ids."""

    key: str
    kind: str
    value: str
    evidence: tuple[str, ...]


def find_patterns(
    records: Sequence[MemoryRecord], min_evidence: int, max_patterns: int | None = 10
) -> list[Pattern]:
    """Subjects, tags and content words shared by at least ``min_evidence`` records (pure).

    A pattern whose evidence is the same as a stronger one's (subject, then tag, then word;
    then more evidence) is left out; at most ``max_patterns`` come back.
    """
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for record in records:
        for kind, value in _features(record):
            found[(kind, value)].append(record.id)
    ranked = sorted(
        ((k, v, ids) for (k, v), ids in found.items() if len(set(ids)) >= min_evidence),
        key=lambda item: (_PATTERN_KINDS.index(item[0]), -len(set(item[2])), item[1]),
    )
    patterns: list[Pattern] = []
    seen: set[frozenset[str]] = set()
    for kind, value, ids in ranked:
        evidence = tuple(dict.fromkeys(ids))
        if frozenset(evidence) in seen:
            continue
        seen.add(frozenset(evidence))
        patterns.append(Pattern(f"{kind}:{value}", kind, value, evidence))
    return patterns[:max_patterns]


def _features(record: MemoryRecord) -> set[tuple[str, str]]:
    features = {("tag", t.lower()) for t in record.metadata.tags if t.lower() not in GENERIC_TAGS}
    subject = record.user_metadata.get(SUBJECT_KEY)
    if isinstance(subject, str) and subject:
        features.add(("subject", subject))
    words = textlib.query_terms(record.content.raw)
    features.update(("word", w) for w in words if w not in GENERIC_WORDS and len(w) > 2)
    return features


def reflection_text(pattern: Pattern, evidence: Sequence[MemoryRecord]) -> str:
    """An extractive insight: the pattern and a few of its memories."""
    examples = extractive_summary([r.content.raw for r in evidence[:3]])
    noun = {"subject": "subject", "tag": "theme", "word": "topic"}[pattern.kind]
    return (
        f"Recurring {noun} in the user's memories: {pattern.value} "
        f"({len(pattern.evidence)} memories), e.g. {examples}"
    )


# -- consolidation ---------------------------------------------------------------------------


def consolidate(
    long_term: LongTermMemory,
    user_id: str,
    *,
    tenant_id: str = "default",
    model: ChatModel | None = None,
    min_cluster: int = 3,
    similarity: float = 0.75,
    close_sources: bool = True,
    now: datetime | None = None,
    prompt: str = CONSOLIDATION_PROMPT,
    max_memories: int = 5000,
) -> list[MemoryRecord]:
    """Merge each cluster of a user's related current memories into one summary memory
    (see the module docstring); returns the summaries written."""
    checks.whole(min_cluster, "min_cluster", low=2)
    checks.number(similarity, "similarity")
    checks.whole(max_memories, "max_memories")
    moment = now or utcnow()
    scope = Filter(tenant_id=tenant_id, user_id=user_id)
    records = [
        r
        for r in _current(long_term, scope, moment, max_memories)
        if r.type is not MemoryType.REFLECTIVE and SUMMARY_KEY not in r.user_metadata
    ]
    by_type: dict[tuple[MemoryType, _Readers], list[MemoryRecord]] = defaultdict(list)
    for record in records:
        by_type[record.type, _readers(record)].append(record)
    written: list[MemoryRecord] = []
    for group in by_type.values():
        vectors = long_term.store.vectors([r.id for r in group], scope)
        usable = [r for r in group if r.id in vectors]
        matrix = np.stack([vectors[r.id] for r in usable]) if usable else np.zeros((0, 1))
        for members in clusters(matrix.astype(np.float32), similarity, min_cluster):
            cluster = [usable[i] for i in members]
            written.append(_merge(long_term, cluster, model, prompt, close_sources, moment))
    logger.info("consolidated %d cluster(s) of user %s", len(written), user_id)
    return written


def _merge(
    long_term: LongTermMemory,
    cluster: Sequence[MemoryRecord],
    model: ChatModel | None,
    prompt: str,
    close_sources: bool,
    now: datetime,
) -> MemoryRecord:
    """Write one cluster's summary and link its sources to it."""
    text, tags = _summary_of(cluster, model, prompt)
    [summary] = long_term.add_records([_summary_record(cluster, text, tags, model, now)])
    changes = [
        Change(
            _as_part_of(source, summary.id, close_sources, now),
            None,
            source.metadata.version,
            f"consolidated into {summary.id}",
        )
        for source in cluster
    ]
    long_term.store.update(changes)
    return summary


def _summary_of(
    cluster: Sequence[MemoryRecord], model: ChatModel | None, prompt: str
) -> tuple[str, list[str]]:
    """(text, tags) of a cluster's summary: the model's, else extractive."""
    tags = list(dict.fromkeys(t for r in cluster for t in r.metadata.tags))[:_MAX_TAGS]
    extractive = extractive_summary([r.content.raw for r in cluster])
    if model is None:
        return extractive, tags
    lines = "\n".join(f"- {r.content.raw}" for r in cluster)
    request = [{"role": "system", "content": prompt}, {"role": "user", "content": lines}]
    try:
        answer = complete_json(model, request, expect="object")
    except LLMError as exc:
        logger.warning("consolidation by the model failed, summary is extractive: %s", exc)
        return extractive, tags
    text = answer.get("text") if isinstance(answer, Mapping) else None
    if not isinstance(text, str) or not text.strip():
        logger.warning("the model's summary has no text; summary is extractive")
        return extractive, tags
    return " ".join(text.split()), _merged_tags(tags, answer.get("tags"))


def _merged_tags(tags: list[str], more: Any) -> list[str]:
    named = more if isinstance(more, list) else []
    extra = [t.strip().lower()[:64] for t in named if isinstance(t, str) and t.strip()]
    return list(dict.fromkeys([*tags, *extra]))[:_MAX_TAGS]


def _summary_record(
    cluster: Sequence[MemoryRecord],
    text: str,
    tags: list[str],
    model: ChatModel | None,
    now: datetime,
) -> MemoryRecord:
    lead = cluster[0]
    return MemoryRecord.checked(
        {
            "tenant_id": lead.tenant_id,
            "user_id": lead.user_id,
            "agent_id": lead.agent_id,
            "project_id": lead.project_id,
            "type": lead.type,
            "scope": lead.scope,
            "content": {"raw": text, "summary": None if model else lead.content.raw},
            "metadata": {
                "importance": max(r.metadata.importance for r in cluster),
                "confidence": sum(r.metadata.confidence for r in cluster) / len(cluster),
                "tags": tags,
                "source": Source.SYSTEM_GENERATED,
            },
            # Valid from when it replaces its sources, so a look at an earlier moment sees them.
            "time": {"created_at": now, "updated_at": now, "valid_from": now},
            "relations": [{"type": RelationType.RELATED_TO, "target_id": r.id} for r in cluster],
            "access_control": lead.access_control.model_dump(),
            "provenance": _provenance(cluster),
            "user_metadata": {
                SUMMARY_KEY: len(cluster),
                "method": "llm" if model else "extractive",
            },
        }
    )


#: Who may read a memory: its roles, sorted (empty: every reader of the user).
_Readers = tuple[str, ...]


def _readers(record: MemoryRecord) -> _Readers:
    return tuple(sorted(set(record.access_control.allowed_roles)))


def _as_part_of(source: MemoryRecord, summary_id: str, close: bool, now: datetime) -> MemoryRecord:
    relations = [r.model_dump() for r in source.relations]
    relations.append({"type": RelationType.PART_OF, "target_id": summary_id})
    time = {**source.time.model_dump(), "updated_at": now}
    if close:
        started = source.time.valid_from
        time["valid_to"] = now if started is None or started <= now else started
    return MemoryRecord.checked(
        {
            **source.model_dump(),
            "metadata": {**source.metadata.model_dump(), "version": source.metadata.version + 1},
            "time": time,
            "relations": relations,
        }
    )


def _provenance(records: Sequence[MemoryRecord]) -> list[str]:
    return list(dict.fromkeys(p for r in records for p in r.provenance))[:_MAX_PROVENANCE]


def _current(
    long_term: LongTermMemory, scope: Filter, now: datetime, limit: int
) -> list[MemoryRecord]:
    """Up to ``limit`` of the scope's memories that are current at ``now``."""
    found: list[MemoryRecord] = []
    cursor: str | None = None
    while len(found) < limit:
        page = long_term.store.list(scope, 500, cursor)
        found.extend(r for r in page.records if is_current(r, now))
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    return found[:limit]


# -- reflection ------------------------------------------------------------------------------


def reflect(
    long_term: LongTermMemory,
    user_id: str,
    *,
    tenant_id: str = "default",
    model: ChatModel | None = None,
    min_evidence: int = 3,
    now: datetime | None = None,
    prompt: str = REFLECTION_PROMPT,
    max_patterns: int | None = 10,
    max_memories: int = 5000,
) -> list[MemoryRecord]:
    """Turn recurring patterns of a user's current memories into reflective memories
    (see the module docstring); returns those written or updated."""
    checks.whole(min_evidence, "min_evidence", low=2)
    if max_patterns is not None:  # None: all of them
        max_patterns = checks.whole(max_patterns, "max_patterns", low=0)
    max_memories = checks.whole(max_memories, "max_memories")
    moment = now or utcnow()
    scope = Filter(tenant_id=tenant_id, user_id=user_id)
    current = _current(long_term, scope, moment, max_memories)
    existing = {
        (_readers(r), r.user_metadata.get(PATTERN_KEY)): r
        for r in current
        if r.type is MemoryType.REFLECTIVE
    }
    sources = [r for r in current if r.type is not MemoryType.REFLECTIVE]
    by_id = {r.id: r for r in sources}
    by_readers: dict[_Readers, list[MemoryRecord]] = defaultdict(list)
    for record in sources:
        by_readers[_readers(record)].append(record)
    written = []
    for readers, group in by_readers.items():
        patterns = [
            p
            for p in find_patterns(group, min_evidence, max_patterns)
            if not _unchanged(existing.get((readers, p.key)), p)
        ]
        texts = _insights(patterns, by_id, model, prompt)
        written += [
            _write_insight(
                long_term, p, texts[p.key], by_id, existing.get((readers, p.key)), model, moment
            )
            for p in patterns
        ]
    logger.info("reflected %d pattern(s) of user %s", len(written), user_id)
    return written


def _unchanged(previous: MemoryRecord | None, pattern: Pattern) -> bool:
    if previous is None:
        return False
    linked = {r.target_id for r in previous.relations if r.type is RelationType.RELATED_TO}
    return linked == set(pattern.evidence)


def _insights(
    patterns: Sequence[Pattern],
    by_id: Mapping[str, MemoryRecord],
    model: ChatModel | None,
    prompt: str,
) -> dict[str, str]:
    """Each pattern's insight text: the model's where it gave one, else extractive."""
    texts = {p.key: reflection_text(p, [by_id[i] for i in p.evidence]) for p in patterns}
    if model is None or not patterns:
        return texts
    lines = []
    for pattern in patterns:
        lines.append(f"PATTERN {pattern.key}:")
        lines.extend(f"  - {by_id[i].content.raw}" for i in pattern.evidence[:10])
    request = [{"role": "system", "content": prompt}, {"role": "user", "content": "\n".join(lines)}]
    try:
        answer = complete_json(model, request, expect="array")
    except LLMError as exc:
        logger.warning("reflection by the model failed, insights are extractive: %s", exc)
        return texts
    for item in answer:
        if isinstance(item, Mapping) and item.get("pattern") in texts:
            text = item.get("text")
            if isinstance(text, str) and text.strip():
                texts[str(item["pattern"])] = " ".join(text.split())
    return texts


def _write_insight(
    long_term: LongTermMemory,
    pattern: Pattern,
    text: str,
    by_id: Mapping[str, MemoryRecord],
    previous: MemoryRecord | None,
    model: ChatModel | None,
    now: datetime,
) -> MemoryRecord:
    evidence = [by_id[i] for i in pattern.evidence]
    fields: dict[str, Any] = {
        "type": MemoryType.REFLECTIVE,
        "content": {"raw": text},
        "relations": [{"type": RelationType.RELATED_TO, "target_id": i} for i in pattern.evidence],
        "provenance": _provenance(evidence),
        "user_metadata": {PATTERN_KEY: pattern.key, "method": "llm" if model else "extractive"},
    }
    meta = {
        "importance": max(r.metadata.importance for r in evidence),
        "confidence": 0.7 if model else 0.6,
        "tags": ["reflection", pattern.value[:64]],
        "source": Source.SYSTEM_GENERATED,
    }
    if previous is None:
        lead = evidence[0]
        record = MemoryRecord.checked(
            {
                **fields,
                "tenant_id": lead.tenant_id,
                "user_id": lead.user_id,
                "access_control": lead.access_control.model_dump(),
                "metadata": meta,
                "time": {"created_at": now, "updated_at": now},
            }
        )
        return long_term.add_records([record])[0]
    new = MemoryRecord.checked(
        {
            **previous.model_dump(),
            **fields,
            "metadata": {**meta, "version": previous.metadata.version + 1},
            "time": {**previous.time.model_dump(), "updated_at": now},
        }
    )
    vector = long_term.embedder.embed([textlib.embedding_text(new)])[0]
    long_term.store.update([Change(new, vector, previous.metadata.version, "new evidence")])
    long_term.keep_word_states([new])
    return new


__all__ = [
    "CONSOLIDATION_PROMPT",
    "GENERIC_TAGS",
    "GENERIC_WORDS",
    "MAX_SUMMARY_CHARS",
    "PATTERN_KEY",
    "REFLECTION_PROMPT",
    "SUMMARY_KEY",
    "Pattern",
    "clusters",
    "consolidate",
    "extractive_summary",
    "find_patterns",
    "reflect",
    "reflection_text",
]
