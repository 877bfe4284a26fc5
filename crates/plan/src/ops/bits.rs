//! Bit-level ops: `BitCast`, and `Cast` / `CastLike` to and from the float8 types and the
//! packed integer types (int4, uint4, int2, uint2).
//!
//! MLX has no float8 dtype: the runtime holds a float8 tensor's one-byte codes as uint8, and
//! only the lowerings here read or write them. The packed integers are held one value per
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
//!   overflow cases are selected in.

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

/// A float8 format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Float8 {
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
                mant: 3,
                bias: 7,
                fnuz: false,
                inf: None,
                max: 0x7E,
            },
            DataType::Float8E4M3FNUZ => Float8 {
                mant: 3,
                bias: 8,
                fnuz: true,
                inf: None,
                max: 0x7F,
            },
            DataType::Float8E5M2 => Float8 {
                mant: 2,
                bias: 15,
                fnuz: false,
                inf: Some(0x7C),
                max: 0x7B,
            },
            DataType::Float8E5M2FNUZ => Float8 {
                mant: 2,
                bias: 16,
                fnuz: true,
                inf: None,
                max: 0x7F,
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

    /// The value of `code`.
    pub(crate) fn decode(self, code: u8) -> f32 {
        let code = code as u32;
        if self.fnuz && code == 0x80 {
            return f32::NAN;
        }
        let negative = code & 0x80 != 0;
        let mag = code & 0x7F;
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

/// Whether `Cast` between `from` and `to` is a float8 form this module lowers.
pub(crate) fn float8_cast(from: DataType, to: DataType) -> Option<Result<(), String>> {
    let wide = [DataType::Float, DataType::Float16, DataType::BFloat16];
    match (Float8::of(from), Float8::of(to)) {
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
    if Float8::of(from).is_some() {
        let out = float8_to_f32(ctx, x, from)?;
        return Ok(ctx.cast(out, DataType::Float, to));
    }
    if Float8::of(to).is_none() {
        invalid!(node, "not a float8 cast: {from} -> {to}");
    }
    let saturate = attr_int(node, "saturate").or_invalid(node)?.unwrap_or(1) != 0;
    let xf = ctx.cast(x, from, DataType::Float);
    f32_to_float8(ctx, xf, to, saturate)
}

/// float8 codes `x` of type `from` -> float32 values (a table lookup).
pub(crate) fn float8_to_f32(
    ctx: &mut LowerCtx,
    x: Slot,
    from: DataType,
) -> Result<Slot, PlanError> {
    let Some(fmt) = Float8::of(from) else {
        return Ok(ctx.cast(x, from, DataType::Float));
    };
    let table: Vec<f32> = (0..=255u8).map(|c| fmt.decode(c)).collect();
    let table = ctx.constant(TensorData::from_f32(vec![256], &table));
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
    let over_code = match (saturate, fmt.inf) {
        (true, _) => fmt.max,
        (false, Some(inf)) => inf,
        (false, None) => fmt.nan(),
    };
    let over_code = cu(ctx, over_code)?;
    mag = select(ctx, over, over_code, mag, u);
    // the sign; fnuz has no negative zero
    let s7 = cu(ctx, 7)?;
    let sign_bit = ctx.binary(B::LeftShift, sign, s7, u);
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
    let plain = |t: DataType| t.is_integer() || t.is_float();
    if !plain(from) || !plain(to) {
        decline!("BitCast: {from} -> {to} is not claimed (numeric types of MLX only)");
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
    fn casts_claimed() {
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
