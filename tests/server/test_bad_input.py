"""Bad input answers 4xx, never 5xx, and the error names the field as the caller sent it
(issue 11, items 4 and 11): list cursors past any store's range, import lines nested
thousands deep or holding integers past 64 bits, non-finite numbers (``NaN``,
``Infinity``, ``1e400``) and lone surrogates in any field of the proxy, imported vectors
that are not finite or not of length 1, an imported id another tenant holds, and messages
too long for a session, which are refused before memory is searched."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from chatmem import LongTermMemory
from chatmem.errors import ImportFormatError, ValidationError
from chatmem.messages import MAX_MESSAGE_CHARS, SessionKey
from chatmem.records import Filter
from chatmem.testing import ScriptedOpenAIServer
from tests.server.conftest import ADMIN_KEY, runtime_of, settle
from tests.server.test_admin import new_key

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
JSON = {"Content-Type": "application/json"}
EXPORT = "chatmem.export/1"
DIMENSION = 384


def post_text(client: TestClient, path: str, text: str, **headers: str) -> httpx.Response:
    """``text`` sent as it is: JSON that ``json.dumps`` would never write."""
    return client.post(path, content=text.encode(), headers={**JSON, **headers})


def assert_refused(response: httpx.Response, param: str | None, status: int = 400) -> str:
    """A 4xx in chatmem's error shape whose ``param`` is ``param`` and whose message names
    it; returns the message."""
    assert status == response.status_code, response.text
    error = response.json()["error"]
    assert error["param"] == param, error
    if param is not None:
        assert param in error["message"], error
    message: str = error["message"]
    return message


def import_line(record: dict[str, Any], vector: Any = None) -> str:
    return json.dumps({"format": EXPORT, "record": record, "vector": vector})


def record(memory_id: str, text: str, user_id: str = "alice", **fields: Any) -> dict[str, Any]:
    return {"id": memory_id, "user_id": user_id, "content": {"raw": text}, **fields}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def memory_lookups(client: TestClient) -> float:
    """How many chat requests memory has worked on (searched, skipped or degraded):
    chatmem_memory_requests_total over every outcome."""
    counter = runtime_of(client).metrics.memory_requests
    return sum(
        sample.value
        for metric in counter.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


# -- (a) list cursors -------------------------------------------------------------------------

BAD_CURSORS = [
    "99999999999999999999:1",  # the outside test's: past SQLite's INTEGER
    "1:99999999999999999999",
    "-99999999999999999999:-99999999999999999999",
    "9223372036854775807:1",  # a 64-bit integer, but no moment any backend holds
    "253402300800000:1",  # 10000-01-01
    "-62135596800001:1",  # a millisecond before year 1
    "1:9223372036854775808",
    "x",
    "1:2:3",
    ":",
    "1.5:2",
    "1e3:1",
    "\u0663:1",  # an Arabic-Indic digit: int() reads it, a cursor never holds it
    " 1:1",
    "9" * 1000,
]


def cursor_routes(client: TestClient) -> list[tuple[str, str, dict[str, str]]]:
    """Every operation of the spec with a ``cursor`` query parameter: its method, its path
    with path parameters filled in, and its other required query parameters."""
    found = []
    for path, methods in client.get("/openapi.json").json()["paths"].items():
        for method, operation in methods.items():
            params = operation.get("parameters", [])
            if not any(p["name"] == "cursor" and p["in"] == "query" for p in params):
                continue
            required = {
                p["name"]: "alice" for p in params if p["in"] == "query" and p.get("required")
            }
            filled = path
            for p in params:
                if p["in"] == "path":
                    filled = filled.replace("{" + p["name"] + "}", "x")
            found.append((method.upper(), filled, required))
    return found


def test_every_list_route_refuses_a_cursor_out_of_range_naming_it(service: TestClient) -> None:
    made = service.post("/v1/memory", json={"user_id": "alice", "content": "Alice likes tea."})
    assert made.status_code == 201
    routes = cursor_routes(service)
    assert ("GET", "/v1/memory", {}) in routes
    for method, path, query in routes:
        headers = ADMIN if path.startswith("/v1/admin") else {}
        for cursor in BAD_CURSORS:
            answered = service.request(
                method, path, params={**query, "cursor": cursor}, headers=headers
            )
            message = assert_refused(answered, "cursor")
            assert message == "cursor: is not a cursor this store issued", (method, path, cursor)
        for cursor in ("0:0", "-62135596800000:0", "253402300799999:9223372036854775807"):
            answered = service.request(
                method, path, params={**query, "cursor": cursor}, headers=headers
            )
            assert answered.status_code == 200, (method, path, cursor, answered.text)


def test_the_library_refuses_a_cursor_out_of_range(memory: LongTermMemory) -> None:
    memory.add("Alice likes tea.", user_id="alice")
    for cursor in BAD_CURSORS:
        with pytest.raises(ValidationError) as caught:
            memory.list(Filter(user_id="alice"), cursor=cursor)
        assert caught.value.field == "cursor"


# -- (b) and (c): import lines nested thousands deep, integers past 64 bits ---------------


def test_an_import_line_nested_3000_deep_is_refused_naming_line_and_field(
    service: TestClient,
) -> None:
    good = import_line(record("m1", "Alice likes tea."))
    deep = import_line(record("m2", "Alice likes jazz.", user_metadata={"notes": [0]}))
    deep = deep.replace('"notes": [0]', f'"notes": {nested(3_000)}')

    answered = service.post("/v1/memory/import", content=f"{good}\n{deep}\n")

    error = answered.json()["error"]
    assert answered.status_code == 400, answered.text
    assert error["message"].startswith("line 2: ")
    assert "nests deeper than 64 levels" in error["message"]
    assert error["param"].startswith("record.user_metadata.notes[0][0]")
    assert service.get("/v1/memory").json()["memories"] == []  # all or nothing
    whole = service.post("/v1/memory/import", content=nested(3_000))
    assert whole.status_code == 400, whole.text
    assert whole.json()["error"]["message"].startswith("line 1: ")


def test_the_library_refuses_an_import_line_nested_3000_deep(memory: LongTermMemory) -> None:
    line = import_line(record("m1", "Alice likes tea."))
    deep = line.replace('"vector": null', f'"vector": {nested(3_000)}')
    with pytest.raises(ImportFormatError) as caught:
        memory.import_jsonl([deep])
    assert caught.value.line == 1
    assert caught.value.field is not None and caught.value.field.startswith("vector[0]")


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"metadata": {"version": 2**70}}, "record.metadata.version"),
        ({"metadata": {"version": 2**63}}, "record.metadata.version"),
        ({"access_count": 99999999999999999999}, "record.access_count"),
        ({"access_count": -(2**64)}, "record.access_count"),
        ({"user_metadata": {"n": 10**400}}, "record.user_metadata.n"),
    ],
)
def test_an_imported_integer_past_64_bits_is_refused_naming_it(
    service: TestClient, fields: dict[str, Any], param: str
) -> None:
    answered = service.post(
        "/v1/memory/import", content=import_line(record("m1", "Tea.", **fields))
    )
    message = assert_refused(answered, param)
    assert "line 1: " in message
    assert "out of range" in message
    assert service.get("/v1/memory").json()["memories"] == []


def test_the_largest_64_bit_version_imports(service: TestClient) -> None:
    line = import_line(record("m1", "Alice likes tea.", metadata={"version": 2**63 - 1}))
    assert service.post("/v1/memory/import", content=line).json() == {"imported": 1}
    assert service.get("/v1/memory/m1").json()["metadata"]["version"] == 2**63 - 1
    # One more version would not fit: a 400, not an overflow in the store.
    changed = service.patch("/v1/memory/m1", json={"content": "Alice likes green tea."})
    assert changed.status_code == 400, changed.text


# -- (d) non-finite numbers, as the raw JSON text a client can send ------------------------

NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e400", "-1e999"]


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "Hello"}], **fields}


def responses(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "Hello", **fields}


#: A route, a body with one "__BAD__" value, and the field it is.
NUMBER_FIELDS: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/chat/completions", chat(temperature="__BAD__"), "temperature"),
    ("/v1/chat/completions", chat(top_p="__BAD__", user="alice"), "top_p"),
    ("/v1/chat/completions", chat(logit_bias={"50256": "__BAD__"}), "logit_bias.50256"),
    (
        "/v1/chat/completions",
        chat(memory_config={"similarity_threshold": "__BAD__"}),
        "memory_config.similarity_threshold",
    ),
    ("/v1/responses", responses(temperature="__BAD__"), "temperature"),
    ("/v1/responses", responses(top_p="__BAD__"), "top_p"),
    ("/v1/memory", {"user_id": "alice", "content": "Tea.", "importance": "__BAD__"}, "importance"),
    (
        "/v1/memory/search",
        {"user_id": "alice", "query": "tea", "threshold": "__BAD__"},
        "threshold",
    ),
    (
        "/v1/sessions/s1/messages",
        {"user_id": "alice", "messages": [{"role": "user", "content": "Hi", "x": "__BAD__"}]},
        "messages[0].x",
    ),
]


@pytest.mark.parametrize("literal", NON_FINITE)
def test_a_non_finite_number_in_any_body_is_refused_naming_it(
    service: TestClient, upstream: ScriptedOpenAIServer, literal: str
) -> None:
    for path, body, param in NUMBER_FIELDS:
        text = json.dumps(body).replace('"__BAD__"', literal)
        answered = post_text(service, path, text)
        message = assert_refused(answered, param)
        assert literal in message, (path, message)
    assert upstream.chat_requests == []
    assert service.get("/v1/memory").json()["memories"] == []


def test_the_outside_tests_nan_temperature(service: TestClient) -> None:
    body = '{"model":"m","messages":[{"role":"user","content":"Hi"}],"temperature":NaN}'
    answered = post_text(service, "/v1/chat/completions", body)
    assert assert_refused(answered, "temperature") == (
        "temperature: NaN is not JSON: numbers must be finite"
    )
    answered = post_text(service, "/v1/responses", '{"model":"m","input":"Hi","temperature":NaN}')
    assert_refused(answered, "temperature")


# -- (e) lone surrogates in every field the proxy reads or passes on ---------------------

LONE = "\ud800"


def with_lone(body: dict[str, Any]) -> str:
    """``body`` as JSON with "__LONE__" replaced by the escape of a lone surrogate."""
    return json.dumps(body).replace("__LONE__", "\\ud800")


CHAT_FIELDS: list[tuple[dict[str, Any], str]] = [
    (chat(messages=[{"role": "user", "content": "I am __LONE__"}]), "messages[0].content"),
    (
        chat(messages=[{"role": "user", "content": [{"type": "text", "text": "__LONE__"}]}]),
        "messages[0].content[0].text",
    ),
    (chat(messages=[{"role": "user", "content": "Hi", "name": "__LONE__"}]), "messages[0].name"),
    (
        chat(
            messages=[
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_0",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city": "__LONE__"}'},
                        }
                    ],
                },
            ]
        ),
        "messages[1].tool_calls[0].function.arguments",
    ),
    (
        chat(messages=[{"role": "tool", "tool_call_id": "__LONE__", "content": "21 C"}]),
        "messages[0].tool_call_id",
    ),
    (chat(user="__LONE__"), "user"),
    (chat(model="gpt-__LONE__"), "model"),
    (chat(memory_context={"user_id": "__LONE__"}), "memory_context.user_id"),
    (
        chat(memory_context={"user_id": "alice", "session_id": "__LONE__"}),
        "memory_context.session_id",
    ),
    (
        chat(memory_context={"user_id": "alice", "project_id": "__LONE__"}),
        "memory_context.project_id",
    ),
    (
        chat(tools=[{"type": "function", "function": {"name": "__LONE__", "parameters": {}}}]),
        "tools[0].function.name",
    ),
    (chat(stop=["END", "__LONE__"]), "stop[1]"),
    (chat(metadata={"__LONE__": "x"}), "metadata.\\ud800"),
    (
        chat(response_format={"type": "json_schema", "json_schema": {"name": "__LONE__"}}),
        "response_format.json_schema.name",
    ),  # fmt: skip
]

RESPONSES_FIELDS: list[tuple[dict[str, Any], str]] = [
    (responses(input="__LONE__"), "input"),
    (responses(input=[{"role": "user", "content": "__LONE__"}]), "input[0].content"),
    (
        responses(
            input=[{"role": "user", "content": [{"type": "input_text", "text": "__LONE__"}]}]
        ),
        "input[0].content[0].text",
    ),
    (responses(instructions="Be brief __LONE__"), "instructions"),
    (responses(user="__LONE__"), "user"),
    (responses(model="__LONE__"), "model"),
    (responses(metadata={"k": "__LONE__"}), "metadata.k"),
    (responses(previous_response_id="resp___LONE__"), "previous_response_id"),
    (responses(memory_context={"user_id": "__LONE__"}), "memory_context.user_id"),
]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [("/v1/chat/completions", body, param) for body, param in CHAT_FIELDS]
    + [("/v1/responses", body, param) for body, param in RESPONSES_FIELDS],
    ids=[f"chat:{param}" for _, param in CHAT_FIELDS]
    + [f"responses:{param}" for _, param in RESPONSES_FIELDS],
)
def test_a_lone_surrogate_in_any_proxy_field_is_refused_before_any_work(
    service: TestClient,
    upstream: ScriptedOpenAIServer,
    caplog: pytest.LogCaptureFixture,
    path: str,
    body: dict[str, Any],
    param: str,
) -> None:
    with caplog.at_level(logging.INFO, logger="chatmem"):
        answered = post_text(service, path, with_lone(body), **{"X-Chatmem-User": "alice"})
        settle()

    message = assert_refused(answered, param)
    assert "lone UTF-16 surrogate" in message
    answered.json()  # the body is valid UTF-8 JSON, the field shown as its escape
    assert upstream.chat_requests == []
    assert memory_lookups(service) == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert runtime_of(service).short_term.history(SessionKey("default", "alice", "default")) == []


@pytest.mark.parametrize(
    ("method", "path", "body", "param"),
    [
        ("POST", "/v1/memory", {"user_id": "alice", "content": "__LONE__"}, "content"),
        ("POST", "/v1/memory", {"user_id": "__LONE__", "content": "Tea."}, "user_id"),
        (
            "POST",
            "/v1/memory",
            {"user_id": "a", "messages": [{"role": "user", "content": "x__LONE__"}]},
            "messages[0].content",
        ),
        ("POST", "/v1/memory/search", {"user_id": "a", "query": "__LONE__"}, "query"),
        ("PATCH", "/v1/memory/m1", {"content": "__LONE__"}, "content"),
        (
            "POST",
            "/v1/sessions/s1/messages",
            {"user_id": "a", "messages": [{"role": "user", "content": "__LONE__"}]},
            "messages[0].content",
        ),
        ("PUT", "/v1/sessions/s1/system", {"user_id": "a", "content": "__LONE__"}, "content"),
        ("POST", "/v1/admin/keys", {"tenant_id": "__LONE__"}, "tenant_id"),
    ],
)
def test_a_lone_surrogate_in_a_memory_sessions_or_admin_body_is_refused(
    service: TestClient, method: str, path: str, body: dict[str, Any], param: str
) -> None:
    answered = service.request(
        method, path, content=with_lone(body).encode(), headers={**JSON, **ADMIN}
    )
    assert_refused(answered, param)


# -- imported vectors ---------------------------------------------------------------------


def unit(seed: int) -> list[float]:
    vector = np.random.default_rng(seed).normal(size=DIMENSION)
    return [float(x) for x in vector / np.linalg.norm(vector)]


@pytest.mark.parametrize(
    ("vector_text", "param", "why"),
    [
        ("[" + ", ".join(["0.1"] * 5 + ["NaN"] + ["0.1"] * 378) + "]", "vector[5]", "NaN"),
        ("[Infinity" + ", 0.1" * 383 + "]", "vector[0]", "Infinity"),
        ("[0.1" * 1 + ", -1e400" * 383 + "]", "vector[1]", "out of range"),
        ("[" + ", ".join(["0"] * DIMENSION) + "]", "vector", "all zeros"),
        ("[" + ", ".join(["true"] * DIMENSION) + "]", "vector", "list of numbers"),
        ('"0.1, 0.2"', "vector", "list of numbers"),
        ("[" + ", ".join(["0.1"] * 10) + "]", "vector", "dimensions"),
    ],
)
def test_an_imported_vector_that_is_not_finite_or_has_no_direction_is_refused(
    service: TestClient, vector_text: str, param: str, why: str
) -> None:
    line = import_line(record("m1", "Alice likes tea."), "__V__").replace('"__V__"', vector_text)
    message = assert_refused(service.post("/v1/memory/import", content=line), param)
    assert why in message
    assert service.get("/v1/memory").json()["memories"] == []


@pytest.mark.parametrize("scale", [1e30, 1e-30, 10**18, 3.0])
def test_an_imported_vector_of_any_length_is_normalised(service: TestClient, scale: float) -> None:
    direction = np.ones(DIMENSION) if scale != 3.0 else np.asarray(unit(7))
    vector = [x * scale for x in direction.tolist()]
    if isinstance(scale, int):
        vector = [scale] * DIMENSION
    line = import_line(record("loud", "Alice's locker code is 8812."), vector)
    assert service.post("/v1/memory/import", content=line).json() == {"imported": 1}

    exported = service.get("/v1/memory/export", params={"user_id": "alice"}).text
    stored = np.asarray(json.loads(exported)["vector"])
    assert abs(float(np.linalg.norm(stored)) - 1.0) < 1e-3
    assert float(stored @ direction / np.linalg.norm(direction)) > 0.999
    # However long it was, it ranks by its direction: unrelated questions score low, and
    # the proxy injects nothing for them.
    for query in (
        "What should I cook for my dinner tonight?",
        "Which jazz album would I like?",
        "Remind me what I planned for my weekend",
    ):
        found = service.post("/v1/memory/search", json={"user_id": "alice", "query": query})
        assert all(r["score"] < 0.3 for r in found.json()["results"]), (query, found.text)
        asked = service.post(
            "/v1/chat/completions",
            json=chat(messages=[{"role": "user", "content": query}], user="alice"),
        )
        assert asked.headers["X-Chatmem-Memory"] == "empty", (query, asked.headers)


def test_the_library_refuses_non_finite_vectors(memory: LongTermMemory) -> None:
    for bad in ("NaN", "1e400", "-Infinity"):
        line = import_line(record("m1", "Tea."), [0.5] * DIMENSION).replace("0.5", bad, 1)
        with pytest.raises(ImportFormatError) as caught:
            memory.import_jsonl([line])
        assert caught.value.field == "vector[0]"
    assert memory.list(Filter(user_id="alice")).records == []


# -- an imported id another tenant holds --------------------------------------------------


def test_importing_an_id_another_tenant_holds_answers_as_for_a_new_id(
    service: TestClient,
) -> None:
    acme, globex = new_key(service, "acme"), new_key(service, "globex")
    [secret] = service.post(
        "/v1/memory", json={"user_id": "alice", "content": "Alice's PIN is 4321."}, headers=acme
    ).json()["memories"]

    def imported(memory_id: str) -> httpx.Response:
        line = import_line(record(memory_id, "Alice's PIN is 0000."))
        return service.post("/v1/memory/import", content=line, headers=globex)

    taken, fresh = imported(secret["id"]), imported("f" * 32)

    assert (taken.status_code, taken.json()) == (fresh.status_code, fresh.json())
    assert taken.json() == {"imported": 1}
    assert secret["id"] not in taken.text
    still = service.get(f"/v1/memory/{secret['id']}", headers=acme).json()
    assert still == secret
    mine = service.get("/v1/memory", params={"user_id": "alice"}, headers=globex).json()
    assert [m["content"]["raw"] for m in mine["memories"]] == ["Alice's PIN is 0000."] * 2
    assert all(m["tenant_id"] == "globex" for m in mine["memories"])
    # Importing the same lines again: the copy of the taken id is a memory of its own too.
    assert imported(secret["id"]).json() == {"imported": 1}


def test_an_id_held_by_another_user_is_imported_as_a_copy_and_keeps_its_links(
    memory: LongTermMemory,
) -> None:
    [held] = memory.add("Alice likes tea.", user_id="alice")
    lines = [
        import_line(record(held.id, "Bob likes tea.", user_id="bob")),
        import_line(
            record(
                "b2",
                "Bob likes green tea.",
                user_id="bob",
                relations=[{"type": "updates", "target_id": held.id}],
            )
        ),
    ]
    assert memory.import_jsonl(lines) == 2
    assert memory.get(held.id, user_id="alice").text == "Alice likes tea."
    bobs = {r.text: r for r in memory.list(Filter(user_id="bob")).records}
    copy = bobs["Bob likes tea."]
    assert copy.id != held.id
    assert bobs["Bob likes green tea."].relations[0].target_id == copy.id
    # An id the line's own user holds is still a conflict (``on_conflict`` decides).
    again = import_line(record(held.id, "Alice likes coffee."))
    with pytest.raises(ValidationError) as caught:
        memory.import_jsonl([again])
    assert caught.value.field == "id"
    assert memory.import_jsonl([again], on_conflict="skip") == 0
    assert memory.get(held.id, user_id="alice").text == "Alice likes tea."


# -- item 11: a message too long for a session is refused before memory is searched -------

LONG = "word " * (5 * 1024 * 1024 // 5)  # 5 MB


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (
            "/v1/chat/completions",
            chat(messages=[{"role": "user", "content": LONG}]),
            "messages[0].content",
        ),
        (
            "/v1/chat/completions",
            chat(
                messages=[
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello"},
                    {"role": "user", "content": [{"type": "text", "text": LONG}]},
                ]
            ),
            "messages[2].content",
        ),
        ("/v1/responses", responses(input=LONG), "input"),
        ("/v1/responses", responses(input=[{"role": "user", "content": LONG}]), "input[0].content"),
        (
            "/v1/responses",
            responses(input=[{"role": "user", "content": [{"type": "input_text", "text": LONG}]}]),
            "input[0].content",
        ),
        ("/v1/responses", responses(instructions=LONG), "instructions"),
    ],
    ids=["chat", "chat-parts", "responses", "responses-item", "responses-parts", "instructions"],
)
def test_a_message_too_long_for_a_session_is_refused_before_memory_is_searched(
    service: TestClient,
    upstream: ScriptedOpenAIServer,
    caplog: pytest.LogCaptureFixture,
    path: str,
    body: dict[str, Any],
    param: str,
) -> None:
    service.post("/v1/memory", json={"user_id": "alice", "content": "Alice likes tea."})
    with caplog.at_level(logging.INFO, logger="chatmem"):
        answered = service.post(path, json=body, headers={"X-Chatmem-User": "alice"})
        settle()

    message = assert_refused(answered, param)
    assert f"at most {MAX_MESSAGE_CHARS} characters" in message
    assert memory_lookups(service) == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert upstream.chat_requests == []


def test_a_message_at_the_limit_is_answered(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    text = "a" * MAX_MESSAGE_CHARS
    answered = service.post(
        "/v1/chat/completions",
        json=chat(messages=[{"role": "user", "content": text}], user="alice"),
    )
    assert answered.status_code == 200, answered.text[:300]
    assert upstream.chat_requests[-1]["messages"][-1]["content"] == text


def test_a_tool_result_the_session_cannot_keep_is_passed_on(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    """A tool result whose ids are too long for the session is the upstream's to judge:
    passed on, not kept, and not a 400 after memory was searched."""
    messages = [
        {"role": "user", "content": "Weather in Porto?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c" * 300, "type": "function", "function": {"name": "w", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c" * 300, "content": "21 C"},
    ]
    answered = service.post("/v1/chat/completions", json=chat(messages=messages, user="alice"))
    assert answered.status_code == 200, answered.text
    assert upstream.chat_requests[-1]["messages"][-1]["tool_call_id"] == "c" * 300


#: Times an ISO 8601 parser takes but UTC cannot hold (year 10000, year 0).
UNHOLDABLE = ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"]


@pytest.mark.parametrize("moment", UNHOLDABLE)
def test_a_time_past_what_utc_holds_is_refused_naming_it(service: TestClient, moment: str) -> None:
    """Each route that takes a time answers 400 naming it, never a 500 (it was an
    OverflowError converting to UTC)."""
    asked = [
        (service.post("/v1/memory/search", json={"user_id": "a", "query": "x", "as_of": moment}),
         "as_of"),
        (service.get("/v1/memory", params={"user_id": "a", "created_before": moment}),
         "created_before"),
        (service.get("/v1/memory", params={"user_id": "a", "created_after": moment}),
         "created_after"),
        (service.post("/v1/memory", json={"user_id": "a", "content": "x", "expires_at": moment}),
         "expires_at"),
        (service.post("/v1/memory", json={"user_id": "a", "messages": [
            {"role": "user", "content": "x", "timestamp": moment}]}),
         "messages[0].timestamp"),
    ]  # fmt: skip
    for answer, field in asked:
        assert answer.status_code == 400, (field, answer.text)
        assert answer.json()["error"]["param"] == field
    assert service.get("/v1/memory", params={"user_id": "a"}).json()["memories"] == []


def test_the_library_refuses_a_time_past_what_utc_holds() -> None:
    with pytest.raises(ValidationError) as raised:
        Filter.checked({"known_at": UNHOLDABLE[0]}, "filter")
    assert "known_at" in str(raised.value.field)
