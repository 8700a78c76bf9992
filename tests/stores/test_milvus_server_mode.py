"""Which Milvus features the store uses, chosen by the server's version (issue 15).

A Milvus server before 2.5 has no BM25, before 2.4 no INVERTED scalar index and an upsert
that moves rows out of their partition (milvus-io/milvus#30607). The choice is pure and tested
on version strings; the dense-only and delete-then-insert paths it picks are run on a real
Milvus Lite, whose collection is made as an old server's would be. The whole conformance suite
runs against a real 2.3.5 server with ``CHATMEM_TEST_MILVUS_URI`` (docs/scaling.md).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from chatmem.records import EmbeddingInfo, Entry, Filter, MemoryRecord, Vector
from chatmem.stores import Change, SearchQuery
from tests.stores.helpers import record, unit_vector

pm = pytest.importorskip("pymilvus")

from chatmem.stores.milvus import MilvusStore  # noqa: E402 - after the importorskip
from chatmem.stores.milvus.features import (  # noqa: E402
    FULL,
    ServerFeatures,
    features_of,
    parse_version,
)
from chatmem.stores.milvus.rows import memory_row  # noqa: E402
from chatmem.stores.milvus.schema import memories_index, memories_schema  # noqa: E402

pytestmark = pytest.mark.milvus

DIM = 4
EMBEDDING = EmbeddingInfo(model="test-milvus-mode", dimension=DIM)
OLD_SERVER = ServerFeatures(bm25=False, inverted_index=False, upsert=False)


def unit(*weights: float) -> Vector:
    return unit_vector(DIM, *weights)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("v2.3.5-lite", OLD_SERVER),  # what PyPI's embedded Milvus 2.3.5 reports
        ("v2.3.21", OLD_SERVER),
        ("v2.4.0", ServerFeatures(bm25=False, inverted_index=True, upsert=True)),
        ("v2.4.23-gpu", ServerFeatures(bm25=False, inverted_index=True, upsert=True)),
        ("v2.5.0", FULL),
        ("2.6.1", FULL),
        ("v3.0.0-beta", FULL),
        ("", FULL),  # unreadable: keep the full store, as before versions were asked
        ("master-20250101", FULL),
    ],
)
def test_a_server_version_chooses_the_features(version: str, expected: ServerFeatures) -> None:
    assert features_of(version, lite=False) == expected


def test_milvus_lite_gets_every_feature_whatever_it_reports() -> None:
    assert features_of("milvus_lite-3.2.2", lite=True) == FULL
    assert features_of("v2.3.5", lite=True) == FULL


def test_versions_are_read_up_to_the_patch_number() -> None:
    assert parse_version(" v2.10.3-rc1 ") == (2, 10, 3)
    assert parse_version("v2.3") is None
    assert parse_version("milvus_lite-3.2.2") is None


def _fields(schema: object) -> set[str]:
    return {field.name for field in schema.fields}  # type: ignore[attr-defined]


def test_dense_only_schema_has_no_keyword_fields_or_function() -> None:
    full = memories_schema(pm, DIM)
    dense = memories_schema(pm, DIM, keywords=False)
    assert {"text", "sparse"} <= _fields(full) and len(full.functions) == 1
    assert _fields(full) - _fields(dense) == {"text", "sparse"}
    assert dense.functions == []


def _index_types(features: ServerFeatures) -> dict[str, str]:
    # prepare_index_params is a class method: no connection needed.
    built = memories_index(pm.MilvusClient, False, features)
    return {index.field_name: index.index_type for index in built}


def test_an_old_server_gets_its_own_scalar_indexes_and_no_sparse_index() -> None:
    full = _index_types(FULL)
    old = _index_types(OLD_SERVER)
    assert full["sparse"] == "SPARSE_INVERTED_INDEX" and full["tenant_id"] == "INVERTED"
    assert "sparse" not in old
    assert old["tenant_id"] == old["session_id"] == old["type"] == "Trie"
    assert old["created_at"] == old["expires_at"] == "STL_SORT"
    assert old["embedding"] == full["embedding"] == "HNSW"


def test_a_dense_only_row_has_no_keyword_text() -> None:
    one = record("t", "u", "tea at breakfast")
    row = memory_row(one, unit(1).tolist(), expiry=True, collection="c", keywords=False)
    assert "text" not in row
    assert "text" in memory_row(one, unit(1).tolist(), expiry=True, collection="c")


def _old_server_store(path: Path, features: ServerFeatures) -> None:
    """Make the memories collection at ``path`` as a server with ``features`` would."""
    store = MilvusStore(path)
    try:
        store._db.features = features
        store.bind_embedding(EMBEDDING)
    finally:
        store.close()


def test_a_dense_only_collection_searches_by_embedding_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "milvus.db"
    _old_server_store(path, ServerFeatures(bm25=False))
    with caplog.at_level(logging.WARNING, logger="chatmem.stores.milvus.store"):
        store = MilvusStore(path)
    try:
        assert not store.capabilities.keyword_search
        assert [r.getMessage() for r in caplog.records] == [
            "collection 'chatmem_memories' was made on a Milvus without BM25: hybrid"
            " search needs Milvus 2.5+; this store searches by embedding only"
        ]
        tea, rain = record("t", "u", "tea at breakfast"), record("t", "u", "rain in may")
        store.put([Entry(tea, unit(1)), Entry(rain, unit(0, 1))])
        scope = Filter(tenant_id="t", user_id="u")
        found = store.search(SearchQuery(scope, vector=unit(0, 1), text="tea"))
        scores = {c.id: (round(c.vector_score or 0.0, 4), c.keyword_score) for c in found}
        assert scores == {rain.id: (1.0, None), tea.id: (0.0, None)}
    finally:
        store.close()


def test_a_full_lite_store_keeps_hybrid_search_without_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="chatmem.stores.milvus.store"):
        store = MilvusStore(tmp_path / "milvus.db")
    try:
        store.bind_embedding(EMBEDDING)
        assert store.capabilities.keyword_search and not caplog.records
        tea = record("t", "u", "tea at breakfast")
        store.put([Entry(tea, unit(1))])
        scope = Filter(tenant_id="t", user_id="u")
        (found,) = store.search(SearchQuery(scope, vector=unit(0, 1), text="tea"))
        assert found.keyword_score is not None
    finally:
        store.close()


def test_without_a_sound_upsert_an_update_is_a_delete_then_an_insert(tmp_path: Path) -> None:
    store = MilvusStore(tmp_path / "milvus.db")
    try:
        store.bind_embedding(EMBEDDING)
        store._db.features = ServerFeatures(upsert=False)
        tea = record("t", "u", "tea at breakfast")
        store.put([Entry(tea, unit(1))])
        data = tea.model_dump()
        data["content"]["raw"], data["metadata"]["version"] = "tea at lunch", 2
        new = MemoryRecord.model_validate(data)
        store.update([Change(new, unit(0, 1), expected_version=1)])
        scope = Filter(tenant_id="t", user_id="u")
        assert store.get([tea.id], scope) == [new]
        (found,) = store.search(SearchQuery(scope, vector=unit(0, 1), text="lunch"))
        assert found.id == tea.id and found.vector_score == pytest.approx(1.0, abs=1e-4)
        assert found.keyword_score is not None
        assert store.count(scope) == 1
    finally:
        store.close()
