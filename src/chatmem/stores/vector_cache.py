"""Each user's vectors as one in-memory matrix, kept exact across threads and processes.

A search scores a user's memories with one matrix product (0.3 ms for 10,000 x 384 on one
core, where sqlite-vec's partitioned KNN took 6.5 ms). The matrix is loaded from the store
on first use and kept in an LRU bounded in bytes. Correctness comes from a version row per
user that every write transaction bumps: ``appended`` for inserts, ``changed`` for anything
that alters or removes a vector, ``edited`` for updates (an updated row keeps the count it
was updated at). A reader compares the versions it reads (in the same snapshot as the
vectors) with its cached ones and reads only what moved: the rows appended since, and after
a ``changed``, the rows removed since and the vectors of the rows updated since.

Reading the whole matrix again after each delete or new vector, once per search while a
decay sweep or the extraction worker kept writing, took more of a loaded service's CPU than
the searches themselves (issue 14). A snapshot older than the cached entry (a search that
began before another's write) reads the user whole, at its own versions.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from chatmem.caches import LRUCache
from chatmem.records import Vector
from chatmem.stores import coarse as shortlisted
from chatmem.stores.coarse import Coarse

#: A user's row as the cache reads it: (rowid, vector blob, memory id, the session of a chat
#: turn or None, whether its text asks something).
Row = tuple[int, bytes, str, str | None, bool]
#: A user's rows, in rowid order.
Rows = Iterable[Row]
#: A user's (appended, changed, edited) counters, as ``user_versions`` holds them.
Versions = tuple[int, int, int]


class UserRows(Protocol):
    """How the cache reads one user's rows, all in the snapshot its versions came from."""

    def after(self, rowid: int) -> Rows:
        """The rows with a larger rowid, in rowid order."""

    def still_there(self, rowids: npt.NDArray[np.int64], changed: int) -> npt.NDArray[np.bool_]:
        """Which of ``rowids``, the user's rows at the ``changed`` count, are there now."""

    def edited_since(self, edited: int) -> Rows:
        """The rows updated after the ``edited`` count, in any order."""

    def kept(self) -> UserVectors | None:
        """The user's vectors as the store kept them whole, at older or the same versions
        (never holding a row removed since); None where it keeps none."""

    def keep(self, vectors: UserVectors, kept: UserVectors | None) -> None:
        """Offer the store ``vectors``, built whole or brought on from ``kept``, to keep."""


#: Default memory budget of the cache: enough for ~80 users of 10,000 memories (384 dims).
DEFAULT_BUDGET_BYTES = 512 * 1024 * 1024


class SessionNumbers:
    """A number for each session of one user, shared by the versions of its vectors (a
    session keeps its number); safe for the searches of several threads at once."""

    def __init__(self) -> None:
        self._numbers: dict[str, int] = {}
        self._lock = threading.Lock()

    def of(self, session: str | None) -> int:
        """``session``'s number; -1 for None (not a chat turn)."""
        if session is None:
            return -1
        number = self._numbers.get(session)
        if number is None:
            with self._lock:
                number = self._numbers.setdefault(session, len(self._numbers))
        return number

    def named(self) -> list[str]:
        """The sessions numbered so far, in the order of their numbers."""
        with self._lock:
            return sorted(self._numbers, key=self._numbers.__getitem__)


@dataclass(frozen=True)
class Turns:
    """Each row's session as a number (-1: not a chat turn) and whether its text asks
    something. ``numbers`` numbers the sessions."""

    sessions: npt.NDArray[np.int64]
    asks: npt.NDArray[np.bool_]
    numbers: SessionNumbers

    @classmethod
    def of(cls, rows: list[Row], numbers: SessionNumbers) -> Turns:
        sessions = np.fromiter((numbers.of(r[3]) for r in rows), np.int64, len(rows))
        asks = np.fromiter((bool(r[4]) for r in rows), np.bool_, len(rows))
        return cls(sessions, asks, numbers)

    def at(self, positions: npt.NDArray[np.intp]) -> Turns:
        return Turns(self.sessions[positions], self.asks[positions], self.numbers)

    def then(self, more: Turns) -> Turns:
        """These rows' turns, then ``more``'s (numbered alike)."""
        return Turns(
            np.concatenate([self.sessions, more.sessions]),
            np.concatenate([self.asks, more.asks]),
            self.numbers,
        )


#: How alike an answer and the question before it must be (the cosine of their vectors) to
#: be scored together: below it, the turn changed the subject ("How did the rest of your
#: day go?" then "I think I need a holiday, work has been a lot."), and the two together
#: would lift it for whatever the question was about. Chosen on LoCoMo conversations 0-4
#: (0.2 and 0 tie there; 0.3 and 0.4 score lower); docs/benchmarks.md "An answer scored
#: with its question".
ANSWER_MIN_COSINE = 0.2


class Replies(NamedTuple):
    """A user's answers to questions: row ``answer[n]`` is the turn after ``question[n]``
    in its session, and ``norm[n]`` is the length of the sum of their two vectors. The
    cosine of a query with the question and answer together (the sum of the two unit
    vectors, made unit length) is ``(s[answer] + s[question]) / norm`` for the rows'
    cosines ``s``: scored without embedding anything again. ``last`` is each session's
    last row, where the next appended turn of it follows."""

    answer: npt.NDArray[np.intp]
    question: npt.NDArray[np.intp]
    norm: npt.NDArray[np.float32]
    last: dict[int, int]

    def appended(self, matrix: Vector, turns: Turns, start: int) -> Replies:
        """These replies with those of the rows from ``start`` on, appended after the rows
        these were computed for (a chat's next turns: only their pairs are computed)."""
        last = dict(self.last)
        answer: list[int] = []
        question: list[int] = []
        for row, code in enumerate(turns.sessions[start:].tolist(), start):
            if code < 0:
                continue
            before = last.get(code)
            if before is not None and turns.asks[before]:
                answer.append(row)
                question.append(before)
            last[code] = row
        extra = _alike(matrix, np.array(answer, np.intp), np.array(question, np.intp), last)
        return Replies(
            np.concatenate([self.answer, extra.answer]),
            np.concatenate([self.question, extra.question]),
            np.concatenate([self.norm, extra.norm]),
            last,
        )

    def lifted(self, scores: Vector, pool: npt.NDArray[np.intp]) -> Vector:
        """``scores`` (every row's cosine with a query) with each answer's at least that
        of it and its question together, for the pairs whose both rows are in ``pool``."""
        if not len(self.answer):
            return scores
        answer, question, norm = self.answer, self.question, self.norm
        if len(pool) < len(scores):  # rows were left out (else every pair counts)
            seen = np.zeros(len(scores), dtype=np.bool_)
            seen[pool] = True
            both = seen[answer] & seen[question]
            answer, question, norm = answer[both], question[both], norm[both]
        together = (scores[answer] + scores[question]) / norm
        lifted = scores.copy()
        lifted[answer] = np.maximum(scores[answer], together)
        return lifted


def _replies(matrix: Vector, turns: Turns) -> Replies:
    """Each chat turn whose session's turn just before it (in rowid order, the order they
    were stored in) asks something, and whose vector is at least ``ANSWER_MIN_COSINE``
    like that question's."""
    session = turns.sessions
    order = np.argsort(session, kind="stable")  # each session's rows together, in order
    grouped = session[order]
    follows = (grouped[1:] == grouped[:-1]) & (grouped[1:] >= 0)
    answer, question = order[1:][follows], order[:-1][follows]
    asked = turns.asks[question]
    ends = np.flatnonzero(np.append(grouped[1:] != grouped[:-1], True)) if len(order) else order
    ending = zip(grouped[ends].tolist(), order[ends].tolist(), strict=True)
    last = {code: row for code, row in ending if code >= 0}
    return _alike(matrix, answer[asked], question[asked], last)


def _alike(
    matrix: Vector,
    answer: npt.NDArray[np.intp],
    question: npt.NDArray[np.intp],
    last: dict[int, int],
) -> Replies:
    """The pairs of ``answer`` and ``question`` rows whose vectors are alike enough."""
    dots = np.einsum("ij,ij->i", matrix[answer], matrix[question])
    alike = dots >= ANSWER_MIN_COSINE
    norm = np.sqrt(2.0 + 2.0 * dots[alike]).astype(np.float32)
    return Replies(answer[alike].astype(np.intp), question[alike].astype(np.intp), norm, last)


#: How far a big user's exact rows reach along replies (``UserVectors.scored``): a turn that
#: answers one question and asks the next is scored with both.
PARTNER_HOPS = 2


@dataclass
class UserVectors:
    """One user's vectors, ordered by rowid (rowids only grow, so appends keep the order)."""

    rowids: npt.NDArray[np.int64]
    matrix: Vector
    versions: Versions
    #: The memory id of each row (a rowid's id never changes: rowids are not reused).
    ids: list[str]
    #: Each row's session, for a chat turn, and whether its text asks something.
    turns: Turns
    #: A big user's vectors in fewer dimensions (``chatmem.stores.coarse``), rows as
    #: ``matrix``'s; None for a smaller one.
    coarse: Coarse | None = field(default=None, repr=False, compare=False)
    _answers: Replies | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.coarse = shortlisted.kept(self.coarse, self.matrix)

    @property
    def nbytes(self) -> int:
        held = self.matrix.nbytes + self.rowids.nbytes + (self.coarse.nbytes if self.coarse else 0)
        return int(held) + 100 * len(self.ids)

    def replies(self) -> Replies:
        """The chat turns that follow a turn asking something in their session, and how to
        score them as the question and answer together (``Replies``); computed once."""
        if self._answers is None:  # two threads may both compute it: the same value
            self._answers = _replies(self.matrix, self.turns)
        return self._answers

    def ids_of(self, rowids: Iterable[int]) -> dict[int, str]:
        """The ids of those of ``rowids`` held here."""
        wanted = np.fromiter(rowids, np.int64)
        if not len(wanted) or not len(self.rowids):
            return {}
        at = np.minimum(np.searchsorted(self.rowids, wanted), len(self.rowids) - 1)
        held = self.rowids[at] == wanted
        ids = self.ids
        return {
            int(rowid): ids[int(i)]
            for rowid, i in zip(wanted[held].tolist(), at[held].tolist(), strict=True)
        }

    @property
    def last_rowid(self) -> int:
        return int(self.rowids[-1]) if len(self.rowids) else 0

    def scores(self, vector: Vector) -> Vector:
        """Cosine similarity of every stored vector with ``vector`` (all are unit length)."""
        result: Vector = self.matrix @ vector
        return result

    def scored(
        self,
        vector: Vector,
        pool: npt.NDArray[np.intp],
        candidates: int,
        must: npt.NDArray[np.intp],
    ) -> tuple[Vector, npt.NDArray[np.intp] | None]:
        """Every row's cosine with ``vector``, and the positions where it is exact (None:
        all). A big user's (``coarse``) are estimated, and exact for the best of ``pool``
        by the estimate, an answer's lifted with its question's (``Replies.lifted``;
        ``chatmem.stores.coarse.shortlist``), for ``must``, and for the
        turns each of those answers or is answered by (``replies``), so that a question
        and its answer are scored together from exact cosines."""
        if self.coarse is None:
            return self.scores(vector), None
        replies = self.replies()
        estimate = self.coarse.estimate(vector)
        exact = shortlisted.best(replies.lifted(estimate, pool), pool, candidates)
        exact[must] = True
        for _ in range(PARTNER_HOPS if len(replies.answer) else 0):
            answers, asked = exact[replies.answer], exact[replies.question]
            exact[replies.question[answers]] = True
            exact[replies.answer[asked]] = True
        return estimate, shortlisted.rescore(estimate, exact, self.matrix, vector)

    def positions(self, rowids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Where ``rowids`` (all present) sit in this matrix."""
        return np.searchsorted(self.rowids, rowids)

    def moved_on(self, rows: UserRows, versions: Versions) -> UserVectors:
        """These vectors at the later ``versions``, reading only what moved (module doc)."""
        fresh = self
        if versions[1] != self.versions[1]:
            fresh = fresh._pruned(rows.still_there(self.rowids, self.versions[1]))
            fresh = fresh._rewritten(rows.edited_since(self.versions[2]))
        if versions[0] != self.versions[0]:
            extra = _build(
                rows.after(self.last_rowid), self.matrix.shape[1], versions, self.turns.numbers
            )
            fresh = UserVectors(
                np.concatenate([fresh.rowids, extra.rowids]),
                np.concatenate([fresh.matrix, extra.matrix]),
                versions,
                fresh.ids + extra.ids,
                fresh.turns.then(extra.turns),
                fresh.coarse.appended(extra.matrix) if fresh.coarse else None,
            )
        moved = UserVectors(
            fresh.rowids, fresh.matrix, versions, fresh.ids, fresh.turns, fresh.coarse
        )
        if versions[1] == self.versions[1] and self._answers is not None:
            # Rows were only appended: the replies found stay, the new rows' are added (a
            # whole computation took 3.3 ms at 10,000 rows, paid by the search after a write).
            moved._answers = self._answers.appended(moved.matrix, moved.turns, len(self.rowids))
        return moved

    def _pruned(self, there: npt.NDArray[np.bool_]) -> UserVectors:
        kept = np.flatnonzero(there)
        if len(kept) == len(self.rowids):
            return self
        ids = self.ids
        return UserVectors(
            self.rowids[kept],
            self.matrix[kept],
            self.versions,
            [ids[i] for i in kept.tolist()],
            self.turns.at(kept),
            self.coarse.at(kept) if self.coarse else None,
        )

    def _rewritten(self, rows: Rows) -> UserVectors:
        """With the vectors of ``rows`` that this matrix holds replaced (rows appended
        after it are read with the appends)."""
        found = [row for row in rows if row[0] <= self.last_rowid]
        if not found:
            return self
        wanted = np.fromiter((row[0] for row in found), np.int64, len(found))
        at = np.minimum(np.searchsorted(self.rowids, wanted), len(self.rowids) - 1)
        held = self.rowids[at] == wanted  # all of them, unless a row changed hands
        fresh = np.frombuffer(b"".join(row[1] for row in found), np.float32)
        matrix = self.matrix.copy()
        matrix[at[held]] = fresh.reshape(len(found), matrix.shape[1])[held]
        projected = self.coarse.replaced(at[held], matrix[at[held]]) if self.coarse else None
        # An edit may change a turn's text (whether it asks), or its session.
        edited = Turns.of(found, self.turns.numbers)
        turns = Turns(self.turns.sessions.copy(), self.turns.asks.copy(), self.turns.numbers)
        turns.sessions[at[held]] = edited.sessions[held]
        turns.asks[at[held]] = edited.asks[held]
        return UserVectors(self.rowids, matrix, self.versions, self.ids, turns, projected)


def _build(
    rows: Rows, dimension: int, versions: Versions, numbers: SessionNumbers | None = None
) -> UserVectors:
    found = list(rows)
    rowids = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
    matrix = np.frombuffer(b"".join(r[1] for r in found), dtype=np.float32)
    ids = [r[2] for r in found]
    turns = Turns.of(found, SessionNumbers() if numbers is None else numbers)
    return UserVectors(rowids, matrix.reshape(len(found), dimension), versions, ids, turns)


class VectorCache:
    """User key -> ``UserVectors``, least recently used dropped past ``budget_bytes``."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self._users: LRUCache[str, UserVectors] = LRUCache(
            budget_bytes, size=lambda key, vectors: vectors.nbytes
        )

    def vectors(self, key: str, versions: Versions, dimension: int, rows: UserRows) -> UserVectors:
        """The user's vectors at ``versions``, read through ``rows`` (in the same snapshot)
        only as far as they moved since the cached ones. An update that leaves every vector
        as it was (``edited`` alone moved) changes nothing here."""
        cached = self._users.get(key)
        kept = rows.kept() if cached is None else None  # a new process's first search
        cached = cached if cached is not None else kept
        older = cached is not None and (
            versions[0] < cached.versions[0] or versions[1] < cached.versions[1]
        )
        if cached is None or older:
            fresh = _build(rows.after(0), dimension, versions)
            rows.keep(fresh, None)
        elif cached.versions == versions and kept is None:
            return cached
        elif cached.versions[:2] == versions[:2]:
            # Only fields moved: the same arrays, marked as exact at the later ``edited``
            # (a vector changed after it bumps ``changed`` and a later ``edited`` both), and
            # the same replies (a text that changes changes its vector): usage is written
            # after every injection, and the pairs took 3.3 ms at 10,000 rows.
            fresh = UserVectors(
                cached.rowids, cached.matrix, versions, cached.ids, cached.turns, cached.coarse
            )
            fresh._answers = cached._answers
        else:
            fresh = cached.moved_on(rows, versions)
            if kept is not None:
                rows.keep(fresh, kept)
        self._keep(key, fresh)
        return fresh

    def _keep(self, key: str, fresh: UserVectors) -> None:
        self._users.put(key, fresh)

    def clear(self) -> None:
        self._users.clear()
