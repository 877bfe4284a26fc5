"""The session's placement summary: when fewer than all nodes run on MLX, the EP logs one
warning through ORT's session logger, at the session's first run:

    MLXExecutionProvider: N of M nodes on MLX; top reasons: 1x <reason>; ...

ORT's default log level (warning) shows it, with no switch of ours. The counts hold after
ORT's second partitioning pass (function ops no EP claimed are inlined after the first), and
the EP's own fused nodes, which that pass sees, are neither counted nor reported. Each case
runs in a child process so that its stderr is its own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import LIBRARY_VAR

#: Registers the EP, loads the model at argv[1], runs it once, prints the placement (ORT >= 1.24).
CHILD = r"""
import json, os, sys
import numpy as np
import onnxruntime as ort
ort.register_execution_provider_library("ortmlx", os.environ["ORTMLX_EP_LIBRARY"])
devices = [d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"]
options = ort.SessionOptions()
has_info = hasattr(ort.InferenceSession, "get_provider_graph_assignment_info")
if has_info:
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
options.add_provider_for_devices(devices, {})
session = ort.InferenceSession(sys.argv[1], sess_options=options)
session.run(None, {"x": np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)})
session.run(None, {"x": np.ones((2, 3), np.float32)})
placement = []
if has_info:
    for sub in session.get_provider_graph_assignment_info():
        placement += [(sub.ep_name, n.op_type) for n in sub.get_nodes()]
print(json.dumps(placement))
"""

SUMMARY = re.compile(r"MLXExecutionProvider: (\d+) of (\d+) nodes on MLX; top reasons: (.*)$")


def run_child(tmp_path, model: onnx.ModelProto, extra_env: dict | None = None) -> tuple[list[re.Match], list[tuple[str, str]], str]:
    """The summary lines on the child's stderr, its placement, and the whole stderr."""
    library = os.environ.get(LIBRARY_VAR)
    if not library:
        pytest.fail(f"{LIBRARY_VAR} is not set", pytrace=False)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORTMLX_")}
    env[LIBRARY_VAR] = os.path.abspath(library)
    env.update(extra_env or {})
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"child failed:\n{result.stdout}\n{result.stderr}"
    lines = [m for m in (SUMMARY.search(line) for line in result.stderr.splitlines()) if m]
    placement = [tuple(p) for p in json.loads(result.stdout.strip().splitlines()[-1])]
    return lines, placement, result.stderr


def model_of(nodes, opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "summary",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset >= 21 else 8
    return model


def float64_softmax(source: str, prefix: str = "") -> list[onnx.NodeProto]:
    """``source`` -> Relu -> float64 -> Softmax (declined: not float64-exact on MLX) -> float32 -> ``y``."""
    return [
        helper.make_node("Relu", [source], [prefix + "r"]),
        helper.make_node("Cast", [prefix + "r"], [prefix + "d"], to=TensorProto.DOUBLE),
        helper.make_node("Softmax", [prefix + "d"], [prefix + "e"]),
        helper.make_node("Cast", [prefix + "e"], ["y"], to=TensorProto.FLOAT),
    ]


def loads_on_cpu(model: onnx.ModelProto) -> bool:
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - an ORT too old for the opset
        return False
    return True


def check_counts(match: re.Match, placement: list[tuple[str, str]]) -> tuple[int, int]:
    on_mlx, total = int(match.group(1)), int(match.group(2))
    if placement:  # ORT >= 1.24: the EP's counts are ORT's
        assert total == len(placement), (match.group(0), placement)
        assert on_mlx == sum(1 for ep, _ in placement if ep == "MLXExecutionProvider"), (match.group(0), placement)
    return on_mlx, total


def test_a_declined_node_gives_one_line_with_the_reason(tmp_path):
    lines, placement, stderr = run_child(tmp_path, model_of(float64_softmax("x"), 17))
    assert len(lines) == 1, stderr
    on_mlx, total = check_counts(lines[0], placement)
    assert total == 4, lines[0].group(0)
    reasons = lines[0].group(3)
    assert "Softmax" in reasons and "float64" in reasons, reasons
    if ort.__version__ != "1.23.0":  # 1.23.0 can't mix EPs in one graph: all left to ORT
        assert on_mlx == 3, lines[0].group(0)
        assert reasons.startswith("1x "), reasons


def test_fully_supported_model_says_nothing(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])]
    lines, placement, stderr = run_child(tmp_path, model_of(nodes, 17))
    assert lines == [], stderr
    assert "MLXExecutionProvider:" not in stderr, stderr
    if placement:
        assert {ep for ep, _ in placement} == {"MLXExecutionProvider"}, placement


def crop_model(with_decline: bool) -> onnx.ModelProto:
    """CenterCropPad of an input of unknown rank, which the MLX EP declines (its lowering needs
    the rank) but whose function body (Shape, Gather, Sub, Slice, Pad, ...) it claims."""
    tail = float64_softmax("s") if with_decline else [helper.make_node("Relu", ["s"], ["y"])]
    crop = helper.make_node("CenterCropPad", ["x", "crop_shape"], ["s"], axes=[1])
    model = model_of([crop] + tail, 18)
    model.graph.initializer.append(numpy_helper.from_array(np.array([3], np.int64), "crop_shape"))
    model.graph.input[0].type.tensor_type.ClearField("shape")
    model.graph.output[0].type.tensor_type.ClearField("shape")
    return model


@pytest.mark.skipif(ort.__version__.startswith("1.23."), reason="ONNX Runtime 1.23 allows one claiming pass per session")
def test_function_expansion_is_counted_after_the_second_pass(tmp_path):
    """CenterCropPad of unknown rank is declined; ORT inlines its function body and
    partitions again, and MLX takes the body. The fused node of the first pass must not count
    as a decline."""
    model = crop_model(with_decline=False)
    if not loads_on_cpu(model):
        pytest.skip(f"onnxruntime {ort.__version__} does not run CenterCropPad (opset 18)")
    lines, placement, stderr = run_child(tmp_path, model)
    assert lines == [], stderr
    assert placement and {ep for ep, _ in placement} == {"MLXExecutionProvider"}, placement
    assert "CenterCropPad" not in {op for _, op in placement}, placement

    lines, placement, stderr = run_child(tmp_path, crop_model(with_decline=True))
    assert len(lines) == 1, stderr
    on_mlx, total = check_counts(lines[0], placement)
    assert total - on_mlx == 1, lines[0].group(0)
    reasons = lines[0].group(3)
    assert reasons.startswith("1x Softmax") and "CenterCropPad" not in reasons and "MLXExecutionProvider" not in reasons, reasons


@pytest.mark.skipif(ort.__version__.startswith("1.23."), reason="ONNX Runtime 1.23 allows one claiming pass per session")
def test_second_pass_report_leaves_out_the_fused_nodes(tmp_path):
    """With ``ORTMLX_LOG_CLAIMS=1``, the pass after CenterCropPad's inlining reports its body and
    the node given to the CPU EP, never the fused node of the first pass."""
    model = crop_model(with_decline=True)
    if not loads_on_cpu(model):
        pytest.skip(f"onnxruntime {ort.__version__} does not run CenterCropPad (opset 18)")
    claims_file = tmp_path / "claims.jsonl"
    _, _, stderr = run_child(tmp_path, model, {"ORTMLX_LOG_CLAIMS": "1", "ORTMLX_CLAIMS_FILE": str(claims_file)})
    lines = [line for line in stderr.splitlines() if line.startswith("[ortmlx claims] ")]
    headers = [line for line in lines if " node(s) claimed" in line]
    assert len(headers) == 2, lines
    # Pass 1: CenterCropPad and the float64 Softmax declined, Relu and the Casts claimed. Pass 2: the
    # fused node is not a node of the report; CenterCropPad's body is claimed, Softmax (now the CPU
    # EP's) declined.
    assert "3 of 5 node(s) claimed" in headers[0], headers
    body = int(re.search(r"(\d+) of (\d+) node", headers[1]).group(1))
    assert f"{body} of {body + 1} node(s) claimed" in headers[1], headers
    assert not [line for line in lines if "MLXExecutionProvider" in line], lines
    assert [line for line in lines if line.startswith("[ortmlx claims] decline") and "already assigned to CPUExecutionProvider" in line], lines
    records = [json.loads(line) for line in claims_file.read_text().splitlines()]
    assert records and not [r for r in records if r["domain"] == "MLXExecutionProvider"], records
