"""Text analysis shared by the keyword half of every store: terms of a query."""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)

# Function words and question words: they match everywhere and carry no topic.
STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just let me more most my myself no nor not now of off on once
    only or other our ours ourselves out over own same she should so some such than that
    the their theirs them themselves then there these they this those through to too under
    until up very was we were what when where which while who whom why will with would you
    your yours yourself yourselves s t d ll m o re ve y ain isn aren wasn weren hasn haven
    hadn doesn don didn won wouldn shan shouldn can't couldn mightn mustn needn also
    """.split()
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
