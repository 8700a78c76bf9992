"""The service's one error shape: every error is JSON in OpenAI's shape, so an OpenAI SDK
shows it as it would OpenAI's::

    {"error": {"message": "...", "type": "invalid_request_error", "param": "user_id",
               "code": "validation_error"}}

``ApiError`` is what a route raises; ``register_errors`` answers it, a request that fails
validation, and chatmem's own errors in that shape.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from chatmem.errors import (
    ChatmemError,
    ConflictError,
    LLMError,
    NotFoundError,
    StoreError,
    ValidationError,
)

logger = logging.getLogger("chatmem.server")


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


def register_errors(app: FastAPI) -> None:
    """Answer every error ``app`` raises in the one shape."""

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


__all__ = [
    "ERRORS",
    "ApiError",
    "ErrorBody",
    "ErrorDetail",
    "error_response",
    "field_path",
    "register_errors",
]
