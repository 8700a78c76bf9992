"""The write policy's user_metadata lookups (``write_batch``, ``subject``) are served by an
index in PostgreSQL, as in SQLite (issue 15.1): the plan of the filter the policy sends names
the index, and the answer is the rows a scan finds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chatmem.records import Entry, Filter
from tests.pg_server import drop_schema
from tests.stores.conftest import DIM, EMBEDDING
from tests.stores.helpers import record, unit_vector

pytestmark = pytest.mark.postgres
pytest.importorskip("psycopg")

from chatmem.stores.postgres import PostgresStore  # noqa: E402
from chatmem.stores.postgres.filters import where as _where  # noqa: E402


@pytest.fixture
def store(postgres_uri: str, pg_schema: str) -> Iterator[PostgresStore]:
    opened = PostgresStore(postgres_uri, prefix=pg_schema)
    opened.bind_embedding(EMBEDDING)
    yield opened
    opened.close()
    drop_schema(postgres_uri, pg_schema)


@pytest.mark.parametrize(
    ("key", "index"),
    [("write_batch", "memories_by_write_batch"), ("subject", "memories_by_subject")],
)
def test_a_metadata_lookup_of_the_write_policy_uses_its_index(
    store: PostgresStore, key: str, index: str
) -> None:
    import psycopg

    entries = [
        Entry(
            record("t", "anna", f"fact {n}", user_metadata={key: f"v{n % 400}", "other": n}),
            unit_vector(DIM, 1.0, float(n % 7)),
        )
        for n in range(2000)
    ]
    store.put(entries)
    scope = Filter(tenant_id="t", user_id="anna", metadata={key: "v7"})
    where, params = _where(scope)
    with psycopg.connect(store._conninfo, autocommit=True) as conn:
        conn.execute(f"ANALYZE {store.schema}.memories")
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                f"EXPLAIN SELECT m.id FROM {store.schema}.memories AS m WHERE {where}", params
            )
        )
    assert index in plan, plan
    found = {r.id for r in store.list(scope, limit=1000).records}
    assert found == {e.record.id for e in entries if e.record.user_metadata[key] == "v7"}
