"""DeformConv (opset 19) on the MLX EP against ORT's CPU EP (float32, rtol = atol = 1e-4).

ORT's CPU EP gained its DeformConv kernel after 1.23 (1.23.0 reports NOT_IMPLEMENTED), so on an
ORT without it there is no reference to compare with and the cases are skipped.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from conftest import check_against_cpu, make_session
from models import node_model


def randn(*shape, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return np.asarray(np.random.default_rng(seed).standard_normal(shape) * scale, dtype=np.float32)


def _cpu_has_deform_conv() -> bool:
    feeds = {"X": randn(1, 1, 3, 3), "W": randn(1, 1, 1, 1), "O": np.zeros((1, 2, 3, 3), np.float32)}
    try:
        make_session(node_model("DeformConv", feeds, opset=19), mlx=False)
    except ort.capi.onnxruntime_pybind11_state.NotImplemented:
        return False
    return True


pytestmark = pytest.mark.skipif(
    not _cpu_has_deform_conv(), reason="this ORT's CPU EP has no DeformConv kernel (added after 1.23)"
)


def out_hw(h, w, k, strides, pads, dilations):
    oh = (h + pads[0] + pads[2] - (dilations[0] * (k[0] - 1) + 1)) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - (dilations[1] * (k[1] - 1) + 1)) // strides[1] + 1
    return oh, ow


def deform_case(
    *,
    n=1,
    c=4,
    h=6,
    w=7,
    oc=6,
    k=(3, 3),
    group=1,
    offset_group=1,
    strides=(1, 1),
    pads=(1, 1, 1, 1),
    dilations=(1, 1),
    bias=False,
    mask=False,
    offset_scale=2.0,
    zero_offset=False,
    seed=0,
):
    oh, ow = out_hw(h, w, k, strides, pads, dilations)
    feeds = {
        "X": randn(n, c, h, w, seed=seed),
        "W": randn(oc, c // group, *k, seed=seed + 1),
        "O": (
            np.zeros((n, offset_group * 2 * k[0] * k[1], oh, ow), np.float32)
            if zero_offset
            else randn(n, offset_group * 2 * k[0] * k[1], oh, ow, seed=seed + 2, scale=offset_scale)
        ),
    }
    inputs = ["X", "W", "O"]
    if bias:
        feeds["B"] = randn(oc, seed=seed + 3)
        inputs.append("B")
    if mask:
        if not bias:
            inputs.append("")
        feeds["M"] = np.asarray(
            np.random.default_rng(seed + 4).uniform(0, 1, (n, offset_group * k[0] * k[1], oh, ow)), np.float32
        )
        inputs.append("M")
    attrs = {
        "kernel_shape": list(k),
        "group": group,
        "offset_group": offset_group,
        "strides": list(strides),
        "pads": list(pads),
        "dilations": list(dilations),
    }
    model = node_model("DeformConv", feeds, node_inputs=inputs, attrs=attrs, opset=19)
    return model, feeds, attrs


def test_zero_offsets_equal_conv():
    model, feeds, attrs = deform_case(zero_offset=True, bias=True, n=2, strides=(2, 1), dilations=(1, 2))
    (y,) = check_against_cpu(model, feeds)
    conv_attrs = {a: v for a, v in attrs.items() if a != "offset_group"}
    conv = node_model(
        "Conv", {"X": feeds["X"], "W": feeds["W"], "B": feeds["B"]}, attrs=conv_attrs, opset=19
    )
    (expected,) = make_session(conv, mlx=False).run(None, {"X": feeds["X"], "W": feeds["W"], "B": feeds["B"]})
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


CASES = [
    ("plain", {}),
    ("bias", {"bias": True}),
    ("mask", {"mask": True}),
    ("bias_mask", {"bias": True, "mask": True}),
    ("far_out_of_image", {"offset_scale": 6.0, "mask": True}),
    ("group2", {"group": 2, "bias": True}),
    ("offset_group2", {"offset_group": 2, "mask": True}),
    ("group2_offset_group2", {"group": 2, "offset_group": 2, "bias": True, "mask": True}),
    ("strides_pads_dilations", {"strides": (2, 1), "pads": (2, 0, 1, 3), "dilations": (2, 1), "bias": True}),
    ("batch2", {"n": 2, "mask": True, "bias": True, "offset_group": 2}),
    ("kernel_1x3", {"k": (1, 3), "pads": (0, 1, 0, 1), "mask": True}),
]


@pytest.mark.parametrize("kw", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_deform_conv(kw):
    model, feeds, _ = deform_case(**kw)
    check_against_cpu(model, feeds)


def test_samples_on_the_image_border():
    """Offsets that move every sample exactly onto -1, 0, H-1, H and beyond (and halfway)."""
    h, w = 4, 5
    oh, ow = h, w
    x = randn(1, 1, h, w, seed=7)
    wt = np.ones((1, 1, 1, 1), np.float32)
    for dy in [-5.0, -1.5, -1.0, -0.5, 0.0, 0.5, 2.5, 3.0, 3.5, 4.0, 7.0]:
        for dx in [-1.0, -0.25, 4.0, 4.5, 0.0]:
            off = np.zeros((1, 2, oh, ow), np.float32)
            off[:, 0] = dy
            off[:, 1] = dx
            feeds = {"X": x, "W": wt, "O": off}
            model = node_model("DeformConv", feeds, attrs={"kernel_shape": [1, 1]}, opset=19)
            check_against_cpu(model, feeds)
