"""The PostgreSQL store's search halves, each within the filter's conditions: nearest
vectors (an exact scan for users with few memories, else HNSW with iterative scans) and
full-text matches ranked by ``ts_rank``."""

from __future__ import annotations

from typing import Any

from chatmem import text as textlib
from chatmem.records import Filter, Vector
from chatmem.stores.base import SearchQuery
from chatmem.stores.postgres.schema import TEXT_SEARCH_CONFIG, index_text
from chatmem.stores.postgres_db import Connection

#: Users with at most this many memories are scored exactly (see the package docstring).
EXACT_SEARCH_ROWS = 10_000
#: ``hnsw.ef_search`` may not exceed this.
MAX_EF_SEARCH = 1_000
#: ts_rank weights in PostgreSQL's order {D, C, B, A}: day 1.0, next turn 0.3, previous turn
#: 0.5, text 1.0, as the SQLite store's FTS weights.
RANK_WEIGHTS = "{1.0, 0.3, 0.5, 1.0}"
#: ts_rank normalisation 1: divide by 1 + log(document length), as BM25 favours short texts.
RANK_NORMALISATION = 1


def vector_half(
    conn: Connection,
    memories: str,
    query: SearchQuery,
    vector: Vector,
    exact: bool,
    where: tuple[str, list[Any]],
) -> list[tuple[int, str, float]]:
    """The ``candidates`` nearest rows of the table ``memories`` within the filter's
    conditions ``where``, with their cosine."""
    conditions, params = where
    if exact:
        # Ordering by the similarity, not the distance operator, keeps the planner off
        # the HNSW index: this is an exact scan of the user's (filtered) rows.
        sql = (
            f"SELECT m.seq, m.id, 1 - (m.embedding <=> %s::vector) AS cosine"
            f" FROM {memories} AS m WHERE {conditions} ORDER BY cosine DESC LIMIT %s"
        )
        rows = conn.execute(sql, [vector, *params, query.candidates]).fetchall()
    else:
        ef_search = min(MAX_EF_SEARCH, max(40, query.candidates))
        conn.execute(
            "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),"
            " set_config('hnsw.ef_search', %s, true)",
            (str(ef_search),),
        )
        sql = (
            f"SELECT m.seq, m.id, 1 - (m.embedding <=> %s::vector) FROM {memories} AS m"
            f" WHERE {conditions} ORDER BY m.embedding <=> %s::vector LIMIT %s"
        )
        rows = conn.execute(sql, [vector, *params, vector, query.candidates]).fetchall()
    return [(int(seq), str(memory_id), float(cosine)) for seq, memory_id, cosine in rows]


def has_few_rows(conn: Connection, memories: str, scope: Filter, limit: int) -> bool:
    """Whether the user of ``scope`` has at most ``limit`` memories (then scored exactly)."""
    row = conn.execute(
        f"SELECT COUNT(*) FROM (SELECT 1 FROM {memories}"
        " WHERE tenant_id = %s AND user_id = %s LIMIT %s) AS mine",
        (scope.tenant_id, scope.user_id, limit + 1),
    ).fetchone()
    assert row is not None
    return int(row[0]) <= limit


def keyword_half(
    conn: Connection,
    memories: str,
    query: SearchQuery,
    vector: Vector | None,
    where: tuple[str, list[Any]],
) -> list[tuple[int, str, float, float | None]]:
    """The best ``candidates`` rows by words, with their cosine when there is a vector."""
    assert query.text is not None
    terms = textlib.query_terms(query.text)
    if not terms:
        return []
    conditions, params = where
    # The terms are words (letters, digits, inner apostrophes), so the only operator
    # websearch_to_tsquery sees is the "or" between them.
    words = " or ".join(index_text(term) for term in terms)
    # The cosine is computed outside the ranked subquery: only for the rows kept.
    cosine = "1 - (best.embedding <=> %s::vector)" if vector is not None else "NULL::float8"
    sql = (
        f"SELECT best.seq, best.id, best.rank, {cosine} FROM ("
        f"SELECT m.seq, m.id, m.embedding,"
        f" ts_rank('{RANK_WEIGHTS}', m.search, q, {RANK_NORMALISATION}) AS rank"
        f" FROM {memories} AS m,"
        f" websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', %s) AS q"
        f" WHERE {conditions} AND m.search @@ q ORDER BY rank DESC, m.seq LIMIT %s) AS best"
    )
    head = [vector] if vector is not None else []
    rows = conn.execute(sql, [*head, words, *params, query.candidates]).fetchall()
    return [
        (int(seq), str(memory_id), float(rank), None if cos is None else float(cos))
        for seq, memory_id, rank, cos in rows
    ]


__all__ = [
    "EXACT_SEARCH_ROWS",
    "MAX_EF_SEARCH",
    "RANK_NORMALISATION",
    "RANK_WEIGHTS",
    "has_few_rows",
    "keyword_half",
    "vector_half",
]
