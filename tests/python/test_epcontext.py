"""EPContext models: compile once, load without partitioning or lowering.

A session with ``ep.context_enable=1`` (or ORT's ``ModelCompiler``) writes a compiled model in
which each group the MLX EP fused is one ``com.microsoft.EPContext`` node whose
``ep_cache_context`` holds the EP's lowered plan, without the weights: those stay initializers
of the compiled model (inline or in its external data file). Loading that model runs every
node on MLX with the same outputs, lowers nothing (the library's ``OrtMlxEp_LoweringCount``
stays put) and refuses an edited or stale context with an error naming the problem.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import (
    LIBRARY_VAR,
    MLX_EP,
    _profile_dir,
    assert_all_on_mlx,
    assert_on_cpu,
    assert_on_mlx,
    mlx_ep_devices,
    record_placement_in,
)

ORT_VERSION = tuple(int(p) for p in ort.__version__.split(".")[:3])
#: ORT 1.23.0 can't mix a plugin EP with the CPU EP in one graph (fixed in 1.23.1).
CAN_MIX = ORT_VERSION >= (1, 23, 1)

SOURCE = "MLXExecutionProvider"


def library() -> ctypes.CDLL:
    lib = ctypes.CDLL(os.path.abspath(os.environ[LIBRARY_VAR]))
    for name in ("OrtMlxEp_LoweringCount", "OrtMlxEp_ContextLoadCount"):
        getattr(lib, name).restype = ctypes.c_uint64
    return lib


def counters() -> tuple[int, int]:
    lib = library()
    return lib.OrtMlxEp_LoweringCount(), lib.OrtMlxEp_ContextLoadCount()


def mlp(with_string_cast: bool = False) -> onnx.ModelProto:
    """x[b, 32] -> MatMul(W1) + b1 -> Tanh -> MatMul(W2) -> Softmax (weights of 16 KiB and
    up); optionally a Cast to string that MLX declines (stays on the CPU EP)."""
    rng = np.random.default_rng(7)
    w1 = rng.standard_normal((32, 128)).astype(np.float32) * 0.2
    b1 = rng.standard_normal((128,)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((128, 16)).astype(np.float32) * 0.2
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="bias"),
        helper.make_node("Tanh", ["hb"], ["t"], name="tanh"),
        helper.make_node("MatMul", ["t", "w2"], ["o"], name="mm2"),
        helper.make_node("Softmax", ["o"], ["y"], name="softmax", axis=-1),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])]
    if with_string_cast:
        nodes.append(helper.make_node("Cast", ["y"], ["s"], name="to_string", to=TensorProto.STRING))
        outputs.append(helper.make_tensor_value_info("s", TensorProto.STRING, ["batch", 16]))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
        outputs,
        initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"), numpy_helper.from_array(w2, "w2")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def feeds(batch: int = 3) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(batch).standard_normal((batch, 32)).astype(np.float32)}


def session(path, config: dict | None = None, record: bool = True) -> ort.InferenceSession:
    options = ort.SessionOptions()
    if record:
        record_placement_in(options, "ctx")
    for k, v in (config or {}).items():
        options.add_session_config_entry(k, v)
    options.add_provider_for_devices(mlx_ep_devices(), {})
    s = ort.InferenceSession(str(path), sess_options=options)
    s._ortmlx_record = record  # noqa: SLF001 - conftest's bookkeeping
    return s


def compile_with_session_options(tmp_path, model: onnx.ModelProto, extra: dict | None = None):
    source = tmp_path / "model.onnx"
    onnx.save(model, source)
    compiled = tmp_path / "model_ctx.onnx"
    config = {"ep.context_enable": "1", "ep.context_file_path": str(compiled)}
    config.update(extra or {})
    before = counters()
    s = session(source, config, record=False)
    outputs = s.run(None, feeds())
    assert counters()[0] > before[0], "compiling lowered nothing"
    del s
    assert compiled.exists(), "ep.context_enable=1 wrote no compiled model"
    return source, compiled, outputs


def context_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == "EPContext" and n.domain == "com.microsoft"]


def attr(node: onnx.NodeProto, name: str):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return None


def check_compiled_model(path, weights_external: bool = False) -> list[onnx.NodeProto]:
    model = onnx.load(str(path), load_external_data=False)
    nodes = context_nodes(model)
    assert len(nodes) == 1, [n.op_type for n in model.graph.node]
    node = nodes[0]
    assert attr(node, "source") == SOURCE.encode() and attr(node, "embed_mode") == 1, node
    blob = attr(node, "ep_cache_context")
    header = blob.split(b"\npayload=")[0].decode()
    assert header.startswith("ORTMLX-EPCONTEXT 1\nep="), header
    assert "\nmlx=" in header and "\nsource=" in header and "\ndigest=" in header, header
    # The weights (16 KiB + 8 KiB) are not in the cache: they stay initializers the node reads.
    assert len(blob) < 8 * 1024, f"{len(blob)} bytes of ep_cache_context"
    inits = {i.name: i for i in model.graph.initializer}
    assert {"w1", "b1", "w2"} <= set(inits), sorted(inits)
    assert {"w1", "b1", "w2"} <= set(node.input), list(node.input)
    stored_externally = {i.name for i in inits.values() if i.data_location == TensorProto.EXTERNAL}
    if weights_external:
        assert {"w1", "w2"} <= stored_externally, stored_externally
    meta = {p.key: p.value for p in model.metadata_props}
    info = meta.get(f"ep_compatibility_info.{SOURCE}")
    if info is not None:  # ORT writes it from 1.23 on where the EP gives one
        assert info.startswith(f"{SOURCE};context=1;ep=") and ";mlx=" in info and ";partitions=" in info, info
        source_hash = header.split("\nsource=")[1].split("\n")[0]
        assert source_hash in info, (source_hash, info)
    return nodes


def assert_loads_without_lowering(compiled, expected, contexts: int = 1, all_on_mlx: bool = True):
    lowered, loaded = counters()
    s = session(compiled)
    assert counters() == (lowered, loaded + contexts), "loading the compiled model lowered a plan"
    for _ in range(2):
        out = s.run(None, feeds())
        assert len(out) == len(expected)
        np.testing.assert_array_equal(out[0], expected[0])
    if all_on_mlx:
        assert_all_on_mlx(s)
    else:
        assert_on_mlx(s, ["EPContext"])
    return s


def test_session_option_compiles_and_reloads(tmp_path, mlx_ep):
    _, compiled, outputs = compile_with_session_options(tmp_path, mlp())
    check_compiled_model(compiled)
    assert_loads_without_lowering(compiled, outputs)
    cpu = ort.InferenceSession(mlp().SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds())
    np.testing.assert_allclose(outputs[0], cpu[0], rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(ORT_VERSION < (1, 25, 0), reason="ORT < 1.25 has no OrtEp::CreateProfiler")
def test_the_profile_shows_a_context_load_instead_of_a_lowering(tmp_path, mlx_ep):
    import json

    _, compiled, _ = compile_with_session_options(tmp_path, mlp())
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(_profile_dir, "ctx-load")
    options.add_provider_for_devices(mlx_ep_devices(), {})
    s = ort.InferenceSession(str(compiled), sess_options=options)
    s.run(None, feeds())
    with open(s.end_profiling()) as f:
        names = [e["name"] for e in json.load(f)]
    assert [n for n in names if n.endswith("_mlx_context_load")], names
    assert not [n for n in names if n.endswith("_mlx_lowering")], names
    assert [n for n in names if n.endswith("_mlx_run")], names


def test_weights_go_to_the_external_data_file(tmp_path, mlx_ep):
    _, compiled, outputs = compile_with_session_options(
        tmp_path, mlp(), {"ep.context_model_external_initializers_file_name": "weights.bin"}
    )
    assert (tmp_path / "weights.bin").exists(), sorted(p.name for p in tmp_path.iterdir())
    check_compiled_model(compiled, weights_external=True)
    assert_loads_without_lowering(compiled, outputs)


@pytest.mark.skipif(not CAN_MIX, reason="ORT 1.23.0 can't mix a plugin EP with the CPU EP in one graph")
def test_a_partly_compiled_model_keeps_cpu_nodes(tmp_path, mlx_ep):
    _, compiled, outputs = compile_with_session_options(tmp_path, mlp(with_string_cast=True))
    model = onnx.load(str(compiled))
    assert [n.op_type for n in model.graph.node] == ["EPContext", "Cast"], [n.op_type for n in model.graph.node]
    s = assert_loads_without_lowering(compiled, outputs, all_on_mlx=False)
    np.testing.assert_array_equal(s.run(None, feeds())[1], outputs[1])
    assert_on_cpu(s, ["Cast"])


@pytest.mark.skipif(not hasattr(ort, "ModelCompiler"), reason="this onnxruntime has no ModelCompiler")
def test_model_compiler_compiles_and_reloads(tmp_path, mlx_ep):
    source = tmp_path / "model.onnx"
    onnx.save(mlp(), source)
    reference = session(source, record=False).run(None, feeds())
    options = ort.SessionOptions()
    options.add_provider_for_devices(mlx_ep_devices(), {})
    compiled = tmp_path / "compiled.onnx"
    ort.ModelCompiler(options, str(source), embed_compiled_data_into_model=True).compile_to_file(str(compiled))
    check_compiled_model(compiled)
    assert_loads_without_lowering(compiled, reference)


def edited_copy(tmp_path, compiled, edit) -> str:
    model = onnx.load(str(compiled))
    (node,) = context_nodes(model)
    for a in node.attribute:
        if a.name == "ep_cache_context":
            a.s = edit(a.s)
    path = tmp_path / "edited.onnx"
    onnx.save(model, path)
    return path


def load_error(path) -> str:
    with pytest.raises(Exception) as err:  # noqa: PT011 - ORT raises its own Fail/InvalidArgument types
        session(path, record=False)
    return str(err.value)


def test_a_tampered_context_is_refused(tmp_path, mlx_ep):
    _, compiled, _ = compile_with_session_options(tmp_path, mlp())

    def flip(blob: bytes) -> bytes:
        at = blob.index(b"payload=") + 40
        return blob[:at] + (b"B" if blob[at : at + 1] == b"A" else b"A") + blob[at + 1 :]

    message = load_error(edited_copy(tmp_path, compiled, flip))
    assert "does not match its digest" in message and "compile the model again" in message, message


def test_a_stale_context_is_refused(tmp_path, mlx_ep):
    _, compiled, _ = compile_with_session_options(tmp_path, mlp())

    def age(blob: bytes) -> bytes:
        head, payload = blob.split(b"\npayload=")
        lines = [b"ep=0.0.0-old" if line.startswith(b"ep=") else line for line in head.split(b"\n")]
        return b"\n".join(lines) + b"\npayload=" + payload

    message = load_error(edited_copy(tmp_path, compiled, age))
    assert "stale context" in message and "0.0.0-old" in message, message


def test_changed_weights_are_refused(tmp_path, mlx_ep):
    _, compiled, _ = compile_with_session_options(tmp_path, mlp())
    model = onnx.load(str(compiled))
    w1 = next(i for i in model.graph.initializer if i.name == "w1")
    w1.CopyFrom(numpy_helper.from_array(np.zeros((16, 128), np.float32), "w1"))
    path = tmp_path / "reshaped.onnx"
    onnx.save(model, path)
    message = load_error(path)
    assert "initializer 'w1'" in message or "w1" in message, message


@pytest.mark.skipif(
    not hasattr(ort.capi.onnxruntime_pybind11_state, "get_model_compatibility_for_ep_devices"),
    reason="this onnxruntime can't ask an EP about a compiled model's compatibility string",
)
def test_the_compatibility_string_is_judged_by_the_ep(tmp_path, mlx_ep):
    """ORT asks the factory (``ValidateCompiledModelCompatibilityInfo``) about the string it
    stored in the compiled model's metadata: this build's string is optimal, one naming
    another MLX is unsupported."""
    C = ort.capi.onnxruntime_pybind11_state
    _, compiled, _ = compile_with_session_options(tmp_path, mlp())
    model = onnx.load(str(compiled))
    info = {p.key: p.value for p in model.metadata_props}[f"ep_compatibility_info.{SOURCE}"]
    devices = mlx_ep_devices()
    verdict = C.get_model_compatibility_for_ep_devices(devices, info)
    assert verdict == C.OrtCompiledModelCompatibility.EP_SUPPORTED_OPTIMAL, verdict
    other = info.replace(";mlx=", ";mlx=0.0.1-old;was=")
    verdict = C.get_model_compatibility_for_ep_devices(devices, other)
    assert verdict == C.OrtCompiledModelCompatibility.EP_UNSUPPORTED, verdict


# ---------------------------------------------------------------------------
# larger models: every plan survives the round trip (host programs, KV caches, quantized
# matmuls, convolutions)


def _larger_models():
    from llm import TINY
    from models import cnn_input, encoder_inputs, minilm_encoder, resnet_cnn

    return {
        "minilm-dynamic": (minilm_encoder(layers=2, seq=32, batch=2, dynamic=True), [encoder_inputs(batch=2, seq=s) for s in (32, 17)], None),
        "resnet": (resnet_cnn(), [{"input": cnn_input()}], None),
        "llama-tiny": (None, None, TINY),
        "llama-tiny-int4": (None, None, TINY.quantized(4)),
    }


@pytest.mark.parametrize("name", ["minilm-dynamic", "resnet", "llama-tiny", "llama-tiny-int4"])
def test_larger_models_round_trip(tmp_path, mlx_ep, name):
    from llm import build_llama, generate, prompt_ids

    model, feed_list, cfg = _larger_models()[name]
    if cfg is not None:
        model = build_llama(cfg)
    source = tmp_path / "model.onnx"
    onnx.save(model, source)
    compiled = tmp_path / "model_ctx.onnx"
    original = session(source, {"ep.context_enable": "1", "ep.context_file_path": str(compiled)}, record=False)
    assert compiled.exists()
    contexts = len(context_nodes(onnx.load(str(compiled), load_external_data=False)))
    assert contexts >= 1
    lowered, loaded = counters()
    reloaded = session(compiled)
    assert counters() == (lowered, loaded + contexts), "loading the compiled model lowered a plan"
    if cfg is not None:
        prompt = prompt_ids(cfg, 7)
        a, b = generate(original, cfg, prompt, 4), generate(reloaded, cfg, prompt, 4)
        assert a.tokens == b.tokens
        for x, y in zip(a.logits, b.logits):
            np.testing.assert_array_equal(x, y)
    else:
        for feeds_ in feed_list:
            for x, y in zip(original.run(None, feeds_), reloaded.run(None, feeds_)):
                np.testing.assert_array_equal(x, y)
    assert_all_on_mlx(reloaded)
