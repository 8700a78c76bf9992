"""A read of many records is one row of SQLite's cursor (issue 14). Each row a cursor
steps through lets go of the interpreter lock and waits to take it back; in a service under
load another thread holds it for up to the switch interval (5 ms), and reading 20 records
row by row took 134 ms where one row took 11 (docs/benchmarks.md, "Reads that keep the
interpreter lock")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chatmem import text as textlib
from chatmem.records import EmbeddingInfo, Entry, Filter, MemoryRecord
from chatmem.stores import SQLiteStore
from chatmem.stores.base import SearchQuery, heads_of
from chatmem.stores.sqlite.file import sqlite3
from chatmem.stores.sqlite.schema import FTS_WEIGHTS, fts_table, user_token

RECORDS = 30


class _Rows:
    """The rows the statements of one connection hand to Python, counted."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.count = 0

    def execute(self, sql: str, params: Any = ()) -> _Cursor:
        return _Cursor(self, self._conn.execute(sql, params))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _Cursor:
    def __init__(self, rows: _Rows, cursor: sqlite3.Cursor) -> None:
        self._rows, self._cursor = rows, cursor

    def fetchone(self) -> Any:
        row = self._cursor.fetchone()
        self._rows.count += row is not None
        return row

    def fetchall(self) -> list[Any]:
        found = self._cursor.fetchall()
        self._rows.count += len(found)
        return found

    def fetchmany(self, size: int) -> list[Any]:
        found = self._cursor.fetchmany(size)
        self._rows.count += len(found)
        return found

    def close(self) -> None:
        self._cursor.close()

    def __iter__(self) -> Iterator[Any]:
        for row in self._cursor:
            self._rows.count += 1
            yield row


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(str(tmp_path / "reads.db"))
    store.bind_embedding(EmbeddingInfo(model="test", dimension=4))
    yield store
    store.close()


def _counted(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> _Rows:
    rows = _Rows(store._file.connection())
    monkeypatch.setattr(store._file, "connection", lambda: rows)
    return rows


def test_reading_many_records_or_what_they_say_is_one_row(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The texts hold the character the bodies are joined with, and a NUL.
    records = [
        MemoryRecord(
            user_id="u", content={"raw": f"fact\x1e{n}\x00"}, context={"speaker": "Ana\x1e"}
        )
        for n in range(RECORDS)
    ]
    store.put([Entry(r, np.ones(4, dtype=np.float32)) for r in records])
    every = [r.id for r in reversed(records)]
    scope = Filter(user_id="u")
    rows = _counted(store, monkeypatch)
    assert store.get(every, scope) == list(reversed(records))
    assert rows.count == 1
    assert store.heads(every, scope) == heads_of(records)
    assert {h.speaker for h in store.heads(every, scope).values()} == {"Ana\x1e"}
    # get: one row; heads: the user's versions and one row, then the versions alone (the
    # heads are held: ``head_cache``).
    assert rows.count == 4
    assert store.get(["missing"], scope) == [] and store.heads(["missing"], scope) == {}


def test_a_search_reads_fts5s_matches_a_page_in_one_row(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user too small for keyword postings in memory is searched through FTS5: its
    matches come a page to a row, with the scores FTS5 gave (17 digits give the float
    back), best first."""
    records = [
        MemoryRecord(user_id="u", content={"raw": "garden " * (1 + n % 7) + f"note {n}"})
        for n in range(RECORDS)
    ]
    store.put([Entry(r, np.ones(4, dtype=np.float32)) for r in records])
    scope = Filter(user_id="u")

    def search(text: str) -> dict[str, float | None]:
        query = SearchQuery(scope, text=text, candidates=50, embed=lambda: np.ones(4, np.float32))
        return {c.id: c.keyword_score for c in store.search(query)}

    search("warm the vectors")
    token = user_token("default", "u")
    table = fts_table(token)
    terms = textlib.fts5_any(textlib.query_terms("garden"))
    weights = ", ".join(str(w) for w in FTS_WEIGHTS)
    with store._file.read() as conn:
        by_rowid = dict(conn.execute("SELECT rowid, id FROM memories").fetchall())
        fts5 = conn.execute(
            f"SELECT rowid, bm25({table}, {weights}) FROM {table} WHERE {table} MATCH ?",
            (f'ukey : "{token}" AND {{said prev nxt day}} : ({terms})',),
        ).fetchall()
    rows = _counted(store, monkeypatch)
    found = search("garden")
    assert rows.count <= 2  # the user's versions, then one page of matches
    assert found == {by_rowid[rowid]: -score for rowid, score in fts5}  # to the last bit
    assert len(set(found.values())) == 7
