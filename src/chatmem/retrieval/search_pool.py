"""The search pool (SPEC F2): the threads a retriever's searches run in, and the time
budget and queue that keep a slow or busy search from holding up a request.

A search runs in one of a few reused threads. It may wait for a free thread for a short
while, so a burst of requests queues for a few milliseconds (while the embedder batches
their queries) instead of going without memory; past that wait, or with ``QUEUE_DEPTH``
searches already waiting per thread, the request goes on without memory at once. Once
started, a search has its budget; past it, it is left to finish in its thread and the
request goes on without memory. Every way a search can fail is one reason string
("busy", "timeout", "embedding error: …", "store error: …", "error: …").

A search learns as it starts whether others wait behind it (``pressed``): a retriever's
search then leaves out its optional late rerank, so that under load memory stays on for
more requests, ranked a little less finely, rather than on for fewer (issue 14).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from chatmem.errors import EmbeddingError, StoreError
from chatmem.foreground import FOREGROUND

logger = logging.getLogger("chatmem.retrieval")

T = TypeVar("T")

#: Searches that may wait for each search thread before a request goes on without memory
#: (each waits at most its ``queue_ms`` anyway). 8 against 4, 16 clients on 2 cores, three
#: paired runs: memory on for 95.8 % of answers against 95.1 %, 5-7 % more requests a
#: second, p95 10 ms lower (docs/benchmarks.md, "A deeper search queue").
QUEUE_DEPTH = 8


def default_search_workers() -> int:
    """One search thread per core (2 to 8): a search is CPU work (the query embedding, the
    vector product, SQLite), so more threads than cores only make every search slower. With 4
    threads on 2 cores under 16 concurrent clients, nearly every search ran past its 50 ms
    budget and was thrown away after its CPU was spent."""
    return min(8, max(2, os.cpu_count() or 2))


class _Start:
    """When a search began to run in the pool (its budget counts from there), and whether
    others waited behind it then."""

    def __init__(self, pressed: Callable[[], bool]) -> None:
        self.event = threading.Event()
        self.at = 0.0
        self._pressed = pressed

    def running(self, work: Callable[[bool], T]) -> T:
        self.at = time.perf_counter()
        self.event.set()
        return work(self._pressed())


class SearchPool:
    """``workers`` reused threads that run searches within a time budget (see the module
    docstring). Close it to stop the threads."""

    def __init__(self, workers: int) -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="chatmem-search")
        self._workers = workers
        self._in_flight = 0  # searches submitted and not ended (those past their budget too)
        self._busy_lock = threading.Lock()

    @property
    def in_flight(self) -> int:
        """Searches submitted and not ended: waiting, running, or running past their budget."""
        return self._in_flight

    @property
    def pressed(self) -> bool:
        """Whether searches wait for a thread: more in flight than there are threads."""
        return self._in_flight > self._workers

    def run(self, work: Callable[[bool], T], *, budget_ms: float, queue_ms: float) -> T | str:
        """``work(pressed)`` run in the pool, or a string that says why there is no result: it
        could not start within ``queue_ms``, it ran past ``budget_ms`` from its start, or it
        failed. ``pressed`` says whether other searches waited for a thread as it started.
        """
        if not self._admitted():
            logger.warning(
                "Memory: %d searches waiting per thread, going on without memory", QUEUE_DEPTH
            )
            return "busy"
        with FOREGROUND.unit():  # background jobs give way meanwhile (``foreground``)
            return self._run(work, budget_ms, queue_ms)

    def _run(self, work: Callable[[bool], T], budget_ms: float, queue_ms: float) -> T | str:
        started = _Start(lambda: self.pressed)
        future = self._pool.submit(started.running, work)
        future.add_done_callback(self._search_ended)
        if not started.event.wait(queue_ms / 1000):
            if future.cancel():
                logger.warning(
                    "Memory: no search thread free within %.0f ms, going on without memory",
                    queue_ms,
                )
                return "busy"
            started.event.wait()  # it started as the wait ended: its start time is set next
        return _outcome(future, budget_ms / 1000 - (time.perf_counter() - started.at), budget_ms)

    def _admitted(self) -> bool:
        """Take a place in the queue, unless ``QUEUE_DEPTH`` searches per thread hold them."""
        with self._busy_lock:
            busy = self._in_flight >= self._workers * QUEUE_DEPTH
            if not busy:
                self._in_flight += 1
        return not busy

    def _search_ended(self, _: Future[Any]) -> None:
        with self._busy_lock:
            self._in_flight -= 1

    def close(self) -> None:
        """Stop the threads (waits for a search still running; cancels queued ones)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def _outcome(future: Future[T], left_s: float, budget_ms: float) -> T | str:
    """The result of a started search within the ``left_s`` seconds of its budget, or why
    not. Memory is an enhancement, never a failure (F4): every error becomes a reason."""
    try:
        return future.result(timeout=max(left_s, 0.0))
    except FutureTimeout:
        future.cancel()  # not started yet: never run it; running: let it end there
        _log_late(future)
        logger.warning("Memory search timeout (over %.0f ms), going on without memory", budget_ms)
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


def _log_late(future: Future[Any]) -> None:
    """Log how a search that missed its budget ended, so a slow store shows in the logs
    and its error is never left unretrieved."""

    def ended(done: Future[Any]) -> None:
        if done.cancelled():
            return
        error = done.exception()
        if error is not None:
            logger.warning("Memory: a search past its budget then failed: %s", error)

    future.add_done_callback(ended)
