"""The element types MLX lacks, on the MLX EP: Cast / CastLike / QuantizeLinear /
DequantizeLinear to and from the float8 types (held as their one-byte codes) and the packed
integer types int4, uint4, int2, uint2 (held one value per byte, packed at the boundary).

Encoding is checked against ONNX's reference implementation (`onnx.reference`: with
`saturate`, clip to the finite range then round to nearest even; without, round and let
out-of-range values become inf or NaN, as `ml_dtypes` does) for every float16 value and a dense
float32 sample (every float8 value, the midpoints between neighbours and one float32 ulp either
side of them, the overflow boundary, zeros, infinities, NaNs, float32 subnormals), in each format
with and without saturation: the same float8 value (NaN for NaN, the sign of zeros included).
ORT's CPU EP agrees everywhere but in two non-saturating corners, which the EP does not copy:
it truncates E4M3FN values in [480, 496) to 448, and turns E5M2 values that round past the
largest finite value into NaN rather than infinity.

Decoding is checked for every one of the 256 codes of each format against ORT's CPU EP.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnx.reference.ops.op_cast import cast_to

from conftest import assert_on_mlx, make_session

# onnx.reference's casts of out-of-range values warn
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")

#: ORT 1.23 loads models up to opset 23 (the 2-bit types need opset 25).
ORT_AT_LEAST_1_24 = tuple(int(v) for v in ort.__version__.split(".")[:2]) >= (1, 24)

FORMATS = {
    "e4m3fn": TensorProto.FLOAT8E4M3FN,
    "e4m3fnuz": TensorProto.FLOAT8E4M3FNUZ,
    "e5m2": TensorProto.FLOAT8E5M2,
    "e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ,
}


def cast_model(src: int, dst: int, n: int, saturate: int | None = None, like: bool = False):
    attrs = {} if saturate is None else {"saturate": saturate}
    if like:
        node = helper.make_node("CastLike", ["x", "like"], ["y"], **attrs)
        inputs = [helper.make_tensor_value_info("x", src, [n]), helper.make_tensor_value_info("like", dst, [1])]
    else:
        node = helper.make_node("Cast", ["x"], ["y"], to=dst, **attrs)
        inputs = [helper.make_tensor_value_info("x", src, [n])]
    graph = helper.make_graph([node], "cast", inputs, [helper.make_tensor_value_info("y", dst, [n])])
    # the 2-bit types need opset 25 (IR 11)
    two_bit = {src, dst} & {TensorProto.INT2, TensorProto.UINT2}
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25 if two_bit else 21)])
    model.ir_version = 11 if two_bit else 10
    return model


def run_values(session, feeds: dict[str, tuple[np.ndarray, int]]) -> np.ndarray:
    """Runs with OrtValues (float8 inputs as their codes) and returns output 0's bytes."""
    values = {k: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(a, t) for k, (a, t) in feeds.items()}
    out = session.run_with_ort_values(None, values)[0]
    if out.element_type() in FORMATS.values():
        import ctypes

        raw = ctypes.string_at(out.data_ptr(), out.tensor_size_in_bytes())
        return np.frombuffer(raw, np.uint8).copy()
    return out.numpy()


def float8_values(fmt: int) -> np.ndarray:
    """Every finite float8 value of the format, decoded by ORT's CPU EP, as float32."""
    codes = np.arange(256, dtype=np.uint8)
    session = make_session(cast_model(fmt, TensorProto.FLOAT, 256), mlx=False)
    vals = run_values(session, {"x": (codes, fmt)})
    return np.unique(vals[np.isfinite(vals)])


def float32_sample(fmt: int) -> np.ndarray:
    vals = float8_values(fmt)
    mids = (vals[1:].astype(np.float64) + vals[:-1]) / 2
    mids = mids.astype(np.float32)
    near = np.concatenate([np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))])
    top = vals.max()
    special = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-40, -1e-40, 1e30, -1e30, 3.4e38, top * 1.01, top * 1.5, top * 2, top * 1.03125],
        np.float32,
    )
    rand = np.random.default_rng(0).standard_normal(4000).astype(np.float32) * np.float32(top) / 8
    return np.concatenate([vals, -vals, mids, -mids, near, -near, special, rand]).astype(np.float32)


@pytest.mark.parametrize("saturate", [1, 0], ids=["saturate", "no-saturate"])
@pytest.mark.parametrize("source", ["float32", "float16"])
@pytest.mark.parametrize("fmt", list(FORMATS), ids=list(FORMATS))
def test_encode_matches_cpu_bit_for_bit(fmt, source, saturate):
    dst = FORMATS[fmt]
    if source == "float16":
        x = np.arange(65536, dtype=np.uint16).view(np.float16)
        src = TensorProto.FLOAT16
    else:
        x = float32_sample(dst)
        src = TensorProto.FLOAT
    model = cast_model(src, dst, x.size, saturate=saturate)
    expected = cast_to(x, dst, bool(saturate))
    session = make_session(model)
    actual = run_values(session, {"x": (x, src)}).view(expected.dtype)
    assert_same_float8(actual, expected, x)
    assert_on_mlx(session, ["Cast"])


def assert_same_float8(actual, expected, x):
    """Same value (NaN matching NaN), and the same sign for zeros."""
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    same = (a == e) | (np.isnan(a) & np.isnan(e))
    same &= (a != 0) | (np.signbit(a) == np.signbit(e))
    bad = np.nonzero(~same)[0]
    assert bad.size == 0, f"{bad.size} values differ, e.g. x={x[bad[:8]]}: got {a[bad[:8]]}, expected {e[bad[:8]]}"


@pytest.mark.parametrize("target", ["float32", "float16"])
@pytest.mark.parametrize("fmt", list(FORMATS), ids=list(FORMATS))
def test_decode_every_code(fmt, target):
    src = FORMATS[fmt]
    dst = TensorProto.FLOAT if target == "float32" else TensorProto.FLOAT16
    codes = np.arange(256, dtype=np.uint8)
    model = cast_model(src, dst, 256)
    expected = run_values(make_session(model, mlx=False), {"x": (codes, src)})
    session = make_session(model)
    actual = run_values(session, {"x": (codes, src)})
    np.testing.assert_array_equal(actual, expected)
    finite = ~np.isnan(expected)
    assert np.array_equal(np.signbit(actual[finite]), np.signbit(expected[finite]))
    assert_on_mlx(session, ["Cast"])


def test_castlike_encode():
    x = float32_sample(TensorProto.FLOAT8E4M3FN)
    model = cast_model(TensorProto.FLOAT, TensorProto.FLOAT8E4M3FN, x.size, like=True)
    like = (np.zeros(1, np.uint8), TensorProto.FLOAT8E4M3FN)
    expected = cast_to(x, TensorProto.FLOAT8E4M3FN, True)
    session = make_session(model)
    actual = run_values(session, {"x": (x, TensorProto.FLOAT), "like": like}).view(expected.dtype)
    assert_same_float8(actual, expected, x)
    assert_on_mlx(session, ["CastLike"])


# ---------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear with float8 (the zero point must be zero)


def qdq_model(op: str, x_type: int, y_type: int, n: int, zp_type: int, zp_runtime: bool):
    zp_init = [] if zp_runtime else [helper.make_tensor("z", zp_type, [], [0])]
    inputs = [helper.make_tensor_value_info("x", x_type, [n])]
    if zp_runtime:
        inputs.append(helper.make_tensor_value_info("z", zp_type, []))
    node = helper.make_node(op, ["x", "s", "z"], ["y"])
    graph = helper.make_graph(
        [node], "qdq", inputs, [helper.make_tensor_value_info("y", y_type, [n])],
        initializer=[helper.make_tensor("s", TensorProto.FLOAT, [], [0.5])] + zp_init,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("zp_runtime", [False, True], ids=["constant-zero-point", "runtime-zero-point"])
@pytest.mark.parametrize("fmt", list(FORMATS), ids=list(FORMATS))
def test_quantize_dequantize_float8(fmt, zp_runtime):
    t = FORMATS[fmt]
    x = float32_sample(t)[:2000]
    x = x[np.isfinite(x)]
    feeds = {"x": (x, TensorProto.FLOAT)}
    if zp_runtime:
        feeds["z"] = (np.zeros((), np.uint8), t)
    session = make_session(qdq_model("QuantizeLinear", TensorProto.FLOAT, t, x.size, t, zp_runtime))
    q = run_values(session, feeds)
    expected = cast_to(x / np.float32(0.5), t, True)
    assert_same_float8(q.view(expected.dtype), expected, x)
    assert_on_mlx(session, ["QuantizeLinear"])

    feeds = {"x": (q, t)}
    if zp_runtime:
        feeds["z"] = (np.zeros((), np.uint8), t)
    session = make_session(qdq_model("DequantizeLinear", t, TensorProto.FLOAT, x.size, t, zp_runtime))
    y = run_values(session, feeds)
    np.testing.assert_array_equal(y, expected.astype(np.float32) * np.float32(0.5))
    assert_on_mlx(session, ["DequantizeLinear"])


def test_float8_nonzero_runtime_zero_point_fails_the_run():
    """ORT's kernels refuse a non-zero float8 zero point; so does the EP, at run time."""
    t = TensorProto.FLOAT8E4M3FN
    session = make_session(qdq_model("DequantizeLinear", t, TensorProto.FLOAT, 4, t, True))
    codes = np.array([0x38, 0x40, 0x30, 0x00], np.uint8)
    ok = run_values(session, {"x": (codes, t), "z": (np.zeros((), np.uint8), t)})
    np.testing.assert_array_equal(ok, [0.5, 1.0, 0.25, 0.0])
    # ORT refuses it in its own words when it runs the node itself
    with pytest.raises(Exception, match="zero point must be zero|zero points should be 0"):
        run_values(session, {"x": (codes, t), "z": (np.array(0x38, np.uint8), t)})


# ---------------------------------------------------------------------------
# the packed integer types (int4, uint4, int2, uint2): held one per byte inside the EP

PACKED = {"int4": (TensorProto.INT4, 4, True), "uint4": (TensorProto.UINT4, 4, False)}
if ORT_AT_LEAST_1_24:
    PACKED.update({"int2": (TensorProto.INT2, 2, True), "uint2": (TensorProto.UINT2, 2, False)})


def packed_codes(values: np.ndarray, bits: int) -> np.ndarray:
    """ONNX's packing: the first element in the lowest bits."""
    per = 8 // bits
    v = (values.astype(np.int64) & ((1 << bits) - 1)).astype(np.uint8)
    v = np.concatenate([v, np.zeros((-v.size) % per, np.uint8)])
    out = np.zeros(v.size // per, np.uint8)
    for k in range(per):
        out |= v[k::per] << (k * bits)
    return out


def unpack_codes(raw: np.ndarray, bits: int, n: int, signed: bool) -> np.ndarray:
    per = 8 // bits
    codes = np.stack([(raw >> (k * bits)) & ((1 << bits) - 1) for k in range(per)], 1).ravel()[:n].astype(np.int64)
    if signed:
        codes = np.where(codes >= 1 << (bits - 1), codes - (1 << bits), codes)
    return codes


def packed_value(values: np.ndarray, t: int, bits: int):
    """An OrtValue of a packed type holding `values` (buffer sized like the tensor's shape)."""
    buf = np.zeros(values.shape, np.uint8)
    codes = packed_codes(values.ravel(), bits)
    buf.reshape(-1)[: codes.size] = codes
    return buf


def run_packed_output(session, feeds):
    import ctypes

    values = {k: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(a, t) for k, (a, t) in feeds.items()}
    out = session.run_with_ort_values(None, values)[0]
    return np.frombuffer(ctypes.string_at(out.data_ptr(), out.tensor_size_in_bytes()), np.uint8).copy()


@pytest.mark.parametrize("source", ["float32", "float16", "int32"])
@pytest.mark.parametrize("name", list(PACKED))
def test_cast_to_packed_wraps_truncated_values(name, source):
    """Truncation toward zero, then the low bits (ONNX's reference; ORT's CPU EP rounds
    fractions to nearest instead, so only integral values compare equal with it)."""
    t, bits, signed = PACKED[name]
    x = np.array([-9, -8.5, -3.5, -2.5, -1.9, -0.5, 0, 0.49, 1.5, 2.5, 3.99, 7, 8, 15.5, 16, 100.3, -100.7], np.float64)
    if source == "int32":
        x = np.trunc(x).astype(np.int32)
        src = TensorProto.INT32
    else:
        x = x.astype(np.float32 if source == "float32" else np.float16)
        src = TensorProto.FLOAT if source == "float32" else TensorProto.FLOAT16
    session = make_session(cast_model(src, t, x.size))
    raw = run_packed_output(session, {"x": (x, src)})
    got = unpack_codes(raw, bits, x.size, signed)
    v = np.trunc(x.astype(np.float64)).astype(np.int64) & ((1 << bits) - 1)
    want = np.where(v >= 1 << (bits - 1), v - (1 << bits), v) if signed else v
    np.testing.assert_array_equal(got, want)
    assert_on_mlx(session, ["Cast"])


@pytest.mark.parametrize("target", ["float32", "float16", "int8", "int64"])
@pytest.mark.parametrize("name", list(PACKED))
def test_cast_from_packed_every_value(name, target):
    t, bits, signed = PACKED[name]
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    values = np.concatenate([np.arange(lo, hi + 1), np.arange(hi, lo - 1, -1)[:3]])  # an odd count
    dst = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "int8": TensorProto.INT8, "int64": TensorProto.INT64}[target]
    model = cast_model(t, dst, values.size)
    feeds = {"x": (packed_value(values, t, bits), t)}
    expected = run_values(make_session(model, mlx=False), feeds)
    session = make_session(model)
    actual = run_values(session, feeds)
    np.testing.assert_array_equal(actual, expected)
    np.testing.assert_array_equal(actual, values)
    assert_on_mlx(session, ["Cast"])
