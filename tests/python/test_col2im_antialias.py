"""Col2Im (opset 18) and antialiased Resize (opset 18+) on MLX against ORT's CPU EP."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from conftest import check_against_cpu, check_node
from models import node_model

#: Exact up to float32 rounding: both sides add the same terms in the same order.
TIGHT = {"rtol": 1e-5, "atol": 1e-6}

#: ORT's CPU EP honours dilations / pads / strides only for 2-D images (other ranks go through
#: its N-D im2col with the dilated kernel and ``image - kernel + 1`` blocks, which disagrees
#: with the ONNX definition); MLX declines those, so the 1-D and 3-D cases here use the defaults.
COL2IM = [
    # (image_shape, block_shape, dilations, pads, strides)
    ([10], [3], [1], [0, 0], [1]),
    ([7], [2], [1], [0, 0], [1]),
    ([5, 6], [2, 3], [1, 2], [0, 1, 1, 0], [2, 1]),
    ([6, 6], [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
    ([7, 8], [3, 2], [2, 3], [2, 0, 1, 3], [3, 2]),
    ([4, 5, 3], [2, 2, 2], [1, 1, 1], [0, 0, 0, 0, 0, 0], [1, 1, 1]),
    ([3, 4, 5, 2], [2, 1, 3, 2], [1, 1, 1, 1], [0] * 8, [1, 1, 1, 1]),
]


@pytest.mark.parametrize("image,block,dilations,pads,strides", COL2IM)
def test_col2im(image, block, dilations, pads, strides):
    d = len(image)
    blocks = [
        (image[i] + pads[i] + pads[d + i] - (dilations[i] * (block[i] - 1) + 1)) // strides[i] + 1
        for i in range(d)
    ]
    n, c = 2, 3
    x = np.random.default_rng(0).standard_normal((n, c * int(np.prod(block)), int(np.prod(blocks)))).astype(np.float32)
    consts = {"image": np.array(image, np.int64), "block": np.array(block, np.int64)}
    attrs = {"dilations": dilations, "pads": pads, "strides": strides}
    check_node("Col2Im", {"X": x}, consts=consts, attrs=attrs, opset=18, **TIGHT)


def test_col2im_fed_shapes():
    # image_shape / block_shape as graph inputs: read on the host at run time.
    x = np.random.default_rng(1).standard_normal((2, 3 * 6, 5 * 3)).astype(np.float32)
    feeds = {"X": x, "image": np.array([5, 6], np.int64), "block": np.array([2, 3], np.int64)}
    attrs = {"pads": [0, 1, 1, 0], "strides": [1, 2]}
    model = node_model("Col2Im", feeds, attrs=attrs, opset=18)
    check_against_cpu(model, feeds, ["Col2Im"], **TIGHT)


def _resize(x, *, scales=None, sizes=None, opset=19, **attrs):
    if sizes is not None:
        consts = {"sizes": np.array(sizes, np.int64)}
        node_inputs = ["X", "", "", "sizes"]
    else:
        consts = {"scales": np.array(scales, np.float32)}
        node_inputs = ["X", "", "scales"]
    check_node("Resize", {"X": x}, consts=consts, node_inputs=node_inputs, attrs={"antialias": 1, **attrs}, opset=opset, **TIGHT)


AA_SCALES = [
    # (shape, scales)
    ((12, 10), [0.5, 0.5]),
    ((12, 10), [0.3, 0.7]),
    ((2, 3, 16, 20), [1.0, 1.0, 0.5, 0.5]),
    ((2, 3, 16, 20), [1.0, 1.0, 0.3, 0.45]),
    ((1, 2, 17, 23), [1.0, 1.0, 0.61, 0.37]),
    ((1, 2, 9, 11), [1.0, 1.0, 1.7, 2.0]),  # upscaling
    ((1, 2, 9, 11), [1.0, 1.0, 0.5, 2.5]),  # one axis down, one up
]


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("shape,scales", AA_SCALES)
def test_resize_antialias_scales(mode, shape, scales):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    _resize(x, scales=scales, mode=mode)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize(
    "ct", ["half_pixel", "align_corners", "pytorch_half_pixel", "asymmetric", "half_pixel_symmetric"]
)
def test_resize_antialias_coordinate_modes(mode, ct):
    x = np.random.default_rng(2).standard_normal((1, 2, 15, 13)).astype(np.float32)
    _resize(x, scales=[1.0, 1.0, 0.4, 0.6], mode=mode, coordinate_transformation_mode=ct)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_sizes(mode):
    x = np.random.default_rng(3).standard_normal((1, 3, 20, 14)).astype(np.float32)
    _resize(x, sizes=[1, 3, 7, 5], mode=mode)
    _resize(x, sizes=[1, 3, 30, 9], mode=mode)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_axes_and_aspect_policy(mode):
    x = np.random.default_rng(4).standard_normal((1, 2, 20, 14)).astype(np.float32)
    _resize(x, sizes=[6, 6], axes=[2, 3], keep_aspect_ratio_policy="not_larger", mode=mode)
    _resize(x, sizes=[6, 6], axes=[2, 3], keep_aspect_ratio_policy="not_smaller", mode=mode)
    _resize(x, scales=[0.35, 0.5], axes=[2, 3], mode=mode)
    # ORT's CPU EP before 1.31 crashes creating a session for a Resize with negative axes.
    if tuple(int(v) for v in ort.__version__.split(".")[:2]) >= (1, 31):
        _resize(x, scales=[0.35, 0.5], axes=[-2, -1], mode=mode)


def test_resize_antialias_cubic_options():
    x = np.random.default_rng(5).standard_normal((1, 1, 19, 21)).astype(np.float32)
    _resize(x, scales=[1.0, 1.0, 0.45, 0.3], mode="cubic", cubic_coeff_a=-0.5)
    _resize(x, scales=[1.0, 1.0, 0.45, 0.3], mode="cubic", exclude_outside=1)
    _resize(x, scales=[1.0, 1.0, 1.5, 0.3], mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_nhwc(mode):
    x = np.random.default_rng(6).standard_normal((1, 16, 12, 3)).astype(np.float32)
    _resize(x, scales=[1.0, 0.5, 0.3, 1.0], mode=mode)


def test_resize_antialias_linear_3d_and_5d():
    rng = np.random.default_rng(7)
    _resize(rng.standard_normal((8, 10, 12)).astype(np.float32), scales=[0.5, 0.4, 0.75], mode="linear")
    _resize(rng.standard_normal((1, 2, 8, 10, 12)).astype(np.float32), scales=[1.0, 1.0, 0.5, 0.4, 0.75], mode="linear")
