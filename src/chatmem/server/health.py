"""Health: liveness, readiness (with a cached probe of the upstream model), the Prometheus
metrics (on the main port behind a key, on a listen address of their own, or off), and the
API docs, served from the package so they work offline.

Anyone may ask ``/readyz``, as a load balancer's probe carries no key, so it answers
anonymous callers with a status only. The admin key also gets the details: memory on or
off and why, the database, the upstream's URL and the extraction queue's depth.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import threading
import time
from dataclasses import dataclass
from importlib.resources import files
from typing import Any
from wsgiref.simple_server import WSGIServer

import httpx
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import start_http_server
from pydantic import BaseModel

from chatmem.server.auth import Principal
from chatmem.server.config import MetricsSection, UpstreamSection
from chatmem.server.deps import RuntimeDep, key_of, principal_of
from chatmem.server.errors import ApiError
from chatmem.server.metrics import CONTENT_TYPE
from chatmem.server.runtime import Runtime
from chatmem.version import __version__

logger = logging.getLogger("chatmem.server")

#: Where the Swagger UI and ReDoc files are served from (they ship in ``fastapi-offline``).
DOCS_ASSETS = "/docs-assets"

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str
    version: str


class Readiness(BaseModel):
    """``status`` for everyone: ``ready``, ``no upstream`` or ``upstream unreachable``; the
    other fields only for the admin key."""

    status: str
    memory: str | None = None
    memory_error: str | None = None
    database: str | None = None
    #: ``ok``, or why sessions are kept in this process's memory only.
    sessions: str | None = None
    upstream: str | None = None
    upstream_error: str | None = None
    extraction_queue: int | None = None


@dataclass(frozen=True)
class Probe:
    """One look at the upstream: reachable or not (and why), and when it was taken."""

    reachable: bool
    error: str | None
    at: float


class UpstreamProbe:
    """Asks the upstream for ``GET /models`` with a short timeout, and keeps the answer for
    ``ready_cache_s``, so a readiness probe every second never loads the model server. Any
    answer below 500 counts as reachable (a 401 or 404 still proves the server is up);
    concurrent probes wait on one request."""

    def __init__(self, upstream: UpstreamSection) -> None:
        self.upstream = upstream
        self._last: Probe | None = None
        self._lock = asyncio.Lock()

    async def check(self, client: httpx.AsyncClient) -> Probe:
        async with self._lock:
            last = self._last
            if last is None or time.monotonic() - last.at >= self.upstream.ready_cache_s:
                last = self._last = await self._ask(client)
            return last

    async def _ask(self, client: httpx.AsyncClient) -> Probe:
        url = f"{self.upstream.base_url}/models"
        env = self.upstream.api_key_env
        key = os.environ.get(env) if env else None
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            reply = await client.get(url, headers=headers, timeout=self.upstream.ready_timeout_s)
        except httpx.HTTPError as exc:
            why = "timed out" if isinstance(exc, httpx.TimeoutException) else type(exc).__name__
            return Probe(False, f"{why}: {exc}", time.monotonic())
        if reply.status_code >= 500:
            return Probe(False, f"answered {reply.status_code}", time.monotonic())
        return Probe(True, None, time.monotonic())


async def _caller(request: Request) -> Principal | None:
    """The caller when its key is valid; None for no key or one that is not valid (readiness
    answers everyone, so a bad key is not an error here)."""
    try:
        return await principal_of(request)
    except ApiError:
        return None


@router.get("/healthz")
def healthz() -> Health:
    """Liveness: the process answers."""
    return Health(status="ok", version=__version__)


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
async def readyz(request: Request, runtime: RuntimeDep) -> JSONResponse:
    """Readiness: 200 when chat can be served (memory off still serves chat), 503 when no
    upstream model is configured or it does not answer. A status only, unless the caller
    holds the admin key."""
    base_url = runtime.config.upstream.base_url
    probe: Probe | None = None
    if base_url is None:
        status = "no upstream"
    else:
        probe = await request.app.state.upstream_probe.check(request.app.state.upstream)
        status = "ready" if probe.reachable else "upstream unreachable"
    code = 200 if status == "ready" else 503
    caller = await _caller(request)
    if caller is None or not caller.is_admin:
        return JSONResponse(Readiness(status=status).model_dump(exclude_none=True), code)
    body = Readiness(
        status=status,
        memory="on" if runtime.memory_on else "off",
        memory_error=runtime.memory_error,
        database="memory only" if runtime.database_error else "ok",
        sessions=f"memory only: {runtime.sessions_error}" if runtime.sessions_error else "ok",
        upstream=base_url or "not configured",
        upstream_error=probe.error if probe is not None else None,
        extraction_queue=await asyncio.to_thread(runtime.queue_depth),
    )
    return JSONResponse(body.model_dump(), code)


def metrics_key(section: MetricsSection) -> str | None:
    """The dedicated metrics key, from the file or its environment variable."""
    return section.key or (os.environ.get(section.key_env) if section.key_env else None)


async def may_scrape(request: Request, runtime: RuntimeDep) -> None:
    """``/metrics`` on the main port: 404 when it is off there; with keys required (no
    ``auth.anonymous_tenant``), only the admin key or the metrics key reads it."""
    section = runtime.config.server.metrics
    if not section.enabled or section.listen is not None:
        raise ApiError(404, "metrics are not served here", code="not_found")
    key, scrape_key = key_of(request), metrics_key(section)
    if key is not None and scrape_key and hmac.compare_digest(key, scrape_key):
        return
    principal = await principal_of(request)  # 401 without a key when keys are required
    if runtime.config.auth.anonymous_tenant is None and not principal.is_admin:
        raise ApiError(403, "metrics need the admin key or the metrics key", code="admin_only")


@router.get("/metrics", response_class=Response, dependencies=[Depends(may_scrape)])
def metrics(runtime: RuntimeDep) -> Response:
    """Prometheus metrics of this service (see ``server.metrics``)."""
    return Response(runtime.metrics.render(), media_type=CONTENT_TYPE)


class MetricsListener:
    """The metrics on a listen address of their own (``server.metrics.listen``), served by
    prometheus_client's HTTP server in a daemon thread; ``address`` is where it listens."""

    def __init__(self, runtime: Runtime, host: str, port: int) -> None:
        self._server: WSGIServer
        self._thread: threading.Thread
        self._server, self._thread = start_http_server(
            port, host, registry=runtime.metrics.registry
        )
        bound_host, bound_port = self._server.server_address[:2]
        self.address = (str(bound_host), int(bound_port))
        logger.info("metrics on http://%s:%d/metrics", *self.address)

    @classmethod
    def start(cls, runtime: Runtime) -> MetricsListener | None:
        section = runtime.config.server.metrics
        address = section.address()
        if not section.enabled or address is None:
            return None
        return cls(runtime, *address)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def register_docs(app: FastAPI) -> None:
    """Swagger UI at ``/docs`` and ReDoc at ``/redoc``, every file served by this app from
    the package (FastAPI's own pages load them from a CDN, blank on an offline machine)."""
    assets = files("fastapi_offline") / "static"
    app.mount(DOCS_ASSETS, StaticFiles(directory=str(assets)), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    redirect_url = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"

    def _root(request: Request) -> str:
        root: Any = request.scope.get("root_path", "")
        return str(root)

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = _root(request)
        return get_swagger_ui_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=f"{root}{redirect_url}",
            swagger_js_url=f"{root}{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{DOCS_ASSETS}/favicon.png",
        )

    @app.get(redirect_url, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = _root(request)
        return get_redoc_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{DOCS_ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{DOCS_ASSETS}/favicon.png",
            with_google_fonts=False,
        )


__all__ = [
    "DOCS_ASSETS",
    "Health",
    "MetricsListener",
    "Readiness",
    "UpstreamProbe",
    "may_scrape",
    "register_docs",
    "router",
]
