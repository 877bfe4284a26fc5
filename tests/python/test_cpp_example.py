"""The C++ usage example (``docs/examples/cpp/mlx_ep_example.cpp``) compiles against ONNX
Runtime's C API header, links against this onnxruntime wheel's ``libonnxruntime.so`` and runs a
model with every node on MLX (the example disables the CPU fallback, so a node left to the CPU
EP fails it; a control model with a string Cast proves that).

The header comes from ``ORTMLX_ORT_INCLUDE`` (``cargo xtask test`` provisions it from Debian's
``libonnxruntime-dev`` 1.23.2, the file the recipe of ``docs/usage.md`` fetches); without it, or
without ``g++``, the test is skipped. The recipe itself, with the installed wheels, runs in the
wheel matrix (``packaging/check_snippets.py --cpp-recipe``)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import LIBRARY_VAR

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(ROOT, "docs", "examples", "cpp", "mlx_ep_example.cpp")
INCLUDE = os.environ.get("ORTMLX_ORT_INCLUDE")


def model(with_string: bool) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "r"], ["y"])]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    if with_string:
        nodes.append(helper.make_node("Cast", ["y"], ["s"], to=TensorProto.STRING))
        out = helper.make_tensor_value_info("s", TensorProto.STRING, ["n", 4])
    g = helper.make_graph(nodes, "cpp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])], [out])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    if not INCLUDE or not os.path.isfile(os.path.join(INCLUDE, "onnxruntime_c_api.h")):
        pytest.skip("ORTMLX_ORT_INCLUDE does not name ONNX Runtime's C API headers (cargo xtask test provisions them)")
    compiler = shutil.which("g++") or shutil.which("c++")
    if not compiler:
        pytest.skip("no C++ compiler")
    capi = os.path.join(os.path.dirname(ort.__file__), "capi")
    libs = glob.glob(os.path.join(capi, "libonnxruntime.so*"))
    if not libs:
        pytest.skip(f"no libonnxruntime.so in {capi}")
    tmp = tmp_path_factory.mktemp("cpp")
    # The wheel ships libonnxruntime.so.<version>; its SONAME is libonnxruntime.so.1. ORT
    # 1.23 also loads libonnxruntime_providers_shared.so from the folder it was loaded from.
    link_dir = tmp / "lib"
    link_dir.mkdir()
    os.symlink(libs[0], link_dir / "libonnxruntime.so.1")
    for shared in glob.glob(os.path.join(capi, "libonnxruntime_providers_shared.so")):
        os.symlink(shared, link_dir / os.path.basename(shared))
    binary = tmp / "mlx_ep_example"
    subprocess.run(
        [compiler, "-std=c++17", "-Wall", "-Wextra", "-Werror", SOURCE, f"-I{INCLUDE}", str(link_dir / "libonnxruntime.so.1"), f"-Wl,-rpath,{link_dir}", "-o", str(binary)],
        check=True,
    )
    return binary, tmp


def run_example(example, with_string: bool) -> subprocess.CompletedProcess:
    binary, tmp = example
    path = tmp / ("string.onnx" if with_string else "model.onnx")
    onnx.save(model(with_string), path)
    library = os.path.abspath(os.environ[LIBRARY_VAR])
    return subprocess.run([str(binary), library, str(path)], capture_output=True, text=True, timeout=120)


def test_cpp_example_runs_on_mlx(example):
    result = run_example(example, with_string=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "on MLXExecutionProvider: y = 1 1 1 1" in result.stdout, result.stdout


def test_cpp_example_refuses_cpu_fallback(example):
    result = run_example(example, with_string=True)
    assert result.returncode != 0, result.stdout
    assert "CreateSession failed" in result.stderr, result.stderr
