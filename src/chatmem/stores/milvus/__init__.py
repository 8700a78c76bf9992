"""The Milvus store (SPEC B1): Milvus Lite on one machine, Milvus standalone or a cluster beyond.

The same client code runs against both: a local path opens Milvus Lite, an ``http(s)://``,
``tcp://`` or ``unix:`` uri connects to a server (``connection``). The store keeps three
collections, ``<prefix>_memories``, ``<prefix>_history`` and ``<prefix>_meta`` (``schema``).

- ``store``: ``MilvusStore``, the store interface, handing each call to its path;
- ``connection``: pymilvus' client, its errors as chatmem's, reads past the query window;
- ``features``: what the server offers, from its version (BM25, INVERTED indexes, upsert);
- ``schema``: the collections' schemas and indexes, making them, the meta pairs;
- ``rows``: records as rows and back (compressed bodies, keyword text, history rows);
- ``expressions``: ``Filter`` as a Milvus boolean expression;
- ``writes``: put, update, touch and delete, undone on failure;
- ``reads``: get, vectors, count, users, history, and list;
- ``search``: the dense and keyword halves of a search, merged.

What Milvus lacks, and what this store does instead:

- **Transactions.** A batch is written with one ``insert`` (or ``upsert``) call, then its
  history rows; if a step fails, what may have been written is deleted (or the previous rows
  restored) before StoreError is raised. A failure of that clean-up is added as a note to the
  error. A bulk delete works in chunks of ``ID_CHUNK`` records; each record is deleted together
  with its history row, so a failed delete may have removed a prefix of the records.
- **Conditional writes.** Version checks (update) and the duplicate-id check (put) read, then
  write. A lock makes that safe between threads of one process; several processes writing the
  same user's memories on one server can still race.
- **ORDER BY.** ``list`` (oldest first, ties by id) reads the ids and creation times of every
  matching record after the cursor, sorts them here, and then reads the bodies of one page: a
  page costs O(matching records), fine per user, slow for a tenant-wide listing of millions.
  Reads past Milvus' 16,384-row query window go through a query iterator.
- **JSON equality with Python's semantics.** ``Filter.metadata`` compares like Python
  (``True == 1 == 1.0``, a missing key equals None). Each record therefore stores canonical
  ``key=value`` terms of its metadata in an ARRAY field, and a filter tests them with
  ``array_contains``. ``user_metadata`` is kept as a JSON field as well, for ad-hoc queries.
- **Large values.** VARCHAR holds at most 65,535 bytes: a record whose JSON is larger is stored
  zlib-compressed; one that is still too large is refused (ValidationError). The keyword text is
  cut at that size.

Full-text search works on Milvus Lite 3.x: ``text`` feeds a BM25 function, searched with the
query's terms. Lite's analyzer has no stemmer, so the text is analysed here (chatmem.text's
words and stop words, Porter stems) and Milvus only splits it, on Lite and server alike.
Lite scores BM25 per segment and reports ``-score`` as the distance where a server reports the
score; keyword hits carry the BM25 score, higher is better, on both. A server older than 2.5
has no BM25: there the store is dense-only (``features``), with ``keyword_search`` False and a
warning when it opens; older than 2.4, it also uses the server's own scalar index types and
replaces rows by delete, then insert (2.3's upsert moves a row out of its partition).
"""

from chatmem.stores.milvus.connection import QUERY_WINDOW, SCAN_BATCH
from chatmem.stores.milvus.expressions import NOTHING, filter_expression, literal
from chatmem.stores.milvus.rows import keyword_document, keyword_query
from chatmem.stores.milvus.schema import (
    ANALYZER,
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    HNSW_MIN_EF,
    ID_BYTES,
    MAX_TERMS,
    MAX_VARCHAR_BYTES,
    SCALAR_INDEXED,
    SCHEMA_VERSION,
)
from chatmem.stores.milvus.store import MilvusStore
from chatmem.stores.vectordb.fields import (
    OPEN_END,
    OPEN_START,
    RESTRICTED_TERM,
    ROLE_TERM,
    SEPARATOR,
    TERM_BYTES,
    access_terms,
    metadata_terms,
    ms_ceil,
    ms_floor,
    user_key,
)
from chatmem.stores.vectordb.keywords import STEMMER
from chatmem.stores.vectordb.writes import ID_CHUNK

__all__ = [
    "ANALYZER",
    "HNSW_EF_CONSTRUCTION",
    "HNSW_M",
    "HNSW_MIN_EF",
    "ID_BYTES",
    "ID_CHUNK",
    "MAX_TERMS",
    "MAX_VARCHAR_BYTES",
    "NOTHING",
    "OPEN_END",
    "OPEN_START",
    "QUERY_WINDOW",
    "RESTRICTED_TERM",
    "ROLE_TERM",
    "SCALAR_INDEXED",
    "SCAN_BATCH",
    "SCHEMA_VERSION",
    "SEPARATOR",
    "STEMMER",
    "TERM_BYTES",
    "MilvusStore",
    "access_terms",
    "filter_expression",
    "keyword_document",
    "keyword_query",
    "literal",
    "metadata_terms",
    "ms_ceil",
    "ms_floor",
    "user_key",
]
