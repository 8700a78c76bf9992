"""The SQLite store's field cache (issue 14): a filtered search answers from each user's
cached fields, and they follow every write, whether this store made it or another one on
the same file did (another process's writes reach a cache only through ``user_versions``
and the rows' ``edited`` counts). Every search here is checked against ``Filter.matches``.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatmem.records import (
    EmbeddingInfo,
    Entry,
    Filter,
    MemoryRecord,
    MemoryType,
    Scope,
    to_ms,
    utcnow,
)
from chatmem.stores import Change, SQLiteStore
from chatmem.stores.base import SearchQuery
from chatmem.stores.schema_versions import SCHEMA_TABLE
from chatmem.stores.sqlite import MIGRATIONS, SQLiteFile
from chatmem.stores.sqlite import writes as sqlite_writes
from chatmem.stores.sqlite.field_cache import Coded, FieldCache
from chatmem.stores.sqlite.file import sqlite3  # the store's SQLite: one library per process
from chatmem.stores.sqlite.search import user_versions
from tests.stores.helpers import record, unit_vector

DIM = 4
EMBEDDING = EmbeddingInfo(model="test", dimension=DIM)
T0 = datetime(2025, 1, 1, tzinfo=UTC)
DAYS = [T0 + timedelta(days=d) for d in range(0, 16, 3)]
TYPES = [MemoryType.SEMANTIC, MemoryType.EPISODIC, MemoryType.PREFERENCE]
SCOPES = [Scope.PRIVATE, Scope.SHARED]
ROLES = [[], [], ["hr"], ["hr", "legal"], ["ops"]]
#: user_metadata values of every JSON kind, 1 / 1.0 / true among them (SQLite calls them equal).
VALUES: list[Any] = ["en", "fr", 1, 1.0, 2, True, False, None, [1, "a"], {"a": 1}, "1"]
KEYS = ["lang", "rank", "flag"]

FILTERS: list[dict[str, Any]] = [
    {},
    {"types": frozenset({MemoryType.EPISODIC})},
    {"types": frozenset({MemoryType.SEMANTIC, MemoryType.PREFERENCE}), "session_id": "s1"},
    {"project_id": "p1"},
    {"agent_id": "a", "scopes": frozenset({Scope.SHARED})},
    {"created_after": DAYS[1], "created_before": DAYS[4]},
    {"valid_at": DAYS[2]},
    {"known_at": DAYS[3]},
    {"metadata": {"lang": "fr"}},
    {"metadata": {"rank": 1}},
    {"metadata": {"flag": True, "lang": "en"}},
    {"metadata": {"rank": None}},
    {"metadata": {"lang": "1"}},
    {"reader_roles": frozenset()},
    {"reader_roles": frozenset({"hr"})},
    {"reader_roles": frozenset({"legal", "ops"}), "types": frozenset({MemoryType.EPISODIC})},
    {"expired": None},
    {"expired": True, "reader_roles": frozenset({"hr"})},
]


def _fields(rng: random.Random) -> dict[str, Any]:
    """The filterable fields of a record, drawn from small pools so filters hit them."""
    moment = rng.choice(DAYS)
    starts = rng.choice([None, *DAYS])
    ends = rng.choice([None, *(d for d in DAYS if starts is None or d > starts)])
    expires = rng.choice([None, None, utcnow() - timedelta(hours=1), utcnow() + timedelta(days=9)])
    metadata = {key: rng.choice(VALUES) for key in KEYS if rng.random() < 0.8}
    return {
        "type": rng.choice(TYPES),
        "scope": rng.choice(SCOPES),
        "agent_id": rng.choice([None, "a", "b"]),
        "project_id": rng.choice([None, "p1", "p2"]),
        "session_id": rng.choice([None, "s1", "s2"]),
        "time": {
            "created_at": moment,
            "updated_at": moment,
            "valid_from": starts,
            "valid_to": ends,
            "expires_at": expires,
        },
        "user_metadata": metadata,
        "access_control": {"allowed_roles": rng.choice(ROLES)},
    }


def _new(rng: random.Random) -> MemoryRecord:
    words = rng.choice(["garden", "garden roses", "garden tools and garden seeds"])
    return MemoryRecord.model_validate({"user_id": "u", "content": {"raw": words}, **_fields(rng)})


def _next(old: MemoryRecord, rng: random.Random) -> MemoryRecord:
    data = old.model_dump()
    data.update(_fields(rng))
    data["metadata"]["version"] = old.metadata.version + 1
    return MemoryRecord.model_validate(data)


def _vector(rng: random.Random) -> np.ndarray[Any, np.dtype[np.float32]]:
    return unit_vector(DIM, *(rng.uniform(0.1, 1.0) for _ in range(DIM)))


class Scene:
    """A writer and a reader on one file, and what the store should hold."""

    def __init__(self, path: Path) -> None:
        self.writer, self.reader = SQLiteStore(path), SQLiteStore(path)
        self.writer.bind_embedding(EMBEDDING)
        self.records: dict[str, MemoryRecord] = {}

    def add(self, rng: random.Random, count: int = 1) -> None:
        entries = [Entry(_new(rng), _vector(rng)) for _ in range(count)]
        self.writer.put(entries)
        self.records.update((entry.record.id, entry.record) for entry in entries)

    def update(self, rng: random.Random, *, vector: bool = False) -> None:
        old = self.records[rng.choice(sorted(self.records))]
        new = _next(old, rng)
        change = Change(new, _vector(rng) if vector else None, old.metadata.version)
        self.writer.update([change])
        self.records[new.id] = new

    def delete(self, rng: random.Random) -> None:
        gone = rng.choice(sorted(self.records))
        self.writer.delete(Filter(user_id="u", ids=(gone,), expired=None))
        del self.records[gone]

    def check(self, narrow: dict[str, Any]) -> None:
        """Both stores find exactly what the reference semantics admit, by both halves."""
        scope = Filter(user_id="u", **narrow)
        expected = {r.id for r in self.records.values() if scope.matches(r)}
        query = SearchQuery(
            scope, vector=unit_vector(DIM, 1.0), text="garden", candidates=len(self.records) + 1
        )
        for store in (self.writer, self.reader):
            found = store.search(query)
            assert {c.id for c in found} == expected, narrow
            assert {c.id for c in found if c.keyword_score is not None} == expected, narrow

    def check_all(self) -> None:
        for narrow in FILTERS:
            self.check(narrow)

    def close(self) -> None:
        self.writer.close()
        self.reader.close()


@contextmanager
def _scene(path: Path) -> Iterator[Scene]:
    scene = Scene(path)
    try:
        yield scene
    finally:
        scene.close()


def test_filtered_searches_follow_every_kind_of_write(tmp_path: Path) -> None:
    rng = random.Random(7)
    with _scene(tmp_path / "chatmem.db") as scene:
        scene.add(rng, 30)
        scene.check_all()  # every column cached, the lazy ones included
        for _ in range(6):
            scene.update(rng)  # fields only: the rows are patched in
        scene.check_all()
        scene.add(rng, 4)
        scene.update(rng)  # appended and edited since the last search
        scene.check_all()
        scene.update(rng, vector=True)  # a vector changed: read again
        scene.check_all()
        for _ in range(3):
            scene.delete(rng)
        scene.update(rng)
        scene.check_all()


def test_an_update_of_another_store_reaches_a_warm_cache(tmp_path: Path) -> None:
    """The reader's cache was filled before the writer moved a memory out of the project;
    only the ``edited`` count tells it (the vectors did not change)."""
    rng = random.Random(3)
    with _scene(tmp_path / "chatmem.db") as scene:
        scene.add(rng, 10)
        seen = Filter(user_id="u")
        memory = next(r for r in scene.records.values() if seen.matches(r) and not r.project_id)
        scene.check({"project_id": "p1"})
        moved = memory.model_copy(
            update={
                "project_id": "p1",
                "metadata": memory.metadata.model_copy(update={"version": 2}),
            }
        )
        scene.writer.update([Change(moved, None, 1)])
        scene.records[moved.id] = moved
        scene.check({"project_id": "p1"})


def test_a_narrow_filter_gets_its_keyword_candidates_when_the_best_words_are_elsewhere(
    tmp_path: Path,
) -> None:
    """The keyword page is sized by the share of rows admitted; when every row matching
    best is left out, it is asked again, larger, until enough are kept."""
    store = SQLiteStore(tmp_path / "chatmem.db")
    store.bind_embedding(EMBEDDING)
    strong = [record("default", "u", "garden garden garden") for _ in range(60)]
    weak = [
        record("default", "u", f"garden and a long note {i}" * 3, project_id="p") for i in range(40)
    ]
    store.put([Entry(r, unit_vector(DIM, 1.0)) for r in strong + weak])
    found = store.search(
        SearchQuery(Filter(user_id="u", project_id="p"), text="garden", candidates=3)
    )
    assert len(found) == 3
    assert {c.id for c in found} <= {r.id for r in weak}
    store.close()


@st.composite
def _filters(draw: st.DrawFn) -> dict[str, Any]:
    options: dict[str, st.SearchStrategy[Any]] = {
        "types": st.frozensets(st.sampled_from(TYPES), max_size=2),
        "scopes": st.frozensets(st.sampled_from(SCOPES), max_size=2),
        "project_id": st.sampled_from(["p1", "p2"]),
        "session_id": st.sampled_from(["s1", "s2"]),
        "agent_id": st.sampled_from(["a", "b"]),
        "created_after": st.sampled_from(DAYS),
        "created_before": st.sampled_from(DAYS),
        "valid_at": st.sampled_from(DAYS),
        "known_at": st.sampled_from(DAYS),
        "metadata": st.dictionaries(
            st.sampled_from(KEYS),
            st.sampled_from([v for v in VALUES if not isinstance(v, list | dict)]),
            max_size=2,
        ),
        "reader_roles": st.frozensets(st.sampled_from(["hr", "legal", "ops"]), max_size=2),
        "expired": st.sampled_from([None, True, False]),
    }
    names = draw(st.lists(st.sampled_from(sorted(options)), max_size=3, unique=True))
    return {name: draw(options[name]) for name in names}


WRITES = ["add", "update", "update_vector", "delete"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    steps=st.lists(st.tuples(st.sampled_from(WRITES), _filters()), min_size=1, max_size=8),
)
def test_any_filter_after_any_writes_agrees_with_the_reference(
    seed: int, steps: list[tuple[str, dict[str, Any]]]
) -> None:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as folder, _scene(Path(folder) / "c.db") as scene:
        scene.add(rng, 12)
        for write, narrow in steps:
            scene.check(narrow)  # warms the caches at the versions before the write
            if write == "add":
                scene.add(rng, rng.randint(1, 3))
            elif write == "delete" and len(scene.records) > 1:
                scene.delete(rng)
            else:
                scene.update(rng, vector=write == "update_vector")
            scene.check(narrow)


# -- migration -------------------------------------------------------------------------------


#: The migration that adds ``edited`` (counted from 0).
FIELD_CACHE_MIGRATION = next(
    i for i, script in enumerate(MIGRATIONS) if "memories_edited" in script
)


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def test_a_database_from_before_the_field_cache_migrates_and_filters(tmp_path: Path) -> None:
    """A file at the schema before ``edited``, with rows in it, opens with today's code: the
    columns and the partial index are added, old rows count as never updated, and filtered
    searches follow updates from then on."""
    path = tmp_path / "chatmem.db"
    rng = random.Random(11)
    old = SQLiteFile(path)
    old.migrate(MIGRATIONS[:FIELD_CACHE_MIGRATION])
    records = [_new(rng) for _ in range(12)]
    old.write(lambda conn: sqlite_writes.insert(conn, [Entry(r, _vector(rng)) for r in records]))
    old.write(
        lambda conn: conn.execute(
            "INSERT INTO chatmem_meta VALUES ('embedding', ?)", (EMBEDDING.model_dump_json(),)
        )
    )
    old.close()
    with _scene(path) as scene:
        scene.records = {r.id: r for r in records}
        with closing(sqlite3.connect(str(path))) as conn:
            assert "edited" in _columns(conn, "memories")
            assert "edited" in _columns(conn, "user_versions")
            indexes = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
            assert "memories_edited" in indexes
            versions = [v for (v,) in conn.execute(f"SELECT version FROM {SCHEMA_TABLE}")]
            assert max(versions) == len(MIGRATIONS)
            never = conn.execute("SELECT count(*) FROM memories WHERE edited IS NULL")
            assert never.fetchone() == (len(records),)
        scene.check_all()
        scene.update(rng)
        scene.update(rng)
        scene.check_all()
        with closing(sqlite3.connect(str(path))) as conn:
            edited = conn.execute("SELECT edited FROM user_versions").fetchone()[0]
            rows = conn.execute("SELECT edited FROM memories WHERE edited IS NOT NULL")
            assert edited == 2 and sorted(rows.fetchall())[-1] == (2,)


def test_a_cache_with_no_room_still_answers(tmp_path: Path) -> None:
    """An entry bigger than the budget is not kept: each search reads the fields again."""
    rng = random.Random(5)
    path = tmp_path / "chatmem.db"
    with _scene(path) as scene:
        scene.reader.close()
        scene.reader = SQLiteStore(path, field_cache_bytes=0)
        scene.add(rng, 20)
        scene.check_all()
        scene.update(rng)
        scene.check_all()


def _decoded(column: Coded) -> list[Any]:
    names = {code: value for value, code in column.values.items()}
    return [names[int(code)] for code in column.codes]


def _entry_agrees(file: SQLiteFile, cache: FieldCache, records: dict[str, MemoryRecord]) -> None:
    """The entry a search would use holds exactly the user's rows, each with its fields."""
    with file.read() as conn:
        conn.execute("BEGIN")
        try:
            versions = user_versions(conn, "default", "u")
            fields = cache.fields(conn, "default", "u", versions)
            roles = _decoded(fields.column(conn, "roles"))
            ids = dict(conn.execute("SELECT rowid, id FROM memories").fetchall())
        finally:
            conn.execute("COMMIT")
    assert fields.rowids.tolist() == sorted(ids)
    held = [records[ids[rowid]] for rowid in fields.rowids.tolist()]
    assert _decoded(fields.coded["project_id"]) == [r.project_id for r in held]
    assert _decoded(fields.coded["type"]) == [str(r.type) for r in held]
    assert fields.times["created_at"].tolist() == [to_ms(r.time.created_at) for r in held]
    assert roles == [frozenset(r.access_control.allowed_roles) for r in held]


def test_a_cache_entry_holds_exactly_the_rows_after_every_kind_of_write(tmp_path: Path) -> None:
    """White box: a deleted row left in an entry would change no result (both halves read
    only rows that are there), so this looks at the entry itself."""
    rng = random.Random(17)
    path = tmp_path / "chatmem.db"
    with _scene(path) as scene:
        file, cache = SQLiteFile(path), FieldCache()
        scene.add(rng, 20)
        _entry_agrees(file, cache, scene.records)
        for write in (scene.delete, scene.add, scene.update, scene.delete, scene.update):
            write(rng)
            _entry_agrees(file, cache, scene.records)
        scene.update(rng, vector=True)
        scene.add(rng, 2)
        scene.delete(rng)
        _entry_agrees(file, cache, scene.records)
        file.close()
