"""ONNX model builders for the end-to-end tests, written with onnx.helper and numpy.

Everything is generated (fixed seeds, random weights): no model file is shipped or
downloaded. Opset 17 is the default everywhere and every builder takes an ``opset``.

* :func:`graph_model` / :func:`node_model`: small graphs, one op or a few.
* :func:`minilm_encoder`: a BERT/MiniLM-class text encoder (embeddings, attention with a
  mask, Erf-GELU FFN, LayerNormalization, pooler).
* :func:`resnet_cnn`: a ResNet-style CNN (Conv + BatchNormalization + Relu blocks with
  residual Add, MaxPool, GlobalAveragePool, Flatten, Gemm).
* :func:`string_cast_model`: a graph with nodes no MLX EP can take (string tensors).
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEFAULT_OPSET = 17


# ---------------------------------------------------------------------------
# generic graph construction


def tensor_type(array: np.ndarray) -> int:
    """ONNX element type of a numpy array."""
    return helper.np_dtype_to_tensor_dtype(np.asarray(array).dtype)


def _input_info(name: str, array: np.ndarray, symbolic: bool) -> onnx.ValueInfoProto:
    array = np.asarray(array)
    if symbolic:
        shape = [f"{name}_d{i}" for i in range(array.ndim)]
    else:
        shape = list(array.shape)
    return helper.make_tensor_value_info(name, tensor_type(array), shape)


def graph_model(
    nodes: Sequence[onnx.NodeProto],
    feeds: Mapping[str, np.ndarray],
    outputs: Sequence[str],
    *,
    consts: Mapping[str, np.ndarray] | None = None,
    opset: int = DEFAULT_OPSET,
    extra_opsets: Mapping[str, int] | None = None,
    symbolic: bool | Iterable[str] = False,
    name: str = "ortmlx_test",
) -> onnx.ModelProto:
    """A model from nodes. ``feeds`` are example values of the graph inputs (their dtype and
    shape declare the inputs), ``consts`` become initializers, ``outputs`` name the graph
    outputs (their element types come from ONNX shape inference). ``symbolic`` declares every
    dimension of every input (True) or of the named inputs as a symbolic dimension, which
    keeps ORT from constant-folding shape computations."""
    if isinstance(symbolic, bool):
        symbolic_names = set(feeds) if symbolic else set()
    else:
        symbolic_names = set(symbolic)
    inputs = [_input_info(n, a, n in symbolic_names) for n, a in feeds.items()]
    initializers = [numpy_helper.from_array(np.asarray(a), n) for n, a in (consts or {}).items()]
    placeholder_outputs = [onnx.ValueInfoProto(name=o) for o in outputs]
    graph = helper.make_graph(list(nodes), name, inputs, placeholder_outputs, initializer=initializers)
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="ortmlx-tests")
    model.ir_version = max(helper.find_min_ir_version_for(opsets, ignore_unknown=True), 7)

    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    types = {vi.name: vi.type for vi in inferred.graph.output}
    for out in model.graph.output:
        inferred_type = types.get(out.name)
        if inferred_type is None or inferred_type.tensor_type.elem_type == 0:
            raise ValueError(f"shape inference gave no type for output {out.name!r}")
        out.type.CopyFrom(inferred_type)
    onnx.checker.check_model(model, full_check=True)
    return model


def node_model(
    op_type: str,
    feeds: Mapping[str, np.ndarray],
    *,
    consts: Mapping[str, np.ndarray] | None = None,
    node_inputs: Sequence[str] | None = None,
    attrs: Mapping[str, object] | None = None,
    n_outputs: int = 1,
    opset: int = DEFAULT_OPSET,
    symbolic: bool | Iterable[str] = False,
    domain: str = "",
) -> onnx.ModelProto:
    """A one-node model. The node's inputs are ``node_inputs`` (names of feeds or consts,
    ``""`` for an omitted optional input) or, by default, the feeds then the consts in order.
    Its outputs are the graph outputs ``Y`` (or ``Y0``, ``Y1``, ... for several)."""
    consts = dict(consts or {})
    if node_inputs is None:
        node_inputs = list(feeds) + list(consts)
    outputs = ["Y"] if n_outputs == 1 else [f"Y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, list(node_inputs), outputs, name=f"{op_type.lower()}_0", domain=domain, **(attrs or {}))
    extra = {domain: opset} if domain else None
    return graph_model([node], feeds, outputs, consts=consts, opset=opset, extra_opsets=extra, symbolic=symbolic)


def unsqueeze_node(data: str, axes: Sequence[int], output: str, opset: int, name: str, axes_name: str) -> tuple[onnx.NodeProto, dict]:
    """An Unsqueeze in the form of ``opset``: axes attribute (< 13) or axes input (>= 13).
    Returns the node and the initializers it needs."""
    if opset < 13:
        return helper.make_node("Unsqueeze", [data], [output], name=name, axes=list(axes)), {}
    return helper.make_node("Unsqueeze", [data, axes_name], [output], name=name), {axes_name: np.array(axes, np.int64)}


# ---------------------------------------------------------------------------
# MiniLM-class encoder


def minilm_encoder(
    layers: int = 6,
    hidden: int = 384,
    heads: int = 12,
    seq: int = 128,
    vocab: int = 1000,
    intermediate: int | None = None,
    batch: int = 1,
    max_positions: int = 512,
    mask_style: str = "mul",
    dynamic: bool = False,
    opset: int = DEFAULT_OPSET,
    seed: int = 0,
) -> onnx.ModelProto:
    """A BERT/MiniLM-style encoder with random weights.

    Inputs ``input_ids`` and ``attention_mask`` (int64, [batch, seq]); outputs
    ``last_hidden_state`` [batch, seq, hidden] and ``pooler_output`` [batch, hidden].

    * embeddings: word Gather + position Gather (positions sliced to the sequence length
      through Shape/Gather/Unsqueeze/Slice, as exporters write it) + token-type row,
      LayerNormalization;
    * attention mask: ``mask_style="mul"``: Unsqueeze, Cast, Sub(1, m), Mul(-10000);
      ``"where"``: Unsqueeze, Equal(m, 0), Where(eq, min, 0);
    * each layer: Q/K/V MatMul+Add, Reshape [0, 0, heads, head_dim], Transpose, MatMul,
      Div sqrt(head_dim), Add mask, Softmax, MatMul, Transpose, Reshape, output MatMul+Add,
      residual Add, LayerNormalization; FFN MatMul+Add, GELU as x*0.5*(1+Erf(x/sqrt2)),
      MatMul+Add, residual Add, LayerNormalization;
    * pooler: Gather token 0, Gemm, Tanh.

    ``dynamic`` declares batch and sequence as symbolic dimensions.
    """
    if opset < 17:
        raise ValueError("the encoder uses LayerNormalization, which needs opset >= 17")
    if hidden % heads:
        raise ValueError("hidden must be a multiple of heads")
    if mask_style not in ("mul", "where"):
        raise ValueError("mask_style is 'mul' or 'where'")
    if seq > max_positions:
        raise ValueError("seq must not exceed max_positions")
    intermediate = intermediate or 4 * hidden
    head_dim = hidden // heads
    rng = np.random.default_rng(seed)
    consts: dict[str, np.ndarray] = {}
    nodes: list[onnx.NodeProto] = []

    def const(name: str, value) -> str:
        consts[name] = np.asarray(value)
        return name

    def weight(name: str, shape, std: float) -> str:
        return const(name, (rng.standard_normal(shape) * std).astype(np.float32))

    def node(op: str, inputs: Sequence[str], output: str, **attrs) -> str:
        nodes.append(helper.make_node(op, list(inputs), [output], name=output, **attrs))
        return output

    def linear(x: str, prefix: str, fan_in: int, fan_out: int) -> str:
        w = weight(f"{prefix}.weight", (fan_in, fan_out), 1.0 / math.sqrt(fan_in))
        b = weight(f"{prefix}.bias", (fan_out,), 0.1)
        return node("Add", [node("MatMul", [x, w], f"{prefix}/MatMul"), b], f"{prefix}/Add")

    def layer_norm(x: str, prefix: str) -> str:
        gamma = const(f"{prefix}.weight", (1.0 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))
        beta = weight(f"{prefix}.bias", (hidden,), 0.1)
        return node("LayerNormalization", [x, gamma, beta], f"{prefix}/LayerNorm", axis=-1, epsilon=1e-12)

    # embeddings
    word = node("Gather", [weight("embeddings.word", (vocab, hidden), 1.0), "input_ids"], "embeddings/word/Gather", axis=0)
    shape = node("Shape", ["input_ids"], "embeddings/Shape")
    seq_len = node("Gather", [shape, const("embeddings.seq_axis", np.array(1, np.int64))], "embeddings/seq_len", axis=0)
    unsq, unsq_consts = unsqueeze_node(seq_len, [0], "embeddings/seq_len_1d", opset, "embeddings/seq_len_1d", "embeddings.axes0")
    nodes.append(unsq)
    consts.update(unsq_consts)
    position_ids = node(
        "Slice",
        [
            const("embeddings.position_ids", np.arange(max_positions, dtype=np.int64)[None, :]),
            const("embeddings.slice_start", np.array([0], np.int64)),
            "embeddings/seq_len_1d",
            const("embeddings.slice_axis", np.array([1], np.int64)),
        ],
        "embeddings/position_ids",
    )
    pos = node("Gather", [weight("embeddings.position", (max_positions, hidden), 1.0), position_ids], "embeddings/position/Gather", axis=0)
    x = node("Add", [word, pos], "embeddings/Add")
    x = node("Add", [x, weight("embeddings.token_type", (hidden,), 1.0)], "embeddings/Add_1")
    x = layer_norm(x, "embeddings.LayerNorm")

    # attention mask -> additive [batch, 1, 1, seq]
    unsq, unsq_consts = unsqueeze_node("attention_mask", [1, 2], "mask/Unsqueeze", opset, "mask/Unsqueeze", "mask.axes")
    nodes.append(unsq)
    consts.update(unsq_consts)
    if mask_style == "mul":
        m = node("Cast", ["mask/Unsqueeze"], "mask/Cast", to=TensorProto.FLOAT)
        m = node("Sub", [const("mask.one", np.array(1.0, np.float32)), m], "mask/Sub")
        mask = node("Mul", [m, const("mask.neg", np.array(-10000.0, np.float32))], "mask/Mul")
    else:
        eq = node("Equal", ["mask/Unsqueeze", const("mask.zero", np.array(0, np.int64))], "mask/Equal")
        mask = node(
            "Where",
            [eq, const("mask.min", np.array(np.finfo(np.float32).min, np.float32)), const("mask.pass", np.array(0.0, np.float32))],
            "mask/Where",
        )

    heads_shape = const("attention.heads_shape", np.array([0, 0, heads, head_dim], np.int64))
    merge_shape = const("attention.merge_shape", np.array([0, 0, hidden], np.int64))
    scale = const("attention.scale", np.array(math.sqrt(head_dim), np.float32))
    sqrt2 = const("gelu.sqrt2", np.array(math.sqrt(2.0), np.float32))
    one = const("gelu.one", np.array(1.0, np.float32))
    half = const("gelu.half", np.array(0.5, np.float32))

    for i in range(layers):
        p = f"layer.{i}"
        q = node("Reshape", [linear(x, f"{p}.attention.query", hidden, hidden), heads_shape], f"{p}.attention.query/Reshape")
        k = node("Reshape", [linear(x, f"{p}.attention.key", hidden, hidden), heads_shape], f"{p}.attention.key/Reshape")
        v = node("Reshape", [linear(x, f"{p}.attention.value", hidden, hidden), heads_shape], f"{p}.attention.value/Reshape")
        q = node("Transpose", [q], f"{p}.attention.query/Transpose", perm=[0, 2, 1, 3])
        k = node("Transpose", [k], f"{p}.attention.key/Transpose", perm=[0, 2, 3, 1])
        v = node("Transpose", [v], f"{p}.attention.value/Transpose", perm=[0, 2, 1, 3])
        scores = node("MatMul", [q, k], f"{p}.attention/MatMul_qk")
        scores = node("Div", [scores, scale], f"{p}.attention/Div")
        scores = node("Add", [scores, mask], f"{p}.attention/Add_mask")
        probs = node("Softmax", [scores], f"{p}.attention/Softmax", axis=-1)
        ctx = node("MatMul", [probs, v], f"{p}.attention/MatMul_v")
        ctx = node("Transpose", [ctx], f"{p}.attention/Transpose", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, merge_shape], f"{p}.attention/Reshape")
        attn = linear(ctx, f"{p}.attention.output", hidden, hidden)
        x = layer_norm(node("Add", [attn, x], f"{p}.attention/Add_residual"), f"{p}.attention.LayerNorm")

        h = linear(x, f"{p}.intermediate", hidden, intermediate)
        g = node("Div", [h, sqrt2], f"{p}.gelu/Div")
        g = node("Erf", [g], f"{p}.gelu/Erf")
        g = node("Add", [g, one], f"{p}.gelu/Add")
        g = node("Mul", [h, g], f"{p}.gelu/Mul")
        g = node("Mul", [g, half], f"{p}.gelu/Mul_1")
        out = linear(g, f"{p}.output", intermediate, hidden)
        x = layer_norm(node("Add", [out, x], f"{p}.output/Add_residual"), f"{p}.output.LayerNorm")

    # the last LayerNormalization writes the graph output directly
    nodes[-1].output[0] = "last_hidden_state"
    x = "last_hidden_state"
    first = node("Gather", [x, const("pooler.index", np.array(0, np.int64))], "pooler/Gather", axis=1)
    pooled = node(
        "Gemm",
        [first, weight("pooler.weight", (hidden, hidden), 1.0 / math.sqrt(hidden)), weight("pooler.bias", (hidden,), 0.1)],
        "pooler/Gemm",
        transB=1,
    )
    nodes.append(helper.make_node("Tanh", [pooled], ["pooler_output"], name="pooler/Tanh"))

    example = encoder_inputs(batch=batch, seq=seq, vocab=vocab, seed=seed)
    return graph_model(
        nodes,
        example,
        ["last_hidden_state", "pooler_output"],
        consts=consts,
        opset=opset,
        symbolic=dynamic,
        name="minilm_encoder",
    )


def encoder_inputs(batch: int = 1, seq: int = 128, vocab: int = 1000, seed: int = 0, padded: int | None = None) -> dict[str, np.ndarray]:
    """Inputs for :func:`minilm_encoder`: random token ids and a mask whose last ``padded``
    positions (default: a quarter of the sequence, in every row but the first) are padding."""
    rng = np.random.default_rng(seed + 1)
    ids = rng.integers(0, vocab, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), np.int64)
    pad = seq // 4 if padded is None else padded
    if pad:
        mask[1:, seq - pad :] = 0
        if batch == 1:
            mask[0, seq - pad // 2 :] = 0
    return {"input_ids": ids, "attention_mask": mask}


# ---------------------------------------------------------------------------
# ResNet-style CNN


def resnet_cnn(
    batch: int = 1,
    image: int = 64,
    widths: Sequence[int] = (16, 32, 64),
    blocks: int = 2,
    classes: int = 10,
    opset: int = DEFAULT_OPSET,
    seed: int = 0,
) -> onnx.ModelProto:
    """A ResNet-style image classifier with random weights: input ``input`` [batch, 3, image,
    image], output ``logits`` [batch, classes].

    Stem Conv 7x7/2 + BatchNormalization + Relu + MaxPool 3x3/2; then per width a stage of
    ``blocks`` basic blocks (Conv 3x3 + BN + Relu + Conv 3x3 + BN, residual Add, Relu; the
    first block of each later stage strides by 2 with a Conv 1x1 + BN shortcut); then
    GlobalAveragePool, Flatten, Gemm."""
    rng = np.random.default_rng(seed)
    consts: dict[str, np.ndarray] = {}
    nodes: list[onnx.NodeProto] = []

    def node(op: str, inputs: Sequence[str], output: str, **attrs) -> str:
        nodes.append(helper.make_node(op, list(inputs), [output], name=output, **attrs))
        return output

    def conv_bn(x: str, prefix: str, cin: int, cout: int, k: int, stride: int) -> str:
        w = f"{prefix}.conv.weight"
        consts[w] = (rng.standard_normal((cout, cin, k, k)) * math.sqrt(2.0 / (cin * k * k))).astype(np.float32)
        y = node("Conv", [x, w], f"{prefix}/Conv", kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
        names = [f"{prefix}.bn.{n}" for n in ("scale", "bias", "mean", "var")]
        consts[names[0]] = (1.0 + 0.1 * rng.standard_normal(cout)).astype(np.float32)
        consts[names[1]] = (0.1 * rng.standard_normal(cout)).astype(np.float32)
        consts[names[2]] = (0.1 * rng.standard_normal(cout)).astype(np.float32)
        consts[names[3]] = rng.uniform(0.5, 1.5, cout).astype(np.float32)
        return node("BatchNormalization", [y, *names], f"{prefix}/BatchNormalization", epsilon=1e-5)

    x = node("Relu", [conv_bn("input", "stem", 3, widths[0], 7, 2)], "stem/Relu")
    x = node("MaxPool", [x], "stem/MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = widths[0]
    for s, width in enumerate(widths):
        for b in range(blocks):
            p = f"stage{s}.block{b}"
            stride = 2 if (s > 0 and b == 0) else 1
            y = node("Relu", [conv_bn(x, f"{p}.conv1", cin, width, 3, stride)], f"{p}/Relu")
            y = conv_bn(y, f"{p}.conv2", width, width, 3, 1)
            shortcut = x if (stride == 1 and cin == width) else conv_bn(x, f"{p}.downsample", cin, width, 1, stride)
            x = node("Relu", [node("Add", [y, shortcut], f"{p}/Add")], f"{p}/Relu_out")
            cin = width
    x = node("GlobalAveragePool", [x], "head/GlobalAveragePool")
    x = node("Flatten", [x], "head/Flatten", axis=1)
    consts["fc.weight"] = (rng.standard_normal((classes, cin)) / math.sqrt(cin)).astype(np.float32)
    consts["fc.bias"] = (0.1 * rng.standard_normal(classes)).astype(np.float32)
    nodes.append(helper.make_node("Gemm", [x, "fc.weight", "fc.bias"], ["logits"], name="head/Gemm", transB=1))

    example = {"input": cnn_input(batch=batch, image=image, seed=seed)}
    return graph_model(nodes, example, ["logits"], consts=consts, opset=opset, name="resnet_cnn")


def cnn_input(batch: int = 1, image: int = 64, seed: int = 0) -> np.ndarray:
    """An input image batch for :func:`resnet_cnn`."""
    return np.random.default_rng(seed + 1).standard_normal((batch, 3, image, image)).astype(np.float32)


# ---------------------------------------------------------------------------
# a graph part of which no MLX EP can run


def string_cast_model(opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """``Y = Cast<float>(Cast<string>(X * 2)) + 1``. MLX has no string type, so the two Cast
    nodes must stay on ORT's CPU EP while Mul and Add can run on MLX."""
    x = np.zeros((2, 3), np.float32)
    nodes = [
        helper.make_node("Mul", ["X", "two"], ["doubled"], name="mul_0"),
        helper.make_node("Cast", ["doubled"], ["text"], name="cast_to_string", to=TensorProto.STRING),
        helper.make_node("Cast", ["text"], ["parsed"], name="cast_from_string", to=TensorProto.FLOAT),
        helper.make_node("Add", ["parsed", "one"], ["Y"], name="add_0"),
    ]
    consts = {"two": np.array(2.0, np.float32), "one": np.array(1.0, np.float32)}
    return graph_model(nodes, {"X": x}, ["Y"], consts=consts, opset=opset, name="string_cast")
