"""The fast model's encoder rebuilt of onnxruntime's fused nodes (``embeddings.fused``):
the packaged model's states, from about a quarter as many nodes, and never the slow fused
layer norm (``quantize.DISABLED_FUSIONS``)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from chatmem import LocalEmbedder
from chatmem.embeddings import fused, local, quantize

TEXTS = [
    "hi",
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "Melanie: " + "we painted a sunset by the lake, " * 12,
]


@pytest.fixture(scope="module")
def folded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("fused") / "folded.onnx"
    quantize.fold(local._default_model_path(), target)
    return target


def _states(model: Path | bytes, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The model's word-piece states of ``texts`` in one padded batch, and the mask."""
    tokenizer = LocalEmbedder()._model()[1]
    encodings = tokenizer.encode_batch(texts)
    ids, mask = local._inputs(encodings)
    session = ort.InferenceSession(
        model if isinstance(model, bytes) else str(model), providers=["CPUExecutionProvider"]
    )
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    return session.run(None, feeds)[0], mask


def test_the_rebuilt_encoder_gives_the_exports_states(folded: Path, tmp_path: Path) -> None:
    rebuilt = fused.rebuilt(onnx.load(str(folded)))
    operators = {node.op_type for node in rebuilt.graph.node}
    assert {"Attention", "EmbedLayerNormalization", "BiasGelu"} <= operators
    assert rebuilt.ir_version == onnx.load(str(folded)).ir_version
    assert "SkipLayerNormalization" not in operators
    assert len(rebuilt.graph.node) < len(onnx.load(str(folded)).graph.node) / 3
    onnx.save(rebuilt, str(tmp_path / "rebuilt.onnx"))
    expected, mask = _states(folded, TEXTS)
    found, _ = _states(tmp_path / "rebuilt.onnx", TEXTS)
    assert found.shape == expected.shape
    # Every real word piece's state, the padded rows' too; padding itself is never read.
    assert float(np.max(np.abs((found - expected) * mask[:, :, None]))) < 1e-4


def test_the_fast_copy_is_quantised_from_the_rebuilt_encoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATMEM_CACHE_DIR", str(tmp_path))
    model = onnx.load_from_string(quantize.fast_model(local._default_model_path()))
    operators = [node.op_type for node in model.graph.node]
    assert operators.count("QAttention") == fused.LAYERS
    assert "SkipLayerNormalization" not in operators


def test_a_graph_it_does_not_know_is_quantised_as_it_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node = helper.make_node("Identity", ["input_ids"], ["last_hidden_state"])
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.INT64, ["b", "s"])
    graph = helper.make_graph([node], "unknown", [ids], [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(fused.FusionError, match="word_embeddings"):
        fused.rebuilt(model)
    onnx.save(model, str(tmp_path / "unknown.onnx"))
    with caplog.at_level(logging.WARNING, logger="chatmem.embeddings"):
        derived = onnx.load_from_string(quantize._derive(tmp_path / "unknown.onnx"))
    assert [n.op_type for n in derived.graph.node] == ["Identity"]
    assert "quantised from the export as it is" in caplog.text


def test_a_rebuild_whose_int8_copy_strays_is_not_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # No copy agrees with the export better than exactly: the check must refuse this one.
    monkeypatch.setattr(quantize, "QUANTISED_AGREEMENT", 1.01)
    with caplog.at_level(logging.WARNING, logger="chatmem.embeddings"):
        derived = onnx.load_from_string(quantize._derive(local._default_model_path()))
    operators = {node.op_type for node in derived.graph.node}
    assert "QAttention" not in operators and "MatMulInteger" in operators
    assert "int8 copy's vectors agree with the export's by" in caplog.text


@pytest.mark.parametrize("fast", [False, True], ids=["packaged", "fast"])
def test_no_session_fuses_the_slow_layer_norm(
    fast: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATMEM_CACHE_DIR", str(tmp_path))
    source = local._default_model_path()
    model = quantize.fast_model(source) if fast else str(source)
    options = LocalEmbedder()._options()
    options.optimized_model_filepath = str(tmp_path / "optimised.onnx")
    quantize.cpu_session(model, options)
    operators = {node.op_type for node in onnx.load(str(tmp_path / "optimised.onnx")).graph.node}
    assert "LayerNormalization" in operators
    assert "SkipLayerNormalization" not in operators
