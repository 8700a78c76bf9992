"""What the stores over a vector database (Milvus, Qdrant) share, written once.

Neither database has transactions, SQL's ORDER BY or Python's equality of JSON values, so both
stores do the same things instead, and none of it needs a client library:

- ``fields``: a record flattened into filterable fields, with metadata and roles as terms;
- ``keywords``: the analysis of a memory's text and of a query for the BM25 keyword half;
- ``order``: the order a list pages in (oldest first, ties by id) and its cursor;
- ``writes``: read-then-write checks under a lock, and undoing what a failed batch wrote;
- ``store``: ``VectorDBStore``, their schema version, embedding binding, write lock, closing;
- ``hybrid``: a search's dense and keyword hits merged into candidates.
"""

__all__: list[str] = []
