"""What the Milvus at the other end can do, from the version it reports.

The store is written for Milvus Lite and Milvus 2.5+. Older servers lack three things it uses:

- **BM25** (a function filling a SPARSE_FLOAT_VECTOR field; sparse vectors came in 2.4, the
  function in 2.5). Without it the store is *dense-only*: the memories collection has no
  ``text`` or ``sparse`` field, a search skips its keyword half, and the store's
  ``capabilities.keyword_search`` is False.
- **INVERTED scalar indexes** (2.4). Before them a server builds its own scalar index types,
  Trie for VARCHAR and STL_SORT for INT64, which serve the same filters.
- **A sound upsert on a partition-key collection.** Milvus 2.3 routed an upserted row by the
  wrong field, so it left its user's partition: ``query`` by id still found it, a search
  filtered by user did not (milvus-io/milvus#30607, seen here on 2.3.5; fixed in 2024). Up
  to 2.3 the store replaces rows by delete, then insert.

Everything else the store uses (partition keys, ARRAY and JSON fields, ``array_contains``,
upsert, ``count(*)``) is in 2.3. A version the store cannot read is taken as new enough, as
Milvus Lite's is: those keep exactly what they had before the version was asked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The first Milvus with the BM25 function, and the first with INVERTED scalar indexes.
BM25_SINCE = (2, 5, 0)
INVERTED_SINCE = (2, 4, 0)
#: The first minor version certain to have the partition-key upsert fix.
UPSERT_SINCE = (2, 4, 0)
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class ServerFeatures:
    """What a Milvus server offers the store."""

    #: The BM25 function and sparse vectors: the keyword half of a search.
    bm25: bool = True
    #: INVERTED scalar indexes; without them, each field type's default index.
    inverted_index: bool = True
    #: Upsert keeps a row in its partition; without it, rows are deleted, then inserted.
    upsert: bool = True


#: Milvus Lite and 2.5+ servers.
FULL = ServerFeatures()


def parse_version(text: str) -> tuple[int, int, int] | None:
    """``"v2.3.5-lite"`` as ``(2, 3, 5)``; None for what is not a Milvus version."""
    found = _VERSION.match(text.strip())
    if found is None:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch)


def features_of(version: str, *, lite: bool) -> ServerFeatures:
    """What a server reporting ``version`` offers; Milvus Lite (``lite``) offers it all."""
    parsed = None if lite else parse_version(version)
    if parsed is None:
        return FULL
    return ServerFeatures(
        bm25=parsed >= BM25_SINCE,
        inverted_index=parsed >= INVERTED_SINCE,
        upsert=parsed >= UPSERT_SINCE,
    )
