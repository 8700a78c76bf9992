"""One table of schema versions per database (per PostgreSQL schema).

Every component that keeps tables in a database (the memory store, sessions, the outbox,
API keys, responses, webhooks, leases) records the migrations it applied in one table,
``chatmem_schema``: (component, version, applied_at). A component is named by the table
it once kept its own versions in (``table=`` of ``migrate``): ``chatmem_keys_migrations``
is the component ``keys``, ``chatmem_migrations`` (the memory store) is ``chatmem``.

A database written before keeps those per-component tables. Opening it copies a table's
versions into ``chatmem_schema`` under its component's name and drops the table, in the
transaction that applies the component's new migrations. Only a name ending in
``_migrations`` is ever read or dropped as such a table.
"""

from __future__ import annotations

import re

from chatmem.errors import StoreError, ValidationError

#: The one table of applied migrations in each database (or PostgreSQL schema).
SCHEMA_TABLE = "chatmem_schema"
LEGACY_SUFFIX = "_migrations"
_PREFIX = "chatmem_"
_TABLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def component_of(table: str) -> str:
    """The component a migrations-table name stands for: without ``_migrations``, and
    without ``chatmem_`` where something is left after it."""
    if not _TABLE_NAME.match(table):
        raise ValidationError(f"must match {_TABLE_NAME.pattern}", field="table")
    name = table.removesuffix(LEGACY_SUFFIX)
    return name.removeprefix(_PREFIX) or name


def legacy_table(table: str) -> str | None:
    """The table that held this component's versions before ``chatmem_schema``, if the
    name is one (it ends in ``_migrations``)."""
    component_of(table)  # checks the name
    return table if table.endswith(LEGACY_SUFFIX) and table != SCHEMA_TABLE else None


def check_known(component: str, current: int, known: int) -> None:
    """Refuse a database migrated by a newer chatmem than this one."""
    if current > known:
        raise StoreError(
            f"{component}: schema version {current} is newer than this chatmem ({known});"
            " upgrade chatmem"
        )


__all__ = ["LEGACY_SUFFIX", "SCHEMA_TABLE", "check_known", "component_of", "legacy_table"]
