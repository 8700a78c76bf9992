"""chatmem as the OpenAI Agents SDK's session: ``ChatmemSession``, a ``Session`` over
chatmem's short-term memory (``pip install 'chatmem[agents]'``).

    session = ChatmemSession("trip", user_id="ana", short_term=ShortTermMemory(store))
    result = await Runner.run(agent, "Plan my dinner", session=session)

**Items.** Each item the Runner adds (a message, a function call, its output, a reasoning
item…) is one chatmem message, with the item kept whole in its metadata under
``openai_agents.item``, so ``get_items`` gives back exactly what was added. The message's own
fields say what chatmem reads: a message item's text (its role; ``developer`` becomes
``system``), a function call as an assistant message's ``tool_calls``, a function call's
output as a ``tool`` message; other items are assistant messages without text. Messages of
the session that other doors added (the chat proxy, ``Memory.add``) are read as the items
they stand for, so one session can be carried on through either.

**Memory.** The session is a chatmem session (tenant, user, session id): its overflow
policy, working state and hand-over apply as for any other, ``Memory.get_llm`` reads it, and
with ``extraction`` (``chatmem.memory.Extraction``) its turns are handed to the extraction
outbox as ``Memory.add`` hands them; ``ChatmemSession.of(memory)`` shares a ``Memory``'s.

**Removal.** A session's log only grows in chatmem, so ``pop_item`` writes it again without
its last item (keeping the session's state); it is not atomic against another writer of the
same session in another process. What was already handed to extraction stays extracted.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Mapping
from typing import Any, Self, cast

from chatmem.errors import ConfigError, ValidationError
from chatmem.memory import Extraction, Memory
from chatmem.messages import MAX_MESSAGE_CHARS, Message, MessageMetadata, Role, SessionKey
from chatmem.short_term import ShortTermMemory

try:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings
except ImportError as exc:  # pragma: no cover - the dev extra installs it
    raise ConfigError(
        "chatmem.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'chatmem[agents]'"
    ) from exc

__all__ = ["ITEM_KEY", "ChatmemSession", "item_of", "items_of", "message_of"]

#: The metadata key under which a message keeps the item it was made from.
ITEM_KEY = "openai_agents.item"
_ROLES = {"user": Role.USER, "assistant": Role.ASSISTANT, "system": Role.SYSTEM}


class ChatmemSession:
    """A ``Session`` of the OpenAI Agents SDK kept in chatmem's short-term memory (see the
    module docstring). ``short_term`` holds the sessions (one in the process when None);
    ``extraction`` receives each added batch of items for fact extraction."""

    def __init__(
        self,
        session_id: str,
        *,
        user_id: str = "default",
        tenant_id: str = "default",
        short_term: ShortTermMemory | None = None,
        extraction: Extraction | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.key = SessionKey.of(tenant_id, user_id, session_id)
        self.session_id = session_id
        self.short_term = short_term or ShortTermMemory()
        self.extraction = extraction
        self.session_settings = session_settings
        # A pop reads and writes the log again; one at a time within this object.
        self._lock = threading.Lock()

    @classmethod
    def of(cls, memory: Memory, *, session_settings: SessionSettings | None = None) -> Self:
        """The session of ``memory``: its key, its short-term memory and its extraction."""
        tenant_id, user_id, session_id = memory.key
        return cls(
            session_id,
            user_id=user_id,
            tenant_id=tenant_id,
            short_term=memory.short_term,
            extraction=memory.extraction,
            session_settings=session_settings,
        )

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; the latest ``limit`` when given (else
        ``session_settings.limit``)."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        items = await asyncio.to_thread(self._items)
        return items[-limit:] if limit is not None and limit > 0 else items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items, all or none (a bad one raises ``ValidationError``)."""
        if not items:
            return
        messages = [message_of(item) for item in items]
        await asyncio.to_thread(self._append, messages)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it (None for an empty session)."""
        return await asyncio.to_thread(self._pop)

    async def clear_session(self) -> None:
        """Forget the session's messages and state."""
        await asyncio.to_thread(self.short_term.clear, self.key)

    async def end_session(self) -> Message | None:
        """End the session as ``Memory.end_session`` does: hand it over (its episodic
        summary, returned) and, with ``extraction``, queue what is left to extract."""

        def end() -> Message | None:
            episode = self.short_term.end(self.key)
            if self.extraction is not None:
                self.extraction.observe(self.key, [], session_end=True)
            return episode

        return await asyncio.to_thread(end)

    def _items(self) -> list[TResponseInputItem]:
        return [item for message in self.short_term.history(self.key) for item in items_of(message)]

    def _append(self, messages: list[Message]) -> None:
        self.short_term.append(self.key, messages)
        if self.extraction is not None:
            self.extraction.observe(self.key, messages)

    def _pop(self) -> TResponseInputItem | None:
        with self._lock:
            log = self.short_term.history(self.key)
            if not log:
                return None
            *kept, last = log
            *rest, popped = items_of(last)
            # A message of another door may stand for several items: the others stay.
            self._rewrite([*kept, *(message_of(item) for item in rest)])
            return popped

    def _rewrite(self, messages: list[Message]) -> None:
        """The log written again as ``messages``, the state kept (its marks no further
        than the new log's end)."""
        store = self.short_term.store
        state = store.state(self.key)
        self.short_term.clear(self.key)
        if not messages:
            return
        store.append(self.key, messages)
        end = len(messages)
        marks = ("window_start", "working_state_at", "flushed_upto", "extracted_upto")
        update: dict[str, Any] = {mark: min(getattr(state, mark), end) for mark in marks}
        update["revision"] = store.state(self.key).revision
        store.save_state(self.key, state.model_copy(update=update))


# -- items and messages -------------------------------------------------------------------------


def message_of(item: TResponseInputItem | Mapping[str, Any]) -> Message:
    """The chatmem message that keeps ``item`` (whole, in its metadata)."""
    raw = _plain(item)
    metadata = MessageMetadata.model_validate({ITEM_KEY: raw})
    kind = raw.get("type", "message" if "role" in raw else None)
    if kind == "message" and raw.get("role") in (*_ROLES, "developer"):
        role = _ROLES.get(raw["role"], Role.SYSTEM)
        return Message(role=role, content=_text(raw.get("content")), metadata=metadata)
    if kind == "function_call" and _named(raw, "call_id", "name"):
        call = {
            "id": raw["call_id"],
            "type": "function",
            "function": {"name": raw["name"], "arguments": str(raw.get("arguments", ""))},
        }
        return Message.model_validate(
            {"role": "assistant", "content": "", "tool_calls": [call], "metadata": metadata}
        )
    if kind == "function_call_output" and _named(raw, "call_id"):
        return Message(
            role=Role.TOOL,
            content=_text(raw.get("output")),
            tool_call_id=raw["call_id"],
            metadata=metadata,
        )
    return Message(role=Role.ASSISTANT, content="", metadata=metadata)


def items_of(message: Message) -> list[TResponseInputItem]:
    """The items a message stands for: the one it keeps, else those it says."""
    kept = (message.metadata.model_extra or {}).get(ITEM_KEY)
    if isinstance(kept, dict):
        return [cast("TResponseInputItem", copy.deepcopy(kept))]
    if message.role is Role.TOOL:
        output = {"type": "function_call_output", "call_id": message.tool_call_id}
        return [item_of(output | {"output": message.content})]
    items = []
    if message.content or not message.tool_calls:
        items.append(item_of({"role": message.role.value, "content": message.content}))
    for call in message.tool_calls or []:
        function = call.function
        fields = {"call_id": call.id, "name": function.name, "arguments": function.arguments}
        items.append(item_of({"type": "function_call", **fields}))
    return items


def item_of(value: Mapping[str, Any]) -> TResponseInputItem:
    """``value`` as an input item (a JSON object the Responses API reads)."""
    return cast("TResponseInputItem", dict(value))


def _plain(item: Any) -> dict[str, Any]:
    """The item as plain JSON (the Runner gives dicts; a pydantic item is dumped)."""
    dump = getattr(item, "model_dump", None)
    raw = dump(mode="json", exclude_unset=True) if callable(dump) else item
    if not isinstance(raw, Mapping):
        raise ValidationError("an item must be a JSON object", field="items")
    try:
        plain: dict[str, Any] = json.loads(json.dumps(raw, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"an item must be JSON: {exc}", field="items") from None
    return plain


def _named(raw: Mapping[str, Any], *names: str) -> bool:
    return all(isinstance(raw.get(n), str) and 0 < len(raw[n]) <= 256 for n in names)


def _text(content: Any) -> str:
    """What chatmem reads of an item's content: its text parts (the whole item is kept)."""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = [p.get("text") or p.get("refusal") for p in content if isinstance(p, Mapping)]
        text = "\n".join(part for part in parts if isinstance(part, str) and part)
    else:
        text = ""
    return text[:MAX_MESSAGE_CHARS]
