"""The SQLite memory store's tables: its append-only migrations, and how a user maps to
its keyword shard.

- ``memories``: one row per record; filterable fields as columns, the full record as JSON,
  and ``edited``, its user's ``edited`` count when the row was last updated.
- ``memory_vectors``: each record's vector (float32 blob), by the row's ``rowid``.
- ``user_versions``: per user, counters every write transaction bumps (``appended``,
  ``changed``, ``edited``), so that each connection's vector and field caches know when a
  user's vectors or filterable fields moved on.
- ``memory_fts_0`` … ``memory_fts_f``: FTS5 (porter stemming) over the fields of
  ``text.index_fields``, sharded by user (``FTS_SHARDS``), plus a per-user token column so a
  keyword search never scores another user's rows.
- ``memory_history``: every add, update and delete, with the record before and after.
- ``memory_word_states``: the word-piece states of a memory's text, by the row's ``rowid``
  (``put_word_states``); deleted with their memory, and replaced when its vector is.
- ``user_vector_snapshots``: a big user's vectors whole, at the versions they were exact
  for (``vector_snapshots``); deleted when a row of the user is removed, its vector changes,
  or a turn moves to another session or changes its text. Its vectors and projection lie
  in ``user_vector_snapshot_parts``, in parts of ``vector_snapshots.PART_BYTES``, deleted
  with it.
"""

from __future__ import annotations

import hashlib

from chatmem.records import MemoryRecord

#: FTS5 column weights (ukey, said, prev, nxt, day): the memory's own words count most, the
#: messages around it less. Tuned on half of LoCoMo, checked on the other half.
FTS_WEIGHTS = (0.0, 1.0, 0.5, 0.3, 1.0)

#: Keyword indexes: one FTS5 table per first hex digit of the user token. A keyword search
#: walks the posting lists of its terms within one table, so sharding makes them 16 times
#: shorter at any size of store (at 1M memories, "trip" was in 136,277 rows of one table).
#: BM25's statistics are per table; users land in tables at random, so they stay alike.
FTS_SHARDS = "0123456789abcdef"
FTS_COLUMNS = "ukey, said, prev, nxt, day"
#: The keyword tables' tokenizer (as the migrations below create them; ``keyword_cache``
#: cuts words with the same one).
TOKENIZER = "porter unicode61 remove_diacritics 2"
_SHARD_FTS = (
    "\n".join(
        f"CREATE VIRTUAL TABLE memory_fts_{digit} USING fts5({FTS_COLUMNS},"
        " tokenize = 'porter unicode61 remove_diacritics 2');"
        f" INSERT INTO memory_fts_{digit} (rowid, {FTS_COLUMNS})"
        f" SELECT rowid, {FTS_COLUMNS} FROM memory_fts WHERE substr(ukey, 2, 1) = '{digit}';"
        for digit in FTS_SHARDS
    )
    + "\nDROP TABLE memory_fts;"
)

#: Whether a row's memory names roles (``access_control.allowed_roles`` not empty); written
#: exactly as the partial index ``memories_restricted`` is, so SQLite can use it.
RESTRICTED = "json_array_length({alias}.body, '$.access_control.allowed_roles') > 0"
ROLES_PATH = "$.access_control.allowed_roles"

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE chatmem_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE memories (
        rowid INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        agent_id TEXT,
        project_id TEXT,
        session_id TEXT,
        type TEXT NOT NULL,
        scope TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        valid_from INTEGER,
        valid_to INTEGER,
        version INTEGER NOT NULL,
        body TEXT NOT NULL
    );
    CREATE INDEX memories_by_user ON memories (tenant_id, user_id, created_at, rowid);
    CREATE TABLE memory_history (
        seq INTEGER PRIMARY KEY,
        memory_id TEXT NOT NULL,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        event TEXT NOT NULL,
        old TEXT,
        new TEXT,
        reason TEXT,
        at INTEGER NOT NULL
    );
    CREATE INDEX history_by_memory ON memory_history (memory_id, seq);
    CREATE TABLE memory_vectors (rowid INTEGER PRIMARY KEY, embedding BLOB NOT NULL);
    CREATE TABLE user_versions (
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        appended INTEGER NOT NULL DEFAULT 0,
        changed INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (tenant_id, user_id)
    );
    CREATE VIRTUAL TABLE memory_fts USING fts5(
        ukey, said, prev, nxt, day, tokenize = 'porter unicode61 remove_diacritics 2'
    );
    """,
    _SHARD_FTS,
    # The write policy looks a user's memories up by these user_metadata keys on every
    # extraction batch; without an index each lookup parsed every one of the user's rows.
    """
    CREATE INDEX memories_by_write_batch ON memories
        (tenant_id, user_id, json_extract(body, '$.user_metadata."write_batch"'), created_at);
    CREATE INDEX memories_by_subject ON memories
        (tenant_id, user_id, json_extract(body, '$.user_metadata."subject"'), created_at);
    """,
    # Role-restricted memories (SPEC L7) are few; a search finds a user's with this index
    # instead of reading every row's roles.
    f"""
    CREATE INDEX memories_restricted ON memories (tenant_id, user_id, rowid)
        WHERE {RESTRICTED.format(alias="memories")};
    """,
    # A search with a filter narrower than the user reads which of the user's rows pass from
    # this index alone (4.4 -> 0.9 ms for 10,000 rows), never the rows themselves.
    """
    CREATE INDEX memories_by_user_fields ON memories (tenant_id, user_id, type, project_id,
        session_id, agent_id, scope, created_at, valid_from, valid_to);
    """,
    # A memory's TTL (time.expires_at). Few memories have one: a search finds a user's
    # expired ones through this partial index, as it does the role-restricted ones.
    """
    ALTER TABLE memories ADD COLUMN expires_at INTEGER;
    CREATE INDEX memories_expiring ON memories (tenant_id, user_id, expires_at)
        WHERE expires_at IS NOT NULL;
    """,
    # Every update bumps its user's ``edited`` and writes the new count into the row, so
    # each connection's field cache (``field_cache``) reads only the rows updated since it
    # last looked, through a partial index of the updated rows.
    """
    ALTER TABLE user_versions ADD COLUMN edited INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE memories ADD COLUMN edited INTEGER;
    CREATE INDEX memories_edited ON memories (tenant_id, user_id, edited)
        WHERE edited IS NOT NULL;
    """,
    # Each deleted row is logged with its user's ``changed`` count, so a cache drops the
    # rows removed since it last looked instead of reading which rows are left (issue 14).
    # The log is complete after ``removals_from``; older entries are trimmed by ``remove``.
    # A file migrated here starts its log now.
    """
    CREATE TABLE memory_removals (
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        changed INTEGER NOT NULL,
        removed INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, user_id, changed, removed)
    ) WITHOUT ROWID;
    ALTER TABLE user_versions ADD COLUMN removals_from INTEGER NOT NULL DEFAULT 0;
    UPDATE user_versions SET removals_from = changed;
    """,
    # The word-piece states of a memory's text (``embeddings.tokens``), for the late
    # rerank: kept so that a new process ranks as the one that embedded the memory did.
    """
    CREATE TABLE memory_word_states (rowid INTEGER PRIMARY KEY, states BLOB NOT NULL);
    """,
    # A big user's vectors whole, in one row (``vector_snapshots``): a new process reads a
    # user's matrix in one piece instead of row by row. Deleted by every write that removes
    # a row or changes a vector of the user.
    """
    CREATE TABLE user_vector_snapshots (
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        appended INTEGER NOT NULL,
        changed INTEGER NOT NULL,
        edited INTEGER NOT NULL,
        header TEXT NOT NULL,
        rowids BLOB NOT NULL,
        vectors BLOB NOT NULL,
        sessions BLOB NOT NULL,
        asks BLOB NOT NULL,
        coarse BLOB,
        PRIMARY KEY (tenant_id, user_id)
    );
    """,
    # A session's latest turns, which ``add`` reads for a session's new message that no
    # kept tail answers (a new session's first message, a new process): by the user index
    # that read went through every row of the user in the span, the other sessions' too.
    """
    CREATE INDEX memories_by_session ON memories (tenant_id, user_id, session_id, created_at, rowid)
        WHERE session_id IS NOT NULL;
    """,
    # A big user's copy read in parts (``vector_snapshots.PART_BYTES``) rather than as one
    # value of tens of MB, which SQLite and then Python each allocate whole and fault in page
    # by page. The copies already kept are of the former layout and are dropped: caches,
    # written again at the user's next search.
    """
    CREATE TABLE user_vector_snapshot_parts (
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        field TEXT NOT NULL,
        part INTEGER NOT NULL,
        bytes BLOB NOT NULL,
        PRIMARY KEY (tenant_id, user_id, field, part)
    );
    DELETE FROM user_vector_snapshots;
    """,
)
#: user_metadata keys with an index (migration 3); a filter on one of them is written with
#: the index's own expression, so SQLite can use it.
INDEXED_METADATA = frozenset({"write_batch", "subject"})


def user_key(tenant_id: str, user_id: str) -> str:
    """The partition of one user of one tenant."""
    return f"{tenant_id}\x1f{user_id}"


def user_token(tenant_id: str, user_id: str) -> str:
    """The user's token in the keyword tables (``u`` and 24 hex digits)."""
    digest = hashlib.blake2b(user_key(tenant_id, user_id).encode(), digest_size=12).hexdigest()
    return f"u{digest}"


def fts_table(token: str) -> str:
    """The keyword table of a user token."""
    return f"memory_fts_{token[1]}"


def fts_of(record: MemoryRecord) -> str:
    """The keyword table of a record's user."""
    return fts_table(user_token(record.tenant_id, record.user_id))


__all__ = [
    "FTS_COLUMNS",
    "FTS_SHARDS",
    "FTS_WEIGHTS",
    "TOKENIZER",
    "INDEXED_METADATA",
    "MIGRATIONS",
    "RESTRICTED",
    "ROLES_PATH",
    "fts_of",
    "fts_table",
    "user_key",
    "user_token",
]
