"""chatmem as a LlamaIndex memory block: ``ChatmemMemoryBlock``, a ``BaseMemoryBlock`` for
``llama_index.core.memory.Memory`` backed by chatmem's long-term memory
(``pip install 'chatmem[llamaindex]'``).

    block = ChatmemMemoryBlock(long_term=long_term, user_id="alice")
    memory = Memory.from_defaults(session_id="monday", memory_blocks=[block])

**Writes.** When ``Memory``'s short-term queue passes its token limit, it flushes the oldest
messages to its blocks; this one stores each message with text as a chatmem memory of the
user (episodic, with its speaker and neighbours as context, as ``LongTermMemory.add``
does), under the ``Memory``'s session id.

**Reads.** On ``Memory.aget`` the block searches the user's memories for the latest user
message, with chatmem's retrieval steps (``chatmem.retrieval``): a vague message ("and
the other one?") gets the key terms of the user's earlier turns, the search is the hybrid
search reranked by relevance, recency and importance, and only memories with a relevance
of at least ``threshold`` are kept. It returns them one per line (``- [2024-05-08] text``),
which ``Memory`` puts in its system message inside ``<chatmem>`` tags. Memories of every
session are found, not only this one's.

**Access control.** ``roles`` are the reader's roles (``Filter.reader_roles``): a memory
restricted to roles the reader lacks is never returned. ``allowed_roles`` restricts the
memories the block writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from chatmem import retrieval
from chatmem.errors import ConfigError
from chatmem.long_term import LongTermMemory
from chatmem.tokens import default_counter

try:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.bridge.pydantic import Field
    from llama_index.core.memory.memory import BaseMemoryBlock
except ImportError as exc:  # pragma: no cover - the dev extra installs it
    raise ConfigError(
        "chatmem.integrations.llamaindex needs LlamaIndex: pip install 'chatmem[llamaindex]'"
    ) from exc

__all__ = ["ChatmemMemoryBlock", "as_turns"]

#: LlamaIndex roles that chatmem names otherwise; the rest keep their names.
ROLE_NAMES = {
    "developer": "system",
    "chatbot": "assistant",
    "model": "assistant",
    "function": "tool",
}
#: Roles whose messages the block stores (chatmem's roles).
STORED_ROLES = frozenset({"user", "assistant", "system", "tool"})


def as_turns(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    """LlamaIndex messages as chatmem's chat messages (``role`` and text ``content``),
    leaving out those with no text or a role chatmem does not keep."""
    turns = []
    for message in messages:
        role = ROLE_NAMES.get(message.role.value, message.role.value)
        text = message.content or ""
        if role in STORED_ROLES and text.strip():
            turns.append({"role": role, "content": text})
    return turns


class ChatmemMemoryBlock(BaseMemoryBlock[str]):
    """A memory block that keeps flushed messages in chatmem's long-term memory and brings
    back the user's relevant memories (see the module docstring)."""

    name: str = Field(default="chatmem", description="The block's name (its tag in the prompt).")
    long_term: LongTermMemory = Field(exclude=True, description="Where the memories live.")
    user_id: str = Field(description="Whose memories these are.")
    tenant_id: str = Field(default="default", description="The user's tenant.")
    project_id: str | None = Field(default=None, description="Stored and searched project.")
    k: int = Field(default=5, ge=1, description="Most memories returned.")
    threshold: float = Field(
        default=0.6, ge=0.0, le=1.0, description="Least relevance a returned memory has."
    )
    context_turns: int = Field(
        default=3, ge=0, description="Earlier user turns that complete a vague message."
    )
    roles: frozenset[str] | None = Field(
        default=None, description="The reader's roles; None reads everything."
    )
    allowed_roles: frozenset[str] | None = Field(
        default=None, description="Roles that may read what the block writes; None: anyone."
    )

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        """The user's memories relevant to the latest user message, one per line."""
        turns = as_turns(messages or [])
        asked = [i for i, turn in enumerate(turns) if turn["role"] == "user"]
        if not asked:
            return ""
        query = retrieval.build_query(turns[: asked[-1] + 1], context_turns=self.context_turns)
        found = await asyncio.to_thread(
            retrieval.search,
            self.long_term,
            query,
            user_id=self.user_id,
            tenant_id=self.tenant_id,
            k=self.k,
            threshold=self.threshold,
            project_id=self.project_id,
            roles=self.roles,
        )
        return "\n".join(retrieval.render_memory(memory) for memory in found)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Store the messages ``Memory`` flushed, under its session id."""
        turns = as_turns(messages)
        if not turns:
            return
        sessions = [m.additional_kwargs.get("session_id") for m in messages]
        await asyncio.to_thread(
            self.long_term.add,
            turns,
            user_id=self.user_id,
            tenant_id=self.tenant_id,
            project_id=self.project_id,
            session_id=next((str(s) for s in sessions if s), None),
            allowed_roles=sorted(self.allowed_roles) if self.allowed_roles else None,
        )

    async def atruncate(self, content: str, tokens_to_truncate: int) -> str | None:
        """Drop the least relevant memories (the last lines) until ``tokens_to_truncate``
        tokens are gone; None when nothing is left."""
        counter = default_counter()
        lines = content.splitlines()
        while lines and tokens_to_truncate > 0:
            tokens_to_truncate -= counter.count(lines.pop() + "\n")
        return "\n".join(lines) or None
