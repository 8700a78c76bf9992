"""Who is calling and with what: the FastAPI dependencies every router takes.

``RuntimeDep`` (the app's runtime), ``PrincipalDep`` (the caller: a key's tenant and roles,
the admin, or the anonymous tenant), ``TenantDep`` (the tenant a data request acts for),
``ReaderDep`` (whose memories it reads, with which roles), ``AdminDep`` (the admin key only)
and ``MemoryRuntimeDep`` (the runtime, 503 while memory is off).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from chatmem.server.auth import KEY_PREFIX, Principal, Reader
from chatmem.server.errors import ApiError
from chatmem.server.runtime import Runtime

TENANT_HEADER = "X-Chatmem-Tenant"


async def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(runtime_of)]


def header_text(request: Request, name: str) -> str | None:
    """A header's value as the text the client sent: HTTP hands headers over as bytes read
    as Latin-1, and clients send ids such as ``José`` in UTF-8, so they are decoded as UTF-8
    (a name must mean one user whether it comes in a header or a body). A 400 naming the
    header when its bytes are not UTF-8."""
    value = request.headers.get(name)
    if value is None:
        return None
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise ApiError(
            400, f"{name}: is not UTF-8 text", param=name, code="validation_error"
        ) from None


def key_of(request: Request) -> str | None:
    """The key a request carries (``Authorization: Bearer``, else ``X-API-Key``)."""
    header = request.headers.get("authorization")
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "Authorization must be 'Bearer <key>'", code="invalid_api_key")
        return token.strip()
    return request.headers.get("x-api-key")


async def principal_of(request: Request) -> Principal:
    """The caller: a key's tenant and roles, the admin, or the anonymous tenant.

    A bearer token that chatmem did not issue (not ``cm-…``, and not a key of the config
    file) counts as no key: an OpenAI SDK always sends one, and with
    ``upstream.pass_authorization`` it is the upstream's key, not chatmem's."""
    runtime: Runtime = request.app.state.runtime
    key = key_of(request)
    principal = runtime.keys.authenticate(key) if key is not None else None
    if principal is not None:
        return principal
    if key is not None and key.startswith(KEY_PREFIX):
        raise ApiError(401, "unknown or revoked API key", code="invalid_api_key")
    anonymous = runtime.config.auth.anonymous_tenant
    if anonymous is None:
        raise ApiError(401, "an API key is required", code="missing_api_key")
    return Principal(anonymous)


PrincipalDep = Annotated[Principal, Depends(principal_of)]


async def tenant_of(request: Request, principal: PrincipalDep) -> str:
    """The tenant a data request acts for: the key's own; the admin names one in the
    ``X-Chatmem-Tenant`` header. Ids in the body never choose the tenant."""
    if principal.tenant_id is not None:
        return principal.tenant_id
    named = header_text(request, TENANT_HEADER)
    if not named:
        raise ApiError(400, f"the admin key acts for the tenant named in {TENANT_HEADER}",
                       param=TENANT_HEADER, code="missing_tenant")  # fmt: skip
    return named


TenantDep = Annotated[str, Depends(tenant_of)]


async def reader_of(principal: PrincipalDep, tenant_id: TenantDep) -> Reader:
    """Whose memories a request reads and with which roles: the tenant it acts for, and
    the key's roles (the admin's: all)."""
    return Reader(tenant_id, principal.reader_roles)


ReaderDep = Annotated[Reader, Depends(reader_of)]


async def require_admin(principal: PrincipalDep) -> Principal:
    if not principal.is_admin:
        raise ApiError(403, "this needs the admin key", code="admin_only")
    return principal


AdminDep = Annotated[Principal, Depends(require_admin)]


async def require_memory(runtime: RuntimeDep) -> Runtime:
    """Memory routes answer 503 while memory is off (F1), saying why."""
    if runtime.long_term is None:
        why = runtime.memory_error or "memory.enabled is false"
        raise ApiError(503, f"memory is off: {why}", code="memory_unavailable")
    return runtime


MemoryRuntimeDep = Annotated[Runtime, Depends(require_memory)]


__all__ = [
    "TENANT_HEADER",
    "AdminDep",
    "MemoryRuntimeDep",
    "PrincipalDep",
    "ReaderDep",
    "RuntimeDep",
    "TenantDep",
    "key_of",
    "principal_of",
    "reader_of",
    "require_admin",
    "require_memory",
    "runtime_of",
    "tenant_of",
]
