"""A small BERT written with onnx.helper in the shape PyTorch's exporter gives it, so that
ORT's transformer optimizer (``onnxruntime.transformers.optimizer``) fuses it into the
com.microsoft ops (EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu,
FastGelu ...), and :func:`optimized_bert` that runs that optimizer on it.

The optimizer's symbolic shape inference needs sympy, which the test environments don't
carry; it is switched off (the fusions used here don't need it).
"""

from __future__ import annotations

import math
import os
import tempfile
from typing import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def bert(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    vocab: int = 100,
    max_positions: int = 64,
    intermediate: int | None = None,
    seed: int = 0,
) -> onnx.ModelProto:
    """A BERT encoder with random weights. Inputs ``input_ids``, ``token_type_ids`` and
    ``attention_mask`` (int64, ``[batch, seq]``, both dims symbolic); output
    ``last_hidden_state`` ``[batch, seq, hidden]``."""
    intermediate = intermediate or 4 * hidden
    head = hidden // heads
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    counter = [0]

    def const(name: str, value) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(name: str, shape, std: float) -> str:
        return const(name, (rng.standard_normal(shape) * std).astype(np.float32))

    def node(op: str, inputs: Sequence[str], **attrs) -> str:
        counter[0] += 1
        out = f"/{op}_{counter[0]}_output_0"
        nodes.append(helper.make_node(op, list(inputs), [out], name=f"/{op}_{counter[0]}", **attrs))
        return out

    def linear(x: str, prefix: str, fan_in: int, fan_out: int) -> str:
        w = weight(f"{prefix}.weight", (fan_in, fan_out), 1.0 / math.sqrt(fan_in))
        b = weight(f"{prefix}.bias", (fan_out,), 0.1)
        return node("Add", [b, node("MatMul", [x, w])])

    def layer_norm(x: str, prefix: str) -> str:
        gamma = const(f"{prefix}.weight", (1.0 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))
        beta = weight(f"{prefix}.bias", (hidden,), 0.1)
        return node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-12)

    # embeddings: word + token type + position (positions sliced to the sequence length)
    word = node("Gather", [weight("embeddings.word_embeddings.weight", (vocab, hidden), 0.5), "input_ids"], axis=0)
    token = node("Gather", [weight("embeddings.token_type_embeddings.weight", (2, hidden), 0.5), "token_type_ids"], axis=0)
    x = node("Add", [word, token])
    shape = node("Shape", ["input_ids"])
    seq_len = node("Gather", [shape, const("one_index", np.array(1, np.int64))], axis=0)
    seq_1d = node("Unsqueeze", [seq_len, const("axes_0", np.array([0], np.int64))])
    pos_ids = node(
        "Slice",
        [const("embeddings.position_ids", np.arange(max_positions, dtype=np.int64)[None, :]), const("zero_1d", np.array([0], np.int64)), seq_1d, const("one_1d", np.array([1], np.int64))],
    )
    pos = node("Gather", [weight("embeddings.position_embeddings.weight", (max_positions, hidden), 0.5), pos_ids], axis=0)
    x = node("Add", [x, pos])
    x = layer_norm(x, "embeddings.LayerNorm")

    # extended attention mask: (1 - mask[:, None, None, :]) * -10000
    m = node("Unsqueeze", ["attention_mask", const("axes_1", np.array([1], np.int64))])
    m = node("Unsqueeze", [m, const("axes_2", np.array([2], np.int64))])
    m = node("Cast", [m], to=TensorProto.FLOAT)
    m = node("Sub", [const("one_f", np.array(1.0, np.float32)), m])
    mask = node("Mul", [m, const("neg_f", np.array(-10000.0, np.float32))])

    heads_shape = const("heads_shape", np.array([0, 0, heads, head], np.int64))
    merge_shape = const("merge_shape", np.array([0, 0, hidden], np.int64))
    scale = const("scale", np.array(math.sqrt(head), np.float32))
    for i in range(layers):
        p = f"encoder.layer.{i}"
        q = node("Transpose", [node("Reshape", [linear(x, f"{p}.attention.self.query", hidden, hidden), heads_shape])], perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(x, f"{p}.attention.self.key", hidden, hidden), heads_shape])], perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(x, f"{p}.attention.self.value", hidden, hidden), heads_shape])], perm=[0, 2, 1, 3])
        scores = node("Add", [node("Div", [node("MatMul", [q, k]), scale]), mask])
        probs = node("Softmax", [scores], axis=-1)
        ctx = node("Reshape", [node("Transpose", [node("MatMul", [probs, v])], perm=[0, 2, 1, 3]), merge_shape])
        attn = linear(ctx, f"{p}.attention.output.dense", hidden, hidden)
        x = layer_norm(node("Add", [attn, x]), f"{p}.attention.output.LayerNorm")
        h = linear(x, f"{p}.intermediate.dense", hidden, intermediate)
        g = node("Mul", [node("Mul", [h, node("Add", [node("Erf", [node("Div", [h, const(f"{p}.sqrt2", np.array(math.sqrt(2.0), np.float32))])]), const(f"{p}.one", np.array(1.0, np.float32))])]), const(f"{p}.half", np.array(0.5, np.float32))])
        out = linear(g, f"{p}.output.dense", intermediate, hidden)
        x = layer_norm(node("Add", [out, x]), f"{p}.output.LayerNorm")
    nodes[-1].output[0] = "last_hidden_state"

    ids = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"]) for n in ("input_ids", "token_type_ids", "attention_mask")]
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", hidden])
    graph = helper.make_graph(nodes, "bert", ids, [out], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="pytorch")
    model.ir_version = 8
    return model


def bert_inputs(batch: int = 2, seq: int = 16, vocab: int = 100, seed: int = 0) -> dict[str, np.ndarray]:
    """Random ids and token types; every row but the first ends in padding."""
    rng = np.random.default_rng(seed + 1)
    mask = np.ones((batch, seq), np.int64)
    for b in range(1, batch):
        mask[b, seq - (b * seq) // (2 * batch) - 1 :] = 0
    return {
        "input_ids": rng.integers(0, vocab, (batch, seq), dtype=np.int64),
        "token_type_ids": rng.integers(0, 2, (batch, seq), dtype=np.int64),
        "attention_mask": mask,
    }


def optimized_bert(model: onnx.ModelProto, heads: int, hidden: int, *, raw_mask: bool = False, **options) -> onnx.ModelProto:
    """``model`` through ORT's transformer optimizer (``model_type="bert"``, no ORT graph
    optimization); ``raw_mask`` keeps the 2-D attention mask (else Attention reads the
    mask_index of ends); ``options`` set :class:`FusionOptions` fields."""
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    opts = FusionOptions("bert")
    opts.enable_shape_inference = False
    opts.use_raw_attention_mask(raw_mask)
    for k, v in options.items():
        setattr(opts, k, v)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bert.onnx")
        onnx.save(model, path)
        opt = optimizer.optimize_model(path, model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0, optimization_options=opts)
        return opt.model
