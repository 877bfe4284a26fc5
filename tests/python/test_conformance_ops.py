"""Ops and forms added or fixed through the ONNX backend-suite conformance run
(``cargo xtask conformance``): reductions over an empty axis, ArgMax/ArgMin with
``select_last_index``, CumSum with a run-time axis and CumProd, and linear quantization.
Each runs on the MLX EP and on the CPU EP (the reference), with placement checked.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

import onnxruntime as ort

from conftest import check_against_cpu
from models import node_model

#: ORT 1.23 loads models up to opset 23 (CumProd and BitCast are opset 26).
needs_opset_26 = pytest.mark.skipif(
    tuple(int(v) for v in ort.__version__.split(".")[:2]) < (1, 24), reason="ONNX Runtime < 1.24 cannot load opset-26 models"
)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def ids(params) -> list[str]:
    return [p[0] for p in params]


# ---------------------------------------------------------------------------
# reductions over an empty axis: ONNX's identity values (MLX refuses max/min over one)

EMPTY_REDUCE = [
    (op, dt)
    for op in ("ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd", "ReduceLogSumExp", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum")
    for dt in (np.float32, np.int32, np.int64, np.uint8)
    if not (dt != np.float32 and op in ("ReduceLogSumExp", "ReduceL2", "ReduceLogSum"))
    and not (dt == np.uint8 and op not in ("ReduceMax", "ReduceMin"))
]


def empty_identity(op: str, dt) -> float:
    """ONNX's value of a reduction over an empty set (older ORT releases differ for integers)."""
    if op in ("ReduceMax", "ReduceMin"):
        if np.issubdtype(dt, np.floating):
            return -np.inf if op == "ReduceMax" else np.inf
        info = np.iinfo(dt)
        return info.min if op == "ReduceMax" else info.max
    return {"ReduceProd": 1, "ReduceLogSumExp": -np.inf, "ReduceLogSum": -np.inf}.get(op, 0)


@pytest.mark.parametrize("keepdims", [1, 0])
@pytest.mark.parametrize("case", EMPTY_REDUCE, ids=[f"{op}-{np.dtype(dt).name}" for op, dt in EMPTY_REDUCE])
def test_reduce_empty_axis_constant_axes(case, keepdims):
    from conftest import assert_on_mlx, make_session, run

    op, dt = case
    x = np.zeros((2, 0, 3), dt)
    model = node_model(op, {"X": x}, consts={"axes": np.array([1], np.int64)}, attrs={"keepdims": keepdims}, opset=18)
    session = make_session(model)
    (y,) = run(session, {"X": x})
    expected = np.full((2, 1, 3) if keepdims else (2, 3), empty_identity(op, dt), dtype=dt)
    np.testing.assert_array_equal(y, expected)
    assert_on_mlx(session, [op])


# ---------------------------------------------------------------------------
# ArgMax / ArgMin select_last_index

ARG_LAST = [
    ("axis0", np.array([[1, 3, 3], [3, 1, 3], [0, 3, 2]], np.float32), 0, 1),
    ("axis1-keepdims0", np.array([[1, 3, 3], [3, 1, 3], [2, 2, 2]], np.float32), 1, 0),
    ("negative-axis-3d", rng(0).integers(0, 3, (2, 3, 4)).astype(np.float32), -1, 1),
    ("int64", rng(1).integers(-2, 2, (4, 5)).astype(np.int64), 1, 1),
    ("uint8", rng(2).integers(0, 3, (5, 2)).astype(np.uint8), 0, 0),
]


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("case", ARG_LAST, ids=ids(ARG_LAST))
def test_arg_select_last_index(case, op):
    _, x, axis, keepdims = case
    model = node_model(op, {"X": x}, attrs={"axis": axis, "keepdims": keepdims, "select_last_index": 1})
    check_against_cpu(model, {"X": x}, [op])


# ---------------------------------------------------------------------------
# CumSum with a run-time axis, CumProd

CUM = [
    ("1d", np.arange(1, 7, dtype=np.float32), 0, {}),
    ("2d-axis0", rng(3).standard_normal((3, 4)).astype(np.float32), 0, {}),
    ("2d-negative-axis-exclusive", rng(4).standard_normal((3, 4)).astype(np.float32), -1, {"exclusive": 1}),
    ("3d-reverse", rng(5).standard_normal((2, 3, 4)).astype(np.float32), 1, {"reverse": 1}),
    ("int32-reverse-exclusive", rng(6).integers(-3, 4, (4, 3)).astype(np.int32), 1, {"reverse": 1, "exclusive": 1}),
    ("int64", rng(7).integers(-3, 4, (5,)).astype(np.int64), 0, {}),
]


@pytest.mark.parametrize("axis_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("case", CUM, ids=ids(CUM))
def test_cumsum_runtime_axis(case, axis_dtype):
    _, x, axis, attrs = case
    feeds = {"X": x, "axis": np.array(axis, axis_dtype)}
    check_against_cpu(node_model("CumSum", feeds, attrs=attrs), feeds, ["CumSum"])


@needs_opset_26
@pytest.mark.parametrize("constant_axis", [False, True], ids=["runtime-axis", "constant-axis"])
@pytest.mark.parametrize("case", CUM, ids=ids(CUM))
def test_cumprod(case, constant_axis):
    _, x, axis, attrs = case
    if constant_axis:
        feeds = {"X": x}
        model = node_model("CumProd", feeds, consts={"axis": np.array(axis, np.int64)}, attrs=attrs, opset=26)
    else:
        feeds = {"X": x, "axis": np.array(axis, np.int64)}
        model = node_model("CumProd", feeds, attrs=attrs, opset=26)
    check_against_cpu(model, feeds, ["CumProd"], rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear


def halves(*shape, seed=0, scale=4.0):
    """Values on and around .5 steps of `scale`: the rounding boundaries."""
    base = rng(seed).integers(-600, 600, shape) / 2.0
    jitter = rng(seed + 1).choice([0.0, 1e-3, -1e-3], shape)
    return ((base + jitter) * scale).astype(np.float32)


QUANTIZE = [
    ("uint8-per-tensor", halves(3, 4), np.float32(4.0), np.uint8(128), {}),
    ("int8-per-tensor-saturating", halves(3, 4, seed=2, scale=8.0), np.float32(2.0), np.int8(-3), {}),
    ("int16", halves(3, 4, seed=4), np.float32(0.25), np.int16(-1000), {}),
    ("uint16", halves(3, 4, seed=6, scale=100.0), np.float32(1.5), np.uint16(30000), {}),
    ("per-axis-1", halves(2, 3, 4, seed=8), np.array([1.0, 2.0, 4.0], np.float32), np.array([0, 10, 250], np.uint8), {}),
    ("per-axis-0", halves(2, 3, seed=10), np.array([0.5, 3.0], np.float32), np.array([-5, 7], np.int8), {"axis": 0}),
    ("per-axis-last", halves(2, 3, seed=12), np.array([0.5, 3.0, 1.0], np.float32), np.array([1, 2, 3], np.int8), {"axis": -1}),
    ("blocked", halves(2, 6, seed=14), np.array([[1.0, 2.0, 4.0], [8.0, 0.5, 0.25]], np.float32), np.array([[0, 1, 2], [3, 4, 5]], np.int8), {"axis": 1, "block_size": 2}),
]


@pytest.mark.parametrize("case", QUANTIZE, ids=ids(QUANTIZE))
def test_quantize_linear(case):
    _, x, scale, zp, attrs = case
    opset = 21 if zp.dtype in (np.int16, np.uint16) or "block_size" in attrs else 19
    model = node_model("QuantizeLinear", {"x": x}, consts={"s": np.asarray(scale), "zp": np.asarray(zp)}, attrs=attrs, opset=opset)
    check_against_cpu(model, {"x": x}, ["QuantizeLinear"])


def test_quantize_linear_default_zero_point():
    x = halves(4, 5, seed=20)
    model = node_model("QuantizeLinear", {"x": x}, consts={"s": np.float32(3.0)}, opset=13)
    check_against_cpu(model, {"x": x}, ["QuantizeLinear"])


@pytest.mark.parametrize("case", QUANTIZE, ids=ids(QUANTIZE))
def test_dequantize_linear(case):
    _, _, scale, zp, attrs = case
    info = np.iinfo(zp.dtype)
    shape = {"per-axis-1": (2, 3, 4), "per-axis-0": (2, 3), "per-axis-last": (2, 3), "blocked": (2, 6)}.get(case[0], (3, 4))
    x = rng(30).integers(info.min, info.max, shape, endpoint=True).astype(zp.dtype)
    opset = 21 if zp.dtype in (np.int16, np.uint16) or "block_size" in attrs else 19
    model = node_model("DequantizeLinear", {"x": x}, consts={"s": np.asarray(scale), "zp": np.asarray(zp)}, attrs=attrs, opset=opset)
    check_against_cpu(model, {"x": x}, ["DequantizeLinear"], rtol=0, atol=0)


def test_dequantize_linear_int32():
    x = rng(31).integers(-(2**20), 2**20, (3, 4)).astype(np.int32)
    model = node_model("DequantizeLinear", {"x": x}, consts={"s": np.float32(0.125)}, opset=13)
    check_against_cpu(model, {"x": x}, ["DequantizeLinear"], rtol=0, atol=0)


DYNAMIC = [
    ("mixed", rng(40).standard_normal((3, 5)).astype(np.float32) * 3),
    ("positive", rng(41).uniform(0.5, 7.0, (4, 4)).astype(np.float32)),
    ("negative", -rng(42).uniform(0.5, 7.0, (4, 4)).astype(np.float32)),
    ("zeros", np.zeros((2, 3), np.float32)),
]


@pytest.mark.parametrize("case", DYNAMIC, ids=ids(DYNAMIC))
def test_dynamic_quantize_linear(case):
    _, x = case
    model = node_model("DynamicQuantizeLinear", {"x": x}, n_outputs=3)
    check_against_cpu(model, {"x": x}, ["DynamicQuantizeLinear"], rtol=0, atol=0)



# ---------------------------------------------------------------------------
# Pow with an integer base: T(pow(double(x), double(y))), as ORT computes it

POW_INT = [
    ("int32-int32", rng(50).integers(-6, 7, (3, 4)).astype(np.int32), rng(51).integers(-2, 5, (3, 4)).astype(np.int32)),
    ("int64-int64", rng(52).integers(-9, 10, (5,)).astype(np.int64), rng(53).integers(0, 9, (5,)).astype(np.int64)),
    ("int32-float32", rng(54).integers(0, 9, (2, 3)).astype(np.int32), rng(55).uniform(-1.5, 3.5, (2, 3)).astype(np.float32)),
    ("int64-float32-broadcast", rng(56).integers(1, 20, (2, 3)).astype(np.int64), np.array([0.5], np.float32)),
]


@pytest.mark.parametrize("case", POW_INT, ids=ids(POW_INT))
def test_pow_integer_base_runtime_exponent(case):
    _, x, y = case
    check_against_cpu(node_model("Pow", {"x": x, "y": y}, opset=15), {"x": x, "y": y}, ["Pow"])


# ---------------------------------------------------------------------------
# Dropout's mask in inference mode, MaxPool on int8/uint8


@pytest.mark.parametrize("training_mode", [None, False], ids=["no-training-input", "constant-false"])
def test_dropout_mask(training_mode):
    x = rng(60).standard_normal((3, 4)).astype(np.float32)
    consts = {"r": np.array(0.3, np.float32)}
    if training_mode is not None:
        consts["t"] = np.array(training_mode)
    model = node_model("Dropout", {"x": x}, consts=consts, n_outputs=2, opset=13)
    check_against_cpu(model, {"x": x}, ["Dropout"])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_maxpool_integer(dtype):
    info = np.iinfo(dtype)
    x = rng(61).integers(info.min, info.max, (1, 2, 5, 5), endpoint=True).astype(dtype)
    model = node_model("MaxPool", {"x": x}, attrs={"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}, opset=12)
    check_against_cpu(model, {"x": x}, ["MaxPool"])


# ---------------------------------------------------------------------------
# BitCast: the bytes reinterpreted (mlx_view)

BITCAST = [
    ("float32-int32", np.array([1.0, -2.5, np.inf, -0.0, np.nan, 3e-40], np.float32), TensorProto.INT32, np.int32),
    ("int32-float32", rng(70).integers(-(2**31), 2**31 - 1, (2, 3), dtype=np.int64).astype(np.int32), TensorProto.FLOAT, np.float32),
    ("float64-int64", rng(71).standard_normal(5), TensorProto.INT64, np.int64),
    ("uint16-int16", rng(72).integers(0, 65535, (4,), endpoint=True).astype(np.uint16), TensorProto.INT16, np.int16),
    ("float16-uint16", rng(73).standard_normal(6).astype(np.float16), TensorProto.UINT16, np.uint16),
    ("int8-uint8", np.array([-128, -1, 0, 1, 127], np.int8), TensorProto.UINT8, np.uint8),
]


@needs_opset_26
@pytest.mark.parametrize("case", BITCAST, ids=ids(BITCAST))
def test_bitcast(case):
    from conftest import assert_on_mlx, make_session, run

    _, x, to, np_to = case
    session = make_session(node_model("BitCast", {"x": x}, attrs={"to": to}, opset=26))
    (y,) = run(session, {"x": x})
    assert y.dtype == np_to and y.shape == x.shape
    np.testing.assert_array_equal(y.view(np.uint8), np.ascontiguousarray(x).view(np.uint8))
    assert_on_mlx(session, ["BitCast"])
