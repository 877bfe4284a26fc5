"""The ``ai.onnx.ml`` numeric ops on the MLX EP against ORT's CPU EP (which implements the
domain): tiny graphs built with onnx.helper over several attribute combinations and dtypes,
the same feeds on both EPs, outputs compared, and the node under test asserted to have run on
MLX. Elementwise ops compare exactly (rtol = atol = 0). The linear models' scores come out of
a matrix product, which ORT computes with its own GEMM (its order of adds may differ from
MLX's for wide inputs; the small ones here happen to agree bit for bit), and ORT applies
LOGISTIC and SOFTMAX with MLAS's vectorised exp/logistic approximations, which differ from
MLX's in the last bits: those compare at rtol 1e-6, atol 1e-7.

Forms MLX can't run exactly (strings, attribute values ORT rejects or mishandles) must stay
on ORT's CPU EP: those cases assert the node ran there and the outputs still match.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import assert_on_cpu, assert_outputs_match, check_against_cpu, make_session, run

ML = "ai.onnx.ml"
F32, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
EXACT = dict(rtol=0.0, atol=0.0)
#: Scores of a matrix product and ORT's vectorised transforms (a few float32 steps).
GEMM = dict(rtol=1e-6, atol=1e-7)
#: SVM scores: kernels of dot products and their weighted sum, which ORT's GEMM (and its
#: exp / tanh / pow) round in their own order; the sums (of ~50 terms for the scikit-learn
#: models) cancel, so a few float32 steps of the terms show as up to 4e-6 relative on small
#: scores (1.7e-6 absolute).
SVM = dict(rtol=5e-6, atol=1e-6)
#: ORT's own version: the binary LinearClassifier's LOGISTIC changed after 1.23.
ORT_VERSION = tuple(int(p) for p in ort.__version__.split(".")[:2])


def ml_model(
    op: str,
    inputs: Sequence[tuple[str, int, Sequence]],
    outputs: Sequence[tuple[str, int]],
    *,
    ml_opset: int = 1,
    **attrs,
) -> onnx.ModelProto:
    """One ``ai.onnx.ml`` node; inputs are (name, elem_type, dims), outputs (name, elem_type)."""
    node = helper.make_node(op, [i[0] for i in inputs], [o[0] for o in outputs], domain=ML, **attrs)
    graph = helper.make_graph(
        [node],
        op.lower(),
        [helper.make_tensor_value_info(n, t, list(d)) for n, t, d in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, ml_opset)])
    model.ir_version = 8  # ORT 1.23 reads IR versions up to 11
    return model


def randn(*shape, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def check(model, feeds: Mapping[str, np.ndarray], tol=EXACT, op: str | None = None):
    op = op or model.graph.node[0].op_type
    return check_against_cpu(model, feeds, [op], **tol)


def check_declined(model, feeds: Mapping[str, np.ndarray]):
    """The node stays on ORT's CPU EP and the MLX session's outputs still match."""
    op = model.graph.node[0].op_type
    expected = run(make_session(model, mlx=False), feeds)
    session = make_session(model, mlx=True)
    assert_outputs_match(run(session, feeds), expected, **EXACT)
    assert_on_cpu(session, [op])


def check_fails(model, feeds: Mapping[str, np.ndarray], needle: str, *, cpu_fails: bool = True):
    """Both EPs refuse these feeds at run time (the CPU EP unless ``cpu_fails`` is false); the
    MLX EP's message names the problem."""
    if cpu_fails:
        with pytest.raises(Exception):
            run(make_session(model, mlx=False), feeds)
    with pytest.raises(Exception, match=needle):
        run(make_session(model, mlx=True), feeds)


# ---------------------------------------------------------------------------------------------
# Scaler


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("per_feature", [True, False])
def test_scaler(dtype, per_feature):
    x = (randn(6, 4) * 50).astype(dtype)
    offset, scale = ([0.5, -1.25, 3.0, 0.1], [2.0, 0.3, -1.5, 7.0]) if per_feature else ([0.7], [1.9])
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    m = ml_model("Scaler", [("x", t, ["N", 4])], [("y", F32)], offset=offset, scale=scale)
    check(m, {"x": x})


def test_scaler_one_dim_and_rank_three():
    m = ml_model("Scaler", [("x", F32, [5])], [("y", F32)], offset=[1, 2, 3, 4, 5.5], scale=[0.1, 0.2, 0.3, 0.4, 0.5])
    check(m, {"x": randn(5)})
    m = ml_model("Scaler", [("x", F32, [2, 3, 4])], [("y", F32)], offset=[0.25], scale=[3.0])
    check(m, {"x": randn(2, 3, 4)})


def test_scaler_mismatched_sizes_stay_on_cpu():
    # ORT reads a rank-3 input's features from dim 1: not claimed.
    m = ml_model("Scaler", [("x", F32, [2, 2, 2])], [("y", F32)], offset=[1.0, 2.0], scale=[0.5, 1.0])
    check_declined(m, {"x": randn(2, 2, 2)})


# ---------------------------------------------------------------------------------------------
# Normalizer


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("shape", [(7, 5), (5,), (3, 33)])
def test_normalizer(norm, shape):
    x = randn(*shape, seed=3) * 10
    if len(shape) == 2:
        x[1] = 0  # a zero row is returned unchanged
    m = ml_model("Normalizer", [("x", F32, shape)], [("y", F32)], norm=norm)
    check(m, {"x": x})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_normalizer_max_of_integers(dtype):
    x = np.array([[1, -2, 3], [0, 0, 0], [-1, -2, -3], [7, 7, -9]], dtype)
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    check(ml_model("Normalizer", [("x", t, [4, 3])], [("y", F32)], norm="MAX"), {"x": x})


def test_normalizer_l1_of_integers_stays_on_cpu():
    x = np.array([[1, -2, 3]], np.int64)
    check_declined(ml_model("Normalizer", [("x", I64, [1, 3])], [("y", F32)], norm="L1"), {"x": x})


# ---------------------------------------------------------------------------------------------
# Binarizer


@pytest.mark.parametrize("threshold", [None, 0.5, -1.0])
def test_binarizer(threshold):
    x = randn(4, 6, seed=5)
    x[0, :3] = [0.5, -1.0, 0.0]
    attrs = {} if threshold is None else {"threshold": threshold}
    check(ml_model("Binarizer", [("x", F32, [4, 6])], [("y", F32)], **attrs), {"x": x})


def test_binarizer_nan_fails_the_run():
    m = ml_model("Binarizer", [("x", F32, [3])], [("y", F32)])
    check_fails(m, {"x": np.array([1.0, np.nan, 0.0], np.float32)}, "NaN")


# ---------------------------------------------------------------------------------------------
# Imputer


def test_imputer_float_nan_per_feature():
    x = randn(5, 3, seed=7)
    x[0, 1] = x[2, 0] = x[4, 2] = np.nan
    m = ml_model("Imputer", [("x", F32, ["N", 3])], [("y", F32)], imputed_value_floats=[9.0, -8.5, 7.25], replaced_value_float=float("nan"))
    check(m, {"x": x})


def test_imputer_float_value_single():
    x = np.array([[1.0, 0.0, -0.0], [np.nan, 0.0, 3.0]], np.float32)
    check(ml_model("Imputer", [("x", F32, [2, 3])], [("y", F32)], imputed_value_floats=[4.5]), {"x": x})
    m = ml_model("Imputer", [("x", F32, [2, 3])], [("y", F32)], imputed_value_floats=[4.5], replaced_value_float=3.0)
    check(m, {"x": x})


@pytest.mark.parametrize("per_feature", [True, False])
def test_imputer_int64(per_feature):
    x = np.array([[1, -1, 3], [-1, 0, -1], [5, 6, -1]], np.int64)
    values = [9, 8, 7] if per_feature else [42]
    m = ml_model("Imputer", [("x", I64, [3, 3])], [("y", I64)], imputed_value_int64s=values, replaced_value_int64=-1)
    check(m, {"x": x})


def test_imputer_one_dim():
    m = ml_model("Imputer", [("x", F32, [3])], [("y", F32)], imputed_value_floats=[9.0, 8.0, 7.0])
    check(m, {"x": np.array([1, 0, 0], np.float32)})


# ---------------------------------------------------------------------------------------------
# ArrayFeatureExtractor


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_array_feature_extractor(dtype):
    x = (randn(3, 5) * 10).astype(dtype)
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    m = ml_model("ArrayFeatureExtractor", [("x", t, ["N", 5]), ("i", I64, [3])], [("y", t)])
    check(m, {"x": x, "i": np.array([4, 0, 4], np.int64)})


def test_array_feature_extractor_shapes():
    # A 1-D X gives [1, k]; indices of any shape are flattened; rank 3 gathers the last axis.
    m = ml_model("ArrayFeatureExtractor", [("x", F32, [5]), ("i", I64, [2, 1])], [("y", F32)])
    check(m, {"x": randn(5), "i": np.array([[2], [0]], np.int64)})
    m = ml_model("ArrayFeatureExtractor", [("x", F32, [2, 3, 4]), ("i", I64, [2])], [("y", F32)])
    check(m, {"x": randn(2, 3, 4), "i": np.array([3, 1], np.int64)})


@pytest.mark.parametrize("index", [5, -1])
def test_array_feature_extractor_out_of_range_fails(index):
    m = ml_model("ArrayFeatureExtractor", [("x", F32, [2, 5]), ("i", I64, [1])], [("y", F32)])
    # ORT 1.23 checks only the upper bound (a negative index reads out of bounds there).
    cpu_fails = index >= 0 or ORT_VERSION > (1, 23)
    check_fails(m, {"x": randn(2, 5), "i": np.array([index], np.int64)}, "out of range", cpu_fails=cpu_fails)


# ---------------------------------------------------------------------------------------------
# FeatureVectorizer


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_feature_vectorizer(dtype):
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    a, b = (randn(4, 3) * 9).astype(dtype), (randn(4, 2, seed=1) * 9).astype(dtype)
    m = ml_model("FeatureVectorizer", [("a", t, ["N", 3]), ("b", t, ["N", 2])], [("y", F32)], inputdimensions=[3, 2])
    check(m, {"a": a, "b": b})


def test_feature_vectorizer_one_dim_and_single():
    m = ml_model("FeatureVectorizer", [("a", F32, [3])], [("y", F32)], inputdimensions=[3])
    check(m, {"a": randn(3)})


def test_feature_vectorizer_padding_stays_on_cpu():
    m = ml_model("FeatureVectorizer", [("a", F32, [2, 3]), ("b", F32, [2, 2])], [("y", F32)], inputdimensions=[2, 3])
    check_declined(m, {"a": randn(2, 3), "b": randn(2, 2)})


# ---------------------------------------------------------------------------------------------
# OneHotEncoder


@pytest.mark.parametrize("dtype", [np.int64, np.float32])
@pytest.mark.parametrize("zeros", [None, 1])
def test_one_hot_encoder(dtype, zeros):
    x = np.array([[0, 2, 5], [-1, 7, 2]], np.int64).astype(dtype)
    if dtype == np.float32:
        x = x + np.float32(0.75) * np.sign(x).astype(np.float32)  # truncated toward zero
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    attrs = {} if zeros is None else {"zeros": zeros}
    m = ml_model("OneHotEncoder", [("x", t, [2, 3])], [("y", F32)], cats_int64s=[0, 2, 5, -1], **attrs)
    check(m, {"x": x})


def test_one_hot_encoder_unknown_category_with_zeros_0():
    m = ml_model("OneHotEncoder", [("x", I64, [3])], [("y", F32)], cats_int64s=[1, 2], zeros=0)
    check(m, {"x": np.array([2, 1, 1], np.int64)})
    check_fails(m, {"x": np.array([2, 3, 1], np.int64)}, "unknown category")


def test_one_hot_encoder_strings_stay_on_cpu():
    m = ml_model("OneHotEncoder", [("x", TensorProto.STRING, [2])], [("y", F32)], cats_strings=["a", "b"])
    check_declined(m, {"x": np.array(["b", "a"], dtype=object)})


# ---------------------------------------------------------------------------------------------
# LabelEncoder


LE_CASES = {
    "int-int": (I64, I64, dict(keys_int64s=[1, 2, 3, 2], values_int64s=[10, 20, 30, 40])),
    "int-int-default": (I64, I64, dict(keys_int64s=[1, 2, 3], values_int64s=[10, 20, 30], default_int64=5)),
    "int-float": (I64, F32, dict(keys_int64s=[1, 2, 3], values_floats=[0.1, 0.2, 0.3])),
    "float-int": (F32, I64, dict(keys_floats=[1.5, 0.0, float("nan")], values_int64s=[10, 20, 30])),
    "float-float": (F32, F32, dict(keys_floats=[1.5, 0.0, 2.5], values_floats=[0.1, 0.2, 0.3], default_float=3.0)),
}


@pytest.mark.parametrize("ml_opset", [2, 3, 4])
@pytest.mark.parametrize("case", sorted(LE_CASES))
def test_label_encoder(case, ml_opset):
    tin, tout, attrs = LE_CASES[case]
    if tin == I64:
        x = np.array([[1, 2, 7], [3, -1, 1]], np.int64)
    else:
        x = np.array([[1.5, -0.0, np.nan], [7.0, 2.5, 0.0]], np.float32)
    m = ml_model("LabelEncoder", [("x", tin, list(x.shape))], [("y", tout)], ml_opset=ml_opset, **attrs)
    got = check(m, {"x": x})[0]
    if got.dtype == np.float32:  # the default is -0.0 (bit for bit)
        expected = run(make_session(m, mlx=False), {"x": x})[0]
        np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_label_encoder_tensor_attributes():
    keys = helper.make_tensor("k", I64, [3], [1, 2, 3])
    values = helper.make_tensor("v", F32, [3], [0.5, 0.25, 0.125])
    default = helper.make_tensor("d", F32, [1], [9.0])
    x = np.array([1, 4, 3, 2], np.int64)
    for attrs in [dict(keys_tensor=keys, values_tensor=values, default_tensor=default), dict(keys_tensor=keys, values_tensor=values)]:
        m = ml_model("LabelEncoder", [("x", I64, [4])], [("y", F32)], ml_opset=4, **attrs)
        check(m, {"x": x})


def test_label_encoder_strings_stay_on_cpu():
    m = ml_model("LabelEncoder", [("x", I64, [3])], [("y", TensorProto.STRING)], ml_opset=2, keys_int64s=[1, 2], values_strings=["a", "b"])
    check_declined(m, {"x": np.array([1, 2, 5], np.int64)})


# ---------------------------------------------------------------------------------------------
# LinearRegressor


POSTS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("targets", [1, 3])
def test_linear_regressor(post, targets):
    c = 4
    coef = randn(targets * c, seed=11).tolist()
    inter = randn(targets, seed=12).tolist()
    x = randn(6, c, seed=13)
    if post == "SOFTMAX_ZERO":
        x[2] = 0.0
        inter = [0.0] * targets  # whole rows of zero scores
    m = ml_model("LinearRegressor", [("x", F32, ["N", c])], [("y", F32)], coefficients=coef, intercepts=inter, targets=targets, post_transform=post)
    if post == "PROBIT":
        # ORT's inverse-erf approximation is not reproduced exactly: declined.
        check_declined(m, {"x": np.random.default_rng(13).uniform(0.01, 0.99, (6, c)).astype(np.float32)})
        return
    check(m, {"x": x}, GEMM)


def test_linear_regressor_without_intercepts_and_one_dim():
    m = ml_model("LinearRegressor", [("x", F32, ["N", 3])], [("y", F32)], coefficients=[0.1, 0.2, 0.3])
    check(m, {"x": randn(4, 3)}, GEMM)
    m = ml_model("LinearRegressor", [("x", F32, [3])], [("y", F32)], coefficients=[0.1, 0.2, 0.3], intercepts=[1.0])
    check(m, {"x": randn(3)}, GEMM)


# ---------------------------------------------------------------------------------------------
# LinearClassifier


def classifier(rows: int, labels: Sequence[int], post: str, c: int = 4, seed: int = 21, **extra) -> onnx.ModelProto:
    return ml_model(
        "LinearClassifier",
        [("x", F32, ["N", c])],
        [("label", I64), ("scores", F32)],
        coefficients=randn(rows * c, seed=seed).tolist(),
        intercepts=randn(rows, seed=seed + 1).tolist(),
        classlabels_ints=list(labels),
        post_transform=post,
        **extra,
    )


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("rows", [2, 3, 5])
def test_linear_classifier_multiclass(post, rows):
    labels = [7 * i - 3 for i in range(rows)]
    x = randn(16, 4, seed=rows)
    if post == "PROBIT":
        # declined (see test_linear_regressor)
        check_declined(classifier(rows, labels, post), {"x": x})
        return
    check(classifier(rows, labels, post), {"x": x}, GEMM, "LinearClassifier")


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("labels", [[0, 1], [3, 7]])
def test_linear_classifier_binary(post, labels):
    if post == "LOGISTIC" and ORT_VERSION <= (1, 23):
        pytest.skip("ORT 1.23 leaves a binary model's LOGISTIC scores untransformed; the EP follows newer ORT (1.31: [1 - sigmoid(s), sigmoid(s)])")
    check(classifier(1, labels, post), {"x": randn(16, 4, seed=2)}, GEMM, "LinearClassifier")


@pytest.mark.parametrize("rows, labels", [(1, [3, 7]), (3, [1, 2, 3])])
def test_linear_classifier_multi_class_attribute(rows, labels):
    # ORT's kernel reads multi_class but computes the same either way.
    for post in ["NONE", "LOGISTIC", "SOFTMAX"]:
        if rows == 1 and post == "LOGISTIC" and ORT_VERSION <= (1, 23):
            continue  # see test_linear_classifier_binary
        check(classifier(rows, labels, post, multi_class=1), {"x": randn(8, 4, seed=4)}, GEMM, "LinearClassifier")


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_linear_classifier_integer_input(dtype):
    # ORT converts the integers to float32 first (2^24 + 1 rounds to 2^24).
    x = np.array([[16777217, 3, -5, 0], [1, 2, 3, 4], [-7, 0, 9, 2]], dtype)
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    m = ml_model(
        "LinearClassifier",
        [("x", t, ["N", 4])],
        [("label", I64), ("scores", F32)],
        coefficients=[1.0, 0.5, 0.25, 0.0, -0.1, 0.0, 0.1, 1.0],
        intercepts=[0.5, -0.5],
        classlabels_ints=[4, 9],
    )
    check(m, {"x": x}, GEMM)


def test_linear_classifier_declines():
    # PROBIT (here of a binary model, whose second score column ORT leaves unwritten).
    m = classifier(1, [0, 1], "PROBIT")
    session = make_session(m, mlx=True)
    run(session, {"x": randn(3, 4)})
    assert_on_cpu(session, ["LinearClassifier"])
    # String labels.
    m = ml_model(
        "LinearClassifier",
        [("x", F32, ["N", 2])],
        [("label", TensorProto.STRING), ("scores", F32)],
        coefficients=[0.5, -0.5, 0.25, 1.0],
        intercepts=[0.0, 0.1],
        classlabels_strings=["a", "b"],
    )
    check_declined(m, {"x": randn(3, 2)})


def test_empty_batch():
    # An empty batch gives empty outputs, as on ORT's CPU EP (MLX refuses to arg-reduce a
    # zero-size array; the runtime answers it with the empty result).
    cases = [
        (classifier(3, [1, 2, 3], "SOFTMAX"), {"x": np.zeros((0, 4), np.float32)}),
        (classifier(1, [1, 2], "LOGISTIC"), {"x": np.zeros((0, 4), np.float32)}),
        (ml_model("LabelEncoder", [("x", I64, ["N"])], [("y", F32)], ml_opset=2, keys_int64s=[1], values_floats=[2.0]), {"x": np.zeros((0,), np.int64)}),
        (ml_model("Normalizer", [("x", F32, ["N", 3])], [("y", F32)], norm="MAX"), {"x": np.zeros((0, 3), np.float32)}),
        (ml_model("OneHotEncoder", [("x", I64, ["N"])], [("y", F32)], cats_int64s=[1, 2], zeros=0), {"x": np.zeros((0,), np.int64)}),
    ]
    for model, feeds in cases:
        check(model, feeds)


# ---------------------------------------------------------------------------------------------
# SVMRegressor


def svm_regressor(kernel: str, supports: int, c: int = 4, one_class: int = 0, params=(0.3, 0.5, 3.0)) -> onnx.ModelProto:
    attrs = dict(kernel_type=kernel, kernel_params=list(params), rho=[0.25], one_class=one_class)
    if supports:
        attrs.update(n_supports=supports, support_vectors=randn(supports * c, seed=31).tolist(), coefficients=randn(supports, seed=32).tolist())
    else:
        attrs.update(coefficients=randn(c, seed=33).tolist())
    return ml_model("SVMRegressor", [("x", F32, ["N", c])], [("y", F32)], **attrs)


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor(kernel, one_class):
    x = randn(12, 4, seed=34) * 0.5
    check(svm_regressor(kernel, 6, one_class=one_class), {"x": x}, SVM)


def test_svm_regressor_linear_model():
    check(svm_regressor("LINEAR", 0), {"x": randn(5, 4)}, GEMM)


def test_svm_regressor_post_transform_stays_on_cpu():
    m = svm_regressor("RBF", 3)
    m.graph.node[0].attribute.append(helper.make_attribute("post_transform", "LOGISTIC"))
    check_declined(m, {"x": randn(3, 4)})
