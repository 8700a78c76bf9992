"""What the interpreter lock costs a search when another Python thread is busy (issue 14).

A thread that lets go of the lock (a model call, each row a SQLite cursor steps through, a
long NumPy operation) and wants it back waits until the thread holding it lets go: at the
latest after the switch interval (``sys.setswitchinterval``, 5 ms by default). In a service
under load the HTTP threads are that other thread. This builds (once, in ``--dir``) the
store of ``search_split.py`` (``--size`` LoCoMo turns under one user), then times each part
of a search alone and beside one thread that runs Python without pause, at each switch
interval of ``--intervals``:

- the query embedding, the store's search (both halves), reading 10 records (``get``) and
  what 20 say (``said``), and the whole ``LongTermMemory.search``;
- the same reads row by row, as ``SQLiteStore`` read them before 2026-11-28 (``rows``),
  beside the one-row reads it makes now;
- the store's search for a conversation-sized user (LoCoMo's first conversation, kept in
  ``--dir``/conversation), whose keyword half FTS5 answers.

    OPENBLAS_NUM_THREADS=1 python benchmarks/lock_handoffs.py --data "$LOCOMO" \\
        --dir /tmp/split-10k --json handoffs.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo_retrieval as lr  # noqa: E402 - a sibling script, found through sys.path
from _locomo import load_locomo  # noqa: E402
from search_split import scale_system  # noqa: E402

USER = "scale-user"


class Busy:
    """A thread that runs Python without pause while it is entered."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)

    def _spin(self) -> None:
        count = 0
        while not self._stop.is_set():
            count += 1

    def __enter__(self) -> Busy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _p50(run: Callable[[int], object], rounds: int) -> float:
    times = []
    for n in range(rounds):
        began = time.perf_counter()
        run(n)
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def parts(system: Any, queries: Sequence[str]) -> dict[str, Callable[[int], object]]:
    """Each part of a search, called with a round number (fresh text each round)."""
    from chatmem.records import Filter
    from chatmem.stores.base import SearchQuery
    from chatmem.stores.sql_rows import record_of
    from chatmem.stores.sqlite.filters import where

    memory = system._mem
    store, embedder = memory.store, memory.embedder
    scope = Filter(user_id=USER)
    vector = embedder.embed_query(queries[0])
    with store._file.read() as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM memories WHERE user_id = ?", (USER,))]
    rng = random.Random(7)
    fresh = itertools.count()  # a text never embedded before, in every phase

    def question(n: int) -> str:
        return f"{queries[n % len(queries)]} {next(fresh)}"

    def rows(count: int, columns: str, parse: bool) -> Callable[[int], object]:
        def read(n: int) -> object:
            picked = tuple(rng.sample(ids, count))
            conditions, params = where(scope.model_copy(update={"ids": picked}))
            with store._file.read() as conn:
                sql = f"SELECT {columns} FROM memories AS m WHERE {conditions}"
                found = list(conn.execute(sql, params))
            return [record_of(row[0]) for row in found] if parse else found

        return read

    return {
        "query embedding": lambda n: embedder.embed_query(question(n)),
        "store search (both halves)": lambda n: store.search(
            SearchQuery(
                filter=scope, text=queries[n % len(queries)], candidates=50, embed=lambda: vector
            )
        ),
        "get 10 records": lambda n: store.get(rng.sample(ids, 10), scope),
        "get 10, row by row (before)": rows(10, "m.body", parse=True),
        "said 20": lambda n: store.said(rng.sample(ids, 20), scope),
        "said 20, row by row (before)": rows(
            20,
            "m.id, json_extract(m.body, '$.context.speaker'),"
            " json_extract(m.body, '$.content.raw')",
            parse=False,
        ),
        "LongTermMemory.search, k 10": lambda n: memory.search(
            question(n), user_id=USER, k=10, threshold=0.0
        ),
    }


def small_search(system: Any, user: str, conversation: Any) -> Callable[[int], object]:
    """The store's search (both halves) of ``user``'s questions, their vectors made once."""
    from chatmem.records import Filter
    from chatmem.stores.base import SearchQuery

    memory = system._mem
    questions = [q.question for q in conversation.questions][:50]
    vectors = {q: memory.embedder.embed_query(q) for q in questions}
    scope = Filter(user_id=user)

    def search(n: int) -> object:
        question = questions[n % len(questions)]
        return memory.store.search(
            SearchQuery(filter=scope, text=question, candidates=50, embed=lambda: vectors[question])
        )

    return search


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="path to locomo10.json")
    parser.add_argument("--dir", required=True, type=Path, help="where the store is kept")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument(
        "--intervals", default="5,0.2", help="switch intervals to measure beside, in ms"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    conversations = load_locomo(args.data)
    system = scale_system(args.dir, conversations, args.size)  # under USER
    queries = lr.scale_queries(conversations, 200)
    measured = parts(system, queries)
    # A conversation-sized user (LoCoMo's first, 419 turns): its keyword half is FTS5's.
    small = lr.ChatmemSystem(args.dir / "conversation")
    first = conversations[0]
    small_user = lr.user_id_for(first)
    if not (args.dir / "conversation" / "built").exists():
        small.ingest(small_user, first.turns)
        (args.dir / "conversation" / "built").touch()
    measured["store search, a LoCoMo user (FTS5)"] = small_search(small, small_user, first)
    for run in measured.values():  # caches filled, model loaded
        _p50(run, 5)
    result: dict[str, dict[str, float]] = {"alone": {}}
    for name, run in measured.items():
        result["alone"][name] = _p50(run, args.rounds)
    default = sys.getswitchinterval()
    try:
        for interval in (float(i) for i in args.intervals.split(",")):
            sys.setswitchinterval(interval / 1000)
            column = f"beside a busy thread, switch interval {interval:g} ms"
            with Busy():
                result[column] = {name: _p50(run, args.rounds) for name, run in measured.items()}
    finally:
        sys.setswitchinterval(default)
    system.close()
    small.close()
    columns = list(result)
    print("| part (p50 ms) | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for name in measured:
        print(f"| {name} | " + " | ".join(f"{result[c][name]:.2f}" for c in columns) + " |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
