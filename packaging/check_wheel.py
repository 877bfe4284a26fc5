#!/usr/bin/env python3
"""Checks a built ``onnxruntime-mlx-ep`` / ``onnxruntime-mlx-ep-cuda13`` wheel, in two modes.

``--static WHEEL [--mlx-wheel MLX_WHEEL]`` (any Python >= 3.9 with binutils; no GPU needed):

1. the metadata: name, ``Requires-Dist`` (``onnxruntime>=1.23.1``; the CUDA wheel also the exact
   ``mlx-cuda-13`` pin of ``--mlx-wheel``), ``Project-URL`` (present, each ``Label, URL`` with an
   http(s) URL; any host: it comes from the workspace's ``repository``, and a placeholder on the
   reserved ``.invalid`` domain is reported, not failed), the manylinux tag (the CUDA wheel's is
   at least its MLX wheel's);
2. the wheel (and the MLX wheel's ``mlx/lib``) unpacked into a temporary ``site-packages``: each
   shared library of the package has only ``$ORIGIN``-relative RUNPATHs, no RPATH, NEEDED
   entries that are bundled, base libraries or ``libmlx.so`` (CUDA wheel), and ``ldd`` resolves
   the bundled ones inside the package and ``libmlx.so`` at ``<site>/mlx/lib/libmlx.so``.
   libmlx's own CUDA libraries are not installed here, so only ours are checked;
3. the module imported from there picks the right build, and the CUDA build without its
   ``mlx-cuda-13`` fails with a clear error naming it.

Without ``--static`` (``cargo xtask package`` and the ONNX Runtime matrix run it in an
environment where the wheel is installed, with a scrubbed environment: no ``LD_LIBRARY_PATH``,
``HOME`` elsewhere):

1. the module follows ORT's plugin packaging convention; the name the registration helper
   returns unregisters the library with ``onnxruntime`` itself, also when the library was
   registered directly through ``onnxruntime`` under another name;
2. a small model (MatMul, Add, Relu, Softmax) runs on the MLX EP through
   ``add_to_session_options``, matches numpy, and every node is placed on
   ``MLXExecutionProvider`` (assignment info on ORT >= 1.24, the profile on 1.23);
3. ``/proc/self/maps`` shows that the EP, libmlxc and libmlx (and for the CPU build OpenBLAS and
   the Fortran runtime) were loaded from the installed packages, nothing from the build's cache.
   ``--device gpu`` runs the model on MLX's GPU (the CUDA wheel on an NVIDIA machine).

Prints a JSON summary on success; exits non-zero with the reason otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse
import zipfile
from pathlib import Path

# Import the installed package, never the source next to this script.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

EP = "MLXExecutionProvider"


def fail(message: str) -> None:
    sys.exit(f"check_wheel: FAIL: {message}")


def model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8,)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="matmul"),
        helper.make_node("Add", ["mm", "b"], ["add"], name="add"),
        helper.make_node("Relu", ["add"], ["relu"], name="relu"),
        helper.make_node("Softmax", ["relu"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "wheel_check",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.flatten()), helper.make_tensor("b", TensorProto.FLOAT, b.shape, b)],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def reference(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    z = np.maximum(x @ inits["w"] + inits["b"], 0)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def placements(session) -> list[tuple[str, str]]:
    """(ep, op type) of every node (ORT >= 1.24) or every kernel that ran (1.23)."""
    if hasattr(session, "get_provider_graph_assignment_info"):
        return [(sg.ep_name, n.op_type) for sg in session.get_provider_graph_assignment_info() for n in sg.get_nodes()]
    path = session.end_profiling()
    with open(path) as f:
        events = json.load(f)
    return [
        (e["args"].get("provider", "?"), e["args"].get("op_name", "?"))
        for e in events
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")
    ]


def mapped_libraries() -> list[str]:
    paths = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and ".so" in parts[5]:
                paths.add(parts[5].strip())
    return sorted(paths)


def runtime_imports() -> None:
    """The runtime check's imports (the static check needs only the standard library)."""
    global np, onnx, ort, helper, TensorProto, mlx_ep
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    import onnxruntime_mlx_ep as mlx_ep


def check_registration() -> str:
    """The registration helper's name always unregisters; returns the final registration."""

    def devices() -> list:
        return [d for d in ort.get_ep_devices() if d.ep_name == EP]

    name = mlx_ep.register_execution_provider_library()
    again = mlx_ep.register_execution_provider_library("another_name")
    if again != name:
        fail(f"a second registration returned {again!r}, the first {name!r}")
    if len(devices()) != 1 or mlx_ep.get_ep_devices() != devices():
        fail(f"expected one {EP} device after registering twice, found {len(devices())}")
    # the returned name is what onnxruntime itself unregisters
    ort.unregister_execution_provider_library(name)
    if devices():
        fail(f"onnxruntime.unregister_execution_provider_library({name!r}) left {EP} devices")
    # registered directly through onnxruntime under another name: the helper reports that name
    # and leaves that registration alone
    ort.register_execution_provider_library("registered_elsewhere", mlx_ep.get_library_path())
    found = mlx_ep.register_execution_provider_library()
    if found != "registered_elsewhere":
        fail(f"with the library registered as 'registered_elsewhere', the helper returned {found!r}")
    mlx_ep.unregister_execution_provider_library()
    if len(devices()) != 1:
        fail("unregister_execution_provider_library() removed a registration it did not make")
    ort.unregister_execution_provider_library(found)
    # the helper's own registration, undone by the helper
    name = mlx_ep.register_execution_provider_library()
    mlx_ep.unregister_execution_provider_library()
    if devices():
        fail("unregister_execution_provider_library() left the helper's registration")
    return mlx_ep.register_execution_provider_library()


def in_build_cache(path: str) -> bool:
    """Whether ``path`` lies in the build's cache (where the MLX SDK and mlx-c are built)."""
    return "/.cache/ortmlx/" in path


def in_environment(path: str) -> bool:
    """Whether ``path`` belongs to this Python environment (which may itself live in the cache)."""
    return os.path.realpath(path).startswith(os.path.realpath(sys.prefix) + os.sep)


def check_installed(device: str) -> None:
    runtime_imports()
    if os.environ.get("LD_LIBRARY_PATH"):
        fail("LD_LIBRARY_PATH is set; the check must run without it")
    package_dir = os.path.dirname(os.path.abspath(mlx_ep.__file__))
    site = os.path.dirname(package_dir)
    build = mlx_ep.get_build()
    lib = mlx_ep.get_library_path()
    if not lib.startswith(package_dir) or not os.path.isfile(lib):
        fail(f"get_library_path() = {lib!r} is not a file inside {package_dir}")
    if mlx_ep.get_ep_name() != EP or mlx_ep.get_ep_names() != [EP]:
        fail(f"get_ep_name() = {mlx_ep.get_ep_name()!r}, get_ep_names() = {mlx_ep.get_ep_names()!r}")

    name = check_registration()

    m = model()
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    options = ort.SessionOptions()
    tmp = tempfile.mkdtemp(prefix="ortmlx-wheel-check-")
    if hasattr(ort.InferenceSession, "get_provider_graph_assignment_info"):
        options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    else:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "profile")
    if mlx_ep.add_to_session_options(options, {"device": device}) is not options:
        fail("add_to_session_options did not return the SessionOptions it was given")
    session = ort.InferenceSession(m.SerializeToString(), sess_options=options, enable_fallback=0)
    (y,) = session.run(None, {"x": x})
    np.testing.assert_allclose(y, reference(m, x), rtol=1e-5, atol=1e-6)
    placed = placements(session)
    if not placed or any(ep != EP for ep, _ in placed):
        fail(f"not every node ran on {EP}: {placed}")

    libs = mapped_libraries()
    build_dir = os.path.dirname(lib)
    if build == "cpu":
        bundled = sorted(os.listdir(os.path.join(build_dir, "lib"))) + [os.path.basename(lib)]
        expected = ("libmlx-", "libmlxc-", "libopenblas-", "libgfortran-", "libonnxruntime_mlx_ep")
        outside = {}
    else:
        bundled = sorted(f for f in os.listdir(build_dir) if ".so" in f)
        expected = ("libmlxc-", "libonnxruntime_mlx_ep")
        # libmlx is the mlx-cuda-13 wheel's, next to this package
        outside = {"libmlx.so": os.path.realpath(os.path.join(site, "mlx", "lib", "libmlx.so"))}
    real_build = os.path.realpath(build_dir) + os.sep
    loaded = {}
    for path in libs:
        base = os.path.basename(path)
        if base in bundled:
            if not os.path.realpath(path).startswith(real_build):
                fail(f"{base} was loaded from {path}, outside the package {build_dir}")
            loaded[base] = path
        elif base in outside:
            if os.path.realpath(path) != outside[base]:
                fail(f"{base} was loaded from {path}, expected {outside[base]}")
            loaded[base] = path
        elif (in_build_cache(path) and not in_environment(path)) or base.startswith(
            ("libmlx", "libopenblas", "libblas-", "liblapack-", "libonnxruntime_mlx_ep")
        ):
            if not (build != "cpu" and "mlx_cuda_13.libs" in path):
                fail(f"{path} is mapped: MLX, BLAS or the EP from outside the package")
    for prefix in expected + tuple(outside):
        if not any(b.startswith(prefix) for b in loaded):
            fail(f"no {prefix}* loaded from the package; bundled {bundled}; mapped: {libs}")

    print(
        json.dumps(
            {
                "onnxruntime": ort.__version__,
                "onnxruntime_mlx_ep": mlx_ep.__version__,
                "build": build,
                "device": device,
                "registered_as": name,
                "placement": sorted({ep for ep, _ in placed}),
                "nodes": len(placed),
                "loaded": {k: os.path.relpath(v, site) for k, v in loaded.items()},
            },
            indent=1,
        )
    )


# --------------------------------------------------------------------------------------
# the static check

#: Libraries every manylinux system provides (PEP 600's base set, x86_64).
BASE_LIBRARIES = {
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libpthread.so.0",
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "ld-linux-x86-64.so.2",
    "libutil.so.1",
    "libresolv.so.2",
}
ORT_FLOOR = "onnxruntime>=1.23.1"


def wheel_metadata(wheel: Path) -> tuple[dict[str, list[str]], str]:
    """(METADATA headers, WHEEL Tag) of a wheel file."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        wheel_text = z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
    headers: dict[str, list[str]] = {}
    for line in meta.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            headers.setdefault(key, []).append(value)
    tag = next((line.split(": ", 1)[1] for line in wheel_text.splitlines() if line.startswith("Tag: ")), "")
    return headers, tag


def glibc_of(tag: str) -> tuple[int, int]:
    m = re.search(r"manylinux_(\d+)_(\d+)_x86_64$", tag)
    if not m:
        fail(f"wheel tag {tag!r} is not manylinux_X_Y_x86_64")
    return int(m.group(1)), int(m.group(2))


def readelf_dynamic(path: Path) -> dict[str, list[str]]:
    out = subprocess.run(["readelf", "-dW", str(path)], capture_output=True, text=True, check=True).stdout
    found: dict[str, list[str]] = {"NEEDED": [], "RPATH": [], "RUNPATH": []}
    for line in out.splitlines():
        m = re.search(r"\((NEEDED|RPATH|RUNPATH)\)\s+\S.*?\[(.*)\]", line)
        if m:
            kind, value = m.groups()
            found[kind].extend([value] if kind == "NEEDED" else [p for p in value.split(":") if p])
    return found


def check_static(wheel: Path, mlx_wheel: Path | None) -> None:
    headers, tag = wheel_metadata(wheel)
    name, version = headers.get("Name", ["?"])[0], headers.get("Version", ["?"])[0]
    cuda = name.endswith("-cuda13")
    if name not in ("onnxruntime-mlx-ep", "onnxruntime-mlx-ep-cuda13"):
        fail(f"unexpected distribution name {name!r}")
    if wheel.name != f"{name.replace('-', '_')}-{version}-{tag}.whl":
        fail(f"file name {wheel.name} does not match the metadata ({name} {version}, tag {tag})")
    requires = headers.get("Requires-Dist", [])
    want = [ORT_FLOOR]
    glibc = glibc_of(tag)
    if cuda:
        if mlx_wheel is None:
            fail("the CUDA wheel's check needs --mlx-wheel (the pinned mlx-cuda-13 wheel)")
        mlx_headers, mlx_tag = wheel_metadata(mlx_wheel)
        want.append(f"{mlx_headers['Name'][0]}=={mlx_headers['Version'][0]}")
        if glibc < glibc_of(mlx_tag):
            fail(f"tag {tag} promises an older glibc than its MLX wheel's {mlx_tag}")
    if sorted(requires) != sorted(want):
        fail(f"Requires-Dist {requires}, expected {want}")
    project_urls = headers.get("Project-URL", [])
    if not project_urls:
        fail("no Project-URL in the metadata")
    placeholders = []
    for entry in project_urls:
        label, sep, url = entry.partition(",")
        parsed = urllib.parse.urlparse(url.strip())
        if not sep or not label.strip() or parsed.scheme not in ("http", "https") or not parsed.hostname:
            fail(f"Project-URL {entry!r}: expected 'Label, http(s)://host/...'")
        if parsed.hostname.endswith(".invalid"):
            placeholders.append(label.strip())
    if placeholders:
        print(f"note: the Project-URLs {', '.join(placeholders)} are placeholders (the workspace's `repository` in Cargo.toml)")
    if not headers.get("Requires-Python"):
        fail("no Requires-Python in the metadata")

    with tempfile.TemporaryDirectory(prefix="ortmlx-static-check-") as tmp:
        site = Path(tmp) / "site-packages"
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
            ours = [n for n in z.namelist() if re.search(r"\.so(\.|$)", n)]
        if cuda:
            with zipfile.ZipFile(mlx_wheel) as z:
                members = [n for n in z.namelist() if n.startswith(("mlx/lib/", "mlx_cuda_13.libs/"))]
                z.extractall(site, members)
            if any(Path(n).name.startswith("libmlx-") or Path(n).name == "libmlx.so" for n in ours):
                fail(f"the CUDA wheel bundles libmlx: {ours}")
        bundled = {Path(n).name for n in ours}
        expected_libmlx = (site / "mlx" / "lib" / "libmlx.so").resolve()
        resolved = {}
        for member in ours:
            path = site / member
            dyn = readelf_dynamic(path)
            if dyn["RPATH"]:
                fail(f"{member}: DT_RPATH {dyn['RPATH']}; expected only RUNPATH")
            bad = [p for p in dyn["RUNPATH"] if not p.startswith("$ORIGIN")]
            if bad:
                fail(f"{member}: RUNPATH entries {bad} are not relative to $ORIGIN")
            allowed = BASE_LIBRARIES | bundled | ({"libmlx.so"} if cuda else set())
            stray = [n for n in dyn["NEEDED"] if n not in allowed]
            if stray:
                fail(f"{member}: NEEDED {stray} is neither in the wheel, a base library nor libmlx.so of mlx-cuda-13")
            env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
            text = subprocess.run(["ldd", str(path)], capture_output=True, text=True, env=env).stdout
            for needed in dyn["NEEDED"]:
                if needed in BASE_LIBRARIES:
                    continue
                m = re.search(re.escape(needed) + r" => (\S+)", text)
                where = Path(m.group(1)).resolve() if m and m.group(1) != "not" else None
                if needed == "libmlx.so":
                    ok = where == expected_libmlx
                else:
                    package_root = str((site / "onnxruntime_mlx_ep").resolve()) + os.sep
                    ok = where is not None and str(where).startswith(package_root)
                if not ok:
                    fail(f"{member}: NEEDED {needed} resolves to {where}, not inside the unpacked layout:\n{text}")
                resolved[f"{Path(member).name} -> {needed}"] = str(where.relative_to(site.resolve()))

        # the module picks the build; without mlx-cuda-13 the CUDA build says what is missing
        probe = (
            "import json, onnxruntime_mlx_ep as m\n"
            "out = {}\n"
            "try:\n    out['build'] = m.get_build()\n    out['library'] = m.get_library_path()\n"
            "except Exception as e:\n    out['error'] = f'{type(e).__name__}: {e}'\n"
        )
        register_code = (
            "try:\n    import onnxruntime\nexcept ImportError:\n    onnxruntime = None\n"
            "if onnxruntime is not None:\n"
            "    try:\n        m.register_execution_provider_library()\n"
            "    except Exception as e:\n        out['register_error'] = f'{type(e).__name__}: {e}'\n"
        )

        def probe_module(register: bool = False, build: str | None = None) -> dict:
            env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "ORTMLX_EP_BUILD")}
            if build:
                env["ORTMLX_EP_BUILD"] = build
            env["PYTHONPATH"] = str(site)
            env["PYTHONNOUSERSITE"] = "1"
            code = probe + (register_code if register else "") + "print(json.dumps(out))\n"
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp)
            if out.returncode != 0:
                fail(f"importing the unpacked module failed:\n{out.stderr}")
            return json.loads(out.stdout)

        got = probe_module()
        build_dir = site / "onnxruntime_mlx_ep" / ("cuda13" if cuda else "")
        if got.get("build") != ("cuda13" if cuda else "cpu") or Path(got.get("library", "")).resolve() != (build_dir / "libonnxruntime_mlx_ep.so").resolve():
            fail(f"the unpacked module chose {got}, expected the library in {build_dir}")
        # asking for the build that is not installed names the distribution to install
        other, other_dist = ("cpu", "onnxruntime-mlx-ep") if cuda else ("cuda13", "onnxruntime-mlx-ep-cuda13")
        got = probe_module(build=other)
        if "FileNotFoundError" not in got.get("error", "") or other_dist not in got.get("error", ""):
            fail(f"ORTMLX_EP_BUILD={other} without that build should name {other_dist}, got {got}")
        missing_error = load_error = None
        if cuda:
            import shutil

            # Without the NVIDIA wheels and driver (this machine), registering names what is missing.
            got = probe_module(register=True)
            load_error = got.get("register_error")
            if load_error is not None and ("RuntimeError" not in load_error or "NVIDIA" not in load_error):
                fail(f"registering the CUDA build without its CUDA libraries should fail clearly, got {load_error}")

            shutil.rmtree(site / "mlx")
            got = probe_module()
            missing_error = got.get("error", "")
            if "RuntimeError" not in missing_error or "mlx-cuda-13==" not in missing_error:
                fail(f"without mlx-cuda-13 the CUDA build should fail clearly, got {got}")

    print(
        json.dumps(
            {
                "wheel": wheel.name,
                "requires": requires,
                "project_urls": headers.get("Project-URL"),
                "tag": tag,
                "resolved": resolved,
                "register_here": load_error,
                "without_mlx": missing_error,
            },
            indent=1,
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description="Checks an onnxruntime-mlx-ep wheel (see the module's doc).")
    ap.add_argument("--static", type=Path, metavar="WHEEL", help="check this wheel file without installing it")
    ap.add_argument("--mlx-wheel", type=Path, help="with --static: the pinned mlx-cuda-13 wheel the CUDA wheel depends on")
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu", help="where MLX runs the model (installed check)")
    args = ap.parse_args()
    if args.static:
        check_static(args.static, args.mlx_wheel)
    else:
        check_installed(args.device)


if __name__ == "__main__":
    main()
