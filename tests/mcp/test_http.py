"""The MCP server over streamable HTTP at ``/mcp`` of the real app, with the official client.

The bearer key gives the tenant and roles exactly as for REST: tenant A's key never sees
tenant B's memories, one user's recall never returns another's, and a memory restricted to
a role is not returned to a key without it, through any tool or resource.
"""

from __future__ import annotations

import anyio
import httpx
from mcp.shared.exceptions import MCPError

from chatmem.records import MemoryRecord
from chatmem.retrieval.hybrid_search import search
from tests.mcp.conftest import (
    ADMIN_KEY,
    Service,
    data,
    error_text,
    http_client,
    resource_json,
)

TOOLS = {"remember", "recall", "get_context", "forget", "list", "history", "update"}


def _bearer(key: str, **more: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **more}


def test_every_tool_over_http(service: Service) -> None:
    key = service.key("acme")

    async def scenario() -> None:
        async with http_client(f"{service.url}/mcp", _bearer(key)) as client:
            listed = await client.list_tools()
            assert {tool.name for tool in listed.tools} == TOOLS
            for tool in listed.tools:
                assert tool.description and len(tool.description) > 200  # written for a model
                assert tool.output_schema is not None

            stored = data(
                await client.call_tool(
                    "remember", {"text": "User lives in Berlin with two cats", "user_id": "ana"}
                )
            )
            memory_id = stored["memories"][0]["id"]
            data(
                await client.call_tool(
                    "remember", {"text": "User drinks green tea", "user_id": "ana"}
                )
            )

            found = data(
                await client.call_tool(
                    "recall", {"query": "How many cats do I have?", "user_id": "ana"}
                )
            )
            top = found["results"][0]
            assert top["memory"]["id"] == memory_id
            reasons = top["reasons"]
            assert reasons["cosine"] > 0.2 and reasons["fused"] > 0 and reasons["relevance"] > 0
            assert "cosine" in reasons["why"]

            block = data(
                await client.call_tool(
                    "get_context",
                    {"query": "Where does the user live?", "user_id": "ana", "max_tokens": 200},
                )
            )
            assert block["context"].startswith("User's relevant context:")
            assert "Berlin" in block["context"] and memory_id in block["memory_ids"]
            assert 0 < block["tokens"] <= 200

            page = data(await client.call_tool("list", {"user_id": "ana", "limit": 1}))
            assert len(page["memories"]) == 1 and page["next_cursor"]
            rest = data(
                await client.call_tool("list", {"user_id": "ana", "cursor": page["next_cursor"]})
            )
            assert len(rest["memories"]) == 1 and rest["next_cursor"] is None

            changed = data(
                await client.call_tool(
                    "update",
                    {
                        "memory_id": memory_id,
                        "user_id": "ana",
                        "text": "User lives in Paris with two cats",
                    },
                )
            )
            assert changed["version"] == 2
            versions = data(
                await client.call_tool("history", {"memory_id": memory_id, "user_id": "ana"})
            )
            assert [c["event"] for c in versions["changes"]] == ["add", "update"]
            assert versions["changes"][1]["text_before"] == "User lives in Berlin with two cats"

            profile = resource_json(
                (await client.read_resource("chatmem://users/ana/profile")).contents
            )
            assert {f["text"] for f in profile["facts"]} == {
                "User lives in Paris with two cats",
                "User drinks green tea",
            }
            one = resource_json(
                (await client.read_resource(f"chatmem://memories/{memory_id}")).contents
            )
            assert one["memory"]["content"]["raw"] == "User lives in Paris with two cats"
            assert len(one["history"]["changes"]) == 2

            assert data(
                await client.call_tool("forget", {"memory_id": memory_id, "user_id": "ana"})
            ) == {"deleted": 1}
            assert data(await client.call_tool("forget", {"scope": "user", "user_id": "ana"})) == {
                "deleted": 1
            }
            empty = data(await client.call_tool("list", {"user_id": "ana"}))
            assert empty["memories"] == []

    anyio.run(scenario)


def test_the_key_gives_the_tenant(service: Service) -> None:
    """Tenant B's key finds nothing of tenant A's, by search, list, id, history, profile,
    update or forget; the admin reads a tenant only by naming it."""
    memory = service.runtime.long_term
    assert memory is not None
    secret = memory.add("User's locker code is 4711", user_id="ana", tenant_id="acme")[0]
    globex = service.key("globex")

    async def scenario() -> None:
        async with http_client(
            f"{service.url}/mcp", _bearer(globex, **{"X-Chatmem-User": "ana"})
        ) as client:
            found = data(await client.call_tool("recall", {"query": "locker code", "threshold": 0}))
            assert found["results"] == []
            assert data(await client.call_tool("list", {}))["memories"] == []
            block = data(await client.call_tool("get_context", {"query": "locker code"}))
            assert block["context"] == "" and block["memory_ids"] == []
            for name, args in (
                ("history", {"memory_id": secret.id}),
                ("update", {"memory_id": secret.id, "text": "stolen"}),
                ("forget", {"memory_id": secret.id}),
            ):
                assert "is visible to you" in error_text(await client.call_tool(name, args))
            assert data(await client.call_tool("forget", {"scope": "user"})) == {"deleted": 0}
            profile = resource_json(
                (await client.read_resource("chatmem://users/ana/profile")).contents
            )
            assert profile["facts"] == []
            try:
                await client.read_resource(f"chatmem://memories/{secret.id}")
                raise AssertionError("another tenant's memory was read")
            except MCPError as exc:
                assert "is visible to you" in str(exc)
        admin = _bearer(ADMIN_KEY, **{"X-Chatmem-Tenant": "acme", "X-Chatmem-User": "ana"})
        async with http_client(f"{service.url}/mcp", admin) as client:
            found = data(await client.call_tool("recall", {"query": "locker code"}))
            assert [r["memory"]["id"] for r in found["results"]] == [secret.id]

    anyio.run(scenario)
    assert memory.get(secret.id, tenant_id="acme").content.raw == "User's locker code is 4711"


def test_recall_gives_what_the_proxys_search_gives_a_remark_said_again_last(
    service: Service,
) -> None:
    """``recall`` takes ``retrieval.search``'s steps: the same remark said on three days
    takes one place of the k, as in what the proxy injects, and the two agree."""
    memory = service.runtime.long_term
    assert memory is not None
    said = [
        "Work has been so busy, I really need a holiday!",
        "work has been SO busy - I really need a holiday",
        "I really need a holiday, work has been so busy",
        "We booked the holiday flights to Crete for June",
    ]
    memory.add_records(
        [
            MemoryRecord.model_validate(
                {
                    "tenant_id": "acme",
                    "user_id": "ana",
                    "content": {"raw": text},
                    "context": {"speaker": "Ana"},
                }
            )
            for text in said
        ]
    )
    expected = search(
        memory, "holiday", user_id="ana", tenant_id="acme", k=2, threshold=0.0, roles=set()
    )
    assert len({m.record.text.lower()[:8] for m in expected}) == 2  # one remark, one other

    async def scenario() -> None:
        user = {"X-Chatmem-User": "ana"}
        async with http_client(f"{service.url}/mcp", _bearer(service.key("acme"), **user)) as c:
            found = data(await c.call_tool("recall", {"query": "holiday", "k": 2, "threshold": 0}))
        assert [r["memory"]["id"] for r in found["results"]] == [m.record.id for m in expected]
        assert all(r["reasons"]["cosine"] is not None for r in found["results"])

    anyio.run(scenario)


def test_one_users_recall_never_returns_anothers(service: Service) -> None:
    memory = service.runtime.long_term
    assert memory is not None
    for user, city in (("ana", "Berlin"), ("ben", "Lisbon")):
        memory.add(f"User lives in {city}", user_id=user, tenant_id="acme")
    key = service.key("acme")

    async def scenario() -> None:
        async with http_client(f"{service.url}/mcp", _bearer(key)) as client:
            for user, city, other in (("ana", "Berlin", "Lisbon"), ("ben", "Lisbon", "Berlin")):
                found = data(
                    await client.call_tool(
                        "recall",
                        {"query": "Where do I live?", "user_id": user, "threshold": 0, "k": 50},
                    )
                )
                texts = [r["memory"]["text"] for r in found["results"]]
                assert texts == [f"User lives in {city}"], texts
                assert all(r["memory"]["user_id"] == user for r in found["results"])
                block = data(
                    await client.call_tool("get_context", {"query": "where", "user_id": user})
                )
                assert other not in block["context"]
                listed = data(await client.call_tool("list", {"user_id": user}))
                assert {m["user_id"] for m in listed["memories"]} == {user}

    anyio.run(scenario)


def test_a_role_restricted_memory_needs_the_role(service: Service) -> None:
    memory = service.runtime.long_term
    assert memory is not None
    open_ = memory.add("User's salary review is in March", user_id="ana", tenant_id="acme")[0]
    secret = memory.add(
        "User's salary will rise by 7 percent",
        user_id="ana",
        tenant_id="acme",
        allowed_roles=["hr"],
    )[0]
    plain, hr = service.key("acme"), service.key("acme", ["hr"])
    user = {"X-Chatmem-User": "ana"}

    async def seen(key: str) -> set[str]:
        """Every memory id ``key`` reaches, through every read."""
        async with http_client(f"{service.url}/mcp", _bearer(key, **user)) as client:
            ids: set[str] = set()
            found = data(await client.call_tool("recall", {"query": "salary", "threshold": 0}))
            ids |= {r["memory"]["id"] for r in found["results"]}
            ids |= set(
                data(await client.call_tool("get_context", {"query": "salary"}))["memory_ids"]
            )
            ids |= {m["id"] for m in data(await client.call_tool("list", {}))["memories"]}
            profile = resource_json(
                (await client.read_resource("chatmem://users/ana/profile")).contents
            )
            ids |= {f["id"] for f in profile["facts"]}
            for memory_id in (open_.id, secret.id):
                if not (await client.call_tool("history", {"memory_id": memory_id})).is_error:
                    ids.add(memory_id)
            return ids

    async def scenario() -> None:
        assert await seen(plain) == {open_.id}
        assert await seen(hr) == {open_.id, secret.id}
        async with http_client(f"{service.url}/mcp", _bearer(plain, **user)) as client:
            refused = await client.call_tool(
                "update", {"memory_id": secret.id, "text": "0 percent"}
            )
            assert "is visible to you" in error_text(refused)
            # A scope forget leaves what the key cannot read.
            assert data(await client.call_tool("forget", {"scope": "user"})) == {"deleted": 1}

    anyio.run(scenario)
    assert (
        memory.get(secret.id, tenant_id="acme").content.raw
        == "User's salary will rise by 7 percent"
    )


def test_bad_arguments_are_tool_errors_naming_the_argument(service: Service) -> None:
    key = service.key("acme")

    async def scenario() -> None:
        async with http_client(f"{service.url}/mcp", _bearer(key)) as client:
            cases = [
                ("recall", {"query": "tea"}, "user_id"),  # no default user over this key
                ("recall", {"query": "", "user_id": "ana"}, "query"),
                ("recall", {"query": "tea", "user_id": "ana", "k": 0}, "k"),
                ("recall", {"query": "tea", "user_id": "ana", "threshold": 2}, "threshold"),
                ("remember", {"user_id": "ana"}, "text"),
                ("remember", {"user_id": "ana", "text": "   "}, "text"),
                ("remember", {"text": "x", "user_id": "ana", "type": "gossip"}, "type"),
                ("remember", {"text": "x", "user_id": "ana", "importance": 3}, "importance"),
                ("get_context", {"query": "tea", "user_id": "ana", "max_tokens": -1}, "max_tokens"),
                ("list", {"user_id": "ana", "cursor": "not-a-cursor"}, "cursor"),
                ("list", {"user_id": "ana", "limit": 1000}, "limit"),
                ("forget", {"user_id": "ana"}, "memory_id"),
                ("forget", {"user_id": "ana", "scope": "project"}, "project_id"),
                ("forget", {"user_id": "ana", "scope": "galaxy"}, "scope"),
                ("update", {"memory_id": "m1", "user_id": "ana"}, "text"),
                ("history", {"memory_id": "unknown", "user_id": "ana"}, "memory_id"),
                ("history", {"user_id": "ana"}, "memory_id"),
            ]
            for name, args, argument in cases:
                message = error_text(await client.call_tool(name, args))
                assert f"{argument}:" in message, (name, args, message)
                assert message.startswith(f"{name}: ") and "Traceback" not in message

    anyio.run(scenario)


def test_http_needs_a_key_as_rest_does(service: Service) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    none = httpx.post(f"{service.url}/mcp", json=initialize, headers=accept)
    assert none.status_code == 401 and none.json()["error"]["code"] == "missing_api_key"
    unknown = httpx.post(
        f"{service.url}/mcp", json=initialize, headers={**accept, **_bearer("cm-unknown")}
    )
    assert unknown.status_code == 401 and unknown.json()["error"]["code"] == "invalid_api_key"
    admin = httpx.post(
        f"{service.url}/mcp", json=initialize, headers={**accept, **_bearer(ADMIN_KEY)}
    )
    assert admin.status_code == 400 and admin.json()["error"]["code"] == "missing_tenant"
    good = httpx.post(
        f"{service.url}/mcp", json=initialize, headers={**accept, **_bearer(service.key("acme"))}
    )
    assert good.status_code == 200 and good.json()["result"]["serverInfo"]["name"] == "chatmem"
