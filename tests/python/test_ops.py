"""One tiny graph per op and variant: run on the MLX EP and on the CPU EP, compare (float32
within rtol = atol = 1e-4, integers and booleans exactly, same dtype and shape), and check
that the op's node ran on MLX (a node the EP declines would run on the CPU EP and still
match, so the placement check is what makes each test meaningful).

Data inputs are graph inputs, so ORT cannot constant-fold the node under test away; shape
arguments (Reshape's shape, Slice's starts, ...) are initializers, as exporters write them.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import (
    CPU_EP,
    assert_all_on_mlx,
    assert_on_mlx,
    check_against_cpu,
    check_node,
    make_session,
    run,
)
from models import graph_model, node_model

INT64_MIN = np.iinfo(np.int64).min
INT64_MAX = np.iinfo(np.int64).max


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def randn(*shape, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return np.asarray(rng(seed).standard_normal(shape) * scale, dtype=np.float32)


def randint(*shape, low: int = -20, high: int = 20, seed: int = 0, nonzero: bool = False) -> np.ndarray:
    values = np.asarray(rng(seed).integers(low, high + 1, size=shape, dtype=np.int64))
    if nonzero:
        values[values == 0] = 1
    return values


def ids(params) -> list[str]:
    return [p[0] for p in params]


# ---------------------------------------------------------------------------
# the placement check itself


def test_placement_check_detects_cpu_execution():
    """The placement assertions fail for a session that ran on the CPU EP: without this,
    every other test here could pass with the MLX EP declining everything."""
    model = node_model("Relu", {"X": randn(2, 3)})
    session = make_session(model, mlx=False, record_placement=True)
    run(session, {"X": randn(2, 3)})
    with pytest.raises(AssertionError, match=CPU_EP):
        assert_on_mlx(session, ["Relu"])
    with pytest.raises(AssertionError, match=CPU_EP):
        assert_all_on_mlx(session)


# ---------------------------------------------------------------------------
# indexing and data movement

GATHER = [
    ("axis0-2d-indices", randn(5, 4), np.array([[0, -1], [2, -5]], np.int64), 0),
    ("axis1-negative", randn(3, 5, 2, seed=1), np.array([-1, 0, 3, -2], np.int64), 1),
    ("axis-last-scalar-index", randn(3, 4, seed=2), np.array(-2, np.int64), -1),
    ("int64-data", randint(6, 3), np.array([-6, 5, 0], np.int64), 0),
]


@pytest.mark.parametrize("case", GATHER, ids=ids(GATHER))
def test_gather(case):
    _, data, indices, axis = case
    model = node_model("Gather", {"data": data, "indices": indices}, attrs={"axis": axis})
    check_against_cpu(model, {"data": data, "indices": indices}, ["Gather"])


def test_gather_constant_indices():
    data = randn(7, 3)
    indices = np.array([3, -1, -7, 0], np.int64)
    model = node_model("Gather", {"data": data}, consts={"indices": indices}, attrs={"axis": 0})
    check_against_cpu(model, {"data": data}, ["Gather"])


BINARY_SHAPES = [((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((1,), (2, 3)), ((2, 3), (2, 3)), ((), (3, 2))]
BINARY = [
    (f"{op}-{dtype}-{'x'.join(map(str, a)) or 'scalar'}-{'x'.join(map(str, b)) or 'scalar'}", op, dtype, a, b)
    for op in ("Add", "Mul", "Sub", "Div")
    for dtype in ("float32", "int64")
    for a, b in BINARY_SHAPES
]


@pytest.mark.parametrize("case", BINARY, ids=ids(BINARY))
def test_binary_arithmetic(case):
    _, op, dtype, shape_a, shape_b = case
    if dtype == "float32":
        a = randn(*shape_a, seed=1, scale=3.0)
        b = randn(*shape_b, seed=2, scale=3.0)
        if op == "Div":
            b = np.where(np.abs(b) < 0.5, 0.5 + np.abs(b), b).astype(np.float32)
    else:
        a = randint(*shape_a, seed=1)
        b = randint(*shape_b, low=-7, high=7, seed=2, nonzero=op == "Div")
    model = node_model(op, {"A": a, "B": b})
    check_against_cpu(model, {"A": a, "B": b}, [op])


def test_integer_div_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 1, -1, 0, 9], np.int64)
    b = np.array([2, 2, -2, -2, 3, 3, 5, -4], np.int64)
    model = node_model("Div", {"A": a, "B": b})
    (out,) = check_against_cpu(model, {"A": a, "B": b}, ["Div"])
    np.testing.assert_array_equal(out, np.array([3, -3, -3, 3, 0, 0, 0, -2], np.int64))


MATMUL = [
    ("2d", (3, 4), (4, 5)),
    ("batched", (2, 3, 4), (2, 4, 5)),
    ("broadcast-batch", (2, 1, 3, 4), (5, 4, 6)),
    ("broadcast-2d-rhs", (2, 3, 4), (4, 5)),
    ("1d-lhs", (4,), (4, 5)),
    ("1d-rhs", (3, 4), (4,)),
    ("1d-both", (4,), (4,)),
    ("1d-lhs-batched-rhs", (4,), (2, 4, 3)),
    ("batched-lhs-1d-rhs", (2, 3, 4), (4,)),
]


@pytest.mark.parametrize("case", MATMUL, ids=ids(MATMUL))
def test_matmul(case):
    _, shape_a, shape_b = case
    a, b = randn(*shape_a, seed=1), randn(*shape_b, seed=2)
    model = node_model("MatMul", {"A": a, "B": b})
    check_against_cpu(model, {"A": a, "B": b}, ["MatMul"])


def test_matmul_constant_weight():
    a, w = randn(2, 5, 8, seed=1), randn(8, 16, seed=2)
    model = node_model("MatMul", {"A": a}, consts={"W": w})
    check_against_cpu(model, {"A": a}, ["MatMul"])


GEMM = [
    ("plain-c-row", dict(), (5,)),
    ("transA-transB-alpha-beta-c-col", dict(transA=1, transB=1, alpha=0.5, beta=2.0), (3, 1)),
    ("transB-c-1xN", dict(transB=1), (1, 5)),
    ("transA-c-full", dict(transA=1, alpha=-1.5, beta=0.25), (3, 5)),
    ("c-scalar", dict(beta=3.0), ()),
    ("no-c", dict(alpha=2.0), None),
]


@pytest.mark.parametrize("case", GEMM, ids=ids(GEMM))
def test_gemm(case):
    _, attrs, c_shape = case
    m, k, n = 3, 4, 5
    a = randn(*((k, m) if attrs.get("transA") else (m, k)), seed=1)
    b = randn(*((n, k) if attrs.get("transB") else (k, n)), seed=2)
    consts = {"B": b}
    if c_shape is not None:
        consts["C"] = randn(*c_shape, seed=3)
    model = node_model("Gemm", {"A": a}, consts=consts, attrs=attrs)
    check_against_cpu(model, {"A": a}, ["Gemm"])


RESHAPE = [
    ("copy-dim-and-infer", (2, 3, 4), [0, -1], 0),
    ("flatten-all", (2, 3, 4), [-1], 0),
    ("middle-zero", (2, 3, 4), [4, 0, -1], 0),
    ("split-dims", (6, 4), [2, 3, 2, 2], 0),
    ("allowzero-no-zero", (2, 3, 4), [3, 8], 1),
    ("allowzero-empty", (0, 2, 2), [0, 4], 1),
]


@pytest.mark.parametrize("case", RESHAPE, ids=ids(RESHAPE))
def test_reshape(case):
    _, shape, target, allowzero = case
    x = randn(*shape)
    check_node("Reshape", {"X": x}, consts={"shape": np.array(target, np.int64)}, attrs={"allowzero": allowzero}, opset=14)


TRANSPOSE = [
    ("default-reverses", (2, 3, 4), None),
    ("perm-102", (2, 3, 4), [1, 0, 2]),
    ("perm-0231", (2, 3, 4, 5), [0, 2, 3, 1]),
    ("2d", (3, 7), [1, 0]),
]


@pytest.mark.parametrize("case", TRANSPOSE, ids=ids(TRANSPOSE))
def test_transpose(case):
    _, shape, perm = case
    x = randn(*shape)
    check_node("Transpose", {"X": x}, attrs={} if perm is None else {"perm": perm})


CONCAT = [
    ("axis-minus1", [(2, 3), (2, 1), (2, 4)], -1, "float32"),
    ("axis-minus3", [(1, 2, 3), (2, 2, 3)], -3, "float32"),
    ("axis1-int64", [(2, 2, 2), (2, 3, 2), (2, 1, 2)], 1, "int64"),
]


@pytest.mark.parametrize("case", CONCAT, ids=ids(CONCAT))
def test_concat(case):
    _, shapes, axis, dtype = case
    feeds = {f"X{i}": (randn(*s, seed=i) if dtype == "float32" else randint(*s, seed=i)) for i, s in enumerate(shapes)}
    model = node_model("Concat", feeds, attrs={"axis": axis})
    check_against_cpu(model, feeds, ["Concat"])


SLICE = [
    ("negative-end", [1], [-1], [1], None),
    ("clamped-ends", [0, 2], [1000, INT64_MAX], [0, 2], None),
    ("reverse-all", [-1], [INT64_MIN], [1], [-1]),
    ("negative-step-2-negative-axis", [5], [0], [-2], [-2]),
    ("step-2-last-axis", [0], [5], [-1], [2]),
    ("clamped-start-negative-step", [100], [-100], [2], [-3]),
    ("no-axes-input", [0, 1, 1], [2, 5, 4], None, None),
]


@pytest.mark.parametrize("case", SLICE, ids=ids(SLICE))
def test_slice(case):
    _, starts, ends, axes, steps = case
    x = randn(4, 6, 5)
    consts = {"starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64)}
    node_inputs = ["X", "starts", "ends"]
    if axes is not None or steps is not None:
        if axes is None:
            axes = list(range(len(starts)))
        consts["axes"] = np.array(axes, np.int64)
        node_inputs.append("axes")
    if steps is not None:
        consts["steps"] = np.array(steps, np.int64)
        node_inputs.append("steps")
    check_node("Slice", {"X": x}, consts=consts, node_inputs=node_inputs, opset=13)


SQUEEZE = [
    ("opset11-attr", 11, (2, 1, 3, 1), [1]),
    ("opset11-attr-negative", 11, (2, 1, 3, 1), [-1, 1]),
    ("opset13-input", 13, (2, 1, 3, 1), [-1, 1]),
    ("opset13-no-axes", 13, (1, 2, 1, 3), None),
]


@pytest.mark.parametrize("case", SQUEEZE, ids=ids(SQUEEZE))
def test_squeeze(case):
    _, opset, shape, axes = case
    x = randn(*shape)
    if axes is None:
        model = node_model("Squeeze", {"X": x}, opset=opset)
    elif opset < 13:
        model = node_model("Squeeze", {"X": x}, attrs={"axes": axes}, opset=opset)
    else:
        model = node_model("Squeeze", {"X": x}, consts={"axes": np.array(axes, np.int64)}, opset=opset)
    check_against_cpu(model, {"X": x}, ["Squeeze"])


UNSQUEEZE = [
    ("opset11-attr", 11, (2, 3), [0, 3]),
    ("opset11-attr-negative", 11, (2, 3), [-1]),
    ("opset13-input", 13, (2, 3), [1, -1]),
    ("opset13-scalar-to-1d", 13, (), [0]),
]


@pytest.mark.parametrize("case", UNSQUEEZE, ids=ids(UNSQUEEZE))
def test_unsqueeze(case):
    _, opset, shape, axes = case
    x = randn(*shape)
    if opset < 13:
        model = node_model("Unsqueeze", {"X": x}, attrs={"axes": axes}, opset=opset)
    else:
        model = node_model("Unsqueeze", {"X": x}, consts={"axes": np.array(axes, np.int64)}, opset=opset)
    check_against_cpu(model, {"X": x}, ["Unsqueeze"])


SHAPE = [
    ("full", {}),
    ("start-1", {"start": 1}),
    ("end-minus1", {"end": -1}),
    ("start-minus2-end-clamped", {"start": -2, "end": 10}),
    ("start-1-end-3", {"start": 1, "end": 3}),
]


@pytest.mark.parametrize("case", SHAPE, ids=ids(SHAPE))
def test_shape(case):
    _, attrs = case
    x = randn(2, 3, 4, 5)
    # symbolic dimensions: with static ones ORT would constant-fold the Shape node away
    check_node("Shape", {"X": x}, attrs=attrs, opset=15, symbolic=True)


CAST = [
    ("float-to-int64", np.array([[2.7, -2.7, 0.5], [-0.5, 100.2, -1e6]], np.float32), TensorProto.INT64),
    ("int64-to-float", np.array([[3, -4, 0], [1 << 20, -(1 << 20), 7]], np.int64), TensorProto.FLOAT),
    ("float-to-bool", np.array([[0.0, -0.0, 0.5], [-3.0, 1e-30, 2.0]], np.float32), TensorProto.BOOL),
    ("int64-to-bool", np.array([[0, 1, -1], [2, 0, 5]], np.int64), TensorProto.BOOL),
    ("bool-to-float", np.array([[True, False, True], [False, False, True]]), TensorProto.FLOAT),
    ("float-to-int32", np.array([[1.9, -1.9, 40000.5]], np.float32), TensorProto.INT32),
]


@pytest.mark.parametrize("case", CAST, ids=ids(CAST))
def test_cast(case):
    _, x, to = case
    check_node("Cast", {"X": x}, attrs={"to": to}, opset=13)


SOFTMAX = [
    ("opset11-3d-axis1-coerced-2d", 11, (2, 3, 4), {"axis": 1}),
    ("opset11-default-axis", 11, (2, 3, 4), {}),
    ("opset11-last-axis", 11, (2, 3, 4), {"axis": -1}),
    ("opset13-axis1", 13, (2, 3, 4), {"axis": 1}),
    ("opset13-default-axis", 13, (2, 3, 4), {}),
    ("opset13-4d-axis2", 13, (2, 3, 4, 5), {"axis": 2}),
]


@pytest.mark.parametrize("case", SOFTMAX, ids=ids(SOFTMAX))
def test_softmax(case):
    _, opset, shape, attrs = case
    x = randn(*shape, scale=3.0)
    check_node("Softmax", {"X": x}, attrs=attrs, opset=opset)


# ---------------------------------------------------------------------------
# elementwise math

UNARY = [
    ("Erf", lambda: randn(3, 4, 5, scale=2.0)),
    ("Tanh", lambda: randn(3, 4, 5, scale=3.0)),
    ("Sqrt", lambda: rng(1).uniform(0.0, 9.0, (3, 4, 5)).astype(np.float32)),
    ("Sigmoid", lambda: randn(3, 4, 5, scale=6.0)),
    ("Relu", lambda: randn(3, 4, 5)),
]


@pytest.mark.parametrize("case", UNARY, ids=ids(UNARY))
def test_unary(case):
    op, make_input = case
    x = make_input()
    model = node_model(op, {"X": x})
    check_against_cpu(model, {"X": x}, [op])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    x = randn(2, 8, 16, scale=3.0)
    check_node("Gelu", {"X": x}, attrs={"approximate": approximate}, opset=20)


POW = [
    ("tensor-exponent-broadcast", None),
    ("square", np.array(2.0, np.float32)),
    ("square-root", np.array(0.5, np.float32)),
    ("negative-exponent", np.array(-1.5, np.float32)),
    ("int64-exponent", np.array([2, 3, -1, 0], np.int64)),
]


@pytest.mark.parametrize("case", POW, ids=ids(POW))
def test_pow(case):
    _, exponent = case
    base = rng(1).uniform(0.5, 2.0, (3, 4)).astype(np.float32)
    if exponent is None:
        e = rng(2).uniform(-2.0, 2.0, (4,)).astype(np.float32)
        model = node_model("Pow", {"X": base, "E": e})
        feeds = {"X": base, "E": e}
    else:
        model = node_model("Pow", {"X": base}, consts={"E": exponent})
        feeds = {"X": base}
    check_against_cpu(model, feeds, ["Pow"])


REDUCE_MEAN = [
    ("opset13-attr-keepdims1", 13, [1], 1),
    ("opset13-attr-keepdims0", 13, [0, 2], 0),
    ("opset13-attr-negative", 13, [-1], 1),
    ("opset13-all-axes-keepdims0", 13, None, 0),
    ("opset18-input-keepdims1", 18, [-1], 1),
    ("opset18-input-keepdims0", 18, [1, 2], 0),
    ("opset18-no-axes-keepdims1", 18, None, 1),
]


@pytest.mark.parametrize("case", REDUCE_MEAN, ids=ids(REDUCE_MEAN))
def test_reduce_mean(case):
    _, opset, axes, keepdims = case
    x = randn(2, 3, 4)
    attrs = {"keepdims": keepdims}
    consts = {}
    if axes is not None:
        if opset < 18:
            attrs["axes"] = axes
        else:
            consts["axes"] = np.array(axes, np.int64)
    check_node("ReduceMean", {"X": x}, consts=consts, attrs=attrs, opset=opset)


LAYER_NORM = [
    ("axis-minus1", -1, True),
    ("axis1", 1, True),
    ("axis-minus1-no-bias", -1, False),
]


@pytest.mark.parametrize("case", LAYER_NORM, ids=ids(LAYER_NORM))
def test_layer_normalization(case):
    _, axis, with_bias = case
    x = randn(2, 3, 4, scale=2.0) + 1.0
    norm_shape = x.shape[axis:]
    consts = {"scale": randn(*norm_shape, seed=1)}
    if with_bias:
        consts["bias"] = randn(*norm_shape, seed=2)
    check_node("LayerNormalization", {"X": x}, consts=consts, attrs={"axis": axis, "epsilon": 1e-5})


WHERE = [
    ("float-broadcast", "float32"),
    ("int64-broadcast", "int64"),
]


@pytest.mark.parametrize("case", WHERE, ids=ids(WHERE))
def test_where(case):
    _, dtype = case
    cond = rng(3).integers(0, 2, (2, 1, 4)).astype(bool)
    if dtype == "float32":
        x, y = randn(3, 1, seed=1), randn(2, 3, 4, seed=2)
    else:
        x, y = randint(3, 1, seed=1), randint(2, 3, 4, seed=2)
    feeds = {"C": cond, "X": x, "Y_in": y}
    model = node_model("Where", feeds)
    check_against_cpu(model, feeds, ["Where"])


EQUAL = [
    ("float-broadcast", np.array([[1.0, 2.0, 3.0], [4.0, 2.0, -0.0]], np.float32), np.array([2.0, 2.0, 0.0], np.float32)),
    ("int64", np.array([[1, 5, -3], [7, 5, 0]], np.int64), np.array([[1, 4, -3], [7, 5, 1]], np.int64)),
    ("int64-scalar", np.array([0, 1, 0, 2], np.int64), np.array(0, np.int64)),
]


@pytest.mark.parametrize("case", EQUAL, ids=ids(EQUAL))
def test_equal(case):
    _, a, b = case
    model = node_model("Equal", {"A": a, "B": b})
    check_against_cpu(model, {"A": a, "B": b}, ["Equal"])


EXPAND = [
    ("grow-rank", (3, 1), [2, 3, 4], "float32"),
    ("bidirectional", (1, 4), [3, 1], "float32"),
    ("ones-in-shape", (2, 1, 5), [1, 3, 1], "float32"),
    ("int64", (3, 1), [2, 3, 4], "int64"),
]


@pytest.mark.parametrize("case", EXPAND, ids=ids(EXPAND))
def test_expand(case):
    _, shape, target, dtype = case
    x = randn(*shape) if dtype == "float32" else randint(*shape)
    check_node("Expand", {"X": x}, consts={"shape": np.array(target, np.int64)})


CONSTANT_OF_SHAPE = [
    ("default-float-zero", None),
    ("float-value", helper.make_tensor("value", TensorProto.FLOAT, [1], [2.5])),
    ("int64-value", helper.make_tensor("value", TensorProto.INT64, [1], [7])),
]


@pytest.mark.parametrize("case", CONSTANT_OF_SHAPE, ids=ids(CONSTANT_OF_SHAPE))
def test_constant_of_shape_from_shape(case):
    _, value = case
    x = randn(2, 3, 4)
    attrs = {} if value is None else {"value": value}
    nodes = [
        helper.make_node("Shape", ["X"], ["s"], name="shape_0"),
        helper.make_node("ConstantOfShape", ["s"], ["Y"], name="constantofshape_0", **attrs),
    ]
    model = graph_model(nodes, {"X": x}, ["Y"], symbolic=True)
    check_against_cpu(model, {"X": x}, ["Shape", "ConstantOfShape"])


def test_constant_of_shape_from_input():
    shape = np.array([2, 3, 4], np.int64)
    value = helper.make_tensor("value", TensorProto.FLOAT, [1], [-1.25])
    model = node_model("ConstantOfShape", {"shape": shape}, attrs={"value": value})
    check_against_cpu(model, {"shape": shape}, ["ConstantOfShape"])


# ---------------------------------------------------------------------------
# convolution and pooling

CONV = [
    ("3x3-bias", (1, 4, 9, 9), (6, 4, 3, 3), dict(), True),
    ("pads-strides-no-bias", (1, 4, 9, 9), (6, 4, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2]), False),
    ("asymmetric-pads", (2, 4, 8, 7), (3, 4, 3, 3), dict(pads=[0, 1, 2, 1]), True),
    ("dilations", (1, 4, 11, 11), (5, 4, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2]), True),
    ("groups-2", (1, 4, 8, 8), (6, 2, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), True),
    ("depthwise", (1, 4, 8, 8), (4, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1]), True),
    ("depthwise-multiplier-2", (1, 4, 8, 8), (8, 1, 3, 3), dict(group=4), False),
    ("auto-pad-same-upper-stride2", (1, 3, 8, 8), (4, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2]), True),
    ("auto-pad-same-upper-even-kernel", (1, 3, 7, 7), (4, 3, 2, 2), dict(auto_pad="SAME_UPPER"), False),
    ("1x1", (2, 8, 5, 5), (4, 8, 1, 1), dict(), True),
    ("rect-kernel-strides", (1, 3, 10, 9), (4, 3, 3, 2), dict(strides=[2, 3], pads=[1, 0, 1, 0]), True),
]


@pytest.mark.parametrize("case", CONV, ids=ids(CONV))
def test_conv(case):
    _, x_shape, w_shape, attrs, with_bias = case
    x = randn(*x_shape)
    consts = {"W": randn(*w_shape, seed=1, scale=0.5)}
    if with_bias:
        consts["B"] = randn(w_shape[0], seed=2)
    check_node("Conv", {"X": x}, consts=consts, attrs=attrs)


BATCH_NORM = [
    ("nchw", (2, 3, 4, 5)),
    ("nc", (4, 3)),
    ("ncl", (2, 3, 7)),
]


@pytest.mark.parametrize("case", BATCH_NORM, ids=ids(BATCH_NORM))
def test_batch_normalization(case):
    _, shape = case
    c = shape[1]
    x = randn(*shape, scale=2.0)
    consts = {
        "scale": randn(c, seed=1),
        "bias": randn(c, seed=2),
        "mean": randn(c, seed=3),
        "var": rng(4).uniform(0.5, 2.0, c).astype(np.float32),
    }
    check_node("BatchNormalization", {"X": x}, consts=consts, attrs={"epsilon": 1e-5}, opset=15)


CLIP = [
    ("opset6-attrs", 6, {"min": -0.5, "max": 0.5}, None, None),
    ("opset13-inputs", 13, {}, np.array(-0.5, np.float32), np.array(0.75, np.float32)),
    ("opset13-min-only", 13, {}, np.array(0.0, np.float32), None),
    ("opset13-max-only", 13, {}, None, np.array(0.25, np.float32)),
    ("opset13-int64", 13, {}, np.array(-3, np.int64), np.array(4, np.int64)),
]


@pytest.mark.parametrize("case", CLIP, ids=ids(CLIP))
def test_clip(case):
    name, opset, attrs, lo, hi = case
    x = randint(3, 4) if "int64" in name else randn(3, 4)
    consts, node_inputs = {}, ["X"]
    if opset >= 11:
        if lo is not None:
            consts["min"] = lo
        if hi is not None:
            consts["max"] = hi
        node_inputs += ["min" if lo is not None else "", "max" if hi is not None else ""]
        while node_inputs[-1] == "":
            node_inputs.pop()
    check_node("Clip", {"X": x}, consts=consts, node_inputs=node_inputs, attrs=attrs, opset=opset)


MAX_POOL = [
    ("k3-s2-pads1", (1, 2, 9, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("k2-s2", (2, 3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("k3-s2-ceil", (1, 2, 8, 8), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("k3-s1-asymmetric-pads", (1, 2, 6, 7), dict(kernel_shape=[3, 3], pads=[0, 1, 2, 1])),
    ("negative-inputs-padded", (1, 1, 5, 5), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
]


@pytest.mark.parametrize("case", MAX_POOL, ids=ids(MAX_POOL))
def test_max_pool(case):
    name, shape, attrs = case
    x = randn(*shape)
    if name.startswith("negative"):
        x = -np.abs(x) - 1.0  # padding must never win the max
    check_node("MaxPool", {"X": x}, attrs=attrs, opset=12)


AVERAGE_POOL = [
    ("k3-s2-pads1-exclude-pad", (1, 2, 9, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=0)),
    ("k3-s2-pads1-include-pad", (1, 2, 9, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("k2-s2", (2, 3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("asymmetric-pads-include-pad", (1, 2, 6, 7), dict(kernel_shape=[3, 2], pads=[0, 1, 2, 0], count_include_pad=1)),
]


@pytest.mark.parametrize("case", AVERAGE_POOL, ids=ids(AVERAGE_POOL))
def test_average_pool(case):
    _, shape, attrs = case
    x = randn(*shape)
    check_node("AveragePool", {"X": x}, attrs=attrs, opset=11)


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 8, 1, 1), (2, 4, 9)], ids=["nchw", "1x1", "ncl"])
def test_global_average_pool(shape):
    x = randn(*shape)
    check_node("GlobalAveragePool", {"X": x})


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_flatten(axis):
    x = randn(2, 3, 4, 5)
    check_node("Flatten", {"X": x}, attrs={"axis": axis})


RESIZE_MODES = [
    ("half_pixel", "round_prefer_floor"),
    ("half_pixel", "round_prefer_ceil"),
    ("asymmetric", "floor"),
    ("align_corners", "round_prefer_ceil"),
    ("pytorch_half_pixel", "ceil"),
    ("half_pixel", "floor"),
    ("asymmetric", "round_prefer_ceil"),
]
# tf_half_pixel_for_nearest is left out: ORT's CPU EP, the reference, rejects it
# ("coordinate_transform_mode:[tf_half_pixel_for_nearest] is not supported!").
# Input 4x5. Some targets keep every source coordinate clear of rounding boundaries, some land
# exactly on them: with power-of-two scales exactly in any arithmetic (the 0.5 ties tell
# round_prefer_floor from round_prefer_ceil), with others (1.5 / 0.6 - 0.5 = 2, sizes 9 / 5)
# only in ORT's float32 formula, x_original = (x + 0.5f) / scale - 0.5f with
# scale = (float)out / (float)in for sizes, which an EP must reproduce to agree with ORT.
RESIZE_TARGETS = [
    ("scales-up-2x2", "scales", [1.0, 1.0, 2.0, 2.0]),
    ("scales-down-0.5x0.5-ties", "scales", [1.0, 1.0, 0.5, 0.5]),
    ("scales-up-1.7x1.3", "scales", [1.0, 1.0, 1.7, 1.3]),
    ("scales-down-0.7x0.55", "scales", [1.0, 1.0, 0.7, 0.55]),
    ("scales-up-2x1.5-boundaries", "scales", [1.0, 1.0, 2.0, 1.5]),
    ("scales-down-0.5x0.6-boundaries", "scales", [1.0, 1.0, 0.5, 0.6]),
    ("sizes-up-8x10", "sizes", [1, 2, 8, 10]),
    ("sizes-down-2x5", "sizes", [1, 2, 2, 5]),
    ("sizes-up-7x9-boundaries", "sizes", [1, 2, 7, 9]),
    ("sizes-down-3x2-boundaries", "sizes", [1, 2, 3, 2]),
]
RESIZE = [
    (f"{target}-{ctm}-{nearest}", ctm, nearest, kind, values)
    for ctm, nearest in RESIZE_MODES
    for target, kind, values in RESIZE_TARGETS
]


@pytest.mark.parametrize("case", RESIZE, ids=ids(RESIZE))
def test_resize_nearest(case):
    _, ctm, nearest, kind, values = case
    x = randn(1, 2, 4, 5)
    attrs = {"mode": "nearest", "coordinate_transformation_mode": ctm, "nearest_mode": nearest}
    if kind == "scales":
        consts = {"scales": np.array(values, np.float32)}
        node_inputs = ["X", "", "scales"]
    else:
        consts = {"sizes": np.array(values, np.int64)}
        node_inputs = ["X", "", "", "sizes"]
    check_node("Resize", {"X": x}, consts=consts, node_inputs=node_inputs, attrs=attrs, opset=13)


PAD_GATHER = [
    # (mode, shape, pads (ONNX order: all begins then all ends), axes or None, pads as a feed)
    ("reflect", (2, 3, 4), [0, 1, 2, 0, 2, 3], None, False),
    ("wrap", (2, 3, 4), [0, 3, 2, 1, 0, 4], None, False),
    ("reflect", (1, 3, 5, 6), [2, 5, 1, 3], [-2, -1], False),
    ("wrap", (3, 4), [1, 2, 2, 1], None, True),
    ("wrap", (2, 3), [3, 7, 2, 5], None, True),
    ("reflect", (4, 2), [3, 1, 0, 1], None, True),
]


#: ORT's CPU EP before 1.31 reads past the input for pads wider than the axis (wrap) and does
#: not reject over-wide reflect pads; there the reference is numpy's np.pad.
ORT_PAD_CHECKS = tuple(int(p) for p in ort.__version__.split(".")[:2]) >= (1, 31)


@pytest.mark.parametrize("case", PAD_GATHER, ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}{'-feed' if c[4] else ''}" for c in PAD_GATHER])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_pad_reflect_and_wrap(case, dtype):
    mode, shape, pads, axes, pads_as_feed = case
    x = (randn(*shape) * 10).astype(dtype)
    feeds = {"X": x}
    consts = {}
    if pads_as_feed:
        feeds["pads"] = np.array(pads, np.int64)
    else:
        consts["pads"] = np.array(pads, np.int64)
    inputs = ["X", "pads"]
    if axes is not None:
        consts["axes"] = np.array(axes, np.int64)
        inputs += ["", "axes"]
    model = node_model("Pad", feeds, consts=consts, node_inputs=inputs, attrs={"mode": mode}, opset=19)
    ranks = [a % len(shape) for a in axes] if axes is not None else list(range(len(shape)))
    widths = [(0, 0)] * len(shape)
    for i, a in enumerate(ranks):
        widths[a] = (pads[i], pads[len(ranks) + i])
    session = make_session(model, mlx=True)
    np.testing.assert_array_equal(run(session, feeds)[0], np.pad(x, widths, mode=mode))
    assert_on_mlx(session, ["Pad"])
    if ORT_PAD_CHECKS or all(lo <= d and hi <= d for (lo, hi), d in zip(widths, shape)):
        check_against_cpu(model, feeds, ["Pad"])


def test_pad_reflect_too_wide_is_an_error():
    """A reflect pad as wide as the dimension is an error on the MLX EP (ORT's CPU EP rejects
    it too from 1.31), not values read from outside the input."""
    feeds = {"X": randn(2, 3), "pads": np.array([0, 3, 0, 0], np.int64)}
    model = node_model("Pad", feeds, attrs={"mode": "reflect"}, opset=19)
    with pytest.raises(Exception, match="reflect"):
        run(make_session(model, mlx=True), feeds)
    if ORT_PAD_CHECKS:
        with pytest.raises(Exception, match="reflect"):
            run(make_session(model, mlx=False), feeds)
