//! Bit-level ops: `BitCast`, and `Cast` / `CastLike` to and from the float8 types, float4 e2m1
//! and the packed integer types (int4, uint4, int2, uint2).
//!
//! MLX has no float8 or float4 dtype: the runtime holds a float8 tensor's one-byte codes as
//! uint8, a float4 e2m1 tensor's 4-bit codes one per byte (uint8, unpacked and packed at the
//! boundary), and only the lowerings here read or write them. The packed integers are held one value per
//! byte (int8 or uint8, sign-extended; the runtime unpacks and packs them at the boundary):
//! decoding is a plain cast, encoding truncates toward zero to int32 (as ONNX's reference
//! does, and every other float-to-integer cast) and wraps to the type's bits.
//!
//! - **decode** (float8 -> float32/float16/bfloat16/float64): a 256-entry float32 table indexed
//!   by the codes (every float8 value is exact in all four targets).
//! - **encode** (float32/float16/bfloat16 -> float8), as ONNX defines it (`saturate=1`: clip to
//!   the finite range, then round; `saturate=0`: round, then out-of-range values become inf
//!   (E5M2) or NaN): on float32 bits, with `mlx_view`. For `|x|` with exponent `e` the target's
//!   spacing is `ulp = 2^(max(e, emin) - M)` (M mantissa bits, `emin` the smallest normal
//!   exponent), so `r = round_half_even(|x| / ulp) * ulp` is `|x|` rounded to the target exactly
//!   (division and product by a power of two are exact in float32). `r`'s code is then read
//!   off its float32 bits (normal) or as `r / 2^(emin - M)` (subnormal), and the sign, NaN and
//!   overflow cases are selected in. float4 e2m1 (opset 23) is the same scheme with a 4-bit
//!   code; it has no NaN or infinity and always saturates, as ONNX's reference does (a NaN
//!   becomes the zero code of the opposite sign, as in `ml_dtypes`).
//! - **float8 e8m0** (opset 24, a power of two `2^(code - 127)`, 0xFF NaN, no sign) decodes by
//!   a table and encodes on the exponent and mantissa bits with `round_mode` (`up`: toward
//!   +inf, `down`: toward zero, `nearest`: half up) and `saturate`, as ORT's CPU kernel: with
//!   `saturate`, values below 2^-127 (zero and negatives included) give code 0 and values
//!   above 2^127 (inf included) code 0xFE; without it, anything out of [2^-127, 2^127] is NaN.

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::plan::invalid;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, UnaryOp as U};

/// Registers `BitCast` (Cast's float8 forms are lowered from `elementwise`'s Cast entry).
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "BitCast", 26, MAX, claim_bitcast, lower_bitcast);
}

/// A float8 format (E8M0 aside) or float4 e2m1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Float8 {
    /// Code width: 8, or 4 for float4 e2m1.
    bits: u32,
    /// Mantissa bits.
    mant: u32,
    /// Exponent bias.
    bias: i32,
    /// `fnuz`: no negative zero, one NaN (0x80), no infinity.
    fnuz: bool,
    /// The magnitude code of infinity, for the format that has one (E5M2).
    inf: Option<u32>,
    /// The magnitude code of the largest finite value.
    max: u32,
}

impl Float8 {
    /// The format of `dt`, when it is a float8 type.
    pub(crate) fn of(dt: DataType) -> Option<Float8> {
        Some(match dt {
            DataType::Float8E4M3FN => Float8 {
                bits: 8,
                mant: 3,
                bias: 7,
                fnuz: false,
                inf: None,
                max: 0x7E,
            },
            DataType::Float8E4M3FNUZ => Float8 {
                bits: 8,
                mant: 3,
                bias: 8,
                fnuz: true,
                inf: None,
                max: 0x7F,
            },
            DataType::Float8E5M2 => Float8 {
                bits: 8,
                mant: 2,
                bias: 15,
                fnuz: false,
                inf: Some(0x7C),
                max: 0x7B,
            },
            DataType::Float8E5M2FNUZ => Float8 {
                bits: 8,
                mant: 2,
                bias: 16,
                fnuz: true,
                inf: None,
                max: 0x7F,
            },
            DataType::Float4E2M1 => Float8 {
                bits: 4,
                mant: 1,
                bias: 1,
                fnuz: false,
                inf: None,
                max: 0x7,
            },
            _ => return None,
        })
    }

    /// The smallest normal exponent.
    fn emin(self) -> i32 {
        1 - self.bias
    }

    /// The magnitude code of NaN (with the sign bit for the `fn` formats, alone for `fnuz`).
    fn nan(self) -> u32 {
        if self.fnuz { 0x80 } else { 0x7F }
    }

    /// The sign bit of a code.
    fn sign(self) -> u32 {
        1 << (self.bits - 1)
    }

    /// The number of codes.
    fn codes(self) -> u32 {
        1 << self.bits
    }

    /// The value of `code`.
    pub(crate) fn decode(self, code: u8) -> f32 {
        let code = code as u32 & (self.codes() - 1);
        if self.fnuz && code == self.sign() {
            return f32::NAN;
        }
        let negative = code & self.sign() != 0;
        let mag = code & (self.sign() - 1);
        let e = (mag >> self.mant) as i32;
        let m = mag & ((1 << self.mant) - 1);
        let v = if self.inf == Some(mag) {
            f32::INFINITY
        } else if mag > self.max {
            f32::NAN
        } else if e == 0 {
            m as f32 * 2f32.powi(self.emin() - self.mant as i32)
        } else {
            (1.0 + m as f32 / (1 << self.mant) as f32) * 2f32.powi(e - self.bias)
        };
        if negative { -v } else { v }
    }

    /// The largest finite value.
    fn max_value(self) -> f32 {
        self.decode(self.max as u8)
    }
}

/// The packed integer types Cast handles (float4 e2m1 has no lowering).
fn packed_int(dt: DataType) -> bool {
    matches!(
        dt,
        DataType::Int4 | DataType::Uint4 | DataType::Int2 | DataType::Uint2
    )
}

/// Whether `Cast` between `from` and `to` involves a packed integer type (then `Some`, with
/// whether the form is claimed).
pub(crate) fn packed_cast(from: DataType, to: DataType) -> Option<Result<(), String>> {
    if !packed_int(from) && !packed_int(to) {
        return None;
    }
    let other_ok =
        |t: DataType| packed_int(t) || t.is_integer() || t.is_float() || t == DataType::Bool;
    let (other, dir) = if packed_int(from) {
        (to, "to")
    } else {
        (from, "from")
    };
    if !other_ok(other) || (!packed_int(from) && from == DataType::Double) {
        return Some(Err(format!(
            "casting {from} to {to} is not claimed ({dir} {other})"
        )));
    }
    Some(Ok(()))
}

/// `Cast` / `CastLike` with a packed integer side (see the module docs).
pub(crate) fn lower_packed_cast(
    ctx: &mut LowerCtx,
    x: Slot,
    from: DataType,
    to: DataType,
) -> Result<Slot, PlanError> {
    if !packed_int(to) {
        // the values are held one per byte: a plain cast
        return Ok(ctx.cast(x, from, to));
    }
    let i = DataType::Int32;
    let bits = to.packed_bits().unwrap_or(4);
    let v = ctx.cast(x, from, i);
    let mask = ctx.scalar(i, ((1u32 << bits) - 1) as f64)?;
    let mut w = ctx.binary(B::BitwiseAnd, v, mask, i);
    if matches!(to, DataType::Int4 | DataType::Int2) {
        // sign-extend the low bits: (w ^ sign) - sign
        let sign = ctx.scalar(i, (1u32 << (bits - 1)) as f64)?;
        let flipped = ctx.binary(B::BitwiseXor, w, sign, i);
        w = ctx.binary(B::Subtract, flipped, sign, i);
    }
    Ok(ctx.cast(w, i, to))
}

/// Whether `dt` is one of the small float types this module converts (float8, float4 e2m1).
fn small_float(dt: DataType) -> bool {
    Float8::of(dt).is_some() || dt == DataType::Float8E8M0
}

/// Whether `Cast` between `from` and `to` is a float8 (or float4) form this module lowers.
pub(crate) fn float8_cast(from: DataType, to: DataType) -> Option<Result<(), String>> {
    let wide = [DataType::Float, DataType::Float16, DataType::BFloat16];
    let small = |t: DataType| small_float(t).then_some(());
    match (small(from), small(to)) {
        (None, None) => None,
        (Some(_), None) if wide.contains(&to) || to == DataType::Double => Some(Ok(())),
        (None, Some(_)) if wide.contains(&from) => Some(Ok(())),
        (Some(_), Some(_)) => Some(Err(format!("casting {from} to {to} is not claimed"))),
        (Some(_), None) => Some(Err(format!(
            "casting {from} to {to} is not claimed (float8 decodes to float types)"
        ))),
        (None, Some(_)) => Some(Err(format!(
            "casting {from} to {to} is not claimed (float8 encodes from float32, float16 and bfloat16)"
        ))),
    }
}

/// `Cast` / `CastLike` with a float8 side: decode through a table or encode on the bits.
pub(crate) fn lower_float8_cast(
    ctx: &mut LowerCtx,
    node: &Node,
    x: Slot,
    from: DataType,
    to: DataType,
) -> Result<Slot, PlanError> {
    if small_float(from) {
        let out = float8_to_f32(ctx, x, from)?;
        return Ok(ctx.cast(out, DataType::Float, to));
    }
    if !small_float(to) {
        invalid!(node, "not a float8 cast: {from} -> {to}");
    }
    let saturate = attr_int(node, "saturate").or_invalid(node)?.unwrap_or(1) != 0;
    let xf = ctx.cast(x, from, DataType::Float);
    if to == DataType::Float8E8M0 {
        let mode = round_mode(node).or_invalid(node)?;
        return encode_e8m0(ctx, xf, saturate, mode);
    }
    f32_to_float8(ctx, xf, to, saturate)
}

/// Cast's `round_mode` for float8 e8m0 (opset 24).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RoundMode {
    /// Toward +inf (the default).
    Up,
    /// Toward zero.
    Down,
    /// To the nearer power of two, half up.
    Nearest,
}

/// The node's `round_mode` attribute (`up` when absent).
pub(crate) fn round_mode(node: &Node) -> Result<RoundMode, String> {
    Ok(match attr_str(node, "round_mode")?.as_deref() {
        None | Some("up") => RoundMode::Up,
        Some("down") => RoundMode::Down,
        Some("nearest") => RoundMode::Nearest,
        Some(other) => return Err(format!("unknown round_mode '{other}'")),
    })
}

/// The value of a float8 e8m0 code.
fn e8m0_decode(code: u8) -> f32 {
    match code {
        0xFF => f32::NAN,
        0 => f32::from_bits(0x0040_0000), // 2^-127, a float32 subnormal
        c => f32::from_bits((c as u32) << 23),
    }
}

/// float32 `x` -> float8 e8m0 codes (see the module docs).
fn encode_e8m0(
    ctx: &mut LowerCtx,
    x: Slot,
    saturate: bool,
    mode: RoundMode,
) -> Result<Slot, PlanError> {
    let u = DataType::Uint32;
    let cu = |ctx: &mut LowerCtx, v: u32| ctx.scalar(u, v as f64);
    let select = |ctx: &mut LowerCtx, cond: Slot, x: Slot, y: Slot| {
        let out = ctx.temp(u);
        ctx.push(Step::Where { cond, x, y, out });
        out
    };
    let bits = ctx.temp(u);
    ctx.push(Step::View {
        x,
        dtype: u,
        out: bits,
    });
    let s23 = cu(ctx, 23)?;
    let e = ctx.binary(B::RightShift, bits, s23, u);
    let ff = cu(ctx, 0xFF)?;
    let e = ctx.binary(B::BitwiseAnd, e, ff, u);
    let mmask = cu(ctx, 0x7F_FFFF)?;
    let m = ctx.binary(B::BitwiseAnd, bits, mmask, u);
    let zero = cu(ctx, 0)?;
    let half = cu(ctx, 0x40_0000)?;
    // the rounding increment of a normal (value 2^(e-127) * (1 + m / 2^23)) and of a float32
    // subnormal (m * 2^-149, at least 2^-127 = half when not below the range)
    let inc = |ctx: &mut LowerCtx, ties: u32, up_from: Option<Slot>| -> Result<Slot, PlanError> {
        let flag = match (mode, up_from) {
            (RoundMode::Down, _) => return Ok(zero),
            (RoundMode::Up, None) => ctx.binary(B::NotEqual, m, zero, u),
            (RoundMode::Up, Some(t)) => ctx.binary(B::Greater, m, t, u),
            (RoundMode::Nearest, _) => {
                let t = cu(ctx, ties)?;
                ctx.binary(B::GreaterEqual, m, t, u)
            }
        };
        Ok(ctx.cast(flag, DataType::Bool, u))
    };
    let inc_normal = inc(ctx, 0x40_0000, None)?;
    let inc_sub = inc(ctx, 0x60_0000, Some(half))?;
    let normal = ctx.binary(B::Add, e, inc_normal, u);
    let is_sub = ctx.binary(B::Equal, e, zero, u);
    let mut code = select(ctx, is_sub, inc_sub, normal);
    // below 2^-127 (zero included), negatives, and above 2^127
    let small = ctx.binary(B::Less, m, half, u);
    let below = ctx.binary(B::LogicalAnd, is_sub, small, DataType::Bool);
    let s31 = cu(ctx, 31)?;
    let sign = ctx.binary(B::RightShift, bits, s31, u);
    let negative = ctx.binary(B::NotEqual, sign, zero, u);
    let low = ctx.binary(B::LogicalOr, below, negative, DataType::Bool);
    let amask = cu(ctx, 0x7FFF_FFFF)?;
    let abs = ctx.binary(B::BitwiseAnd, bits, amask, u);
    let nan = cu(ctx, 0xFF)?;
    if saturate {
        let max = cu(ctx, 0xFE)?;
        code = ctx.binary(B::Minimum, code, max, u);
        code = select(ctx, low, zero, code);
        let inf = cu(ctx, 0x7F80_0000)?;
        let is_nan = ctx.binary(B::Greater, abs, inf, u);
        code = select(ctx, is_nan, nan, code);
    } else {
        let top = cu(ctx, 0x7F00_0000)?;
        let high = ctx.binary(B::Greater, abs, top, u);
        let out = ctx.binary(B::LogicalOr, low, high, DataType::Bool);
        code = select(ctx, out, nan, code);
    }
    Ok(ctx.cast(code, u, DataType::Float8E8M0))
}

/// float8 codes `x` of type `from` -> float32 values (a table lookup).
pub(crate) fn float8_to_f32(
    ctx: &mut LowerCtx,
    x: Slot,
    from: DataType,
) -> Result<Slot, PlanError> {
    let table: Vec<f32> = match Float8::of(from) {
        Some(fmt) => (0..fmt.codes()).map(|c| fmt.decode(c as u8)).collect(),
        None if from == DataType::Float8E8M0 => (0..=255u8).map(e8m0_decode).collect(),
        None => return Ok(ctx.cast(x, from, DataType::Float)),
    };
    let table = ctx.constant(TensorData::from_f32(vec![table.len() as i64], &table));
    let idx = ctx.cast(x, from, DataType::Int32);
    let out = ctx.temp(DataType::Float);
    ctx.push(Step::Take {
        x: table,
        indices: idx,
        axis: 0,
        out,
    });
    Ok(out)
}

/// float32 `x` -> float8 codes of type `to`, as ONNX's Cast with `saturate`.
pub(crate) fn f32_to_float8(
    ctx: &mut LowerCtx,
    x: Slot,
    to: DataType,
    saturate: bool,
) -> Result<Slot, PlanError> {
    match Float8::of(to) {
        Some(fmt) => encode(ctx, x, fmt, saturate, to),
        None => Ok(ctx.cast(x, DataType::Float, to)),
    }
}

/// float32 `x` -> float8 codes of format `fmt` (see the module docs), typed `to`.
fn encode(
    ctx: &mut LowerCtx,
    x: Slot,
    fmt: Float8,
    saturate: bool,
    to: DataType,
) -> Result<Slot, PlanError> {
    let (f, u, i) = (DataType::Float, DataType::Uint32, DataType::Int32);
    let m = fmt.mant;
    let emin = fmt.emin();
    let cu = |ctx: &mut LowerCtx, v: u32| ctx.scalar(u, v as f64);
    let ci = |ctx: &mut LowerCtx, v: i32| ctx.scalar(i, v as f64);
    let view = |ctx: &mut LowerCtx, x: Slot, dtype: DataType| {
        let out = ctx.temp(dtype);
        ctx.push(Step::View { x, dtype, out });
        out
    };
    let select = |ctx: &mut LowerCtx, cond: Slot, x: Slot, y: Slot, dt: DataType| {
        let out = ctx.temp(dt);
        ctx.push(Step::Where { cond, x, y, out });
        out
    };
    // the unbiased float32 exponent of a non-negative float32 (its bits >> 23, less 127)
    let exponent = |ctx: &mut LowerCtx, v: Slot| -> Result<Slot, PlanError> {
        let bits = view(ctx, v, u);
        let s23 = cu(ctx, 23)?;
        let eb = ctx.binary(B::RightShift, bits, s23, u);
        let eb = ctx.cast(eb, u, i);
        let b127 = ci(ctx, 127)?;
        Ok(ctx.binary(B::Subtract, eb, b127, i))
    };

    // sign bit and magnitude
    let bits = view(ctx, x, u);
    let s31 = cu(ctx, 31)?;
    let sign = ctx.binary(B::RightShift, bits, s31, u);
    let ax = ctx.unary(U::Abs, x, f);
    // round |x| to the target's spacing
    let e = exponent(ctx, ax)?;
    let emin_s = ci(ctx, emin)?;
    let ec = ctx.binary(B::Maximum, e, emin_s, i);
    let ulp_exp_bias = ci(ctx, 127 - m as i32)?;
    let ulp_e = ctx.binary(B::Add, ec, ulp_exp_bias, i);
    let ulp_e = ctx.cast(ulp_e, i, u);
    let s23 = cu(ctx, 23)?;
    let ulp_bits = ctx.binary(B::LeftShift, ulp_e, s23, u);
    let ulp = view(ctx, ulp_bits, f);
    let q = ctx.binary(B::Divide, ax, ulp, f);
    let q = ctx.unary(U::Round, q, f);
    let r = ctx.binary(B::Multiply, q, ulp, f);
    // r's magnitude code: normal from its bits, subnormal as r / 2^(emin - M)
    let re = exponent(ctx, r)?;
    let normal = ctx.binary(B::GreaterEqual, re, emin_s, i);
    let bias_s = ci(ctx, fmt.bias)?;
    let ef = ctx.binary(B::Add, re, bias_s, i);
    let ef = ctx.cast(ef, i, u);
    let sm = cu(ctx, m)?;
    let ef = ctx.binary(B::LeftShift, ef, sm, u);
    let rbits = view(ctx, r, u);
    let shift = cu(ctx, 23 - m)?;
    let mant = ctx.binary(B::RightShift, rbits, shift, u);
    let mask = cu(ctx, (1 << m) - 1)?;
    let mant = ctx.binary(B::BitwiseAnd, mant, mask, u);
    let mag_normal = ctx.binary(B::BitwiseOr, ef, mant, u);
    let scale = ctx.scalar(f, 2f64.powi(m as i32 - emin))?;
    let sub = ctx.binary(B::Multiply, r, scale, f);
    let mag_sub = ctx.cast(sub, f, u);
    let mut mag = select(ctx, normal, mag_normal, mag_sub, u);
    // out of range (inf included): the largest value, or inf / NaN without saturation
    let max = ctx.scalar(f, fmt.max_value() as f64)?;
    let over = ctx.binary(B::Greater, r, max, f);
    // float4 e2m1 has neither infinity nor NaN: it always saturates
    let saturate = saturate || fmt.bits == 4;
    let over_code = match (saturate, fmt.inf) {
        (true, _) => fmt.max,
        (false, Some(inf)) => inf,
        (false, None) => fmt.nan(),
    };
    let over_code = cu(ctx, over_code)?;
    mag = select(ctx, over, over_code, mag, u);
    // the sign; fnuz has no negative zero
    let sbit = cu(ctx, fmt.bits - 1)?;
    let sign_bit = ctx.binary(B::LeftShift, sign, sbit, u);
    let mut code = ctx.binary(B::BitwiseOr, sign_bit, mag, u);
    if fmt.fnuz {
        let zero = cu(ctx, 0)?;
        let is_zero = ctx.binary(B::Equal, mag, zero, u);
        code = select(ctx, is_zero, zero, code, u);
        // NaN is 0x80 whatever the sign
        let nan = cu(ctx, 0x80)?;
        let is_nan_code = ctx.binary(B::Equal, mag, nan, u);
        code = select(ctx, is_nan_code, nan, code, u);
    }
    // NaN inputs
    let isnan = ctx.unary(U::IsNan, x, DataType::Bool);
    let nan_code = if fmt.fnuz {
        cu(ctx, 0x80)?
    } else if fmt.bits == 4 {
        // no NaN: the zero of the opposite sign
        let flip = cu(ctx, fmt.sign())?;
        ctx.binary(B::BitwiseXor, sign_bit, flip, u)
    } else {
        let nan = cu(ctx, fmt.nan())?;
        ctx.binary(B::BitwiseOr, sign_bit, nan, u)
    };
    code = select(ctx, isnan, nan_code, code, u);
    Ok(ctx.cast(code, u, to))
}

fn claim_bitcast(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let from = ctx.input_dtype(node, 0)?;
    let to = attr_int(node, "to")
        .or_decline()?
        .and_then(|v| DataType::from_onnx(v as i32))
        .ok_or_else(|| Decline::new("BitCast: the 'to' attribute is missing or unknown"))?;
    // numeric types, bool, and the one-byte float types held as uint8 codes
    let plain = |t: DataType| {
        t.is_integer()
            || t.is_float()
            || t == DataType::Bool
            || Float8::of(t).is_some_and(|f| f.bits == 8)
            || t == DataType::Float8E8M0
    };
    if !plain(from) || !plain(to) {
        decline!("BitCast: {from} -> {to} is not claimed (numeric types, bool and float8 only)");
    }
    if to == DataType::Bool && from != DataType::Bool {
        decline!(
            "BitCast: {from} -> bool is not claimed (bytes other than 0 and 1 are no valid MLX booleans)"
        );
    }
    if from.size_in_bytes() != to.size_in_bytes() {
        decline!("BitCast: {from} and {to} differ in width");
    }
    Ok(())
}

fn lower_bitcast(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let from = ctx.input_dtype(node, 0)?;
    let to = attr_int(node, "to")
        .or_invalid(node)?
        .and_then(|v| DataType::from_onnx(v as i32))
        .unwrap_or(from);
    let x = ctx.input(node, 0)?;
    if from == to {
        ctx.alias(node, 0, x);
        return Ok(());
    }
    let out = ctx.temp(to);
    ctx.push(Step::View { x, dtype: to, out });
    ctx.finish(node, 0, out, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_tables_match_the_formats() {
        let e4m3fn = Float8::of(DataType::Float8E4M3FN).unwrap();
        assert_eq!(e4m3fn.decode(0x7E), 448.0);
        assert!(e4m3fn.decode(0x7F).is_nan());
        assert!(e4m3fn.decode(0xFF).is_nan());
        assert_eq!(e4m3fn.decode(0x01), 2f32.powi(-9));
        assert_eq!(e4m3fn.decode(0x38), 1.0);
        assert_eq!(e4m3fn.decode(0xB8), -1.0);
        assert_eq!(e4m3fn.decode(0x80), 0.0);
        assert!(e4m3fn.decode(0x80).is_sign_negative());
        let e4m3fnuz = Float8::of(DataType::Float8E4M3FNUZ).unwrap();
        assert_eq!(e4m3fnuz.decode(0x7F), 240.0);
        assert!(e4m3fnuz.decode(0x80).is_nan());
        assert_eq!(e4m3fnuz.decode(0x40), 1.0);
        assert_eq!(e4m3fnuz.decode(0x01), 2f32.powi(-10));
        let e5m2 = Float8::of(DataType::Float8E5M2).unwrap();
        assert_eq!(e5m2.decode(0x7B), 57344.0);
        assert_eq!(e5m2.decode(0x7C), f32::INFINITY);
        assert_eq!(e5m2.decode(0xFC), f32::NEG_INFINITY);
        assert!(e5m2.decode(0x7D).is_nan());
        assert_eq!(e5m2.decode(0x3C), 1.0);
        assert_eq!(e5m2.decode(0x01), 2f32.powi(-16));
        let e5m2fnuz = Float8::of(DataType::Float8E5M2FNUZ).unwrap();
        assert_eq!(e5m2fnuz.decode(0x7F), 57344.0);
        assert!(e5m2fnuz.decode(0x80).is_nan());
        assert_eq!(e5m2fnuz.decode(0x40), 1.0);
        assert_eq!(e5m2fnuz.decode(0x01), 2f32.powi(-17));
    }

    #[test]
    fn small_formats_decode() {
        let f4 = Float8::of(DataType::Float4E2M1).unwrap();
        let values: Vec<f32> = (0..16).map(|c| f4.decode(c)).collect();
        assert_eq!(
            values,
            [
                0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0,
                -6.0
            ]
        );
        assert!(values[8].is_sign_negative());
        assert_eq!(e8m0_decode(127), 1.0);
        assert_eq!(e8m0_decode(0), 2f32.powi(-127));
        assert_eq!(e8m0_decode(0xFE), 2f32.powi(127));
        assert!(e8m0_decode(0xFF).is_nan());
    }

    #[test]
    fn casts_claimed() {
        assert_eq!(
            float8_cast(DataType::Float, DataType::Float4E2M1),
            Some(Ok(()))
        );
        assert_eq!(
            float8_cast(DataType::Float8E8M0, DataType::Float16),
            Some(Ok(()))
        );
        assert!(matches!(
            float8_cast(DataType::Float8E8M0, DataType::Float4E2M1),
            Some(Err(_))
        ));
        assert!(float8_cast(DataType::Float, DataType::Int32).is_none());
        assert_eq!(
            float8_cast(DataType::Float16, DataType::Float8E5M2),
            Some(Ok(()))
        );
        assert_eq!(
            float8_cast(DataType::Float8E4M3FN, DataType::Double),
            Some(Ok(()))
        );
        assert!(matches!(
            float8_cast(DataType::Double, DataType::Float8E5M2),
            Some(Err(_))
        ));
        assert!(matches!(
            float8_cast(DataType::Float8E5M2, DataType::Float8E4M3FN),
            Some(Err(_))
        ));
    }
}
