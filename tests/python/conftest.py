"""Shared fixtures and helpers of the end-to-end suites.

The EP library comes from ``ORTMLX_EP_LIBRARY`` (``cargo xtask test`` sets it). It is
registered once per process. Every test that runs on MLX must also check *where* its nodes
ran: an EP that declines a node leaves it on ORT's CPU EP and the outputs still match, so a
test that only compares outputs proves nothing. How placement is read depends on ORT:

* ORT >= 1.24 (1.31.1 here): session config ``session.record_ep_graph_assignment_info=1``,
  then ``InferenceSession.get_provider_graph_assignment_info()``, a list of
  ``OrtEpAssignedSubgraph`` (``.ep_name``, ``.get_nodes()`` -> ``OrtEpAssignedNode`` with
  ``.name``, ``.op_type``, ``.domain``), one entry per subgraph an EP took.
* ORT 1.23.0 has no such API. There the session is profiled: every kernel that ran leaves a
  ``cat == "Node"`` event whose ``args`` hold ``op_name`` and ``provider``. A node the MLX EP
  took runs inside the EP's fused kernel (provider ``MLXExecutionProvider``); a node left on
  the CPU EP runs as its own kernel with provider ``CPUExecutionProvider``. So on 1.23 the
  checks are "no kernel of these op types ran anywhere but on MLX, and MLX ran something",
  which needs one ``run`` before asserting.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import shutil
import tempfile
from typing import Iterable, Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest

MLX_EP = "MLXExecutionProvider"
CPU_EP = "CPUExecutionProvider"
LIBRARY_VAR = "ORTMLX_EP_LIBRARY"
# `ORTMLX_TEST_DEVICE=gpu` runs every MLX session on MLX's GPU stream (the GPU check on the
# device machine sets it); unset, the EP's default device (the CPU) is used.
DEFAULT_EP_OPTIONS = {"device": os.environ["ORTMLX_TEST_DEVICE"]} if os.environ.get("ORTMLX_TEST_DEVICE") else {}
REGISTRATION_NAME = "ortmlx"

#: ORT >= 1.24 reports EP graph assignment; older ones are checked through profiling.
HAS_ASSIGNMENT_INFO = hasattr(ort.InferenceSession, "get_provider_graph_assignment_info")

_registered_devices: list | None = None
_profile_dir = tempfile.mkdtemp(prefix="ortmlx-profiles-")
atexit.register(shutil.rmtree, _profile_dir, ignore_errors=True)


def pytest_report_header(config):
    where = os.environ.get(LIBRARY_VAR) or "(unset)"
    how = "get_provider_graph_assignment_info" if HAS_ASSIGNMENT_INFO else "profiling"
    return [f"onnxruntime {ort.__version__}, onnx {onnx.__version__}, numpy {np.__version__}", f"{LIBRARY_VAR}={where}", f"placement read through {how}"]


# ---------------------------------------------------------------------------
# registering the EP


def report_line(request, line: str) -> None:
    """Writes ``line`` to the terminal past pytest's output capture (a summary a test wants
    seen even when it passes)."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            reporter.write_line(line)


def mlx_ep_devices() -> list:
    """Registers the EP library (once per process) and returns its OrtEpDevices.

    Fails the calling test with a clear message when the library is not configured, does
    not exist, does not load or offers no MLXExecutionProvider device."""
    global _registered_devices
    if _registered_devices is not None:
        return _registered_devices
    path = os.environ.get(LIBRARY_VAR)
    if not path:
        pytest.fail(
            f"{LIBRARY_VAR} is not set: point it at the built EP library (target/release/libonnxruntime_mlx_ep.so), "
            "or run the suites through `cargo xtask test`",
            pytrace=False,
        )
    if not os.path.isfile(path):
        pytest.fail(f"{LIBRARY_VAR}={path}: no such file (build it with `cargo xtask build`)", pytrace=False)
    # ORT resolves a relative path against its own package folder, not the working directory.
    path = os.path.abspath(path)
    try:
        ort.register_execution_provider_library(REGISTRATION_NAME, path)
    except Exception as err:  # noqa: BLE001 - reported as a test failure with the cause
        pytest.fail(f"register_execution_provider_library({REGISTRATION_NAME!r}, {path!r}) failed: {err}", pytrace=False)
    devices = [d for d in ort.get_ep_devices() if d.ep_name == MLX_EP]
    if not devices:
        found = sorted({(d.ep_name, d.ep_vendor) for d in ort.get_ep_devices()})
        pytest.fail(f"{path} registered but offers no {MLX_EP} device; ORT sees {found}", pytrace=False)
    _registered_devices = devices
    return devices


@pytest.fixture(scope="session")
def mlx_ep():
    """The MLX EP's devices; registering the library once per test process."""
    return mlx_ep_devices()


# ---------------------------------------------------------------------------
# sessions


def _model_bytes(model) -> bytes:
    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString()
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    with open(model, "rb") as f:
        return f.read()


def record_placement_in(options: ort.SessionOptions, prefix: str = "session") -> None:
    """Makes sessions of ``options`` record where each node ran: assignment info on ORT >= 1.24,
    else a profile (files named ``prefix`` in a temporary folder), read by ``placements``."""
    if HAS_ASSIGNMENT_INFO:
        options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    else:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(_profile_dir, prefix)


def make_session(
    model,
    mlx: bool = True,
    *,
    opt_level: ort.GraphOptimizationLevel | None = None,
    config: Mapping[str, str] | None = None,
    ep_options: Mapping[str, str] | None = None,
    record_placement: bool | None = None,
) -> ort.InferenceSession:
    """An InferenceSession for ``model`` (ModelProto, bytes or path).

    ``mlx=True``: the MLX EP through ``add_provider_for_devices`` (ORT's CPU EP takes what it
    declines); ``mlx=False``: the CPU EP alone, the reference. Placement is recorded (see the
    module docstring) for MLX sessions, and for CPU sessions when ``record_placement``."""
    options = ort.SessionOptions()
    if opt_level is not None:
        options.graph_optimization_level = opt_level
    if record_placement is None:
        record_placement = mlx
    if record_placement:
        record_placement_in(options)
    for key, value in (config or {}).items():
        options.add_session_config_entry(key, value)
    data = _model_bytes(model)
    if mlx:
        merged = dict(DEFAULT_EP_OPTIONS)
        merged.update(ep_options or {})
        options.add_provider_for_devices(mlx_ep_devices(), merged)
        session = ort.InferenceSession(data, sess_options=options)
    else:
        session = ort.InferenceSession(data, sess_options=options, providers=[CPU_EP])
    session._ortmlx_record = record_placement  # noqa: SLF001 - our own bookkeeping
    return session


# ---------------------------------------------------------------------------
# placement


@dataclasses.dataclass(frozen=True)
class Placement:
    """One node (ORT >= 1.24) or one executed kernel (ORT 1.23, profiled) and its EP."""

    ep: str
    op_type: str
    name: str


def placements(session: ort.InferenceSession) -> list[Placement]:
    """Where the session's nodes went.

    ORT >= 1.24: every node of the partitioned graph with the EP it was assigned to.
    ORT 1.23: every kernel that ran (one per CPU node; one per fused MLX subgraph, whose
    op type is the EP's fused op). On 1.23 the session must have run once; profiling ends
    at the first call (later runs are not profiled) and the result is kept."""
    if not getattr(session, "_ortmlx_record", False):
        raise AssertionError("this session was made without placement recording: use make_session(..., record_placement=True)")
    if HAS_ASSIGNMENT_INFO:
        result = []
        for subgraph in session.get_provider_graph_assignment_info():
            for node in subgraph.get_nodes():
                result.append(Placement(subgraph.ep_name, node.op_type, node.name))
        return result
    cached = getattr(session, "_ortmlx_profiled", None)
    if cached is not None:
        return cached
    path = session.end_profiling()
    if not path or not os.path.exists(path):
        raise AssertionError("profiling produced no file, so placement cannot be checked")
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    result = []
    for event in events:
        if event.get("cat") != "Node":
            continue
        name = event.get("name", "")
        if not name.endswith("_kernel_time"):
            continue
        args = event.get("args", {})
        result.append(Placement(args.get("provider", "?"), args.get("op_name", "?"), name[: -len("_kernel_time")]))
    result = list(dict.fromkeys(result))
    if not result:
        raise AssertionError("the profile holds no kernel: run the session before checking placement")
    session._ortmlx_profiled = result  # noqa: SLF001
    return result


def _describe(items: Iterable[Placement]) -> str:
    return ", ".join(f"{p.op_type} '{p.name}' on {p.ep}" for p in items) or "(none)"


def assert_on_mlx(session: ort.InferenceSession, op_types: Sequence[str]) -> None:
    """Asserts that the nodes of the given op types ran on the MLX EP.

    ORT >= 1.24: each op type has at least one node in the graph and every such node was
    assigned to MLXExecutionProvider. ORT 1.23: no kernel of these op types ran on another
    EP and at least one kernel ran on MLXExecutionProvider."""
    if isinstance(op_types, str):
        op_types = [op_types]
    found = placements(session)
    if HAS_ASSIGNMENT_INFO:
        for op in op_types:
            nodes = [p for p in found if p.op_type == op]
            assert nodes, f"no {op} node in the session's graph (was it optimized away?); nodes: {_describe(found)}"
            elsewhere = [p for p in nodes if p.ep != MLX_EP]
            assert not elsewhere, f"{op} not on {MLX_EP}: {_describe(elsewhere)}"
    else:
        elsewhere = [p for p in found if p.op_type in op_types and p.ep != MLX_EP]
        assert not elsewhere, f"not on {MLX_EP}: {_describe(elsewhere)}"
        assert any(p.ep == MLX_EP for p in found), f"no kernel ran on {MLX_EP}; kernels: {_describe(found)}"


def assert_all_on_mlx(session: ort.InferenceSession) -> None:
    """Asserts that every node of the session ran on the MLX EP (and that there was one)."""
    found = placements(session)
    assert found, "the session reports no node at all"
    elsewhere = [p for p in found if p.ep != MLX_EP]
    assert not elsewhere, f"{len(elsewhere)} of {len(found)} not on {MLX_EP}: {_describe(elsewhere)}"


def assert_on_cpu(session: ort.InferenceSession, op_types: Sequence[str]) -> None:
    """Asserts that nodes of the given op types exist and ran on ORT's CPU EP."""
    if isinstance(op_types, str):
        op_types = [op_types]
    found = placements(session)
    for op in op_types:
        nodes = [p for p in found if p.op_type == op]
        assert nodes, f"no {op} node ran on any EP; nodes: {_describe(found)}"
        elsewhere = [p for p in nodes if p.ep != CPU_EP]
        assert not elsewhere, f"{op} expected on {CPU_EP}: {_describe(elsewhere)}"


def placement_counts(session: ort.InferenceSession) -> dict[str, int]:
    """Nodes per EP (ORT >= 1.24) or kernels per EP (ORT 1.23)."""
    counts: dict[str, int] = {}
    for p in placements(session):
        counts[p.ep] = counts.get(p.ep, 0) + 1
    return counts


# ---------------------------------------------------------------------------
# comparing outputs


def run(session: ort.InferenceSession, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    return session.run(None, dict(feeds))


def assert_outputs_match(actual: Sequence, expected: Sequence, *, rtol: float = 1e-4, atol: float = 1e-4, names: Sequence[str] | None = None) -> None:
    """Same count, dtype and shape; floats within rtol/atol (NaN matches NaN); everything
    else (ints, bools, strings) exactly equal."""
    assert len(actual) == len(expected), f"{len(actual)} outputs, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        label = names[i] if names else f"output {i}"
        a, e = np.asarray(a), np.asarray(e)
        assert a.dtype == e.dtype, f"{label}: dtype {a.dtype}, expected {e.dtype}"
        assert a.shape == e.shape, f"{label}: shape {a.shape}, expected {e.shape}"
        if np.issubdtype(e.dtype, np.floating):
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=label)
        else:
            np.testing.assert_array_equal(a, e, err_msg=label)


#: The integer matmuls whose B (input index) and B zero point (input index) ORT's CPU EP takes
#: as uint8 x int8: on x86 CPUs without VNNI, MLAS sums u8 x s8 pairs in saturating int16
#: (vpmaddubsw), so its results there are not the exact ones the ops define.
_U8S8_MATMULS = {"MatMulInteger": (1, 3), "QLinearMatMul": (3, 5), "MatMulIntegerToFloat": (1, 5), "DynamicQuantizeMatMul": (1, 3), "QGemm": (3, 5)}


def _shifted(x: np.ndarray) -> np.ndarray:
    """int8 ``x`` as the uint8 ``x + 128``."""
    return np.asarray(np.asarray(x, np.int16) + 128, np.uint8)


def exact_reference(model, feeds: Mapping[str, np.ndarray]):
    """``model`` and ``feeds`` for the CPU EP's reference run: every int8 B of a uint8 x int8
    integer matmul becomes the uint8 ``B + 128`` with zero point ``b_zp + 128``, the same
    product, which MLAS computes exactly on every CPU. Other models come back as they are."""
    if not isinstance(model, onnx.ModelProto):
        return model, feeds
    nodes = [n for n in model.graph.node if n.op_type in _U8S8_MATMULS]
    if not nodes:
        return model, feeds
    m = onnx.ModelProto()
    m.CopyFrom(model)
    feeds = dict(feeds)
    inits = {t.name: t for t in m.graph.initializer}
    inputs = {v.name: v for v in m.graph.input}

    def value(name):
        if name in feeds:
            return feeds[name]
        if name in inits:
            return onnx.numpy_helper.to_array(inits[name])
        return None

    def put(name, array):
        if name in feeds:
            feeds[name] = array
            inputs[name].type.tensor_type.elem_type = onnx.TensorProto.UINT8
        else:
            inits[name].CopyFrom(onnx.numpy_helper.from_array(array, name))

    for n in m.graph.node:
        if n.op_type not in _U8S8_MATMULS:
            continue
        b_index, zp_index = _U8S8_MATMULS[n.op_type]
        a, b = value(n.input[0]), value(n.input[b_index])
        a_is_u8 = n.op_type == "DynamicQuantizeMatMul" or (a is not None and a.dtype == np.uint8)
        if not a_is_u8 or b is None or b.dtype != np.int8:
            continue
        put(n.input[b_index], _shifted(b))
        zp_name = n.input[zp_index] if len(n.input) > zp_index else ""
        if zp_name:
            put(zp_name, _shifted(value(zp_name)))
        else:
            zp_name = f"{n.input[b_index]}__exact_zp"
            m.graph.initializer.append(onnx.numpy_helper.from_array(np.array(128, np.uint8), zp_name))
            while len(n.input) <= zp_index:
                n.input.append("")
            n.input[zp_index] = zp_name
    return m, feeds


def check_node(
    op_type: str,
    feeds: Mapping[str, np.ndarray],
    *,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    all_on_mlx: bool = False,
    **model_kwargs,
) -> list[np.ndarray]:
    """``check_against_cpu`` of the one-node model ``models.node_model(op_type, feeds,
    **model_kwargs)``: outputs match ORT's CPU EP and ``op_type`` ran on MLX."""
    from models import node_model

    model = node_model(op_type, feeds, **model_kwargs)
    return check_against_cpu(model, feeds, [op_type], rtol=rtol, atol=atol, all_on_mlx=all_on_mlx)


def check_against_cpu(
    model,
    feeds: Mapping[str, np.ndarray],
    op_types: Sequence[str] | None = None,
    *,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    all_on_mlx: bool = False,
) -> list[np.ndarray]:
    """Runs ``model`` on the MLX EP and on the CPU EP, asserts the outputs match, then that
    ``op_types`` (default: every op type in the model) ran on MLX. Returns MLX's outputs."""
    if isinstance(model, onnx.ModelProto) and op_types is None:
        op_types = sorted({n.op_type for n in model.graph.node})
    reference, reference_feeds = exact_reference(model, feeds)
    expected = run(make_session(reference, mlx=False), reference_feeds)
    session = make_session(model, mlx=True)
    actual = run(session, feeds)
    names = [o.name for o in session.get_outputs()]
    assert_outputs_match(actual, expected, rtol=rtol, atol=atol, names=names)
    if op_types:
        assert_on_mlx(session, op_types)
    if all_on_mlx:
        assert_all_on_mlx(session)
    return actual
