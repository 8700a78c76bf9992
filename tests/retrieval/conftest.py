"""Helpers of the retrieval tests: a chat stored a turn at a time, and a store that counts
its reads."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

from chatmem import LongTermMemory
from chatmem.embeddings import LocalEmbedder
from chatmem.records import Filter, MemoryRecord
from chatmem.stores.base import Head
from chatmem.stores.sqlite import SQLiteStore

#: Omar's and Lee's chat: what the late rerank's tests rank (one memory a turn).
OMAR_CHAT = [
    ("Omar", "Practiced the cello for two hours, my fingers hurt."),
    ("Omar", "Music has always been my escape."),
    ("Lee", "Do you play any instruments?"),
    ("Omar", "I play football with my cousins every Friday."),
    ("Omar", "My neighbour plays loud music at night."),
    ("Omar", "Bought new strings for my old guitar today."),
    ("Lee", "Instruments are expensive these days."),
]


class CountingStore(SQLiteStore):
    """The real SQLite store, counting the ids each ``get`` (whole records) and each
    ``heads`` (what ranking reads, no record parsed) is asked for."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.asked: list[list[str]] = []
        self.asked_heads: list[list[str]] = []

    def get(self, ids: Sequence[str], scope: Filter) -> list[MemoryRecord]:
        self.asked.append(list(ids))
        return super().get(ids, scope)

    def heads(self, ids: Sequence[str], scope: Filter) -> dict[str, Head]:
        self.asked_heads.append(list(ids))
        return super().heads(ids, scope)


def store_chat(
    path: Path, embedder: LocalEmbedder, chat: Sequence[tuple[str, str]], start: datetime
) -> Path:
    """``chat`` ((speaker, text) turns) added one turn a minute from ``start``, as user "u"
    in session "s1", to a SQLite store at ``path``."""
    with LongTermMemory(SQLiteStore(path), embedder) as memory:
        for minute, (speaker, text) in enumerate(chat):
            message = {"role": "user", "name": speaker, "content": text}
            memory.add(
                [message | {"timestamp": start + timedelta(minutes=minute)}],
                user_id="u",
                session_id="s1",
            )
    return path
