from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from chatmem import LocalEmbedder, LongTermMemory
from chatmem.stores import SQLiteStore

# CI replays the same examples on every run (a landing must not hang on a lucky draw);
# local runs draw fresh ones, and what they find is pinned with @example.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CHATMEM_HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["CHATMEM_HYPOTHESIS_PROFILE"])


@pytest.fixture(scope="session")
def postgres_uri() -> Iterator[str]:
    """A PostgreSQL database with pgvector for the whole run (see tests/stores/conftest.py)."""
    from tests.pg_server import postgres_server

    with postgres_server() as uri:
        yield uri


@pytest.fixture
def pg_schema(postgres_uri: str) -> Iterator[str]:
    """A schema of its own for one test, dropped afterwards."""
    import uuid

    from tests.pg_server import drop_schema

    schema = f"t_{uuid.uuid4().hex[:16]}"
    yield schema
    drop_schema(postgres_uri, schema)


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    """The real offline MiniLM, loaded once for the whole run."""
    return LocalEmbedder()


@pytest.fixture
def memory(tmp_path: Path, embedder: LocalEmbedder) -> Iterator[LongTermMemory]:
    with LongTermMemory(SQLiteStore(tmp_path / "chatmem.db"), embedder) as opened:
        yield opened


def long_document(chars: int = 100_000, fact: str = "I'm allergic to peanuts.") -> str:
    """A pasted document of exactly ``chars`` characters: paragraphs of plain sentences,
    each naming its own ``region<n>``, with ``fact`` as the paragraph in the middle."""
    paragraph = (
        "Section {n} covers the quarterly report of region{n}. Revenue grew and costs were "
        "stable in every office. The team met twice to review the figures and agreed on the "
        "next steps."
    )
    paragraphs = [paragraph.format(n=n) for n in range(chars // len(paragraph) + 2)]
    paragraphs.insert(len(paragraphs) // 2, fact)
    return "\n\n".join(paragraphs)[:chars]
