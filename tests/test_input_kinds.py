"""A number or flag of the wrong kind is refused with a ``ValidationError`` naming the field
as the caller wrote it (``chatmem.checks``), never a ``TypeError`` from a comparison deep
in, and never taken: a string or None is not a number, a bool is not a count of 1, 2.5 is
not a count, and NaN is in no range. numpy's numbers are numbers. A refused call stores
nothing."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from chatmem import (
    DecisionRules,
    FactExtractionBlock,
    Filter,
    InMemoryOutbox,
    LocalEmbedder,
    LongTermMemory,
    Memory,
    OfflineExtractor,
    OverflowPolicy,
    RankingConfig,
    RerankWeights,
    Retriever,
    StaticBlock,
    Triggers,
    UsageRecorder,
    ValidationError,
    VectorBlock,
    Worker,
    WriteConfig,
    consolidate,
    enforce_quota,
    reflect,
    sweep_decay,
)
from chatmem.caches import LRUCache
from chatmem.client.calls.memory import MemoryCalls
from chatmem.embeddings.openai import OpenAIEmbedder
from chatmem.messages import Message, Role, SessionKey
from chatmem.ranking import decay_score
from chatmem.records import check_count, utcnow
from chatmem.retrieval import expand, pack, search
from chatmem.sessions.redis import RedisSessionStore
from chatmem.stores import SQLiteStore
from chatmem.stores.base import Usage
from chatmem.stores.cached import CachedStore
from chatmem.stores.postgres import PostgresStore
from chatmem.tokens import default_counter
from chatmem.worker.batch import RetryPolicy
from chatmem.worker.sqlite import SQLiteOutbox

#: whole: a count; number: any number; range: a number with bounds, so NaN is refused too.
Kind = Literal["whole", "number", "range"]
Call = Callable[[LongTermMemory, Any], object]


@dataclass(frozen=True)
class Case:
    """One number a caller hands the library: how to hand it ``value``, the field a refusal
    names, and a value of its kind that is taken (as numpy's, in ``test_numpy...``)."""

    call: Call
    field: str
    kind: Kind
    good: float
    #: None is a value of its own there (off, no limit, the default).
    optional: bool = False
    #: Where a value out of range is named by the check's shared field.
    range_field: str | None = None
    #: Whether ``test_numpy...`` may build it: False where that needs a server.
    builds: bool = True


def closed(made: Any) -> object:
    """``made``, closed if it holds threads or connections."""
    made.close()
    return made


def beside(long_term: LongTermMemory) -> Path:
    """A second SQLite file next to the test's store."""
    return Path(long_term.store.path).with_name("second.db")  # type: ignore[attr-defined]


def retrieve(long_term: LongTermMemory, **limits: Any) -> object:
    """One retrieval for a question about the user, by a retriever closed afterwards."""
    with Retriever(long_term) as retriever:
        question = {"role": "user", "content": "What tea do I drink?"}
        return retriever.retrieve([question], user_id="u", **limits)


CASES: dict[str, Case] = {
    # Settings: configs a caller builds.
    "RankingConfig.candidates": Case(
        lambda lt, v: RankingConfig(candidates=v), "ranking.candidates", "whole", 50
    ),
    "RankingConfig.late_weight": Case(
        lambda lt, v: RankingConfig(late_weight=v), "ranking.late_weight", "range", 0.2
    ),
    "RankingConfig.keyword_floor": Case(
        lambda lt, v: RankingConfig(keyword_floor=v), "ranking.keyword_floor", "range", 0.001
    ),
    "WriteConfig.min_importance": Case(
        lambda lt, v: WriteConfig(min_importance=v), "min_importance", "range", 0.3
    ),
    "WriteConfig.related_similarity": Case(
        lambda lt, v: WriteConfig(related_similarity=v), "related_similarity", "range", 0.6
    ),
    "WriteConfig.candidates": Case(
        lambda lt, v: WriteConfig(candidates=v), "candidates", "whole", 10
    ),
    "RerankWeights.relevance": Case(
        lambda lt, v: RerankWeights(relevance=v),
        "weights.relevance",
        "range",
        0.7,
        range_field="weights",
    ),
    "RerankWeights.half_life_days": Case(
        lambda lt, v: RerankWeights(half_life_days=v), "weights.half_life_days", "range", 30
    ),
    "Triggers.every_turns": Case(
        lambda lt, v: Triggers(every_turns=v), "every_turns", "whole", 10, optional=True
    ),
    "Triggers.topic_change": Case(
        lambda lt, v: Triggers(topic_change=v), "topic_change", "range", 0.8, optional=True
    ),
    "Triggers.max_buffer": Case(lambda lt, v: Triggers(max_buffer=v), "max_buffer", "whole", 60),
    "RetryPolicy.max_attempts": Case(
        lambda lt, v: RetryPolicy(max_attempts=v), "max_attempts", "whole", 5
    ),
    "RetryPolicy.max_backoff_s": Case(
        lambda lt, v: RetryPolicy(max_backoff_s=v), "max_backoff_s", "range", 600
    ),
    "RetryPolicy.lease_s": Case(lambda lt, v: RetryPolicy(lease_s=v), "lease_s", "range", 30),
    "OverflowPolicy.max_turns": Case(
        lambda lt, v: OverflowPolicy(max_turns=v), "max_turns", "whole", 10
    ),
    "OverflowPolicy.keep_turns": Case(
        lambda lt, v: OverflowPolicy(keep_turns=v), "keep_turns", "whole", 5, optional=True
    ),
    "OverflowPolicy.max_tokens": Case(
        lambda lt, v: OverflowPolicy(max_tokens=v), "max_tokens", "whole", 500, optional=True
    ),
    "Usage.count": Case(lambda lt, v: Usage("m", count=v), "count", "whole", 1),
    "Usage.decay_score": Case(
        lambda lt, v: Usage("m", decay_score=v), "decay_score", "range", 0.5, optional=True
    ),
    "DecisionRules.min_chars": Case(
        lambda lt, v: DecisionRules(min_chars=v), "min_chars", "whole", 2
    ),
    "decay_score access_half_life_s": Case(
        lambda lt, v: decay_score(0, None, 0, 0.5, access_half_life_s=v),
        "access_half_life_s",
        "range",
        86_400,
    ),
    "decay_score half_life_s": Case(
        lambda lt, v: decay_score(0, None, 0, 0.5, half_life_s=v), "half_life_s", "range", 86_400
    ),
    "LRUCache.max_bytes": Case(lambda lt, v: LRUCache(v), "max_bytes", "whole", 1024),
    # Memory, its blocks and its short-term part.
    "Memory.token_limit": Case(lambda lt, v: Memory(token_limit=v), "token_limit", "whole", 4096),
    "Memory.short_term_ratio": Case(
        lambda lt, v: Memory(short_term_ratio=v), "short_term_ratio", "range", 0.7
    ),
    "Memory.working_state_every": Case(
        lambda lt, v: Memory(working_state_every=v),
        "working_state_every",
        "whole",
        10,
        optional=True,
    ),
    "Memory.max_turns": Case(
        lambda lt, v: Memory(max_turns=v), "max_turns", "whole", 20, optional=True
    ),
    "StaticBlock.priority": Case(
        lambda lt, v: StaticBlock("fixed", priority=v), "priority", "whole", 0
    ),
    "FactExtractionBlock.max_facts": Case(
        lambda lt, v: FactExtractionBlock(max_facts=v), "max_facts", "whole", 50
    ),
    "VectorBlock.top_k": Case(lambda lt, v: VectorBlock(lt, top_k=v), "top_k", "whole", 2),
    "VectorBlock.threshold": Case(
        lambda lt, v: VectorBlock(lt, threshold=v), "threshold", "number", 0.3, optional=True
    ),
    # Stores and sessions: refused before anything is opened or reached.
    "SQLiteStore.head_cache_bytes": Case(
        lambda lt, v: closed(SQLiteStore(beside(lt), head_cache_bytes=v)),
        "head_cache_bytes",
        "whole",
        1 << 20,
    ),
    "SQLiteStore.vector_cache_bytes": Case(
        lambda lt, v: closed(SQLiteStore(beside(lt), vector_cache_bytes=v)),
        "vector_cache_bytes",
        "whole",
        1 << 20,
    ),
    "LocalEmbedder.cache_bytes": Case(
        lambda lt, v: LocalEmbedder(cache_bytes=v), "cache_bytes", "whole", 1 << 20
    ),
    "CachedStore.ttl_s": Case(
        lambda lt, v: CachedStore(lt.store, "redis://127.0.0.1:1/0", ttl_s=v),
        "ttl_s",
        "whole",
        300,
        builds=False,  # closing it would close the test's store
    ),
    "CachedStore.retry_after_s": Case(
        lambda lt, v: CachedStore(lt.store, "redis://127.0.0.1:1/0", retry_after_s=v),
        "retry_after_s",
        "range",
        5,
        builds=False,  # closing it would close the test's store
    ),
    "PostgresStore.connect_timeout": Case(
        lambda lt, v: PostgresStore("postgresql://127.0.0.1:1/none", connect_timeout=v),
        "connect_timeout",
        "range",
        10,
        builds=False,  # a built one connects
    ),
    "PostgresStore.exact_search_rows": Case(
        lambda lt, v: PostgresStore("postgresql://127.0.0.1:1/none", exact_search_rows=v),
        "exact_search_rows",
        "whole",
        2000,
        builds=False,
    ),
    "LongTermMemory.context_window": Case(
        lambda lt, v: closed(
            LongTermMemory(SQLiteStore(beside(lt)), lt.embedder, context_window=v)
        ),
        "context_window",
        "whole",
        1,
    ),
    "LocalEmbedder.threads": Case(
        lambda lt, v: LocalEmbedder(threads=v), "threads", "whole", 1, optional=True
    ),
    "LocalEmbedder.query_threads": Case(
        lambda lt, v: LocalEmbedder(query_threads=v), "query_threads", "whole", 1
    ),
    "LocalEmbedder.query_sessions": Case(
        lambda lt, v: LocalEmbedder(query_sessions=v), "query_sessions", "whole", 2, optional=True
    ),
    "OpenAIEmbedder.dimension": Case(
        lambda lt, v: closed(OpenAIEmbedder("m", v, base_url="http://127.0.0.1:1")),
        "dimension",
        "whole",
        384,
    ),
    "OpenAIEmbedder.batch_size": Case(
        lambda lt, v: closed(OpenAIEmbedder("m", 384, base_url="http://127.0.0.1:1", batch_size=v)),
        "batch_size",
        "whole",
        128,
    ),
    "OpenAIEmbedder.timeout": Case(
        lambda lt, v: closed(OpenAIEmbedder("m", 384, base_url="http://127.0.0.1:1", timeout=v)),
        "timeout",
        "range",
        30,
    ),
    "Retriever.search_queue_ms": Case(
        lambda lt, v: closed(Retriever(lt, search_queue_ms=v)),
        "search_queue_ms",
        "range",
        5,
        optional=True,
    ),
    "RedisSessionStore.ttl_s": Case(
        lambda lt, v: RedisSessionStore("redis://127.0.0.1:1/0", ttl_s=v),
        "ttl_s",
        "whole",
        60,
        optional=True,
        builds=False,  # a built one pings Redis
    ),
    # Long-term memory's calls.
    "LongTermMemory.search k": Case(
        lambda lt, v: lt.search("tea", user_id="u", k=v), "k", "whole", 5
    ),
    "LongTermMemory.search threshold": Case(
        lambda lt, v: lt.search("tea", user_id="u", threshold=v),
        "threshold",
        "number",
        0.1,
        optional=True,
    ),
    "LongTermMemory.shortlist k": Case(
        lambda lt, v: lt.shortlist("tea", user_id="u", k=v), "k", "whole", 5
    ),
    "LongTermMemory.list limit": Case(
        lambda lt, v: lt.list(Filter(user_id="u"), limit=v), "limit", "whole", 100
    ),
    "sweep_decay threshold": Case(
        lambda lt, v: sweep_decay(lt, threshold=v), "threshold", "range", 0.2
    ),
    "sweep_decay min_change": Case(
        lambda lt, v: sweep_decay(lt, min_change=v), "min_change", "number", 0.05
    ),
    "sweep_decay page_size": Case(
        lambda lt, v: sweep_decay(lt, page_size=v), "page_size", "whole", 100
    ),
    "enforce_quota limit": Case(
        lambda lt, v: enforce_quota(lt, user_id="u", limit=v), "max_memories_per_user", "whole", 5
    ),
    "consolidate min_cluster": Case(
        lambda lt, v: consolidate(lt, "u", min_cluster=v), "min_cluster", "whole", 3
    ),
    "consolidate similarity": Case(
        lambda lt, v: consolidate(lt, "u", similarity=v), "similarity", "number", 0.75
    ),
    "reflect min_evidence": Case(
        lambda lt, v: reflect(lt, "u", min_evidence=v), "min_evidence", "whole", 3
    ),
    # Retrieval.
    "search k": Case(lambda lt, v: search(lt, "tea", user_id="u", k=v), "k", "whole", 5),
    "search threshold": Case(
        lambda lt, v: search(lt, "tea", user_id="u", threshold=v), "threshold", "range", 0.6
    ),
    "expand hops": Case(lambda lt, v: expand(lt, [], user_id="u", hops=v), "hops", "whole", 1),
    "pack budget_tokens": Case(
        lambda lt, v: pack(["a line"], counter=default_counter(), budget_tokens=v),
        "budget_tokens",
        "whole",
        100,
    ),
    "Retriever k": Case(lambda lt, v: closed(Retriever(lt, k=v)), "k", "whole", 5),
    "Retriever threshold": Case(
        lambda lt, v: closed(Retriever(lt, threshold=v)), "threshold", "range", 0.6
    ),
    "Retriever search_budget_ms": Case(
        lambda lt, v: closed(Retriever(lt, search_budget_ms=v)),
        "search_budget_ms",
        "range",
        50,
        range_field="retriever",
    ),
    "Retriever search_workers": Case(
        lambda lt, v: closed(Retriever(lt, search_workers=v)),
        "search_workers",
        "whole",
        2,
        optional=True,
    ),
    "Retriever hops": Case(lambda lt, v: closed(Retriever(lt, hops=v)), "hops", "whole", 1),
    "Retriever.retrieve k": Case(lambda lt, v: retrieve(lt, k=v), "k", "whole", 5, optional=True),
    "UsageRecorder flush_every_s": Case(
        lambda lt, v: closed(UsageRecorder(lt, flush_every_s=v)),
        "flush_every_s",
        "range",
        5,
        range_field="usage",
    ),
    "Worker batch_size": Case(
        lambda lt, v: Worker(InMemoryOutbox(), lt, OfflineExtractor(), batch_size=v),
        "batch_size",
        "whole",
        8,
    ),
    "Worker max_memories_per_user": Case(
        lambda lt, v: Worker(InMemoryOutbox(), lt, OfflineExtractor(), max_memories_per_user=v),
        "max_memories_per_user",
        "whole",
        100,
        optional=True,
    ),
    # The client builds its calls (and checks them) before anything is sent.
    "Client.search k": Case(
        lambda lt, v: MemoryCalls.search("tea", user_id="u", k=v), "k", "whole", 5
    ),
    "Client.list limit": Case(
        lambda lt, v: MemoryCalls.list(Filter(user_id="u"), limit=v), "limit", "whole", 100
    ),
    "Client.add importance": Case(
        lambda lt, v: MemoryCalls.add("tea", user_id="u", importance=v),
        "importance",
        "number",
        0.5,
        optional=True,
    ),
}

NAN = float("nan")


def bad_values(case: Case) -> Iterator[tuple[str, Any, str]]:
    """Each value of the wrong kind for ``case``: (its id, the value, the field named)."""
    shared = case.range_field or case.field
    yield "str", str(case.good), case.field
    yield "bool", True, case.field
    if not case.optional:
        yield "None", None, case.field
    if case.kind == "whole":
        yield "fraction", case.good + 0.5, case.field  # in range but for its fraction
        yield "nan", NAN, case.field
    if case.kind == "range":
        yield "nan", NAN, shared


BAD = [
    pytest.param(name, value, field, id=f"{name}-{kind}")
    for name, case in CASES.items()
    for kind, value, field in bad_values(case)
]


@pytest.mark.parametrize(("name", "value", "field"), BAD)
def test_a_value_of_the_wrong_kind_is_refused_naming_its_field(
    memory: LongTermMemory, name: str, value: Any, field: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        CASES[name].call(memory, value)
    assert refused.value.field == field


@pytest.mark.parametrize("name", [name for name, case in CASES.items() if case.builds])
def test_numpy_numbers_are_taken_where_plain_ones_are(memory: LongTermMemory, name: str) -> None:
    case = CASES[name]
    case.call(memory, case.good if case.kind == "whole" else float(case.good))
    numpy_value = np.int64(case.good) if case.kind == "whole" else np.float32(case.good)
    case.call(memory, numpy_value)


WHOLE = [name for name, case in CASES.items() if case.kind == "whole" and case.builds]


@pytest.mark.parametrize("name", WHOLE)
def test_a_whole_number_written_with_a_point_is_taken(memory: LongTermMemory, name: str) -> None:
    """``64e6`` bytes or ``4096.0`` tokens, as a config file or arithmetic gives them."""
    case = CASES[name]
    case.call(memory, float(case.good))
    case.call(memory, np.float64(case.good))


@pytest.mark.parametrize(
    "name", [name for name, case in CASES.items() if case.kind == "range" and case.builds]
)
def test_a_number_too_big_for_a_float_is_out_of_range(memory: LongTermMemory, name: str) -> None:
    case = CASES[name]
    with pytest.raises(ValidationError) as refused:
        case.call(memory, 10**400)
    assert refused.value.field in {case.field, case.range_field}  # the caller's, or the range's


def test_what_a_whole_number_is_handed_on_as() -> None:
    """Python's ``int``: numpy's would reach a store's driver or the client's JSON."""
    worker = Worker(InMemoryOutbox(), None, OfflineExtractor(), batch_size=np.float64(2))  # type: ignore[arg-type]
    assert type(worker.batch_size) is int and worker.batch_size == 2
    call = MemoryCalls.search("tea", user_id="u", k=np.int64(5), threshold=np.float32(0.25))
    assert json.loads(json.dumps(call.json))["k"] == 5
    assert type(call.json["threshold"]) is float


def test_a_numpy_batch_size_claims_from_a_sqlite_outbox(
    memory: LongTermMemory, tmp_path: Path
) -> None:
    outbox = SQLiteOutbox(tmp_path / "outbox.db")
    try:
        said = [Message(id="m1", role=Role.USER, content="I am allergic to peanuts.")]
        outbox.enqueue(SessionKey("default", "u", "s1"), said)
        worker = Worker(outbox, memory, OfflineExtractor(), batch_size=np.int64(2))
        worker.run_once()
        assert memory.count(Filter(user_id="u")) >= 1
    finally:
        outbox.close()


def test_none_keeps_its_meaning_where_it_had_one(memory: LongTermMemory) -> None:
    """None as the embedder's entry cap (the byte budget alone), as reflection's pattern
    cap (all of them) and as the worker's poll (woken by ``notify`` alone)."""
    embedder = LocalEmbedder(cache_size=None)
    assert embedder.embed_query("green tea").shape == (embedder.dimension,)
    assert reflect(memory, "u", max_patterns=None) == []
    assert Worker(InMemoryOutbox(), memory, OfflineExtractor(), poll_s=None).poll_s is None


@pytest.mark.parametrize("flag", ["include_superseded", "late", "light"])
@pytest.mark.parametrize("how", ["search", "shortlist"])
@pytest.mark.parametrize("value", ["no", 0, None])
def test_a_search_flag_is_true_or_false(
    memory: LongTermMemory, flag: str, how: str, value: Any
) -> None:
    """``include_superseded="no"`` was taken as true: superseded facts came back."""
    with pytest.raises(ValidationError) as refused:
        getattr(memory, how)("What tea do I drink?", user_id="u", **{flag: value})
    assert refused.value.field == flag


# -- a refused call stores nothing ------------------------------------------------------------


@pytest.mark.parametrize("value", ["0.9", True, [0.9]])
def test_a_refused_add_stores_nothing(memory: LongTermMemory, value: Any) -> None:
    with pytest.raises(ValidationError) as refused:
        memory.add("I drink green tea", user_id="u", importance=value)
    assert refused.value.field == "importance"
    assert memory.count(Filter(user_id="u")) == 0


@pytest.mark.parametrize("field", ["importance", "confidence"])
@pytest.mark.parametrize("value", ["0.9", True])
def test_a_refused_update_leaves_the_memory_as_it_was(
    memory: LongTermMemory, field: str, value: Any
) -> None:
    (stored,) = memory.add("I drink green tea", user_id="u")
    with pytest.raises(ValidationError) as refused:
        memory.update(stored.id, user_id="u", **{field: value})
    assert refused.value.field == field
    assert memory.get(stored.id, user_id="u") == stored


def test_a_refused_sweep_deletes_nothing_not_even_what_expired(memory: LongTermMemory) -> None:
    (expired,) = memory.add(
        "my voucher code is 1234", user_id="u", expires_at=utcnow() - timedelta(seconds=1)
    )
    with pytest.raises(ValidationError) as refused:
        sweep_decay(memory, min_change="0.05")  # type: ignore[arg-type]
    assert refused.value.field == "min_change"
    assert [r.id for r in memory.list(Filter(user_id="u", expired=None)).records] == [expired.id]


def test_a_refused_sqlite_store_makes_no_file(tmp_path: Path) -> None:
    path = tmp_path / "refused.db"
    with pytest.raises(ValidationError) as refused:
        SQLiteStore(path, head_cache_bytes="64MiB")  # type: ignore[arg-type]
    assert refused.value.field == "head_cache_bytes"
    assert not path.exists()


def test_the_messages_of_a_range_stay_as_they_were() -> None:
    """The words of the checks are the library's own (messages tests and users match)."""
    refusals = {
        "must be at least 1": lambda: Triggers(max_buffer=0),
        "must be between 0 and 1": lambda: WriteConfig(update_similarity=math.inf),
        "must be between -1 and 1": lambda: WriteConfig(related_similarity=-2),
        "must be in (0, 2]": lambda: Triggers(topic_change=0),
        "must be in (0, 1]": lambda: Memory(short_term_ratio=1.5),
        "must be at least 1 second": lambda: RedisSessionStore(ttl_s=0),
        "must not be negative": lambda: RetryPolicy(backoff_s=-1),
        "must be positive": lambda: RetryPolicy(lease_s=0),
        "must be non-negative": lambda: RankingConfig(keyword_floor_hits=-1),
        "must be between 1 and max_turns": lambda: OverflowPolicy(max_turns=4, keep_turns=5),
        "must be 1 to 10000": lambda: check_count(0, "k"),
        "half-lives must be positive": lambda: decay_score(0, None, 0, 0.5, half_life_s=-1),
        "must be a whole number": lambda: WriteConfig(candidates=2.5),  # type: ignore[arg-type]
        "must be a number": lambda: WriteConfig(min_importance="0.3"),  # type: ignore[arg-type]
        "must be true or false": lambda: RankingConfig(repeats_last=1),  # type: ignore[arg-type]
    }
    for message, refuse in refusals.items():
        with pytest.raises(ValidationError) as refused:
            refuse()
        assert refused.value.message == message
