"""Who an MCP tool call or resource read acts for: ``Caller``, and ``CallerOf``, the
function a server asks for it with each request's context.

The tools, the resources and the server all take a ``Caller``; this module needs nothing
of the ``mcp`` SDK at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chatmem.errors import ValidationError
from chatmem.long_term import LongTermMemory
from chatmem.server.auth import Reader
from chatmem.tokens import TokenCounter, default_counter

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context


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


CallerOf = Callable[["Context[Any, Any]"], Caller]

__all__ = ["Caller", "CallerOf"]
