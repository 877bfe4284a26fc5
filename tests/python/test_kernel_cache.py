"""The CUDA kernel cache the EP chooses for MLX (``MLX_PTX_CACHE_DIR``), once per process.

Each case runs in a child process (the choice is process-wide) that creates sessions with
the MLX EP and reports the process's live ``MLX_PTX_CACHE_DIR`` (read with libc's getenv,
since ``os.environ`` is a snapshot taken at start). The folder only fills on a GPU; the
choice itself is the same on every device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import LIBRARY_VAR, REGISTRATION_NAME

CHILD = textwrap.dedent(
    """
    import ctypes, json, os, sys
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    ort.register_execution_provider_library(REGISTRATION_NAME, os.path.abspath(os.environ[LIBRARY_VAR]))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"]
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    seen = []
    for options in json.loads(sys.argv[1]):
        so = ort.SessionOptions()
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        so.add_provider_for_devices(devices, options)
        s = ort.InferenceSession(model.SerializeToString(), sess_options=so)
        y = s.run(None, {"x": np.array([-1, 0, 1, 2], np.float32)})[0]
        assert y.tolist() == [0, 0, 1, 2], y
        getenv = ctypes.CDLL(None).getenv
        getenv.restype = ctypes.c_char_p
        value = getenv(b"MLX_PTX_CACHE_DIR")
        seen.append(None if value is None else value.decode())
    print(json.dumps(seen))
    """
).replace("REGISTRATION_NAME", repr(REGISTRATION_NAME)).replace("LIBRARY_VAR", repr(LIBRARY_VAR))


def chosen(tmp_path, sessions: list[dict], **env: str | None) -> list[str | None]:
    child_env = {k: v for k, v in os.environ.items() if k not in ("MLX_PTX_CACHE_DIR", "ORTMLX_KERNEL_CACHE_DIR")}
    child_env["HOME"] = str(tmp_path / "home")
    child_env.pop("XDG_CACHE_HOME", None)
    for key, value in env.items():
        if value is None:
            child_env.pop(key, None)
        else:
            child_env[key] = value
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(sessions)],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_default_is_under_the_users_cache_folder(mlx_ep, tmp_path):
    (value,) = chosen(tmp_path, [{}])
    assert value is not None and value.startswith(str(tmp_path / "home" / ".cache" / "onnxruntime-mlx-ep" / "mlx-"))
    assert value.endswith("/ptx")
    (value,) = chosen(tmp_path, [{}], XDG_CACHE_HOME=str(tmp_path / "xdg"))
    assert value.startswith(str(tmp_path / "xdg" / "onnxruntime-mlx-ep" / "mlx-")), value


def test_option_then_variable_and_the_first_session_wins(mlx_ep, tmp_path):
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    assert chosen(tmp_path, [{"kernel_cache_dir": first}, {"kernel_cache_dir": second}, {}]) == [first] * 3
    assert chosen(tmp_path, [{}], ORTMLX_KERNEL_CACHE_DIR=second) == [second]
    assert chosen(tmp_path, [{"kernel_cache_dir": first}], ORTMLX_KERNEL_CACHE_DIR=second) == [first]


def test_off_and_the_users_mlx_variable(mlx_ep, tmp_path):
    # "off": an empty MLX_PTX_CACHE_DIR, which MLX can't create and so keeps no cache
    assert chosen(tmp_path, [{"kernel_cache_dir": "off"}]) == [""]
    assert chosen(tmp_path, [{}], ORTMLX_KERNEL_CACHE_DIR="OFF") == [""]
    mine = str(tmp_path / "mine")
    assert chosen(tmp_path, [{"kernel_cache_dir": "off"}], MLX_PTX_CACHE_DIR=mine) == [mine]


@pytest.mark.parametrize("options", [{"memory_limit": "4G", "cache_limit": "256M"}, {"cache_limit": "0"}])
def test_memory_limits_are_accepted(mlx_ep, tmp_path, options):
    assert len(chosen(tmp_path, [options])) == 1
