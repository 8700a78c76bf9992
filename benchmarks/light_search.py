"""What a light search (the retriever's under load) saves in CPU against the light search
before it (``late=False``), at 10,000 memories of one user (issue 14).

Uses the store ``search_split.py`` builds in ``--dir``. Each question gets a fresh suffix
per phase, so no query vector comes from the embedder's cache; the CPU is the process's
(a pair of texts runs on two threads).

    python benchmarks/light_search.py --data locomo10.json --dir /tmp/split-10k
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from chatmem.records import Filter

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo_retrieval as lr  # noqa: E402 - a sibling script, found through sys.path
from _locomo import load_locomo  # noqa: E402
from search_split import scale_system  # noqa: E402

USER = "scale-user"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, type=Path, help="path to locomo10.json")
    parser.add_argument("--dir", required=True, type=Path, help="the store search_split.py built")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    conversations = load_locomo(args.data)
    system = scale_system(args.dir, conversations, args.size)
    memory = system._mem
    memory.store.preload(Filter(user_id=USER))
    questions = lr.scale_queries(conversations, args.queries)
    for question in questions[:10]:  # the first search learns the user's speakers
        memory.search(f"{question} warm", user_id=USER, k=10)
    naming = sum(bool(memory._speakers.named("default", USER, q)) for q in questions)
    runs = []
    for round_no in range(1, args.rounds + 1):
        for label, options in (("late=False", {"late": False}), ("light=True", {"light": True})):
            wall = []
            before = os.times()
            for question in questions:
                started = time.perf_counter()
                text = f"{question} {label[:2].lower()}{round_no}"
                memory.search(text, user_id=USER, k=10, **options)
                wall.append((time.perf_counter() - started) * 1000)
            after = os.times()
            cpu = after.user + after.system - before.user - before.system
            run = {
                "round": round_no,
                "search": label,
                "cpu_ms_a_search": 1000 * cpu / len(questions),
                "wall_p50_ms": statistics.median(wall),
            }
            print(json.dumps(run))
            runs.append(run)
    result = {"questions": len(questions), "naming_a_speaker": naming, "runs": runs}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    system.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
