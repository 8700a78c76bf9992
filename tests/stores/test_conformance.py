"""The store conformance suite: every backend must pass it unchanged (SPEC B5).

Vectors are 8-dimensional with known geometry, so nearest neighbours are known exactly.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chatmem.errors import (
    ConflictError,
    DimensionError,
    EmbedderMismatchError,
    NotFoundError,
    StoreError,
    ValidationError,
)
from chatmem.records import (
    MAX_RESULTS,
    EmbeddingInfo,
    Entry,
    Filter,
    HistoryEvent,
    MemoryRecord,
    MemoryType,
    Scope,
    Vector,
)
from chatmem.stores import Change, MemoryStore, SearchQuery, Usage
from chatmem.stores.base import Head, heads_of
from tests.stores.conftest import DIM, EMBEDDING, StoreFactory
from tests.stores.helpers import record, unit_vector

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def unit(*weights: float) -> Vector:
    """A unit vector of the suite's dimension; its first components are ``weights``."""
    return unit_vector(DIM, *weights)


def put(store: MemoryStore, *pairs: tuple[MemoryRecord, Vector]) -> list[MemoryRecord]:
    store.put([Entry(r, v) for r, v in pairs])
    return [r for r, _ in pairs]


def ids(records: list[MemoryRecord]) -> list[str]:
    return [r.id for r in records]


# -- put and get ------------------------------------------------------------------------------


def test_put_then_get_round_trips_every_field(store: MemoryStore, tenant: str) -> None:
    original = record(
        tenant,
        "alice",
        "Budget for the Hawaii trip is $10,000",
        agent_id="planner",
        project_id="travel",
        session_id="s1",
        type=MemoryType.PREFERENCE,
        scope=Scope.SHARED,
        content={
            "raw": "Budget for the Hawaii trip is $10,000",
            "summary": "budget $10k",
            "structured": {"amount": 10000, "currency": "USD"},
        },
        metadata={"importance": 0.9, "confidence": 0.8, "tags": ["travel", "money"]},
        time={"created_at": T0, "updated_at": T0, "valid_from": T0},
        relations=[{"type": "related_to", "target_id": "other"}],
        access_control={
            "visibility": "shared",
            "allowed_users": ["bob"],
            "allowed_roles": ["admin"],
        },
        provenance=["msg-1", "msg-2"],
        user_metadata={"dia_id": "D1:3", "nested": {"a": [1, 2.5, None, True]}, "n": 3},
        context={"speaker": "Alice", "before": "Bob: previous turn", "after": None},
        embedding=EMBEDDING,
    )
    put(store, (original, unit(1)))
    assert store.get([original.id], Filter(tenant_id=tenant)) == [original]


def test_get_returns_records_in_the_order_asked(store: MemoryStore, tenant: str) -> None:
    a, b, c = put(
        store,
        (record(tenant, "u", "a"), unit(1)),
        (record(tenant, "u", "b"), unit(2)),
        (record(tenant, "u", "c"), unit(3)),
    )
    got = store.get([c.id, "missing", a.id, b.id], Filter(tenant_id=tenant))
    assert ids(got) == [c.id, a.id, b.id]


def test_get_never_crosses_tenant_or_user(store: MemoryStore, tenant: str) -> None:
    (mine,) = put(store, (record(tenant, "alice", "secret"), unit(1)))
    assert store.get([mine.id], Filter(tenant_id=tenant, user_id="bob")) == []
    assert store.get([mine.id], Filter(tenant_id=tenant + "-other")) == []
    assert ids(store.get([mine.id], Filter(tenant_id=tenant, user_id="alice"))) == [mine.id]


def test_heads_give_what_ranking_reads_within_scope_as_get_would(
    store: MemoryStore, tenant: str
) -> None:
    """``heads`` reads what a search ranks by (speaker, text, importance, times, whether
    roles restrict it) without parsing records, and only where ``get`` would return the
    memory: the same scope, restricted memories and all; each field as ``get`` gives it."""
    text = 'Caroline said "hi" \\ ünïcode, on 8 May 2023'
    spoken, plain, hidden = put(
        store,
        (
            record(
                tenant,
                "u",
                text,
                context={"speaker": "Caroline", "before": "x"},
                metadata={"importance": 0.85},
                time={
                    "created_at": datetime(2023, 5, 8, 13, 56, 0, 123000, tzinfo=UTC),
                    "valid_from": datetime(2023, 5, 1, tzinfo=UTC),
                    "valid_to": datetime(2024, 2, 29, 23, 59, 59, 999000, tzinfo=UTC),
                },
            ),
            unit(1),
        ),
        (record(tenant, "u", "no speaker here", metadata={"importance": 1}), unit(2)),
        (record(tenant, "u", "for hr", access_control={"allowed_roles": ["hr"]}), unit(3)),
    )
    every = [spoken.id, plain.id, hidden.id, "missing"]
    for scope in (
        Filter(tenant_id=tenant, user_id="u"),
        Filter(tenant_id=tenant, user_id="u", reader_roles=frozenset()),
        Filter(tenant_id=tenant, user_id="other"),
    ):
        assert store.heads(every, scope) == heads_of(store.get(every, scope))
    heads = store.heads(every, Filter(tenant_id=tenant, user_id="u"))
    assert heads[spoken.id] == Head(
        "Caroline",
        text,
        0.85,
        datetime(2023, 5, 8, 13, 56, 0, 123000, tzinfo=UTC),
        datetime(2023, 5, 1, tzinfo=UTC),
        datetime(2024, 2, 29, 23, 59, 59, 999000, tzinfo=UTC),
        False,
    )
    assert heads[plain.id][:3] == (None, "no speaker here", 1.0) and heads[plain.id][4:6] == (
        None,
        None,
    )
    assert heads[hidden.id].restricted and not heads[plain.id].restricted
    assert hidden.id not in store.heads(every, Filter(tenant_id=tenant, reader_roles=frozenset()))
    assert store.heads([], Filter(tenant_id=tenant)) == {}


#: Texts a read must give back exactly: control characters (SQLite's reads join records
#: with one), a line separator, quotes and backslashes, and text beyond ASCII. (A NUL is
#: refused by PostgreSQL, as a ValidationError; tests/stores/test_sqlite_reads.py has it.)
ODD_TEXTS = ("a\x1eb\x1fc", "line\u2028sep", 'quote " and \\ back', "😀 ünï")


def test_get_and_heads_give_back_every_character_as_stored(store: MemoryStore, tenant: str) -> None:
    stored = put(
        store,
        *(
            (record(tenant, "u", text, context={"speaker": f"{text} speaker"}), unit(n + 1))
            for n, text in enumerate(ODD_TEXTS)
        ),
    )
    every = ids(stored)
    scope = Filter(tenant_id=tenant, user_id="u")
    assert [r.text for r in store.get(every, scope)] == list(ODD_TEXTS)
    assert store.get(every, scope) == stored
    assert store.heads(every, scope) == heads_of(stored)
    assert [store.heads(every, scope)[r.id][:2] for r in stored] == [
        (f"{text} speaker", text) for text in ODD_TEXTS
    ]


def test_put_is_atomic_when_an_id_already_exists(store: MemoryStore, tenant: str) -> None:
    (first,) = put(store, (record(tenant, "u", "first"), unit(1)))
    fresh = record(tenant, "u", "fresh")
    clash = record(tenant, "u", "clash", id=first.id)
    with pytest.raises(ValidationError):
        store.put([Entry(fresh, unit(2)), Entry(clash, unit(3))])
    assert store.get([fresh.id], Filter(tenant_id=tenant)) == []
    assert store.get([first.id], Filter(tenant_id=tenant))[0].text == "first"


def test_put_rejects_a_vector_of_the_wrong_dimension(store: MemoryStore, tenant: str) -> None:
    good = record(tenant, "u", "good")
    bad = record(tenant, "u", "bad")
    wrong = np.ones(DIM + 1, dtype=np.float32)
    with pytest.raises(DimensionError):
        store.put([Entry(good, unit(1)), Entry(bad, wrong)])
    assert store.count(Filter(tenant_id=tenant)) == 0


def test_put_rejects_duplicate_ids_in_one_batch(store: MemoryStore, tenant: str) -> None:
    one = record(tenant, "u", "one")
    with pytest.raises(ValidationError):
        store.put([Entry(one, unit(1)), Entry(one, unit(2))])
    assert store.count(Filter(tenant_id=tenant)) == 0


# -- search -----------------------------------------------------------------------------------


def test_vector_search_ranks_by_cosine_within_one_user(store: MemoryStore, tenant: str) -> None:
    near, middle, far = put(
        store,
        (record(tenant, "alice", "near"), unit(1, 0.1)),
        (record(tenant, "alice", "middle"), unit(1, 1)),
        (record(tenant, "alice", "far"), unit(0, 1)),
    )
    put(store, (record(tenant, "bob", "bob's exact match"), unit(1)))
    put(store, (record(tenant + "-x", "alice", "other tenant's exact"), unit(1)))
    found = store.search(
        SearchQuery(Filter(tenant_id=tenant, user_id="alice"), vector=unit(1), candidates=10)
    )
    ranked = sorted(found, key=lambda c: -(c.vector_score or 0))
    assert [c.id for c in ranked] == [near.id, middle.id, far.id]
    assert all(c.keyword_score is None for c in found)
    assert ranked[0].vector_score == pytest.approx(float(unit(1) @ unit(1, 0.1)), abs=1e-4)
    assert ranked[2].vector_score == pytest.approx(0.0, abs=1e-4)


def test_vector_search_returns_at_most_the_candidates_asked(
    store: MemoryStore, tenant: str
) -> None:
    put(store, *[(record(tenant, "u", f"m{i}"), unit(1, i / 10)) for i in range(12)])
    found = store.search(
        SearchQuery(Filter(tenant_id=tenant, user_id="u"), vector=unit(1), candidates=5)
    )
    assert len(found) == 5
    assert min(c.vector_score or 0 for c in found) >= float(unit(1) @ unit(1, 0.4)) - 1e-4


def test_keyword_search_matches_stemmed_words_of_one_user(store: MemoryStore, tenant: str) -> None:
    if not store.capabilities.keyword_search:
        pytest.skip("backend has no keyword search")
    hiking, _ = put(
        store,
        (record(tenant, "alice", "I went hiking in the Alps last summer"), unit(1)),
        (record(tenant, "alice", "My favourite food is ramen"), unit(2)),
    )
    put(store, (record(tenant, "bob", "Bob hikes every weekend in the Alps"), unit(1)))
    found = store.search(
        SearchQuery(Filter(tenant_id=tenant, user_id="alice"), text="Where does she hike?")
    )
    assert [c.id for c in found] == [hiking.id]
    assert found[0].keyword_score is not None and found[0].keyword_score > 0
    assert found[0].vector_score is None


def test_a_rare_word_outweighs_one_most_memories_hold(store: MemoryStore, tenant: str) -> None:
    """Words weigh by how few of the user's memories hold them (BM25's idf): the user's
    own name, in most memories, tells nothing apart. Without idf, the short memories that
    hold only the name outrank the longer one holding the rare word."""
    if not store.capabilities.keyword_search:
        pytest.skip("backend has no keyword search")
    common = [f"Caroline smiled {word}." for word in ("today", "again", "twice", "once")]
    put(store, *[(record(tenant, "u", text), unit(1, i / 10)) for i, text in enumerate(common)])
    (rare,) = put(
        store,
        (
            record(tenant, "u", "Yesterday afternoon we adopted a small turtle from the shelter"),
            unit(0, 1),
        ),
    )
    found = store.search(
        SearchQuery(Filter(tenant_id=tenant, user_id="u"), text="Caroline turtle", candidates=5)
    )
    ranked = sorted(found, key=lambda c: -(c.keyword_score or 0.0))
    assert ranked[0].id == rare.id
    # Strictly first: Milvus and Qdrant count idf over the whole collection (other tests'
    # memories too), so the margin is theirs to set.
    # (PostgreSQL leaves out the rows that hold only the name: they would score next to 0.)
    others = [c.keyword_score or 0.0 for c in ranked[1:]]
    assert (ranked[0].keyword_score or 0.0) > max(others, default=0.0)


def test_keyword_finds_carry_their_cosine_too(store: MemoryStore, tenant: str) -> None:
    if not store.capabilities.keyword_search:
        pytest.skip("backend has no keyword search")
    put(store, *[(record(tenant, "u", f"filler {i}"), unit(1, i / 100)) for i in range(6)])
    (worded,) = put(store, (record(tenant, "u", "a note about kayaking"), unit(0, 0, 1)))
    found = store.search(
        SearchQuery(
            Filter(tenant_id=tenant, user_id="u"), vector=unit(1), text="kayaking", candidates=3
        )
    )
    by_id = {c.id: c for c in found}
    assert len(found) == 4 and by_id[worded.id].keyword_score is not None
    assert by_id[worded.id].vector_score == pytest.approx(0.0, abs=1e-4)
    assert all(c.vector_score is not None for c in found)


def test_keyword_search_with_only_stop_words_finds_nothing(store: MemoryStore, tenant: str) -> None:
    put(store, (record(tenant, "u", "what is it"), unit(1)))
    found = store.search(SearchQuery(Filter(tenant_id=tenant, user_id="u"), text="what is it?"))
    assert found == []


def test_keyword_search_survives_query_syntax(store: MemoryStore, tenant: str) -> None:
    if not store.capabilities.keyword_search:
        pytest.skip("backend has no keyword search")
    (quoted,) = put(store, (record(tenant, "u", 'He said "NEAR" AND OR (x) * ^'), unit(1)))
    found = store.search(
        SearchQuery(Filter(tenant_id=tenant, user_id="u"), text='"NEAR" AND OR (x) * ^ -')
    )
    assert [c.id for c in found] == [quoted.id]


def test_search_without_a_user_is_refused(store: MemoryStore, tenant: str) -> None:
    with pytest.raises(ValidationError):
        store.search(SearchQuery(Filter(tenant_id=tenant), vector=unit(1)))


def test_search_with_a_wrong_dimension_is_refused(store: MemoryStore, tenant: str) -> None:
    with pytest.raises(DimensionError):
        store.search(
            SearchQuery(Filter(tenant_id=tenant, user_id="u"), vector=np.ones(3, np.float32))
        )


def _filter_fixture(store: MemoryStore, tenant: str) -> list[MemoryRecord]:
    rows = []
    for i in range(12):
        rows.append(
            (
                record(
                    tenant,
                    "u",
                    f"note {i} about gardening",
                    type=[MemoryType.SEMANTIC, MemoryType.EPISODIC, MemoryType.PREFERENCE][i % 3],
                    scope=Scope.SHARED if i % 4 == 0 else Scope.PRIVATE,
                    session_id=f"s{i % 2}",
                    agent_id="a" if i < 6 else None,
                    project_id="p" if i % 5 == 0 else None,
                    time={
                        "created_at": T0 + timedelta(days=i),
                        "updated_at": T0 + timedelta(days=i),
                        "valid_from": T0 + timedelta(days=i) if i % 2 else None,
                        "valid_to": T0 + timedelta(days=i + 3) if i % 3 == 0 else None,
                    },
                    user_metadata={
                        "lang": "en" if i % 2 else "fr",
                        "rank": i % 4,
                        "flag": i % 3 == 0,
                        # A look-alike of the roles field, which must not count as one.
                        **({"allowed_roles": "hr"} if i % 3 == 2 else {}),
                    },
                    access_control={"allowed_roles": ROLES[i % len(ROLES)]},
                ),
                unit(1, i / 12),
            )
        )
    return put(store, *rows)


#: The roles of the filter fixture's memories, by turn: open, one role, two roles.
ROLES: list[list[str]] = [[], ["hr"], [], ["hr", "legal"], ["ops"]]

FILTERS: list[dict[str, Any]] = [
    {},
    {"reader_roles": frozenset()},
    {"reader_roles": frozenset({"hr"})},
    {"reader_roles": frozenset({"legal", "sales"})},
    {"reader_roles": frozenset({"ops"}), "types": frozenset({MemoryType.EPISODIC})},
    {"reader_roles": frozenset({"hr"}), "metadata": {"lang": "fr"}},
    {"types": frozenset({MemoryType.EPISODIC})},
    {"types": frozenset({MemoryType.SEMANTIC, MemoryType.PREFERENCE}), "session_id": "s1"},
    {"scopes": frozenset({Scope.SHARED})},
    {"agent_id": "a", "project_id": "p"},
    {"created_after": T0 + timedelta(days=3), "created_before": T0 + timedelta(days=8)},
    {"valid_at": T0 + timedelta(days=4)},
    # As of day 4: said by then and not yet ended (the note of day 0 ended on day 3).
    {"known_at": T0 + timedelta(days=4)},
    {"known_at": T0 + timedelta(days=7, hours=12), "valid_at": T0 + timedelta(days=2)},
    {"metadata": {"lang": "fr"}},
    {"metadata": {"rank": 2, "lang": "fr"}},
    {"metadata": {"flag": True}},
    {"metadata": {"missing": None}},
    {"metadata": {"lang": "de"}},
]


@pytest.mark.parametrize("narrow", FILTERS, ids=[str(sorted(f)) for f in FILTERS])
def test_filters_agree_with_the_reference_semantics(
    store: MemoryStore, tenant: str, narrow: dict[str, Any]
) -> None:
    records = _filter_fixture(store, tenant)
    scope = Filter(tenant_id=tenant, user_id="u", **narrow)
    expected = {r.id for r in records if scope.matches(r)}
    assert {r.id for r in store.list(scope, limit=100).records} == expected
    assert store.count(scope) == len(expected)
    found = store.search(SearchQuery(scope, vector=unit(1), text="gardening", candidates=50))
    assert {c.id for c in found} == expected
    assert all(c.vector_score is not None for c in found)
    if store.capabilities.keyword_search:
        assert {c.id for c in found if c.keyword_score is not None} == expected
    # Reads by id apply the whole filter too (a store may ask its engine for the ids alone).
    ids = [r.id for r in records]
    assert [r.id for r in store.get(ids, scope)] == [i for i in ids if i in expected]
    assert set(store.vectors(ids, scope)) == expected
    assert set(store.heads(ids, scope)) == expected


# -- update, delete, history ------------------------------------------------------------------


def _next_version(old: MemoryRecord, text: str) -> MemoryRecord:
    data = old.model_dump()
    data["content"]["raw"] = text
    data["metadata"]["version"] = old.metadata.version + 1
    return MemoryRecord.model_validate(data)


def test_update_replaces_the_record_and_keeps_history(store: MemoryStore, tenant: str) -> None:
    (old,) = put(store, (record(tenant, "u", "budget is $10,000"), unit(1)))
    new = _next_version(old, "budget is $12,000")
    store.update([Change(new, unit(0, 1), expected_version=1, reason="user corrected it")])
    assert store.get([old.id], Filter(tenant_id=tenant)) == [new]
    history = store.history(old.id, Filter(tenant_id=tenant))
    assert [(h.event, h.version) for h in history] == [
        (HistoryEvent.ADD, 1),
        (HistoryEvent.UPDATE, 2),
    ]
    assert history[1].old == old and history[1].new == new
    assert history[1].reason == "user corrected it"
    found = store.search(SearchQuery(Filter(tenant_id=tenant, user_id="u"), vector=unit(0, 1)))
    assert found[0].vector_score == pytest.approx(1.0, abs=1e-4)


def test_update_with_a_stale_version_conflicts(store: MemoryStore, tenant: str) -> None:
    (old,) = put(store, (record(tenant, "u", "v1"), unit(1)))
    store.update([Change(_next_version(old, "v2"), None, expected_version=1)])
    with pytest.raises(ConflictError):
        store.update([Change(_next_version(old, "v2 again"), None, expected_version=1)])
    assert store.get([old.id], Filter(tenant_id=tenant))[0].text == "v2"


def test_update_is_atomic_across_a_batch(store: MemoryStore, tenant: str) -> None:
    a, b = put(store, (record(tenant, "u", "a1"), unit(1)), (record(tenant, "u", "b1"), unit(2)))
    ghost = record(tenant, "u", "ghost")
    with pytest.raises(NotFoundError):
        store.update(
            [
                Change(_next_version(a, "a2"), None, expected_version=1),
                Change(_next_version(ghost, "g2"), None, expected_version=1),
            ]
        )
    assert [r.text for r in store.get([a.id, b.id], Filter(tenant_id=tenant))] == ["a1", "b1"]


def test_update_cannot_move_a_memory_to_another_user(store: MemoryStore, tenant: str) -> None:
    (old,) = put(store, (record(tenant, "alice", "mine"), unit(1)))
    stolen = _next_version(old, "mine").model_copy(update={"user_id": "mallory"})
    with pytest.raises(NotFoundError):
        store.update([Change(stolen, None, expected_version=1)])
    assert store.get([old.id], Filter(tenant_id=tenant))[0].user_id == "alice"


def test_delete_by_filter_removes_only_what_matches(store: MemoryStore, tenant: str) -> None:
    a1, a2 = put(
        store,
        (record(tenant, "alice", "a1", session_id="s1"), unit(1)),
        (record(tenant, "alice", "a2", session_id="s2"), unit(1)),
    )
    (b1,) = put(store, (record(tenant, "bob", "b1", session_id="s1"), unit(1)))
    removed = store.delete(Filter(tenant_id=tenant, user_id="alice", session_id="s1"), "ended")
    assert removed == [a1.id]
    left = store.list(Filter(tenant_id=tenant)).records
    assert sorted(ids(left)) == sorted([a2.id, b1.id])
    history = store.history(a1.id, Filter(tenant_id=tenant))
    assert history[-1].event == HistoryEvent.DELETE and history[-1].reason == "ended"
    found = store.search(SearchQuery(Filter(tenant_id=tenant, user_id="alice"), vector=unit(1)))
    assert [c.id for c in found] == [a2.id]


def test_delete_a_whole_tenant_leaves_other_tenants(store: MemoryStore, tenant: str) -> None:
    put(store, (record(tenant, "u", "x"), unit(1)), (record(tenant, "v", "y"), unit(1)))
    (kept,) = put(store, (record(tenant + "-2", "u", "z"), unit(1)))
    assert len(store.delete(Filter(tenant_id=tenant))) == 2
    assert store.count(Filter(tenant_id=tenant)) == 0
    assert ids(store.list(Filter(tenant_id=tenant + "-2")).records) == [kept.id]


def test_history_is_scoped(store: MemoryStore, tenant: str) -> None:
    (mine,) = put(store, (record(tenant, "alice", "mine"), unit(1)))
    assert store.history(mine.id, Filter(tenant_id=tenant, user_id="bob")) == []
    assert store.history(mine.id, Filter(tenant_id=tenant + "-x")) == []
    assert len(store.history(mine.id, Filter(tenant_id=tenant, user_id="alice"))) == 1


# -- touch (usage-only writes) -----------------------------------------------------------------


def test_touch_adds_counts_and_keeps_the_later_access(store: MemoryStore, tenant: str) -> None:
    (one,) = put(store, (record(tenant, "u", "tea", time={"updated_at": T0}), unit(1)))
    scope = Filter(tenant_id=tenant, user_id="u")
    later, earlier = T0 + timedelta(days=2), T0 + timedelta(days=1)
    assert store.get([one.id], scope) == [one]  # a cache in front must not serve it stale
    assert store.touch([Usage(one.id, 2, later)], scope) == [one.id]
    assert store.touch([Usage(one.id, 3, earlier)], scope) == [one.id]
    (stored,) = store.get([one.id], scope)
    assert (stored.access_count, stored.time.last_accessed) == (5, later)
    assert stored.time.updated_at == T0 and stored.text == "tea"


def test_touch_keeps_the_version_history_and_index(store: MemoryStore, tenant: str) -> None:
    (one,) = put(store, (record(tenant, "u", "tea at breakfast"), unit(1)))
    scope = Filter(tenant_id=tenant, user_id="u")
    store.touch([Usage(one.id, 1, T0)], scope)
    (stored,) = store.get([one.id], scope)
    assert stored.metadata.version == 1 and stored.access_count == 1
    assert [h.event for h in store.history(one.id, scope)] == [HistoryEvent.ADD]
    store.update([Change(_next_version(stored, "tea at lunch"), None, expected_version=1)])
    assert store.get([one.id], scope)[0].access_count == 1  # the use survives an edit
    found = store.search(SearchQuery(scope, vector=unit(1), text="lunch"))
    keyword = store.capabilities.keyword_search  # the edited text is what the index finds
    assert [(c.id, c.keyword_score is not None) for c in found] == [(one.id, keyword)]


def test_touch_sets_the_decay_score(store: MemoryStore, tenant: str) -> None:
    (one,) = put(store, (record(tenant, "u", "tea", time={"last_accessed": T0}), unit(1)))
    scope = Filter(tenant_id=tenant, user_id="u")
    assert store.touch([Usage(one.id, decay_score=0.25)], scope) == [one.id]
    (stored,) = store.get([one.id], scope)
    assert stored.time.decay_score == 0.25
    assert (stored.access_count, stored.time.last_accessed) == (0, T0)


def test_touch_never_crosses_users_and_skips_missing_ids(store: MemoryStore, tenant: str) -> None:
    mine, bobs = put(
        store, (record(tenant, "alice", "mine"), unit(1)), (record(tenant, "bob", "his"), unit(1))
    )
    scope = Filter(tenant_id=tenant, user_id="alice")
    uses = [Usage(i, 1, T0, 0.5) for i in (bobs.id, "no-such-id", mine.id)]
    assert store.touch(uses, scope) == [mine.id]
    assert store.touch(uses, Filter(tenant_id=tenant + "-x", user_id="bob")) == []
    assert store.get([bobs.id], Filter(tenant_id=tenant)) == [bobs]
    assert store.get([mine.id], scope)[0].access_count == 1
    with pytest.raises(ValidationError):
        store.touch(uses, Filter(tenant_id=tenant))


def test_touch_with_no_uses_writes_nothing(store: MemoryStore, tenant: str) -> None:
    (one,) = put(store, (record(tenant, "u", "tea"), unit(1)))
    assert store.touch([], Filter(tenant_id=tenant, user_id="u")) == []
    assert store.get([one.id], Filter(tenant_id=tenant)) == [one]


# -- list and vectors -------------------------------------------------------------------------


def test_list_pages_cover_everything_once_oldest_first(store: MemoryStore, tenant: str) -> None:
    made = put(
        store,
        *[
            (
                record(
                    tenant,
                    "u",
                    f"m{i}",
                    time={"created_at": T0 + timedelta(minutes=i % 7), "updated_at": T0},
                ),
                unit(1),
            )
            for i in range(23)
        ],
    )
    seen: list[MemoryRecord] = []
    cursor = None
    while True:
        page = store.list(Filter(tenant_id=tenant, user_id="u"), limit=5, cursor=cursor)
        assert len(page.records) <= 5
        seen.extend(page.records)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(ids(seen)) == sorted(ids(made))
    assert len(seen) == len(made)
    times = [r.time.created_at for r in seen]
    assert times == sorted(times)


def test_list_rejects_a_foreign_cursor(store: MemoryStore, tenant: str) -> None:
    with pytest.raises(ValidationError):
        store.list(Filter(tenant_id=tenant), limit=5, cursor="not-a-cursor")


def test_vectors_round_trip(store: MemoryStore, tenant: str) -> None:
    vector = unit(0.3, -0.2, 0.9)
    (stored,) = put(store, (record(tenant, "u", "x"), vector))
    got = store.vectors([stored.id], Filter(tenant_id=tenant))
    np.testing.assert_allclose(got[stored.id], vector, atol=1e-6)
    assert store.vectors([stored.id], Filter(tenant_id=tenant, user_id="other")) == {}


# -- opening ----------------------------------------------------------------------------------


def test_reopened_store_keeps_data_and_refuses_another_embedding(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    first = make_store(tmp_path)
    first.bind_embedding(EMBEDDING)
    (kept,) = put(first, (record("t", "u", "durable"), unit(1)))
    first.close()
    again = make_store(tmp_path)
    try:
        assert again.embedding == EMBEDDING
        again.bind_embedding(EMBEDDING)
        assert ids(again.get([kept.id], Filter(tenant_id="t"))) == [kept.id]
        with pytest.raises(EmbedderMismatchError):
            again.bind_embedding(EmbeddingInfo(model="other", dimension=DIM))
        with pytest.raises(EmbedderMismatchError):
            again.bind_embedding(EmbeddingInfo(model=EMBEDDING.model, dimension=DIM * 2))
    finally:
        again.close()


def test_sub_millisecond_bounds_agree_with_the_reference(store: MemoryStore, tenant: str) -> None:
    (made,) = put(
        store, (record(tenant, "u", "x", time={"created_at": T0, "updated_at": T0}), unit(1))
    )
    for bound in (T0 + timedelta(microseconds=500), T0 - timedelta(microseconds=500)):
        for field in ("created_after", "created_before"):
            scope = Filter(tenant_id=tenant, user_id="u", **{field: bound})
            expected = [made.id] if scope.matches(made) else []
            assert ids(store.list(scope).records) == expected, (field, bound)


# -- closing (issue 20: a closed store never crashes) -----------------------------------------


def test_a_closed_store_refuses_every_call_with_store_error(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    opened = make_store(tmp_path)
    opened.bind_embedding(EMBEDDING)
    (kept,) = put(opened, (record("t", "u", "kept before close"), unit(1)))
    scope = Filter(tenant_id="t", user_id="u")
    opened.close()
    calls = {
        "get": lambda: opened.get([kept.id], scope),
        "search": lambda: opened.search(SearchQuery(filter=scope, vector=unit(1), text="kept")),
        "put": lambda: opened.put([Entry(record("t", "u", "after close"), unit(2))]),
        "list": lambda: opened.list(scope),
        "count": lambda: opened.count(scope),
        "history": lambda: opened.history(kept.id, scope),
        "delete": lambda: opened.delete(scope),
    }
    refused = []
    for name, call in calls.items():
        with pytest.raises(StoreError):
            call()
        refused.append(name)
    assert refused == list(calls)
    opened.close()  # closing twice is harmless


def test_a_page_or_k_past_the_most_one_read_returns_is_refused(
    store: MemoryStore, tenant: str
) -> None:
    """A limit past 64 bits overflowed SQLite's integers (a 500, a traceback); every store
    refuses a page past ``MAX_RESULTS`` by name, and so does the library's search."""
    scope = Filter(tenant_id=tenant, user_id="u")
    for limit in (0, MAX_RESULTS + 1, 2**64):
        with pytest.raises(ValidationError) as raised:
            store.list(scope, limit)
        assert raised.value.field == "limit"
    assert store.list(scope, MAX_RESULTS).records == []
