"""The one store interface (SPEC B5). Retrieval and write logic never see a backend.

A store keeps records, their vectors and their version history. It answers a search with
candidates and their raw scores (cosine similarity, BM25); fusing them is the ranking layer's
job, so every backend ranks the same way.
"""

from __future__ import annotations

import builtins
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import NamedTuple

import numpy as np

from chatmem import checks
from chatmem.errors import ConflictError, DimensionError, NotFoundError, StoreError, ValidationError
from chatmem.records import (
    EARLIEST,
    LATEST,
    Candidate,
    EmbeddingInfo,
    Entry,
    Filter,
    HistoryEntry,
    MemoryRecord,
    Page,
    TimeInfo,
    Vector,
    check_count,
    to_ms,
)
from chatmem.strict_json import INT64_MAX, INT64_MIN


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; the conformance suite skips what a backend lacks."""

    keyword_search: bool = True
    #: Several processes may open the same store at once.
    multi_process: bool = True


@dataclass(frozen=True)
class SearchQuery:
    """A search over one user's memories. ``candidates`` is the size of each half's list.

    The query vector is ``vector``, or what ``embed`` returns when first asked for
    (``with_vector`` resolves it up front). ``prefetch``, where the caller gives one,
    starts ``embed`` in a thread of its own: a store calls it (``start_embedding``) before
    work that leaves the interpreter lock free, so the two overlap (SQLite's full-text
    search); before work in Python it does not, since a thread would only compete with it.

    ``ahead``, where the caller gives one, is filled by a store that has to wait for the
    vector anyway: the records (within ``filter``, as ``get`` reads them) of up to
    ``read_ahead`` of the keyword half's best, by id, parsed meanwhile; ``ready`` says
    whether the vector would still be waited for.
    """

    filter: Filter
    vector: Vector | None = None
    text: str | None = None
    candidates: int = 50
    embed: Callable[[], Vector] | None = field(default=None, compare=False, repr=False)
    prefetch: Callable[[], None] | None = field(default=None, compare=False, repr=False)
    ready: Callable[[], bool] | None = field(default=None, compare=False, repr=False)
    read_ahead: int = 0
    ahead: dict[str, MemoryRecord] | None = field(default=None, compare=False, repr=False)

    def waits_for_vector(self) -> bool:
        """Whether the vector is still being computed elsewhere (``ready`` says not yet)."""
        return self.vector is None and self.ready is not None and not self.ready()

    def start_embedding(self) -> None:
        """Start computing the vector in the caller's thread for it (``prefetch``), where
        the vector is still to come and the caller gave one."""
        if self.vector is None and self.embed is not None and self.prefetch is not None:
            self.prefetch()

    def query_vector(self) -> Vector | None:
        """The vector, waiting for ``embed`` if that is where it comes from."""
        if self.vector is not None or self.embed is None:
            return self.vector
        return self.embed()

    def with_vector(self) -> SearchQuery:
        """This query with its vector computed (for stores that need it first)."""
        if self.vector is not None or self.embed is None:
            return self
        return replace(self, vector=self.embed(), embed=None, prefetch=None)


@dataclass(frozen=True)
class Change:
    """A new version of a record, replacing the stored one of the same id.

    ``vector`` is None when the indexed text did not change. ``expected_version`` guards
    against lost updates: the write fails if the stored version differs.
    """

    record: MemoryRecord
    vector: Vector | None
    expected_version: int
    reason: str | None = None


@dataclass(frozen=True)
class Usage:
    """A use of one record, written by ``MemoryStore.touch``: ``count`` more accesses, the
    latest at ``at``, and optionally a new ``decay_score``."""

    id: str
    count: int = 0
    at: datetime | None = None
    decay_score: float | None = None

    def __post_init__(self) -> None:
        checks.whole(self.count, "count", low=0)
        if self.decay_score is not None:
            checks.number(self.decay_score, "decay_score", low=0, high=1)

    def applied(self, record: MemoryRecord) -> MemoryRecord:
        """``record`` with this use written into it (the reference semantics of ``touch``)."""
        time_info = record.time.model_dump()
        last = record.time.last_accessed
        if self.at is not None:
            at = TimeInfo(last_accessed=self.at).last_accessed  # UTC, whole milliseconds
            assert at is not None
            time_info["last_accessed"] = at if last is None else max(last, at)
        if self.decay_score is not None:
            time_info["decay_score"] = self.decay_score
        return record.model_copy(
            update={
                "access_count": record.access_count + self.count,
                "time": TimeInfo.model_validate(time_info),
            }
        )

    @staticmethod
    def written(records: Sequence[MemoryRecord], uses: Sequence[Usage]) -> dict[str, MemoryRecord]:
        """The records of ``records`` that ``uses`` change, changed, in the order of ``uses``."""
        current = {record.id: record for record in records}
        changed: dict[str, MemoryRecord] = {}
        for use in uses:
            if use.id in current:
                current[use.id] = changed[use.id] = use.applied(current[use.id])
        return changed


#: A memory the vector half found past the keyword half's best ``candidates`` gets its
#: keyword score when that is at least this share of the best keyword score: a strong match
#: the cut left out (the SQLite, PostgreSQL and Qdrant stores). Every match (share 0) lifted
#: LoCoMo further on the held-out half but lost open-domain questions on both halves and the
#: synthetic check's temporal and updated-fact questions, where weak matches of common
#: words come in (docs/benchmarks.md, "A vector find's keyword score past the keyword
#: half's cut").
COMPLETED_SHARE = 0.5
#: A list cursor's creation time must be a moment every backend's time type holds (the
#: years 1 to 9999, in whole milliseconds since the epoch); its sequence a signed 64-bit
#: integer.
CURSOR_MS_RANGE = (to_ms(EARLIEST), to_ms(LATEST))
_CURSOR = re.compile(r"(-?[0-9]{1,19}):(-?[0-9]{1,19})", re.ASCII)
_NOT_A_CURSOR = "is not a cursor this store issued"


def cursor_ms(value: object) -> int:
    """A cursor's creation time, checked; a ValidationError naming ``cursor`` otherwise (the
    one range check of every store's list)."""
    low, high = CURSOR_MS_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(_NOT_A_CURSOR, field="cursor")
    return value


def write_cursor(created_ms: int, sequence: int) -> str:
    """``"<created ms>:<sequence>"``: where the next page of a list starts."""
    return f"{created_ms}:{sequence}"


def read_cursor(cursor: str) -> tuple[int, int]:
    """The creation time and sequence of a ``write_cursor`` cursor; a ValidationError naming
    ``cursor`` for anything else, integers out of range included."""
    matched = _CURSOR.fullmatch(cursor)
    if matched is None:
        raise ValidationError(_NOT_A_CURSOR, field="cursor")
    sequence = int(matched.group(2))
    if not INT64_MIN <= sequence <= INT64_MAX:
        raise ValidationError(_NOT_A_CURSOR, field="cursor")
    return cursor_ms(int(matched.group(1))), sequence


class Head(NamedTuple):
    """What a search ranks a record by, read without parsing the whole record
    (``MemoryStore.heads``): who said it and its text (speaker bonuses, repeats), its
    importance and times (the rerank's recency and importance, and whether it is
    superseded), and whether roles restrict it (a restricted memory's speaker is never
    learned: ``chatmem.long_term.speakers``)."""

    speaker: str | None
    text: str
    importance: float
    created_at: datetime
    valid_from: datetime | None
    valid_to: datetime | None
    restricted: bool

    def ended_by(self, now: datetime) -> bool:
        """Whether the memory stopped being true by ``now`` (its ``valid_to``): a
        superseded fact."""
        return self.valid_to is not None and self.valid_to <= now

    @property
    def since(self) -> datetime:
        """When the memory became true (``valid_from``), else when it was said
        (``created_at``): what recency and a question about the present count from."""
        return self.valid_from or self.created_at

    @classmethod
    def of(cls, record: MemoryRecord) -> Head:
        """The head of a whole record."""
        return cls(
            record.context.speaker if record.context else None,
            record.text,
            record.metadata.importance,
            record.time.created_at,
            record.time.valid_from,
            record.time.valid_to,
            bool(record.access_control.allowed_roles),
        )


def heads_of(records: Iterable[MemoryRecord]) -> dict[str, Head]:
    """The head of each of ``records``, by id, as ``MemoryStore.heads`` gives them."""
    return {r.id: Head.of(r) for r in records}


class MemoryStore(ABC):
    """Durable storage of memory records. All methods are thread-safe."""

    capabilities = Capabilities()

    @abstractmethod
    def bind_embedding(self, info: EmbeddingInfo) -> None:
        """Record the embedding model on first use; refuse a different one afterwards
        (raises EmbedderMismatchError)."""

    @property
    @abstractmethod
    def embedding(self) -> EmbeddingInfo | None:
        """The model and dimension this store was built with, if any."""

    def _dimension(self) -> int:
        if (info := self.embedding) is None:
            raise StoreError("no embedding model is bound to this store yet")
        return info.dimension

    def _check_vector(self, vector: Vector) -> None:
        if vector.shape != (self._dimension(),):
            raise DimensionError(
                f"vector has shape {vector.shape}, the store expects ({self._dimension()},)",
                field="vector",
            )
        if not np.isfinite(vector).all():
            raise ValidationError("holds NaN or infinite values", field="vector")

    def _check_batch(self, entries: Sequence[Entry]) -> None:
        """Refuse, before any write, a batch with a vector of the wrong shape or a repeated id."""
        for entry in entries:
            self._check_vector(entry.vector)
        ids = [entry.record.id for entry in entries]
        if len(set(ids)) != len(ids):
            raise ValidationError("duplicate ids in one batch", field="id")

    @abstractmethod
    def put(self, entries: Sequence[Entry]) -> None:
        """Insert new records atomically: all of the batch or none of it."""

    def put_with(
        self,
        entries: Sequence[Entry],
        *,
        states: Mapping[str, bytes] | None = None,
        then: Sequence[Change] = (),
    ) -> bool:
        """``put`` of ``entries``, with the word-piece ``states`` of the new memories (blobs
        by their ids, as ``put_word_states`` keeps them) and ``then``: changes of records
        stored before, applied all together, or not at all where one of their records
        changed or went meanwhile (ConflictError, NotFoundError); whether they were.

        ``LongTermMemory.add`` of a session's turn writes through it: the turn, its states
        and the previous turn told of it (``session_tails``). Here in up to three writes,
        only the first of which decides whether the records are stored; a store that can
        make them one transaction does (SQLite: one commit an add)."""
        check_then(then)
        self.put(entries)
        if states:
            for scope, owned in _states_by_user(entries, states):
                self.put_word_states(owned, scope)
        if not then:
            return True
        try:
            self.update(then)
        except (ConflictError, NotFoundError):
            return False
        return True

    @abstractmethod
    def get(self, ids: Sequence[str], scope: Filter) -> list[MemoryRecord]:
        """The records with these ids that match ``scope``, in the order of ``ids``."""

    def heads(self, ids: Sequence[str], scope: Filter) -> dict[str, Head]:
        """The ``Head`` of each record of these ids that matches ``scope``: what a search
        ranks by (speaker, text, importance, times), so that only the records it returns are
        parsed whole. Here through ``get``; a store that can read these fields without
        parsing whole records does (the SQL stores)."""
        return heads_of(self.get(ids, scope))

    @abstractmethod
    def vectors(self, ids: Sequence[str], scope: Filter) -> dict[str, Vector]:
        """The stored vectors of these ids (for export)."""

    def word_states(self, ids: Sequence[str], scope: Filter) -> dict[str, bytes]:
        """The word-piece states kept beside these ids' memories within ``scope`` (blobs of
        ``embeddings.tokens.States.to_bytes``), by id. None here: a store that keeps none
        leaves the late rerank to compute them again in each process (``long_term.late``)."""
        return {}

    def put_word_states(self, states: Mapping[str, bytes], scope: Filter) -> None:
        """Keep ``states`` (blobs by memory id) beside their memories within ``scope``'s
        user, in place of any kept; an id gone since, or outside ``scope``, is skipped.
        Deleting a memory deletes its states. Nothing here (see ``word_states``)."""
        return None

    @abstractmethod
    def search(self, query: SearchQuery) -> builtins.list[Candidate]:
        """Candidates within ``query.filter`` (which must name a user): the nearest
        ``candidates`` by vector and the best ``candidates`` by keywords, each with its cosine
        similarity when the query has a vector (see ``Candidate``)."""

    @abstractmethod
    def update(self, changes: Sequence[Change]) -> None:
        """Replace records atomically, writing one history row per change
        (raises NotFoundError, ConflictError)."""

    @abstractmethod
    def touch(self, uses: Sequence[Usage], scope: Filter) -> builtins.list[str]:
        """Record uses of records of ``scope``'s user (required) in one atomic write.

        For each use: ``access_count`` grows by ``count``, ``time.last_accessed`` becomes
        the later of the stored one and ``at`` (when given), and ``time.decay_score`` is
        set (when given). Nothing else changes: no new version, no history row, no
        reindexing. Ids missing or outside ``scope``'s tenant and user are skipped.
        Returns the ids written.
        """

    @abstractmethod
    def delete(self, scope: Filter, reason: str | None = None) -> list[str]:
        """Delete every record matching ``scope``; history rows are kept. Returns the ids."""

    @abstractmethod
    def list(self, scope: Filter, limit: int = 100, cursor: str | None = None) -> Page:
        """Records matching ``scope`` oldest first, ``limit`` at a time."""

    @abstractmethod
    def count(self, scope: Filter) -> int:
        """How many records match ``scope``."""

    def users(
        self, tenant_id: str, *, after: str | None = None, limit: int = 1000
    ) -> builtins.list[str]:
        """The ids of the users of ``tenant_id`` with at least one record (expired ones
        count), in ascending order, ``limit`` at a time from just past ``after``.

        This default reads every record of the tenant; a backend that can ask its index
        for the distinct users overrides it."""
        limit = check_count(limit, "limit")
        found: set[str] = set()
        cursor: str | None = None
        while True:
            page = self.list(Filter(tenant_id=tenant_id, expired=None), 1000, cursor)
            found.update(r.user_id for r in page.records if after is None or r.user_id > after)
            if page.next_cursor is None:
                return sorted(found)[:limit]
            cursor = page.next_cursor

    @abstractmethod
    def history(self, memory_id: str, scope: Filter) -> builtins.list[HistoryEntry]:
        """Every version of a memory, oldest first, including its deletion."""

    @abstractmethod
    def close(self) -> None:
        """Release connections and files."""

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_then(then: Sequence[Change]) -> None:
    """Refuse ``put_with``'s ``then`` where it changes one record twice (the second change
    would conflict with the first, not with another writer)."""
    ids = [change.record.id for change in then]
    if len(set(ids)) != len(ids):
        raise ValidationError("changes one memory twice", field="then")


def _states_by_user(
    entries: Sequence[Entry], states: Mapping[str, bytes]
) -> list[tuple[Filter, dict[str, bytes]]]:
    """``states`` of the records of ``entries``, with each user's scope."""
    owned: dict[tuple[str, str], dict[str, bytes]] = {}
    for record, _ in entries:
        if record.id in states:
            owned.setdefault((record.tenant_id, record.user_id), {})[record.id] = states[record.id]
    return [(Filter(tenant_id=t, user_id=u), blobs) for (t, u), blobs in owned.items()]
