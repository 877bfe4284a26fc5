"""Models stamped with the newest onnx's default opset, newer than the planner's newest
(``ai.onnx`` 26): a node whose op got no new schema since is claimed and runs on MLX exactly
as at opset 26; an op that changed (Mod got a new schema in opset 28) stays on ORT, and the
session's warning names the reason.

Only an ORT that loads such models can run this: ``cargo xtask test`` runs this file in the
opset-forward environment (onnxruntime 1.32.0 with onnx 1.23.2, which stamps opset 28). In
the pinned environments (onnx 1.21.0 stamps opset 26) it is skipped.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.defs
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import assert_all_on_mlx, assert_on_cpu, assert_on_mlx, check_against_cpu, make_session, run
from test_placement_summary import run_child

#: The newest ai.onnx opset the planner implements (plan::MAX_KNOWN_OPSET).
PLANNER_OPSET = 26
DEFAULT_OPSET = onnx.defs.onnx_opset_version()

pytestmark = pytest.mark.skipif(
    DEFAULT_OPSET <= PLANNER_OPSET,
    reason=f"onnx {onnx.__version__} stamps opset {DEFAULT_OPSET}, which the planner knows; "
    "the opset-forward stage of `cargo xtask test` runs this with the newest onnx",
)


def newest_opset_model(nodes, initializers=(), shape=(2, 3, 8)) -> onnx.ModelProto:
    """``x`` -> nodes -> ``y``, with onnx's defaults: IR version and opset of this onnx."""
    graph = helper.make_graph(
        nodes,
        "forward",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=list(initializers),
    )
    model = helper.make_model(graph)
    assert model.opset_import[0].version == DEFAULT_OPSET > PLANNER_OPSET
    return model


def test_unchanged_ops_run_on_mlx(mlx_ep):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    scale = numpy_helper.from_array(np.ones(8, np.float32), "scale")
    axes = numpy_helper.from_array(np.array([2], np.int64), "axes")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("LayerNormalization", ["m", "scale"], ["n"], axis=-1),
        helper.make_node("Gelu", ["n"], ["g"]),
        helper.make_node("Softmax", ["g"], ["s"]),
        helper.make_node("ReduceMean", ["s", "axes"], ["r"]),
        helper.make_node("Sub", ["s", "r"], ["d"]),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    model = newest_opset_model(nodes, [w, scale, axes])
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    check_against_cpu(model, {"x": x}, all_on_mlx=True)


def test_changed_op_stays_on_ort_with_the_reason(mlx_ep, tmp_path):
    # Mod got a new schema in opset 28; Relu did not.
    assert DEFAULT_OPSET >= 28
    c = numpy_helper.from_array(np.array(0.75, np.float32), "c")
    nodes = [helper.make_node("Mod", ["x", "c"], ["m"], fmod=1), helper.make_node("Relu", ["m"], ["y"])]
    model = newest_opset_model(nodes, [c], shape=(2, 3))
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    session = make_session(model)
    expected = run(make_session(model, mlx=False), {"x": x})
    np.testing.assert_allclose(run(session, {"x": x})[0], expected[0], rtol=1e-6)
    assert_on_mlx(session, ["Relu"])
    assert_on_cpu(session, ["Mod"])

    lines, _, stderr = run_child(tmp_path, model)
    assert len(lines) == 1, stderr
    assert lines[0].group(1, 2) == ("1", "2"), lines[0].group(0)
    assert "Op Mod got a new schema in opset 28, which this planner does not implement" in lines[0].group(3)


def test_planner_opset_model_is_unchanged(mlx_ep):
    """The same graph at the planner's own opset still runs on MLX (the reference case)."""
    model = newest_opset_model([helper.make_node("Relu", ["x"], ["y"])])
    model.opset_import[0].version = PLANNER_OPSET
    session = make_session(model)
    run(session, {"x": np.ones((2, 3, 8), np.float32)})
    assert_all_on_mlx(session)
