"""The poisoning guard (SPEC L9): text aimed at the model is never a fact about the user.

"Ignore previous instructions", "from now on you must …", "you are now …", talk of the system
prompt and chat-template markup are instructions to a model, not statements about the user.
Both extractors drop them: the offline one skips such messages, the LLM one withholds them from
the model and drops any fact that reads like one.
"""

from __future__ import annotations

import re

# (reason, needles, pattern): the pattern runs only when one of its needles is in the text,
# since most messages hold none. Both read the lowercased text (case-blind matching is slow in
# ``re``), so they are written in lower case.
_REASONS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "asks the model to ignore its instructions",
        ("ignore", "disregard", "forget", "override", "bypass"),
        r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|the\s+|your\s+|"
        r"of\s+)*(?:previous|prior|above|earlier|preceding|existing|original|system|safety)"
        r"\s+(?:instructions?|prompts?|rules|directions|guidelines|context|messages?|filters?)",
    ),
    (
        "gives the model a standing order",
        ("now on", "you must", "you will", "you shall"),
        r"\bfrom\s+now\s+on,?\s+(?:you|u|the\s+assistant)\s*(?:must|will|should|shall|"
        r"have\s+to|need\s+to|are|'re|'ll|always|never|only|respond|answer)\b|"
        r"\byou\s+(?:must|will|shall)\s+(?:now\s+)?(?:always|never|only|obey|comply)\b",
    ),
    (
        "tries to change who the model is",
        ("you are", "you're", "act as", "pretend", "play as"),
        # "where you are now" is no reassignment: the role must follow.
        r"(?<!where\s)(?<!what\s)(?<!how\s)(?<!that\s)(?<!who\s)\byou\s+are\s+(?:now|no\s+"
        r"longer)\s+(?:an?|the|my|in|called|named|free|unrestricted|jailbroken|dan|bound|"
        r"restricted)\b|\byou(?:'re|\s+are)\s+not\s+an?\s+(?:ai|assistant|language\s+model)"
        r"\b|(?:^|[.!?]\s+|\bplease\s+)(?:act\s+as|pretend\s+(?:to\s+be|you\s+are)|"
        r"role-?play\s+as)\b",
    ),
    (
        "refers to the system prompt",
        ("system",),
        r"\b(?:your|the|new|updated|hidden|initial)\s+system\s+(?:prompt|message|"
        r"instructions?)\b|\bsystem\s+prompt\s*:|^\s*system\s*:",
    ),
    (
        "injects new instructions",
        ("instruction",),
        r"\b(?:new|updated|real|additional)\s+instructions?\s*:",
    ),
    (
        "contains chat-template markup",
        ("<|", "inst]", "<<sys", "##"),
        r"<\|im_(?:start|end)\|>|\[/?inst\]|<<sys>>|<\|(?:system|user|assistant)\|>|"
        r"^\s*#{2,}\s*(?:system|instruction)",
    ),
    (
        "asks for a jailbreak",
        ("jailbreak", "mode", "anything now"),
        r"\bjailbreak|\b(?:dan|developer)\s+mode\b|\bdo\s+anything\s+now\b",
    ),
)
_CHECKS = tuple(
    (reason, needles, re.compile(pattern, re.MULTILINE)) for reason, needles, pattern in _REASONS
)


def is_instruction_to_model(text: str) -> str | None:
    """Why ``text`` reads as an instruction aimed at the model, or None when it does not."""
    lowered = text.lower()
    for reason, needles, pattern in _CHECKS:
        if any(needle in lowered for needle in needles) and pattern.search(lowered):
            return reason
    return None


__all__ = ["is_instruction_to_model"]
