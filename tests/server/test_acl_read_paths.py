"""What was built on a restricted memory stays as restricted as the memory (SPEC L7, issue
11 item 1): a stored response, the chain that continues it, and a session's answer that an
``hr`` memory went into are read back only by a key that could read that memory.

The upstream echoes what it is sent, so an answer holds the text of every memory injected
for it. Each memory says a secret token; a token of a memory the reader may not read must
appear in nothing the reader gets back, through any door: ``GET`` and ``DELETE
/v1/responses/{id}``, ``previous_response_id``, ``GET /v1/sessions/{id}`` in every format,
ending a session (its episodic summary), and the inspector's session page.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatmem.messages import Message, MessageMetadata, Role
from chatmem.server import Runtime
from chatmem.server.response_store import (
    MIGRATIONS,
    MIGRATIONS_TABLE,
    ResponseStore,
    ResponseTable,
    SQLiteResponses,
    StoredResponse,
)
from chatmem.server.ui.login import COOKIE
from chatmem.server.visibility import (
    ADMIN_ONLY,
    acl_of,
    join,
    may_see,
    read_acl,
    visible_session,
    with_acl,
)
from chatmem.sessions import SessionState
from chatmem.short_term import Window
from chatmem.stores.sqlite import SQLiteFile
from tests.server.conftest import _RUNNING, ADMIN_KEY, ServiceFactory, settle

ROLES = ("hr", "legal", "ops")
TENANT = "acme"
QUESTION = "What about my salary review?"
TOKEN = re.compile(r"K[0-9a-f]{8}")
MEMORY = {"similarity_threshold": 0.0, "retrieval_limit": 10}

Caller = str | list[str]  # "anonymous", "admin", or a key's roles


def _service(make_service: ServiceFactory) -> tuple[TestClient, Runtime]:
    client = make_service(auth={"anonymous_tenant": TENANT})
    return client, _RUNNING[-1]


def _headers(runtime: Runtime, caller: Caller) -> dict[str, str]:
    if caller == "anonymous":
        return {}
    if caller == "admin":
        return {"Authorization": f"Bearer {ADMIN_KEY}", "X-Chatmem-Tenant": TENANT}
    key, _ = runtime.keys.create(TENANT, list(caller))
    return {"Authorization": f"Bearer {key}"}


def _remember(runtime: Runtime, user: str, text: str, roles: list[str]) -> None:
    memory = runtime.long_term
    assert memory is not None
    memory.add(text, user_id=user, tenant_id=TENANT, allowed_roles=roles or None)


def _respond(
    client: TestClient, headers: dict[str, str], user: str, session: str, **more: Any
) -> dict[str, Any]:
    body = {
        "model": "m",
        "input": QUESTION,
        "memory_context": {"user_id": user, "session_id": session},
        "memory_config": MEMORY,
        **more,
    }
    made = client.post("/v1/responses", json=body, headers=headers)
    assert made.status_code == 200, made.text
    return dict(made.json())


def _chat(client: TestClient, headers: dict[str, str], user: str, session: str) -> str:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": QUESTION}],
        "memory_context": {"user_id": user, "session_id": session},
        "memory_config": MEMORY,
    }
    said = client.post("/v1/chat/completions", json=body, headers=headers)
    assert said.status_code == 200, said.text
    settle()
    return str(said.json()["choices"][0]["message"]["content"])


def _inspector(
    client: TestClient, runtime: Runtime, caller: Caller, user: str, session: str
) -> str:
    """The inspector's page of the session, as ``caller`` logged in sees it."""
    if caller == "anonymous":
        key = None
    elif caller == "admin":
        key = ADMIN_KEY
    else:
        key, _ = runtime.keys.create(TENANT, list(caller))
    token = client.app.state.ui_sessions.open(key, TENANT)  # type: ignore[attr-defined]
    client.cookies.clear()
    page = client.get(
        f"/ui/users/{user}/sessions/{session}", headers={"Cookie": f"{COOKIE}={token}"}
    )
    client.cookies.clear()
    assert page.status_code == 200, page.text
    return page.text


# -- the responses API --------------------------------------------------------------------


def test_a_response_built_on_an_hr_memory_is_read_and_continued_only_with_hr(
    make_service: ServiceFactory,
) -> None:
    client, runtime = _service(make_service)
    _remember(runtime, "alice", "Salary review Kdeadbeef: alice gets a 3% raise", ["hr"])
    hr, ops = _headers(runtime, ["hr"]), _headers(runtime, ["ops"])
    made = _respond(client, hr, "alice", "s1")
    assert "Kdeadbeef" in made["output"][0]["content"][0]["text"]
    url = f"/v1/responses/{made['id']}"
    for headers in (ops, {}):  # a key without hr, and the anonymous tenant
        got = client.get(url, headers=headers)
        assert got.status_code == 404 and "Kdeadbeef" not in got.text
        chained = client.post(
            "/v1/responses",
            json={"model": "m", "input": "And?", "previous_response_id": made["id"]},
            headers=headers,
        )
        assert chained.status_code == 404, chained.text
        assert chained.json()["error"]["param"] == "previous_response_id"
        assert "Kdeadbeef" not in chained.text
        assert client.delete(url, headers=headers).status_code == 404
    assert "Kdeadbeef" in client.get(url, headers=hr).text
    admin = _headers(runtime, "admin")
    assert client.get(url, headers=admin).status_code == 200


def test_a_chain_stays_as_restricted_as_its_earliest_link(make_service: ServiceFactory) -> None:
    client, runtime = _service(make_service)
    _remember(runtime, "alice", "Salary review Kdeadbeef: alice gets a 3% raise", ["hr"])
    hr, ops = _headers(runtime, ["hr", "ops"]), _headers(runtime, ["ops"])
    first = _respond(client, hr, "alice", "s1")
    # No memory this time: the answer is built on the chain, which holds the hr answer.
    second = _respond(
        client,
        hr,
        "alice",
        "s1",
        previous_response_id=first["id"],
        memory_config={"enabled": False},
    )
    assert "Kdeadbeef" in second["output"][0]["content"][0]["text"]
    got = client.get(f"/v1/responses/{second['id']}", headers=ops)
    assert got.status_code == 404 and "Kdeadbeef" not in got.text
    # Nor does the answer in the session open up to the ops key.
    settle()
    session = client.get("/v1/sessions/s1", params={"user_id": "alice"}, headers=ops)
    assert session.status_code == 200 and "Kdeadbeef" not in session.text


def test_a_response_on_unrestricted_memories_reads_as_before(make_service: ServiceFactory) -> None:
    client, runtime = _service(make_service)
    _remember(runtime, "alice", "Salary review Kfeedface: alice gets a 3% raise", [])
    made = _respond(client, _headers(runtime, ["hr"]), "alice", "s1")
    got = client.get(f"/v1/responses/{made['id']}", headers=_headers(runtime, ["ops"]))
    assert got.status_code == 200 and "Kfeedface" in got.text


# -- where the ACL is kept -------------------------------------------------------------------

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
_INJECTED = {"memory": {"outcome": "injected", "memories": [{"id": "m1", "content": "x"}]}}


def _legacy_rows(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> ResponseTable:
    """A response table at its first schema, holding a response that memories went into and
    one that none did; then opened as today, which migrates it."""
    rows = [
        ("resp_a", "acme", "anna", "s", "[]", json.dumps({"id": "resp_a", **_INJECTED}), 1),
        ("resp_b", "acme", "anna", "s", "[]", json.dumps({"id": "resp_b"}), 2),
    ]
    columns = "response_id, tenant_id, user_id, session_id, messages, body, created_at"
    if backend == "sqlite":
        path = tmp_path / "service.db"
        old = SQLiteFile(path)
        old.migrate(MIGRATIONS[:1], table=MIGRATIONS_TABLE)
        old.write(lambda c: c.executemany(f"INSERT INTO responses ({columns}) VALUES"
                                          " (?, ?, ?, ?, ?, ?, ?)", rows))  # fmt: skip
        old.close()
        return SQLiteResponses(path)
    pytest.importorskip("psycopg")
    from chatmem.server.pg_state import RESPONSE_MIGRATIONS, PostgresResponses
    from chatmem.stores.postgres_db import PostgresDatabase, PostgresTables

    uri, schema = request.getfixturevalue("postgres_uri"), request.getfixturevalue("pg_schema")
    first = PostgresTables(uri, RESPONSE_MIGRATIONS[:1], table="response_migrations",
                           schema=schema)  # fmt: skip
    with first.transaction() as conn:
        conn.cursor().executemany(f"INSERT INTO {schema}.responses ({columns}) VALUES"
                                  " (%s, %s, %s, %s, %s, %s, %s)", rows)  # fmt: skip
    first.close()
    database = PostgresDatabase(uri, schema=schema, pool_size=2)
    request.addfinalizer(database.close)
    return PostgresResponses(database)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_kept_response_keeps_its_acl_and_one_kept_before_acls_is_the_admins(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    table = _legacy_rows(backend, request, tmp_path)
    try:
        store = ResponseStore(None, limit=10, table=table)
        legacy, plain = store.get("acme", "resp_a"), store.get("acme", "resp_b")
        assert legacy is not None and legacy.acl == ADMIN_ONLY
        assert not may_see(frozenset({"hr", "ops"}), legacy.acl) and may_see(None, legacy.acl)
        assert plain is not None and plain.acl == []
        kept = StoredResponse("resp_c", "acme", "anna", "s", [], {"id": "resp_c"}, 3,
                              [["hr", "legal"], ["ops"]])  # fmt: skip
        store.put(kept)
        assert store.get("acme", "resp_c") == kept
    finally:
        table.close()


def test_an_acl_is_kept_small_and_one_that_cannot_be_read_opens_to_the_admin_only() -> None:
    assert acl_of([["hr"], [], ["legal", "hr"], ["hr"], ["ops", "legal"]]) == [
        ["hr"],
        ["legal", "ops"],
    ]
    assert join([["ops"]], [["hr", "ops"]], []) == [["ops"]]
    for junk in ("hr", [["hr", 3]], {"hr": 1}, [None]):
        assert read_acl(junk) == ADMIN_ONLY
    assert read_acl(None) == [] and read_acl([["ops", "hr"]]) == [["hr", "ops"]]
    assert may_see(frozenset({"ops"}), [["hr", "ops"], ["ops"]])
    assert not may_see(frozenset(), [["hr"]]) and may_see(frozenset(), [])


# -- session logs ---------------------------------------------------------------------------


def test_a_session_answer_built_on_an_hr_memory_is_withheld_from_other_keys(
    make_service: ServiceFactory,
) -> None:
    client, runtime = _service(make_service)
    _remember(runtime, "alice", "Salary review Kdeadbeef: alice gets a 3% raise", ["hr"])
    hr, ops = _headers(runtime, ["hr"]), _headers(runtime, ["ops"])
    assert "Kdeadbeef" in _chat(client, hr, "alice", "s1")
    params = {"user_id": "alice"}
    for format in ("rich", "openai", "vercel"):
        shown = client.get("/v1/sessions/s1", params={**params, "format": format}, headers=ops)
        assert shown.status_code == 200 and "Kdeadbeef" not in shown.text, format
        assert len(shown.json()["messages"]) == 2  # withheld in its place, not left out
    rich = client.get("/v1/sessions/s1", params=params, headers=ops).json()["messages"]
    assert rich[0]["content"] == QUESTION  # the user's own words are not restricted
    assert rich[1]["content"] == "" and rich[1]["metadata"]["withheld"] == "restricted"
    assert "Kdeadbeef" in client.get("/v1/sessions/s1", params=params, headers=hr).text
    assert "Kdeadbeef" not in _inspector(client, runtime, ["ops"], "alice", "s1")
    assert "Kdeadbeef" in _inspector(client, runtime, ["hr"], "alice", "s1")
    ended = client.post("/v1/sessions/s1/end", json=params, headers=ops)
    assert ended.status_code == 200 and "Kdeadbeef" not in ended.text
    shown = client.get("/v1/sessions/s1", params=params, headers=ops)
    assert "Kdeadbeef" not in shown.text  # nor its episodic summary
    assert "Kdeadbeef" in client.get("/v1/sessions/s1", params=params, headers=hr).text


# -- the property: no read path shows a reader what its roles do not open -----------------

role_sets = st.lists(st.sampled_from(ROLES), unique=True, max_size=2)
callers = st.one_of(st.just("anonymous"), st.just("admin"), role_sets)


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """A user's memories (the roles of each), who writes through them, who reads after."""
    return {
        "memories": draw(st.lists(role_sets, min_size=1, max_size=4)),
        "writer": draw(callers),
        "reader": draw(callers),
        "chained": draw(st.booleans()),
    }


def _may_read(roles: list[str], caller: Caller) -> bool:
    if caller == "admin" or not roles:
        return True
    return caller != "anonymous" and bool(set(caller) & set(roles))


def _written(
    client: TestClient, runtime: Runtime, user: str, scenario: dict[str, Any]
) -> tuple[list[str], str]:
    """The writer's responses (ids) and chat, in sessions "r" and "c"; what its answers
    said, as text."""
    headers = _headers(runtime, scenario["writer"])
    made = [_respond(client, headers, user, "r")]
    if scenario["chained"]:
        more = {"previous_response_id": made[0]["id"], "memory_config": {"enabled": False}}
        made.append(_respond(client, headers, user, "r", **more))
    said = [m["output"][0]["content"][0]["text"] for m in made]
    said.append(_chat(client, headers, user, "c"))
    return [m["id"] for m in made], " ".join(said)


def _read(
    client: TestClient, runtime: Runtime, user: str, ids: list[str], reader: Caller
) -> dict[str, Any]:
    """Every door that returns a stored response or a session, as ``reader``."""
    headers = _headers(runtime, reader)
    seen: dict[str, Any] = {}
    for rid in ids:
        seen[f"get {rid}"] = client.get(f"/v1/responses/{rid}", headers=headers)
        seen[f"chain {rid}"] = client.post(
            "/v1/responses",
            json={"model": "m", "input": "And?", "previous_response_id": rid},
            headers=headers,
        )
    settle()
    for session in ("r", "c"):
        for format in ("rich", "openai", "vercel"):
            params = {"user_id": user, "format": format}
            seen[f"{session} {format}"] = client.get(
                f"/v1/sessions/{session}", params=params, headers=headers
            )
        seen[f"{session} inspector"] = _inspector(client, runtime, reader, user, session)
    seen["end"] = client.post("/v1/sessions/c/end", json={"user_id": user}, headers=headers)
    seen["ended"] = client.get("/v1/sessions/c", params={"user_id": user}, headers=headers)
    for rid in ids:
        seen[f"delete {rid}"] = client.delete(f"/v1/responses/{rid}", headers=headers)
    return seen


def test_no_stored_response_or_session_shows_what_the_readers_roles_do_not_open(
    make_service: ServiceFactory,
) -> None:
    client, runtime = _service(make_service)
    count = iter(range(10_000))

    @settings(
        max_examples=20,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(scenarios())
    def check(scenario: dict[str, Any]) -> None:
        user = f"alice{next(count)}"
        tokens = {}
        for index, roles in enumerate(scenario["memories"]):
            token = f"K{abs(hash((user, index))):08x}"[:9]
            _remember(runtime, user, f"Salary review note {token}: a {index + 2}% raise", roles)
            tokens[token] = roles
        ids, said = _written(client, runtime, user, scenario)
        reader = scenario["reader"]
        hidden = {t for t, roles in tokens.items() if not _may_read(roles, reader)}
        seen = _read(client, runtime, user, ids, reader)
        for door, answer in seen.items():
            text = answer if isinstance(answer, str) else answer.text
            leaked = set(TOKEN.findall(text)) & hidden
            assert not leaked, f"{door} showed {leaked} to {reader}"
        # Not merely less: what the reader may read all of is shown whole.
        open_to_reader = not set(TOKEN.findall(said)) & hidden
        for rid in ids:
            assert (seen[f"get {rid}"].status_code == 200) == open_to_reader, scenario
        rich = seen["c rich"].json()["messages"]
        assert (rich[-1]["content"] != "") == open_to_reader, scenario

    check()


def test_what_a_session_makes_of_a_withheld_answer_is_withheld_too() -> None:
    metadata = with_acl(MessageMetadata(original="Kdeadbeef"), [["hr"]])
    answer = Message(role=Role.ASSISTANT, content="Kdeadbeef: 3%", metadata=metadata)
    history = [Message(role=Role.USER, content=QUESTION), answer]
    summary = Message(role=Role.SYSTEM, content="Summary: Kdeadbeef")
    window = Window(summary, {"raise": "Kdeadbeef"}, [], 2)
    state = SessionState(window_start=2, working_state_at=2, episode=summary)
    for lacking in (frozenset({"ops"}), frozenset()):
        shown = visible_session(lacking, history, window, state)
        assert "Kdeadbeef" not in repr(shown)
        assert shown.messages[0] == history[0] and shown.messages[1].id == answer.id
        assert shown.working_state == {"withheld": "restricted"}
    for holding in (frozenset({"hr"}), None):
        opened = visible_session(holding, history, window, state)
        assert opened == (history, summary, summary, window.working_state)
    # A summary of messages before the answer tells nothing of it.
    early = visible_session(frozenset(), history, window._replace(start=1), state)
    assert early.summary == summary
