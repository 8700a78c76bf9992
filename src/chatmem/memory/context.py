"""Packing a model's context within a token limit (SPEC M1, M2), in small named steps:

1. ``turns``: split the short-term window into user turns, so a tool call and its result,
   or a question and its answer, are kept or dropped together.
2. ``pack``: admit, in order, what must be there (priority-0 blocks, transient messages, the
   newest turn), then older turns newest first within the short-term share, then the other
   blocks by priority, item by item, into what is left.
3. ``render``: the memory text, the summary and state messages, the turns, in order.
4. ``fit``: count the rendered request exactly and, while it is over the limit, cut the
   last item of the highest-numbered block, then the summary and state, then the oldest
   turn; only content that alone exceeds the limit is then truncated with a visible marker
   (priority-0 items first, then the longest message). The result is never over the limit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from chatmem.caches import LRUCache, MiB
from chatmem.messages import Message, Role
from chatmem.tokens import (
    PER_MESSAGE,
    REPLY_PRIMING,
    TokenCounter,
    message_tokens,
    request_tokens,
)

InsertMethod = Literal["system", "user"]
Render = Callable[[Message], dict[str, Any]]

MEMORY_OPEN = "<memory>"
MEMORY_CLOSE = "</memory>"


@dataclass
class BlockItems:
    """A block's answer: its items, most important first."""

    name: str
    priority: int
    items: list[str]


@dataclass
class Plan:
    """What was admitted; ``render`` turns it into messages."""

    preamble: list[Message]
    turns: list[list[Message]]
    transient: list[Message]
    blocks: list[BlockItems]
    #: How many items each block had before packing, by name.
    offered: dict[str, int] = field(default_factory=dict)


def turns(window: Sequence[Message]) -> list[list[Message]]:
    """The window as turns: each starts at a user message (the first may not)."""
    groups: list[list[Message]] = []
    for message in window:
        if message.role is Role.USER or not groups:
            groups.append([message])
        else:
            groups[-1].append(message)
    return groups


@dataclass
class Packer:
    """Packs blocks and turns for one request. ``render`` gives a message's wire shape."""

    counter: TokenCounter
    token_limit: int
    short_term_ratio: float
    render: Render
    insert_method: InsertMethod = "system"
    #: Token costs and wire shapes by message id (messages never change), each cache within
    #: this many bytes.
    cache_bytes: int = 16 * MiB
    cost_cache: LRUCache[str, int] = field(init=False)
    rendered_cache: LRUCache[str, dict[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        self.cost_cache = LRUCache(self.cache_bytes)
        self.rendered_cache = LRUCache(self.cache_bytes)

    def cost(self, message: Message) -> int:
        """Tokens ``message`` costs in a request, counted once per message id."""
        cached = self.cost_cache.get(message.id)
        if cached is None:
            cached = message_tokens(self.counter, self.wire(message))
            self.cost_cache.put(message.id, cached)
        return cached

    def wire(self, message: Message) -> dict[str, Any]:
        """``render(message)``, made once per message id (messages never change)."""
        cached = self.rendered_cache.get(message.id)
        if cached is None:
            cached = self.render(message)
            self.rendered_cache.put(message.id, cached)
        return cached

    def pack(
        self,
        window: Sequence[Message],
        preamble: Sequence[Message],
        transient: Sequence[Message],
        blocks: Sequence[BlockItems],
    ) -> Plan:
        ordered = sorted(blocks, key=lambda b: b.priority)
        offered = {b.name: len(b.items) for b in ordered}
        grouped = turns(window)
        fixed = [b for b in ordered if b.priority == 0]
        fixed_cost = self._block_cost(fixed)
        newest = grouped[-1:] if grouped else []
        short_used = sum(self.cost(m) for turn in newest for m in turn)
        used = REPLY_PRIMING + fixed_cost + sum(self.cost(m) for m in transient) + short_used
        short_budget = int(self.short_term_ratio * (self.token_limit - fixed_cost))
        kept_preamble = []
        for message in preamble:
            if short_used + self.cost(message) <= short_budget:
                kept_preamble.append(message)
                short_used += self.cost(message)
                used += self.cost(message)
        older: list[list[Message]] = []
        for turn in reversed(grouped[:-1]):
            turn_cost = sum(self.cost(m) for m in turn)
            if short_used + turn_cost > short_budget:
                break
            older.append(turn)
            short_used += turn_cost
            used += turn_cost
        admitted = [BlockItems(b.name, b.priority, list(b.items)) for b in fixed]
        admitted += self._fill(ordered, self.token_limit - used, fixed_cost=fixed_cost)
        return Plan(kept_preamble, [*reversed(older), *newest], list(transient), admitted, offered)

    def _fill(self, ordered: list[BlockItems], room: int, fixed_cost: int) -> list[BlockItems]:
        """Blocks of priority 1 and up, lowest number first, item by item; the first block
        that cannot take an item stops the filling, so higher numbers are cut first."""
        admitted: list[BlockItems] = []
        wrapper = 0 if fixed_cost else self._wrapper_cost()
        spent = wrapper
        for block in (b for b in ordered if b.priority > 0):
            kept = BlockItems(block.name, block.priority, [])
            tag = self._tag_cost(block.name)
            for item in block.items:
                cost = self.counter.count(item) + 1 + (tag if not kept.items else 0)
                if spent + cost > room:
                    if kept.items:
                        admitted.append(kept)
                    return admitted
                kept.items.append(item)
                spent += cost
            if kept.items:
                admitted.append(kept)
        return admitted

    def _block_cost(self, blocks: Sequence[BlockItems]) -> int:
        present = [b for b in blocks if b.items]
        if not present:
            return 0
        return self._wrapper_cost() + sum(
            self._tag_cost(b.name) + sum(self.counter.count(i) + 1 for i in b.items)
            for b in present
        )

    def _wrapper_cost(self) -> int:
        return PER_MESSAGE + 1 + self.counter.count(f"{MEMORY_OPEN}\n{MEMORY_CLOSE}") + 2

    def _tag_cost(self, name: str) -> int:
        return self.counter.count(f"<{name}>\n</{name}>\n") + 1

    # -- render and fit -----------------------------------------------------------------------

    def render_plan(self, plan: Plan) -> list[tuple[dict[str, Any], int]]:
        """Each message with its exact cost, in order: system prompts first (transient
        ones, then the session's leading ones), then memory, summary and state, then the
        turns, then the other transient messages."""
        memory = memory_text(plan.blocks)
        history = [m for turn in plan.turns for m in turn]
        prompts = [m for m in plan.transient if m.role is Role.SYSTEM]
        tail = [m for m in plan.transient if m.role is not Role.SYSTEM]
        leading = 0
        while leading < len(history) and history[leading].role is Role.SYSTEM:
            leading += 1
        prompts += history[:leading]
        body = [(self.wire(m), self.cost(m)) for m in history[leading:] + tail]
        context = [(self.wire(m), self.cost(m)) for m in plan.preamble]
        if memory and self.insert_method == "user" and (index := _last_user(body)) is not None:
            said = body[index][0]
            merged = {**said, "content": f"{memory}\n\n{said['content']}"}
            body[index] = (merged, message_tokens(self.counter, merged))
        elif memory:
            wrapper = {"role": "system", "content": memory}
            context.insert(0, (wrapper, message_tokens(self.counter, wrapper)))
        firsts = [(self.wire(m), self.cost(m)) for m in prompts]
        return [*firsts, *context, *body]

    def fit(self, plan: Plan) -> list[dict[str, Any]]:
        """Render, then cut until the exact count is within the limit. The count is exact
        because a request's tokens are the sum of its messages' tokens plus the priming."""
        while True:
            rendered = self.render_plan(plan)
            if REPLY_PRIMING + sum(cost for _, cost in rendered) <= self.token_limit:
                return [dict(message) for message, _ in rendered]
            if not self._cut_one(plan):
                return self._truncated([dict(message) for message, _ in rendered])

    def _cut_one(self, plan: Plan) -> bool:
        for block in sorted(plan.blocks, key=lambda b: -b.priority):
            if block.priority > 0 and block.items:
                block.items.pop()
                return True
        if plan.preamble:
            plan.preamble.pop()
            return True
        if len(plan.turns) > 1:
            plan.turns.pop(0)
            return True
        return self._shrink_fixed(plan)

    def _shrink_fixed(self, plan: Plan) -> bool:
        """Last resort before touching messages: halve the longest priority-0 item (with a
        visible marker). Only content larger than the whole limit ever gets here."""
        fixed = [(b, i) for b in plan.blocks if b.priority == 0 for i in range(len(b.items))]
        if not fixed:
            return False
        block, index = max(fixed, key=lambda bi: self.counter.count(bi[0].items[bi[1]]))
        size = self.counter.count(block.items[index])
        if size <= 8:
            block.items.pop(index)
        else:
            block.items[index] = self.counter.truncate(block.items[index], size // 2)
        return True

    def _truncated(self, rendered: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Shorten the longest message's text until the request fits."""
        out = [dict(m) for m in rendered]
        while (over := request_tokens(self.counter, out) - self.token_limit) > 0:
            longest = max(range(len(out)), key=lambda i: self.counter.count(_text(out[i])))
            text = _text(out[longest])
            size = self.counter.count(text)
            if size == 0:
                # Nothing left to shorten: drop the oldest message that is not the last.
                if len(out) == 1:
                    return out
                out.pop(0)
                continue
            out[longest]["content"] = self.counter.truncate(text, max(0, size - over))
        return out


def memory_text(blocks: Sequence[BlockItems]) -> str:
    """``<memory>`` with one tagged section per block that has items ("" when none)."""
    sections = [f"<{b.name}>\n" + "\n".join(b.items) + f"\n</{b.name}>" for b in blocks if b.items]
    if not sections:
        return ""
    return f"{MEMORY_OPEN}\n" + "\n".join(sections) + f"\n{MEMORY_CLOSE}"


def _last_user(messages: list[tuple[dict[str, Any], int]]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        said = messages[index][0]
        if said.get("role") == "user" and isinstance(said.get("content"), str):
            return index
    return None


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


__all__ = ["BlockItems", "InsertMethod", "Packer", "Plan", "memory_text", "turns"]
