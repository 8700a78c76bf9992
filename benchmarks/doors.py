"""The overhead of each door over a direct library call (issue 12), in one run.

One store: ``--memories`` (2,000) one-line facts of one user, written through the LangGraph
door (``ChatmemStore.put``, so they carry its namespace metadata and every door can find
them) into the memory store of a real service: ``create_app(runtime=...)`` served by uvicorn
in a thread of this process (``ServiceThread``), SQLite files in a temp dir, the local
MiniLM. The same ``LongTermMemory`` object answers the library calls and the service.

Each round asks every door a question in a shuffled order. Every call gets a question never
asked before (the query-embedding cache never answers), drawn from one pool, so every door
sees the same kind of question and the same machine moment:

- ``library search``: ``LongTermMemory.search(k=5)``, what ``POST /v1/memory/search`` runs;
- ``library retrieval.search``: ``chatmem.retrieval.search(k=5, threshold=0.6)`` (search
  with k x 4, then the rerank), what MCP recall runs (``chatmem.mcp.tools.recall``);
- ``library search, store filter``: ``LongTermMemory.search(k=5)`` with the metadata filter
  ``ChatmemStore`` adds (item, indexed, namespace labels), what the LangGraph door runs;
- ``library search + JSON both ways``: the search, its answer dumped as REST's
  ``SearchResults`` and read back into ``SearchResult`` (what the service and the client
  add in pydantic, without the wire);
- ``HTTP floor``: ``GET /healthz`` over the same httpx connection (no auth, no store);
- ``REST``: ``POST /v1/memory/search`` with httpx (a bearer key, one kept-alive client);
- ``Client``: ``chatmem.Client(...).search`` against the same service;
- ``MCP recall, HTTP``: ``call_tool("recall")`` with the official ``mcp`` client over
  streamable HTTP at ``/mcp`` (one session kept open);
- ``MCP recall, stdio``: the same over stdio, to a ``python -m chatmem.mcp`` subprocess on
  the same SQLite file (``--no-stdio`` leaves it out);
- ``MCP floor: list_prompts``, over each transport: a protocol round trip with no store
  behind it (the server has no prompts);
- ``LangGraph``: ``ChatmemStore.search(("memories", user), query=..., limit=5)``.

Before timing, a check asks every door the same questions and requires each to return
exactly the ids of its library call (floors excepted). Rows give p50 and p95 in ms, the
ratio of the row's p50 to the plain library search's p50, and to the p50 of the library
call the door makes.

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/doors.py --json doors.json``
(``--memories``, ``--rounds``, ``--warmup``, ``--no-stdio``). To time a commit rather than
a working tree, put its ``src`` first on PYTHONPATH (the stdio server inherits it)::

    git archive HEAD src | tar -x -C /tmp/head
    PYTHONPATH=/tmp/head/src OPENBLAS_NUM_THREADS=1 python benchmarks/doors.py \\
        --commit "$(git rev-parse --short HEAD)"
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
from mcp import Client as McpClient
from mcp import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

import chatmem
from chatmem import Client, Filter, LocalEmbedder, LongTermMemory, retrieval
from chatmem.integrations.langgraph import (
    INDEXED_KEY,
    ITEM_KEY,
    LABEL_KEY,
    ChatmemStore,
    memory_id,
)
from chatmem.records import SearchResult
from chatmem.server import Runtime, ServiceConfig, create_app
from chatmem.server.memory_api import SearchResults
from chatmem.server.serving import ServiceThread
from chatmem.testing import ScriptedOpenAIServer

USER = "ana"
TENANT = "default"
NAMESPACE = ("memories", USER)
K = 5
ADMIN_KEY = "doors-admin-key-0123456789abcdef"

PLACES = ["Lisbon", "Kyoto", "Oslo", "Lima", "Accra", "Hanoi", "Quito", "Perth", "Tunis"]
THINGS = ["camera", "bike", "guitar", "laptop", "tent", "kettle", "drone", "piano", "kayak"]
PEOPLE = ["Anna", "Ben", "Chloe", "Dev", "Elif", "Farid", "Greta", "Hugo", "Iris", "Jon"]
OPENERS = ["What did I do with", "When did I get", "Where did I leave", "Why did I sell",
           "How much did I pay for", "Who helped me choose"]  # fmt: skip

#: A door: asks one question, returns the ids it found, best first.
Door = Callable[[str], Awaitable[list[str]]]
FLOOR = "HTTP floor: GET /healthz"
JSON_ROW = "library search + JSON both ways"
PING_HTTP, PING_STDIO = "MCP floor: list_prompts, HTTP", "MCP floor: list_prompts, stdio"
#: Rows that answer no question: what a transport costs on its own.
FLOORS = frozenset({FLOOR, PING_HTTP, PING_STDIO})
#: Each door's library call (the denominator of its second ratio); floors have none.
OWN_CALL: dict[str, str] = {
    "library search": "library search",
    "library retrieval.search": "library retrieval.search",
    "library search, store filter": "library search, store filter",
    JSON_ROW: "library search",
    "REST: POST /v1/memory/search": "library search",
    "Client.search": "library search",
    "MCP recall, HTTP": "library retrieval.search",
    "MCP recall, stdio": "library retrieval.search",
    "LangGraph ChatmemStore.search": "library search, store filter",
}


# -- the store and the questions -----------------------------------------------------------------


def _fact(rng: random.Random, i: int) -> str:
    person, place, thing = rng.choice(PEOPLE), rng.choice(PLACES), rng.choice(THINGS)
    return rng.choice(
        [
            f"User's friend {person} visited {place} in week {i % 52}",
            f"User bought a {thing} for ${rng.randint(20, 2000)} in {place}",
            f"User wants to learn to play the {thing} with {person}",
            f"User's budget for the {place} trip is ${rng.randint(500, 9000)}",
            f"User lent the {thing} to {person} before moving to {place}",
        ]
    )


def build(store: ChatmemStore, count: int) -> float:
    """Write ``count`` facts through the LangGraph door; returns the seconds it took."""
    rng = random.Random(7)
    began = time.perf_counter()
    for i in range(count):
        store.put(NAMESPACE, f"fact-{i}", {"content": _fact(rng, i)})
    return time.perf_counter() - began


def questions(seed: int) -> list[str]:
    """Every question of the pool once, shuffled: 4,860 distinct texts."""
    pool = [
        f"{opener} the {thing} {person} mentioned in {place}?"
        for opener, thing, person, place in itertools.product(OPENERS, THINGS, PEOPLE, PLACES)
    ]
    random.Random(seed).shuffle(pool)
    return pool


# -- the doors -----------------------------------------------------------------------------------


def _sync(call: Callable[[str], list[str]]) -> Door:
    async def door(question: str) -> list[str]:
        return call(question)

    return door


def library_doors(memory: LongTermMemory) -> dict[str, Door]:
    store_filter = Filter(
        metadata={
            ITEM_KEY: True,
            INDEXED_KEY: True,
            **{LABEL_KEY.format(i): label for i, label in enumerate(NAMESPACE)},
        }
    )

    def search(question: str) -> list[str]:
        found = memory.search(question, user_id=USER, tenant_id=TENANT, k=K)
        return [r.record.id for r in found]

    def recall(question: str) -> list[str]:
        found = retrieval.search(memory, question, user_id=USER, tenant_id=TENANT, k=K)
        return [r.record.id for r in found]

    def filtered(question: str) -> list[str]:
        found = memory.search(question, user_id=USER, tenant_id=TENANT, k=K, filter=store_filter)
        return [r.record.id for r in found]

    def json_both_ways(question: str) -> list[str]:
        found = memory.search(question, user_id=USER, tenant_id=TENANT, k=K)
        sent = SearchResults(results=found).model_dump_json()
        back = [SearchResult.model_validate(item) for item in json.loads(sent)["results"]]
        return [r.record.id for r in back]

    return {
        "library search": _sync(search),
        JSON_ROW: _sync(json_both_ways),
        "library retrieval.search": _sync(recall),
        "library search, store filter": _sync(filtered),
    }


def http_doors(url: str, key: str, rest: httpx.Client, client: Client) -> dict[str, Door]:
    def floor(question: str) -> list[str]:
        rest.get(f"{url}/healthz").raise_for_status()
        return []

    def post(question: str) -> list[str]:
        answer = rest.post(
            f"{url}/v1/memory/search", json={"user_id": USER, "query": question, "k": K}
        )
        answer.raise_for_status()
        return [r["record"]["id"] for r in answer.json()["results"]]

    def typed(question: str) -> list[str]:
        return [r.record.id for r in client.search(question, user_id=USER, k=K)]

    return {
        FLOOR: _sync(floor),
        "REST: POST /v1/memory/search": _sync(post),
        "Client.search": _sync(typed),
    }


def mcp_ping(session: McpClient) -> Door:
    """The protocol's round trip alone: ``prompts/list`` (the server has none; ``ping`` is
    gone from protocol 2026-07-28), with no store behind it."""

    async def ping(question: str) -> list[str]:
        await session.list_prompts()
        return []

    return ping


def mcp_door(session: McpClient) -> Door:
    async def recall(question: str) -> list[str]:
        result = await session.call_tool("recall", {"query": question, "user_id": USER, "k": K})
        if result.is_error or result.structured_content is None:
            raise RuntimeError(f"recall failed: {result.content}")
        return [r["memory"]["id"] for r in result.structured_content["results"]]

    return recall


def langgraph_door(store: ChatmemStore) -> Door:
    def search(question: str) -> list[str]:
        items = store.search(NAMESPACE, query=question, limit=K)
        return [memory_id(store.tenant_id, NAMESPACE, item.key) for item in items]

    return _sync(search)


@asynccontextmanager
async def mcp_http(url: str, key: str) -> AsyncIterator[McpClient]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        McpClient(streamable_http_client(f"{url}/mcp", http_client=http)) as session,
    ):
        await session.list_tools()
        yield session


@asynccontextmanager
async def mcp_stdio(store_uri: str) -> AsyncIterator[McpClient]:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "chatmem.mcp", "--store", store_uri, "--tenant", TENANT, "--user", USER],
        env=dict(os.environ),  # OPENBLAS_NUM_THREADS and the rest, as for this process
    )
    async with McpClient(server, read_timeout_seconds=120) as session:
        await session.list_tools()
        yield session


# -- measuring -----------------------------------------------------------------------------------


async def check(doors: dict[str, Door], pool: list[str], count: int = 5) -> dict[str, int]:
    """Every door returns exactly the ids of its own library call (same questions); how
    many ids each door returned in all."""
    returned = dict.fromkeys(doors, 0)
    for question in (pool.pop() for _ in range(count)):
        found = {name: await door(question) for name, door in doors.items()}
        for name, ids in found.items():
            own = OWN_CALL.get(name)
            if own is not None and ids != found[own]:
                raise RuntimeError(f"{name} found {ids}, {own} found {found[own]}")
            returned[name] += len(ids)
    return returned


async def measure(
    doors: dict[str, Door], pool: list[str], rounds: int, rng: random.Random
) -> dict[str, list[float]]:
    """``rounds`` rounds; each asks every door, in a shuffled order, a question of its own."""
    times: dict[str, list[float]] = {name: [] for name in doors}
    names = list(doors)
    for _ in range(rounds):
        rng.shuffle(names)
        for name in names:
            question = pool.pop()
            began = time.perf_counter()
            await doors[name](question)
            times[name].append((time.perf_counter() - began) * 1000)
    return times


def rows(times: dict[str, list[float]]) -> list[dict[str, Any]]:
    p50 = {name: statistics.median(samples) for name, samples in times.items()}
    table = []
    for name, samples in times.items():
        ordered, own = sorted(samples), OWN_CALL.get(name)
        table.append(
            {
                "door": name,
                "calls": len(samples),
                "p50_ms": round(p50[name], 3),
                "p95_ms": round(
                    ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 3
                ),
                "x_library_search": round(p50[name] / p50["library search"], 2),
                "own_call": OWN_CALL.get(name),
                "x_own_call": round(p50[name] / p50[own], 2) if own else None,
            }
        )
    return table


def print_table(table: list[dict[str, Any]]) -> None:
    print(f"\n{'door':<32}{'p50 ms':>9}{'p95 ms':>9}{'x search':>10}{'x own call':>12}")
    for row in table:
        print(
            f"{row['door']:<32}{row['p50_ms']:>9.2f}{row['p95_ms']:>9.2f}"
            f"{row['x_library_search']:>10.2f}"
            + (f"{row['x_own_call']:>12.2f}" if row["x_own_call"] is not None else f"{'-':>12}")
        )


def machine(commit: str | None) -> dict[str, Any]:
    """Where the run ran, and which chatmem it ran (this checkout's src, with its uncommitted
    changes listed, or another copy such as ``git archive HEAD src`` on PYTHONPATH)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
        return done.stdout.rstrip()

    package = Path(chatmem.__file__).resolve().parent
    ours = package == Path(__file__).resolve().parents[1] / "src" / "chatmem"
    return {
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "chatmem_from": str(package),
        "chatmem_commit": commit or (git("rev-parse", "--short", "HEAD") if ours else None),
        "uncommitted_src_changes": (
            git("status", "--short", "--", "src").splitlines() if ours else None
        ),
        "packages": {
            name: version(name)
            for name in ("mcp", "httpx", "httpx2", "fastapi", "uvicorn", "langgraph")
        },
    }


# -- the run -------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    embedder = LocalEmbedder().warm()
    with ScriptedOpenAIServer(responder=lambda body: "ok") as upstream:
        config = ServiceConfig.parse(
            {
                "server": {"data_dir": str(data_dir)},
                "upstream": {"base_url": upstream.base_url},
                "auth": {"admin_key": ADMIN_KEY, "anonymous_tenant": None},
            }
        )
        runtime = Runtime.start(config, embedder=embedder)
        assert runtime.long_term is not None, runtime.memory_error
        memory = runtime.long_term
        store = ChatmemStore(memory, namespace=("memories", "{user}"), tenant_id=TENANT)
        build_s = build(store, args.memories)
        print(f"{args.memories} memories written through ChatmemStore.put in {build_s:.1f} s")
        with ServiceThread(create_app(runtime=runtime)) as served:
            key, _ = runtime.keys.create(TENANT, [])
            return await _timed(args, served.url, key, memory, store, data_dir, build_s)


async def _timed(
    args: argparse.Namespace,
    url: str,
    key: str,
    memory: LongTermMemory,
    store: ChatmemStore,
    data_dir: Path,
    build_s: float,
) -> dict[str, Any]:
    async with AsyncExitStack() as stack:
        rest = stack.enter_context(
            httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=60)
        )
        client = stack.enter_context(Client(url, api_key=key))
        http = await stack.enter_async_context(mcp_http(url, key))
        doors = {
            **library_doors(memory),
            **http_doors(url, key, rest, client),
            PING_HTTP: mcp_ping(http),
            "MCP recall, HTTP": mcp_door(http),
        }
        if args.stdio:
            stdio = await stack.enter_async_context(mcp_stdio(f"sqlite:///{data_dir}/chatmem.db"))
            doors[PING_STDIO] = mcp_ping(stdio)
            doors["MCP recall, stdio"] = mcp_door(stdio)
        doors["LangGraph ChatmemStore.search"] = langgraph_door(store)
        pool = questions(seed=1)
        needed = 5 + (args.warmup + args.rounds) * len(doors)
        if needed > len(pool):
            raise SystemExit(f"{needed} questions needed, the pool has {len(pool)}")
        checked = await check(doors, pool)
        rng = random.Random(5)
        await measure(doors, pool, args.warmup, rng)
        before = machine(args.commit)
        began = time.perf_counter()
        times = await measure(doors, pool, args.rounds, rng)
        seconds = time.perf_counter() - began
        after = os.getloadavg()
    table = rows(times)
    print(f"{args.rounds} rounds in {seconds:.1f} s (after {args.warmup} warm-up rounds)")
    print_table(table)
    return {
        "benchmark": "doors",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "memories": args.memories,
        "k": K,
        "rounds": args.rounds,
        "warmup_rounds": args.warmup,
        "build_s": round(build_s, 1),
        "timed_s": round(seconds, 1),
        "machine": {**before, "load_average_after": after},
        "check": {"questions": 5, "ids_returned": checked},
        "rows": table,
        "samples_ms": {name: [round(t, 3) for t in samples] for name, samples in times.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--no-stdio", dest="stdio", action="store_false")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--commit",
        help="the commit of the chatmem on PYTHONPATH, for the record (default: "
        "this checkout's HEAD, when chatmem comes from its src)",
    )
    args = parser.parse_args()
    for name in ("httpx", "httpx2", "mcp"):  # one INFO line per request otherwise
        logging.getLogger(name).setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="chatmem-doors-") as folder:
        results = anyio.run(run, args, Path(folder))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
