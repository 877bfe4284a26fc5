"""Integer matmul and convolution (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv) on
the MLX EP against ORT's CPU EP: int32 and 8-bit outputs must be exactly equal, and the node
must run on MLX.

MLX accumulates in float32 chunks of at most 256 terms (exact) summed in int32; the large-K
cases use extreme values (0/255, -128/127) so that any inexact chunk would show.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from conftest import check_against_cpu
from models import graph_model, node_model

U8 = np.uint8
I8 = np.int8


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def q(shape, dtype, seed: int = 0, extreme: bool = False) -> np.ndarray:
    """Random 8-bit values; ``extreme`` draws only the type's minimum and maximum."""
    info = np.iinfo(dtype)
    g = rng(seed)
    if extreme:
        return np.where(g.random(shape) < 0.5, info.min, info.max).astype(dtype)
    return g.integers(info.min, int(info.max) + 1, size=shape).astype(dtype)


def ids(params) -> list[str]:
    return [p[0] for p in params]


# ---------------------------------------------------------------------------
# MatMulInteger

# (id, A, B, a_zero_point, b_zero_point, B as an initializer)
MATMUL_INTEGER = [
    ("u8u8-2d-no-zp", q((4, 16), U8), q((16, 5), U8, 1), None, None, False),
    ("u8u8-2d-scalar-zp", q((4, 16), U8), q((16, 5), U8, 1), np.array(128, U8), np.array(7, U8), False),
    ("u8u8-2d-1elem-zp", q((3, 8), U8), q((8, 2), U8, 1), np.array([3], U8), np.array([250], U8), False),
    ("u8i8-per-column-zp", q((4, 32), U8), q((32, 6), I8, 1), np.array(100, U8), q((6,), I8, 2), False),
    ("u8i8-const-b", q((4, 32), U8), q((32, 6), I8, 1), np.array(100, U8), np.array(-3, I8), True),
    ("i8i8-scalar-zp", q((5, 24), I8), q((24, 3), I8, 1), np.array(-5, I8), np.array(9, I8), False),
    ("i8i8-no-zp", q((5, 24), I8), q((24, 3), I8, 1), None, None, False),
    ("3d-by-2d", q((2, 3, 20), U8), q((20, 4), U8, 1), np.array(12, U8), np.array(200, U8), False),
    ("3d-by-3d", q((2, 3, 20), U8), q((2, 20, 4), I8, 1), np.array(12, U8), np.array(1, I8), False),
    ("4d-broadcast", q((2, 1, 3, 20), U8), q((1, 4, 20, 5), U8, 1), np.array(40, U8), np.array(60, U8), False),
    ("1d-a", q((20,), U8), q((20, 4), U8, 1), np.array(3, U8), None, False),
    ("k1000-extreme-u8", q((3, 1000), U8, extreme=True), q((1000, 4), U8, 1, extreme=True), np.array(0, U8), np.array(255, U8), False),
    ("k1000-all-max-u8", np.full((2, 1000), 255, U8), np.full((1000, 3), 255, U8), None, None, False),
    ("k1000-3d-per-column", q((2, 3, 1000), U8, extreme=True), q((1000, 4), I8, 1, extreme=True), np.array(255, U8), np.array([-128, 127, 0, 5], I8), False),
    ("k4096-extreme-i8", q((3, 4096), I8, extreme=True), q((4096, 5), I8, 1, extreme=True), np.array(127, I8), np.array(-128, I8), False),
    ("k4096-const-b-u8i8", q((2, 4096), U8, extreme=True), q((4096, 3), I8, 1, extreme=True), np.array(255, U8), np.array(127, I8), True),
]


@pytest.mark.parametrize("case", MATMUL_INTEGER, ids=ids(MATMUL_INTEGER))
def test_matmul_integer(case):
    _, a, b, azp, bzp, b_const = case
    feeds = {"A": a}
    consts = {}
    (consts if b_const else feeds)["B"] = b
    inputs = ["A", "B"]
    if azp is not None or bzp is not None:
        inputs.append("" if azp is None else "a_zp")
        if azp is not None:
            feeds["a_zp"] = azp
    if bzp is not None:
        inputs.append("b_zp")
        (consts if b_const else feeds)["b_zp"] = bzp
    model = node_model("MatMulInteger", feeds, consts=consts, node_inputs=inputs)
    [y] = check_against_cpu(model, feeds)
    assert y.dtype == np.int32


def test_matmul_integer_symbolic_batch():
    """Batch and M dims known only at run time; K is known."""
    a = q((2, 3, 300), U8, extreme=True)
    b = q((300, 4), U8, 1, extreme=True)
    feeds = {"A": a, "B": b, "a_zp": np.array(128, U8), "b_zp": np.array(128, U8)}
    model = node_model("MatMulInteger", feeds, symbolic=["A"])
    check_against_cpu(model, feeds)


def test_dynamic_quantized_matmul_block():
    """The block onnxruntime.quantization.quantize_dynamic writes for a MatMul: the activation
    quantized at run time, an int8 weight with its scale and zero point as initializers."""
    g = rng(3)
    x = (g.standard_normal((2, 7, 1024)) * 3).astype(np.float32)
    w = (g.standard_normal((1024, 16)) * 0.05).astype(np.float32)
    w_scale = np.float32(np.abs(w).max() / 127)
    w_q = np.clip(np.rint(w / w_scale), -127, 127).astype(I8)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["X"], ["xq", "xs", "xzp"], name="dql"),
        helper.make_node("MatMulInteger", ["xq", "W", "xzp", "w_zp"], ["acc"], name="mmi"),
        helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Mul", ["xs", "w_scale"], ["scale"], name="mul_scale"),
        helper.make_node("Mul", ["accf", "scale"], ["Y"], name="mul_out"),
    ]
    consts = {"W": w_q, "w_zp": np.array(0, I8), "w_scale": np.array(w_scale, np.float32)}
    model = graph_model(nodes, {"X": x}, ["Y"], consts=consts)
    check_against_cpu(model, {"X": x}, all_on_mlx=True)


# ---------------------------------------------------------------------------
# QLinearMatMul

# (id, A, B, a_scale, a_zp, b_scale, b_zp, y_scale, y_zp, opset)
QLINEAR_MATMUL = [
    ("u8u8", q((4, 16), U8), q((16, 5), U8, 1), 0.02, 128, 0.01, 120, 0.05, 100, 13),
    ("u8i8", q((4, 16), U8), q((16, 5), I8, 1), 0.02, 128, 0.01, 0, 0.05, 100, 13),
    ("i8i8", q((4, 16), I8), q((16, 5), I8, 1), 0.03, -3, 0.02, 2, 0.1, -10, 13),
    ("ties-half-even", q((6, 3), U8), q((3, 7), U8, 1), 1.0, 0, 0.5, 0, 1.0, 0, 13),
    ("saturating", q((4, 64), U8), q((64, 5), U8, 1), 1.0, 0, 1.0, 0, 0.5, 128, 13),
    ("3d-batched", q((2, 3, 40), U8), q((2, 40, 6), I8, 1), 0.01, 10, 0.02, 0, 0.3, 90, 13),
    ("4d-broadcast", q((2, 1, 3, 40), I8), q((3, 40, 6), I8, 1), 0.01, 1, 0.02, -1, 0.3, 5, 13),
    ("k1000-extreme", q((3, 1000), U8, extreme=True), q((1000, 4), U8, 1, extreme=True), 0.5, 0, 0.25, 255, 3000.0, 120, 13),
    ("k4096-i8", q((2, 4096), I8, extreme=True), q((4096, 3), I8, 1, extreme=True), 0.1, 127, 0.1, -128, 500.0, 0, 13),
    ("opset21", q((4, 16), U8), q((16, 5), U8, 1), 0.02, 128, 0.01, 120, 0.05, 100, 21),
]


@pytest.mark.parametrize("case", QLINEAR_MATMUL, ids=ids(QLINEAR_MATMUL))
def test_qlinear_matmul(case):
    _, a, b, a_s, a_zp, b_s, b_zp, y_s, y_zp, opset = case
    y_dt = I8 if a.dtype == I8 else U8
    feeds = {
        "A": a,
        "a_scale": np.array(a_s, np.float32),
        "a_zp": np.array(a_zp, a.dtype),
        "B": b,
        "b_scale": np.array(b_s, np.float32),
        "b_zp": np.array(b_zp, b.dtype),
        "y_scale": np.array(y_s, np.float32),
        "y_zp": np.array(y_zp, y_dt),
    }
    model = node_model("QLinearMatMul", feeds, opset=opset)
    check_against_cpu(model, feeds)


def test_qlinear_matmul_per_column_weight():
    """Per-column b_scale and b_zero_point ([N]) on a constant weight."""
    a = q((5, 300), U8, extreme=True)
    feeds = {"A": a, "a_scale": np.array(0.07, np.float32), "a_zp": np.array(131, U8)}
    consts = {
        "B": q((300, 4), I8, 1, extreme=True),
        "b_scale": np.array([0.01, 0.02, 0.5, 0.003], np.float32),
        "b_zp": np.zeros(4, I8),
        "y_scale": np.array(20.0, np.float32),
        "y_zp": np.array(128, U8),
    }
    names = ["A", "a_scale", "a_zp", "B", "b_scale", "b_zp", "y_scale", "y_zp"]
    model = node_model("QLinearMatMul", feeds, consts=consts, node_inputs=names)
    check_against_cpu(model, feeds)


# ---------------------------------------------------------------------------
# ConvInteger and QLinearConv

# (id, X shape, W shape, attrs, extreme)
CONVS = [
    ("3x3", (1, 3, 8, 8), (4, 3, 3, 3), {}, False),
    ("pads-strides", (2, 4, 9, 7), (5, 4, 3, 2), {"pads": [1, 0, 1, 1], "strides": [2, 1]}, False),
    ("dilations", (1, 2, 9, 9), (3, 2, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}, False),
    ("groups", (1, 4, 6, 6), (6, 2, 3, 3), {"group": 2}, False),
    ("depthwise", (1, 4, 6, 6), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}, False),
    ("1d", (2, 3, 10), (4, 3, 3), {}, False),
    ("64ch-chunked", (1, 64, 6, 6), (8, 64, 3, 3), {"pads": [1, 1, 1, 1]}, True),
    ("300ch-1x1-chunked", (1, 300, 4, 4), (5, 300, 1, 1), {}, True),
]


@pytest.mark.parametrize("case", CONVS, ids=ids(CONVS))
def test_conv_integer(case):
    _, xs, ws, attrs, extreme = case
    feeds = {"x": q(xs, U8, extreme=extreme), "w": q(ws, U8, 1, extreme=extreme), "x_zp": np.array(255 if extreme else 130, U8)}
    consts = {"w_zp": np.array(0 if extreme else 121, U8)}
    model = node_model("ConvInteger", feeds, consts=consts, node_inputs=["x", "w", "x_zp", "w_zp"], attrs=attrs)
    [y] = check_against_cpu(model, feeds)
    assert y.dtype == np.int32


@pytest.mark.parametrize("signed", [False, True], ids=["u8", "i8"])
@pytest.mark.parametrize("case", CONVS, ids=ids(CONVS))
def test_qlinear_conv(case, signed):
    _, xs, ws, attrs, extreme = case
    dt = I8 if signed else U8
    m = ws[0]
    g = rng(5)
    feeds = {"x": q(xs, dt, extreme=extreme)}
    consts = {
        "x_scale": np.array(0.05, np.float32),
        "x_zp": np.array(-3 if signed else 125, dt),
        "w": q(ws, I8, 1, extreme=extreme),
        "w_scale": (g.random(m) * 0.02 + 0.005).astype(np.float32),
        "w_zp": np.array(0, I8),
        "y_scale": np.array(0.4 if not extreme else 40.0, np.float32),
        "y_zp": np.array(7 if signed else 128, dt),
        "B": g.integers(-2000, 2000, size=m).astype(np.int32),
    }
    if not signed:
        # ORT's CPU QLinearConv with a uint8 input takes a uint8 or int8 weight; keep uint8
        # here so that both weight types are covered across the two parametrizations.
        consts["w"] = q(ws, U8, 1, extreme=extreme)
        consts["w_zp"] = np.array(128, U8)
    names = ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp", "B"]
    model = node_model("QLinearConv", feeds, consts=consts, node_inputs=names, attrs=attrs)
    check_against_cpu(model, feeds)
