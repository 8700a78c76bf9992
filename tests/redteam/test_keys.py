"""Keys and roles, attacked from outside: a key holds exactly the roles it was given."""

from __future__ import annotations

from tests.server.conftest import ADMIN_KEY, ServiceFactory

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def test_a_role_with_a_comma_grants_no_other_role(make_service: ServiceFactory) -> None:
    """Key roles were stored comma-joined: a key made with the one role "intern,hr" was
    read back as "intern" and "hr", and so read every hr-only memory."""
    client = make_service(auth={"anonymous_tenant": None})
    hr_key = client.post(
        "/v1/admin/keys", headers=ADMIN, json={"tenant_id": "acme", "roles": ["hr"]}
    )
    hr = {"Authorization": f"Bearer {hr_key.json()['key']}"}
    stored = client.post(
        "/v1/memory",
        headers=hr,
        json={"user_id": "alice", "content": "Alice's salary is 91000", "allowed_roles": ["hr"]},
    )
    assert stored.status_code == 201
    made = client.post(
        "/v1/admin/keys", headers=ADMIN, json={"tenant_id": "acme", "roles": ["intern,hr"]}
    )
    if made.status_code == 400:  # refusing such a role is one right answer
        assert made.json()["error"]["param"].startswith("roles")
        return
    assert made.status_code == 201
    intern = {"Authorization": f"Bearer {made.json()['key']}"}
    found = client.post(
        "/v1/memory/search",
        headers=intern,
        json={"user_id": "alice", "query": "salary", "threshold": 0},
    )
    assert found.status_code == 200
    assert found.json()["results"] == []
