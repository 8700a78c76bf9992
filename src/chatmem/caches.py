"""In-process caches bounded in bytes, not only in entries.

A cache bounded only by its number of entries is unbounded in memory when entries can be
large: 256 sessions of long pasted documents, or 2,048 cached query texts of a megabyte
each. ``LRUCache`` keeps the most recently used entries within a byte budget (and, when
given, an entry limit), evicting the least recently used first; an entry larger than the
whole budget is not kept at all. ``size_of`` estimates what a value holds in memory, close
enough to keep a budget honest (a test compares it with what tracemalloc measures).
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

import numpy as np
from pydantic import BaseModel

from chatmem import checks

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

MiB = 1024 * 1024

#: What an entry costs besides its key and value: the ordered dict's node and slot.
ENTRY_OVERHEAD = 120


def size_of(value: Any) -> int:
    """About how many bytes ``value`` holds, following what it contains (strings, numbers,
    lists, dicts, pydantic models, dataclasses, numpy arrays); each object counted once."""
    return _size(value, set())


def _size(value: Any, seen: set[int]) -> int:
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return sys.getsizeof(value)
    if isinstance(value, np.ndarray):
        # getsizeof counts the buffer only when the array owns it.
        own = sys.getsizeof(value)
        return own if value.base is None else own + value.nbytes
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        return size + sum(_size(k, seen) + _size(v, seen) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return size + sum(_size(item, seen) for item in value)
    if isinstance(value, BaseModel):
        parts = (value.__dict__, value.__pydantic_fields_set__, value.__pydantic_extra__)
        return size + sum(_size(part, seen) for part in parts)
    if hasattr(value, "__dict__"):
        return size + _size(vars(value), seen)
    slots = getattr(type(value), "__slots__", ())
    return size + sum(_size(getattr(value, name, None), seen) for name in slots)


class LRUCache(Generic[K, V]):
    """The most recently used entries within ``max_bytes`` (and ``max_entries`` when given).

    ``size(key, value)`` tells an entry's bytes (default: ``size_of`` of both), or ``put``
    is given it. ``on_evict(key, value)`` hears of every entry dropped to make room.
    Thread-safe."""

    def __init__(
        self,
        max_bytes: int,
        *,
        max_entries: int | None = None,
        size: Callable[[K, V], int] | None = None,
        on_evict: Callable[[K, V], None] | None = None,
    ) -> None:
        checks.whole(max_bytes, "max_bytes", low=0)
        if max_entries is not None:
            checks.whole(max_entries, "max_entries")
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._size = size or (lambda key, value: size_of(key) + size_of(value))
        self._on_evict = on_evict
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def bytes(self) -> int:
        """The bytes the entries are estimated to hold, overhead included."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def keys(self) -> Iterator[K]:
        """The keys, least recently used first (a snapshot)."""
        with self._lock:
            return iter(list(self._entries))

    def get(self, key: K) -> V | None:
        """The value of ``key`` (now the most recently used), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: K, value: V, size: int | None = None) -> bool:
        """Keep ``value`` under ``key``, evicting the least recently used entries to make
        room; False (and nothing kept, any older value dropped) when it alone is over the
        budget."""
        cost = (self._size(key, value) if size is None else size) + ENTRY_OVERHEAD
        evicted: list[tuple[K, V]] = []
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            kept = cost <= self.max_bytes
            if kept:
                self._entries[key] = (value, cost)
                self._bytes += cost
            while self._entries and (
                self._bytes > self.max_bytes
                or (self.max_entries is not None and len(self._entries) > self.max_entries)
            ):
                gone, (gone_value, gone_cost) = self._entries.popitem(last=False)
                self._bytes -= gone_cost
                evicted.append((gone, gone_value))
        if self._on_evict is not None:
            for gone, gone_value in evicted:
                self._on_evict(gone, gone_value)
        return kept

    def pop(self, key: K) -> V | None:
        """Remove ``key``; its value, or None when it was not kept."""
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is None:
                return None
            self._bytes -= entry[1]
            return entry[0]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


__all__ = ["ENTRY_OVERHEAD", "LRUCache", "MiB", "size_of"]
