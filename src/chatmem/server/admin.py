"""Keys and tenants, ``/v1/admin`` (SPEC A6): only the admin key reaches these routes.

A key is shown once, when it is made; afterwards only its id is ever shown. Revoking a key
takes effect on its next request. Keys from the config file are listed but cannot be revoked
here (edit the file).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from chatmem.server.app import AdminDep, RuntimeDep
from chatmem.server.auth import KeyInfo

router = APIRouter(prefix="/v1/admin", tags=["admin"])

Id = Annotated[str, Field(min_length=1, max_length=256)]
Role = Annotated[str, Field(min_length=1, max_length=64)]


class CreateKey(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant_id: Id
    #: Roles that open memories restricted to them (``access_control.allowed_roles``).
    roles: list[Role] = Field(default_factory=list, max_length=32)
    name: str | None = Field(default=None, min_length=1, max_length=256)


class Key(BaseModel):
    """A key as listed: its id, never the key itself."""

    key_id: str
    tenant_id: str
    roles: list[str]
    name: str | None
    #: Milliseconds since the epoch (0 for a key of the config file).
    created_at: int
    revoked: bool
    #: "config" (from the config file) or "api" (made here, revocable).
    source: str

    @classmethod
    def of(cls, info: KeyInfo) -> Key:
        return cls(
            key_id=info.key_id,
            tenant_id=info.tenant_id,
            roles=info.roles,
            name=info.name,
            created_at=info.created_at,
            revoked=info.revoked,
            source=info.source,
        )


class NewKey(BaseModel):
    """A key just made. ``key`` is shown here and never again."""

    key: str
    key_id: str
    tenant_id: str
    roles: list[str]
    name: str | None
    created_at: int


class Keys(BaseModel):
    keys: list[Key]


class Tenant(BaseModel):
    tenant_id: str
    #: Keys that still work.
    keys: int
    revoked_keys: int


class Tenants(BaseModel):
    tenants: list[Tenant]


@router.post("/keys", status_code=201)
def create_key(body: CreateKey, runtime: RuntimeDep, _: AdminDep) -> NewKey:
    """Make a key for a tenant (the tenant exists once it has a key)."""
    key, info = runtime.keys.create(body.tenant_id, body.roles, body.name)
    return NewKey(
        key=key,
        key_id=info.key_id,
        tenant_id=info.tenant_id,
        roles=info.roles,
        name=info.name,
        created_at=info.created_at,
    )


@router.get("/keys")
def list_keys(
    runtime: RuntimeDep,
    _: AdminDep,
    tenant_id: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
) -> Keys:
    """Every key, or one tenant's: config keys first, then by creation."""
    return Keys(keys=[Key.of(info) for info in runtime.keys.keys(tenant_id)])


@router.delete("/keys/{key_id}")
def revoke_key(
    key_id: Annotated[str, Path(min_length=1, max_length=256)], runtime: RuntimeDep, _: AdminDep
) -> Key:
    """Revoke a key made through this API; its next request is refused (401)."""
    return Key.of(runtime.keys.revoke(key_id))


@router.get("/tenants")
def list_tenants(runtime: RuntimeDep, _: AdminDep) -> Tenants:
    """The tenants known from keys, with how many keys each has."""
    counts: dict[str, list[int]] = {}
    for info in runtime.keys.keys(tenant_id=None):
        live_revoked = counts.setdefault(info.tenant_id, [0, 0])
        live_revoked[1 if info.revoked else 0] += 1
    return Tenants(
        tenants=[
            Tenant(tenant_id=tenant, keys=live, revoked_keys=revoked)
            for tenant, (live, revoked) in sorted(counts.items())
        ]
    )


__all__ = ["router"]
