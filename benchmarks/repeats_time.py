"""What a ranking setting costs a search (issue 18): ``LongTermMemory.search`` and
``chatmem.retrieval.search`` with ``RankingConfig.repeats_last`` (or, with ``--setting``,
``speaker_bonus``: the bonus for memories said by someone the query names, or
``name_free_share``: the query vector without the speakers' names, or ``time_bonus``: the
bonus for memories that say when, to questions about time, or ``question_penalty``: what
is taken off memories that end by asking) on and off, on one
store, the two timed in turn query by query (the first of each pair alternates), after a
warm-up round that fills the query-embedding cache for both.

The store: every LoCoMo turn added one at a time (the live path of
``locomo_retrieval.py --ingest live``), built once in ``--dir`` and kept there.

    python benchmarks/repeats_time.py --data $LOCOMO --dir /tmp/chatmem-repeats --json out.json
    python benchmarks/repeats_time.py --data $LOCOMO --setting speaker_bonus --json out.json
    # the default against another value ("off" is then that value):
    python benchmarks/repeats_time.py --data $LOCOMO --setting name_free_share --off 1 --cold
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo_retrieval as lr  # noqa: E402
from _locomo import load_locomo, percentile_ms  # noqa: E402


def build(data: Path, workdir: Path) -> None:
    if (workdir / "chatmem.db").exists():
        return
    workdir.mkdir(parents=True, exist_ok=True)
    system = lr.ChatmemSystem(workdir)
    try:
        for conv in load_locomo(data):
            for turn in conv.turns:
                system.add_one(lr.user_id_for(conv), turn)
    finally:
        system._mem.close()


def _off(setting: str, value: float | None) -> float | bool:
    """The setting's value on the "off" side: ``value`` when given, else none of it."""
    if value is not None:
        return value
    numbers = ("speaker_bonus", "name_free_share", "time_bonus", "question_penalty")
    return 0.0 if setting in numbers else False


def _questions(data: Path, unnamed: bool, asks_time: bool) -> list[tuple[str, str]]:
    """Each LoCoMo question with its user; ``unnamed``: without the names of the speakers of
    its conversation ("When did go to the support group?"), those left blank dropped;
    ``asks_time``: only those ``ranking.asks_when`` takes as questions about time."""
    from chatmem.long_term.speakers import without
    from chatmem.ranking import asks_when

    out = []
    for conv in load_locomo(data):
        names = {w for t in conv.turns for w in t.speaker.split()}
        for q in conv.questions:
            text = without(q.question, names) if unnamed else q.question
            if text and (asks_when(text) or not asks_time):
                out.append((lr.user_id_for(conv), text))
    return out


def timed(call: Callable[..., Any], *args: Any) -> float:
    t0 = time.perf_counter()
    call(*args)
    return time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--dir", type=Path, default=Path("/tmp/chatmem-repeats"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--k", type=int, default=10, help="LongTermMemory.search's k (10)")
    p.add_argument(
        "--setting",
        choices=(
            "repeats_last",
            "speaker_bonus",
            "name_free_share",
            "time_bonus",
            "question_penalty",
        ),
        default="repeats_last",
    )
    p.add_argument(
        "--cold", action="store_true", help="no query-embedding cache: every search embeds"
    )
    p.add_argument(
        "--off",
        type=float,
        default=None,
        help="the setting's value on the 'off' side (default: 0 or False)",
    )
    p.add_argument(
        "--unnamed",
        action="store_true",
        help="the questions with their speakers' names taken out (a user asking of themselves)",
    )
    p.add_argument("--asks-when", action="store_true", help="only the questions about time")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    build(args.data, args.dir)

    from chatmem import LongTermMemory, RankingConfig
    from chatmem.embeddings import LocalEmbedder
    from chatmem.retrieval import search
    from chatmem.stores import SQLiteStore

    embedder = LocalEmbedder(cache_size=0, cache_bytes=0) if args.cold else LocalEmbedder()
    on = LongTermMemory(SQLiteStore(args.dir / "chatmem.db"), embedder)
    off = LongTermMemory(
        SQLiteStore(args.dir / "chatmem.db"),
        embedder,
        ranking_config=RankingConfig(**{args.setting: _off(args.setting, args.off)}),
    )
    asked = _questions(args.data, args.unnamed, args.asks_when)
    paths: dict[str, Callable[[LongTermMemory, str, str], Any]] = {
        "LongTermMemory.search": lambda m, u, q: m.search(q, user_id=u, k=args.k, threshold=0.0),
        "retrieval.search": lambda m, u, q: search(m, q, user_id=u),
    }
    times: dict[str, dict[str, list[float]]] = {path: {"on": [], "off": []} for path in paths}
    try:
        for user, question in asked:  # warm-up: the query cache, both stores' caches
            for path in paths.values():
                path(on, user, question)
                path(off, user, question)
        for n in range(args.rounds * len(asked)):
            user, question = asked[n % len(asked)]
            for name, path in paths.items():
                sides = [("on", on), ("off", off)] if n % 2 == 0 else [("off", off), ("on", on)]
                for side, memory in sides:
                    times[name][side].append(timed(path, memory, user, question))
    finally:
        on.close()
        off.close()
    result = {
        name: {
            side: {
                "p50_ms": percentile_ms(values, 50),
                "p95_ms": percentile_ms(values, 95),
                "n": len(values),
            }
            for side, values in sides.items()
        }
        for name, sides in times.items()
    }
    for name, sides in result.items():
        print(f"{name}: " + ", ".join(f"{s} p50 {v['p50_ms']:.3f} ms" for s, v in sides.items()))
    if args.json:
        meta = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "load_average": os.getloadavg(),
            "questions": len(asked),
            "rounds": args.rounds,
            "k": args.k,
            "setting": args.setting,
            "cold": args.cold,
            "unnamed": args.unnamed,
            "asks_when": args.asks_when,
            "off": _off(args.setting, args.off),
        }
        args.json.write_text(json.dumps({"paths": result, "meta": meta}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
