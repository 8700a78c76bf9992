"""Re-rank stored candidates offline (issue 18, multi-hop without an LLM).

Two steps:

- ``dump``: the live path's stores, built in a temporary directory: every LoCoMo turn, and
  every turn of the synthetic check at the CI size (6x8x16, seed 18) and the full size, added
  one at a time through ``locomo_retrieval.ChatmemSystem`` (as ``--ingest live``). After each
  user's turns, that user's questions: the store's candidates exactly as
  ``LongTermMemory.search`` asks for them (50 + 50, with cosine and BM25), the query vector,
  and the same for each sub-query of ``sub_queries``; and every memory of the user (text,
  session, speaker, vector). Written as a pickle in ``--dir`` (never in the repository: it
  holds LoCoMo text).
- ``score``: each variant of ``VARIANTS`` re-ranks the dumped candidates; recall@10 and
  all@10 by half (LoCoMo) and by category (synthetic). The variant "base" is
  ``chatmem.ranking.fuse`` as the library runs it and must give the benchmarks' figures.

    python benchmarks/rerank_offline.py dump --data $LOCOMO --dir /tmp/multihop
    python benchmarks/rerank_offline.py score --dir /tmp/multihop [--only base,mmr-0.8]
"""

from __future__ import annotations

import argparse
import json
import pickle
import re
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo_retrieval as lr  # noqa: E402
import synthetic  # noqa: E402
from _locomo import CATEGORY_NAMES, load_locomo  # noqa: E402

K = 10
SETS = ("locomo", "ci", "full")
SIZES = {"ci": synthetic.Size(6, 8, 16, 18), "full": synthetic.Size()}
#: As ``LongTermMemory.search`` asks the store: max(candidates, 2 * k) for the benchmarks' k=20.
CANDIDATES = 50


# --- the questions of each set -------------------------------------------------------------


@dataclass(frozen=True)
class Asked:
    """One question: its user, text, category name, gold and stale turns, and its group
    (LoCoMo: the half, "0-4" or "5-9"; synthetic: the size)."""

    user: str
    text: str
    category: str
    kind: str
    evidence: frozenset[str]
    stale: frozenset[str]
    group: str


def _locomo(data: Path) -> tuple[list[tuple[str, list[Any]]], list[Asked]]:
    convs = load_locomo(data)
    turns = [(lr.user_id_for(c), c.turns) for c in convs]
    asked = [
        Asked(
            lr.user_id_for(c),
            q.question,
            CATEGORY_NAMES[q.category],
            "",
            q.evidence,
            frozenset(),
            "0-4" if i < 5 else "5-9",
        )
        for i, c in enumerate(convs)
        for q in c.questions
        if q.evidence and q.category in (1, 2, 3, 4)
    ]
    return turns, asked


def _synthetic(name: str) -> tuple[list[tuple[str, list[Any]]], list[Asked]]:
    convs = synthetic.generate(SIZES[name])
    turns = [(c.user_id, c.turns) for c in convs]
    asked = [
        Asked(c.user_id, q.text, q.category, q.kind, q.evidence, q.stale, name)
        for c in convs
        for q in c.questions
    ]
    return turns, asked


def questions_of(name: str, data: Path) -> tuple[list[tuple[str, list[Any]]], list[Asked]]:
    return _locomo(data) if name == "locomo" else _synthetic(name)


# --- the dump ------------------------------------------------------------------------------


#: Words that start a sentence with a capital but name nothing.
_NOT_NAMES = frozenset(
    [
        "i",
        "i'm",
        "i've",
        "i'll",
        "i'd",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "did",
        "does",
        "do",
        "is",
        "are",
        "was",
        "were",
        "has",
        "have",
        "had",
        "can",
        "could",
        "would",
        "should",
        "will",
        "the",
        "a",
        "an",
        "in",
        "on",
        "at",
        "of",
        "for",
        "to",
        "and",
        "or",
        "but",
        "both",
    ]
)
_NAME = re.compile(r"\b[A-Z][a-zA-Z]+(?:'s)?\b")


def names_in(text: str) -> list[str]:
    """Capitalised words of ``text`` past its first word, possessive dropped, each once."""
    seen: dict[str, None] = {}
    for i, match in enumerate(_NAME.finditer(text)):
        word = match.group(0)
        word = word[:-2] if word.endswith("'s") else word
        if (i == 0 and match.start() == 0) or word.lower() in _NOT_NAMES:
            continue
        seen[word] = None
    return list(seen)


_PAIR = re.compile(r"\b([A-Z][a-zA-Z]+)(?:'s)?\s+(?:and|&)\s+([A-Z][a-zA-Z]+)('s)?\b")


def sub_queries(text: str, scheme: str = "pair") -> list[str]:
    """Sub-queries of a question about two named people or things.

    ``pair``: two names joined by "and" ("What do Caroline and Melanie both like?"): the
    pair becomes each name in turn, "both" taken out. ``names``: any two or more names
    past the first word: one sub-query per name, the others taken out. Empty when the
    question has no such names."""
    if scheme == "pair":
        match = _PAIR.search(text)
        if not match or match.group(1).lower() in _NOT_NAMES:
            return []
        out = []
        for name in (match.group(1), match.group(2)):
            cut = text[: match.start()] + name + (match.group(3) or "") + text[match.end() :]
            out.append(re.sub(r"\s+", " ", re.sub(r"\bboth\s+", "", cut)).strip())
        return out
    names = names_in(text)
    if len(names) < 2:
        return []
    out = []
    for keep in names:
        cut = text
        for other in names:
            if other == keep:
                continue
            cut = re.sub(rf"\s*\b(?:and|&)\s+{other}(?:'s)?\b", "", cut)
            cut = re.sub(rf"\b{other}(?:'s)?\s+(?:and|&)\s+", "", cut)
            cut = re.sub(rf"\b{other}(?:'s)?\b", "", cut)
        cut = re.sub(r"\bboth\s+", "", cut)
        out.append(re.sub(r"\s+", " ", cut).strip())
    return out


SCHEMES = ("pair", "names")


def _candidates(
    mem: Any, user: str, text: str
) -> tuple[np.ndarray, list[tuple[str, float | None, float | None]]]:
    from chatmem.embeddings import embed_query
    from chatmem.records import Filter
    from chatmem.stores.base import SearchQuery

    vector = np.asarray(embed_query(mem.embedder, text), dtype=np.float32)
    scope = Filter(tenant_id="default", user_id=user)
    found = mem.store.search(
        SearchQuery(filter=scope, text=text, candidates=CANDIDATES, embed=lambda: vector)
    )
    return vector, [(c.id, c.vector_score, c.keyword_score) for c in found]


def _memories(mem: Any, user: str) -> dict[str, Any]:
    from chatmem import text as textlib
    from chatmem.records import Filter

    scope = Filter(tenant_id="default", user_id=user)
    records = []
    cursor = None
    while True:
        page = mem.store.list(scope, 1000, cursor)
        records += page.records
        cursor = page.next_cursor
        if cursor is None:
            break
    ids = [r.id for r in records]
    vectors = mem.store.vectors(ids, scope)
    return {
        "ids": ids,
        "dia": [str(r.user_metadata.get("dia_id")) for r in records],
        "session": [r.session_id for r in records],
        "speaker": [r.context.speaker if r.context else None for r in records],
        "text": [r.text for r in records],
        "before": [(r.context.before or "") if r.context else "" for r in records],
        "after": [(r.context.after or "") if r.context else "" for r in records],
        "embedded": [textlib.embedding_text(r) for r in records],
        "vec": np.stack([vectors[i] for i in ids]),
    }


def dump(name: str, data: Path, root: Path) -> None:
    """Add each user's turns one at a time (the live path), then ask that user's questions
    at once, before the next user is added, as both benchmarks do: FTS5's statistics are
    shared by the users of a shard, so a question asked later could score otherwise."""
    turns, asked = questions_of(name, data)
    workdir = Path(tempfile.mkdtemp(prefix=f"rerank-{name}-"))
    system = lr.ChatmemSystem(workdir)
    memories: dict[str, Any] = {}
    rows = []
    try:
        mem = system._mem
        for user, said in turns:
            for turn in said:
                system.add_one(user, turn)
            memories[user] = _memories(mem, user)
            for q in (q for q in asked if q.user == user):
                vector, cands = _candidates(mem, q.user, q.text)
                subs = {
                    scheme: {s: _candidates(mem, q.user, s) for s in sub_queries(q.text, scheme)}
                    for scheme in SCHEMES
                }
                rows.append({"q": asdict(q), "qvec": vector, "cands": cands, "subs": subs})
            print(f"{name}: {user} {len(said)} turns", file=sys.stderr, flush=True)
    finally:
        mem.close()
        shutil.rmtree(workdir, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{name}.pkl").open("wb") as out:
        pickle.dump({"memories": memories, "questions": rows}, out)
    print(f"{name}: {len(rows)} questions dumped", file=sys.stderr)


# --- re-ranking ------------------------------------------------------------------------------


@dataclass
class UserIndex:
    """One user's memories, by id: dia_id, session, text, vector, and names."""

    ids: list[str]
    dia: dict[str, str]
    session: dict[str, str | None]
    text: dict[str, str]
    vec: dict[str, np.ndarray]
    speaker: dict[str, str | None] = field(default_factory=dict)
    names: dict[str, frozenset[str]] = field(default_factory=dict)
    holders: dict[str, list[str]] = field(default_factory=dict)


def index_user(raw: dict[str, Any]) -> UserIndex:
    """A user's memories by id, with the names each one holds: a capitalised word is a name
    when it stands capitalised past the first word of some memory of the user (so "Lena"
    counts at the start of "Lena just got promoted" too), the speakers' names aside."""
    ids = raw["ids"]
    idx = UserIndex(
        ids,
        dict(zip(ids, raw["dia"], strict=True)),
        dict(zip(ids, raw["session"], strict=True)),
        dict(zip(ids, raw["text"], strict=True)),
        {i: raw["vec"][n] for n, i in enumerate(ids)},
        dict(zip(ids, raw["speaker"], strict=True)),
    )
    speakers = {s for s in raw["speaker"] if s}
    known = {n for i in ids for n in names_in(idx.text[i])} - speakers
    for i in ids:
        said = {w[:-2] if w.endswith("'s") else w for w in _NAME.findall(idx.text[i])}
        idx.names[i] = frozenset(said & known)
        for n in idx.names[i]:
            idx.holders.setdefault(n, []).append(i)
    return idx


@dataclass
class Item:
    """One dumped question ready to re-rank."""

    q: Asked
    qvec: np.ndarray
    cands: list[Any]
    subs: dict[str, dict[str, tuple[np.ndarray, list[Any]]]]
    user: UserIndex


Ranker = Callable[[Item], list[str]]


def fused(cands: Sequence[tuple[str, float | None, float | None]], config: Any = None) -> list[Any]:
    from chatmem import ranking
    from chatmem.records import Candidate

    got = [Candidate(*c) for c in cands]
    return ranking.fuse(got, config or ranking.DEFAULT_RANKING)


def base(item: Item) -> list[str]:
    return [s.id for s in fused(item.cands)]


def mmr(lam: float, pool: int = 30) -> Ranker:
    """Maximal marginal relevance over the fused score: each next pick maximises
    ``lam * score - (1 - lam) * max cosine to those picked``, within the best ``pool``."""

    def rank(item: Item) -> list[str]:
        scored = fused(item.cands)
        head, tail = scored[:pool], scored[pool:]
        vecs = np.stack([item.user.vec[s.id] for s in head])
        score = np.array([s.score for s in head])
        picked: list[int] = []
        best_sim = np.full(len(head), -np.inf)
        left = set(range(len(head)))
        while left and len(picked) < K:
            sims = np.where(np.isfinite(best_sim), best_sim, 0.0)
            value = lam * score - (1 - lam) * sims
            nxt = max(left, key=lambda i: (value[i], -i))
            picked.append(nxt)
            left.discard(nxt)
            best_sim = np.maximum(best_sim, vecs @ vecs[nxt])
        rest = [i for i in range(len(head)) if i not in picked]
        return [head[i].id for i in picked + rest] + [s.id for s in tail]

    return rank


def session_spread(penalty: float, pool: int = 30) -> Ranker:
    """Each further memory of a session already in the list loses ``penalty`` times the
    number of memories of that session picked before it (greedy, within ``pool``)."""

    def rank(item: Item) -> list[str]:
        scored = fused(item.cands)
        head, tail = scored[:pool], scored[pool:]
        taken: Counter[str | None] = Counter()
        picked: list[Any] = []
        left = list(head)
        while left and len(picked) < K:
            best = max(
                left,
                key=lambda s: (s.score - penalty * taken[item.user.session[s.id]], -left.index(s)),
            )
            picked.append(best)
            left.remove(best)
            taken[item.user.session[best.id]] += 1
        return [s.id for s in picked + left] + [s.id for s in tail]

    return rank


def interleave(mode: str, share: float = 1.0, scheme: str = "pair") -> Ranker:
    """Decomposition: with sub-queries, ``round``: the sub-searches' fused lists and the
    whole question's list taken in turn (whole first); ``fuse``: every candidate's best
    fused score over the whole question and the sub-queries (a sub-query's times ``share``)."""

    def rank(item: Item) -> list[str]:
        whole = [s.id for s in fused(item.cands)]
        subs = item.subs.get(scheme, {})
        if not subs:
            return whole
        lists = [whole] + [[s.id for s in fused(c)] for _, c in subs.values()]
        if mode == "round":
            out: dict[str, None] = {}
            for row in zip(*lists, strict=False):
                for i in row:
                    out.setdefault(i, None)
            for lst in lists:
                for i in lst:
                    out.setdefault(i, None)
            return list(out)
        best: dict[str, float] = {}
        for n, (_, c) in enumerate([(item.qvec, item.cands), *subs.values()]):
            weight = 1.0 if n == 0 else share
            for s in fused(c):
                best[s.id] = max(best.get(s.id, 0.0), weight * s.score)
        return sorted(best, key=lambda i: (-best[i], i))

    return rank


def entity_links(top: int, slots: int, max_holders: int, min_cos: float = 0.0) -> Ranker:
    """Entity links: the names in the best ``top`` hits (not in the question, held by at
    most ``max_holders`` memories) link to every memory that names them; the ``slots`` links
    of highest cosine to the question (at least ``min_cos``) take the last places of the top
    K, if not already in it."""

    def rank(item: Item) -> list[str]:
        order = base(item)
        head = order[:K]
        asked = set(names_in(item.q.text))
        linked: dict[str, float] = {}
        for hit in head[:top]:
            for name in item.user.names.get(hit, frozenset()) - asked:
                holders = item.user.holders.get(name, [])
                if len(holders) > max_holders:
                    continue
                for other in holders:
                    if other not in head:
                        linked[other] = float(item.user.vec[other] @ item.qvec)
        chosen = sorted((i for i in linked if linked[i] >= min_cos), key=lambda i: -linked[i])
        chosen = chosen[:slots]
        if not chosen:
            return order
        new_head = head[: K - len(chosen)] + chosen
        rest = [i for i in order if i not in new_head]
        return new_head + rest

    return rank


def link_bonus(top: int, beta: float, max_holders: int, outside: bool = True) -> Ranker:
    """Entity links as a bonus: a memory that shares a name (not in the question, held by at
    most ``max_holders`` memories) with one of the best ``top`` hits gains ``beta``; one the
    search did not find (``outside``) enters with the vector part of the fused score."""
    from chatmem import ranking

    weight = ranking.DEFAULT_RANKING.vector_weight

    def rank(item: Item) -> list[str]:
        scored = fused(item.cands)
        score = {s.id: s.score for s in scored}
        asked = set(names_in(item.q.text))
        linked: set[str] = set()
        for hit in [s.id for s in scored[:top]]:
            for name in item.user.names.get(hit, frozenset()) - asked:
                holders = item.user.holders.get(name, [])
                if len(holders) <= max_holders:
                    linked.update(h for h in holders if h != hit)
        for other in linked:
            if other not in score:
                if not outside:
                    continue
                score[other] = weight * max(0.0, float(item.user.vec[other] @ item.qvec))
            score[other] += beta
        return sorted(score, key=lambda i: (-score[i], i))

    return rank


def _turn(dia: str) -> tuple[str, int] | None:
    session, _, number = dia.rpartition(":")
    return (session, int(number)) if number.isdigit() else None


def neighbour_spread(penalty: float, pool: int = 30) -> Ranker:
    """A memory next to one already picked (the turn before or after it in its session)
    loses ``penalty`` of its fused score (greedy, within ``pool``)."""

    def rank(item: Item) -> list[str]:
        scored = fused(item.cands)
        head, tail = scored[:pool], scored[pool:]
        taken: set[tuple[str, int]] = set()
        picked: list[Any] = []
        left = list(head)

        def value(s: Any) -> float:
            turn = _turn(item.user.dia[s.id])
            near = turn is not None and (
                (turn[0], turn[1] - 1) in taken or (turn[0], turn[1] + 1) in taken
            )
            return float(s.score - (penalty if near else 0.0))

        while left:
            best = max(left, key=lambda s: (value(s), -left.index(s)))
            picked.append(best)
            left.remove(best)
            turn = _turn(item.user.dia[best.id])
            if turn is not None:
                taken.add(turn)
        return [s.id for s in picked] + [s.id for s in tail]

    return rank


def near_copy(cut: float, first: Ranker = base) -> Ranker:
    """Near-copies by their vectors, over ``first``'s order: a memory whose cosine to one
    kept above it is at least ``cut`` comes after the others."""

    def rank(item: Item) -> list[str]:
        kept: list[str] = []
        aside: list[str] = []
        for i in first(item):
            v = item.user.vec[i]
            near = any(float(v @ item.user.vec[k]) >= cut for k in kept)
            (aside if near else kept).append(i)
        return kept + aside

    return rank


def repeats(first: Ranker = base) -> Ranker:
    """``chatmem.ranking.Repeats`` over ``first``'s order, as ``LongTermMemory.search`` reads
    it: a memory whose speaker said the same words in one above it comes after the others."""
    from chatmem import ranking

    def rank(item: Item) -> list[str]:
        seen: set[Any] = set()
        kept: list[str] = []
        aside: list[str] = []
        for i in first(item):
            key = ranking.said(item.user.speaker[i], item.user.text[i])
            repeat = bool(key[1]) and key in seen
            seen.add(key)
            (aside if repeat else kept).append(i)
        return kept + aside

    return rank


def same_words(share: float, first: Ranker = base) -> Ranker:
    """Near-copies by their words: a memory whose set of words (``chatmem.text.words``)
    overlaps one kept above it by at least ``share`` (Jaccard) comes after the others."""
    from chatmem import text as textlib

    def rank(item: Item) -> list[str]:
        kept: list[tuple[str, frozenset[str]]] = []
        aside: list[str] = []
        for i in first(item):
            said = frozenset(textlib.words(item.user.text[i]))
            if any(len(said & w) >= share * len(said | w) for _, w in kept if said | w):
                aside.append(i)
            else:
                kept.append((i, said))
        return [i for i, _ in kept] + aside

    return rank


def speaker_bonus(beta: float, top: int) -> Ranker:
    """``chatmem.ranking.favour_named`` over the fused order's first ``top``: a memory
    said by someone the question names gains ``beta``."""
    from chatmem import ranking

    def rank(item: Item) -> list[str]:
        scored = fused(item.cands)
        names = ranking.named(item.q.text)
        head = ranking.favour_named(scored[:top], item.user.speaker, names, beta)
        return [s.id for s in head + scored[top:]]

    return rank


def variants() -> dict[str, Ranker]:
    """Every variant measured, by name."""
    out: dict[str, Ranker] = {"base": base, "repeats": repeats()}
    for cut in (0.99, 0.97, 0.95, 0.93, 0.9, 0.85, 0.8):
        out[f"near-copy-{cut}"] = near_copy(cut)
    for share in (1.0, 0.9, 0.8, 0.7):
        out[f"same-words-{share}"] = same_words(share)
    for lam in (0.9, 0.8, 0.7, 0.6, 0.5):
        out[f"mmr-{lam}"] = mmr(lam)
    for penalty in (0.02, 0.05, 0.1, 0.2):
        out[f"session-{penalty}"] = session_spread(penalty)
    for penalty in (0.02, 0.05, 0.1, 1.0):
        out[f"neighbour-{penalty}"] = neighbour_spread(penalty)
    for scheme in SCHEMES:
        out[f"decomp-{scheme}-round"] = interleave("round", scheme=scheme)
        out[f"decomp-{scheme}-fuse"] = interleave("fuse", scheme=scheme)
    for top, slots, holders in ((1, 1, 10), (3, 1, 10), (3, 2, 10), (5, 2, 10), (3, 2, 30)):
        out[f"links-{top}-{slots}-{holders}"] = entity_links(top, slots, holders)
    bonuses = [(1, 0.1, 10), (3, 0.1, 10), (3, 0.1, 5), (3, 0.2, 10), (3, 0.3, 10)]
    bonuses += [(5, 0.1, 10), (5, 0.2, 10), (5, 0.1, 20), (10, 0.05, 10)]
    for top, beta, holders in bonuses:
        out[f"bonus-{top}-{beta}-{holders}"] = link_bonus(top, beta, holders)
    out["bonus-3-0.1-10-inside"] = link_bonus(3, 0.1, 10, outside=False)
    out["repeats+mmr-0.9"] = repeats(mmr(0.9))
    out["repeats+decomp-pair-round"] = repeats(interleave("round"))
    for top, beta, holders in ((1, 0.1, 10), (2, 0.1, 10), (3, 0.1, 10), (3, 0.1, 5), (5, 0.1, 10)):
        out[f"repeats+bonus-{top}-{beta}-{holders}"] = repeats(link_bonus(top, beta, holders))
    for beta in (0.05, 0.1, 0.15, 0.2):
        for top in (20, 50):
            out[f"repeats+speaker-{beta}-{top}"] = repeats(speaker_bonus(beta, top))
    return out


VARIANTS = variants()


# --- scoring ---------------------------------------------------------------------------------


def load(root: Path, name: str) -> Iterator[Item]:
    with (root / f"{name}.pkl").open("rb") as f:
        raw = pickle.load(f)
    users = {u: index_user(m) for u, m in raw["memories"].items()}
    for row in raw["questions"]:
        q = Asked(**row["q"])
        yield Item(q, row["qvec"], row["cands"], row["subs"], users[q.user])


CATS = {
    "locomo": ("multi-hop", "temporal", "open-domain", "single-hop"),
    "ci": synthetic.CATEGORIES,
    "full": synthetic.CATEGORIES,
}


def evaluate(items: Sequence[Item], ranker: Ranker) -> dict[str, dict[str, float]]:
    """recall@K and all@K by group and by group and category."""
    acc: dict[str, list[tuple[float, float]]] = {}
    for item in items:
        got = [item.user.dia[i] for i in ranker(item)[:K]]
        found = item.q.evidence.intersection(got)
        pair = (len(found) / len(item.q.evidence), float(found == item.q.evidence))
        for key in (item.q.group, f"{item.q.group} {item.q.category}"):
            acc.setdefault(key, []).append(pair)
    return {
        key: {"r": float(np.mean([p[0] for p in v])), "all": float(np.mean([p[1] for p in v]))}
        for key, v in acc.items()
    }


def score(root: Path, only: list[str] | None, out: Path | None) -> None:
    names = only or list(VARIANTS)
    results: dict[str, dict[str, Any]] = {n: {} for n in names}
    for name in SETS:
        if not (root / f"{name}.pkl").exists():
            continue
        items = list(load(root, name))
        for variant in names:
            results[variant][name] = evaluate(items, VARIANTS[variant])
    print_table(results)
    if out:
        out.write_text(json.dumps(results, indent=1) + "\n")


def print_table(results: dict[str, dict[str, Any]]) -> None:
    """A Markdown table: recall@10 by LoCoMo half, with multi-hop's recall@10 (all@10),
    and by synthetic size, with the categories' recall@10 in ``synthetic.CATEGORIES``
    order."""
    cols = ["variant", "0-4", "0-4 multi-hop", "5-9", "5-9 multi-hop", "CI", "CI by category"]
    cols += ["full", "full by category"]
    print("| " + " | ".join(cols) + " |")
    print("|---" + "|---:" * (len(cols) - 1) + "|")
    for variant, sets in results.items():
        cells = [variant]
        lo = sets.get("locomo", {})
        for half in ("0-4", "5-9"):
            if half in lo:
                hop = lo[f"{half} multi-hop"]
                cells += [f"{lo[half]['r']:.4f}", f"{hop['r']:.4f} ({hop['all']:.3f})"]
        for size in ("ci", "full"):
            if size in sets:
                s = sets[size]
                cats = " ".join(f"{s[f'{size} {c}']['r']:.3f}"[1:] for c in synthetic.CATEGORIES)
                cells += [f"{s[size]['r']:.3f}", cats]
        print("| " + " | ".join(cells) + " |")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("step", choices=("dump", "score"))
    p.add_argument("--data", type=Path, default=Path("/work/shared/data/locomo/locomo10.json"))
    p.add_argument("--dir", type=Path, default=Path("/tmp/multihop"))
    p.add_argument("--sets", default=",".join(SETS))
    p.add_argument("--only", default=None, help="comma-separated variants (score)")
    p.add_argument("--json", type=Path, default=None, help="write the scores here (score)")
    args = p.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    if args.step == "score":
        only = [v for v in args.only.split(",") if v] if args.only else None
        score(args.dir, only, args.json)
        return 0
    for name in sets:
        dump(name, args.data, args.dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
