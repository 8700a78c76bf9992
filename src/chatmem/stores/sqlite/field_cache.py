"""Each user's filterable fields as arrays, kept beside the vector cache (issue 14).

A search with a filter narrower than its user must know which of the user's rows pass.
Asked of SQLite on every search, that was one row per memory into Python (about 7 ms for
10,000 rows) and, for a ``user_metadata`` key, one JSON parse per row. Here the fields a
``Filter`` tests are held per user as arrays in rowid order, the order of the vector cache,
and a filter becomes a boolean mask in tens of microseconds. The roles of restricted rows
and each ``user_metadata`` key are read the first time a filter asks for them.

An entry is exact for the ``user_versions`` it was read at, and every write transaction
bumps them: ``appended`` for inserts, ``edited`` for updates (each updated row keeps the
count in its ``edited`` column), ``changed`` for a vector altered or a row deleted. A later
search reads only what moved since: the new rows, the rows updated, and, after a delete,
the rows removed (``writes.still_there``: the removal log). ``touch`` writes no field a
filter tests, and bumps nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from chatmem.caches import LRUCache
from chatmem.errors import StoreError
from chatmem.records import Filter, to_ms, utcnow
from chatmem.stores.sqlite.file import sqlite3
from chatmem.stores.sqlite.schema import RESTRICTED, ROLES_PATH, user_key
from chatmem.stores.sqlite.writes import still_there

#: (appended, changed, edited) of one user's ``user_versions`` row.
Versions = tuple[int, int, int]
Mask = npt.NDArray[np.bool_]
Rowids = npt.NDArray[np.int64]
Times = npt.NDArray[np.int64]
#: Default memory budget: about 100 users of 10,000 memories.
DEFAULT_BUDGET_BYTES = 64 * 1024 * 1024

#: Fields a filter tests by equality or membership, held as codes into a table of values.
CODED = ("type", "scope", "agent_id", "project_id", "session_id")
#: Times in ms. NULL is held as the end of the range where the filter's test passes, as
#: ``where`` reads it: an open ``valid_from`` or ``valid_to`` admits every moment, and no
#: ``expires_at`` never expires.
_FIRST, _LAST = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
TIMES = {"created_at": 0, "valid_from": _FIRST, "valid_to": _LAST, "expires_at": _LAST}
#: The fields of ``Filter`` a mask answers for; a search asks SQL about any other.
ANSWERED = frozenset(
    {"tenant_id", "user_id", "agent_id", "project_id", "session_id", "types", "scopes"}
    | {"created_after", "created_before", "valid_at", "known_at", "metadata", "reader_roles"}
    | {"expired"}
)

_INDEXED = (*CODED, "created_at", "valid_from", "valid_to")
#: A user's rows from the covering index ``memories_by_user_fields`` alone, in its order.
_ALL = f"SELECT rowid, {', '.join(_INDEXED)} FROM memories WHERE tenant_id = ? AND user_id = ?"
#: The few rows with a TTL, from the partial index ``memories_expiring``.
_EXPIRING = (
    "SELECT rowid, expires_at FROM memories"
    " WHERE tenant_id = ? AND user_id = ? AND expires_at IS NOT NULL"
)
_ROWS = f"SELECT rowid, {', '.join(_INDEXED)}, expires_at FROM memories AS m"
#: The user's rows after a rowid (found in an index of the user's rows; only those read).
_APPENDED = _ROWS + " WHERE m.tenant_id = ? AND m.user_id = ? AND m.rowid > ?"
#: Rows updated after an ``edited`` count, from the partial index ``memories_edited``.
_EDITED = _ROWS + " WHERE m.tenant_id = ? AND m.user_id = ? AND m.edited > ?"
#: Rows by rowid, given as one JSON array.
_AMONG = " FROM memories AS m WHERE m.rowid IN (SELECT value FROM json_each(?))"


@dataclass(frozen=True)
class Coded:
    """A column as ``codes`` into ``values`` (value -> code). Values equal in Python share
    a code, and for what a row holds that is SQLite's equality too (1 = 1.0, true is 1)."""

    codes: npt.NDArray[np.int32]
    values: dict[Any, int]

    @classmethod
    def of(cls, items: Sequence[Any], values: dict[Any, int] | None = None) -> Coded:
        table = dict(values or {})  # a copy: other threads may read ``values`` meanwhile
        codes = np.fromiter(
            (table.setdefault(item, len(table)) for item in items), np.int32, len(items)
        )
        return cls(codes, table)

    def taken(self, order: npt.NDArray[np.intp]) -> Coded:
        return Coded(self.codes[order], self.values)

    def extended(self, items: Sequence[Any]) -> Coded:
        more = Coded.of(items, self.values)
        return Coded(np.concatenate([self.codes, more.codes]), more.values)

    def patched(self, positions: npt.NDArray[np.intp], items: Sequence[Any]) -> Coded:
        more = Coded.of(items, self.values)
        codes = self.codes.copy()
        codes[positions] = more.codes
        return Coded(codes, more.values)

    def isin(self, wanted: Iterable[Any]) -> Mask:
        """Rows whose value equals one of ``wanted``."""
        return self._has([self.values[v] for v in wanted if v in self.values])

    def where(self, test: Callable[[Any], bool]) -> Mask:
        """Rows whose value passes ``test``."""
        return self._has([code for value, code in self.values.items() if test(value)])

    def _has(self, codes: list[int]) -> Mask:
        if len(codes) == 1:
            found: Mask = self.codes == codes[0]
            return found
        wanted = np.zeros(len(self.values), dtype=np.bool_)  # a lookup by code: no sort
        wanted[codes] = True
        looked_up: Mask = wanted[self.codes]
        return looked_up


def _times(items: Iterable[int | None], null: int, count: int) -> Times:
    return np.fromiter((null if v is None else v for v in items), np.int64, count)


class _Columns(NamedTuple):
    """Rows of ``_ROWS`` (or ``_ALL``) as columns."""

    rowids: Rowids
    coded: dict[str, Sequence[Any]]
    times: dict[str, Times]

    @classmethod
    def of(cls, rows: list[tuple[Any, ...]]) -> _Columns:
        columns = list(zip(*rows, strict=True)) or [()] * (2 + len(_INDEXED))
        count = len(rows)
        times = {
            name: _times(items, TIMES[name], count)
            for name, items in zip(TIMES, columns[1 + len(CODED) :], strict=False)
        }
        return cls(
            np.fromiter(columns[0], np.int64, count),
            dict(zip(CODED, columns[1 : 1 + len(CODED)], strict=True)),
            times,
        )


def _positions(rowids: Rowids, wanted: Rowids) -> npt.NDArray[np.intp]:
    """Where ``wanted`` (all present: the same snapshot) sit in the sorted ``rowids``."""
    at = np.searchsorted(rowids, wanted)
    if len(wanted) and (at.max() >= len(rowids) or not np.array_equal(rowids[at], wanted)):
        raise StoreError("field cache read outside the snapshot of its fields")
    return at


class _Lazy(NamedTuple):
    """A column read when a filter first asks for it: ``expression`` over ``m.body`` (with
    ``params``), each value through ``value``; ``every`` reads it for a user's rows as
    (rowid, value), and may leave out those whose value is ``value(None)``."""

    expression: str
    params: tuple[Any, ...]
    value: Callable[[Any], Any]
    every: Callable[[sqlite3.Connection, UserFields], list[tuple[int, Any]]]

    def read(self, conn: sqlite3.Connection, fields: UserFields) -> Coded:
        """The column for every row of ``fields``."""
        pairs = self.every(conn, fields)
        rowids = np.fromiter((rowid for rowid, _ in pairs), np.int64, len(pairs))
        items: list[Any] = [self.value(None)] * len(fields.rowids)
        for at, (_, raw) in zip(_positions(fields.rowids, rowids), pairs, strict=True):
            items[at] = self.value(raw)
        return Coded.of(items)

    def among(self, conn: sqlite3.Connection, rowids: Rowids) -> list[Any]:
        """The column for ``rowids``, in their order."""
        if not len(rowids):
            return []
        found = dict(
            conn.execute(
                f"SELECT m.rowid, {self.expression}{_AMONG}",
                (*self.params, json.dumps(rowids.tolist())),
            ).fetchall()
        )
        return [self.value(found.get(int(rowid))) for rowid in rowids]


def _restricted(conn: sqlite3.Connection, fields: UserFields) -> list[tuple[int, Any]]:
    """The restricted rows' roles, found through the ``memories_restricted`` partial index."""
    rows: list[tuple[int, Any]] = conn.execute(
        f"SELECT m.rowid, json_extract(m.body, '{ROLES_PATH}') FROM memories AS m"
        f" WHERE m.tenant_id = ? AND m.user_id = ? AND {RESTRICTED.format(alias='m')}",
        (fields.tenant, fields.user),
    ).fetchall()
    return rows


_ROLES = _Lazy(
    f"CASE WHEN {RESTRICTED.format(alias='m')} THEN json_extract(m.body, '{ROLES_PATH}') END",
    (),
    lambda raw: frozenset() if raw is None else frozenset(json.loads(raw)),
    _restricted,
)


def _metadata(key: str) -> _Lazy:
    """One ``user_metadata`` key's values, extracted as ``where`` extracts them."""
    path = f'$.user_metadata."{key}"'

    def every(conn: sqlite3.Connection, fields: UserFields) -> list[tuple[int, Any]]:
        rows: list[tuple[int, Any]] = conn.execute(
            "SELECT rowid, json_extract(body, ?) FROM memories WHERE tenant_id = ? AND user_id = ?",
            (path, fields.tenant, fields.user),
        ).fetchall()
        return rows

    return _Lazy("json_extract(m.body, ?)", (path,), lambda raw: raw, every)


def _lazy(name: str) -> _Lazy:
    return _ROLES if name == "roles" else _metadata(name.removeprefix("metadata:"))


@dataclass
class UserFields:
    """One user's filterable fields at ``versions``; row ``i`` of every column is the row
    ``rowids[i]``. ``lazy`` holds the columns read when a filter first asks for them:
    ``roles`` and ``metadata:<key>``."""

    tenant: str
    user: str
    versions: Versions
    rowids: Rowids
    coded: dict[str, Coded]
    times: dict[str, Times]
    lazy: dict[str, Coded] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        codes = sum(int(column.codes.nbytes) for column in self.coded.values())
        return codes + sum(int(array.nbytes) for array in (self.rowids, *self.times.values()))

    @classmethod
    def read(cls, conn: sqlite3.Connection, tenant: str, user: str, versions: Versions) -> Any:
        """All the user's rows, from two indexes (the lazy columns left to be asked for)."""
        found = _Columns.of(conn.execute(_ALL, (tenant, user)).fetchall())
        order = np.argsort(found.rowids, kind="stable")
        rowids = found.rowids[order]
        times = {name: found.times[name][order] for name in found.times}
        times["expires_at"] = np.full(len(rowids), _LAST, dtype=np.int64)
        expiring = conn.execute(_EXPIRING, (tenant, user)).fetchall()
        at = _positions(rowids, np.fromiter((r for r, _ in expiring), np.int64, len(expiring)))
        times["expires_at"][at] = [moment for _, moment in expiring]
        coded = {name: Coded.of(items).taken(order) for name, items in found.coded.items()}
        return cls(tenant, user, versions, rowids, coded, times)

    def moved_on(self, conn: sqlite3.Connection, versions: Versions) -> UserFields:
        """These fields at the later ``versions``, reading only what moved: rows deleted
        (``changed``: a new vector also bumps ``edited``, the only way fields change), rows
        inserted (``appended``: rowids only grow) and rows updated (``edited``)."""
        fresh, last = self, int(self.rowids[-1]) if len(self.rowids) else 0
        if versions[1] != self.versions[1]:
            fresh = fresh._pruned(conn)
        if versions[0] != self.versions[0]:
            fresh = fresh._appended(conn, last)
        if versions[2] != self.versions[2]:
            fresh = fresh._edited(conn, self.versions[2])
        return replace(fresh, versions=versions, lazy=dict(fresh.lazy))

    def _pruned(self, conn: sqlite3.Connection) -> UserFields:
        there = still_there(conn, self.tenant, self.user, self.versions[1], self.rowids)
        kept = np.flatnonzero(there)
        if len(kept) == len(self.rowids):
            return self
        return UserFields(
            self.tenant,
            self.user,
            self.versions,
            self.rowids[kept],
            {name: column.taken(kept) for name, column in self.coded.items()},
            {name: array[kept] for name, array in self.times.items()},
            {name: column.taken(kept) for name, column in dict(self.lazy).items()},
        )

    def _appended(self, conn: sqlite3.Connection, last: int) -> UserFields:
        rows = conn.execute(_APPENDED, (self.tenant, self.user, last)).fetchall()
        more = _Columns.of(sorted(rows))  # few rows, in rowid order
        fresh = UserFields(
            self.tenant,
            self.user,
            self.versions,
            np.concatenate([self.rowids, more.rowids]),
            {name: self.coded[name].extended(items) for name, items in more.coded.items()},
            {name: np.concatenate([self.times[name], more.times[name]]) for name in TIMES},
        )
        for name, column in dict(self.lazy).items():  # a copy: searches may add meanwhile
            fresh.lazy[name] = column.extended(_lazy(name).among(conn, more.rowids))
        return fresh

    def _edited(self, conn: sqlite3.Connection, since: int) -> UserFields:
        rows = conn.execute(_EDITED, (self.tenant, self.user, since)).fetchall()
        more = _Columns.of(rows)
        at = _positions(self.rowids, more.rowids)
        times = {name: array.copy() for name, array in self.times.items()}
        for name, array in times.items():
            array[at] = more.times[name]
        fresh = UserFields(
            self.tenant,
            self.user,
            self.versions,
            self.rowids,
            {name: self.coded[name].patched(at, items) for name, items in more.coded.items()},
            times,
        )
        for name, column in dict(self.lazy).items():
            fresh.lazy[name] = column.patched(at, _lazy(name).among(conn, more.rowids))
        return fresh

    def column(self, conn: sqlite3.Connection, name: str) -> Coded:
        """A lazy column, read now from ``conn`` (whose snapshot is at ``versions``) if no
        search asked for it before."""
        found = self.lazy.get(name)
        if found is None:
            found = self.lazy[name] = _lazy(name).read(conn, self)
        return found

    def mask(self, conn: sqlite3.Connection, scope: Filter) -> Mask:
        """The rows ``scope`` admits (every field it sets in ``ANSWERED``), as ``where``
        finds them."""
        keep = self._time_mask(scope)
        for name in ("agent_id", "project_id", "session_id"):
            value = getattr(scope, name)
            if value is not None:
                keep &= self.coded[name].isin((value,))
        for name, values in (("type", scope.types), ("scope", scope.scopes)):
            if values is not None:
                keep &= self.coded[name].isin(str(v) for v in values)
        for key, value in (scope.metadata or {}).items():
            keep &= self.column(conn, f"metadata:{key}").isin((value,))
        readers = scope.reader_roles
        if readers is not None:
            keep &= self.column(conn, "roles").where(
                lambda roles: not roles or not readers.isdisjoint(roles)
            )
        return keep

    def _time_mask(self, scope: Filter) -> Mask:
        keep = np.ones(len(self.rowids), dtype=np.bool_)
        times = self.times
        if scope.created_after is not None:
            keep &= times["created_at"] >= to_ms(scope.created_after)
        if scope.created_before is not None:
            keep &= times["created_at"] < to_ms(scope.created_before)
        if scope.valid_at is not None:
            moment = to_ms(scope.valid_at)
            keep &= (times["valid_from"] <= moment) & (moment < times["valid_to"])
        if scope.known_at is not None:
            moment = to_ms(scope.known_at)
            keep &= (times["created_at"] <= moment) & (moment < times["valid_to"])
        if scope.expired is not None:
            expires, now = times["expires_at"], to_ms(utcnow())
            keep &= (expires <= now) if scope.expired else (expires > now)
        return keep


class FieldCache:
    """User key -> ``UserFields``, least recently used dropped past ``budget_bytes``
    (counted when an entry is kept; the lazy columns, one int32 a row, are not)."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self._users: LRUCache[str, UserFields] = LRUCache(
            budget_bytes, size=lambda key, fields: fields.nbytes
        )

    def fields(
        self, conn: sqlite3.Connection, tenant: str, user: str, versions: Versions
    ) -> UserFields:
        """The user's fields at ``versions``, which ``conn``'s open snapshot must be at."""
        key = user_key(tenant, user)
        cached = self._users.get(key)
        if cached is not None and cached.versions == versions:
            return cached
        if cached is not None and _moved_on(cached.versions, versions):
            fresh = cached.moved_on(conn, versions)
        else:
            fresh = UserFields.read(conn, tenant, user, versions)
        self._keep(key, fresh)
        return fresh

    def _keep(self, key: str, fresh: UserFields) -> None:
        self._users.put(key, fresh)

    def clear(self) -> None:
        self._users.clear()


def _moved_on(cached: Versions, versions: Versions) -> bool:
    """Whether ``versions`` is ``cached`` or later (else the search's snapshot is older than
    the entry, and reads its own)."""
    return all(now >= then for now, then in zip(versions, cached, strict=True))


__all__ = [
    "ANSWERED",
    "DEFAULT_BUDGET_BYTES",
    "Coded",
    "FieldCache",
    "Mask",
    "Rowids",
    "UserFields",
    "Versions",
]
