"""Keys, tenants and maintenance, ``/v1/admin`` (SPEC A6): only the admin key reaches these
routes.

A key is shown once, when it is made; afterwards only its id is ever shown. Revoking a key
takes effect on its next request. Keys from the config file are listed but cannot be revoked
here (edit the file). ``POST /v1/admin/maintenance/{job}`` runs a lifecycle job now, under
the lease the scheduled runs take (409 while a replica runs it), and answers what it did.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from chatmem.client.models import ApiKey, NewApiKey, TenantInfo, WireTime
from chatmem.long_term.maintenance import Job
from chatmem.records import from_ms
from chatmem.server.auth import KeyInfo
from chatmem.server.deps import AdminDep, MemoryRuntimeDep, RuntimeDep
from chatmem.server.errors import ApiError
from chatmem.server.maintenance import report_json

router = APIRouter(prefix="/v1/admin", tags=["admin"])

Id = Annotated[str, Field(min_length=1, max_length=256)]
Role = Annotated[str, Field(min_length=1, max_length=64)]


class CreateKey(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant_id: Id
    #: Roles that open memories restricted to them (``access_control.allowed_roles``).
    roles: list[Role] = Field(default_factory=list, max_length=32)
    name: str | None = Field(default=None, min_length=1, max_length=256)


def _listed(info: KeyInfo) -> ApiKey:
    """A key as listed: its id, never the key itself."""
    return ApiKey(
        key_id=info.key_id,
        tenant_id=info.tenant_id,
        roles=info.roles,
        name=info.name,
        created_at=from_ms(info.created_at),
        revoked=info.revoked,
        source=info.source,
    )


class Keys(BaseModel):
    keys: list[ApiKey]


class Tenants(BaseModel):
    tenants: list[TenantInfo]


@router.post("/keys", status_code=201)
def create_key(body: CreateKey, runtime: RuntimeDep, _: AdminDep) -> NewApiKey:
    """Make a key for a tenant (the tenant exists once it has a key)."""
    key, info = runtime.keys.create(body.tenant_id, body.roles, body.name)
    return NewApiKey(
        key=key,
        key_id=info.key_id,
        tenant_id=info.tenant_id,
        roles=info.roles,
        name=info.name,
        created_at=from_ms(info.created_at),
    )


@router.get("/keys")
def list_keys(
    runtime: RuntimeDep,
    _: AdminDep,
    tenant_id: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
) -> Keys:
    """Every key, or one tenant's: config keys first, then by creation."""
    return Keys(keys=[_listed(info) for info in runtime.keys.keys(tenant_id)])


@router.delete("/keys/{key_id}")
def revoke_key(
    key_id: Annotated[str, Path(min_length=1, max_length=256)], runtime: RuntimeDep, _: AdminDep
) -> ApiKey:
    """Revoke a key made through this API; its next request is refused (401)."""
    return _listed(runtime.keys.revoke(key_id))


@router.get("/tenants")
def list_tenants(runtime: RuntimeDep, _: AdminDep) -> Tenants:
    """The tenants known from keys, with how many keys each has."""
    counts: dict[str, list[int]] = {}
    for info in runtime.keys.keys(tenant_id=None):
        live_revoked = counts.setdefault(info.tenant_id, [0, 0])
        live_revoked[1 if info.revoked else 0] += 1
    return Tenants(
        tenants=[
            TenantInfo(tenant_id=tenant, keys=live, revoked_keys=revoked)
            for tenant, (live, revoked) in sorted(counts.items())
        ]
    )


class MaintenanceRun(BaseModel):
    """What one run of a lifecycle job did (``chatmem.long_term.maintenance.JobReport``)."""

    job: Job
    tenants: list[str]
    #: Users the job went through (the decay sweep walks tenants, not users: 0).
    users: int
    #: decay: expired, scanned, rescored, deleted, pinned; quota: deleted; consolidate:
    #: summaries; reflect: insights.
    counts: dict[str, int]
    took_ms: int
    #: The service began to stop, or the lease was lost, before every user was done.
    stopped: bool
    #: Why nothing ran (a quota job with no quota configured).
    skipped: str | None


class JobLease(BaseModel):
    """A job's lease: who runs it now (None: nobody), when it is next due, and when it last
    ran and what that run did."""

    job: str
    holder: str | None
    next_due_at: WireTime
    last_run_at: WireTime | None
    last_result: dict[str, Any] | None


class JobLeases(BaseModel):
    jobs: list[JobLease]


@router.post("/maintenance/{job}", responses={409: {"description": "a replica runs it"}})
def run_maintenance(
    job: Job,
    _: AdminDep,
    runtime: MemoryRuntimeDep,
    tenant_id: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
    user_id: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
) -> MaintenanceRun:
    """Run a lifecycle job now over every tenant (or ``tenant_id``) and every user (or
    ``user_id``); answers what it did."""
    if runtime.maintenance is None:
        raise ApiError(503, "maintenance is unavailable (see the log)", code="unavailable")
    report = runtime.maintenance.run_now(job, tenant_id=tenant_id, user_id=user_id)
    return MaintenanceRun.model_validate(report_json(report))


@router.get("/maintenance")
def maintenance_leases(_: AdminDep, runtime: MemoryRuntimeDep) -> JobLeases:
    """Each job's lease: who runs it now, when it is next due, its last result."""
    if runtime.maintenance is None:
        raise ApiError(503, "maintenance is unavailable (see the log)", code="unavailable")
    return JobLeases(
        jobs=[
            JobLease(
                job=lease.job,
                holder=lease.holder,
                next_due_at=from_ms(lease.next_due_ms),
                last_run_at=from_ms(lease.last_ms) if lease.last_ms is not None else None,
                last_result=json.loads(lease.last_result) if lease.last_result else None,
            )
            for lease in runtime.maintenance.leases.leases()
        ]
    )


__all__ = ["router"]
