"""The MCP server: chatmem's tools and resources for one caller at a time.

``create_server(caller_of)`` builds an ``MCPServer`` whose every tool call and resource read
asks ``caller_of(ctx)`` who is calling (a ``Caller``: the memory, the reader's tenant and
roles, the default user and the recall limits). Over stdio the caller is fixed
(``server_for``); over HTTP it comes from the request's bearer key (``chatmem.mcp.http``).

chatmem's errors are translated at one boundary, ``MemoryServer``: a bad argument or an
unknown id becomes a tool error the model can read (naming the argument), never a crash.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
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

from chatmem.version import __version__
from chatmem.errors import ChatmemError, ConflictError, NotFoundError, StoreError, ValidationError
from chatmem.long_term import LongTermMemory
from chatmem.server.auth import Reader
from chatmem.tokens import TokenCounter, default_counter

#: What the server tells a client's model about itself (sent once, at connection).
INSTRUCTIONS = """\
chatmem is the user's long-term memory. Call `recall` (or `get_context` for a ready-made
block) before answering anything that may depend on what the user told you earlier: their
preferences, facts about them, their projects, past decisions. Call `remember` when the user
states something worth keeping across conversations (a preference, a fact, a decision, a
correction); store one self-contained fact per call, in the third person ("User prefers
tea"). Use `update` to correct a stored memory and `forget` only when the user asks you to
forget. Memory ids come from `recall`, `list` and `remember`. Every tool acts for one user:
the configured default user unless you pass `user_id`."""


@dataclass(frozen=True)
class Caller:
    """Who a tool call acts for: ``memory`` read through ``reader`` (tenant and roles:
    ``Filter.reader_roles``), ``user_id`` the user a call names none, and the limits of
    recall and get_context (``k``, ``threshold`` on the relevance, ``budget_tokens``)."""

    memory: LongTermMemory
    reader: Reader
    user_id: str | None = None
    k: int = 5
    threshold: float = 0.6
    budget_tokens: int = 1000
    counter: TokenCounter = field(default_factory=default_counter)

    def user(self, named: str | None) -> str:
        """The user a call acts for: ``named``, else the default; a ValidationError naming
        ``user_id`` when there is neither."""
        user = named or self.user_id
        if not user:
            raise ValidationError(
                "is required: no default user is configured (start chatmem mcp with --user, "
                "or send the X-Chatmem-User header)",
                field="user_id",
            )
        return user


CallerOf = Callable[[Context[Any, Any]], Caller]


class MemoryServer(MCPServer[Any]):
    """``MCPServer`` with chatmem's error boundary: chatmem's errors and argument
    validation become tool errors that name the argument; a crash stays a crash."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
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


def create_server(caller_of: CallerOf, *, name: str = "chatmem") -> MemoryServer:
    """The MCP server whose tools and resources act for ``caller_of(ctx)``."""
    from chatmem.mcp.resources import register as register_resources
    from chatmem.mcp.tools import register as register_tools

    server = MemoryServer(
        name,
        title="chatmem memory",
        description="Long-term memory for chat agents: remember, recall and forget.",
        instructions=INSTRUCTIONS,
        version=__version__,
    )
    register_tools(server, caller_of)
    register_resources(server, caller_of)
    return server


def server_for(
    memory: LongTermMemory,
    *,
    tenant_id: str = "default",
    user_id: str | None = None,
    roles: Iterable[str] | None = None,
    **limits: Any,
) -> MemoryServer:
    """A server for one fixed caller (stdio, tests, an embedding application): ``memory``
    read in ``tenant_id`` with ``roles`` (None reads every memory, as the library and the
    CLI do), ``user_id`` the default user. ``limits``: ``k``, ``threshold``,
    ``budget_tokens``, ``counter``."""
    reader = Reader(tenant_id, frozenset(roles) if roles is not None else None)
    reader.filter(user_id=user_id)  # a ValidationError now for an unusable tenant or user
    caller = Caller(memory, reader, user_id, **limits)
    return create_server(lambda _ctx: caller)


def run_stdio(
    memory: LongTermMemory,
    *,
    tenant_id: str = "default",
    user_id: str | None = None,
    roles: Iterable[str] | None = None,
    **limits: Any,
) -> None:
    """Serve ``memory`` over stdio until the client closes it (``chatmem mcp``)."""
    server = server_for(memory, tenant_id=tenant_id, user_id=user_id, roles=roles, **limits)
    server.run("stdio")


__all__ = [
    "INSTRUCTIONS",
    "Caller",
    "CallerOf",
    "MemoryServer",
    "argument_errors",
    "create_server",
    "explain",
    "run_stdio",
    "server_for",
]
