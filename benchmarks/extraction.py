"""Offline extraction benchmark: throughput and yield of OfflineExtractor on LoCoMo turns.

Every LoCoMo turn becomes a user message (both speakers talk in the first person) dated with
its session's date, and each session is one ``extract`` batch, as the worker would send it.
Prints turns per second (best of ``--repeat`` runs, so a busy machine shows less), facts per
turn, the share of turns yielding at least one fact, facts by type and by rule family, and
``--samples`` example facts.

    python benchmarks/extraction.py --data /work/shared/data/locomo/locomo10.json

The LoCoMo data (CC BY-NC 4.0) is read from --data and never copied into the repository.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _locomo import Conversation, load_locomo  # noqa: E402

try:
    import chatmem  # noqa: F401
except ImportError:  # run from a checkout without ``pip install -e .``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from chatmem.extraction import Fact, OfflineExtractor  # noqa: E402
from chatmem.messages import Message  # noqa: E402


def session_batches(conversations: Sequence[Conversation]) -> list[list[Message]]:
    """One batch of user messages per LoCoMo session."""
    batches: dict[tuple[str, int], list[Message]] = {}
    for conversation in conversations:
        for turn in conversation.turns:
            message = Message(
                role="user",
                content=turn.text,
                id=f"{conversation.sample_id}:{turn.dia_id}",
                timestamp=turn.timestamp_ms or 0,
            )
            batches.setdefault((conversation.sample_id, turn.session), []).append(message)
    return list(batches.values())


def timed_run(
    extractor: OfflineExtractor, batches: list[list[Message]]
) -> tuple[float, list[list[Fact]]]:
    started = time.perf_counter()
    results = [extractor.extract(batch) for batch in batches]
    return time.perf_counter() - started, results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, type=Path, help="path to locomo10.json")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs; the best is kept")
    parser.add_argument("--samples", type=int, default=12, help="example facts to print")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    batches = session_batches(load_locomo(args.data))
    turns = sum(len(batch) for batch in batches)
    extractor = OfflineExtractor()
    runs = [timed_run(extractor, batches) for _ in range(max(1, args.repeat))]
    seconds = min(elapsed for elapsed, _ in runs)
    facts = [fact for batch in runs[0][1] for fact in batch]
    with_fact = {fact.provenance[0] for fact in facts}

    rows = [
        ("turns", f"{turns}"),
        ("sessions (batches)", f"{len(batches)}"),
        ("turns/s (best of runs)", f"{turns / seconds:,.0f}"),
        ("ms per turn", f"{1000 * seconds / turns:.3f}"),
        ("facts", f"{len(facts)}"),
        ("facts per turn", f"{len(facts) / turns:.2f}"),
        ("turns yielding a fact", f"{len(with_fact) / turns:.1%}"),
    ]
    rows += [(f"type {kind}", f"{count}") for kind, count in _count(f.type.value for f in facts)]
    rows += [(f"tag {tag}", f"{count}") for tag, count in _count(f.tags[0] for f in facts)]
    _table(rows)

    rng = random.Random(args.seed)
    print()
    for fact in rng.sample(facts, min(args.samples, len(facts))):
        when = f" [{fact.valid_from.date()}]" if fact.valid_from else ""
        print(f"- ({fact.type.value}) {fact.text}{when}  subject={fact.subject!r}")


def _count(values: object) -> list[tuple[str, int]]:
    return Counter(values).most_common()  # type: ignore[arg-type]


def _table(rows: list[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in rows)
    print(f"| {'measure'.ljust(width)} | value |")
    print(f"|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name.ljust(width)} | {value} |")


if __name__ == "__main__":
    main()
