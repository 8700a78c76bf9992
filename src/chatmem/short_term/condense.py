"""Condensing a conversation: running summaries (S4) and the working state (S6).

Each has an LLM path (a named, overridable prompt) and an extractive path that needs no
model. The extractive path is the fallback whenever the LLM is absent or fails, and the result
says which path made it (``metadata.method``), so nobody mistakes a fallback for a summary.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from chatmem.errors import ChatmemError
from chatmem.llm.base import ChatModel
from chatmem.messages import Message, MessageMetadata, Role
from chatmem.text import STOP_WORDS, words
from chatmem.tokens import TokenCounter

log = logging.getLogger("chatmem.short_term")

SUMMARY_PROMPT = """You maintain the running summary of a conversation between a user and an \
assistant. Merge the previous summary (if any) with the new messages into one summary of at \
most {max_words} words. Keep facts about the user, names, numbers, dates, decisions and open \
questions, each stated with its context. Write plain sentences, no preamble."""

STATE_PROMPT = """Read the conversation and update its working state. Answer with one JSON \
object with exactly these keys: "topic" (a short phrase), "key_figures" (a list of strings, \
each a number or name with what it refers to), "decisions" (a list of strings), \
"open_questions" (a list of strings). Start from the previous state and change only what the \
new messages change."""

SUMMARY_PREFIX = "Summary of the earlier conversation:"
STATE_KEYS = ("topic", "key_figures", "decisions", "open_questions")

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_NUMBER = re.compile(r"[$€£]?\d[\d,.:/]*\s*(?:%|k|m|usd|eur|dollars|euros)?", re.IGNORECASE)
_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'd|my|me|mine|we|our)\b", re.IGNORECASE)
_DECISION = re.compile(
    r"\b(decided|decide|let's|we'll|i'll|agreed|going with|go with|chose|choose|will book)\b",
    re.IGNORECASE,
)
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]{2,}\b")


# -- summaries --------------------------------------------------------------------------------


def summarize(
    previous: Message | None,
    messages: Sequence[Message],
    *,
    counter: TokenCounter,
    max_tokens: int,
    model: ChatModel | None = None,
    prompt: str = SUMMARY_PROMPT,
) -> Message:
    """A system message that summarizes ``previous`` plus ``messages`` within ``max_tokens``."""
    covers = len(messages) + _covers(previous)
    fallback = None
    if model is not None:
        try:
            text = _llm_summary(model, previous, messages, max_tokens, prompt)
            return _summary_message(text, covers, counter, max_tokens, {"method": "llm"})
        except ChatmemError as exc:  # an LLM failure degrades to the extractive path
            log.warning("summary by LLM failed, using the extractive one: %s", exc)
            fallback = str(exc)[:200]
    text = extractive_summary(previous, messages, counter=counter, max_tokens=max_tokens)
    how: dict[str, Any] = {"method": "extractive"}
    if fallback:
        how["fallback_reason"] = fallback
    return _summary_message(text, covers, counter, max_tokens, how)


def _covers(summary: Message | None) -> int:
    """How many messages an earlier summary stands for."""
    return int((summary.metadata.model_extra or {}).get("covers", 0)) if summary else 0


def _summary_message(
    text: str, covers: int, counter: TokenCounter, max_tokens: int, how: dict[str, Any]
) -> Message:
    body = counter.truncate(f"{SUMMARY_PREFIX} {text}".strip(), max_tokens)
    metadata = MessageMetadata.model_validate({"summary": True, "covers": covers, **how})
    return Message(role=Role.SYSTEM, content=body, metadata=metadata)


def _llm_summary(
    model: ChatModel,
    previous: Message | None,
    messages: Sequence[Message],
    max_tokens: int,
    prompt: str,
) -> str:
    previous_text = _strip_prefix(previous.content) if previous else "(none)"
    request = [
        {"role": "system", "content": prompt.format(max_words=max(20, int(max_tokens * 0.7)))},
        {
            "role": "user",
            "content": f"Previous summary:\n{previous_text}\n\nNew messages:\n"
            + transcript(messages),
        },
    ]
    text = model.complete(request).strip()
    if not text:
        raise ChatmemError("the model returned an empty summary")
    return text


def extractive_summary(
    previous: Message | None,
    messages: Sequence[Message],
    *,
    counter: TokenCounter,
    max_tokens: int,
) -> str:
    """The most informative sentences of the previous summary and of ``messages``, in order.

    Over the budget, the least informative lines go first, and among equals the oldest.
    """
    old = _strip_prefix(previous.content).split("\n") if previous else []
    lines = [(_line_score(line), line) for line in old if line.strip()]
    lines += _informative_lines(messages)
    budget = max_tokens - counter.count(SUMMARY_PREFIX) - 1
    chosen: set[int] = set()
    used = 0
    for order in sorted(range(len(lines)), key=lambda i: (-lines[i][0], -i)):
        cost = counter.count(lines[order][1]) + 1
        if used + cost <= budget:
            chosen.add(order)
            used += cost
    return "\n".join(line for i, (_, line) in enumerate(lines) if i in chosen)


def _line_score(line: str) -> int:
    """Score a summary line again ("User: …" lines count as the user's)."""
    role = Role.USER if line.startswith("User: ") else Role.ASSISTANT
    return max(1, _informativeness(line.split(": ", 1)[-1], role))


def _informative_lines(messages: Sequence[Message]) -> list[tuple[int, str]]:
    scored: list[tuple[int, str]] = []
    for message in messages:
        if message.role not in (Role.USER, Role.ASSISTANT) or not message.content.strip():
            continue
        speaker = "User" if message.role is Role.USER else "Assistant"
        for sentence in _SENTENCE.split(message.content.strip()):
            score = _informativeness(sentence, message.role)
            if score > 0:
                scored.append((score, f"{speaker}: {sentence.strip()}"))
    if not scored:
        return []
    # Keep the better half of the sentences, in their order.
    cutoff = sorted(score for score, _ in scored)[len(scored) // 2]
    return [(score, line) for score, line in scored if score >= cutoff]


def _informativeness(sentence: str, role: Role) -> int:
    content = [w for w in words(sentence) if w not in STOP_WORDS]
    if len(content) < 2:
        return 0
    score = 1
    score += 2 * bool(_NUMBER.search(sentence))
    score += 2 * bool(_DECISION.search(sentence))
    score += bool(_NAME.search(sentence))
    score += 2 * (role is Role.USER and bool(_FIRST_PERSON.search(sentence)))
    return score


def _strip_prefix(text: str) -> str:
    return text.removeprefix(SUMMARY_PREFIX).strip()


def transcript(messages: Sequence[Message]) -> str:
    """Messages as ``role: text`` lines, tool calls named, for a prompt."""
    lines = []
    for message in messages:
        text = message.content
        if message.tool_calls:
            calls = ", ".join(call.function.name for call in message.tool_calls)
            text = f"{text} [calls {calls}]".strip()
        lines.append(f"{message.role.value}: {text}")
    return "\n".join(lines)


# -- working state ----------------------------------------------------------------------------


def update_state(
    previous: dict[str, Any] | None,
    messages: Sequence[Message],
    *,
    model: ChatModel | None = None,
    prompt: str = STATE_PROMPT,
) -> dict[str, Any]:
    """The working state after ``messages``: topic, key figures, decisions, open questions."""
    if model is not None:
        try:
            return _llm_state(model, previous, messages, prompt)
        except ChatmemError as exc:  # an LLM failure degrades to the extractive path
            log.warning("working state by LLM failed, using the extractive one: %s", exc)
    return extractive_state(previous, messages)


def _llm_state(
    model: ChatModel,
    previous: dict[str, Any] | None,
    messages: Sequence[Message],
    prompt: str,
) -> dict[str, Any]:
    request = [
        {"role": "system", "content": prompt},
        {
            "role": "user",
            "content": "Previous state:\n"
            + json.dumps(previous or {}, ensure_ascii=False)
            + "\n\nNew messages:\n"
            + transcript(messages),
        },
    ]
    raw = model.complete(request, json=True)
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ChatmemError(f"the model's working state is not JSON: {raw[:120]!r}") from exc
    if not isinstance(parsed, dict):
        raise ChatmemError("the model's working state is not a JSON object")
    state = _empty_state()
    state["topic"] = str(parsed.get("topic") or "")
    for key in STATE_KEYS[1:]:
        value = parsed.get(key) or []
        state[key] = [str(item) for item in value] if isinstance(value, list) else [str(value)]
    state["method"] = "llm"
    return state


def _empty_state() -> dict[str, Any]:
    return {"topic": "", "key_figures": [], "decisions": [], "open_questions": []}


def extractive_state(
    previous: dict[str, Any] | None, messages: Sequence[Message], *, keep: int = 8
) -> dict[str, Any]:
    """A working state built from the text alone (no model)."""
    state = _empty_state() | {k: v for k, v in (previous or {}).items() if k in STATE_KEYS}
    talk = [m for m in messages if m.role in (Role.USER, Role.ASSISTANT)]
    topic = _topic(talk)
    if topic:
        state["topic"] = topic
    sentences = [s.strip() for m in talk for s in _SENTENCE.split(m.content) if s.strip()]
    figures = [s for s in sentences if _NUMBER.search(s)]
    decisions = [s for s in sentences if _DECISION.search(s)]
    asked = [s.strip() for m in talk if m.role is Role.USER for s in _SENTENCE.split(m.content)]
    questions = [s for s in asked if s.endswith("?")]
    state["key_figures"] = _merged(state["key_figures"], figures, 4 * keep)
    state["decisions"] = _merged(state["decisions"], decisions, keep)
    state["key_figures"] = _best(state["key_figures"], keep)
    state["open_questions"] = _merged(state["open_questions"], questions[-3:], keep)
    state["method"] = "extractive"
    return state


def _topic(messages: Sequence[Message], size: int = 4) -> str:
    counts: Counter[str] = Counter()
    for message in messages:
        counts.update(w for w in words(message.content) if w not in STOP_WORDS and len(w) > 2)
    return " ".join(word for word, _ in counts.most_common(size))


_MONEY_OR_UNIT = re.compile(
    r"[$€£]\s?\d|\d\s?(%|k\b|km|kg|am|pm|dollars|euros|nights|days|weeks|years)"
    r"|\b(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\b",
    re.IGNORECASE,
)


def _best(figures: list[str], keep: int) -> list[str]:
    """The ``keep`` most telling figures (money, units, dates first; then the newest), in
    their order: a bare count ("turn 12") says less than "$3,000" or "12 May"."""
    ranked = sorted(
        range(len(figures)),
        key=lambda i: (
            -(2 * bool(_MONEY_OR_UNIT.search(figures[i])) + _line_score(figures[i])),
            -i,
        ),
    )
    chosen = set(ranked[:keep])
    return [figure for i, figure in enumerate(figures) if i in chosen]


def _merged(old: list[str], new: list[str], keep: int) -> list[str]:
    seen: dict[str, None] = {}
    for item in [*old, *new]:
        seen.pop(item, None)
        seen[item] = None  # re-inserting moves a repeated item to the newest end
    return list(seen)[-keep:]


__all__ = [
    "STATE_PROMPT",
    "SUMMARY_PREFIX",
    "SUMMARY_PROMPT",
    "extractive_state",
    "extractive_summary",
    "summarize",
    "transcript",
    "update_state",
]
