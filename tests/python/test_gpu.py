"""MLX's GPU stream through the EP. Runs where the suite is pointed at a GPU
(``ORTMLX_TEST_DEVICE=gpu``, as ``tests/gpu/device_run.sh`` does on the device machine);
elsewhere (CI has no GPU) it is skipped with that reason."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto, helper

from conftest import assert_on_mlx, make_session, run

pytestmark = pytest.mark.skipif(
    os.environ.get("ORTMLX_TEST_DEVICE") != "gpu",
    reason="no GPU here: the GPU tests run on the device machine through `cargo xtask gpu-check`",
)


def matmul_model(dtype):
    x = helper.make_tensor_value_info("x", dtype, [64, 128])
    y = helper.make_tensor_value_info("y", dtype, [64, 32])
    rng = np.random.default_rng(0)
    w = rng.standard_normal((128, 32)).astype(np.float32 if dtype == TensorProto.FLOAT else np.float64)
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    graph = helper.make_graph([node], "g", [x], [y], [helper.make_tensor("w", dtype, w.shape, w.flatten())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what every supported ORT reads, whatever onnx version built it
    return model, w


def test_float32_matmul_runs_on_the_gpu_stream_without_tf32(capfd):
    model, w = matmul_model(TensorProto.FLOAT)
    session = make_session(model, ep_options={"device": "gpu"})
    x = np.random.default_rng(1).standard_normal((64, 128)).astype(np.float32)
    out = run(session, {"x": x})[0]
    assert_on_mlx(session, ["MatMul"])
    # TF32 would put the error near 1e-3 relative; float32 stays near 1e-6.
    np.testing.assert_allclose(out, x @ w, rtol=1e-4, atol=1e-4)
    lines = [line for line in capfd.readouterr().err.splitlines() if "executable:" in line]
    if lines:  # with ORTMLX_LOG=info the runtime names the stream it chose
        assert "on the Gpu stream" in lines[-1], lines[-1]


def test_float64_runs_on_the_cpu_stream_and_stays_exact(capfd):
    model, w = matmul_model(TensorProto.DOUBLE)
    session = make_session(model, ep_options={"device": "gpu"})
    x = np.random.default_rng(2).standard_normal((64, 128))
    out = run(session, {"x": x})[0]
    np.testing.assert_allclose(out, x @ w, rtol=1e-12)
    lines = [line for line in capfd.readouterr().err.splitlines() if "executable:" in line]
    if lines:  # with ORTMLX_LOG=info: float64 plans go to the CPU stream (no float64 on GPUs)
        assert "on the Cpu stream" in lines[-1], lines[-1]
