"""Qdrant-specific behaviour, on qdrant-client's local mode (its Python implementation of
Qdrant's API, in this process): filters, keyword weights, failure clean-up, sharing a
directory, URIs, isolation.

What every backend must do is in test_conformance.py; this file covers how the Qdrant store
does it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatmem.errors import ConfigError, StoreError, StoreUnavailableError
from chatmem.records import (
    EmbeddingInfo,
    Entry,
    Filter,
    HistoryEvent,
    MemoryRecord,
    MemoryType,
    Scope,
    Vector,
)
from chatmem.stores import SearchQuery, check_store_uri, open_store
from tests.stores.helpers import BM25_TEXTS, keyword_score_past_the_cut, record, unit_vector

pytest.importorskip("qdrant_client")

from chatmem.stores import qdrant_filters as qf  # noqa: E402 - after the importorskip
from chatmem.stores.qdrant import QdrantStore  # noqa: E402

pytestmark = pytest.mark.qdrant

DIM = 4
EMBEDDING = EmbeddingInfo(model="test-qdrant", dimension=DIM)
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def unit(*weights: float) -> Vector:
    return unit_vector(DIM, *weights)


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("qdrant")


@pytest.fixture(scope="module")
def store(directory: Path) -> Iterator[QdrantStore]:
    opened = QdrantStore(directory)
    opened.bind_embedding(EMBEDDING)
    yield opened
    opened.close()


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


# -- isolation and filters ------------------------------------------------------------------

HOSTILE_IDS = ['al"ice', "al\\ice", "line\nbreak\ttab", "sep\x1fnul\x00", "ünïcødé 🙂", "x" * 256]


def test_hostile_user_ids_round_trip_and_stay_isolated(store: QdrantStore, tenant: str) -> None:
    mine = {user: record(tenant, user, f"secret of {user!r}") for user in HOSTILE_IDS}
    store.put([Entry(r, unit(1, i)) for i, r in enumerate(mine.values())])
    for user, memory in mine.items():
        scope = Filter(tenant_id=tenant, user_id=user)
        assert store.get([r.id for r in mine.values()], scope) == [memory]
        assert store.list(scope).records == [memory]
        assert store.count(scope) == 1
        found = store.search(SearchQuery(scope, vector=unit(1), text="secret", candidates=50))
        assert [c.id for c in found] == [memory.id]
        assert found[0].vector_score is not None and found[0].keyword_score is not None
        assert [h.event for h in store.history(memory.id, scope)] == [HistoryEvent.ADD]


def test_tenant_and_user_cannot_collide_through_the_separator(
    store: QdrantStore, tenant: str
) -> None:
    # Both have the user key tenant + "\x1f" + "b\x1fc"; the tenant field tells them apart.
    first = record(tenant, "b\x1fc", "first")
    second = record(f"{tenant}\x1fb", "c", "second")
    store.put([Entry(first, unit(1)), Entry(second, unit(1))])
    assert store.list(Filter(tenant_id=tenant, user_id="b\x1fc")).records == [first]
    assert store.list(Filter(tenant_id=f"{tenant}\x1fb", user_id="c")).records == [second]


METADATA_VALUES: list[Any] = [None, True, False, 0, 1, 1.0, 1.5, 2**53 + 1, "1", "", "x", [1], {}]
ROLES: list[list[str]] = [[], ["hr"], ["hr", "legal"], ["ops"]]
moments = st.integers(min_value=-3_000_000, max_value=3_000_000).map(
    lambda us: T0 + timedelta(microseconds=us)
)


def _awkward_records(tenant: str) -> list[MemoryRecord]:
    made = []
    for i in range(40):
        metadata: dict[str, Any] = {}
        if i % 3:
            metadata["k"] = METADATA_VALUES[i % len(METADATA_VALUES)]
        if i % 4 == 0:
            metadata["other"] = i
        made.append(
            record(
                tenant,
                ["u", "v"][i % 2],
                f"awkward {i}",
                type=list(MemoryType)[i % 3],
                scope=list(Scope)[i % 3],
                session_id=[None, "s1", "s2"][i % 3],
                agent_id=[None, "a"][i % 2],
                project_id=[None, "p", "q"][i % 3],
                time={
                    "created_at": T0 + timedelta(milliseconds=(i - 20) * 150),
                    "valid_from": T0 + timedelta(milliseconds=(i - 25) * 90) if i % 2 else None,
                    "valid_to": T0 + timedelta(milliseconds=(i - 10) * 110) if i % 3 else None,
                },
                user_metadata=metadata,
                access_control={"allowed_roles": ROLES[i % len(ROLES)]},
            )
        )
    return made


@pytest.fixture(scope="module")
def awkward(store: QdrantStore) -> tuple[str, list[MemoryRecord]]:
    tenant = f"awkward-{uuid.uuid4().hex[:8]}"
    records = _awkward_records(tenant)
    store.put([Entry(r, unit(1, i)) for i, r in enumerate(records)])
    return tenant, records


filters = st.fixed_dictionaries(
    {},
    optional={
        "user_id": st.sampled_from(["u", "v", "w"]),
        "session_id": st.sampled_from(["s1", "s2"]),
        "agent_id": st.just("a"),
        "project_id": st.sampled_from(["p", "q"]),
        "types": st.frozensets(st.sampled_from(list(MemoryType)), max_size=2),
        "scopes": st.frozensets(st.sampled_from(list(Scope)), max_size=2),
        "created_after": moments,
        "created_before": moments,
        "valid_at": moments,
        "metadata": st.dictionaries(
            st.sampled_from(["k", "other", "absent"]),
            st.sampled_from([v for v in METADATA_VALUES if not isinstance(v, list | dict)]),
            max_size=2,
        ),
        "reader_roles": st.frozensets(st.sampled_from(["hr", "legal", "ops", "sales"])),
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(narrow=filters)
def test_the_filter_alone_selects_exactly_what_filter_matches_selects(
    store: QdrantStore, awkward: tuple[str, list[MemoryRecord]], narrow: dict[str, Any]
) -> None:
    tenant, records = awkward
    scope = Filter(tenant_id=tenant, **narrow)
    points, _ = store._client.scroll(  # the raw filter, bypassing the store's re-check
        "chatmem_memories", scroll_filter=qf.filter_for(scope), limit=1000, with_payload=["id"]
    )
    assert {(p.payload or {})["id"] for p in points} == {r.id for r in records if scope.matches(r)}


def test_an_empty_set_of_ids_types_or_roles_selects_accordingly(
    store: QdrantStore, awkward: tuple[str, list[MemoryRecord]]
) -> None:
    tenant, records = awkward
    assert store.count(Filter(tenant_id=tenant, ids=())) == 0
    assert store.count(Filter(tenant_id=tenant, types=frozenset())) == 0
    open_only = Filter(tenant_id=tenant, reader_roles=frozenset())
    assert store.count(open_only) == sum(not r.access_control.allowed_roles for r in records)
    assert store.count(Filter(tenant_id=tenant)) == 40


def test_a_page_boundary_inside_a_run_of_equal_times_loses_nothing(
    store: QdrantStore, tenant: str
) -> None:
    same = {"created_at": T0, "updated_at": T0}
    made = [record(tenant, "u", f"tie {i}", time=same) for i in range(7)]
    store.put([Entry(r, unit(1)) for r in made])
    seen, cursor = [], None
    while True:
        page = store.list(Filter(tenant_id=tenant, user_id="u"), limit=2, cursor=cursor)
        seen += [r.id for r in page.records]
        if (cursor := page.next_cursor) is None:
            break
    assert seen == sorted(r.id for r in made)


# -- keyword weights --------------------------------------------------------------------------


def _weights(text: str, **fields: Any) -> dict[int, float]:
    vector = qf.keyword_vector(record("t", "u", text, **fields))
    assert vector is not None
    return dict(zip(vector.indices, vector.values, strict=True))


def test_keyword_weights_follow_bm25() -> None:
    kayak = qf.term_index("kayak")
    short = _weights("kayaking")[kayak]
    long = _weights("kayaking " + " ".join(f"filler{i}" for i in range(40)))[kayak]
    repeated = _weights("kayaking kayaks kayak")[kayak]
    assert long < short < repeated < qf.BM25_K1 + 1  # length-normalised, saturating
    assert qf.keyword_vector(record("t", "u", "what is it?")) is None
    assert qf.keyword_query("what is it?") is None


def test_context_turns_weigh_less_than_the_memory_itself() -> None:
    said = {"speaker": "Ann", "before": "Bob: kayaking?", "after": "Bob: ramen"}
    weights = _weights("ramen tonight", context=said)
    # "ramen" is in the text (weight 1.0) and the next turn (0.3); "kayak" in the previous (0.5).
    assert weights[qf.term_index("ramen")] > weights[qf.term_index("kayak")]
    assert qf.term_index("bob") in weights and qf.term_index("ann") in weights


def test_a_short_memory_outranks_a_long_one_on_the_same_word(
    store: QdrantStore, tenant: str
) -> None:
    short = record(tenant, "u", "kayaking")
    long = record(tenant, "u", "kayaking and " + " ".join(f"word{i}" for i in range(30)))
    store.put([Entry(short, unit(1)), Entry(long, unit(1))])
    found = store.search(SearchQuery(Filter(tenant_id=tenant, user_id="u"), text="kayak"))
    scores = {c.id: c.keyword_score or 0.0 for c in found}
    assert scores[short.id] > scores[long.id] > 0


# -- failures ---------------------------------------------------------------------------------


@pytest.fixture
def own_store(directory: Path) -> Iterator[QdrantStore]:
    """A store with collections of its own, for tests that break them on purpose."""
    opened = QdrantStore(directory, collection_prefix=f"own_{uuid.uuid4().hex[:8]}")
    opened.bind_embedding(EMBEDDING)
    yield opened
    opened.close()


def test_a_put_whose_history_write_fails_leaves_no_memory(own_store: QdrantStore) -> None:
    own_store._client.delete_collection(own_store._history)  # the next history write fails
    memory = record("t", "u", "never half-written")
    with pytest.raises(StoreError):
        own_store.put([Entry(memory, unit(1))])
    assert own_store.get([memory.id], Filter(tenant_id="t")) == []


def test_an_update_whose_history_write_fails_restores_the_record(own_store: QdrantStore) -> None:
    old = record("t", "u", "v1")
    own_store.put([Entry(old, unit(1))])
    own_store._client.delete_collection(own_store._history)
    data = old.model_dump()
    data["content"]["raw"], data["metadata"]["version"] = "v2", 2
    from chatmem.stores import Change

    with pytest.raises(StoreError):
        own_store.update([Change(MemoryRecord.model_validate(data), unit(0, 1), 1)])
    assert own_store.get([old.id], Filter(tenant_id="t")) == [old]
    found = own_store.search(SearchQuery(Filter(tenant_id="t", user_id="u"), vector=unit(1)))
    assert found[0].vector_score == pytest.approx(1.0, abs=1e-4)


def test_a_server_that_does_not_answer_is_unavailable() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(StoreUnavailableError):
        QdrantStore(f"http://127.0.0.1:{port}", timeout=2)


# -- one directory, several stores --------------------------------------------------------------

_OPEN_ELSEWHERE = """
import sys
from chatmem.errors import StoreUnavailableError
from chatmem.stores.qdrant import QdrantStore
try:
    QdrantStore(sys.argv[1]).close()
except StoreUnavailableError:
    sys.exit(3)
"""


def _open_in_another_process(path: Path) -> int:
    return subprocess.run(
        [sys.executable, "-c", _OPEN_ELSEWHERE, str(path)], timeout=120, check=False
    ).returncode


def test_stores_of_one_process_share_a_directory_that_others_cannot_open(tmp_path: Path) -> None:
    first, second = QdrantStore(tmp_path), QdrantStore(tmp_path)
    try:
        first.bind_embedding(EMBEDDING)
        memory = record("t", "u", "shared")
        first.put([Entry(memory, unit(1))])
        assert second.get([memory.id], Filter(tenant_id="t")) == [memory]
        first.close()
        assert second.count(Filter(tenant_id="t")) == 1  # still open for the other store
        assert _open_in_another_process(tmp_path) == 3
    finally:
        first.close()
        second.close()
    assert _open_in_another_process(tmp_path) == 0


def test_threads_may_write_and_search_at_once(store: QdrantStore, tenant: str) -> None:
    failures: list[BaseException] = []

    def work(user: str) -> None:
        try:
            for i in range(10):
                store.put([Entry(record(tenant, user, f"note {i} about tea"), unit(1, i))])
                scope = Filter(tenant_id=tenant, user_id=user)
                store.search(SearchQuery(scope, vector=unit(1), text="tea"))
        except BaseException as exc:  # boundary: reported below, in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(f"user{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    assert store.count(Filter(tenant_id=tenant)) == 40


# -- URIs -------------------------------------------------------------------------------------


def test_store_uris_open_local_mode_and_name_servers(tmp_path: Path) -> None:
    for uri in (f"qdrant+local:///{tmp_path}/a?prefix=mine", f"qdrant:///{tmp_path}/b"):
        assert check_store_uri(uri) is not None
        opened = open_store(uri)
        try:
            assert isinstance(opened, QdrantStore) and not opened.remote
        finally:
            opened.close()
    assert (tmp_path / "a" / "collection" / "mine_meta").exists()
    assert check_store_uri("qdrant://db.internal:6333/chatmem") is None
    assert check_store_uri("qdrant+https://db.internal:6333/chatmem") is None
    with pytest.raises(ConfigError):
        check_store_uri("qdrant+local://host/dir")  # local mode names a path, not a host
    with pytest.raises(ConfigError):
        open_store("qdrant://127.0.0.1:6333/bad prefix!")


# -- isolation under any sequence of operations (SPEC L7) ----------------------------------------


def test_no_memory_crosses_tenants_or_users(embedder: Any) -> None:
    from tests.test_isolation import isolation_machine

    machine = isolation_machine(lambda path: QdrantStore(path / "qdrant"), embedder)
    machine.TestCase.settings = settings(
        max_examples=8,
        stateful_step_count=20,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    machine.TestCase().runTest()


def test_a_vector_find_keeps_a_strong_keyword_score_past_the_keyword_best(
    own_store: QdrantStore,
) -> None:
    keyword_score_past_the_cut(own_store.put, own_store, BM25_TEXTS)
