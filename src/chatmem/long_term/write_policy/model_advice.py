"""The write decision asked of a model: one call per batch (``DECISION_PROMPT``) about
every fact that has candidates, and its answer read back; what it leaves out or gets wrong
the rules decide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chatmem.extraction.base import Fact
from chatmem.long_term.write_policy.decision import Action, Decision, Existing

#: The system message of the batched write decision. The user message lists each new fact
#: with the existing memories it may touch (see :func:`decision_request`).
DECISION_PROMPT = """\
You keep a user's long-term memory consistent. For each NEW fact below you see the user's \
EXISTING memories that may be about the same thing. Decide what the new fact does:
- "create": it is new information; the existing memories stay as they are.
- "update": it says the same as one existing memory (restated, refined or more precise); \
that memory takes the new wording.
- "supersede": it is about the same thing as one or more existing memories but the value \
changed (a new budget, a new city, a changed preference); the new fact becomes current and \
the old ones are kept as history.
- "skip": an existing memory already says exactly this; nothing to store.

Return only a JSON object: {"decisions": [{"fact": <fact number>, "action": \
"create|update|supersede|skip", "targets": ["<id of an existing memory>", ...]}]}. \
"update" names exactly one target, "supersede" one or more, "create" and "skip" none. \
Use only the ids shown for that fact.
"""


@dataclass(frozen=True)
class Question:
    """One fact put to the decision model, with the memories it may touch."""

    index: int
    fact: Fact
    candidates: tuple[Existing, ...]


def decision_request(questions: Sequence[Question], prompt: str) -> list[dict[str, Any]]:
    """The chat messages asking the model about ``questions`` (pure)."""
    lines: list[str] = []
    for question in questions:
        lines.append(f"NEW fact {question.index}: {question.fact.text}")
        for existing in question.candidates:
            lines.append(f"  EXISTING [{existing.record.id}] {existing.record.content.raw}")
    return [
        {"role": "system", "content": prompt},
        {"role": "user", "content": "\n".join(lines)},
    ]


def parse_decisions(value: Any, questions: Sequence[Question]) -> dict[int, Decision]:
    """The model's valid decisions by fact index; anything malformed is left out (the rules
    decide those facts)."""
    allowed = {q.index: {e.record.id for e in q.candidates} for q in questions}
    decisions: dict[int, Decision] = {}
    items = value if isinstance(value, list) else []
    for item in items:
        parsed = _parse_decision(item, allowed)
        if parsed is not None and parsed[0] not in decisions:
            decisions[parsed[0]] = parsed[1]
    return decisions


def _parse_decision(item: Any, allowed: Mapping[int, set[str]]) -> tuple[int, Decision] | None:
    if not isinstance(item, Mapping):
        return None
    index = item.get("fact")
    if isinstance(index, str) and index.strip().isdigit():
        index = int(index)
    if not isinstance(index, int) or isinstance(index, bool) or index not in allowed:
        return None
    try:
        action = Action(str(item.get("action", "")).strip().lower())
    except ValueError:
        return None
    raw = item.get("targets", item.get("target"))
    named = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    targets = tuple(dict.fromkeys(str(t) for t in named if str(t) in allowed[index]))
    valid = {
        Action.CREATE: True,
        Action.SKIP: True,
        Action.UPDATE: len(targets) == 1,
        Action.SUPERSEDE: len(targets) >= 1,
    }[action]
    if not valid:
        return None
    kept = targets if action in (Action.UPDATE, Action.SUPERSEDE) else ()
    return index, Decision(action, kept, "model")
