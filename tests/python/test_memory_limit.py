"""A run that would need more memory than MLX's memory limit fails with an error naming the
node, before anything is evaluated, and the session stays usable for smaller inputs. The limit
is process-wide (the EP option ``memory_limit``), so the case runs in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from conftest import DEFAULT_EP_OPTIONS, LIBRARY_VAR

CHILD = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    ort.register_execution_provider_library("ortmlx", os.path.abspath(os.environ[sys.argv[1]]))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"]
    w = np.full((64, 4096), 0.5, np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="wide_matmul"),
         helper.make_node("Mul", ["h", "h"], ["m"], name="square"),
         helper.make_node("ReduceSum", ["m"], ["y"], name="total", keepdims=0)],
        "memory",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.flatten())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    options = json.loads(sys.argv[2])
    options["memory_limit"] = "64M"
    so.add_provider_for_devices(devices, options)
    session = ort.InferenceSession(model.SerializeToString(), sess_options=so)
    result = {}
    try:
        session.run(None, {"x": np.ones((8192, 64), np.float32)})
        result["big"] = "ran"
    except Exception as err:  # noqa: BLE001 - reported to the parent
        result["big"] = str(err)
    for n in (4, 8192 // 4):
        y = session.run(None, {"x": np.ones((n, 64), np.float32)})[0]
        result[f"small_{n}"] = float(y)
    print(json.dumps(result))
    """
)


def test_a_run_over_the_memory_limit_is_an_error_and_the_session_goes_on(mlx_ep):
    import json

    done = subprocess.run(
        [sys.executable, "-c", CHILD, LIBRARY_VAR, json.dumps(DEFAULT_EP_OPTIONS)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # 8192 x 4096 float32 intermediates: 128 MiB live at once, over the 64 MiB limit
    assert "more than MLX's memory limit of 67108864 bytes" in result["big"], result["big"]
    assert "wide_matmul" in result["big"] or "square" in result["big"], result["big"]
    # each element of x @ w is 64 * 0.5 = 32; squared 1024
    for n in (4, 2048):
        assert result[f"small_{n}"] == 1024.0 * n * 4096
