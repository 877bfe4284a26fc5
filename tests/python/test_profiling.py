"""ORT's own profiler with the EP's events (``OrtEp::CreateProfiler``, ORT >= 1.25).

With ``SessionOptions.enable_profiling`` the profile JSON that ORT writes holds, besides ORT's
own events, one ``Session`` event per lowering at session creation
(``<fused node>_mlx_lowering``) and one ``Kernel`` event per fused-node run
(``<fused node>_mlx_run``, with the run's path, compiled-cache outcome, node count, device
and microseconds). ORT 1.23 and 1.24 have no such hook: there the profile has only ORT's
events and ``ORTMLX_TRACE`` (test_diagnostics.py) still records the EP's.
"""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import MLX_EP, _profile_dir, mlx_ep_devices

HAS_PROFILER_HOOK = tuple(int(p) for p in ort.__version__.split(".")[:2]) >= (1, 25)
needs_hook = pytest.mark.skipif(not HAS_PROFILER_HOOK, reason=f"ORT {ort.__version__} has no OrtEp::CreateProfiler (1.25)")


def model() -> bytes:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "h"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "prof",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        initializer=[numpy_helper.from_array(w, "w")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def profiled_session(ep_options: dict | None = None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(_profile_dir, "ep-events")
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    options.add_provider_for_devices(mlx_ep_devices(), ep_options or {})
    return ort.InferenceSession(model(), sess_options=options)


def profile_events(session: ort.InferenceSession) -> list[dict]:
    path = session.end_profiling()
    assert path and os.path.exists(path), "profiling wrote no file"
    with open(path) as f:
        events = json.load(f)  # the EP's names and values must keep ORT's JSON valid
    os.remove(path)
    return events


def ep_events(events: list[dict], suffix: str) -> list[dict]:
    return [e for e in events if e.get("name", "").endswith(suffix) and e.get("args", {}).get("ep") == MLX_EP]


def feeds(batch: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32)}


@needs_hook
def test_profile_holds_a_lowering_and_each_run(mlx_ep):
    session = profiled_session({"compile": "off"})
    for batch in (1, 2, 3):
        session.run(None, feeds(batch))
    events = profile_events(session)
    lowerings = ep_events(events, "_mlx_lowering")
    assert len(lowerings) == 1, [e["name"] for e in events]
    low = lowerings[0]
    assert low["cat"] == "Session" and low["ph"] == "X", low
    assert low["args"]["source"] == "lowered" and low["args"]["nodes"] == "3", low
    assert low["args"]["op_types"] == "MatMul,Relu,Add", low
    assert int(low["args"]["steps"]) >= 3 and low["args"]["device"] in ("cpu", "gpu"), low
    runs = ep_events(events, "_mlx_run")
    assert len(runs) == 3, [e["name"] for e in events]
    fused = low["args"]["fused_node"]
    for e in runs:
        assert e["cat"] == "Kernel" and e["name"] == f"{fused}_mlx_run", e
        args = e["args"]
        assert args["path"] == "eager" and args["cache"] == "none", args
        assert args["nodes"] == "3" and args["device"] == low["args"]["device"], args
        assert int(args["host_syncs"]) >= 1 and int(args["host_reads"]) == 0, args
        assert isinstance(e["dur"], int) and e["dur"] >= 0 and int(args["mlx_us"]) == e["dur"], e
    # Each run sits inside ORT's kernel event of the fused node, on the same thread.
    kernels = [e for e in events if e.get("cat") == "Node" and e["name"] == f"{fused}_kernel_time"]
    assert len(kernels) == 3, [e["name"] for e in events]
    for run in runs:
        assert any(k["tid"] == run["tid"] and k["ts"] <= run["ts"] + 1 and run["ts"] + run["dur"] <= k["ts"] + k["dur"] + 1 for k in kernels), (run, kernels)
    # The lowering happens during session initialization.
    (init,) = [e for e in events if e["name"] == "session_initialization"]
    assert init["ts"] <= low["ts"] + 1 and low["ts"] + low["dur"] <= init["ts"] + init["dur"] + 1, (init, low)


@needs_hook
def test_compiled_runs_report_cache_misses_then_hits(mlx_ep):
    session = profiled_session({"compile": "on"})
    for batch in (2, 2, 3, 3):
        session.run(None, feeds(batch))
    runs = sorted(ep_events(profile_events(session), "_mlx_run"), key=lambda e: e["ts"])
    assert len(runs) == 4 and all(e["args"]["path"] != "eager" for e in runs), runs
    caches = [e["args"]["cache"] for e in runs]
    # The general slot keys its closures by input shapes: the first run of each shape compiles.
    assert caches == ["miss", "hit", "miss", "hit"], caches


@needs_hook
def test_concurrent_runs_are_each_profiled_once(mlx_ep):
    session = profiled_session({"compile": "off"})
    threads, per_thread = 8, 5
    errors = []

    def work(i):
        try:
            for r in range(per_thread):
                session.run(None, feeds(1 + (i + r) % 3))
        except BaseException as err:  # noqa: BLE001 - re-raised below
            errors.append(err)

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors
    runs = ep_events(profile_events(session), "_mlx_run")
    assert len(runs) == threads * per_thread, len(runs)
    assert len({e["tid"] for e in runs}) > 1, "runs from 8 threads all report one thread id"


@pytest.mark.skipif(HAS_PROFILER_HOOK, reason="ORT >= 1.25 asks for the EP's profiler")
def test_without_the_hook_the_profile_has_only_orts_events(mlx_ep):
    session = profiled_session({"compile": "off"})
    session.run(None, feeds(2))
    events = profile_events(session)
    assert not [e for e in events if "_mlx_" in e.get("name", "")], events
    kernels = [e for e in events if e.get("cat") == "Node" and e.get("args", {}).get("provider") == MLX_EP]
    assert kernels, "the fused node's kernel event is missing"


def test_the_eps_own_trace_has_the_same_labels_on_every_ort(tmp_path):
    """ORTMLX_TRACE works whether or not ORT asks for a profiler: each compute span carries
    the run's path and compiled-cache outcome (compile on: the first run of a shape misses)."""
    from test_diagnostics import run_child

    path = tmp_path / "trace.json"
    run_child(tmp_path, {"ORTMLX_TRACE": str(path)}, runs=2, ep_options={"compile": "on"})
    with open(path) as f:
        spans = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "compute"]
    assert [(e["args"]["path"], e["args"]["cache"]) for e in spans] == [("general", "miss"), ("general", "hit")], spans
