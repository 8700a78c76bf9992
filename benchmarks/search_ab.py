"""Search at 10,000 memories, two versions of chatmem in alternating runs (issue 14).

On a shared 2-core machine one run's p50 moves by several milliseconds from one minute to
the next, more than many changes gain. So this runs the two versions one after the other,
``--rounds`` times, each in a fresh process on the same store (built once by
``search_split.py --dir``), and reports every run: the change is kept only when each
"after" beats each "before". Each run times ``--queries`` fresh questions, the query
embedding alone and the whole search of each, interleaved. ``--present`` asks each question
about the present ("... now?"), the searches that ``ranking.asks_now`` gives their own steps
(``latest_first``, ``long_term.latest``).

    git archive <rev> src | tar -x -C /tmp/before
    OPENBLAS_NUM_THREADS=1 python benchmarks/search_ab.py --data "$LOCOMO" \\
        --dir /tmp/split-10k --before /tmp/before/src --json ab.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def run_once(
    data: Path, folder: Path, queries: int, tag: str, present: bool = False
) -> dict[str, float]:
    """One run in this process: p50 and p95 of the search and of the embedding alone."""
    sys.path.insert(0, str(HERE))
    import locomo_retrieval as lr
    from _locomo import load_locomo
    from chatmem.records import Filter

    system = lr.ChatmemSystem(folder)
    store = system._mem.store
    if hasattr(store, "preload"):
        store.preload(Filter(user_id="scale-user"))
    embedder = system._mem.embedder
    questions = lr.scale_queries(load_locomo(data), queries)
    if present:
        questions = [f"{q.rstrip('?')} now?" for q in questions]
    for question in questions[:10]:
        system.search("scale-user", f"{question} warm", 10)
    searches: list[float] = []
    embeddings: list[float] = []
    for n, question in enumerate(questions):
        # A suffix per run and phase: no question is found in the embedding cache.
        began = time.perf_counter()
        embedder.embed_query(f"{question} e{tag}{n}")
        embeddings.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        system.search("scale-user", f"{question} s{tag}{n}", 10)
        searches.append((time.perf_counter() - began) * 1000)
    searches.sort()
    embeddings.sort()
    return {
        "search_p50_ms": statistics.median(searches),
        "search_p95_ms": searches[int(len(searches) * 0.95)],
        "embedding_p50_ms": statistics.median(embeddings),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, type=Path, help="path to locomo10.json")
    p.add_argument("--dir", required=True, type=Path, help="the store search_split.py built")
    p.add_argument("--before", type=Path, help="the 'before' version's src folder")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--json", type=Path)
    p.add_argument("--present", action="store_true", help='every question asked "... now?"')
    p.add_argument("--one", metavar="TAG", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(run_once(args.data, args.dir, args.queries, args.one, args.present)))
        return 0
    if args.before is None:
        p.error("--before is required")
    if not (args.dir / "chatmem.db").exists():
        p.error(f"no store in {args.dir}: build it with search_split.py --dir")
    versions = {"before": str(args.before.resolve()), "after": str(ROOT / "src")}
    runs: list[dict[str, object]] = []
    for n in range(args.rounds):
        for name, src in versions.items():
            env = {**os.environ, "PYTHONPATH": src}
            command = [sys.executable, __file__, "--data", str(args.data), "--dir", str(args.dir)]
            command += ["--queries", str(args.queries), "--one", f"{n}{name}"]
            command += ["--present"] if args.present else []
            out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
            result = {"round": n + 1, "version": name, **json.loads(out.stdout.splitlines()[-1])}
            print(json.dumps(result), flush=True)
            runs.append(result)
    if args.json:
        args.json.write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
