"""The com.microsoft ops that ORT's transformer optimizer and quantizer write (Attention,
EmbedLayerNormalization, FusedMatMul, ...) on the MLX EP: against ORT's CPU EP where it
implements the op, against a numpy reference written from the op's spec where only ORT's GPU
EPs do; every case asserts that the op ran on MLX.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import HAS_ASSIGNMENT_INFO, assert_all_on_mlx, assert_on_cpu, assert_on_mlx, assert_outputs_match, make_session, run
from test_contrib import MS, compare, ms_model, randn, rng

I32 = TensorProto.INT32

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
    with pytest.raises(Exception):
        run(make_session(model, mlx=False), feeds)
    session = make_session(model, mlx=True)
    assert_on_mlx(session, ["Attention"])
    with pytest.raises(Exception, match="B or 2B"):
        run(session, feeds)


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
    with pytest.raises(Exception):
        run(make_session(model, mlx=False), feeds)
    session = make_session(model, mlx=True)
    assert_on_mlx(session, ["EmbedLayerNormalization"])
    with pytest.raises(Exception, match="out of range"):
        run(session, feeds)
