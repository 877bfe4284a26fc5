"""ORT's com.microsoft transformer ops (and ORT's SimplifiedLayerNormalization) on the MLX EP
against ORT's CPU EP: tiny graphs built with onnx.helper, the same feeds on both EPs,
outputs compared (float32 within rtol = atol = 1e-4 unless a case says otherwise), and the
op's node asserted to have run on MLX.

ONNX's own checker and shape inference do not know the com.microsoft schemas, so the models
here declare every graph output's type themselves (ORT infers the rest when it loads them).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import (
    assert_all_on_mlx,
    assert_on_mlx,
    assert_outputs_match,
    exact_reference,
    make_session,
    run,
)
from llm import pack_bits

MS = "com.microsoft"
F32 = TensorProto.FLOAT

#: ORT's own version: some contrib semantics changed after 1.23 (the tests follow 1.31).
ORT_VERSION = tuple(int(p) for p in ort.__version__.split(".")[:2])


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def randn(*shape, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return np.asarray(rng(seed).standard_normal(shape) * scale, dtype=np.float32)


def ms_model(
    nodes: Sequence[onnx.NodeProto],
    feeds: Mapping[str, np.ndarray],
    outputs: Sequence[str | tuple[str, int]],
    *,
    consts: Mapping[str, np.ndarray] | None = None,
    symbolic: Mapping[str, Sequence[str | int]] | None = None,
    opset: int = 21,
) -> onnx.ModelProto:
    """A model of com.microsoft nodes. ``feeds`` declare the inputs (dtype and shape, or the
    dims given in ``symbolic``); ``outputs`` are names (float32) or (name, elem_type)."""
    symbolic = symbolic or {}
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(symbolic.get(n, a.shape)))
        for n, a in feeds.items()
    ]
    outs = []
    for o in outputs:
        name, elem = (o, F32) if isinstance(o, str) else o
        outs.append(helper.make_tensor_value_info(name, elem, None))
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (consts or {}).items()]
    graph = helper.make_graph(list(nodes), "contrib", inputs, outs, initializer=inits)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)],
        producer_name="ortmlx-tests",
    )
    model.ir_version = 10
    return model


def compare(model, feeds, op_types, *, rtol=1e-4, atol=1e-4, all_on_mlx=True):
    """MLX EP vs CPU EP on ``feeds``; asserts placement. Returns MLX's outputs."""
    reference, reference_feeds = exact_reference(model, feeds)
    expected = run(make_session(reference, mlx=False), reference_feeds)
    session = make_session(model, mlx=True)
    actual = run(session, feeds)
    names = [o.name for o in session.get_outputs()]
    # Older ORTs leave some optional outputs unset (None), e.g. SkipLayerNormalization's
    # mean and inv_std_var on 1.23: there is nothing to compare those against.
    keep = [i for i, e in enumerate(expected) if e is not None]
    actual, expected, names = ([x[i] for i in keep] for x in (actual, expected, names))
    assert_outputs_match(actual, expected, rtol=rtol, atol=atol, names=names)
    assert_on_mlx(session, op_types)
    if all_on_mlx:
        assert_all_on_mlx(session)
    return actual


# ---------------------------------------------------------------------------
# normalisations


@pytest.mark.parametrize("outputs", [1, 2], ids=["y", "y+inv_std_var"])
@pytest.mark.parametrize("axis", [-1, 1])
def test_simplified_layer_norm(outputs, axis):
    x = randn(2, 3, 16)
    scale = randn(16, seed=1) if axis == -1 else randn(3, 16, seed=1)
    outs = ["y", "inv"][:outputs]
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], outs, epsilon=1e-5, axis=axis)
    model = ms_model([node], {"x": x}, outs, consts={"scale": scale})
    compare(model, {"x": x}, ["SimplifiedLayerNormalization"])


SKIP_CASES = [
    # (op, inputs, skip shape, outputs)
    ("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"], (2, 4, 32), 4),
    ("SkipLayerNormalization", ["x", "skip", "gamma"], (2, 4, 32), 1),
    ("SkipLayerNormalization", ["x", "skip", "gamma", "beta"], (4, 32), 1),
    ("SkipLayerNormalization", ["x", "skip", "gamma", "", "bias"], (1, 4, 32), 4),
    ("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma", "bias"], (2, 4, 32), 4),
    ("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], (2, 4, 32), 1),
    ("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], (2, 4, 32), 4),
]


@pytest.mark.parametrize("case", SKIP_CASES, ids=[f"{c[0]}-{len([i for i in c[1] if i])}in-{c[3]}out-{'x'.join(map(str, c[2]))}" for c in SKIP_CASES])
def test_skip_layer_norm(case):
    op, inputs, skip_shape, n_out = case
    x = randn(2, 4, 32)
    feeds = {"x": x, "skip": randn(*skip_shape, seed=1)}
    consts = {"gamma": randn(32, seed=2), "beta": randn(32, seed=3), "bias": randn(32, seed=4)}
    consts = {k: v for k, v in consts.items() if k in inputs}
    outs = ["y", "mean", "inv_std_var", "sum"][:n_out]
    node = helper.make_node(op, inputs, outs, domain=MS, epsilon=1e-5)
    model = ms_model([node], feeds, outs, consts=consts)
    compare(model, feeds, [op])


# ---------------------------------------------------------------------------
# Gelu family


@pytest.mark.parametrize(
    "op,extra",
    [("Gelu", None), ("FastGelu", None), ("FastGelu", "bias"), ("BiasGelu", "bias"), ("QuickGelu", None), ("QuickGelu", "alpha")],
)
def test_gelu_family(op, extra):
    x = randn(3, 5, 16, scale=2.0)
    inputs = ["x"]
    consts = {}
    attrs = {}
    if extra == "bias":
        inputs.append("b")
        consts["b"] = randn(16, seed=1)
    if extra == "alpha":
        attrs["alpha"] = 1.5
    node = helper.make_node(op, inputs, ["y"], domain=MS, **attrs)
    model = ms_model([node], {"x": x}, ["y"], consts=consts)
    compare(model, {"x": x}, [op])


# ---------------------------------------------------------------------------
# RotaryEmbedding


def cos_sin(max_len: int, half: int, seed: int = 5):
    theta = rng(seed).uniform(0, 3, (max_len, half)).astype(np.float32)
    return np.cos(theta), np.sin(theta)


ROTARY_CASES = [
    # (rank, interleaved, position form, rotary_embedding_dim)
    (3, 0, "offset", 0),
    (3, 1, "full", 0),
    (4, 0, "full", 0),
    (4, 1, "offset", 0),
    (3, 0, "full", 8),
    (4, 1, "full", 8),
]


@pytest.mark.parametrize("case", ROTARY_CASES, ids=[f"{r}d-inter{i}-{p}-rd{d}" for r, i, p, d in ROTARY_CASES])
def test_rotary_embedding(case):
    rank, interleaved, pos_form, rd = case
    b, s, h, d = 2, 5, 2, 16
    x = randn(b, s, h * d) if rank == 3 else randn(b, h, s, d)
    cos, sin = cos_sin(32, (rd or d) // 2)
    pos = np.array([3], np.int64) if pos_form == "offset" else rng(1).integers(0, 32, (b, s)).astype(np.int64)
    attrs = {"interleaved": interleaved}
    if rd:
        attrs.update(rotary_embedding_dim=rd, num_heads=h)
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS, **attrs)
    feeds = {"x": x, "pos": pos}
    model = ms_model([node], feeds, ["y"], consts={"cos": cos, "sin": sin})
    compare(model, feeds, ["RotaryEmbedding"])


# ---------------------------------------------------------------------------
# GroupQueryAttention

GQA_INPUTS = [
    "query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
    "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink",
]

# name: (batch, new tokens, past length (None: no past), total, seqlens_k, options)
GQA_CASES = {
    "prompt": (1, 5, None, 5, [4], {}),
    "prompt-batch2": (2, 5, None, 5, [4, 4], {}),
    "prompt-rotary": (1, 5, None, 5, [4], {"rotary": True}),
    "prompt-rotary-interleaved": (1, 5, None, 5, [4], {"rotary": True, "interleaved": 1}),
    "prompt-rotary-partial": (1, 5, None, 5, [4], {"rotary": True, "head": 32, "rd": 16}),
    "decode-growing-cache": (1, 1, 5, 6, [5], {"rotary": True}),
    "decode-growing-batch2": (2, 1, 5, 6, [5, 5], {"rotary": True}),
    "decode-growing-ragged": (2, 1, 5, 6, [3, 5], {"rotary": True}),
    "decode-buffer-cache": (1, 1, 16, 6, [5], {"rotary": True}),
    "decode-buffer-ragged": (2, 1, 16, 9, [5, 8], {"rotary": True}),
    "prompt-buffer-cache": (1, 5, 16, 5, [4], {"rotary": True}),
    "subsequent-prompt-growing": (1, 3, 5, 8, [7], {"rotary": True}),
    "subsequent-prompt-buffer": (1, 3, 16, 8, [7], {"rotary": True}),
    "local-window-prompt": (1, 7, None, 7, [6], {"local_window_size": 3}),
    "local-window-decode": (1, 1, 9, 10, [9], {"local_window_size": 3}),
    "softcap": (1, 5, None, 5, [4], {"softcap": 2.0}),
    "softcap-decode-window": (1, 1, 9, 10, [9], {"softcap": 1.5, "local_window_size": 4}),
    "scale": (1, 5, 3, 8, [7], {"scale": 0.3}),
    "packed-qkv": (1, 5, None, 5, [4], {"packed": True, "rotary": True}),
    "packed-qkv-decode": (2, 1, 5, 6, [5, 5], {"packed": True}),
    "smooth-softmax": (1, 5, None, 5, [4], {"smooth_softmax": 1}),
    "head-sink": (1, 5, 3, 8, [7], {"head_sink": True}),
    "attention-bias": (1, 5, 3, 8, [7], {"bias": (1, 4, 5, 8)}),
    "attention-bias-broadcast": (2, 1, 5, 6, [5, 5], {"bias": (2, 1, 1, 6)}),
    "attention-bias-buffer-cache": (1, 1, 16, 6, [5], {"bias": (1, 4, 1, 6)}),
    "softcap-bias": (1, 5, 3, 8, [7], {"softcap": 2.0, "bias": (1, 1, 5, 8)}),
    "position-ids": (1, 3, 5, 8, [7], {"rotary": True, "position_ids": [[10, 11, 12]]}),
    "position-ids-prompt": (2, 4, None, 4, [3, 3], {"rotary": True, "position_ids": [[3, 4, 5, 6], [0, 1, 2, 3]]}),
}


def gqa_case(batch, seq, past, total, seqlens, opts, *, seed=0, heads=4, kv_heads=2):
    head = opts.get("head", 16)
    r = rng(seed)
    f = lambda *s: r.standard_normal(s).astype(np.float32)  # noqa: E731
    feeds = {}
    q, k, v = f(batch, seq, heads * head), f(batch, seq, kv_heads * head), f(batch, seq, kv_heads * head)
    if opts.get("packed"):
        feeds["query"] = np.concatenate([q, k, v], -1)
    else:
        feeds.update(query=q, key=k, value=v)
    if past is not None:
        feeds["past_key"] = f(batch, kv_heads, past, head)
        feeds["past_value"] = f(batch, kv_heads, past, head)
    feeds["seqlens_k"] = np.array(seqlens, np.int32)
    feeds["total_sequence_length"] = np.array(total, np.int32)
    consts = {}
    attrs = {"num_heads": heads, "kv_num_heads": kv_heads}
    if opts.get("rotary"):
        cos, sin = cos_sin(64, opts.get("rd", head) // 2)
        consts.update(cos_cache=cos, sin_cache=sin)
        attrs.update(do_rotary=1, rotary_interleaved=opts.get("interleaved", 0))
    for a in ("scale", "softcap", "local_window_size", "smooth_softmax"):
        if a in opts:
            attrs[a] = opts[a]
    if "position_ids" in opts:
        feeds["position_ids"] = np.array(opts["position_ids"], np.int64)
    if "bias" in opts:
        feeds["attention_bias"] = f(*opts["bias"])
    if opts.get("head_sink"):
        consts["head_sink"] = f(heads)
    names = set(feeds) | set(consts)
    node_inputs = [n if n in names else "" for n in GQA_INPUTS]
    while node_inputs[-1] == "":
        node_inputs.pop()
    node = helper.make_node("GroupQueryAttention", node_inputs, ["out", "present_key", "present_value"], domain=MS, **attrs)
    model = ms_model([node], feeds, ["out", "present_key", "present_value"], consts=consts)
    return model, feeds


@pytest.mark.parametrize("name", list(GQA_CASES))
def test_group_query_attention(name):
    if "local_window_size" in GQA_CASES[name][5] and ORT_VERSION < (1, 31):
        pytest.skip("ORT 1.23's CPU EP lets a local window of w keys see w + 1; 1.31 (followed here) sees w")
    model, feeds = gqa_case(*GQA_CASES[name])
    compare(model, feeds, ["GroupQueryAttention"])


def test_group_query_attention_symbolic_dims():
    """Batch, lengths and cache length symbolic, as exporters write them."""
    model, feeds = gqa_case(2, 1, 5, 6, [5, 5], {"rotary": True})
    dims = {"query": ["b", "s", 64], "key": ["b", "s", 32], "value": ["b", "s", 32], "past_key": ["b", 2, "p", 16], "past_value": ["b", 2, "p", 16], "seqlens_k": ["b"]}
    for vi in model.graph.input:
        if vi.name in dims:
            vi.CopyFrom(helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, dims[vi.name]))
    compare(model, feeds, ["GroupQueryAttention"])


@pytest.mark.parametrize(
    "attr,value",
    [("qk_output", 1), ("sliding_window_cache", 1), ("causal", 0), ("k_quant_type", "PER_TENSOR")],
)
def test_group_query_attention_declines(attr, value):
    """Options the MLX EP does not reproduce stay on ORT's CPU EP (and still run there)."""
    model, feeds = gqa_case(1, 5, None, 5, [4], {"local_window_size": 4} if attr == "sliding_window_cache" else {})
    model.graph.node[0].attribute.append(helper.make_attribute(attr, value))
    try:
        session = make_session(model, mlx=True)
    except Exception as err:  # noqa: BLE001
        pytest.skip(f"this ORT rejects the model itself: {str(err)[:120]}")
    try:
        run(session, feeds)
    except Exception:  # noqa: BLE001 - ORT may reject the combination itself
        pass
    from conftest import placements, MLX_EP  # noqa: PLC0415

    assert not [p for p in placements(session) if p.op_type == "GroupQueryAttention" and p.ep == MLX_EP]


# ---------------------------------------------------------------------------
# MultiHeadAttention

MHA_INPUTS = ["query", "key", "value", "bias", "key_padding_mask", "attention_bias", "past_key", "past_value"]

# name: (batch, q len, kv len, past, options)
MHA_CASES = {
    "self": (2, 3, 3, 0, {}),
    "cross": (2, 3, 5, 0, {}),
    "bias": (2, 3, 3, 0, {"bias": True}),
    "scale": (2, 3, 3, 0, {"scale": 0.5}),
    "value-hidden": (2, 3, 3, 0, {"dv": 12}),
    "causal": (2, 4, 4, 0, {"unidirectional": 1}),
    "past": (2, 3, 3, 3, {}),
    "past-causal": (2, 3, 3, 3, {"unidirectional": 1}),
    "decode-causal": (2, 1, 1, 4, {"unidirectional": 1}),
    "key-padding-2d": (2, 3, 3, 0, {"kpm": [[1, 1, 0], [1, 0, 0]]}),
    "key-padding-lengths": (2, 3, 3, 0, {"kpm": [2, 1]}),
    "key-padding-filter-value": (2, 3, 3, 0, {"kpm": [[1, 1, 0], [1, 0, 0]], "mask_filter_value": -1e9}),
    "attention-bias": (2, 3, 3, 0, {"attention_bias": (1, 2, 3, 3)}),
    "attention-bias-causal-padding": (2, 4, 4, 0, {"attention_bias": (2, 1, 4, 4), "unidirectional": 1, "kpm": [[1, 1, 1, 0], [1, 1, 1, 1]]}),
}


@pytest.mark.parametrize("name", list(MHA_CASES))
def test_multi_head_attention(name):
    batch, s, l, past, opts = MHA_CASES[name]
    heads, d, dv = 2, 8, opts.get("dv", 8)
    r = rng(3)
    f = lambda *sh: r.standard_normal(sh).astype(np.float32)  # noqa: E731
    feeds = {"query": f(batch, s, d), "key": f(batch, l, d), "value": f(batch, l, dv)}
    consts = {}
    attrs = {"num_heads": heads}
    for a in ("scale", "unidirectional", "mask_filter_value"):
        if a in opts:
            attrs[a] = opts[a]
    if opts.get("bias"):
        consts["bias"] = f(2 * d + dv)
    if "kpm" in opts:
        feeds["key_padding_mask"] = np.array(opts["kpm"], np.int32)
    if "attention_bias" in opts:
        feeds["attention_bias"] = f(*opts["attention_bias"])
    outs = ["out"]
    if past:
        feeds["past_key"] = f(batch, heads, past, d // heads)
        feeds["past_value"] = f(batch, heads, past, dv // heads)
    if past or name in ("self", "bias", "causal"):
        outs += ["present_key", "present_value"]
    names = set(feeds) | set(consts)
    node_inputs = [n if n in names else "" for n in MHA_INPUTS]
    while node_inputs[-1] == "":
        node_inputs.pop()
    node = helper.make_node("MultiHeadAttention", node_inputs, outs, domain=MS, **attrs)
    model = ms_model([node], feeds, outs, consts=consts)
    compare(model, feeds, ["MultiHeadAttention"])


# ---------------------------------------------------------------------------
# MatMulNBits


def matmul_nbits_weights(k, n, block, bits, zp_mode, seed=0, dtype=np.float32):
    """(B, scales, zero_points or None) in MatMulNBits' layout, and the float weight [K, N]."""
    r = rng(seed)
    nb = (k + block - 1) // block
    q = r.integers(0, 2**bits, (n, nb * block))
    scales = r.uniform(0.01, 0.1, (n, nb)).astype(dtype)
    b = pack_bits(q, bits).reshape(n, nb, block * bits // 8)
    if zp_mode == "none":
        zp, zp_arr = np.full((n, nb), 2 ** (bits - 1)), None
    elif zp_mode == "uint8":
        zp = r.integers(0, 2**bits, (n, nb))
        per = 8 // bits
        padded = np.zeros((n, (nb + per - 1) // per * per), np.int64)
        padded[:, :nb] = zp
        zp_arr = pack_bits(padded, bits).reshape(-1)
    else:
        zp = r.uniform(0, 2**bits, (n, nb)).astype(dtype)
        zp_arr = zp.reshape(-1)
    w = (q[:, :k] - np.repeat(zp, block, axis=1)[:, :k]) * np.repeat(scales.astype(np.float32), block, axis=1)[:, :k]
    return b, scales.reshape(-1), zp_arr, w.T.astype(np.float32)


MNB_CASES = [
    # (K, N, block, bits, zero points)
    (256, 24, 32, 4, "none"),
    (256, 24, 32, 4, "uint8"),
    (256, 24, 32, 4, "float"),
    (256, 24, 64, 4, "uint8"),
    (256, 24, 128, 4, "none"),
    (512, 24, 256, 4, "uint8"),
    (256, 24, 16, 4, "uint8"),
    (96, 8, 32, 4, "uint8"),
    (100, 8, 32, 4, "uint8"),
    (256, 24, 32, 8, "none"),
    (256, 24, 64, 8, "uint8"),
    (256, 24, 16, 8, "uint8"),
    (512, 24, 256, 8, "uint8"),
]


@pytest.mark.parametrize("case", MNB_CASES, ids=[f"K{k}-N{n}-b{b}-{bits}bit-zp_{z}" for k, n, b, bits, z in MNB_CASES])
@pytest.mark.parametrize("with_bias", [False, True], ids=["", "bias"])
def test_matmul_nbits(case, with_bias):
    k, n, block, bits, zp_mode = case
    b, scales, zp, _ = matmul_nbits_weights(k, n, block, bits, zp_mode)
    a = randn(2, 3, k, seed=7)
    consts = {"B": b, "scales": scales}
    inputs = ["A", "B", "scales"]
    if zp is not None:
        consts["zp"] = zp
        inputs.append("zp")
    if with_bias:
        inputs += [""] * (5 - len(inputs)) + ["bias"]
        consts["bias"] = randn(n, seed=8)
    node = helper.make_node("MatMulNBits", inputs, ["Y"], domain=MS, K=k, N=n, bits=bits, block_size=block)
    model = ms_model([node], {"A": a}, ["Y"], consts=consts)
    # Outputs reach ~50 (4 bits) and ~700 (8 bits); MLX and ORT differ by ~1e-7 of that.
    compare(model, {"A": a}, ["MatMulNBits"], rtol=1e-5, atol=1e-4 if bits == 4 else 1e-3)


def test_matmul_nbits_accuracy_level_4_stays_on_cpu():
    b, scales, zp, _ = matmul_nbits_weights(64, 8, 32, 4, "uint8")
    node = helper.make_node("MatMulNBits", ["A", "B", "scales", "zp"], ["Y"], domain=MS, K=64, N=8, bits=4, block_size=32, accuracy_level=4)
    a = randn(2, 64)
    model = ms_model([node], {"A": a}, ["Y"], consts={"B": b, "scales": scales, "zp": zp})
    session = make_session(model, mlx=True)
    run(session, {"A": a})
    from conftest import assert_on_cpu  # noqa: PLC0415

    assert_on_cpu(session, ["MatMulNBits"])


# ---------------------------------------------------------------------------
# GatherBlockQuantized

GBQ_CASES = [
    # (bits, block, zero points, indices)
    (4, 32, True, [[0, 3], [5, -1]]),
    (4, 16, False, [2, 7, 0]),
    (8, 32, True, [[1], [4]]),
    (8, 64, False, [6, -8, 3]),
    (4, 32, True, [9, -9, 2]),  # out of range: zeros
]


@pytest.mark.parametrize("case", GBQ_CASES, ids=[f"{b}bit-block{k}-zp{z}-{i}" for b, k, z, i in GBQ_CASES])
def test_gather_block_quantized(case):
    bits, block, with_zp, indices = case
    out_of_range = any(i >= 8 or i < -8 for i in np.array(indices).ravel())
    if out_of_range and ORT_VERSION < (1, 31):
        pytest.skip("zeros for out-of-range indices is ORT >= 1.31 behaviour")
    rows, k = 8, 64
    r = rng(11)
    q = r.integers(0, 2**bits, (rows, k))
    nb = k // block
    consts = {"data": pack_bits(q, bits) if bits == 4 else q.astype(np.uint8), "scales": r.uniform(0.1, 1, (rows, nb)).astype(np.float32)}
    inputs = ["data", "idx", "scales"]
    if with_zp:
        zp = r.integers(0, 2**bits, (rows, nb))
        consts["zp"] = pack_bits(zp, bits) if bits == 4 else zp.astype(np.uint8)
        inputs.append("zp")
    idx = np.array(indices, np.int64)
    node = helper.make_node("GatherBlockQuantized", inputs, ["y"], domain=MS, bits=bits, block_size=block, gather_axis=0, quantize_axis=1)
    model = ms_model([node], {"idx": idx}, ["y"], consts=consts)
    compare(model, {"idx": idx}, ["GatherBlockQuantized"])


# ---------------------------------------------------------------------------
# float16 (ORT's CPU EP has float16 kernels of GroupQueryAttention and MatMulNBits)


def to_float16(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]):
    """The model with float32 inputs, outputs and initializers made float16."""
    for vi in list(model.graph.input) + list(model.graph.output):
        if vi.type.tensor_type.elem_type == F32:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT16
    for init in model.graph.initializer:
        a = numpy_helper.to_array(init)
        if a.dtype == np.float32:
            init.CopyFrom(numpy_helper.from_array(a.astype(np.float16), init.name))
    return model, {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds.items()}


@pytest.mark.parametrize("name", ["prompt-rotary", "decode-growing-ragged", "decode-buffer-ragged", "softcap", "head-sink", "attention-bias"])
def test_group_query_attention_float16(name):
    model, feeds = to_float16(*gqa_case(*GQA_CASES[name]))
    compare(model, feeds, ["GroupQueryAttention"], rtol=1e-2, atol=5e-3)


@pytest.mark.parametrize("block", [32, 16])
def test_matmul_nbits_float16(block):
    b, scales, zp, _ = matmul_nbits_weights(256, 24, block, 4, "uint8", dtype=np.float16)
    a = randn(2, 3, 256, seed=7).astype(np.float16)
    node = helper.make_node("MatMulNBits", ["A", "B", "scales", "zp"], ["Y"], domain=MS, K=256, N=24, bits=4, block_size=block)
    model = ms_model([node], {"A": a}, [("Y", TensorProto.FLOAT16)], consts={"B": b, "scales": scales, "zp": zp})
    # Outputs reach ~25: float16 steps there are 0.0156.
    compare(model, {"A": a}, ["MatMulNBits"], rtol=2e-3, atol=2e-2)


# ---------------------------------------------------------------------------
# FusedConv


FUSED_ACTIVATIONS = [
    (None, None),
    ("Relu", None),
    ("Tanh", None),
    ("Sigmoid", None),
    ("LeakyRelu", [0.15]),
    ("Clip", [-0.5, 0.7]),
    ("HardSigmoid", [0.3, 0.4]),
]


@pytest.mark.parametrize("activation,params", FUSED_ACTIVATIONS, ids=lambda v: str(v))
@pytest.mark.parametrize("form", ["plain", "bias", "bias+z", "z", "grouped_strided", "same_upper"])
def test_fused_conv(activation, params, form):
    if form == "bias+z" and ort.__version__ == "1.23.0":
        pytest.skip("ORT 1.23.0's CPU EP fails this reference run itself (NCHWc Conv with a sum input)")
    x = randn(2, 4, 7, 6, seed=1)
    groups = 2 if form == "grouped_strided" else 1
    w = randn(6, 4 // groups, 3, 3, seed=2, scale=0.3)
    attrs = {"pads": [1, 1, 1, 1]}
    if form == "grouped_strided":
        attrs = {"group": 2, "strides": [2, 1], "dilations": [1, 2], "pads": [0, 1, 2, 2]}
    elif form == "same_upper":
        attrs = {"strides": [2, 2], "auto_pad": "SAME_UPPER"}
    if activation is not None:
        attrs["activation"] = activation
    if params is not None:
        attrs["activation_params"] = params
    consts = {"w": w, "b": randn(6, seed=3)}
    ins = ["x", "w", "b" if "bias" in form else ""]
    feeds = {"x": x}
    if "z" in form:
        feeds["z"] = randn(2, 6, 7, 6, seed=4)
        ins.append("z")
    node = helper.make_node("FusedConv", ins, ["y"], domain=MS, **attrs)
    compare(ms_model([node], feeds, ["y"], consts=consts), feeds, ["FusedConv"])


def test_fused_conv_unknown_activation_stays_on_cpu():
    x = randn(1, 2, 5, 5)
    node = helper.make_node("FusedConv", ["x", "w"], ["y"], domain=MS, activation="LeakyRelu")  # no params: ORT fails it
    m = ms_model([node], {"x": x}, ["y"], consts={"w": randn(3, 2, 3, 3)})
    with pytest.raises(Exception):
        make_session(m, mlx=True)
