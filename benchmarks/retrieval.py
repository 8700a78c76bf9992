"""How long ``Retriever.retrieve()`` takes on a user with 10,000 memories, step by step,
against ``LongTermMemory.search`` alone in the same run.

The user's memories are synthetic but varied: third-person facts from 16 templates over a
few hundred names, places, things, activities, amounts and dates ("User's sister Anna
visited Lisbon in May", "User spent $420 on the new camera"), so the keyword half sees
realistic overlap and the vector half a spread of topics. One in 20 memories updates an
earlier one (an ``updates`` link, the older one closed with ``valid_to``), one in 20 is
``related_to`` another, so expansion has links to follow. A second user holds 1,000
memories that must never show up.

Each timed request is a fresh question (so the embedder's query cache never answers),
after two earlier turns; one in five is vague ("How much was it?") and gets the context
terms. Baseline and pipeline calls alternate, so both see the same machine. Rows:

- ``LongTermMemory.search (baseline)``: ``search(question, k=5)``, what a caller pays
  without the pipeline;
- ``decision`` … ``usage``: the pipeline's steps as ``Retrieval.timings_ms`` reports them
  (``search`` includes embedding the query; it reads 4 x k = 20 candidates and reranks);
- ``pool hand-off and rest``: total minus the steps (the worker thread's start and wait);
- ``retrieve() total``: the whole call, as the caller sees it.

No LLM is called. Run: ``python benchmarks/retrieval.py`` (``--memories``, ``--runs``).

On a small machine run it (and the service) with ``OPENBLAS_NUM_THREADS=1``: numpy's
OpenBLAS threads busy-wait after each call, and on 2 cores they hold up the hand-off to and
from the search thread. Measured on 2 shared cores, 10,000 memories: hand-off p50 1.9-4.7
ms with the default threads, 0.35 ms with one; the baseline search itself 29 -> 19 ms.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from chatmem import LocalEmbedder, LongTermMemory
from chatmem.records import MemoryRecord, RelationType
from chatmem.retrieval import STEPS, Retriever, UsageRecorder
from chatmem.stores import SQLiteStore

PEOPLE = [
    "sister Anna",
    "brother Tom",
    "mother",
    "father",
    "friend Priya",
    "colleague Ben",
    "neighbour Ali",
    "son Leo",
    "daughter Mia",
    "wife Sara",
    "boss Karen",
    "cousin Lea",
    "dentist",
    "landlord",
    "coach Marta",
    "friend Jonas",
]
PLACES = [
    "Lisbon",
    "Porto",
    "Paris",
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
    "Hawaii",
    "Berlin",
    "Kyoto",
    "Seoul",
    "Dublin",
    "Prague",
    "Vienna",
]
THINGS = [
    "camera",
    "laptop",
    "bike",
    "piano",
    "tent",
    "coffee machine",
    "sofa",
    "car",
    "phone",
    "kayak",
    "guitar",
    "desk",
    "oven",
    "garden shed",
    "e-reader",
    "running shoes",
    "winter coat",
    "drone",
]
ACTIVITIES = [
    "hiking",
    "swimming",
    "baking sourdough",
    "rock climbing",
    "painting",
    "sailing",
    "yoga",
    "running",
    "fishing",
    "camping",
    "skiing",
    "knitting",
    "chess",
    "salsa dancing",
    "birdwatching",
    "pottery",
]
FOODS = ["sushi", "ramen", "tacos", "curry", "pizza", "falafel", "pho", "paella", "dumplings"]
MONTHS = ["January", "March", "May", "June", "July", "September", "October", "December"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]

TEMPLATES = [
    "User's {person} visited {place} in {month}",
    "User enjoys {activity} on weekends",
    "User spent ${amount} on the new {thing}",
    "User plans to buy a {thing} before {month}",
    "User's budget for the {place} trip is ${amount}",
    "User recommended {activity} to their {person}",
    "User and their {person} talked about {activity} in {place}",
    "User's favourite food in {place} was {food}",
    "User's meeting with their {person} moved to {day}",
    "User is thinking about moving to {place}",
    "User repaired the {thing} with their {person}",
    "User is allergic to {food}",
    "User started {activity} lessons in {month}",
    "User lent the {thing} to their {person}",
    "User's flight to {place} leaves on {day}",
    "To clean the {thing}, User unplugs it and uses a dry cloth",
]
QUESTIONS = [
    "What did my {person} do in {place} in {month}?",
    "How much did I spend on the {thing} for {activity}?",
    "When is my flight to {place}, is it on {day}?",
    "Do I still enjoy {activity} with my {person}?",
    "What's my budget for the {place} trip in {month}?",
    "Did I lend the {thing} to my {person}?",
    "What {food} place did I like in {place}?",
    "When did I start {activity} in {place}?",
    "Am I allergic to {food} or was it my {person}?",
    "What did I talk about with my {person} on {day}?",
    "Where did I put the {thing} after {activity}?",
    "Did my {person} recommend {food} in {place}?",
]
VAGUE = ["How much was it?", "And the other one?", "What about then?", "Is it far?", "Why?"]


def fill(template: str, rng: random.Random) -> str:
    return template.format(
        person=rng.choice(PEOPLE),
        place=rng.choice(PLACES),
        thing=rng.choice(THINGS),
        activity=rng.choice(ACTIVITIES),
        food=rng.choice(FOODS),
        month=rng.choice(MONTHS),
        day=rng.choice(DAYS),
        amount=rng.randrange(20, 20_000, 10),
    )


def synthetic(user_id: str, count: int, rng: random.Random, now: datetime) -> list[MemoryRecord]:
    """``count`` varied memories over two years; some update or relate to earlier ones."""
    records: list[MemoryRecord] = []
    for index in range(count):
        created = now - timedelta(days=730 * (count - index) / count)
        fields: dict[str, Any] = {
            "user_id": user_id,
            "content": {"raw": fill(rng.choice(TEMPLATES), rng)},
            "metadata": {"importance": round(rng.uniform(0.2, 0.9), 2)},
            "time": {"created_at": created, "updated_at": created},
        }
        if records and index % 20 == 0:
            older = rng.choice(records[-200:])
            fields["relations"] = [{"type": RelationType.UPDATES, "target_id": older.id}]
            records[records.index(older)] = MemoryRecord.checked(
                {**older.model_dump(), "time": {**older.time.model_dump(), "valid_to": created}}
            )
        elif records and index % 20 == 10:
            other = rng.choice(records)
            fields["relations"] = [{"type": RelationType.RELATED_TO, "target_id": other.id}]
        records.append(MemoryRecord.checked(fields))
    return records


def fresh(rng: random.Random, seen: set[str]) -> str:
    """A question not asked before, so the embedder's query cache never answers it."""
    while True:
        text = fill(rng.choice(QUESTIONS), rng)
        if text not in seen:
            seen.add(text)
            return text


def conversation(rng: random.Random, seen: set[str]) -> list[dict[str, str]]:
    """Two earlier turns and a fresh question; one in five is vague (its context is new)."""
    earlier = fresh(rng, seen)
    vague = rng.random() < 0.2
    question = rng.choice(VAGUE) if vague else fresh(rng, seen)
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": earlier},
        {"role": "assistant", "content": "Let me think about that."},
        {"role": "user", "content": question},
    ]


def quantiles(samples: list[float]) -> tuple[float, float]:
    return statistics.median(samples), statistics.quantiles(samples, n=20)[18]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    now = datetime(2025, 1, 15, tzinfo=UTC)
    embedder = LocalEmbedder().warm()
    with tempfile.TemporaryDirectory() as folder:
        memory = LongTermMemory(SQLiteStore(Path(folder) / "bench.db"), embedder)
        with memory:
            began = time.perf_counter()
            records = synthetic("bench", args.memories, rng, now)
            for start in range(0, len(records), 1000):
                memory.add_records(records[start : start + 1000])
            memory.add_records(synthetic("other", 1000, rng, now))
            print(f"stored {args.memories} + 1000 memories in {time.perf_counter() - began:.0f} s")
            run(memory, rng, now, args.runs)


def run(memory: LongTermMemory, rng: random.Random, now: datetime, runs: int) -> None:
    seen: set[str] = set()
    baseline: list[float] = []
    totals: list[float] = []
    steps: dict[str, list[float]] = {step: [] for step in STEPS}
    rest: list[float] = []
    over_budget = injected = 0
    with (
        UsageRecorder(memory) as usage,
        Retriever(memory, usage=usage, search_budget_ms=10_000) as retriever,
    ):
        for _ in range(10):  # thread pool, SQLite connections, vector cache
            retriever.retrieve(conversation(rng, seen), user_id="bench", now=now)
            memory.search(fresh(rng, seen), user_id="bench")
        for _ in range(runs):
            question = fresh(rng, seen)
            start = time.perf_counter()
            memory.search(question, user_id="bench", k=5)
            baseline.append((time.perf_counter() - start) * 1000)

            messages = conversation(rng, seen)
            start = time.perf_counter()
            got = retriever.retrieve(messages, user_id="bench", now=now)
            totals.append((time.perf_counter() - start) * 1000)
            assert got.degraded is None and got.decision.search
            assert all(m.record.user_id == "bench" for m in got.results)
            for step in STEPS:
                steps[step].append(got.timings_ms.get(step, 0.0))
            rest.append(totals[-1] - sum(got.timings_ms.get(s, 0.0) for s in STEPS))
            over_budget += got.timings_ms["search"] + got.timings_ms["expand"] > 50
            injected += len(got.results)

    print(f"\n{runs} requests, {injected / runs:.1f} memories injected on average\n")
    print("| step                              |   p50 ms |   p95 ms |")
    print("|-----------------------------------|---------:|---------:|")
    rows = [("LongTermMemory.search (baseline)", baseline)]
    rows += [(step, steps[step]) for step in STEPS]
    rows += [("pool hand-off and rest", rest), ("retrieve() total", totals)]
    for name, samples in rows:
        p50, p95 = quantiles(samples)
        print(f"| {name:<33} | {p50:8.2f} | {p95:8.2f} |")
    base50, base95 = quantiles(baseline)
    total50, total95 = quantiles(totals)
    print(
        f"\nretrieve() over the baseline: p50 +{total50 - base50:.2f} ms, "
        f"p95 +{total95 - base95:.2f} ms; search + expand over the default 50 ms budget "
        f"in {over_budget} of {runs} requests"
    )


if __name__ == "__main__":
    main()
