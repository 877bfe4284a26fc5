"""Narrow float types MLX lacks, on the MLX EP, beyond the conformance cases:

- float4 e2m1 (opset 23, packed two per byte; held one code per byte inside the EP): Cast /
  CastLike from float32 and float16 against ONNX's reference (`ml_dtypes`: round to nearest
  even, saturating to +-6, infinities to +-6, NaN to the zero of the opposite sign), Cast of
  every code to float32 / float16, QuantizeLinear / DequantizeLinear (ORT's CPU EP has no
  kernel for any of them);
- float8 e8m0 (opset 24, `2^(code - 127)`, 0xFF NaN): Cast from float32 / float16 in every
  `round_mode` with and without `saturate`, bit for bit against ORT's CPU EP and a numpy model
  written from the spec's table (ORT's conventions where the spec leaves it open: negatives
  and zero saturate to code 0 or become NaN), and every code back to float32 / float16;
- BitCast (opset 26) between same-width types, against numpy's `view`;
- QLinearMatMul with int8 / uint8 operands, exact per the spec (int32 accumulation, saturation).

Every case asserts the node ran on the MLX EP; odd element counts exercise the packing.
"""

from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import assert_on_mlx, make_session

ORT_VERSION = tuple(int(v) for v in ort.__version__.split(".")[:2])
#: ORT 1.23 loads models up to opset 23: e8m0 (opset 24) and BitCast (opset 26) need newer.
needs_opset_24 = pytest.mark.skipif(ORT_VERSION < (1, 24), reason="ORT before 1.24 loads models up to opset 23 (float8 e8m0 is opset 24)")
needs_float4 = pytest.mark.skipif(ORT_VERSION < (1, 24), reason="ORT 1.23 has no float4e2m1 tensor type (loading fails: 'MLDataType for: tensor(float4e2m1) is not currently registered')")
needs_opset_26 = pytest.mark.skipif(ORT_VERSION < (1, 26), reason="ORT before 1.26 has no opset 26 (BitCast)")

F32, F16, F4, E8M0 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.FLOAT4E2M1, TensorProto.FLOAT8E8M0
NP = {F32: np.float32, F16: np.float16}


def one_node(node, inputs, outputs, opset):
    graph = helper.make_graph([node], "g", inputs, outputs)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10 if opset <= 23 else 11
    return m


def value(array: np.ndarray, onnx_type: int, packed: bool = False):
    """An OrtValue of `onnx_type` from codes (`packed`: 4-bit codes, two per byte)."""
    if packed:
        codes = array.astype(np.uint8).ravel() & 0xF
        codes = np.concatenate([codes, np.zeros(codes.size % 2, np.uint8)])
        raw = codes[0::2] | (codes[1::2] << 4)
        buf = np.zeros(array.shape, np.uint8)
        buf.reshape(-1)[: raw.size] = raw
        array = buf
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.ascontiguousarray(array), onnx_type)


def run_raw(session, feeds) -> tuple[np.ndarray, tuple]:
    """Runs with OrtValues; output 0's bytes and shape."""
    out = session.run_with_ort_values(None, feeds)[0]
    raw = np.frombuffer(ctypes.string_at(out.data_ptr(), out.tensor_size_in_bytes()), np.uint8).copy()
    return raw, tuple(out.shape())


def unpack4(raw: np.ndarray, n: int) -> np.ndarray:
    return np.stack([raw & 0xF, raw >> 4], 1).ravel()[:n]


# ---------------------------------------------------------------------------
# float4 e2m1


def f4_sample(dtype) -> np.ndarray:
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float64)
    mids = (grid[1:] + grid[:-1]) / 2
    near = np.concatenate([mids * (1 + 2**-10), mids * (1 - 2**-10)])
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 5.9, 6.1, 7, 100, 1e-7, 0.01, 0.24, 0.26]
    rand = np.random.default_rng(3).standard_normal(201) * 4
    x = np.concatenate([grid, mids, near, special, rand])
    x = np.concatenate([x, -x])
    return x.astype(dtype)


def f4_reference(x: np.ndarray) -> np.ndarray:
    """ONNX's reference Cast to float4 e2m1: `ml_dtypes`' conversion, as codes."""
    return x.astype(np.float32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF


@needs_float4
@pytest.mark.parametrize("like", [False, True], ids=["Cast", "CastLike"])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4)])
@pytest.mark.parametrize("src", [F32, F16], ids=["float32", "float16"])
def test_cast_to_float4(src, shape, like):
    n = int(np.prod(shape))
    x = np.resize(f4_sample(NP[src]), n).reshape(shape)
    inputs = [helper.make_tensor_value_info("x", src, shape)]
    feeds = {"x": value(x, src)}
    if like:
        node = helper.make_node("CastLike", ["x", "like"], ["y"])
        inputs.append(helper.make_tensor_value_info("like", F4, [1]))
        feeds["like"] = value(np.zeros(1, np.uint8), F4, packed=True)
    else:
        node = helper.make_node("Cast", ["x"], ["y"], to=F4)
    m = one_node(node, inputs, [helper.make_tensor_value_info("y", F4, shape)], 23)
    session = make_session(m)
    raw, out_shape = run_raw(session, feeds)
    assert out_shape == shape
    assert raw.size == (n + 1) // 2
    np.testing.assert_array_equal(unpack4(raw, n), f4_reference(x.ravel()))
    assert_on_mlx(session, [node.op_type])


@needs_float4
@pytest.mark.parametrize("dst", [F32, F16], ids=["float32", "float16"])
def test_cast_every_float4_code(dst):
    codes = np.concatenate([np.arange(16), [3, 9, 15]]).astype(np.uint8)  # an odd count
    m = one_node(helper.make_node("Cast", ["x"], ["y"], to=dst), [helper.make_tensor_value_info("x", F4, [codes.size])], [helper.make_tensor_value_info("y", dst, [codes.size])], 23)
    session = make_session(m)
    y = session.run_with_ort_values(None, {"x": value(codes, F4, packed=True)})[0].numpy()
    want = codes.view(ml_dtypes.float4_e2m1fn).astype(NP[dst])
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(np.signbit(y), np.signbit(want))
    assert_on_mlx(session, ["Cast"])


@needs_float4
@pytest.mark.parametrize("per_axis", [False, True], ids=["per_tensor", "per_axis"])
def test_quantize_dequantize_float4(per_axis):
    shape = (3, 5)
    x = (np.random.default_rng(4).standard_normal(shape) * 3).astype(np.float32)
    scale = np.array([0.5, 1.0, 2.0], np.float32) if per_axis else np.array(0.75, np.float32)
    axis = {"axis": 0} if per_axis else {}
    s = scale.reshape(-1, 1) if per_axis else scale
    sinfo = helper.make_tensor_value_info("s", F32, list(scale.shape))
    q = helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], **axis)
    dq = helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], **axis)
    zp = helper.make_tensor("zp", F4, list(scale.shape), np.zeros(scale.size, np.uint8).tolist())
    graph = helper.make_graph(
        [q, dq], "g", [helper.make_tensor_value_info("x", F32, shape), sinfo],
        [helper.make_tensor_value_info("q", F4, shape), helper.make_tensor_value_info("y", F32, shape)], [zp],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    session = make_session(m)
    outs = session.run_with_ort_values(None, {"x": value(x, F32), "s": value(scale, F32)})
    raw = np.frombuffer(ctypes.string_at(outs[0].data_ptr(), outs[0].tensor_size_in_bytes()), np.uint8)
    want = f4_reference((x / s).ravel())
    np.testing.assert_array_equal(unpack4(raw, x.size), want)
    y = outs[1].numpy()
    np.testing.assert_array_equal(y, (want.view(ml_dtypes.float4_e2m1fn).astype(np.float32).reshape(shape) * s))
    assert_on_mlx(session, ["QuantizeLinear", "DequantizeLinear"])


# ---------------------------------------------------------------------------
# float8 e8m0


def e8m0_reference(x: np.ndarray, saturate: bool, mode: str) -> np.ndarray:
    """Cast to float8 e8m0 from the spec: `up` rounds toward +inf, `down` toward zero,
    `nearest` to the nearer power of two (half up); out of [2^-127, 2^127] (zero, negatives
    and infinities included) saturates to codes 0 / 0xFE or is NaN (0xFF); NaN is 0xFF."""
    b = x.astype(np.float32).view(np.uint32).astype(np.int64)
    sign, e, m = b >> 31, (b >> 23) & 0xFF, b & 0x7FFFFF
    inc = {"down": 0 * m, "up": (m != 0) * 1, "nearest": (m >= 0x400000) * 1}[mode]
    sub_inc = {"down": 0 * m, "up": (m > 0x400000) * 1, "nearest": (m >= 0x600000) * 1}[mode]
    code = np.where(e == 0, sub_inc, e + inc)
    low = ((e == 0) & (m < 0x400000)) | (sign == 1)
    if saturate:
        code = np.where(low, 0, np.minimum(code, 0xFE))
    else:
        code = np.where(low | ((b & 0x7FFFFFFF) > 0x7F000000), 0xFF, code)
    code = np.where((e == 0xFF) & (m != 0), 0xFF, code)
    return code.astype(np.uint8)


def e8m0_sample() -> np.ndarray:
    edges = []
    for e in [0, 1, 2, 100, 126, 127, 128, 200, 253, 254, 255]:
        for m in [0, 1, 0x1FFFFF, 0x200000, 0x3FFFFF, 0x400000, 0x400001, 0x5FFFFF, 0x600000, 0x600001, 0x7FFFFF]:
            for s in (0, 1):
                edges.append((s << 31) | (e << 23) | m)
    rand = np.random.default_rng(5).integers(0, 2**32, 20001, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([np.array(edges, np.uint32), rand]).view(np.float32)


@needs_opset_24
@pytest.mark.parametrize("saturate", [1, 0], ids=["saturate", "no-saturate"])
@pytest.mark.parametrize("mode", ["up", "down", "nearest", None], ids=["up", "down", "nearest", "default"])
@pytest.mark.parametrize("src", [F32, F16], ids=["float32", "float16"])
def test_cast_to_e8m0(src, mode, saturate):
    if src == F16:
        x = np.arange(65536, dtype=np.uint16).view(np.float16)
    else:
        x = e8m0_sample()
    attrs = {"saturate": saturate} | ({} if mode is None else {"round_mode": mode})
    node = helper.make_node("Cast", ["x"], ["y"], to=E8M0, **attrs)
    m = one_node(node, [helper.make_tensor_value_info("x", src, [x.size])], [helper.make_tensor_value_info("y", E8M0, [x.size])], 24)
    session = make_session(m)
    got, _ = run_raw(session, {"x": value(x, src)})
    cpu, _ = run_raw(make_session(m, mlx=False), {"x": value(x, src)})
    want = e8m0_reference(x.astype(np.float32), bool(saturate), mode or "up")
    np.testing.assert_array_equal(cpu, want)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, f"{bad.size} codes differ, e.g. x={x[bad[:6]]}: got {got[bad[:6]]}, expected {want[bad[:6]]}"
    assert_on_mlx(session, ["Cast"])


@needs_opset_24
@pytest.mark.parametrize("like", [False, True], ids=["Cast", "CastLike"])
@pytest.mark.parametrize("dst", [F32, F16], ids=["float32", "float16"])
def test_cast_every_e8m0_code(dst, like):
    codes = np.arange(256, dtype=np.uint8).reshape(16, 16)
    inputs = [helper.make_tensor_value_info("x", E8M0, [16, 16])]
    feeds = {"x": value(codes, E8M0)}
    if like:
        node = helper.make_node("CastLike", ["x", "like"], ["y"])
        inputs.append(helper.make_tensor_value_info("like", dst, [1]))
        feeds["like"] = value(np.zeros(1, NP[dst]), dst)
    else:
        node = helper.make_node("Cast", ["x"], ["y"], to=dst)
    m = one_node(node, inputs, [helper.make_tensor_value_info("y", dst, [16, 16])], 24)
    session = make_session(m)
    y = session.run_with_ort_values(None, feeds)[0].numpy()
    want = make_session(m, mlx=False).run_with_ort_values(None, feeds)[0].numpy()
    np.testing.assert_array_equal(y, want)
    with np.errstate(over="ignore"):
        exact = np.where(codes == 255, np.nan, np.ldexp(1.0, codes.astype(np.int64) - 127)).astype(NP[dst])
    np.testing.assert_array_equal(y, exact)
    assert_on_mlx(session, [node.op_type])


# ---------------------------------------------------------------------------
# BitCast

BITCASTS = [
    (TensorProto.BOOL, np.bool_, TensorProto.UINT8, np.uint8),
    (TensorProto.BOOL, np.bool_, TensorProto.INT8, np.int8),
    (TensorProto.FLOAT, np.float32, TensorProto.INT32, np.int32),
    (TensorProto.INT32, np.int32, TensorProto.FLOAT, np.float32),
    (TensorProto.UINT16, np.uint16, TensorProto.FLOAT16, np.float16),
    (TensorProto.FLOAT16, np.float16, TensorProto.BFLOAT16, None),
    (TensorProto.INT64, np.int64, TensorProto.UINT64, np.uint64),
    (TensorProto.UINT8, np.uint8, TensorProto.FLOAT8E4M3FN, None),
]


@needs_opset_26
@pytest.mark.parametrize("case", BITCASTS, ids=[f"{TensorProto.DataType.Name(c[0])}_to_{TensorProto.DataType.Name(c[2])}".lower() for c in BITCASTS])
def test_bitcast(case):
    src, snp, dst, dnp = case
    rng = np.random.default_rng(6)
    if snp is np.bool_:
        x = rng.random((3, 5)) > 0.5
    elif snp in (np.float32, np.float16):
        x = rng.standard_normal((3, 5)).astype(snp)
        x.ravel()[:3] = [np.inf, -0.0, np.nan]
    else:
        info = np.iinfo(snp)
        x = rng.integers(info.min, info.max, (3, 5), dtype=snp, endpoint=True)
    node = helper.make_node("BitCast", ["x"], ["y"], to=dst)
    m = one_node(node, [helper.make_tensor_value_info("x", src, [3, 5])], [helper.make_tensor_value_info("y", dst, [3, 5])], 26)
    session = make_session(m)
    raw, shape = run_raw(session, {"x": value(x, src)})
    assert shape == (3, 5)
    np.testing.assert_array_equal(raw, np.ascontiguousarray(x).view(np.uint8).ravel())
    if dnp is not None:
        y = session.run(None, {"x": x})[0]
        np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))
        assert y.dtype == dnp
    assert_on_mlx(session, ["BitCast"])


# ---------------------------------------------------------------------------
# QLinearMatMul with int8 operands: exact per the spec (int32 accumulation, then saturation)

QLMM_CASES = [
    # (id, a type, b type, y type)
    ("s8_s8_s8", np.int8, np.int8, np.int8),
    ("u8_s8_u8", np.uint8, np.int8, np.uint8),
    ("s8_u8_s8", np.int8, np.uint8, np.int8),
    ("u8_u8_u8", np.uint8, np.uint8, np.uint8),
]
NP_ONNX = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8}


def qlinear_matmul_spec(a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp):
    """`saturate(round_half_even(int32 (a - a_zp) @ (b - b_zp) * (a_s * b_s / y_s)) + y_zp)`."""
    acc = (a.astype(np.int64) - a_zp) @ (b.astype(np.int64) - b_zp)
    mult = np.float32(a_s) * np.float32(b_s) / np.float32(y_s)
    y = np.rint(acc.astype(np.float32) * mult) + y_zp.astype(np.int64)
    info = np.iinfo(y_zp.dtype)
    return np.clip(y, info.min, info.max).astype(y_zp.dtype)


@pytest.mark.parametrize("case", QLMM_CASES, ids=[c[0] for c in QLMM_CASES])
@pytest.mark.parametrize("shape", [((2, 4), (4, 3)), ((2, 3, 70), (70, 5))], ids=["2d", "3d_k70"])
def test_qlinear_matmul_int8_exact_per_spec(case, shape):
    """Large operands drive the accumulator and the requantized result out of range. The
    ONNX backend cases `test_qlinearmatmul_*_int8_*` expect the wrapped (int8 cast) result of
    ONNX's reference, which does not saturate; the spec saturates, and so does the EP (ORT's
    CPU EP agrees with the spec on s8 x s8; on u8 x s8 without VNNI, MLAS saturates its
    partial products, so ORT is not compared there)."""
    _, at, bt, yt = case
    rng = np.random.default_rng(8)
    (sa, sb) = shape

    def ints(t, s):
        info = np.iinfo(t)
        return rng.integers(info.min, info.max, s, dtype=t, endpoint=True)

    a, b = ints(at, sa), ints(bt, sb)
    a_zp, b_zp, y_zp = np.array(ints(at, ()), at), np.array(ints(bt, ()), bt), np.array(ints(yt, ()), yt)
    a_s, b_s, y_s = (np.array(v, np.float32) for v in (0.0066, 0.00705, 0.004))
    names = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"]
    arrays = [a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp]
    infos = [helper.make_tensor_value_info(n, NP_ONNX.get(v.dtype.type, F32), list(v.shape)) for n, v in zip(names, arrays)]
    out_shape = list(sa[:-1]) + [sb[-1]]
    m = one_node(helper.make_node("QLinearMatMul", names, ["y"]), infos, [helper.make_tensor_value_info("y", NP_ONNX[yt], out_shape)], 21)
    feeds = dict(zip(names, arrays))
    session = make_session(m)
    y = session.run(None, feeds)[0]
    want = qlinear_matmul_spec(*arrays)
    np.testing.assert_array_equal(y, want)
    assert (want == np.iinfo(yt).min).any() or (want == np.iinfo(yt).max).any(), "the case should saturate"
    if at is np.int8 and bt is np.int8:
        np.testing.assert_array_equal(make_session(m, mlx=False).run(None, feeds)[0], want)
    assert_on_mlx(session, ["QLinearMatMul"])
