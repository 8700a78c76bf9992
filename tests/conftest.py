from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chatmem import LocalEmbedder, LongTermMemory
from chatmem.stores import SQLiteStore


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    """The real offline MiniLM, loaded once for the whole run."""
    return LocalEmbedder()


@pytest.fixture
def memory(tmp_path: Path, embedder: LocalEmbedder) -> Iterator[LongTermMemory]:
    with LongTermMemory(SQLiteStore(tmp_path / "chatmem.db"), embedder) as opened:
        yield opened
