"""A single raw ``add`` against the embedding alone, on the same LoCoMo turns (issue 14).

The issue's target: a single raw ``add`` p50 ≤ 5 ms, durable when it returns. An add is one
embedding plus chatmem's own work (the record, its context, the session's previous turn,
one SQLite transaction or two); this measures both on the same texts, in pairs, so that both
see the same load (on a busy machine their difference still varies by a millisecond from run
to run: ``--overhead`` measures chatmem's share far more steadily).

Each timed add is one LoCoMo turn into a fresh user, with its session, as
``locomo_retrieval.py --adds`` makes it; the store first holds ``--prefill`` conversations
under other users. Unlike ``locomo_retrieval.py --limit-conversations 2 --adds 200``, whose
timed turns were already added one at a time during its ingest (their vectors then come from
the embedder's cache), no timed text is in the cache here: the prefill is added a session
per call, and the cache is emptied before the timed adds. Each pair times the add and the
embedding of the text it embedded (the document model, one text a call, no cache), in
alternating order. ``--profile`` then profiles ``--adds`` more adds (cProfile).

``--overhead`` times chatmem's own share alone: every timed text is embedded first (by the
same model, one text a call), and the adds then take their vectors from a table
(``Precomputed``), so no model runs while an add is timed, and the vectors stored are the
real ones. ``--against DIR`` then compares two
versions of the SQLite write path in one process: each add runs with the write module of
``DIR`` (a ``src/`` folder, e.g. ``git archive <commit> src``) or this tree's, at random, so
both see the same load.

    OPENBLAS_NUM_THREADS=1 python benchmarks/single_add.py --data "$LOCOMO" --json out.json
    OPENBLAS_NUM_THREADS=1 python benchmarks/single_add.py --data "$LOCOMO" --overhead \
        --adds 3000 --against DIR/src
    # the code before a change, from a copy of its src/ (git archive HEAD src | tar -x -C DIR):
    PYTHONPATH=DIR/src python benchmarks/single_add.py --data "$LOCOMO"
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo_retrieval as lr  # noqa: E402 - a sibling script, found through sys.path
from _locomo import Turn, load_locomo  # noqa: E402


def _p(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def _summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(values), 3),
        "p95_ms": round(_p(values, 0.95), 3),
        "mean_ms": round(statistics.fmean(values), 3),
    }


def _pairs(system: Any, turns: Sequence[Turn]) -> dict[str, Any]:
    """Time each turn's add and the embedding of its text alone, alternating which runs
    first; wall and process CPU time, in milliseconds."""
    from chatmem.text import embedding_text

    mem = system._mem
    embedder = mem.embedder
    session = embedder._documents()
    add_ms: list[float] = []
    add_cpu: list[float] = []
    embed_ms: list[float] = []
    embed_cpu: list[float] = []

    def add(turn: Turn) -> str:
        wall, cpu = time.perf_counter(), time.process_time()
        records = mem.add(
            [system._message(turn)], user_id="add-probe", session_id=f"session_{turn.session}"
        )
        add_ms.append((time.perf_counter() - wall) * 1000)
        add_cpu.append((time.process_time() - cpu) * 1000)
        return str(embedding_text(records[0]))

    def embed(text: str) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        embedder._embed_many([text], session)
        embed_ms.append((time.perf_counter() - wall) * 1000)
        embed_cpu.append((time.process_time() - cpu) * 1000)

    for index, turn in enumerate(turns):
        if index % 2:
            embed(add(turn))
        else:
            # The text add will embed, known before it runs (built as add builds it).
            embed(_expected_text(system, turn))
            add(turn)
    over = [a - e for a, e in zip(add_ms, embed_ms, strict=True)]
    return {
        "add": _summary(add_ms),
        "add_cpu": _summary(add_cpu),
        "embedding": _summary(embed_ms),
        "embedding_cpu": _summary(embed_cpu),
        "add_minus_embedding": _summary(over),
        "ratio_p50": round(statistics.median(add_ms) / statistics.median(embed_ms), 3),
    }


class Precomputed:
    """An embedder answering with vectors computed beforehand by ``model``."""

    def __init__(self, model: Any, texts: Sequence[str]) -> None:
        self._model = model
        session = model._documents()
        self._vectors = {text: model._embed_many([text], session) for text in texts}

    @property
    def model(self) -> str:
        return str(self._model.model)

    @property
    def dimension(self) -> int:
        return int(self._model.dimension)

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        return np.concatenate([self._vectors[text] for text in texts])


def _overhead(system: Any, turns: Sequence[Turn], against: Path | None) -> dict[str, Any]:
    """Time each turn's add with its vector looked up, not computed; with ``against`` (a
    ``src/`` folder), each add uses that tree's SQLite write path or this one's, at random."""
    import random

    from chatmem.stores.sqlite import store

    versions = {"add_without_embedding": store.writes}
    if against is not None:
        versions["add_without_embedding_against"] = _module(against / WRITES)
    wall_ms: dict[str, list[float]] = {name: [] for name in versions}
    cpu_ms: dict[str, list[float]] = {name: [] for name in versions}
    chance = random.Random(1)
    for turn in turns:
        name = chance.choice(list(versions))
        store.writes = versions[name]  # type: ignore[attr-defined]
        wall, cpu = time.perf_counter(), time.process_time()
        system.add_one("add-probe", turn)
        wall_ms[name].append((time.perf_counter() - wall) * 1000)
        cpu_ms[name].append((time.process_time() - cpu) * 1000)
    result: dict[str, Any] = {}
    for name in versions:
        result[name] = _summary(wall_ms[name])
        result[f"{name}_cpu"] = _summary(cpu_ms[name])
    return result


#: The SQLite write path within a ``src/`` folder.
WRITES = Path("chatmem/stores/sqlite/writes.py")


def _module(path: Path) -> Any:
    """The module at ``path``, loaded under a name of its own (it imports the rest of
    chatmem from this tree)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("single_add_against", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _expected_text(system: Any, turn: Turn) -> str:
    """The text ``add`` embeds for ``turn``: the record built as ``add`` builds it."""
    from chatmem.long_term.inputs import heard_messages
    from chatmem.long_term.message_records import AddOptions, call_records
    from chatmem.text import embedding_text

    owner = {"tenant_id": "default", "user_id": "x", "agent_id": None, "project_id": None}
    options = AddOptions({**owner, "session_id": "s"}, None, None, {}, None)
    records = call_records(heard_messages([system._message(turn)]), options, [], 1)
    return str(embedding_text(records[0]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, type=Path, help="path to locomo10.json")
    parser.add_argument("--adds", type=int, default=200, help="timed adds (default 200)")
    parser.add_argument("--prefill", type=int, default=2, help="conversations stored first")
    parser.add_argument("--profile", action="store_true", help="profile --adds more adds")
    parser.add_argument(
        "--overhead", action="store_true", help="time adds with precomputed vectors only"
    )
    parser.add_argument(
        "--against",
        type=Path,
        help="with --overhead: a src/ folder whose SQLite write path half the adds use",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    conversations = load_locomo(args.data)
    probe = [t for c in conversations for t in c.turns]
    timed, profiled = probe[: args.adds], probe[args.adds : 2 * args.adds]
    with tempfile.TemporaryDirectory(prefix="single-add-") as workdir:
        system = lr.ChatmemSystem(Path(workdir))
        for conv in conversations[: args.prefill]:
            system.ingest(lr.user_id_for(conv), conv.turns)
        system._mem.embedder._cache.clear()
        if args.overhead:
            ahead = [*timed, *(profiled if args.profile else [])]
            texts = [_expected_text(system, t) for t in ahead]
            system._mem.embedder = Precomputed(system._mem.embedder, texts)
        result: dict[str, Any] = {
            "adds": len(timed),
            "prefill": args.prefill,
            "load_average": os.getloadavg(),
            **(_overhead(system, timed, args.against) if args.overhead else _pairs(system, timed)),
        }
        result["load_average_after"] = os.getloadavg()
        print(json.dumps(result, indent=2))
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            for turn in profiled:
                system.add_one("add-profile", turn)
            profile.disable()
            stats = pstats.Stats(profile)
            stats.sort_stats("cumulative").print_stats(40)
            stats.sort_stats("tottime").print_stats(25)
        system._mem.close()  # not system.close(): it times the embedder alone
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
