"""A search's time on the PostgreSQL store, one LoCoMo user (issues 14 and 18).

Builds (once per ``--prefix``: a schema of its own) LoCoMo conversation ``--conversation``
added one turn at a time, as the live benchmark adds it, then times
``LongTermMemory.search`` for each of its questions after ten warm-up searches. To compare
two versions of chatmem, give each its own prefix and run each from its own source tree
(``PYTHONPATH=<git archive REV src>/src``), in turn, on a vacuumed store:

    python benchmarks/postgres_search.py --data "$LOCOMO" --uri "$PG" --prefix bench_a
    psql "$PG" -c "VACUUM ANALYZE bench_a.memories"
    python benchmarks/postgres_search.py --data "$LOCOMO" --uri "$PG" --prefix bench_a
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo_retrieval as lr  # noqa: E402 - a sibling script, found through sys.path
from _locomo import load_locomo  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, type=Path, help="path to locomo10.json")
    parser.add_argument("--uri", required=True, help="a PostgreSQL URI (pgvector installed)")
    parser.add_argument("--prefix", required=True, help="the store's schema")
    parser.add_argument("--conversation", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=1, help="times each question is asked")
    parser.add_argument(
        "--scale",
        type=int,
        default=0,
        help="instead: this many LoCoMo turns under one user (locomo_retrieval's --scale "
        "store, each session added in one call) and 200 questions of all conversations",
    )
    parser.add_argument(
        "--chat",
        action="store_true",
        help="add one turn (a turn of the conversation again, in a session of its own) "
        "before each search, as a chat does; only the searches are timed",
    )
    args = parser.parse_args(argv)
    conversations = load_locomo(args.data)
    conversation = conversations[args.conversation]
    separator = "&" if "?" in args.uri else "?"
    uri = f"{args.uri}{separator}prefix={args.prefix}"
    user = "scale-user" if args.scale else conversation.sample_id
    with tempfile.TemporaryDirectory() as folder:
        system = lr.ChatmemSystem(Path(folder), store=uri)
        memory = system._mem
        from chatmem.records import Filter

        built = memory.store.count(Filter(user_id=user))
        if built == 0:
            turns = lr.scale_turns(conversations, args.scale) if args.scale else None
            if turns is not None:
                system.ingest(user, turns)
            for turn in conversation.turns if turns is None else ():
                system.add_one(user, turn)
            made = len(turns) if turns is not None else len(conversation.turns)
            print(f"built {args.prefix}: {made} turns; vacuum it, run again")
            system.close()
            return 0
        questions = (
            lr.scale_queries(conversations, 200)
            if args.scale
            else [q.question for q in conversation.questions]
        )
        for question in questions[:10]:
            memory.search(f"{question} warm", user_id=user, k=10, threshold=0.0)
        times: list[float] = []
        turns = iter(conversation.turns * (args.rounds + 1))
        for round_ in range(args.rounds):
            for question in questions:
                if args.chat:
                    turn = next(turns)
                    memory.add(
                        [{"role": "user", "name": turn.speaker, "content": turn.text}],
                        user_id=user,
                        session_id=f"chat-{args.prefix}",
                    )
                began = time.perf_counter()
                memory.search(f"{question} {round_}", user_id=user, k=10, threshold=0.0)
                times.append((time.perf_counter() - began) * 1000)
        system.close()
    times.sort()
    result = {
        "prefix": args.prefix,
        "memories": built,
        "searches": len(times),
        "chat": args.chat,
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(times[int(len(times) * 0.95)], 2),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
