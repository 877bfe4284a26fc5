"""Models exported with skl2onnx from scikit-learn estimators trained here on small random
data, run on the MLX EP against ORT's CPU EP, with their ``ai.onnx.ml`` nodes asserted to have
run on MLX. scikit-learn and skl2onnx are pinned in the newest ORT's environment only
(``cargo xtask setup``); elsewhere the module is skipped.

Tolerances as in ``test_ml_ops.py``: elementwise preprocessing compares exactly; linear models
compare at rtol 1e-6, atol 1e-7 (ORT's GEMM and its vectorised LOGISTIC / SOFTMAX); labels
exactly.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="scikit-learn is installed only in the newest ORT's environment (cargo xtask setup)")
pytest.importorskip("skl2onnx", reason="skl2onnx is installed only in the newest ORT's environment (cargo xtask setup)")

from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from sklearn.svm import SVR  # noqa: E402
from sklearn.preprocessing import Binarizer, MaxAbsScaler, Normalizer, OneHotEncoder, StandardScaler  # noqa: E402
from onnx import helper as onnx_helper  # noqa: E402
from skl2onnx import to_onnx  # noqa: E402

from conftest import assert_on_cpu, assert_on_mlx, assert_outputs_match, check_against_cpu, make_session, run  # noqa: E402

EXACT = dict(rtol=0.0, atol=0.0)
GEMM = dict(rtol=1e-6, atol=1e-7)
SVM = dict(rtol=5e-6, atol=1e-6)
SVC_TOL = dict(rtol=1e-5, atol=1e-5)


def data(n: int = 40, c: int = 5, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((n, c)) * 3 + 1).astype(np.float32)


def export(estimator, x: np.ndarray, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_onnx(estimator, x[:1], target_opset={"": 17, "ai.onnx.ml": 3}, options=options or None)


def ml_ops(model) -> list[str]:
    return sorted({n.op_type for n in model.graph.node if n.domain == "ai.onnx.ml"})


@pytest.mark.parametrize("make", [StandardScaler, MaxAbsScaler, lambda: StandardScaler(with_mean=False)])
def test_scalers(make):
    x = data()
    m = export(make().fit(x), x)
    assert ml_ops(m) == ["Scaler"]
    check_against_cpu(m, {"X": data(seed=1)}, ["Scaler"], **EXACT)


@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_normalizer(norm):
    x = data()
    m = export(Normalizer(norm=norm).fit(x), x)
    check_against_cpu(m, {"X": data(seed=2)}, ["Normalizer"], **EXACT)


def test_binarizer():
    x = data()
    m = export(Binarizer(threshold=0.75).fit(x), x)
    check_against_cpu(m, {"X": data(seed=3)}, ["Binarizer"], **EXACT)


@pytest.mark.parametrize("strategy", ["mean", "median", "constant"])
def test_simple_imputer(strategy):
    x = data()
    x[::4, 1] = np.nan
    x[::7, 3] = np.nan
    m = export(SimpleImputer(strategy=strategy, fill_value=-2.5).fit(x), x)
    feed = data(seed=4)
    feed[::3, 0] = np.nan
    feed[1::5, 3] = np.nan
    check_against_cpu(m, {"X": feed}, ["Imputer"], **EXACT)


def test_linear_regression():
    x = data()
    y = x @ np.array([1.0, -2.0, 0.5, 3.0, 0.25]) + 0.1
    check_against_cpu(export(LinearRegression().fit(x, y), x), {"X": data(seed=5)}, ["LinearRegressor"], **GEMM)
    y2 = np.stack([y, -y + x[:, 0]], axis=1)
    check_against_cpu(export(LinearRegression().fit(x, y2), x), {"X": data(seed=5)}, ["LinearRegressor"], **GEMM)


@pytest.mark.parametrize("classes", [2, 3, 4])
def test_logistic_regression(classes):
    x = data(60)
    labels = np.random.default_rng(6).integers(0, classes, 60) * 3 + 1  # int64 labels 1, 4, 7, ...
    m = export(LogisticRegression(max_iter=500).fit(x, labels), x, zipmap=False)
    assert "LinearClassifier" in ml_ops(m)
    check_against_cpu(m, {"X": data(25, seed=7)}, ml_ops(m), **GEMM)


def test_one_hot_encoder_over_ints():
    x = np.random.default_rng(8).integers(0, 5, (30, 3)).astype(np.int64)
    m = export(OneHotEncoder(handle_unknown="ignore").fit(x), x)
    feed = np.random.default_rng(9).integers(0, 6, (12, 3)).astype(np.int64)  # 5 is unknown
    check_against_cpu(m, {"X": feed}, ["OneHotEncoder"], **EXACT)


@pytest.mark.parametrize("kernel", ["linear", "poly", "rbf", "sigmoid"])
def test_svr(kernel):
    x = data(50) * 0.3
    y = x @ np.array([1.0, -2.0, 0.5, 3.0, 0.25]) + np.sin(x[:, 0])
    m = export(SVR(kernel=kernel, degree=2, gamma=0.2, coef0=0.5, C=2.0).fit(x, y), x)
    assert ml_ops(m) == ["SVMRegressor"]
    check_against_cpu(m, {"X": data(20, seed=10) * 0.3}, ["SVMRegressor"], **SVM)


# ---------------------------------------------------------------------------------------------
# Tree ensembles (and the pipelines the issue names). Feeds of 40 rows keep ORT's kernel on its
# serial path (it splits the trees across threads above 50 rows, which changes the order of
# its sums); within it the sums are ORT's own order, so scores compare exactly, and through
# ORT's LOGISTIC / SOFTMAX (MLX's exp differs in the last bits) at rtol 1e-6, atol 1e-7.

from sklearn.ensemble import (  # noqa: E402
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor  # noqa: E402

TREES = dict(rtol=1e-6, atol=1e-7)


def labels_of(x: np.ndarray, classes: int) -> np.ndarray:
    score = x[:, 0] + 0.5 * x[:, 1] * x[:, 2] + np.random.default_rng(11).standard_normal(len(x))
    edges = np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1])
    return np.searchsorted(edges, score) * 3 + 2  # int64 labels 2, 5, 8, ...


REGRESSORS = {
    "decision_tree": lambda: DecisionTreeRegressor(max_depth=6, random_state=0),
    "random_forest": lambda: RandomForestRegressor(n_estimators=12, max_depth=5, random_state=0),
    "gradient_boosting": lambda: GradientBoostingRegressor(n_estimators=20, max_depth=3, random_state=0),
}

CLASSIFIERS = {
    "decision_tree": lambda: DecisionTreeClassifier(max_depth=6, random_state=0),
    "random_forest": lambda: RandomForestClassifier(n_estimators=12, max_depth=5, random_state=0),
    "gradient_boosting": lambda: GradientBoostingClassifier(n_estimators=15, max_depth=3, random_state=0),
}


@pytest.mark.parametrize("name", sorted(REGRESSORS))
def test_tree_regressors(name):
    x = data(200)
    y = x[:, 0] * 2 - x[:, 1] * x[:, 3] + np.sin(x[:, 2])
    m = export(REGRESSORS[name]().fit(x, y), x)
    assert ml_ops(m) == ["TreeEnsembleRegressor"]
    feed = data(40, seed=12)
    feed[3] = x[5]  # a training row: lands on thresholds' exact sides
    check_against_cpu(m, {"X": feed}, ["TreeEnsembleRegressor"], **EXACT)


def test_random_forest_two_targets():
    x = data(200)
    y = np.stack([x[:, 0] - x[:, 1], x[:, 2] * x[:, 3]], axis=1)
    m = export(RandomForestRegressor(n_estimators=8, max_depth=4, random_state=0).fit(x, y), x)
    check_against_cpu(m, {"X": data(40, seed=13)}, ["TreeEnsembleRegressor"], **EXACT)


@pytest.mark.parametrize("classes", [2, 3, 4])
@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_tree_classifiers(name, classes):
    x = data(200)
    m = export(CLASSIFIERS[name]().fit(x, labels_of(x, classes)), x, zipmap=False)
    assert "TreeEnsembleClassifier" in ml_ops(m)
    tol = EXACT if name != "gradient_boosting" else TREES
    check_against_cpu(m, {"X": data(40, seed=14)}, ml_ops(m), **tol)


def test_pipeline_scaler_and_random_forest_fully_on_mlx():
    x = data(200)
    pipe = make_pipeline(StandardScaler(), RandomForestClassifier(n_estimators=10, max_depth=5, random_state=0))
    m = export(pipe.fit(x, labels_of(x, 3)), x, zipmap=False)
    assert set(ml_ops(m)) == {"Scaler", "TreeEnsembleClassifier"}
    check_against_cpu(m, {"X": data(40, seed=15)}, None, all_on_mlx=True, **EXACT)


def test_pipeline_scaler_and_gradient_boosting_fully_on_mlx():
    x = data(200)
    pipe = make_pipeline(StandardScaler(), GradientBoostingRegressor(n_estimators=25, max_depth=3, random_state=0))
    m = export(pipe.fit(x, x[:, 0] * x[:, 1] - x[:, 4]), x)
    check_against_cpu(m, {"X": data(40, seed=16)}, None, all_on_mlx=True, **EXACT)


def test_random_forest_as_tree_ensemble_opset_5():
    # skl2onnx writes the opset 3 regressor (invalid at ai.onnx.ml 5); the same trees as
    # TreeEnsemble, through the hand-written tests' converter.
    from test_ml_ops import to_v5, ml_model as one_node

    x = data(200)
    m3 = export(RandomForestRegressor(n_estimators=6, max_depth=4, random_state=0).fit(x, x[:, 0] - x[:, 2]), x)
    a = {at.name: onnx_helper.get_attribute_value(at) for at in m3.graph.node[0].attribute}
    leaf = [mode == b"LEAF" for mode in a["nodes_modes"]]
    nodes = [
        [t, n, f, v, "LEAF" if lf else mode.decode(), tr, fa, 0]
        for t, n, f, v, mode, tr, fa, lf in zip(
            a["nodes_treeids"], a["nodes_nodeids"], a["nodes_featureids"], a["nodes_values"], a["nodes_modes"],
            a["nodes_truenodeids"], a["nodes_falsenodeids"], leaf,
        )
    ]
    votes = [list(v) for v in zip(a["target_treeids"], a["target_nodeids"], a["target_ids"], a["target_weights"])]
    m5 = one_node("TreeEnsemble", [("X", 1, ["N", 5])], [("Y", 1)], ml_opset=5, **to_v5(nodes, votes, 1))
    feed = {"X": data(40, seed=17)}
    check_against_cpu(m5, feed, ["TreeEnsemble"], **EXACT)
    np.testing.assert_array_equal(run(make_session(m5, mlx=True), feed)[0], run(make_session(m3, mlx=False), feed)[0])


# ---------------------------------------------------------------------------------------------
# SVC (SVMClassifier): labels exactly (the random data keeps every score far from the 0 that
# decides a vote); one-vs-one scores at SVC's tolerance: ORT adds each pair's ~50 weighted
# kernels in float64, MLX's product in float32, and they cancel (seen: 3.4e-6 on scores of 2).

from sklearn.svm import SVC  # noqa: E402


@pytest.mark.parametrize("kernel", ["linear", "poly", "rbf", "sigmoid"])
@pytest.mark.parametrize("classes", [2, 3, 4])
def test_svc(kernel, classes):
    x = data(80) * 0.3
    m = export(SVC(kernel=kernel, degree=2, gamma=0.3, coef0=0.5, C=2.0).fit(x, labels_of(x, classes)), x, zipmap=False)
    assert "SVMClassifier" in ml_ops(m)
    check_against_cpu(m, {"X": data(30, seed=18) * 0.3}, ["SVMClassifier"], **SVC_TOL)


def test_pipeline_scaler_and_svc_fully_on_mlx():
    x = data(80)
    pipe = make_pipeline(StandardScaler(), SVC(kernel="rbf", C=3.0))
    m = export(pipe.fit(x, labels_of(x, 2)), x, zipmap=False)
    check_against_cpu(m, {"X": data(30, seed=19)}, None, all_on_mlx=True, **SVC_TOL)


def test_svc_with_probabilities_stays_on_cpu():
    x = data(80) * 0.3
    m = export(SVC(probability=True, random_state=0).fit(x, labels_of(x, 3)), x, zipmap=False)
    feeds = {"X": data(10, seed=20) * 0.3}
    expected = run(make_session(m, mlx=False), feeds)
    session = make_session(m, mlx=True)
    assert_outputs_match(run(session, feeds), expected, rtol=0, atol=0)
    assert_on_cpu(session, ["SVMClassifier"])


def test_zipmap_stays_on_cpu_after_a_forest_on_mlx():
    x = data(200)
    m = export(RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0).fit(x, labels_of(x, 3)), x)
    assert "ZipMap" in ml_ops(m)
    feeds = {"X": data(20, seed=21)}
    expected = run(make_session(m, mlx=False), feeds)
    session = make_session(m, mlx=True)
    actual = run(session, feeds)
    np.testing.assert_array_equal(actual[0], expected[0])
    assert actual[1] == expected[1]  # one {label: probability} map per row, bit for bit
    assert_on_mlx(session, ["TreeEnsembleClassifier"])
    assert_on_cpu(session, ["ZipMap"])
