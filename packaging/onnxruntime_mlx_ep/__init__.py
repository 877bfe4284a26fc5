"""The MLX execution provider for ONNX Runtime, as a plugin EP library.

Follows ONNX Runtime's plugin EP packaging convention: :func:`get_library_path` gives the
library to register, :func:`get_ep_name` the execution provider's name. The package bundles
MLX, mlx-c and an optimized BLAS (OpenBLAS); it needs only ``onnxruntime`` >= 1.23.

::

    import onnxruntime as ort
    import onnxruntime_mlx_ep as mlx_ep

    mlx_ep.register_execution_provider_library()  # once per process; safe to call again
    session = ort.InferenceSession(
        "model.onnx", providers=[mlx_ep.get_ep_name(), "CPUExecutionProvider"]
    )

    # or by device, with EP options
    options = ort.SessionOptions()
    options.add_provider_for_devices(mlx_ep.get_ep_devices(), {"compile": "on"})
    session = ort.InferenceSession("model.onnx", sess_options=options)
"""

from __future__ import annotations

import os
import threading

__all__ = [
    "__version__",
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

_LIBRARY = "libonnxruntime_mlx_ep.so"
_lock = threading.Lock()
_registered_as: str | None = None
_owned = False  # whether this module made the registration


def get_library_path() -> str:
    """The absolute path of the plugin EP library, for
    ``onnxruntime.register_execution_provider_library`` (or the C API's
    ``RegisterExecutionProviderLibrary``)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIBRARY)


def get_ep_name() -> str:
    """The name of the execution provider the library provides: ``MLXExecutionProvider``."""
    return EP_NAME


def get_ep_names() -> list[str]:
    """Every execution provider name the library provides (just one)."""
    return [EP_NAME]


def _mlx_devices(ort) -> list:
    return [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]


def register_execution_provider_library(registration_name: str = DEFAULT_REGISTRATION_NAME) -> str:
    """Registers the library with ONNX Runtime once per process and returns the name it is
    registered under.

    Safe to call again, from any thread: when this process already registered it (here or
    directly through ``onnxruntime``, under any name), nothing happens. Raises what
    ``onnxruntime`` raises when loading the library fails."""
    global _registered_as, _owned
    import onnxruntime as ort

    with _lock:
        if _registered_as is not None:
            return _registered_as
        if _mlx_devices(ort):
            # Registered before, not through this function: keep that registration.
            _registered_as, _owned = registration_name, False
            return _registered_as
        ort.register_execution_provider_library(registration_name, get_library_path())
        _registered_as, _owned = registration_name, True
        return _registered_as


def unregister_execution_provider_library() -> None:
    """Unregisters what :func:`register_execution_provider_library` registered (a
    registration made directly through ``onnxruntime`` is left alone). Only call it after
    every session that uses the EP is released."""
    global _registered_as, _owned
    import onnxruntime as ort

    with _lock:
        if _registered_as is not None and _owned:
            ort.unregister_execution_provider_library(_registered_as)
        _registered_as, _owned = None, False


def get_ep_devices() -> list:
    """The ``OrtEpDevice``\\ s of the MLX EP (registering the library first when needed), for
    ``SessionOptions.add_provider_for_devices``."""
    import onnxruntime as ort

    register_execution_provider_library()
    return _mlx_devices(ort)
