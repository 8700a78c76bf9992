"""The inspector's pages against the REST calls they stand beside, with 10,000 memories for
one user (issue 13: list and search pages under 300 ms server time).

A real ``chatmem serve`` app in a thread (``ServiceThread``) on SQLite with the local
embedder; each request is timed from the client over loopback, so both columns carry the
same HTTP overhead and the ratio is the inspector's own cost (rendering, the explanation's
extra steps). Prints a table; never fails on a timing.

    python benchmarks/inspector.py [--memories 10000] [--runs 50]
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from collections.abc import Callable

import httpx

from chatmem.server import Runtime, ServiceConfig, create_app
from chatmem.server.serving import ServiceThread

ADMIN = "bench-admin-key-0123456789"
TOPICS = ("budget", "trip", "dog", "sister", "job", "flat", "bike", "doctor", "piano", "garden")


def seed(runtime: Runtime, user: str, count: int) -> None:
    memory = runtime.long_term
    assert memory is not None
    for start in range(0, count, 500):
        texts = [
            f"Note {n}: the user mentioned their {TOPICS[n % len(TOPICS)]} on day {n}"
            for n in range(start, min(count, start + 500))
        ]
        memory.add(texts, user_id=user, tenant_id="bench", tags=["bench"])


def timed(call: Callable[[], httpx.Response], runs: int) -> list[float]:
    call()  # warm
    took = []
    for _ in range(runs):
        began = time.perf_counter()
        answer = call()
        took.append((time.perf_counter() - began) * 1000)
        assert answer.status_code == 200, answer.text[:300]
    return took


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def run(count: int, runs: int) -> list[tuple[str, list[float], list[float]]]:
    config = ServiceConfig.parse(
        {
            "server": {"data_dir": tempfile.mkdtemp(prefix="chatmem-inspector-")},
            "auth": {"admin_key": ADMIN, "anonymous_tenant": None},
            "memory": {"auto_store": False, "search_budget_ms": 5000},
        }
    )
    runtime = Runtime.start(config)
    began = time.perf_counter()
    seed(runtime, "u", count)
    print(f"seeded {count} memories in {time.perf_counter() - began:.1f} s")
    with ServiceThread(create_app(runtime=runtime)) as service:
        api = httpx.Client(base_url=service.url, timeout=60)
        key = api.post("/v1/admin/keys", json={"tenant_id": "bench"},
                       headers={"Authorization": f"Bearer {ADMIN}"}).json()["key"]  # fmt: skip
        api.headers["Authorization"] = f"Bearer {key}"
        ui = httpx.Client(base_url=service.url, timeout=60, follow_redirects=True)
        form = ui.get("/ui/login").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form)
        assert csrf is not None
        ui.post("/ui/login", data={"key": key, "csrf": csrf.group(1)})
        question = "How is my budget doing?"
        listed = {"user_id": "u", "limit": 50}
        typed = {**listed, "type": "semantic"}
        kind, asked = {"type": "semantic"}, {"q": question}
        searched = {"user_id": "u", "query": question, "k": 20}
        one = first_id(api)
        pairs = [
            ("list, first page (50)", lambda: ui.get("/ui/users/u/memories"),
             lambda: api.get("/v1/memory", params=listed)),
            ("list, type filter", lambda: ui.get("/ui/users/u/memories", params=kind),
             lambda: api.get("/v1/memory", params=typed)),
            ("search with explanation", lambda: ui.get("/ui/users/u/search", params=asked),
             lambda: api.post("/v1/memory/search", json=searched)),
            ("one memory with history", lambda: ui.get(f"/ui/users/u/memories/{one}"),
             lambda: api.get(f"/v1/memory/{one}")),
        ]  # fmt: skip
        return [(name, timed(page, runs), timed(rest, runs)) for name, page, rest in pairs]


def first_id(api: httpx.Client) -> str:
    page = api.get("/v1/memory", params={"user_id": "u", "limit": 1}).json()
    return str(page["memories"][0]["id"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    rows = run(args.memories, args.runs)
    print(f"\n{args.memories} memories for one user, {args.runs} requests each (ms)\n")
    print("| page | inspector p50 | p95 | REST p50 | p95 | ratio p50 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, page, rest in rows:
        ratio = p(page, 50) / p(rest, 50)
        print(
            f"| {name} | {p(page, 50):.1f} | {p(page, 95):.1f} | {p(rest, 50):.1f} "
            f"| {p(rest, 95):.1f} | {ratio:.2f}x |"
        )


if __name__ == "__main__":
    main()
