"""A ``Filter`` in the SQLite store's SQL: the conditions of reads and deletes, and which of
a user's rows a search may return (the few hidden by roles or a TTL, or the ones a narrower
filter admits)."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from chatmem.records import Filter, to_ms, utcnow
from chatmem.stores.sql_rows import EQUAL_COLUMNS
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


def _hidden(conn: sqlite3.Connection, scope: Filter) -> set[int]:
    """The rows of ``scope``'s user that its reader may not see (restricted to roles the
    reader lacks, found through the ``memories_restricted`` index) or that expired (through
    ``memories_expiring``)."""
    expired = conn.execute(
        "SELECT rowid FROM memories WHERE tenant_id = ? AND user_id = ?"
        " AND expires_at IS NOT NULL AND expires_at <= ?",
        (scope.tenant_id, scope.user_id, to_ms(utcnow())),
    ).fetchall()
    return {rowid for (rowid,) in expired} | _hidden_by_roles(conn, scope)


def _hidden_by_roles(conn: sqlite3.Connection, scope: Filter) -> set[int]:
    if scope.reader_roles is None:
        return set()
    rows = conn.execute(
        f"SELECT m.rowid, json_extract(m.body, '{ROLES_PATH}') FROM memories AS m"
        f" WHERE m.tenant_id = ? AND m.user_id = ? AND {RESTRICTED.format(alias='m')}",
        (scope.tenant_id, scope.user_id),
    ).fetchall()
    return {rowid for rowid, roles in rows if scope.reader_roles.isdisjoint(json.loads(roles))}


class Admitted(NamedTuple):
    """Which of a user's rows a search may return: ``only`` these (a filter narrower than
    tenant and user), or all but ``hidden`` (those the reader's roles do not open)."""

    only: set[int] | None
    hidden: set[int]

    def admits(self, rowid: int) -> bool:
        return (self.only is None or rowid in self.only) and rowid not in self.hidden


def admitted(conn: sqlite3.Connection, scope: Filter) -> Admitted:
    """The rows of ``scope``'s user that a search may return. A narrower filter is one query
    over the user's rows (by the ``memories_by_user`` index), run once for both halves;
    without one, only the few rows hidden by roles are read (SPEC L7)."""
    if not _has_extra_conditions(scope):
        return Admitted(None, _hidden(conn, scope))
    conditions, params = where(scope)
    rows = conn.execute(f"SELECT m.rowid FROM memories AS m WHERE {conditions}", params)
    return Admitted({rowid for (rowid,) in rows}, set())


def _has_extra_conditions(scope: Filter) -> bool:
    """Whether ``scope`` narrows a user's memories further than tenant and user."""
    narrowing = scope.model_dump(
        exclude={"tenant_id", "user_id", "reader_roles", "expired"}, exclude_none=True
    )
    # Leaving out expired memories is done like the roles' check (``_hidden``).
    return bool(narrowing) or scope.expired is not False


__all__ = ["Admitted", "admitted", "where"]
