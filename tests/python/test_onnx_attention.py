"""ONNX `Attention` (opset 23 and 24), `RotaryEmbedding` and `RMSNormalization` (opset 23) on the
MLX EP, each case against ORT's CPU EP and asserting that the op ran on MLX.

ORT's CPU kernel is the reference where it follows the ONNX spec, and for what the spec leaves
open: the causal mask is aligned to the top-left, shifted by the past length (and left out for a
one-token decode step), and a fully masked row gives zeros. Where ORT departs from the spec (it
applies the soft cap before the mask, its `qk_matmul_output_mode` 1 and 2 are the scores after
the soft cap and after the mask, and it fills masked scores with the lowest finite value instead
of -inf) the cases compare with `attention_spec`, a numpy reference written from the spec: the
mask is added first, then the soft cap, then softmax. Keys masked out (-inf) stay masked through
the soft cap, as in ORT; ONNX's reference lets `tanh` turn them into `-softcap`, which no
conformance case exercises."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import assert_on_mlx, assert_outputs_match, make_session, run

F32 = TensorProto.FLOAT
F16 = TensorProto.FLOAT16
ORT_VERSION = tuple(int(p) for p in ort.__version__.split(".")[:2])

#: ORT 1.23's CPU Attention kernel is an older one (measured with these cases: no opset-24
#: kernel, `qk_matmul_output` refused without present outputs, other results for grouped-query
#: heads and all-masked rows, where ORT 1.31 and 1.32 agree with each other and with the EP);
#: the Attention cases are written against ORT >= 1.31.
needs_new_attention = pytest.mark.skipif(ORT_VERSION < (1, 31), reason="ORT's CPU Attention kernel before 1.31 is not the reference these cases are written against")

rng = np.random.default_rng(7)
TYPES = {np.float32: F32, np.float16: F16, np.bool_: TensorProto.BOOL, np.int64: TensorProto.INT64}


def randn(*shape, dtype=np.float32, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def model(op, inputs, n_out, attrs, opset, domain_outputs=None):
    """One-node model; `inputs` maps input position -> (name, array); absent positions are ''."""
    last = max(inputs) if inputs else -1
    names = [inputs[i][0] if i in inputs else "" for i in range(last + 1)]
    infos = [helper.make_tensor_value_info(n, TYPES[a.dtype.type], a.shape) for n, a in inputs.values()]
    outs = domain_outputs or [f"out{i}" for i in range(n_out)]
    out_names = [o if o is not None else "" for o in outs]
    node = helper.make_node(op, names, out_names, **attrs)
    out_type = TYPES[inputs[0][1].dtype.type]
    graph = helper.make_graph(
        [node], "g", infos, [helper.make_tensor_value_info(o, out_type, None) for o in out_names if o]
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m, {n: a for n, a in inputs.values()}


def attention_spec(m, feeds):
    """The outputs of the one-node Attention model `m` on `feeds`, per the ONNX spec (float64),
    with ORT's conventions where the spec leaves them open (see the module docs)."""
    node = m.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    x = {name: feeds[name].astype(np.float64) if feeds[name].dtype.kind == "f" else feeds[name] for name in feeds}
    q, k, v = x["Q"], x["K"], x["V"]
    three_d = q.ndim == 3
    if three_d:
        hq, hkv = attrs["q_num_heads"], attrs["kv_num_heads"]
        q, k, v = (t.reshape(t.shape[0], t.shape[1], h, -1).transpose(0, 2, 1, 3) for t, h in ((q, hq), (k, hkv), (v, hkv)))
    past = 0
    if "past_key" in x:
        past = x["past_key"].shape[2]
        k = np.concatenate([x["past_key"], k], axis=2)
        v = np.concatenate([x["past_value"], v], axis=2)
    present_k, present_v = k, v
    s, t = q.shape[2], k.shape[2]
    scale = attrs.get("scale", 1.0 / np.sqrt(q.shape[-1]))
    reps = q.shape[1] // k.shape[1]
    kr, vr = np.repeat(k, reps, axis=1), np.repeat(v, reps, axis=1)
    raw = q @ kr.transpose(0, 1, 3, 2) * scale
    bias = np.zeros((s, t))
    if "attn_mask" in x:
        mask = x["attn_mask"]
        if mask.dtype == np.bool_:
            mask = np.where(mask, 0.0, -np.inf)
        pad = t - mask.shape[-1]
        if pad > 0:
            mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)], constant_values=-np.inf)
        bias = bias + mask
    rows, cols = np.arange(s)[:, None], np.arange(t)[None, :]
    lens = x.get("nonpad_kv_seqlen")
    if attrs.get("is_causal", 0):
        if lens is not None:
            keep = cols[None] + s <= rows[None] + lens[:, None, None]
            keep = keep[:, None]
        elif s == 1 and past > 0:
            keep = np.ones((s, t), bool)
        else:
            keep = cols <= rows + past
        bias = np.where(keep, bias, -np.inf)
    if lens is not None:
        bias = np.where((cols[None] < lens[:, None, None])[:, None], bias, -np.inf)
    scores = raw + bias
    snapshots = [raw, scores]
    cap = attrs.get("softcap", 0.0)
    if cap > 0:
        # masked keys stay masked (ONNX's reference lets tanh turn -inf into -softcap)
        scores = np.where(scores == -np.inf, -np.inf, cap * np.tanh(scores / cap))
    snapshots.append(scores)
    mx = scores.max(axis=-1, keepdims=True)
    alive = mx > -np.inf
    e = np.exp(scores - np.where(alive, mx, 0.0))
    probs = np.where(alive, e / e.sum(axis=-1, keepdims=True), 0.0)
    snapshots.append(probs)
    y = probs @ vr
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], s, -1)
    dt = feeds["Q"].dtype
    values = {0: y, 1: present_k, 2: present_v, 3: snapshots[attrs.get("qk_matmul_output_mode", 0)]}
    outs = list(node.output)
    return [values[i].astype(dt) for i, name in enumerate(outs) if name]


def departs_from_ort(m):
    """Whether ORT's CPU kernel departs from the ONNX spec on this Attention model: a soft cap
    over a mask, or the scores with the mask (modes 1 and 2) of a masked form."""
    node = m.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    inputs = list(node.input) + [""] * 7
    masked = bool(inputs[3] or inputs[6] or attrs.get("is_causal", 0))
    if inputs[3]:
        dims = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in m.graph.input}
        seq = 1 if len(dims["K"]) == 3 else 2
        total = dims["K"][seq] + (dims["past_key"][2] if inputs[4] else 0)
        if dims[inputs[3]][-1] < total:
            return True
    scores = len(node.output) > 3 and node.output[3] and attrs.get("qk_matmul_output_mode", 0) in (1, 2)
    return masked and (attrs.get("softcap", 0.0) > 0 or scores)


def check(m, feeds, op, tol):
    if op == "Attention" and departs_from_ort(m):
        session = make_session(m)
        actual = run(session, feeds)
        assert_outputs_match(actual, attention_spec(m, feeds), rtol=tol, atol=tol)
        assert_on_mlx(session, [op])
        return actual
    expected = run(make_session(m, mlx=False), feeds)
    session = make_session(m)
    actual = run(session, feeds)
    assert_outputs_match(actual, expected, rtol=tol, atol=tol)
    assert_on_mlx(session, [op])
    return actual


# ---------------------------------------------------------------------------
# Attention

# (id, attrs, q shape, k shape, v shape, mask (shape, kind) or None, past length or None, outputs)
B, HQ, HKV, S, T, D = 2, 4, 2, 3, 5, 8
ATTN_CASES = [
    ("4d", {}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), None, None, 1),
    ("4d_scale", {"scale": 0.3}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), None, None, 1),
    ("4d_gqa", {}, (B, HQ, S, D), (B, HKV, T, D), (B, HKV, T, D), None, None, 1),
    ("4d_vdim", {}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, 6), None, None, 1),
    ("3d", {"q_num_heads": HQ, "kv_num_heads": HQ}, (B, S, HQ * D), (B, T, HQ * D), (B, T, HQ * D), None, None, 1),
    ("3d_gqa", {"q_num_heads": HQ, "kv_num_heads": HKV}, (B, S, HQ * D), (B, T, HKV * D), (B, T, HKV * 6), None, None, 1),
    ("causal_square", {"is_causal": 1}, (B, HQ, T, D), (B, HQ, T, D), (B, HQ, T, D), None, None, 1),
    ("causal_short_q", {"is_causal": 1}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), None, None, 1),
    ("causal_long_q", {"is_causal": 1}, (B, HQ, T, D), (B, HQ, S, D), (B, HQ, S, D), None, None, 1),
    ("causal_3d_gqa", {"is_causal": 1, "q_num_heads": HQ, "kv_num_heads": HKV}, (B, S, HQ * D), (B, T, HKV * D), (B, T, HKV * D), None, None, 1),
    ("causal_past", {"is_causal": 1}, (B, HQ, S, D), (B, HQ, S, D), (B, HQ, S, D), None, 4, 3),
    ("causal_past_decode", {"is_causal": 1}, (B, HQ, 1, D), (B, HQ, 1, D), (B, HQ, 1, D), None, 4, 3),
    ("causal_past_decode_two_keys", {"is_causal": 1}, (B, HQ, 1, D), (B, HQ, 2, D), (B, HQ, 2, D), None, 4, 3),
    ("causal_past_more_keys", {"is_causal": 1}, (B, HQ, 2, D), (B, HQ, 3, D), (B, HQ, 3, D), None, 4, 3),
    ("causal_bool_mask", {"is_causal": 1}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((S, T), "bool"), None, 1),
    ("causal_float_mask4d", {"is_causal": 1}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((B, HQ, S, T), "float"), None, 1),
    ("causal_mask_past", {"is_causal": 1}, (B, HQ, S, D), (B, HQ, S, D), (B, HQ, S, D), ((B, 1, S, S + 4), "float"), 4, 3),
    ("mask_bool2d", {}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((S, T), "bool"), None, 1),
    ("mask_bool3d", {}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((HQ, S, T), "bool"), None, 1),
    ("mask_bool4d", {}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((B, HQ, S, T), "bool"), None, 1),
    ("mask_bool_b1", {}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((B, 1, S, T), "bool"), None, 1),
    ("mask_bool_empty_row", {}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((S, T), "bool_empty_row"), None, 1),
    ("mask_float2d", {}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((S, T), "float"), None, 1),
    ("mask_float3d_1", {}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((1, S, T), "float"), None, 1),
    ("mask_float4d", {}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((B, HQ, S, T), "float"), None, 1),
    ("mask_float_gqa_3d", {"q_num_heads": HQ, "kv_num_heads": HKV}, (B, S, HQ * D), (B, T, HKV * D), (B, T, HKV * D), ((B, 1, S, T), "float"), None, 1),
    ("softcap", {"softcap": 2.0}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), None, None, 1),
    ("softcap_mask", {"softcap": 2.0}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((S, T), "float"), None, 1),
    ("softcap_bool_causal", {"softcap": 3.0, "is_causal": 1}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((S, T), "bool"), None, 1),
    ("softcap_3d_gqa", {"softcap": 2.0, "q_num_heads": HQ, "kv_num_heads": HKV}, (B, S, HQ * D), (B, T, HKV * D), (B, T, HKV * D), None, None, 1),
    ("past_4d", {}, (B, HQ, S, D), (B, HQ, S, D), (B, HQ, S, D), None, 4, 3),
    ("past_3d_gqa", {"q_num_heads": HQ, "kv_num_heads": HKV}, (B, S, HQ * D), (B, S, HKV * D), (B, S, HKV * D), ((S, S + 4), "bool"), 4, 3),
    # masks shorter than the keys, padded as masked (ORT's CPU kernel refuses them)
    ("mask_short_float", {}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((S, T - 2), "float"), None, 1),
    ("mask_short_bool4d", {}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((B, 1, S, T - 1), "bool"), None, 1),
    ("mask_short_past_causal", {"is_causal": 1}, (B, HQ, S, D), (B, HQ, S, D), (B, HQ, S, D), ((S, S + 2), "float"), 4, 3),
    ("mask_short_softcap_qk", {"softcap": 2.0, "qk_matmul_output_mode": 1}, (B, HQ, S, D), (B, HKV, T, D), (B, HKV, T, D), ((HQ, S, T - 2), "float"), None, 4),
]
for mode in range(4):
    ATTN_CASES += [
        (f"qk{mode}", {"qk_matmul_output_mode": mode}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), None, None, 4),
        (f"qk{mode}_mask_softcap", {"qk_matmul_output_mode": mode, "softcap": 2.0}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((S, T), "float"), None, 4),
        (f"qk{mode}_bool_causal", {"qk_matmul_output_mode": mode, "is_causal": 1}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((B, 1, S, T), "bool"), None, 4),
        (f"qk{mode}_past_3d_gqa", {"qk_matmul_output_mode": mode, "q_num_heads": HQ, "kv_num_heads": HKV, "softcap": 1.5},
         (B, S, HQ * D), (B, S, HKV * D), (B, S, HKV * D), ((HQ, S, S + 4), "float"), 4, 4),
    ]


def mask_array(shape, kind, dtype):
    if kind == "float":
        return randn(*shape, dtype=dtype)
    m = rng.random(shape) > 0.3
    m[..., 0] = True
    if kind == "bool_empty_row":
        m[1, :] = False
    return m


def attention_model(attrs, qs, ks, vs, mask, past, n_out, dtype=np.float32, opset=23, nonpad=None):
    inputs = {0: ("Q", randn(*qs, dtype=dtype)), 1: ("K", randn(*ks, dtype=dtype, scale=2.0)), 2: ("V", randn(*vs, dtype=dtype))}
    if mask is not None:
        inputs[3] = ("attn_mask", mask_array(*mask, dtype))
    if past is not None:
        kvh = attrs.get("kv_num_heads", ks[1])
        dk = ks[-1] // kvh if len(ks) == 3 else ks[-1]
        dv = vs[-1] // kvh if len(vs) == 3 else vs[-1]
        inputs[4] = ("past_key", randn(B, kvh, past, dk, dtype=dtype))
        inputs[5] = ("past_value", randn(B, kvh, past, dv, dtype=dtype))
    if nonpad is not None:
        inputs[6] = ("nonpad_kv_seqlen", np.asarray(nonpad, np.int64))
    outs = ["Y", "present_key" if n_out > 1 else None, "present_value" if n_out > 1 else None, "qk" if n_out > 3 else None][: max(n_out, 1)]
    while outs and outs[-1] is None:
        outs.pop()
    return model("Attention", inputs, 0, attrs, opset, domain_outputs=outs)


@needs_new_attention
@pytest.mark.parametrize("opset", [23, 24])
@pytest.mark.parametrize("case", ATTN_CASES, ids=[c[0] for c in ATTN_CASES])
def test_attention(case, opset):
    _, attrs, qs, ks, vs, mask, past, n_out = case
    m, feeds = attention_model(attrs, qs, ks, vs, mask, past, n_out, opset=opset)
    check(m, feeds, "Attention", 1e-4)


FP16_CASES = [c for c in ATTN_CASES if c[0] in ("4d_gqa", "3d_gqa", "causal_short_q", "causal_past", "mask_bool4d", "mask_float2d", "softcap_mask", "qk2_mask_softcap", "qk3_past_3d_gqa")]


@needs_new_attention
@pytest.mark.parametrize("case", FP16_CASES, ids=[c[0] for c in FP16_CASES])
def test_attention_fp16(case):
    _, attrs, qs, ks, vs, mask, past, n_out = case
    m, feeds = attention_model(attrs, qs, ks, vs, mask, past, n_out, dtype=np.float16)
    check(m, feeds, "Attention", 1e-2)


NONPAD_CASES = [
    ("4d", {}, None, [T, 2]),
    ("zero_length", {}, None, [0, 4]),
    ("causal_decode", {"is_causal": 1}, None, [3, 5]),
    ("3d_gqa", {"q_num_heads": HQ, "kv_num_heads": HKV}, None, [T, 2]),
    ("mask", {}, ((S, T), "float"), [T, 2]),
    ("causal", {"is_causal": 1}, None, [T, 2]),
    ("causal_gqa_qk", {"is_causal": 1, "qk_matmul_output_mode": 3, "q_num_heads": HQ, "kv_num_heads": HKV}, None, [4, 1]),
    ("causal_mask_softcap", {"is_causal": 1, "softcap": 2.0}, ((B, 1, S, T), "bool"), [T, 3]),
    ("softcap_qk", {"softcap": 2.0, "qk_matmul_output_mode": 2}, ((S, T), "bool"), [T, 2]),
]


@needs_new_attention
@pytest.mark.parametrize("case", NONPAD_CASES, ids=[c[0] for c in NONPAD_CASES])
def test_attention_nonpad_kv_seqlen(case):
    name, attrs, mask, lens = case
    threeD = "q_num_heads" in attrs
    s = 1 if name == "causal_decode" else S
    qs, ks = ((B, s, HQ * D), (B, T, HKV * D)) if threeD else ((B, HQ, s, D), (B, HQ, T, D))
    n_out = 4 if "qk_matmul_output_mode" in attrs else 1
    m, feeds = attention_model(attrs, qs, ks, ks, mask, None, n_out, opset=24, nonpad=lens)
    check(m, feeds, "Attention", 1e-4)


# ---------------------------------------------------------------------------
# RotaryEmbedding

ROPE_CASES = [
    # (id, x shape, attrs, rotary dim (None: whole head), position ids)
    ("4d", (2, 3, 5, 8), {}, None, False),
    ("4d_pos", (2, 3, 5, 8), {}, None, True),
    ("4d_interleaved", (2, 3, 5, 8), {"interleaved": 1}, None, True),
    ("4d_partial", (2, 3, 5, 8), {"rotary_embedding_dim": 4}, 4, True),
    ("4d_partial_interleaved", (2, 3, 5, 8), {"rotary_embedding_dim": 4, "interleaved": 1}, 4, False),
    ("3d", (2, 5, 24), {"num_heads": 3}, None, True),
    ("3d_interleaved", (2, 5, 24), {"num_heads": 3, "interleaved": 1}, None, False),
    ("3d_partial", (2, 5, 24), {"num_heads": 3, "rotary_embedding_dim": 6}, 6, True),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", ROPE_CASES, ids=[c[0] for c in ROPE_CASES])
def test_rotary_embedding(case, dtype):
    _, xs, attrs, rd, pos = case
    if rd is not None and len(xs) == 4 and ORT_VERSION < (1, 31):
        pytest.skip("ORT 1.23's CPU RotaryEmbedding refuses rotary_embedding_dim without num_heads")
    b, s = xs[0], xs[2] if len(xs) == 4 else xs[1]
    head = xs[-1] if len(xs) == 4 else xs[-1] // attrs["num_heads"]
    half = (rd or head) // 2
    inputs = {0: ("X", randn(*xs, dtype=dtype))}
    if pos:
        table = 11
        ang = rng.random((table, half)) * 3
        inputs[1] = ("cos", np.cos(ang).astype(dtype))
        inputs[2] = ("sin", np.sin(ang).astype(dtype))
        inputs[3] = ("position_ids", rng.integers(0, table, (b, s)).astype(np.int64))
    else:
        ang = rng.random((b, s, half)) * 3
        inputs[1] = ("cos", np.cos(ang).astype(dtype))
        inputs[2] = ("sin", np.sin(ang).astype(dtype))
    m, feeds = model("RotaryEmbedding", inputs, 1, attrs, 23)
    check(m, feeds, "RotaryEmbedding", 1e-5 if dtype == np.float32 else 2e-3)


# ---------------------------------------------------------------------------
# RMSNormalization

RMS_CASES = [
    # (id, x shape, scale shape, attrs)
    ("last", (2, 3, 8), (8,), {}),
    ("eps", (2, 3, 8), (8,), {"epsilon": 0.1}),
    ("axis1", (2, 3, 4), (3, 4), {"axis": 1}),
    ("axis_neg2", (2, 3, 4, 5), (4, 5), {"axis": -2}),
    ("axis0", (3, 4), (3, 4), {"axis": 0}),
    ("scale_broadcast", (2, 3, 4), (1, 4), {"axis": 1}),
    ("rank1", (16,), (16,), {}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", RMS_CASES, ids=[c[0] for c in RMS_CASES])
def test_rms_normalization(case, dtype):
    name, xs, ss, attrs = case
    if name == "scale_broadcast" and ORT_VERSION < (1, 31):
        pytest.skip("ORT 1.23's CPU RMSNormalization refuses a broadcast scale")
    inputs = {0: ("X", randn(*xs, dtype=dtype, scale=3.0)), 1: ("scale", randn(*ss, dtype=dtype))}
    m, feeds = model("RMSNormalization", inputs, 1, attrs, 23)
    check(m, feeds, "RMSNormalization", 1e-5 if dtype == np.float32 else 2e-3)


def symbolic(m, dims):
    """Declares input dims as named symbols: `dims` maps input name -> {axis: symbol}."""
    for vi in m.graph.input:
        for axis, sym in dims.get(vi.name, {}).items():
            vi.type.tensor_type.shape.dim[axis].dim_param = sym
    return m


@needs_new_attention
@pytest.mark.parametrize("past", [False, True])
def test_attention_causal_symbolic_lengths(past):
    """Query and key lengths are different symbols, so the plan cannot prove MLX's causal mode
    right; one session then runs several length combinations (prefill, decode, more keys than
    queries) against ORT's CPU EP."""
    m, _ = attention_model({"is_causal": 1}, (B, HQ, S, D), (B, HKV, S, D), (B, HKV, S, D), None, 4 if past else None, 3 if past else 1)
    dims = {"Q": {2: "s"}, "K": {2: "l"}, "V": {2: "l"}, "past_key": {2: "p"}, "past_value": {2: "p"}}
    m = symbolic(m, dims)
    expected_session = make_session(m, mlx=False)
    session = make_session(m)
    combos = [(3, 3, 4), (1, 1, 6), (1, 2, 5), (2, 3, 4), (3, 5, 0)] if past else [(3, 3, 0), (2, 5, 0), (5, 2, 0), (1, 1, 0)]
    for s, l, p in combos:
        feeds = {"Q": randn(B, HQ, s, D), "K": randn(B, HKV, l, D), "V": randn(B, HKV, l, D)}
        if past:
            feeds["past_key"] = randn(B, HKV, p, D)
            feeds["past_value"] = randn(B, HKV, p, D)
        assert_outputs_match(run(session, feeds), run(expected_session, feeds), rtol=1e-4, atol=1e-4)
    assert_on_mlx(session, ["Attention"])


def test_llama_layer_prefill_then_decode():
    """One Llama-style layer of ai.onnx ops only (RMSNormalization, RotaryEmbedding with
    position ids, 3-D grouped-query causal Attention with a KV cache): a prefill, then decode
    steps fed the present caches, every node on MLX and each step matching ORT's CPU EP."""
    if ORT_VERSION < (1, 31):
        pytest.skip("ORT's CPU Attention kernel before 1.31 is not the reference")
    from conftest import assert_all_on_mlx
    from onnx import numpy_helper

    d, hq, hkv, hd = 32, 4, 2, 8
    inits = {
        "norm_w": randn(d),
        "wq": randn(d, hq * hd, scale=0.3),
        "wk": randn(d, hkv * hd, scale=0.3),
        "wv": randn(d, hkv * hd, scale=0.3),
        "wo": randn(hq * hd, d, scale=0.3),
    }
    ang = np.arange(64)[:, None] * (10000.0 ** (-np.arange(hd // 2) / (hd // 2)))[None, :]
    inits["cos"] = np.cos(ang).astype(np.float32)
    inits["sin"] = np.sin(ang).astype(np.float32)
    nodes = [
        helper.make_node("RMSNormalization", ["x", "norm_w"], ["h"], epsilon=1e-6),
        helper.make_node("MatMul", ["h", "wq"], ["q"]),
        helper.make_node("MatMul", ["h", "wk"], ["k"]),
        helper.make_node("MatMul", ["h", "wv"], ["v"]),
        helper.make_node("RotaryEmbedding", ["q", "cos", "sin", "pos"], ["qr"], num_heads=hq),
        helper.make_node("RotaryEmbedding", ["k", "cos", "sin", "pos"], ["kr"], num_heads=hkv),
        helper.make_node("Attention", ["qr", "kr", "v", "", "past_k", "past_v"], ["a", "present_k", "present_v"],
                         q_num_heads=hq, kv_num_heads=hkv, is_causal=1),
        helper.make_node("MatMul", ["a", "wo"], ["o"]),
        helper.make_node("Add", ["x", "o"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "llama_layer",
        [helper.make_tensor_value_info("x", F32, [1, "s", d]), helper.make_tensor_value_info("pos", TensorProto.INT64, [1, "s"]),
         helper.make_tensor_value_info("past_k", F32, [1, hkv, "p", hd]), helper.make_tensor_value_info("past_v", F32, [1, hkv, "p", hd])],
        [helper.make_tensor_value_info("y", F32, [1, "s", d]), helper.make_tensor_value_info("present_k", F32, None),
         helper.make_tensor_value_info("present_v", F32, None)],
        [numpy_helper.from_array(a, n) for n, a in inits.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    cpu, mlx = make_session(m, mlx=False), make_session(m)
    past = np.zeros((1, hkv, 0, hd), np.float32)
    caches = {"cpu": (past, past), "mlx": (past, past)}
    start = 0
    for steps in [5, 1, 1, 2]:
        x = randn(1, steps, d)
        pos = np.arange(start, start + steps, dtype=np.int64)[None, :]
        outs = {}
        for name, sess in (("cpu", cpu), ("mlx", mlx)):
            pk, pv = caches[name]
            outs[name] = run(sess, {"x": x, "pos": pos, "past_k": pk, "past_v": pv})
            caches[name] = (outs[name][1], outs[name][2])
        assert_outputs_match(outs["mlx"], outs["cpu"], rtol=1e-4, atol=1e-4)
        start += steps
    assert_all_on_mlx(mlx)


@needs_new_attention
@pytest.mark.parametrize("mode", [0, 3])
def test_attention_scores_with_symbolic_heads(mode):
    """4-D inputs whose head count is one symbol for Q, K and V: the step-by-step lowering
    (needed for the scores output) needs no head count, only that they are equal."""
    m, feeds = attention_model({"qk_matmul_output_mode": mode, "is_causal": 1}, (B, HQ, S, D), (B, HQ, T, D), (B, HQ, T, D), ((S, T), "bool"), None, 4)
    m = symbolic(m, {n: {1: "h", 2: "s" if n == "Q" else "t"} for n in ("Q", "K", "V")})
    check(m, feeds, "Attention", 1e-4)
