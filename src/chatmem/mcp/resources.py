"""The MCP resources: a user's profile (their current facts) and one memory with its history.

Both are JSON, read through the caller's tenant and roles like the tools.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context
from pydantic import BaseModel

from chatmem.mcp.boundary import MemoryServer
from chatmem.mcp.caller import Caller, CallerOf
from chatmem.mcp.views import History, MemoryView
from chatmem.records import MemoryRecord, MemoryType, utcnow

PROFILE_URI = "chatmem://users/{user_id}/profile"
MEMORY_URI = "chatmem://memories/{memory_id}"
JSON = "application/json"

#: The kinds of memory a profile lists: what is known about the user, not what happened.
FACT_TYPES = frozenset(MemoryType) - {MemoryType.EPISODIC}
#: Most facts a profile lists (the list tool pages through everything).
MAX_FACTS = 500
_PAGE = 100


class Profile(BaseModel):
    user_id: str
    facts: list[MemoryView]
    #: True when the user has more than MAX_FACTS current facts (the oldest are listed).
    truncated: bool


class MemoryWithHistory(BaseModel):
    memory: MemoryRecord
    history: History


def profile(caller: Caller, user_id: str) -> Profile:
    """The user's current facts (valid now, not episodes), oldest first."""
    scope = caller.reader.filter(user_id=user_id, types=FACT_TYPES, valid_at=utcnow())
    facts: list[MemoryRecord] = []
    cursor: str | None = None
    while len(facts) <= MAX_FACTS:
        page = caller.memory.list(scope, limit=_PAGE, cursor=cursor)
        facts += page.records
        cursor = page.next_cursor
        if cursor is None:
            break
    truncated = len(facts) > MAX_FACTS or cursor is not None
    views = [MemoryView.of(r) for r in facts[:MAX_FACTS]]
    return Profile(user_id=user_id, facts=views, truncated=truncated)


def memory_with_history(caller: Caller, memory_id: str) -> MemoryWithHistory:
    """One memory (within the caller's default user, when there is one) and its versions."""
    reader = caller.reader
    record = caller.memory.get(
        memory_id, tenant_id=reader.tenant_id, user_id=caller.user_id, roles=reader.roles
    )
    entries = caller.memory.history(
        memory_id, tenant_id=reader.tenant_id, user_id=record.user_id, roles=reader.roles
    )
    return MemoryWithHistory(memory=record, history=History.of(memory_id, entries))


def register(server: MemoryServer, caller_of: CallerOf) -> None:
    """Add the resource templates to ``server``, each read for ``caller_of(ctx)``."""

    @server.resource(
        PROFILE_URI,
        name="profile",
        title="User profile",
        description="What is currently known about a user: their facts, preferences and "
        f"profile memories that are still true (no episodes), oldest first, at most {MAX_FACTS}.",
        mime_type=JSON,
    )
    def read_profile(user_id: str, ctx: Context[Any, Any]) -> str:
        return profile(caller_of(ctx), user_id).model_dump_json()

    @server.resource(
        MEMORY_URI,
        name="memory",
        title="Memory with history",
        description="One memory's full record (type, scope, times, provenance, access "
        "control) and every version of it, oldest first.",
        mime_type=JSON,
    )
    def read_memory(memory_id: str, ctx: Context[Any, Any]) -> str:
        return memory_with_history(caller_of(ctx), memory_id).model_dump_json()


__all__ = [
    "FACT_TYPES",
    "MEMORY_URI",
    "PROFILE_URI",
    "Profile",
    "memory_with_history",
    "profile",
    "register",
]
