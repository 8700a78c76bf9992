"""The Milvus store's search: a dense half, a keyword half, and their hits merged.

The dense half is a COSINE search of ``embedding`` (HNSW on a server searches at least
``HNSW_MIN_EF`` wide). The keyword half searches the BM25 function's sparse output with the
query's terms, analysed as a row's text is. Lite scores BM25 per segment and reports
``-score`` as the distance where a server reports the score; keyword hits carry the BM25
score, higher is better, on both. Keyword-only hits get their cosine from their stored
vector (``vectordb.hybrid``). A dense-only collection (made on a server before Milvus 2.5,
see ``features``) has no keyword half.
"""

from __future__ import annotations

from typing import Any

from chatmem.records import Candidate, Vector
from chatmem.stores.base import SearchQuery
from chatmem.stores.milvus.connection import QUERY_WINDOW
from chatmem.stores.milvus.expressions import filter_expression
from chatmem.stores.milvus.reads import vectors
from chatmem.stores.milvus.rows import keyword_query
from chatmem.stores.milvus.schema import HNSW_MIN_EF, MilvusCollections
from chatmem.stores.vectordb.hybrid import candidates


def search(db: MilvusCollections, query: SearchQuery, vector: Vector | None) -> list[Candidate]:
    """Both halves of ``query`` (its vector resolved, its user named), merged."""
    expression = filter_expression(query.filter, expiry=db.expiry)
    limit = min(query.candidates, QUERY_WINDOW)
    cosine: dict[str, float] = {}
    keyword: dict[str, float] = {}
    if vector is not None:
        params: dict[str, Any] = {"metric_type": "COSINE"}
        if db.conn.lite_path is None:
            params["params"] = {"ef": max(limit, HNSW_MIN_EF)}
        dense = [float(x) for x in vector]
        cosine = _search(db, expression, dense, "embedding", params, limit)
    terms = keyword_query(query.text) if query.text and db.keywords else ""
    if terms:
        keyword = _search(db, expression, terms, "sparse", {"metric_type": "BM25"}, limit)
    return candidates(
        cosine,
        keyword,
        vector,
        lambda missing, against: {
            memory_id: float(stored @ against)
            for memory_id, stored in vectors(db, missing, query.filter).items()
        },
    )


def _search(
    db: MilvusCollections,
    expression: str,
    data: Any,
    field: str,
    params: dict[str, Any],
    limit: int,
) -> dict[str, float]:
    results = db.conn.call(
        db.conn.client.search,
        db.memories,
        data=[data],
        filter=expression,
        limit=limit,
        output_fields=["id"],
        search_params=params,
        anns_field=field,
        consistency_level="Strong",
    )
    # COSINE: the similarity. BM25: a server gives the score, Lite its negation.
    return {
        str(hit["id"]): abs(float(hit["distance"])) if field == "sparse" else float(hit["distance"])
        for hit in results[0]
    }
