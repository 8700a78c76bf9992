"""How many of a user's memories hold each word a query asks for, for the PostgreSQL store's
keyword scores (``search.keyword_half``): a word's idf among the user's memories, as FTS5's
``bm25()`` computes it, ``log((N - n + 0.5) / (n + 0.5))`` for ``n`` of the user's ``N``
memories, at least ``IDF_FLOOR``.

Counting a word reads every memory that holds it, and the user's own name is in most of
them; so the counts are kept per user for ``WORD_COUNTS_SECONDS`` (``WordCounts``), and
counted again once this process has written ``DRIFT`` of the user's memories since (at
once for a user of fewer than ``EXACT_BELOW``). Another process's writes reach them when
they expire. Until then a word's count may be a few memories off, which moves a ranking
little (idf is a logarithm of the counts); a word not counted yet is always counted.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
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
#: A user's counts are counted again once this process has written this share of the
#: user's memories since (a chat appends a turn between two searches: counting again each
#: time would read, on every search, every memory holding the user's name)...
DRIFT = 0.02
#: ...or after any write, for a user with fewer memories than this (counting is cheap).
EXACT_BELOW = 200

User = tuple[str, str]


@dataclass
class _Counts:
    since: float
    total: int
    held: dict[str, int] = field(default_factory=dict)
    #: Memories this process wrote for the user since these were counted.
    pending: int = 0


def idf(total: int, held: int) -> float:
    """A word's idf for ``held`` of ``total`` memories (a word counted after the user's
    memories were, and since written more, may be held by more than ``total``)."""
    return max(IDF_FLOOR, math.log((max(total, held) - held + 0.5) / (held + 0.5)))


@dataclass
class Known:
    """A user's memory count and the words counted, as ``WordCounts.known`` found them."""

    total: int
    held: dict[str, int]
    generation: int
    counts: _Counts


class WordCounts:
    """Each user's memory count and how many of them hold each word asked for. Thread-safe;
    the counting runs outside the lock, and counts made while this process wrote to the
    user are not kept."""

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

    def wrote(self, rows: Mapping[User, int]) -> None:
        """This process wrote ``rows`` memories of each user (added, changed or deleted): a
        user's counts are dropped once these writes pass ``DRIFT`` of the user's memories
        since they were counted, or at once for a user of fewer than ``EXACT_BELOW``."""
        with self._lock:
            self._writes += 1
            for user, count in rows.items():
                self._written[user] = self._writes
                self._written.move_to_end(user)
                kept = self._counts.get(user)
                if kept is None:
                    continue
                kept.pending += count
                if kept.total < EXACT_BELOW or kept.pending > DRIFT * kept.total:
                    del self._counts[user]
            while len(self._written) > self._users:
                self._floor = max(self._floor, self._written.popitem(last=False)[1])

    def known(self, conn: Connection, memories: str, user: User) -> Known:
        """What is known of ``user``: the memory count (counted now when nothing fresh is
        kept) and the words counted so far."""
        now = time.monotonic()
        with self._lock:
            generation = self._writes
            kept = self._counts.get(user)
            if kept is not None and now - kept.since > self._seconds:
                kept = None
            if kept is not None:
                self._counts.move_to_end(user)
                return Known(kept.total, dict(kept.held), generation, kept)
        total = _total(conn, memories, user)
        return Known(total, {}, generation, _Counts(now, total))

    def learned(self, user: User, known: Known, counted: Mapping[str, int]) -> None:
        """Keep the words ``counted`` beside what was ``known`` (unless this process wrote
        to the user since: they may be from before)."""
        with self._lock:
            if self._written.get(user, self._floor) > known.generation:
                return
            counts = known.counts
            if self._counts.get(user) is not counts:
                self._counts[user] = counts
                while len(self._counts) > self._users:
                    self._counts.popitem(last=False)
            if len(counts.held) + len(counted) <= WORDS_PER_USER:
                counts.held.update(counted)

    def weights(self, conn: Connection, memories: str, user: User, words: list[str]) -> list[float]:
        """The idf of each of ``words`` among ``user``'s memories in ``memories``, the words
        not known yet counted now."""
        known = self.known(conn, memories, user)
        missing = [word for word in dict.fromkeys(words) if word not in known.held]
        held = _held(conn, memories, user, missing) if missing else []
        counted = dict(zip(missing, held, strict=True))
        known.held.update(counted)
        self.learned(user, known, counted)
        return [idf(known.total, known.held[word]) for word in words]


def _total(conn: Connection, memories: str, user: User) -> int:
    """The user's memory count."""
    row = conn.execute(
        f"SELECT COUNT(*) FROM {memories} WHERE tenant_id = %s AND user_id = %s", user
    ).fetchone()
    assert row is not None
    return int(row[0])


def _held(conn: Connection, memories: str, user: User, words: list[str]) -> list[int]:
    """How many of the user's memories hold each of ``words``. The statement's text is the
    same whatever the words, so that the connection prepares it once: planning a statement
    with a column a word took three times its run."""
    # numnode: a word PostgreSQL's stop words empty holds no memory (and raises no notice).
    rows = conn.execute(
        f"SELECT CASE WHEN numnode(w.q) > 0 THEN (SELECT COUNT(*) FROM {memories} AS m"
        " WHERE m.tenant_id = %s AND m.user_id = %s AND m.search @@ w.q) ELSE 0 END"
        f" FROM unnest(%s::text[]) WITH ORDINALITY AS u(word, n),"
        f" LATERAL (SELECT websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', u.word) AS q) AS w"
        " ORDER BY u.n",
        [*user, words],
    ).fetchall()
    return [int(n) for (n,) in rows]


__all__ = ["Known", "DRIFT", "EXACT_BELOW", "IDF_FLOOR", "WORD_COUNTS_SECONDS", "WordCounts", "idf"]
