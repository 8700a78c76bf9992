"""The embedded default store: one SQLite file (WAL), FTS5 for words, vectors scored in memory.

- :mod:`~chatmem.stores.sqlite.file`: ``SQLiteFile``, the file opened per thread, with
  retried writes and migrations (shared by every SQLite component of chatmem).
- :mod:`~chatmem.stores.sqlite.heap`: the bound on SQLite's memory in the process, and
  how much it holds now.
- :mod:`~chatmem.stores.sqlite.schema`: the store's tables and migrations.
- :mod:`~chatmem.stores.sqlite.filters`: a ``Filter`` in SQL, and the rows a search admits.
- :mod:`~chatmem.stores.sqlite.field_cache`: each user's filterable fields as arrays, so a
  filter is a mask, not a query.
- :mod:`~chatmem.stores.sqlite.writes`: rows, vectors, keyword rows and history.
- :mod:`~chatmem.stores.sqlite.search`: the vector and keyword halves of a search.
- :mod:`~chatmem.stores.sqlite.store`: ``SQLiteStore``, the store over them.

Searches score a user's vectors in memory (``vector_cache``): one matrix product, exact (a
user of 4,096 memories or more is shortlisted first on a projection of its vectors, and
only the shortlist's exact cosines are ranked: ``chatmem.stores.coarse``), and kept in
step with other connections by ``user_versions``, which every write transaction bumps; a
filter is answered from the user's cached fields, kept in step the same way.
Writes are ``BEGIN IMMEDIATE`` transactions on per-thread connections with a busy timeout,
retried on a busy database, so concurrent threads and processes wait rather than fail.
"""

from __future__ import annotations

from chatmem.stores.sqlite.file import BUSY_TIMEOUT_MS, WRITE_RETRY_SECONDS, SQLiteFile
from chatmem.stores.sqlite.schema import (
    FTS_SHARDS,
    FTS_WEIGHTS,
    INDEXED_METADATA,
    MIGRATIONS,
    user_key,
)
from chatmem.stores.sqlite.store import SQLiteStore

__all__ = [
    "BUSY_TIMEOUT_MS",
    "FTS_SHARDS",
    "FTS_WEIGHTS",
    "INDEXED_METADATA",
    "MIGRATIONS",
    "WRITE_RETRY_SECONDS",
    "SQLiteFile",
    "SQLiteStore",
    "user_key",
]
