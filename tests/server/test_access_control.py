"""Access control on every read path (SPEC L7, issue 11 item 1).

A memory whose ``access_control.allowed_roles`` names roles is read only by a caller holding
one of them. The property test writes a user's memories with random roles and random links
between them, then reads them through every door of the service with a random caller, and
looks for each memory's secret token in everything that comes back, and in everything the
upstream model was sent: a token of a memory the caller may not read must appear nowhere.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatmem.records import Filter, MemoryRecord, Relation, RelationType
from chatmem.retrieval import expand, search
from chatmem.server import Runtime
from chatmem.stores import Change
from chatmem.testing import ScriptedOpenAIServer
from tests.server.conftest import _RUNNING, ADMIN_KEY, ServiceFactory

ROLES = ("hr", "legal", "ops")
TENANT = "acme"
QUESTION = "What about my salary review?"
#: Asked both ways: a question about the present takes steps of its own (the latest word on
#: what was found first, ``chatmem.long_term.latest``), which must not read past the roles.
QUESTIONS = (QUESTION, "What is my salary review now?")
TOKEN = re.compile(r"K[0-9a-f]{8}")

role_sets = st.lists(st.sampled_from(ROLES), unique=True, max_size=2)


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """A user's memories (roles of each, and links between them) and a caller."""
    roles = draw(st.lists(role_sets, min_size=1, max_size=6))
    links = draw(
        st.lists(
            st.tuples(st.integers(0, len(roles) - 1), st.integers(0, len(roles) - 1)),
            max_size=4,
        )
    )
    caller = draw(st.one_of(st.just("anonymous"), st.just("admin"), role_sets))
    question = draw(st.sampled_from(QUESTIONS))
    return {"roles": roles, "links": links, "caller": caller, "question": question}


def _write(runtime: Runtime, user: str, scenario: dict[str, Any]) -> list[MemoryRecord]:
    """The scenario's memories, each saying a salary fact with its own secret token, with
    ``related_to`` links between them."""
    memory = runtime.long_term
    assert memory is not None
    written = [
        memory.add(
            f"Salary review note {_token(user, i)}: {user} gets a {i + 2}% raise this year",
            user_id=user,
            tenant_id=TENANT,
            allowed_roles=roles or None,
        )[0]
        for i, roles in enumerate(scenario["roles"])
    ]
    for source, target in scenario["links"]:
        if source == target:
            continue
        current = memory.get(written[source].id, tenant_id=TENANT)
        link = Relation(type=RelationType.RELATED_TO, target_id=written[target].id)
        metadata = current.metadata.model_copy(update={"version": current.metadata.version + 1})
        linked = current.model_copy(
            update={"relations": [*current.relations, link], "metadata": metadata}
        )
        memory.store.update([Change(linked, None, current.metadata.version, "linked")])
        written[source] = linked
    return written


def _token(user: str, index: int) -> str:
    return "K" + f"{abs(hash((user, index))):08x}"[-8:]


def _headers(runtime: Runtime, caller: str | list[str]) -> dict[str, str]:
    if caller == "anonymous":
        return {}
    if caller == "admin":
        return {"Authorization": f"Bearer {ADMIN_KEY}", "X-Chatmem-Tenant": TENANT}
    key, _ = runtime.keys.create(TENANT, list(caller))
    return {"Authorization": f"Bearer {key}"}


def _readable(record: MemoryRecord, caller: str | list[str]) -> bool:
    allowed = record.access_control.allowed_roles
    if caller == "admin" or not allowed:
        return True
    return caller != "anonymous" and bool(set(caller) & set(allowed))


def _read_everything(
    client: TestClient,
    headers: dict[str, str],
    user: str,
    ids: list[str],
    question: str = QUESTION,
) -> dict[str, str]:
    """Every read door of the service, for ``user``: what each answered, as text."""
    seen: dict[str, str] = {}
    seen["list"] = client.get("/v1/memory", params={"user_id": user}, headers=headers).text
    seen["search"] = client.post(
        "/v1/memory/search",
        json={"user_id": user, "query": question, "k": 10, "threshold": 0.0},
        headers=headers,
    ).text
    seen["export"] = client.get("/v1/memory/export", params={"user_id": user}, headers=headers).text
    for memory_id in ids:
        params = {"user_id": user}
        seen[f"get {memory_id}"] = client.get(
            f"/v1/memory/{memory_id}", params=params, headers=headers
        ).text
        seen[f"history {memory_id}"] = client.get(
            f"/v1/memory/{memory_id}/history", params=params, headers=headers
        ).text
    chat = {
        "model": "m",
        "messages": [{"role": "user", "content": question}],
        "memory_context": {"user_id": user, "session_id": "acl"},
        "memory_config": {"similarity_threshold": 0.0, "retrieval_limit": 10},
    }
    seen["chat"] = client.post("/v1/chat/completions", json=chat, headers=headers).text
    seen["chat stream"] = client.post(
        "/v1/chat/completions", json={**chat, "stream": True}, headers=headers
    ).text
    first = client.post(
        "/v1/responses",
        json={
            "model": "m",
            "input": question,
            "memory_context": {"user_id": user, "session_id": "acl-r"},
            "memory_config": {"similarity_threshold": 0.0, "retrieval_limit": 10},
        },
        headers=headers,
    )
    seen["responses"] = first.text
    if first.status_code == 200:
        seen["responses chained"] = client.post(
            "/v1/responses",
            json={
                "model": "m",
                "input": "And the one before?",
                "previous_response_id": first.json()["id"],
            },
            headers=headers,
        ).text
    return seen


def test_no_read_path_returns_a_memory_its_caller_may_not_read(
    make_service: ServiceFactory, upstream: ScriptedOpenAIServer
) -> None:
    client = make_service(auth={"anonymous_tenant": TENANT})
    runtime = _RUNNING[-1]
    count = iter(range(10_000))

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(scenarios())
    def check(scenario: dict[str, Any]) -> None:
        user = f"alice{next(count)}"
        written = _write(runtime, user, scenario)
        caller = scenario["caller"]
        readable = {_token(user, i) for i, r in enumerate(written) if _readable(r, caller)}
        hidden = {_token(user, i) for i in range(len(written))} - readable
        before = len(upstream.chat_requests)
        ids = [r.id for r in written]
        seen = _read_everything(client, _headers(runtime, caller), user, ids, scenario["question"])
        sent = json.dumps(upstream.chat_requests[before:])
        for door, text in [*seen.items(), ("sent upstream", sent)]:
            leaked = set(TOKEN.findall(text)) & hidden
            assert not leaked, f"{door} showed {leaked} to {caller}"
        # The doors that list show exactly what the caller may read (not merely less).
        listed = {m["content"]["raw"] for m in json.loads(seen["list"])["memories"]}
        assert {t for t in readable if any(t in text for text in listed)} == readable
        exported = seen["export"]
        assert {t for t in readable if t in exported} == readable
        # The library's own read paths, given the same caller's roles.
        _check_library(runtime, user, caller, hidden, scenario["question"])

    check()


def _check_library(
    runtime: Runtime, user: str, caller: str | list[str], hidden: set[str], question: str
) -> None:
    memory = runtime.long_term
    assert memory is not None and runtime.retriever is not None
    roles = None if caller == "admin" else frozenset(() if caller == "anonymous" else caller)
    hits = search(
        memory, question, user_id=user, tenant_id=TENANT, k=10, threshold=0.0, roles=roles
    )
    linked = expand(memory, hits, user_id=user, tenant_id=TENANT, roles=roles)
    found = runtime.retriever.retrieve(
        [{"role": "user", "content": question}],
        user_id=user,
        tenant_id=TENANT,
        threshold=0.0,
        k=10,
        roles=roles,
    )
    page = memory.list(Filter(tenant_id=TENANT, user_id=user, reader_roles=roles), limit=100)
    texts = [
        *(m.record.text for m in [*hits, *linked]),
        json.dumps(found.injected_messages),
        *(r.text for r in page.records),
    ]
    for text in texts:
        assert not set(TOKEN.findall(text)) & hidden
    # Every memory linked from a readable one is followed only when readable too.
    for item in linked:
        assert Filter(tenant_id=TENANT, reader_roles=roles).may_read(item.record)


# -- writes never reach past the writer's roles ----------------------------------------------


def _service_with_keys(
    make_service: ServiceFactory,
) -> tuple[TestClient, dict[str, str], dict[str, str]]:
    from tests.server.test_admin import ADMIN, new_key

    client = make_service(auth={"anonymous_tenant": None})
    admin = {**ADMIN, "X-Chatmem-Tenant": TENANT}
    return client, admin, new_key(client, TENANT, ["ops"])


def test_a_key_cannot_write_a_memory_it_could_not_read(make_service: ServiceFactory) -> None:
    client, admin, ops = _service_with_keys(make_service)
    secret = "Salary review note Kdeadbeef: a 3% raise"
    turn = {"user_id": "u", "session_id": "s", "allowed_roles": ["hr"]}
    said = client.post(
        "/v1/memory",
        json={**turn, "messages": [{"role": "user", "content": secret}]},
        headers=admin,
    )
    assert said.status_code == 201
    # Naming hr would have made the new turn take the hr turn as its context, and echoed it.
    probe = {**turn, "messages": [{"role": "user", "content": "hi"}]}
    refused = client.post("/v1/memory", json=probe, headers=ops)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "allowed_roles"
    assert "Kdeadbeef" not in refused.text
    assert (
        client.post("/v1/memory", json={**probe, "allowed_roles": ["ops"]}, headers=ops).status_code
        == 201
    )


def test_an_import_never_reads_replaces_or_grants_past_the_importers_roles(
    make_service: ServiceFactory,
) -> None:
    client, admin, ops = _service_with_keys(make_service)
    made = client.post(
        "/v1/memory",
        json={"user_id": "u", "content": "Salary review Kdeadbeef", "allowed_roles": ["hr"]},
        headers=admin,
    ).json()["memories"][0]
    line = client.get("/v1/memory/export", params={"user_id": "u"}, headers=admin).text
    opened = line.replace('"allowed_roles":["hr"]', '"allowed_roles":[]').replace(
        "Kdeadbeef", "Kfeedface"
    )
    replaced = client.post(
        "/v1/memory/import", content=opened, params={"on_conflict": "replace"}, headers=ops
    )
    assert replaced.status_code == 200, replaced.text  # stored under a new id, not over the hr one
    kept = client.get(f"/v1/memory/{made['id']}", headers=admin).json()
    assert kept["content"]["raw"] == "Salary review Kdeadbeef" and kept["metadata"]["version"] == 1
    granted = client.post("/v1/memory/import", content=line, headers=ops)
    assert granted.status_code == 400
    assert granted.json()["error"]["param"] == "record.access_control.allowed_roles"


def test_forgetting_a_user_deletes_only_what_the_key_may_read(make_service: ServiceFactory) -> None:
    client, admin, ops = _service_with_keys(make_service)
    for roles in ([], ["hr"]):
        body = {"user_id": "u", "content": f"note for {roles}", "allowed_roles": roles}
        assert client.post("/v1/memory", json=body, headers=admin).status_code == 201
    gone = client.delete("/v1/memory", params={"user_id": "u"}, headers=ops)
    assert gone.json() == {"deleted": 1}
    left = client.get("/v1/memory", params={"user_id": "u"}, headers=admin).json()["memories"]
    assert [m["content"]["raw"] for m in left] == ["note for ['hr']"]
    assert client.delete("/v1/memory", params={"user_id": "u"}, headers=admin).json() == {
        "deleted": 1
    }
