"""The MLX EP's device memory: the allocator ORT gets from the EP (its blocks are MLX buffers),
the data transfer, inputs read in place and outputs that become ORT's allocation, IOBinding.

Values bound to the MLX device (``OrtDevice(cpu, default memory, llm.MLX_VENDOR_ID, 0)``) live
in MLX's own buffers: a run reads such an input without copying, and an output ORT allocates
there is the MLX result itself. The per-run counters (``bound_inputs``, ``adopted_outputs``,
``copied_input_bytes``, ``copied_output_bytes``, ``kv_copied_bytes``) come from the EP's trace,
so those checks run in a child process with ``ORTMLX_TRACE`` set."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import LIBRARY_VAR, assert_on_cpu, assert_on_mlx, make_session, mlx_ep_devices
from llm import MLX_VENDOR_ID, mlx_device

#: ORT 1.23.0 can't run a plugin EP's nodes beside CPU nodes in one graph (fixed in 1.23.1).
MIXES_EPS = ort.__version__ != "1.23.0"


def opset17_model(graph: onnx.GraphProto) -> onnx.ModelProto:
    """``graph`` as a model of the default domain's opset 17 (IR version 8)."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def memory_info():
    """The MLX device's memory info from the EP device (ORT >= 1.24's Python API), or None."""
    device = mlx_ep_devices()[0]
    if not hasattr(device, "memory_info"):
        return None
    return device.memory_info(ort.OrtDeviceMemoryType.DEFAULT)


def raw(value: ort.OrtValue) -> bytes:
    """The bytes of a tensor value in host-addressable memory (any element type)."""
    c = value._ortvalue  # noqa: SLF001 - the size in bytes is only on the C object
    return ctypes.string_at(value.data_ptr(), c.tensor_size_in_bytes())


def run_child(tmp_path, script: str, extra_env: dict | None = None) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORTMLX_")}
    env[LIBRARY_VAR] = os.path.abspath(os.environ[LIBRARY_VAR])
    env["ORTMLX_TRACE"] = str(tmp_path / "trace.json")
    env["ORTMLX_LOG"] = "info"
    env["PYTHONPATH"] = os.path.dirname(os.path.abspath(__file__))
    env.update(extra_env or {})
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, f"child failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def compute_events(trace_path) -> list[dict]:
    with open(trace_path) as f:
        trace = json.load(f)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "compute"]
    return [e["args"] for e in sorted(events, key=lambda e: e["ts"]) if "bound_inputs" in e.get("args", {})]


#: A child that decodes 64 greedy steps of the tiny Llama on the CPU EP and, through IOBinding
#: with the KV cache bound to the MLX device, on the MLX EP; prints tokens and the counters.
DECODE_CHILD = r"""
import gc, json, os
import numpy as np
import onnxruntime as ort
from llm import TINY, build_llama, generate, generate_iobinding, prompt_ids

cfg = TINY
model = build_llama(cfg).SerializeToString()
prompt = prompt_ids(cfg, 16)
cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
expected = generate(cpu, cfg, prompt, 64)
ort.register_execution_provider_library("ortmlx", os.environ["ORTMLX_EP_LIBRARY"])
options = ort.SessionOptions()
options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
options.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"], {})
mlx = ort.InferenceSession(model, sess_options=options)
actual = generate_iobinding(mlx, cfg, prompt, 64)
diff = max(float(np.max(np.abs(a - e))) for a, e in zip(actual.logits, expected.logits))
del mlx
gc.collect()
print(json.dumps({"expected": expected.tokens, "actual": actual.tokens, "diff": diff}))
"""


def test_iobinding_decode_keeps_the_kv_cache_in_mlx_memory(tmp_path):
    """64 greedy steps with every present.* bound to the MLX device and fed back as past.*:
    tokens identical to the CPU EP's, and from the second step on no KV byte is copied (every
    cache input read in place, every output the MLX result itself)."""
    from llm import TINY

    report, _ = run_child(tmp_path, DECODE_CHILD)
    assert report["actual"] == report["expected"], report
    assert report["diff"] < 1e-3, report
    runs = compute_events(tmp_path / "trace.json")
    assert len(runs) == 64, runs[:3]
    cache = 2 * TINY.layers
    for step, r in enumerate(runs):
        assert r["kv_copied_bytes"] == 0, (step, r)
        assert r["copied_output_bytes"] == 0, (step, r)  # logits too: ORT's CPU buffer was the output
        assert r["adopted_outputs"] == cache + 1, (step, r)
        if step:
            assert r["bound_inputs"] >= cache, (step, r)


#: The start of a child script: a one-node float32 [4] model (`%(op)s` over the inputs
#: `%(inputs)s`, output `y`) in a session `s` on the MLX EP (`devices`).
ONE_NODE_CHILD = r"""
import gc, json, os
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper
ort.register_execution_provider_library("ortmlx", os.environ["ORTMLX_EP_LIBRARY"])
devices = [d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"]
graph = helper.make_graph([helper.make_node("%(op)s", list("%(inputs)s"), ["y"])], "g",
    [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in "%(inputs)s"],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
options = ort.SessionOptions()
options.add_provider_for_devices(devices, {})
s = ort.InferenceSession(model.SerializeToString(), sess_options=options)
"""

#: A child that runs a two-input Add and prints its output (the test runs it with device
#: memory off and on).
OFF_CHILD = ONE_NODE_CHILD % {"op": "Add", "inputs": "ab"} + r"""
y = s.run(None, {"a": np.ones(4, np.float32), "b": np.full(4, 2.0, np.float32)})[0]
del s
gc.collect()
print(json.dumps({"y": y.tolist(), "info": hasattr(devices[0], "memory_info")}))
"""


def test_device_memory_can_be_switched_off(tmp_path):
    # Off (ORTMLX_DEVICE_MEMORY=0): copies; on (the default): the output is MLX's own buffer.
    report, _ = run_child(tmp_path, OFF_CHILD, {"ORTMLX_DEVICE_MEMORY": "0"})
    assert report["y"] == [3.0] * 4
    (run,) = compute_events(tmp_path / "trace.json")
    assert run["bound_inputs"] == 0 and run["adopted_outputs"] == 0, run
    assert run["copied_output_bytes"] == 16, run
    report, _ = run_child(tmp_path, OFF_CHILD)
    (run,) = compute_events(tmp_path / "trace.json")
    assert run["adopted_outputs"] == 1 and run["copied_output_bytes"] == 0, run


#: A child that runs one Relu through IOBinding with its output in MLX memory, then asks ORT to
#: synchronise the bound outputs (ORT >= 1.25 calls the EP's `Sync` there).
SYNC_CHILD = ONE_NODE_CHILD % {"op": "Relu", "inputs": "x"} + r"""
from llm import mlx_device
b = s.io_binding()
b.bind_cpu_input("x", np.array([-1, 2, -3, 4], np.float32))
b._iobinding.bind_output("y", mlx_device())
s.run_with_iobinding(b)
b.synchronize_outputs()
y = b.copy_outputs_to_cpu()[0]
del b, s
gc.collect()
print(json.dumps({"y": y.tolist(), "ort": ort.__version__}))
"""


def test_synchronising_bound_outputs_calls_the_eps_sync(tmp_path):
    """ORT >= 1.25 calls `OrtEp::Sync` when IOBinding synchronises its outputs: the EP answers
    (its runs and transfers are complete when they return) and the values are right."""
    report, _ = run_child(tmp_path, SYNC_CHILD)
    assert report["y"] == [0.0, 2.0, 0.0, 4.0]
    minor = int(report["ort"].split(".")[1])
    with open(tmp_path / "trace.json") as f:
        syncs = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "ep" and e.get("name") == "Sync"]
    if minor >= 25:
        assert len(syncs) >= 1, "ORT did not reach the EP's Sync"
    else:
        assert syncs == [], "an ORT older than 1.25 has no OrtEp::Sync to call"


def mixed_model() -> onnx.ModelProto:
    """x -> Relu -> Cast(double) -> Softmax (double: left to ORT's CPU EP) -> Cast(float) -> Mul(x)
    -> y: two MLX subgraphs with a CPU node between them."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Cast", ["r"], ["d"], to=TensorProto.DOUBLE),
        helper.make_node("Softmax", ["d"], ["e"]),
        helper.make_node("Cast", ["e"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["f", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
    )
    return opset17_model(graph)


@pytest.mark.skipif(not MIXES_EPS, reason="ORT 1.23.0 can't mix plugin-EP and CPU nodes in one graph")
def test_mixed_graph_through_mlx_memory_matches_the_cpu_ep():
    model = mixed_model()
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    expected = make_session(model, mlx=False).run(None, {"x": x})[0]
    session = make_session(model)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, rtol=1e-6, atol=1e-7)
    assert_on_mlx(session, ["Relu", "Mul"])
    assert_on_cpu(session, ["Softmax"])
    # the same with the input and the output in MLX memory, the output fed back as the input
    binding = session.io_binding()
    binding.bind_cpu_input("x", x)
    binding._iobinding.bind_output("y", mlx_device())  # noqa: SLF001
    session.run_with_iobinding(binding)
    (y,) = binding.get_outputs()
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6, atol=1e-7)
    again = session.io_binding()
    again.bind_ortvalue_input("x", y)
    again._iobinding.bind_output("y", mlx_device())  # noqa: SLF001
    session.run_with_iobinding(again)
    expected2 = make_session(model, mlx=False).run(None, {"x": expected})[0]
    np.testing.assert_allclose(again.get_outputs()[0].numpy(), expected2, rtol=1e-6, atol=1e-7)


def if_branch_model() -> onnx.ModelProto:
    """An ``If`` left to ORT's CPU EP (its else branch holds a float64 Softmax, which MLX
    declines) whose then branch ends in a Reshape to a runtime shape: ORT can't size the ``If``
    output ahead."""
    then = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
    )
    other = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["d"], to=TensorProto.DOUBLE),
            helper.make_node("Softmax", ["d"], ["e"]),
            helper.make_node("Cast", ["e"], ["f"], to=TensorProto.FLOAT),
        ],
        "else",
        [],
        [helper.make_tensor_value_info("f", TensorProto.FLOAT, None)],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)],
        "if_branch",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return opset17_model(graph)


@pytest.mark.skipif(not MIXES_EPS, reason="ORT 1.23.0 can't mix plugin-EP and CPU nodes in one graph")
def test_an_if_branch_output_of_runtime_shape_reaches_the_if_output():
    # Regression: ORT counts the EP (its memory a CPU-type device) as CPU-based and skips the
    # subgraph's output copy, so a branch output in MLX memory never reached the If's output
    # (uninitialised memory came back). The producers of branch outputs stay on ORT's CPU EP.
    model = if_branch_model()
    session = make_session(model)
    reference = make_session(model, mlx=False)
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3) - 3.5
    for cond in (True, False, True):
        feeds = {"x": x, "cond": np.array(cond), "shape": np.array([3, 2], np.int64)}
        np.testing.assert_allclose(session.run(None, feeds)[0], reference.run(None, feeds)[0], rtol=1e-6)
    assert_on_mlx(session, ["Relu"])
    assert_on_cpu(session, ["If", "Softmax", "Reshape"])


def simple_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["y"]), helper.make_node("Neg", ["y"], ["z"])],
        "simple",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"]), helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n"])],
    )
    return opset17_model(graph)


def test_values_outlive_their_session():
    """Outputs in MLX memory stay valid after their session (and its allocator) is released,
    and feed another session."""
    session = make_session(simple_model())
    x = np.arange(1000, dtype=np.float32)
    held = []
    for k in range(5):
        binding = session.io_binding()
        binding.bind_cpu_input("x", x + k)
        binding._iobinding.bind_output("y", mlx_device())  # noqa: SLF001
        binding._iobinding.bind_output("z", mlx_device())  # noqa: SLF001
        session.run_with_iobinding(binding)
        held.append((k, binding.get_outputs()))
    plain = session.run(None, {"x": x})
    assert_on_mlx(session, ["Mul", "Neg"])
    del session, binding
    gc.collect()
    for k, (y, z) in held:
        np.testing.assert_array_equal(y.numpy(), (x + k) * (x + k))
        np.testing.assert_array_equal(z.numpy(), -(x + k) * (x + k))
    np.testing.assert_array_equal(plain[1], -x * x)
    other = make_session(simple_model())
    binding = other.io_binding()
    binding.bind_ortvalue_input("x", held[2][1][1])
    binding.bind_output("y", "cpu")
    binding.bind_output("z", "cpu")
    other.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.get_outputs()[0].numpy(), ((x + 2) * (x + 2)) ** 2)
    del other, binding, held
    gc.collect()


@pytest.mark.parametrize("compile_mode", ["on", "off"])
def test_outputs_fed_back_through_compiled_and_eager_runs(compile_mode):
    """An output bound to the MLX device fed back as the next run's input, ten times, with the
    plan compiled (inputs that are views of MLX blocks enter the compiled closure) or eager."""
    session = make_session(simple_model(), ep_options={"compile": compile_mode})
    x = np.linspace(-1.0, 1.0, 64, dtype=np.float32)
    value = None
    want = x
    for _ in range(10):
        binding = session.io_binding()
        if value is None:
            binding.bind_cpu_input("x", x)
        else:
            binding.bind_ortvalue_input("x", value)
        binding._iobinding.bind_output("y", mlx_device())  # noqa: SLF001
        binding._iobinding.bind_output("z", mlx_device())  # noqa: SLF001
        session.run_with_iobinding(binding)
        y, z = binding.get_outputs()
        want = want * want
        np.testing.assert_array_equal(y.numpy(), want)
        np.testing.assert_array_equal(z.numpy(), -want)
        value = z if _ % 2 else y
        want = -want if _ % 2 else want
    assert_on_mlx(session, ["Mul", "Neg"])


#: Element types through the data transfer: (ONNX type, numpy type of the raw elements).
DTYPES = [
    (TensorProto.FLOAT, np.float32),
    (TensorProto.DOUBLE, np.float64),
    (TensorProto.FLOAT16, np.float16),
    (TensorProto.BFLOAT16, np.uint16),
    (TensorProto.INT8, np.int8),
    (TensorProto.UINT8, np.uint8),
    (TensorProto.INT16, np.int16),
    (TensorProto.UINT16, np.uint16),
    (TensorProto.INT32, np.int32),
    (TensorProto.UINT32, np.uint32),
    (TensorProto.INT64, np.int64),
    (TensorProto.UINT64, np.uint64),
    (TensorProto.BOOL, np.bool_),
    (TensorProto.FLOAT8E4M3FN, np.uint8),
    (TensorProto.FLOAT8E5M2, np.uint8),
]


@pytest.mark.parametrize("onnx_type,np_type", DTYPES, ids=[TensorProto.DataType.Name(t) for t, _ in DTYPES])
def test_every_dtype_through_the_data_transfer(onnx_type, np_type):
    info = memory_info()
    if info is None:
        pytest.skip("this ORT's Python API has no OrtEpDevice.memory_info / copy_tensors")
    assert info.name == "MLX" and info.device_vendor_id == MLX_VENDOR_ID
    rng = np.random.default_rng(onnx_type)
    data = rng.integers(0, 2 if np_type is np.bool_ else 100, (3, 7)).astype(np_type)
    src = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(data, onnx_type)
    on_mlx = ort.OrtValue.ortvalue_from_shape_and_type([3, 7], onnx_type, memory_info=info)
    ort.copy_tensors([src], [on_mlx])
    assert raw(on_mlx) == data.tobytes()
    other = ort.OrtValue.ortvalue_from_shape_and_type([3, 7], onnx_type, memory_info=info)
    ort.copy_tensors([on_mlx], [other])  # MLX -> MLX
    back = ort.OrtValue.ortvalue_from_shape_and_type([3, 7], onnx_type)
    ort.copy_tensors([other], [back])  # MLX -> host
    assert raw(back) == data.tobytes()


#: Element types a run reads in place from MLX memory (viewed as the type, no copy).
BOUND_TYPES = [(t, n) for t, n in DTYPES if t not in (TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2)]


@pytest.mark.parametrize("onnx_type,np_type", BOUND_TYPES, ids=[TensorProto.DataType.Name(t) for t, _ in BOUND_TYPES])
def test_inputs_of_every_dtype_are_read_in_place(onnx_type, np_type):
    """A value of each element type made in MLX memory feeds a Cast to float (read as a view of
    its block) and an Identity (an output sharing an input's block: copied, never lent twice)."""
    info = memory_info()
    if info is None:
        pytest.skip("this ORT's Python API has no OrtEpDevice.memory_info / copy_tensors")
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT), helper.make_node("Identity", ["x"], ["i"])],
        "cast",
        [helper.make_tensor_value_info("x", onnx_type, [2, 6])],
        [helper.make_tensor_value_info("f", TensorProto.FLOAT, [2, 6]), helper.make_tensor_value_info("i", onnx_type, [2, 6])],
    )
    model = opset17_model(graph)
    session = make_session(model)
    data = np.random.default_rng(onnx_type).integers(0, 2 if np_type is np.bool_ else 100, (2, 6)).astype(np_type)
    x = ort.OrtValue.ortvalue_from_shape_and_type([2, 6], onnx_type, memory_info=info)
    ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy_with_onnx_type(data, onnx_type)], [x])
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", x)
    binding._iobinding.bind_output("f", mlx_device())  # noqa: SLF001
    binding._iobinding.bind_output("i", mlx_device())  # noqa: SLF001
    session.run_with_iobinding(binding)
    f, i = binding.get_outputs()
    np.testing.assert_array_equal(f.numpy(), data.astype(np.float32))
    assert raw(i) == data.tobytes()
    assert i.data_ptr() != x.data_ptr()
    assert_on_mlx(session, ["Cast"])


def test_the_data_transfer_refuses_a_size_mismatch():
    info = memory_info()
    if info is None:
        pytest.skip("this ORT's Python API has no OrtEpDevice.memory_info / copy_tensors")
    src = ort.OrtValue.ortvalue_from_numpy(np.ones((2, 3), np.float32))
    dst = ort.OrtValue.ortvalue_from_shape_and_type([4, 3], np.float32, memory_info=info)
    with pytest.raises(Exception, match="bytes"):
        ort.copy_tensors([src], [dst])


def test_allocator_stress_many_sizes_freed_on_other_threads():
    """Blocks of many sizes made on four threads, checked and freed on another; then the EP's
    own outputs the same way (runs on several threads, values dropped elsewhere)."""
    info = memory_info()
    session = make_session(simple_model())
    q: queue.Queue = queue.Queue()
    errors: list = []

    def make(t: int) -> None:
        try:
            rng = np.random.default_rng(t)
            for i in range(150):
                n = int(rng.integers(0, 20000)) if i % 10 else 0
                data = np.full(n, t * 1000 + i, np.float32)
                if info is not None and i % 2:
                    v = ort.OrtValue.ortvalue_from_shape_and_type([n], np.float32, memory_info=info)
                    ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(data)], [v])
                    q.put((v, data))
                else:
                    binding = session.io_binding()
                    binding.bind_cpu_input("x", data)
                    binding._iobinding.bind_output("y", mlx_device())  # noqa: SLF001
                    binding.bind_output("z", "cpu")
                    session.run_with_iobinding(binding)
                    q.put((binding.get_outputs()[0], data * data))
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    def check() -> None:
        while True:
            item = q.get()
            if item is None:
                return
            value, want = item
            try:
                np.testing.assert_array_equal(value.numpy(), want)
            except Exception as err:  # noqa: BLE001
                errors.append(err)
            del value, item

    checker = threading.Thread(target=check)
    checker.start()
    makers = [threading.Thread(target=make, args=(t,)) for t in range(4)]
    for m in makers:
        m.start()
    for m in makers:
        m.join()
    q.put(None)
    checker.join()
    assert not errors, errors[:3]
    del session
    gc.collect()


def test_a_preallocated_output_in_mlx_memory_is_filled():
    """An output bound to a value the caller allocated in MLX memory: the run copies its result
    into that block (ORT allocated nothing at run time to adopt)."""
    info = memory_info()
    if info is None:
        pytest.skip("this ORT's Python API has no OrtEpDevice.memory_info")
    session = make_session(simple_model())
    x = np.arange(8, dtype=np.float32)
    y = ort.OrtValue.ortvalue_from_shape_and_type([8], np.float32, memory_info=info)
    before = y.data_ptr()
    binding = session.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_ortvalue_output("y", y)
    binding.bind_output("z", "cpu")
    session.run_with_iobinding(binding)
    assert y.data_ptr() == before
    np.testing.assert_array_equal(y.numpy(), x * x)
    np.testing.assert_array_equal(binding.get_outputs()[1].numpy(), -x * x)


def test_a_bound_value_of_the_wrong_shape_is_an_error():
    session = make_session(mixed_model())
    wrong = ort.OrtValue.ortvalue_from_numpy(np.ones((3, 4), np.float32))
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", wrong)
    binding._iobinding.bind_output("y", mlx_device())  # noqa: SLF001
    with pytest.raises(Exception, match="(?i)dimension|shape"):
        session.run_with_iobinding(binding)


#: A child for valgrind: blocks made on three threads (fresh, and outputs fed back as inputs),
#: checked and dropped on another, a session released while its outputs live.
VALGRIND_CHILD = r"""
import os, sys, gc, threading, queue, numpy as np
import onnxruntime as ort
from onnx import helper, TensorProto
from llm import mlx_device
ort.register_execution_provider_library("ortmlx", os.environ["ORTMLX_EP_LIBRARY"])
devs = [d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"]
mi = devs[0].memory_info(ort.OrtDeviceMemoryType.DEFAULT)
g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["y"]), helper.make_node("Neg", ["y"], ["z"])], "g",
    [helper.make_tensor_value_info("x", 1, ["n"])], [helper.make_tensor_value_info("y", 1, ["n"]), helper.make_tensor_value_info("z", 1, ["n"])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]); m.ir_version = 8
so = ort.SessionOptions(); so.add_provider_for_devices(devs, {})
s = ort.InferenceSession(m.SerializeToString(), sess_options=so)
q = queue.Queue()
def make(t):
    for i in range(15):
        n = (i * 997 + t * 31) % 3000
        d = np.full(n, t + i, np.float32)
        if i % 2:
            v = ort.OrtValue.ortvalue_from_shape_and_type([n], np.float32, memory_info=mi)
            ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(d)], [v]); q.put((v, d))
        else:
            b = s.io_binding(); b.bind_cpu_input("x", d); b._iobinding.bind_output("y", mlx_device()); b._iobinding.bind_output("z", mlx_device())
            s.run_with_iobinding(b); y, z = b.get_outputs()
            b2 = s.io_binding(); b2.bind_ortvalue_input("x", z); b2._iobinding.bind_output("y", mlx_device()); b2.bind_output("z", "cpu")
            s.run_with_iobinding(b2); q.put((b2.get_outputs()[0], (d*d)**2))
bad = []
def check():
    while (it := q.get()) is not None:
        v, want = it
        if not np.array_equal(v.numpy(), want): bad.append(1)
ts = [threading.Thread(target=make, args=(t,)) for t in range(3)]
c = threading.Thread(target=check); c.start()
[t.start() for t in ts]; [t.join() for t in ts]
keep = [s.run(None, {"x": np.ones(50, np.float32)})]
del s; gc.collect()
q.put(None); c.join()
assert not bad and np.array_equal(keep[0][1], -np.ones(50, np.float32))
print("ok")
"""


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
@pytest.mark.skipif(os.environ.get("ORTMLX_VALGRIND_CYCLES") == "0", reason="ORTMLX_VALGRIND_CYCLES=0")
def test_valgrind_finds_no_memory_error_in_device_memory_use(tmp_path):
    if memory_info() is None:
        pytest.skip("needs OrtEpDevice.memory_info (ORT >= 1.24)")
    xml_path = tmp_path / "memcheck.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORTMLX_")}
    env.update(PYTHONMALLOC="malloc", PYTHONPATH=os.path.dirname(os.path.abspath(__file__)))
    env[LIBRARY_VAR] = os.path.abspath(os.environ[LIBRARY_VAR])
    cmd = ["valgrind", "--tool=memcheck", "--num-callers=40", "--xml=yes", f"--xml-file={xml_path}", sys.executable, "-c", VALGRIND_CHILD]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=1500)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    library = os.path.basename(os.environ[LIBRARY_VAR])
    ours = []
    for error in ET.parse(xml_path).getroot().findall("error"):
        kind = error.findtext("kind") or "?"
        frames = [(f.findtext("obj") or "", f.findtext("fn") or "?") for f in error.iter("frame")]
        if not kind.startswith("Leak_") and any(library in obj for obj, _ in frames):
            ours.append((kind, [fn for _, fn in frames[:12]]))
    assert not ours, ours[:3]
