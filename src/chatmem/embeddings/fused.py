"""MiniLM's encoder rebuilt from the packaged model's weights as onnxruntime's fused
operators, before the fast copy is quantised (``quantize``).

The packaged model is a graph exported by PyTorch's dynamo exporter: its attention is the
decomposed scaled-dot-product attention (the mask built anew in every layer from ``Range``,
``GatherND`` and ``Where`` nodes, a ``Softmax`` guarded by ``IsNaN``), about 260 nodes a run,
which onnxruntime cannot fuse. The same weights in a BERT graph of fused nodes
(``EmbedLayerNormalization``, one ``Attention`` a layer with the query, key and value
projections in one matrix, ``BiasGelu``, and the residual adds before plain
``LayerNormalization``) are 70 nodes, and their dynamic-int8 copy, with each attention one
``QAttention``, runs 64 a call. On a 2-core AMD EPYC with onnxruntime 1.32 a LoCoMo turn
embedded in 3.25 ms against 3.93 ms for the quantised export with the same layer norms
(``benchmarks/embedding_graphs.py``; docs/benchmarks.md, "Layer norms unfused, and
attention in one node").

``rebuilt`` reads the weights off the folded export (the int8 weights turned back into
floats): each projection is the ``MatMul`` whose result the ``Add`` of a named bias takes
(``inner.encoder.layer.<i>.attention.self.query.bias`` ...). A model whose graph does not
have them raises ``FusionError``, and ``quantize`` then quantises the export as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: MiniLM-L6's shape: layers, attention heads, and the layer norms' epsilon.
LAYERS = 6
HEADS = 12
EPSILON = 1e-12
_PREFIX = "inner."
_MS = "com.microsoft"


class FusionError(Exception):
    """The model's graph is not the export ``rebuilt`` knows."""


def rebuilt(folded: onnx.ModelProto) -> onnx.ModelProto:
    """``folded``'s encoder (float weights) as a graph of fused nodes, with the same inputs
    (``input_ids``, ``attention_mask``, ``token_type_ids``) and output
    (``last_hidden_state``)."""
    weights = _initializers(folded.graph)
    projections = _projections(folded.graph, weights)
    builder = _Builder(weights, projections)
    hidden = builder.embeddings()
    for layer in range(LAYERS):
        hidden = builder.layer(layer, hidden, last=layer == LAYERS - 1)
    # The export's IR version, not the onnx package's newest: an older onnxruntime loads it.
    return builder.model(folded.ir_version)


def _initializers(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in graph.initializer}


def _projections(
    graph: onnx.GraphProto, weights: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Each projection's weight matrix, by its bias's name less ``.bias``."""
    adds: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        if node.op_type == "Add":
            for name in node.input:
                adds.setdefault(name, []).append(node)
    found: dict[str, np.ndarray] = {}
    for node in graph.node:
        if node.op_type != "MatMul" or node.input[1] not in weights:
            continue
        for add in adds.get(node.output[0], []):
            for name in add.input:
                if name.endswith(".bias") and name in weights:
                    found[name.removesuffix(".bias")] = weights[node.input[1]]
    return found


class _Builder:
    """The nodes and initializers of the fused graph, named as they are added."""

    def __init__(self, weights: Mapping[str, np.ndarray], projections: Mapping[str, np.ndarray]):
        self._weights, self._projections = weights, projections
        self._nodes: list[onnx.NodeProto] = []
        self._initializers: list[onnx.TensorProto] = []

    def _weight(self, name: str) -> np.ndarray:
        try:
            return self._weights[_PREFIX + name]
        except KeyError:
            raise FusionError(f"no weight {name!r}") from None

    def _projection(self, name: str) -> np.ndarray:
        try:
            return self._projections[_PREFIX + name]
        except KeyError:
            raise FusionError(f"no projection {name!r}") from None

    def _constant(self, name: str, value: np.ndarray) -> str:
        array = np.ascontiguousarray(value, dtype=np.float32)
        self._initializers.append(numpy_helper.from_array(array, name))
        return name

    def _node(self, op: str, inputs: list[str], output: str, **attributes: Any) -> str:
        domain = "" if op in {"Add", "Cast", "LayerNormalization", "MatMul"} else _MS
        self._nodes.append(helper.make_node(op, inputs, [output], domain=domain, **attributes))
        return output

    def embeddings(self) -> str:
        """Word, position and segment embeddings summed and normalised; the mask's index."""
        ids, segments, mask = (
            self._node("Cast", [name], f"{name}_int32", to=TensorProto.INT32)
            for name in ("input_ids", "token_type_ids", "attention_mask")
        )
        names = ("word_embeddings", "position_embeddings", "token_type_embeddings")
        tables = [self._constant(n, self._weight(f"embeddings.{n}.weight")) for n in names]
        gamma = self._constant("embeddings_gamma", self._weight("embeddings.LayerNorm.weight"))
        beta = self._constant("embeddings_beta", self._weight("embeddings.LayerNorm.bias"))
        inputs = [ids, segments, *tables, gamma, beta, mask]
        self._nodes.append(
            helper.make_node(
                "EmbedLayerNormalization",
                inputs,
                ["embedded", "mask_index"],
                domain=_MS,
                epsilon=EPSILON,
            )
        )
        return "embedded"

    def layer(self, index: int, hidden: str, *, last: bool) -> str:
        """One encoder layer over ``hidden``: attention, then the feed-forward block."""
        at = f"encoder.layer.{index}."
        parts = ("query", "key", "value")
        qkv = np.concatenate([self._projection(f"{at}attention.self.{p}") for p in parts], axis=1)
        qkv_bias = np.concatenate([self._weight(f"{at}attention.self.{p}.bias") for p in parts])
        attention = self._node(
            "Attention",
            [
                hidden,
                self._constant(f"l{index}_qkv", qkv),
                self._constant(f"l{index}_qkv_bias", qkv_bias),
                "mask_index",
            ],
            f"l{index}_attention",
            num_heads=HEADS,
        )
        attended = self._dense(f"{at}attention.output", attention, f"l{index}_attended")
        normed = self._residual(f"{at}attention.output", attended, hidden, f"l{index}_normed")
        expand = self._constant(f"l{index}_inner", self._projection(f"{at}intermediate.dense"))
        inner = self._node("MatMul", [normed, expand], f"l{index}_inner_out")
        bias = self._constant(f"l{index}_inner_bias", self._weight(f"{at}intermediate.dense.bias"))
        gelu = self._node("BiasGelu", [inner, bias], f"l{index}_gelu")
        out = self._dense(f"{at}output", gelu, f"l{index}_out")
        named = "last_hidden_state" if last else f"l{index}"
        return self._residual(f"{at}output", out, normed, named)

    def _dense(self, at: str, x: str, output: str) -> str:
        """``x`` times ``at``'s dense weight and plus its bias."""
        weight = self._constant(f"{output}_weight", self._projection(f"{at}.dense"))
        product = self._node("MatMul", [x, weight], f"{output}_product")
        bias = self._constant(f"{output}_bias", self._weight(f"{at}.dense.bias"))
        return self._node("Add", [product, bias], output)

    def _residual(self, at: str, x: str, skip: str, output: str) -> str:
        """``LayerNorm(x + skip)`` with ``at``'s layer norm. Not ``SkipLayerNormalization``:
        its CPU kernel is four times slower than the add and the plain layer norm."""
        summed = self._node("Add", [x, skip], f"{output}_summed")
        gamma = self._constant(f"{output}_gamma", self._weight(f"{at}.LayerNorm.weight"))
        beta = self._constant(f"{output}_beta", self._weight(f"{at}.LayerNorm.bias"))
        return self._node(
            "LayerNormalization", [summed, gamma, beta], output, axis=-1, epsilon=EPSILON
        )

    def model(self, ir_version: int) -> onnx.ModelProto:
        inputs = [
            helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
            for name in ("input_ids", "attention_mask", "token_type_ids")
        ]
        width = int(self._weight("embeddings.word_embeddings.weight").shape[1])
        output = helper.make_tensor_value_info(
            "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", width]
        )
        graph = helper.make_graph(self._nodes, "minilm_fused", inputs, [output], self._initializers)
        opsets = [helper.make_opsetid("", 17), helper.make_opsetid(_MS, 1)]
        return helper.make_model(graph, opset_imports=opsets, ir_version=ir_version)


__all__ = ["FusionError", "rebuilt"]
