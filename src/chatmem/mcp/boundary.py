"""The MCP server's error boundary: ``MemoryServer`` turns chatmem's errors and argument
validation into tool and resource errors a model can read (naming the argument), never a
crash; a crash stays a crash.

This is the first module of the package to load the ``mcp`` SDK's server, so it is the one
that says which extra to install when the SDK is missing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import pydantic

try:
    from mcp.server.lowlevel.helper_types import ReadResourceContents
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import (
        ResourceError,
        ResourceNotFoundError,
        ToolError,
        UnexpectedResourceError,
        UnexpectedToolError,
    )
    from mcp_types import CallToolResult, InputRequiredResult
    from pydantic.networks import AnyUrl
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    from chatmem.errors import ConfigError

    raise ConfigError(
        "chatmem's MCP server needs the mcp package: pip install 'chatmem[mcp]'"
    ) from exc

from chatmem import strict_json
from chatmem.errors import ChatmemError, ConflictError, NotFoundError, StoreError, ValidationError


class MemoryServer(MCPServer[Any]):
    """``MCPServer`` with chatmem's error boundary: chatmem's errors and argument
    validation become tool errors that name the argument; a crash stays a crash.

    The SDK's constructor configures the root logger (a rich handler at INFO, when the
    application has none): a library must leave that to the application, so it is put
    back as it was. Left in place, every INFO record of every library (httpx logs each
    upstream request) went through rich's renderer: 13 % of the service's CPU under 16
    concurrent clients, where the service was built by ``create_app`` (issue 14)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level
        try:
            super().__init__(*args, **kwargs)
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            # What strict JSON refuses (integers past 64 bits, NaN, lone surrogates, depth)
            # the HTTP guard lets through to here, to be a tool error naming the argument.
            strict_json.check(arguments)
        except ValidationError as exc:
            raise ToolError(f"{name}: invalid arguments: {exc}") from exc
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, pydantic.ValidationError):
                raise ToolError(f"{name}: invalid arguments: {argument_errors(cause)}") from cause
            if isinstance(exc, UnexpectedToolError) and isinstance(cause, ChatmemError):
                raise ToolError(f"{name}: {explain(cause)}") from cause
            raise

    async def read_resource(
        self, uri: AnyUrl | str, context: Context[Any, Any] | None = None
    ) -> Iterable[ReadResourceContents] | InputRequiredResult:
        try:
            return await super().read_resource(uri, context)
        except UnexpectedResourceError as exc:
            cause = exc.__cause__
            if isinstance(cause, NotFoundError):
                raise ResourceNotFoundError(explain(cause)) from cause
            if isinstance(cause, ChatmemError):
                raise ResourceError(explain(cause)) from cause
            raise


def argument_errors(error: pydantic.ValidationError) -> str:
    """Each invalid argument, named: ``k: Input should be less than or equal to 100``."""
    parts = []
    for problem in error.errors():
        where = ".".join(str(part) for part in problem["loc"]) or "arguments"
        parts.append(f"{where}: {problem['msg']}")
    return "; ".join(parts)


def explain(error: ChatmemError) -> str:
    """A chatmem error as a model should read it."""
    if isinstance(error, ValidationError):
        where = (error.field or "").removeprefix("filter.").removeprefix("messages[0].")
        return f"{where}: {error.message}" if where else error.message
    if isinstance(error, NotFoundError):
        # The same words whether the id is unknown, another user's or tenant's, or hidden
        # by roles: which of them is not the caller's to learn.
        return f"memory_id: no memory {error.memory_id!r} is visible to you"
    if isinstance(error, ConflictError):
        return "another update of this memory won; read it again and retry"
    if isinstance(error, StoreError):
        return f"the memory store is unavailable: {error}"
    return str(error)


__all__ = ["MemoryServer", "argument_errors", "explain"]
