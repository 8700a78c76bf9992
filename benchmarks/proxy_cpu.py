"""What a proxied chat request costs the service in CPU time, thread by thread (issue 14).

``proxy.py`` measures latency and throughput; under 16 closed-loop clients on 2 cores its
p95 is queueing, so what sets it is the CPU each request takes. This runs the service in
this process (the runtime and uvicorn, ``proxy.start_service``, with its own
embedder and ``--memories`` seeded for one user), the stand-in upstream in a process of its
own and the clients in another, and reads each of the service's threads' CPU time from
``/proc/self/task`` before and after each load. So the figures are the service's alone:
neither the clients nor the upstream count.

Loads alternate within one service (``--rounds`` times each of ``--modes`` x
``--switch``): the store and the session logs grow as requests are stored, so a later load
runs on a bigger service, and alternating spreads that over every setting. ``--switch``
sets Python's switch interval before each load (ms; ``serve`` sets 0.2 by default, Python
5). Modes: ``memory`` (memory on, turns stored) and ``off`` (``memory_config.enabled``
false: the bare proxy).

    OPENBLAS_NUM_THREADS=1 python benchmarks/proxy_cpu.py --clients 1,16 --switch 0.2,5 \\
        --rounds 2 --json proxy-cpu.json

Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from typing import Any

import proxy  # benchmarks/proxy.py: the upstream, the seeding, the requests, the load loop
from retrieval import QUESTIONS, fill

TICKS = os.sysconf("SC_CLK_TCK")


def thread_seconds() -> dict[int, float]:
    """CPU seconds (user and system) of each thread of this process, by native id."""
    seconds: dict[int, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat", encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        seconds[int(tid)] = (int(fields[11]) + int(fields[12])) / TICKS
    return seconds


def group(name: str) -> str:
    """A thread's pool: "chatmem-search_1" and "chatmem-search_0" count together."""
    return name.rsplit("_", 1)[0] if name.rsplit("_", 1)[-1].isdigit() else name


def run_clients(url: str, bodies: list[dict[str, Any]], clients: int, seconds: float,
                conn: Connection) -> None:  # fmt: skip
    conn.send(asyncio.run(proxy.load(url, bodies, clients, seconds)))


class Questions:
    """Every distinct question ``retrieval.py``'s templates make (about 7,500), in a random
    order, handed out so that no question is asked twice (the embedder's query cache would
    answer it) until all were: then they come round again, and ``repeated`` says so."""

    def __init__(self, rng: random.Random) -> None:
        made = {fill(rng.choice(QUESTIONS), rng) for _ in range(100_000)}
        self._all = sorted(made)
        rng.shuffle(self._all)
        self._next = 0
        self.repeated = False

    def take(self, count: int) -> list[str]:
        taken = []
        for _ in range(count):
            if self._next == len(self._all):
                self._next, self.repeated = 0, True
            taken.append(self._all[self._next])
            self._next += 1
        return taken


def bodies_for(mode: str, questions: Questions, session: int) -> list[dict[str, Any]]:
    """Requests for one load: for ``memory``, 1,800 fresh questions (180 a second for the
    default 10 s; four such loads use up the templates' questions); the bare proxy (``off``)
    searches nothing, so its questions may repeat."""
    asked = questions.take(1800) if mode == "memory" else [f"question {n}?" for n in range(1800)]
    made = [proxy.chat(q, session + n // proxy.TURNS_PER_SESSION) for n, q in enumerate(asked)]
    if mode == "off":
        return [{**body, "memory_config": {"enabled": False}} for body in made]
    return made


def one_load(
    url: str, bodies: list[dict[str, Any]], clients: int, seconds: float
) -> dict[str, Any]:
    """One closed-loop load from a process of its own, and the service's CPU meanwhile."""
    context = multiprocessing.get_context("spawn")
    mine, theirs = multiprocessing.Pipe()
    before, cpu_before = thread_seconds(), time.process_time()
    task = context.Process(target=run_clients, args=(url, bodies, clients, seconds, theirs))
    task.start()
    loaded: dict[str, Any] = mine.recv()
    task.join()
    after, cpu_after = thread_seconds(), time.process_time()
    names = {t.native_id: group(t.name) for t in threading.enumerate() if t.native_id}
    by_thread: Counter[str] = Counter()
    for tid, spent in after.items():
        by_thread[names.get(tid, "other")] += spent - before.get(tid, 0.0)
    answered = max(1, loaded["requests"])
    outcomes = loaded["outcomes"]
    return {
        "requests_per_s": loaded["requests_per_s"],
        "ms": loaded["ms"],
        "errors": loaded["errors"],
        "outcomes": outcomes,
        "memory_on": outcomes.get("injected", 0) / answered if "off" not in outcomes else None,
        "cpu_ms_per_request": (cpu_after - cpu_before) * 1000 / answered,
        "threads_ms_per_request": {
            name: round(spent * 1000 / answered, 3)
            for name, spent in by_thread.most_common()
            if spent > 0
        },
    }


def measure(url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    questions = Questions(random.Random(args.seed + 2))
    rows = []
    session = 10**7
    for round_ in range(1, args.rounds + 1):
        for clients in args.clients:
            for mode in args.modes:
                for switch_ms in args.switch:
                    sys.setswitchinterval(switch_ms / 1000)
                    bodies = bodies_for(mode, questions, session)
                    session += 1000
                    result = one_load(f"{url}/v1/chat/completions", bodies, clients, args.seconds)
                    row = {"round": round_, "clients": clients, "mode": mode,
                           "switch_ms": switch_ms, "questions_repeated": questions.repeated,
                           **result}  # fmt: skip
                    print(line(row), flush=True)
                    rows.append(row)
    return rows


def line(row: dict[str, Any]) -> str:
    on = "" if row["memory_on"] is None else f", memory on {row['memory_on']:.1%}"
    threads = ", ".join(f"{k} {v:.2f}" for k, v in row["threads_ms_per_request"].items())
    ms = row["ms"] or {"p50": float("nan"), "p95": float("nan")}
    return (
        f"round {row['round']}, {row['clients']} clients, {row['mode']}, switch "
        f"{row['switch_ms']} ms: {row['requests_per_s']:.1f}/s, p50 {ms['p50']:.1f} p95 "
        f"{ms['p95']:.1f} ms{on}; service CPU {row['cpu_ms_per_request']:.2f} ms a request "
        f"({threads})"
    )


def main() -> None:
    def numbers(kind: type) -> Any:
        return lambda text: [kind(part) for part in text.split(",")]

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--clients", type=numbers(int), default=[1, 16])
    parser.add_argument("--modes", type=lambda t: t.split(","), default=["memory", "off"])
    parser.add_argument("--switch", type=numbers(float), default=[0.2])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--settle", type=float, default=30.0, help="seconds idle after seeding")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    stop, (mine, theirs) = context.Event(), multiprocessing.Pipe()
    upstream = context.Process(target=proxy.run_upstream, args=(theirs, stop, 1024), daemon=True)
    upstream.start()
    with tempfile.TemporaryDirectory() as folder:
        service = proxy.start_service(folder, str(mine.recv()), args.memories, args.seed)
        # The start-up decay sweep and warming end first: with 15 s, the sweep still ran in
        # the first load (``chatmem-maintenance``, 1.6-2.1 ms a request).
        time.sleep(args.settle)
        try:
            rows = measure(service.url, args)
        finally:
            service.stop()
            stop.set()
            upstream.join(timeout=10)
            service.runtime.close()
    if args.json:
        meta = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
            "command": " ".join(sys.argv),
            "args": vars(args),
        }
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"rows": rows, "meta": meta}, out, indent=2)


if __name__ == "__main__":
    main()
