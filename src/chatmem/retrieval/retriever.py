"""The pipeline (SPEC R1-R5, L6, F2): ``Retriever`` runs the retrieval steps for one
request, in order (decide, build the query, search and expand in the search pool within a
time budget, inject, record the use), and ``AsyncRetriever`` is its async face."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, NamedTuple, TypeVar

from chatmem import checks
from chatmem.errors import ValidationError
from chatmem.llm.base import ChatModel
from chatmem.long_term import LongTermMemory
from chatmem.records import Filter, MemoryType, RelationType, utcnow
from chatmem.retrieval.decision import DEFAULT_RULES, Decision, DecisionRules, decide
from chatmem.retrieval.expansion import LINK_TYPES, expand
from chatmem.retrieval.hybrid_search import check_search, search
from chatmem.retrieval.injection import DEFAULT_HEADER, check_template, injected
from chatmem.retrieval.query import Query, build_query
from chatmem.retrieval.reranking import DEFAULT_WEIGHTS, RerankWeights, RetrievedMemory
from chatmem.retrieval.search_pool import SearchPool, default_search_workers
from chatmem.retrieval.turns import ChatMessage, as_dict
from chatmem.retrieval.usage import UsageRecorder
from chatmem.tokens import TokenCounter, default_counter

logger = logging.getLogger("chatmem.retrieval")

T = TypeVar("T")

#: The steps timed in ``Retrieval.timings_ms``, in order.
STEPS = ("decision", "query", "search", "expand", "inject", "usage")


@dataclass(frozen=True)
class Retrieval:
    """What one request got from memory.

    ``injected_messages`` is what to send to the model (the input, as dicts, when nothing
    was injected). ``results`` are the memories injected, hits first then linked ones.
    ``degraded`` says why memory was left out when it failed ("timeout", "store error: …",
    "embedding error: …"); None otherwise. ``light`` is true when the search ran while
    others waited for a search thread, and so was light (``search_pool``): no late rerank,
    the query embedded once; never where neither would have run
    (``LongTermMemory.lightens``).
    """

    decision: Decision
    query: Query | None
    results: list[RetrievedMemory]
    injected_messages: list[dict[str, Any]]
    timings_ms: dict[str, float] = field(default_factory=dict)
    degraded: str | None = None
    light: bool = False


class _Request(NamedTuple):
    """Whose memories one request searches, narrowed to what (types, project, and the
    reader's roles, None: all), judged at what moment, and how many at what threshold."""

    user_id: str
    tenant_id: str
    types: Collection[MemoryType] | None
    project_id: str | None
    roles: frozenset[str] | None
    now: datetime
    k: int
    threshold: float


class _Found(NamedTuple):
    hits: list[RetrievedMemory]
    linked: list[RetrievedMemory]
    search_ms: float
    expand_ms: float
    light: bool


class Retriever:
    """The retrieval pipeline of one long-term memory (see ``chatmem.retrieval``).

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
        k, threshold = check_search(k, threshold)
        context_turns = checks.whole(context_turns, "context_turns")
        hops = checks.whole(hops, "hops")
        if search_workers is None:
            search_workers = default_search_workers()
        if hyde and rewriter is None:
            raise ValidationError("HyDE needs a model (rewriter)", field="hyde")
        budget_ms = checks.number(search_budget_ms, "search_budget_ms")
        if search_queue_ms is not None:
            search_queue_ms = checks.number(search_queue_ms, "search_queue_ms", low=0)
        search_workers = checks.whole(search_workers, "search_workers")
        budget_tokens = checks.whole(budget_tokens, "budget_tokens")
        if not budget_ms > 0 or budget_tokens < 0 or search_workers < 1:
            raise ValidationError(
                "search_budget_ms and search_workers must be positive, budget_tokens 0 or more",
                field="retriever",
            )
        check_template(template)
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
        self._searches = SearchPool(search_workers)
        self.search_queue_ms = search_budget_ms if search_queue_ms is None else search_queue_ms

    @property
    def _in_flight(self) -> int:
        """Searches submitted to the pool and not ended (what the queue depth counts)."""
        return self._searches.in_flight

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
        readers = _checked_readers(tenant_id, user_id, project_id, roles)
        limits = check_search(
            self.k if k is None else k, self.threshold if threshold is None else threshold
        )
        timings: dict[str, float] = {}
        began = time.perf_counter()
        decision = _timed(timings, "decision", lambda: decide(messages, self.rules))
        if not decision.search:
            return _unchanged(decision, None, messages, timings, began)
        query = _timed(timings, "query", lambda: self._query(messages))
        request = _Request(user_id, tenant_id, types, project_id, readers, now or utcnow(), *limits)
        found = self._searches.run(
            partial(self._find, query, request),
            budget_ms=self.search_budget_ms,
            queue_ms=self.search_queue_ms,
        )
        if isinstance(found, str):
            timings["search"] = (time.perf_counter() - began) * 1000 - sum(timings.values())
            return _unchanged(decision, query, messages, timings, began, degraded=found)
        timings["search"], timings["expand"] = found.search_ms, found.expand_ms
        return self._deliver(decision, query, messages, found, request, timings, began)

    def _query(self, messages: Sequence[ChatMessage]) -> Query:
        return build_query(
            messages,
            rewriter=self.rewriter,
            hyde=self.hyde,
            context_turns=self.context_turns,
        )

    def _find(self, query: Query, request: _Request, pressed: bool) -> _Found:
        """Search and expand (run in the search pool); ``pressed``, others waiting for a
        search thread: a light search, without the late rerank (0.7 ms of CPU at 10,000
        memories, docs/benchmarks.md "Lighter searches under load") and with one model run
        for a query that names a speaker, not two (docs/benchmarks.md "One model run a
        search under load")."""
        began = time.perf_counter()
        hits = search(
            self.long_term,
            query,
            user_id=request.user_id,
            tenant_id=request.tenant_id,
            k=request.k,
            threshold=request.threshold,
            types=request.types,
            project_id=request.project_id,
            roles=request.roles,
            weights=self.weights,
            now=request.now,
            light=pressed,
        )
        searched = time.perf_counter()
        linked: list[RetrievedMemory] = []
        if hits and self.hops > 0 and self.link_types:
            linked = expand(
                self.long_term,
                hits,
                user_id=request.user_id,
                tenant_id=request.tenant_id,
                hops=self.hops,
                types=self.link_types,
                now=request.now,
                roles=request.roles,
            )
        ended = time.perf_counter()
        # Light only where a light search leaves something out (``lightens``).
        light = pressed and self.long_term.lightens
        return _Found(hits, linked, (searched - began) * 1000, (ended - searched) * 1000, light)

    def _deliver(
        self,
        decision: Decision,
        query: Query,
        messages: Sequence[ChatMessage],
        found: _Found,
        request: _Request,
        timings: dict[str, float],
        began: float,
    ) -> Retrieval:
        """Inject what was found and record the use of what was shown."""
        messages_out, shown = _timed(
            timings,
            "inject",
            lambda: injected(
                messages,
                [*found.hits, *found.linked],
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
                lambda: usage.record(ids, user_id=request.user_id, tenant_id=request.tenant_id),
            )
        logger.debug(
            "Memory: %d found, %d linked, %d injected for user %s",
            len(found.hits),
            len(found.linked),
            len(shown),
            request.user_id,
        )
        timings["total"] = (time.perf_counter() - began) * 1000
        return Retrieval(decision, query, shown, messages_out, timings, light=found.light)

    def close(self) -> None:
        """Stop the search pool (waits for a search still running; cancels queued ones)."""
        self._searches.close()

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


def _checked_readers(
    tenant_id: str, user_id: str, project_id: str | None, roles: Collection[str] | None
) -> frozenset[str] | None:
    """The reader's roles as a set, once the request's scope is checked as a filter."""
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
    return readers


def _unchanged(
    decision: Decision,
    query: Query | None,
    messages: Sequence[ChatMessage],
    timings: dict[str, float],
    began: float,
    *,
    degraded: str | None = None,
) -> Retrieval:
    """A retrieval that injects nothing: the messages go on as they came (as dicts)."""
    timings["total"] = (time.perf_counter() - began) * 1000
    unchanged = [as_dict(m) for m in messages]
    return Retrieval(decision, query, [], unchanged, timings, degraded)


def _timed(timings: dict[str, float], step: str, call: Callable[[], T]) -> T:
    began = time.perf_counter()
    try:
        return call()
    finally:
        timings[step] = (time.perf_counter() - began) * 1000
