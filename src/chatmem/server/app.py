"""The FastAPI app factory: ``create_app(config)`` builds a service with its own runtime.

Routes live in routers by concern (``health``, ``chat``, ``responses``, ``memory_api``,
``sessions_api``, ``admin``, the MCP door and the inspector); what they share lives below
them: the dependencies in ``chatmem.server.deps``, the error shape in
``chatmem.server.errors``. This module assembles the app: the routers, the error handlers,
the request guard, the latency metric, and the runtime's start and stop.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chatmem.server import admin, chat, guard, health, memory_api, responses, sessions_api, ui
from chatmem.server.config import ServiceConfig
from chatmem.server.deps import key_of, principal_of, runtime_of, tenant_of
from chatmem.server.errors import ERRORS, ApiError, ErrorBody, error_response, register_errors
from chatmem.server.runtime import Runtime
from chatmem.version import __version__


class _Timed:
    """Request latency by route, method and status class, as a plain ASGI middleware
    (Starlette's ``BaseHTTPMiddleware`` costs a task and a stream per request)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            runtime: Runtime | None = getattr(scope["app"].state, "runtime", None)
            if runtime is not None:
                path = getattr(scope.get("route"), "path", "unmatched")
                runtime.metrics.request_seconds.labels(
                    path, scope["method"], f"{status // 100}xx"
                ).observe(time.perf_counter() - began)


def create_app(config: ServiceConfig | None = None, *, runtime: Runtime | None = None) -> FastAPI:
    """A service for ``config`` (defaults when None). Its runtime is started when the app
    starts (or given, already started, as ``runtime``) and closed when it stops."""
    # Here, not at the top: chatmem.mcp.http still imports names from this module (the one
    # import circle left; it goes when chatmem.mcp.http imports them from deps and errors).
    # Imported here, it also loads after this package whichever of the two comes first.
    from chatmem.mcp.http import PATH as MCP_PATH
    from chatmem.mcp.http import mount as mount_mcp

    config = config or (runtime.config if runtime is not None else ServiceConfig())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        started = runtime or Runtime.start(config)
        app.state.runtime = started
        app.state.upstream_probe = health.UpstreamProbe(started.config.upstream)
        listener = health.MetricsListener.start(started)
        app.state.metrics_address = listener.address if listener is not None else None
        async with chat.upstream_client(started) as client, mcp_serving():
            app.state.upstream = client
            try:
                yield
            finally:
                if listener is not None:
                    listener.close()
                # Drain, then close: no store may go while an answered turn is being stored.
                try:
                    await started.after_answer.drain(started.config.server.shutdown_grace_s)
                finally:
                    started.close()

    app = FastAPI(
        title="chatmem",
        version=__version__,
        summary="A memory layer for chat agents: an OpenAI-compatible proxy with memory, "
        "the Responses API, and a REST API for memories and sessions.",
        lifespan=lifespan,
        responses=ERRORS,
        docs_url=None,  # served from the package by health.register_docs, not from a CDN
        redoc_url=None,
    )
    register_errors(app)
    # Outermost last: the latency metric counts the guard's refusals too.
    app.add_middleware(
        guard.RequestGuard,
        error=error_response,
        line_paths=(memory_api.IMPORT_PATH,),
        mcp_path=MCP_PATH,
    )
    app.add_middleware(_Timed)
    health.register_docs(app)
    for module in (health, chat, responses, memory_api, sessions_api, admin):
        app.include_router(module.router)
    mcp_serving = mount_mcp(app)  # MCP over streamable HTTP at /mcp (nothing without chatmem[mcp])
    ui.mount(app)  # the inspector at /ui
    return app


# ApiError, ErrorBody, error_response, key_of, principal_of, runtime_of and tenant_of live in
# chatmem.server.errors and chatmem.server.deps; they are named here too for the code that
# still imports them from this module (chatmem.mcp.http).
__all__ = [
    "ApiError",
    "ErrorBody",
    "create_app",
    "error_response",
    "key_of",
    "principal_of",
    "runtime_of",
    "tenant_of",
]
