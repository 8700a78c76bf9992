"""The MCP server: chatmem's tools and resources for one caller at a time.

``create_server(caller_of)`` builds an ``MCPServer`` whose every tool call and resource read
asks ``caller_of(ctx)`` who is calling (a ``Caller``: the memory, the reader's tenant and
roles, the default user and the recall limits). Over stdio the caller is fixed
(``server_for``); over HTTP it comes from the request's bearer key (``chatmem.mcp.http``).

chatmem's errors are translated at one boundary, ``MemoryServer`` (``chatmem.mcp.boundary``):
a bad argument or an unknown id becomes a tool error the model can read (naming the
argument), never a crash. ``Caller`` lives in ``chatmem.mcp.caller``; both are named here too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from chatmem.long_term import LongTermMemory
from chatmem.mcp.boundary import MemoryServer, argument_errors, explain
from chatmem.mcp.caller import Caller, CallerOf
from chatmem.mcp.resources import register as register_resources
from chatmem.mcp.tools import register as register_tools
from chatmem.server.auth import Reader
from chatmem.version import __version__

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


def create_server(caller_of: CallerOf, *, name: str = "chatmem") -> MemoryServer:
    """The MCP server whose tools and resources act for ``caller_of(ctx)``."""
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
