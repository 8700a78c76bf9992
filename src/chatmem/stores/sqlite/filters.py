"""A ``Filter`` in the SQLite store's SQL: the conditions of reads and deletes, and which of
a user's rows a search may return (all but the few expired, or the ones a narrower filter
or the reader's roles admit, from the field cache)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from chatmem.records import Filter, to_ms, utcnow
from chatmem.stores.sql_rows import EQUAL_COLUMNS
from chatmem.stores.sqlite.field_cache import ANSWERED, FieldCache, Mask, Rowids, Versions
from chatmem.stores.sqlite.file import sqlite3
from chatmem.stores.sqlite.schema import INDEXED_METADATA, RESTRICTED, ROLES_PATH


def where(scope: Filter, alias: str = "m") -> tuple[str, list[Any]]:
    """SQL conditions (over ``memories AS alias``) equivalent to ``Filter.matches``."""
    # With ids given, the unique index on id is the way in; a unary + keeps the planner
    # from scanning a user's whole (tenant_id, user_id) index instead.
    owner = "+" if scope.ids is not None else ""
    conditions = [f"{owner}{alias}.tenant_id = ?"]
    params: list[Any] = [scope.tenant_id]
    for column in EQUAL_COLUMNS:
        value = getattr(scope, column)
        if value is not None:
            conditions.append(f"{owner}{alias}.{column} = ?")
            params.append(value)
    for column, values in (("id", scope.ids), ("type", scope.types), ("scope", scope.scopes)):
        if values is not None:
            items = sorted(str(v) for v in values)
            conditions.append(f"{alias}.{column} IN ({', '.join('?' * len(items)) or 'NULL'})")
            params.extend(items)
    _add_times(scope, alias, conditions, params)
    _add_metadata(scope, alias, conditions, params)
    _add_access(scope, alias, conditions, params)
    return " AND ".join(conditions), params


def _add_times(scope: Filter, alias: str, conditions: list[str], params: list[Any]) -> None:
    if scope.created_after is not None:
        conditions.append(f"{alias}.created_at >= ?")
        params.append(to_ms(scope.created_after))
    if scope.created_before is not None:
        conditions.append(f"{alias}.created_at < ?")
        params.append(to_ms(scope.created_before))
    if scope.valid_at is not None:
        moment = to_ms(scope.valid_at)
        conditions.append(
            f"({alias}.valid_from IS NULL OR {alias}.valid_from <= ?)"
            f" AND ({alias}.valid_to IS NULL OR ? < {alias}.valid_to)"
        )
        params.extend([moment, moment])
    if scope.known_at is not None:
        moment = to_ms(scope.known_at)
        conditions.append(
            f"{alias}.created_at <= ? AND ({alias}.valid_to IS NULL OR ? < {alias}.valid_to)"
        )
        params.extend([moment, moment])


def _add_metadata(scope: Filter, alias: str, conditions: list[str], params: list[Any]) -> None:
    for key, value in (scope.metadata or {}).items():
        if key in INDEXED_METADATA:
            path = f"""json_extract({alias}.body, '$.user_metadata."{key}"')"""
        else:
            path = f"json_extract({alias}.body, ?)"
            params.append(f'$.user_metadata."{key}"')
        if value is None:
            conditions.append(f"{path} IS NULL")
        else:
            conditions.append(f"{path} = ?")
            params.append(value)


def _add_access(scope: Filter, alias: str, conditions: list[str], params: list[Any]) -> None:
    if scope.expired is not None:
        conditions.append(
            f"{alias}.expires_at <= ?"
            if scope.expired
            else f"({alias}.expires_at IS NULL OR {alias}.expires_at > ?)"
        )
        params.append(to_ms(utcnow()))
    if scope.reader_roles is not None:
        roles = sorted(scope.reader_roles)
        conditions.append(
            f"(NOT {RESTRICTED.format(alias=alias)} OR EXISTS (SELECT 1 FROM"
            f" json_each({alias}.body, '{ROLES_PATH}') WHERE value IN"
            f" ({', '.join('?' * len(roles)) or 'NULL'})))"
        )
        params.extend(roles)


def _expired(conn: sqlite3.Connection, scope: Filter) -> frozenset[int]:
    """The rows of ``scope``'s user whose TTL ran out (few: the ``memories_expiring``
    partial index finds them)."""
    rows = conn.execute(
        "SELECT rowid FROM memories WHERE tenant_id = ? AND user_id = ?"
        " AND expires_at IS NOT NULL AND expires_at <= ?",
        (scope.tenant_id, scope.user_id, to_ms(utcnow())),
    ).fetchall()
    return frozenset(rowid for (rowid,) in rows)


class Admitted(NamedTuple):
    """Which of a user's rows a search may return. With ``rowids`` (sorted), those where
    ``mask`` is set (a filter narrower than the user, or a reader's roles); without, all
    but ``hidden`` (the few that expired)."""

    rowids: Rowids | None
    mask: Mask | None
    hidden: frozenset[int]

    @property
    def share(self) -> float:
        """The part of the user's rows admitted (1.0 when only ``hidden`` are left out)."""
        if self.rowids is None or self.mask is None:
            return 1.0
        return float(np.count_nonzero(self.mask)) / max(len(self.mask), 1)

    def admits(self, rowids: Rowids) -> Mask:
        """Which of ``rowids`` (any order) may be returned."""
        if self.rowids is None or self.mask is None:
            return ~np.isin(rowids, np.fromiter(self.hidden, np.int64, len(self.hidden)))
        if not len(self.rowids):
            return np.zeros(len(rowids), dtype=np.bool_)
        at = np.minimum(np.searchsorted(self.rowids, rowids), len(self.rowids) - 1)
        found: Mask = (self.rowids[at] == rowids) & self.mask[at]
        return found

    def positions(self, rowids: Rowids) -> npt.NDArray[np.intp]:
        """Where the admitted rows sit in ``rowids`` (sorted: the vector cache's)."""
        if self.rowids is None and not self.hidden:
            return np.arange(len(rowids))
        if (
            self.rowids is not None
            and self.mask is not None
            and np.array_equal(self.rowids, rowids)
        ):
            return np.flatnonzero(self.mask)  # the field and vector caches share their order
        return np.flatnonzero(self.admits(rowids))


def admitted(
    conn: sqlite3.Connection, scope: Filter, cache: FieldCache, versions: Versions
) -> Admitted:
    """The rows of ``scope``'s user that a search may return. A filter narrower than the
    user, or a reader's roles, is a mask over the user's cached fields (``field_cache``)
    at ``versions``; a field the cache does not hold (``ids``) is asked of SQL. Without
    either, only the few expired rows are read (SPEC L7)."""
    narrowing = _narrowing(scope)
    if not narrowing:
        return Admitted(None, None, _expired(conn, scope))
    if narrowing <= ANSWERED:
        fields = cache.fields(conn, scope.tenant_id, scope.require_user(), versions)
        return Admitted(fields.rowids, fields.mask(conn, scope), frozenset())
    conditions, params = where(scope)
    rows = conn.execute(
        f"SELECT m.rowid FROM memories AS m WHERE {conditions} ORDER BY m.rowid", params
    )
    found = np.fromiter((rowid for (rowid,) in rows), np.int64)
    return Admitted(found, np.ones(len(found), dtype=np.bool_), frozenset())


def _narrowing(scope: Filter) -> set[str]:
    """The fields by which ``scope`` narrows a user's memories further than leaving out the
    expired ones (the default)."""
    names = {name for name in _OPTIONAL if getattr(scope, name) is not None}
    if scope.expired is not False:
        names.add("expired")
    return names


def narrows(scope: Filter) -> bool:
    """Whether ``scope`` leaves out more of its user's memories than the expired ones."""
    return bool(_narrowing(scope))


#: The fields of a ``Filter`` that narrow when set; tenant and user are the search's own.
_OPTIONAL = tuple(
    name for name in Filter.model_fields if name not in {"tenant_id", "user_id", "expired"}
)


__all__ = ["Admitted", "admitted", "narrows", "where"]
