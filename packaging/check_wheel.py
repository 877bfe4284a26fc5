#!/usr/bin/env python3
"""Checks an installed ``onnxruntime-mlx-ep`` wheel; ``cargo xtask package`` runs it in a fresh
virtual environment holding only onnxruntime, numpy, onnx and the wheel, with a scrubbed
environment (no ``LD_LIBRARY_PATH``, ``HOME`` elsewhere).

1. The module follows ORT's plugin packaging convention and registers once (twice is fine).
2. A small model (MatMul, Add, Relu, Softmax) runs on the MLX EP, matches numpy, and every
   node is placed on ``MLXExecutionProvider`` (assignment info on ORT >= 1.24, the profile on
   1.23).
3. ``/proc/self/maps`` shows that libmlx, libmlxc, OpenBLAS and the Fortran runtime were
   loaded from the installed package, and nothing from the build's cache or the system's
   OpenBLAS.

Prints a JSON summary on success; exits non-zero with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

# Import the installed package, never the source next to this script.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

import onnxruntime_mlx_ep as mlx_ep

EP = "MLXExecutionProvider"


def fail(message: str) -> None:
    sys.exit(f"check_wheel: FAIL: {message}")


def model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8,)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="matmul"),
        helper.make_node("Add", ["mm", "b"], ["add"], name="add"),
        helper.make_node("Relu", ["add"], ["relu"], name="relu"),
        helper.make_node("Softmax", ["relu"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "wheel_check",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.flatten()), helper.make_tensor("b", TensorProto.FLOAT, b.shape, b)],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def reference(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    z = np.maximum(x @ inits["w"] + inits["b"], 0)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def placements(session) -> list[tuple[str, str]]:
    """(ep, op type) of every node (ORT >= 1.24) or every kernel that ran (1.23)."""
    if hasattr(session, "get_provider_graph_assignment_info"):
        return [(sg.ep_name, n.op_type) for sg in session.get_provider_graph_assignment_info() for n in sg.get_nodes()]
    path = session.end_profiling()
    with open(path) as f:
        events = json.load(f)
    return [
        (e["args"].get("provider", "?"), e["args"].get("op_name", "?"))
        for e in events
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")
    ]


def mapped_libraries() -> list[str]:
    paths = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and ".so" in parts[5]:
                paths.add(parts[5].strip())
    return sorted(paths)


def main() -> None:
    if os.environ.get("LD_LIBRARY_PATH"):
        fail("LD_LIBRARY_PATH is set; the check must run without it")
    package_dir = os.path.dirname(os.path.abspath(mlx_ep.__file__))
    lib = mlx_ep.get_library_path()
    if not lib.startswith(package_dir) or not os.path.isfile(lib):
        fail(f"get_library_path() = {lib!r} is not a file inside {package_dir}")
    if mlx_ep.get_ep_name() != EP or mlx_ep.get_ep_names() != [EP]:
        fail(f"get_ep_name() = {mlx_ep.get_ep_name()!r}, get_ep_names() = {mlx_ep.get_ep_names()!r}")

    name = mlx_ep.register_execution_provider_library()
    again = mlx_ep.register_execution_provider_library()
    if again != name:
        fail(f"a second registration returned {again!r}, the first {name!r}")
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP]
    if len(devices) != 1 or mlx_ep.get_ep_devices() != devices:
        fail(f"expected one {EP} device after registering twice, found {len(devices)}")

    m = model()
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    options = ort.SessionOptions()
    tmp = tempfile.mkdtemp(prefix="ortmlx-wheel-check-")
    if hasattr(ort.InferenceSession, "get_provider_graph_assignment_info"):
        options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    else:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "profile")
    options.add_provider_for_devices(devices, {"device": "cpu"})
    session = ort.InferenceSession(m.SerializeToString(), sess_options=options, enable_fallback=0)
    (y,) = session.run(None, {"x": x})
    np.testing.assert_allclose(y, reference(m, x), rtol=1e-5, atol=1e-6)
    placed = placements(session)
    if not placed or any(ep != EP for ep, _ in placed):
        fail(f"not every node ran on {EP}: {placed}")

    libs = mapped_libraries()
    real_package = os.path.realpath(package_dir) + os.sep
    bundled = sorted(os.listdir(os.path.join(package_dir, "lib"))) + [os.path.basename(lib)]
    loaded = {}
    for path in libs:
        base = os.path.basename(path)
        if base in bundled:
            if not os.path.realpath(path).startswith(real_package):
                fail(f"{base} was loaded from {path}, outside the package {package_dir}")
            loaded[base] = path
        elif "/.cache/ortmlx/" in path or base.startswith(("libmlx", "libopenblas", "libblas-", "liblapack-", "libonnxruntime_mlx_ep")):
            fail(f"{path} is mapped: MLX, BLAS or the EP from outside the package")
    for prefix in ("libmlx-", "libmlxc-", "libopenblas-", "libgfortran-", "libonnxruntime_mlx_ep"):
        if not any(b.startswith(prefix) for b in loaded):
            fail(f"no {prefix}* loaded from the package; bundled {bundled}; mapped: {libs}")
    wanted = loaded

    print(
        json.dumps(
            {
                "onnxruntime": ort.__version__,
                "onnxruntime_mlx_ep": mlx_ep.__version__,
                "registered_as": name,
                "placement": sorted({ep for ep, _ in placed}),
                "nodes": len(placed),
                "loaded_from_package": {k: os.path.relpath(v, package_dir) for k, v in wanted.items()},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
