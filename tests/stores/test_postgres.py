"""PostgreSQL-specific behaviour, on a real server with pgvector: URIs, migrations, the vector
column and its HNSW index, ranking of the keyword half, failures and concurrency.

What every backend must do is in test_conformance.py. Each test here opens stores in a schema
of its own on the session's server (see conftest.py).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from chatmem.errors import (
    ConfigError,
    ConflictError,
    EmbedderMismatchError,
    StoreError,
    StoreUnavailableError,
    ValidationError,
)
from chatmem.records import EmbeddingInfo, Entry, Filter, MemoryRecord, Vector
from chatmem.stores import Change, SearchQuery, open_store
from tests.pg_server import POSTGRES_ENV, drop_schema, postgres_server
from tests.stores.helpers import keyword_score_past_the_cut, record, unit_vector

pytest.importorskip("psycopg")

import psycopg  # noqa: E402 - after the importorskip

from chatmem.stores.postgres import MIGRATIONS, PostgresStore  # noqa: E402

pytestmark = pytest.mark.postgres

DIM = 4
EMBEDDING = EmbeddingInfo(model="test-postgres", dimension=DIM)
OpenStore = Callable[..., PostgresStore]


def unit(*weights: float) -> Vector:
    return unit_vector(DIM, *weights)


@pytest.fixture
def schema(postgres_uri: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield name
    drop_schema(postgres_uri, name)


@pytest.fixture
def open_pg(postgres_uri: str, schema: str) -> Iterator[OpenStore]:
    """Opens stores in this test's schema and closes them afterwards."""
    opened: list[PostgresStore] = []

    def open_(**options: Any) -> PostgresStore:
        opened.append(PostgresStore(postgres_uri, prefix=schema, **options))
        return opened[-1]

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def store(open_pg: OpenStore) -> PostgresStore:
    opened = open_pg()
    opened.bind_embedding(EMBEDDING)
    return opened


def query(conninfo: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(conninfo) as conn:
        return conn.execute(sql, params).fetchall()


# -- URIs -------------------------------------------------------------------------------------


def _with_options(uri: str, **options: str) -> str:
    extra = "&".join(f"{key}={value}" for key, value in options.items())
    return f"{uri}{'&' if '?' in uri else '?'}{extra}"


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_open_store_takes_a_libpq_uri_and_a_prefix(
    postgres_uri: str, schema: str, scheme: str
) -> None:
    uri = _with_options(postgres_uri.replace("postgresql://", f"{scheme}://", 1), prefix=schema)
    with open_store(uri) as opened:
        assert isinstance(opened, PostgresStore)
        assert opened.schema == schema
    # The prefix names a schema and was not passed to libpq (which would have refused it).
    assert query(postgres_uri, "SELECT 1 FROM pg_namespace WHERE nspname = %s", schema) == [(1,)]


@pytest.mark.redis
def test_open_store_puts_a_cache_in_front_without_telling_libpq(
    postgres_uri: str, schema: str, redis_url: str
) -> None:
    from chatmem.stores.cached import CachedStore

    uri = _with_options(postgres_uri, prefix=schema, cache=redis_url, cache_prefix=schema)
    with open_store(uri) as opened:
        assert isinstance(opened, CachedStore)
        assert isinstance(opened.inner, PostgresStore) and opened.inner.schema == schema


def test_open_store_refuses_a_bad_prefix(postgres_uri: str) -> None:
    with pytest.raises(ConfigError, match="schema prefix"):
        open_store(_with_options(postgres_uri, prefix="Robert'); DROP TABLE x;--"))


def test_repr_and_errors_never_show_the_password() -> None:
    with pytest.raises(StoreUnavailableError) as caught:
        PostgresStore("postgresql://chatmem:s3cret@127.0.0.1:1/memories", connect_timeout=2)
    message = str(caught.value)
    assert "127.0.0.1:1/memories" in message and "s3cret" not in message
    assert "cannot reach PostgreSQL" in message


# -- schema and migrations --------------------------------------------------------------------


def test_migrations_are_recorded_once(open_pg: OpenStore, postgres_uri: str, schema: str) -> None:
    open_pg().close()
    open_pg().close()
    versions = query(
        postgres_uri,
        f"SELECT version FROM {schema}.chatmem_schema WHERE component = 'chatmem' ORDER BY 1",
    )
    assert versions == [(number,) for number in range(1, len(MIGRATIONS) + 1)]


def test_a_newer_schema_is_refused(open_pg: OpenStore, postgres_uri: str, schema: str) -> None:
    open_pg().close()
    with psycopg.connect(postgres_uri) as conn:
        conn.execute(
            f"INSERT INTO {schema}.chatmem_schema VALUES ('chatmem', %s, now())",
            (len(MIGRATIONS) + 1,),
        )
    with pytest.raises(StoreError, match="newer than this chatmem"):
        open_pg()


def test_stores_in_two_schemas_do_not_see_each_other(
    store: PostgresStore, postgres_uri: str
) -> None:
    other_schema = f"t_{uuid.uuid4().hex[:16]}"
    other = PostgresStore(postgres_uri, prefix=other_schema)
    try:
        other.bind_embedding(EMBEDDING)
        other.put([Entry(record("t", "u", "only in the other schema"), unit(1))])
        assert store.count(Filter(tenant_id="t")) == 0
        assert other.count(Filter(tenant_id="t")) == 1
    finally:
        other.close()
        drop_schema(postgres_uri, other_schema)


def test_binding_fixes_the_dimension_and_builds_an_hnsw_index(
    store: PostgresStore, postgres_uri: str, schema: str
) -> None:
    (column,) = query(
        postgres_uri,
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = %s::regclass AND attname = 'embedding'",
        f"{schema}.memories",
    )
    assert column == (f"vector({DIM})",)
    (index,) = query(
        postgres_uri,
        "SELECT indexdef FROM pg_indexes"
        " WHERE schemaname = %s AND indexname = 'memories_embedding'",
        schema,
    )
    assert "USING hnsw" in index[0] and "vector_cosine_ops" in index[0]


def test_reopening_refuses_another_dimension(open_pg: OpenStore) -> None:
    open_pg().bind_embedding(EMBEDDING)
    again = open_pg()
    assert again.embedding == EMBEDDING
    with pytest.raises(EmbedderMismatchError, match="test-postgres"):
        again.bind_embedding(EmbeddingInfo(model="test-postgres", dimension=DIM + 1))


def test_concurrent_binders_agree(open_pg: OpenStore) -> None:
    stores = [open_pg(pool_size=1) for _ in range(4)]
    errors: list[BaseException] = []

    def bind(target: PostgresStore) -> None:
        try:
            target.bind_embedding(EMBEDDING)
        except BaseException as exc:  # boundary: reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=bind, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert all(s.embedding == EMBEDDING for s in stores)


# -- search -----------------------------------------------------------------------------------


def test_hnsw_search_filters_within_the_index_scan(open_pg: OpenStore) -> None:
    """Past ``exact_search_rows``, search goes through HNSW with iterative scans: a user's
    few rows among many others' still fill the candidate list, with near-exact recall."""
    rng = np.random.default_rng(7)
    approximate = open_pg(exact_search_rows=0)
    approximate.bind_embedding(EMBEDDING)
    vectors = rng.normal(size=(600, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    owners = [f"user-{i % 40}" for i in range(len(vectors))]
    made = [record("t", owner, f"memory {i}") for i, owner in enumerate(owners)]
    approximate.put([Entry(r, v) for r, v in zip(made, vectors, strict=True)])
    hits = total = 0
    for user in sorted(set(owners)):
        mine = [i for i, owner in enumerate(owners) if owner == user]
        target = unit(1, 0.5, -0.2)
        expected = {made[i].id for i in sorted(mine, key=lambda i: -(vectors[i] @ target))[:5]}
        found = approximate.search(
            SearchQuery(Filter(tenant_id="t", user_id=user), vector=target, candidates=5)
        )
        assert len(found) == 5
        hits += len({c.id for c in found} & expected)
        total += 5
    assert hits / total >= 0.95


def test_keyword_rank_weights_text_above_neighbouring_turns(store: PostgresStore) -> None:
    said = record("t", "u", "We went kayaking on the lake")
    before = record("t", "u", "That sounds lovely", context={"before": "Bob: kayaking again?"})
    after = record("t", "u", "It was cold", context={"after": "Bob: kayaking is fun"})
    store.put([Entry(said, unit(1)), Entry(before, unit(1)), Entry(after, unit(1))])
    found = store.search(SearchQuery(Filter(tenant_id="t", user_id="u"), text="kayaking"))
    ranked = [c.id for c in sorted(found, key=lambda c: -(c.keyword_score or 0))]
    assert ranked == [said.id, before.id, after.id]


def test_a_vector_find_keeps_a_strong_keyword_score_past_the_keyword_best(
    store: PostgresStore,
) -> None:
    keyword_score_past_the_cut(store.put, store, TS_RANK_TEXTS)


#: Six loud memories, a strong one (at least half the best rank) and a weak one: ts_rank,
#: divided by the log of a text's length, ranks short texts above BM25's order.
TS_RANK_TEXTS = (
    "garden garden garden and more {i}",
    "garden garden garden garden garden garden note",
    "we talked for hours about work, money, the trip, films and books; the garden came up"
    " once near the end",
)


def test_the_day_a_memory_was_said_is_searchable(store: PostgresStore) -> None:
    made = record(
        "t",
        "u",
        "We moved house",
        context={"speaker": "Alice"},
        time={"created_at": "2023-05-08T10:00:00Z", "updated_at": "2023-05-08T10:00:00Z"},
    )
    store.put([Entry(made, unit(1))])
    found = store.search(SearchQuery(Filter(tenant_id="t", user_id="u"), text="what in 2023?"))
    assert [c.id for c in found] == [made.id]


# -- values PostgreSQL treats differently ---------------------------------------------------


def test_text_with_nul_characters_round_trips(store: PostgresStore) -> None:
    made = record("t", "u", "before\x00after kayaking")
    store.put([Entry(made, unit(1))])
    assert store.get([made.id], Filter(tenant_id="t")) == [made]
    found = store.search(SearchQuery(Filter(tenant_id="t", user_id="u"), text="kayaking"))
    assert [c.id for c in found] == [made.id]


def test_metadata_with_a_nul_character_is_refused(store: PostgresStore) -> None:
    with pytest.raises(ValidationError):
        store.put([Entry(record("t", "u", "x", user_metadata={"k": "a\x00b"}), unit(1))])
    assert store.count(Filter(tenant_id="t")) == 0


METADATA_VALUES: list[Any] = [True, False, 1, 0, 1.0, 2, 2.5, "1", "true", None, [1], {"a": 1}]


@pytest.mark.parametrize("wanted", [True, False, 1, 0, 1.0, 2, 2.5, "1", None, float("nan")])
def test_metadata_equality_is_pythons(store: PostgresStore, wanted: Any) -> None:
    made = [
        record("t", "u", f"m{i}", user_metadata={"k": value})
        for i, value in enumerate(METADATA_VALUES)
    ]
    made.append(record("t", "u", "no key"))
    store.put([Entry(r, unit(1)) for r in made])
    scope = Filter(tenant_id="t", user_id="u", metadata={"k": wanted})
    expected = {r.id for r in made if scope.matches(r)}
    assert {r.id for r in store.list(scope).records} == expected


# -- failures and concurrency -----------------------------------------------------------------


def test_a_server_that_goes_away_raises_store_unavailable() -> None:
    if os.environ.get(POSTGRES_ENV):
        pytest.skip(f"needs a server of its own, not {POSTGRES_ENV}")
    with postgres_server() as uri:
        doomed = PostgresStore(uri, connect_timeout=2)
        doomed.bind_embedding(EMBEDDING)
    # The server is stopped and its directory deleted now.
    try:
        with pytest.raises(StoreUnavailableError, match="PostgreSQL"):
            doomed.count(Filter(tenant_id="t"))
    finally:
        doomed.close()
    with pytest.raises(StoreError, match="closed"):
        doomed.count(Filter(tenant_id="t"))


def test_many_threads_share_a_small_pool(open_pg: OpenStore) -> None:
    shared = open_pg(pool_size=3)
    shared.bind_embedding(EMBEDDING)
    errors: list[BaseException] = []

    def work(user: str) -> None:
        try:
            for i in range(15):
                shared.put([Entry(record("t", user, f"{user} fact {i}"), unit(1, i))])
                shared.search(SearchQuery(Filter(tenant_id="t", user_id=user), vector=unit(1)))
        except BaseException as exc:  # boundary: reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"user-{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert shared.count(Filter(tenant_id="t")) == 8 * 15


def test_racing_updates_of_one_version_let_exactly_one_win(open_pg: OpenStore) -> None:
    shared = open_pg(pool_size=6)
    shared.bind_embedding(EMBEDDING)
    (old,) = [record("t", "u", "v1")]
    shared.put([Entry(old, unit(1))])
    outcomes: list[str] = []
    start = threading.Barrier(6)

    def update(n: int) -> None:
        data = old.model_dump()
        data["content"]["raw"] = f"v2 from {n}"
        data["metadata"]["version"] = 2
        start.wait()
        try:
            shared.update([Change(MemoryRecord.model_validate(data), None, expected_version=1)])
            outcomes.append("won")
        except ConflictError:
            outcomes.append("conflict")

    threads = [threading.Thread(target=update, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["conflict"] * 5 + ["won"]
    history = shared.history(old.id, Filter(tenant_id="t"))
    assert [h.version for h in history] == [1, 2]


# -- word counts (the idf of the keyword half) -------------------------------------------------


def _keyword_scores(store: PostgresStore, text: str, user: str = "u") -> dict[str, float]:
    found = store.search(SearchQuery(Filter(user_id=user), text=text, candidates=20))
    return {c.id: c.keyword_score or 0.0 for c in found}


def test_a_write_of_this_process_moves_the_word_weights_at_once(store: PostgresStore) -> None:
    """The counts behind each word's idf are kept per user, and dropped when this process
    writes to a small user: a word that turns common weighs less on the next search."""
    store.put(
        [
            Entry(record("default", "u", f"filler note number {i} about the weather"), unit(1))
            for i in range(8)
        ]
    )
    (turtle,) = [record("default", "u", "We adopted a turtle")]
    store.put([Entry(turtle, unit(0, 1))])
    rare = _keyword_scores(store, "turtle")[turtle.id]
    store.put(
        [
            Entry(record("default", "u", f"turtle fact {i}: turtles live long"), unit(1))
            for i in range(8)
        ]
    )
    common = _keyword_scores(store, "turtle")[turtle.id]
    assert common < rare / 10  # in 9 of 17 memories: an idf of 1e-6 against 1.9


def test_word_counts_are_kept_only_for_their_time(postgres_uri: str, store: PostgresStore) -> None:
    """Another process's writes reach the counts when they expire; until then the weight is
    the one counted (no write of this process told it otherwise)."""
    from chatmem.stores.postgres.words import WordCounts, idf

    store.put([Entry(record("default", "u", f"a note on kayaks {i}"), unit(1)) for i in range(3)])
    store.put([Entry(record("default", "u", f"a note on canoes {i}"), unit(1)) for i in range(5)])
    counts = WordCounts(seconds=3600)
    short = WordCounts(seconds=0)
    with store._transaction() as conn:
        assert counts.weights(conn, store._memories, ("default", "u"), ["kayak"]) == [idf(8, 3)]
        assert short.weights(conn, store._memories, ("default", "u"), ["kayak"]) == [idf(8, 3)]
    other = PostgresStore(postgres_uri, prefix=store.schema)  # another writer
    try:
        other.put([Entry(record("default", "u", f"kayaks again {i}"), unit(1)) for i in range(4)])
    finally:
        other.close()
    with store._transaction() as conn:
        assert counts.weights(conn, store._memories, ("default", "u"), ["kayak"]) == [idf(8, 3)]
        assert short.weights(conn, store._memories, ("default", "u"), ["kayak"]) == [idf(12, 7)]
        counts.wrote({("default", "u"): 1})  # a user this small is counted after any write
        assert counts.weights(conn, store._memories, ("default", "u"), ["kayak"]) == [idf(12, 7)]


def test_a_big_users_counts_are_counted_again_past_the_drift(store: PostgresStore) -> None:
    """A chat appends a turn between two searches: a user's counts are counted again only
    once this process's writes pass ``DRIFT`` of the user's memories."""
    from chatmem.stores.postgres.words import DRIFT, EXACT_BELOW, WordCounts, idf

    user = ("default", "big")
    size = 300
    assert size >= EXACT_BELOW and DRIFT * size == pytest.approx(6)
    store.put(
        [
            Entry(record("default", "big", f"kayak trip {i}" if i < 30 else f"note {i}"), unit(1))
            for i in range(size)
        ]
    )
    counts = WordCounts(seconds=3600)
    with store._transaction() as conn:
        assert counts.weights(conn, store._memories, user, ["kayak"]) == [idf(300, 30)]
    store.put([Entry(record("default", "big", f"kayak paddle {i}"), unit(1)) for i in range(7)])
    with store._transaction() as conn:
        counts.wrote({user: 6})  # within the drift: the counts stay
        assert counts.weights(conn, store._memories, user, ["kayak"]) == [idf(300, 30)]
        # A word not counted yet is counted now, against the user's count as it was kept.
        assert counts.weights(conn, store._memories, user, ["paddle"]) == [idf(300, 7)]
        counts.wrote({user: 1})  # past it: counted again
        assert counts.weights(conn, store._memories, user, ["kayak"]) == [idf(307, 37)]


def test_a_word_held_by_more_memories_than_were_counted_weighs_the_least() -> None:
    """A word first counted after writes within the drift can be held by more memories than
    the user's kept count: its weight is the floor, not an error."""
    from chatmem.stores.postgres.words import IDF_FLOOR, idf

    assert idf(300, 307) == IDF_FLOOR
    assert idf(300, 0) > idf(300, 30) > IDF_FLOOR


def test_a_search_counts_the_words_it_had_not_counted(store: PostgresStore) -> None:
    """A word not counted yet is counted over all the user's rows holding it (the filter
    aside), and kept for the next search."""
    store.put(
        [Entry(record("default", "w", f"kayak outing {i}"), unit(1)) for i in range(5)]
        + [Entry(record("default", "w", f"unrelated note {i}"), unit(1)) for i in range(3)]
    )
    hidden = record("default", "w", "kayak in private", access_control={"allowed_roles": ["hr"]})
    store.put([Entry(hidden, unit(1))])
    found = store.search(
        SearchQuery(Filter(user_id="w", reader_roles=frozenset()), text="kayak", candidates=3)
    )
    assert len(found) == 3 and hidden.id not in {c.id for c in found}
    with store._transaction() as conn:
        known = store._words.known(conn, store._memories, ("default", "w"))
    assert (known.total, known.held) == (9, {"kayak": 6})
