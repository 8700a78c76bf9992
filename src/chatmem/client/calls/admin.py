"""``/v1/admin`` as calls: API keys and tenants, for the admin key."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from chatmem.client.calls.call import ADMIN, Call, Safety, present, segment
from chatmem.client.models import ApiKey, NewApiKey, TenantInfo


class AdminCalls:
    """``/v1/admin``: keys and tenants (the admin key only; others get AuthenticationError
    with status 403)."""

    @staticmethod
    def create_key(
        tenant_id: str, *, roles: Sequence[str] = (), name: str | None = None
    ) -> Call[NewApiKey]:
        """Make a key for ``tenant_id`` holding ``roles`` (which open memories restricted
        to them); the key itself is in the answer and never shown again."""
        body = present({"tenant_id": tenant_id, "roles": builtins.list(roles), "name": name})
        return Call("POST", f"{ADMIN}/keys", NewApiKey.model_validate, Safety.WRITE, json=body)

    @staticmethod
    def keys(*, tenant_id: str | None = None) -> Call[builtins.list[ApiKey]]:
        """Every key, or one tenant's: config keys first, then by creation."""

        def keys(data: Any) -> builtins.list[ApiKey]:
            return [ApiKey.model_validate(item) for item in data["keys"]]

        params = present({"tenant_id": tenant_id})
        return Call("GET", f"{ADMIN}/keys", keys, Safety.READ, params=params)

    @staticmethod
    def revoke_key(key_id: str) -> Call[ApiKey]:
        """Revoke a key made by ``create_key``; its next request is refused."""
        return Call(
            "DELETE",
            f"{ADMIN}/keys/{segment(key_id)}",
            ApiKey.model_validate,
            Safety.IDEMPOTENT,
            subject=("API key", key_id),
        )

    @staticmethod
    def tenants() -> Call[builtins.list[TenantInfo]]:
        """The tenants known from keys, with how many keys each has."""

        def tenants(data: Any) -> builtins.list[TenantInfo]:
            return [TenantInfo.model_validate(item) for item in data["tenants"]]

        return Call("GET", f"{ADMIN}/tenants", tenants, Safety.READ)


__all__ = ["AdminCalls"]
