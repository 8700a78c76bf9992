"""The PostgreSQL store's search halves, each within the filter's conditions: nearest
vectors (an exact scan for users with few memories, else HNSW with iterative scans) and
full-text matches ranked by each word's ``ts_rank`` times its idf (``words``); and the
question-and-answer pairs of the candidates (``answer_pairs``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chatmem import text as textlib
from chatmem.records import Filter, Vector
from chatmem.stores.base import SearchQuery
from chatmem.stores.postgres.filters import where
from chatmem.stores.postgres.schema import TEXT_SEARCH_CONFIG, index_text
from chatmem.stores.postgres.words import IDF_FLOOR, WordCounts
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
    counts: WordCounts,
) -> list[tuple[int, str, float, float | None]]:
    """The best ``candidates`` rows by words, with their cosine when there is a vector.

    A row's score is each word's ``ts_rank`` times the word's idf among the user's memories
    (``words``), as FTS5's ``bm25()`` weighs it: a word that most of a user's memories hold
    (the user's own name) weighs next to nothing, as in the SQLite store, where ``ts_rank``
    alone weighs every word the same. Only the words with more than ``IDF_FLOOR`` find rows,
    when there are any: a row holding nothing else would score next to nothing."""
    terms, weights, matching = _words(conn, memories, query, counts)
    if not terms:
        return []
    conditions, params = where
    sql = _ranked(memories, conditions, len(terms), matching, vector)
    head = [vector] if vector is not None else []
    values = [*head, *weights, *terms, *params, query.candidates]
    # The planner reads every row of a big user where the words' index finds the rows that
    # hold them: at 10,000 memories 25 ms against 9.5 (the words are in most rows' day).
    # (A failed statement rolls the transaction back, and the setting with it; after it, the
    # setting is the server's again, whatever that is.)
    conn.execute("SET LOCAL enable_seqscan = off")
    rows = conn.execute(sql, values).fetchall()
    conn.execute("SET LOCAL enable_seqscan TO DEFAULT")
    return [
        (int(seq), str(memory_id), float(rank), None if cos is None else float(cos))
        for seq, memory_id, rank, cos in rows
    ]


def keyword_ranks(
    conn: Connection,
    memories: str,
    query: SearchQuery,
    where: tuple[str, list[Any]],
    counts: WordCounts,
    seqs: list[int],
) -> dict[int, float]:
    """The keyword scores of the rows ``seqs`` that the words find, as ``keyword_half``
    scores them: for the vector half's finds past the keyword half's cut
    (``COMPLETED_SHARE``)."""
    terms, weights, matching = _words(conn, memories, query, counts)
    if not terms or not seqs:
        return {}
    conditions, params = where
    scored = _scored(memories, conditions + " AND m.seq = ANY(%s)", len(terms), matching)
    rows = conn.execute(
        f"SELECT d.seq, d.rank FROM ({scored}) AS d", [*weights, *terms, *params, seqs]
    ).fetchall()
    return {int(seq): float(rank) for seq, rank in rows}


def _words(
    conn: Connection, memories: str, query: SearchQuery, counts: WordCounts
) -> tuple[list[str], list[float], Sequence[int]]:
    """The query's words as the index holds them, each word's weight (its idf among the
    user's memories), and which words find rows: those above ``IDF_FLOOR``, when any are."""
    assert query.text is not None
    terms = [index_text(term) for term in textlib.query_terms(query.text)]
    if not terms:
        return [], [], []
    user = (query.filter.tenant_id, query.filter.require_user())
    weights = counts.weights(conn, memories, user, terms)
    telling = [i for i, weight in enumerate(weights) if weight > IDF_FLOOR]
    return terms, weights, telling or range(len(terms))


def _scored(memories: str, conditions: str, count: int, matching: Sequence[int]) -> str:
    """The rows the words in ``matching`` find, with their rank (seq, id, rank).
    Parameters: each word's weight, the words, the filter's."""
    each = range(count)
    queries = ", ".join(f"websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', %s) AS q{i}" for i in each)
    # numnode: a word PostgreSQL's stop words empty ranks 0, without a notice a row.
    rank = " + ".join(
        f"%s * CASE WHEN numnode(d.q{i}) > 0 AND d.doc @@ d.q{i} THEN"
        f" ts_rank('{RANK_WEIGHTS}', d.doc, d.q{i}, {RANK_NORMALISATION}) ELSE 0 END"
        for i in each
    )
    match = " || ".join(f"q.q{i}" for i in matching)
    return (
        f"SELECT d.seq, d.id, {rank} AS rank FROM ("
        # Read once: a row's search vector is stored compressed, and each word's ts_rank
        # would decompress it again (OFFSET 0 keeps the planner from inlining the copy).
        f"SELECT m.seq, m.id, setweight(m.search, 'A', '{{}}'::text[]) AS doc, q.*"
        f" FROM {memories} AS m, (SELECT {queries}) AS q"
        f" WHERE {conditions} AND m.search @@ ({match}) OFFSET 0) AS d"
    )


def _ranked(
    memories: str, conditions: str, count: int, matching: Sequence[int], vector: Vector | None
) -> str:
    """``keyword_half``'s statement for ``count`` words, rows found by those in
    ``matching``. Parameters: the query vector (when there is one), each word's weight, the
    words, the filter's, the limit."""
    # The cosine is computed last: only for the rows kept.
    cosine = "1 - (e.embedding <=> %s::vector)" if vector is not None else "NULL::float8"
    return (
        f"SELECT best.seq, best.id, best.rank, {cosine} FROM ("
        f"{_scored(memories, conditions, count, matching)}"
        f" ORDER BY rank DESC, d.seq LIMIT %s) AS best"
        f" JOIN {memories} AS e ON e.seq = best.seq ORDER BY best.rank DESC, best.seq"
    )


#: A chat turn: an episodic memory of a session (alias ``{a}``).
_TURN = "{a}.session_id IS NOT NULL AND {a}.type = 'episodic'"
#: Whether the chat turn ``{a}`` asks something (its text holds a question mark).
_ASKS = "strpos(({a}.body::json -> 'content') ->> 'raw', '?') > 0"
#: The chat turn just before (``<``, ``DESC``) or after (``>``, ``ASC``) the turn ``c`` in
#: its session, in the order the turns were stored (the index ``memories_by_session``).
_NEIGHBOUR = (
    "SELECT * FROM {memories} AS n WHERE n.tenant_id = c.tenant_id"
    " AND n.user_id = c.user_id AND n.session_id = c.session_id AND n.type = 'episodic'"
    " AND n.seq {op} c.seq ORDER BY n.seq {order} LIMIT 1"
)


def answer_pairs(
    conn: Connection,
    memories: str,
    scope: Filter,
    vector: Vector,
    seqs: list[int],
) -> list[tuple[int, str, float, float, float]]:
    """The question-and-answer pairs that the rows ``seqs`` (a search's candidates) are
    part of, as the SQLite store's ``vector_cache.Replies`` makes them: a chat turn that
    asks something and the turn after it in its session, both admitted by ``scope`` (the
    candidates are). For each: the answer's seq, id and cosine with ``vector``, the
    question's cosine, and the cosine of the two. The answer to a candidate question
    enters here even when it is no candidate itself."""
    if not seqs:
        return []
    conditions, params = where(scope, "o")
    parts = []
    # c answers its turn before (o); then c asks and o, the turn after it, answers.
    for answer, question, op, order in (("c", "o", "<", "DESC"), ("o", "c", ">", "ASC")):
        neighbour = _NEIGHBOUR.format(memories=memories, op=op, order=order)
        parts.append(
            f"SELECT {answer}.seq, {answer}.id, 1 - ({answer}.embedding <=> %s::vector),"
            f" 1 - ({question}.embedding <=> %s::vector),"
            f" -({answer}.embedding <#> {question}.embedding)"
            f" FROM {memories} AS c CROSS JOIN LATERAL ({neighbour}) AS o"
            f" WHERE c.seq = ANY(%s) AND {_TURN.format(a='c')} AND {conditions}"
            f" AND {_ASKS.format(a=question)}"
        )
    values = [vector, vector, seqs, *params]
    found = conn.execute(" UNION ALL ".join(parts), values + values).fetchall()
    return [(int(a), str(i), float(s), float(q), float(d)) for a, i, s, q, d in found]


__all__ = [
    "answer_pairs",
    "keyword_ranks",
    "EXACT_SEARCH_ROWS",
    "MAX_EF_SEARCH",
    "RANK_NORMALISATION",
    "RANK_WEIGHTS",
    "has_few_rows",
    "keyword_half",
    "vector_half",
]
