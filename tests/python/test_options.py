"""EP options through ``SessionOptions.add_provider_for_devices(devices, options)``: each valid
value runs on MLX; an unknown key or an invalid value fails session creation with a message
naming what is valid.

ORT's Python ``InferenceSession`` retries a session whose EP failed on the CPU EP alone
(printing "EP Error"); ``enable_fallback=0`` turns that off so the error surfaces."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import MLX_EP, assert_all_on_mlx, make_session, mlx_ep_devices, run


def small_model():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "w"], ["y"], name="add"),
    ]
    w = np.arange(16 * 64, dtype=np.float32).reshape(16, 64) * 1e-3
    graph = helper.make_graph(
        nodes,
        "options",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 64])],
        # 4 KiB, so that the initializer pool (share_initializers) is involved
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.flatten())],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, w


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"device": "cpu"},
        {"compile": "off"},
        {"compile": "auto"},
        {"compile": "on"},
        {"share_initializers": "off"},
        {"share_initializers": "on", "compile": "off", "device": "CPU"},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "defaults",
)
def test_valid_options_run_on_mlx(mlx_ep, options):
    model, w = small_model()
    session = make_session(model, ep_options=options)
    x = np.linspace(-1, 1, 16 * 64, dtype=np.float32).reshape(16, 64)
    for _ in range(2):
        (y,) = run(session, {"x": x})
        np.testing.assert_allclose(y, np.maximum(x, 0) + w, rtol=1e-6)
    assert_all_on_mlx(session)


def session_error(options: dict) -> str:
    model, _ = small_model()
    so = ort.SessionOptions()
    so.add_provider_for_devices(mlx_ep_devices(), options)
    with pytest.raises(Exception) as info:  # noqa: PT011 - ORT raises its own exception types
        ort.InferenceSession(model.SerializeToString(), sess_options=so, enable_fallback=0)
    return str(info.value)


def test_unknown_option_names_the_valid_ones(mlx_ep):
    message = session_error({"fast_math": "1"})
    assert "unknown option 'fast_math'" in message, message
    for key in ("device", "compile", "share_initializers"):
        assert key in message, message


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("device", "tpu", "expected cpu or gpu"),
        ("compile", "sometimes", "expected on or off, or auto"),
        ("share_initializers", "maybe", "expected on or off"),
    ],
)
def test_invalid_values_name_the_valid_ones(mlx_ep, key, value, expected):
    message = session_error({key: value})
    assert f"{key}='{value}'" in message, message
    assert expected in message, message


@pytest.mark.filterwarnings("ignore:Specified 'providers'")
def test_invalid_option_with_fallback_leaves_mlx_out(mlx_ep, capfd):
    """With ORT's default fallback the session is made on the CPU EP alone and the reason is
    printed: the EP is not silently used with a wrong option."""
    model, _ = small_model()
    so = ort.SessionOptions()
    so.add_provider_for_devices(mlx_ep_devices(), {"device": "tpu"})
    session = ort.InferenceSession(model.SerializeToString(), sess_options=so)
    assert MLX_EP not in session.get_providers()
    assert "device='tpu'" in capfd.readouterr().out
