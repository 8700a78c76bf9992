"""How many of a user's memories hold each word a query asks for, for the PostgreSQL store's
keyword scores (``search.keyword_half``): a word's idf among the user's memories, as FTS5's
``bm25()`` computes it, ``log((N - n + 0.5) / (n + 0.5))`` for ``n`` of the user's ``N``
memories, at least ``IDF_FLOOR``.

Counting a word reads every memory that holds it, and the user's own name is in most of
them; so the counts are kept per user for ``WORD_COUNTS_SECONDS`` (``WordCounts``), and
forgotten at once when this process writes to the user. Another process's writes reach
them when they expire: until then a word's weight may be a few memories off, which moves a
ranking little (idf is a logarithm of the counts).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from chatmem.stores.postgres.schema import TEXT_SEARCH_CONFIG
from chatmem.stores.postgres_db import Connection

#: The least idf a word gets (FTS5's, for a word in more than half of the rows).
IDF_FLOOR = 1e-6
#: How long a user's counts are kept.
WORD_COUNTS_SECONDS = 30.0
#: Users whose counts are kept at once (least recently used first out).
WORD_COUNTS_USERS = 4096
#: Words counted per user, at most (a user's counts start over past it).
WORDS_PER_USER = 4096

User = tuple[str, str]


@dataclass
class _Counts:
    since: float
    total: int
    held: dict[str, int] = field(default_factory=dict)


def idf(total: int, held: int) -> float:
    """A word's idf for ``held`` of ``total`` memories."""
    return max(IDF_FLOOR, math.log((total - held + 0.5) / (held + 0.5)))


class WordCounts:
    """Each user's memory count and how many of them hold each word asked for. Thread-safe;
    the counting runs outside the lock, and counts made while this process wrote are not
    kept (``forget`` moves the generation on)."""

    def __init__(
        self, seconds: float = WORD_COUNTS_SECONDS, users: int = WORD_COUNTS_USERS
    ) -> None:
        self._seconds, self._users = seconds, users
        self._lock = threading.Lock()
        self._counts: OrderedDict[User, _Counts] = OrderedDict()
        # Writes are numbered; each user's last one is kept (the oldest dropped past
        # ``users``: a user not held last wrote at ``_floor`` or before).
        self._writes = 0
        self._written: OrderedDict[User, int] = OrderedDict()
        self._floor = 0

    def forget(self, users: set[User] | None) -> None:
        """Drop the counts of ``users`` (None: of everyone), after a write to them."""
        with self._lock:
            self._writes += 1
            if users is None:
                self._counts.clear()
                self._written.clear()
                self._floor = self._writes
            for user in users or ():
                self._counts.pop(user, None)
                self._written[user] = self._writes
                self._written.move_to_end(user)
            while len(self._written) > self._users:
                self._floor = max(self._floor, self._written.popitem(last=False)[1])

    def weights(self, conn: Connection, memories: str, user: User, words: list[str]) -> list[float]:
        """The idf of each of ``words`` among ``user``'s memories in ``memories``."""
        now = time.monotonic()
        with self._lock:
            generation = self._writes
            kept = self._counts.get(user)
            if kept is not None and now - kept.since > self._seconds:
                kept = None
            if kept is not None:
                self._counts.move_to_end(user)
            known = dict(kept.held) if kept is not None else {}
        missing = [word for word in dict.fromkeys(words) if word not in known]
        total = kept.total if kept is not None else 0
        if kept is None or missing:
            counted, held = _count(conn, memories, user, missing, kept is None)
            total = counted if kept is None else total
            known.update(zip(missing, held, strict=True))
            self._keep(
                user,
                _Counts(now, total, known) if kept is None else kept,
                missing,
                known,
                generation,
            )
        return [idf(total, known.get(word, 0)) for word in words]

    def _keep(
        self, user: User, counts: _Counts, added: list[str], known: dict[str, int], generation: int
    ) -> None:
        with self._lock:
            if self._written.get(user, self._floor) > generation:
                return  # the user was written meanwhile: these counts may be from before
            if self._counts.get(user) is not counts:
                self._counts[user] = counts
                while len(self._counts) > self._users:
                    self._counts.popitem(last=False)
            if len(counts.held) + len(added) <= WORDS_PER_USER:
                counts.held.update((word, known[word]) for word in added)


def _count(
    conn: Connection, memories: str, user: User, words: list[str], total: bool
) -> tuple[int, list[int]]:
    """The user's memory count (when ``total``; else 0) and how many hold each of ``words``:
    one statement, each matching row's search vector read once."""
    size = (
        f"(SELECT COUNT(*) FROM {memories} WHERE tenant_id = %s AND user_id = %s)" if total else "0"
    )
    if not words:
        row = conn.execute(f"SELECT {size}", list(user) if total else []).fetchone()
        assert row is not None
        return int(row[0]), []
    each = range(len(words))
    queries = ", ".join(f"websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', %s) AS q{i}" for i in each)
    counts = ", ".join(f"COUNT(*) FILTER (WHERE d.doc @@ d.q{i})" for i in each)
    any_word = " || ".join(f"q.q{i}" for i in each)
    row = conn.execute(
        f"SELECT {size}, {counts} FROM (SELECT m.search || ''::tsvector AS doc, q.*"
        f" FROM {memories} AS m, (SELECT {queries}) AS q WHERE m.tenant_id = %s"
        f" AND m.user_id = %s AND m.search @@ ({any_word}) OFFSET 0) AS d",
        [*(user if total else ()), *words, *user],
    ).fetchone()
    assert row is not None
    return int(row[0]), [int(n) for n in row[1:]]


__all__ = ["IDF_FLOOR", "WORD_COUNTS_SECONDS", "WordCounts", "idf"]
