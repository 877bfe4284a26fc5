//! ORT's quantized contrib ops of `com.microsoft` that its quantizer writes: the contrib forms
//! of QuantizeLinear and DequantizeLinear (`use_qdq_contrib_ops`), and the QLinear activations
//! ORT's CPU EP evaluates through a 256-entry lookup table.
//!
//! - `QuantizeLinear` / `DequantizeLinear`: ONNX's arithmetic (see `ops::quantize`), integer
//!   types only, per tensor or per `axis`; the contrib schema has no other attribute.
//! - `QLinearLeakyRelu` / `QLinearSigmoid`: ORT builds `table[i] = quantize(f(x_scale *
//!   (T(i) - x_zero_point)))` for the 256 byte values `i` (`quantize` as MLAS:
//!   `round_half_even(clamp(v / y_scale, min - zp, max - zp)) + zp`) and maps each byte of the
//!   input through it. Here the table is built the same way at plan time (scales and zero
//!   points must be constants) and applied with a gather. Sigmoid is MLAS' rational
//!   approximation (`MlasComputeLogistic`), evaluated with fused multiply-adds where MLAS uses
//!   its FMA kernel (x86-64 with AVX2 and FMA, and aarch64), with separate ones elsewhere.

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::BinaryOp as B;

/// Registers the ops.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(MS, "QuantizeLinear", 1, 1, claim_quantize, lower_quantize)
        .notes("float32 input and scale; int8, uint8, int16, uint16, int4, uint4 outputs; per tensor or per `axis`");
    r.op(MS, "DequantizeLinear", 1, 1, claim_dequantize, lower_dequantize)
        .notes("int8, uint8, int16, uint16, int4, uint4 inputs, and int32 with no zero point or a constant zero one; float32 scale; per tensor or per `axis`");
    r.op(MS, "QLinearLeakyRelu", 1, 1, claim_lookup, lower_leaky_relu)
        .notes("int8/uint8; constant scales and zero points (ORT's 256-entry table, built at plan time)");
    r.op(MS, "QLinearSigmoid", 1, 1, claim_lookup, lower_sigmoid)
        .notes("int8/uint8; constant scales and zero points (ORT's 256-entry table of MLAS' logistic, built at plan time)");
    r.op(MS, "QLinearConcat", 1, 1, claim_concat, lower_concat)
        .notes("int8/uint8; constant scales and zero points; inputs with the output's scale and zero point copied, others requantized through ORT's table");
}

/// The integer types of the contrib QuantizeLinear's output.
const Q_TYPES: &[DataType] = &[
    DataType::Int8,
    DataType::Uint8,
    DataType::Int16,
    DataType::Uint16,
    DataType::Int4,
    DataType::Uint4,
];

/// Declines every attribute but `axis` (the contrib schemas have no other one).
fn only_axis(node: &Node) -> Result<(), Decline> {
    if let Some(a) = node.attributes.keys().find(|k| k.as_str() != "axis") {
        decline!("{}: the attribute {a} is not claimed", node.op_type);
    }
    Ok(())
}

fn claim_quantize(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    only_axis(node)?;
    if let Some(zp) = node.input(2) {
        match ctx.dtype(zp) {
            Some(dt) if Q_TYPES.contains(&dt) => {}
            other => decline!(
                "QuantizeLinear: a {} zero point is not claimed",
                other.map_or("untyped".to_string(), |d| d.to_string())
            ),
        }
    }
    crate::ops::quantize::claim_quantize(ctx, node)
}

fn lower_quantize(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    crate::ops::quantize::lower_quantize(ctx, node)
}

fn claim_dequantize(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    only_axis(node)?;
    let mut types = Q_TYPES.to_vec();
    types.push(DataType::Int32);
    let x = ctx.expect_dtype(node, 0, &types)?;
    ctx.expect_dtype(node, 1, &[DataType::Float])?;
    if x == DataType::Int32
        && let Some(zp) = node.input(2)
        && !ctx
            .constant(zp)
            .is_some_and(|t| t.bytes.iter().all(|&b| b == 0))
    {
        // ORT 1.23 fails the run on a non-zero int32 zero point, 1.31 subtracts it
        decline!("DequantizeLinear: an int32 input's zero point must be a constant zero");
    }
    crate::ops::quantize::claim_dequantize(ctx, node)
}

fn lower_dequantize(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    crate::ops::quantize::lower_dequantize(ctx, node)
}

// ---------------------------------------------------------------------------------------------
// Lookup-table activations.

/// One scale or zero point of a table op: a constant scalar or one-element 1-D.
fn scalar_const(t: &TensorData) -> Option<f64> {
    (t.dims.len() <= 1 && t.numel() == 1)
        .then(|| t.to_f64_vec())
        .flatten()
        .and_then(|v| v.first().copied())
}

/// Inputs 1..=4 of a table op: `(x_scale, x_zero_point, y_scale, y_zero_point)`, from the
/// constants `get` finds.
fn table_params<'t>(
    node: &Node,
    dt: DataType,
    get: impl Fn(usize) -> Option<&'t TensorData>,
) -> Result<(f32, i32, f32, i32), String> {
    let what = ["x_scale", "x_zero_point", "y_scale", "y_zero_point"];
    let mut v = [0.0f64; 4];
    for (k, name) in what.iter().enumerate() {
        let i = k + 1;
        let zero_point = k % 2 == 1;
        if node.input(i).is_none() {
            if zero_point {
                continue;
            }
            return Err(format!("{}: {name} is missing", node.op_type));
        }
        let Some(t) = get(i) else {
            return Err(format!(
                "{}: {name} must be a constant initializer",
                node.op_type
            ));
        };
        let want = if zero_point { dt } else { DataType::Float };
        if t.dtype != want {
            return Err(format!("{}: {name} must be {want}", node.op_type));
        }
        v[k] =
            scalar_const(t).ok_or_else(|| format!("{}: {name} must be a scalar", node.op_type))?;
    }
    Ok((v[0] as f32, v[1] as i32, v[2] as f32, v[3] as i32))
}

fn claim_lookup(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, 0, &[DataType::Int8, DataType::Uint8])?;
    table_params(node, dt, |i| node.input(i).and_then(|n| ctx.constant(n))).or_decline()?;
    if node.op_type == "QLinearLeakyRelu" {
        attr_float(node, "alpha").or_decline()?;
    }
    Ok(())
}

/// MLAS' `QuantizeLinear` of one float32 value to the range `[lo, hi]`.
pub(crate) fn mlas_quantize(v: f32, scale: f32, zp: i32, lo: i32, hi: i32) -> i32 {
    let mut q = v / scale;
    // SSE's MAXPS returns the second operand (the bound) for a NaN.
    if q.is_nan() {
        q = (lo - zp) as f32;
    }
    let q = q.max((lo - zp) as f32).min((hi - zp) as f32);
    q.round_ties_even() as i32 + zp
}

/// ORT's table in the order of `x + offset` (`offset` 128 for int8, 0 for uint8), encoded as `dt`.
fn lookup_table(
    dt: DataType,
    (xs, xz, ys, yz): (f32, i32, f32, i32),
    f: impl Fn(&[f32]) -> Vec<f32>,
) -> Result<TensorData, String> {
    let signed = dt == DataType::Int8;
    let (lo, hi) = if signed { (-128, 127) } else { (0, 255) };
    // entry j holds the value x = j - offset
    let xs_in: Vec<f32> = (0..256i32)
        .map(|j| {
            let x = if signed { j - 128 } else { j };
            xs * (x - xz) as f32
        })
        .collect();
    let ys_out = f(&xs_in);
    let bytes: Vec<u8> = ys_out
        .iter()
        .map(|&v| mlas_quantize(v, ys, yz, lo, hi) as u8)
        .collect();
    TensorData::new(dt, vec![256], bytes)
}

/// Emits `table[x + offset]`.
fn lower_lookup(
    ctx: &mut LowerCtx,
    node: &Node,
    f: impl Fn(&[f32]) -> Vec<f32>,
) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let params = table_params(node, dt, |i| ctx.const_input(node, i)).or_invalid(node)?;
    let table = lookup_table(dt, params, f).or_invalid(node)?;
    let x = ctx.input(node, 0)?;
    let out = apply_table(ctx, x, dt, table)?;
    ctx.finish(node, 0, out, dt)
}

/// Looks every byte of `x` (int8 or uint8) up in a 256-entry `table` indexed from the type's
/// lowest value.
fn apply_table(
    ctx: &mut LowerCtx,
    x: Slot,
    dt: DataType,
    table: TensorData,
) -> Result<Slot, PlanError> {
    let table = ctx.constant(table);
    let i32t = DataType::Int32;
    let mut idx = ctx.cast(x, dt, i32t);
    if dt == DataType::Int8 {
        let off = ctx.scalar(i32t, 128.0)?;
        idx = ctx.binary(B::Add, idx, off, i32t);
    }
    Ok(take(ctx, table, idx, 0, dt))
}

fn lower_leaky_relu(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let alpha = attr_float(node, "alpha").or_invalid(node)?.unwrap_or(0.01);
    lower_lookup(ctx, node, |v| {
        v.iter()
            .map(|&x| if x >= 0.0 { x } else { alpha * x })
            .collect()
    })
}

fn lower_sigmoid(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let fused = mlas_uses_fma();
    lower_lookup(ctx, node, |v| {
        v.iter().map(|&x| mlas_logistic(x, fused)).collect()
    })
}

/// Whether MLAS' logistic kernel on this machine uses fused multiply-adds.
fn mlas_uses_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(target_arch = "aarch64")]
    {
        true
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// MLAS' logistic (Eigen's rational approximation on `[-18, 18]`), clamped to `[0, 1]`.
pub(crate) fn mlas_logistic(x: f32, fused: bool) -> f32 {
    // Eigen's coefficients, as MLAS writes them (rounded to float32 by the compiler).
    #[allow(clippy::excessive_precision)]
    const A: [f32; 5] = [
        4.37031012579801e-11,
        1.15627324459942e-07,
        6.08574864600143e-05,
        8.51377133304701e-03,
        2.48287947061529e-01,
    ];
    #[allow(clippy::excessive_precision)]
    const BETA: [f32; 6] = [
        6.10247389755681e-13,
        5.76102136993427e-09,
        6.29106785017040e-06,
        1.70198817374094e-03,
        1.16817656904453e-01,
        9.93151921023180e-01,
    ];
    let madd = |a: f32, b: f32, c: f32| if fused { a.mul_add(b, c) } else { a * b + c };
    let v = if x < -18.0 { -18.0 } else { x };
    let v = if v > 18.0 { 18.0 } else { v };
    let x2 = v * v;
    let mut p = madd(x2, A[0], A[1]);
    for &a in &A[2..] {
        p = madd(p, x2, a);
    }
    let p = p * v;
    let mut q = madd(x2, BETA[0], BETA[1]);
    for &b in &BETA[2..] {
        q = madd(q, x2, b);
    }
    (p / q + 0.5).clamp(0.0, 1.0)
}

// ---------------------------------------------------------------------------------------------
// QLinearConcat: `Y_scale, Y_zero_point, (X, X_scale, X_zero_point)...`.

/// `(scale, zero_point)` of the tuple starting at input `i` (or the output's, `i = 0`).
fn concat_params<'t>(
    dt: DataType,
    i: usize,
    get: &impl Fn(usize) -> Option<&'t TensorData>,
) -> Result<(f32, i32), String> {
    let (Some(s), Some(z)) = (get(i), get(i + 1)) else {
        return Err("QLinearConcat: scales and zero points must be constant initializers".into());
    };
    if s.dtype != DataType::Float || z.dtype != dt {
        return Err(format!(
            "QLinearConcat: scales must be float and zero points {dt}"
        ));
    }
    match (scalar_const(s), scalar_const(z)) {
        (Some(s), Some(z)) => Ok((s as f32, z as i32)),
        _ => Err("QLinearConcat: scales and zero points must be scalars".into()),
    }
}

fn claim_concat(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let n = node.inputs.len();
    if n < 5 || !(n - 2).is_multiple_of(3) || node.inputs.iter().any(|i| i.is_empty()) {
        decline!(
            "QLinearConcat: inputs must be Y_scale, Y_zero_point and (X, scale, zero point) tuples"
        );
    }
    let dt = ctx.expect_dtype(node, 2, &[DataType::Int8, DataType::Uint8])?;
    let get = |i: usize| node.input(i).and_then(|n| ctx.constant(n));
    concat_params(dt, 0, &get).or_decline()?;
    for t in (2..n).step_by(3) {
        ctx.expect_dtype(node, t, &[dt])?;
        concat_params(dt, t + 1, &get).or_decline()?;
    }
    attr_int(node, "axis")
        .or_decline()?
        .ok_or_else(|| Decline::new("QLinearConcat: the axis attribute is required"))?;
    Ok(())
}

fn lower_concat(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 2)?;
    let axis = attr_int(node, "axis").or_invalid(node)?.unwrap_or(0);
    let n = node.inputs.len();
    let (ys, yz) = {
        let get = |i: usize| ctx.const_input(node, i);
        concat_params(dt, 0, &get).or_invalid(node)?
    };
    let mut parts = Vec::new();
    for t in (2..n).step_by(3) {
        let (xs, xz) = {
            let get = |i: usize| ctx.const_input(node, i);
            concat_params(dt, t + 1, &get).or_invalid(node)?
        };
        let x = ctx.input(node, t)?;
        if xs == ys && xz == yz {
            parts.push(x);
            continue;
        }
        let table = lookup_table(dt, (xs, xz, ys, yz), |v| v.to_vec()).or_invalid(node)?;
        parts.push(apply_table(ctx, x, dt, table)?);
    }
    let y = concat(ctx, parts, axis as i32, dt);
    ctx.finish(node, 0, y, dt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_rounds_half_even_and_saturates() {
        assert_eq!(mlas_quantize(2.5, 1.0, 0, 0, 255), 2);
        assert_eq!(mlas_quantize(3.5, 1.0, 0, 0, 255), 4);
        assert_eq!(mlas_quantize(-1.0, 1.0, 0, 0, 255), 0);
        assert_eq!(mlas_quantize(1000.0, 1.0, 3, -128, 127), 127);
        assert_eq!(mlas_quantize(f32::NAN, 1.0, 3, -128, 127), -128);
    }

    #[test]
    fn logistic_is_close_to_the_exact_one() {
        for fused in [false, true] {
            for i in -40..=40 {
                let x = i as f32 * 0.5;
                let want = 1.0 / (1.0 + (-x as f64).exp());
                assert!(
                    (mlas_logistic(x, fused) as f64 - want).abs() < 1e-6,
                    "x={x}"
                );
            }
        }
    }

    #[test]
    fn int8_table_is_in_offset_order() {
        let t = lookup_table(DataType::Int8, (1.0, 0, 1.0, 0), |v| v.to_vec()).unwrap();
        assert_eq!(t.bytes[0], (-128i8) as u8);
        assert_eq!(t.bytes[128], 0);
        assert_eq!(t.bytes[255], 127);
    }
}
