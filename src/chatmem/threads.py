"""Helpers for chatmem's background threads."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Generic, TypeVar, cast

T = TypeVar("T")


def lower_priority() -> None:
    """Let the calling thread yield the CPU to searches: nice 10, where the system lets a
    thread set its own (Linux); elsewhere nothing."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


class Prefetched(Generic[T]):
    """A value computed once: in a thread of ``pool()``'s from when ``start`` is called, or
    else in the caller's thread when first asked for (``__call__``).

    A search's query vector is one: a store about to wait on work that leaves the
    interpreter lock free (SQLite's full-text search) starts it first, so the two overlap;
    one whose other half is Python (the keyword postings held in memory) asks for it when
    it needs it. A thread there would only compete with the search for the two cores and
    the lock: at 10,000 memories, about 1 ms of a 14 ms search p50 (docs/benchmarks.md,
    "The query embedded where it is used")."""

    def __init__(self, compute: Callable[[], T], pool: Callable[[], Executor]) -> None:
        self._compute = compute
        self._pool = pool
        self._future: Future[T] | None = None
        self._done = False
        self._value: T | None = None

    def start(self) -> None:
        """Compute it in the pool from now, unless it is started or done already."""
        if self._future is None and not self._done:
            self._future = self._pool().submit(self._compute)

    def ready(self) -> bool:
        """Whether asking for it now would not wait (computed, or never started: then the
        caller computes it)."""
        return self._done or self._future is None or self._future.done()

    def __call__(self) -> T:
        if not self._done:
            value = self._compute() if self._future is None else self._future.result()
            self._value, self._done = value, True
        return cast(T, self._value)
