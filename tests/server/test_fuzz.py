"""The API fuzz (issue 11): no input makes a 5xx, on any route and method, with keys
required or not.

- **schemathesis** feeds every operation of the served spec its generated requests (valid
  and not), with a keys-required config (the tenant's key, the admin key, an unknown key or
  none at all) and with the anonymous tenant.
- **Our generators** take a valid example body of every operation that has one (an import
  line for the import) and put one bad value, written as raw JSON text, in one place: any
  field, any item, any container, or a new key. Values strict JSON refuses (``NaN``,
  ``Infinity``, ``1e400``, integers past 64 bits, lone surrogates, nesting past 64 levels)
  must be answered 400 with ``param`` the place as the caller wrote it; every place gets
  each of them. The values it accepts (the 64-bit bounds, ``1e308``, ``-0.0``, 64 levels,
  a surrogate pair, ``null``, empty containers…) go through to the routes, drawn by
  Hypothesis, and must be answered below 500. Query and path parameters get extreme
  numbers and text that is not UTF-8.

``CHATMEM_HYPOTHESIS_PROFILE=ci`` replays fixed examples. The long run (many more cases)
is ``CHATMEM_FUZZ_LONG=1 pytest -m slow tests/server/test_fuzz.py``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from chatmem import strict_json
from tests.server.conftest import ADMIN_KEY, ServiceFactory

TENANT_KEY = "tenant-key-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
TENANT = {"Authorization": f"Bearer {TENANT_KEY}"}
JSON = {"Content-Type": "application/json"}
#: Both ways to run: keys required (a config file key for tenant "acme"), and anonymous.
CONFIGS = {
    "keys-required": {
        # The key holds "hr": the memory example names it, and a key writes only roles it holds.
        "auth": {
            "anonymous_tenant": None,
            "keys": [{"key": TENANT_KEY, "tenant": "acme", "roles": ["hr"]}],
        }
    },
    "no-keys": {},
}
LONG = bool(os.environ.get("CHATMEM_FUZZ_LONG"))

#: Requests sent and their status classes, per test (printed with ``pytest -s``).
SENT: Counter[str] = Counter()


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx: object, value: object) -> bytes:
    """Import bodies are JSON lines, documented as a string; send generated ones as text."""
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


def started(make_service: ServiceFactory, config: str) -> TestClient:
    """A service with ``config``, holding a memory ``m1`` and a session ``s1`` of alice."""
    client = make_service(**CONFIGS[config])
    auth = TENANT if config == "keys-required" else {}
    line = {
        "format": "chatmem.export/1",
        "record": {"id": "m1", "user_id": "alice", "content": {"raw": "Alice likes green tea."}},
        "vector": None,
    }
    assert client.post("/v1/memory/import", content=json.dumps(line), headers=auth).is_success
    appended = client.post(
        "/v1/sessions/s1/messages",
        json={"user_id": "alice", "messages": [{"role": "user", "content": "Hi, I'm Alice."}]},
        headers=auth,
    )
    assert appended.is_success, appended.text
    return client


def auth_for(path: str, config: str) -> dict[str, str]:
    if path.startswith("/v1/admin"):
        return ADMIN
    return TENANT if config == "keys-required" else {}


def record_status(test: str, response: httpx.Response) -> None:
    SENT[f"{test} {response.status_code // 100}xx"] += 1


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    if SENT:
        print("\nfuzz requests by test and status class:")
        for name, count in sorted(SENT.items()):
            print(f"  {name}: {count}")


# -- schemathesis on every operation -----------------------------------------------------------

#: Generated requests per operation (valid and not).
SCHEMATHESIS_EXAMPLES = 500 if LONG else 40
AUTHS = {"tenant": TENANT, "admin": ADMIN, "unknown": {"Authorization": "Bearer cm-nope"}}


def run_schemathesis(client: TestClient, config: str, examples: int) -> list[str]:
    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 20
    failures: list[str] = []
    for operation in operations:
        # Negative generation alone is impossible where nothing can be wrong (/healthz).
        cases = operation.as_strategy(GenerationMode.POSITIVE) | operation.as_strategy(
            GenerationMode.NEGATIVE
        )

        @given(case=cases, auth=st.sampled_from([None, *AUTHS]))
        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def below_500(case: schemathesis.Case, auth: str | None) -> None:
            if auth is None:  # the route's own: the admin's on admin routes
                headers = auth_for(case.path, config)
            else:
                headers = AUTHS[auth] if config == "keys-required" or auth != "tenant" else {}
            response = case.call(headers=headers)
            record_status(f"schemathesis[{config}]", response)
            if response.status_code >= 500:
                failures.append(
                    f"{case.method} {case.formatted_path} {response.status_code}: "
                    f"{response.text[:300]}"
                )

        below_500()
    return failures


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.slow
def test_schemathesis_finds_no_server_error(make_service: ServiceFactory, config: str) -> None:
    client = started(make_service, config)
    failures = run_schemathesis(client, config, SCHEMATHESIS_EXAMPLES)
    assert not failures, "\n".join(failures[:20])


# -- our generators: one bad value in one place of a valid body ------------------------------

#: A valid body of every operation that takes one (the import's is one line), reaching as
#: far into each route as a request can: memory on, a session, tools, options.
BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/v1/chat/completions"): {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "I moved to Porto.", "name": "alice"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_0",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Porto"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_0", "content": "21 C"},
            {"role": "user", "content": [{"type": "text", "text": "Where do I live?"}]},
        ],
        "temperature": 0.2,
        "max_tokens": 64,
        "stop": ["END"],
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": {}}}],
        "metadata": {"trace": "t1"},
        "memory_context": {"user_id": "alice", "session_id": "s1", "project_id": "home"},
        "memory_config": {
            "memory_types": ["semantic", "episodic"],
            "retrieval_limit": 3,
            "similarity_threshold": 0.1,
            "auto_store": True,
        },
    },
    ("POST", "/v1/responses"): {
        "model": "m",
        "input": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "input_text", "text": "Where do I live?"}]},
        ],
        "instructions": "Answer in one line.",
        "user": "alice",
        "temperature": 0.2,
        "top_p": 0.9,
        "max_output_tokens": 64,
        "metadata": {"trace": "t1"},
        "memory_context": {"user_id": "alice", "session_id": "s2"},
        "memory_config": {"retrieval_limit": 3},
        "include": ["x"],
        "truncation": "auto",
    },
    ("POST", "/v1/memory"): {
        "user_id": "alice",
        "messages": [
            {
                "role": "user",
                "content": "I moved to Porto.",
                "id": "t1",
                "timestamp": 1700000000000,
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]},
        ],
        "type": "episodic",
        "metadata": {"channel": "web", "n": 1},
        "importance": 0.7,
        "tags": ["home"],
        "project_id": "home",
        "session_id": "s1",
        "allowed_roles": ["hr"],
    },
    ("POST", "/v1/embeddings"): {"model": "m", "input": ["I moved to Porto."]},
    ("POST", "/v1/memory/search"): {
        "user_id": "alice",
        "query": "Where does Alice live?",
        "k": 3,
        "threshold": 0.1,
        "types": ["semantic"],
        "project_id": "home",
        "include_superseded": True,
    },
    ("PATCH", "/v1/memory/{memory_id}"): {
        "user_id": "alice",
        "content": "Alice likes black tea.",
        "metadata": {"source": "fuzz"},
        "importance": 0.4,
        "confidence": 0.9,
        "tags": ["tea"],
        "reason": "corrected",
    },
    ("POST", "/v1/memory/import"): {
        "format": "chatmem.export/1",
        "record": {
            "id": "imported-1",
            "user_id": "alice",
            "type": "semantic",
            "content": {"raw": "Alice's locker code is 8812."},
            "metadata": {"importance": 0.5, "version": 3, "tags": ["locker"]},
            "time": {"created_at": "2026-01-02T03:04:05Z"},
            "access_count": 2,
            "relations": [{"type": "related_to", "target_id": "m1"}],
            "access_control": {"allowed_roles": []},
            "user_metadata": {"k": [1, 2]},
        },
        "vector": None,
    },
    ("POST", "/v1/sessions/{session_id}/messages"): {
        "user_id": "alice",
        "format": "rich",
        "messages": [
            {
                "role": "user",
                "content": "I moved to Porto.",
                "turn_id": 3,
                "timestamp": 1700000000000,
                "metadata": {"source": "asr", "interrupted": False},
            }
        ],
    },
    ("PUT", "/v1/sessions/{session_id}/system"): {"user_id": "alice", "content": "Be kind."},
    ("POST", "/v1/sessions/{session_id}/end"): {"user_id": "alice"},
    ("POST", "/v1/admin/keys"): {"tenant_id": "acme", "roles": ["hr"], "name": "bot"},
}
#: What the path parameters of the examples are.
PATH_VALUES = {"memory_id": "m1", "session_id": "s1", "response_id": "resp_x", "key_id": "k1"}

#: Raw JSON texts strict JSON refuses, by family: a request holding one anywhere is a 400
#: naming the place it sits (nesting: the place, then the levels below it).
REFUSED = {
    "nan": "NaN",
    "infinity": "-Infinity",
    "overflowing float": "1e400",
    "integer past 64 bits": "18446744073709551616",
    "negative integer past 64 bits": "-9223372036854775809",
    "lone surrogate": '"\\ud800"',
    "reversed pair": '"a\\udc00\\ud83d"',
    "nesting 65 deep": "[" * 65 + "]" * 65,
    "nesting 3000 deep": '{"a":' * 3000 + "1" + "}" * 3000,
}
#: Raw JSON texts strict JSON accepts: extreme but valid, for the routes to judge.
ACCEPTED = [
    "9223372036854775807",
    "-9223372036854775808",
    "1e308",
    "-1e308",
    "5e-324",
    "-0.0",
    "0",
    "-1",
    "true",
    "null",
    '""',
    '" "',
    "[]",
    "{}",
    '"\\ud83d\\ude00"',
    '"\\u0000"',
    '"' + "x" * 40_000 + '"',
    '"9999999999999999999999"',
    '"2026-13-45T99:99:99Z"',
    "[" * 63 + "]" * 63,
    '{"role": "user", "content": "nested"}',
    '[{"type": "text", "text": 1e308}]',
]
SENTINEL = "__FUZZ_VALUE__"
SENTINEL_KEY = "__FUZZ_KEY__"

Place = tuple[str | int, ...]


def places(value: Any, at: Place = ()) -> Iterator[Place]:
    """Every place in ``value`` below the top: each key's value and each item."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield (*at, key)
            yield from places(inner, (*at, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield (*at, index)
            yield from places(inner, (*at, index))


def objects(value: Any, at: Place = ()) -> Iterator[Place]:
    """The place of every object in ``value`` (the top one included)."""
    if isinstance(value, dict):
        yield at
        for key, inner in value.items():
            yield from objects(inner, (*at, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from objects(inner, (*at, index))


def replaced(value: Any, at: Place, new: Any) -> Any:
    if not at:
        return new
    head, rest = at[0], at[1:]
    if isinstance(value, dict):
        return {k: replaced(v, rest, new) if k == head else v for k, v in value.items()}
    return [replaced(v, rest, new) if i == head else v for i, v in enumerate(value)]


def added_key(value: Any, at: Place) -> Any:
    """``value`` with the object at ``at`` given the key SENTINEL_KEY."""
    if not at:
        return {**value, SENTINEL_KEY: 1}
    head, rest = at[0], at[1:]
    if isinstance(value, dict):
        return {k: added_key(v, rest) if k == head else v for k, v in value.items()}
    return [added_key(v, rest) if i == head else v for i, v in enumerate(value)]


def named(at: Place) -> str:
    """A place as chatmem names fields (``messages[0].content``)."""
    where: Any = None
    for part in at:
        where = (where, part)
    shown = strict_json.path(where)
    assert shown is not None
    return shown


def send(client: TestClient, operation: tuple[str, str], text: str, config: str) -> httpx.Response:
    method, path = operation
    for name, value in PATH_VALUES.items():
        path = path.replace("{" + name + "}", value)
    return client.request(
        method, path, content=text.encode(), headers={**JSON, **auth_for(path, config)}
    )


def bodies(client: TestClient) -> dict[tuple[str, str], Any]:
    """The examples of the operations that take a body in the served spec (all of them:
    ``test_every_operation_with_a_body_has_an_example``)."""
    spec = client.get("/openapi.json").json()["paths"]
    with_body = {
        (method.upper(), path)
        for path, methods in spec.items()
        for method, operation in methods.items()
        if "requestBody" in operation
    }
    return {operation: body for operation, body in BODIES.items() if operation in with_body}


def test_every_operation_with_a_body_has_an_example(service: TestClient) -> None:
    spec = service.get("/openapi.json").json()["paths"]
    with_body = {
        (method.upper(), path)
        for path, methods in spec.items()
        for method, operation in methods.items()
        if "requestBody" in operation
    }
    assert with_body <= set(BODIES)
    assert len(bodies(service)) >= 9


def test_each_example_body_is_answered_below_500(make_service: ServiceFactory) -> None:
    """The examples themselves go through (else the fuzz would only meet validation)."""
    client = started(make_service, "keys-required")
    for operation, body in bodies(client).items():
        answered = send(client, operation, json.dumps(body), "keys-required")
        assert answered.status_code < 300, (operation, answered.text)


def test_a_refused_value_anywhere_is_a_400_naming_where_it_sits(
    make_service: ServiceFactory,
) -> None:
    client = started(make_service, "keys-required")
    wrong: list[str] = []
    for operation, body in bodies(client).items():
        for at in places(body):
            template = json.dumps(replaced(body, at, SENTINEL))
            for family, raw in REFUSED.items():
                answered = send(
                    client, operation, template.replace(f'"{SENTINEL}"', raw), "keys-required"
                )
                record_status("refused values", answered)
                param = answered.json()["error"]["param"] if answered.status_code == 400 else None
                if param is None or not param.startswith(named(at)):
                    status = f"{answered.status_code} {answered.text[:200]}"
                    wrong.append(f"{operation} {named(at)} {family}: {status}")
        for at in objects(body):
            text = json.dumps(added_key(body, at)).replace(SENTINEL_KEY, "\\ud800")
            answered = send(client, operation, text, "keys-required")
            record_status("refused values", answered)
            expected = named((*at, "\\ud800"))
            if answered.status_code != 400 or answered.json()["error"]["param"] != expected:
                wrong.append(
                    f"{operation} key at {at}: {answered.status_code} {answered.text[:200]}"
                )
    assert not wrong, f"{len(wrong)} wrong:\n" + "\n".join(wrong[:20])


@st.composite
def accepted_requests(draw: st.DrawFn) -> tuple[tuple[str, str], str, str]:
    """A valid example with one place holding an extreme value strict JSON accepts."""
    operation = draw(st.sampled_from(sorted(BODIES)))
    body = BODIES[operation]
    at = draw(st.sampled_from(list(places(body))))
    raw = draw(st.sampled_from(ACCEPTED))
    text = json.dumps(replaced(body, at, SENTINEL)).replace(f'"{SENTINEL}"', raw)
    return operation, named(at), text


ACCEPTED_EXAMPLES = 2000 if LONG else 120


def _found(operation: tuple[str, str], at: Place, raw: str) -> tuple[tuple[str, str], str, str]:
    text = json.dumps(replaced(BODIES[operation], at, SENTINEL)).replace(f'"{SENTINEL}"', raw)
    return operation, named(at), text


SESSION_APPEND = ("POST", "/v1/sessions/{session_id}/messages")
#: What the fuzz found (each was a 500), replayed on every run: a content part whose type is
#: a list (TypeError in LongTermMemory.add); a timestamp of 2^63-1 ms (past the year 9999);
#: a timestamp of -1e308 seconds (infinite in milliseconds); a timestamp or turn id of 1e308
#: (an integer past SQLite's, and past any date extraction can give a message).
FOUND = [
    _found(("POST", "/v1/memory"), ("messages", 1, "content", 0, "type"), "[]"),
    _found(("POST", "/v1/memory"), ("messages", 0, "timestamp"), "9223372036854775807"),
    _found(SESSION_APPEND, ("messages", 0, "timestamp"), "-1e308"),
    _found(SESSION_APPEND, ("messages", 0, "timestamp"), "1e308"),
    _found(SESSION_APPEND, ("messages", 0, "turn_id"), "1e308"),
    _found(SESSION_APPEND, ("messages", 0, "metadata", "interrupted"), "1e308"),
]


@pytest.mark.parametrize("config", CONFIGS)
def test_an_extreme_but_valid_value_anywhere_is_answered_below_500(
    make_service: ServiceFactory, config: str
) -> None:
    client = started(make_service, config)
    failures: list[str] = []

    @given(accepted_requests())
    @settings(
        max_examples=ACCEPTED_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def below_500(request: tuple[tuple[str, str], str, str]) -> None:
        operation, where, text = request
        answered = send(client, operation, text, config)
        record_status(f"accepted values[{config}]", answered)
        if answered.status_code >= 500:
            failures.append(f"{operation} {where}: {answered.status_code} {answered.text[:300]}")

    for found in FOUND:
        below_500 = example(found)(below_500)
    below_500()
    assert not failures, "\n".join(failures[:20])


#: Query and path parameter values: numbers past every range, text that is not UTF-8 (a
#: percent-encoded lone surrogate, a lone byte), control characters, long text.
PARAMETER_VALUES = [
    "99999999999999999999",
    "-9223372036854775809",
    "NaN",
    "1e400",
    "-1",
    "0",
    "%ED%A0%80",
    "%FF",
    "%00",
    "a%0Ab",
    "x" * 2000,
]


def test_extreme_query_and_path_parameters_are_answered_below_500(
    make_service: ServiceFactory,
) -> None:
    client = started(make_service, "keys-required")
    spec = client.get("/openapi.json").json()["paths"]
    failures: list[str] = []
    for path, methods in spec.items():
        for method, operation in methods.items():
            params = [p for p in operation.get("parameters", []) if p["in"] in ("query", "path")]
            base_query = {p["name"]: "alice" for p in params if p["in"] == "query"}
            for param in params:
                for value in PARAMETER_VALUES:
                    filled = path
                    for p in params:
                        if p["in"] == "path":
                            shown = value if p is param else PATH_VALUES.get(p["name"], "x")
                            filled = filled.replace("{" + p["name"] + "}", shown)
                    query = {**base_query}
                    if param["in"] == "query":
                        query[param["name"]] = value
                    url = filled + "?" + "&".join(f"{k}={v}" for k, v in query.items())
                    body = BODIES.get((method.upper(), path))
                    answered = client.request(
                        method.upper(),
                        url,
                        content=json.dumps(body).encode() if body is not None else None,
                        headers={**JSON, **auth_for(path, "keys-required")},
                    )
                    record_status("parameters", answered)
                    if answered.status_code >= 500:
                        status = f"{answered.status_code} {answered.text[:200]}"
                        failures.append(f"{method.upper()} {url[:120]}: {status}")
    assert not failures, "\n".join(failures[:20])


def test_headers_that_are_not_ascii_are_answered_below_500(make_service: ServiceFactory) -> None:
    client = started(make_service, "no-keys")
    body = json.dumps(BODIES[("POST", "/v1/chat/completions")] | {"memory_context": None})
    for name in ("X-Chatmem-User", "X-Chatmem-Session", "Authorization", "X-Chatmem-Tenant"):
        for value in (b"\xff\xfe", b"caf\xe9", b"Bearer \xed\xa0\x80", b"x" * 8000):
            answered = client.post(
                "/v1/chat/completions", content=body.encode(), headers={**JSON, name: value}
            )
            record_status("headers", answered)
            assert answered.status_code < 500, (name, value[:20], answered.text[:300])


@pytest.mark.slow
@pytest.mark.skipif(not LONG, reason="the long fuzz runs with CHATMEM_FUZZ_LONG=1")
def test_the_long_run_finds_no_server_error(make_service: ServiceFactory) -> None:
    """The long run's extra: schemathesis with many more examples per operation, both ways
    (the other tests above take their long counts from CHATMEM_FUZZ_LONG too)."""
    for config in CONFIGS:
        client = started(make_service, config)
        failures = run_schemathesis(client, config, 1000)
        assert not failures, "\n".join(failures[:20])
