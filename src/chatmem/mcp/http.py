"""Streamable HTTP at ``/mcp`` in ``chatmem serve``.

Each HTTP request is authenticated as a REST request is (``principal_of``: the bearer key's
tenant and roles, the admin naming a tenant in ``X-Chatmem-Tenant``, or the anonymous
tenant), before the MCP SDK sees it; the caller it makes rides in the ASGI scope to the
tools. So identity is per request, never per MCP session: a session id presented with
another key acts for that other key. ``X-Chatmem-User`` names the default user.

The server is stateless (each request stands alone) and answers JSON, so it works behind
``server.workers`` processes. This module imports ``mcp`` only in ``mount``, which does
nothing without the ``chatmem[mcp]`` extra.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from chatmem.errors import ValidationError
from chatmem.server.auth import Reader
from chatmem.server.deps import principal_of, tenant_of
from chatmem.server.errors import ApiError, error_response
from chatmem.server.injection import USER_HEADER
from chatmem.server.runtime import Runtime

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from chatmem.mcp.server import Caller, MemoryServer

logger = logging.getLogger("chatmem.mcp")

PATH = "/mcp"
#: Where the authenticated caller of a request waits for the tools, in the ASGI scope.
CALLER_KEY = "chatmem.mcp.caller"

Serving = Callable[[], AbstractAsyncContextManager[Any]]


def mount(app: FastAPI, *, path: str = PATH) -> Serving:
    """Serve MCP at ``path`` of ``app``; returns what the app's lifespan must enter (the
    SDK's session manager). Without the ``mcp`` package, nothing is mounted."""
    if importlib.util.find_spec("mcp") is None:
        logger.info("MCP is off: pip install 'chatmem[mcp]' to serve it at %s", path)
        return nullcontext
    from chatmem.mcp.server import create_server

    door = Door(create_server(caller_of_request), path)
    app.router.routes.append(Route(path, Authenticated(door), include_in_schema=False))
    return door.serving


class Door:
    """ASGI: the MCP server's streamable HTTP, stateless and answering JSON.

    The SDK's session manager runs once, so each start of the app (``serving``) makes its
    own, and requests go to the latest one running: an app may be started again, or twice
    at once in tests."""

    def __init__(self, server: MemoryServer, path: str) -> None:
        self.server = server
        self.path = path
        self._running: list[StreamableHTTPSessionManager] = []

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        from mcp.server.transport_security import TransportSecuritySettings

        # Makes a session manager; its Starlette app is not used (the route is the app's).
        # The Host check is left to the service, as for its REST routes: /mcp is one of them.
        self.server.streamable_http_app(
            streamable_http_path=self.path,
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        manager = self.server.session_manager
        async with manager.run():
            self._running.append(manager)
            try:
                yield
            finally:
                self._running.remove(manager)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._running:
            stopped = error_response(503, "MCP is not running", code="mcp_unavailable")
            await stopped(scope, receive, send)
            return
        await self._running[-1].handle_request(scope, receive, send)


class Authenticated:
    """ASGI: the caller of the request from its key (401 as for REST when it has none),
    or 503 while memory is off; then the MCP app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        try:
            caller = await _caller(request)
        except ApiError as exc:
            answer = error_response(exc.status, exc.message, param=exc.param, code=exc.code)
            await answer(scope, receive, send)
            return
        scope[CALLER_KEY] = caller
        await self.app(scope, receive, send)


async def _caller(request: Request) -> Caller:
    from chatmem.mcp.server import Caller

    principal = await principal_of(request)
    reader = Reader(await tenant_of(request, principal), principal.reader_roles)
    runtime: Runtime = request.app.state.runtime
    memory, retriever = runtime.long_term, runtime.retriever
    if memory is None or retriever is None:
        why = runtime.memory_error or "memory.enabled is false"
        raise ApiError(503, f"memory is off: {why}", code="memory_unavailable")
    user = request.headers.get(USER_HEADER) or None
    try:
        reader.filter(user_id=user)
    except ValidationError as exc:
        raise ApiError(400, f"{USER_HEADER}: {exc.message}", param=USER_HEADER) from None
    return Caller(
        memory,
        reader,
        user,
        k=retriever.k,
        threshold=retriever.threshold,
        budget_tokens=retriever.budget_tokens,
        counter=retriever.counter,
    )


def caller_of_request(ctx: Context[Any, Any]) -> Caller:
    """The caller ``Authenticated`` put in the scope of the request that carried ``ctx``."""
    from mcp.server.mcpserver.exceptions import ToolError

    request = ctx.request_context.request
    caller = request.scope.get(CALLER_KEY) if isinstance(request, Request) else None
    if caller is None:  # only a request that came through Authenticated reaches the tools
        raise ToolError("no authenticated caller for this request")
    found: Caller = caller
    return found


__all__ = ["CALLER_KEY", "PATH", "Authenticated", "Door", "caller_of_request", "mount"]
