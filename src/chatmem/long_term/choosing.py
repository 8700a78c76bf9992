"""How a search reads its way down its ranking to the k memories it gives: from their
``Head``s (``MemoryStore.heads``, or the heads of the records it reads whole), leaving out
superseded facts and what a concurrent delete took, a repeated remark after the others
(``RankingConfig.repeats_last``), and never reading without bound past repeats.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import NamedTuple, TypeVar

from chatmem import ranking
from chatmem.records import utcnow
from chatmem.stores.base import Head

#: A search reads at most this many times k memories to find k that repeat none above
#: them (``chosen``); then repeats fill the places left. At 2 the synthetic check's full
#: size lost single-fact recall (0.729 to 0.708: its small talk repeats word for word); 4
#: gives it back (docs/benchmarks.md, "Who said it (issue 18)").
REPEATS_READ = 4

#: Reads the heads of those of the ids it is given that are there (as ``MemoryStore.heads``).
Reader = Callable[[list[str]], Mapping[str, Head]]

T = TypeVar("T")


def read_times(read: Reader) -> Callable[[list[str]], dict[str, datetime]]:
    """When each memory ``read`` gives became true or was said (``Head.since``): what
    ``ranking.latest_first`` orders by."""

    def times(ids: list[str]) -> dict[str, datetime]:
        return {i: h.since for i, h in read(ids).items()}

    return times


def remembering(
    fetch: Callable[[list[str]], Mapping[str, T]], kept: dict[str, T], head: Callable[[T], Head]
) -> Reader:
    """A ``Reader`` that fetches only what it has not fetched before, keeping what it
    fetched in ``kept`` (whole records, for a search that returns them, or heads), and
    gives each one's ``head``."""

    def read(ids: list[str]) -> dict[str, Head]:
        missing = [i for i in ids if i not in kept]
        if missing:
            kept.update(fetch(missing))
        return {i: head(kept[i]) for i in ids if i in kept}

    return read


class Shortlisted(NamedTuple):
    """A memory ``LongTermMemory.shortlist`` found: its id, scores as ``SearchResult`` has
    them, and its ``Head`` in place of its record."""

    id: str
    score: float
    vector_score: float | None
    keyword_score: float | None
    head: Head


def chosen(
    ranked: list[ranking.Scored],
    k: int,
    *,
    current_only: bool,
    repeats_last: bool,
    read: Reader,
) -> tuple[list[tuple[ranking.Scored, Head]], dict[str, Head]]:
    """The first ``k`` of ``ranked`` with their heads, and every head read on the way
    (``read`` is asked only for what it is needed for): k of them, and more only for those
    a superseded fact (with ``current_only``), a concurrent delete or a repeat of one above
    them (``repeats_last``) left out; repeats come last, and only where too few others
    passed. Past ``REPEATS_READ`` times k read, repeats fill the places left: a user holding
    the same remark many times made a search read and parse 10 times the records it
    returned (issue 14)."""
    now = utcnow()
    results: list[tuple[ranking.Scored, Head]] = []
    repeated: list[tuple[ranking.Scored, Head]] = []
    repeats = ranking.Repeats() if repeats_last else None
    seen: dict[str, Head] = {}
    start = 0
    while len(results) < k and start < len(ranked):
        if repeats is not None and start >= REPEATS_READ * k:
            # Read enough: the repeats passed fill the places left, after the others.
            results += repeated[: k - len(results)]
            repeated, repeats = [], None
            continue
        end = start + k - len(results)
        batch = ranked[start : end if repeats is None else min(end, REPEATS_READ * k)]
        start += len(batch)
        seen.update(read([s.id for s in batch]))
        for s in batch:
            head = seen.get(s.id)
            if head is None or (current_only and head.ended_by(now)):
                continue
            repeat = repeats is not None and repeats.heard(head.speaker, head.text)
            (repeated if repeat else results).append((s, head))
    return results + repeated[: k - len(results)], seen
