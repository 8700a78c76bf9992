"""A request to the service as a value: ``Call`` (method, path, body, how to read the
answer) and ``Safety`` (when the retry loop may send it again), the routes, and the small
helpers every group of calls builds them with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from chatmem.errors import ValidationError
from chatmem.records import Filter

R = TypeVar("R")

MEMORY = "/v1/memory"
IMPORT_PATH = f"{MEMORY}/import"
EXPORT_PATH = f"{MEMORY}/export"
SESSIONS = "/v1/sessions"
ADMIN = "/v1/admin"
#: The header that names the tenant an admin key acts for.
TENANT_HEADER = "X-Chatmem-Tenant"
#: The most memories the service lists in one page.
MAX_PAGE = 500


class Safety(Enum):
    """When a request may be sent again after a failure."""

    #: Changes nothing (GET, search) or sets a value (PUT): again after any failure.
    READ = "read"
    #: Has the same effect twice (DELETE), but a second try after a lost answer would find
    #: nothing and say so: again after a refusal (502, 503, 504, 429) or a failed connect.
    IDEMPOTENT = "idempotent"
    #: Would act twice (POST, PATCH): again only when it never reached the service.
    WRITE = "write"


@dataclass(frozen=True)
class Call(Generic[R]):
    """One request and how to read its answer's JSON."""

    method: str
    path: str
    read: Callable[[Any], R]
    safety: Safety
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    #: Sent as ``X-Chatmem-Tenant`` (only the admin key acts for a tenant it names).
    tenant_id: str | None = None
    #: What a 404 means was not found: (what, id).
    subject: tuple[str, str] | None = None


def segment(value: str) -> str:
    """``value`` as one segment of a path."""
    return quote(value, safe="")


def present(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` without those that are None (left out of a query or body)."""
    return {k: v for k, v in values.items() if v is not None}


def tenant_named(tenant_id: str | None, scope: Filter | None) -> str | None:
    """The tenant a call names: its own argument, else one its filter set explicitly."""
    if tenant_id is not None:
        return tenant_id
    if scope is not None and "tenant_id" in scope.model_fields_set:
        return scope.tenant_id
    return None


def narrowing(scope: Filter, allowed: frozenset[str], where: str = "filter") -> None:
    """Refuse, naming it, a field of ``scope`` the service cannot filter by (rather than
    act on more memories than the caller meant)."""
    for name, info in Filter.model_fields.items():
        if name == "tenant_id" or name in allowed or getattr(scope, name) == info.default:
            continue
        why = (
            "the service takes the reader's roles from its API key"
            if name == "reader_roles"
            else "the service does not filter by it here"
        )
        raise ValidationError(why, field=f"{where}.{name}")


def nothing(data: Any) -> None:
    """The reader of an answer that says nothing the caller needs."""
    return None


__all__ = [
    "ADMIN",
    "EXPORT_PATH",
    "IMPORT_PATH",
    "MAX_PAGE",
    "MEMORY",
    "SESSIONS",
    "TENANT_HEADER",
    "Call",
    "Safety",
    "narrowing",
    "nothing",
    "present",
    "segment",
    "tenant_named",
]
