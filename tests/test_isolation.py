"""Property: for any sequence of operations, no memory crosses a tenant or a user (SPEC L7).

A hypothesis state machine drives LongTermMemory over each real backend and checks every
read against a model of who owns what.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from chatmem import Filter, LocalEmbedder, LongTermMemory, NotFoundError
from chatmem.stores import MemoryStore, SQLiteStore

TENANTS = ["acme", "globex"]
USERS = ["alice", "bob", "carol"]
WORDS = ["budget", "hawaii", "trip", "tea", "hiking", "docker", "alps", "ramen", "paris"]

owners = st.tuples(st.sampled_from(TENANTS), st.sampled_from(USERS))
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
sessions = st.sampled_from(["s1", "s2"])


def isolation_machine(open_store: Any, embedder: LocalEmbedder) -> type[RuleBasedStateMachine]:
    class Isolation(RuleBasedStateMachine):
        memories = Bundle("memories")

        def __init__(self) -> None:
            super().__init__()
            self.directory = tempfile.TemporaryDirectory()
            try:
                self.memory = LongTermMemory(open_store(Path(self.directory.name)), embedder)
            except BaseException:  # boundary: hypothesis calls no teardown for a machine never made
                self.directory.cleanup()
                raise
            self.owner: dict[str, tuple[str, str, str]] = {}

        @rule(target=memories, who=owners, text=texts, session=sessions)
        def add(self, who: tuple[str, str], text: str, session: str) -> str:
            (record,) = self.memory.add(text, tenant_id=who[0], user_id=who[1], session_id=session)
            self.owner[record.id] = (*who, session)
            return record.id

        @rule(memory_id=memories, who=owners)
        def get(self, memory_id: str, who: tuple[str, str]) -> None:
            try:
                record = self.memory.get(memory_id, tenant_id=who[0], user_id=who[1])
            except NotFoundError:
                assert self.owner.get(memory_id, (None, None))[:2] != who
            else:
                assert self.owner[memory_id][:2] == who == (record.tenant_id, record.user_id)

        @rule(memory_id=memories, who=owners)
        def delete(self, memory_id: str, who: tuple[str, str]) -> None:
            try:
                self.memory.delete(memory_id, tenant_id=who[0], user_id=who[1])
            except NotFoundError:
                assert self.owner.get(memory_id, (None, None))[:2] != who
            else:
                assert self.owner.pop(memory_id)[:2] == who

        @rule(memory_id=memories, who=owners, text=texts)
        def update(self, memory_id: str, who: tuple[str, str], text: str) -> None:
            try:
                self.memory.update(memory_id, text, tenant_id=who[0], user_id=who[1])
            except NotFoundError:
                assert self.owner.get(memory_id, (None, None))[:2] != who
            else:
                assert self.owner[memory_id][:2] == who

        @rule(who=owners, session=sessions)
        def forget_session(self, who: tuple[str, str], session: str) -> None:
            scope = Filter(tenant_id=who[0], user_id=who[1], session_id=session)
            removed = self.memory.delete_all(scope)
            doomed = [i for i, o in self.owner.items() if o == (*who, session)]
            assert removed == len(doomed)
            for memory_id in doomed:
                del self.owner[memory_id]

        @rule(who=owners, query=texts)
        def search(self, who: tuple[str, str], query: str) -> None:
            hits = self.memory.search(query, tenant_id=who[0], user_id=who[1], k=20)
            found = {h.record.id for h in hits}
            assert found == {i for i, o in self.owner.items() if o[:2] == who}

        @invariant()
        def counts_match(self) -> None:
            for tenant in TENANTS:
                for user in USERS:
                    scope = Filter(tenant_id=tenant, user_id=user)
                    mine = {i for i, o in self.owner.items() if o[:2] == (tenant, user)}
                    assert {r.id for r in self.memory.list(scope, limit=500).records} == mine

        def teardown(self) -> None:
            try:
                self.memory.close()
            finally:
                self.directory.cleanup()

    return Isolation


def _sqlite(path: Path) -> MemoryStore:
    return SQLiteStore(path / "chatmem.db")


def test_no_memory_crosses_tenants_or_users_on_sqlite(embedder: LocalEmbedder) -> None:
    machine = isolation_machine(_sqlite, embedder)
    machine.TestCase.settings = settings(
        max_examples=25,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    machine.TestCase().runTest()


@pytest.mark.milvus
def test_no_memory_crosses_tenants_or_users_on_milvus(embedder: LocalEmbedder) -> None:
    pytest.importorskip("pymilvus")
    from chatmem.stores.milvus import MilvusStore

    machine = isolation_machine(lambda path: MilvusStore(str(path / "milvus.db")), embedder)
    machine.TestCase.settings = settings(
        max_examples=4,
        stateful_step_count=15,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    machine.TestCase().runTest()


@pytest.mark.postgres
def test_no_memory_crosses_tenants_or_users_on_postgres(embedder: LocalEmbedder) -> None:
    from tests.pg_server import drop_schema, postgres_server
    from tests.stores.conftest import schema_for

    schemas: list[str] = []

    def open_postgres(path: Path) -> MemoryStore:
        from chatmem.stores.postgres import PostgresStore

        schemas.append(schema_for(path))
        return PostgresStore(uri, prefix=schemas[-1], pool_size=2)

    with postgres_server() as uri:
        machine = isolation_machine(open_postgres, embedder)
        machine.TestCase.settings = settings(
            max_examples=10,
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        try:
            machine.TestCase().runTest()
        finally:
            for schema in schemas:
                drop_schema(uri, schema)
