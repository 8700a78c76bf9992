"""The durable extraction queue and its worker (SPEC L3, L8, F3, F5, X5).

Real SQLite files, real threads and real processes (killed with SIGKILL); the LLM failure
branches go through the scripted OpenAI-compatible server over HTTP.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chatmem import Filter, LocalEmbedder, LongTermMemory, MemoryRecord
from chatmem.extraction.base import Fact
from chatmem.extraction.llm import LLMExtractor
from chatmem.extraction.offline import OfflineExtractor
from chatmem.llm.client import ModelConfig, OpenAIChatModel
from chatmem.messages import MEMORY_ACL, Message, Role, SessionKey
from chatmem.records import Vector
from chatmem.short_term import OverflowPolicy, ShortTermMemory
from chatmem.stores import SQLiteStore
from chatmem.testing import ScriptedOpenAIServer, hashed_vector
from chatmem.worker import (
    Batch,
    BatchState,
    ExtractionScheduler,
    InMemoryOutbox,
    Outbox,
    RetryPolicy,
    SQLiteOutbox,
    Triggers,
    Worker,
    after_failure,
    backoff_s,
    batch_id_for,
    claimable,
    cosine_distance,
    is_explicit,
    project_of,
    trigger_reason,
)

ROOT = Path(__file__).resolve().parents[1]
ANNA = SessionKey("default", "anna", "s1")


class Clock:
    """A clock the test moves by hand (seconds since the epoch)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class HashedEmbedder:
    """Deterministic vectors: equal texts are identical, different texts nearly orthogonal,
    so counting memories is exact (the real embedder is used where meaning matters)."""

    model = "hashed-test"
    dimension = 64

    def embed(self, texts: Sequence[str]) -> Vector:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([hashed_vector(text, self.dimension) for text in texts])


class LineExtractor:
    """One fact per user message, its text verbatim."""

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        return [
            Fact(text=m.content, importance=0.8, confidence=0.9, provenance=(m.id,))
            for m in messages
            if m.role is Role.USER
        ]


class BrokenExtractor:
    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        raise RuntimeError("a bug in an extractor")


def said(*texts: str, prefix: str = "m") -> list[Message]:
    return [Message(id=f"{prefix}{i}", role=Role.USER, content=t) for i, t in enumerate(texts)]


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def outbox_and_clock(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Outbox, Clock]]:
    clock = Clock()
    retry = RetryPolicy(max_attempts=3, backoff_s=2.0, max_backoff_s=60.0, lease_s=30.0)
    if request.param == "memory":
        outbox: Outbox = InMemoryOutbox(retry=retry, clock=clock)
    elif request.param == "sqlite":
        outbox = SQLiteOutbox(tmp_path / "outbox.db", retry=retry, clock=clock)
    else:
        outbox = _postgres_outbox(request, retry=retry, clock=clock)
    with outbox:
        yield outbox, clock


def _postgres_outbox(request: pytest.FixtureRequest, **options: Any) -> Outbox:
    """A PostgreSQL outbox in a schema of its own (dropped after the test)."""
    from chatmem.stores.postgres_db import PostgresDatabase
    from chatmem.worker.postgres import PostgresOutbox

    uri = request.getfixturevalue("postgres_uri")
    database = PostgresDatabase(uri, schema=request.getfixturevalue("pg_schema"), pool_size=4)
    request.addfinalizer(database.close)
    return PostgresOutbox(database, **options)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "chatmem.db"


# -- pure queue logic ------------------------------------------------------------------------


def test_batch_ids_come_from_the_session_and_message_ids() -> None:
    messages = said("a", "b")
    assert batch_id_for(ANNA, messages) == batch_id_for(ANNA, said("x", "y"))  # ids, not text
    # Named by where it starts: a racing writer that read a shorter log makes the same batch.
    assert batch_id_for(ANNA, messages) == batch_id_for(ANNA, messages[:1])
    assert batch_id_for(ANNA, messages) != batch_id_for(ANNA, messages[1:])
    assert batch_id_for(ANNA, messages) != batch_id_for(ANNA._replace(session_id="s2"), messages)
    with pytest.raises(Exception, match="at least one message"):
        batch_id_for(ANNA, [])


def test_backoff_doubles_up_to_a_cap_then_the_batch_dies() -> None:
    retry = RetryPolicy(max_attempts=4, backoff_s=1.0, max_backoff_s=3.0)
    assert [backoff_s(n, retry) for n in (1, 2, 3, 4)] == [1.0, 2.0, 3.0, 3.0]
    assert after_failure(1, 10_000, retry) == (BatchState.PENDING, 11_000)
    assert after_failure(4, 10_000, retry) == (BatchState.DEAD, 10_000)
    with pytest.raises(Exception, match="at least 1"):
        RetryPolicy(max_attempts=0)


def test_claimable_takes_each_users_earliest_unfinished_batch() -> None:
    def batch(name: str, user: str, state: BatchState, due: int = 0) -> Batch:
        return Batch(name, SessionKey("t", user, "s"), [], state=state, next_attempt_at=due)

    batches = [
        batch("a1", "a", BatchState.DONE),
        batch("a2", "a", BatchState.LEASED),
        batch("a3", "a", BatchState.PENDING),
        batch("b1", "b", BatchState.PENDING, due=50),
        batch("b2", "b", BatchState.PENDING),
        batch("c1", "c", BatchState.DEAD),
        batch("c2", "c", BatchState.PENDING, due=5),
    ]
    ready = claimable(batches, 10, {"a2": 20})
    assert [b.batch_id for b in ready] == ["c2"]  # a2 leased, b1 waits out its backoff
    ready = claimable(batches, 60, {"a2": 20})
    assert [b.batch_id for b in ready] == ["a2", "c2", "b1"]  # a2's lease ran out


def test_triggers_in_priority_order() -> None:
    triggers = Triggers(every_turns=3, topic_change=0.5, max_buffer=5)

    def reason(**changes: object) -> str | None:
        base: dict[str, object] = {
            "turns": 1,
            "buffered": 2,
            "explicit": False,
            "distance": None,
            "session_end": False,
        }
        return trigger_reason(triggers, **{**base, **changes})  # type: ignore[arg-type]

    assert reason() is None
    assert reason(turns=3) == "every 3 turns"
    assert reason(explicit=True) == "explicit"
    assert reason(distance=0.6) == "topic change"
    assert reason(distance=0.4) is None
    assert reason(buffered=5) == "buffer full"
    assert reason(session_end=True, explicit=True) == "session end"
    assert reason(buffered=0, session_end=True) is None  # nothing to extract
    off = Triggers(every_turns=None, explicit=False, topic_change=None, session_end=False)
    assert (
        trigger_reason(off, turns=99, buffered=3, explicit=True, distance=2.0, session_end=True)
        is None
    )


@pytest.mark.parametrize(
    ("text", "explicit"),
    [
        ("Remember that I'm allergic to peanuts", True),
        ("I prefer short answers", True),
        ("Always answer in French please", True),
        ("I never drink coffee", True),
        ("My name is Anna", True),
        ("Call me Annie", True),
        ("What is the weather in Paris?", False),
        ("Thanks, that helps", False),
    ],
)
def test_explicit_statements(text: str, explicit: bool) -> None:
    assert is_explicit(text) is explicit


def test_cosine_distance() -> None:
    a = np.array([1.0, 0.0], dtype=np.float32)
    assert cosine_distance(a, a) == pytest.approx(0.0)
    assert cosine_distance(a, -a) == pytest.approx(2.0)
    assert cosine_distance(a, np.array([0.0, 3.0], dtype=np.float32)) == pytest.approx(1.0)


# -- the scheduler ---------------------------------------------------------------------------


def turn(text: str, answer: str = "Sure.") -> list[Message]:
    return [Message(role=Role.USER, content=text), Message(role=Role.ASSISTANT, content=answer)]


def test_every_n_user_turns_triggers_and_take_hands_the_buffer_over() -> None:
    scheduler = ExtractionScheduler(Triggers(every_turns=3, explicit=False, topic_change=None))
    assert not scheduler.observe(ANNA, turn("How are you?"))
    assert not scheduler.observe(ANNA, turn("Tell me a joke"))
    assert scheduler.check(ANNA, turn("Another one")) == "every 3 turns"
    assert len(scheduler.take(ANNA)) == 6
    assert scheduler.take(ANNA) == []
    assert not scheduler.observe(ANNA, turn("And again"))  # the count starts over


def test_an_explicit_preference_triggers_at_once() -> None:
    scheduler = ExtractionScheduler()
    assert not scheduler.observe(ANNA, turn("What's a good pasta recipe?"))
    assert scheduler.check(ANNA, turn("I prefer vegetarian recipes")) == "explicit"
    assert [m.content for m in scheduler.take(ANNA)][0] == "What's a good pasta recipe?"


def test_a_change_of_topic_triggers(embedder: LocalEmbedder) -> None:
    scheduler = ExtractionScheduler(Triggers(explicit=False), embedder=embedder)
    key = ANNA
    assert not scheduler.observe(key, turn("I am planning a trip to Hawaii next summer"))
    assert not scheduler.observe(key, turn("What hotels are good near Waikiki beach?"))
    assert not scheduler.observe(key, turn("ok thanks"))  # too short to judge a topic
    reason = scheduler.check(key, turn("Can you help me fix this python error in my code?"))
    assert reason == "topic change"


def test_the_end_of_a_session_triggers_and_sessions_are_kept_apart() -> None:
    scheduler = ExtractionScheduler(Triggers(every_turns=2, explicit=False, topic_change=None))
    other = ANNA._replace(session_id="s2")
    scheduler.observe(ANNA, turn("Hello there"))
    scheduler.observe(other, turn("Hi"))
    assert scheduler.check(ANNA, [], session_end=True) == "session end"
    assert len(scheduler.take(ANNA)) == 2
    assert scheduler.observe(other, turn("Hi again")) is True  # other's own two turns
    assert len(scheduler.take(other)) == 4


def test_the_scheduler_keeps_a_bounded_number_of_sessions() -> None:
    scheduler = ExtractionScheduler(max_sessions=2)
    for index in range(5):
        scheduler.observe(ANNA._replace(session_id=f"s{index}"), turn("Hello"))
    assert scheduler.take(ANNA._replace(session_id="s0")) == []
    assert len(scheduler.take(ANNA._replace(session_id="s4"))) == 2


# -- the outbox (both backends) --------------------------------------------------------------


def test_enqueue_is_idempotent_by_message_ids(outbox_and_clock: tuple[Outbox, Clock]) -> None:
    outbox, _ = outbox_and_clock
    first = outbox.enqueue(ANNA, said("I like tea"))
    assert outbox.enqueue(ANNA, said("I like tea")) == first
    assert outbox.counts()[BatchState.PENDING] == 1
    batch = outbox.get(first)
    assert batch is not None and batch.key == ANNA
    assert [m.content for m in batch.messages] == ["I like tea"]


def test_one_users_batches_run_in_order_others_in_parallel(
    outbox_and_clock: tuple[Outbox, Clock],
) -> None:
    outbox, _ = outbox_and_clock
    a1 = outbox.enqueue(ANNA, said("one", prefix="a"))
    a2 = outbox.enqueue(ANNA._replace(session_id="s2"), said("two", prefix="b"))
    b1 = outbox.enqueue(SessionKey("default", "ben", "s1"), said("three", prefix="c"))
    claimed = outbox.claim(10)
    assert [b.batch_id for b in claimed] == [a1, b1]
    assert all(b.state is BatchState.LEASED and b.attempts == 1 for b in claimed)
    assert outbox.claim(10) == []  # a2 waits for a1
    outbox.complete(a1)
    assert [b.batch_id for b in outbox.claim(10)] == [a2]


def test_a_failed_batch_blocks_its_user_until_retried(
    outbox_and_clock: tuple[Outbox, Clock],
) -> None:
    outbox, clock = outbox_and_clock
    first = outbox.enqueue(ANNA, said("one", prefix="a"))
    second = outbox.enqueue(ANNA, said("two", prefix="b"))
    [batch] = outbox.claim()
    assert outbox.fail(first, "model down", lease=batch.lease) is BatchState.PENDING
    assert outbox.claim() == []  # backing off, and the next batch must wait for it
    clock.advance(2.0)
    [again] = outbox.claim()
    assert (again.batch_id, again.attempts, again.last_error) == (first, 2, "model down")
    outbox.complete(first)
    assert [b.batch_id for b in outbox.claim()] == [second]


def test_a_batch_dies_after_its_last_attempt_and_can_be_requeued(
    outbox_and_clock: tuple[Outbox, Clock],
) -> None:
    outbox, clock = outbox_and_clock
    batch_id = outbox.enqueue(ANNA, said("one"))
    states = []
    for _ in range(3):
        clock.advance(60)
        [batch] = outbox.claim()
        states.append(outbox.fail(batch_id, f"boom {batch.attempts}"))
    assert states == [BatchState.PENDING, BatchState.PENDING, BatchState.DEAD]
    [dead] = outbox.batches(BatchState.DEAD)
    assert (dead.batch_id, dead.attempts, dead.last_error) == (batch_id, 3, "boom 3")
    clock.advance(60)
    assert outbox.claim() == []
    outbox.requeue(batch_id)
    [again] = outbox.claim()
    assert again.attempts == 1


def test_an_expired_lease_comes_back_and_a_stale_claim_cannot_fail_it(
    outbox_and_clock: tuple[Outbox, Clock],
) -> None:
    outbox, clock = outbox_and_clock
    batch_id = outbox.enqueue(ANNA, said("one"))
    [first] = outbox.claim()
    clock.advance(29)
    assert outbox.claim() == []
    clock.advance(2)  # the worker died: its lease ran out
    [second] = outbox.claim()
    assert second.attempts == 2 and second.lease != first.lease
    assert outbox.fail(batch_id, "late", lease=first.lease) is BatchState.LEASED
    outbox.complete(batch_id)
    assert outbox.counts()[BatchState.DONE] == 1


def test_a_batch_that_keeps_killing_its_worker_dies(outbox_and_clock: tuple[Outbox, Clock]) -> None:
    outbox, clock = outbox_and_clock
    batch_id = outbox.enqueue(ANNA, said("one"))
    for _ in range(3):
        assert len(outbox.claim()) == 1
        clock.advance(31)
    assert outbox.claim() == []
    dead = outbox.get(batch_id)
    assert dead is not None and dead.state is BatchState.DEAD
    assert "lease expired" in (dead.last_error or "")


def test_short_term_memory_hands_batches_to_the_outbox(
    outbox_and_clock: tuple[Outbox, Clock],
) -> None:
    outbox, _ = outbox_and_clock
    short = ShortTermMemory(policy=OverflowPolicy("flush", max_turns=2), flush=outbox.hand_over)
    for index in range(4):
        short.append(ANNA, turn(f"Message number {index}"))
    short.end(ANNA)
    batches = outbox.batches()
    assert len(batches) >= 2
    handed = [m.content for b in batches for m in b.messages if m.role is Role.USER]
    assert handed == [f"Message number {i}" for i in range(4)]


def test_the_sqlite_outbox_survives_a_reopen_and_shares_the_store_file(store_path: Path) -> None:
    with SQLiteStore(store_path), SQLiteOutbox(store_path) as outbox:
        batch_id = outbox.enqueue(ANNA, said("I like tea"))
    with SQLiteOutbox(store_path) as reopened:
        [batch] = reopened.claim()
        assert batch.batch_id == batch_id and batch.messages[0].content == "I like tea"


def test_enqueue_returns_in_well_under_5_ms(store_path: Path) -> None:
    with SQLiteOutbox(store_path) as outbox:
        outbox.enqueue(ANNA, said("warm up", prefix="w"))
        timings = []
        for index in range(200):
            messages = turn(f"My name is Anna and this is turn {index}")
            start = time.perf_counter()
            outbox.enqueue(ANNA, messages)
            timings.append(time.perf_counter() - start)
    assert statistics.median(timings) < 0.005


# -- the worker ------------------------------------------------------------------------------


def test_the_worker_extracts_and_stores_off_the_request_path(
    store_path: Path, embedder: LocalEmbedder
) -> None:
    with (
        SQLiteOutbox(store_path) as outbox,
        LongTermMemory(SQLiteStore(store_path), embedder) as lt,
    ):
        outbox.enqueue(ANNA, said("My name is Anna.", "I live in Berlin."))
        assert lt.count(Filter(user_id="anna")) == 0  # enqueue stored nothing itself
        worker = Worker(outbox, lt, OfflineExtractor())
        assert worker.drain() == 1
        assert outbox.counts()[BatchState.DONE] == 1
        texts = sorted(r.content.raw for r in lt.list(Filter(user_id="anna")).records)
        assert texts == ["User lives in Berlin", "User's name is Anna"]
        assert (worker.stats.completed, worker.stats.stored) == (1, 2)


def test_the_background_thread_works_the_queue(store_path: Path) -> None:
    with (
        SQLiteOutbox(store_path) as outbox,
        LongTermMemory(SQLiteStore(store_path), HashedEmbedder()) as lt,
    ):
        with Worker(outbox, lt, LineExtractor(), poll_s=5.0) as worker:
            outbox.enqueue(ANNA, said("fact one", "fact two"))
            worker.notify()
            wait_until(lambda: outbox.counts()[BatchState.DONE] == 1)
        assert lt.count(Filter(user_id="anna")) == 2


def test_a_bug_in_the_extractor_fails_the_batch_not_the_worker(store_path: Path) -> None:
    retry = RetryPolicy(backoff_s=0.0)
    with (
        SQLiteOutbox(store_path, retry=retry) as outbox,
        LongTermMemory(SQLiteStore(store_path), HashedEmbedder()) as lt,
    ):
        batch_id = outbox.enqueue(ANNA, said("fact one"))
        worker = Worker(outbox, lt, BrokenExtractor())
        assert worker.run_once() == 1
        batch = outbox.get(batch_id)
        assert batch is not None and batch.state is BatchState.PENDING
        assert "RuntimeError" in (batch.last_error or "")
        worker.extractor = LineExtractor()
        worker.drain()
        assert lt.count(Filter(user_id="anna")) == 1


def test_the_worker_keeps_each_user_under_the_quota(store_path: Path) -> None:
    with (
        SQLiteOutbox(store_path) as outbox,
        LongTermMemory(SQLiteStore(store_path), HashedEmbedder()) as lt,
    ):
        outbox.enqueue(ANNA, said("a", "b", "c", "d"))
        worker = Worker(outbox, lt, LineExtractor(), max_memories_per_user=2)
        worker.drain()
        assert lt.count(Filter(user_id="anna")) == 2
        assert worker.stats.evicted == 2


def test_a_rerun_after_a_crash_between_writes_and_complete_adds_nothing(store_path: Path) -> None:
    retry = RetryPolicy(lease_s=30.0)
    clock = Clock()
    with (
        SQLiteOutbox(store_path, retry=retry, clock=clock) as outbox,
        LongTermMemory(SQLiteStore(store_path), HashedEmbedder()) as lt,
    ):
        batch_id = outbox.enqueue(ANNA, said("fact one", "fact two", "fact three"))
        [batch] = outbox.claim()
        worker = Worker(outbox, lt, LineExtractor())
        # The first worker wrote the memories and died before ``complete``.
        facts = worker.extractor.extract(batch.messages)
        worker.policy.apply(lt, batch.key, facts, batch_id=batch.batch_id)
        snapshot = lt.list(Filter(user_id="anna")).records
        clock.advance(31)
        assert worker.drain() == 1
        assert lt.list(Filter(user_id="anna")).records == snapshot
        done = outbox.get(batch_id)
        assert done is not None and done.state is BatchState.DONE and done.attempts == 2
        assert worker.stats.skipped == 3


def wait_until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.02)


# -- LLM failures, over HTTP -----------------------------------------------------------------

VALID = json.dumps(
    {
        "facts": [
            {
                "text": "User's budget for the Hawaii trip is $10,000",
                "type": "semantic",
                "importance": 0.8,
                "confidence": 0.9,
                "subject": "Hawaii trip budget",
                "source_ids": ["m0"],
            }
        ]
    }
)


@pytest.fixture
def llm_setup(
    store_path: Path, embedder: LocalEmbedder
) -> Iterator[tuple[ScriptedOpenAIServer, SQLiteOutbox, LongTermMemory, Clock, OpenAIChatModel]]:
    clock = Clock()
    retry = RetryPolicy(max_attempts=3, backoff_s=2.0, lease_s=60.0)
    with (
        ScriptedOpenAIServer() as server,
        SQLiteOutbox(store_path, retry=retry, clock=clock) as outbox,
        LongTermMemory(SQLiteStore(store_path), embedder) as lt,
        OpenAIChatModel(
            ModelConfig(
                endpoint=server.base_url, model="m", retries=1, backoff_s=0.0, timeout_s=0.5
            )
        ) as model,
    ):
        yield server, outbox, lt, clock, model


def test_malformed_json_twice_fails_the_batch_and_stores_nothing(
    llm_setup: tuple[ScriptedOpenAIServer, SQLiteOutbox, LongTermMemory, Clock, OpenAIChatModel],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, outbox, lt, clock, model = llm_setup
    server.script_chat("Sure! Here are the facts: none, sorry", "{still: [not json")
    batch_id = outbox.enqueue(ANNA, said("My budget for the Hawaii trip is $10,000"))
    worker = Worker(outbox, lt, LLMExtractor(model))
    worker.run_once()
    assert len(server.chat_requests) == 2  # the answer and its one repair retry
    batch = outbox.get(batch_id)
    assert batch is not None and batch.state is BatchState.PENDING
    assert "extraction" in (batch.last_error or "")
    assert batch.next_attempt_at == int(clock() * 1000) + 2000
    assert lt.count(Filter(user_id="anna")) == 0
    assert any("Extraction failed" in r.getMessage() for r in caplog.records)

    server.script_chat(VALID)
    assert worker.run_once() == 0  # still backing off
    clock.advance(2)
    assert worker.run_once() == 1
    assert outbox.counts()[BatchState.DONE] == 1
    [record] = lt.list(Filter(user_id="anna")).records
    assert record.content.raw == "User's budget for the Hawaii trip is $10,000"
    assert record.provenance == ["m0"]


def test_http_errors_are_retried_with_backoff_then_the_batch_dies(
    llm_setup: tuple[ScriptedOpenAIServer, SQLiteOutbox, LongTermMemory, Clock, OpenAIChatModel],
) -> None:
    server, outbox, lt, clock, model = llm_setup  # no script: every chat request gets a 500
    batch_id = outbox.enqueue(ANNA, said("My budget for the Hawaii trip is $10,000"))
    worker = Worker(outbox, lt, LLMExtractor(model))
    waits = []
    for _ in range(3):
        assert worker.run_once() == 1
        batch = outbox.get(batch_id)
        assert batch is not None
        waits.append(batch.next_attempt_at - int(clock() * 1000))
        clock.advance(10)
    assert batch is not None and batch.state is BatchState.DEAD
    assert "HTTP 500" in (batch.last_error or "")
    assert waits[:2] == [2000, 4000]
    assert len(server.chat_requests) == 6  # each attempt: the client's own retry too
    assert lt.count(Filter(user_id="anna")) == 0
    assert worker.run_once() == 0


def test_a_timeout_is_retried_later(
    llm_setup: tuple[ScriptedOpenAIServer, SQLiteOutbox, LongTermMemory, Clock, OpenAIChatModel],
) -> None:
    server, outbox, lt, clock, model = llm_setup
    server.delay_next(2.0)
    server.delay_next(2.0)
    server.script_chat(VALID, VALID, VALID)
    batch_id = outbox.enqueue(ANNA, said("My budget for the Hawaii trip is $10,000"))
    worker = Worker(outbox, lt, LLMExtractor(model))
    worker.run_once()
    batch = outbox.get(batch_id)
    assert batch is not None and batch.state is BatchState.PENDING
    assert "failed after 2 attempt" in (batch.last_error or "")
    assert lt.count(Filter(user_id="anna")) == 0
    clock.advance(2)
    worker.run_once()
    assert outbox.counts()[BatchState.DONE] == 1
    assert lt.count(Filter(user_id="anna")) == 1


# -- kill -9 ---------------------------------------------------------------------------------

KILL_LEASE_S = 0.3
KILL_BATCHES = 15


def kill_batch(run: int, index: int) -> tuple[SessionKey, list[Message]]:
    key = SessionKey("default", f"u{index % 3}", f"run{run}")
    messages = [
        Message(id=f"r{run}-b{index}-m{j}", role=Role.USER, content=f"fact {run}.{index}.{j}")
        for j in range(3)
    ]
    return key, messages


def kill_child(db: str, run: int) -> None:
    """A process that enqueues batches and works them until it is SIGKILLed."""
    retry = RetryPolicy(lease_s=KILL_LEASE_S, max_attempts=10_000, backoff_s=0.0)
    outbox = SQLiteOutbox(db, retry=retry)
    lt = LongTermMemory(SQLiteStore(db), HashedEmbedder())
    worker = Worker(outbox, lt, LineExtractor(), batch_size=2)
    print("ready", flush=True)
    for index in range(KILL_BATCHES):
        print("enqueued", outbox.enqueue(*kill_batch(run, index)), flush=True)
        if run > 0 and index == 0:  # the previous run's first batch again: the same batch
            print("enqueued", outbox.enqueue(*kill_batch(run - 1, 0)), flush=True)
        worker.run_once()
    worker.drain()
    print("drained", flush=True)
    time.sleep(60)


@pytest.mark.slow
def test_kill_minus_nine_loses_no_batch_and_applies_none_twice(tmp_path: Path) -> None:
    db = str(tmp_path / "chatmem.db")
    rng = random.Random(1234)
    acknowledged: set[str] = set()
    for run in range(8):
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"from tests.test_worker import kill_child; kill_child({db!r}, {run})",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stderr is not None
        first = child.stdout.readline().strip()
        if first != "ready":
            child.kill()
            _, err = child.communicate(timeout=30)
            raise AssertionError(f"run {run}: the child did not start: {first!r} {err}")
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(child.pid, signal.SIGKILL)
        out, err = child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL, f"run {run}: {child.returncode} {err}"
        acknowledged.update(
            line.split()[1] for line in out.splitlines() if line.startswith("enqueued")
        )

    time.sleep(KILL_LEASE_S + 0.05)  # the dead workers' leases run out
    retry = RetryPolicy(lease_s=KILL_LEASE_S, max_attempts=10_000, backoff_s=0.0)
    with (
        SQLiteOutbox(db, retry=retry) as outbox,
        LongTermMemory(SQLiteStore(db), HashedEmbedder()) as lt,
    ):
        Worker(outbox, lt, LineExtractor()).drain()
        counts = outbox.counts()
        assert (
            counts[BatchState.PENDING] == counts[BatchState.LEASED] == counts[BatchState.DEAD] == 0
        )
        done = outbox.batches(BatchState.DONE, limit=10_000)
        assert acknowledged <= {b.batch_id for b in done}
        expected = Counter(m.content for b in done for m in b.messages)
        stored = Counter(r.content.raw for r in all_records(lt))
        assert stored == expected  # every fact of every batch, each exactly once
        assert all(n == 1 for n in expected.values())


def all_records(lt: LongTermMemory) -> list[MemoryRecord]:
    records: list[MemoryRecord] = []
    for user in ("u0", "u1", "u2"):
        records.extend(lt.list(Filter(user_id=user), limit=10_000).records)
    return records


# -- 16 concurrent sessions of one user ------------------------------------------------------

SHARED = [
    "My name is Anna.",
    "I live in Berlin.",
    "I work as a nurse.",
    "I am allergic to peanuts.",
]
LIKES = [
    "pizza", "sushi", "jazz music", "chess", "gardening", "sailing", "opera", "knitting",
    "surfing", "photography", "poetry", "skiing", "baking", "cycling", "painting", "board games",
]  # fmt: skip


def session_batches(session: int) -> list[tuple[SessionKey, list[Message]]]:
    """Three batches of one session: each says two shared facts and, once, its own."""
    key = SessionKey("default", "anna", f"s{session}")
    batches = []
    for step in range(3):
        texts = [SHARED[(session + step) % 4], SHARED[(session + step + 1) % 4]]
        if step == 1:
            texts.append(f"I love {LIKES[session]}.")
        messages = [
            Message(id=f"s{session}-t{step}-m{j}", role=Role.USER, content=text)
            for j, text in enumerate(texts)
        ]
        batches.append((key, messages))
    return batches


def expected_texts(sessions: range) -> set[str]:
    extractor = OfflineExtractor()
    texts = SHARED + [f"I love {LIKES[s]}." for s in sessions]
    return {f.text for t in texts for f in extractor.extract(said(t))}


def assert_no_duplicates(lt: LongTermMemory, sessions: range) -> None:
    records = lt.list(Filter(user_id="anna"), limit=1000).records
    texts = Counter(r.content.raw for r in records)
    assert set(texts) == expected_texts(sessions)
    assert all(n == 1 for n in texts.values()), texts
    assert all(r.time.valid_to is None for r in records)


def test_sixteen_concurrent_sessions_of_one_user_make_no_duplicates(
    store_path: Path, embedder: LocalEmbedder
) -> None:
    with (
        SQLiteOutbox(store_path) as outbox,
        LongTermMemory(SQLiteStore(store_path), embedder) as lt,
    ):
        workers = [
            Worker(outbox, lt, OfflineExtractor(), batch_size=2, poll_s=0.01) for _ in range(2)
        ]
        for worker in workers:
            worker.start()

        def chat(session: int) -> None:
            for key, messages in session_batches(session):
                outbox.enqueue(key, messages)
                outbox.enqueue(key, messages)  # a retried hand-over: still one batch

        threads = [threading.Thread(target=chat, args=(s,)) for s in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wait_until(lambda: outbox.counts()[BatchState.DONE] == 48)
        for worker in workers:
            worker.stop()
        assert_no_duplicates(lt, range(16))


def session_child(db: str, first: int, last: int) -> None:
    """A process that enqueues sessions first..last-1 of the user and works the queue."""
    outbox = SQLiteOutbox(db)
    lt = LongTermMemory(SQLiteStore(db), LocalEmbedder())
    worker = Worker(outbox, lt, OfflineExtractor(), batch_size=2, poll_s=0.01)
    worker.start()
    for session in range(first, last):
        for key, messages in session_batches(session):
            outbox.enqueue(key, messages)
    while outbox.counts()[BatchState.DONE] < 48:
        time.sleep(0.02)
    worker.stop()
    lt.close()
    outbox.close()


def test_two_processes_sharing_a_user_make_no_duplicates(
    store_path: Path, embedder: LocalEmbedder
) -> None:
    with SQLiteOutbox(store_path), LongTermMemory(SQLiteStore(store_path), embedder):
        pass  # create the schema once, before both processes race to
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from tests.test_worker import session_child; "
                f"session_child({str(store_path)!r}, {a}, {b})",
            ],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for a, b in ((0, 8), (8, 16))
    ]
    for child in children:
        _, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
    with LongTermMemory(SQLiteStore(store_path), embedder) as lt:
        assert_no_duplicates(lt, range(16))


def test_a_batch_belongs_to_the_project_its_last_messages_name() -> None:
    def said(text: str, project: str | None = None) -> Message:
        metadata = {"project_id": project} if project else {}
        return Message.model_validate({"role": "user", "content": text, "metadata": metadata})

    assert project_of([said("a"), said("b")]) is None
    assert project_of([said("a", "trip"), said("b")]) == "trip"
    assert project_of([said("a", "trip"), said("b", "work"), said("c")]) == "work"
    assert project_of([said("a", "")]) is None


def test_an_answer_built_on_restricted_memories_is_never_extracted(
    llm_setup: tuple[ScriptedOpenAIServer, SQLiteOutbox, LongTermMemory, Clock, OpenAIChatModel],
) -> None:
    """The proxy marks an answer made with an hr-only memory (``metadata.memory_acl``); the
    extraction model never sees it, so no memory open to every key is made of its text."""
    server, outbox, lt, _, model = llm_setup
    server.script_chat(VALID, VALID)
    restricted = Message(
        id="a1",
        role=Role.ASSISTANT,
        content="Your salary review gives you a 3% raise.",
        metadata={MEMORY_ACL: [["hr"]]},
    )
    outbox.enqueue(ANNA, [*said("What about my salary review?"), restricted])
    only = Message(id="a2", role=Role.ASSISTANT, content="It is a 3% raise.",
                   metadata={MEMORY_ACL: [["hr"]]})  # fmt: skip
    outbox.enqueue(ANNA, [only])
    worker = Worker(outbox, lt, LLMExtractor(model))
    assert worker.drain() == 2 and outbox.counts()[BatchState.DONE] == 2
    sent = json.dumps(server.chat_requests)
    assert "salary review?" in sent  # the user's own turn is extracted as ever
    assert "3% raise" not in sent
    assert len(server.chat_requests) == 1  # a batch of restricted answers only asks nothing


def test_the_worker_gives_way_to_searches_in_flight(
    store_path: Path, embedder: LocalEmbedder
) -> None:
    from chatmem.foreground import FOREGROUND

    with (
        SQLiteOutbox(store_path) as outbox,
        LongTermMemory(SQLiteStore(store_path), embedder) as lt,
        FOREGROUND.unit(),  # a search runs all along
    ):
        outbox.enqueue(ANNA, said("My name is Anna.", "I live in Berlin."))
        waited = FOREGROUND.waited
        assert Worker(outbox, lt, OfflineExtractor()).drain() == 1  # slower, still done
        assert FOREGROUND.waited > waited
        assert lt.count(Filter(user_id="anna")) == 2
