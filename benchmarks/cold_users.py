"""A new process's first search of the heaviest users: read from their rows, or from the
copy of their vectors kept whole (``SQLiteStore(vector_copy_rows=…)``, issue 14).

Runs on a SQLite store that ``scale.py --keep --workdir DIR`` built (``DIR/sqlite-<size>/``).
Each round starts two fresh processes on that file, one after the other, and in each the 20
heaviest users' first searches are timed (the query embedding apart, as ``scale.py`` does):

- ``rows``: ``vector_copy_rows=None``, so each user's vectors are read row by row (as
  before the copies);
- ``build``: the default with no copies on the file (deleted first): each user is read
  from its rows and its copy written in the background meanwhile, as in a process that
  meets a big user before any copy of it exists;
- ``copy``: the default, reading each user's copy (those the ``build`` run wrote; before the
  first round, a process warms the users and waits for their copies).

With ``--drop-caches`` (root only) the kernel's page cache is dropped before each process,
so both read the file from disk, as the first search after a machine's restart does.

    python benchmarks/scale.py --sizes 1000000 --backends sqlite --workdir /tmp/scale --keep
    python benchmarks/cold_users.py --dir /tmp/scale/sqlite-1000000 --rounds 3 --drop-caches \\
        --json docs/results/cold-users.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HEAVY = 20
TENANT = "bench"
QUESTIONS = (
    "What is my budget for the trip?",
    "Where does my sister live?",
    "What did I cook last week?",
    "Which tool do I use at work?",
    "When is the wedding?",
)


def _store(path: Path, mode: str) -> Any:
    from chatmem.stores import SQLiteStore

    if mode == "rows":
        return SQLiteStore(path, vector_copy_rows=None)
    return SQLiteStore(path)


def prepare(path: Path) -> dict[str, Any]:
    """Write the heaviest users' copies (a process that warms them and waits)."""
    from chatmem.records import Filter

    store = _store(path, "copy")
    started = time.perf_counter()
    users = store.heaviest(HEAVY)
    for tenant, user, _ in users:
        store.warm(Filter(tenant_id=tenant, user_id=user))
    store.wait_for_vector_copies()
    took = time.perf_counter() - started
    with store._file.read() as conn:
        (copies, size) = conn.execute(
            "SELECT count(*), sum(length(vectors) + length(rowids) + length(header)"
            " + coalesce(length(coarse), 0))"
            " FROM user_vector_snapshots"
        ).fetchone()
        (parts,) = conn.execute(
            "SELECT coalesce(sum(length(bytes)), 0) FROM user_vector_snapshot_parts"
        ).fetchone()
        size = (size or 0) + parts
    store.close()
    return {"prepare_s": round(took, 2), "copies": copies, "copy_bytes": size}


def one(path: Path, mode: str) -> dict[str, Any]:
    """The heaviest users' first searches in this process."""
    from chatmem import LocalEmbedder, LongTermMemory

    embedder = LocalEmbedder().warm()
    store = _store(path, mode)
    if mode == "build":

        def delete_copies(conn: Any) -> None:
            for table in ("user_vector_snapshots", "user_vector_snapshot_parts"):
                conn.execute(f"DELETE FROM {table}")

        store._file.write(delete_copies)
    memory = LongTermMemory(store, embedder)
    heaviest = store.heaviest(HEAVY)
    users = [user for _, user, _ in heaviest]
    totals, stores = [], []
    for n, user in enumerate(users):
        question = f"{QUESTIONS[n % len(QUESTIONS)]} ({mode} {n})"
        began = time.perf_counter()
        embedder.embed_query(question)  # the query embedding alone, then cached
        embedded = time.perf_counter()
        memory.search(question, user_id=user, tenant_id=TENANT, k=5)
        done = time.perf_counter()
        totals.append((done - began) * 1000)
        stores.append((done - embedded) * 1000)
    store.wait_for_vector_copies()
    memory.close()
    each = [[count, round(ms, 1)] for (_, _, count), ms in zip(heaviest, stores, strict=True)]
    quantiles = {**_quantiles("search", totals), **_quantiles("store", stores)}
    return {"mode": mode, **quantiles, "memories_and_store_ms": each}


def _quantiles(name: str, values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        f"{name}_p50_ms": round(statistics.median(ordered), 2),
        f"{name}_p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
        f"{name}_max_ms": round(ordered[-1], 2),
    }


def _drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True, type=Path, help="scale.py's kept sqlite-<size> folder")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--drop-caches", action="store_true", help="drop the page cache (root)")
    p.add_argument("--json", type=Path)
    p.add_argument("--one", choices=("rows", "build", "copy"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    path = args.dir / "chatmem.db"
    if args.one:
        print(json.dumps(one(path, args.one)))
        return 0
    if not path.exists():
        p.error(f"no store at {path}: build it with scale.py --keep --workdir")
    result: dict[str, Any] = {"store": str(path), "drop_caches": args.drop_caches}
    result.update(prepare(path))
    print(json.dumps(result), flush=True)
    runs = []
    for n in range(args.rounds):
        for mode in ("rows", "build", "copy") if n % 2 == 0 else ("copy", "rows", "build"):
            if args.drop_caches:
                _drop_caches()
            command = [sys.executable, __file__, "--dir", str(args.dir), "--one", mode]
            out = subprocess.run(command, check=True, capture_output=True, text=True)
            run = {"round": n + 1, **json.loads(out.stdout.splitlines()[-1])}
            print(json.dumps(run), flush=True)
            runs.append(run)
    result["runs"] = runs
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
