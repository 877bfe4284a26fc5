"""ONNX function ops claimed and lowered directly (not through ORT's inlining of their
bodies): NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss, Swish, CenterCropPad. Each case
asserts that the op node itself ran on the MLX EP and that its outputs equal ORT's CPU EP."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from onnx import helper, numpy_helper

from conftest import assert_on_mlx, check_against_cpu, make_session
from models import node_model

TOL = {np.float32: (1e-5, 1e-5), np.float16: (1e-2, 1e-2), np.float64: (1e-9, 1e-12)}
FLOATS = [np.float32, np.float16, np.float64]


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def loss_feeds(shape, dtype, tdtype, ignore, weight, seed=0):
    g = rng(seed)
    x = g.standard_normal(shape).astype(dtype)
    n, c, rest = shape[0], shape[1], tuple(shape[2:])
    t = g.integers(0, c, (n, *rest)).astype(tdtype)
    if ignore is not None:
        flat = t.reshape(-1)
        flat[:: 3] = ignore
    feeds = {"X": x, "T": t}
    if weight:
        feeds["W"] = (g.random(c) + 0.5).astype(dtype)
    return feeds


LOSS_CASES = [
    (shape, dtype, tdtype, reduction, ignore, weight)
    for shape in [(4, 5), (2, 3, 4), (2, 4, 3, 2)]
    for dtype in FLOATS
    for tdtype in [np.int64, np.int32]
    for reduction in ["none", "sum", "mean"]
    for ignore in [None, 1, -1]
    for weight in [False, True]
    if not (tdtype is np.int32 and (dtype is not np.float32 or len(shape) == 4))
]


def loss_id(case):
    shape, dtype, tdtype, reduction, ignore, weight = case
    return f"{'x'.join(map(str, shape))}-{np.dtype(dtype).name}-{np.dtype(tdtype).name}-{reduction}-ii{ignore}-{'w' if weight else 'nw'}"


def loss_attrs(reduction, ignore):
    attrs = {"reduction": reduction}
    if ignore is not None:
        attrs["ignore_index"] = ignore
    return attrs


@pytest.mark.parametrize("opset", [12, 13, 22])
@pytest.mark.parametrize("case", LOSS_CASES, ids=loss_id)
def test_negative_log_likelihood_loss(case, opset):
    shape, dtype, tdtype, reduction, ignore, weight = case
    feeds = loss_feeds(shape, dtype, tdtype, ignore, weight)
    model = node_model("NegativeLogLikelihoodLoss", feeds, attrs=loss_attrs(reduction, ignore), opset=opset)
    rtol, atol = TOL[dtype]
    check_against_cpu(model, feeds, ["NegativeLogLikelihoodLoss"], rtol=rtol, atol=atol)


@pytest.mark.parametrize("opset", [12, 13])
@pytest.mark.parametrize("log_prob", [False, True])
@pytest.mark.parametrize("case", LOSS_CASES, ids=loss_id)
def test_softmax_cross_entropy_loss(case, log_prob, opset):
    shape, dtype, tdtype, reduction, ignore, weight = case
    feeds = loss_feeds(shape, dtype, tdtype, ignore, weight)
    model = node_model(
        "SoftmaxCrossEntropyLoss", feeds, attrs=loss_attrs(reduction, ignore), opset=opset, n_outputs=2 if log_prob else 1
    )
    rtol, atol = TOL[dtype]
    check_against_cpu(model, feeds, ["SoftmaxCrossEntropyLoss"], rtol=rtol, atol=atol)


def test_loss_mean_all_ignored_is_nan():
    """Every target ignored: the mean is 0 / 0 (NaN) on both EPs."""
    feeds = {"X": rng().standard_normal((3, 4)).astype(np.float32), "T": np.full(3, 2, np.int64)}
    for op in ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"]:
        model = node_model(op, feeds, attrs={"reduction": "mean", "ignore_index": 2}, opset=13)
        (y,) = check_against_cpu(model, feeds, [op])
        assert np.isnan(y)


@pytest.mark.parametrize("bad", [-2, 4, 1 << 40])
def test_loss_target_out_of_range_is_an_error(bad):
    """A target outside [0, C) that is not ignore_index fails the run with the node named (ORT's
    CPU EP refuses it too) instead of a wrapped or out-of-range gather; good feeds still run."""
    x = rng().standard_normal((3, 4)).astype(np.float32)
    good = {"X": x, "T": np.array([0, -1, 3], np.int64)}
    for op in ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"]:
        model = node_model(op, good, attrs={"reduction": "sum", "ignore_index": -1}, opset=13)
        session = make_session(model)
        session.run(None, good)
        assert_on_mlx(session, [op])
        with pytest.raises(Exception, match=r"target must be in \[0, C\)|index is out of range"):
            session.run(None, {"X": x, "T": np.array([0, bad, 1], np.int64)})
        (y,) = session.run(None, good)
        (ref,) = make_session(model, mlx=False).run(None, good)
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def swish_loads() -> bool:
    feeds = {"X": np.zeros(2, np.float32)}
    try:
        make_session(node_model("Swish", feeds, opset=24), mlx=False)
    except Exception:  # noqa: BLE001 - an ORT without opset 24 refuses the model
        return False
    return True


@pytest.mark.skipif(not swish_loads(), reason=f"onnxruntime {ort.__version__} can't load Swish (ai.onnx opset 24)")
@pytest.mark.parametrize("alpha", [None, 0.5, -1.75])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(7,), (2, 3, 5)])
def test_swish(shape, dtype, alpha):
    feeds = {"X": (rng().standard_normal(shape) * 4).astype(dtype)}
    attrs = {} if alpha is None else {"alpha": alpha}
    model = node_model("Swish", feeds, attrs=attrs, opset=24)
    rtol, atol = TOL[dtype]
    check_against_cpu(model, feeds, ["Swish"], rtol=rtol, atol=atol)


def crop_model(feeds, consts, attrs):
    """A one-node CenterCropPad model (built by hand: with a shape input fed at run time, ONNX
    shape inference gives the output no shape, which ``node_model``'s checker refuses)."""
    dt = helper.np_dtype_to_tensor_dtype(feeds["X"].dtype)
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()]
    inits = [numpy_helper.from_array(a, n) for n, a in (consts or {}).items()]
    node = helper.make_node("CenterCropPad", ["X", "S"], ["Y"], name="centercroppad_0", **attrs)
    graph = helper.make_graph([node], "crop", inputs, [helper.make_tensor_value_info("Y", dt, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


CROP_CASES = [
    # (input shape, target shape, axes)
    ((5,), [2], None),
    ((4,), [1], None),
    ((5,), [8], None),
    ((4,), [7], None),
    ((4,), [4], None),
    ((3, 6, 5), [2, 9, 5], None),
    ((3, 6, 5), [4, 3], [-1, 1]),
    ((3, 6, 5), [1], [0]),
    ((2, 7, 4, 3), [5, 6], [1, 2]),
    ((2, 7, 4, 3), [4, 9], [-2, -3]),
]


@pytest.mark.parametrize("shape_const", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int64, np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("case", CROP_CASES, ids=lambda c: f"{c[0]}->{c[1]}@{c[2]}")
def test_center_crop_pad(case, dtype, shape_const):
    shape, target, axes = case
    x = rng().standard_normal(shape) * 10
    x = (x > 0) if dtype is np.bool_ else x.astype(dtype)
    s = np.array(target, np.int64)
    feeds = {"X": x} if shape_const else {"X": x, "S": s}
    consts = {"S": s} if shape_const else None
    attrs = {} if axes is None else {"axes": axes}
    model = crop_model(feeds, consts, attrs)
    check_against_cpu(model, feeds, ["CenterCropPad"], rtol=0, atol=0)


def test_center_crop_pad_int32_shape():
    """An int32 shape input (ONNX allows it; ORT's CPU EP fails on the function body, which
    mixes it with int64 dims): MLX's result equals the CPU EP's for the same int64 shape."""
    x = rng().standard_normal((3, 6)).astype(np.float32)
    s = np.array([5, 2], np.int64)
    expected = make_session(crop_model({"X": x, "S": s}, None, {}), mlx=False).run(None, {"X": x, "S": s})
    session = make_session(crop_model({"X": x, "S": s.astype(np.int32)}, None, {}))
    actual = session.run(None, {"X": x, "S": s.astype(np.int32)})
    np.testing.assert_array_equal(actual[0], expected[0])
    assert_on_mlx(session, ["CenterCropPad"])
