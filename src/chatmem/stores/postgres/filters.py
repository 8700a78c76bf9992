"""A ``Filter`` in the PostgreSQL store's SQL: conditions over ``memories`` equivalent to
``Filter.matches``, metadata compared as Python compares values."""

from __future__ import annotations

import json
import math
from typing import Any

from chatmem.records import Filter, utcnow
from chatmem.stores.postgres.schema import INDEXED_METADATA
from chatmem.stores.sql_rows import EQUAL_COLUMNS


def python_equals(value: Any) -> list[str]:
    """The JSON values (as JSON text) that Python finds equal to ``value``: ``True == 1 ==
    1.0``, and None stands for a missing key as well as a JSON null."""
    if isinstance(value, bool):
        return [json.dumps(value), json.dumps(int(value))]
    if isinstance(value, int | float):
        if isinstance(value, float) and math.isnan(value):
            return []  # NaN equals nothing, itself included
        same = [json.dumps(value)]
        if value in (0, 1):
            same.append(json.dumps(bool(value)))
        return same
    return [json.dumps(value)]


def where(scope: Filter, alias: str = "m") -> tuple[str, list[Any]]:
    """SQL conditions (over ``memories AS alias``) equivalent to ``Filter.matches``."""
    conditions = [f"{alias}.tenant_id = %s"]
    params: list[Any] = [scope.tenant_id]
    for column in EQUAL_COLUMNS:
        value = getattr(scope, column)
        if value is not None:
            conditions.append(f"{alias}.{column} = %s")
            params.append(value)
    for column, values in (("id", scope.ids), ("type", scope.types), ("scope", scope.scopes)):
        if values is not None:
            conditions.append(f"{alias}.{column} = ANY(%s)")
            params.append(sorted(str(v) for v in values))
    _add_times(scope, alias, conditions, params)
    _add_metadata(scope, alias, conditions, params)
    _add_access(scope, alias, conditions, params)
    return " AND ".join(conditions), params


def _add_times(scope: Filter, alias: str, conditions: list[str], params: list[Any]) -> None:
    if scope.created_after is not None:
        conditions.append(f"{alias}.created_at >= %s")
        params.append(scope.created_after)
    if scope.created_before is not None:
        conditions.append(f"{alias}.created_at < %s")
        params.append(scope.created_before)
    if scope.valid_at is not None:
        conditions.append(
            f"({alias}.valid_from IS NULL OR {alias}.valid_from <= %s)"
            f" AND ({alias}.valid_to IS NULL OR %s < {alias}.valid_to)"
        )
        params.extend([scope.valid_at, scope.valid_at])
    if scope.known_at is not None:
        conditions.append(
            f"{alias}.created_at <= %s AND ({alias}.valid_to IS NULL OR %s < {alias}.valid_to)"
        )
        params.extend([scope.known_at, scope.known_at])


def _add_metadata(scope: Filter, alias: str, conditions: list[str], params: list[Any]) -> None:
    for key, value in (scope.metadata or {}).items():
        same = python_equals(value)
        if not same:
            conditions.append("FALSE")
            continue
        choices = ", ".join(["%s::jsonb"] * len(same))
        if key in INDEXED_METADATA:
            path = f"{alias}.user_metadata -> '{key}'"
        else:
            path = f"{alias}.user_metadata -> %s"
            params.append(key)
        conditions.append(f"COALESCE({path}, 'null'::jsonb) IN ({choices})")
        params.extend(same)


def _add_access(scope: Filter, alias: str, conditions: list[str], params: list[Any]) -> None:
    if scope.expired is not None:
        conditions.append(
            f"{alias}.expires_at <= %s"
            if scope.expired
            else f"({alias}.expires_at IS NULL OR {alias}.expires_at > %s)"
        )
        params.append(utcnow())
    if scope.reader_roles is not None:
        # SPEC L7: a memory that names roles only for a reader holding one of them.
        roles = f"({alias}.body::jsonb -> 'access_control' -> 'allowed_roles')"
        conditions.append(
            f"(COALESCE(jsonb_array_length({roles}), 0) = 0 OR {roles} ?| %s::text[])"
        )
        params.append(sorted(scope.reader_roles))


__all__ = ["python_equals", "where"]
