"""A Milvus Lite store and the in-process server under it: no connection outlives the store,
and a store whose server has stopped never talks to whatever listens on that port next.

Milvus Lite serves each directory on a free TCP port of 127.0.0.1. pymilvus keeps its
connections in a process-wide registry keyed by address, and retries and reconnects a
failed call for as long as the call's timeout; so a store whose server had stopped, if the
port was handed to another directory's server, would read and write that other database.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chatmem.errors import StoreUnavailableError
from chatmem.records import EmbeddingInfo, Entry, Filter
from tests.stores.helpers import record, unit_vector

pytest.importorskip("pymilvus")
manager = pytest.importorskip("milvus_lite.server_manager").server_manager_instance
lite_server = pytest.importorskip("milvus_lite.adapter.grpc.server")

from pymilvus import MilvusClient  # noqa: E402 - after the importorskip
from pymilvus.client.connection_manager import ConnectionManager  # noqa: E402

from chatmem.stores.milvus import MilvusStore  # noqa: E402

pytestmark = pytest.mark.milvus

EMBEDDING = EmbeddingInfo(model="test-lifecycle", dimension=4)


def lite_port(path: Path) -> int:
    """The port of the Lite server this process runs for ``path``."""
    _server, _db, port = manager._servers[os.path.abspath(path)]
    return int(port)


def connections() -> int:
    return int(ConnectionManager.get_instance().get_stats()["total_connections"])


def test_closing_lite_stores_leaves_no_connection_behind(tmp_path: Path) -> None:
    before = connections()
    for name in ("a", "b", "c"):
        store = MilvusStore(tmp_path / name / "milvus.db")
        store.bind_embedding(EMBEDDING)
        assert connections() == before + 1
        store.close()
    assert connections() == before


def test_a_store_whose_server_stopped_never_reaches_the_next_server_on_its_port(
    tmp_path: Path,
) -> None:
    (tmp_path / "elsewhere").mkdir()
    path = tmp_path / "elsewhere" / ".." / "first" / "milvus.db"  # named the long way round
    first = MilvusStore(path)
    first.bind_embedding(EMBEDDING)
    first.put([Entry(record("t", "u", "kept in the first directory"), unit_vector(4, 1))])
    port = lite_port(path)
    manager.release_server(str(path))  # the first directory's server is gone

    other_dir = tmp_path / "other" / "milvus.db"
    other_dir.parent.mkdir()
    server, db, bound = lite_server.start_server_in_thread(data_dir=str(other_dir), port=port)
    try:
        assert bound == port  # another directory's server now answers on that port
        with pytest.raises(StoreUnavailableError, match="stopped"):
            first.count(Filter(tenant_id="t"))
        with pytest.raises(StoreUnavailableError, match="stopped"):
            first.put([Entry(record("t", "u", "must not land elsewhere"), unit_vector(4, 1))])
        looking = MilvusClient(uri=f"http://127.0.0.1:{port}", dedicated=True)
        try:
            assert looking.list_collections() == []
        finally:
            looking.close()
    finally:
        first.close()
        server.stop(grace=0).wait()
        db.close()
