"""What the write policy compares a fact with: the user's current memories of the fact's
type nearest to it, those with its subject (every page of them), and the nearest of the
other fact types.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from chatmem.extraction.base import Fact
from chatmem.long_term.write_policy.decision import SPECIFICITY, Existing, WriteConfig, subject_key
from chatmem.long_term.write_policy.memories import SUBJECT_KEY, is_current
from chatmem.records import Filter, MemoryRecord, Vector
from chatmem.stores import MemoryStore
from chatmem.stores.base import SearchQuery


class Candidates(NamedTuple):
    """What one fact is compared with (see :meth:`CandidateSearch.find`)."""

    nearest: list[Existing]
    same: list[Existing]
    elsewhere: list[Existing]


class CandidateSearch:
    """Finds candidates among the memories of ``scope`` (one user, perhaps one project)
    that are current at ``now``."""

    def __init__(
        self, store: MemoryStore, scope: Filter, now: datetime, config: WriteConfig
    ) -> None:
        self.store = store
        self.scope = scope
        self.now = now
        self.config = config

    def find(self, fact: Fact, vector: Vector) -> Candidates:
        """The nearest current memories of the fact's type, those with its subject, and the
        nearest of the other fact types."""
        typed = self.scope.model_copy(update={"types": frozenset({fact.type})})
        nearest, cosine = self._nearest(typed, vector)
        subject = subject_key(fact.subject)
        same: list[Existing] = []
        if subject is not None:
            by_subject = typed.model_copy(update={"metadata": {SUBJECT_KEY: subject}})
            # Every page: a long history of superseded values must not hide the current one.
            matches = all_records(self.store, by_subject)
            same = [Existing(r, cosine.get(r.id)) for r in matches if is_current(r, self.now)]
        others = frozenset(SPECIFICITY) - {fact.type}
        elsewhere, _ = self._nearest(self.scope.model_copy(update={"types": others}), vector)
        return Candidates(nearest, same, elsewhere)

    def _nearest(
        self, scope: Filter, vector: Vector
    ) -> tuple[list[Existing], dict[str, float | None]]:
        """The current memories of ``scope`` nearest to ``vector``, and every cosine found."""
        found = self.store.search(
            SearchQuery(filter=scope, vector=vector, candidates=self.config.candidates)
        )
        cosine = {c.id: c.vector_score for c in found}
        records = self.store.get(list(cosine), scope)
        return [Existing(r, cosine[r.id]) for r in records if is_current(r, self.now)], cosine


def all_records(store: MemoryStore, scope: Filter) -> list[MemoryRecord]:
    """Every memory of ``scope``, read a page at a time."""
    records: list[MemoryRecord] = []
    cursor: str | None = None
    while True:
        page = store.list(scope, 500, cursor)
        records.extend(page.records)
        if page.next_cursor is None:
            return records
        cursor = page.next_cursor
