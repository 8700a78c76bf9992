"""A chat turn added alone (``LongTermMemory.add`` with a ``session_id``) is one write:
the turn, the word-piece states the late rerank reads, and the session's previous turn told
of it (its ``after`` context) commit together on SQLite, so no crash leaves one without the
other, and a process that opens the file as the add returns ranks as the one that added."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from chatmem import LocalEmbedder, LongTermMemory
from chatmem.records import Filter
from chatmem.stores import SQLiteStore

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
SAID = [
    ("Ana", "I finally booked the pottery class for Saturday."),
    ("Ben", "Nice, which studio did you pick?"),
    ("Ana", "The one by the river, near the old mill."),
]


def _turn(i: int) -> dict[str, object]:
    name, text = SAID[i]
    return {"role": "user", "name": name, "content": text, "timestamp": T0 + timedelta(minutes=i)}


def test_a_turn_its_states_and_the_previous_turn_told_of_it_are_one_commit(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    with LongTermMemory(SQLiteStore(tmp_path / "m.db"), embedder) as memory:
        (first,) = memory.add(_turn(0), user_id="u", session_id="s")
        store = memory.store
        assert isinstance(store, SQLiteStore)
        statements: list[str] = []
        store._file.connection().set_trace_callback(statements.append)
        try:
            (second,) = memory.add(_turn(1), user_id="u", session_id="s")
        finally:
            store._file.connection().set_trace_callback(None)
        assert [s for s in statements if s in ("BEGIN IMMEDIATE", "COMMIT")] == [
            "BEGIN IMMEDIATE",
            "COMMIT",
        ]
        # Read from another store on the file, before anything in the background could
        # write: what the add returned with is there.
        with SQLiteStore(tmp_path / "m.db") as other:
            mine = Filter(user_id="u")
            (told,) = other.get([first.id], mine)
            assert told.context is not None and told.context.after is not None
            assert "pottery" not in told.context.after and "studio" in told.context.after
            assert set(other.word_states([first.id, second.id], mine)) == {first.id, second.id}
