"""The com.microsoft ops that ORT's transformer optimizer and quantizer write (Attention,
EmbedLayerNormalization, FusedMatMul, ...) on the MLX EP: against ORT's CPU EP where it
implements the op, against a numpy reference written from the op's spec where only ORT's GPU
EPs do; every case asserts that the op ran on MLX.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import HAS_ASSIGNMENT_INFO, assert_all_on_mlx, assert_on_cpu, assert_on_mlx, assert_outputs_match, make_session, run
from llm import pack_bits
from test_contrib import MS, ORT_VERSION, compare, cos_sin, ms_model, randn, rng

I32 = TensorProto.INT32

def assert_both_fail(model, feeds, op_type: str, match: str) -> None:
    """Bad input data: ORT's CPU EP fails, and the MLX EP claims ``op_type`` and fails with a
    message matching ``match``."""
    with pytest.raises(Exception):
        run(make_session(model, mlx=False), feeds)
    session = make_session(model, mlx=True)
    assert_on_mlx(session, [op_type])
    with pytest.raises(Exception, match=match):
        run(session, feeds)


#: Placement of a session whose run fails can only be read where ORT reports assignment.
needs_assignment_info = pytest.mark.skipif(not HAS_ASSIGNMENT_INFO, reason="placement of a failing run is unreadable before ORT 1.24")


# ---------------------------------------------------------------------------
# FusedMatMul

FUSED_CASES = [
    # (A shape, B shape, transA, transB, transBatchA, transBatchB, alpha)
    ((3, 4), (4, 5), 0, 0, 0, 0, 1.0),
    ((4, 3), (5, 4), 1, 1, 0, 0, 0.5),
    ((2, 3, 4), (2, 4, 5), 0, 0, 0, 0, 2.0),
    ((2, 4, 3), (4, 5), 1, 0, 0, 0, 1.0),
    ((3, 2, 4), (2, 4, 5), 0, 0, 1, 0, 1.0),
    ((4, 2, 3), (2, 5, 4), 1, 1, 1, 0, 0.25),
    ((3, 2, 4), (4, 2, 5), 0, 0, 1, 1, 1.0),
    ((2, 3, 4), (5, 2, 4), 0, 1, 0, 1, -1.5),
    ((3, 2, 2, 4), (2, 2, 4, 5), 0, 0, 1, 0, 1.0),
    ((4,), (4, 5), 1, 0, 0, 0, 1.0),
    ((3, 4), (4,), 0, 1, 0, 0, 3.0),
]


@pytest.mark.parametrize("case", FUSED_CASES, ids=[f"{'x'.join(map(str, c[0]))}@{'x'.join(map(str, c[1]))}-t{c[2]}{c[3]}-tb{c[4]}{c[5]}-a{c[6]}" for c in FUSED_CASES])
def test_fused_matmul(case):
    a_shape, b_shape, ta, tb, tba, tbb, alpha = case
    a, b = randn(*a_shape), randn(*b_shape, seed=1)
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transA=ta, transB=tb, transBatchA=tba, transBatchB=tbb, alpha=alpha)
    feeds = {"a": a, "b": b}
    compare(ms_model([node], feeds, ["y"]), feeds, ["FusedMatMul"])


@needs_assignment_info
def test_fused_matmul_trans_batch_needs_rank_3():
    feeds = {"a": randn(3, 4), "b": randn(4, 5, seed=1)}
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transBatchA=1)
    session = make_session(ms_model([node], feeds, ["y"]), mlx=True)
    assert_on_cpu(session, ["FusedMatMul"])  # ORT's CPU kernel refuses it at run time


# ---------------------------------------------------------------------------
# Attention


def attention_case(
    *,
    batch=2,
    seq=4,
    heads=2,
    head=8,
    v_head=None,
    mask=None,
    past=0,
    present=False,
    bias=True,
    attn_bias=False,
    symbolic=False,
    **attrs,
):
    """An Attention model and its feeds; ``mask`` is the mask_index array (or None)."""
    hidden = heads * head
    v_hidden = heads * (v_head or head)
    total = 2 * hidden + v_hidden
    r = rng(7)
    consts = {"w": np.asarray(r.standard_normal((hidden, total)) / np.sqrt(hidden), np.float32)}
    if bias:
        consts["b"] = randn(total, seed=8, scale=0.5)
    if v_head:
        attrs["qkv_hidden_sizes"] = [hidden, hidden, v_hidden]
    feeds = {"x": randn(batch, seq, hidden, seed=9)}
    inputs = ["x", "w", "b" if bias else ""]
    sym = {}
    if mask is not None:
        feeds["mask"] = np.asarray(mask, np.int32)
        inputs.append("mask")
    else:
        inputs.append("")
    if past:
        feeds["past"] = randn(2, batch, heads, past, head, seed=10)
        inputs.append("past")
    else:
        inputs.append("")
    if attn_bias:
        feeds["attn_bias"] = randn(1, heads, seq, past + seq, seed=11, scale=2.0)
        inputs.append("attn_bias")
    while inputs and not inputs[-1]:
        inputs.pop()
    if symbolic:
        sym["x"] = ["batch", "seq", hidden]
        if mask is not None and np.ndim(mask) == 1:
            sym["mask"] = ["batch" if symbolic != "other" else "mask_len"]
        elif mask is not None and np.ndim(mask) == 2:
            sym["mask"] = ["batch", "total"]
    outs = ["y", "present"] if present else ["y"]
    node = helper.make_node("Attention", inputs, outs, domain=MS, num_heads=heads, **attrs)
    return ms_model([node], feeds, outs, consts=consts, symbolic=sym), feeds


ATTENTION_CASES = {
    "no-mask": {},
    "mask-end": {"mask": [4, 2]},
    "mask-end-zero": {"mask": [0, 3]},
    "mask-end-start": {"mask": [4, 3, 1, 0]},
    "mask-2d": {"mask": [[1, 1, 0, 1], [0, 0, 0, 0]]},
    "mask-2d-values": {"mask": [[2, -1, 1, 0], [1, 1, 1, 5]]},
    "mask-3d": {"mask": rng(3).integers(0, 2, (2, 4, 4))},
    "causal": {"unidirectional": 1},
    "causal-mask-2d": {"unidirectional": 1, "mask": [[0, 1, 1, 1], [1, 1, 0, 1]]},
    "causal-mask-3d": {"unidirectional": 1, "mask": rng(4).integers(0, 2, (2, 4, 4))},
    "causal-mask-end": {"unidirectional": 1, "mask": [4, 0]},
    "filter-value": {"mask": [[1, 0, 1, 0], [0, 0, 0, 0]], "mask_filter_value": -5.0},
    "scale": {"scale": 0.05, "mask": [3, 4]},
    "v-hidden": {"v_head": 4, "mask": [3, 2]},
    "attention-bias": {"attn_bias": True, "mask": [2, 4]},
    "past": {"past": 3, "present": True},
    "past-causal-mask": {"past": 3, "present": True, "unidirectional": 1, "mask": [[1] * 7, [0, 1, 1, 1, 1, 1, 0]]},
    "past-causal-end": {"past": 2, "present": True, "unidirectional": 1, "mask": [6, 4]},
    "present-only": {"present": True, "unidirectional": 1},
    "symbolic-end": {"symbolic": True, "mask": [3, 4]},
    "symbolic-end-unknown": {"symbolic": "other", "mask": [3, 4]},
    "symbolic-end-start-unknown": {"symbolic": "other", "mask": [3, 4, 1, 0], "unidirectional": 1},
    "symbolic-2d": {"symbolic": True, "mask": [[1, 1, 1, 0], [1, 0, 1, 1]], "unidirectional": 1},
    "one-token": {"seq": 1, "past": 5, "present": True, "unidirectional": 1},
}


@pytest.mark.parametrize("name", list(ATTENTION_CASES))
def test_attention(name):
    model, feeds = attention_case(**ATTENTION_CASES[name])
    compare(model, feeds, ["Attention"])


@pytest.mark.parametrize("mask", [None, [3, 4]], ids=["no-mask", "mask"])
def test_attention_without_bias(mask):
    # ORT 1.31's CPU kernel crashes without a bias: compare with a zero bias there instead.
    model, feeds = attention_case(bias=False, mask=mask)
    reference, _ = attention_case(bias=True, mask=mask)
    b = next(i for i in reference.graph.initializer if i.name == "b")
    b.CopyFrom(numpy_helper.from_array(np.zeros(b.dims, np.float32), "b"))
    expected = run(make_session(reference, mlx=False), feeds)
    session = make_session(model, mlx=True)
    assert_outputs_match(run(session, feeds), expected)
    assert_on_mlx(session, ["Attention"])
    assert_all_on_mlx(session)


@needs_assignment_info
def test_attention_past_with_attention_bias_stays_on_cpu():
    model, _ = attention_case(past=2, present=True, attn_bias=True)
    assert_on_cpu(make_session(model, mlx=True), ["Attention"])  # ORT refuses the pair


@needs_assignment_info
def test_attention_bad_mask_length_fails():
    model, feeds = attention_case(symbolic="other", mask=[3, 4, 1])
    assert_both_fail(model, feeds, "Attention", "B or 2B")


@needs_assignment_info
def test_attention_declines_4d_mask():
    mask = np.ones((2, 1, 4, 4), np.int32)
    model, feeds = attention_case(mask=mask)
    session = make_session(model, mlx=True)
    assert_on_cpu(session, ["Attention"])
    with pytest.raises(Exception):
        run(session, feeds)  # ORT's CPU kernel has no 4-D mask either


# ---------------------------------------------------------------------------
# EmbedLayerNormalization


def embed_case(*, batch=2, seq=5, hidden=16, segment=True, mask=True, position_ids=None, outputs=2, ids=None, symbolic=False):
    r = rng(21)
    consts = {
        "word": randn(30, hidden, seed=22),
        "pos": randn(12, hidden, seed=23),
        "gamma": (1 + 0.1 * randn(hidden, seed=24)).astype(np.float32),
        "beta": randn(hidden, seed=25, scale=0.1),
    }
    feeds = {"ids": (r.integers(0, 30, (batch, seq)) if ids is None else np.asarray(ids)).astype(np.int32)}
    inputs = ["ids", "seg" if segment else "", "word", "pos", "segtab" if segment else "", "gamma", "beta"]
    if segment:
        consts["segtab"] = randn(2, hidden, seed=26)
        feeds["seg"] = r.integers(0, 2, (batch, seq)).astype(np.int32)
    if mask:
        m = np.ones((batch, seq), np.int32)
        m[1, 3:] = 0
        m[0, 1] = 2  # counted as a one by neither EP
        feeds["mask"] = m
    inputs.append("mask" if mask else "")
    if position_ids is not None:
        feeds["pos_ids"] = np.asarray(position_ids, np.int32)
        inputs.append("pos_ids")
    while not inputs[-1]:
        inputs.pop()
    outs = [("y", TensorProto.FLOAT), ("mask_index", I32), ("sum", TensorProto.FLOAT)][:outputs]
    names = [o[0] for o in outs]
    node = helper.make_node("EmbedLayerNormalization", inputs, names, domain=MS, epsilon=1e-5)
    sym = {k: ["batch", "seq"] for k in feeds} if symbolic else None
    if symbolic and position_ids is not None and np.shape(position_ids)[0] == 1:
        sym["pos_ids"] = [1, "seq"]
    return ms_model([node], feeds, outs, consts=consts, symbolic=sym), feeds


EMBED_CASES = {
    "full": {},
    "no-segment": {"segment": False},
    "no-mask-index": {"mask": False, "outputs": 2},
    "embedding-sum": {"outputs": 3},
    "position-ids": {"position_ids": np.array([[4, 3, 2, 1, 0], [0, 0, 11, 5, 6]])},
    "position-ids-row": {"position_ids": np.array([[1, 2, 3, 4, 5]]), "outputs": 3},
    "symbolic": {"symbolic": True, "outputs": 3},
}


@pytest.mark.parametrize("name", list(EMBED_CASES))
def test_embed_layer_norm(name):
    model, feeds = embed_case(**EMBED_CASES[name])
    compare(model, feeds, ["EmbedLayerNormalization"])


@needs_assignment_info
@pytest.mark.parametrize("bad", ["word", "segment", "position"])
def test_embed_layer_norm_out_of_range(bad):
    ids = None
    kwargs = {}
    if bad == "word":
        ids = [[1, 2, 30, 4, 5], [0, 0, 0, 0, 0]]
    elif bad == "position":
        kwargs["position_ids"] = np.array([[0, 1, 2, 3, 12]])
    model, feeds = embed_case(ids=ids, **kwargs)
    if bad == "segment":
        feeds["seg"][1, 2] = -1
    assert_both_fail(model, feeds, "EmbedLayerNormalization", "out of range")


# ---------------------------------------------------------------------------
# ops only ORT's GPU EPs implement: MLX against numpy references written from the specs

_erf = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def mlx_only(model, feeds, op_types, expected, *, rtol=1e-4, atol=1e-4):
    """Runs ``model`` on the MLX EP, asserts placement and compares with ``expected``."""
    session = make_session(model, mlx=True)
    actual = run(session, feeds)
    assert_outputs_match(actual, [np.asarray(e, a.dtype) for e, a in zip(expected, actual)], rtol=rtol, atol=atol)
    assert_on_mlx(session, op_types)
    assert_all_on_mlx(session)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_bias_add(dtype):
    feeds = {"x": randn(2, 6, 32).astype(dtype), "skip": randn(2, 6, 32, seed=1).astype(dtype)}
    bias = randn(32, seed=2).astype(dtype)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node("BiasAdd", ["x", "bias", "skip"], ["y"], domain=MS)
    model = ms_model([node], feeds, [("y", elem)], consts={"bias": bias})
    f = np.float32
    tol = 1e-4 if dtype == np.float32 else 2e-3
    mlx_only(model, feeds, ["BiasAdd"], [feeds["x"].astype(f) + bias.astype(f) + feeds["skip"].astype(f)], rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_bias_split_gelu(dtype):
    x = randn(2, 5, 24, scale=2.0).astype(dtype)
    bias = randn(24, seed=1).astype(dtype)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node("BiasSplitGelu", ["x", "bias"], ["y"], domain=MS)
    model = ms_model([node], {"x": x}, [("y", elem)], consts={"bias": bias})
    s = (x + bias).astype(np.float64)
    tol = 1e-4 if dtype == np.float32 else 5e-3
    mlx_only(model, {"x": x}, ["BiasSplitGelu"], [s[..., :12] * gelu(s[..., 12:])], rtol=tol, atol=tol)


def softmax(x, axes):
    z = x - x.max(axis=axes, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axes, keepdims=True)


BIAS_SOFTMAX_CASES = [
    # (input shape, bias shape, axis, is_inner_broadcast)
    ((2, 3, 4, 5), (2, 1, 4, 5), 2, 1),
    ((2, 3, 4, 5), (2, 1, 1, 5), 3, 1),
    ((2, 3, 4, 5), (1, 3, 4, 5), 2, 0),
    ((2, 3, 4, 5), (4, 5), 2, 0),
    ((2, 3, 4, 5), (3, 4, 5), 1, 0),
    ((2, 3, 6), (2, 3, 6), -1, 1),
]


@pytest.mark.parametrize("case", BIAS_SOFTMAX_CASES, ids=[f"{'x'.join(map(str, c[0]))}+{'x'.join(map(str, c[1]))}-axis{c[2]}-inner{c[3]}" for c in BIAS_SOFTMAX_CASES])
def test_bias_softmax(case):
    shape, bshape, axis, inner = case
    x = randn(*shape, scale=3.0)
    bias = randn(*bshape, seed=1, scale=3.0)
    node = helper.make_node("BiasSoftmax", ["x", "bias"], ["y"], domain=MS, axis=axis, is_inner_broadcast=inner)
    feeds = {"x": x, "bias": bias}
    a = axis % len(shape)
    expected = softmax((x + bias).astype(np.float64), tuple(range(a, len(shape))))
    mlx_only(ms_model([node], feeds, ["y"]), feeds, ["BiasSoftmax"], [expected])


def group_norm_ref(x, gamma, beta, groups, eps, silu, channels_last):
    x = x.astype(np.float64)
    if not channels_last:
        x = x.transpose(0, 2, 3, 1)
    n, h, w, c = x.shape
    g = x.reshape(n, h * w, groups, c // groups)
    mean = g.mean(axis=(1, 3), keepdims=True)
    var = ((g - mean) ** 2).mean(axis=(1, 3), keepdims=True)
    y = ((g - mean) / np.sqrt(var + eps)).reshape(n, h, w, c) * gamma.astype(np.float64) + beta.astype(np.float64)
    if silu:
        y = y / (1 + np.exp(-y))
    return y if channels_last else y.transpose(0, 3, 1, 2)


GROUP_NORM_CASES = [
    # (op, channels_last, activation, skip shape (SkipGroupNorm), bias, outputs, dtype)
    ("GroupNorm", 1, 0, None, False, 1, np.float32),
    ("GroupNorm", 1, 1, None, False, 1, np.float32),
    ("GroupNorm", 0, 1, None, False, 1, np.float32),
    ("GroupNorm", 1, 1, None, False, 1, np.float16),
    ("SkipGroupNorm", 1, 0, "full", True, 2, np.float32),
    ("SkipGroupNorm", 1, 1, "n11c", False, 2, np.float32),
    ("SkipGroupNorm", 1, 1, "nc", True, 1, np.float32),
    ("SkipGroupNorm", 0, 0, "nc", True, 2, np.float32),
    ("SkipGroupNorm", 1, 1, "full", True, 2, np.float16),
]


@pytest.mark.parametrize("case", GROUP_NORM_CASES, ids=[f"{c[0]}-cl{c[1]}-act{c[2]}-{c[3]}-bias{int(c[4])}-{c[5]}out-{np.dtype(c[6]).name}" for c in GROUP_NORM_CASES])
def test_group_norm(case):
    op, cl, act, skip, bias, n_out, dtype = case
    n, h, w, c, groups = 2, 3, 5, 12, 4
    shape = (n, h, w, c) if cl else (n, c, h, w)
    x = randn(*shape, scale=2.0).astype(dtype)
    consts = {"gamma": (1 + 0.2 * randn(c, seed=1)).astype(np.float32), "beta": randn(c, seed=2, scale=0.3)}
    feeds = {"x": x}
    inputs = ["x", "gamma", "beta"]
    s = x.astype(np.float64)
    if op == "SkipGroupNorm":
        sshape = {"full": shape, "n11c": (n, 1, 1, c), "nc": (n, c)}[skip]
        feeds["skip"] = randn(*sshape, seed=3).astype(dtype)
        inputs.append("skip")
        sk = feeds["skip"].astype(np.float64)
        if skip == "nc":
            sk = sk[:, None, None, :] if cl else sk[:, :, None, None]
        s = s + sk
        if bias:
            consts["bias"] = randn(c, seed=4).astype(dtype)
            inputs.append("bias")
            s = s + (consts["bias"].astype(np.float64) if cl else consts["bias"].astype(np.float64)[:, None, None])
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    outs = [("y", elem), ("s", elem)][:n_out]
    node = helper.make_node(op, inputs, [o[0] for o in outs], domain=MS, groups=groups, activation=act, epsilon=1e-5, channels_last=cl)
    model = ms_model([node], feeds, outs, consts=consts)
    expected = [group_norm_ref(s, consts["gamma"], consts["beta"], groups, 1e-5, act, cl), s][:n_out]
    tol = 1e-4 if dtype == np.float32 else 2e-2
    mlx_only(model, feeds, [op], expected, rtol=tol, atol=tol)


# ---------------------------------------------------------------------------
# the quantizer's integer matmuls with float results

INT_TO_FLOAT_CASES = [
    # (A dtype, B dtype, K, b per column, zero points, bias)
    (np.uint8, np.int8, 20, False, True, True),
    (np.uint8, np.uint8, 20, True, True, False),
    (np.uint8, np.int8, 300, True, True, True),
    (np.int8, np.int8, 40, False, False, True),
    (np.int8, np.int8, 270, True, True, False),
    (np.uint8, np.int8, 16, True, False, False),
]


def qrand(dtype, shape, seed):
    info = np.iinfo(dtype)
    return rng(seed).integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("case", INT_TO_FLOAT_CASES, ids=[f"{np.dtype(c[0]).name}x{np.dtype(c[1]).name}-k{c[2]}-col{int(c[3])}-zp{int(c[4])}-bias{int(c[5])}" for c in INT_TO_FLOAT_CASES])
def test_matmul_integer_to_float(case):
    adt, bdt, k, per_col, zps, bias = case
    n = 6
    feeds = {"a": qrand(adt, (2, 3, k), 1)}
    consts = {
        "b": qrand(bdt, (k, n), 2),
        "a_scale": np.array(0.02, np.float32),
        "b_scale": (rng(3).uniform(0.001, 0.01, n) if per_col else np.array(0.004)).astype(np.float32),
    }
    inputs = ["a", "b", "a_scale", "b_scale"]
    if zps:
        consts["a_zp"] = np.array(7 if adt == np.uint8 else -3, adt)
        consts["b_zp"] = (qrand(bdt, (n,), 4) if per_col else np.array(5, bdt)).astype(bdt)
        inputs += ["a_zp", "b_zp"]
    if bias:
        consts["bias"] = randn(n, seed=5)
        inputs += [""] * (6 - len(inputs)) + ["bias"]
    node = helper.make_node("MatMulIntegerToFloat", inputs, ["y"], domain=MS)
    compare(ms_model([node], feeds, ["y"], consts=consts), feeds, ["MatMulIntegerToFloat"], rtol=1e-5, atol=1e-5)


DQMM_CASES = [
    # (B dtype, K, b per column, zero point, bias, A rank)
    (np.int8, 24, False, False, True, 3),
    (np.int8, 300, True, False, True, 2),
    (np.uint8, 24, False, True, False, 3),
    (np.uint8, 64, True, True, True, 2),
]


@pytest.mark.parametrize("case", DQMM_CASES, ids=[f"{np.dtype(c[0]).name}-k{c[1]}-col{int(c[2])}-zp{int(c[3])}-bias{int(c[4])}-a{c[5]}d" for c in DQMM_CASES])
def test_dynamic_quantize_matmul(case):
    bdt, k, per_col, zp, bias, a_rank = case
    n = 5
    a = randn(*((2, 3, k) if a_rank == 3 else (4, k)), scale=2.0)
    consts = {"b": qrand(bdt, (k, n), 2), "b_scale": (rng(3).uniform(0.001, 0.01, n) if per_col else np.array(0.004)).astype(np.float32)}
    inputs = ["a", "b", "b_scale"]
    if zp:
        consts["b_zp"] = (qrand(bdt, (n,), 4) if per_col else np.array(9, bdt)).astype(bdt)
        inputs.append("b_zp")
    if bias:
        consts["bias"] = randn(n, seed=5)
        inputs += [""] * (4 - len(inputs)) + ["bias"]
    node = helper.make_node("DynamicQuantizeMatMul", inputs, ["y"], domain=MS)
    compare(ms_model([node], {"a": a}, ["y"], consts=consts), {"a": a}, ["DynamicQuantizeMatMul"], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# float16: ORT's CPU EP has no float16 kernels of these ops, so MLX's float16 run is compared
# with the CPU EP's float32 one


def as_float16(model, feeds):
    """``model`` with every float32 initializer, input and output made float16."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for i, t in enumerate(m.graph.initializer):
        if t.data_type == TensorProto.FLOAT:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for v in list(m.graph.input) + list(m.graph.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    return m, {k: (v.astype(np.float16) if v.dtype == np.float32 else v) for k, v in feeds.items()}


HALF_CASES = {
    "attention-mask-end": lambda: (attention_case(mask=[4, 2]), ["Attention"]),
    "attention-causal-2d": lambda: (attention_case(mask=[[0, 1, 1, 1], [1, 1, 0, 1]], unidirectional=1), ["Attention"]),
    "attention-past": lambda: (attention_case(past=3, present=True, unidirectional=1), ["Attention"]),
    "embed-layer-norm": lambda: (embed_case(outputs=3), ["EmbedLayerNormalization"]),
}


@pytest.mark.parametrize("name", list(HALF_CASES))
def test_float16_against_float32(name):
    (model, feeds), ops = HALF_CASES[name]()
    expected = run(make_session(model, mlx=False), feeds)
    half, hfeeds = as_float16(model, feeds)
    session = make_session(half, mlx=True)
    actual = run(session, hfeeds)
    assert_outputs_match([a.astype(np.float32) if a.dtype == np.float16 else a for a in actual], expected, rtol=2e-2, atol=2e-2)
    assert_on_mlx(session, ops)
    assert_all_on_mlx(session)


# ---------------------------------------------------------------------------
# MRotaryEmbedding (M-RoPE)

MROPE_CASES = [
    # (rank, interleaved, mrope_layout, mrope_section, rotary_embedding_dim)
    (3, 0, 0, [4, 2, 2], 0),
    (4, 0, 0, [2, 3, 3], 0),
    (3, 1, 0, [4, 2, 2], 0),
    (3, 0, 1, [2, 3, 3], 0),
    (4, 1, 1, [4, 2, 2], 0),
    (3, 0, 0, [2, 1, 1], 8),
    (4, 0, 1, [1, 2, 1], 8),
]


#: ORT registers MRotaryEmbedding's schema (and its CPU kernel) only in newer releases.
HAS_MROPE = any(s.name == "MRotaryEmbedding" and s.domain == MS for s in ort.capi._pybind_state.get_all_operator_schema())


@pytest.mark.skipif(not HAS_MROPE, reason="this ORT has no MRotaryEmbedding")
@pytest.mark.parametrize("case", MROPE_CASES, ids=[f"{r}d-inter{i}-layout{l}-{'.'.join(map(str, s))}-rd{d}" for r, i, l, s, d in MROPE_CASES])
def test_mrotary_embedding(case):
    rank, interleaved, layout, section, rd = case
    b, s, h, d = 2, 5, 2, 16
    x = randn(b, s, h * d) if rank == 3 else randn(b, h, s, d)
    cos, sin = cos_sin(32, (rd or d) // 2)
    pos = rng(1).integers(0, 32, (3, b, s)).astype(np.int64)
    attrs = {"interleaved": interleaved, "mrope_layout": layout, "mrope_section": section}
    if rd:
        attrs.update(rotary_embedding_dim=rd)
    if rd or rank == 3:
        attrs.update(num_heads=h)
    node = helper.make_node("MRotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS, **attrs)
    feeds = {"x": x, "pos": pos}
    compare(ms_model([node], feeds, ["y"], consts={"cos": cos, "sin": sin}), feeds, ["MRotaryEmbedding"])


# ---------------------------------------------------------------------------
# MoE

MOE_CASES = {
    "relu-top2": {"activation_type": "relu", "k": 2},
    "gelu-top1-norm": {"activation_type": "gelu", "k": 1, "normalize_routing_weights": 1},
    "silu-top3-norm": {"activation_type": "silu", "k": 3, "normalize_routing_weights": 1},
    "identity-no-bias": {"activation_type": "identity", "k": 2, "bias": False},
    "swiglu": {"activation_type": "swiglu", "swiglu_fusion": 1, "k": 2},
    "swiglu-attrs": {"activation_type": "swiglu", "swiglu_fusion": 1, "k": 2, "activation_alpha": 1.702, "activation_beta": 1.0, "swiglu_limit": 2.0, "normalize_routing_weights": 1},
    "packed-2d": {"activation_type": "relu", "k": 2, "packed": True},
}


def moe_case(*, bias=True, packed=False, experts=4, hidden=8, inter=16, dtype=np.float32, **attrs):
    r = rng(31)
    fusion = 2 if attrs.get("activation_type") == "swiglu" else 1
    x = randn(6, hidden, seed=32) if packed else randn(2, 3, hidden, seed=32)
    feeds = {"x": x.astype(dtype), "router": randn(6, experts, seed=33, scale=2.0).astype(dtype)}
    consts = {
        "w1": np.asarray(r.standard_normal((experts, fusion * inter, hidden)) / 3, dtype),
        "w2": np.asarray(r.standard_normal((experts, hidden, inter)) / 4, dtype),
    }
    if bias:
        consts["b1"] = randn(experts, fusion * inter, seed=34).astype(dtype)
        consts["b2"] = randn(experts, hidden, seed=35).astype(dtype)
    inputs = ["x", "router", "w1", "b1" if bias else "", "w2", "b2" if bias else ""]
    node = helper.make_node("MoE", inputs, ["y"], domain=MS, **attrs)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return ms_model([node], feeds, [("y", elem)], consts=consts), feeds


#: The MoE semantics tested here (softmax routing, interleaved SwiGLU with alpha/beta/limit)
#: are those of ORT 1.31's CPU kernel; 1.23's kernel differs.
needs_new_moe = pytest.mark.skipif(ORT_VERSION < (1, 31), reason="ORT's CPU MoE changed after 1.23")


@needs_new_moe
@pytest.mark.parametrize("name", list(MOE_CASES))
def test_moe(name):
    model, feeds = moe_case(**MOE_CASES[name])
    compare(model, feeds, ["MoE"], rtol=1e-4, atol=1e-4)


@needs_new_moe
@pytest.mark.parametrize("act", ["silu", "swiglu"])
def test_moe_float16(act):
    # ORT 1.31's float16 CPU MoE is off by whole units (measured: 2.05 from its own float32
    # run on the same values), so the reference is the CPU EP's float32 run on the float16
    # values.
    attrs = {"activation_type": act, "k": 2}
    if act == "swiglu":
        attrs["swiglu_fusion"] = 1
    half, feeds = moe_case(dtype=np.float16, **attrs)
    model, _ = moe_case(**attrs)
    for init in model.graph.initializer:
        h = next(t for t in half.graph.initializer if t.name == init.name)
        init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(h).astype(np.float32), init.name))
    expected = run(make_session(model, mlx=False), {k: v.astype(np.float32) for k, v in feeds.items()})
    session = make_session(half, mlx=True)
    actual = run(session, feeds)
    assert_outputs_match([actual[0].astype(np.float32)], expected, rtol=1e-2, atol=1e-2)
    assert_on_mlx(session, ["MoE"])
    assert_all_on_mlx(session)


# ---------------------------------------------------------------------------
# PackedMultiHeadAttention (ORT's GPU EPs only): numpy reference per sequence


def packing(lengths, seq):
    """token_offset ([B, S]) and cumulative_sequence_length ([B + 1]) of right-padded
    sequences of ``lengths``: real positions first, then the padding positions."""
    real = [b * seq + s for b, n in enumerate(lengths) for s in range(n)]
    pad = [b * seq + s for b, n in enumerate(lengths) for s in range(n, seq)]
    offset = np.array(real + pad, np.int32).reshape(len(lengths), seq)
    cum = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return offset, cum


def packed_mha_ref(q, k, v, lengths, heads, scale=None, attn_bias=None):
    out = np.zeros((q.shape[0], v.shape[1]), np.float64)
    hq, hv = q.shape[1] // heads, v.shape[1] // heads
    scale = scale or 1.0 / math.sqrt(hq)
    start = 0
    for b, n in enumerate(lengths):
        sl = slice(start, start + n)
        qs, ks, vs = (t[sl].astype(np.float64).reshape(n, heads, -1).transpose(1, 0, 2) for t in (q, k, v))
        s = qs @ ks.transpose(0, 2, 1) * scale
        if attn_bias is not None:
            s = s + attn_bias[b if attn_bias.shape[0] > 1 else 0][:, :n, :n]
        p = softmax(s, (-1,))
        out[sl] = (p @ vs).transpose(1, 0, 2).reshape(n, heads * hv)
        start += n
    return out


PMHA_CASES = {
    "separate": {},
    "bias": {"bias": True},
    "packed-qkv": {"packed": True},
    "attention-bias-scale": {"attn_bias": True, "scale": 0.2},
    "full-lengths": {"lengths": [5, 5]},
    "v-hidden": {"v_head": 4, "bias": True},
}


@pytest.mark.parametrize("name", list(PMHA_CASES))
def test_packed_multi_head_attention(name):
    c = dict(lengths=[2, 5, 3], seq=5, heads=2, head=8, v_head=None, bias=False, packed=False, attn_bias=False, scale=None)
    c.update(PMHA_CASES[name])
    lengths, seq, heads, head = c["lengths"], c["seq"], c["heads"], c["head"]
    tokens, hidden, vh = sum(lengths), heads * head, heads * (c["v_head"] or head)
    offset, cum = packing(lengths, seq)
    q, k, v = randn(tokens, hidden, seed=1), randn(tokens, hidden, seed=2), randn(tokens, vh, seed=3)
    consts, attrs = {}, {"num_heads": heads}
    if c["scale"]:
        attrs["scale"] = c["scale"]
    feeds = {"token_offset": offset, "cum": cum}
    if c["packed"]:
        feeds["qkv"] = np.stack([t.reshape(tokens, heads, head) for t in (q, k, v)], axis=2)
        inputs = ["qkv", "", "", "", "token_offset", "cum"]
    else:
        feeds.update(q=q, k=k, v=v)
        inputs = ["q", "k", "v", "", "token_offset", "cum"]
    rq, rk, rv = q, k, v
    if c["bias"]:
        b = randn(2 * hidden + vh, seed=4)
        consts["bias"] = b
        inputs[3] = "bias"
        rq, rk, rv = q + b[:hidden], k + b[hidden : 2 * hidden], v + b[2 * hidden :]
    ab = None
    if c["attn_bias"]:
        ab = randn(len(lengths), heads, seq, seq, seed=5)
        feeds["attn_bias"] = ab
        inputs.append("attn_bias")
    node = helper.make_node("PackedMultiHeadAttention", inputs, ["y"], domain=MS, **attrs)
    model = ms_model([node], feeds, ["y"], consts=consts)
    mlx_only(model, feeds, ["PackedMultiHeadAttention"], [packed_mha_ref(rq, rk, rv, lengths, heads, c["scale"], ab)])


# ---------------------------------------------------------------------------
# hostile indices fail the run (the runtime bounds-checks every gather)


@needs_assignment_info
@pytest.mark.skipif(not HAS_MROPE, reason="this ORT has no MRotaryEmbedding")
def test_mrotary_embedding_positions_out_of_range():
    x = randn(1, 2, 3, 16)
    cos, sin = cos_sin(8, 8)
    node = helper.make_node("MRotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS, mrope_section=[4, 2, 2])
    feeds = {"x": x, "pos": np.array([0, 1, 8], np.int64).reshape(1, 1, 3).repeat(3, axis=0)}
    session = make_session(ms_model([node], feeds, ["y"], consts={"cos": cos, "sin": sin}), mlx=True)
    assert_on_mlx(session, ["MRotaryEmbedding"])
    with pytest.raises(Exception, match="out of range"):
        run(session, feeds)


@needs_assignment_info
def test_packed_multi_head_attention_bad_token_offset():
    offset, cum = packing([2, 3], 3)
    offset[0, 0] = 6  # no such padded position
    q = randn(5, 16)
    feeds = {"q": q, "k": q, "v": q, "token_offset": offset, "cum": cum}
    node = helper.make_node("PackedMultiHeadAttention", ["q", "k", "v", "", "token_offset", "cum"], ["y"], domain=MS, num_heads=2)
    session = make_session(ms_model([node], feeds, ["y"]), mlx=True)
    assert_on_mlx(session, ["PackedMultiHeadAttention"])
    with pytest.raises(Exception, match="out of range"):
        run(session, feeds)


@needs_assignment_info
@needs_new_moe
def test_moe_router_expert_mismatch():
    model, feeds = moe_case(activation_type="relu", k=1)
    feeds["router"] = feeds["router"][:, :1].copy()
    model.graph.input[1].type.tensor_type.shape.dim[1].dim_param = "e"
    session = make_session(model, mlx=True)
    assert_on_mlx(session, ["MoE"])
    with pytest.raises(Exception, match="number of experts"):
        run(session, feeds)


# ---------------------------------------------------------------------------
# QMoE (int4 / int8 experts)


QMOE_CASES = {
    "int4-rows": {"bits": 4},
    "int8-rows": {"bits": 8},
    "int4-rows-zp-bias": {"bits": 4, "zp": True, "bias": True},
    "int8-rows-zp": {"bits": 8, "zp": True},
    "int4-block16": {"bits": 4, "block": 16},
    "int4-block16-zp": {"bits": 4, "block": 16, "zp": True, "activation_type": "silu"},
    "int8-rows-gelu-top1": {"bits": 8, "activation_type": "gelu", "k": 1, "bias": True},
    "int4-swiglu": {"bits": 4, "activation_type": "swiglu", "swiglu_fusion": 1},
}


@needs_new_moe
@pytest.mark.parametrize("name", list(QMOE_CASES))
def test_qmoe(name):
    c = dict(bits=4, block=0, zp=False, bias=False, k=2, activation_type="relu")
    c.update(QMOE_CASES[name])
    bits, block = c.pop("bits"), c.pop("block")
    zp, bias = c.pop("zp"), c.pop("bias")
    e, hidden, inter = 3, 32, 32
    fusion = 2 if c["activation_type"] == "swiglu" else 1
    r = rng(41)
    consts = {}

    def weights(name, n, k):
        q = r.integers(0, 2**bits, (e, n, k))
        nb = k // block if block else 1
        s = r.uniform(0.01, 0.05, (e, n, nb)).astype(np.float32)
        consts[f"{name}_q"] = pack_bits(q, bits)
        consts[f"{name}_s"] = s if block else s[..., 0]
        if zp:
            z = r.integers(0, 2**bits, (e, n, nb))
            if block:
                pad = (-nb) % (8 // bits)
                consts[f"{name}_z"] = pack_bits(np.concatenate([z, np.zeros((e, n, pad), int)], axis=2), bits)
            else:
                consts[f"{name}_z"] = pack_bits(z[..., 0], bits)

    weights("fc1", fusion * inter, hidden)
    weights("fc2", hidden, inter)
    if bias:
        consts["fc1_b"] = randn(e, fusion * inter, seed=42)
        consts["fc2_b"] = randn(e, hidden, seed=43)
    inputs = ["x", "router", "fc1_q", "fc1_s", "fc1_b" if bias else "", "fc2_q", "fc2_s", "fc2_b" if bias else "", "", "", ""]
    if zp:
        inputs += ["fc1_z", "fc2_z"]
    while not inputs[-1]:
        inputs.pop()
    attrs = dict(c, expert_weight_bits=bits)
    if block:
        attrs["block_size"] = block
    feeds = {"x": randn(5, hidden, seed=44), "router": randn(5, e, seed=45, scale=2.0)}
    node = helper.make_node("QMoE", inputs, ["y"], domain=MS, **attrs)
    compare(ms_model([node], feeds, ["y"], consts=consts), feeds, ["QMoE"], rtol=1e-4, atol=1e-4)


@needs_new_moe
def test_qmoe_declines_int8_blocks():
    r = rng(46)
    consts = {"q1": pack_bits(r.integers(0, 256, (2, 32, 32)), 8), "s1": np.full((2, 32, 1), 0.01, np.float32)}
    consts.update(q2=consts["q1"], s2=consts["s1"])
    feeds = {"x": randn(3, 32), "router": randn(3, 2)}
    node = helper.make_node("QMoE", ["x", "router", "q1", "s1", "", "q2", "s2"], ["y"], domain=MS, expert_weight_bits=8, block_size=32, k=1)
    assert_on_cpu(make_session(ms_model([node], feeds, ["y"], consts=consts), mlx=True), ["QMoE"])
