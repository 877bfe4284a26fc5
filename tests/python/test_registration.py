"""The EP's devices carry the name the library was registered under (device metadata
``registration_name``), so a caller that finds the devices (the Python package's
``register_execution_provider_library``) can always hand ONNX Runtime a name that unregisters
the library, whoever registered it."""

from __future__ import annotations

from conftest import REGISTRATION_NAME


def test_devices_report_their_registration_name(mlx_ep):
    assert mlx_ep, "the EP offers no device"
    for device in mlx_ep:
        metadata = dict(device.ep_metadata)
        assert metadata.get("registration_name") == REGISTRATION_NAME, metadata
        assert metadata.get("mlx_device") in ("cpu", "gpu"), metadata
