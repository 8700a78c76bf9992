"""Two versions of one step of a k = 50 search of long memories, in one process (issue 14):
each question's version drawn at random, so that both see the same load.

The store is ``speed.py``'s long one (500 chat turns of 1-3K characters under one user,
made by ``filters.py``'s functions), built in ``--dir`` the first time. ``--change``:

- ``says-when``: ``ranking.says_when`` remembered, or matched every time. A third of the
  questions start with "When", the only ones the time bonus reads memories for: their
  times are reported apart.
- ``read-ahead``: the SQLite store reading the keyword half's best records while the query
  vector is computed (``SearchQuery.read_ahead``), or not.

    OPENBLAS_NUM_THREADS=1 python benchmarks/long_search_ab.py --dir /tmp/long \\
        --change says-when --questions 400
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import filters as fl  # noqa: E402 - a sibling script, found through sys.path
from chatmem import LocalEmbedder, LongTermMemory, ranking  # noqa: E402
from chatmem.stores import SQLiteStore  # noqa: E402

MEMORIES = 500


def matched_every_time(text: str) -> bool:
    """``says_when`` as it was: the pattern matched on every call."""
    return ranking.SAYS_TIME.search(text[: ranking.TIME_CHARS].lower()) is not None


def _not_read(*_: Any) -> None:
    return None


def _versions(change: str) -> dict[str, Callable[[], None]]:
    """Each version of ``change``: what puts it in place."""
    if change == "says-when":
        remembered = ranking.says_when

        def put_when(f: Callable[[str], bool]) -> Callable[[], None]:
            return lambda: setattr(ranking, "says_when", f)

        return {"remembered": put_when(remembered), "matched": put_when(matched_every_time)}
    reads = SQLiteStore.__dict__["_read_ahead"]

    def put_read(f: Any) -> Callable[[], None]:
        return lambda: setattr(SQLiteStore, "_read_ahead", f)

    return {"read ahead": put_read(reads), "not": put_read(staticmethod(_not_read))}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=Path, help="where the store is kept")
    parser.add_argument("--change", required=True, choices=["says-when", "read-ahead"])
    parser.add_argument("--questions", type=int, default=400)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    fresh = not (args.dir / "chatmem.db").exists()
    rng = random.Random(3)
    texts = [fl._turn(rng, i) for i in range(MEMORIES)]
    versions = _versions(args.change)
    times: dict[str, dict[str, list[float]]] = {v: {"when": [], "other": []} for v in versions}
    with LongTermMemory(SQLiteStore(args.dir / "chatmem.db"), LocalEmbedder()) as memory:
        if fresh:
            fl._build(memory, "long", MEMORIES, texts.__getitem__)
            memory.settle()
        pick = random.Random(5)
        for n, question in enumerate(fl._questions(random.Random(17), args.questions + 5, "ab")):
            name = pick.choice(list(versions))
            versions[name]()
            began = time.perf_counter()
            memory.search(f"{question} ({n})", user_id="long", k=50)
            if n >= 5:  # the first five warm the caches
                kind = "when" if question.startswith("When") else "other"
                times[name][kind].append((time.perf_counter() - began) * 1000)
        next(iter(versions.values()))()  # the tree's own version back
    result: dict[str, Any] = {"change": args.change}
    for name, kinds in times.items():
        every = kinds["when"] + kinds["other"]
        result[name] = {"n": len(every), "p50_ms": round(statistics.median(every), 3)}
        for kind, values in kinds.items():
            result[name][kind] = {"n": len(values), "p50_ms": round(statistics.median(values), 3)}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
