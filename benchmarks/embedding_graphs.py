"""The fast model's graphs, one text a run (issue 14): the export quantised as it is (the
recipe before 2026-12-07) against the encoder rebuilt of fused nodes (``embeddings.fused``,
the recipe now), each with and without onnxruntime's ``SkipLayerNormalization`` fusion.

LoCoMo turns (``"speaker: text"``, as memories are embedded) and questions, each text run
through every variant in turn, on one onnxruntime thread without spinning, as the embedder
runs them. Prints each variant's p50 and mean, and the cosine of its mean-pooled vectors
with the packaged model's (float weights).

    OPENBLAS_NUM_THREADS=1 python benchmarks/embedding_graphs.py --data "$LOCOMO" --json out.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo_retrieval as lr  # noqa: E402 - a sibling script, found through sys.path
from _locomo import load_locomo  # noqa: E402
from chatmem.embeddings import local, quantize  # noqa: E402


def _session(model: Path | bytes, fused_layer_norm: bool) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    refused = [] if fused_layer_norm else quantize.DISABLED_FUSIONS
    source = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(
        source, options, providers=["CPUExecutionProvider"], disabled_optimizers=refused
    )


def _export_quantised(folder: Path) -> bytes:
    """The recipe before 2026-12-07: the folded export's MatMuls quantised as they are."""
    folded = folder / "folded.onnx"
    quantize.fold(local._default_model_path(), folded)
    return quantize._quantised(folded, folder / "export-q8.onnx", ["MatMul"])


def _vector(session: ort.InferenceSession, tokenizer: Any, text: str) -> np.ndarray:
    ids = np.array([tokenizer.encode(text).ids], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    feeds["token_type_ids"] = np.zeros_like(ids)
    names = {i.name for i in session.get_inputs()}
    states = session.run(None, {k: v for k, v in feeds.items() if k in names})[0][0]
    pooled: np.ndarray = states.mean(axis=0)
    return pooled / np.linalg.norm(pooled)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, type=Path, help="path to locomo10.json")
    parser.add_argument("--texts", type=int, default=300, help="of each kind (default 300)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    conversations = load_locomo(args.data)
    turns = [t.spoken() for c in conversations for t in c.turns]
    kinds = {
        "turns": random.Random(1).sample(turns, args.texts),
        "questions": lr.scale_queries(conversations, args.texts),
    }
    tokenizer = local.LocalEmbedder()._model()[1]
    with tempfile.TemporaryDirectory(prefix="embedding-graphs-") as folder:
        export = _export_quantised(Path(folder))
        rebuilt = quantize.fast_model(local._default_model_path())
        exact = _session(local._default_model_path(), fused_layer_norm=True)
        variants = {
            "export, fused layer norm (before)": _session(export, True),
            "export, layer norm unfused": _session(export, False),
            "rebuilt, fused layer norm": _session(rebuilt, True),
            "rebuilt, layer norm unfused (now)": _session(rebuilt, False),
        }
        result: dict[str, Any] = {}
        for kind, texts in kinds.items():
            for text in texts[:20]:
                for session in variants.values():
                    _vector(session, tokenizer, text)
            times: dict[str, list[float]] = {name: [] for name in variants}
            cosines: dict[str, list[float]] = {name: [] for name in variants}
            for text in texts:
                reference = _vector(exact, tokenizer, text)
                for name, session in variants.items():
                    began = time.perf_counter()
                    vector = _vector(session, tokenizer, text)
                    times[name].append((time.perf_counter() - began) * 1000)
                    cosines[name].append(float(vector @ reference))
            result[kind] = {
                name: {
                    "p50_ms": round(statistics.median(times[name]), 3),
                    "mean_ms": round(statistics.fmean(times[name]), 3),
                    "cosine_mean": round(statistics.fmean(cosines[name]), 4),
                    "cosine_min": round(min(cosines[name]), 4),
                }
                for name in variants
            }
    for kind, rows in result.items():
        print(
            f"{kind}: | variant | p50 ms | mean ms | cosine with the packaged model (mean, min) |"
        )
        for name, row in rows.items():
            print(
                f"| {name} | {row['p50_ms']:.3f} | {row['mean_ms']:.3f} |"
                f" {row['cosine_mean']:.4f}, {row['cosine_min']:.4f} |"
            )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
