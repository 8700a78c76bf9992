"""The Memory object (SPEC M1–M4): what an agent holds for one session.

    memory = Memory(session_id="s1", user_id="ana", blocks=[StaticBlock("Ana is vegan.")])
    memory.add({"role": "user", "content": "Plan my dinner"})
    messages = memory.get_llm()          # within token_limit, blocks and turns packed

Short-term memory keeps the session (in the process, Redis or SQLite); blocks bring in
long-term memory. Messages that overflow the short-term share are flushed to the blocks
(the vector block stores them, the fact block extracts from them), then leave the window.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pydantic

from chatmem import checks
from chatmem.errors import ValidationError
from chatmem.formats import Format, Interrupted, Mode, parse_messages, render_message
from chatmem.llm.base import ChatModel
from chatmem.memory.blocks import BlockRequest, MemoryBlock
from chatmem.memory.context import BlockItems, InsertMethod, Packer
from chatmem.messages import Message, MessageMetadata, Role, SessionKey
from chatmem.records import validation_error
from chatmem.sessions.base import SessionState, SessionStore
from chatmem.sessions.memory import InMemorySessionStore
from chatmem.short_term import OverflowPolicy, ShortTermMemory, Strategy
from chatmem.tokens import TokenCounter, default_counter
from chatmem.worker import ExtractionScheduler, Outbox

SNAPSHOT_FORMAT = "chatmem.memory/1"
#: Smallest token limit accepted: below it not even one short message fits.
MIN_TOKEN_LIMIT = 64


class Memory:
    """Short-term session plus long-term blocks, packed for a model within ``token_limit``.

    ``short_term_ratio`` of the limit (after priority-0 blocks) is reserved for the
    session's turns; blocks fill the rest by priority. ``overflow`` says what happens to
    turns past the short-term share: ``flush`` (to the blocks, the default), ``summarize`` or
    ``trim``. Every ``working_state_every`` user turns the session's working state (topic,
    figures, decisions, open questions) is brought up to date; it is sent once turns have
    left the window.
    """

    def __init__(
        self,
        *,
        session_id: str = "default",
        user_id: str = "default",
        tenant_id: str = "default",
        token_limit: int = 30_000,
        short_term_ratio: float = 0.7,
        blocks: Sequence[MemoryBlock] = (),
        sessions: SessionStore | None = None,
        overflow: Strategy = "flush",
        max_turns: int | None = None,
        summarizer: ChatModel | None = None,
        counter: TokenCounter | None = None,
        insert_method: InsertMethod = "system",
        working_state_every: int | None = 10,
        format: Format = "openai",
        extraction: Extraction | None = None,
    ) -> None:
        _check_limits(token_limit, short_term_ratio)
        if working_state_every is not None:
            checks.whole(working_state_every, "working_state_every")
        names = [block.name for block in blocks]
        if len(set(names)) != len(names):
            raise ValidationError(f"block names must be unique, got {names}", field="blocks")
        self.key = SessionKey.of(tenant_id, user_id, session_id)
        self.token_limit = token_limit
        self.short_term_ratio = short_term_ratio
        self.blocks = list(blocks)
        self.insert_method = insert_method
        self.extraction = extraction
        self.format: Format = format
        self.counter = counter or default_counter()
        short_share = int(token_limit * short_term_ratio)
        self.short_term = ShortTermMemory(
            store=sessions or InMemorySessionStore(),
            policy=OverflowPolicy(
                strategy=overflow,
                max_turns=max_turns or 1_000_000,
                max_tokens=short_share,
                # A summary is worth a quarter of the short-term share at most.
                summary_tokens=max(32, min(400, short_share // 4)),
            ),
            counter=self.counter,
            summarizer=summarizer,
            flush=self._flush_to_blocks,
            state_every=working_state_every,
        )
        self._packer = Packer(
            self.counter, token_limit, short_term_ratio, self._wire, insert_method
        )

    # -- M1 ---------------------------------------------------------------------------------

    def add(self, message: Any | Iterable[Any], *, format: Format | None = None) -> None:
        """Add a message or a list of messages (OpenAI, Vercel or rich shape, or ``Message``).

        All are validated before any is stored; a bad one raises ValidationError and the
        session is left as it was.
        """
        batch = [message] if isinstance(message, dict | Message) else list(message)
        parsed = parse_messages(batch, format or self.format)
        self.short_term.append(self.key, parsed)
        if self.extraction is not None:
            self.extraction.observe(self.key, parsed)

    def get(
        self,
        *,
        format: Format | None = None,
        mode: Mode = "custom",
        interrupted: Interrupted = "said",
    ) -> list[dict[str, Any]]:
        """Every message of the session, overflowed ones included (``custom``: all fields)."""
        chosen = format or self.format
        return [
            render_message(m, chosen, mode=mode, interrupted=interrupted)
            for m in self.short_term.history(self.key)
        ]

    def messages(self) -> list[Message]:
        """Every message of the session as ``Message`` objects."""
        return self.short_term.history(self.key)

    def get_llm(self, transient: Iterable[Any] = ()) -> list[dict[str, Any]]:
        """What to send to the model: OpenAI chat messages within ``token_limit``.

        ``transient`` messages (e.g. a system prompt or a tool result for this call only)
        are packed last and never stored.
        """
        extra = parse_messages(list(transient), self.format)
        window = self.short_term.window(self.key)
        request = BlockRequest(self.key, window.messages)
        offered = [BlockItems(b.name, b.priority, b.items(request)) for b in self.blocks]
        plan = self._packer.pack(window.messages, self._preamble(window), extra, offered)
        return self._packer.fit(plan)

    def clear(self) -> None:
        """Forget this session's messages and state (blocks keep what they took)."""
        self.short_term.clear(self.key)

    def end_session(self) -> Message | None:
        """Hand the session over to the blocks (and to extraction, when configured) and
        return its episodic summary (S5); blocks that keep long-term memory store it."""
        episode = self.short_term.end(self.key)
        if self.extraction is not None:
            self.extraction.observe(self.key, [], session_end=True)
        if episode is not None:
            for block in self.blocks:
                block.end(self.key, episode)
        return episode

    # -- async twins: the same logic on a worker thread ---------------------------------------

    async def aadd(self, message: Any | Iterable[Any], *, format: Format | None = None) -> None:
        """``add`` on a worker thread."""
        await asyncio.to_thread(self.add, message, format=format)

    async def aget_llm(self, transient: Iterable[Any] = ()) -> list[dict[str, Any]]:
        """``get_llm`` on a worker thread."""
        return await asyncio.to_thread(self.get_llm, list(transient))

    # -- M3 ---------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to rebuild this Memory: settings, messages, state, blocks."""
        body = {
            "format": SNAPSHOT_FORMAT,
            "key": list(self.key),
            "token_limit": self.token_limit,
            "short_term_ratio": self.short_term_ratio,
            "insert_method": self.insert_method,
            "policy": _policy(self.short_term.policy),
            "messages": [m.model_dump(mode="json") for m in self.messages()],
            # The revision belongs to the store, not to the memory: a loaded copy starts anew.
            "state": self.short_term.store.state(self.key).model_dump(
                mode="json", exclude={"revision"}
            ),
            "blocks": [b.describe() | {"state": b.state()} for b in self.blocks],
        }
        return body | {"checksum": _checksum(body)}

    @classmethod
    def load(
        cls,
        snapshot: Any,
        *,
        blocks: Sequence[MemoryBlock] = (),
        sessions: SessionStore | None = None,
        summarizer: ChatModel | None = None,
        counter: TokenCounter | None = None,
    ) -> Memory:
        """Rebuild a Memory from ``snapshot()``. Blocks hold live resources (a store, a
        model), so pass them again; their saved state is restored by name. The whole
        snapshot is checked before anything is written: a corrupted or foreign one raises
        ValidationError and leaves ``sessions`` as it was."""
        body, messages, state = _checked_snapshot(snapshot)
        names = {b["name"] for b in body["blocks"]}
        given = {b.name for b in blocks}
        if names != given:
            raise ValidationError(
                f"the snapshot has blocks {sorted(names)}; pass blocks with those names, "
                f"got {sorted(given)}",
                field="blocks",
            )
        tenant_id, user_id, session_id = body["key"]
        store = sessions or InMemorySessionStore()
        key = SessionKey.of(tenant_id, user_id, session_id)
        if store.length(key):
            raise ValidationError(
                f"session {session_id!r} already has messages in this store; load into a "
                "fresh session",
                field="key",
            )
        policy = body["policy"]
        memory = cls(
            session_id=session_id,
            user_id=user_id,
            tenant_id=tenant_id,
            token_limit=body["token_limit"],
            short_term_ratio=body["short_term_ratio"],
            blocks=blocks,
            sessions=store,
            overflow=policy["strategy"],
            summarizer=summarizer,
            counter=counter,
            insert_method=body["insert_method"],
        )
        memory.short_term.policy = OverflowPolicy(**policy)
        saved = {b["name"]: b.get("state", {}) for b in body["blocks"]}
        for block in blocks:
            block.restore(saved[block.name])
        if messages:
            store.append(key, messages)
        store.save_state(key, state.model_copy(update={"revision": store.state(key).revision}))
        return memory

    # -- inside -----------------------------------------------------------------------------

    def _wire(self, message: Message) -> dict[str, Any]:
        return render_message(message, "openai")

    def _preamble(self, window: Any) -> list[Message]:
        out = []
        if window.summary is not None:
            out.append(window.summary)
        # The state stands in for turns that left the window; while none has, it would
        # only repeat what the model sees anyway.
        if window.working_state and window.start > 0:
            out.append(_state_message(window.working_state))
        return out

    def _flush_to_blocks(self, key: SessionKey, messages: list[Message]) -> None:
        for block in self.blocks:
            block.take(key, messages)


@dataclass
class Extraction:
    """Fact extraction off the request path: ``add`` only buffers turns; when a trigger
    fires (every N turns, an explicit statement, a change of topic, the session's end) the
    buffered turns go to ``outbox`` as one batch, for a ``Worker`` to extract and write."""

    outbox: Outbox
    scheduler: ExtractionScheduler = field(default_factory=ExtractionScheduler)

    def observe(
        self, key: SessionKey, messages: list[Message], *, session_end: bool = False
    ) -> None:
        """Buffer a turn; enqueue the buffer when a trigger fires (never extracts here)."""
        if self.scheduler.observe(key, messages, session_end=session_end):
            taken = self.scheduler.take(key)
            if taken:
                self.outbox.enqueue(key, taken)


def _check_limits(token_limit: int, ratio: float) -> None:
    checks.whole(token_limit, "token_limit", low=MIN_TOKEN_LIMIT)
    checks.number(ratio, "short_term_ratio", positive=True, high=1)


def _state_message(state: dict[str, Any]) -> Message:
    parts = [f"topic: {state.get('topic') or '-'}"]
    for key in ("key_figures", "decisions", "open_questions"):
        values = state.get(key) or []
        if values:
            parts.append(f"{key.replace('_', ' ')}: " + "; ".join(map(str, values)))
    return Message(
        id=f"state-{_checksum(state)[:16]}",
        role=Role.SYSTEM,
        content="Working state of this conversation:\n" + "\n".join(parts),
        timestamp=0,
        metadata=MessageMetadata.model_validate({"working_state": True}),
    )


def _policy(policy: OverflowPolicy) -> dict[str, Any]:
    return {
        "strategy": policy.strategy,
        "max_turns": policy.max_turns,
        "max_tokens": policy.max_tokens,
        "keep_turns": policy.keep_turns,
        "summary_tokens": policy.summary_tokens,
    }


def _checksum(body: Any) -> str:
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _checked_snapshot(snapshot: Any) -> tuple[dict[str, Any], list[Message], SessionState]:
    if not isinstance(snapshot, dict):
        raise ValidationError("a snapshot is a JSON object", field="snapshot")
    if snapshot.get("format") != SNAPSHOT_FORMAT:
        raise ValidationError(
            f"not a chatmem memory snapshot (format {snapshot.get('format')!r}, "
            f"expected {SNAPSHOT_FORMAT!r})",
            field="snapshot.format",
        )
    body = {k: v for k, v in snapshot.items() if k != "checksum"}
    if snapshot.get("checksum") != _checksum(body):
        raise ValidationError(
            "checksum does not match: the snapshot was altered or cut", field="snapshot.checksum"
        )
    try:
        messages = [
            Message.checked(m, f"snapshot.messages[{i}]") for i, m in enumerate(body["messages"])
        ]
        state = SessionState.model_validate(body["state"])
        _check_limits(body["token_limit"], body["short_term_ratio"])
        OverflowPolicy(**body["policy"])
        SessionKey.of(*body["key"])
        names = [b["name"] for b in body["blocks"]]
    except pydantic.ValidationError as exc:
        raise validation_error(exc, "snapshot.state") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ValidationError(f"the snapshot misses or mangles {exc}", field="snapshot") from None
    if len(set(names)) != len(names):
        raise ValidationError("block names repeat", field="snapshot.blocks")
    return body, messages, state


__all__ = ["MIN_TOKEN_LIMIT", "SNAPSHOT_FORMAT", "Extraction", "Memory"]
