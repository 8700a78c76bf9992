"""How long ``Memory.get_llm()`` takes for a long session with three blocks.

A 1,000-turn session (2,000 messages of LoCoMo-like length) lives in short-term memory, with a
static block, a fact block holding 50 facts and a vector block over a real SQLite long-term
store. Rows (each timed over ``--runs`` calls, after a warm-up):

- ``baseline``: rendering the window to OpenAI dicts and counting every message's tokens,
  what a packer without per-message caches pays on every call.
- ``pack (static+facts)``: get_llm with the static and fact blocks.
- ``pack (3 blocks, warm)``: all three blocks, the vector block's query embedding cached
  (the same last messages asked twice).
- ``add + pack (3 blocks, new turn)``: a new user message added before each call, so the
  vector block embeds a fresh query and searches: what a chat pays per turn.
- ``LongTermMemory.search alone``: a fresh query over the same long-term store: the part of
  the row above that is long-term search rather than packing.

A second table times ``Memory.add`` of one message, with sessions in memory, in SQLite, and in
SQLite with extraction enabled (queued, not run).

No LLM is called anywhere. Run: ``python benchmarks/context.py`` (``--turns``, ``--runs``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from chatmem import LocalEmbedder, LongTermMemory
from chatmem.extraction.base import Fact
from chatmem.formats import render_message
from chatmem.memory import Memory
from chatmem.memory.blocks import FactExtractionBlock, StaticBlock, VectorBlock
from chatmem.stores import SQLiteStore
from chatmem.tokens import default_counter, message_tokens

TOPICS = [
    "hiking",
    "Lisbon",
    "violin",
    "budget",
    "sourdough",
    "marathon",
    "garden",
    "chess",
    "painting",
    "sailing",
]
# Chat-like lines from a vocabulary of a few hundred words, so keyword search sees realistic
# term overlap rather than every line matching every query.
VOCAB = [
    "trip",
    "budget",
    "hotel",
    "flight",
    "dinner",
    "recipe",
    "sister",
    "brother",
    "daughter",
    "son",
    "wife",
    "husband",
    "friend",
    "dog",
    "cat",
    "garden",
    "piano",
    "violin",
    "guitar",
    "novel",
    "movie",
    "concert",
    "museum",
    "beach",
    "mountain",
    "river",
    "lake",
    "city",
    "village",
    "school",
    "office",
    "project",
    "deadline",
    "meeting",
    "interview",
    "salary",
    "promotion",
    "doctor",
    "dentist",
    "gym",
    "yoga",
    "marathon",
    "bike",
    "car",
    "train",
    "bus",
    "airport",
    "passport",
    "visa",
    "ticket",
    "camera",
    "phone",
    "laptop",
    "coffee",
    "tea",
    "wine",
    "cheese",
    "bread",
    "pasta",
    "salad",
    "soup",
    "cake",
    "cookie",
    "birthday",
    "wedding",
    "party",
    "holiday",
    "weekend",
    "morning",
    "evening",
    "winter",
    "summer",
    "spring",
    "autumn",
    "rain",
    "snow",
    "sun",
    "storm",
    "painting",
    "chess",
    "sailing",
    "hiking",
    "swimming",
    "running",
    "climbing",
    "skiing",
    "fishing",
    "camping",
    "reading",
    "writing",
    "Lisbon",
    "Porto",
    "Paris",
    "Berlin",
    "Tokyo",
    "Denver",
    "Austin",
    "Sydney",
    "Toronto",
    "Madrid",
    "Rome",
    "Oslo",
    "Lima",
    "Cairo",
]
VERBS = [
    "loved",
    "visited",
    "booked",
    "planned",
    "cooked",
    "bought",
    "sold",
    "fixed",
    "painted",
    "watched",
    "read",
    "wrote",
]


def sentence(i: int) -> str:
    rng = random.Random(i)
    a, b, c = rng.sample(VOCAB, 3)
    return f"I {rng.choice(VERBS)} the {a} near the {b} with my {c} last {rng.choice(VOCAB)}."


def timed(call: Callable[[], object], runs: int) -> list[float]:
    call()
    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return samples


def row(name: str, samples: list[float], base: float) -> str:
    p50 = statistics.median(samples)
    p95 = statistics.quantiles(samples, n=20)[18]
    return f"| {name:<28} | {p50:8.2f} | {p95:8.2f} | {p50 / base:6.1f}x |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp())
    embedder = LocalEmbedder()
    embedder.warm()
    long_term = LongTermMemory(SQLiteStore(workdir / "ltm.db"), embedder)
    long_term.add(
        [{"role": "user", "content": sentence(i)} for i in range(2000)],
        user_id="u",
        session_id="old",
    )
    facts = FactExtractionBlock(max_facts=50)
    key_facts = [Fact(text=f"User's favourite {t} spot is number {i}.", subject=f"{t}{i}")
                 for i, t in enumerate(TOPICS * 5)]  # fmt: skip
    facts.extractor = type("Fixed", (), {"extract": lambda self, m: key_facts})()
    static = StaticBlock("The user is a long-distance hiker who lives in Porto.")
    vector = VectorBlock(long_term, top_k=3)

    def memory(blocks: list[object]) -> Memory:
        m = Memory(user_id="u", session_id="s", token_limit=60_000, blocks=blocks)  # type: ignore[arg-type]
        for i in range(args.turns):
            m.add([{"role": "user", "content": sentence(i)},
                   {"role": "assistant", "content": f"Noted turn {i}."}])  # fmt: skip
        return m

    two = memory([static, facts])
    facts.take(two.key, [])
    three = memory([static, facts, vector])
    counter = default_counter()
    window = two.short_term.window(two.key).messages

    def floor() -> None:
        for message in window:
            message_tokens(counter, render_message(message))

    base = timed(floor, args.runs)
    results = [("baseline (render + count)", base)]
    results.append(("pack (static+facts)", timed(two.get_llm, args.runs)))
    results.append(("pack (3 blocks, warm)", timed(three.get_llm, args.runs)))
    turn = [args.turns]

    def new_turn() -> None:
        turn[0] += 1
        three.add({"role": "user", "content": sentence(turn[0] * 7919)})
        three.get_llm()

    results.append(("add + pack (3 blocks, new turn)", timed(new_turn, max(20, args.runs // 4))))
    asked = [0]

    def search_alone() -> None:
        asked[0] += 1
        long_term.search(sentence(asked[0] * 104_729), user_id="u", k=3)

    results.append(("LongTermMemory.search alone", timed(search_alone, max(20, args.runs // 4))))
    in_window = len(window)
    base_p50 = statistics.median(base)
    print(f"\nget_llm, {args.turns} turns ({in_window} messages in the window), 3 blocks\n")
    print("| step                         |  p50 ms  |  p95 ms  | vs base |")
    print("|------------------------------|---------:|---------:|--------:|")
    for name, samples in results:
        print(row(name, samples, base_p50))
    long_term.close()
    add_table(workdir, args.runs)


def add_table(workdir: Path, runs: int) -> None:
    """``Memory.add`` of one message: sessions in memory, in SQLite, and in SQLite with
    extraction enabled (the turn buffered, a batch enqueued in a SQLite outbox every 10
    turns; nothing extracted on the path)."""
    from chatmem import Extraction, SQLiteOutbox
    from chatmem.sessions import SQLiteSessionStore

    sessions = SQLiteSessionStore(workdir / "sessions.db")
    outbox = SQLiteOutbox(workdir / "queue.db")
    setups = {
        "add, in-memory sessions": Memory(session_id="a"),
        "add, SQLite sessions": Memory(session_id="b", sessions=sessions),
        "add, SQLite sessions + extraction queued": Memory(
            session_id="c", sessions=sessions, extraction=Extraction(outbox)
        ),
    }
    rows = []
    for name, memory in setups.items():
        counter = [0]

        def add(memory: Memory = memory, counter: list[int] = counter) -> None:
            counter[0] += 1
            memory.add({"role": "user", "content": sentence(counter[0])})

        rows.append((name, timed(add, runs)))
    base_p50 = statistics.median(rows[0][1])
    print("\nMemory.add of one message (no overflow; 10 turns per extraction batch)\n")
    print("| setup                                    |  p50 ms  |  p95 ms  | vs first |")
    print("|------------------------------------------|---------:|---------:|---------:|")
    for name, samples in rows:
        p50 = statistics.median(samples)
        p95 = statistics.quantiles(samples, n=20)[18]
        print(f"| {name:<40} | {p50:8.3f} | {p95:8.3f} | {p50 / base_p50:7.1f}x |")
    print(f"\nbatches queued: {sum(outbox.counts().values())}")
    sessions.close()
    outbox.close()


if __name__ == "__main__":
    main()
