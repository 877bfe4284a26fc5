"""NonMaxSuppression on the MLX EP (a host step, as ORT's CPU kernel) against the CPU EP:
selected indices must match exactly, in order. Boxes lie on a coarse grid and scores take
few values, so overlaps, IoUs equal to the threshold and tied scores are common."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from conftest import check_against_cpu
from models import graph_model, node_model


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def grid_boxes(batches: int, n: int, center: bool, seed: int) -> np.ndarray:
    """Boxes on an integer grid: `[y1, x1, y2, x2]` with corners in either order, or
    `[x_center, y_center, width, height]` (some of zero size)."""
    g = rng(seed)
    if center:
        xy = g.integers(0, 8, size=(batches, n, 2)) / 2.0
        wh = g.integers(0, 5, size=(batches, n, 2)).astype(np.float64)
        return np.concatenate([xy, wh], axis=-1).astype(np.float32)
    a = g.integers(0, 6, size=(batches, n, 2))
    b = a + g.integers(0, 4, size=(batches, n, 2))
    flip = g.random((batches, n, 2)) < 0.3
    p, q = np.where(flip, b, a), np.where(flip, a, b)
    return np.stack([p[..., 0], p[..., 1], q[..., 0], q[..., 1]], axis=-1).astype(np.float32)


def tied_scores(batches: int, classes: int, n: int, seed: int) -> np.ndarray:
    return (rng(seed).integers(0, 5, size=(batches, classes, n)) / 4.0).astype(np.float32)


def nms_model(feeds, consts, inputs, center: int, opset: int = 11):
    """A NonMaxSuppression model. ONNX's shape inference gives NonMaxSuppression-10 no output
    shape (which the model checker requires), so an opset-10 model is built at opset 11, whose
    signature is the same, and its opset import lowered afterwards."""
    model = node_model(
        "NonMaxSuppression",
        feeds,
        consts=consts,
        node_inputs=inputs,
        attrs={"center_point_box": center},
        opset=11,
    )
    model.opset_import[0].version = opset
    return model


@pytest.mark.parametrize("opset", [10, 11])
@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize(
    "max_out,iou,score",
    [(100, 0.5, None), (3, 0.25, 0.25), (2, 0.0, 0.5), (100, 1.0, 0.0), (1, 0.5, -1.0)],
    ids=["loose", "iou025", "iou0", "iou1", "one"],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_grid_boxes(opset, center, max_out, iou, score, seed):
    boxes = grid_boxes(2, 24, bool(center), seed)
    scores = tied_scores(2, 3, 24, seed + 100)
    consts = {
        "M": np.array([max_out], np.int64),
        "I": np.array([iou], np.float32),
    }
    inputs = ["B", "S", "M", "I"]
    if score is not None:
        consts["T"] = np.array([score], np.float32)
        inputs.append("T")
    model = nms_model({"B": boxes, "S": scores}, consts, inputs, center, opset)
    check_against_cpu(model, {"B": boxes, "S": scores})


def test_thresholds_as_graph_inputs_and_scalars():
    boxes = grid_boxes(1, 40, False, 7)
    scores = tied_scores(1, 2, 40, 8)
    feeds = {
        "B": boxes,
        "S": scores,
        "M": np.array(5, np.int64),
        "I": np.array(0.5, np.float32),
        "T": np.array(0.25, np.float32),
    }
    model = nms_model(feeds, {}, list(feeds), 0)
    check_against_cpu(model, feeds)


@pytest.mark.parametrize(
    "inputs,consts",
    [
        (["B", "S"], {}),
        (["B", "S", "M"], {"M": np.array([4], np.int64)}),
        (["B", "S", "M", "", "T"], {"M": np.array([4], np.int64), "T": np.array([0.3], np.float32)}),
        (["B", "S", "", "I", "T"], {"I": np.array([0.5], np.float32), "T": np.array([0.3], np.float32)}),
        (["B", "S", "M"], {"M": np.array([0], np.int64)}),
        (["B", "S", "M"], {"M": np.array([-2], np.int64)}),
    ],
    ids=["no_optional", "max_only", "no_iou", "no_max", "max0", "max_negative"],
)
def test_optional_inputs(inputs, consts):
    boxes = grid_boxes(2, 16, False, 3)
    scores = tied_scores(2, 2, 16, 4)
    model = nms_model({"B": boxes, "S": scores}, consts, inputs, 0)
    out = check_against_cpu(model, {"B": boxes, "S": scores})
    if "M" not in inputs or consts["M"][0] <= 0:
        assert out[0].shape == (0, 3)


def test_identical_boxes_nan_scores_and_no_boxes():
    boxes = np.tile(np.array([0, 0, 1, 1], np.float32), (1, 10, 1))
    scores = np.full((1, 1, 10), 0.9, np.float32)
    scores[0, 0, [2, 5]] = np.nan
    consts = {"M": np.array([10], np.int64), "I": np.array([0.5], np.float32)}
    model = nms_model({"B": boxes, "S": scores}, consts, ["B", "S", "M", "I"], 0)
    check_against_cpu(model, {"B": boxes, "S": scores})
    # Disjoint boxes: every box is selected, NaN scores wherever ORT's heap puts them.
    apart = np.array([[[10 * k, 0, 10 * k + 1, 1] for k in range(12)]], np.float32)
    nan_scores = tied_scores(1, 2, 12, 5)
    nan_scores[0, :, ::3] = np.nan
    model = nms_model({"B": apart, "S": nan_scores}, consts, ["B", "S", "M", "I"], 0)
    check_against_cpu(model, {"B": apart, "S": nan_scores})
    empty_b, empty_s = np.zeros((1, 0, 4), np.float32), np.zeros((1, 3, 0), np.float32)
    model = nms_model({"B": empty_b, "S": empty_s}, consts, ["B", "S", "M", "I"], 0)
    out = check_against_cpu(model, {"B": empty_b, "S": empty_s})
    assert out[0].shape == (0, 3)


@pytest.mark.parametrize("center", [0, 1])
def test_nms_after_mlx_ops_in_one_fused_node(center):
    """Sigmoid scores and scaled boxes feed NMS; every node runs on MLX."""
    boxes = grid_boxes(2, 20, bool(center), 11)
    logits = (rng(12).integers(-4, 5, size=(2, 3, 20)) / 2.0).astype(np.float32)
    nodes = [
        helper.make_node("Sigmoid", ["L"], ["S"]),
        helper.make_node("Mul", ["B", "K"], ["B2"]),
        helper.make_node("NonMaxSuppression", ["B2", "S", "M", "I", "T"], ["Y"], center_point_box=center),
    ]
    consts = {
        "K": np.array(0.5, np.float32),
        "M": np.array([4], np.int64),
        "I": np.array([0.4], np.float32),
        "T": np.array([0.3], np.float32),
    }
    model = graph_model(nodes, {"B": boxes, "L": logits}, ["Y"], consts=consts)
    check_against_cpu(model, {"B": boxes, "L": logits}, all_on_mlx=True)


# ---------------------------------------------------------------------------------------------
# MaxRoiPool (opset 1): one host kernel in the detection family.


def max_roi_pool_reference(x: np.ndarray, rois: np.ndarray, pooled: tuple[int, int], scale: float) -> np.ndarray:
    """ORT's CPU kernel in numpy: roi corners rounded (half away from zero) after scaling in
    float32, malformed rois forced to 1x1, empty bins 0, and each other bin's maximum."""
    _, c, h, w = x.shape
    ph_n, pw_n = pooled
    out = np.zeros((rois.shape[0], c, ph_n, pw_n), np.float32)
    s = np.float32(scale)

    def rnd(v):
        v = np.float32(v) * s
        return int(np.sign(v) * np.floor(np.abs(v) + np.float32(0.5)))

    for r, roi in enumerate(rois):
        b = int(roi[0])
        sw, sh, ew, eh = (rnd(v) for v in roi[1:])
        rh, rw = max(eh - sh + 1, 1), max(ew - sw + 1, 1)
        bh, bw = np.float32(rh) / np.float32(ph_n), np.float32(rw) / np.float32(pw_n)
        for ph in range(ph_n):
            for pw in range(pw_n):
                hs = min(max(int(np.floor(np.float32(ph) * bh)) + sh, 0), h)
                he = min(max(int(np.ceil(np.float32(ph + 1) * bh)) + sh, 0), h)
                ws = min(max(int(np.floor(np.float32(pw) * bw)) + sw, 0), w)
                we = min(max(int(np.ceil(np.float32(pw + 1) * bw)) + sw, 0), w)
                if he <= hs or we <= ws:
                    continue
                region = x[b, :, hs:he, ws:we].reshape(c, -1)
                out[r, :, ph, pw] = region.max(axis=1)
    return out


def random_rois(n: int, batches: int, extent: float, seed: int) -> np.ndarray:
    """Rois ``[batch, x1, y1, x2, y2]``: on a half-integer grid (ties in the rounding), some
    reversed (malformed) or outside the image."""
    g = rng(seed)
    b = g.integers(0, batches, size=(n, 1))
    corners = g.integers(-4, int(2 * extent) + 4, size=(n, 4)) / 2.0
    return np.concatenate([b, corners], axis=1).astype(np.float32)


@pytest.mark.parametrize(
    "pooled,scale",
    [((2, 2), 1.0), ((3, 2), 0.5), ((1, 1), 0.25), ((4, 5), 2.0)],
    ids=["2x2", "3x2-half", "1x1-quarter", "4x5-double"],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_max_roi_pool_matches_numpy_and_cpu(pooled, scale, seed):
    g = rng(seed)
    # Mostly negative values, zeros and ties.
    x = (g.integers(-8, 3, size=(2, 3, 7, 9)) / 2.0).astype(np.float32)
    rois = random_rois(6, 2, 9 / scale, seed + 10)
    model = node_model("MaxRoiPool", {"X": x, "R": rois}, attrs={"pooled_shape": list(pooled), "spatial_scale": scale}, opset=1)
    out = check_against_cpu(model, {"X": x, "R": rois}, rtol=0, atol=0)
    np.testing.assert_array_equal(out[0], max_roi_pool_reference(x, rois, pooled, scale))


def test_max_roi_pool_default_scale_after_mlx_ops():
    """spatial_scale defaults to 1; the feature map comes from an MLX op in the same fused node."""
    x = rng(3).standard_normal((1, 4, 6, 6)).astype(np.float32)
    rois = np.array([[0, 0, 0, 5, 5], [0, 1, 2, 3, 3], [0, 4, 4, 1, 1]], np.float32)
    nodes = [
        helper.make_node("Relu", ["X"], ["F"]),
        helper.make_node("MaxRoiPool", ["F", "R"], ["Y"], pooled_shape=[2, 3]),
    ]
    model = graph_model(nodes, {"X": x, "R": rois}, ["Y"], opset=13)
    out = check_against_cpu(model, {"X": x, "R": rois}, all_on_mlx=True, rtol=0, atol=0)
    np.testing.assert_array_equal(out[0], max_roi_pool_reference(np.maximum(x, 0), rois, (2, 3), 1.0))
