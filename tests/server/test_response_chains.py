"""Response chains are bound to their user: within one tenant, another user continuing a
chain gets the 404 of an unknown id, and the chain's messages never reach the upstream for
them (the scripted upstream echoes what it is sent, so a leak would show in its answer)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from chatmem.testing import ScriptedOpenAIServer
from tests.server.conftest import ServiceFactory, runtime_of

SECRET = "My bank PIN is 4417 and my passport number is X9921."

#: The ways a request names its user.
AS_BOB: dict[str, dict[str, Any]] = {
    "memory_context": {"body": {"memory_context": {"user_id": "bob"}}},
    "user": {"body": {"user": "bob"}},
    "header": {"headers": {"X-Chatmem-User": "bob"}},
}


def create(client: TestClient, *, headers: dict[str, str] | None = None, **body: Any) -> Any:
    return client.post("/v1/responses", json={"model": "m", **body}, headers=headers or {})


def as_bob(how: str, **body: Any) -> dict[str, Any]:
    named = AS_BOB[how]
    return {"headers": named.get("headers"), **named.get("body", {}), **body}


def sent_anything_with(upstream: ScriptedOpenAIServer, text: str) -> bool:
    return any(text in str(request) for request in upstream.chat_requests)


@pytest.fixture
def alices_chain(service: TestClient) -> str:
    made = create(service, input=SECRET, memory_context={"user_id": "alice"})
    assert made.status_code == 200
    rid: str = made.json()["id"]
    return rid


@pytest.mark.parametrize("how", sorted(AS_BOB))
@pytest.mark.parametrize("stream", [False, True])
def test_another_user_continuing_a_chain_gets_the_404_of_an_unknown_id(
    service: TestClient,
    upstream: ScriptedOpenAIServer,
    alices_chain: str,
    how: str,
    stream: bool,
) -> None:
    asked_before = len(upstream.chat_requests)
    stolen = create(
        service, **as_bob(how, input="Go on.", previous_response_id=alices_chain, stream=stream)
    )
    unknown_id = "resp_" + "0" * (len(alices_chain) - 5)
    unknown = create(
        service, **as_bob(how, input="Go on.", previous_response_id=unknown_id, stream=stream)
    )
    assert stolen.status_code == unknown.status_code == 404
    assert stolen.json() == {
        "error": {**unknown.json()["error"], "message": f"previous_response_id: no response "
                  f"{alices_chain!r}"}
    }  # fmt: skip
    assert stolen.json()["error"]["code"] == "previous_response_not_found"
    assert len(upstream.chat_requests) == asked_before  # nothing went upstream for bob
    own = create(service, **as_bob(how, input="Hello, what did I say?"))
    assert own.status_code == 200
    assert SECRET not in str(own.json())
    assert not any(SECRET in str(request) for request in upstream.chat_requests[asked_before:])


def test_the_chains_own_user_continues_it(
    service: TestClient, upstream: ScriptedOpenAIServer, alices_chain: str
) -> None:
    for body in (
        {"memory_context": {"user_id": "alice"}},
        {"user": "alice"},
        {},  # a request that names no user continues as the chain's user
    ):
        made = create(service, input="And then?", previous_response_id=alices_chain, **body)
        assert made.status_code == 200, made.text
        assert SECRET in made.json()["output"][0]["content"][0]["text"]  # the echo
    assert (
        create(
            service,
            input="And then?",
            previous_response_id=alices_chain,
            headers={"X-Chatmem-User": "alice"},
        ).status_code
        == 200
    )


def test_a_link_made_by_the_owner_without_naming_a_user_stays_the_owners(
    service: TestClient, upstream: ScriptedOpenAIServer, alices_chain: str
) -> None:
    link = create(service, input="More.", previous_response_id=alices_chain).json()["id"]
    assert create(service, **as_bob("user", input="x", previous_response_id=link)).status_code == (
        404
    )
    assert not sent_anything_with(upstream, "'x'")


def test_a_chain_made_without_a_user_is_not_taken_over_by_a_named_one(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    made = create(service, input=SECRET).json()["id"]
    assert create(
        service, **as_bob("user", input="Go on.", previous_response_id=made)
    ).status_code == (404)
    assert create(service, input="Go on.", previous_response_id=made).status_code == 200


def test_two_keys_of_one_tenant_with_two_users(
    make_service: ServiceFactory, upstream: ScriptedOpenAIServer
) -> None:
    service = make_service(auth={"anonymous_tenant": None})
    keys = runtime_of(service).keys
    alice_key, _ = keys.create("acme", [])
    bob_key, _ = keys.create("acme", [])
    made = create(
        service,
        input=SECRET,
        user="alice",
        headers={"Authorization": f"Bearer {alice_key}"},
    ).json()["id"]
    asked = len(upstream.chat_requests)
    stolen = create(
        service,
        input="Repeat everything.",
        user="bob",
        previous_response_id=made,
        headers={"Authorization": f"Bearer {bob_key}"},
    )
    assert stolen.status_code == 404
    assert len(upstream.chat_requests) == asked
