"""The chat proxy's overhead and throughput, against calling its upstream directly in the
same run.

Three parties, each in a process of its own (``--in-process``: threads of this one, where
they share one GIL): the scripted upstream (``chatmem.testing.ScriptedOpenAIServer``, a
stdlib ``ThreadingHTTPServer`` on loopback answering every chat request with one fixed
reply), the service (``create_app(runtime=...)`` served by uvicorn in a background thread,
memory on, the SQLite store and service database in a temp dir, ``auto_store`` on, the service's own
``LocalEmbedder``), and the client (this process, httpx). Before anything is measured the
benchmark user gets ``--memories`` memories (retrieval.py's synthetic facts: trips and
budgets, people, purchases, hobbies, plans, work meetings, plus a few that answer the
questions exactly), added in batches with ``LongTermMemory.add_records``.

Latency: ``--requests`` sequential rounds after ``--warmup``; each round sends, in a rotating
order, the same fresh personal question ("What's my budget for the Hawaii trip in May?",
never asked before, so the query cache never answers) straight to the upstream and through
the proxy, plus a greeting ("thanks!", which the decision skips) and a question with
``memory_config.enabled=false`` through the proxy. Requests carry ``memory_context`` with
sessions of 10 turns, so extraction is queued (and runs in the service's worker) as in use.
Overhead = a proxy percentile minus the direct percentile of the same run (a difference of
percentiles, not a percentile of differences).

Throughput: ``--clients`` concurrent clients (asyncio + one ``httpx.AsyncClient``) for
``--seconds`` each against the upstream directly, the proxy with memory, and the proxy with
memory off; requests/s, errors (transport errors and non-200 answers), latency under load,
and what memory did (``X-Chatmem-Memory``: a ``degraded`` answer had its search cut off by
the 50 ms budget and went on without memory, which is not an error).

Where the time goes: the service's ``chatmem_memory_seconds`` histogram (GET /metrics) over
the latency phase, and ``Retriever.retrieve`` called in the service process on the same
store with the HTTP load stopped (``Retrieval.timings_ms`` per step).

The stand-in upstream speaks HTTP/1.0 (a new connection per request, for the direct calls
and for the proxy's calls alike), or with ``--keep-alive`` HTTP/1.1 with connections kept
open between requests, as a hosted model's API keeps them; its listen backlog is raised
from socketserver's 5 to ``--backlog`` so concurrent clients do not overflow it. Run::

    python benchmarks/proxy.py [--memories 10000] [--requests 300] [--seconds 15] \
        [--clients 16] [--quick] [--json bench-results/proxy.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from typing import Any, NamedTuple, Protocol

import httpx

from retrieval import fill, fresh, synthetic

USER = "bench"
MODEL = "scripted-model"
SYSTEM = "You are a helpful assistant."
ANSWER = (
    "Here is what I found: your plans look good, and I will keep the details in mind for "
    "next time. Let me know if you want me to change anything."
)
#: Memories that answer some questions exactly (the rest come from the templates).
EXACT = [
    "User's budget for the Hawaii trip is $4,000",
    "User's flight to Hawaii leaves on Friday",
    "User is allergic to shellfish",
    "User's sister Anna is visiting in June",
    "User prefers window seats on long flights",
    "User's team standup moved to 9:30 on Mondays",
]
TURNS_PER_SESSION = 10


class Stop(Protocol):
    def wait(self, timeout: float | None = None) -> bool: ...

    def set(self) -> None: ...


def reply(_: dict[str, Any]) -> str:
    return ANSWER


def run_upstream(conn: Connection, stop: Stop, backlog: int, keep_alive: bool = False) -> None:
    """The scripted upstream until ``stop`` is set; sends its base URL first."""
    from http.server import ThreadingHTTPServer

    from chatmem.testing import ScriptedOpenAIServer

    ThreadingHTTPServer.request_queue_size = backlog
    with ScriptedOpenAIServer(responder=reply, model=MODEL, keep_alive=keep_alive) as server:
        conn.send(server.base_url)
        stop.wait()


class Service(NamedTuple):
    """The service in this process: its runtime, its base URL, and the uvicorn server and
    the thread it runs in."""

    runtime: Any
    url: str
    server: Any
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join()


def start_service(folder: str, upstream_url: str, memories: int, seed: int) -> Service:
    """The service over HTTP in a thread of this process, its files in ``folder``, with
    ``memories`` seeded for the benchmark's user."""
    import uvicorn

    from chatmem.server import Runtime, ServiceConfig, create_app
    from chatmem.server.serving import tune_interpreter

    config = ServiceConfig.parse(
        {
            "server": {"data_dir": folder},
            "upstream": {"base_url": upstream_url},
            "memory": {"enabled": True, "auto_store": True},
            "log_level": "warning",
        }
    )
    tune_interpreter(config.server)  # as ``chatmem serve`` sets its process
    runtime = Runtime.start(config)  # the service's own embedder, as configured
    seed_memories(runtime, memories, random.Random(seed))
    app = create_app(runtime=runtime)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    return Service(runtime, f"http://127.0.0.1:{port}", server, thread)


def run_service(conn: Connection, upstream_url: str, memories: int, seed: int) -> None:
    """The service over HTTP; answers ``("profile", n)`` and ends at ``("stop",)``."""
    with tempfile.TemporaryDirectory() as folder:
        service = start_service(folder, upstream_url, memories, seed)
        conn.send(service.url)
        rng = random.Random(seed + 1)
        while (command := conn.recv())[0] != "stop":
            conn.send(profile(service.runtime, command[1], rng))
        service.stop()


def seed_memories(runtime: Any, count: int, rng: random.Random) -> None:
    from chatmem.records import MemoryRecord

    memory = runtime.long_term
    now = datetime.now(UTC)
    records = synthetic(USER, max(0, count - len(EXACT)), rng, now)
    records += [MemoryRecord.checked({"user_id": USER, "content": {"raw": text}}) for text in EXACT]
    began = time.perf_counter()
    for start in range(0, len(records), 500):
        memory.add_records(records[start : start + 500])
        done = min(start + 500, len(records))
        if done % 2500 < 500 or done == len(records):
            print(f"  seeded {done}/{len(records)} ({time.perf_counter() - began:.0f} s)",
                  flush=True)  # fmt: skip


def profile(runtime: Any, runs: int, rng: random.Random) -> dict[str, Any]:
    """``Retriever.retrieve`` in process on the service's store: ms per step."""
    from chatmem.retrieval import STEPS

    seen: set[str] = set()
    steps: dict[str, list[float]] = {step: [] for step in (*STEPS, "total")}
    outcomes: Counter[str] = Counter()
    for _ in range(runs):
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": fresh(rng, seen)},
        ]
        got = runtime.retriever.retrieve(messages, user_id=USER)
        outcomes[got.degraded or ("injected" if got.results else "empty")] += 1
        for step in steps:
            steps[step].append(got.timings_ms.get(step, 0.0))
    return {
        "steps": {name: summary(values) for name, values in steps.items()},
        "outcomes": dict(outcomes),
    }


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    cut = statistics.quantiles(ordered, n=100, method="inclusive") if len(ordered) > 1 else [0.0]
    return {
        "p50": statistics.median(ordered),
        "p95": cut[min(94, len(cut) - 1)],
        "p99": cut[min(98, len(cut) - 1)],
        "mean": statistics.fmean(ordered),
    }


def chat(question: str, session: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": question},
        ],
        "memory_context": {"user_id": USER, "session_id": f"s{session}"},
        **extra,
    }


def personal(rng: random.Random, seen: set[str]) -> str:
    """A fresh personal question; one in ten about the exact memories."""
    if rng.random() < 0.1:
        template = rng.choice(
            [
                "What's my budget for the Hawaii trip, {month} or not?",
                "When does my flight to Hawaii leave, is it {day}?",
                "What am I allergic to besides {food}?",
                "When is my standup now, still {day}?",
            ]
        )
        question = fill(template, rng)
        if question not in seen:
            seen.add(question)
            return question
    return fresh(rng, seen)


MODES = ("direct", "memory", "no_store", "greeting", "off")


def latency(
    proxy: str, upstream: str, runs: int, warmup: int, rng: random.Random, seen: set[str]
) -> dict[str, Any]:
    samples: dict[str, list[float]] = {mode: [] for mode in MODES}
    outcomes: dict[str, Counter[str]] = {mode: Counter() for mode in MODES}
    errors: Counter[str] = Counter()
    no_store = {"auto_store": False}
    with httpx.Client(timeout=60) as client:
        for index in range(warmup + runs):
            session = index // TURNS_PER_SESSION
            question = personal(rng, seen)
            requests = {
                "direct": (f"{upstream}/chat/completions", chat(question, session)),
                "memory": (f"{proxy}/v1/chat/completions", chat(question, session)),
                "no_store": (
                    f"{proxy}/v1/chat/completions",
                    chat(personal(rng, seen), session + 2 * 10**6, memory_config=no_store),
                ),
                "greeting": (f"{proxy}/v1/chat/completions", chat("thanks!", session + 10**6)),
                "off": (
                    f"{proxy}/v1/chat/completions",
                    chat(personal(rng, seen), session, memory_config={"enabled": False}),
                ),
            }
            for turn in range(len(MODES)):
                mode = MODES[(index + turn) % len(MODES)]
                url, body = requests[mode]
                began = time.perf_counter()
                answer = client.post(url, json=body)
                elapsed = (time.perf_counter() - began) * 1000
                if index < warmup:
                    continue
                if answer.status_code != 200:
                    errors[mode] += 1
                samples[mode].append(elapsed)
                outcomes[mode][answer.headers.get("x-chatmem-memory", "-")] += 1
    return {
        "ms": {mode: summary(values) for mode, values in samples.items()},
        "outcomes": {mode: dict(counts) for mode, counts in outcomes.items()},
        "errors": dict(errors),
    }


async def load(
    url: str, bodies: list[dict[str, Any]], clients: int, seconds: float
) -> dict[str, Any]:
    """``clients`` concurrent clients for ``seconds``: requests/s, errors, latency."""
    loop = asyncio.get_running_loop()
    times: list[float] = []
    outcomes: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    light = [0]
    errors: Counter[str] = Counter()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        deadline = loop.time() + seconds

        async def worker(next_body: int) -> None:
            while loop.time() < deadline:
                body = bodies[next_body % len(bodies)]
                next_body += clients
                began = time.perf_counter()
                try:
                    answer = await client.post(url, json=body)
                except httpx.HTTPError as exc:
                    errors[type(exc).__name__] += 1
                    continue
                times.append((time.perf_counter() - began) * 1000)
                if answer.status_code != 200:
                    errors[f"HTTP {answer.status_code}"] += 1
                outcomes[answer.headers.get("x-chatmem-memory", "-")] += 1
                reason = answer.headers.get("x-chatmem-memory-reason", "-")
                if answer.headers.get("x-chatmem-memory") == "degraded":
                    reasons[reason.split(":")[0]] += 1
                elif "under load" in reason:  # searched, without the late rerank
                    light[0] += 1

        began = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in range(clients)))
        elapsed = time.perf_counter() - began
    done = len(times) - sum(v for k, v in errors.items() if k.startswith("HTTP"))
    return {
        "requests_per_s": done / elapsed,
        "requests": len(times) + sum(v for k, v in errors.items() if not k.startswith("HTTP")),
        "errors": dict(errors),
        "ms": summary(times) if times else None,
        "outcomes": dict(outcomes),
        "degraded_reasons": dict(reasons),
        "light": light[0],
    }


def throughput(
    proxy: str, upstream: str, clients: int, seconds: float, rng: random.Random, seen: set[str]
) -> dict[str, Any]:
    # retrieval.py's questions allow about 7,500 distinct ones; the clients cycle through
    # 3,000 (more than the proxy with memory answers in 15 s on 2 cores).
    questions = [personal(rng, seen) for _ in range(3000)]
    memory = [chat(q, 10**7 + n // TURNS_PER_SESSION) for n, q in enumerate(questions)]
    off = [{**body, "memory_config": {"enabled": False}} for body in memory]
    runs = {
        "direct": (f"{upstream}/chat/completions", memory),
        "memory": (f"{proxy}/v1/chat/completions", memory),
        "off": (f"{proxy}/v1/chat/completions", off),
    }
    results = {}
    for mode, (url, bodies) in runs.items():
        print(f"  {mode}: {clients} clients for {seconds:.0f} s", flush=True)
        results[mode] = asyncio.run(load(url, bodies, clients, seconds))
    return results


def memory_seconds(proxy: str) -> tuple[float, float]:
    """``chatmem_memory_seconds`` sum and count from the service's /metrics."""
    text = httpx.get(f"{proxy}/metrics", timeout=10).text
    found = dict(re.findall(r"^chatmem_memory_seconds_(sum|count) ([0-9.e+-]+)$", text, re.M))
    return float(found.get("sum", 0.0)), float(found.get("count", 0.0))


class Parties:
    """The upstream and the service, in processes (or threads) of their own."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.in_process = args.in_process
        context = multiprocessing.get_context("spawn")
        self.stop: Stop = threading.Event() if self.in_process else context.Event()
        up_parent, up_child = multiprocessing.Pipe()
        self.upstream_task = self._start(
            context, run_upstream, up_child, self.stop, args.backlog, args.keep_alive
        )
        self.upstream = str(up_parent.recv())
        self.conn, service_child = multiprocessing.Pipe()
        self.service_task = self._start(
            context, run_service, service_child, self.upstream, args.memories, args.seed
        )
        self.proxy = str(self.conn.recv())

    def _start(self, context: Any, target: Callable[..., None], *args: Any) -> Any:
        task = (threading.Thread if self.in_process else context.Process)(
            target=target, args=args, daemon=True
        )
        task.start()
        return task

    def profile(self, runs: int) -> dict[str, Any]:
        self.conn.send(("profile", runs))
        answer: dict[str, Any] = self.conn.recv()
        return answer

    def close(self) -> None:
        self.conn.send(("stop",))
        self.service_task.join(timeout=60)
        self.stop.set()
        self.upstream_task.join(timeout=10)


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    ms = results["latency"]["ms"]
    names = {
        "direct": "upstream direct",
        "memory": "proxy, memory on",
        "no_store": "proxy, memory on, auto_store off",
        "greeting": "proxy, greeting (skipped)",
        "off": "proxy, memory off",
    }
    print(f"\nLatency: {args.requests} sequential requests per row, client side, ms\n")
    print("| path | p50 | p95 | p99 | overhead p50 | overhead p95 | overhead p99 | memory |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    outcomes = results["latency"]["outcomes"]
    for mode in MODES:
        row = ms[mode]
        over = [row[q] - ms["direct"][q] for q in ("p50", "p95", "p99")]
        cells = [f"{row[q]:.2f}" for q in ("p50", "p95", "p99")]
        cells += ["" if mode == "direct" else f"{v:+.2f}" for v in over]
        outcome = (
            ""
            if mode == "direct"
            else ", ".join(f"{k} {v}" for k, v in sorted(outcomes[mode].items()))
        )
        print(f"| {names[mode]} | " + " | ".join(cells) + f" | {outcome} |")
    print("\noverhead = proxy percentile minus direct percentile (same run)")
    if results["latency"]["errors"]:
        print(f"errors: {results['latency']['errors']}")

    print(f"\nThroughput: {args.clients} concurrent clients, {args.seconds:.0f} s each\n")
    print("| path | requests/s | vs direct | errors | p50 ms | p95 ms | memory |")
    print("|---|---:|---:|---:|---:|---:|---|")
    load_results = results["throughput"]
    for mode in ("direct", "memory", "off"):
        row = load_results[mode]
        ratio = row["requests_per_s"] / load_results["direct"]["requests_per_s"]
        outcome = ", ".join(f"{k} {v}" for k, v in sorted(row["outcomes"].items()))
        if row.get("light"):
            outcome += f" ({row['light']} light: without the late rerank)"
        timing = row["ms"] or {"p50": float("nan"), "p95": float("nan")}
        print(
            f"| {names[mode]} | {row['requests_per_s']:.1f} | {ratio:.2f} | "
            f"{sum(row['errors'].values())} | {timing['p50']:.1f} | {timing['p95']:.1f} | "
            f"{'' if mode == 'direct' else outcome} |"
        )

    steps = results["profile"]["steps"]
    print(f"\nWhere memory's time goes: Retriever.retrieve in the service process, "
          f"{args.profile} fresh questions, no HTTP load, ms\n")  # fmt: skip
    print("| step | p50 | p95 | mean |")
    print("|---|---:|---:|---:|")
    for name, row in steps.items():
        print(f"| {name} | {row['p50']:.2f} | {row['p95']:.2f} | {row['mean']:.2f} |")
    print(f"outcomes: {results['profile']['outcomes']}")
    print(
        f"chatmem_memory_seconds over the latency phase: mean "
        f"{results['memory_ms_mean']:.2f} ms a request with memory"
    )

    over50 = ms["memory"]["p50"] - ms["direct"]["p50"]
    over95 = ms["memory"]["p95"] - ms["direct"]["p95"]
    rps = load_results["memory"]["requests_per_s"]
    errs = sum(load_results["memory"]["errors"].values())
    print("\nTargets (proxy with memory against the direct upstream, this run):")
    print(f"- overhead p50 {over50:.2f} ms (<= 10): {'met' if over50 <= 10 else 'missed'}")
    print(f"- overhead p95 {over95:.2f} ms (<= 25): {'met' if over95 <= 25 else 'missed'}")
    ok = rps >= 200 and errs == 0
    print(f"- {rps:.0f} requests/s, {errs} errors (>= 200, none): {'met' if ok else 'missed'}")
    print(f"\nload average before {results['meta']['load_before']}, "
          f"after {results['meta']['load_after']}; {os.cpu_count()} CPUs")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--profile", type=int, default=200, help="in-process retrieve() calls")
    parser.add_argument("--backlog", type=int, default=1024, help="the upstream's listen backlog")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--keep-alive",
        action="store_true",
        help="the upstream speaks HTTP/1.1 and keeps connections open, as a hosted API does",
    )
    parser.add_argument("--in-process", action="store_true", help="threads, not processes")
    parser.add_argument("--quick", action="store_true", help="1,000 memories, 60 requests, 5 s")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    if args.quick:
        args.memories, args.requests, args.seconds, args.profile = 1000, 60, 5.0, 50

    load_before = [round(v, 2) for v in os.getloadavg()]
    print(f"seeding {args.memories} memories, starting the upstream and the service", flush=True)
    parties = Parties(args)
    rng = random.Random(args.seed + 2)
    seen: set[str] = set()
    try:
        print(f"latency: {args.warmup} + {args.requests} rounds", flush=True)
        before = memory_seconds(parties.proxy)
        measured = latency(parties.proxy, parties.upstream, args.requests, args.warmup, rng, seen)
        after = memory_seconds(parties.proxy)
        print("throughput", flush=True)
        loaded = throughput(parties.proxy, parties.upstream, args.clients, args.seconds, rng, seen)
        print(f"profile: {args.profile} retrieve() calls", flush=True)
        profiled = parties.profile(args.profile)
    finally:
        parties.close()
    count = after[1] - before[1]
    results = {
        "latency": measured,
        "throughput": loaded,
        "profile": profiled,
        "memory_ms_mean": (after[0] - before[0]) / count * 1000 if count else 0.0,
        "meta": {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
            "python": sys.version.split()[0],
            "command": " ".join(sys.argv),
            "args": vars(args),
            "load_before": load_before,
            "load_after": [round(v, 2) for v in os.getloadavg()],
            "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        },
    }
    report(results, args)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()
