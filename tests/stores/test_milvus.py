"""Milvus-specific behaviour, on a real Milvus Lite: expressions, schema, reopening, BM25.

What every backend must do is in test_conformance.py; this file covers how the Milvus store
does it. Stores here share one Lite directory per module (each test uses its own tenant or
collection prefix), since starting Lite costs most of a test's time.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatmem.errors import (
    ConfigError,
    ConflictError,
    EmbedderMismatchError,
    StoreError,
    StoreUnavailableError,
    ValidationError,
)
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
from chatmem.stores import Change, SearchQuery
from tests.stores.helpers import record, unit_vector

pytest.importorskip("pymilvus")

from chatmem.stores.milvus import (  # noqa: E402
    MAX_VARCHAR_BYTES,
    MilvusStore,
    filter_expression,
    literal,
)
from chatmem.stores.milvus import connection as milvus  # noqa: E402 - after the importorskip

pytestmark = pytest.mark.milvus

DIM = 4
EMBEDDING = EmbeddingInfo(model="test-milvus", dimension=DIM)
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def unit(*weights: float) -> Vector:
    """A unit vector of the suite's dimension; its first components are ``weights``."""
    return unit_vector(DIM, *weights)


@pytest.fixture(scope="module")
def lite_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("milvus") / "milvus.db"


@pytest.fixture(scope="module")
def store(lite_path: Path) -> Iterator[MilvusStore]:
    opened = MilvusStore(lite_path)
    opened.bind_embedding(EMBEDDING)
    yield opened
    opened.close()


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def own_store(lite_path: Path) -> Iterator[MilvusStore]:
    """A store with collections of its own, for tests that break them on purpose."""
    opened = MilvusStore(lite_path, collection_prefix=f"own_{uuid.uuid4().hex[:8]}")
    opened.bind_embedding(EMBEDDING)
    yield opened
    opened.close()


# -- expressions --------------------------------------------------------------------------


def test_literal_escapes_quotes_backslashes_and_line_breaks() -> None:
    assert literal('a"b\\c') == '"a\\"b\\\\c"'
    assert literal("x\ny\rz\tw") == '"x\\ny\\rz\\tw"'
    assert literal("'\x1f\x00") == '"\'\x1f\x00"'


HOSTILE_IDS = [
    'al"ice',
    "al\\ice",
    'al\\"ice',
    "al\\",
    '" or tenant_id != "',
    "line\nbreak\ttab\rcr",
    "sep\x1fnul\x00",
    "ünïcødé 🙂",
]


def test_hostile_user_ids_round_trip_and_stay_isolated(store: MilvusStore, tenant: str) -> None:
    mine = {user: record(tenant, user, f"secret of {user!r}") for user in HOSTILE_IDS}
    store.put([Entry(r, unit(1, i)) for i, r in enumerate(mine.values())])
    for user, memory in mine.items():
        scope = Filter(tenant_id=tenant, user_id=user)
        assert store.get(list(r.id for r in mine.values()), scope) == [memory]
        assert store.list(scope).records == [memory]
        assert store.count(scope) == 1
        found = store.search(SearchQuery(scope, vector=unit(1), text="secret", candidates=50))
        assert [c.id for c in found] == [memory.id]
        assert found[0].vector_score is not None and found[0].keyword_score is not None
        assert [h.event for h in store.history(memory.id, scope)] == [HistoryEvent.ADD]
    victim = HOSTILE_IDS[0]
    assert store.delete(Filter(tenant_id=tenant, user_id=victim)) == [mine[victim].id]
    assert store.count(Filter(tenant_id=tenant)) == len(HOSTILE_IDS) - 1


def test_a_hostile_tenant_cannot_widen_its_scope(store: MilvusStore, tenant: str) -> None:
    store.put([Entry(record(tenant, "u", "kept"), unit(1))])
    sneaky = f'{tenant}" or tenant_id != "'
    assert store.count(Filter(tenant_id=sneaky)) == 0
    assert store.delete(Filter(tenant_id=sneaky)) == []
    assert store.count(Filter(tenant_id=tenant)) == 1


def test_tenant_and_user_cannot_collide_through_the_separator(
    store: MilvusStore, tenant: str
) -> None:
    # Both have the partition key tenant + "\x1f" + "b\x1fc"; the tenant field tells them apart.
    first = record(tenant, "b\x1fc", "first")
    second = record(f"{tenant}\x1fb", "c", "second")
    store.put([Entry(first, unit(1)), Entry(second, unit(1))])
    assert store.list(Filter(tenant_id=tenant, user_id="b\x1fc")).records == [first]
    assert store.list(Filter(tenant_id=f"{tenant}\x1fb", user_id="c")).records == [second]


# The expression alone (without the store's defence-in-depth re-check) must select exactly
# what Filter.matches selects, for any filter over a fixed set of awkward records.
METADATA_VALUES: list[Any] = [None, True, False, 0, 1, 1.0, 1.5, 2**53 + 1, "1", "", "x", [1], {}]
metadata_values = st.sampled_from(METADATA_VALUES)
moments = st.integers(min_value=-3_000_000, max_value=3_000_000).map(
    lambda us: T0 + timedelta(microseconds=us)
)


def _awkward_records(tenant: str) -> list[MemoryRecord]:
    made = []
    for i in range(40):
        metadata = {}
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
            )
        )
    return made


@pytest.fixture(scope="module")
def awkward(store: MilvusStore) -> tuple[str, list[MemoryRecord]]:
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
            metadata_values.filter(lambda v: not isinstance(v, list | dict)),
            max_size=2,
        ),
    },
)


@settings(max_examples=150, deadline=None)
@given(narrow=filters)
def test_expressions_select_exactly_what_filter_matches_selects(
    store: MilvusStore, awkward: tuple[str, list[MemoryRecord]], narrow: dict[str, Any]
) -> None:
    tenant, records = awkward
    scope = Filter(tenant_id=tenant, **narrow)
    rows = store._client.query(  # the raw expression, bypassing the store's re-check
        "chatmem_memories", filter=filter_expression(scope), output_fields=["id"], limit=1000
    )
    assert {row["id"] for row in rows} == {r.id for r in records if scope.matches(r)}


def test_an_empty_set_of_ids_or_types_selects_nothing(
    store: MilvusStore, awkward: tuple[str, list[MemoryRecord]]
) -> None:
    tenant, _ = awkward
    assert store.count(Filter(tenant_id=tenant, ids=())) == 0
    assert store.count(Filter(tenant_id=tenant, types=frozenset())) == 0
    assert store.count(Filter(tenant_id=tenant)) == 40


# -- schema -----------------------------------------------------------------------------------


def _fields(store: MilvusStore, collection: str) -> dict[str, dict[str, Any]]:
    described = store._client.describe_collection(collection)
    return {field["name"]: field for field in described["fields"]}


def test_user_key_is_the_partition_key(store: MilvusStore) -> None:
    for collection in ("chatmem_memories", "chatmem_history"):
        fields = _fields(store, collection)
        partitioned = [name for name, field in fields.items() if field.get("is_partition_key")]
        assert partitioned == ["user_key"]
    described = store._client.describe_collection("chatmem_memories")
    assert described["consistency_level_name"] == "Strong"
    embedding = _fields(store, "chatmem_memories")["embedding"]
    assert int(embedding["params"]["dim"]) == DIM


def test_filtered_fields_carry_scalar_indexes(store: MilvusStore) -> None:
    indexed = set(store._client.list_indexes("chatmem_memories"))
    assert {"tenant_id", "session_id", "type", "created_at", "valid_from", "valid_to"} <= indexed
    assert {"embedding", "sparse"} <= indexed


def test_lite_is_one_process_with_keyword_search(store: MilvusStore) -> None:
    assert store.capabilities.keyword_search
    assert not store.capabilities.multi_process


def test_a_bad_collection_prefix_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        MilvusStore(tmp_path / "m.db", collection_prefix="bad-prefix")


# -- opening ----------------------------------------------------------------------------------


def test_reopening_keeps_data_and_history_and_refuses_another_dimension(tmp_path: Path) -> None:
    path = tmp_path / "reopen"  # a directory: the store keeps milvus.db inside it
    with MilvusStore(path) as first:
        first.bind_embedding(EMBEDDING)
        kept = record("t", "u", "durable fact")
        first.put([Entry(kept, unit(1))])
        newer = kept.model_copy(update={"content": kept.content.model_copy(update={"raw": "v2"})})
        first.update([Change(newer, None, expected_version=1, reason="")])
    assert (path / "milvus.db").is_dir()
    with MilvusStore(path) as again:
        assert again.embedding == EMBEDDING
        assert again.get([kept.id], Filter(tenant_id="t")) == [newer]
        history = again.history(kept.id, Filter(tenant_id="t"))
        assert [(h.event, h.reason) for h in history] == [
            (HistoryEvent.ADD, None),
            (HistoryEvent.UPDATE, ""),
        ]
        with pytest.raises(EmbedderMismatchError):
            again.bind_embedding(EmbeddingInfo(model=EMBEDDING.model, dimension=DIM + 1))
        assert again.embedding == EMBEDDING


def test_a_collection_of_another_dimension_is_refused_at_bind(lite_path: Path) -> None:
    prefix = f"dim_{uuid.uuid4().hex[:8]}"
    with MilvusStore(lite_path, collection_prefix=prefix) as first:
        first.bind_embedding(EmbeddingInfo(model="big", dimension=DIM * 2))
        first._client.delete(f"{prefix}_meta", ids=["embedding"])  # as if bind had crashed
    with MilvusStore(lite_path, collection_prefix=prefix) as again:
        assert again.embedding is None
        with pytest.raises(EmbedderMismatchError):
            again.bind_embedding(EMBEDDING)


def test_a_second_process_cannot_open_the_same_directory(
    store: MilvusStore, lite_path: Path
) -> None:
    script = (
        "import sys\n"
        "from chatmem.errors import StoreUnavailableError\n"
        "from chatmem.stores.milvus import MilvusStore\n"
        "try:\n"
        "    MilvusStore(sys.argv[1])\n"
        "except StoreUnavailableError:\n"
        "    sys.exit(3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(lite_path)], capture_output=True, timeout=120
    )
    assert done.returncode == 3, done.stderr.decode()[-2000:]


def test_an_unreachable_server_is_unavailable() -> None:
    with pytest.raises(StoreUnavailableError):
        MilvusStore("http://127.0.0.1:1", timeout=2)


def test_a_closed_store_refuses_work(lite_path: Path) -> None:
    closing = MilvusStore(lite_path)
    closing.close()
    closing.close()
    with pytest.raises(StoreError):
        closing.count(Filter())


# -- writes that Milvus cannot make atomic ------------------------------------------------------


def test_put_undoes_the_records_when_history_cannot_be_written(
    own_store: MilvusStore, tenant: str
) -> None:
    own_store._client.drop_collection(own_store._history)
    with pytest.raises(StoreError):
        own_store.put([Entry(record(tenant, "u", "half written"), unit(1))])
    assert own_store.count(Filter(tenant_id=tenant)) == 0


def test_update_restores_the_records_when_history_cannot_be_written(
    own_store: MilvusStore, tenant: str
) -> None:
    old = record(tenant, "u", "before")
    own_store.put([Entry(old, unit(1))])
    own_store._client.drop_collection(own_store._history)
    new = old.model_copy(update={"content": old.content.model_copy(update={"raw": "after"})})
    with pytest.raises(StoreError):
        own_store.update([Change(new, unit(0, 1), expected_version=1)])
    assert own_store.get([old.id], Filter(tenant_id=tenant)) == [old]
    found = own_store.search(SearchQuery(Filter(tenant_id=tenant, user_id="u"), vector=unit(1)))
    assert found[0].vector_score == pytest.approx(1.0, abs=1e-4)


def test_delete_keeps_the_records_when_history_cannot_be_written(
    own_store: MilvusStore, tenant: str
) -> None:
    own_store.put([Entry(record(tenant, "u", "stays"), unit(1))])
    own_store._client.drop_collection(own_store._history)
    with pytest.raises(StoreError):
        own_store.delete(Filter(tenant_id=tenant))
    assert own_store.count(Filter(tenant_id=tenant)) == 1


# -- sizes ----------------------------------------------------------------------------------------


def test_a_record_larger_than_a_varchar_is_stored_compressed(
    store: MilvusStore, tenant: str
) -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 700  # 31,500 characters
    big = record(
        tenant, "u", text, content={"raw": text, "summary": text}, context={"before": text}
    )
    assert len(big.model_dump_json().encode()) > MAX_VARCHAR_BYTES
    store.put([Entry(big, unit(1))])
    assert store.get([big.id], Filter(tenant_id=tenant)) == [big]
    found = store.search(SearchQuery(Filter(tenant_id=tenant, user_id="u"), text="lazy fox"))
    assert [c.id for c in found] == [big.id]


def test_a_record_too_large_even_compressed_is_refused(store: MilvusStore, tenant: str) -> None:
    rng = np.random.default_rng(7)
    noise = "".join(chr(c) for c in rng.integers(0x4E00, 0x9FFF, 30_000))
    huge = record(
        tenant, "u", noise, content={"raw": noise, "summary": noise}, context={"before": noise}
    )
    with pytest.raises(ValidationError):
        store.put([Entry(huge, unit(1))])
    assert store.count(Filter(tenant_id=tenant)) == 0


# -- keyword half -----------------------------------------------------------------------------


def test_keyword_hits_carry_positive_bm25_scores_best_first(
    store: MilvusStore, tenant: str
) -> None:
    both = record(tenant, "u", "Hiking in the Alps, then more hiking near Alpine lakes")
    one = record(tenant, "u", "A hike along the river")
    none = record(tenant, "u", "Ramen is my favourite food")
    store.put([Entry(r, unit(1)) for r in (both, one, none)])
    store.put([Entry(record(tenant, "other", "hiking hiking hiking"), unit(1))])
    found = store.search(SearchQuery(Filter(tenant_id=tenant, user_id="u"), text="hikes Alps"))
    ranked = sorted(found, key=lambda c: -(c.keyword_score or 0))
    assert [c.id for c in ranked] == [both.id, one.id]
    assert (ranked[0].keyword_score or 0) > (ranked[1].keyword_score or 0) > 0


def test_keyword_search_reads_the_context_too(store: MilvusStore, tenant: str) -> None:
    (with_context,) = [
        record(tenant, "u", "It costs $10,000", context={"before": "the Hawaii trip budget"})
    ]
    store.put([Entry(with_context, unit(1))])
    found = store.search(SearchQuery(Filter(tenant_id=tenant, user_id="u"), text="Hawaii"))
    assert [c.id for c in found] == [with_context.id]


def test_reads_past_one_query_window_use_an_iterator(
    store: MilvusStore, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = [
        record(tenant, "u", f"m{i}", time={"created_at": T0 + timedelta(seconds=i)})
        for i in range(13)
    ]
    store.put([Entry(r, unit(1)) for r in made])
    monkeypatch.setattr(milvus, "QUERY_WINDOW", 4)
    monkeypatch.setattr(milvus, "SCAN_BATCH", 3)
    page = store.list(Filter(tenant_id=tenant), limit=10)
    assert page.records == made[:10]
    assert store.list(Filter(tenant_id=tenant), cursor=page.next_cursor).records == made[10:]
    assert sorted(store.delete(Filter(tenant_id=tenant))) == sorted(r.id for r in made)


def test_racing_updates_of_one_version_let_exactly_one_win(store: MilvusStore, tenant: str) -> None:
    old = record(tenant, "u", "v1")
    store.put([Entry(old, unit(1))])
    outcomes: list[str] = []

    def attempt(i: int) -> None:
        data = old.model_dump()
        data["content"]["raw"] = f"writer {i}"
        data["metadata"]["version"] = 2
        try:
            store.update([Change(MemoryRecord.model_validate(data), None, expected_version=1)])
            outcomes.append("won")
        except ConflictError:
            outcomes.append("conflict")

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["conflict"] * 5 + ["won"]
    assert len(store.history(old.id, Filter(tenant_id=tenant))) == 2


# -- Milvus Lite's memtable ------------------------------------------------------------------


def test_a_read_by_id_asks_lite_for_the_ids_alone(
    store: MilvusStore, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lite answers ``id in [...]`` from its key index, but any other condition beside it
    walks every unflushed row; the rest of the filter is applied to what comes back (reads
    and deletes by id)."""
    mine = record(tenant, "u", "mine", session_id="s1")
    other = record(tenant, "v", "another user's")
    store.put([Entry(mine, unit(1)), Entry(other, unit(0, 1))])
    asked: list[str] = []
    query = store._conn.query

    def spying(collection: str, expression: str, fields: list[str], **extra: Any) -> Any:
        asked.append(expression)
        return query(collection, expression, fields, **extra)

    monkeypatch.setattr(store._conn, "query", spying)
    scope = Filter(tenant_id=tenant, user_id="u", session_id="s1")
    assert store.get([mine.id, other.id], scope) == [mine]
    assert set(store.vectors([mine.id, other.id], scope)) == {mine.id}
    theirs = Filter(tenant_id=tenant, user_id="v", ids=(mine.id, other.id))
    assert store.delete(theirs) == [other.id]
    assert asked and all(e.startswith("id in [") and " and " not in e for e in asked), asked
    assert store.get([mine.id, other.id], Filter(tenant_id=tenant)) == [mine]


def _flushed_files(lite_path: Path, collection: str) -> int:
    """The collection's flushed data files in Lite's directory."""
    partitions = lite_path / "collections" / collection / "partitions"
    return sum(1 for _ in partitions.glob("*/data/*.parquet"))


def test_lite_flushes_a_collection_every_so_many_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(milvus, "LITE_FLUSH_ROWS", 5)
    path = tmp_path / "flushing.db"
    opened = MilvusStore(path)
    try:
        opened.bind_embedding(EMBEDDING)
        memories = opened._db.memories
        opened.put([Entry(record("t", "u", f"m{i}"), unit(1, i)) for i in range(4)])
        assert _flushed_files(path, memories) == 0  # 4 rows: still in the memtable
        one = record("t", "u", "the fifth")
        opened.put([Entry(one, unit(1))])
        assert _flushed_files(path, memories) == 1
        assert opened.get([one.id], Filter(tenant_id="t")) == [one]  # read back after it
    finally:
        opened.close()
