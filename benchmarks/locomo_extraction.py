"""LoCoMo: evidence recall when search runs over offline-extracted facts, raw turns, or both.

For each conversation, every turn becomes a ``chatmem.messages.Message`` (id = its dia_id,
timestamp = its session's date, role ``user``, ``name`` = the speaker) and each session is one
``OfflineExtractor().extract`` batch, as the extraction worker would send it. Every turn is a
*user* message because LoCoMo has two human speakers and the extractor reads user messages
only; facts about either speaker are evidence. The extractor writes its facts in the third
person about "User" (it does not read ``name``), so a fact does not say which speaker it is
about.

Stores, each a fresh temporary SQLite ``LongTermMemory`` per conversation, all sharing one
``LocalEmbedder`` (one chatmem user per conversation):

- ``raw``: every turn, stored exactly as ``locomo_retrieval.py``'s chatmem system stores it
  (``ChatmemSystem._message``, one ``add`` per session: speaker, date and neighbouring turns
  indexed as context);
- ``facts``: every extracted fact as one memory, shaped like the write policy's created
  record: text = ``fact.text``, type, importance, confidence, tags and structured values of
  the fact, provenance = ``fact.provenance`` (the dia_ids), no context, so it is indexed and
  embedded as its text alone. Facts are stored as extracted (deduplicated within a session by
  the extractor), not merged across sessions by the write policy;
- ``both``: the union of ``raw`` and ``facts``;
- ``facts+ctx`` and ``both+ctx`` (skipped with ``--no-context-variants``): the same facts with
  a ``Context`` naming the speaker of the turn they came from and dated with its session, so
  they are indexed as ``"<speaker>: <fact>"`` with the day, like a raw turn. This shows how
  much of the gap comes from the fact text not naming its speaker.

Every question of categories 1-4 with resolvable evidence is searched once per store
(``k=50``, ``threshold=0.0``; with the default 50 candidates a half, the first 20 hits are the
same as a ``k=20`` search). Hits map to dia_ids (a raw turn: its ``dia_id``; a fact: its
provenance, in order), deduplicated in rank order. ``recall@k`` counts the first k *distinct
dia_ids* (a budget of k turns); ``hits_recall@k`` counts the dia_ids of the first k *hits*
(a budget of k memories, so several facts from one turn take several slots). Also reported:
fact counts, the share of evidence turns cited by at least one fact (the extractor's ceiling
for ``facts``), extraction time and ingest time per store.

    python benchmarks/locomo_extraction.py --data /work/shared/data/locomo/locomo10.json \
        --json bench-results/locomo_extraction.json

The LoCoMo data (CC BY-NC 4.0) is read from --data and never copied into the repository.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from _locomo import CATEGORY_NAMES, Conversation, Turn, load_locomo, percentile_ms
from locomo_retrieval import ChatmemSystem, _import_chatmem, print_tables, question_counts

_import_chatmem()  # this checkout's src/ when chatmem is not installed

from chatmem import LongTermMemory  # noqa: E402
from chatmem.embeddings import LocalEmbedder  # noqa: E402
from chatmem.extraction import Fact, OfflineExtractor  # noqa: E402
from chatmem.messages import Message, Role  # noqa: E402
from chatmem.records import Filter, MemoryRecord, SearchResult  # noqa: E402

KS = (5, 10, 20)
FETCH = 50  # hits asked per search: enough to fill 20 distinct dia_ids from facts
CATEGORIES = (1, 2, 3, 4)
BASE_VARIANTS = ("raw", "facts", "both")
CONTEXT_VARIANTS = ("facts+ctx", "both+ctx")
TableSpec = tuple[str, list[str], list[list[Any]]]


# --- extraction ----------------------------------------------------------------------------------


def session_messages(conv: Conversation) -> list[tuple[int, list[Message]]]:
    """One batch of messages per session: every turn a user message named by its speaker."""
    batches: list[tuple[int, list[Message]]] = []
    for session, group in itertools.groupby(conv.turns, key=lambda t: t.session):
        batches.append(
            (
                session,
                [
                    Message(
                        role=Role.USER,
                        content=t.text,
                        id=t.dia_id,
                        timestamp=t.timestamp_ms or 0,
                        name=t.speaker or None,
                    )
                    for t in group
                ],
            )
        )
    return batches


def extract(conv: Conversation, extractor: OfflineExtractor) -> tuple[list[Fact], float]:
    """Every fact of the conversation (one ``extract`` call per session) and the seconds spent."""
    batches = session_messages(conv)
    t0 = time.perf_counter()
    facts = [fact for _, batch in batches for fact in extractor.extract(batch)]
    return facts, time.perf_counter() - t0


def fact_record(
    fact: Fact, user_id: str, turns: dict[str, Turn], *, with_context: bool
) -> MemoryRecord:
    """``fact`` as a memory: the write policy's created record, without its batch bookkeeping.

    It is dated with the session of the turn it came from; ``with_context`` adds that turn's
    speaker as the memory's context (so the keyword and vector indexes see the name).
    """
    source = turns[fact.provenance[0]]
    when = (
        datetime.fromtimestamp(source.timestamp_ms / 1000, tz=UTC)
        if source.timestamp_ms is not None
        else datetime.now(UTC)
    )
    return MemoryRecord.checked(
        {
            "user_id": user_id,
            "session_id": f"session_{source.session}",
            "type": fact.type,
            "content": {"raw": fact.text, "structured": dict(fact.structured) or None},
            "metadata": {
                "importance": fact.importance,
                "confidence": fact.confidence,
                "tags": list(dict.fromkeys(fact.tags))[:64],
                "source": fact.source,
            },
            "time": {"created_at": when, "updated_at": when, "valid_from": fact.valid_from},
            "provenance": list(dict.fromkeys(fact.provenance)),
            "user_metadata": {"kind": "fact", "speaker": source.speaker},
            "context": {"speaker": source.speaker} if with_context else None,
        },
        "fact",
    )


# --- stores --------------------------------------------------------------------------------------


def add_turns(mem: LongTermMemory, user_id: str, turns: Sequence[Turn]) -> None:
    """Raw turns, as ``ChatmemSystem.ingest`` adds them: one ``add`` per session."""
    for session, group in itertools.groupby(turns, key=lambda t: t.session):
        mem.add(
            [ChatmemSystem._message(t) for t in group],
            user_id=user_id,
            session_id=f"session_{session}",
        )


def build_store(
    variant: str,
    uri: str,
    embedder: LocalEmbedder,
    user_id: str,
    conv: Conversation,
    facts: Sequence[Fact],
) -> tuple[LongTermMemory, float]:
    """Open a fresh store for ``variant`` and fill it; returns it and the ingest seconds."""
    mem = LongTermMemory.open(uri, embedder=embedder)
    turns = {t.dia_id: t for t in conv.turns}
    with_context = variant.endswith("+ctx")
    t0 = time.perf_counter()
    if variant.startswith(("raw", "both")):
        add_turns(mem, user_id, conv.turns)
    if variant.startswith(("facts", "both")) and facts:
        mem.add_records([fact_record(f, user_id, turns, with_context=with_context) for f in facts])
    return mem, time.perf_counter() - t0


def hit_dia_ids(hits: Sequence[SearchResult]) -> list[str]:
    """The dia_ids the hits point to, in rank order, each once (facts: their provenance)."""
    out: dict[str, None] = {}
    for hit in hits:
        record = hit.record
        dia_id = record.user_metadata.get("dia_id")
        for item in [dia_id] if dia_id is not None else record.provenance:
            out.setdefault(str(item), None)
    return list(out)


def is_fact(hit: SearchResult) -> bool:
    return hit.record.user_metadata.get("kind") == "fact"


# --- measurement ---------------------------------------------------------------------------------


@dataclass
class VariantResult:
    recall: dict[int, dict[int, list[float]]] = field(
        default_factory=lambda: {k: {c: [] for c in CATEGORIES} for k in KS}
    )
    hits_recall: dict[int, dict[int, list[float]]] = field(
        default_factory=lambda: {k: {c: [] for c in CATEGORIES} for k in KS}
    )
    distinct_in_10_hits: list[int] = field(default_factory=list)
    fact_share_10_hits: list[float] = field(default_factory=list)
    ingest_s: float = 0.0
    memories: int = 0
    search_s: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        def pooled(table: dict[int, dict[int, list[float]]], k: int) -> float | None:
            return _mean([v for c in CATEGORIES for v in table[k][c]])

        out: dict[str, Any] = {f"recall@{k}": pooled(self.recall, k) for k in KS}
        out["recall@10_by_category"] = {str(c): _mean(self.recall[10][c]) for c in CATEGORIES}
        out.update({f"hits_recall@{k}": pooled(self.hits_recall, k) for k in KS})
        out["hits_recall@10_by_category"] = {
            str(c): _mean(self.hits_recall[10][c]) for c in CATEGORIES
        }
        out["mean_distinct_dia_ids_in_10_hits"] = _mean(self.distinct_in_10_hits)
        out["fact_share_of_10_hits"] = _mean(self.fact_share_10_hits)
        out["memories"] = self.memories
        out["ingest_s"] = round(self.ingest_s, 2)
        out["ingest_per_s"] = round(self.memories / self.ingest_s, 1) if self.ingest_s else None
        # Warm query cache: every question was embedded before the searches.
        out["search_p50_ms"] = _round(percentile_ms(self.search_s, 50), 3)
        out["n_questions"] = len([v for c in CATEGORIES for v in self.recall[10][c]])
        return out


@dataclass
class ExtractionStats:
    turns: int = 0
    sessions: int = 0
    facts: int = 0
    seconds: float = 0.0
    turns_with_fact: int = 0
    evidence_turns: int = 0  # distinct (conversation, dia_id) evidence of scored cat 1-4
    evidence_turns_cited: int = 0
    ceiling: dict[int, list[float]] = field(default_factory=lambda: {c: [] for c in CATEGORIES})
    facts_by_type: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        all_q = [v for c in CATEGORIES for v in self.ceiling[c]]
        return {
            "turns": self.turns,
            "sessions": self.sessions,
            "facts": self.facts,
            "facts_per_turn": _round(self.facts / self.turns if self.turns else None),
            "turns_with_fact_share": _round(
                self.turns_with_fact / self.turns if self.turns else None
            ),
            "evidence_turns": self.evidence_turns,
            "evidence_turns_cited": self.evidence_turns_cited,
            "evidence_coverage": _round(
                self.evidence_turns_cited / self.evidence_turns if self.evidence_turns else None
            ),
            "question_ceiling": _mean(all_q),
            "question_ceiling_by_category": {str(c): _mean(self.ceiling[c]) for c in CATEGORIES},
            "extraction_s": round(self.seconds, 3),
            "extraction_turns_per_s": round(self.turns / self.seconds, 1) if self.seconds else None,
            "facts_by_type": dict(sorted(self.facts_by_type.items())),
        }


def _mean(values: Sequence[float]) -> float | None:
    return _round(float(np.mean(values))) if values else None


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def score(res: VariantResult, evidence: frozenset[str], category: int, hits: list[Any]) -> None:
    turns = hit_dia_ids(hits)
    for k in KS:
        res.recall[k][category].append(len(evidence.intersection(turns[:k])) / len(evidence))
        in_hits = hit_dia_ids(hits[:k])
        res.hits_recall[k][category].append(len(evidence.intersection(in_hits)) / len(evidence))
    top10 = hits[:10]
    res.distinct_in_10_hits.append(len(hit_dia_ids(top10)))
    if top10:
        res.fact_share_10_hits.append(sum(is_fact(h) for h in top10) / len(top10))


def run(
    conversations: Sequence[Conversation], variants: Sequence[str]
) -> tuple[dict[str, VariantResult], ExtractionStats]:
    embedder = LocalEmbedder().warm()
    extractor = OfflineExtractor()
    results = {v: VariantResult() for v in variants}
    stats = ExtractionStats()
    started = time.perf_counter()
    for conv in conversations:
        user_id = conv.sample_id
        facts, seconds = extract(conv, extractor)
        stats.turns += len(conv.turns)
        stats.sessions += len({t.session for t in conv.turns})
        stats.facts += len(facts)
        stats.seconds += seconds
        for fact in facts:
            stats.facts_by_type[fact.type.value] = stats.facts_by_type.get(fact.type.value, 0) + 1
        cited = {d for f in facts for d in f.provenance}
        stats.turns_with_fact += len(cited)
        questions = [q for q in conv.questions if q.category in CATEGORIES and q.evidence]
        evidence = {d for q in questions for d in q.evidence}
        stats.evidence_turns += len(evidence)
        stats.evidence_turns_cited += len(evidence & cited)
        for q in questions:
            stats.ceiling[q.category].append(len(q.evidence & cited) / len(q.evidence))

        for q in questions:  # the query cache then holds every question for every store
            embedder.embed([q.question])
        workdir = Path(tempfile.mkdtemp(prefix="locomo-extraction-"))
        try:
            for variant in variants:
                uri = f"sqlite:///{workdir / (variant.replace('+', '_') + '.db')}"
                mem, ingest_s = build_store(variant, uri, embedder, user_id, conv, facts)
                res = results[variant]
                res.ingest_s += ingest_s
                try:
                    res.memories += mem.count(Filter(user_id=user_id))
                    for q in questions:
                        t0 = time.perf_counter()
                        hits = mem.search(q.question, user_id=user_id, k=FETCH, threshold=0.0)
                        res.search_s.append(time.perf_counter() - t0)
                        score(res, q.evidence, q.category, hits)
                finally:
                    mem.close()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        r10 = "  ".join(
            f"{v} {_mean([x for c in CATEGORIES for x in results[v].recall[10][c]])}"
            for v in variants
        )
        print(
            f"[{time.perf_counter() - started:7.1f}s] {conv.sample_id}: {len(conv.turns)} turns, "
            f"{len(facts)} facts, {len(questions)} questions; R@10 so far: {r10}",
            file=sys.stderr,
            flush=True,
        )
    return results, stats


# --- report --------------------------------------------------------------------------------------


def report_tables(
    variants: dict[str, dict[str, Any]], extraction: dict[str, Any]
) -> list[TableSpec]:
    cat_cols = [f"R@10 {c} {CATEGORY_NAMES[c]}" for c in CATEGORIES]
    recall = [
        [name, s["recall@5"], s["recall@10"], s["recall@20"]]
        + [s["recall@10_by_category"][str(c)] for c in CATEGORIES]
        for name, s in variants.items()
    ]
    hits = [
        [name, s["hits_recall@5"], s["hits_recall@10"], s["hits_recall@20"]]
        + [s["hits_recall@10_by_category"][str(c)] for c in CATEGORIES]
        + [s["mean_distinct_dia_ids_in_10_hits"], s["fact_share_of_10_hits"]]
        for name, s in variants.items()
    ]
    stores = [
        [name, s["memories"], s["ingest_s"], s["ingest_per_s"], s["search_p50_ms"]]
        for name, s in variants.items()
    ]
    e = extraction
    ceiling = e["question_ceiling_by_category"]
    extraction_rows = [
        ["turns / sessions", f"{e['turns']} / {e['sessions']}"],
        ["facts (per turn)", f"{e['facts']} ({e['facts_per_turn']})"],
        ["turns with >= 1 fact", e["turns_with_fact_share"]],
        [
            "evidence turns cited by a fact",
            f"{e['evidence_turns_cited']} / {e['evidence_turns']} = {e['evidence_coverage']}",
        ],
        ["facts-only recall ceiling (per question)", e["question_ceiling"]],
        ["  by category 1/2/3/4", " / ".join(str(ceiling[str(c)]) for c in CATEGORIES)],
        ["extraction s (turns/s)", f"{e['extraction_s']} ({e['extraction_turns_per_s']})"],
    ]
    return [
        (
            "Evidence recall, k distinct dia_ids (categories 1-4)",
            ["store", "R@5", "R@10", "R@20", *cat_cols],
            recall,
        ),
        (
            "Evidence recall, first k hits (categories 1-4)",
            ["store", "R@5", "R@10", "R@20", *cat_cols, "turns in 10 hits", "facts in 10 hits"],
            hits,
        ),
        ("Stores", ["store", "memories", "ingest s", "memories/s", "search p50 ms"], stores),
        ("Offline extractor", ["measure", "value"], extraction_rows),
    ]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--data", required=True, type=Path, help="path to locomo10.json")
    p.add_argument("--limit-conversations", type=int, default=None)
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument(
        "--no-context-variants",
        dest="context_variants",
        action="store_false",
        help="skip the facts+ctx and both+ctx stores",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    conversations = load_locomo(args.data)[: args.limit_conversations]
    variants = BASE_VARIANTS + (CONTEXT_VARIANTS if args.context_variants else ())
    t0 = time.perf_counter()
    results, stats = run(conversations, variants)
    wall_s = time.perf_counter() - t0
    summaries = {name: res.summary() for name, res in results.items()}
    extraction = stats.summary()
    print_tables(report_tables(summaries, extraction))
    print(f"wall time {wall_s:.0f} s", file=sys.stderr)
    if args.json:
        meta = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {
                "nproc": os.cpu_count(),
                "python": platform.python_version(),
                "platform": platform.platform(),
            },
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "data": str(args.data),
            "ks": list(KS),
            "fetch": FETCH,
            "wall_s": round(wall_s, 1),
            "counts": question_counts(conversations),
        }
        out = {"variants": summaries, "extraction": extraction, "meta": meta}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
