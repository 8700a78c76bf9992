"""The injection (SPEC R4): the memories as one system message, "User's relevant context",
after the application's own leading system messages, cut item by item to a token budget."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from chatmem import checks
from chatmem.errors import ValidationError
from chatmem.retrieval.reranking import RetrievedMemory
from chatmem.retrieval.turns import ChatMessage, as_dict
from chatmem.tokens import TokenCounter, default_counter, message_tokens

DEFAULT_HEADER = "User's relevant context"
MEMORIES_FIELD = "{memories}"
HEADER_FIELD = "{header}"


def render_memory(memory: RetrievedMemory) -> str:
    """One line: ``- [2024-05-08] text``, or ``- (earlier, until 2024-05-08) text`` for a
    memory that is no longer true."""
    text = " ".join(memory.record.content.raw.split())
    if memory.superseded_until is not None:
        return f"- (earlier, until {memory.superseded_until.date().isoformat()}) {text}"
    said = memory.record.time.valid_from or memory.record.time.created_at
    return f"- [{said.date().isoformat()}] {text}"


class Packed(NamedTuple):
    """The injected message's content and the indexes of the memories it holds."""

    content: str
    kept: list[int]


def pack(
    lines: Sequence[str],
    *,
    counter: TokenCounter,
    budget_tokens: int,
    template: str | None = None,
    header: str = DEFAULT_HEADER,
) -> Packed:
    """The memory lines, in order, that fit as one system message of at most
    ``budget_tokens`` tokens (counted exactly, message overhead included); a line that does
    not fit is left out and the next ones are still tried.

    When all of them fit together (the usual case: five memories in a budget of hundreds of
    tokens) that is the answer, counted once: trying them one by one counted the message
    again for each line, 15 encodings for 5 lines (5 % of a loaded service's CPU)."""
    checks.whole(budget_tokens, "budget_tokens", low=0, message="must be 0 or more")
    check_template(template)
    whole = _content(lines, template, header)
    if lines and message_tokens(counter, {"role": "system", "content": whole}) <= budget_tokens:
        return Packed(whole, list(range(len(lines))))
    kept: list[int] = []
    content = ""
    for index, line in enumerate(lines):
        candidate = _content([*(lines[i] for i in kept), line], template, header)
        if message_tokens(counter, {"role": "system", "content": candidate}) <= budget_tokens:
            kept.append(index)
            content = candidate
    return Packed(content, kept)


def check_template(template: str | None) -> None:
    """Raise ``ValidationError`` for a template without the ``{memories}`` field."""
    if template is not None and MEMORIES_FIELD not in template:
        raise ValidationError(f"a template needs the {MEMORIES_FIELD} field", field="template")


def _content(lines: Sequence[str], template: str | None, header: str) -> str:
    listed = "\n".join(lines)
    if template is None:
        return f"{header}:\n{listed}"
    return template.replace(HEADER_FIELD, header).replace(MEMORIES_FIELD, listed)


def insert_system(messages: Sequence[ChatMessage], content: str) -> list[dict[str, Any]]:
    """``messages`` as OpenAI dicts with a system message of ``content`` after the leading
    system (and developer) messages; the input is not changed."""
    out = [as_dict(m) for m in messages]
    position = 0
    while position < len(out) and out[position].get("role") in ("system", "developer"):
        position += 1
    out.insert(position, {"role": "system", "content": content})
    return out


def inject(
    messages: Sequence[ChatMessage],
    memories: Sequence[RetrievedMemory],
    *,
    counter: TokenCounter | None = None,
    budget_tokens: int = 1000,
    template: str | None = None,
    header: str = DEFAULT_HEADER,
) -> list[dict[str, Any]]:
    """``messages`` with one system message listing ``memories`` (in the order given,
    most relevant first), within ``budget_tokens``; unchanged (as dicts) when none fits."""
    return injected(messages, memories, counter, budget_tokens, template, header)[0]


def injected(
    messages: Sequence[ChatMessage],
    memories: Sequence[RetrievedMemory],
    counter: TokenCounter | None,
    budget_tokens: int,
    template: str | None,
    header: str,
) -> tuple[list[dict[str, Any]], list[RetrievedMemory]]:
    """``inject``'s messages, and the memories that fit in them (none: the input as dicts)."""
    packed = pack(
        [render_memory(m) for m in memories],
        counter=counter or default_counter(),
        budget_tokens=budget_tokens,
        template=template,
        header=header,
    )
    if not packed.kept:
        return [as_dict(m) for m in messages], []
    return insert_system(messages, packed.content), [memories[i] for i in packed.kept]
