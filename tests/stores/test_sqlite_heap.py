"""SQLite's memory stays bounded however many threads hold a connection (issue 11, the soak).

Each thread gets its own connection to a SQLite file, with a page cache of its own. These
tests read SQLite's real heap (``sqlite3_memory_used``) with many threads reading one file.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from chatmem.stores.sqlite import SQLiteFile
from chatmem.stores.sqlite import heap as sqlite_heap

THREADS = 24
LIMIT = 8 * 2**20


@pytest.fixture
def unset_limit() -> Iterator[None]:
    """The process's soft heap limit unset for the test, and put back after it."""
    conn = SQLiteFile(":memory:").connection()
    (before,) = conn.execute("PRAGMA soft_heap_limit").fetchone()
    conn.execute("PRAGMA soft_heap_limit = 0")
    yield
    conn.execute(f"PRAGMA soft_heap_limit = {before}")


def _limit() -> int:
    (value,) = SQLiteFile(":memory:").connection().execute("PRAGMA soft_heap_limit").fetchone()
    return int(value)


def test_opening_a_file_sets_the_bound_where_the_process_has_none(unset_limit: None) -> None:
    SQLiteFile(":memory:").connection()
    assert _limit() == sqlite_heap.SOFT_HEAP_LIMIT_BYTES


def test_a_limit_the_application_set_is_kept(unset_limit: None) -> None:
    SQLiteFile(":memory:").connection().execute("PRAGMA soft_heap_limit = 123456789")
    SQLiteFile(":memory:").connection()
    assert _limit() == 123456789


@pytest.mark.slow
def test_many_threads_reading_stay_within_the_bound(
    tmp_path: Path, unset_limit: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if sqlite_heap.heap_used() is None:
        pytest.skip("this SQLite library does not expose sqlite3_memory_used")
    monkeypatch.setattr(sqlite_heap, "SOFT_HEAP_LIMIT_BYTES", LIMIT)
    db = SQLiteFile(tmp_path / "big.db")
    rows = [(os.urandom(800).hex(),) for _ in range(12_000)]  # about 20 MB of pages
    db.write(lambda conn: conn.execute("CREATE TABLE t (x TEXT)"))
    db.write(lambda conn: conn.executemany("INSERT INTO t VALUES (?)", rows))
    read_all, finish = threading.Barrier(THREADS + 1), threading.Event()

    def reader() -> None:
        with db.read() as conn:
            for _ in range(2):
                assert len(conn.execute("SELECT x FROM t").fetchall()) == len(rows)
        read_all.wait()
        finish.wait()  # keep the thread, and so its connection, alive while measured

    threads = [threading.Thread(target=reader) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    read_all.wait(timeout=120)
    held = sqlite_heap.heap_used()
    finish.set()
    for thread in threads:
        thread.join()
    db.close()
    # Unbounded, each connection keeps its 2 MB of pages: about 48 MB for 24 threads.
    assert held is not None and held < LIMIT * 1.5, f"SQLite holds {held / 2**20:.1f} MiB"
