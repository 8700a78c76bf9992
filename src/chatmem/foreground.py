"""Work a caller is waiting for, and background work that gives way to it (issue 14).

A search runs while a chat request waits; a decay sweep or a consolidation runs for
nobody in particular. On a small machine they share the cores and one interpreter lock, and
a sweep deleting thousands of memories made 80 % of the searches under load miss their
budget. ``FOREGROUND`` counts the searches in flight in this process
(``retrieval.search_pool``), and background loops call ``FOREGROUND.pause()`` between units
of work: it returns at once when no search runs, and otherwise waits until none does, or
``longest_s`` at most, so background work still moves on under constant load, only slower.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: The longest a background unit of work waits for the searches in flight.
DEFAULT_PAUSE_S = 0.1


class Foreground:
    """How many waited-for units of work are running in this process."""

    def __init__(self) -> None:
        self._running = 0
        self._idle = threading.Condition()
        #: Pauses that waited (for the metrics and the tests).
        self.waited = 0

    @property
    def running(self) -> int:
        return self._running

    @contextmanager
    def unit(self) -> Iterator[None]:
        """Count the block as waited-for work while it runs."""
        with self._idle:
            self._running += 1
        try:
            yield
        finally:
            with self._idle:
                self._running -= 1
                if self._running == 0:
                    self._idle.notify_all()

    def pause(self, longest_s: float = DEFAULT_PAUSE_S) -> None:
        """Return when no waited-for work runs, or after ``longest_s``."""
        with self._idle:
            if self._running:
                self.waited += 1
                self._idle.wait_for(lambda: self._running == 0, timeout=longest_s)


#: The process's foreground: searches count themselves here, background jobs pause on it.
FOREGROUND = Foreground()

__all__ = ["DEFAULT_PAUSE_S", "FOREGROUND", "Foreground"]
