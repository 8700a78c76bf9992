"""The model's own word-piece states, kept for a late-interaction rerank (issue 18).

A sentence vector is the mean of the model's token states: one point for the whole text,
so "What activities does Melanie partake in?" lands far from "I'm off to go swimming with
the kids". Scoring a text by how well each of the query's words finds its best match among
the text's words (MaxSim, as ColBERT does) recovers part of what the mean loses.

The embedder already computes every token's state to take that mean, so a text's states
cost nothing more than keeping them: its content word pieces (no ``[CLS]``, ``[SEP]``,
punctuation or stopwords), each L2-normalised and stored as int8 with one scale per row
(384 bytes a word piece; a LoCoMo turn keeps about 18). Recall on LoCoMo did not move
between float32 and int8 states (docs/benchmarks.md, "Words matched one by one").
"""

from __future__ import annotations

import hashlib
import struct
import sys
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from chatmem.caches import LRUCache, MiB

#: Word pieces that carry no meaning of their own: left out of both sides of the score.
_STOPWORDS = """
    a an the is was are were do does did what when where who how why which of to in on for
    and or with my your his her their it i you he she they we me at by from be been has
    have had that this as about
"""
STOPWORDS = frozenset(_STOPWORDS.split())

#: A text keeps its first this many content word pieces: a rerank of 50 memories of 1-3K
#: characters (about 200 pieces each) took 4.5 ms to score, 32 each 0.5 ms; LoCoMo's
#: recall is the same with 32 or 64 (a turn keeps 18 on average).
MAX_ROWS = 32

#: Default bytes of token states held (about 15,000 chat turns).
DEFAULT_BUDGET_BYTES = 96 * MiB


class States:
    """One text's content word pieces: int8 rows and a float32 scale per row."""

    __slots__ = ("rows", "scales")

    def __init__(self, rows: npt.NDArray[np.int8], scales: npt.NDArray[np.float32]) -> None:
        self.rows = rows
        self.scales = scales

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes + self.scales.nbytes)

    def unpacked(self) -> npt.NDArray[np.float32]:
        """The rows as float32, each of (about) unit length."""
        return self.rows.astype(np.float32) * self.scales[:, None]

    def to_bytes(self, text: str) -> bytes:
        """These states as a store keeps them, marked with the ``text`` they are of."""
        count, dimension = self.rows.shape
        header = _HEADER.pack(_FORMAT, digest(text), count, dimension)
        return header + self.scales.astype("<f4").tobytes() + self.rows.tobytes()

    @classmethod
    def from_bytes(cls, blob: bytes, text: str, dimension: int) -> States | None:
        """The states ``to_bytes`` wrote, if they are of ``text`` (a memory edited since
        has others), of ``dimension`` and whole; else None, whatever the bytes."""
        if not isinstance(blob, bytes | bytearray | memoryview) or len(blob) < _HEADER.size:
            return None
        kind, marked, count, width = _HEADER.unpack_from(blob)
        start = _HEADER.size + 4 * count
        if (
            kind != _FORMAT
            or marked != digest(text)
            or width != dimension
            or not 1 <= count <= MAX_ROWS
            or width < 1
            or len(blob) != start + count * width
        ):
            return None
        scales = np.frombuffer(blob, dtype="<f4", count=count, offset=_HEADER.size)
        if not np.isfinite(scales).all():
            return None
        rows = np.frombuffer(blob, dtype=np.int8, offset=start).reshape(count, width)
        return cls(rows, scales.astype(np.float32))


#: A stored blob: its format, the digest of its text, rows and dimension; then the scales
#: (float32, little-endian) and the int8 rows.
_HEADER = struct.Struct("<2s8sHH")
_FORMAT = b"S1"


def digest(text: str) -> bytes:
    """Eight bytes that tell ``text`` from any other (for states kept apart from it)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def kept(pieces: Sequence[str]) -> list[int]:
    """The positions of the content word pieces among a text's ``pieces`` (the tokenizer's
    tokens, lower case): letters or digits only, not a stopword, not a special token. All
    the real ones (no ``[CLS]``/``[SEP]``) where none passes."""
    chosen = [i for i, p in enumerate(pieces) if p.isalnum() and p not in STOPWORDS]
    if not chosen:
        chosen = [i for i, p in enumerate(pieces) if p not in ("[CLS]", "[SEP]")]
    return chosen[:MAX_ROWS]


def packed(hidden: npt.NDArray[np.float32], positions: Sequence[int]) -> States | None:
    """The states at ``positions`` of one text's ``hidden`` (tokens x dimension),
    normalised and quantized; None when there are none."""
    if not positions:
        return None
    rows = hidden[list(positions)].astype(np.float32)
    rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    scales = np.maximum(np.abs(rows).max(axis=1), 1e-12) / 127.0
    quantized = np.round(rows / scales[:, None]).astype(np.int8)
    return States(quantized, scales.astype(np.float32))


def late_scores(query: States, texts: Sequence[States]) -> npt.NDArray[np.float32]:
    """For each of ``texts``: the mean over the query's word pieces of the best cosine
    with any of the text's word pieces (MaxSim), one matrix product for all."""
    if not texts:
        return np.empty(0, dtype=np.float32)
    starts = np.cumsum([0] + [len(t.rows) for t in texts[:-1]])
    rows = np.concatenate([t.rows for t in texts], dtype=np.float32)  # no int8 copy first
    scales = np.concatenate([t.scales for t in texts])
    # Every text's rows against the query's, each row's scale after: with the many text
    # rows first, BLAS runs this 1.4x faster than the query's rows first (0.24 against
    # 0.34 ms for 50 texts).
    sims = rows @ query.unpacked().T
    sims *= scales[:, None]
    best = np.maximum.reduceat(sims, starts, axis=0)
    result: npt.NDArray[np.float32] = best.mean(axis=1).astype(np.float32)
    return result


def _size(key: str, states: States) -> int:
    return sys.getsizeof(key) + states.nbytes + 200


class TokenStates:
    """Texts' ``States`` by text, the most recently used within ``max_bytes``; safe
    across threads. Filled as the embedder embeds (queries and memories alike)."""

    def __init__(self, max_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self._cache: LRUCache[str, States] = LRUCache(max_bytes, size=_size)

    def put(self, text: str, states: States | None) -> None:
        if states is not None:
            self._cache.put(text, states)

    def get(self, text: str) -> States | None:
        return self._cache.get(text)

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def max_bytes(self) -> int:
        return self._cache.max_bytes

    @property
    def bytes(self) -> int:
        return self._cache.bytes
