"""MCP tools with out-of-range arguments, through the official client over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from chatmem import LocalEmbedder
from chatmem.server import Runtime, ServiceConfig, create_app
from chatmem.server.serving import ServiceThread
from chatmem.testing import ScriptedOpenAIServer
from tests.mcp.conftest import http_client


@pytest.fixture
def served(
    tmp_path: Path, embedder: LocalEmbedder, upstream: ScriptedOpenAIServer
) -> Iterator[tuple[str, str]]:
    config = ServiceConfig.parse(
        {
            "server": {"data_dir": str(tmp_path / "data")},
            "upstream": {"base_url": upstream.base_url},
            "auth": {"anonymous_tenant": None},
        }
    )
    runtime = Runtime.start(config, embedder=embedder)
    key, _ = runtime.keys.create("acme", [])
    with ServiceThread(create_app(runtime=runtime)) as service:
        yield f"{service.url}/mcp", key


def test_a_huge_integer_argument_is_a_tool_error(served: tuple[str, str]) -> None:
    url, key = served

    async def scenario() -> None:
        async with http_client(url, {"Authorization": f"Bearer {key}"}) as client:
            result = await client.call_tool("list", {"user_id": "ana", "limit": 2**63})
            assert result.is_error
            assert "limit" in str(result.content)

    anyio.run(scenario)


def test_a_body_that_is_not_strict_json_gets_a_jsonrpc_error_naming_the_field(
    served: tuple[str, str],
) -> None:
    """Outside a tool's arguments, what strict JSON refuses is a JSON-RPC error (-32602)
    for the request's id, naming the field: never the REST error shape on the MCP path."""
    url, key = served
    headers = {
        "Authorization": f"Bearer {key}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    for raw, field in (
        ('{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"x":NaN}}', "params.x"),
        ('{"jsonrpc":"2.0","id":7,"method":"ping","params":{"n":99999999999999999999}}',
         "params.n"),
        ('{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"c":"\\ud800"}}', "params.c"),
    ):  # fmt: skip
        answer = httpx.post(url, content=raw, headers=headers, timeout=30)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["id"] == 7 and body["error"]["code"] == -32602, body
        assert body["error"]["data"]["param"] == field
