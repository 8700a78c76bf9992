"""What reading a memory's start for when it happened costs a k = 50 search of long
memories (issue 14): ``ranking.says_when`` remembered against matched every time, in one
process, each question's variant drawn at random so that both see the same load.

The store is ``speed.py``'s long one (500 chat turns of 1-3K characters under one user, made
by ``filters.py``'s functions), built in ``--dir`` the first time. The questions are
``filters.py``'s; a third of them start with "When", the only ones the time bonus reads
memories for.

    OPENBLAS_NUM_THREADS=1 python benchmarks/time_mentions.py --dir /tmp/long --questions 400
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

import filters as fl  # noqa: E402 - a sibling script, found through sys.path
from chatmem import LocalEmbedder, LongTermMemory, ranking  # noqa: E402
from chatmem.stores import SQLiteStore  # noqa: E402

MEMORIES = 500


def matched_every_time(text: str) -> bool:
    """``says_when`` as it was: the pattern matched on every call."""
    return ranking.SAYS_TIME.search(text[: ranking.TIME_CHARS].lower()) is not None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=Path, help="where the store is kept")
    parser.add_argument("--questions", type=int, default=400)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    fresh = not (args.dir / "chatmem.db").exists()
    rng = random.Random(3)
    texts = [fl._turn(rng, i) for i in range(MEMORIES)]
    variants: dict[str, Callable[[str], bool]] = {
        "remembered": ranking.says_when,
        "matched every time": matched_every_time,
    }
    times: dict[str, dict[str, list[float]]] = {v: {"when": [], "other": []} for v in variants}
    with LongTermMemory(SQLiteStore(args.dir / "chatmem.db"), LocalEmbedder()) as memory:
        if fresh:
            fl._build(memory, "long", MEMORIES, texts.__getitem__)
            memory.settle()
        pick = random.Random(5)
        for n, question in enumerate(fl._questions(random.Random(17), args.questions + 5, "tm")):
            name = pick.choice(list(variants))
            ranking.says_when = variants[name]  # type: ignore[assignment]
            began = time.perf_counter()
            memory.search(f"{question} ({n})", user_id="long", k=50)
            if n >= 5:  # the first five warm the caches
                kind = "when" if question.startswith("When") else "other"
                times[name][kind].append((time.perf_counter() - began) * 1000)
        ranking.says_when = variants["remembered"]  # type: ignore[assignment]
    result = {
        name: {
            kind: {"n": len(v), "p50_ms": round(statistics.median(v), 3)}
            for kind, v in kinds.items()
        }
        for name, kinds in times.items()
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
