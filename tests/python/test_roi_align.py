"""RoiAlign on the MLX EP (sample positions on the host, the gather and reduction on the
device) against the CPU EP: both modes (max with ORT's max over weighted corners), both
coordinate modes, opset 10 and 16, fixed and adaptive sampling, rois partly or wholly outside
the image, degenerate and reversed rois, several batches."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import check_against_cpu
from models import node_model


def image(n: int, c: int, h: int, w: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, c, h, w)).astype(np.float32)


# x1, y1, x2, y2 (in input pixels before spatial_scale).
ROIS = np.array(
    [
        [0.0, 0.0, 7.0, 5.0],  # the whole image
        [1.3, 0.7, 4.9, 3.2],  # inside, fractional
        [-3.0, -2.5, 2.0, 1.5],  # partly outside, top left
        [5.5, 3.5, 11.0, 9.0],  # partly outside, bottom right
        [-9.0, -9.0, -4.0, -5.0],  # wholly outside
        [12.0, 1.0, 15.0, 4.0],  # wholly outside, right
        [2.0, 2.0, 2.0, 2.0],  # degenerate point
        [3.0, 1.0, 3.0, 4.5],  # zero width
        [4.0, 3.0, 1.0, 0.5],  # reversed corners
        [0.2, 0.1, 0.9, 0.6],  # smaller than a pixel
    ],
    dtype=np.float32,
)


def roi_model(feeds, attrs: dict, opset: int):
    return node_model("RoiAlign", feeds, attrs=attrs, opset=opset)


def feeds_for(n: int, scale: float, seed: int) -> dict[str, np.ndarray]:
    x = image(n, 3, 6, 8, seed)
    rois = (ROIS / np.float32(scale) if scale != 1.0 else ROIS).astype(np.float32)
    batch = (np.arange(len(ROIS)) % n).astype(np.int64)
    return {"X": x, "rois": rois, "batch_indices": batch}


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize(
    "opset,coords",
    [(10, None), (16, None), (16, "half_pixel"), (16, "output_half_pixel")],
    ids=["opset10", "opset16-default", "half_pixel", "output_half_pixel"],
)
@pytest.mark.parametrize("sampling_ratio", [0, 2])
@pytest.mark.parametrize("scale", [1.0, 0.5], ids=["scale1", "scale05"])
def test_roi_align(mode, opset, coords, sampling_ratio, scale):
    attrs = {
        "mode": mode,
        "output_height": 3,
        "output_width": 2,
        "sampling_ratio": sampling_ratio,
        "spatial_scale": scale,
    }
    if coords is not None:
        attrs["coordinate_transformation_mode"] = coords
    feeds = feeds_for(2, scale, seed=sampling_ratio + int(10 * scale))
    check_against_cpu(roi_model(feeds, attrs, opset), feeds)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_defaults_one_batch(mode):
    # Default 1x1 output, adaptive sampling; every roi on the single batch.
    feeds = feeds_for(1, 1.0, seed=3)
    check_against_cpu(roi_model(feeds, {"mode": mode}, 16), feeds)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_large_output_three_batches(mode):
    # Output bins smaller than a pixel, rois spread over three batches in mixed order.
    feeds = feeds_for(3, 1.0, seed=4)
    feeds["batch_indices"] = np.array([2, 0, 1, 1, 2, 0, 0, 2, 1, 0], np.int64)
    attrs = {"mode": mode, "output_height": 7, "output_width": 5, "sampling_ratio": 0}
    check_against_cpu(roi_model(feeds, attrs, 16), feeds)


def test_roi_align_one_pixel_image():
    feeds = {
        "X": image(1, 2, 1, 1, 5),
        "rois": np.array([[0, 0, 1, 1], [-0.5, -0.5, 0.5, 0.5], [0.2, 0.3, 3, 2]], np.float32),
        "batch_indices": np.zeros(3, np.int64),
    }
    for mode in ["avg", "max"]:
        attrs = {"mode": mode, "output_height": 2, "output_width": 2}
        check_against_cpu(roi_model(feeds, attrs, 16), feeds)
