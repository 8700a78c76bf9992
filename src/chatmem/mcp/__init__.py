"""chatmem's MCP server (SPEC X4), on the official ``mcp`` SDK (the ``chatmem[mcp]`` extra).

Tools (remember, recall, get_context, forget, list, history, update) and resources (a
user's profile, one memory with its history) over one ``LongTermMemory``, for a caller
whose tenant and roles are fixed by the transport: flags over stdio (``chatmem mcp``), the
bearer key over streamable HTTP (``/mcp`` in ``chatmem serve``). Every read goes through a
``Filter`` carrying the caller's roles.

Nothing here is imported by ``import chatmem``; the names below load ``mcp`` on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chatmem.mcp.server import Caller, create_server, run_stdio, server_for

__all__ = ["Caller", "create_server", "run_stdio", "server_for"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("chatmem.mcp.server"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
