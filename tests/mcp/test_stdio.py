"""The MCP server over stdio, as a desktop client runs it: ``python -m chatmem.mcp`` spawned
by the official client's stdio transport, on a real SQLite store.

Its tenant, default user and roles come from the flags: it never reaches another tenant's
memories or (unless a call names them) another user's, and with ``--roles`` a memory
restricted to other roles stays hidden.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from chatmem import LocalEmbedder, LongTermMemory
from chatmem.records import MemoryRecord
from tests.mcp.conftest import data, error_text, resource_json

TOOLS = {"remember", "recall", "get_context", "forget", "list", "history", "update"}


@asynccontextmanager
async def stdio_client(store: str, *flags: str) -> AsyncIterator[Client]:
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "chatmem.mcp", "--store", store, *flags]
    )
    async with Client(server, read_timeout_seconds=120) as client:
        yield client


@pytest.fixture
def store(tmp_path: Path, embedder: LocalEmbedder) -> tuple[str, dict[str, MemoryRecord]]:
    """A store holding ana's memories in tenant acme (one for role hr only), ben's, and
    another tenant's; the server process opens it after this closes."""
    uri = f"sqlite:///{tmp_path / 'chatmem.db'}"
    with LongTermMemory.open(uri, embedder=embedder) as memory:
        written = {
            "ana": memory.add("User has two cats, Miso and Tofu", user_id="ana", tenant_id="acme")[
                0
            ],
            "ana-hr": memory.add(
                "User's cat insurance claim was refused",
                user_id="ana",
                tenant_id="acme",
                allowed_roles=["hr"],
            )[0],  # fmt: skip
            "ben": memory.add("User has a cat called Felix", user_id="ben", tenant_id="acme")[0],
            "globex": memory.add("User has a cat called Luna", user_id="ana", tenant_id="globex")[
                0
            ],
        }
    return uri, written


def test_every_tool_over_stdio_within_the_flags(store: tuple[str, dict[str, MemoryRecord]]) -> None:
    uri, written = store

    async def scenario() -> None:
        async with stdio_client(
            uri, "--tenant", "acme", "--user", "ana", "--roles", "ops"
        ) as client:
            listed = await client.list_tools()
            assert {tool.name for tool in listed.tools} == TOOLS
            templates = await client.list_resource_templates()
            assert {t.uri_template for t in templates.resource_templates} == {
                "chatmem://users/{user_id}/profile",
                "chatmem://memories/{memory_id}",
            }

            # Isolation: only ana's unrestricted memory of tenant acme, whatever the search.
            found = data(
                await client.call_tool("recall", {"query": "cat", "threshold": 0, "k": 50})
            )
            assert [r["memory"]["id"] for r in found["results"]] == [written["ana"].id]
            assert found["results"][0]["reasons"]["bm25"] is not None
            block = data(await client.call_tool("get_context", {"query": "Tell me about my cats"}))
            assert block["memory_ids"] == [written["ana"].id] and "Miso" in block["context"]
            listed_ids = {m["id"] for m in data(await client.call_tool("list", {}))["memories"]}
            assert listed_ids == {written["ana"].id}
            for hidden in ("ana-hr", "ben", "globex"):
                refused = await client.call_tool("history", {"memory_id": written[hidden].id})
                assert "memory_id:" in error_text(refused)
                with pytest.raises(MCPError, match="is visible to you"):
                    await client.read_resource(f"chatmem://memories/{written[hidden].id}")

            stored = data(
                await client.call_tool(
                    "remember", {"text": "User likes oolong tea", "tags": ["drinks"]}
                )
            )
            new_id = stored["memories"][0]["id"]
            assert stored["memories"][0]["user_id"] == "ana"
            updated = data(
                await client.call_tool(
                    "update", {"memory_id": new_id, "text": "User likes jasmine tea"}
                )
            )
            assert updated["version"] == 2
            changes = data(await client.call_tool("history", {"memory_id": new_id}))["changes"]
            assert [c["text_after"] for c in changes] == [
                "User likes oolong tea",
                "User likes jasmine tea",
            ]
            profile = resource_json(
                (await client.read_resource("chatmem://users/ana/profile")).contents
            )
            assert {f["text"] for f in profile["facts"]} == {
                "User has two cats, Miso and Tofu",
                "User likes jasmine tea",
            }
            assert data(await client.call_tool("forget", {"memory_id": new_id})) == {"deleted": 1}

            # A call may name another user of the tenant, and then sees only theirs.
            bens = data(
                await client.call_tool("recall", {"query": "cat", "user_id": "ben", "threshold": 0})
            )
            assert [r["memory"]["id"] for r in bens["results"]] == [written["ben"].id]

            bad = await client.call_tool("recall", {"query": "cat", "k": "many"})
            assert error_text(bad).startswith("recall: invalid arguments: k:")

    anyio.run(scenario)


def test_roles_flag_opens_restricted_memories(store: tuple[str, dict[str, MemoryRecord]]) -> None:
    uri, written = store

    async def scenario() -> None:
        async with stdio_client(
            uri, "--tenant", "acme", "--user", "ana", "--roles", "hr"
        ) as client:
            found = data(
                await client.call_tool("recall", {"query": "cat", "threshold": 0, "k": 50})
            )
            assert {r["memory"]["id"] for r in found["results"]} == {
                written["ana"].id,
                written["ana-hr"].id,
            }
            assert data(await client.call_tool("forget", {"scope": "user"})) == {"deleted": 2}

    anyio.run(scenario)


def test_a_bad_store_is_one_line_on_stderr(tmp_path: Path) -> None:
    import subprocess

    answer = subprocess.run(
        [sys.executable, "-m", "chatmem.mcp", "--store", f"sqlite:///{tmp_path}/missing/x.db"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert answer.returncode == 1 and answer.stdout == ""
    assert answer.stderr.startswith("error: no folder") and "--store" in answer.stderr
