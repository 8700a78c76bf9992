"""A big user's vectors kept whole, in one row, for a new process's first search (issue 14).

A user's vectors lie in ``memory_vectors`` in the order they were written, among every
other user's: at 1M memories the 20 heaviest users' first searches took 1.6 s at p95 cold,
most of it reading their rows one by one (10,000 contiguous rows took 97 ms to read and
61 ms to build into a matrix, with the file in the page cache). So a user of at least
``MIN_ROWS`` memories, once its matrix was built whole, gets a copy of it written in the
background as one row of ``user_vector_snapshots``: rowids, vectors, memory ids and each
row's session, at the ``user_versions`` it was exact for.

The copy is a cache entry that survives the process: a reader that finds no entry in its
``VectorCache`` takes the copy and brings it to the current versions the way it brings any
older entry (rows appended since, rows updated since). So a copy may be behind by appends
and edits, never ahead, and never holds what is gone: every write that removes a row or
changes a vector (``changed``) deletes the user's copy in its own transaction, as does an
update that keeps the vector but moves a turn to another session or changes its text
(what the copy says of the row besides its vector), and a copy is written only while
``changed`` is still what it was read at. A forgotten memory's vector is therefore never
kept here. A copy of another ``FORMAT``, one that does not decode, or one that does not
match the store's dimension is ignored, and the user is read from its rows as before.

The copy's two big arrays, its vectors and its projection, lie in ``PART_BYTES`` parts in
``user_vector_snapshot_parts``, copied one by one into one array. Read as one value, a copy
of 57 MB took 96-143 ms from the page cache: SQLite allocates the whole value, Python
copies it into a bytes object of its own, and both fault their fresh memory in 4 KiB page
by page; the parts reuse one small buffer, and the array they fill gets huge pages.
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from chatmem.stores import coarse as coarse_settings
from chatmem.stores.coarse import Coarse
from chatmem.stores.sqlite.file import SQLiteFile, sqlite3
from chatmem.stores.vector_cache import SessionNumbers, Turns, UserVectors, Versions
from chatmem.threads import lower_priority

logger = logging.getLogger("chatmem.stores.sqlite")

#: Users with fewer memories are read from their rows: 4,096 rows read in about 60 ms.
MIN_ROWS = 4_096
#: A copy behind by more than this share of appended rows is written again.
STALE_SHARE = 0.25
#: The layout of a copy and how its rows were read (which rows are turns, what asks); a
#: copy written by another layout is ignored, and the user read from its rows.
FORMAT = 2
#: The size of one part of a copy's vectors or projection (module doc).
PART_BYTES = 1 << 20

_COLUMNS = ("appended", "changed", "edited", "header", "rowids", "vectors", "sessions", "asks")
_REPLACED = ", ".join(f"{name} = excluded.{name}" for name in (*_COLUMNS, "coarse"))
_READ = (
    "SELECT appended, changed, edited, header, rowids, sessions, asks"
    " FROM user_vector_snapshots WHERE tenant_id = ? AND user_id = ?"
)


def drop(conn: sqlite3.Connection, tenant: str, user: str) -> None:
    """Delete the user's copy (in the transaction that removes a row or changes a vector)."""
    conn.execute(
        "DELETE FROM user_vector_snapshots WHERE tenant_id = ? AND user_id = ?", (tenant, user)
    )
    _drop_parts(conn, tenant, user)


def _drop_parts(conn: sqlite3.Connection, tenant: str, user: str) -> None:
    conn.execute(
        "DELETE FROM user_vector_snapshot_parts WHERE tenant_id = ? AND user_id = ?",
        (tenant, user),
    )


def _joined(conn: sqlite3.Connection, tenant: str, user: str, field: str, size: int) -> memoryview:
    """The ``size`` bytes of the copy's ``field``, from its parts (a buffer, not a copy)."""
    whole = np.empty(size, np.uint8)
    start = 0
    parts = conn.execute(
        "SELECT bytes FROM user_vector_snapshot_parts"
        " WHERE tenant_id = ? AND user_id = ? AND field = ? ORDER BY part",
        (tenant, user, field),
    )
    for (piece,) in parts:
        end = start + len(piece)
        if end > size:
            raise ValueError(f"the copy's {field} run past their {size} bytes")
        whole[start:end] = np.frombuffer(piece, np.uint8)
        start = end
    if start != size:
        raise ValueError(f"the copy's {field} hold {start} of their {size} bytes")
    return whole.data


def read(conn: sqlite3.Connection, tenant: str, user: str, dimension: int) -> UserVectors | None:
    """The user's copy in ``conn``'s snapshot, at the versions it was written at; None
    when there is none or it does not decode as ``dimension``-wide vectors."""
    row = conn.execute(_READ, (tenant, user)).fetchone()
    if row is None:
        return None
    versions = (int(row[0]), int(row[1]), int(row[2]))
    header, rowids, sessions, asks = row[3:]
    try:
        meta = json.loads(header)
        if meta.get("format") != FORMAT:
            raise _OtherFormat(f"a copy of format {meta.get('format')!r}, not {FORMAT}")
        sizes = meta["bytes"]
        vectors = _joined(conn, tenant, user, "vectors", int(sizes["vectors"]))
        coarse = (
            _joined(conn, tenant, user, "coarse", int(sizes["coarse"])) if sizes["coarse"] else None
        )
        return _decoded(versions, meta, rowids, vectors, sessions, asks, coarse, dimension)
    except _OtherFormat as exc:  # an older chatmem's: read from the rows, written anew
        logger.debug("read past a user's vector copy: %s", exc)
        return None
    except (ValueError, TypeError, KeyError) as exc:  # boundary: bytes from the file
        logger.warning("ignored a user's vector copy that does not decode: %s", exc)
        return None


class _OtherFormat(ValueError):
    """A copy written in another layout than ``FORMAT``."""


def _decoded(
    versions: Versions,
    meta: dict[str, Any],
    rowids: bytes,
    vectors: memoryview,
    sessions: bytes,
    asks: bytes,
    coarse: memoryview | None,
    dimension: int,
) -> UserVectors:
    ids, names = meta["ids"], meta["sessions"]
    count = len(ids)
    held = np.frombuffer(rowids, np.int64)
    matrix = np.frombuffer(vectors, np.float32)
    numbered = np.frombuffer(sessions, np.int32)
    asking = np.frombuffer(asks, np.bool_)
    if not isinstance(names, list) or len(matrix) != count * dimension:
        raise ValueError(f"{count} ids for {len(matrix)} floats of {dimension} a vector")
    if not len(held) == len(numbered) == len(asking) == count:
        raise ValueError(f"{count} ids for {len(held)} rows")
    numbers = SessionNumbers()
    for name in names:
        numbers.of(str(name))
    if len(numbered) and (numbered.min() < -1 or numbered.max() >= len(names)):
        raise ValueError("a session number out of range")
    turns = Turns(numbered.astype(np.int64), asking.copy(), numbers)
    projected = _coarse(meta.get("coarse"), coarse, count, dimension)
    shaped = matrix.reshape(count, dimension)
    return UserVectors(held, shaped, versions, list(ids), turns, projected)


def _coarse(meta: object, blob: memoryview | None, count: int, dimension: int) -> Coarse | None:
    """The projection kept with the copy (``coarse``: fitting it took 53 ms a user of
    20,000-37,000 memories); None where none was kept, and it is fitted on load."""
    if blob is None or not isinstance(meta, dict):
        return None
    axes, fitted = int(meta["dimensions"]), int(meta["fitted"])
    if axes != coarse_settings.DIMENSIONS:  # fitted under other settings: fitted anew
        return None
    floats = np.frombuffer(blob, np.float32)
    if len(floats) != dimension + dimension * axes + count * axes:
        raise ValueError("the projection is not of the copy's size")
    basis_ends = dimension + dimension * axes
    return Coarse(
        floats[:dimension],
        floats[dimension:basis_ends].reshape(dimension, axes),
        floats[basis_ends:].reshape(count, axes),
        fitted,
    )


def _encoded(vectors: UserVectors) -> tuple[tuple[str, bytes, bytes, bytes], dict[str, bytes]]:
    """The copy's row (header, rowids, sessions, asks) and its fields kept in parts."""
    names = vectors.turns.numbers.named()
    coarse, projected = vectors.coarse, b""
    meta: dict[str, object] = {
        "format": FORMAT,
        "ids": vectors.ids,
        "sessions": names,
        "coarse": None,
    }
    if coarse is not None:
        meta["coarse"] = {"dimensions": coarse.basis.shape[1], "fitted": coarse.fitted}
        parts = (coarse.mean, coarse.basis, coarse.rows)
        projected = b"".join(np.ascontiguousarray(part, np.float32).tobytes() for part in parts)
    split = {
        "vectors": np.ascontiguousarray(vectors.matrix, np.float32).tobytes(),
        "coarse": projected,
    }
    meta["bytes"] = {field: len(data) for field, data in split.items()}
    row = (
        json.dumps(meta),
        np.ascontiguousarray(vectors.rowids, np.int64).tobytes(),
        vectors.turns.sessions.astype(np.int32).tobytes(),
        np.ascontiguousarray(vectors.turns.asks, np.bool_).tobytes(),
    )
    return row, split


def _parts(
    tenant: str, user: str, split: dict[str, bytes]
) -> list[tuple[str, str, str, int, bytes]]:
    return [
        (tenant, user, field, number, data[start : start + PART_BYTES])
        for field, data in split.items()
        for number, start in enumerate(range(0, len(data), PART_BYTES))
    ]


class VectorSnapshots:
    """Writes users' copies in one background thread at low priority. With ``min_rows``
    None none are written or read (the store's writes still drop those on the file)."""

    def __init__(self, file: SQLiteFile, min_rows: int | None = MIN_ROWS) -> None:
        self._file = file
        self.min_rows = min_rows
        self._lock = threading.Lock()
        self._writer: ThreadPoolExecutor | None = None
        self._pending: dict[tuple[str, str], Future[None]] = {}
        self._closed = False

    def wanted(self, vectors: UserVectors, copied: UserVectors | None) -> bool:
        """Whether ``vectors`` (just built or brought on from ``copied``) should be kept."""
        if self.min_rows is None or len(vectors.rowids) < self.min_rows:
            return False
        if copied is None:
            return True
        return len(vectors.rowids) - len(copied.rowids) > STALE_SHARE * len(copied.rowids)

    def keep(self, tenant: str, user: str, vectors: UserVectors) -> None:
        """Write ``vectors`` as the user's copy, in the background (one write a user at a
        time; a user whose copy is being written keeps that one)."""
        key = (tenant, user)
        with self._lock:
            if self._closed or key in self._pending:
                return
            if self._writer is None:
                self._writer = ThreadPoolExecutor(
                    1, thread_name_prefix="chatmem-vector-copy", initializer=lower_priority
                )
            try:
                done = self._writer.submit(self._write, tenant, user, vectors)
            except RuntimeError:  # the interpreter is shutting down
                return
            self._pending[key] = done
        done.add_done_callback(lambda _: self._forget(key))

    def _forget(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._pending.pop(key, None)

    def _write(self, tenant: str, user: str, vectors: UserVectors) -> None:
        row, split = _encoded(vectors)

        def write(conn: sqlite3.Connection) -> None:
            if self._closed:  # closing: a copy is not worth keeping the store open for
                return
            now = conn.execute(
                "SELECT appended, changed FROM user_versions WHERE tenant_id = ? AND user_id = ?",
                (tenant, user),
            ).fetchone()
            # Something was removed or changed since: the copy may hold it, so none.
            if now is None or int(now[1]) != vectors.versions[1]:
                return
            # A copy read in an older snapshot (a search begun before a write) keeps a newer one.
            conn.execute(
                f"INSERT INTO user_vector_snapshots VALUES ({', '.join('?' * 11)})"
                f" ON CONFLICT (tenant_id, user_id) DO UPDATE SET {_REPLACED}"
                " WHERE excluded.appended > user_vector_snapshots.appended"
                " OR excluded.edited > user_vector_snapshots.edited",
                (tenant, user, *vectors.versions, row[0], row[1], b"", row[2], row[3], None),
            )
            (replaced,) = conn.execute("SELECT changes()").fetchone()
            if not replaced:  # the newer copy stays, and its parts with it
                return
            _drop_parts(conn, tenant, user)
            conn.executemany(
                "INSERT INTO user_vector_snapshot_parts VALUES (?, ?, ?, ?, ?)",
                _parts(tenant, user, split),
            )

        try:
            self._file.write(write)
        except Exception as exc:  # boundary: a copy is an optimisation, never an error
            logger.warning("could not keep a user's vector copy: %s", exc)

    def wait(self) -> None:
        """Until every copy started so far is written (benchmarks, tests)."""
        with self._lock:
            pending = list(self._pending.values())
        for done in pending:
            if not done.cancelled():  # cancelled by close
                done.result()

    def close(self) -> None:
        """Finish the copy being written; drop those not started."""
        with self._lock:
            self._closed = True
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.shutdown(wait=True, cancel_futures=True)


__all__ = ["MIN_ROWS", "VectorSnapshots", "drop", "read"]
