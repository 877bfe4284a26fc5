"""The ``ai.onnx.ml`` numeric ops on the MLX EP against ORT's CPU EP (which implements the
domain): tiny graphs built with onnx.helper over several attribute combinations and dtypes,
the same feeds on both EPs, outputs compared, and the node under test asserted to have run on
MLX. Elementwise ops compare exactly (rtol = atol = 0). The linear models' scores come out of
a matrix product, which ORT computes with its own GEMM (its order of adds may differ from
MLX's for wide inputs; the small ones here happen to agree bit for bit), and ORT applies
LOGISTIC and SOFTMAX with MLAS's vectorised exp/logistic approximations, which differ from
MLX's in the last bits: those compare at rtol 1e-6, atol 1e-7.

Forms MLX can't run exactly (attribute values ORT rejects or mishandles) must stay
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


def test_label_encoder_int_to_string_runs_on_mlx():
    """String maps run as a host kernel (``test_string_ops.py`` has every form)."""
    m = ml_model("LabelEncoder", [("x", I64, [3])], [("y", TensorProto.STRING)], ml_opset=2, keys_int64s=[1, 2], values_strings=["a", "b"])
    check(m, {"x": np.array([1, 2, 5], np.int64)})


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


# ---------------------------------------------------------------------------------------------
# Tree ensembles. Random forests written here (thresholds on a grid the integer-valued feeds
# hit exactly, so every comparison's equality side is exercised), as ai.onnx.ml 1/3 attributes
# and as TreeEnsemble (ai.onnx.ml 5). Feeds stay under ORT's 50 rows so its kernel sums the
# trees serially, in the order the MLX lowering does: scores compare exactly, and at GEMM's
# tolerance through ORT's LOGISTIC / SOFTMAX (its exp).

MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def random_trees(seed, *, trees=4, depth=4, features=3, modes=("BRANCH_LEQ",), targets=1, missing=False, votes="all"):
    """Nodes of ``trees`` random trees as lists (tree id, node id, feature, value, mode, true,
    false, missing-tracks-true) and leaf votes (tree id, node id, target, weight). ``votes``:
    "all" targets per leaf, "one" random target per leaf, "sparse" a random subset."""
    rng = np.random.default_rng(seed)
    nodes, leaf_votes = [], []
    for t in range(trees):
        counter = [0]

        def grow(d):
            nid = counter[0]
            counter[0] += 1
            row = [t, nid, 0, 0.0, "LEAF", 0, 0, 0]
            nodes.append(row)
            if d == depth or (d > 1 and rng.random() < 0.25):
                ks = list(range(targets))
                if votes == "one":
                    ks = [int(rng.integers(targets))]
                elif votes == "sparse":
                    ks = [k for k in ks if rng.random() < 0.5] or [int(rng.integers(targets))]
                for k in ks:
                    leaf_votes.append([t, nid, k, float(np.float32(rng.normal() * 2))])
                return nid
            row[2] = int(rng.integers(features))
            row[3] = float(rng.integers(-3, 4)) / 2
            row[4] = str(rng.choice(list(modes)))
            row[7] = int(missing and rng.random() < 0.5)
            row[5] = grow(d + 1)
            row[6] = grow(d + 1)
            return nid

        grow(0)
    return nodes, leaf_votes


def v3_attrs(nodes, leaf_votes, prefix="target"):
    cols = list(zip(*nodes))
    votes = list(zip(*leaf_votes))
    return dict(
        nodes_treeids=list(cols[0]),
        nodes_nodeids=list(cols[1]),
        nodes_featureids=list(cols[2]),
        nodes_values=list(cols[3]),
        nodes_modes=list(cols[4]),
        nodes_truenodeids=list(cols[5]),
        nodes_falsenodeids=list(cols[6]),
        nodes_missing_value_tracks_true=list(cols[7]),
        **{
            f"{prefix}_treeids": list(votes[0]),
            f"{prefix}_nodeids": list(votes[1]),
            f"{prefix}_ids": list(votes[2]),
            f"{prefix}_weights": list(votes[3]),
        },
    )


def tree_feed(rows=30, features=3, seed=20, nan=False):
    x = np.random.default_rng(seed).integers(-4, 5, (rows, features)).astype(np.float32) / 2
    x[::5] += 0.25
    if nan:
        x[1::4, 0] = np.nan
        x[2::7, 2] = np.nan
    return x


def tree_regressor(nodes, votes, targets=1, features=3, dtype=F32, ml_opset=3, **attrs):
    return ml_model(
        "TreeEnsembleRegressor", [("x", dtype, ["N", features])], [("y", F32)], ml_opset=ml_opset,
        n_targets=targets, **v3_attrs(nodes, votes), **attrs,
    )


def tree_classifier(nodes, votes, labels, features=3, dtype=F32, **attrs):
    return ml_model(
        "TreeEnsembleClassifier", [("x", dtype, ["N", features])], [("label", I64), ("y", F32)], ml_opset=3,
        classlabels_int64s=labels, **v3_attrs(nodes, votes, "class"), **attrs,
    )


def check_trees(model, feeds, tol=EXACT):
    check_against_cpu(model, feeds, [model.graph.node[0].op_type], **tol)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("missing", [False, True])
def test_tree_regressor_modes(mode, missing):
    nodes, votes = random_trees(1, modes=(mode,), missing=missing)
    check_trees(tree_regressor(nodes, votes), {"x": tree_feed(nan=True)})


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("targets,votes", [(1, "all"), (3, "all"), (3, "sparse")])
def test_tree_regressor_aggregates(aggregate, targets, votes):
    nodes, leaf_votes = random_trees(2, trees=5, depth=5, modes=MODES, targets=targets, missing=True, votes=votes)
    base = {"base_values": [0.5, -1.25, 2.0][:targets]} if targets == 3 or aggregate == "SUM" else {}
    if targets == 1 and aggregate == "SUM":
        base = {"base_values": [0.75]}
    m = tree_regressor(nodes, leaf_votes, targets, aggregate_function=aggregate, **base)
    check_trees(m, {"x": tree_feed(40, nan=True)})


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_tree_regressor_post_transforms(post):
    nodes, votes = random_trees(3, targets=3, votes="sparse", modes=MODES)
    check_trees(tree_regressor(nodes, votes, 3, post_transform=post), {"x": tree_feed()}, EXACT if post == "NONE" else GEMM)
    # One target ignores every transform but PROBIT.
    nodes, votes = random_trees(3)
    check_trees(tree_regressor(nodes, votes, 1, post_transform=post), {"x": tree_feed()})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_tree_classifier_integer_features(dtype):
    # ORT 1.31 has integer kernels of the classifier only.
    nodes, votes = random_trees(4, modes=MODES, targets=3)
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    x = np.random.default_rng(5).integers(-3, 4, (20, 3)).astype(dtype)
    check_trees(tree_classifier(nodes, votes, [1, 2, 3], dtype=t), {"x": x})


def test_tree_regressor_opset_1_and_float_as_tensor():
    nodes, votes = random_trees(6, modes=MODES)
    check_trees(tree_regressor(nodes, votes, ml_opset=1), {"x": tree_feed()})
    attrs = v3_attrs(nodes, votes)
    values = attrs.pop("nodes_values")
    weights = attrs.pop("target_weights")
    m = ml_model(
        "TreeEnsembleRegressor", [("x", F32, ["N", 3])], [("y", F32)], ml_opset=3, n_targets=1, **attrs,
        nodes_values_as_tensor=helper.make_tensor("v", F32, [len(values)], values),
        target_weights_as_tensor=helper.make_tensor("w", F32, [len(weights)], weights),
    )
    check_trees(m, {"x": tree_feed()})


def test_tree_regressor_unknown_rank_checked_at_run_time():
    nodes, votes = random_trees(8, features=3)
    attrs = v3_attrs(nodes, votes)
    assert max(attrs["nodes_featureids"]) == 2
    node = helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain=ML, n_targets=1, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F32, None)], [helper.make_tensor_value_info("y", F32, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    m.ir_version = 8
    check_trees(m, {"x": tree_feed()})
    check_fails(m, {"x": tree_feed(features=2)}, "C > 2|out of range")
    check_fails(m, {"x": tree_feed().reshape(2, 15, 3)}, "C > 2|out of range")


@pytest.mark.parametrize("classes,votes,base", [(3, "all", False), (3, "sparse", False), (4, "sparse", True), (3, "one", True)])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_tree_classifier_multiclass(classes, votes, base, post):
    nodes, leaf_votes = random_trees(9, trees=5, modes=MODES, targets=classes, missing=True, votes=votes)
    labels = [3, -1, 10, 7][:classes]
    extra = {"base_values": [0.25, -0.5, 1.0, 0.0][:classes]} if base else {}
    m = tree_classifier(nodes, leaf_votes, labels, post_transform=post, **extra)
    check_trees(m, {"x": tree_feed(40, nan=True)}, EXACT if post == "NONE" else GEMM)


def binary_votes(leaf_votes, rule, rng):
    """Two-class votes: 'class0' / 'class1' (one class id, ORT's binary case), 'both'."""
    out = []
    for t, n, _, w in leaf_votes:
        if rule == "both":
            out += [[t, n, 0, -w], [t, n, 1, w]]
        else:
            out.append([t, n, int(rule == "class1"), w])
    return out


@pytest.mark.parametrize("rule", ["class0", "class1", "both"])
@pytest.mark.parametrize("positive", [True, False])
@pytest.mark.parametrize("base", [0, 1])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_tree_classifier_binary(rule, positive, base, post):
    if post == "LOGISTIC" and positive and rule != "both" and ORT_VERSION <= (1, 23):
        pytest.skip("ORT 1.23 leaves these binary scores untransformed; the EP follows newer ORT (1.31: [1 - logistic(s), logistic(s)])")
    rng = np.random.default_rng(10)
    nodes, leaf_votes = random_trees(11, trees=3, modes=MODES)
    if positive:
        leaf_votes = [[t, n, k, abs(w) / 4] for t, n, k, w in leaf_votes]
    votes = binary_votes(leaf_votes, rule, rng)
    extra = {"base_values": [0.3]} if base else {}
    m = tree_classifier(nodes, votes, [4, 9], post_transform=post, **extra)
    check_trees(m, {"x": tree_feed(40)}, EXACT if post == "NONE" else GEMM)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_tree_classifier_binary_sparse_class1(post):
    # Only some leaves vote for class 1: rows without one take ORT's single-score path.
    nodes, leaf_votes = random_trees(12, trees=3, targets=2, votes="sparse")
    m = tree_classifier(nodes, leaf_votes, [0, 1], post_transform=post)
    check_trees(m, {"x": tree_feed(40)}, EXACT if post == "NONE" else GEMM)
    # With one base value ORT leaves such rows' second score unwritten: not claimed.
    check_declined(tree_classifier(nodes, leaf_votes, [0, 1], base_values=[0.5]), {"x": tree_feed(40)})


def to_v5(nodes, leaf_votes, targets, member_sets=None):
    """ai.onnx.ml 5 attributes for the same trees; ``member_sets`` maps (tree, node) to a set
    that replaces that node's comparison by BRANCH_MEMBER."""
    code = {m: i for i, m in enumerate(MODES)}
    index, leaf_index, roots = {}, {}, []
    inner = [r for r in nodes if r[4] != "LEAF"]
    leaves = [r for r in nodes if r[4] == "LEAF"]
    for i, r in enumerate(inner):
        index[(r[0], r[1])] = i
    for j, r in enumerate(leaves):
        leaf_index[(r[0], r[1])] = j
    by_tree = {}
    for r in nodes:
        by_tree.setdefault(r[0], r)
    for t, root in by_tree.items():
        roots.append(index[(t, root[1])])
    weight = {(t, n): (k, w) for t, n, k, w in leaf_votes}
    members, modes, splits = [], [], []
    for r in inner:
        s = (member_sets or {}).get((r[0], r[1]))
        modes.append(6 if s else code[r[4]])
        splits.append(0.0 if s else r[3])
        if s:
            members += list(s) + [float("nan")]

    def child(t, n):
        return (leaf_index[(t, n)], 1) if (t, n) in leaf_index else (index[(t, n)], 0)

    trues = [child(r[0], r[5]) for r in inner]
    falses = [child(r[0], r[6]) for r in inner]
    attrs = dict(
        n_targets=targets, tree_roots=roots,
        nodes_featureids=[r[2] for r in inner],
        nodes_splits=helper.make_tensor("s", F32, [len(inner)], splits),
        nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [len(inner)], modes),
        nodes_truenodeids=[c[0] for c in trues], nodes_trueleafs=[c[1] for c in trues],
        nodes_falsenodeids=[c[0] for c in falses], nodes_falseleafs=[c[1] for c in falses],
        nodes_missing_value_tracks_true=[r[7] for r in inner],
        leaf_targetids=[weight[(r[0], r[1])][0] for r in leaves],
        leaf_weights=helper.make_tensor("w", F32, [len(leaves)], [weight[(r[0], r[1])][1] for r in leaves]),
    )
    if members:
        attrs["membership_values"] = helper.make_tensor("mv", F32, [len(members)], members)
    return attrs


def v5_model(attrs, features=3, **extra):
    return ml_model("TreeEnsemble", [("x", F32, ["N", features])], [("y", F32)], ml_opset=5, **attrs, **extra)


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("targets", [1, 3])
def test_tree_ensemble_v5(aggregate, targets):
    nodes, votes = random_trees(13, trees=4, modes=MODES, targets=targets, missing=True, votes="one")
    m = v5_model(to_v5(nodes, votes, targets), aggregate_function=aggregate)
    check_trees(m, {"x": tree_feed(40, nan=True)})


@pytest.mark.parametrize("post", [1, 2, 3])
def test_tree_ensemble_v5_post_transforms(post):
    # ORT reads 1 as LOGISTIC and 2 as SOFTMAX (its enum order; the spec has them swapped).
    nodes, votes = random_trees(14, targets=3, votes="one")
    check_trees(v5_model(to_v5(nodes, votes, 3), post_transform=post), {"x": tree_feed()}, GEMM)


@pytest.mark.parametrize("missing", [False, True])
def test_tree_ensemble_v5_member_sets(missing):
    nodes, votes = random_trees(15, trees=3, missing=missing)
    inner = [(r[0], r[1]) for r in nodes if r[4] != "LEAF"]
    sets = {inner[0]: [0.0, 1.5, 2.0], inner[2]: [1.0], inner[-1]: [30.0, 0.5, 1.0, 2.0]}
    m = v5_model(to_v5(nodes, votes, 1, sets))
    x = tree_feed(40, nan=True)
    x[::3, :] = np.abs(x[::3, :])
    check_trees(m, {"x": x})


def test_tree_ensemble_v5_large_member_set_stays_on_cpu():
    nodes, votes = random_trees(16, trees=2)
    inner = [(r[0], r[1]) for r in nodes if r[4] != "LEAF"]
    m = v5_model(to_v5(nodes, votes, 1, {inner[0]: [float(v) for v in range(0, 40, 3)]}))
    check_declined(m, {"x": tree_feed()})


def test_tree_ensembles_declined_forms_stay_on_cpu():
    nodes, votes = random_trees(17, targets=3)
    feeds = {"x": tree_feed()}
    check_declined(tree_regressor(nodes, votes, 3, post_transform="PROBIT"), feeds)
    # Two classes with two base values: ORT's rule for them is not reproduced.
    nodes, votes = random_trees(18)
    check_declined(tree_classifier(nodes, votes, [0, 1], base_values=[0.1, 0.2]), feeds)


# ---------------------------------------------------------------------------------------------
# SVMClassifier: small hand-made models (one-vs-one over support vectors, and the linear form).
# Scores at SVM's tolerance (ORT's GEMM, its float64 pair sums and MLAS's transforms); labels
# exactly.


def svc_model(classes, *, kernel="RBF", vectors=None, post="NONE", features=3, dtype=F32, seed=30, linear=False, **extra):
    rng = np.random.default_rng(seed)
    labels = [5, -2, 11, 0][:classes]
    attrs = dict(kernel_type=kernel, kernel_params=[0.4, 0.25, 2.0], post_transform=post, classlabels_ints=labels)
    if linear:
        attrs.update(coefficients=list(rng.normal(size=classes * features)), rho=[0.3])
    else:
        vectors = vectors or [2, 3, 1, 2][:classes]
        v = sum(vectors)
        attrs.update(
            vectors_per_class=vectors,
            support_vectors=list(rng.normal(size=v * features)),
            coefficients=list(rng.normal(size=(classes - 1) * v) * 2),
            rho=list(rng.normal(size=classes * (classes - 1) // 2)),
        )
    attrs.update(extra)
    return ml_model("SVMClassifier", [("x", dtype, ["N", features])], [("label", I64), ("y", F32)], **attrs)


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("classes", [2, 3, 4])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_svm_classifier(kernel, classes, post):
    if classes == 2 and post == "LOGISTIC" and ORT_VERSION <= (1, 23):
        pytest.skip("ORT 1.23 writes a binary SVM's LOGISTIC scores as [1 - s, s]; the EP follows newer ORT (1.31: [1 - logistic(s), logistic(s)])")
    check(svc_model(classes, kernel=kernel, post=post), {"x": randn(24, 3, seed=31)}, SVM)


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
@pytest.mark.parametrize("seed", [32, 33])
def test_svm_classifier_linear_form(classes, post, seed):
    check(svc_model(classes, linear=True, post=post, seed=seed), {"x": randn(24, 3, seed=34)}, SVM)


def test_svm_classifier_linear_form_positive_weights():
    # All coefficients positive: ORT's binary rule picks the second label from a best score of 0.5.
    m = svc_model(2, linear=True, coefficients=[0.1, 0.2, 0.3, 0.05, 0.1, 0.4], rho=[0.1])
    check(m, {"x": np.abs(randn(24, 3, seed=35))}, SVM)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_svm_classifier_integer_and_float64_input(dtype):
    # ORT converts the input to float32 first.
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    x = np.random.default_rng(36).integers(-2, 3, (12, 3)).astype(dtype)
    if dtype == np.float64:
        x = x + np.random.default_rng(37).normal(size=x.shape) * 1e-3
    check(svc_model(3, kernel="POLY", dtype=t), {"x": x}, SVM)


def test_svm_classifier_declined_forms_stay_on_cpu():
    feeds = {"x": randn(6, 3, seed=37)}
    check_declined(svc_model(3, post="PROBIT"), feeds)
    check_declined(svc_model(2, prob_a=[0.5], prob_b=[-0.1]), feeds)


# Float64 inputs: ORT compares and sums in float64 (thresholds read from the float attributes
# or from float64 `*_as_tensor` twins), the MLX EP on its CPU stream.
F64 = TensorProto.DOUBLE


def as_tensors(attrs, names, dtype=F64):
    out = dict(attrs)
    for n in names:
        v = out.pop(n)
        out[f"{n}_as_tensor"] = helper.make_tensor(n, dtype, [len(v)], v)
    return out


@pytest.mark.parametrize("as_tensor", [False, True])
@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MAX"])
def test_tree_regressor_float64(as_tensor, aggregate):
    nodes, votes = random_trees(40, trees=5, modes=MODES, targets=3, missing=True, votes="sparse")
    attrs = v3_attrs(nodes, votes)
    attrs["nodes_values"] = [v - 1e-9 if v else v for v in attrs["nodes_values"]]  # just below the feeds' values (as float64)
    attrs["base_values"] = [0.1, 0.2, 0.3]
    if as_tensor:
        attrs = as_tensors(attrs, ["nodes_values", "target_weights", "base_values"])
    m = ml_model("TreeEnsembleRegressor", [("x", F64, ["N", 3])], [("y", F32)], ml_opset=3, n_targets=3, aggregate_function=aggregate, **attrs)
    check_trees(m, {"x": tree_feed(40, nan=True).astype(np.float64)})


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_tree_classifier_float64(classes, post):
    nodes, votes = random_trees(41, trees=4, modes=MODES, targets=classes, votes="all" if classes == 3 else "one")
    if classes == 2:
        votes = [[t, n, 0, w] for t, n, _, w in votes]
    attrs = as_tensors(v3_attrs(nodes, votes, "class"), ["nodes_values", "class_weights"])
    m = ml_model(
        "TreeEnsembleClassifier", [("x", F64, ["N", 3])], [("label", I64), ("y", F32)], ml_opset=3,
        classlabels_int64s=[1, 2, 3][:classes], post_transform=post, **attrs,
    )
    check_trees(m, {"x": tree_feed(40).astype(np.float64)}, EXACT if post == "NONE" else GEMM)


@pytest.mark.parametrize("targets", [1, 3])
def test_tree_ensemble_v5_float64(targets):
    nodes, votes = random_trees(42, trees=4, modes=MODES, targets=targets, missing=True, votes="one")
    attrs = to_v5(nodes, votes, targets)
    for n in ["nodes_splits", "leaf_weights"]:
        t = attrs[n]
        attrs[n] = helper.make_tensor(t.name, F64, list(t.dims), list(onnx.numpy_helper.to_array(t).astype(np.float64) - 1e-10))
    m = ml_model("TreeEnsemble", [("x", F64, ["N", 3])], [("y", F64)], ml_opset=5, **attrs)
    check_trees(m, {"x": tree_feed(40, nan=True).astype(np.float64)})


def test_trees_and_svm_classifier_on_an_empty_batch():
    nodes, votes = random_trees(3, targets=3, votes="sparse", modes=MODES)
    binary = [[t, n, 0, w] for t, n, _, w in random_trees(5)[1]]
    models = [
        tree_regressor(nodes, votes, 3, post_transform="SOFTMAX"),
        tree_classifier(nodes, votes, [1, 2, 3]),
        tree_classifier(random_trees(5)[0], binary, [0, 1]),
        v5_model(to_v5(*random_trees(4, votes="one", targets=2), 2)),
        svc_model(3),
        svc_model(2),
    ]
    for m in models:
        check(m, {"x": np.zeros((0, 3), np.float32)})
