"""API keys bound to tenants and roles (SPEC A6, L7).

A key is a random token shown once; the service keeps only its SHA-256. Every request is
answered for the tenant of its key, whatever ids it sends, so one tenant's key can never
name another tenant's data. The admin key manages keys and tenants and holds no tenant of
its own (it names one with ``X-Chatmem-Tenant``).

Keys come from the config file (fixed) and from the admin API (kept in the service's
SQLite file, or in PostgreSQL when the memory store is there, revocable). Lookups are
cached in memory, so checking a key costs a dict read.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from chatmem.errors import NotFoundError, ValidationError
from chatmem.records import Filter, new_id
from chatmem.stores.sqlite import SQLiteFile

KEY_PREFIX = "cm-"
ADMIN = "admin"

MIGRATIONS_TABLE = "chatmem_keys_migrations"
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE api_keys (
        key_id TEXT PRIMARY KEY,
        digest TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        roles TEXT NOT NULL,
        name TEXT,
        created_at INTEGER NOT NULL,
        revoked_at INTEGER
    );
    CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id);
    """,
)


@dataclass(frozen=True)
class Principal:
    """Who a request is: a tenant and its roles, or the admin (``tenant_id`` None)."""

    tenant_id: str | None
    roles: frozenset[str] = field(default_factory=frozenset)
    key_id: str | None = None

    @property
    def is_admin(self) -> bool:
        return ADMIN in self.roles and self.tenant_id is None

    def may_read(self, allowed_roles: list[str]) -> bool:
        """A memory that names roles is read only by keys holding one of them."""
        return not allowed_roles or self.is_admin or bool(self.roles.intersection(allowed_roles))

    @property
    def reader_roles(self) -> frozenset[str] | None:
        """The roles this caller reads memories with (``Filter.reader_roles``): the key's,
        or None for the admin, who reads every memory of the tenant it names."""
        return None if self.is_admin else self.roles


@dataclass(frozen=True)
class Reader:
    """Whose memories a request reads, and with which roles (SPEC L7): every read of the
    service builds its filter here, so none can leave the roles out."""

    tenant_id: str
    roles: frozenset[str] | None

    def filter(self, **narrow: Any) -> Filter:
        """The filter of this reader's tenant and roles, narrowed by ``narrow``."""
        fields = {**narrow, "tenant_id": self.tenant_id, "reader_roles": self.roles}
        return Filter.checked(fields)

    def check_grant(self, roles: Sequence[str] | None, field: str = "allowed_roles") -> None:
        """Refuse (ValidationError naming ``field``) roles this reader does not hold: a key
        never writes a memory it could not read, so whatever a write returns or touches
        (the new memory, the neighbours it takes as context) stays within its roles."""
        if self.roles is None or not roles:
            return
        lacking = sorted(set(roles) - self.roles)
        if lacking:
            raise ValidationError(
                f"names roles this key does not hold: {', '.join(lacking)}", field=field
            )


@dataclass(frozen=True)
class KeyInfo:
    key_id: str
    tenant_id: str
    roles: list[str]
    name: str | None
    created_at: int
    revoked: bool
    source: str  # "config" or "api"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def check_tenant(tenant_id: str) -> str:
    if not tenant_id or len(tenant_id) > 256:
        raise ValidationError("must be 1 to 256 characters", field="tenant_id")
    return tenant_id


def check_roles(roles: list[str]) -> list[str]:
    # Key tables keep a key's roles joined by commas: a comma in a role would read back
    # as several roles, and grant them.
    for index, role in enumerate(roles):
        if not role or len(role) > 64 or role == ADMIN or "," in role:
            raise ValidationError(
                "a role is 1 to 64 characters, without a comma, and not 'admin'",
                field=f"roles[{index}]",
            )
    return sorted(set(roles))


class KeyTable(Protocol):
    """Where API-made keys are kept: the service's SQLite file, or PostgreSQL shared by
    every replica (:mod:`chatmem.server.pg_state`)."""

    def insert(self, info: KeyInfo, hashed: str) -> None: ...

    def revoke(self, key_id: str, at_ms: int) -> None: ...

    def rows(self) -> list[KeyInfo]: ...

    def lookup(self, hashed: str) -> KeyInfo | None: ...

    def close(self) -> None: ...


class SQLiteKeyTable:
    """API-made keys in the service's SQLite file."""

    def __init__(self, path: str | Path) -> None:
        self._file = SQLiteFile(path)
        self._file.migrate(MIGRATIONS, table=MIGRATIONS_TABLE)

    def insert(self, info: KeyInfo, hashed: str) -> None:
        row = (info.key_id, hashed, info.tenant_id, ",".join(info.roles), info.name)
        self._file.write(
            lambda conn: conn.execute(
                "INSERT INTO api_keys (key_id, digest, tenant_id, roles, name, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (*row, info.created_at),
            )
        )

    def revoke(self, key_id: str, at_ms: int) -> None:
        self._file.write(
            lambda conn: conn.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
                (at_ms, key_id),
            )
        )

    def rows(self) -> list[KeyInfo]:
        with self._file.read() as conn:
            rows = conn.execute(
                "SELECT key_id, tenant_id, roles, name, created_at, revoked_at"
                " FROM api_keys ORDER BY created_at, key_id"
            ).fetchall()
        return [row_info(row) for row in rows]

    def lookup(self, hashed: str) -> KeyInfo | None:
        with self._file.read() as conn:
            row = conn.execute(
                "SELECT key_id, tenant_id, roles, name, created_at, revoked_at"
                " FROM api_keys WHERE digest = ?",
                (hashed,),
            ).fetchone()
        return None if row is None else row_info(row)

    def close(self) -> None:
        self._file.close()


class KeyStore:
    """Keys by digest: the admin key and the config's keys in memory, the rest in a
    ``KeyTable``: the SQLite file at ``path``, or ``table`` (``path`` and ``table`` None keep
    them in memory too, for a service whose database is unavailable).

    Lookups are cached; with ``cache_s`` a cached answer is asked again after that many
    seconds, so a key revoked through another replica stops working here within it.
    """

    def __init__(
        self,
        path: str | Path | None,
        *,
        admin_key: str | None = None,
        table: KeyTable | None = None,
        cache_s: float | None = None,
    ) -> None:
        self._file: KeyTable | None = table
        if table is None and path is not None:
            self._file = SQLiteKeyTable(path)
        self._admin = digest(admin_key) if admin_key else None
        self._fixed: dict[str, KeyInfo] = {}
        self._made: dict[str, KeyInfo] = {}  # api keys when there is no file
        self._cache: dict[str, tuple[Principal | None, float]] = {}
        self._cache_s = cache_s
        self._lock = threading.Lock()

    def add_fixed(self, key: str, tenant_id: str, roles: list[str], name: str | None) -> None:
        """A key from the config file (never revoked through the API)."""
        info = KeyInfo(
            f"config:{digest(key)[:12]}",
            check_tenant(tenant_id),
            check_roles(roles),
            name,
            0,
            False,
            "config",
        )
        self._fixed[digest(key)] = info

    def authenticate(self, key: str) -> Principal | None:
        """The principal of a key; None for an unknown or revoked key."""
        hashed = digest(key)
        if self._admin is not None and hmac.compare_digest(hashed, self._admin):
            return Principal(None, frozenset({ADMIN}))
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(hashed)
            if cached is not None and (self._cache_s is None or now - cached[1] < self._cache_s):
                return cached[0]
        info = self._fixed.get(hashed) or self._lookup(hashed)
        principal = None
        if info is not None and not info.revoked:
            principal = Principal(info.tenant_id, frozenset(info.roles), info.key_id)
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[hashed] = (principal, now)
        return principal

    def create(
        self, tenant_id: str, roles: list[str], name: str | None = None
    ) -> tuple[str, KeyInfo]:
        """A new key for ``tenant_id``; the key itself is returned here and never again."""
        key = new_key()
        info = KeyInfo(
            "key_" + new_id(),
            check_tenant(tenant_id),
            check_roles(roles),
            name,
            int(time.time() * 1000),
            False,
            "api",
        )
        if self._file is None:
            self._made[digest(key)] = info
        else:
            self._file.insert(info, digest(key))
        return key, info

    def revoke(self, key_id: str) -> KeyInfo:
        """Revoke an API-made key at once (cached lookups are dropped)."""
        found = [k for k in self.keys() if k.key_id == key_id]
        if not found or found[0].source != "api":
            raise NotFoundError(key_id, what="API key")
        now = int(time.time() * 1000)
        if self._file is None:
            for hashed, info in list(self._made.items()):
                if info.key_id == key_id:
                    self._made[hashed] = _revoked(info)
        else:
            self._file.revoke(key_id, now)
        with self._lock:
            self._cache.clear()
        return _revoked(found[0])

    def keys(self, tenant_id: str | None = None) -> list[KeyInfo]:
        """Every key (or one tenant's), config keys first, then by creation."""
        found = list(self._fixed.values()) + list(self._made.values())
        if self._file is not None:
            found += self._file.rows()
        return [k for k in found if tenant_id is None or k.tenant_id == tenant_id]

    def _lookup(self, hashed: str) -> KeyInfo | None:
        if self._file is None:
            return self._made.get(hashed)
        return self._file.lookup(hashed)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def row_info(row: Sequence[Any]) -> KeyInfo:
    """A key from a row of (key_id, tenant_id, roles, name, created_at, revoked_at)."""
    roles = [role for role in row[2].split(",") if role]
    return KeyInfo(row[0], row[1], roles, row[3], row[4], row[5] is not None, "api")


def _revoked(info: KeyInfo) -> KeyInfo:
    return KeyInfo(
        info.key_id, info.tenant_id, info.roles, info.name, info.created_at, True, info.source
    )


__all__ = [
    "ADMIN",
    "KeyInfo",
    "KeyStore",
    "KeyTable",
    "Principal",
    "SQLiteKeyTable",
    "digest",
    "new_key",
    "row_info",
]
