"""ORT's quantized com.microsoft ops (contrib QuantizeLinear/DequantizeLinear, QLinearLeakyRelu,
QLinearSigmoid) on the MLX EP against ORT's CPU EP: integer outputs compared exactly, every
node asserted to have run on MLX; one declined case stays on the CPU EP."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T, helper, numpy_helper

import onnxruntime as ort

from conftest import assert_on_cpu, check_against_cpu, make_session, run

ORT_VERSION = tuple(int(p) for p in ort.__version__.split(".")[:2])
#: QLinearSoftmax, QLinearAdd and QLinearMul reproduce the CPU kernels of ORT 1.31 and newer;
#: on an older ORT the EP leaves them on the CPU EP (its results differ from newer releases).
FORMULAS_MATCH_HOST = ORT_VERSION >= (1, 31)

MS = "com.microsoft"
NP = {T.INT8: np.int8, T.UINT8: np.uint8, T.INT16: np.int16, T.UINT16: np.uint16, T.INT32: np.int32}


def model(node, inputs, outputs, inits):
    g = helper.make_graph([node], "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    m.ir_version = 10
    return m


def zp_tensor(name, t, values, dims):
    return helper.make_tensor(name, t, dims, [int(v) for v in values])


QTYPES = [(T.INT8, -128, 127), (T.UINT8, 0, 255), (T.INT16, -32768, 32767), (T.UINT16, 0, 65535), (T.INT4, -8, 7), (T.UINT4, 0, 15)]


@pytest.mark.parametrize("qt,lo,hi", QTYPES, ids=lambda v: str(v))
@pytest.mark.parametrize("layout", ["tensor", "axis1", "axis-1", "no_zp"])
def test_quantize_dequantize(qt, lo, hi, layout):
    if layout == "no_zp" and qt != T.UINT8:
        pytest.skip("without a zero point the output is uint8")
    shape = [2, 3, 4]
    x = (np.random.default_rng(0).standard_normal(shape) * 40).astype(np.float32)
    x.flat[:4] = [0.5, 1.5, 2.5, -2.5]  # ties round to even
    attrs, sdims = {}, []
    if layout == "axis1":
        attrs, sdims = {"axis": 1}, [3]
    elif layout == "axis-1":
        attrs, sdims = {"axis": -1}, [4]
    n = int(np.prod(sdims)) if sdims else 1
    scale = numpy_helper.from_array(np.linspace(0.5, 1.5, n).astype(np.float32).reshape(sdims), "s")
    inits = [scale]
    ins = ["x", "s"]
    if layout != "no_zp":
        zp = np.linspace(lo // 4, hi // 4, n).astype(np.int64) if n > 1 else [hi // 3]
        inits.append(zp_tensor("z", qt, zp, sdims))
        ins.append("z")
    q = helper.make_node("QuantizeLinear", ins, ["q"], domain=MS, **attrs)
    if qt in NP:
        m = model(q, [helper.make_tensor_value_info("x", T.FLOAT, shape)], [helper.make_tensor_value_info("q", qt, shape)], inits)
    else:  # int4 outputs have no numpy type: quantize then dequantize in one model
        dq = helper.make_node("DequantizeLinear", ["q", *ins[1:]], ["y"], domain=MS, **attrs)
        g = helper.make_graph([q, dq], "g", [helper.make_tensor_value_info("x", T.FLOAT, shape)], [helper.make_tensor_value_info("y", T.FLOAT, shape)], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
        m.ir_version = 10
    check_against_cpu(m, {"x": x}, rtol=0, atol=0, all_on_mlx=True)
    d = helper.make_node("DequantizeLinear", ["qx", *ins[1:]], ["y"], domain=MS, **attrs)
    m = model(d, [helper.make_tensor_value_info("qx", qt, shape)], [helper.make_tensor_value_info("y", T.FLOAT, shape)], inits)
    if qt in NP:
        qx = np.random.default_rng(1).integers(lo, hi + 1, shape).astype(NP[qt])
        check_against_cpu(m, {"qx": qx}, rtol=0, atol=0, all_on_mlx=True)


@pytest.mark.parametrize("zp", [None, 0])
def test_dequantize_int32(zp):
    shape = [2, 5]
    d = helper.make_node("DequantizeLinear", ["qx", "s"] + ([] if zp is None else ["z"]), ["y"], domain=MS)
    inits = [numpy_helper.from_array(np.float32(0.25), "s")]
    if zp is not None:
        inits.append(numpy_helper.from_array(np.array(zp, dtype=np.int32), "z"))
    m = model(d, [helper.make_tensor_value_info("qx", T.INT32, shape)], [helper.make_tensor_value_info("y", T.FLOAT, shape)], inits)
    qx = np.random.default_rng(2).integers(-100000, 100000, shape).astype(np.int32)
    check_against_cpu(m, {"qx": qx}, rtol=0, atol=0, all_on_mlx=True)


LOOKUP_CASES = [
    # (x_scale, x_zp, y_scale, y_zp) per dtype; None: zero point absent
    (0.05, 10, 0.02, 3),
    (0.1, None, 1 / 256, None),
    (0.0173, -5, 0.0091, 100),
    (0.3, 0, 0.004, -20),
]


@pytest.mark.parametrize("op,alpha", [("QLinearLeakyRelu", None), ("QLinearLeakyRelu", 0.3), ("QLinearSigmoid", None)])
@pytest.mark.parametrize("qt", [T.INT8, T.UINT8])
@pytest.mark.parametrize("case", range(len(LOOKUP_CASES)))
def test_lookup_activations(op, alpha, qt, case):
    xs, xz, ys, yz = LOOKUP_CASES[case]
    dt = NP[qt]
    info = np.iinfo(dt)
    clip = lambda v: None if v is None else int(np.clip(v if qt == T.INT8 else v + 128, info.min, info.max))
    xz, yz = clip(xz), clip(yz)
    inits = [numpy_helper.from_array(np.float32(xs), "xs"), numpy_helper.from_array(np.float32(ys), "ys")]
    ins = ["x", "xs", "", "ys", ""]
    if xz is not None:
        inits.append(numpy_helper.from_array(np.array(xz, dtype=dt), "xz"))
        ins[2] = "xz"
    if yz is not None:
        inits.append(numpy_helper.from_array(np.array(yz, dtype=dt), "yz"))
        ins[4] = "yz"
    # ORT's CPU kernel reads input 4's definition: keep an absent y_zero_point as "" (not dropped)
    attrs = {} if alpha is None else {"alpha": alpha}
    node = helper.make_node(op, ins, ["y"], domain=MS, **attrs)
    shape = [2, 128]
    m = model(node, [helper.make_tensor_value_info("x", qt, shape)], [helper.make_tensor_value_info("y", qt, shape)], inits)
    x = np.arange(info.min, info.max + 1, dtype=np.int64).astype(dt).reshape(shape)  # every byte
    check_against_cpu(m, {"x": x}, rtol=0, atol=0, all_on_mlx=True)


def test_lookup_with_runtime_scale_stays_on_cpu():
    node = helper.make_node("QLinearSigmoid", ["x", "xs", "", "ys", ""], ["y"], domain=MS)
    inputs = [helper.make_tensor_value_info("x", T.UINT8, [4]), helper.make_tensor_value_info("xs", T.FLOAT, [])]
    m = model(node, inputs, [helper.make_tensor_value_info("y", T.UINT8, [4])], [numpy_helper.from_array(np.float32(0.01), "ys")])
    s = make_session(m, mlx=True)
    run(s, {"x": np.arange(4, dtype=np.uint8), "xs": np.array(0.1, dtype=np.float32)})
    assert_on_cpu(s, ["QLinearSigmoid"])


def test_dequantize_int32_nonzero_zero_point_stays_on_cpu():
    # ORT 1.23 fails such a run, 1.31 subtracts the zero point: declined
    d = helper.make_node("DequantizeLinear", ["qx", "s", "z"], ["y"], domain=MS)
    inits = [numpy_helper.from_array(np.float32(0.25), "s"), numpy_helper.from_array(np.array(7, dtype=np.int32), "z")]
    m = model(d, [helper.make_tensor_value_info("qx", T.INT32, [3])], [helper.make_tensor_value_info("y", T.FLOAT, [3])], inits)
    s = make_session(m, mlx=True)
    if ORT_VERSION >= (1, 24):
        run(s, {"qx": np.arange(3, dtype=np.int32)})
        assert_on_cpu(s, ["DequantizeLinear"])


@pytest.mark.parametrize("qt", [T.INT8, T.UINT8])
@pytest.mark.parametrize("axis", [1, -1, 0])
def test_qlinear_concat(qt, axis):
    dt = NP[qt]
    info = np.iinfo(dt)
    off = 0 if qt == T.INT8 else 128
    params = [(0.05, 3 + off), (0.05, 3 + off), (0.031, -10 + off), (0.2, 40 + off)]  # output, copy, requantized x2
    inits, ins = [], []
    for k, (s, z) in enumerate(params):
        inits += [numpy_helper.from_array(np.float32(s), f"s{k}"), numpy_helper.from_array(np.array(z, dtype=dt), f"z{k}")]
    ins = ["s0", "z0"]
    shapes = [[2, 128], [2, 128], [2, 128]]
    feeds = {}
    for k in range(1, 4):
        ins += [f"x{k}", f"s{k}", f"z{k}"]
        feeds[f"x{k}"] = np.random.default_rng(k).permutation(np.arange(info.min, info.max + 1)).astype(dt).reshape(shapes[k - 1])
    node = helper.make_node("QLinearConcat", ins, ["y"], domain=MS, axis=axis)
    inputs = [helper.make_tensor_value_info(f"x{k}", qt, shapes[k - 1]) for k in range(1, 4)]
    m = model(node, inputs, [helper.make_tensor_value_info("y", qt, None)], inits)
    check_against_cpu(m, feeds, rtol=0, atol=0, all_on_mlx=True)


# ---------------------------------------------------------------------------
# QLinearSoftmax


def softmax_model(qt, shape, opset, axis, xs, ys, yz, x_zp=0):
    dt = NP[qt]
    inits = [numpy_helper.from_array(np.float32(xs), "xs"), numpy_helper.from_array(np.array(x_zp, dt), "xz"), numpy_helper.from_array(np.float32(ys), "ys")]
    ins = ["x", "xs", "xz", "ys"]
    inits.append(numpy_helper.from_array(np.array(yz, dt), "yz"))
    ins.append("yz")
    attrs = {"opset": opset}
    if axis is not None:
        attrs["axis"] = axis
    node = helper.make_node("QLinearSoftmax", ins, ["y"], domain=MS, **attrs)
    return model(node, [helper.make_tensor_value_info("x", qt, shape)], [helper.make_tensor_value_info("y", qt, shape)], inits)


@pytest.mark.parametrize("qt", [T.INT8, T.UINT8])
@pytest.mark.parametrize("opset,axis", [(13, None), (13, -1), (13, 1), (13, 0), (1, None), (1, 2), (1, 0)])
@pytest.mark.parametrize("scales", [(0.1, 1 / 256, "min"), (0.0371, 1 / 255, 0), (0.29, 0.003, 10), (0.004, 0.01, 0)])
def test_qlinear_softmax(qt, opset, axis, scales):
    xs, ys, yz = scales
    info = np.iinfo(NP[qt])
    if yz == "min":
        yz = int(info.min)
    shape = [3, 5, 37]
    x = np.random.default_rng(7).integers(info.min, info.max + 1, shape).astype(NP[qt])
    x[0, 0, :] = info.max  # a row of equal maxima
    x[1, 1, :3] = info.min
    m = softmax_model(qt, shape, opset, axis, xs, ys, yz, x_zp=int(info.min) // 2)
    if not FORMULAS_MATCH_HOST:
        s = make_session(m, mlx=True)
        run(s, {"x": x})
        assert_on_cpu(s, ["QLinearSoftmax"])
        return
    check_against_cpu(m, {"x": x}, rtol=0, atol=0, all_on_mlx=True)


def test_qlinear_softmax_overflowing_scale_stays_on_cpu():
    # one element per row: ORT's e * floor(1 / y_scale) overflows float32
    m = softmax_model(T.UINT8, [4, 1], 13, -1, 0.1, 1 / 256, 0)
    s = make_session(m, mlx=True)
    run(s, {"x": np.arange(4, dtype=np.uint8).reshape(4, 1)})
    assert_on_cpu(s, ["QLinearSoftmax"])


# ---------------------------------------------------------------------------
# QLinearAveragePool / QLinearGlobalAveragePool


def pool_model(op, qt, shape, out_shape, attrs, xs=0.05, xz=3, ys=0.04, yz=-2):
    dt = NP[qt]
    info = np.iinfo(dt)
    xz, yz = (int(np.clip(v if qt == T.INT8 else v + 128, info.min, info.max)) for v in (xz, yz))
    inits = [numpy_helper.from_array(np.float32(xs), "xs"), numpy_helper.from_array(np.array(xz, dt), "xz"), numpy_helper.from_array(np.float32(ys), "ys"), numpy_helper.from_array(np.array(yz, dt), "yz")]
    node = helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS, **attrs)
    return model(node, [helper.make_tensor_value_info("x", qt, shape)], [helper.make_tensor_value_info("y", qt, out_shape)], inits)


def qrandom(qt, shape, seed=11):
    info = np.iinfo(NP[qt])
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(NP[qt])


@pytest.mark.parametrize("qt", [T.INT8, T.UINT8])
@pytest.mark.parametrize("nhwc", [0, 1])
@pytest.mark.parametrize("rank", [3, 4, 5])
def test_qlinear_global_average_pool(qt, nhwc, rank):
    spatial = [7, 5, 3][: rank - 2]
    shape = [2, *spatial, 6] if nhwc else [2, 6, *spatial]
    out = [2, *[1] * (rank - 2), 6] if nhwc else [2, 6, *[1] * (rank - 2)]
    m = pool_model("QLinearGlobalAveragePool", qt, shape, out, {"channels_last": nhwc})
    check_against_cpu(m, {"x": qrandom(qt, shape)}, rtol=0, atol=0, all_on_mlx=True)


AVG_CASES = [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1, "count_include_pad": 1},
    {"kernel_shape": [2, 3], "strides": [2, 1], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER", "count_include_pad": 1},
    {"kernel_shape": [7, 6]},  # the whole image: ORT's global path
]


def pool_out(shape_spatial, a):
    k, s = a["kernel_shape"], a.get("strides", [1] * len(a["kernel_shape"]))
    if "auto_pad" in a:
        return [-(-n // st) for n, st in zip(shape_spatial, s)]
    p = a.get("pads", [0] * 2 * len(k))
    d = len(k)
    out = []
    for i, n in enumerate(shape_spatial):
        span = n + p[i] + p[i + d] - k[i]
        o = (-(-span // s[i]) if a.get("ceil_mode") else span // s[i]) + 1
        if a.get("ceil_mode") and (o - 1) * s[i] >= n + p[i]:
            o -= 1
        out.append(o)
    return out


@pytest.mark.parametrize("qt", [T.INT8, T.UINT8])
@pytest.mark.parametrize("nhwc", [0, 1])
@pytest.mark.parametrize("case", range(len(AVG_CASES)))
def test_qlinear_average_pool(qt, nhwc, case):
    a = dict(AVG_CASES[case], channels_last=nhwc)
    spatial = [7, 6]
    o = pool_out(spatial, a)
    shape = [2, *spatial, 5] if nhwc else [2, 5, *spatial]
    out = [2, *o, 5] if nhwc else [2, 5, *o]
    m = pool_model("QLinearAveragePool", qt, shape, out, a, xs=0.0173, ys=0.0131)
    check_against_cpu(m, {"x": qrandom(qt, shape)}, rtol=0, atol=0, all_on_mlx=True)


@pytest.mark.parametrize("rank", [3, 5])
def test_qlinear_average_pool_1d_3d(rank):
    k = [3, 2, 2][: rank - 2]
    a = {"kernel_shape": k, "pads": [1] * (2 * len(k)), "strides": [2] * len(k)}
    spatial = [6, 5, 4][: rank - 2]
    shape, out = [1, 3, *spatial], [1, 3, *pool_out(spatial, a)]
    m = pool_model("QLinearAveragePool", T.UINT8, shape, out, a)
    check_against_cpu(m, {"x": qrandom(T.UINT8, shape)}, rtol=0, atol=0, all_on_mlx=True)


def test_qlinear_global_average_pool_out_of_range_scale_stays_on_cpu():
    m = pool_model("QLinearGlobalAveragePool", T.UINT8, [1, 2, 1, 1], [1, 2, 1, 1], {}, xs=300.0, ys=1.0)
    s = make_session(m, mlx=True)
    with pytest.raises(Exception):  # MLAS rejects the scale: the run fails on the CPU EP
        run(s, {"x": np.zeros([1, 2, 1, 1], np.uint8)})
    assert_on_cpu(s, ["QLinearGlobalAveragePool"])


# ---------------------------------------------------------------------------
# QGemm


QGEMM_TYPES = [(T.UINT8, T.UINT8), (T.UINT8, T.INT8), (T.INT8, T.INT8)]


@pytest.mark.parametrize("at,bt", QGEMM_TYPES, ids=lambda v: str(v))
@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("c", [None, "n", "mn", "m1", "scalar"])
@pytest.mark.parametrize("quantized", [False, True])
def test_qgemm(at, bt, trans, per_column, c, quantized):
    rng = np.random.default_rng(3)
    m, k, n = 5, 300, 7  # K over one exact chunk
    ta, tb = trans
    a = qrandom(at, [k, m] if ta else [m, k], seed=1)
    b = qrandom(bt, [n, k] if tb else [k, n], seed=2)
    adt, bdt = NP[at], NP[bt]
    bshape = [n] if per_column else []
    inits = [
        numpy_helper.from_array(np.float32(0.02), "as"),
        numpy_helper.from_array(np.array(np.iinfo(adt).min // 3 + 40, adt), "az"),
        numpy_helper.from_array(b, "b"),
        numpy_helper.from_array(rng.uniform(0.01, 0.03, bshape).astype(np.float32), "bs"),
        numpy_helper.from_array(rng.integers(np.iinfo(bdt).min // 2, np.iinfo(bdt).max // 2, bshape).astype(bdt), "bz"),
    ]
    ins = ["a", "as", "az", "b", "bs", "bz", ""]
    cshape = {"n": [n], "mn": [m, n], "m1": [m, 1], "scalar": []}.get(c)
    if cshape is not None:
        inits.append(numpy_helper.from_array(rng.integers(-5000, 5000, cshape).astype(np.int32), "c"))
        ins[6] = "c"
    yt = T.FLOAT
    if quantized:
        inits += [numpy_helper.from_array(np.float32(0.8), "ys"), numpy_helper.from_array(np.array(np.iinfo(adt).min + 100, adt), "yz")]
        ins += ["ys", "yz"]
        yt = at
    node = helper.make_node("QGemm", ins, ["y"], domain=MS, transA=ta, transB=tb, alpha=0.75)
    mdl = model(node, [helper.make_tensor_value_info("a", at, list(a.shape))], [helper.make_tensor_value_info("y", yt, [m, n])], inits)
    check_against_cpu(mdl, {"a": a}, rtol=0, atol=0, all_on_mlx=True)


def test_qgemm_runtime_b_and_scales():
    a, b = qrandom(T.UINT8, [4, 9], seed=5), qrandom(T.UINT8, [9, 3], seed=6)
    inits = [numpy_helper.from_array(np.array(7, np.uint8), "az"), numpy_helper.from_array(np.array(100, np.uint8), "bz")]
    node = helper.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz"], ["y"], domain=MS)
    ins = [helper.make_tensor_value_info("a", T.UINT8, [4, 9]), helper.make_tensor_value_info("as", T.FLOAT, []), helper.make_tensor_value_info("b", T.UINT8, [9, 3]), helper.make_tensor_value_info("bs", T.FLOAT, [])]
    mdl = model(node, ins, [helper.make_tensor_value_info("y", T.FLOAT, [4, 3])], inits)
    feeds = {"a": a, "as": np.array(0.3, np.float32), "b": b, "bs": np.array(0.07, np.float32)}
    if ORT_VERSION < (1, 24):
        # ORT 1.23 hands the EP no shape for the rank-0 inputs: the claim can't check b_scale
        s = make_session(mdl, mlx=True)
        run(s, feeds)
        assert_on_cpu(s, ["QGemm"])
        return
    check_against_cpu(mdl, feeds, rtol=0, atol=0, all_on_mlx=True)


# ---------------------------------------------------------------------------
# QLinearAdd (claimed where MLAS runs its AVX2 kernel: Linux x86-64 with AVX2 and FMA) and
# QLinearMul (Linux x86-64: MLAS' SSE2 kernel)


def _linux_x86_64() -> bool:
    import platform

    return platform.system() == "Linux" and platform.machine() == "x86_64"


def _mlas_avx2() -> bool:
    if not _linux_x86_64():
        return False
    flags = open("/proc/cpuinfo").read()
    return " avx2" in flags and " fma" in flags


ADD_SHAPES = [
    ([3, 256], [3, 256]),
    ([2, 3, 4], [3, 4]),
    ([2, 3, 4], [3, 1]),
    ([3, 1], [1, 4]),
    ([4], [3, 1]),
    ([2, 5], []),
    ([1], [2, 5]),
    ([2, 1, 4], [2, 3, 4]),
    ([4, 1], [4, 1]),
    ([256, 256], [256, 1]),  # every byte pair, B one value per row
    ([256, 1], [256, 256]),  # every byte pair, A one value per row
    ([1], [1024]),
    ([1024], []),
]


@pytest.mark.parametrize("qt", [T.INT8, T.UINT8])
@pytest.mark.parametrize("shapes", ADD_SHAPES, ids=str)
@pytest.mark.parametrize("params", [(0.05, 3, 0.02, -7, 0.06, 1), (0.013, 100, 0.11, 20, 0.09, 0), (0.2, 0, 0.2, 0, 0.1, 0)])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary(op, qt, shapes, params):
    dt = NP[qt]
    info = np.iinfo(dt)
    sa, za, sb, zb, sc, zc = params
    fix = lambda v: None if v is None else int(np.clip(v if qt == T.INT8 else v + 128, info.min, info.max))
    inits, ins = [], []
    for name, s, z in [("a", sa, fix(za)), ("b", sb, fix(zb)), ("c", sc, fix(zc))]:
        inits.append(numpy_helper.from_array(np.float32(s), name + "s"))
        if name != "c":
            ins.append(name)
        ins.append(name + "s")
        if z is None:
            ins.append("")
        else:
            inits.append(numpy_helper.from_array(np.array(z, dt), name + "z"))
            ins.append(name + "z")
    out = list(np.broadcast_shapes(tuple(shapes[0]), tuple(shapes[1])))
    node = helper.make_node(op, ins, ["y"], domain=MS)
    mdl = model(node, [helper.make_tensor_value_info("a", qt, shapes[0]), helper.make_tensor_value_info("b", qt, shapes[1])], [helper.make_tensor_value_info("y", qt, out)], inits)
    rng = np.random.default_rng(9)
    feeds = {"a": rng.integers(info.min, info.max + 1, shapes[0]).astype(dt), "b": rng.integers(info.min, info.max + 1, shapes[1]).astype(dt)}
    every = np.arange(info.min, info.max + 1, dtype=np.int64)
    if shapes[0] == [3, 256]:  # 768 byte pairs in the general form
        feeds["a"] = np.tile(every, (3, 1)).astype(dt)
        feeds["b"] = np.roll(feeds["a"], 17, axis=1)
    elif 256 in shapes[0] and 256 in shapes[1]:
        full, col = np.tile(every, (256, 1)).astype(dt), every.reshape(256, 1).astype(dt)
        feeds = {"a": full, "b": col} if shapes[1] == [256, 1] else {"a": col, "b": full}
    if FORMULAS_MATCH_HOST and (_mlas_avx2() or (op == "QLinearMul" and _linux_x86_64())):
        check_against_cpu(mdl, feeds, rtol=0, atol=0, all_on_mlx=True)
    else:
        s = make_session(mdl, mlx=True)
        run(s, feeds)
        assert_on_cpu(s, [op])
