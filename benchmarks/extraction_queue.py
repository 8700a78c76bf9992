"""The extraction queue: enqueue latency, worker throughput, LLM calls per 10 turns.

- **enqueue**: p50/p95 of ``SQLiteOutbox.enqueue`` of one turn (a user message and the
  reply), the only extraction work on the request path (target p50 <= 5 ms);
- **worker**: user turns per second through claim -> offline extraction -> write policy
  (real MiniLM embeddings, SQLite store and outbox in one file), batches of 10 turns;
  and the offline extractor alone (target >= 200 turns/s);
- **LLM calls**: requests the scripted OpenAI-compatible server receives per 10 turns
  with ``LLMExtractor`` and a write policy with a decision model (target <= 2: one
  extraction, one batched write decision).

Turns are LoCoMo's (every speaker a user) with ``--data``, else generated first-person
statements. Timings are printed, never asserted.

    python benchmarks/extraction_queue.py [--turns 1000] [--data .../locomo10.json]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chatmem import LocalEmbedder, LongTermMemory
from chatmem.extraction.llm import LLMExtractor
from chatmem.extraction.offline import OfflineExtractor
from chatmem.extraction.prompts import EXTRACTION_PROMPT
from chatmem.llm.client import ModelConfig, OpenAIChatModel
from chatmem.long_term.write_policy import WritePolicy
from chatmem.messages import Message, Role, SessionKey
from chatmem.stores import SQLiteStore
from chatmem.testing import ScriptedOpenAIServer
from chatmem.worker import BatchState, SQLiteOutbox, Worker

TURNS_PER_BATCH = 10

_PLACES = ["Berlin", "Lisbon", "Tokyo", "Austin", "Oslo", "Nairobi", "Lima", "Seoul"]
_THINGS = ["hiking", "jazz", "chess", "sushi", "yoga", "painting", "surfing", "baking"]
_PEOPLE = ["Mia", "Leo", "Sam", "Ada", "Noor", "Ivan", "Zoe", "Omar"]
_TEMPLATES = [
    "I live in {place} now.",
    "I love {thing}, it keeps me sane.",
    "My sister {person} is visiting next week.",
    "I work as a nurse at the city hospital.",
    "My budget for the trip to {place} is ${amount}.",
    "I went to {place} last month with {person}.",
    "Honestly I can't stand {thing}.",
    "What do you think about the weather today?",
    "My name is {person}.",
    "I have a dog named {person}.",
]


def synthetic_turns(count: int, seed: int = 7) -> list[tuple[str, str]]:
    """(user, text) pairs: first-person statements mixed with small talk, 10 users."""
    rng = random.Random(seed)
    turns = []
    for index in range(count):
        text = rng.choice(_TEMPLATES).format(
            place=rng.choice(_PLACES),
            thing=rng.choice(_THINGS),
            person=rng.choice(_PEOPLE),
            amount=rng.randrange(1, 20) * 500,
        )
        turns.append((f"user{index % 10}", text))
    return turns


def locomo_turns(path: Path, count: int) -> list[tuple[str, str]]:
    """(speaker, text) pairs from LoCoMo, every speaker a user of their own."""
    turns: list[tuple[str, str]] = []
    for conversation in json.loads(path.read_text()):
        sessions = conversation["conversation"]
        for name in sorted(
            (k for k in sessions if re.fullmatch(r"session_\d+", k)),
            key=lambda k: int(k.split("_")[1]),
        ):
            turns.extend((t["speaker"].lower(), t["text"]) for t in sessions[name])
            if len(turns) >= count:
                return turns[:count]
    return turns


def batches(turns: list[tuple[str, str]]) -> Iterator[tuple[SessionKey, list[Message]]]:
    """Each user's turns, 10 at a time, each followed by a short reply."""
    by_user: dict[str, list[str]] = {}
    for user, text in turns:
        by_user.setdefault(user, []).append(text)
    for user, texts in by_user.items():
        for start in range(0, len(texts), TURNS_PER_BATCH):
            messages: list[Message] = []
            for text in texts[start : start + TURNS_PER_BATCH]:
                messages.append(Message(role=Role.USER, content=text))
                messages.append(Message(role=Role.ASSISTANT, content="I see, tell me more."))
            yield SessionKey("bench", user, f"s{start // TURNS_PER_BATCH}"), messages


def _ms(samples: list[float], quantile: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] * 1000


def enqueue_latency(directory: Path, count: int) -> tuple[float, float]:
    """p50 and p95 of one turn's enqueue, in milliseconds."""
    with SQLiteOutbox(directory / "enqueue.db") as outbox:
        samples = []
        for index in range(count):
            turn = [
                Message(role=Role.USER, content=f"My name is Anna and this is turn {index}"),
                Message(role=Role.ASSISTANT, content="Nice to meet you, Anna."),
            ]
            start = time.perf_counter()
            outbox.enqueue(SessionKey("bench", "anna", "s1"), turn)
            samples.append(time.perf_counter() - start)
    return _ms(samples, 0.5), _ms(samples, 0.95)


def worker_throughput(
    directory: Path, turns: list[tuple[str, str]], embedder: LocalEmbedder
) -> dict[str, float]:
    """User turns per second through the worker, and the counts it wrote."""
    path = directory / "worker.db"
    with SQLiteOutbox(path) as outbox, LongTermMemory(SQLiteStore(path), embedder) as lt:
        for key, messages in batches(turns):
            outbox.enqueue(key, messages)
        worker = Worker(outbox, lt, OfflineExtractor(), WritePolicy(), batch_size=8)
        start = time.perf_counter()
        worker.drain()
        seconds = time.perf_counter() - start
        assert outbox.counts()[BatchState.DONE] == worker.stats.completed
        stats = worker.stats
    return {
        "turns_per_s": len(turns) / seconds,
        "facts": stats.facts,
        "stored": stats.stored,
        "updated": stats.updated,
        "superseded": stats.superseded,
        "skipped": stats.skipped,
    }


def extraction_alone(turns: list[tuple[str, str]]) -> float:
    """User turns per second through the offline extractor alone."""
    extractor = OfflineExtractor()
    messages = [Message(role=Role.USER, content=text) for _, text in turns]
    start = time.perf_counter()
    for message in messages:
        extractor.extract([message])
    return len(messages) / (time.perf_counter() - start)


_LINE = re.compile(r"^\[(?P<id>[^\]]+)\] \([^)]*\) user: (?P<text>.*)$", re.MULTILINE)
_NEW = re.compile(r"^NEW fact (?P<index>\d+):", re.MULTILINE)
_EXISTING = re.compile(r"^  EXISTING \[(?P<id>[^\]]+)\]", re.MULTILINE)


def scripted_reply(body: dict[str, Any]) -> str:
    """The scripted model: facts for an extraction request (one per user line, its subject
    the topic word), and "supersede the first candidate" for a write decision."""
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    if system == EXTRACTION_PROMPT:
        facts = [
            {
                "text": f"User said: {m['text']}",
                "subject": f"topic {m['text'].split()[1]}",
                "importance": 0.8,
                "confidence": 0.9,
                "source_ids": [m["id"]],
            }
            for m in _LINE.finditer(user)
        ]
        return json.dumps({"facts": facts})
    decisions = []
    for block in re.split(r"(?=^NEW fact )", user, flags=re.MULTILINE):
        new, existing = _NEW.search(block), _EXISTING.search(block)
        if new and existing:
            index = int(new["index"])
            decisions.append({"fact": index, "action": "supersede", "targets": [existing["id"]]})
    return json.dumps({"decisions": decisions})


def llm_calls_per_10_turns(directory: Path, embedder: LocalEmbedder, rounds: int = 5) -> float:
    """Chat requests per 10 user turns, with extraction and write decisions by a model."""
    path = directory / "llm.db"
    with (
        ScriptedOpenAIServer(responder=scripted_reply) as server,
        OpenAIChatModel(ModelConfig(endpoint=server.base_url, model="m")) as model,
        SQLiteOutbox(path) as outbox,
        LongTermMemory(SQLiteStore(path), embedder) as lt,
    ):
        worker = Worker(outbox, lt, LLMExtractor(model), WritePolicy(model=model))
        for round_ in range(rounds):
            turns = [("anna", f"My {thing} plan changed in round {round_}") for thing in _THINGS]
            turns += [
                ("anna", f"My {place} trip is set for round {round_}") for place in _PLACES[:2]
            ]
            for key, messages in batches(turns):
                outbox.enqueue(key._replace(session_id=f"r{round_}"), messages)
            worker.drain()
        return len(server.chat_requests) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--enqueues", type=int, default=2000)
    parser.add_argument("--data", type=Path, help="locomo10.json, for real conversation turns")
    args = parser.parse_args()

    turns = locomo_turns(args.data, args.turns) if args.data else synthetic_turns(args.turns)
    source = "LoCoMo" if args.data else "synthetic"
    embedder = LocalEmbedder()
    embedder.embed(["warm up"])
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        p50, p95 = enqueue_latency(directory, args.enqueues)
        worker = worker_throughput(directory, turns, embedder)
        alone = extraction_alone(turns)
        calls = llm_calls_per_10_turns(directory, embedder)

    rows = [
        ("enqueue p50 (ms)", f"{p50:.3f}", "<= 5"),
        ("enqueue p95 (ms)", f"{p95:.3f}", ""),
        (
            f"worker: turns/s (offline extractor + write policy, SQLite, {source})",
            f"{worker['turns_per_s']:.0f}",
            "",
        ),
        ("offline extractor alone: turns/s", f"{alone:.0f}", ">= 200"),
        (
            "worker: facts / stored / updated / superseded / skipped",
            "{facts:.0f} / {stored:.0f} / {updated:.0f} / {superseded:.0f} / {skipped:.0f}".format(
                **worker
            ),
            "",
        ),
        ("LLM calls per 10 turns (extraction + write decision)", f"{calls:.2f}", "<= 2"),
    ]
    print(f"{len(turns)} turns ({source}), {args.enqueues} enqueues")
    print("| metric | value | target |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
