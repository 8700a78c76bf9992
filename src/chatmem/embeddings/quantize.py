"""A faster copy of the local MiniLM for queries, derived on this machine, never downloaded.

The packaged model keeps its weights as int8 but multiplies in float32: onnxruntime turns
the weights back into floats when it loads them. Its dynamic-int8 copy (weights int8 per
output channel, activations quantised per call, ``MatMulInteger``) takes about half the CPU
for a short query on an AVX2 machine, and its vectors have cosine 0.994 on average (0.988 at
worst, over 300 LoCoMo questions) against the packaged model's. A query embedded with it is
compared with memories embedded by the packaged model, so stored vectors never change.

Deriving it takes about 3-4 s (fold the dequantisation into float weights, rebuild the
encoder of onnxruntime's fused nodes where the graph is the export ``fused`` knows and the
rebuild gives the same states, then ``onnxruntime.quantization.quantize_dynamic``); the
result is cached in ``cache_dir()`` under a name made of the source model's hash, the
recipe and the onnxruntime version, so a changed model, recipe or runtime derives a new one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort

from chatmem.errors import EmbeddingError

logger = logging.getLogger("chatmem.embeddings")

#: onnxruntime's fusions left out of every session of the embedder, and of the checks here.
#: Its CPU kernel of ``SkipLayerNormalization`` (the residual add and the layer norm in one
#: node, fused at load) took 49 us for 25 x 384 values where the add and the plain
#: ``LayerNormalization`` take 11, on a 2-core AMD EPYC with onnxruntime 1.32: MiniLM has 12
#: of them, about 0.5 ms of a 3.5 ms memory embedding (docs/benchmarks.md, "Layer norms
#: unfused, and attention in one node").
DISABLED_FUSIONS = ["SkipLayerNormFusion"]
#: Bumped when the derivation changes, so an old cached copy is not reused.
RECIPE = "q8-fused-attention-v2"
#: The largest difference in a word piece's state between the export and its fused rebuild
#: (float weights both) for the rebuild to be used: measured 2.2e-6.
FUSED_TOLERANCE = 1e-4
#: The lowest cosine between the rebuild's int8 copy's vectors of ``_PROBE`` and the
#: export's (float weights) for the copy to be used; the export's own int8 copy gives
#: 0.988-0.994 on LoCoMo questions.
QUANTISED_AGREEMENT = 0.98
#: Word pieces run through both graphs to check a rebuild: [CLS] "when did caroline go to
#: the support group ?" [SEP].
_PROBE = [101, 2043, 2106, 7981, 2175, 2000, 1996, 2490, 2177, 1029, 102]
_lock = threading.Lock()


def cache_dir() -> Path:
    """``$CHATMEM_CACHE_DIR``, else ``$XDG_CACHE_HOME/chatmem``, else ``~/.cache/chatmem``."""
    named = os.environ.get("CHATMEM_CACHE_DIR")
    if named:
        return Path(named)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "chatmem"


def cached_path(source: Path) -> Path:
    """Where the fast copy of the model at ``source`` is cached (whether it is there yet or
    not): named by the model's digest, the recipe and the onnxruntime version."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    return cache_dir() / f"minilm-{digest}-{RECIPE}-ort{ort.__version__}.onnx"


def fast_model(source: Path) -> bytes:
    """The dynamic-int8 copy of the ONNX model at ``source``, from the cache or derived now.

    Raises ``EmbeddingError`` when it cannot be derived (the ``onnx`` package missing, or a
    model that does not quantise)."""
    with _lock:
        cached = cached_path(source)
        if cached.is_file():
            return cached.read_bytes()
        model = _derive(source)
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            partial = cached.with_suffix(f".{os.getpid()}.partial")
            partial.write_bytes(model)
            os.replace(partial, cached)
        except OSError as exc:
            logger.info("the fast query model is not cached (%s); it is derived at each start", exc)
        return model


def _derive(source: Path) -> bytes:
    try:
        import onnx  # noqa: F401 - both are needed below
        import onnxruntime.quantization  # noqa: F401
    except ImportError as exc:  # the onnx package is a dependency of chatmem
        raise EmbeddingError(f"the fast query model needs the 'onnx' package: {exc}") from exc
    with tempfile.TemporaryDirectory(prefix="chatmem-q8-") as folder:
        folded = Path(folder) / "folded.onnx"
        try:
            fold(source, folded)
        except Exception as exc:  # boundary: onnxruntime raises untyped errors
            raise EmbeddingError(f"cannot derive the fast query model: {exc}") from exc
        try:
            return _rebuilt_copy(folded, Path(folder))
        except Exception as exc:  # boundary: an unknown graph, or one onnx or onnxruntime refuses
            # Cached as it is under this recipe: a warning, so that the slower copy is seen.
            logger.warning("the fast model is quantised from the export as it is: %s", exc)
        try:
            return _quantised(folded, Path(folder) / "q8.onnx", ["MatMul"])
        except Exception as exc:  # boundary: onnx and onnxruntime raise untyped errors
            raise EmbeddingError(f"cannot derive the fast query model: {exc}") from exc


def cpu_session(model: str | bytes, options: ort.SessionOptions) -> ort.InferenceSession:
    """An onnxruntime session of ``model`` (a path or the model's bytes) on the CPU,
    without ``DISABLED_FUSIONS``: every session of the embedder and of the checks here."""
    return ort.InferenceSession(
        model,
        sess_options=options,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=DISABLED_FUSIONS,
    )


def fold(source: Path, target: Path) -> None:
    """Write to ``target`` the model at ``source`` with its int8 weights turned back into
    floats (onnxruntime's basic optimisations: constants folded)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(target)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


def _rebuilt_copy(folded: Path, folder: Path) -> bytes:
    """The dynamic-int8 copy of ``folded`` rebuilt of fused nodes (``fused.rebuilt``).
    Raises ``fused.FusionError`` when the rebuild's states on ``_PROBE`` differ from the
    export's by more than ``FUSED_TOLERANCE``, or its quantised copy's vector is further
    from the export's than ``QUANTISED_AGREEMENT``."""
    import onnx

    from chatmem.embeddings import fused  # onnx is imported only to derive the copy

    rebuilt = folder / "fused.onnx"
    onnx.save(fused.rebuilt(onnx.load(str(folded))), str(rebuilt))
    expected, mask = _probe_states(str(folded))
    found, _ = _probe_states(str(rebuilt))
    gap = float(np.max(np.abs((found - expected) * mask[:, :, None])))
    if not gap <= FUSED_TOLERANCE:
        raise fused.FusionError(f"the rebuilt graph's states differ from the export's by {gap}")
    copy = _quantised(rebuilt, folder / "fused-q8.onnx", ["MatMul", "Attention"])
    quantised, _ = _probe_states(copy)
    agreement = float(np.min(np.sum(_pooled(quantised, mask) * _pooled(expected, mask), axis=1)))
    if not agreement >= QUANTISED_AGREEMENT:
        raise fused.FusionError(f"its int8 copy's vectors agree with the export's by {agreement}")
    return copy


def _quantised(model: Path, target: Path, operators: list[str]) -> bytes:
    """``model``'s dynamic-int8 copy (weights per output channel), ``operators`` quantised."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quiet = logging.getLogger()
    level = quiet.level
    # quantize_dynamic logs a pre-processing hint on the root logger at WARNING.
    quiet.setLevel(logging.ERROR)
    try:
        quantize_dynamic(
            model,
            target,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=operators,
            per_channel=True,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    finally:
        quiet.setLevel(level)
    return target.read_bytes()


def _probe_states(model: str | bytes) -> tuple[np.ndarray, np.ndarray]:
    """The model's word-piece states of ``_PROBE`` and of its first pieces padded, and the
    mask of the real ones."""
    ids = np.array([_PROBE, [*_PROBE[:5], 102, 0, 0, 0, 0, 0]], dtype=np.int64)
    mask = (ids > 0).astype(np.int64)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    # Built as the embedder builds its sessions: the graph checked is the graph served.
    session = cpu_session(model, ort.SessionOptions())
    names = {i.name for i in session.get_inputs()}
    states: np.ndarray = session.run(None, {k: v for k, v in feeds.items() if k in names})[0]
    return states, mask


def _pooled(states: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Each row's mean over its real word pieces, at unit length (``local._pooled``'s
    masked mean; ``local`` imports this module, so it cannot be imported here)."""
    summed = (states * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    pooled: np.ndarray = summed / np.linalg.norm(summed, axis=1, keepdims=True)
    return pooled


__all__ = [
    "DISABLED_FUSIONS",
    "RECIPE",
    "cache_dir",
    "cached_path",
    "cpu_session",
    "fast_model",
    "fold",
]
