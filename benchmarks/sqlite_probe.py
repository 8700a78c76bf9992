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

import sys
import threading
import time
from pathlib import Path

from chatmem.cli import main as chatmem_main
from chatmem.stores.sqlite.heap import heap_used


def probe(path: Path, every_s: float = 1.0) -> None:
    while True:
        used = heap_used()
        line = f"{-1 if used is None else used} {threading.active_count()}\n"
        path.with_suffix(".tmp").write_text(line)
        path.with_suffix(".tmp").replace(path)
        time.sleep(every_s)


def main() -> None:
    path = Path(sys.argv[1])
    threading.Thread(target=probe, args=(path,), daemon=True, name="sqlite-probe").start()

    sys.argv = ["chatmem", *sys.argv[2:]]
    chatmem_main()


if __name__ == "__main__":
    main()
