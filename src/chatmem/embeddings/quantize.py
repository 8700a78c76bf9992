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
result is cached in ``cache_dir()`` under
a name made of the source model's hash and the onnxruntime version, so a changed model or
runtime derives a new one.
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

#: Bumped when the derivation changes, so an old cached copy is not reused.
RECIPE = "q8-fused-attention-v2"
#: The largest difference in a word piece's state between the export and its fused rebuild
#: (float weights both) for the rebuild to be used: measured 2.2e-6.
FUSED_TOLERANCE = 1e-4
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
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:  # the onnx package is a dependency of chatmem
        raise EmbeddingError(f"the fast query model needs the 'onnx' package: {exc}") from exc
    quiet = logging.getLogger()
    level = quiet.level
    with tempfile.TemporaryDirectory(prefix="chatmem-q8-") as folder:
        folded, quantised = Path(folder) / "folded.onnx", Path(folder) / "q8.onnx"
        try:
            fold(source, folded)
            quantisable, operators = _fused(folded, Path(folder) / "fused.onnx")
            # quantize_dynamic logs a pre-processing hint on the root logger at WARNING.
            quiet.setLevel(logging.ERROR)
            quantize_dynamic(
                quantisable,
                quantised,
                weight_type=QuantType.QInt8,
                op_types_to_quantize=operators,
                per_channel=True,
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            )
        except Exception as exc:  # boundary: onnx and onnxruntime raise untyped errors
            raise EmbeddingError(f"cannot derive the fast query model: {exc}") from exc
        finally:
            quiet.setLevel(level)
        return quantised.read_bytes()


def fold(source: Path, target: Path) -> None:
    """Write to ``target`` the model at ``source`` with its int8 weights turned back into
    floats (onnxruntime's basic optimisations: constants folded)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(target)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


def _fused(folded: Path, target: Path) -> tuple[Path, list[str]]:
    """The graph to quantise and the operators to quantise in it: ``folded`` rebuilt of
    fused nodes (``fused.rebuilt``), written to ``target``, when it gives the folded
    graph's states on ``_PROBE``; else ``folded`` itself."""
    import onnx

    from chatmem.embeddings import fused  # onnx is imported only to derive the copy

    try:
        model = fused.rebuilt(onnx.load(str(folded)))
        onnx.save(model, str(target))
        gap = _largest_gap(folded, target)
    except Exception as exc:  # boundary: an unknown graph, or one onnxruntime refuses
        logger.info("the fast model is quantised from the export as it is: %s", exc)
        return folded, ["MatMul"]
    if not gap <= FUSED_TOLERANCE:
        logger.warning("the fused graph differs from the export by %s; not used", gap)
        return folded, ["MatMul"]
    return target, ["MatMul", "Attention"]


def _largest_gap(first: Path, second: Path) -> float:
    """The largest difference between the two models' states of ``_PROBE``'s word pieces,
    one padded row among them."""
    ids = np.array([_PROBE, [*_PROBE[:5], 102, 0, 0, 0, 0, 0]], dtype=np.int64)
    mask = (ids > 0).astype(np.int64)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    states = []
    for path in (first, second):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = {i.name for i in session.get_inputs()}
        states.append(session.run(None, {k: v for k, v in feeds.items() if k in names})[0])
    return float(np.max(np.abs((states[0] - states[1]) * mask[:, :, None])))


__all__ = ["RECIPE", "cache_dir", "cached_path", "fast_model", "fold"]
