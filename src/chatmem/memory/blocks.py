"""Memory blocks (SPEC M2): what long-term memory contributes to a model's context.

A block answers with *items*, most important first, and has a priority: 0 is never cut, and
when the context is over its limit the blocks with the highest numbers are cut first, item by
item from their end. A block may also ``take`` the messages that leave short-term memory.

- ``StaticBlock``: fixed content, or content kept in a session store and editable while
  agents run.
- ``FactExtractionBlock``: facts extracted from the conversation, at most ``max_facts``.
- ``VectorBlock``: stores messages in long-term memory and retrieves the ones most similar
  to the last few messages.
"""

from __future__ import annotations

import json
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chatmem import checks
from chatmem.errors import ChatmemError, ValidationError
from chatmem.extraction.base import Extractor, Fact
from chatmem.llm.base import ChatModel
from chatmem.messages import Message, Role, SessionKey
from chatmem.records import Filter, MemoryType
from chatmem.sessions.base import SessionStore
from chatmem.short_term.condense import SUMMARY_PREFIX

if TYPE_CHECKING:
    from chatmem.long_term import LongTermMemory

log = logging.getLogger("chatmem.blocks")

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")

CONDENSE_PROMPT = """Here are facts about a user, one per line. Rewrite them as at most \
{limit} facts, merging duplicates and related facts, keeping every number, name and date, \
each fact stated with its context. Answer with a JSON array of strings."""


@dataclass(frozen=True)
class BlockRequest:
    """What a block sees when asked for its items."""

    key: SessionKey
    #: The most recent messages of the session, oldest first.
    recent: Sequence[Message]


class MemoryBlock(ABC):
    """One source of long-term context. ``name`` is a short identifier (it tags the block)."""

    kind: str = "block"

    def __init__(self, name: str, priority: int) -> None:
        if not _NAME.match(name):
            raise ValidationError(
                "a block name is 1 to 40 lower-case letters, digits or _", field="name"
            )
        checks.whole(priority, "priority", low=0, message="must be 0 or more")
        self.name = name
        self.priority = priority

    @abstractmethod
    def items(self, request: BlockRequest) -> list[str]:
        """What the block contributes now, most important first."""

    def take(self, key: SessionKey, messages: list[Message]) -> None:  # noqa: B027
        """Receive messages leaving short-term memory. Most blocks ignore them."""

    def end(self, key: SessionKey, episode: Message) -> None:  # noqa: B027
        """A session ended with this episodic summary. Most blocks ignore it."""

    def state(self) -> dict[str, Any]:
        """The block's own state, as JSON, for a snapshot."""
        return {}

    def restore(self, state: dict[str, Any]) -> None:  # noqa: B027
        """Take back a state made by ``state()``."""

    def describe(self) -> dict[str, Any]:
        """The block's kind, name, priority and settings, for a snapshot."""
        return {"kind": self.kind, "name": self.name, "priority": self.priority}


class StaticBlock(MemoryBlock):
    """Fixed content, always included (priority 0 by default).

    With a ``store``, the content lives there under the tenant and the block's name, so an
    operator can change it (``set``) while agents run; ``content`` is then the default.
    """

    kind = "static"

    def __init__(
        self,
        content: str | None = None,
        *,
        name: str = "static",
        priority: int = 0,
        store: SessionStore | None = None,
    ) -> None:
        super().__init__(name, priority)
        if content is None and store is None:
            raise ValidationError("a static block needs content or a store", field="content")
        self.content = content
        self.store = store

    def set(self, tenant_id: str, content: str) -> None:
        """Replace the content kept in the store for ``tenant_id``."""
        if self.store is None:
            self.content = content
            return
        self.store.put_text(tenant_id, self._text_name, content)

    @property
    def _text_name(self) -> str:
        return f"block:{self.name}"

    def current(self, tenant_id: str) -> str | None:
        """The content in force for ``tenant_id`` (the stored one, else the default)."""
        if self.store is not None:
            stored = self.store.get_text(tenant_id, self._text_name)
            if stored is not None:
                return stored
        return self.content

    def items(self, request: BlockRequest) -> list[str]:
        content = self.current(request.key.tenant_id)
        return [content] if content else []

    def state(self) -> dict[str, Any]:
        return {"content": self.content}

    def restore(self, state: dict[str, Any]) -> None:
        self.content = state.get("content")


class FactExtractionBlock(MemoryBlock):
    """Facts from the messages that leave short-term memory, at most ``max_facts``.

    A new fact with the subject of an older one replaces it; a repeated fact is kept once.
    Over ``max_facts``, the facts are condensed: by ``condenser`` (an LLM) when given, else by
    keeping the most important, newest ones. With a ``store``, each user's facts are kept
    there and outlive the process and the session.
    """

    kind = "facts"

    def __init__(
        self,
        extractor: Extractor | None = None,
        *,
        name: str = "facts",
        priority: int = 1,
        max_facts: int = 50,
        condenser: ChatModel | None = None,
        store: SessionStore | None = None,
    ) -> None:
        super().__init__(name, priority)
        checks.whole(max_facts, "max_facts", low=1)
        self.extractor = extractor or _default_extractor()
        self.max_facts = max_facts
        self.condenser = condenser
        self.store = store
        self._facts: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def take(self, key: SessionKey, messages: list[Message]) -> None:
        facts = self.extractor.extract(messages)
        if not facts:
            return
        current = self._load(key)
        for fact in facts:
            current = _merge_fact(current, fact)
        if len(current) > self.max_facts:
            current = self._condense(current)
        self._save(key, current)

    def items(self, request: BlockRequest) -> list[str]:
        ranked = sorted(self._load(request.key), key=lambda f: (-f["importance"], -f["seq"]))
        return [fact["text"] for fact in ranked]

    def forget(self, tenant_id: str, user_id: str) -> None:
        """Forget every fact kept for one user (a user's "forget me" reaches the block)."""
        if self.store is not None:
            self.store.delete_text(tenant_id, self._text_name(user_id))
        self._facts.pop((tenant_id, user_id), None)

    def facts(self, tenant_id: str, user_id: str) -> list[str]:
        """The user's facts, oldest first."""
        return [f["text"] for f in self._load(SessionKey(tenant_id, user_id, "-"))]

    def state(self) -> dict[str, Any]:
        return {"facts": [[t, u, facts] for (t, u), facts in sorted(self._facts.items())]}

    def restore(self, state: dict[str, Any]) -> None:
        self._facts = {(t, u): list(facts) for t, u, facts in state.get("facts", [])}

    def _load(self, key: SessionKey) -> list[dict[str, Any]]:
        owner = (key.tenant_id, key.user_id)
        if self.store is not None:
            raw = self.store.get_text(key.tenant_id, self._text_name(key.user_id))
            return list(json.loads(raw)) if raw else []
        return list(self._facts.get(owner, []))

    def _save(self, key: SessionKey, facts: list[dict[str, Any]]) -> None:
        if self.store is not None:
            self.store.put_text(key.tenant_id, self._text_name(key.user_id), json.dumps(facts))
        else:
            self._facts[(key.tenant_id, key.user_id)] = facts

    def _text_name(self, user_id: str) -> str:
        return f"facts:{self.name}:{user_id}"

    def _condense(self, facts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.condenser is not None:
            try:
                return _condensed_by_model(self.condenser, facts, self.max_facts)
            except ChatmemError as exc:  # the LLM failing must not lose facts: keep the best
                log.warning("condensing facts by LLM failed, keeping the best ones: %s", exc)
        best = sorted(facts, key=lambda f: (-f["importance"], -f["seq"]))[: self.max_facts]
        return sorted(best, key=lambda f: f["seq"])


def _merge_fact(facts: list[dict[str, Any]], fact: Fact) -> list[dict[str, Any]]:
    normal = " ".join(fact.text.lower().split())
    kept = [
        f
        for f in facts
        if f["normal"] != normal and not (fact.subject and f.get("subject") == fact.subject)
    ]
    seq = max((f["seq"] for f in facts), default=0) + 1
    kept.append(
        {
            "text": fact.text,
            "normal": normal,
            "subject": fact.subject,
            "importance": fact.importance,
            "seq": seq,
        }
    )
    return kept


def _condensed_by_model(
    model: ChatModel, facts: list[dict[str, Any]], limit: int
) -> list[dict[str, Any]]:
    request = [
        {"role": "system", "content": CONDENSE_PROMPT.format(limit=limit)},
        {"role": "user", "content": "\n".join(f["text"] for f in facts)},
    ]
    raw = model.complete(request, json=True)
    try:
        texts = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ChatmemError(f"condensed facts are not JSON: {raw[:120]!r}") from exc
    if not isinstance(texts, list) or not texts:
        raise ChatmemError("condensed facts are not a non-empty JSON array")
    return [
        {
            "text": str(t),
            "normal": " ".join(str(t).lower().split()),
            "subject": None,
            "importance": 0.5,
            "seq": i + 1,
        }
        for i, t in enumerate(texts[:limit])
    ]


def _default_extractor() -> Extractor:
    from chatmem.extraction.offline import OfflineExtractor

    return OfflineExtractor()


class VectorBlock(MemoryBlock):
    """Messages kept in long-term memory, retrieved by similarity to the recent messages.

    ``scope="user"`` (the default) retrieves across all of the user's sessions; ``"session"``
    only from the current one. ``filter`` narrows further; ``template`` formats each hit
    (fields: ``text``, ``date``, ``score``).
    """

    kind = "vector"

    def __init__(
        self,
        long_term: LongTermMemory,
        *,
        name: str = "retrieved",
        priority: int = 2,
        top_k: int = 2,
        context_window: int = 5,
        scope: str = "user",
        filter: Filter | None = None,
        threshold: float | None = None,
        template: str = "{text}",
    ) -> None:
        super().__init__(name, priority)
        if scope not in ("user", "session"):
            raise ValidationError("scope is 'user' or 'session'", field="scope")
        top_k = checks.whole(top_k, "top_k", low=1)
        context_window = checks.whole(context_window, "context_window", low=1)
        if threshold is not None:
            checks.number(threshold, "threshold")
        self.long_term = long_term
        self.top_k = top_k
        self.context_window = context_window
        self.scope = scope
        self.filter = filter
        self.threshold = threshold
        self.template = template

    def take(self, key: SessionKey, messages: list[Message]) -> None:
        said = [
            {"role": m.role.value, "content": m.content, "id": m.id, "timestamp": m.timestamp}
            for m in messages
            if m.role in (Role.USER, Role.ASSISTANT) and m.content.strip()
        ]
        if said:
            self.long_term.add(
                said, user_id=key.user_id, tenant_id=key.tenant_id, session_id=key.session_id
            )

    def end(self, key: SessionKey, episode: Message) -> None:
        """Keep the session's summary as an episodic memory, for later sessions to find."""
        self.long_term.add(
            episode.content.removeprefix(SUMMARY_PREFIX).strip() or episode.content,
            user_id=key.user_id,
            tenant_id=key.tenant_id,
            session_id=key.session_id,
            type=MemoryType.EPISODIC,
            metadata={"episode": True},
        )

    def items(self, request: BlockRequest) -> list[str]:
        recent = [m.content for m in request.recent[-self.context_window :] if m.content.strip()]
        if not recent:
            return []
        narrow = self.filter
        if self.scope == "session":
            narrow = (narrow or Filter()).model_copy(update={"session_id": request.key.session_id})
        hits = self.long_term.search(
            "\n".join(recent),
            user_id=request.key.user_id,
            tenant_id=request.key.tenant_id,
            k=self.top_k,
            threshold=self.threshold,
            filter=narrow,
        )
        return [
            self.template.format(
                text=hit.record.content.raw,
                date=hit.record.time.created_at.date().isoformat(),
                score=f"{hit.score:.2f}",
            )
            for hit in hits
        ]

    def describe(self) -> dict[str, Any]:
        """As ``MemoryBlock.describe``, with top_k and scope."""
        return super().describe() | {"top_k": self.top_k, "scope": self.scope}


__all__ = [
    "BlockRequest",
    "FactExtractionBlock",
    "MemoryBlock",
    "StaticBlock",
    "VectorBlock",
]
