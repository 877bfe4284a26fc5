"""The MLX execution provider for ONNX Runtime, as a plugin EP library.

Follows ONNX Runtime's plugin EP packaging convention: :func:`get_library_path` gives the
library to register, :func:`get_ep_name` the execution provider's name. Two distributions
install this module, one at a time (like ``onnxruntime`` and ``onnxruntime-gpu``):

* ``onnxruntime-mlx-ep``: the CPU build; bundles MLX, mlx-c and an optimized BLAS (OpenBLAS);
* ``onnxruntime-mlx-ep-cuda13``: the NVIDIA CUDA 13 build; bundles mlx-c and takes MLX from the
  ``mlx-cuda-13`` wheel it depends on.

Both need ``onnxruntime`` >= 1.23.1. The shortest way in, on every supported ONNX Runtime::

    import onnxruntime as ort
    import onnxruntime_mlx_ep as mlx_ep

    options = mlx_ep.add_to_session_options(ort.SessionOptions())
    session = ort.InferenceSession("model.onnx", sess_options=options)

On ONNX Runtime >= 1.25 the EP can also be asked for by name once registered::

    mlx_ep.register_execution_provider_library()
    session = ort.InferenceSession("model.onnx", providers=[mlx_ep.get_ep_name(), "CPUExecutionProvider"])
"""

from __future__ import annotations

import os
import threading
from typing import Mapping

__all__ = [
    "__version__",
    "MLX_VENDOR_ID",
    "add_to_session_options",
    "bind_output_to_mlx",
    "get_mlx_device",
    "get_build",
    "get_ep_devices",
    "get_ep_name",
    "get_ep_names",
    "get_library_path",
    "register_execution_provider_library",
    "unregister_execution_provider_library",
]

__version__ = "0.0.0"  # replaced by the wheel build

#: The execution provider's name.
EP_NAME = "MLXExecutionProvider"

#: The registration name :func:`register_execution_provider_library` uses by default.
DEFAULT_REGISTRATION_NAME = "onnxruntime_mlx_ep"

#: Environment variable that picks a build when both are installed: ``cpu`` or ``cuda13``.
BUILD_VARIABLE = "ORTMLX_EP_BUILD"

#: The MLX release the CUDA build is compiled against, and the distribution that provides it.
MLX_CUDA_DISTRIBUTION = "mlx-cuda-13"
MLX_VERSION = "0.32.2"

_LIBRARY = "libonnxruntime_mlx_ep.so"
_HERE = os.path.dirname(os.path.abspath(__file__))
#: build name -> (folder of the EP library, distribution that installs it)
_BUILDS = {
    "cuda13": (os.path.join(_HERE, "cuda13"), "onnxruntime-mlx-ep-cuda13"),
    "cpu": (_HERE, "onnxruntime-mlx-ep"),
}
#: The metadata key under which the EP library reports its registration name on its devices.
_REGISTRATION_KEY = "registration_name"

_lock = threading.Lock()
_owned_name: str | None = None  # the registration this module made, if any


def _installed_builds() -> list[str]:
    return [name for name, (folder, _) in _BUILDS.items() if os.path.isfile(os.path.join(folder, _LIBRARY))]


def get_build() -> str:
    """Which build :func:`get_library_path` uses: ``"cuda13"`` or ``"cpu"``.

    The CUDA build when ``onnxruntime-mlx-ep-cuda13`` is installed, else the CPU build;
    ``ORTMLX_EP_BUILD=cpu|cuda13`` chooses when both are. Raises ``FileNotFoundError`` when
    the requested (or any) build is missing."""
    installed = _installed_builds()
    wanted = os.environ.get(BUILD_VARIABLE, "").strip().lower()
    if wanted:
        if wanted not in _BUILDS:
            raise ValueError(f"{BUILD_VARIABLE}={wanted!r}: expected one of {', '.join(sorted(_BUILDS))}")
        if wanted not in installed:
            raise FileNotFoundError(
                f"{BUILD_VARIABLE}={wanted}, but that build is not installed in {_HERE}: "
                f"pip install {_BUILDS[wanted][1]}"
            )
        return wanted
    if not installed:
        raise FileNotFoundError(
            f"no {_LIBRARY} in {_HERE}: this module is not an installed wheel "
            "(pip install onnxruntime-mlx-ep, or onnxruntime-mlx-ep-cuda13 for NVIDIA GPUs)"
        )
    return installed[0]


def _cuda_mlx_library() -> str:
    """Where the CUDA build's libmlx must be: ``<site-packages>/mlx/lib/libmlx.so``, installed
    by ``mlx-cuda-13`` next to this package (the EP library's run path points there)."""
    return os.path.join(os.path.dirname(_HERE), "mlx", "lib", "libmlx.so")


def _check_cuda_build() -> None:
    """Clear errors for a CUDA build whose MLX is missing, of another version, or unloadable."""
    mlx_lib = _cuda_mlx_library()
    hint = f"pip install {MLX_CUDA_DISTRIBUTION}=={MLX_VERSION} into the same environment"
    if not os.path.isfile(mlx_lib):
        raise RuntimeError(
            f"the CUDA build of the MLX EP needs libmlx from {MLX_CUDA_DISTRIBUTION}=={MLX_VERSION} at "
            f"{mlx_lib}, which does not exist: {hint}"
        )
    try:
        from importlib.metadata import PackageNotFoundError, version

        found = version(MLX_CUDA_DISTRIBUTION)
    except PackageNotFoundError:
        found = None
    if found is not None and found != MLX_VERSION:
        raise RuntimeError(
            f"the CUDA build of the MLX EP is built against MLX {MLX_VERSION}, but "
            f"{MLX_CUDA_DISTRIBUTION} {found} is installed: {hint}"
        )


def get_library_path() -> str:
    """The absolute path of the plugin EP library, for
    ``onnxruntime.register_execution_provider_library`` (or the C API's
    ``RegisterExecutionProviderLibrary``): the build :func:`get_build` names.

    For the CUDA build, raises ``RuntimeError`` when ``mlx-cuda-13`` (which provides libmlx)
    is missing or of another version."""
    build = get_build()
    if build == "cuda13":
        _check_cuda_build()
    return os.path.join(_BUILDS[build][0], _LIBRARY)


def get_ep_name() -> str:
    """The name of the execution provider the library provides: ``MLXExecutionProvider``."""
    return EP_NAME


def get_ep_names() -> list[str]:
    """Every execution provider name the library provides (just one)."""
    return [EP_NAME]


def _mlx_devices(ort) -> list:
    return [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]


def _registration_of(device) -> str | None:
    try:
        return dict(device.ep_metadata).get(_REGISTRATION_KEY)
    except Exception:  # noqa: BLE001 - an ORT without ep_metadata: treated as unknown
        return None


def _registered(ort) -> tuple[str | None, list]:
    """(registration name, its devices) of the first registration of the EP, or (None, [])."""
    devices = _mlx_devices(ort)
    if not devices:
        return None, []
    name = _registration_of(devices[0])
    return name, [d for d in devices if _registration_of(d) == name]


def _load_error(err: Exception) -> Exception:
    """ORT's error on loading the library, with what to do when it is the CUDA build."""
    if get_build() != "cuda13":
        return err
    text = str(err)
    hints = []
    if "libcuda.so" in text:
        hints.append("libcuda.so.1 comes with the NVIDIA driver: the CUDA build needs an NVIDIA GPU and driver")
    if any(lib in text for lib in ("libcudnn", "libcublas", "libcufft", "libnvrtc", "libnccl", "libcudart")):
        hints.append(f"NVIDIA's CUDA 13 wheels are missing: pip install {MLX_CUDA_DISTRIBUTION}=={MLX_VERSION} (with its dependencies)")
    if not hints:
        return err
    return RuntimeError(f"loading the CUDA build of the MLX EP failed: {text}\n" + "\n".join(hints))


def register_execution_provider_library(registration_name: str = DEFAULT_REGISTRATION_NAME) -> str:
    """Registers the library with ONNX Runtime once per process and returns the name it is
    registered under, which ``onnxruntime.unregister_execution_provider_library`` accepts.

    Safe to call again, from any thread: when the EP is already registered in this process
    (here or directly through ``onnxruntime``, under any name), nothing is registered and the
    existing registration's name is returned. Raises what ``onnxruntime`` raises when loading
    the library fails (for the CUDA build, with what is missing)."""
    global _owned_name
    import onnxruntime as ort

    with _lock:
        name, _ = _registered(ort)
        if name is not None:
            return name
        if _mlx_devices(ort):
            # A registration whose devices carry no name (a library older than this module).
            if _owned_name is not None:
                return _owned_name
            raise RuntimeError(
                f"{EP_NAME} is registered already by a library that does not report its registration name; "
                "unregister it with the name it was registered under, or use that registration directly"
            )
        _owned_name = None
        path = get_library_path()
        try:
            ort.register_execution_provider_library(registration_name, path)
        except Exception as err:
            raise _load_error(err) from err
        _owned_name = registration_name
        return registration_name


def unregister_execution_provider_library() -> None:
    """Unregisters what :func:`register_execution_provider_library` registered (a
    registration made directly through ``onnxruntime`` is left alone). Only call it after
    every session that uses the EP is released."""
    global _owned_name
    import onnxruntime as ort

    with _lock:
        if _owned_name is not None and any(_registration_of(d) == _owned_name for d in _mlx_devices(ort)):
            ort.unregister_execution_provider_library(_owned_name)
        _owned_name = None


def get_ep_devices() -> list:
    """The ``OrtEpDevice``\\ s of the MLX EP (registering the library first when needed), for
    ``SessionOptions.add_provider_for_devices``."""
    import onnxruntime as ort

    register_execution_provider_library()
    name, devices = _registered(ort)
    return devices if name is not None else _mlx_devices(ort)


#: The vendor id of the EP's memory device: values on ``OrtDevice(cpu, default memory,
#: MLX_VENDOR_ID, 0)`` live in MLX's own buffers (see "Device memory and IOBinding" in the docs).
MLX_VENDOR_ID = 0x4D4C


def get_mlx_device():
    """The EP's memory device as an ``onnxruntime.OrtDevice``."""
    import onnxruntime as ort

    return ort.OrtDevice.make("cpu", 0, MLX_VENDOR_ID)


def bind_output_to_mlx(io_binding, name: str) -> None:
    """Binds output ``name`` of an ``onnxruntime.IOBinding`` to the EP's memory: ONNX Runtime
    allocates it there at run time, and the EP makes its MLX result that allocation (no copy).
    ``IOBinding.bind_output`` takes no vendor id, so this binds the C-level device."""
    io_binding._iobinding.bind_output(name, get_mlx_device()._get_c_device())  # noqa: SLF001


def add_to_session_options(session_options=None, ep_options: Mapping[str, object] | None = None):
    """Adds the MLX EP to ``session_options`` (an ``onnxruntime.SessionOptions``; a new one when
    ``None``) and returns it: registers the library when needed and appends the EP's devices
    with ``ep_options`` (``{"device": "gpu", "compile": "on"}``, see the EP options).

    Works on every supported ONNX Runtime (>= 1.23.1), unlike asking for the EP by name in
    ``InferenceSession(providers=[...])``, which ONNX Runtime before 1.25 ignores for plugin
    EPs. Nodes the EP does not take run on ONNX Runtime's CPU EP::

        options = mlx_ep.add_to_session_options(ort.SessionOptions(), {"compile": "on"})
        session = ort.InferenceSession("model.onnx", sess_options=options)
    """
    import onnxruntime as ort

    if session_options is None:
        session_options = ort.SessionOptions()
    devices = get_ep_devices()
    if not devices:
        raise RuntimeError(f"the MLX EP library at {get_library_path()} is registered but offers no {EP_NAME} device")
    values = {str(k): str(v) for k, v in (ep_options or {}).items()}
    session_options.add_provider_for_devices(devices, values)
    return session_options
