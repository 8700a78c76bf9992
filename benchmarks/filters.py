"""What a filter costs a search (issue 14): ``LongTermMemory.search`` of one user with no
filter, against the same search with each kind of filter, interleaved in one run so every
row sees the same machine.

Two users are built on the embedded default (SQLite, the local MiniLM):

- ``short``: ``--memories`` (10,000) one-line facts;
- ``long``: ``--long-memories`` (500) chat turns of 1,000 to 3,000 characters, searched
  with k = 50, as the outside run that found the slowdown did.

Each memory has a type, a project (one in four), a tag, a creation time over a year and,
one in ten, a role restriction, so every filter narrows to a real share of the rows. Every
timed search is a fresh question (the query-embedding cache never answers). Rows report
p50 and p95 in ms, and each filter's p50 as a ratio of the unfiltered p50 of the same user.

A second table times searches that each follow an update of one memory's
``user_metadata`` (no new vector), as in a conversation where the write policy updates
memories between questions: the unfiltered search against filters that must see the
update (``--update-runs`` of each).

Run: ``python benchmarks/filters.py`` (``--memories``, ``--long-memories``, ``--runs``,
``--json``). On 2 cores set ``OPENBLAS_NUM_THREADS=1`` (see benchmarks/retrieval.py).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from chatmem import LocalEmbedder, LongTermMemory
from chatmem.records import Filter, MemoryRecord, MemoryType
from chatmem.stores import Change, SQLiteStore

#: Latencies in ms by filter name.
Samples = dict[str, list[float]]
START = datetime(2025, 1, 1, tzinfo=UTC)
TYPES = [MemoryType.SEMANTIC, MemoryType.EPISODIC, MemoryType.PREFERENCE, MemoryType.PROFILE]
PLACES = ["Lisbon", "Kyoto", "Oslo", "Lima", "Accra", "Hanoi", "Quito", "Perth", "Tunis"]
THINGS = ["camera", "bike", "guitar", "laptop", "tent", "kettle", "drone", "piano", "kayak"]
PEOPLE = ["Anna", "Ben", "Chloe", "Dev", "Elif", "Farid", "Greta", "Hugo", "Iris", "Jon"]
FILLER = (
    "We talked about the weekend plans, the weather, the new recipe and the train times. "
    "Then the conversation moved to work, the project deadline and who would review it. "
)


def _fact(rng: random.Random, i: int) -> str:
    person, place, thing = rng.choice(PEOPLE), rng.choice(PLACES), rng.choice(THINGS)
    return rng.choice(
        [
            f"User's friend {person} visited {place} in week {i % 52}",
            f"User bought a {thing} for ${rng.randint(20, 2000)} in {place}",
            f"User wants to learn to play the {thing} with {person}",
            f"User's budget for the {place} trip is ${rng.randint(500, 9000)}",
        ]
    )


def _turn(rng: random.Random, i: int) -> str:
    size = rng.randint(1000, 3000)
    text = f"{_fact(rng, i)}. "
    while len(text) < size:
        text += FILLER
    return text[:size]


def _build(memory: LongTermMemory, user: str, count: int, text: Callable[[int], str]) -> None:
    rng = random.Random(user)
    batch: list[MemoryRecord] = []
    for i in range(count):
        when = START + timedelta(minutes=i * 525_600 // max(count, 1))
        batch.append(
            MemoryRecord.model_validate(
                {
                    "user_id": user,
                    "type": TYPES[i % len(TYPES)],
                    "project_id": "work" if i % 4 == 0 else None,
                    "content": {"raw": text(i)},
                    "metadata": {"tags": [rng.choice(["travel", "music", "money"])]},
                    "user_metadata": {"topic": rng.choice(["travel", "music", "money"])},
                    "time": {"created_at": when, "updated_at": when},
                    "access_control": {"allowed_roles": ["hr"] if i % 10 == 0 else []},
                }
            )
        )
        if len(batch) == 500:
            memory.add_records(batch)
            batch = []
    if batch:
        memory.add_records(batch)


FILTERS: dict[str, dict[str, Any]] = {
    "no filter": {},
    "types": {"types": frozenset({MemoryType.SEMANTIC, MemoryType.EPISODIC})},
    "project": {"project_id": "work"},
    "created_before": {"created_before": START + timedelta(days=200)},
    "valid_at": {"valid_at": START + timedelta(days=400)},
    "metadata": {"metadata": {"topic": "travel"}},
    "reader_roles": {"reader_roles": frozenset()},
}


def _questions(rng: random.Random, runs: int, tag: str) -> list[str]:
    """``runs`` questions, each asked once in a run: ``tag`` names the user and the phase."""
    return [
        f"{rng.choice(['What', 'When', 'How much'])} did I {rng.choice(['buy', 'plan', 'spend'])}"
        f" on the {rng.choice(THINGS)} in {rng.choice(PLACES)}, question {tag} {n}?"
        for n in range(runs)
    ]


def measure(memory: LongTermMemory, user: str, k: int, runs: int, phase: str) -> Samples:
    times: Samples = {name: [] for name in FILTERS}
    rng = random.Random(11)
    for question in _questions(rng, runs, f"{user} {phase}"):
        for name, narrow in FILTERS.items():  # interleaved: every row sees the same moment
            scope = Filter(**narrow) if narrow else None
            began = time.perf_counter()
            memory.search(f"{question} ({name})", user_id=user, k=k, filter=scope)
            times[name].append((time.perf_counter() - began) * 1000)
    return times


#: The searches timed right after an update.
AFTER_UPDATE = ("no filter", "types", "metadata", "reader_roles")


def _update_one(memory: LongTermMemory, user: str, memory_id: str, topic: str) -> None:
    """A new ``user_metadata`` topic for one memory of ``user``, its vector kept."""
    (old,) = memory.store.get([memory_id], Filter(user_id=user))
    new = old.model_copy(
        update={
            "user_metadata": {**old.user_metadata, "topic": topic},
            "metadata": old.metadata.model_copy(update={"version": old.metadata.version + 1}),
        }
    )
    memory.store.update([Change(new, None, old.metadata.version)])


def measure_after_updates(memory: LongTermMemory, user: str, k: int, runs: int) -> Samples:
    """Each search right after an update of one memory of the user."""
    times: Samples = {name: [] for name in AFTER_UPDATE}
    rng = random.Random(13)
    ids = [r.id for r in memory.store.list(Filter(user_id=user), limit=500).records]
    for question in _questions(rng, runs, f"{user} updates"):
        for name in AFTER_UPDATE:
            _update_one(memory, user, rng.choice(ids), rng.choice(["travel", "music", "money"]))
            narrow = FILTERS[name]
            scope = Filter(**narrow) if narrow else None
            began = time.perf_counter()
            memory.search(f"{question} ({name})", user_id=user, k=k, filter=scope)
            times[name].append((time.perf_counter() - began) * 1000)
    return times


def _row(name: str, samples: list[float], base: float) -> dict[str, Any]:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"filter": name, "p50_ms": p50, "p95_ms": p95, "vs_no_filter": p50 / base}


def _table(title: str, times: Samples) -> list[dict[str, Any]]:
    base = statistics.median(times["no filter"])
    rows = [_row(name, samples, base) for name, samples in times.items()]
    print(f"\n{title}")
    print(f"{'filter':<16}{'p50 ms':>9}{'p95 ms':>9}{'x no filter':>13}")
    for row in rows:
        print(
            f"{row['filter']:<16}{row['p50_ms']:>9.2f}{row['p95_ms']:>9.2f}"
            f"{row['vs_no_filter']:>13.2f}"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--long-memories", type=int, default=500)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--update-runs", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="chatmem-filters-"))
    results: dict[str, Any] = {"runs": args.runs, "update_runs": args.update_runs, "users": {}}
    with LongTermMemory(SQLiteStore(folder / "chatmem.db"), LocalEmbedder()) as memory:
        rng = random.Random(3)
        _build(memory, "short", args.memories, lambda i: _fact(rng, i))
        _build(memory, "long", args.long_memories, lambda i: _turn(rng, i))
        for user, k, count in (("short", 5, args.memories), ("long", 50, args.long_memories)):
            measure(memory, user, k, 5, "warm")  # vectors cached, pages read
            title = f"{user}: {count} memories, k = {k}, {args.runs} searches per row"
            rows = _table(title, measure(memory, user, k, args.runs, "timed"))
            updated = measure_after_updates(memory, user, k, args.update_runs)
            title = f"{user}, each search right after an update ({args.update_runs} per row)"
            results["users"][user] = {
                "memories": count,
                "k": k,
                "rows": rows,
                "after_update": _table(title, updated),
            }
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
