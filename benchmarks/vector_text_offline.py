"""What a memory's vector is embedded from, measured offline (issue 18, "The day out of the
vector" in docs/benchmarks.md).

Reads the candidates that ``rerank_offline.py dump`` stored (LoCoMo and the synthetic check,
built by the live path) and ranks every question as ``LongTermMemory.search`` does: the
query's vector mixed from the query as asked and without the speakers it names
(``name_free_share``), the vector half's best 50 over all of the user's memories, the stored
keyword half, ``ranking.fuse``, the speaker bonus (and, given, the time bonus) over the
first 20, repeats last. Only the memories' vectors and these settings change between
variants: each memory is embedded again, one text per call
as the store does, from

- ``stored``: the vectors as the store holds them (``chatmem.text.embedding_text`` of the
  code that built the dump);
- ``day``: ``"[8 May 2023] Caroline: text"`` (the library before this change);
- ``no-day``: ``"Caroline: text"``; ``month``: ``"[May 2023] Caroline: text"``;
  ``day-after``: ``"Caroline: text [8 May 2023]"``; ``no-speaker``: ``"[8 May 2023] text"``;
  ``bare``: ``"text"``.

The variant ``stored`` with the shipped settings gives the live benchmarks' figures exactly.

    python benchmarks/rerank_offline.py dump --data $LOCOMO --dir /tmp/rr       # ~10 min
    python benchmarks/vector_text_offline.py --dir /tmp/rr --texts stored,day,no-day \\
        --settings 0.7/0.1,0.85/0.15 --json /tmp/vector-text.json                 # ~5 min
    python benchmarks/vector_text_offline.py --dir /tmp/rr --texts stored \
        --settings 0.85/0.15/0,0.85/0.15/0.05                                     # ~1 min
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rerank_offline as ro  # noqa: E402

TEXTS = ("stored", "day", "no-day", "month", "day-after", "no-speaker", "bare")
POOL = 50


def memory_text(raw: dict[str, Any], n: int, variant: str) -> str:
    """Memory ``n`` of a dumped user as ``variant`` embeds it."""
    text, speaker, embedded = raw["text"][n], raw["speaker"][n], raw["embedded"][n]
    # The dump's "embedded" text starts with the day where the code that built it put one.
    day = embedded[1 : embedded.index("]")] if embedded.startswith("[") else ""
    said = f"{speaker}: {text}" if speaker else text
    if variant == "day":
        return f"[{day}] {said}" if day else said
    if variant == "no-day":
        return said
    if variant == "month":
        month = " ".join(day.split()[1:])
        return f"[{month}] {said}" if month else said
    if variant == "day-after":
        return f"{said} [{day}]" if day else said
    if variant == "no-speaker":
        return f"[{day}] {text}" if day else text
    if variant == "bare":
        return text
    raise ValueError(variant)


class Ranker:
    """Ranks a dumped question as ``LongTermMemory.search`` does, on given memory vectors."""

    def __init__(
        self, embedder: Any, speakers: Any, share: float, bonus: float, time: float = 0.0
    ) -> None:
        self.embedder, self.speakers, self.share, self.bonus = embedder, speakers, share, bonus
        self.time = time
        self._queries: dict[tuple[str, ...], np.ndarray] = {}

    def query_vector(self, item: ro.Item) -> np.ndarray:
        from chatmem.long_term.speakers import name_free_vector

        named = self.speakers.named("default", item.q.user, item.q.text)
        return np.asarray(
            name_free_vector(self._embed, item.q.text, named, self.share), dtype=np.float32
        )

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        key = tuple(texts)
        if key not in self._queries:
            self._queries[key] = np.asarray(self.embedder.embed_queries(list(texts)))
        return self._queries[key]

    def rank(self, item: ro.Item, ids: list[str], matrix: np.ndarray) -> list[str]:
        from chatmem import ranking
        from chatmem.records import Candidate

        cosines = matrix @ self.query_vector(item)
        at = {i: n for n, i in enumerate(ids)}
        keyword = {c[0]: c[2] for c in item.cands if c[2] is not None}
        pool = {ids[n] for n in np.argsort(-cosines)[:POOL]} | set(keyword)
        found = [Candidate(i, float(cosines[at[i]]), keyword.get(i)) for i in pool]
        scored = ranking.fuse(found)
        names = ranking.named(item.q.text)
        names |= frozenset(self.speakers.named("default", item.q.user, item.q.text))
        head = scored[: ranking.SPEAKER_READ]
        said = {s.id: (item.user.speaker[s.id], item.user.text[s.id]) for s in head}
        config = ranking.RankingConfig(speaker_bonus=self.bonus, time_bonus=self.time)
        extra = ranking.bonuses(said, names, ranking.asks_when(item.q.text), config)
        head = ranking.favour(head, extra)
        return _repeats_last([s.id for s in head + scored[len(head) :]], item)


def _repeats_last(order: list[str], item: ro.Item) -> list[str]:
    from chatmem import ranking

    seen: set[Any] = set()
    kept: list[str] = []
    aside: list[str] = []
    for i in order:
        text = item.user.text[i]
        key = ranking.said(item.user.speaker[i], text)
        short = len(text) <= ranking.REPEAT_CHARS and bool(key[1])
        (aside if short and key in seen else kept).append(i)
        if short:
            seen.add(key)
    return kept + aside


def vectors(embedder: Any, raw: dict[str, Any], variant: str) -> np.ndarray:
    if variant == "stored":
        return np.asarray(raw["vec"], dtype=np.float32)
    texts = [memory_text(raw, n, variant) for n in range(len(raw["ids"]))]
    # One text per call, as the store embeds a memory (the fast model scales per call).
    return np.stack([embedder.embed([t])[0] for t in texts]).astype(np.float32)


Setting = tuple[float, float, float]


def run(root: Path, texts: list[str], settings: list[Setting]) -> dict[str, Any]:
    import pickle

    from chatmem.embeddings import LocalEmbedder
    from chatmem.long_term.speakers import Speakers

    embedder = LocalEmbedder()
    results: dict[str, Any] = {}
    for name in ro.SETS:
        if not (root / f"{name}.pkl").exists():
            continue
        with (root / f"{name}.pkl").open("rb") as f:
            users = pickle.load(f)["memories"]
        items = list(ro.load(root, name))
        speakers = Speakers()
        for user, raw in users.items():
            speakers._names.put(("default", user), frozenset(s for s in raw["speaker"] if s))
        for variant in texts:
            mats = {u: (raw["ids"], vectors(embedder, raw, variant)) for u, raw in users.items()}
            for share, bonus, time in settings:
                ranker = Ranker(embedder, speakers, share, bonus, time)
                key = f"{variant} share {share} bonus {bonus}" + (f" time {time}" if time else "")
                results.setdefault(key, {})[name] = ro.evaluate(
                    items, lambda it, r=ranker, m=mats: r.rank(it, *m[it.q.user])
                )
                print(key, name, file=sys.stderr, flush=True)
    return results


def _setting(text: str) -> Setting:
    parts = [float(p) for p in text.split("/")]
    return (parts[0], parts[1], parts[2] if len(parts) > 2 else 0.0)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, default=Path("/tmp/rr"))
    p.add_argument("--texts", default="stored,no-day", help=f"comma-separated of {TEXTS}")
    p.add_argument(
        "--settings",
        default="0.85/0.15/0.05",
        help="name-free share/speaker bonus[/time bonus], comma-separated",
    )
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    texts = [t for t in args.texts.split(",") if t]
    if unknown := set(texts) - set(TEXTS):
        p.error(f"unknown --texts: {sorted(unknown)}")
    settings = [_setting(s) for s in args.settings.split(",") if s]
    results = run(args.dir, texts, settings)
    ro.print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
