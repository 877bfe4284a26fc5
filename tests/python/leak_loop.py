"""Create / run / release MLX EP sessions in a loop and report resident memory.

Usage: ``python leak_loop.py CYCLES [SAMPLE_EVERY]`` with ``ORTMLX_EP_LIBRARY`` set. Prints one
JSON object: ``{"cycles": N, "samples": [[cycle, rss_bytes(, gpu_bytes)], ...]}`` (GPU memory
with ``ORTMLX_LEAK_GPU_MEMORY=1``, read with nvidia-smi). Run by
``test_leaks.py`` in a fresh process (alone, and under valgrind).

Each cycle makes a session of a small model with a 256 KiB weight (shared through the
initializer pool while a session holds it, freed when the last one goes), runs it on a
fresh feed, checks the result, runs it once more through IOBinding with the output in the
EP's memory, drops the session and then reads that output.
"""

from __future__ import annotations

import gc
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import conftest  # noqa: E402
from llm import mlx_device  # noqa: E402


def model() -> tuple[bytes, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((128, 512)).astype(np.float32) * 0.05
    b = rng.standard_normal((512,)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["hb"], name="bias"),
        helper.make_node("Relu", ["hb"], ["r"], name="relu"),
        helper.make_node("ReduceSum", ["r", "axes"], ["y"], name="sum", keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "leak",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.array([1], np.int64), "axes")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString(), w, b


def gpu_bytes() -> int | None:
    """GPU memory this process holds, per nvidia-smi, when ``ORTMLX_LEAK_GPU_MEMORY=1``."""
    if os.environ.get("ORTMLX_LEAK_GPU_MEMORY") != "1":
        return None
    import subprocess

    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True,
    ).stdout
    for line in out.splitlines():
        pid, used = (part.strip() for part in line.split(","))
        if int(pid) == os.getpid():
            return int(used) * 2**20
    return 0


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> int:
    cycles = int(sys.argv[1])
    every = int(sys.argv[2]) if len(sys.argv) > 2 else max(1, cycles // 40)
    data, w, b = model()
    conftest.mlx_ep_devices()
    samples = []
    for i in range(cycles):
        session = conftest.make_session(data, mlx=True, record_placement=False)
        x = np.random.default_rng(i).standard_normal((3, 128)).astype(np.float32)
        (y,) = session.run(None, {"x": x})
        want = np.maximum(x @ w + b, 0).sum(axis=1)
        if not np.allclose(y, want, rtol=1e-4, atol=1e-3):
            print(json.dumps({"error": f"cycle {i}: wrong result {y} vs {want}"}))
            return 1
        # the same through IOBinding with the output in the EP's memory, read after the
        # session (and its allocator) is gone
        binding = session.io_binding()
        binding.bind_cpu_input("x", x)
        binding._iobinding.bind_output("y", mlx_device())  # noqa: SLF001
        session.run_with_iobinding(binding)
        (bound,) = binding.get_outputs()
        del session, binding
        if not np.allclose(bound.numpy(), want, rtol=1e-4, atol=1e-3):
            print(json.dumps({"error": f"cycle {i}: wrong bound result {bound.numpy()} vs {want}"}))
            return 1
        del bound
        if (i + 1) % every == 0:
            gc.collect()
            gpu = gpu_bytes()
            samples.append([i + 1, rss_bytes()] + ([] if gpu is None else [gpu]))
    print(json.dumps({"cycles": cycles, "samples": samples}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
