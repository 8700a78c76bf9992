"""The request guard: every body is checked once, before routing and parsing.

A body larger than ``MAX_BODY_BYTES`` is refused (413) as soon as it passes the limit. A
JSON body (no content type, ``application/json`` or ``…+json``) must be strict JSON
(``chatmem.strict_json``: no NaN or Infinity, integers in 64 bits, no lone surrogates, at
most ``MAX_DEPTH`` levels), and on the paths that take JSON lines (the import) so must
every line. What fails is answered 400 naming the field, before any route reads memory.

On the MCP path (``mcp_path``) the answer is JSON-RPC's, not the REST error shape: a tool
call whose fault lies in its arguments goes on to the tool, which refuses them as a tool
error naming the argument (``mcp.boundary``; a model reads those); any other fault is a
JSON-RPC error (-32602, invalid params) naming the field, for the request's id.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chatmem import strict_json
from chatmem.errors import ValidationError

#: Largest request body accepted, in bytes (an import of JSON lines is the largest).
MAX_BODY_BYTES = 64 * 1024 * 1024
#: JSON-RPC's code for invalid method parameters.
INVALID_PARAMS = -32602

ErrorMaker = Callable[..., Response]


class RequestGuard:
    """ASGI middleware: refuse a body that is too large or not strict JSON; pass the rest
    on with the body replayed. ``line_paths`` take JSON lines; ``error`` makes the error
    response (the service's ``error_response``)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        error: ErrorMaker,
        line_paths: Collection[str] = (),
        max_bytes: int = MAX_BODY_BYTES,
        mcp_path: str | None = None,
    ) -> None:
        self.app = app
        self.error = error
        self.line_paths = frozenset(line_paths)
        self.max_bytes = max_bytes
        self.mcp_path = mcp_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        body = await self._read(receive)
        if body is None:
            too_large = self.error(
                413, f"the body is larger than {self.max_bytes} bytes", code="too_large"
            )
            await too_large(scope, receive, send)
            return
        refused = self._refusal(scope, body)
        if refused is not None:
            await refused(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or None once it passes the limit (the rest is not read)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left; let the app see it
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    def _refusal(self, scope: Scope, body: bytes) -> Response | None:
        lines = scope["path"] in self.line_paths
        if not body or not (lines or _is_json(scope)):
            return None
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            message = f"the body is not UTF-8: {exc}"
            return self.error(400, message, code="invalid_encoding")
        try:
            if lines:
                _check_lines(text)
            else:
                strict_json.loads(text)
        except ValidationError as exc:
            if self._is_mcp(scope):
                return _jsonrpc_refusal(text, exc)
            code = "invalid_json" if exc.field is None else "validation_error"
            return self.error(400, _message(exc), param=exc.field, code=code)
        return None

    def _is_mcp(self, scope: Scope) -> bool:
        path: str = scope["path"]
        return self.mcp_path is not None and path.rstrip("/") == self.mcp_path


def _jsonrpc_refusal(text: str, exc: ValidationError) -> Response | None:
    """None (let it through) for a tool call whose fault is in its arguments; else a
    JSON-RPC error for the request's id. Python's parser reads what strict JSON refuses
    (big integers, NaN, lone surrogates) well enough to find the method and the id."""
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        message = None
    request = message if isinstance(message, dict) else {}
    if request.get("method") == "tools/call" and (exc.field or "").startswith("params.arguments."):
        return None
    ident = request.get("id")
    body = {
        "jsonrpc": "2.0",
        "id": ident if isinstance(ident, str | int) and not isinstance(ident, bool) else None,
        "error": {"code": INVALID_PARAMS, "message": _message(exc), "data": {"param": exc.field}},
    }
    return Response(
        json.dumps(body, ensure_ascii=True), status_code=200, media_type="application/json"
    )


def _check_lines(text: str) -> None:
    """Each non-blank line strict JSON; the error says which line (the param stays the
    field within it, as the importer names fields)."""
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                strict_json.loads(line)
            except ValidationError as exc:
                raise ValidationError(f"line {number}: {exc}", field=exc.field) from None


def _message(exc: ValidationError) -> str:
    """A field's error as ``field: why``, a line's as ``line N: …``, the whole body's as
    ``the body is not …``."""
    if exc.message.startswith("line "):
        return exc.message
    return str(exc) if exc.field is not None else f"the body is {exc.message}"


def _is_json(scope: Scope) -> bool:
    """Whether the app will read the body as JSON (FastAPI does with no content type)."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            kind: bytes = value.split(b";")[0].strip().lower()
            return kind == b"application/json" or kind.endswith(b"+json")
    return True


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: the disconnect, when it comes

    return replayed


__all__ = ["MAX_BODY_BYTES", "RequestGuard"]
