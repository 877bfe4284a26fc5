"""Diagnostics switches, each read once per process, so every case runs in a child process:

* ``ORTMLX_LOG_CLAIMS=1``: one stderr line per node saying whether MLX took it and why not;
* ``ORTMLX_LOG=info``: the log (capability summary, compiled groups);
* ``ORTMLX_TRACE=<path>``: a Chrome-trace JSON (Perfetto) of capability, compile and compute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import LIBRARY_VAR
from trace_stats import node_runs, read_trace, totals

#: A child that registers the EP, builds a model and runs it ``RUNS`` times.
CHILD = r"""
import os, sys
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

ort.register_execution_provider_library("ortmlx", os.environ["ORTMLX_EP_LIBRARY"])
devices = [d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"]
with_string = sys.argv[1] == "string"
computed_shape = sys.argv[1] == "reshape"
nodes = [
    helper.make_node("Relu", ["x"], ["r"], name="relu0"),
    helper.make_node("Add", ["r", "x"], ["y"], name="add0"),
]
inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]
initializers = []
feeds = {"x": np.ones((2, 3), np.float32)}
if with_string:
    nodes.append(helper.make_node("Cast", ["y"], ["s"], name="to_string", to=TensorProto.STRING))
    outputs.append(helper.make_tensor_value_info("s", TensorProto.STRING, [2, 3]))
if computed_shape:
    # The Reshape's target is computed on the device (a cast of a float input), so each run
    # reads it back mid-run. (Integer arithmetic on an integer input would run on the host.)
    nodes.append(helper.make_node("Cast", ["shape"], ["shape2"], name="cast_shape", to=TensorProto.INT64))
    nodes.append(helper.make_node("Reshape", ["y", "shape2"], ["z"], name="reshape_computed"))
    inputs.append(helper.make_tensor_value_info("shape", TensorProto.FLOAT, [2]))
    outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    feeds["shape"] = np.array([3, -1], np.float32)
graph = helper.make_graph(nodes, "diag", inputs, outputs, initializer=initializers)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
options = ort.SessionOptions()
options.add_provider_for_devices(devices, dict(a.split("=", 1) for a in sys.argv[3:]))
session = ort.InferenceSession(model.SerializeToString(), sess_options=options)
for _ in range(int(sys.argv[2])):
    session.run(None, feeds)
print("providers", session.get_providers())
del session  # releases the EP: its per-node summary is logged and the trace written
"""


def run_child(tmp_path, env: dict, model: str = "plain", runs: int = 1, ep_options: dict | None = None) -> subprocess.CompletedProcess:
    library = os.environ.get(LIBRARY_VAR)
    if not library:
        pytest.fail(f"{LIBRARY_VAR} is not set", pytrace=False)
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("ORTMLX_")}
    child_env[LIBRARY_VAR] = os.path.abspath(library)
    child_env.update(env)
    result = subprocess.run(
        [sys.executable, "-c", CHILD, model, str(runs), *(f"{k}={v}" for k, v in (ep_options or {}).items())],
        env=child_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"child failed:\n{result.stdout}\n{result.stderr}"
    return result


def claim_lines(stderr: str) -> list[str]:
    prefix = "[ortmlx claims] "
    return [line[len(prefix) :] for line in stderr.splitlines() if line.startswith(prefix)]


def test_claim_report_names_every_node_and_why(tmp_path):
    lines = claim_lines(run_child(tmp_path, {"ORTMLX_LOG_CLAIMS": "1"}, model="string").stderr)
    assert lines, "ORTMLX_LOG_CLAIMS=1 printed nothing"
    headers = [line for line in lines if line.startswith("graph 'diag': ")]
    assert headers, lines
    assert "of 3 node(s) claimed" in headers[0], headers
    # Relu and Add are claimed (or, on ORT 1.23.0, which can't mix EPs in one graph, left to
    # ORT with the reason); the Cast to string is declined because MLX has no strings.
    for node, op in (("relu0", "Relu"), ("add0", "Add")):
        mine = [line for line in lines if f" {node} ({op})" in line]
        assert mine, f"no report for {node}: {lines}"
        assert all(line.startswith(("claim ", "left ")) for line in mine), mine
        assert any(line.startswith("claim ") for line in mine) or all(":" in line for line in mine), mine
    declined = [line for line in lines if line.startswith("decline to_string (Cast): ")]
    assert declined, lines
    assert "string" in declined[0], declined


def test_claim_report_is_silent_by_default(tmp_path):
    assert claim_lines(run_child(tmp_path, {}).stderr) == []


def test_info_log_summarises_capability_and_compile(tmp_path):
    stderr = run_child(tmp_path, {"ORTMLX_LOG": "info"}).stderr
    assert "GetCapability 'diag': 2 of 2 nodes claimed" in stderr, stderr
    assert "Compile '" in stderr, stderr


def test_trace_file_is_a_chrome_trace(tmp_path):
    path = tmp_path / "trace-%p.json"
    result = run_child(tmp_path, {"ORTMLX_TRACE": str(path)}, runs=3)
    files = sorted(tmp_path.glob("trace-*.json"))
    assert len(files) == 1, f"expected one trace file, found {files}; stderr:\n{result.stderr}"
    assert files[0].name != "trace-%p.json", "%p was not replaced by the process id"
    with open(files[0]) as f:
        trace = json.load(f)
    assert isinstance(trace, dict) and isinstance(trace.get("traceEvents"), list), trace
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    for e in spans:
        for key, kind in (("name", str), ("cat", str), ("ts", (int, float)), ("dur", (int, float)), ("pid", int), ("tid", int)):
            assert isinstance(e.get(key), kind), f"{key} of {e}"
        assert e["dur"] >= 0 and e["ts"] >= 0, e
    by_cat = {}
    for e in spans:
        by_cat.setdefault(e["cat"], []).append(e)
    assert set(by_cat) >= {"capability", "compile", "compute"}, sorted(by_cat)
    capability = by_cat["capability"][0]
    assert capability["name"] == "GetCapability diag" and capability["args"]["claimed"] == 2, capability
    (compile_span,) = by_cat["compile"]
    assert sorted(compile_span["args"]["nodes"]) == ["add0 (Add)", "relu0 (Relu)"], compile_span
    fused = compile_span["args"]["fused_node"]
    assert [e["name"] for e in by_cat["compute"]] == [fused] * 3, by_cat["compute"]
    # compile precedes the runs, and runs don't overlap on one thread
    computes = sorted(by_cat["compute"], key=lambda e: e["ts"])
    assert compile_span["ts"] + compile_span["dur"] <= computes[0]["ts"]
    for a, b in zip(computes, computes[1:]):
        assert a["ts"] + a["dur"] <= b["ts"], (a, b)
    names = [e for e in trace["traceEvents"] if e.get("ph") == "M" and e.get("name") == "thread_name"]
    assert {e["tid"] for e in names} >= {e["tid"] for e in spans}, names


def traced_runs(tmp_path, model: str, runs: int, ep_options: dict | None = None):
    path = tmp_path / "trace.json"
    result = run_child(tmp_path, {"ORTMLX_TRACE": str(path), "ORTMLX_LOG": "info"}, model=model, runs=runs, ep_options=ep_options)
    trace = read_trace(path)
    nodes = node_runs(trace)
    assert len(nodes) == 1, f"one fused node expected: {nodes}; stderr:\n{result.stderr}"
    ((name, n),) = nodes.items()
    return name, n, totals(trace), result.stderr


def test_run_counters_of_a_plain_graph(tmp_path):
    name, n, total, stderr = traced_runs(tmp_path, "plain", 3, {"compile": "off"})
    # One evaluation per run, nothing read back mid-run, interpreted eagerly.
    assert n.per_run == [("eager", 1, 0)] * 3, n
    assert total[name]["runs"] == 3 and total[name]["eager"] == 3 and total[name]["host_syncs"] == 3, total
    assert f"{name}: runs 3 (decode 0, prefill 0, general 0, eager 3); host syncs 1.00/run (max 1), host reads 0.00/run" in stderr, stderr


def test_run_counters_of_a_compiled_graph(tmp_path):
    _, n, _, _ = traced_runs(tmp_path, "plain", 2, {"compile": "on"})
    assert n.per_run == [("general", 1, 0)] * 2, n


def test_run_counters_count_host_reads(tmp_path):
    name, n, total, stderr = traced_runs(tmp_path, "reshape", 2, {"compile": "on"})
    # The computed shape is read back (a host read and a sync), then the final evaluation;
    # the plan can't be compiled as one closure, so even with compile on it runs eagerly.
    assert n.per_run == [("eager", 2, 1)] * 2, n
    assert total[name]["host_reads"] == 2, total
    assert "not shapeless: Eager: node 'reshape_computed' (Reshape)" in stderr, stderr
