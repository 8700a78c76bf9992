"""Fixtures for the MCP server: the real ``chatmem serve`` app on a loopback port (the
scripted upstream, the local embedder, keys required) and the official ``mcp`` client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextResourceContents

from chatmem import LocalEmbedder
from chatmem.server import Runtime, ServiceConfig, create_app
from chatmem.server.serving import ServiceThread
from chatmem.testing import ScriptedOpenAIServer

ADMIN_KEY = "admin-key-0123456789abcdef"


@dataclass
class Service:
    """A served app: its base URL and runtime (to make keys and write memories directly)."""

    url: str
    runtime: Runtime

    def key(self, tenant: str, roles: list[str] | None = None) -> str:
        key, _ = self.runtime.keys.create(tenant, roles or [])
        return key


@pytest.fixture
def upstream() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(responder=lambda body: "ok") as server:
        yield server


@pytest.fixture
def service(
    tmp_path: Path, embedder: LocalEmbedder, upstream: ScriptedOpenAIServer
) -> Iterator[Service]:
    """``chatmem serve``'s app over real HTTP, every request needing a key."""
    config = ServiceConfig.parse(
        {
            "server": {"data_dir": str(tmp_path / "data")},
            "upstream": {"base_url": upstream.base_url},
            "auth": {"admin_key": ADMIN_KEY, "anonymous_tenant": None},
            "memory": {"search_budget_ms": 5000},
        }
    )
    runtime = Runtime.start(config, embedder=embedder)
    with ServiceThread(create_app(runtime=runtime)) as served:
        yield Service(served.url, runtime)


@asynccontextmanager
async def http_client(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[Client]:
    """The official client over streamable HTTP, sending ``headers`` (the key) each request."""
    async with (
        httpx2.AsyncClient(headers=headers or {}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def data(result: CallToolResult) -> Any:
    """A tool's structured answer; fails with the tool's error text when it failed."""
    assert not result.is_error, result.content
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    return " ".join(getattr(part, "text", "") for part in result.content)


def resource_json(contents: list[Any]) -> Any:
    first = contents[0]
    assert isinstance(first, TextResourceContents)
    return json.loads(first.text)
