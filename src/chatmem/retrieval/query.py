"""The query (SPEC R2): what is searched for the user's last message.

A self-contained query is searched as it is. A vague one ("How much?", "Is it
expensive?") gets the key terms of the recent user turns prepended; with a
``memory_rewrite`` model, the model rewrites it instead; with HyDE, the model's
hypothetical answer is what gets searched.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Literal, NamedTuple

from chatmem import text as textlib
from chatmem.errors import LLMError, LLMResponseError, ValidationError
from chatmem.llm.base import ChatModel
from chatmem.retrieval.turns import ChatMessage, Turn, normal, read_turns

logger = logging.getLogger("chatmem.retrieval")

#: The system message of the LLM rewrite of a vague query (seed 002, appendix C, option 2).
REWRITE_PROMPT = """\
You rewrite a user's last message into a self-contained search query for their long-term \
memory. Use the conversation to resolve pronouns and ellipsis ("it", "that one", "how \
much?"). Keep names, places, numbers and dates. Answer with the rewritten query only, on \
one line, without quotes or explanations."""

#: The system message of HyDE: a hypothetical answer, embedded instead of the question.
HYDE_PROMPT = """\
Write a short statement, in the third person ("User ..."), that would answer the user's \
last message as if you remembered the answer from earlier conversations. Invent plausible \
details if needed; one or two sentences, no preamble."""

#: Queries matching these are vague whatever their length (seed 002's ``isSelfContained``).
VAGUE_PATTERNS = (
    r"^how\s+(much|many|long|far|often)\s*\??$",
    r"^(and|or|but|also|so)\b",
    r"^(what|how)\s+about\b",
    r"^(this|that|the\s+other|which)\s+one\b",
    r"^(the\s+)?same\b",
    r"^what\s+else\b",
    r"^why\s*(not)?\s*\??$",
    r"^(really|when|where|who|which)\s*\??$",
)
#: Words that point back to something said before.
ANAPHORS = frozenset(
    [
        "it",
        "its",
        "it's",
        "that",
        "this",
        "these",
        "those",
        "them",
        "they",
        "there",
        "then",
        "one",
        "ones",
        "other",
        "another",
        "he",
        "she",
        "him",
        "her",
        "same",
        "such",
    ]
)
#: Words that carry no topic of their own in a short question.
GENERIC_WORDS = frozenset(
    [
        "much",
        "many",
        "one",
        "ones",
        "else",
        "thing",
        "things",
        "stuff",
        "kind",
        "way",
        "tell",
        "say",
        "said",
        "mean",
        "know",
        "think",
        "thought",
        "get",
        "got",
        "go",
        "make",
        "want",
        "need",
        "ok",
        "okay",
        "yes",
    ]
)
#: A query with an anaphor and at most this many words is vague ("Is it expensive?").
SHORT_QUERY_WORDS = 6
#: Most context terms prepended to a vague query.
MAX_CONTEXT_TERMS = 12
#: Longest rewritten query or hypothetical answer kept, in characters.
MAX_REWRITE_CHARS = 600
#: Longest message text shown to the rewriting model, in characters.
MAX_SHOWN_CHARS = 500

_VAGUE = [re.compile(p) for p in VAGUE_PATTERNS]
_NOT_TOPICAL = GENERIC_WORDS | ANAPHORS

QueryMethod = Literal["original", "context", "rewrite", "hyde"]


class Query(NamedTuple):
    """What is searched (``text``), the user's own words (``original``) and how the one
    came from the other."""

    text: str
    original: str
    method: QueryMethod


def is_self_contained(query: str) -> bool:
    """Whether ``query`` can be searched alone; "How much?", "and the other one?", "Is it
    expensive?" cannot."""
    lowered = normal(query)
    if any(p.search(lowered) for p in _VAGUE):
        return False
    said = textlib.words(lowered)
    topical = [t for t in textlib.query_terms(lowered) if t not in _NOT_TOPICAL]
    if not topical:
        return False
    return not (len(said) <= SHORT_QUERY_WORDS and any(w in ANAPHORS for w in said))


def context_terms(
    messages: Sequence[ChatMessage], *, turns: int = 3, limit: int = MAX_CONTEXT_TERMS
) -> list[str]:
    """The key terms of the last ``turns`` user messages before the last one, oldest first,
    each once, at most ``limit`` (the newest kept)."""
    said = [t.text for t in read_turns(messages)[:-1] if t.role == "user" and t.text.strip()]
    seen: dict[str, None] = {}
    for text in said[-turns:] if turns > 0 else []:
        for term in textlib.query_terms(text):
            if term.split("'")[0] in textlib.STOP_WORDS or term in GENERIC_WORDS:
                continue  # "i'm", "we've", "thing": no topic
            seen.pop(term, None)  # a repeated term moves to its newest place
            seen[term] = None
    return list(seen)[-limit:]


def build_query(
    messages: Sequence[ChatMessage],
    *,
    rewriter: ChatModel | None = None,
    hyde: bool = False,
    context_turns: int = 3,
) -> Query:
    """The query to search for the last user message (see the module docstring). The
    model is asked to rewrite vague queries only; when it fails (``LLMError``) the query
    it would have replaced is kept, with a warning."""
    turns = read_turns(messages)
    if not turns or turns[-1].role != "user" or not turns[-1].text.strip():
        raise ValidationError("the last message must be a user message with text", field="messages")
    if hyde and rewriter is None:
        raise ValidationError("HyDE needs a model (rewriter)", field="hyde")
    original = turns[-1].text.strip()
    history = [t for t in turns[:-1] if t.role in ("user", "assistant") and t.text.strip()]
    shown = history[-2 * context_turns :] if context_turns > 0 else []
    query = Query(original, original, "original")
    if not is_self_contained(original):
        terms = context_terms(messages, turns=context_turns)
        if terms:
            query = Query(f"{' '.join(terms)} {original}", original, "context")
        if rewriter is not None and shown:  # with no history there is nothing to resolve
            query = _model_query(rewriter, REWRITE_PROMPT, shown, original, query, "rewrite")
    if hyde and rewriter is not None:
        asked = query.text if query.method == "rewrite" else original
        query = _model_query(rewriter, HYDE_PROMPT, shown, asked, query, "hyde")
    return query


def _model_query(
    model: ChatModel,
    prompt: str,
    history: Sequence[Turn],
    asked: str,
    fallback: Query,
    method: QueryMethod,
) -> Query:
    """The model's query for ``asked`` given ``history``; ``fallback`` when it fails."""
    lines = [f"{t.role}: {t.text[:MAX_SHOWN_CHARS]}" for t in history]
    said = "\n".join(lines) or "(none)"
    request = [
        {"role": "system", "content": prompt},
        {"role": "user", "content": f"Conversation:\n{said}\n\nLast message: {asked}"},
    ]
    try:
        answer = _one_line(model.complete(request), keep_lines=method == "hyde")
    except LLMError as exc:
        logger.warning(
            "Memory: query %s failed, using the %s query: %s", method, fallback.method, exc
        )
        return fallback
    return Query(answer, fallback.original, method)


def _one_line(answer: str, *, keep_lines: bool) -> str:
    text = answer.strip()
    if not keep_lines:
        text = next((line.strip() for line in text.splitlines() if line.strip()), "")
    text = " ".join(text.split()).strip("\"'“”` ")
    if not text:
        raise LLMResponseError("the model answered with an empty query", raw=answer)
    return text[:MAX_REWRITE_CHARS]
