"""Run ``chatmem`` (any CLI command, usually ``serve``) with a probe thread that writes, once
a second, how much heap SQLite holds in this process (``sqlite3_memory_used()``, every
connection's page cache and statements together) and the thread count, so a soak can tell
SQLite's share of the resident memory from everything else (issue 11, "memory over time").

    python benchmarks/sqlite_probe.py PROBE_FILE serve --port 8080

The probe file holds one line, ``<sqlite bytes> <threads>``, rewritten in place. The probe
reads the SQLite that chatmem's stores use (pysqlite3's bundled copy where it is installed);
where that library cannot be read it writes ``-1``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading
import time
from pathlib import Path


def _library() -> ctypes.CDLL | None:
    """The SQLite that chatmem's stores use: pysqlite3's own copy where it is installed
    (chatmem prefers it, and it links SQLite in statically), else the system library."""
    try:
        import pysqlite3.dbapi2 as module
    except ImportError:
        import sqlite3.dbapi2 as module  # type: ignore[no-redef]
    binary = getattr(sys.modules[module.__name__.rsplit(".", 1)[0] + "._sqlite3"], "__file__", None)
    for candidate in (binary, ctypes.util.find_library("sqlite3")):
        if candidate is None:
            continue
        library = ctypes.CDLL(candidate)
        if hasattr(library, "sqlite3_memory_used"):
            library.sqlite3_memory_used.restype = ctypes.c_int64
            return library
    return None


def sqlite_memory_used(library: ctypes.CDLL | None) -> int:
    """Bytes SQLite holds now in this process, or -1 where the library cannot be read."""
    return -1 if library is None else int(library.sqlite3_memory_used())


def probe(path: Path, every_s: float = 1.0) -> None:
    library = _library()
    while True:
        line = f"{sqlite_memory_used(library)} {threading.active_count()}\n"
        path.with_suffix(".tmp").write_text(line)
        path.with_suffix(".tmp").replace(path)
        time.sleep(every_s)


def main() -> None:
    path = Path(sys.argv[1])
    threading.Thread(target=probe, args=(path,), daemon=True, name="sqlite-probe").start()
    from chatmem.cli import main as chatmem_main

    sys.argv = ["chatmem", *sys.argv[2:]]
    chatmem_main()


if __name__ == "__main__":
    main()
