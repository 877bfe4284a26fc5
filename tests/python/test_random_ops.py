"""ONNX random generators on MLX: RandomNormal, RandomUniform, RandomNormalLike,
RandomUniformLike, Bernoulli, Multinomial.

Their outputs are random draws, so they can't be compared with ORT's CPU EP element-wise.
These tests check what the spec fixes: shapes, dtypes, the value domain, means and variances
over large samples (bounds of many standard errors, so a correct generator fails with
negligible probability), exact Bernoulli results at p = 0 and p = 1, Multinomial frequencies
against the softmax of the logits, a seeded node repeating its sequence in a new session and
advancing from run to run, and that every node ran on MLX.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from conftest import assert_all_on_mlx, assert_on_cpu, assert_on_mlx, make_session

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16
NP = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.DOUBLE: np.float64,
      TensorProto.INT32: np.int32, TensorProto.INT64: np.int64, TensorProto.BOOL: np.bool_,
      TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8}


def model(op, opset, attrs, out_type, inputs=()):
    """One `op` node; `inputs` are (name, elem_type) pairs."""
    ins = [helper.make_tensor_value_info(n, t, None) for n, t in inputs]
    node = helper.make_node(op, [n for n, _ in inputs], ["y"], **attrs)
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", out_type, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def run_mlx(m, feeds=None, runs=1):
    s = make_session(m)
    outs = [s.run(None, feeds or {})[0] for _ in range(runs)]
    assert_all_on_mlx(s)
    # the node itself, not a function expansion of it
    assert_on_mlx(s, [m.graph.node[0].op_type])
    return outs


def check_moments(y, mean, std, n_sigma=6.0):
    """The sample mean and standard deviation of `y` agree with `mean` and `std` within
    `n_sigma` standard errors."""
    v = y.astype(np.float64).ravel()
    n = v.size
    assert abs(v.mean() - mean) < n_sigma * std / np.sqrt(n), (v.mean(), mean)
    # the standard error of the sample variance of a normal/uniform sample is below
    # std^2 * sqrt(2 / n) (uniform: smaller); bound the std through it
    assert abs(v.var() - std**2) < n_sigma * std**2 * np.sqrt(2.0 / n), (v.var(), std**2)


@pytest.mark.parametrize("opset", [1, 21, 22])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_random_normal(opset, dtype):
    (y,) = run_mlx(model("RandomNormal", opset, dict(shape=[300, 400], mean=2.0, scale=3.0, dtype=dtype), dtype))
    assert y.shape == (300, 400) and y.dtype == NP[dtype]
    assert np.isfinite(y).all()
    check_moments(y, 2.0, 3.0)


def test_random_normal_defaults_and_empty():
    (y,) = run_mlx(model("RandomNormal", 17, dict(shape=[100000]), F32))
    assert y.dtype == np.float32 and y.shape == (100000,)
    check_moments(y, 0.0, 1.0)
    (e,) = run_mlx(model("RandomNormal", 17, dict(shape=[0, 3]), F32))
    assert e.shape == (0, 3)


@pytest.mark.parametrize("opset", [1, 22])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_random_uniform(opset, dtype):
    low, high = -1.5, 2.5
    (y,) = run_mlx(model("RandomUniform", opset, dict(shape=[200, 500], low=low, high=high, dtype=dtype), dtype))
    assert y.shape == (200, 500) and y.dtype == NP[dtype]
    assert (y >= low).all() and (y <= high).all()
    if dtype == F32:
        assert (y < high).all()
    check_moments(y, (low + high) / 2, (high - low) / np.sqrt(12.0))
    # every tenth of the range is hit about as often
    hist, _ = np.histogram(y.astype(np.float64), bins=10, range=(low, high))
    assert (np.abs(hist / y.size - 0.1) < 0.01).all(), hist


def test_random_uniform_defaults():
    (y,) = run_mlx(model("RandomUniform", 1, dict(shape=[4, 25000]), F32))
    assert y.dtype == np.float32 and (y >= 0).all() and (y < 1).all()
    check_moments(y, 0.5, 1 / np.sqrt(12.0))


@pytest.mark.parametrize("op", ["RandomNormalLike", "RandomUniformLike"])
@pytest.mark.parametrize("opset", [1, 22])
@pytest.mark.parametrize("in_type,attrs,out_type", [
    (F32, {}, F32),
    (F16, {}, F16),
    (TensorProto.INT64, {"dtype": F32}, F32),
    (F32, {"dtype": F16}, F16),
    (TensorProto.BOOL, {"dtype": F32}, F32),
])
def test_like(op, opset, in_type, attrs, out_type):
    x = np.zeros((50, 30, 40), NP[in_type])
    if op == "RandomNormalLike":
        attrs = dict(attrs, mean=-1.0, scale=0.5)
    else:
        attrs = dict(attrs, low=10.0, high=12.0)
    (y,) = run_mlx(model(op, opset, attrs, out_type, [("x", in_type)]), {"x": x})
    assert y.shape == x.shape and y.dtype == NP[out_type]
    if op == "RandomNormalLike":
        check_moments(y, -1.0, 0.5)
    else:
        assert (y >= 10.0).all() and (y <= 12.0).all()
        check_moments(y, 11.0, 2 / np.sqrt(12.0))


@pytest.mark.parametrize("opset", [15, 22])
@pytest.mark.parametrize("in_type", [F32, F16])
def test_bernoulli_exact_at_0_and_1(opset, in_type):
    p = np.zeros((64, 100), NP[in_type])
    p[::2] = 1.0
    (y,) = run_mlx(model("Bernoulli", opset, {}, in_type, [("p", in_type)]), {"p": p})
    assert y.dtype == NP[in_type] and y.shape == p.shape
    np.testing.assert_array_equal(y, p)


@pytest.mark.parametrize("opset", [15, 22])
@pytest.mark.parametrize("out_type", [F32, F16, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL,
                                      TensorProto.UINT8, TensorProto.INT8])
def test_bernoulli_frequency_and_dtype(opset, out_type):
    probs = np.array([0.0, 0.1, 0.5, 0.9, 1.0], np.float32)
    p = np.broadcast_to(probs, (40000, 5)).copy()
    (y,) = run_mlx(model("Bernoulli", opset, dict(dtype=out_type), out_type, [("p", F32)]), {"p": p})
    assert y.dtype == NP[out_type] and y.shape == p.shape
    v = y.astype(np.float64)
    assert set(np.unique(v)) <= {0.0, 1.0}
    freq = v.mean(axis=0)
    se = np.sqrt(probs * (1 - probs) / p.shape[0])
    assert (np.abs(freq - probs) <= 6 * se + 1e-12).all(), freq


@pytest.mark.parametrize("opset", [7, 22])
@pytest.mark.parametrize("out_type", [TensorProto.INT32, TensorProto.INT64])
@pytest.mark.parametrize("in_type", [F32, F16])
def test_multinomial_frequencies(opset, out_type, in_type):
    probs = np.array([[0.1, 0.2, 0.7, 0.0], [0.25, 0.25, 0.25, 0.25], [0.0, 0.0, 1.0, 0.0]])
    with np.errstate(divide="ignore"):
        logits = (np.log(probs) + 3.0).astype(NP[in_type])  # unnormalised: shifted
    n = 20000
    attrs = dict(sample_size=n, dtype=out_type)
    (y,) = run_mlx(model("Multinomial", opset, attrs, out_type, [("x", in_type)]), {"x": logits})
    assert y.shape == (3, n) and y.dtype == NP[out_type]
    assert ((y >= 0) & (y < 4)).all()
    for b in range(3):
        freq = np.bincount(y[b], minlength=4) / n
        se = np.sqrt(probs[b] * (1 - probs[b]) / n)
        assert (np.abs(freq - probs[b]) <= 6 * se + 1e-12).all(), (b, freq)


def test_multinomial_default_sample_size_and_dtype():
    x = np.zeros((5, 3), np.float32)
    (y,) = run_mlx(model("Multinomial", 7, {}, TensorProto.INT32, [("x", F32)]), {"x": x})
    assert y.shape == (5, 1) and y.dtype == np.int32


SEEDED = [
    ("RandomNormal", 1, dict(shape=[1000], seed=3.0), F32, ()),
    ("RandomUniform", 22, dict(shape=[1000], seed=3.0), F32, ()),
    ("RandomNormalLike", 1, dict(seed=-7.5), F32, (("x", F32),)),
    ("RandomUniformLike", 22, dict(seed=0.0), F32, (("x", F32),)),
    ("Bernoulli", 15, dict(seed=11.0), F32, (("x", F32),)),
    ("Multinomial", 7, dict(seed=2.0, sample_size=1000), TensorProto.INT32, (("x", F32),)),
]


def feeds_for(op, inputs):
    if not inputs:
        return {}
    x = np.zeros((4, 250), np.float32) if op != "Bernoulli" else np.full((4, 250), 0.5, np.float32)
    return {"x": x}


@pytest.mark.parametrize("op,opset,attrs,out_type,inputs", SEEDED, ids=[s[0] for s in SEEDED])
def test_seed_repeats_per_session_and_advances_per_run(op, opset, attrs, out_type, inputs):
    m = model(op, opset, attrs, out_type, list(inputs))
    f = feeds_for(op, inputs)
    a = run_mlx(m, f, runs=3)
    b = run_mlx(m, f, runs=3)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], a[1]) and not np.array_equal(a[1], a[2])
    other = model(op, opset, dict(attrs, seed=attrs["seed"] + 1.0), out_type, list(inputs))
    (c,) = run_mlx(other, f)
    assert not np.array_equal(a[0], c)


@pytest.mark.parametrize("op,opset,attrs,out_type,inputs", SEEDED, ids=[s[0] for s in SEEDED])
def test_unseeded_runs_and_sessions_differ(op, opset, attrs, out_type, inputs):
    attrs = {k: v for k, v in attrs.items() if k != "seed"}
    m = model(op, opset, attrs, out_type, list(inputs))
    f = feeds_for(op, inputs)
    a = run_mlx(m, f, runs=2)
    (b,) = run_mlx(m, f)
    assert not np.array_equal(a[0], a[1])
    assert not np.array_equal(a[0], b)


def test_two_seeded_nodes_in_one_graph():
    """Two nodes with one seed draw the same values (each has its own generator, as in ORT);
    an unseeded pair differs."""
    nodes = [helper.make_node("RandomNormal", [], [n], shape=[500], seed=5.0) for n in ("a", "b")]
    nodes += [helper.make_node("RandomNormal", [], [n], shape=[500]) for n in ("c", "d")]
    outs = [helper.make_tensor_value_info(n, F32, [500]) for n in "abcd"]
    m = helper.make_model(helper.make_graph(nodes, "g", [], outs), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    s = make_session(m)
    a, b, c, d = s.run(None, {})
    assert_all_on_mlx(s)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(c, d)


def test_random_feeding_compute():
    """A random node inside a larger graph: noise added to an input, then reduced."""
    nodes = [
        helper.make_node("RandomNormalLike", ["x"], ["n"], scale=0.0),
        helper.make_node("Add", ["x", "n"], ["s"]),
        helper.make_node("ReduceSum", ["s"], ["y"], keepdims=0),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [3, 4])],
                          [helper.make_tensor_value_info("y", F32, [])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    s = make_session(m)
    for _ in range(3):
        (y,) = s.run(None, {"x": x})
        assert y == pytest.approx(66.0)
    assert_all_on_mlx(s)


@pytest.mark.parametrize("op,attrs,inputs,out_type", [
    ("RandomNormal", dict(shape=[3], dtype=TensorProto.DOUBLE), (), TensorProto.DOUBLE),
    ("RandomUniform", dict(shape=[3], dtype=TensorProto.DOUBLE), (), TensorProto.DOUBLE),
    ("RandomUniformLike", dict(dtype=TensorProto.DOUBLE), (("x", F32),), TensorProto.DOUBLE),
])
def test_float64_declined(op, attrs, inputs, out_type):
    m = model(op, 15, attrs, out_type, list(inputs))
    s = make_session(m)
    feeds = {n: np.full((2, 3), 0.5, NP[t]) for n, t in inputs}
    (y,) = s.run(None, feeds)
    assert y.dtype == np.float64
    assert_on_cpu(s, [op])
