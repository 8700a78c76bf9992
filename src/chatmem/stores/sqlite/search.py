"""The SQLite store's search halves, each over one user's rows that a filter admitted:
nearest vectors (scored in memory from the user's cached matrix, ``vector_cache``) and FTS5
keyword matches (BM25 in the user's shard). Fusing them is the ranking layer's job."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from chatmem import text as textlib
from chatmem.records import Vector
from chatmem.stores.base import COMPLETED_SHARE, SearchQuery
from chatmem.stores.sqlite import vector_snapshots as snapshots
from chatmem.stores.sqlite import writes
from chatmem.stores.sqlite.field_cache import Versions
from chatmem.stores.sqlite.file import sqlite3
from chatmem.stores.sqlite.filters import Admitted
from chatmem.stores.sqlite.keyword_cache import Floats, Rowids, UserWords
from chatmem.stores.sqlite.schema import FTS_WEIGHTS, fts_table, user_key, user_token
from chatmem.stores.sqlite.vector_snapshots import VectorSnapshots
from chatmem.stores.vector_cache import Row, UserVectors, VectorCache


def user_versions(conn: sqlite3.Connection, tenant: str, user: str) -> Versions:
    """The user's write counters in ``conn``'s snapshot (what both caches are exact at)."""
    row = conn.execute(
        "SELECT appended, changed, edited FROM user_versions WHERE tenant_id = ? AND user_id = ?",
        (tenant, user),
    ).fetchone()
    return (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)


# A chat turn (an episodic memory of a session) carries its session, and whether its text
# asks something, for the answers to questions (``vector_cache.Replies``).
_TURN = "m.session_id IS NOT NULL AND m.type = 'episodic'"
_VECTORS = (
    f"SELECT v.rowid, v.embedding, m.id, CASE WHEN {_TURN} THEN m.session_id END,"
    f" {_TURN} AND instr(json_extract(m.body, '$.content.raw'), '?') > 0"
    " FROM memories AS m JOIN memory_vectors AS v"
    " ON v.rowid = m.rowid WHERE m.tenant_id = ? AND m.user_id = ?"
)


class _UserRows:
    """One user's rows as the vector cache reads them (``vector_cache.UserRows``)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        tenant: str,
        user: str,
        dimension: int,
        copies: VectorSnapshots | None,
    ) -> None:
        self._conn, self._user = conn, (tenant, user)
        self._dimension, self._copies = dimension, copies

    def after(self, rowid: int) -> list[Row]:
        sql = _VECTORS + " AND m.rowid > ? ORDER BY m.rowid"
        rows: list[Row] = self._conn.execute(sql, (*self._user, rowid)).fetchall()
        return rows

    def still_there(self, rowids: npt.NDArray[np.int64], changed: int) -> npt.NDArray[np.bool_]:
        return writes.still_there(self._conn, *self._user, changed, rowids)

    def edited_since(self, edited: int) -> list[Row]:
        # From the partial index memories_edited: only the rows updated since are read.
        sql = _VECTORS + " AND m.edited > ?"
        rows: list[Row] = self._conn.execute(sql, (*self._user, edited)).fetchall()
        return rows

    def kept(self) -> UserVectors | None:
        if self._copies is None or self._copies.min_rows is None:
            return None
        return snapshots.read(self._conn, *self._user, self._dimension)

    def keep(self, vectors: UserVectors, kept: UserVectors | None) -> None:
        if self._copies is not None and self._copies.wanted(vectors, kept):
            self._copies.keep(*self._user, vectors)


def user_vectors(
    conn: sqlite3.Connection,
    cache: VectorCache,
    dimension: int,
    tenant: str,
    user: str,
    versions: Versions,
    copies: VectorSnapshots | None = None,
) -> UserVectors:
    """The user's vectors at ``versions`` (``conn``'s open snapshot), from the cache, else
    from the user's copy in ``copies`` where it has one, else from its rows."""
    rows = _UserRows(conn, tenant, user, dimension, copies)
    return cache.vectors(user_key(tenant, user), versions, dimension, rows)


def vector_half(
    conn: sqlite3.Connection,
    cache: VectorCache,
    dimension: int,
    query: SearchQuery,
    vector: Vector,
    versions: Versions,
    admitted: Admitted,
    also: set[int],
    copies: VectorSnapshots | None = None,
) -> tuple[dict[int, float], UserVectors]:
    """The ``candidates`` nearest rows that the filter ``admitted``, plus the cosine of
    ``also``; and the user's vectors they were read from."""
    tenant, user = query.filter.tenant_id, query.filter.require_user()

    vectors = user_vectors(conn, cache, dimension, tenant, user, versions, copies)
    pool = admitted.positions(vectors.rowids)
    wanted = np.fromiter(sorted(also), dtype=np.int64)
    at = vectors.positions(wanted)
    cosines, exact = vectors.scored(vector, pool, query.candidates, at)
    if exact is not None:  # a big user's: only exact cosines are ranked
        pool = np.intersect1d(pool, exact, assume_unique=True)
    scores = answered(vectors, cosines, pool)
    if len(pool) > query.candidates:
        best = np.argpartition(-scores[pool], query.candidates - 1)[: query.candidates]
        pool = pool[best]
    found = {int(vectors.rowids[i]): float(scores[i]) for i in pool}
    for position, rowid in zip(at.tolist(), wanted.tolist(), strict=True):
        found.setdefault(rowid, float(scores[position]))
    return found, vectors


def answered(vectors: UserVectors, scores: Vector, pool: npt.NDArray[np.intp]) -> Vector:
    """``scores`` where a chat turn that answers a question (the turn before it in its
    session asks something) scores at least as the two together: "I've had them for 3
    years now" says nothing of the turtles that "How long have you had them?" named. Only
    pairs whose both turns are in ``pool`` count: the filter admitted them, so a memory a
    reader may not see moves nothing (docs/benchmarks.md "An answer scored with its
    question"), and for a big user they were scored exactly (``UserVectors.scored``)."""
    return vectors.replies().lifted(scores, pool)


#: Keyword matches read from FTS5 at most, beyond the ``candidates`` best, so that a vector
#: candidate the keyword half matched lower down still gets its BM25 score (``KeywordHits``);
#: read ``MATCHES_PAGE`` at a time.
MATCHES_KEPT = 1_000
MATCHES_PAGE = 64


class KeywordHits:
    """The keyword half: the ``candidates`` best admitted matches (``best``, rowid and BM25,
    higher is better), and the scores of the other admitted matches it read (every one from
    the postings in memory; the ``MATCHES_KEPT`` best from FTS5). A memory the vector half
    found beyond the keyword half's best gets its keyword score from them (``of``) when it
    is at least ``COMPLETED_SHARE`` of the best: a strong match of both halves no longer
    loses its keyword part to the other half's cut (docs/benchmarks.md, "A vector find's
    keyword score past the keyword half's cut")."""

    def __init__(self, best: list[tuple[int, float]], rowids: Rowids, scores: Floats) -> None:
        self.best = best
        order = np.argsort(rowids, kind="stable")
        self._rowids, self._scores = rowids[order], scores[order]

    @classmethod
    def none(cls) -> KeywordHits:
        return cls([], np.zeros(0, np.int64), np.zeros(0, np.float64))

    def of(self, rowids: set[int]) -> dict[int, float]:
        """The keyword scores of those of ``rowids`` the half matched, at least
        ``COMPLETED_SHARE`` of the best."""
        if not rowids or not self.best:
            return {}
        floor = COMPLETED_SHARE * max(score for _, score in self.best)
        wanted = np.fromiter(sorted(rowids), np.int64, len(rowids))
        at = np.minimum(np.searchsorted(self._rowids, wanted), len(self._rowids) - 1)
        held = (self._rowids[at] == wanted) & (self._scores[at] >= floor)
        found = zip(wanted[held].tolist(), self._scores[at[held]].tolist(), strict=True)
        return dict(found)


#: Pages of matches gathered into one row by each read of the full-text table, in turn:
#: the first read takes one page, each next one this many times as many.
PAGES_GROWTH = 8


def _pages(conn: sqlite3.Connection, matches: str, match: str) -> Iterator[list[tuple[int, float]]]:
    """FTS5's matches (``matches``: rowid and score, best first, with a LIMIT and an OFFSET)
    ``MATCHES_PAGE`` at a time. Each read gathers its rows into one value (the scores
    written with 17 digits, which give the same float back on the SQLite of pysqlite3;
    tests/stores/test_sqlite_reads.py checks it): every row a cursor steps
    through lets go of the interpreter lock, and beside a busy thread each took up to 5 ms
    to take it back (docs/benchmarks.md, "Reads that keep the interpreter lock"). A read
    takes one page, the next ``PAGES_GROWTH`` times as many, and so on, while the caller
    asks for more."""
    gathered = f"SELECT group_concat(rowid || ' ' || printf('%!.17g', s), ',') FROM ({matches})"
    offset, limit = 0, MATCHES_PAGE
    while True:
        (joined,) = conn.execute(gathered, (match, limit, offset)).fetchone()
        if not joined:
            return
        found = [
            (int(rowid), float(score))
            for rowid, score in (item.split(" ") for item in joined.split(","))
        ]
        for start in range(0, len(found), MATCHES_PAGE):
            yield found[start : start + MATCHES_PAGE]
        if len(found) < limit:
            return
        offset += limit
        limit *= PAGES_GROWTH


def keyword_half(
    conn: sqlite3.Connection, query: SearchQuery, user: str, admitted: Admitted
) -> KeywordHits:
    """The keyword matches that the filter ``admitted``, best first. The match runs on the
    full-text table alone (joined to ``memories``, SQLite would run it once per row of the
    user); rows the filter leaves out are dropped after. Matches are read a page at a time
    until the ``candidates`` best are kept and the next is under ``COMPLETED_SHARE`` of the
    best (what ``KeywordHits.of`` may still use) or ``MATCHES_KEPT`` are."""
    assert query.text is not None
    terms = textlib.query_terms(query.text)
    if not terms or admitted.share == 0.0:
        return KeywordHits.none()
    token = user_token(query.filter.tenant_id, user)
    table = fts_table(token)
    match = f'ukey : "{token}" AND {{said prev nxt day}} : ({textlib.fts5_any(terms)})'
    weights = ", ".join(str(w) for w in FTS_WEIGHTS)
    matches = (
        f"SELECT rowid, bm25({table}, {weights}) AS s FROM {table} WHERE {table} MATCH ?"
        " ORDER BY s LIMIT ? OFFSET ?"
    )
    wanted, kept = query.candidates, []
    for page in _pages(conn, matches, match):
        keep = admitted.admits(np.fromiter((row[0] for row in page), np.int64, len(page)))
        # FTS5's bm25() is negative, lower is better; flip it so higher is better.
        kept += [(row[0], -row[1]) for row, admit in zip(page, keep.tolist(), strict=True) if admit]
        if len(kept) >= wanted and (
            len(kept) >= MATCHES_KEPT or -page[-1][1] < COMPLETED_SHARE * kept[0][1]
        ):
            break
    rowids = np.fromiter((row[0] for row in kept), np.int64, len(kept))
    scores = np.fromiter((row[1] for row in kept), np.float64, len(kept))
    return KeywordHits(kept[:wanted], rowids, scores)


def cached_keyword_half(
    words: UserWords, terms: list[str], query: SearchQuery, admitted: Admitted
) -> KeywordHits:
    """``keyword_half`` from the user's postings in memory (``keyword_cache``): the
    ``candidates`` best admitted rows, best first, ties by rowid."""
    if admitted.share == 0.0:
        return KeywordHits.none()
    rowids, scores = words.scores(terms)
    keep = admitted.admits(rowids)
    rowids, scores = rowids[keep], scores[keep]
    top_rowids, top_scores = rowids, scores
    wanted = query.candidates
    if len(rowids) > wanted:
        best = np.argpartition(-scores, wanted - 1)[:wanted]
        top_rowids, top_scores = rowids[best], scores[best]
    order = np.lexsort((top_rowids, -top_scores))
    best_first = zip(top_rowids[order].tolist(), top_scores[order].tolist(), strict=True)
    return KeywordHits(list(best_first), rowids, scores)


def ids_by_rowid(
    conn: sqlite3.Connection, rowids: set[int], vectors: UserVectors | None = None
) -> dict[int, str]:
    """The memory ids of ``rowids``: from the user's cached vectors where they hold them,
    else read."""
    held = vectors.ids_of(rowids) if vectors is not None else {}
    if len(held) == len(rowids):
        return held
    ordered = sorted(rowids - held.keys())
    rows = conn.execute(
        f"SELECT rowid, id FROM memories WHERE rowid IN ({', '.join('?' * len(ordered))})",
        ordered,
    ).fetchall()
    return held | dict(rows)


__all__ = [
    "COMPLETED_SHARE",
    "KeywordHits",
    "Versions",
    "cached_keyword_half",
    "ids_by_rowid",
    "keyword_half",
    "user_versions",
    "vector_half",
]
