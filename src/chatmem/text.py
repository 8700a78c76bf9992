"""Text analysis shared by every store: what a memory is indexed as, and a query's terms.

A memory said in a conversation (it has a ``Context``) is indexed as

- ``text``: ``"<speaker>: <text>"`` (plus its summary);
- ``before`` / ``after``: the neighbouring messages, ``"<speaker>: <text>"``, the
  ``INDEXED_CONTEXT_CHARS`` of them nearest the memory;
- ``when``: the day it was said, in words ("8 May 2023");

and embedded as ``"<speaker>: <text>"``, the day left to the keyword half. A plain fact is
indexed and embedded as its text alone. On LoCoMo each of these lifted evidence recall
(docs/benchmarks.md).

A text longer than one memory holds (``MAX_TEXT_CHARS``, a pasted document) is stored as
parts (``memory_texts``); a text that must stay one memory is cut visibly (``clip``).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import NamedTuple

from chatmem.records import MAX_TEXT_CHARS, MemoryRecord

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)

# Function words and question words: they match everywhere and carry no topic.
STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "let",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "s",
        "t",
        "d",
        "ll",
        "m",
        "o",
        "re",
        "ve",
        "y",
        "ain",
        "isn",
        "aren",
        "wasn",
        "weren",
        "hasn",
        "haven",
        "hadn",
        "doesn",
        "don",
        "didn",
        "won",
        "wouldn",
        "shan",
        "shouldn",
        "can't",
        "couldn",
        "mightn",
        "mustn",
        "needn",
        "also",
    ]
)


def words(text: str) -> list[str]:
    """Lower-cased words of ``text``, possessive ``'s`` removed."""
    found = []
    for match in _WORD.finditer(text.lower()):
        word = match.group(0).replace("’", "'")
        if word.endswith("'s"):
            word = word[:-2]
        found.append(word)
    return found


def query_terms(text: str) -> list[str]:
    """The distinct content words of a query, in order of first appearance."""
    seen: dict[str, None] = {}
    for word in words(text):
        if word not in STOP_WORDS and word not in seen:
            seen[word] = None
    return list(seen)


def fts5_any(terms: list[str]) -> str:
    """An FTS5 expression matching documents with any of ``terms`` (each quoted)."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


class IndexFields(NamedTuple):
    """The texts a store's keyword index holds for one memory."""

    text: str
    before: str
    after: str
    when: str


def said_on(moment: datetime) -> str:
    """A day in words: ``8 May 2023``."""
    return f"{moment.day} {moment:%B} {moment.year}"


#: How much of a chat turn's neighbours the keyword half indexes with it: the characters
#: nearest the turn, the end of what came before and the start of what came after. A
#: neighbour is there so that a short reply is found by what it answers ("I've had them for
#: 3 years" by the question about the turtles); a long one (an assistant's answer of 1,000-
#: 3,000 characters) gave each turn beside it the words of a whole answer, and made small
#: talk match questions about jobs and cities. Every LoCoMo turn fits (487 at most), so
#: LoCoMo indexes as before (docs/benchmarks.md, "Long replies").
INDEXED_CONTEXT_CHARS = 600


def index_fields(record: MemoryRecord) -> IndexFields:
    """What the keyword half indexes for ``record`` (see the module docstring); of its
    neighbours, the ``INDEXED_CONTEXT_CHARS`` nearest it."""
    text = embedding_text(record)
    context = record.context
    if context is None:
        return IndexFields(text, "", "", "")
    before = (context.before or "")[-INDEXED_CONTEXT_CHARS:]
    after = (context.after or "")[:INDEXED_CONTEXT_CHARS]
    return IndexFields(text, before, after, said_on(record.time.created_at))


def embedding_text(record: MemoryRecord) -> str:
    """What the embedder embeds for ``record``: ``"<speaker>: <text>"`` (plus its summary),
    without the day it was said. The day is the keyword half's (``index_fields``); in the
    vector it made the memories of one day alike, whatever they were about, and crowded a
    top 10 with one session (docs/benchmarks.md, "The day out of the vector")."""
    text = record.content.raw
    if record.content.summary:
        text = f"{text}\n{record.content.summary}"
    return said_text(record.context.speaker if record.context else None, text)


def said_text(speaker: str | None, text: str) -> str:
    """``text`` as its ``speaker`` said it, as ``embedding_text`` embeds a memory: the late
    rerank finds a memory's word-piece states by it (``long_term.late``)."""
    return f"{speaker}: {text}" if speaker else text


#: The parts of a text too long for one memory are at most this many characters (about
#: 1,000 tokens): each is a passage a model can be shown within a memory budget, and within
#: the input limit of every embedding endpoint.
PART_CHARS = 4_000
#: What ``clip`` puts where it cut a text.
CLIP_MARKER = " […]"

# Where a long text may be cut, the widest first: paragraphs, lines, sentences, words.
_CUTS = (
    re.compile(r"\n[ \t]*\n\s*"),
    re.compile(r"\n\s*"),
    re.compile(r"(?<=[.!?…])\s+"),
    re.compile(r"\s+"),
)


def memory_texts(text: str) -> list[str]:
    """The texts ``text`` is stored as: itself when one memory holds it, else its parts of
    at most ``PART_CHARS`` characters (``split_text``), in order."""
    if len(text) <= MAX_TEXT_CHARS:
        return [text]
    return split_text(text, PART_CHARS)


def split_text(text: str, limit: int = PART_CHARS) -> list[str]:
    """``text`` as consecutive parts of at most ``limit`` characters, stripped, none blank.

    A part ends where a paragraph ends when one fits, else at a line end, a sentence end or
    a space; only a word longer than ``limit`` is cut inside. Read in order, the parts are
    the text, but for the whitespace at the cuts.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    stripped = (part.strip() for part in _split(text, limit, 0))
    return [part for part in stripped if part]


def _split(text: str, limit: int, level: int) -> list[str]:
    """Pieces of ``text`` cut at ``_CUTS[level]``, packed greedily into parts of at most
    ``limit``; a piece too long alone is split at the next, narrower cut."""
    if len(text) <= limit:
        return [text]
    if level == len(_CUTS):
        return [text[start : start + limit] for start in range(0, len(text), limit)]
    parts: list[str] = []
    current = ""
    for piece in _pieces(text, _CUTS[level]):
        if len(current) + len(piece) <= limit:
            current += piece
            continue
        if current:
            parts.append(current)
        *whole, current = _split(piece, limit, level + 1)
        parts.extend(whole)
    if current:
        parts.append(current)
    return parts


def _pieces(text: str, cut: re.Pattern[str]) -> list[str]:
    """``text`` cut after each match of ``cut`` (the match stays with the piece before)."""
    pieces = []
    start = 0
    for match in cut.finditer(text):
        pieces.append(text[start : match.end()])
        start = match.end()
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def clip(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters, ending in ``CLIP_MARKER`` where it was
    cut, for a text that must stay one memory (an extracted fact)."""
    if len(text) <= limit:
        return text
    return text[: limit - len(CLIP_MARKER)].rstrip() + CLIP_MARKER
