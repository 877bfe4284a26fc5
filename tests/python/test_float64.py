"""float64 on the MLX EP: every op whose float64 form the EP claims (``FLOAT64_OPS`` in
crates/plan/src/registry.rs) must run on MLX *and* compute in float64. MLX computes float64
on its CPU backend only, and some of its float64 kernels (exp, sin, cos, erf, ...) evaluate a
float32 polynomial, about 1e-7 off: such an op must stay on ORT. So each case compares with a
numpy float64 reference at rtol 1e-12 (a float32 computation misses it by five orders of
magnitude) and checks placement.

The second group checks the other side: ops whose float64 kernels are float32-accurate are
declined for float64 (and so run exactly on ORT's CPU EP).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

from conftest import assert_on_cpu, assert_on_mlx, make_session, run
from models import node_model

RTOL, ATOL = 1e-12, 1e-14


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def randn(*shape, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return rng(seed).standard_normal(shape) * scale


def uniform(lo: float, hi: float, *shape, seed: int = 0) -> np.ndarray:
    return rng(seed).uniform(lo, hi, shape)


def f32(v: float) -> float:
    """A float attribute as ONNX stores it (float32), widened."""
    return float(np.float32(v))


X = randn(3, 4, 5)
POS = uniform(0.1, 4.0, 3, 4, 5)
UNIT = uniform(-0.95, 0.95, 3, 4, 5)
Y = randn(3, 4, 5, seed=1)
erf = np.vectorize(math.erf)


def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def conv2d(x, w, b=None, pads=(0, 0, 0, 0), strides=(1, 1)):
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // strides[0] + 1, (wd - kw) // strides[1] + 1
    y = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, :, i * strides[0] : i * strides[0] + kh, j * strides[1] : j * strides[1] + kw]
            y[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    if b is not None:
        y += b[None, :, None, None]
    return y


def pool2d(x, k, reduce):
    n, c, h, w = x.shape
    y = np.zeros((n, c, h - k + 1, w - k + 1))
    for i in range(h - k + 1):
        for j in range(w - k + 1):
            y[:, :, i, j] = reduce(x[:, :, i : i + k, j : j + k], axis=(2, 3))
    return y


def layer_norm(x, scale, bias, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


IMG = randn(1, 2, 5, 5, seed=3)
KERNEL = randn(3, 2, 3, 3, seed=4)
BIAS = randn(3, seed=5)
SCALE5 = randn(5, seed=6)
TARGET = rng(7).integers(0, 4, (3, 5)).astype(np.int64)


def log_softmax(x, axis):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def nll(lp, t, w, ignore, reduction="mean"):
    """NegativeLogLikelihoodLoss over [N, C, d] log-probabilities (ORT's mean: divided by the
    summed weights of the non-ignored targets)."""
    keep = np.ones(t.shape, bool) if ignore is None else t != ignore
    safe = np.where(keep, t, 0)
    picked = np.take_along_axis(lp, safe[:, None], axis=1)[:, 0]
    wt = (np.ones(lp.shape[1]) if w is None else w)[safe] * keep
    loss = -picked * wt
    return np.array(loss.sum() if reduction == "sum" else loss.sum() / wt.sum())
BIAS5 = randn(5, seed=7)
CHAN = randn(2, seed=8)
MEAN2 = randn(2, seed=9)
VAR2 = uniform(0.5, 2.0, 2, seed=10)

# (id, op, feeds, consts, attrs, reference(feeds, consts) -> outputs)
CLAIMED = [
    # elementwise arithmetic, comparisons, selection
    ("Add", "Add", {"A": X, "B": Y}, {}, {}, lambda f, c: [f["A"] + f["B"]]),
    ("Sub", "Sub", {"A": X, "B": Y}, {}, {}, lambda f, c: [f["A"] - f["B"]]),
    ("Mul", "Mul", {"A": X, "B": Y}, {}, {}, lambda f, c: [f["A"] * f["B"]]),
    ("Div", "Div", {"A": X, "B": POS}, {}, {}, lambda f, c: [f["A"] / f["B"]]),
    ("Pow", "Pow", {"A": POS, "B": Y}, {}, {}, lambda f, c: [np.power(f["A"], f["B"])]),
    ("Max", "Max", {"A": X, "B": Y}, {}, {}, lambda f, c: [np.maximum(f["A"], f["B"])]),
    ("Min", "Min", {"A": X, "B": Y}, {}, {}, lambda f, c: [np.minimum(f["A"], f["B"])]),
    ("Sum", "Sum", {"A": X, "B": Y}, {}, {}, lambda f, c: [f["A"] + f["B"]]),
    ("Mean", "Mean", {"A": X, "B": Y}, {}, {}, lambda f, c: [(f["A"] + f["B"]) / 2]),
    ("Equal", "Equal", {"A": X, "B": np.where(Y > 0, X, Y)}, {}, {}, lambda f, c: [f["A"] == f["B"]]),
    ("Less", "Less", {"A": X, "B": Y}, {}, {}, lambda f, c: [f["A"] < f["B"]]),
    ("Greater", "Greater", {"A": X, "B": Y}, {}, {}, lambda f, c: [f["A"] > f["B"]]),
    ("LessOrEqual", "LessOrEqual", {"A": X, "B": Y}, {}, {}, lambda f, c: [f["A"] <= f["B"]]),
    ("GreaterOrEqual", "GreaterOrEqual", {"A": X, "B": Y}, {}, {}, lambda f, c: [f["A"] >= f["B"]]),
    ("Where", "Where", {"C": X > 0, "A": X, "B": Y}, {}, {}, lambda f, c: [np.where(f["C"], f["A"], f["B"])]),
    ("Mod-fmod", "Mod", {"A": X * 7, "B": np.where(Y > 0, POS, -POS)}, {}, {"fmod": 1}, lambda f, c: [np.fmod(f["A"], f["B"])]),
    ("Mod-fmod-large-quotient", "Mod", {"A": np.array([1e300, -3e17, 7.5, -0.0]), "B": np.array([3.3, 0.7, -2.0, 5.0])}, {}, {"fmod": 1},
     lambda f, c: [np.fmod(f["A"], f["B"])]),
    ("Clip", "Clip", {"X": X}, {"lo": np.array(-0.5), "hi": np.array(0.7)}, {}, lambda f, c: [np.clip(f["X"], -0.5, 0.7)]),
    # unary math and activations
    ("Abs", "Abs", {"X": X}, {}, {}, lambda f, c: [np.abs(f["X"])]),
    ("Neg", "Neg", {"X": X}, {}, {}, lambda f, c: [-f["X"]]),
    ("Sign", "Sign", {"X": np.round(X)}, {}, {}, lambda f, c: [np.sign(f["X"])]),
    ("Sqrt", "Sqrt", {"X": POS}, {}, {}, lambda f, c: [np.sqrt(f["X"])]),
    ("Reciprocal", "Reciprocal", {"X": POS}, {}, {}, lambda f, c: [1 / f["X"]]),
    ("Floor", "Floor", {"X": X * 3}, {}, {}, lambda f, c: [np.floor(f["X"])]),
    ("Ceil", "Ceil", {"X": X * 3}, {}, {}, lambda f, c: [np.ceil(f["X"])]),
    ("Round", "Round", {"X": np.round(X * 4) / 2}, {}, {}, lambda f, c: [np.round(f["X"])]),
    ("Relu", "Relu", {"X": X}, {}, {}, lambda f, c: [np.maximum(f["X"], 0)]),
    ("LeakyRelu", "LeakyRelu", {"X": X}, {}, {"alpha": 0.1}, lambda f, c: [np.where(f["X"] >= 0, f["X"], f["X"] * f32(0.1))]),
    ("PRelu", "PRelu", {"X": X, "S": Y[0, 0]}, {}, {}, lambda f, c: [np.where(f["X"] >= 0, f["X"], f["X"] * f["S"])]),
    ("HardSigmoid", "HardSigmoid", {"X": X * 3}, {}, {}, lambda f, c: [np.clip(f["X"] * f32(0.2) + 0.5, 0, 1)]),
    ("HardSwish", "HardSwish", {"X": X * 3}, {}, {}, lambda f, c: [f["X"] * np.clip(f["X"] / 6 + 0.5, 0, 1)]),
    ("ThresholdedRelu", "ThresholdedRelu", {"X": X}, {}, {"alpha": 0.5}, lambda f, c: [np.where(f["X"] > 0.5, f["X"], 0)]),
    ("Elu", "Elu", {"X": X}, {}, {"alpha": 0.5}, lambda f, c: [np.where(f["X"] < 0, f32(0.5) * np.expm1(f["X"]), f["X"])]),
    ("Exp", "Exp", {"X": np.concatenate([X.ravel() * 30, [-745.0, -700.0, 709.0, 800.0, -np.inf, np.inf, 0.0]])}, {}, {}, lambda f, c: [np.exp(f["X"])]),
    ("Log", "Log", {"X": POS}, {}, {}, lambda f, c: [np.log(f["X"])]),
    ("Tanh", "Tanh", {"X": X}, {}, {}, lambda f, c: [np.tanh(f["X"])]),
    ("Tan", "Tan", {"X": UNIT}, {}, {}, lambda f, c: [np.tan(f["X"])]),
    ("Asin", "Asin", {"X": UNIT}, {}, {}, lambda f, c: [np.arcsin(f["X"])]),
    ("Acos", "Acos", {"X": UNIT}, {}, {}, lambda f, c: [np.arccos(f["X"])]),
    ("Atan", "Atan", {"X": X}, {}, {}, lambda f, c: [np.arctan(f["X"])]),
    ("Sinh", "Sinh", {"X": X}, {}, {}, lambda f, c: [np.sinh(f["X"])]),
    ("Cosh", "Cosh", {"X": X}, {}, {}, lambda f, c: [np.cosh(f["X"])]),
    ("Asinh", "Asinh", {"X": X}, {}, {}, lambda f, c: [np.arcsinh(f["X"])]),
    ("Acosh", "Acosh", {"X": POS + 1}, {}, {}, lambda f, c: [np.arccosh(f["X"])]),
    ("Atanh", "Atanh", {"X": UNIT}, {}, {}, lambda f, c: [np.arctanh(f["X"])]),
    ("Softsign", "Softsign", {"X": X}, {}, {}, lambda f, c: [f["X"] / (1 + np.abs(f["X"]))]),
    ("IsNaN", "IsNaN", {"X": np.where(X > 1, np.nan, X)}, {}, {}, lambda f, c: [np.isnan(f["X"])]),
    ("IsInf", "IsInf", {"X": np.where(X > 1, np.inf, np.where(X < -1, -np.inf, X))}, {}, {}, lambda f, c: [np.isinf(f["X"])]),
    # reductions
    ("ReduceSum", "ReduceSum", {"X": X}, {"axes": np.array([1], np.int64)}, {}, lambda f, c: [f["X"].sum(axis=1, keepdims=True)]),
    ("ReduceMean", "ReduceMean", {"X": X}, {}, {"axes": [0, 2]}, lambda f, c: [f["X"].mean(axis=(0, 2), keepdims=True)]),
    ("ReduceMax", "ReduceMax", {"X": X}, {}, {"axes": [2], "keepdims": 0}, lambda f, c: [f["X"].max(axis=2)]),
    ("ReduceMin", "ReduceMin", {"X": X}, {}, {"axes": [1]}, lambda f, c: [f["X"].min(axis=1, keepdims=True)]),
    ("ReduceProd", "ReduceProd", {"X": X}, {}, {"axes": [1]}, lambda f, c: [f["X"].prod(axis=1, keepdims=True)]),
    ("ReduceL1", "ReduceL1", {"X": X}, {}, {"axes": [1]}, lambda f, c: [np.abs(f["X"]).sum(axis=1, keepdims=True)]),
    ("ReduceL2", "ReduceL2", {"X": X}, {}, {"axes": [1]}, lambda f, c: [np.sqrt((f["X"] ** 2).sum(axis=1, keepdims=True))]),
    ("ReduceLogSum", "ReduceLogSum", {"X": POS}, {}, {"axes": [1]}, lambda f, c: [np.log(f["X"].sum(axis=1, keepdims=True))]),
    ("ReduceLogSumExp", "ReduceLogSumExp", {"X": X * 300}, {}, {"axes": [1], "keepdims": 0},
     lambda f, c: [np.log(np.exp(f["X"] - f["X"].max(axis=1, keepdims=True)).sum(axis=1)) + f["X"].max(axis=1)]),
    ("ReduceLogSumExp-inf", "ReduceLogSumExp", {"X": np.array([[-np.inf, -np.inf], [np.inf, 1.0], [-np.inf, 2.0]])}, {}, {"axes": [1]},
     lambda f, c: [np.array([[-np.inf], [np.inf], [2.0]])]),
    ("ReduceLogSumExp-empty", "ReduceLogSumExp", {"X": np.zeros((2, 0, 3))}, {}, {"axes": [1]}, lambda f, c: [np.full((2, 1, 3), -np.inf)]),
    ("ReduceSumSquare", "ReduceSumSquare", {"X": X}, {}, {"axes": [1]}, lambda f, c: [(f["X"] ** 2).sum(axis=1, keepdims=True)]),
    ("ArgMax", "ArgMax", {"X": X}, {}, {"axis": 1}, lambda f, c: [f["X"].argmax(axis=1)[:, None, :].astype(np.int64)]),
    ("ArgMin", "ArgMin", {"X": X}, {}, {"axis": 2, "keepdims": 0}, lambda f, c: [f["X"].argmin(axis=2).astype(np.int64)]),
    ("CumSum", "CumSum", {"X": X}, {"axis": np.array(1, np.int64)}, {}, lambda f, c: [np.cumsum(f["X"], axis=1)]),
    ("CumProd", "CumProd", {"X": X}, {"axis": np.array(1, np.int64)}, {}, lambda f, c: [np.cumprod(f["X"], axis=1)]),
    # function ops claimed directly
    ("Swish", "Swish", {"X": X * 3}, {}, {"alpha": 0.5}, lambda f, c: [f["X"] / (1 + np.exp(-f32(0.5) * f["X"]))]),
    ("NegativeLogLikelihoodLoss", "NegativeLogLikelihoodLoss", {"X": X, "T": TARGET, "W": POS[0, :, 0].copy()}, {},
     {"reduction": "mean", "ignore_index": 1}, lambda f, c: [nll(f["X"], f["T"], f["W"], 1)]),
    ("SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLoss", {"X": X, "T": TARGET}, {}, {"reduction": "sum"},
     lambda f, c: [nll(log_softmax(f["X"], 1), f["T"], None, None, "sum"), log_softmax(f["X"], 1)]),
    ("CenterCropPad", "CenterCropPad", {"X": X}, {"S": np.array([6, 2], np.int64)}, {"axes": [1, -1]},
     lambda f, c: [np.pad(f["X"][:, :, 1:3], ((0, 0), (1, 1), (0, 0)))]),
    # linear algebra and neural-network ops
    ("MatMul", "MatMul", {"A": randn(2, 3, 7), "B": randn(7, 4, seed=1)}, {}, {}, lambda f, c: [f["A"] @ f["B"]]),
    ("Einsum-matmul", "Einsum", {"A": randn(2, 3, 7), "B": randn(2, 7, 4, seed=1)}, {}, {"equation": "bij,bjk->bik"},
     lambda f, c: [np.einsum("bij,bjk->bik", f["A"], f["B"])]),
    ("Einsum-diagonal-sum", "Einsum", {"A": randn(4, 4)}, {}, {"equation": "ii->"}, lambda f, c: [np.einsum("ii->", f["A"])]),
    ("Einsum-outer-transpose", "Einsum", {"A": randn(3), "B": randn(4, seed=2)}, {}, {"equation": "i,j->ji"},
     lambda f, c: [np.einsum("i,j->ji", f["A"], f["B"])]),
    ("EyeLike", "EyeLike", {"X": randn(3, 5)}, {}, {"k": 1}, lambda f, c: [np.eye(3, 5, k=1)]),
    ("Gemm", "Gemm", {"A": randn(3, 6), "B": randn(4, 6, seed=1), "C": randn(4, seed=2)}, {}, {"transB": 1, "alpha": 0.5, "beta": 2.0},
     lambda f, c: [0.5 * f["A"] @ f["B"].T + 2.0 * f["C"]]),
    ("MaxPool", "MaxPool", {"X": IMG}, {}, {"kernel_shape": [2, 2]}, lambda f, c: [pool2d(f["X"], 2, np.max)]),
    ("AveragePool", "AveragePool", {"X": IMG}, {}, {"kernel_shape": [3, 3]}, lambda f, c: [pool2d(f["X"], 3, np.mean)]),
    ("GlobalAveragePool", "GlobalAveragePool", {"X": IMG}, {}, {}, lambda f, c: [f["X"].mean(axis=(2, 3), keepdims=True)]),
    ("GlobalMaxPool", "GlobalMaxPool", {"X": IMG}, {}, {}, lambda f, c: [f["X"].max(axis=(2, 3), keepdims=True)]),
    ("BatchNormalization", "BatchNormalization", {"X": IMG, "s": CHAN, "b": CHAN[::-1].copy(), "m": MEAN2, "v": VAR2}, {}, {"epsilon": 1e-3},
     lambda f, c: [(f["X"] - f["m"][:, None, None]) / np.sqrt(f["v"][:, None, None] + f32(1e-3)) * f["s"][:, None, None] + f["b"][:, None, None]]),
    ("InstanceNormalization", "InstanceNormalization", {"X": IMG, "s": CHAN, "b": MEAN2}, {}, {"epsilon": 1e-5},
     lambda f, c: [(f["X"] - f["X"].mean(axis=(2, 3), keepdims=True)) / np.sqrt(f["X"].var(axis=(2, 3), keepdims=True) + f32(1e-5)) * f["s"][:, None, None] + f["b"][:, None, None]]),
    # data movement
    ("Identity", "Identity", {"X": X}, {}, {}, lambda f, c: [f["X"]]),
    ("Reshape", "Reshape", {"X": X}, {"s": np.array([4, -1], np.int64)}, {}, lambda f, c: [f["X"].reshape(4, -1)]),
    ("Transpose", "Transpose", {"X": X}, {}, {"perm": [2, 0, 1]}, lambda f, c: [f["X"].transpose(2, 0, 1)]),
    ("Concat", "Concat", {"A": X, "B": Y}, {}, {"axis": 1}, lambda f, c: [np.concatenate([f["A"], f["B"]], axis=1)]),
    ("Slice", "Slice", {"X": X}, {"s": np.array([1, -1], np.int64), "e": np.array([3, -5], np.int64), "a": np.array([1, 2], np.int64), "t": np.array([1, -2], np.int64)}, {},
     lambda f, c: [f["X"][:, 1:3, -1:-5:-2]]),
    ("Gather", "Gather", {"X": X, "i": np.array([2, 0, -1], np.int64)}, {}, {"axis": 1}, lambda f, c: [np.take(f["X"], [2, 0, -1], axis=1)]),
    ("GatherElements", "GatherElements", {"X": X, "i": rng(3).integers(0, 4, (3, 2, 5))}, {}, {"axis": 1},
     lambda f, c: [np.take_along_axis(f["X"], f["i"], axis=1)]),
    ("Squeeze", "Squeeze", {"X": X[:, :1]}, {"a": np.array([1], np.int64)}, {}, lambda f, c: [f["X"][:, 0]]),
    ("Unsqueeze", "Unsqueeze", {"X": X}, {"a": np.array([0], np.int64)}, {}, lambda f, c: [f["X"][None]]),
    ("Flatten", "Flatten", {"X": X}, {}, {"axis": 2}, lambda f, c: [f["X"].reshape(12, 5)]),
    ("Expand", "Expand", {"X": X[:, :1]}, {"s": np.array([2, 3, 4, 5], np.int64)}, {}, lambda f, c: [np.broadcast_to(f["X"], (2, 3, 4, 5))]),
    ("Tile", "Tile", {"X": X}, {"r": np.array([1, 2, 1], np.int64)}, {}, lambda f, c: [np.tile(f["X"], (1, 2, 1))]),
    ("Pad", "Pad", {"X": X}, {"p": np.array([0, 1, 2, 0, 0, 1], np.int64), "v": np.array(1.5)}, {}, lambda f, c: [np.pad(f["X"], ((0, 0), (1, 0), (2, 1)), constant_values=1.5)]),
    ("Pad-edge", "Pad", {"X": X}, {"p": np.array([0, 1, 2, 0, 0, 1], np.int64)}, {"mode": "edge"}, lambda f, c: [np.pad(f["X"], ((0, 0), (1, 0), (2, 1)), mode="edge")]),
    ("Trilu", "Trilu", {"X": X}, {"k": np.array(1, np.int64)}, {}, lambda f, c: [np.triu(f["X"], 1)]),
    ("Size", "Size", {"X": X}, {}, {}, lambda f, c: [np.array(f["X"].size, np.int64)]),
    ("Split", "Split", {"X": X}, {"s": np.array([1, 3], np.int64)}, {"axis": 1}, lambda f, c: [f["X"][:, :1], f["X"][:, 1:]]),
    ("Range", "Range", {"a": np.array(-1.25), "b": np.array(3.0), "d": np.array(0.375)}, {}, {}, lambda f, c: [np.arange(-1.25, 3.0, 0.375)]),
    ("ConstantOfShape", "ConstantOfShape", {"s": np.array([2, 3], np.int64)}, {}, {"value": numpy_helper.from_array(np.array([0.1]))},
     lambda f, c: [np.full((2, 3), 0.1)]),
    ("Dropout", "Dropout", {"X": X}, {}, {}, lambda f, c: [f["X"]]),
    ("Cast-to-float", "Cast", {"X": X}, {}, {"to": TensorProto.FLOAT}, lambda f, c: [f["X"].astype(np.float32)]),
    ("Cast-to-int64", "Cast", {"X": X * 10}, {}, {"to": TensorProto.INT64}, lambda f, c: [(f["X"]).astype(np.int64)]),
    ("Cast-from-float", "Cast", {"X": X.astype(np.float32)}, {}, {"to": TensorProto.DOUBLE}, lambda f, c: [f["X"].astype(np.float64)]),
    ("Cast-from-int32", "Cast", {"X": np.arange(-5, 7, dtype=np.int32)}, {}, {"to": TensorProto.DOUBLE}, lambda f, c: [f["X"].astype(np.float64)]),
    ("CastLike", "CastLike", {"X": X.astype(np.float32), "L": np.zeros(1)}, {}, {}, lambda f, c: [f["X"].astype(np.float64)]),
]


#: Ops tested at a newer opset than the default 17.
OPSETS = {"CumProd": 26, "Swish": 24, "NegativeLogLikelihoodLoss": 13, "SoftmaxCrossEntropyLoss": 13, "CenterCropPad": 18}


def ids(params):
    return [p[0] for p in params]


ORT_VERSION = tuple(int(v) for v in __import__("onnxruntime").__version__.split(".")[:2])


@pytest.mark.parametrize("case", CLAIMED, ids=ids(CLAIMED))
def test_float64_on_mlx(case):
    _, op, feeds, consts, attrs, reference = case
    if OPSETS.get(op, 17) > 23 and ORT_VERSION < (1, 24):
        pytest.skip("ONNX Runtime < 1.24 cannot load opset > 23 models")
    outputs = len(reference(feeds, consts))
    opset = OPSETS.get(op, 17)
    model = node_model(op, feeds, consts=consts, attrs=attrs, n_outputs=outputs, symbolic=op == "Size", opset=opset)
    session = make_session(model)
    actual = run(session, feeds)
    expected = reference(feeds, consts)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        e = np.asarray(e)
        assert a.dtype == e.dtype, f"dtype {a.dtype}, expected {e.dtype}"
        assert a.shape == e.shape, f"shape {a.shape}, expected {e.shape}"
        if np.issubdtype(e.dtype, np.floating) and e.dtype == np.float64:
            np.testing.assert_allclose(a, e, rtol=RTOL, atol=ATOL)
        else:
            np.testing.assert_array_equal(a, e)
    assert_on_mlx(session, [op])


# Ops whose float64 kernels in MLX evaluate a float32 approximation (or, for Conv and the fast
# layer norm, compute in float32): declined for float64. (Erf, Softplus, Selu and Conv are
# declined too, but ORT's CPU EP has no float64 kernel for them to fall back to.)
DECLINED = [
    ("Sin", "Sin", {"X": X}, {}),
    ("Cos", "Cos", {"X": X}, {}),
    ("Sigmoid", "Sigmoid", {"X": X}, {}),
    ("Softmax", "Softmax", {"X": X}, {}),
    ("LogSoftmax", "LogSoftmax", {"X": X}, {}),
    ("LayerNormalization", "LayerNormalization", {"X": X, "S": SCALE5}, {}),
]


@pytest.mark.parametrize("case", DECLINED, ids=ids(DECLINED))
def test_float64_declined(case):
    _, op, feeds, attrs = case
    if op in ("Sin", "Cos") and ORT_VERSION < (1, 24):
        pytest.skip("ONNX Runtime 1.23's CPU EP has no float64 Sin/Cos kernel to fall back to")
    model = node_model(op, feeds, attrs=attrs)
    session = make_session(model)
    run(session, feeds)
    assert_on_cpu(session, [op])
