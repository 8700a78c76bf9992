"""The FastAPI app factory: ``create_app(config)`` builds a service with its own runtime.

Routes live in routers by concern (``chat``, ``responses``, ``memory_api``, ``sessions_api``,
``admin``); this module holds what they share: the runtime, who the caller is, the error
shape, request metrics, and health.

Every error is JSON in OpenAI's shape, so an OpenAI SDK shows it as it would OpenAI's::

    {"error": {"message": "...", "type": "invalid_request_error", "param": "user_id",
               "code": "validation_error"}}
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chatmem.version import __version__
from chatmem.errors import (
    ChatmemError,
    ConflictError,
    LLMError,
    NotFoundError,
    StoreError,
    ValidationError,
)
from chatmem.server.auth import KEY_PREFIX, Principal, Reader
from chatmem.server.config import ServiceConfig
from chatmem.server.runtime import Runtime

logger = logging.getLogger("chatmem.server")

TENANT_HEADER = "X-Chatmem-Tenant"


class ApiError(Exception):
    """An error answered as JSON with ``status``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry: bool = True,
    ) -> None:
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        #: False for an error no retry can mend (a 5xx of configuration): the answer tells
        #: clients so (``x-should-retry: false``, which the OpenAI SDKs obey).
        self.retry = retry
        super().__init__(message)


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


#: The error responses every route documents.
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "The request is invalid (the error names why)."},
    401: {"model": ErrorBody, "description": "No key, or an unknown or revoked one."},
    403: {"model": ErrorBody, "description": "The key may not do this."},
    404: {"model": ErrorBody, "description": "Nothing with that id is visible to the key."},
}

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 409: "conflict_error", 502: "upstream_error",
          503: "service_unavailable"}  # fmt: skip


def error_response(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> JSONResponse:
    kind = _TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    message, param = _text(message), _text(param) if param is not None else None
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status)


def _text(value: str) -> str:
    """``value`` as valid text: a lone surrogate (which no UTF-8 body can carry) is shown as
    its escape, as the caller wrote it."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def field_path(loc: list[Any]) -> str | None:
    """A validation error's location as chatmem names fields: ``messages[0].role``."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or None


async def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(runtime_of)]


def key_of(request: Request) -> str | None:
    """The key a request carries (``Authorization: Bearer``, else ``X-API-Key``)."""
    header = request.headers.get("authorization")
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "Authorization must be 'Bearer <key>'", code="invalid_api_key")
        return token.strip()
    return request.headers.get("x-api-key")


async def principal_of(request: Request) -> Principal:
    """The caller: a key's tenant and roles, the admin, or the anonymous tenant.

    A bearer token that chatmem did not issue (not ``cm-…``, and not a key of the config
    file) counts as no key: an OpenAI SDK always sends one, and with
    ``upstream.pass_authorization`` it is the upstream's key, not chatmem's."""
    runtime: Runtime = request.app.state.runtime
    key = key_of(request)
    principal = runtime.keys.authenticate(key) if key is not None else None
    if principal is not None:
        return principal
    if key is not None and key.startswith(KEY_PREFIX):
        raise ApiError(401, "unknown or revoked API key", code="invalid_api_key")
    anonymous = runtime.config.auth.anonymous_tenant
    if anonymous is None:
        raise ApiError(401, "an API key is required", code="missing_api_key")
    return Principal(anonymous)


PrincipalDep = Annotated[Principal, Depends(principal_of)]


async def tenant_of(request: Request, principal: PrincipalDep) -> str:
    """The tenant a data request acts for: the key's own; the admin names one in the
    ``X-Chatmem-Tenant`` header. Ids in the body never choose the tenant."""
    if principal.tenant_id is not None:
        return principal.tenant_id
    named = request.headers.get(TENANT_HEADER)
    if not named:
        raise ApiError(400, f"the admin key acts for the tenant named in {TENANT_HEADER}",
                       param=TENANT_HEADER, code="missing_tenant")  # fmt: skip
    return named


TenantDep = Annotated[str, Depends(tenant_of)]


async def reader_of(principal: PrincipalDep, tenant_id: TenantDep) -> Reader:
    """Whose memories a request reads and with which roles: the tenant it acts for, and
    the key's roles (the admin's: all)."""
    return Reader(tenant_id, principal.reader_roles)


ReaderDep = Annotated[Reader, Depends(reader_of)]


async def require_admin(principal: PrincipalDep) -> Principal:
    if not principal.is_admin:
        raise ApiError(403, "this needs the admin key", code="admin_only")
    return principal


AdminDep = Annotated[Principal, Depends(require_admin)]


async def require_memory(runtime: RuntimeDep) -> Runtime:
    """Memory routes answer 503 while memory is off (F1), saying why."""
    if runtime.long_term is None:
        why = runtime.memory_error or "memory.enabled is false"
        raise ApiError(503, f"memory is off: {why}", code="memory_unavailable")
    return runtime


MemoryRuntimeDep = Annotated[Runtime, Depends(require_memory)]


def _register_errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        answer = error_response(exc.status, exc.message, param=exc.param, code=exc.code)
        if not exc.retry:
            answer.headers["x-should-retry"] = "false"
        return answer

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        loc = list(first.get("loc", ()))
        if loc and loc[0] in ("query", "path", "header", "cookie"):
            loc = loc[1:2]  # the parameter as sent: a repeated one (type=a&type=b) has no index
        elif loc and loc[0] == "body":
            loc = loc[1:]  # where it came from, not a field's name (a field may be "query")
        param = field_path(loc)
        message = str(first.get("msg", "invalid request")).removeprefix("Value error, ")
        text = f"{param}: {message}" if param else message
        return error_response(400, text, param=param, code="validation_error")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), code="http_error")

    @app.exception_handler(ValidationError)
    async def rejected(_: Request, exc: ValidationError) -> JSONResponse:
        return error_response(400, str(exc), param=exc.field, code="validation_error")

    @app.exception_handler(NotFoundError)
    async def not_found(_: Request, exc: NotFoundError) -> JSONResponse:
        return error_response(404, str(exc), code="not_found")

    @app.exception_handler(ConflictError)
    async def conflict(_: Request, exc: ConflictError) -> JSONResponse:
        return error_response(409, str(exc), code="conflict")

    @app.exception_handler(StoreError)
    async def store_down(_: Request, exc: StoreError) -> JSONResponse:
        logger.error("store error: %s", exc)
        return error_response(503, f"memory store unavailable: {exc}", code="store_unavailable")

    @app.exception_handler(LLMError)
    async def model_down(_: Request, exc: LLMError) -> JSONResponse:
        return error_response(502, f"model error: {exc}", code="model_error")

    @app.exception_handler(ChatmemError)
    async def other(_: Request, exc: ChatmemError) -> JSONResponse:
        return error_response(400, str(exc), code=type(exc).__name__)


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
    from chatmem.mcp.http import mount as mount_mcp
    from chatmem.server import admin, chat, guard, health, memory_api, responses, sessions_api, ui

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
    _register_errors(app)
    # Outermost last: the latency metric counts the guard's refusals too.
    app.add_middleware(
        guard.RequestGuard, error=error_response, line_paths=(memory_api.IMPORT_PATH,)
    )
    app.add_middleware(_Timed)
    health.register_docs(app)
    for module in (health, chat, responses, memory_api, sessions_api, admin):
        app.include_router(module.router)
    mcp_serving = mount_mcp(app)  # MCP over streamable HTTP at /mcp (nothing without chatmem[mcp])
    ui.mount(app)  # the inspector at /ui
    return app


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
