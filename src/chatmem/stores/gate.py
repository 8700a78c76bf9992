"""A gate in front of anything that holds connections: calls pass while it is open, and
closing it waits for the calls inside before the connections go.

Closing a connection that another thread is using is undefined behaviour for SQLite's C
binding (a use-after-free: a segfault, or a corrupt result), and a confusing error for the
others. So every store, session store, outbox and key store lets its calls in through a
``Gate``: ``close`` first shuts the gate (new calls raise ``StoreError``), then waits for the
calls already inside, and only then may the owner close its connections.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from chatmem.errors import StoreError

logger = logging.getLogger("chatmem.stores")

#: How long ``close`` waits for calls already inside before it gives up on them.
DEFAULT_CLOSE_WAIT_S = 10.0


class Gate:
    """Counts the calls inside a resource; see the module docstring."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._inside = 0
        self._closed = False
        self._changed = threading.Condition(threading.Lock())
        self._owners: dict[int, int] = {}

    @property
    def closed(self) -> bool:
        return self._closed

    def check(self) -> None:
        """Raise ``StoreError`` when the gate is shut."""
        if self._closed:
            raise StoreError(f"{self.name} is closed")

    @contextmanager
    def passage(self) -> Iterator[None]:
        """One call inside the resource. A thread already inside may re-enter while the gate
        is closing, so a call that nests another never deadlocks a close."""
        me = threading.get_ident()
        with self._changed:
            if self._closed and not self._owners.get(me):
                raise StoreError(f"{self.name} is closed")
            self._inside += 1
            self._owners[me] = self._owners.get(me, 0) + 1
        try:
            yield
        finally:
            with self._changed:
                self._inside -= 1
                left = self._owners[me] - 1
                if left:
                    self._owners[me] = left
                else:
                    del self._owners[me]
                if self._inside == 0:
                    self._changed.notify_all()

    def close(self, wait_s: float = DEFAULT_CLOSE_WAIT_S) -> bool:
        """Shut the gate and wait up to ``wait_s`` for the calls inside; True when none is
        left (then the owner may free its connections). A call from inside the resource
        (this thread) is not waited for."""
        me = threading.get_ident()
        with self._changed:
            self._closed = True
            done = self._changed.wait_for(
                lambda: self._inside - self._owners.get(me, 0) == 0, timeout=wait_s
            )
            busy = self._inside - self._owners.get(me, 0)
        if not done:
            logger.error(
                "%s: %d calls still running after %.1f s at close; their connections are "
                "left open", self.name, busy, wait_s,
            )  # fmt: skip
        return done


class ClosingLock:
    """A lock for a resource held in memory: ``with lock:`` as usual, but once ``close`` has
    run, entering raises ``StoreError``, as a closed store on any backend does."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.RLock()
        self._closed = False

    def __enter__(self) -> None:
        self._lock.acquire()
        if self._closed:
            self._lock.release()
            raise StoreError(f"{self.name} is closed")

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def close(self) -> None:
        with self._lock:
            self._closed = True


__all__ = ["DEFAULT_CLOSE_WAIT_S", "ClosingLock", "Gate"]
