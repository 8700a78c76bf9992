"""A big user's keyword index in memory, BM25 scored with numpy (issue 14).

FTS5 scores every row a question's words match, and a big user's common words (a
speaker's name, "like") match thousands: at 10,000 memories its query took 2.6-3.4 ms of a
5 ms search. Here each user with at least ``MIN_ROWS`` memories gets postings (term ->
rows, weighted frequency) held as arrays, and a question costs a few array operations per
word. FTS5 stays the durable index and the one read for smaller users, for a user whose
postings are still being built (in the background: a search never waits for it), and for a
question with a word FTS5 would read as a phrase of several tokens.

The scoring is FTS5's ``bm25()`` with the store's column weights (``FTS_WEIGHTS``), down to
its constants and its idf floor, with one difference: its statistics (row count, average
length, how many rows hold a word) are the user's own, where FTS5 counts every user of the
shard. A user's ranking therefore no longer moves with what other users store, and a user
alone in a shard (every benchmark user) gets FTS5's scores exactly.

Words are cut by FTS5's own tokenizer (an in-memory FTS5 table and its ``instance``
vocabulary), one distinct whitespace-separated chunk at a time, cached: ``unicode61``
separates at every whitespace character, so a text's tokens are its chunks' tokens in order.

An entry is exact for the ``user_versions`` it was read at, and follows them as the field
cache does: appended rows are tokenized and added, updated rows replace their postings,
deleted rows are masked out, and the postings are rebuilt once the changes pile up.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import numpy.typing as npt

from chatmem import text as textlib
from chatmem.caches import LRUCache
from chatmem.stores.sqlite.field_cache import Versions
from chatmem.stores.sqlite.file import sqlite3
from chatmem.stores.sqlite.schema import FTS_COLUMNS, FTS_WEIGHTS, TOKENIZER, user_key
from chatmem.stores.sqlite.writes import still_there
from chatmem.threads import lower_priority

#: Users with fewer memories are served by FTS5 alone: their matches are few and cheap.
MIN_ROWS = 2_000
#: Default memory budget: about 30 users of 10,000 LoCoMo turns with their neighbours.
DEFAULT_BUDGET_BYTES = 256 * 1024 * 1024
#: FTS5's bm25() constants (fts5_aux.c).
K1, B = 1.2, 0.75
#: The idf FTS5 gives a word that more than half of the rows hold.
IDF_FLOOR = 1e-6
#: Users remembered as under ``MIN_ROWS`` (their counts are re-read past it).
SMALL_KEPT = 100_000
#: Distinct chunks whose tokens are remembered (about 100 bytes each).
CHUNKS_KEPT = 200_000

Positions = npt.NDArray[np.int32]
Floats = npt.NDArray[np.float64]
Rowids = npt.NDArray[np.int64]
#: (rowid, ukey, said, prev, nxt, day) of one keyword row.
TextRow = tuple[int, str, str, str, str, str]


class Tokenizer:
    """FTS5's tokenizer (``TOKENIZER``) for whitespace-free chunks, cached. Thread-safe."""

    def __init__(self) -> None:
        self._conn = sqlite3.connect(":memory:", check_same_thread=False)
        self._conn.execute(f"CREATE VIRTUAL TABLE chunk USING fts5(w, tokenize = '{TOKENIZER}')")
        self._conn.execute("CREATE VIRTUAL TABLE chunk_tokens USING fts5vocab(chunk, 'instance')")
        self._known: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def learn(self, chunks: Collection[str]) -> dict[str, tuple[str, ...]]:
        """The tokens of every chunk in ``chunks`` (no whitespace in any), as one mapping
        that also holds chunks seen before (past ``CHUNKS_KEPT`` it starts again from
        ``chunks``)."""
        known = self._known
        missing = {chunk for chunk in chunks if chunk not in known}
        if not missing:
            return known
        ordered = sorted(missing)
        found: dict[str, list[str]] = {chunk: [] for chunk in ordered}
        with self._lock:
            self._conn.executemany(
                "INSERT INTO chunk (rowid, w) VALUES (?, ?)", enumerate(ordered, start=1)
            )
            for doc, term in self._conn.execute(
                "SELECT doc, term FROM chunk_tokens ORDER BY doc, offset"
            ):
                found[ordered[doc - 1]].append(term)
            self._conn.execute("DELETE FROM chunk")
            if len(known) + len(found) > CHUNKS_KEPT:
                known = {chunk: known[chunk] for chunk in chunks if chunk in known}
            known.update((chunk, tuple(tokens)) for chunk, tokens in found.items())
            self._known = known
        return known


def _postings(
    texts: Sequence[TextRow],
    positions: npt.ArrayLike,
    tokenizer: Tokenizer,
    vocabulary: dict[str, int],
) -> tuple[Patch, Floats]:
    """The postings of ``texts`` (the rows at ``positions``): each term of a row's
    ``said``, ``prev``, ``nxt`` and ``day`` columns with its frequency, every occurrence
    counted with its column's weight, added in FTS5's order (column, then offset); and each
    row's length in tokens (every column, ``ukey`` too, as FTS5's ``xColumnSize(-1)``).
    New words are added to ``vocabulary``. Array work, but for one split per column."""
    columns = len(FTS_WEIGHTS)
    chunks: list[str] = []
    sizes: list[int] = []
    for row in texts:
        for text in row[1:]:
            split = text.split()
            chunks += split
            sizes.append(len(split))
    per_cell = np.array(sizes, np.int64)
    distinct = {chunk: i for i, chunk in enumerate(dict.fromkeys(chunks))}
    chunk_ids = np.fromiter(map(distinct.__getitem__, chunks), np.int64, len(chunks))
    known = tokenizer.learn(distinct)
    tokens = [known[chunk] for chunk in distinct]
    counts = np.fromiter(map(len, tokens), np.int64, len(tokens))
    codes = np.fromiter(
        (vocabulary.setdefault(t, len(vocabulary)) for found in tokens for t in found), np.int64
    )
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    # One entry per token occurrence: which chunk occurrence it comes from, which token of it.
    per_chunk = counts[chunk_ids]
    occurrence = np.repeat(np.arange(len(chunk_ids)), per_chunk)
    within = np.arange(len(occurrence)) - np.repeat(np.cumsum(per_chunk) - per_chunk, per_chunk)
    terms = codes[starts[chunk_ids][occurrence] + within]
    cells = np.repeat(np.arange(len(per_cell)), per_cell)[occurrence]
    rows, column = np.divmod(cells, columns)
    lengths = np.bincount(rows, minlength=len(texts)).astype(np.float64)
    indexed = column != 0  # ukey counts in a row's length, never as a word
    key = terms[indexed] * len(texts) + rows[indexed]
    weight = np.asarray(FTS_WEIGHTS, np.float64)[column[indexed]]
    order = np.argsort(key, kind="stable")
    key, weight = key[order], weight[order]
    if not len(key):
        return Patch.empty(), lengths
    first = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
    freq = np.add.reduceat(weight, first)
    term, row = np.divmod(key[first], len(texts))
    at = np.asarray(positions, np.int64)[row]
    return Patch(term.astype(np.int32), at.astype(np.int32), freq), lengths


@dataclass(frozen=True)
class Patch:
    """Postings added since the arrays were built, as parallel arrays (few)."""

    terms: Positions
    rows: Positions
    freq: Floats

    @classmethod
    def empty(cls) -> Patch:
        return cls(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float64))

    def without(self, rows: Positions) -> Patch:
        keep = ~np.isin(self.rows, rows)
        return Patch(self.terms[keep], self.rows[keep], self.freq[keep])

    def plus(self, other: Patch) -> Patch:
        return Patch(
            np.concatenate([self.terms, other.terms]),
            np.concatenate([self.rows, other.rows]),
            np.concatenate([self.freq, other.freq]),
        )


@dataclass(frozen=True)
class UserWords:
    """One user's postings at ``versions``. Rows are positions in ``rowids`` (sorted);
    the postings of term ``t`` are ``rows[offsets[t]:offsets[t + 1]]`` with ``freq``, less
    those of ``stale`` rows (updated since), plus ``patch``; ``alive`` drops deleted rows."""

    tenant: str
    user: str
    versions: Versions
    vocabulary: dict[str, int]
    rowids: Rowids
    lengths: Floats
    alive: npt.NDArray[np.bool_]
    stale: npt.NDArray[np.bool_]
    offsets: npt.NDArray[np.int64]
    rows: Positions
    freq: Floats
    patch: Patch

    @property
    def nbytes(self) -> int:
        arrays = (self.rowids, self.lengths, self.alive, self.stale, self.offsets, self.rows)
        held = sum(a.nbytes for a in arrays) + self.freq.nbytes + 16 * len(self.patch.rows)
        return held + 100 * len(self.vocabulary)

    @classmethod
    def built(
        cls,
        tenant: str,
        user: str,
        versions: Versions,
        texts: Sequence[TextRow],
        tokenizer: Tokenizer,
    ) -> UserWords:
        rowids = np.fromiter((row[0] for row in texts), np.int64, len(texts))
        vocabulary: dict[str, int] = {}
        patch, lengths = _postings(texts, np.arange(len(texts)), tokenizer, vocabulary)
        return _compacted(
            cls(
                tenant,
                user,
                versions,
                vocabulary,
                rowids,
                lengths,
                np.ones(len(texts), np.bool_),
                np.zeros(len(texts), np.bool_),
                np.zeros(1, np.int64),
                np.zeros(0, np.int32),
                np.zeros(0, np.float64),
                patch,
            ),
            sorted_patch=True,  # _postings sorts by term, then row
        )

    def scores(self, terms: Sequence[str]) -> tuple[Rowids, Floats]:
        """The rows holding any of ``terms`` (one token each, FTS5's phrases of the
        question in order; a repeated one counts again, as in FTS5) with their BM25 score,
        higher is better."""
        count, norm = self._statistics
        if not count:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        total = np.zeros(len(self.rowids), np.float64)
        hit = np.zeros(len(self.rowids), np.bool_)
        for term in terms:
            rows, freq = self._postings_of(term)
            if not len(rows):
                continue
            idf = math.log((count - len(rows) + 0.5) / (len(rows) + 0.5))
            if idf <= 0.0:
                idf = IDF_FLOOR
            total[rows] += idf * (freq * (K1 + 1.0)) / (freq + norm[rows])
            hit[rows] = True
        found = np.flatnonzero(hit)
        return self.rowids[found], total[found]

    @cached_property
    def _statistics(self) -> tuple[int, Floats]:
        """The user's row count and each row's BM25 length term, ``k1 (1 - b + b D / avgdl)``."""
        count = int(np.count_nonzero(self.alive))
        if not count:
            return 0, self.lengths
        average = float(self.lengths[self.alive].mean())
        return count, K1 * (1.0 - B + B * self.lengths / average)

    def _postings_of(self, term: str) -> tuple[Positions, Floats]:
        code = self.vocabulary.get(term)
        if code is None:
            return np.zeros(0, np.int32), np.zeros(0, np.float64)
        rows, freq = np.zeros(0, np.int32), np.zeros(0, np.float64)
        if code + 1 < len(self.offsets):
            start, end = int(self.offsets[code]), int(self.offsets[code + 1])
            rows, freq = self.rows[start:end], self.freq[start:end]
            fresh = ~self.stale[rows]
            rows, freq = rows[fresh], freq[fresh]
        if len(self.patch.terms):
            mine = self.patch.terms == code
            if mine.any():
                rows = np.concatenate([rows, self.patch.rows[mine]])
                freq = np.concatenate([freq, self.patch.freq[mine]])
        live = self.alive[rows]
        return rows[live], freq[live]

    def moved_on(
        self, conn: sqlite3.Connection, versions: Versions, table: str, tokenizer: Tokenizer
    ) -> UserWords:
        """These postings at the later ``versions`` (``conn``'s snapshot): rows deleted,
        rows appended (rowids only grow), rows updated (their text re-read)."""
        fresh = self
        if versions[1] != self.versions[1]:
            fresh = fresh._pruned(conn)
        if versions[0] != self.versions[0]:
            last = int(self.rowids[-1]) if len(self.rowids) else 0
            fresh = fresh._appended(
                read_texts(conn, table, self.tenant, self.user, after=last), tokenizer
            )
        if versions[2] != self.versions[2]:
            edited = read_texts(conn, table, self.tenant, self.user, edited=self.versions[2])
            fresh = fresh._edited(edited, tokenizer)
        fresh = replace(fresh, versions=versions)
        if len(fresh.patch.rows) > max(50_000, len(fresh.rows) // 4):
            fresh = _compacted(fresh)
        return fresh

    def _pruned(self, conn: sqlite3.Connection) -> UserWords:
        there = still_there(conn, self.tenant, self.user, self.versions[1], self.rowids)
        return replace(self, alive=self.alive & there)

    def _appended(self, texts: Sequence[TextRow], tokenizer: Tokenizer) -> UserWords:
        if not texts:
            return self
        first = len(self.rowids)
        positions = np.arange(first, first + len(texts))
        added, lengths = _postings(texts, positions, tokenizer, self.vocabulary)
        grown = np.ones(len(texts), np.bool_)
        return replace(
            self,
            rowids=np.concatenate(
                [self.rowids, np.fromiter((row[0] for row in texts), np.int64, len(texts))]
            ),
            lengths=np.concatenate([self.lengths, lengths]),
            alive=np.concatenate([self.alive, grown]),
            stale=np.concatenate([self.stale, ~grown]),
            patch=self.patch.plus(added),
        )

    def _edited(self, texts: Sequence[TextRow], tokenizer: Tokenizer) -> UserWords:
        rowids = np.fromiter((row[0] for row in texts), np.int64, len(texts))
        at = np.searchsorted(self.rowids, rowids)
        known = (at < len(self.rowids)) & (
            self.rowids[np.minimum(at, len(self.rowids) - 1)] == rowids
        )
        texts = [row for row, keep in zip(texts, known.tolist(), strict=True) if keep]
        at = at[known].astype(np.int32)
        if not len(at):
            return self
        added, lengths = _postings(texts, at, tokenizer, self.vocabulary)
        stale, new_lengths = self.stale.copy(), self.lengths.copy()
        stale[at] = True
        new_lengths[at] = lengths
        return replace(
            self, lengths=new_lengths, stale=stale, patch=self.patch.without(at).plus(added)
        )


def _compacted(words: UserWords, *, sorted_patch: bool = False) -> UserWords:
    """The same postings with the patch folded into the arrays (sorted by term, then row;
    ``sorted_patch``: the arrays are empty and the patch is in that order already)."""
    base_terms = np.repeat(
        np.arange(len(words.offsets) - 1, dtype=np.int32), np.diff(words.offsets)
    )
    keep = ~words.stale[words.rows] & words.alive[words.rows]
    patch_keep = words.alive[words.patch.rows]
    terms = np.concatenate([base_terms[keep], words.patch.terms[patch_keep]])
    rows = np.concatenate([words.rows[keep], words.patch.rows[patch_keep]])
    freq = np.concatenate([words.freq[keep], words.patch.freq[patch_keep]])
    order = np.arange(len(terms)) if sorted_patch else np.lexsort((rows, terms))
    counts = np.bincount(terms, minlength=len(words.vocabulary))
    offsets = np.zeros(len(words.vocabulary) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return replace(
        words,
        stale=np.zeros(len(words.rowids), np.bool_),
        offsets=offsets,
        rows=rows[order].astype(np.int32),
        freq=freq[order],
        patch=Patch.empty(),
    )


def read_texts(
    conn: sqlite3.Connection,
    table: str,
    tenant: str,
    user: str,
    *,
    after: int = 0,
    edited: int | None = None,
) -> list[TextRow]:
    """The keyword rows of the user's memories (all after rowid ``after``, or those updated
    after the count ``edited``), in rowid order."""
    since = "m.rowid > ?" if edited is None else "m.edited > ?"
    rows: list[TextRow] = conn.execute(
        f"SELECT f.rowid, {', '.join('f.' + c.strip() for c in FTS_COLUMNS.split(','))}"
        f" FROM memories AS m JOIN {table} AS f ON f.rowid = m.rowid"
        f" WHERE m.tenant_id = ? AND m.user_id = ? AND {since} ORDER BY m.rowid",
        (tenant, user, after if edited is None else edited),
    ).fetchall()
    return rows


def _nbytes(key: str, words: UserWords) -> int:
    return words.nbytes


_shared: tuple[int, Tokenizer] | None = None
_shared_lock = threading.Lock()


def shared_tokenizer() -> Tokenizer:
    """The process's one ``Tokenizer`` (one in-memory SQLite connection and one chunk cache
    for every store; a child process after a fork makes its own)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared[0] != os.getpid():
            _shared = (os.getpid(), Tokenizer())
        return _shared[1]


class KeywordCache:
    """User key -> ``UserWords`` for users of at least ``min_rows`` memories, least
    recently used dropped past ``budget_bytes``; built in one background thread."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES, min_rows: int = MIN_ROWS) -> None:
        self.budget_bytes = budget_bytes
        self.min_rows = min_rows
        self._users: LRUCache[str, UserWords] = LRUCache(budget_bytes, size=_nbytes)
        self._lock = threading.Lock()
        self._update = threading.Lock()
        self._building: set[str] = set()
        #: User key -> (``appended`` when counted, row count) of users found small.
        self._small: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._builder: ThreadPoolExecutor | None = None

    @property
    def tokenizer(self) -> Tokenizer:
        return shared_tokenizer()

    def terms(self, text: str) -> list[str] | None:
        """The question's words as FTS5 reads them (``keyword_half``'s phrases, in order),
        or None when one of them is a phrase of several tokens (FTS5 answers those)."""
        words = textlib.query_terms(text)
        known = self.tokenizer.learn(words)
        terms = []
        for word in words:
            tokens = known[word]
            if len(tokens) != 1:
                return None
            terms.append(tokens[0])
        return terms

    def words(
        self,
        conn: sqlite3.Connection,
        tenant: str,
        user: str,
        versions: Versions,
        table: str,
        build: Callable[[], UserWords | None],
    ) -> UserWords | None:
        """The user's postings at ``versions`` (``conn``'s open snapshot), or None: the user
        has under ``min_rows`` memories, is being built, or this snapshot is older than the
        entry."""
        key = user_key(tenant, user)
        cached = self._users.get(key)
        if cached is None:
            if self._big(conn, key, tenant, user, versions[0]):
                self._start(key, build)
            return None
        if cached.versions == versions:
            return cached
        if not all(now >= then for now, then in zip(versions, cached.versions, strict=True)):
            return None
        with self._update:
            fresh = cached.moved_on(conn, versions, table, self.tokenizer)
        self.keep(key, fresh)
        return fresh

    def _big(
        self, conn: sqlite3.Connection, key: str, tenant: str, user: str, appended: int
    ) -> bool:
        """Whether the user has ``min_rows`` memories. Counted once; the count stays an
        upper bound as long as fewer rows were appended since than it lacks."""
        with self._lock:
            counted = self._small.get(key)
        if counted is not None and counted[1] + appended - counted[0] < self.min_rows:
            return False
        (rows,) = conn.execute(
            "SELECT count(*) FROM memories WHERE tenant_id = ? AND user_id = ?", (tenant, user)
        ).fetchone()
        with self._lock:
            self._small[key] = (appended, int(rows))
            self._small.move_to_end(key)
            while len(self._small) > SMALL_KEPT:
                self._small.popitem(last=False)
        return int(rows) >= self.min_rows

    def _start(self, key: str, build: Callable[[], UserWords | None]) -> None:
        with self._lock:
            if key in self._building:
                return
            self._building.add(key)
            if self._builder is None:
                self._builder = ThreadPoolExecutor(
                    1, thread_name_prefix="chatmem-keywords", initializer=lower_priority
                )
            builder = self._builder

        def run() -> None:
            try:
                built = build()
                if built is not None:
                    self.keep(key, built)
            finally:
                with self._lock:
                    self._building.discard(key)

        builder.submit(run)

    def keep(self, key: str, fresh: UserWords) -> None:
        self._users.put(key, fresh)

    def wait(self) -> None:
        """Until every build started so far is done (tests, benchmarks, close)."""
        with self._lock:
            builder = self._builder
        if builder is not None:
            builder.submit(lambda: None).result()

    def close(self) -> None:
        with self._lock:
            builder, self._builder = self._builder, None
        if builder is not None:
            builder.shutdown(wait=True, cancel_futures=True)
        self._users.clear()


__all__ = [
    "DEFAULT_BUDGET_BYTES",
    "MIN_ROWS",
    "KeywordCache",
    "Tokenizer",
    "UserWords",
    "read_texts",
]
