"""Each user's vectors as one in-memory matrix, kept exact across threads and processes.

A search scores a user's memories with one matrix product (0.3 ms for 10,000 x 384 on one
core, where sqlite-vec's partitioned KNN took 6.5 ms). The matrix is loaded from the store
on first use and kept in an LRU bounded in bytes. Correctness comes from a version row per
user that every write transaction bumps: ``appended`` for inserts, ``changed`` for anything
that alters or removes a vector, ``edited`` for updates (an updated row keeps the count it
was updated at). A reader compares the versions it reads (in the same snapshot as the
vectors) with its cached ones and reads only what moved: the rows appended since, and after
a ``changed``, the rows removed since and the vectors of the rows updated since.

Reading the whole matrix again after each delete or new vector, once per search while a
decay sweep or the extraction worker kept writing, took more of a loaded service's CPU than
the searches themselves (issue 14). A snapshot older than the cached entry (a search that
began before another's write) reads the user whole, at its own versions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from chatmem.caches import LRUCache
from chatmem.records import Vector

#: (rowid, vector blob, memory id) of a user's rows, in rowid order.
Rows = Iterable[tuple[int, bytes, str]]
#: A user's (appended, changed, edited) counters, as ``user_versions`` holds them.
Versions = tuple[int, int, int]


class UserRows(Protocol):
    """How the cache reads one user's rows, all in the snapshot its versions came from."""

    def after(self, rowid: int) -> Rows:
        """The rows with a larger rowid, in rowid order."""

    def still_there(self, rowids: npt.NDArray[np.int64], changed: int) -> npt.NDArray[np.bool_]:
        """Which of ``rowids``, the user's rows at the ``changed`` count, are there now."""

    def edited_since(self, edited: int) -> Rows:
        """The rows updated after the ``edited`` count, in any order."""


#: Default memory budget of the cache: enough for ~80 users of 10,000 memories (384 dims).
DEFAULT_BUDGET_BYTES = 512 * 1024 * 1024


@dataclass
class UserVectors:
    """One user's vectors, ordered by rowid (rowids only grow, so appends keep the order)."""

    rowids: npt.NDArray[np.int64]
    matrix: Vector
    versions: Versions
    #: The memory id of each row (a rowid's id never changes: rowids are not reused).
    ids: list[str]

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes + self.rowids.nbytes) + 90 * len(self.ids)

    def ids_of(self, rowids: Iterable[int]) -> dict[int, str]:
        """The ids of those of ``rowids`` held here."""
        wanted = np.fromiter(rowids, np.int64)
        if not len(wanted) or not len(self.rowids):
            return {}
        at = np.minimum(np.searchsorted(self.rowids, wanted), len(self.rowids) - 1)
        held = self.rowids[at] == wanted
        ids = self.ids
        return {
            int(rowid): ids[int(i)]
            for rowid, i in zip(wanted[held].tolist(), at[held].tolist(), strict=True)
        }

    @property
    def last_rowid(self) -> int:
        return int(self.rowids[-1]) if len(self.rowids) else 0

    def scores(self, vector: Vector) -> Vector:
        """Cosine similarity of every stored vector with ``vector`` (all are unit length)."""
        result: Vector = self.matrix @ vector
        return result

    def positions(self, rowids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Where ``rowids`` (all present) sit in this matrix."""
        return np.searchsorted(self.rowids, rowids)

    def moved_on(self, rows: UserRows, versions: Versions) -> UserVectors:
        """These vectors at the later ``versions``, reading only what moved (module doc)."""
        fresh = self
        if versions[1] != self.versions[1]:
            fresh = fresh._pruned(rows.still_there(self.rowids, self.versions[1]))
            fresh = fresh._rewritten(rows.edited_since(self.versions[2]))
        if versions[0] != self.versions[0]:
            extra = _build(rows.after(self.last_rowid), self.matrix.shape[1], versions)
            fresh = UserVectors(
                np.concatenate([fresh.rowids, extra.rowids]),
                np.concatenate([fresh.matrix, extra.matrix]),
                versions,
                fresh.ids + extra.ids,
            )
        return UserVectors(fresh.rowids, fresh.matrix, versions, fresh.ids)

    def _pruned(self, there: npt.NDArray[np.bool_]) -> UserVectors:
        kept = np.flatnonzero(there)
        if len(kept) == len(self.rowids):
            return self
        ids = self.ids
        return UserVectors(
            self.rowids[kept], self.matrix[kept], self.versions, [ids[i] for i in kept.tolist()]
        )

    def _rewritten(self, rows: Rows) -> UserVectors:
        """With the vectors of ``rows`` that this matrix holds replaced (rows appended
        after it are read with the appends)."""
        found = [(rowid, blob) for rowid, blob, _ in rows if rowid <= self.last_rowid]
        if not found:
            return self
        wanted = np.fromiter((rowid for rowid, _ in found), np.int64, len(found))
        at = np.minimum(np.searchsorted(self.rowids, wanted), len(self.rowids) - 1)
        held = self.rowids[at] == wanted  # all of them, unless a row changed hands
        fresh = np.frombuffer(b"".join(blob for _, blob in found), np.float32)
        matrix = self.matrix.copy()
        matrix[at[held]] = fresh.reshape(len(found), matrix.shape[1])[held]
        return UserVectors(self.rowids, matrix, self.versions, self.ids)


def _build(rows: Rows, dimension: int, versions: Versions) -> UserVectors:
    found = list(rows)
    rowids = np.fromiter((r for r, _, _ in found), dtype=np.int64, count=len(found))
    matrix = np.frombuffer(b"".join(blob for _, blob, _ in found), dtype=np.float32)
    ids = [memory_id for _, _, memory_id in found]
    return UserVectors(rowids, matrix.reshape(len(found), dimension), versions, ids)


class VectorCache:
    """User key -> ``UserVectors``, least recently used dropped past ``budget_bytes``."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self._users: LRUCache[str, UserVectors] = LRUCache(
            budget_bytes, size=lambda key, vectors: vectors.nbytes
        )

    def vectors(self, key: str, versions: Versions, dimension: int, rows: UserRows) -> UserVectors:
        """The user's vectors at ``versions``, read through ``rows`` (in the same snapshot)
        only as far as they moved since the cached ones. An update that leaves every vector
        as it was (``edited`` alone moved) changes nothing here."""
        cached = self._users.get(key)
        older = cached is not None and (
            versions[0] < cached.versions[0] or versions[1] < cached.versions[1]
        )
        if cached is None or older:
            fresh = _build(rows.after(0), dimension, versions)
        elif cached.versions == versions:
            return cached
        elif cached.versions[:2] == versions[:2]:
            # Only fields moved: the same arrays, marked as exact at the later ``edited``
            # (a vector changed after it bumps ``changed`` and a later ``edited`` both).
            fresh = UserVectors(cached.rowids, cached.matrix, versions, cached.ids)
        else:
            fresh = cached.moved_on(rows, versions)
        self._keep(key, fresh)
        return fresh

    def _keep(self, key: str, fresh: UserVectors) -> None:
        self._users.put(key, fresh)

    def clear(self) -> None:
        self._users.clear()
