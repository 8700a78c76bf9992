"""Keys and tenants over HTTP (SPEC A6): who may manage them, and what a key can do after."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.server.conftest import ADMIN_KEY, ServiceFactory

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def new_key(client: TestClient, tenant_id: str, roles: list[str] | None = None) -> dict[str, str]:
    """Headers carrying a fresh key for ``tenant_id``, made through the admin API."""
    made = client.post(
        "/v1/admin/keys", json={"tenant_id": tenant_id, "roles": roles or []}, headers=ADMIN
    )
    assert made.status_code == 201, made.text
    return bearer(made.json()["key"])


def assert_error(response: Any, status: int, *, param: str | None = None, code: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    assert error["param"] == param
    assert error["message"]


def test_a_key_is_shown_once_and_acts_for_its_tenant(service: TestClient) -> None:
    made = service.post(
        "/v1/admin/keys",
        json={"tenant_id": "acme", "roles": ["support", "hr", "hr"], "name": "support bot"},
        headers=ADMIN,
    )
    assert made.status_code == 201
    body = made.json()
    assert body["key"].startswith("cm-")
    assert body["tenant_id"] == "acme"
    assert body["roles"] == ["hr", "support"]
    assert body["name"] == "support bot"
    assert datetime.fromisoformat(body["created_at"]) > datetime(2000, 1, 1, tzinfo=UTC)

    listed = service.get("/v1/admin/keys", params={"tenant_id": "acme"}, headers=ADMIN)
    assert listed.status_code == 200
    assert [k["key_id"] for k in listed.json()["keys"]] == [body["key_id"]]
    assert body["key"] not in listed.text
    assert listed.json()["keys"][0]["revoked"] is False

    created = service.post(
        "/v1/memory", json={"user_id": "u1", "content": "Likes tea."}, headers=bearer(body["key"])
    )
    assert created.status_code == 201
    assert created.json()["memories"][0]["tenant_id"] == "acme"


def test_tenants_are_listed_with_their_key_counts(service: TestClient) -> None:
    new_key(service, "acme")
    new_key(service, "acme")
    globex = service.post("/v1/admin/keys", json={"tenant_id": "globex"}, headers=ADMIN)
    service.delete(f"/v1/admin/keys/{globex.json()['key_id']}", headers=ADMIN)

    tenants = service.get("/v1/admin/tenants", headers=ADMIN)

    assert tenants.status_code == 200
    assert tenants.json()["tenants"] == [
        {"tenant_id": "acme", "keys": 2, "revoked_keys": 0},
        {"tenant_id": "globex", "keys": 0, "revoked_keys": 1},
    ]
    every = service.get("/v1/admin/keys", headers=ADMIN).json()["keys"]
    assert sorted(k["tenant_id"] for k in every) == ["acme", "acme", "globex"]


def test_a_revoked_key_is_refused_at_once(service: TestClient) -> None:
    made = service.post("/v1/admin/keys", json={"tenant_id": "acme"}, headers=ADMIN).json()
    headers = bearer(made["key"])
    assert service.get("/v1/memory", headers=headers).status_code == 200  # cached as valid

    revoked = service.delete(f"/v1/admin/keys/{made['key_id']}", headers=ADMIN)

    assert revoked.status_code == 200
    assert revoked.json()["revoked"] is True
    assert_error(service.get("/v1/memory", headers=headers), 401, code="invalid_api_key")
    assert_error(
        service.post("/v1/memory", json={"user_id": "u", "content": "x"}, headers=headers),
        401,
        code="invalid_api_key",
    )


def test_unknown_and_config_keys_cannot_be_revoked(make_service: ServiceFactory) -> None:
    service = make_service(
        auth={"keys": [{"key": "config-key-0123456789", "tenant": "acme", "name": "fixed"}]}
    )
    config_key = service.get("/v1/admin/keys", headers=ADMIN).json()["keys"][0]
    assert config_key["source"] == "config"

    assert_error(
        service.delete(f"/v1/admin/keys/{config_key['key_id']}", headers=ADMIN),
        404,
        code="not_found",
    )
    assert_error(service.delete("/v1/admin/keys/key_nope", headers=ADMIN), 404, code="not_found")
    still = service.get("/v1/memory", headers=bearer("config-key-0123456789"))
    assert still.status_code == 200


ADMIN_ROUTES = [
    ("POST", "/v1/admin/keys", {"tenant_id": "acme"}),
    ("GET", "/v1/admin/keys", None),
    ("DELETE", "/v1/admin/keys/key_x", None),
    ("GET", "/v1/admin/tenants", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES)
def test_only_the_admin_key_reaches_admin_routes(
    service: TestClient, method: str, path: str, body: dict[str, Any] | None
) -> None:
    tenant = new_key(service, "acme")
    for headers in (tenant, {}):  # a tenant's key, and no key (the anonymous tenant)
        answered = service.request(method, path, json=body, headers=headers)
        assert_error(answered, 403, code="admin_only")
    keys = service.get("/v1/admin/keys", headers=ADMIN).json()["keys"]
    assert len(keys) == 1  # only the tenant's own: the refused POSTs made none


def test_bad_key_requests_are_400_naming_the_field(service: TestClient) -> None:
    assert_error(
        service.post("/v1/admin/keys", json={"roles": ["hr"]}, headers=ADMIN),
        400,
        param="tenant_id",
        code="validation_error",
    )
    assert_error(
        service.post("/v1/admin/keys", json={"tenant_id": "a", "role": "hr"}, headers=ADMIN),
        400,
        param="role",
        code="validation_error",
    )
    assert_error(
        service.post("/v1/admin/keys", json={"tenant_id": "a", "roles": ["admin"]}, headers=ADMIN),
        400,
        param="roles[0]",
        code="validation_error",
    )
    assert_error(
        service.post("/v1/admin/keys", json={"tenant_id": "x" * 257}, headers=ADMIN),
        400,
        param="tenant_id",
        code="validation_error",
    )
    assert service.get("/v1/admin/keys", headers=ADMIN).json()["keys"] == []


def test_the_admin_names_the_tenant_it_acts_for(service: TestClient) -> None:
    acme = new_key(service, "acme")
    assert_error(
        service.post("/v1/memory", json={"user_id": "u1", "content": "Likes tea."}, headers=ADMIN),
        400,
        param="X-Chatmem-Tenant",
        code="missing_tenant",
    )
    made = service.post(
        "/v1/memory",
        json={"user_id": "u1", "content": "Likes tea."},
        headers={**ADMIN, "X-Chatmem-Tenant": "acme"},
    )
    assert made.status_code == 201
    assert made.json()["memories"][0]["tenant_id"] == "acme"
    seen = service.get("/v1/memory", params={"user_id": "u1"}, headers=acme).json()["memories"]
    assert [m["content"]["raw"] for m in seen] == ["Likes tea."]
    # A tenant's key cannot choose another tenant with the header.
    globex = {**new_key(service, "globex"), "X-Chatmem-Tenant": "acme"}
    other = service.get("/v1/memory", params={"user_id": "u1"}, headers=globex)
    assert other.json()["memories"] == []


def test_without_an_anonymous_tenant_every_request_needs_a_key(
    make_service: ServiceFactory,
) -> None:
    service = make_service(auth={"anonymous_tenant": None})
    assert_error(service.get("/v1/memory"), 401, code="missing_api_key")
    assert_error(
        service.get("/v1/memory", headers=bearer("cm-not-a-key")), 401, code="invalid_api_key"
    )
    assert service.get("/v1/memory", headers=new_key(service, "acme")).status_code == 200
