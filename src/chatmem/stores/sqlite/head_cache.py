"""Each user's heads held between searches (issue 14).

A search reads the heads (``stores.base.Head``: speaker, text, importance, times) of its
first 50 memories to favour and rerank them. From SQLite that is one statement that takes
seven fields out of 50 JSON bodies and parses them in Python: 0.44 ms a search at 10,000
memories, the largest part of a search after the query embedding and the store's two
halves. The same memories come up search after search, so their heads are kept here per
user and read again only when they changed.

An entry is exact for the ``user_versions`` it was read at, as the field cache's are
(``field_cache``): every write transaction that changes a memory bumps them (``touch``
writes only usage fields, no head's), and an entry read at other versions is dropped
whole. Each head keeps its memory's TTL, so a memory that expired since it was read is
left out as SQL would leave it out. Only a user's whole scope is answered here; a narrower
filter (types, a project, a reader's roles) asks SQL. A user whose heads outgrow the budget
keeps those already held and has the others read each time, rather than losing them all.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence

from chatmem.caches import LRUCache
from chatmem.records import to_ms, utcnow
from chatmem.stores.base import Head
from chatmem.stores.sqlite.field_cache import Versions

#: Default memory budget: about 50 users of 10,000 chat turns.
DEFAULT_BUDGET_BYTES = 32 * 1024 * 1024

#: A memory's head and when its TTL ends (ms; None: never).
Held = tuple[Head, int | None]
#: Reads the heads of ids within the user's scope, expired ones too: (id, head, expires).
Reader = Callable[[Sequence[str]], Iterable[tuple[str, Head, int | None]]]


class _UserHeads:
    """One user's heads read at ``versions``, and about how many bytes they hold."""

    __slots__ = ("versions", "heads", "bytes")

    def __init__(self, versions: Versions) -> None:
        self.versions = versions
        self.heads: dict[str, Held] = {}
        self.bytes = 200


class HeadCache:
    """Users' heads, the most recently searched users within ``max_bytes``; thread-safe."""

    def __init__(self, max_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self._cache: LRUCache[tuple[str, str], _UserHeads] = LRUCache(max_bytes)

    def heads(
        self, tenant: str, user: str, ids: Sequence[str], versions: Versions, read: Reader
    ) -> dict[str, Head]:
        """The heads of ``ids`` that the user has and that have not expired, those not held
        at ``versions`` read with ``read`` (in the snapshot ``versions`` were read in)."""
        key = (tenant, user)
        held = self._cache.get(key)
        if held is None or held.versions != versions:
            held = _UserHeads(versions)
        fresh: dict[str, Held] = {}
        missing = [i for i in ids if i not in held.heads]
        if missing:
            fresh = {memory_id: (head, ends) for memory_id, head, ends in read(missing)}
            added = sum(_size(memory_id, head) for memory_id, (head, _) in fresh.items())
            # A user whose heads outgrow the budget keeps those held: the rest are read.
            if held.bytes + added <= self._cache.max_bytes:
                held.heads.update(fresh)
                held.bytes += added
                self._cache.put(key, held, held.bytes)
        now = to_ms(utcnow())
        found = {}
        for memory_id in ids:
            entry = held.heads.get(memory_id) or fresh.get(memory_id)
            if entry is not None and (entry[1] is None or entry[1] > now):
                found[memory_id] = entry[0]
        return found


def _size(memory_id: str, head: Head) -> int:
    """About the bytes one held head costs: its strings, the tuple, three datetimes."""
    text = sys.getsizeof(head.text) + sys.getsizeof(head.speaker or "")
    return sys.getsizeof(memory_id) + text + 400


__all__ = ["DEFAULT_BUDGET_BYTES", "HeadCache"]
