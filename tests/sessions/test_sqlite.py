"""SQLite-only behaviour: sessions survive a restart, share a file with the long-term store,
and take appends from several processes at once."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from chatmem.errors import StoreError, ValidationError
from chatmem.messages import SessionKey
from chatmem.records import EmbeddingInfo, Entry, Filter
from chatmem.sessions import SessionState, SQLiteSessionStore
from chatmem.sessions.sqlite import MIGRATIONS, MIGRATIONS_TABLE
from chatmem.stores import SQLiteStore
from chatmem.stores.schema_versions import SCHEMA_TABLE, component_of
from tests.sessions.helpers import append_under_contention, check_contended_log, message
from tests.stores.helpers import record

KEY = SessionKey("t", "alice", "s1")


def test_sessions_survive_closing_and_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    store = SQLiteSessionStore(path)
    sent = [message("hello", 1), message("hi", 1, role="assistant")]
    store.append(KEY, sent)
    saved = store.save_state(KEY, SessionState(window_start=1, ended_at=5))
    store.put_text("t", "persona", "terse")
    store.close()

    reopened = SQLiteSessionStore(path)
    assert reopened.read(KEY) == sent
    assert reopened.state(KEY) == saved
    assert reopened.get_text("t", "persona") == "terse"
    assert [(i.session_id, i.length, i.ended_at) for i in reopened.sessions("t", "alice")] == [
        ("s1", 2, 5)
    ]
    with pytest.raises(ValidationError, match="turn"):  # the last turn survived too
        reopened.append(KEY, [message("late", 0)])
    reopened.close()


def test_a_closed_store_refuses_work(tmp_path: Path) -> None:
    store = SQLiteSessionStore(tmp_path / "sessions.db")
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.length(KEY)


@pytest.mark.parametrize("sessions_first", [False, True])
def test_one_file_holds_long_term_memories_and_sessions(
    tmp_path: Path, sessions_first: bool
) -> None:
    path = tmp_path / "chatmem.db"
    if sessions_first:
        SQLiteSessionStore(path).close()
    memories, sessions = SQLiteStore(path), SQLiteSessionStore(path)
    memories.bind_embedding(EmbeddingInfo(model="test", dimension=2))
    memories.put([Entry(record("t", "alice", "likes tea"), np.ones(2, dtype=np.float32))])
    sessions.append(KEY, [message("I like tea", 1)])
    memories.close()
    sessions.close()

    memories, sessions = SQLiteStore(path), SQLiteSessionStore(path)
    assert memories.count(Filter(tenant_id="t", user_id="alice")) == 1
    assert [m.content for m in sessions.read(KEY)] == ["I like tea"]
    memories.close()
    sessions.close()


def test_a_newer_session_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    SQLiteSessionStore(path).close()
    import pysqlite3.dbapi2 as sqlite3

    conn = sqlite3.connect(str(path))
    newer = (component_of(MIGRATIONS_TABLE), len(MIGRATIONS) + 1)
    conn.execute(f"INSERT INTO {SCHEMA_TABLE} VALUES (?, ?, 0)", newer)
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        SQLiteSessionStore(path)
    SQLiteStore(path).close()  # the long-term tables keep their own version


def _contend(path: str, writer: str, appends: int) -> None:
    store = SQLiteSessionStore(path)
    append_under_contention(store, KEY, writer, appends)
    store.close()


def test_processes_appending_to_one_session_keep_count_and_turn_order(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    SQLiteSessionStore(path).close()
    writers = [f"p{i}" for i in range(3)]
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_contend, args=(path, w, 40)) for w in writers]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [p.exitcode for p in processes] == [0, 0, 0]
    store = SQLiteSessionStore(path)
    check_contended_log(store, KEY, writers, 40)
    store.close()
