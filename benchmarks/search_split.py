"""Where a search's time goes at 10,000 memories of one user (issue 14).

The issue's target: a search p50 within 1.5 ms of the query embedding alone. This builds
(once, in ``--dir``) a SQLite store of ``--size`` LoCoMo turns under one user, the way
``locomo_retrieval.py --scale`` does, then times the query embedding alone and the whole
search on the same fresh questions, and profiles the searches (cProfile, cumulative).

    OPENBLAS_NUM_THREADS=1 python benchmarks/search_split.py --data "$LOCOMO" \\
        --dir /tmp/split-10k --json split.json
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo_retrieval as lr  # noqa: E402 - a sibling script, found through sys.path
from _locomo import load_locomo  # noqa: E402


def _time(run: Callable[[], object]) -> float:
    began = time.perf_counter()
    run()
    return (time.perf_counter() - began) * 1000


def _quantiles(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {"p50_ms": statistics.median(times), "p95_ms": times[int(len(times) * 0.95)]}


def scale_system(folder: Path, conversations: Sequence[Any], size: int) -> lr.ChatmemSystem:
    """chatmem on the SQLite store in ``folder`` holding ``size`` LoCoMo turns under
    "scale-user" (``locomo_retrieval.scale_turns``), built the first time only."""
    folder.mkdir(parents=True, exist_ok=True)
    system = lr.ChatmemSystem(folder)
    built = folder / f"built-{size}"
    if not built.exists():
        system.ingest("scale-user", lr.scale_turns(conversations, size))
        built.touch()
    return system


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, type=Path, help="path to locomo10.json")
    parser.add_argument("--dir", required=True, type=Path, help="where the store is kept")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--dense",
        action="store_true",
        help="also plain dense search (locomo_retrieval's) on the same turns, interleaved",
    )
    parser.add_argument("--samples", action="store_true", help="keep every query's ms in the JSON")
    args = parser.parse_args(argv)
    conversations = load_locomo(args.data)
    system = scale_system(args.dir, conversations, args.size)
    queries = lr.scale_queries(conversations, args.queries)
    embedder = system._mem.embedder
    store = system._mem.store
    if hasattr(store, "preload"):  # the SQLite store's keyword postings, built now
        from chatmem.records import Filter

        store.preload(Filter(user_id="scale-user"))
    for query in queries[:5]:
        system.search("scale-user", f"{query} warm", 10)
    # A suffix per phase: no phase finds its question in the embedding cache.
    # The same store file read by FTS5 alone (keyword postings never built): the keyword
    # half as it was before the postings, timed query by query beside the search with them.
    from chatmem import LongTermMemory
    from chatmem.stores import SQLiteStore

    fts_only = LongTermMemory(
        SQLiteStore(args.dir / "chatmem.db", keyword_cache_rows=10**12), embedder
    )

    def search_fts(query: str) -> object:
        return fts_only.search(query, user_id="scale-user", k=10, **system._search_kwargs)

    for query in queries[:5]:
        search_fts(f"{query} warm")
    dense = lr.DenseSystem() if args.dense else None
    if dense is not None:
        dense.ingest("scale-user", lr.scale_turns(conversations, args.size))
        for query in queries[:5]:
            dense.search("scale-user", f"{query} warm", 10)
    embedding, search, fts, dense_ms = [], [], [], []
    for query in queries:
        embedding.append(_time(lambda q=query: embedder._embed_many([f"{q} e"], embedder._query())))
        search.append(
            _time(
                lambda q=query: system._mem.search(
                    q + " s", user_id="scale-user", k=10, **system._search_kwargs
                )
            )
        )
        fts.append(_time(lambda q=query: search_fts(f"{q} f")))
        if dense is not None:
            dense_ms.append(_time(lambda q=query, d=dense: d.search("scale-user", q + " d", 10)))
    result = {
        "size": args.size,
        "embedding": _quantiles(embedding),
        "search": _quantiles(search),
        "search_fts5_only": _quantiles(fts),
    }
    if dense is not None:
        result["dense"] = _quantiles(dense_ms)
        dense.close()
    if args.samples:
        samples = {"embedding": embedding, "search": search, "search_fts5_only": fts}
        result["samples_ms"] = samples | ({"dense": dense_ms} if dense is not None else {})
    profile = cProfile.Profile()
    profile.enable()
    for query in queries:
        system.search("scale-user", f"{query} p", 10)
    profile.disable()
    result["over_embedding_ms"] = result["search"]["p50_ms"] - result["embedding"]["p50_ms"]
    print(json.dumps(result, indent=2))
    pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    fts_only.close()
    system.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
