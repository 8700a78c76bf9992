"""What one chat message costs ``LongTermMemory.add``, added live (one call per message,
with its session), in a SQLite store that already holds a user's earlier sessions.

Two ways of dating the messages: ``moment`` gives every message of a session the session's
time (as LoCoMo dates them, and as a client that sends a session's time does), ``spaced``
gives each message its own time, seconds apart (as the chat proxy stamps them). Every text is
new, so no embedding comes from a cache.

    python benchmarks/live_add.py --json out.json
    # the code before a change, from a copy of its src/ (git archive HEAD src | tar -x -C DIR):
    PYTHONPATH=DIR/src python benchmarks/live_add.py

Prints p50 and p95 per way of dating, in milliseconds, of the wall time and of the process's
CPU time (all its threads): on a shared machine the CPU time is the steadier measure of cost.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

WORDS = (
    "garden",
    "hiking",
    "guitar",
    "pottery",
    "museum",
    "recipe",
    "marathon",
    "violin",
    "camping",
    "painting",
    "novel",
    "bakery",
    "festival",
    "puppy",
    "sunrise",
    "lake",
    "kayak",
    "chess",
    "poetry",
    "cinema",
    "tennis",
    "yoga",
    "soup",
    "trip",
)


def text(rng: random.Random, n: int) -> str:
    """A new sentence: numbered, so the embedder's cache never holds it."""
    return f"Message {n}: I " + " ".join(rng.choice(WORDS) for _ in range(12)) + "."


def run(dating: str, sessions: int, per_session: int, adds: int, seed: int) -> dict[str, Any]:
    from chatmem import LongTermMemory

    rng = random.Random(seed)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    counter = 0
    with tempfile.TemporaryDirectory() as folder:
        memory = LongTermMemory.open(f"sqlite:///{Path(folder) / 'chatmem.db'}")
        try:
            for s in range(sessions):  # the user's earlier sessions, each added whole
                when = start + timedelta(days=s)
                turns = []
                for i in range(per_session):
                    counter += 1
                    stamp = when if dating == "moment" else when + timedelta(seconds=20 * i)
                    said = text(rng, counter)
                    turns.append({"role": "user", "content": said, "timestamp": stamp})
                memory.add(turns, user_id="u", session_id=f"s{s}")
            live = start + timedelta(days=sessions)
            took, cpu = [], []
            for i in range(adds):
                counter += 1
                stamp = live if dating == "moment" else live + timedelta(seconds=20 * i)
                turn = {
                    "role": "assistant" if i % 2 else "user",
                    "content": text(rng, counter),
                    "timestamp": stamp,
                }
                t0, c0 = time.perf_counter(), time.process_time()
                memory.add(turn, user_id="u", session_id="live")
                took.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
        finally:
            memory.close()
    return {
        "dating": dating,
        "stored_before": sessions * per_session,
        "adds": adds,
        **_percentiles("", took),
        **_percentiles("cpu_", cpu),
    }


def _percentiles(prefix: str, seconds: list[float]) -> dict[str, float]:
    ms = sorted(t * 1000 for t in seconds)
    return {
        f"{prefix}p50_ms": round(statistics.median(ms), 3),
        f"{prefix}p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=100, help="earlier sessions (100)")
    p.add_argument("--per-session", type=int, default=20, help="messages in each (20)")
    p.add_argument("--adds", type=int, default=300, help="live adds timed (300)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    import chatmem.long_term

    results = [
        run(dating, args.sessions, args.per_session, args.adds, args.seed)
        for dating in ("moment", "spaced")
    ]
    for r in results:
        print(
            f"{r['dating']:>7}: add p50 {r['p50_ms']:.2f} ms, p95 {r['p95_ms']:.2f} ms;"
            f" CPU p50 {r['cpu_p50_ms']:.2f} ms, p95 {r['cpu_p95_ms']:.2f} ms"
        )
    out = {"code": chatmem.long_term.__file__, "results": results, "argv": sys.argv[1:]}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
