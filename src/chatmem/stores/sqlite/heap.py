"""SQLite's memory in this process, and the bound chatmem puts on it.

Every thread that touches a SQLite file gets its own connection (:mod:`.file`), and each
connection keeps a page cache of up to 2 MB per file by default. A service with forty
threads over three files can so hold a few hundred MB of cached pages that it never gives
back: the soak of issue 11 measured SQLite's heap growing with the thread count, about half
of the service's growth after warm-up. SQLite's soft heap limit bounds all of them together:
past it, connections recycle their least recently used pages instead of allocating more.
chatmem sets it when the process has none; an application that sets its own keeps it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from functools import cache
from typing import Any

#: chatmem's bound on SQLite's heap in one process, page caches of every connection
#: together (``PRAGMA soft_heap_limit``): set only where the process has none.
SOFT_HEAP_LIMIT_BYTES = 64 * 2**20


def bound_heap(conn: Any) -> None:
    """Set :data:`SOFT_HEAP_LIMIT_BYTES` as the process's soft heap limit, unless the
    process already has one (``conn`` is any open connection: the limit is global)."""
    (current,) = conn.execute("PRAGMA soft_heap_limit").fetchone()
    if int(current) == 0:
        conn.execute(f"PRAGMA soft_heap_limit = {SOFT_HEAP_LIMIT_BYTES}")


@cache
def _library() -> ctypes.CDLL | None:
    """The SQLite library chatmem's connections use: pysqlite3's own copy where it is
    installed (it links SQLite in statically), else the one Python's module is linked to."""
    try:
        import pysqlite3.dbapi2  # noqa: F401 - loads the binary looked up below
    except ImportError:  # pragma: no cover - exercised only where pysqlite3 is absent
        import sqlite3  # noqa: F401
    module = sys.modules.get("pysqlite3._sqlite3") or sys.modules.get("_sqlite3")
    for candidate in (getattr(module, "__file__", None), ctypes.util.find_library("sqlite3")):
        if candidate is None:
            continue
        try:
            library = ctypes.CDLL(candidate)
        except OSError:
            continue
        if hasattr(library, "sqlite3_memory_used"):
            library.sqlite3_memory_used.restype = ctypes.c_int64
            return library
    return None


def heap_used() -> int | None:
    """Bytes SQLite holds now in this process (``sqlite3_memory_used``), or None where the
    library cannot be read."""
    library = _library()
    return None if library is None else int(library.sqlite3_memory_used())


__all__ = ["SOFT_HEAP_LIMIT_BYTES", "bound_heap", "heap_used"]
