"""More ops, one tiny graph per op and variant, run on the MLX EP and on ORT's CPU EP: outputs
compared (float32 within rtol = atol = 1e-4 unless a case says otherwise, integers and booleans
exactly, same dtype and shape) and the op's node asserted to have run on MLX. Forms the EP
declines are asserted to stay on the CPU EP.

Covers ConvTranspose, Resize linear / cubic (and Resize-10 / Upsample), TopK, Einsum,
ScatterND / ScatterElements / Scatter, GatherND, DepthToSpace / SpaceToDepth, Hardmax,
LpNormalization, MeanVarianceNormalization, LpPool / GlobalLpPool, MaxUnpool, OneHot,
Compress, NonZero, ReverseSequence, Trilu with a run-time k, EyeLike, Shrink, float Mod, and
RNN / GRU / LSTM.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import assert_on_cpu, assert_on_mlx, assert_outputs_match, check_against_cpu, check_node, make_session, run
from models import graph_model, node_model


ORT_VERSION = tuple(int(v) for v in ort.__version__.split(".")[:2])


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def randn(*shape, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return np.asarray(rng(seed).standard_normal(shape) * scale, dtype=np.float32)


def randint(*shape, low: int = -20, high: int = 20, seed: int = 0) -> np.ndarray:
    return np.asarray(rng(seed).integers(low, high + 1, size=shape, dtype=np.int64))


def ids(params) -> list[str]:
    return [p[0] for p in params]


def typed_model(nodes, feeds, outputs, consts=None, opset=17):
    """A model whose output types are declared here (for outputs ONNX shape inference cannot
    type): ``outputs`` maps names to (element type, shape with symbolic dims allowed)."""
    graph = helper.make_graph(
        list(nodes),
        "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info(n, t, shape) for n, (t, shape) in outputs.items()],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in (consts or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def stays_on_cpu(model, feeds, op_type):
    """The EP declines the node: it runs on the CPU EP (and the session still works)."""
    session = make_session(model, mlx=True)
    run(session, feeds)
    assert_on_cpu(session, [op_type])


# ---------------------------------------------------------------------------
# ConvTranspose

CONV_TRANSPOSE = [
    # name, x shape, w shape, attrs, bias
    ("2d-basic", (1, 2, 4, 4), (2, 3, 3, 3), {}, True),
    ("2d-stride2-output-padding", (2, 3, 5, 4), (3, 2, 3, 3), dict(strides=[2, 2], output_padding=[1, 0]), True),
    ("2d-pads", (1, 2, 5, 5), (2, 2, 3, 3), dict(strides=[2, 2], pads=[1, 0, 2, 1]), False),
    ("2d-pads-beyond-kernel", (1, 1, 8, 8), (1, 2, 2, 2), dict(pads=[3, 2, 1, 3]), True),
    ("2d-same-upper", (1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER"), False),
    ("2d-same-lower", (1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER"), False),
    ("2d-output-shape-odd", (1, 1, 3, 3), (1, 1, 3, 3), dict(strides=[2, 2], output_shape=[4, 6]), False),
    ("2d-output-shape-same-upper", (1, 1, 3, 3), (1, 1, 3, 3), dict(strides=[2, 2], output_shape=[4, 4], auto_pad="SAME_UPPER"), False),
    ("2d-output-shape-larger", (1, 1, 3, 3), (1, 1, 3, 3), dict(strides=[2, 2], output_shape=[8, 8]), True),
    ("2d-output-shape-mixed", (1, 1, 3, 3), (1, 2, 3, 3), dict(strides=[3, 2], output_shape=[10, 6]), False),
    ("2d-dilations", (1, 2, 4, 4), (2, 2, 3, 2), dict(dilations=[2, 3], strides=[1, 2]), True),
    ("2d-group2", (2, 4, 4, 3), (4, 3, 3, 3), dict(group=2, strides=[2, 1]), True),
    ("2d-depthwise", (1, 3, 5, 5), (3, 1, 3, 3), dict(group=3, strides=[2, 2], pads=[1, 1, 1, 1]), True),
    ("2d-kernel-shape-attr", (1, 2, 3, 4), (2, 2, 2, 3), dict(kernel_shape=[2, 3]), False),
    ("1d", (2, 3, 7), (3, 4, 3), dict(strides=[3], pads=[1, 2]), True),
    ("3d", (1, 2, 3, 4, 3), (2, 2, 2, 3, 2), dict(strides=[2, 1, 2]), True),
]


@pytest.mark.parametrize("case", CONV_TRANSPOSE, ids=ids(CONV_TRANSPOSE))
def test_conv_transpose(case):
    _, xs, ws, attrs, bias = case
    x, w = randn(*xs, seed=1), randn(*ws, seed=2)
    consts = {"W": w}
    if bias:
        consts["B"] = randn(ws[1] * attrs.get("group", 1), seed=3)
    check_node("ConvTranspose", {"X": x}, consts=consts, attrs=attrs)


def test_conv_transpose_weight_input_and_symbolic_dims():
    """The weight as a graph input (regrouped by steps) and an input of symbolic dims."""
    x, w = randn(2, 4, 5, 6, seed=1), randn(4, 3, 3, 3, seed=2)
    model = node_model("ConvTranspose", {"X": x, "W": w}, attrs=dict(group=2, strides=[2, 2], pads=[1, 0, 0, 1]), symbolic=["X"])
    check_against_cpu(model, {"X": x, "W": w}, ["ConvTranspose"])
    x2 = randn(1, 4, 3, 7, seed=4)
    session = make_session(model, mlx=True)
    expected = run(make_session(model, mlx=False), {"X": x2, "W": w})
    np.testing.assert_allclose(run(session, {"X": x2, "W": w})[0], expected[0], rtol=1e-4, atol=1e-4)


def test_conv_transpose_output_shape_crop_of_symbolic_dims():
    """output_shape far below the full output over an input of symbolic dims: the crop's
    start depends on the run-time size (a host kernel gives the slice bounds)."""
    x, w = randn(1, 1, 8, 8, seed=1), randn(1, 2, 2, 2, seed=2)
    attrs = dict(output_shape=[3, 4])
    model = node_model("ConvTranspose", {"X": x}, consts={"W": w}, attrs=attrs, symbolic=["X"])
    check_against_cpu(model, {"X": x}, ["ConvTranspose"])
    x2 = randn(1, 1, 6, 9, seed=4)
    session = make_session(model, mlx=True)
    expected = run(make_session(model, mlx=False), {"X": x2})
    np.testing.assert_allclose(run(session, {"X": x2})[0], expected[0], rtol=1e-4, atol=1e-4)


def test_conv_transpose_declines_a_weight_of_unknown_shape():
    x, w = randn(1, 2, 4, 4, seed=1), randn(2, 2, 3, 3, seed=2)
    node = helper.make_node("ConvTranspose", ["X", "W"], ["Y"], name="convtranspose_0")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, x.shape), helper.make_tensor_value_info("W", TensorProto.FLOAT, ["c", "m", "kh", "kw"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", "o", "h", "w"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    stays_on_cpu(model, {"X": x, "W": w}, "ConvTranspose")


# ---------------------------------------------------------------------------
# Resize linear / cubic

RESIZE_INTERP = [
    # name, shape, mode, attrs, scales, sizes
    ("linear-half-pixel-up", (1, 2, 4, 5), "linear", {}, [1, 1, 2, 1.5], None),
    ("linear-half-pixel-down", (1, 1, 8, 7), "linear", {}, [1, 1, 0.5, 0.6], None),
    ("linear-align-corners", (2, 1, 4, 4), "linear", dict(coordinate_transformation_mode="align_corners"), [1, 1, 1.5, 2], None),
    ("linear-asymmetric", (1, 2, 3, 5), "linear", dict(coordinate_transformation_mode="asymmetric"), [1, 1, 3, 0.8], None),
    ("linear-pytorch-half-pixel-to-1", (1, 1, 4, 6), "linear", dict(coordinate_transformation_mode="pytorch_half_pixel"), None, [1, 1, 1, 3]),
    ("linear-half-pixel-symmetric", (1, 1, 5, 4), "linear", dict(coordinate_transformation_mode="half_pixel_symmetric"), [1, 1, 1.7, 2.3], None),
    ("linear-sizes", (1, 3, 6, 6), "linear", {}, None, [1, 3, 4, 9]),
    ("linear-nhwc", (1, 4, 5, 3), "linear", {}, [1, 2, 0.75, 1], None),
    ("linear-2d", (5, 6), "linear", {}, [1.5, 0.5], None),
    ("linear-3d-trilinear", (3, 4, 5), "linear", {}, [2, 1, 0.5], None),
    ("linear-5d", (1, 2, 3, 4, 4), "linear", dict(coordinate_transformation_mode="align_corners"), [1, 1, 2, 1.5, 0.5], None),
    ("linear-scale-1-on-h", (1, 1, 4, 4), "linear", {}, [1, 1, 1, 2], None),
    ("cubic-half-pixel", (1, 2, 6, 5), "cubic", {}, [1, 1, 2, 1.4], None),
    ("cubic-down", (1, 1, 9, 8), "cubic", {}, [1, 1, 0.5, 0.7], None),
    ("cubic-align-corners", (1, 1, 4, 4), "cubic", dict(coordinate_transformation_mode="align_corners"), [1, 1, 2, 2], None),
    ("cubic-asymmetric-a-0.5", (1, 1, 5, 5), "cubic", dict(coordinate_transformation_mode="asymmetric", cubic_coeff_a=-0.5), [1, 1, 1.6, 2], None),
    ("cubic-exclude-outside", (1, 2, 5, 6), "cubic", dict(exclude_outside=1), [1, 1, 1.5, 0.6], None),
    ("cubic-2d-sizes", (6, 7), "cubic", dict(coordinate_transformation_mode="pytorch_half_pixel"), None, [11, 3]),
]


@pytest.mark.parametrize("case", RESIZE_INTERP, ids=ids(RESIZE_INTERP))
def test_resize_interp(case):
    _, shape, mode, attrs, scales, sizes = case
    x = randn(*shape, seed=1, scale=3.0)
    consts = {}
    if sizes is not None:
        consts["sizes"] = np.array(sizes, np.int64)
        inputs = ["X", "", "", "sizes"]
    else:
        consts["scales"] = np.array(scales, np.float32)
        inputs = ["X", "", "scales"]
    check_node("Resize", {"X": x}, consts=consts, node_inputs=inputs, attrs=dict(mode=mode, **attrs), opset=19)


def test_resize_linear_axes_and_runtime_scales():
    """Opset-18 axes, and scales fed as a graph input (read on the host at run time)."""
    x = randn(1, 2, 5, 4, seed=2)
    check_node("Resize", {"X": x}, consts={"scales": np.array([0.6, 2.5], np.float32)}, node_inputs=["X", "", "scales"], attrs=dict(mode="linear", axes=[3, 2]), opset=19)
    scales = np.array([1, 1, 1.25, 3], np.float32)
    model = node_model("Resize", {"X": x, "scales": scales}, node_inputs=["X", "", "scales"], attrs=dict(mode="cubic"), opset=19)
    check_against_cpu(model, {"X": x, "scales": scales}, ["Resize"])


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_tf_crop_and_resize(mode):
    x = randn(1, 1, 6, 6, seed=3)
    roi = np.array([0, 0, 0.1, 0.3, 1, 1, 0.9, 1.2], np.float32)
    attrs = dict(mode=mode, coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-7.5)
    check_node("Resize", {"X": x}, consts={"roi": roi, "sizes": np.array([1, 1, 4, 5], np.int64)}, node_inputs=["X", "roi", "", "sizes"], attrs=attrs, opset=19)


def test_resize_inf_and_nan_propagate_as_in_ort():
    x = randn(1, 1, 4, 4, seed=4)
    x[0, 0, 1, 2] = np.inf
    x[0, 0, 3, 0] = np.nan
    for mode in ("linear", "cubic"):
        check_node("Resize", {"X": x}, consts={"scales": np.array([1, 1, 1.5, 2], np.float32)}, node_inputs=["X", "", "scales"], attrs=dict(mode=mode), opset=19)


def test_resize_output_size_is_a_float32_product():
    """ORT truncates float32 `scale * dim` (0.7 * 10 -> 7); nearest and linear agree."""
    x = randn(1, 1, 3, 10, seed=5)
    for mode in ("nearest", "linear"):
        model = node_model("Resize", {"X": x}, consts={"scales": np.array([1, 1, 1, 0.7], np.float32)}, node_inputs=["X", "", "scales"], attrs=dict(mode=mode), opset=19)
        (out,) = check_against_cpu(model, {"X": x}, ["Resize"])
        assert out.shape == (1, 1, 3, 7)


def test_resize_equal_sizes_copy():
    """Output dims equal to the input's: ORT copies whatever the scales say."""
    x = randn(1, 1, 2, 3, seed=6)
    for mode in ("nearest", "linear"):
        model = node_model("Resize", {"X": x}, consts={"scales": np.array([1, 1, 1.4, 1.2], np.float32)}, node_inputs=["X", "", "scales"], attrs=dict(mode=mode, coordinate_transformation_mode="asymmetric"), opset=19)
        (out,) = check_against_cpu(model, {"X": x}, ["Resize"])
        np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_crop_stays_on_cpu(mode):
    # antialias=1 is claimed (tests/python/test_col2im_antialias.py) except with tf_crop_and_resize.
    x = randn(1, 2, 4, 4, seed=7)
    consts = {"roi": np.array([0, 0, 0.1, 0.2, 1, 1, 0.9, 0.8], np.float32), "scales": np.array([1, 1, 0.5, 0.5], np.float32)}
    model = node_model("Resize", {"X": x}, consts=consts, node_inputs=["X", "roi", "scales"], attrs=dict(mode=mode, antialias=1, coordinate_transformation_mode="tf_crop_and_resize"), opset=19)
    stays_on_cpu(model, {"X": x}, "Resize")


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_resize_keep_aspect_ratio_policy(mode, policy):
    """One scale for the listed axes (the min / max of size / dim), sizes rounded as ORT does."""
    x = randn(1, 2, 5, 7, seed=7)
    check_node("Resize", {"X": x}, consts={"sizes": np.array([8, 9], np.int64)}, node_inputs=["X", "", "", "sizes"], attrs=dict(mode=mode, axes=[2, 3], keep_aspect_ratio_policy=policy), opset=19)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_and_resize_10(mode):
    x = randn(1, 2, 3, 4, seed=8)
    scales = np.array([1, 1, 2, 1.5], np.float32)
    check_node("Upsample", {"X": x}, consts={"scales": scales}, attrs=dict(mode=mode), opset=9)
    check_node("Upsample", {"X": x}, attrs=dict(mode=mode, scales=[1.0, 1.0, 3.0, 2.0]), opset=7)
    check_node("Resize", {"X": x}, consts={"scales": np.array([1, 1, 0.67, 0.5], np.float32)}, attrs=dict(mode=mode), opset=10)


def test_upsample_nearest_runtime_scales():
    x = randn(1, 1, 2, 3, seed=9)
    scales = np.array([1, 1, 2, 3], np.float32)
    model = node_model("Upsample", {"X": x, "scales": scales}, attrs=dict(mode="nearest"), opset=9)
    check_against_cpu(model, {"X": x, "scales": scales}, ["Upsample"])


# ---------------------------------------------------------------------------
# TopK

TOPK = [
    # name, data, k, attrs
    ("largest-last-axis", randn(3, 7, seed=1), 3, {}),
    ("smallest-axis0", randn(6, 4, seed=2), 2, dict(axis=0, largest=0)),
    ("negative-axis-3d", randn(2, 5, 3, seed=3), 4, dict(axis=-2)),
    ("ties-largest", np.array([[1, 3, 3, 2, 3, 1], [0, 0, 0, 0, 0, 0]], np.float32), 4, {}),
    ("ties-smallest", np.array([[1, 3, 3, 2, 3, 1, 1]], np.float32), 5, dict(largest=0)),
    ("int64", randint(4, 9, low=-3, high=3), 5, {}),
    ("int32-smallest", randint(3, 6, low=-4, high=4).astype(np.int32), 3, dict(largest=0)),
    ("int32-largest-ties", randint(2, 8, low=0, high=3).astype(np.int32), 5, {}),
    ("k-equals-dim", randn(2, 5, seed=4), 5, {}),
    ("signed-zeros", np.array([[0.0, -0.0, 1.0, -0.0, 0.0]], np.float32), 3, {}),
]


@pytest.mark.parametrize("case", TOPK, ids=ids(TOPK))
def test_topk(case):
    _, data, k, attrs = case
    model = node_model("TopK", {"X": data}, consts={"K": np.array([k], np.int64)}, attrs=attrs, n_outputs=2)
    check_against_cpu(model, {"X": data}, ["TopK"])


def test_topk_runtime_k_and_old_opsets():
    x = randn(4, 10, seed=5)
    k = np.array([6], np.int64)
    model = node_model("TopK", {"X": x, "K": k}, n_outputs=2)
    check_against_cpu(model, {"X": x, "K": k}, ["TopK"])
    check_node("TopK", {"X": x}, consts={"K": k}, n_outputs=2, opset=10)
    check_node("TopK", {"X": x}, attrs=dict(k=3, axis=0), n_outputs=2, opset=9)


def test_topk_unsorted_stays_on_cpu():
    x = randn(3, 5, seed=6)
    model = node_model("TopK", {"X": x}, consts={"K": np.array([2], np.int64)}, attrs=dict(sorted=0), n_outputs=2)
    stays_on_cpu(model, {"X": x}, "TopK")


# ---------------------------------------------------------------------------
# Einsum

EINSUM = [
    # name, equation, shapes
    ("matmul", "ij,jk->ik", [(3, 4), (4, 5)]),
    ("batch-matmul", "bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("attention-scores", "bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)]),
    ("attention-values", "bhqk,bhkd->bqhd", [(2, 3, 4, 5), (2, 3, 5, 8)]),
    ("linear", "bnd,dh->bnh", [(2, 3, 4), (4, 6)]),
    ("outer", "i,j->ij", [(3,), (4,)]),
    ("inner", "i,i", [(5,), (5,)]),
    ("multi-contraction", "abcd,cdbe->ae", [(2, 3, 4, 5), (4, 5, 3, 6)]),
    ("vector-matrix", "k,kn->n", [(4,), (4, 3)]),
    ("matrix-vector", "mk,k->m", [(3, 4), (4,)]),
    ("transpose", "ijk->kji", [(2, 3, 4)]),
    ("sum-axis", "ij->i", [(3, 4)]),
    ("sum-all", "ij->", [(3, 4)]),
    ("trace", "ii->", [(4, 4)]),
    ("diagonal", "ii->i", [(3, 3)]),
    ("batch-diagonal", "...ii->...i", [(2, 3, 3)]),
    ("implicit", "ij,jk", [(2, 3), (3, 4)]),
    ("implicit-transposed", "ba", [(3, 2)]),
    ("ellipsis-broadcast", "...ij,...jk->...ik", [(2, 1, 3, 4), (1, 5, 4, 2)]),
    ("three-operands", "ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("hadamard-sum", "ij,ij->i", [(3, 4), (3, 4)]),
    ("repeated-across", "bi,bi,b->b", [(3, 4), (3, 4), (3,)]),
    ("bilinear", "bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
]


@pytest.mark.parametrize("case", EINSUM, ids=ids(EINSUM))
def test_einsum(case):
    _, equation, shapes = case
    feeds = {f"X{i}": randn(*s, seed=i + 1) for i, s in enumerate(shapes)}
    model = node_model("Einsum", feeds, attrs=dict(equation=equation))
    check_against_cpu(model, feeds, ["Einsum"])


@pytest.mark.parametrize("equation,shapes", [("ij,jk->ik", [(3, 4), (4, 2)]), ("bi,bj->bij", [(2, 3), (2, 4)]), ("ii->", [(3, 3)])], ids=["matmul", "outer", "trace"])
def test_einsum_int64(equation, shapes):
    feeds = {f"X{i}": randint(*s, low=-9, high=9, seed=i) for i, s in enumerate(shapes)}
    model = node_model("Einsum", feeds, attrs=dict(equation=equation))
    check_against_cpu(model, feeds, ["Einsum"])


def test_einsum_symbolic_dims():
    """Multiple contracted dims merged by a reshape rule of run-time dims."""
    a, b = randn(2, 3, 4, 5, seed=1), randn(4, 5, 3, 6, seed=2)
    model = node_model("Einsum", {"A": a, "B": b}, attrs=dict(equation="abcd,cdbe->ae"), symbolic=True)
    check_against_cpu(model, {"A": a, "B": b}, ["Einsum"])


# ---------------------------------------------------------------------------
# Scatter / gather

SCATTER_ND = [
    # name, data shape, indices, updates shape, reduction, opset
    ("point-updates", (4, 5), [[0, 1], [3, 4], [-1, 0]], (3,), "none", 13),
    ("row-updates", (4, 5), [[1], [-2]], (2, 5), "none", 13),
    ("add-duplicates", (3, 4), [[0, 1], [0, 1], [2, 3]], (3,), "add", 16),
    ("mul", (2, 3, 4), [[[0, 1]], [[1, 2]]], (2, 1, 4), "mul", 16),
    ("max", (3, 4), [[0], [0], [2]], (3, 4), "max", 18),
    ("min", (3, 4), [[0], [2], [2]], (3, 4), "min", 18),
]


@pytest.mark.parametrize("case", SCATTER_ND, ids=ids(SCATTER_ND))
def test_scatter_nd(case):
    _, shape, indices, ushape, reduction, opset = case
    data, updates = randn(*shape, seed=1), randn(*ushape, seed=2)
    indices = np.array(indices, np.int64)
    attrs = {} if opset < 16 else dict(reduction=reduction)
    model = node_model("ScatterND", {"data": data, "indices": indices, "updates": updates}, attrs=attrs, opset=opset)
    check_against_cpu(model, {"data": data, "indices": indices, "updates": updates}, ["ScatterND"])


def test_scatter_nd_int64_kv_cache_update():
    """The KV-cache write of exported decoders: rows at run-time positions."""
    cache = randint(1, 6, 4, low=0, high=9)
    positions = np.array([[0, 2], [0, 5]], np.int64)
    new = randint(2, 4, low=10, high=20, seed=3)
    model = node_model("ScatterND", {"cache": cache, "positions": positions, "new": new})
    check_against_cpu(model, {"cache": cache, "positions": positions, "new": new}, ["ScatterND"])


SCATTER_ELEMENTS = [
    # name, data shape, indices, axis, reduction, opset
    ("axis0", (3, 3), [[1, 0, 2], [0, 2, 1]], 0, "none", 13),
    ("axis1-negative-indices", (2, 5), [[-1, 1], [0, -4]], 1, "none", 13),
    ("add-duplicates", (2, 4), [[1, 1, 3], [0, 0, 0]], 1, "add", 16),
    ("mul", (3, 2, 2), [[[0, 1]], [[2, 0]]], 0, "mul", 16),
    ("max", (2, 5), [[1, 1], [4, 4]], -1, "max", 18),
    ("min", (2, 5), [[1, 1], [4, 4]], 1, "min", 18),
]


@pytest.mark.parametrize("case", SCATTER_ELEMENTS, ids=ids(SCATTER_ELEMENTS))
def test_scatter_elements(case):
    _, shape, indices, axis, reduction, opset = case
    indices = np.array(indices, np.int64)
    data, updates = randn(*shape, seed=1), randn(*indices.shape, seed=2)
    attrs = dict(axis=axis) if opset < 16 else dict(axis=axis, reduction=reduction)
    model = node_model("ScatterElements", {"data": data, "indices": indices, "updates": updates}, attrs=attrs, opset=opset)
    check_against_cpu(model, {"data": data, "indices": indices, "updates": updates}, ["ScatterElements"])


def test_scatter_opset_10_int32_indices():
    data, updates = randn(3, 4, seed=1), randn(2, 2, seed=2)
    indices = np.array([[3, 0], [1, 2]], np.int32)
    model = node_model("Scatter", {"data": data, "indices": indices, "updates": updates}, attrs=dict(axis=1), opset=10)
    check_against_cpu(model, {"data": data, "indices": indices, "updates": updates}, ["Scatter"])


GATHER_ND = [
    # name, data, indices, batch_dims
    ("points", randn(3, 4, seed=1), [[0, 1], [2, 3], [-1, -4]], 0),
    ("rows", randn(3, 4, 2, seed=2), [[[1]], [[2]]], 0),
    ("int32-data", randint(2, 3, 4).astype(np.int32), [[1, 2], [0, 0]], 0),
    ("batch-dims-1", randn(2, 3, 4, seed=3), [[[1, 2], [0, 0]], [[2, 3], [1, 1]]], 1),
    ("batch-dims-2", randn(2, 3, 4, 5, seed=4), np.array([1, 0, 3, 2, 3, 0], np.int64).reshape(2, 3, 1), 2),
]


@pytest.mark.parametrize("case", GATHER_ND, ids=ids(GATHER_ND))
def test_gather_nd(case):
    _, data, indices, batch_dims = case
    indices = np.array(indices, np.int64)
    model = node_model("GatherND", {"data": data, "indices": indices}, attrs=dict(batch_dims=batch_dims))
    check_against_cpu(model, {"data": data, "indices": indices}, ["GatherND"])


# ---------------------------------------------------------------------------
# Layout

@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
def test_depth_to_space(mode, symbolic):
    x = randn(2, 8, 3, 5, seed=1)
    check_node("DepthToSpace", {"X": x}, attrs=dict(blocksize=2, mode=mode), symbolic=symbolic)


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
def test_space_to_depth(symbolic):
    x = randn(2, 3, 6, 9, seed=2)
    check_node("SpaceToDepth", {"X": x}, attrs=dict(blocksize=3), symbolic=symbolic)


# ---------------------------------------------------------------------------
# Normalisations

@pytest.mark.parametrize("opset,axis", [(13, -1), (13, 0), (13, 1), (11, 1), (11, 0), (11, 2)])
def test_hardmax(opset, axis):
    x = np.round(randn(3, 4, 5, seed=3) * 2) / 2  # ties
    check_node("Hardmax", {"X": x}, attrs=dict(axis=axis), opset=opset)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_lp_normalization(p, axis):
    x = randn(3, 4, 5, seed=4)
    x[1, :, 2] = 0.0
    x[:, 2, :] = 0.0
    check_node("LpNormalization", {"X": x}, attrs=dict(p=p, axis=axis))


@pytest.mark.parametrize("axes", [[0, 2, 3], [2, 3], [1], [-1, 1]], ids=["nchw", "spatial", "channel", "negative"])
def test_mean_variance_normalization(axes):
    x = randn(2, 3, 4, 5, seed=5, scale=2.0) + 7.0
    check_node("MeanVarianceNormalization", {"X": x}, attrs=dict(axes=axes))


# ---------------------------------------------------------------------------
# Pooling

LP_POOL = [
    # name, shape, attrs, opset
    ("p2-default", (1, 2, 5, 5), dict(kernel_shape=[2, 2]), 11),
    ("p1-strides-pads", (2, 3, 6, 5), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], p=1), 11),
    ("p3-same-upper", (1, 1, 5, 6), dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2], p=3), 11),
    ("1d", (2, 2, 7), dict(kernel_shape=[3], strides=[2]), 11),
    ("3d", (1, 2, 4, 4, 4), dict(kernel_shape=[2, 2, 2]), 11),
    ("dilations-ceil", (1, 2, 7, 7), dict(kernel_shape=[2, 2], dilations=[2, 2], strides=[2, 2], ceil_mode=1), 18),
]


@pytest.mark.parametrize("case", LP_POOL, ids=ids(LP_POOL))
def test_lp_pool(case):
    _, shape, attrs, opset = case
    x = randn(*shape, seed=6)
    check_node("LpPool", {"X": x}, attrs=attrs, opset=opset)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(p):
    x = randn(2, 3, 4, 5, seed=7)
    check_node("GlobalLpPool", {"X": x}, attrs=dict(p=p))


@pytest.mark.parametrize("with_shape", [False, True], ids=["default-shape", "output-shape"])
def test_max_unpool_of_max_pool_indices(with_shape):
    """MaxUnpool of a MaxPool's values and (whole-tensor flat) indices, computed by ORT."""
    x = randn(2, 3, 4, 6, seed=8)
    pool = typed_model(
        [helper.make_node("MaxPool", ["X"], ["P", "I"], kernel_shape=[2, 2], strides=[2, 2], name="pool")],
        {"X": x},
        {"P": (TensorProto.FLOAT, [2, 3, 2, 3]), "I": (TensorProto.INT64, [2, 3, 2, 3])},
    )
    p, i = run(make_session(pool, mlx=False), {"X": x})
    feeds = {"P": p, "I": i}
    inputs = ["P", "I"]
    consts = {}
    if with_shape:
        consts["shape"] = np.array([2, 3, 5, 7], np.int64)
        inputs.append("shape")
    node = helper.make_node("MaxUnpool", inputs, ["Y"], kernel_shape=[2, 2], strides=[2, 2], name="unpool")
    model = typed_model([node], feeds, {"Y": (TensorProto.FLOAT, ["n", "c", "h", "w"])}, consts=consts)
    check_against_cpu(model, feeds, ["MaxUnpool"])


def test_max_unpool_runtime_output_shape():
    x = randn(1, 1, 2, 2, seed=9)
    indices = np.array([[[[5, 7], [13, 15]]]], np.int64)
    shape = np.array([1, 1, 4, 5], np.int64)
    node = helper.make_node("MaxUnpool", ["X", "I", "shape"], ["Y"], kernel_shape=[2, 2], strides=[2, 2], name="unpool")
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, x.shape),
            helper.make_tensor_value_info("I", TensorProto.INT64, indices.shape),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [4]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", "c", "h", "w"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    check_against_cpu(model, {"X": x, "I": indices, "shape": shape}, ["MaxUnpool"])


# ---------------------------------------------------------------------------
# Indexing with data-dependent or generated shapes

ONE_HOT = [
    # name, indices, depth, values, axis
    ("last-axis", np.array([[1, 9], [2, -1]], np.int64), np.array(10, np.int64), np.array([0, 1], np.float32), -1),
    ("axis0-float-indices", np.array([0.0, 2.7, -3.0, 5.0], np.float32), np.array([4], np.float32), np.array([-2, 3], np.float32), 0),
    ("axis1-int32-indices", np.array([[0, 3, 1, -2]], np.int32), np.array(3, np.float32), np.array([5, 7], np.float32), 1),
    ("int64-values", np.array([[2, 0], [1, 4]], np.int64), np.array(3, np.int64), np.array([-1, 8], np.int64), -1),
]


@pytest.mark.parametrize("case", ONE_HOT, ids=ids(ONE_HOT))
def test_one_hot(case):
    _, indices, depth, values, axis = case
    model = node_model("OneHot", {"indices": indices}, consts={"depth": depth, "values": values}, attrs=dict(axis=axis))
    check_against_cpu(model, {"indices": indices}, ["OneHot"])


def test_one_hot_runtime_depth():
    indices = np.array([3, 0, 4, 1], np.int64)
    depth = np.array(5, np.int64)
    values = np.array([0.5, 2.0], np.float32)
    model = node_model("OneHot", {"indices": indices, "depth": depth, "values": values})
    check_against_cpu(model, {"indices": indices, "depth": depth, "values": values}, ["OneHot"])


COMPRESS = [
    ("axis0", randn(4, 3, seed=1), [True, False, True, True], 0),
    ("axis1-short-condition", randn(3, 5, seed=2), [False, True], 1),
    ("negative-axis", randint(2, 3, 4), [True, False, True, False], -1),
    ("flattened", randn(2, 3, seed=3), [False, True, True, False, True, True], None),
    ("none-selected", randn(2, 3, seed=4), [False, False], 0),
]


@pytest.mark.parametrize("case", COMPRESS, ids=ids(COMPRESS))
def test_compress(case):
    _, data, condition, axis = case
    condition = np.array(condition, bool)
    attrs = {} if axis is None else dict(axis=axis)
    model = node_model("Compress", {"data": data, "condition": condition}, attrs=attrs)
    check_against_cpu(model, {"data": data, "condition": condition}, ["Compress"])


@pytest.mark.parametrize(
    "x",
    [np.array([[1, 0], [0, 3]], np.int64), randn(2, 3, 4, seed=5) * (randn(2, 3, 4, seed=6) > 0), np.array([True, False, True]), np.zeros((2, 3), np.float32)],
    ids=["int64", "float-3d", "bool", "all-zero"],
)
def test_non_zero(x):
    x = np.asarray(x)
    check_node("NonZero", {"X": x})


@pytest.mark.parametrize("time_axis", [0, 1])
def test_reverse_sequence(time_axis):
    x = randn(4, 4, 3, seed=7)
    lens = np.array([4, 1, 3, 2], np.int64)
    model = node_model("ReverseSequence", {"X": x, "lens": lens}, attrs=dict(time_axis=time_axis, batch_axis=1 - time_axis))
    check_against_cpu(model, {"X": x, "lens": lens}, ["ReverseSequence"])


# ---------------------------------------------------------------------------
# Generated and elementwise

@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-2, 0, 1, 5])
def test_trilu_runtime_k(upper, k):
    x = randn(2, 3, 4, seed=8)
    kk = np.array(k, np.int64)
    model = node_model("Trilu", {"X": x, "k": kk}, attrs=dict(upper=upper))
    check_against_cpu(model, {"X": x, "k": kk}, ["Trilu"])


@pytest.mark.parametrize("k,dtype", [(0, None), (1, TensorProto.INT64), (-2, TensorProto.FLOAT), (4, TensorProto.INT32)], ids=["default", "k1-int64", "k-2-float", "k4-int32"])
def test_eye_like(k, dtype):
    x = randn(4, 5, seed=9)
    attrs = dict(k=k) if dtype is None else dict(k=k, dtype=dtype)
    check_node("EyeLike", {"X": x}, attrs=attrs)


@pytest.mark.parametrize("attrs", [{}, dict(lambd=1.5), dict(lambd=0.5, bias=0.5)], ids=["default", "hard", "soft"])
def test_shrink(attrs):
    x = randn(3, 8, seed=10, scale=2.0)
    check_node("Shrink", {"X": x}, attrs=attrs)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_float_mod_fmod(dtype):
    a = np.array([-4.3, 7.2, 5.0, 4.3, -7.2, 8.0, -0.0, 1e-20, 3.0, -3.0], dtype)
    b = np.array([2.1, -3.4, 8.0, -2.1, 3.4, 5.0, 3.0, -1.0, np.inf, 0.75], dtype)
    model = node_model("Mod", {"A": a, "B": b}, attrs=dict(fmod=1))
    check_against_cpu(model, {"A": a, "B": b}, ["Mod"], rtol=0, atol=0)


# ---------------------------------------------------------------------------
# GridSample

GRID_SAMPLE = [
    (mode, padding, align)
    for mode in ("bilinear", "nearest", "bicubic")
    for padding in ("zeros", "border", "reflection")
    for align in (0, 1)
]


@pytest.mark.parametrize("case", GRID_SAMPLE, ids=[f"{m}-{p}-align{a}" for m, p, a in GRID_SAMPLE])
def test_grid_sample(case):
    mode, padding, align = case
    x = randn(2, 3, 5, 6, seed=1)
    # Coordinates beyond [-1, 1] exercise the padding modes; exact half-pixel positions the
    # rounding of nearest.
    grid = np.asarray(rng(2).uniform(-1.7, 1.7, size=(2, 4, 7, 2)), np.float32)
    grid[0, 0, :3] = [[0.0, 0.0], [-1.0, 1.0], [1.0 / 6.0, 0.2]]
    model = node_model("GridSample", {"X": x, "grid": grid}, attrs=dict(mode=mode, padding_mode=padding, align_corners=align), opset=16)
    check_against_cpu(model, {"X": x, "grid": grid}, ["GridSample"])


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_volumetric(mode, padding):
    x = randn(1, 2, 3, 4, 5, seed=3)
    grid = np.asarray(rng(4).uniform(-1.4, 1.4, size=(1, 2, 3, 4, 3)), np.float32)
    model = node_model("GridSample", {"X": x, "grid": grid}, attrs=dict(mode=mode, padding_mode=padding), opset=20)
    check_against_cpu(model, {"X": x, "grid": grid}, ["GridSample"])


# ---------------------------------------------------------------------------
# Det, Unique, LRN, windows

@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (5, 5)])
def test_det(shape):
    x = randn(*shape, seed=5)
    check_node("Det", {"X": x}, rtol=1e-3, atol=1e-4)


UNIQUE = [
    # name, x, attrs
    ("sorted-flat", np.array([2.0, 1.0, 1.0, 3.0, 4.0, 3.0, -0.0, 0.0], np.float32), {}),
    ("unsorted-flat", np.array([[5, 1], [5, 7], [1, 1]], np.int64), dict(sorted=0)),
    ("axis0", np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4], [0, 9, 9]], np.int64), dict(axis=0)),
    ("axis1-3d", np.array([[[1, 1], [0, 1], [2, 1], [0, 1]], [[1, 1], [0, 1], [2, 1], [0, 1]]], np.float32), dict(axis=1)),
    ("negative-axis-unsorted", np.array([[3, 1, 3], [2, 0, 2]], np.int8), dict(axis=-1, sorted=0)),
]


@pytest.mark.parametrize("case", UNIQUE, ids=ids(UNIQUE))
def test_unique(case):
    _, x, attrs = case
    check_node("Unique", {"X": x}, attrs=attrs, n_outputs=4)


@pytest.mark.parametrize("size,attrs", [(3, {}), (5, dict(alpha=0.001, beta=0.6, bias=2.0)), (1, dict(beta=1.5))], ids=["size3", "size5-attrs", "size1"])
def test_lrn(size, attrs):
    x = randn(2, 7, 3, 4, seed=6, scale=3.0)
    check_node("LRN", {"X": x}, attrs=dict(size=size, **attrs))


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.INT32], ids=["float", "int32"])
@pytest.mark.parametrize("n", [1, 11, 513])
def test_window_functions(op, periodic, dtype, n):
    """A run-time size (computed on the host); bit-exact, as ORT computes in double precision."""
    if n == 1 and not periodic and dtype != TensorProto.FLOAT:
        pytest.skip("a symmetric window of one sample is NaN; its integer conversion is undefined in C++")
    size = np.array(n, np.int64)
    node = helper.make_node(op, ["size"], ["Y"], periodic=periodic, output_datatype=dtype, name="window")
    model = typed_model([node], {"size": size}, {"Y": (dtype, ["n"])})
    check_against_cpu(model, {"size": size}, [op], rtol=0, atol=0)


def test_window_constant_size_folds():
    """A constant size folds to a constant: ORT sees an EP node producing it."""
    x = randn(16, seed=7)
    nodes = [
        helper.make_node("HannWindow", ["n"], ["w"], name="window"),
        helper.make_node("Mul", ["X", "w"], ["Y"], name="mul"),
    ]
    model = graph_model(nodes, {"X": x}, ["Y"], consts={"n": np.array(16, np.int32)})
    check_against_cpu(model, {"X": x}, ["Mul"])


# ---------------------------------------------------------------------------
# MaxPool Indices, TensorScatter

MAX_POOL_INDICES = [
    # name, shape, attrs
    ("2d", (2, 3, 5, 6), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("2d-pads-column-major", (1, 2, 5, 5), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], storage_order=1)),
    ("2d-dilations-ceil", (1, 1, 7, 7), dict(kernel_shape=[2, 2], dilations=[2, 2], strides=[2, 1], ceil_mode=1)),
    ("2d-same-upper", (1, 2, 6, 5), dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER")),
    ("1d", (2, 2, 9), dict(kernel_shape=[3], strides=[2])),
    ("3d", (1, 2, 4, 4, 4), dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2])),
    ("3d-column-major", (1, 1, 3, 4, 5), dict(kernel_shape=[2, 2, 2], storage_order=1)),
]


@pytest.mark.parametrize("case", MAX_POOL_INDICES, ids=ids(MAX_POOL_INDICES))
def test_max_pool_indices(case):
    _, shape, attrs = case
    x = np.round(randn(*shape, seed=11) * 2) / 2  # ties: the first maximum wins
    check_node("MaxPool", {"X": x}, attrs=attrs, n_outputs=2, opset=12)


#: Opset 24 models (IR 12) need ONNX Runtime 1.24 or newer.
needs_opset_24 = pytest.mark.skipif(ORT_VERSION < (1, 24), reason="ONNX Runtime < 1.24 cannot load opset-24 models")


@needs_opset_24
@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis", [-2, 2])
def test_tensor_scatter(mode, axis):
    """The KV-cache write of opset 24: per-sequence write positions, circular wrap-around."""
    past = randn(2, 3, 6, 4, seed=12)
    update = randn(2, 3, 2, 4, seed=13)
    positions = np.array([1, 5 if mode == "circular" else 4], np.int64)
    model = node_model("TensorScatter", {"past": past, "update": update, "positions": positions}, attrs=dict(mode=mode, axis=axis), opset=24)
    check_against_cpu(model, {"past": past, "update": update, "positions": positions}, ["TensorScatter"])


@needs_opset_24
def test_tensor_scatter_prefill_without_positions():
    past = randn(1, 5, 3, seed=14)
    update = randn(1, 2, 3, seed=15)
    model = node_model("TensorScatter", {"past": past, "update": update}, attrs=dict(axis=1), opset=24)
    check_against_cpu(model, {"past": past, "update": update}, ["TensorScatter"])


# ---------------------------------------------------------------------------
# DFT, STFT

DFT = [
    # name, input shape, attrs, dft_length, axis (opset 20 input)
    ("real-forward", (2, 8, 3, 1), {}, None, 1),
    ("real-onesided", (2, 9, 1), dict(onesided=1), None, -2),
    ("complex-forward-padded", (1, 6, 4, 2), {}, 10, 1),
    ("complex-forward-truncated", (2, 3, 12, 2), {}, 7, 2),
    ("complex-inverse", (3, 16, 2), dict(inverse=1), None, 1),
    ("inverse-onesided-irfft", (1, 5, 4, 2), dict(inverse=1, onesided=1), None, 1),
    ("real-inverse", (2, 5, 1), dict(inverse=1), None, -2),
]


@pytest.mark.parametrize("case", DFT, ids=ids(DFT))
def test_dft(case):
    _, shape, attrs, length, axis = case
    if attrs.get("inverse") and attrs.get("onesided") and ORT_VERSION < (1, 24):
        pytest.skip("the ONNX schema of ONNX Runtime < 1.24 rejects inverse with onesided")
    x = randn(*shape, seed=16)
    consts = {"axis": np.array(axis, np.int64)}
    inputs = ["X", "", "axis"]
    if length is not None:
        consts["length"] = np.array(length, np.int64)
        inputs = ["X", "length", "axis"]
    node = helper.make_node("DFT", inputs, ["Y"], name="dft", **attrs)
    model = typed_model([node], {"X": x}, {"Y": (TensorProto.FLOAT, ["a", "b", "c"][: len(shape) - 1] + ["d"])}, consts=consts, opset=20)
    (out,) = check_against_cpu(model, {"X": x}, ["DFT"], rtol=1e-4, atol=1e-4)
    # And against numpy in double precision: MLX's FFT is the more accurate of the two.
    signal = x[..., 0] + (1j * x[..., 1] if shape[-1] == 2 else 0)
    ax = axis % len(shape)
    n = length or shape[ax]
    if attrs.get("inverse") and attrs.get("onesided"):
        ref = np.fft.irfft(signal, n=2 * (shape[ax] - 1), axis=ax)[..., None]
    elif attrs.get("inverse"):
        ref = np.fft.ifft(signal, n=n, axis=ax)
    else:
        ref = np.fft.fft(signal, n=n, axis=ax)
        if attrs.get("onesided"):
            ref = np.take(ref, np.arange(n // 2 + 1), axis=ax)
    if np.iscomplexobj(ref):
        ref = np.stack([ref.real, ref.imag], axis=-1)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=2e-5)


def test_dft_opset_17_axis_attribute():
    x = randn(2, 12, 1, seed=17)
    check_node("DFT", {"X": x}, attrs=dict(axis=1, onesided=1), opset=17, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("constant", [True, False], ids=["constant-step", "runtime-step"])
@pytest.mark.parametrize("window", [True, False], ids=["window", "no-window"])
def test_stft(constant, window):
    signal = randn(2, 64, 1, seed=18)
    feeds = {"signal": signal}
    consts = {}
    step = np.array(6, np.int64)
    (consts if constant else feeds)["step"] = step
    if window:
        (consts if constant else feeds)["window"] = np.hanning(12).astype(np.float32)
        inputs = ["signal", "step", "window"]
    else:
        (consts if constant else feeds)["length"] = np.array(12, np.int64)
        inputs = ["signal", "step", "", "length"]
    node = helper.make_node("STFT", inputs, ["Y"], name="stft")
    model = typed_model([node], feeds, {"Y": (TensorProto.FLOAT, ["b", "f", "k", "c"])}, consts=consts, opset=17)
    check_against_cpu(model, feeds, ["STFT"], rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------
# AffineGrid

@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 5, 7], [1, 1, 1, 4], [2, 1, 3, 4, 5], [1, 2, 1, 1, 2]], ids=["2d", "2d-one-row", "3d", "3d-ones"])
def test_affine_grid(align, size):
    d = len(size) - 2
    theta = randn(size[0], d, d + 1, seed=19)
    model = typed_model(
        [helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align, name="affine")],
        {"theta": theta},
        {"grid": (TensorProto.FLOAT, ["n"] + [f"s{i}" for i in range(d)] + [d])},
        consts={"size": np.array(size, np.int64)},
        opset=20,
    )
    check_against_cpu(model, {"theta": theta}, ["AffineGrid"], rtol=1e-6, atol=1e-6)


def test_spatial_transformer_runs_on_mlx():
    """AffineGrid feeding GridSample (a spatial transformer), all on MLX."""
    x = randn(2, 3, 6, 5, seed=20)
    theta = np.array([[[0.9, 0.1, 0.05], [-0.2, 1.1, 0.0]], [[1.0, 0.0, -0.3], [0.0, 0.8, 0.2]]], np.float32)
    nodes = [
        helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="affine"),
        helper.make_node("GridSample", ["X", "grid"], ["Y"], name="sample"),
    ]
    model = typed_model(nodes, {"X": x, "theta": theta}, {"Y": (TensorProto.FLOAT, [2, 3, 4, 7])}, consts={"size": np.array([2, 3, 4, 7], np.int64)}, opset=20)
    check_against_cpu(model, {"X": x, "theta": theta}, ["AffineGrid", "GridSample"], all_on_mlx=True)


# ---------------------------------------------------------------------------
# RNN / GRU / LSTM (time loop over the run-time seq_length; sequence_lens as a mask)

def recurrent_model(op, t, batch, inp, hidden, *, direction="forward", bias=True, lens=None, initial=False, peepholes=False, outputs=None, seed=30, **attrs):
    """One recurrent node over X [t, batch, inp]; returns (model, feeds)."""
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    dirs = 2 if direction == "bidirectional" else 1
    feeds = {"X": randn(t, batch, inp, seed=seed)}
    consts = {
        "W": randn(dirs, gates * hidden, inp, seed=seed + 1, scale=0.5),
        "R": randn(dirs, gates * hidden, hidden, seed=seed + 2, scale=0.5),
    }
    inputs = ["X", "W", "R", "", "", ""]
    if bias:
        consts["B"] = randn(dirs, 2 * gates * hidden, seed=seed + 3, scale=0.5)
        inputs[3] = "B"
    if lens is not None:
        feeds["sequence_lens"] = np.asarray(lens, np.int32)
        inputs[4] = "sequence_lens"
    if initial:
        feeds["initial_h"] = randn(dirs, batch, hidden, seed=seed + 4)
        inputs[5] = "initial_h"
        if op == "LSTM":
            feeds["initial_c"] = randn(dirs, batch, hidden, seed=seed + 5)
            inputs.append("initial_c")
    if peepholes:
        if len(inputs) == 6:
            inputs.append("")
        consts["P"] = randn(dirs, 3 * hidden, seed=seed + 6, scale=0.5)
        inputs.append("P")
    while inputs[-1] == "":
        inputs.pop()
    names = ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
    outputs = outputs or names
    node_outputs = [n if n in outputs else "" for n in names]
    while node_outputs[-1] == "":
        node_outputs.pop()
    shapes = {"Y": [t, dirs, batch, hidden], "Y_h": [dirs, batch, hidden], "Y_c": [dirs, batch, hidden]}
    node = helper.make_node(op, inputs, node_outputs, name=op.lower(), hidden_size=hidden, direction=direction, **attrs)
    model = typed_model([node], feeds, {n: (TensorProto.FLOAT, shapes[n]) for n in outputs}, consts=consts, opset=14)
    return model, feeds


def test_lstm_bidirectional_sequence_lens_initial_states():
    model, feeds = recurrent_model("LSTM", 6, 3, 5, 4, direction="bidirectional", lens=[6, 2, 4], initial=True, peepholes=True)
    check_against_cpu(model, feeds, ["LSTM"])


@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_lstm_input_forget_clip(direction):
    model, feeds = recurrent_model("LSTM", 5, 2, 3, 6, direction=direction, lens=[3, 5], initial=True, input_forget=1, clip=0.8)
    check_against_cpu(model, feeds, ["LSTM"])


@pytest.mark.parametrize("outputs", [["Y"], ["Y_h"], ["Y_c"], ["Y_h", "Y_c"]], ids=["y", "y_h", "y_c", "y_h-y_c"])
def test_lstm_output_subsets(outputs):
    model, feeds = recurrent_model("LSTM", 4, 2, 3, 5, outputs=outputs, bias=False)
    check_against_cpu(model, feeds, ["LSTM"])


def test_lstm_other_activations():
    model, feeds = recurrent_model(
        "LSTM", 4, 2, 3, 4, direction="bidirectional", initial=True,
        activations=["HardSigmoid", "LeakyRelu", "Softsign", "Sigmoid", "ScaledTanh", "Elu"],
        activation_alpha=[0.3, 0.05, 0.9, 1.2], activation_beta=[0.4, 1.1],
    )
    check_against_cpu(model, feeds, ["LSTM"])


@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_gru(linear_before_reset, direction):
    model, feeds = recurrent_model("GRU", 5, 3, 4, 6, direction=direction, lens=[5, 1, 3], initial=True, linear_before_reset=linear_before_reset)
    check_against_cpu(model, feeds, ["GRU"])


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_no_bias_no_initial_state(linear_before_reset):
    model, feeds = recurrent_model("GRU", 4, 2, 3, 5, bias=False, linear_before_reset=linear_before_reset, activations=["Sigmoid", "Softplus"])
    check_against_cpu(model, feeds, ["GRU"])


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_rnn_relu(direction):
    dirs = 2 if direction == "bidirectional" else 1
    model, feeds = recurrent_model("RNN", 5, 3, 4, 3, direction=direction, lens=[5, 3, 1], initial=True, activations=["Relu"] * dirs, clip=2.5)
    check_against_cpu(model, feeds, ["RNN"])


def test_rnn_defaults_tanh():
    model, feeds = recurrent_model("RNN", 3, 2, 4, 5, bias=False)
    check_against_cpu(model, feeds, ["RNN"])


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_recurrent_empty_sequence_zeroes_final_states(op):
    """ORT ends a length-0 sequence with zero states, not the initial ones."""
    model, feeds = recurrent_model(op, 4, 3, 3, 4, direction="bidirectional", lens=[4, 0, 2], initial=True)
    check_against_cpu(model, feeds, [op])


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_recurrent_float16_on_mlx(op):
    """float16 (which ORT's CPU kernels lack) runs on MLX in float32 and matches the float32
    CPU result within half precision."""
    model, feeds = recurrent_model(op, 4, 2, 3, 4, direction="bidirectional", lens=[4, 2], initial=True)
    expected = run(make_session(model, mlx=False), feeds)
    half = onnx.ModelProto()
    half.CopyFrom(model)
    for init in half.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name))
    for v in list(half.graph.input) + list(half.graph.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    feeds16 = {k: (v.astype(np.float16) if v.dtype == np.float32 else v) for k, v in feeds.items()}
    session = make_session(half, mlx=True)
    actual = run(session, feeds16)
    assert_on_mlx(session, [op])
    for a, e in zip(actual, expected):
        assert a.dtype == np.float16
        np.testing.assert_allclose(a.astype(np.float32), e, rtol=5e-3, atol=5e-3)


def dynamic_length(model):
    """Makes dim 0 of X (and of Y) the symbolic ``T``."""
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "T"
    for out in model.graph.output:
        if out.name == "Y":
            out.type.tensor_type.shape.dim[0].dim_param = "T"
    return model


def check_lengths_against_cpu(op, runs, **kwargs):
    """One model with a symbolic seq_length, run on one MLX session for each
    ``(seq_length, sequence_lens)`` of ``runs`` and compared with the CPU EP."""
    model, _ = recurrent_model(op, runs[0][0], **kwargs, lens=runs[0][1])
    model = dynamic_length(model)
    cpu = make_session(model, mlx=False)
    session = make_session(model, mlx=True)
    names = [o.name for o in session.get_outputs()]
    for t, lens in runs:
        _, feeds = recurrent_model(op, t, **kwargs, lens=lens)
        assert_outputs_match(run(session, feeds), run(cpu, feeds), names=names)
    assert_on_mlx(session, [op])


def test_lstm_dynamic_seq_length_on_mlx():
    """The time loop runs over the run-time seq_length: a symbolic one is claimed."""
    model, feeds = recurrent_model("LSTM", 3, 2, 3, 4)
    check_against_cpu(dynamic_length(model), feeds, ["LSTM"])


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_recurrent_dynamic_seq_length_two_lengths(op):
    """Bidirectional, with sequence_lens and initial states, at two lengths on one session."""
    extra = {"peepholes": True} if op == "LSTM" else {"linear_before_reset": 1} if op == "GRU" else {}
    # ORT's CPU RNN before 1.31 leaves Y_h of an empty sequence uninitialised (1.31 zeroes it,
    # as the MLX EP does): there the reference can't judge a zero length.
    old_rnn = op == "RNN" and tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 31)
    check_lengths_against_cpu(
        op, [(7, [7, 3, 1 if old_rnn else 0]), (2, [1, 2, 2])], batch=3, inp=4, hidden=5,
        direction="bidirectional", initial=True, **extra,
    )


@pytest.mark.parametrize("op", ["RNN", "GRU"])
def test_recurrent_dynamic_seq_length_without_lens(op):
    check_lengths_against_cpu(op, [(5, None), (9, None)], batch=2, inp=3, hidden=4, direction="reverse", initial=True)


def test_lstm_long_sequence_on_mlx():
    """A static seq_length over the old unroll limit (512)."""
    model, feeds = recurrent_model("LSTM", 600, 2, 3, 4, direction="bidirectional", lens=[600, 301], initial=True)
    check_against_cpu(model, feeds, ["LSTM"], rtol=1e-3, atol=1e-4)


NAN_ROWS = np.array(
    [
        [np.nan, 1.0, -np.inf, 5.0],
        [np.inf, np.nan, 0.0, 2.0],
        [-1.0, 2.0, np.nan, 2.0],
        [np.nan, np.nan, np.nan, np.nan],
        [-np.inf, np.nan, -np.inf, np.nan],
        [3.0, -2.0, 3.0, -2.0],
    ],
    np.float32,
)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims", [(1, 0), (-1, 1), (0, 0), (0, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_arg_reduce_with_nan_follows_the_cpu_ep(mlx_ep, op, axis, keepdims, dtype):
    """ORT's CPU rule on every device: a NaN never wins unless it is the row's first element
    (MLX's CUDA argmax differs); ties give the first index."""
    x = NAN_ROWS.astype(dtype)
    m = node_model(op, {"X": x}, attrs={"axis": axis, "keepdims": keepdims})
    check_against_cpu(m, {"X": x}, [op], rtol=0, atol=0)
