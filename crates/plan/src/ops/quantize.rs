//! Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.
//!
//! Integer quantized types (int8, uint8, int16, uint16, and int4, uint4, int2, uint2, which
//! the runtime holds one value per byte; int32 for DequantizeLinear's input) and the float8
//! types and float4 e2m1 (with a zero point that is absent or a constant zero, as ONNX requires;
//! converted as Cast does, see `bits`). Arithmetic follows ORT's CPU kernels, in float32:
//!
//! - `DequantizeLinear`: `y = float(int32(x) - int32(zero_point)) * scale`;
//! - `QuantizeLinear`: `y = saturate(round_half_even(x / scale) + zero_point)`;
//! - `DynamicQuantizeLinear`: `rmin = min(0, min(x))`, `rmax = max(0, max(x))`,
//!   `scale = (rmax - rmin) / 255` (1 when `rmax == rmin`, as ORT), `zero_point =
//!   round_half_even(clamp(-rmin / scale, 0, 255))`, then `QuantizeLinear` to uint8.
//!
//! Scales and zero points are per tensor (scalars), per axis (1-D along `axis`) or blocked
//! (`block_size`: the same rank as the input, `ceil(d / block_size)` along `axis`; the dim
//! must be known at plan time).

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::plan::invalid;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, ReduceAxes, ReduceOp, ReshapeTarget, ShapeSource, UnaryOp as U};

/// Registers the quantization family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "QuantizeLinear", 10, MAX, claim_quantize, lower_quantize)
        .notes("8/16/4/2-bit integer, float8 and float4 e2m1 outputs; float32 input and scale");
    r.op("", "DequantizeLinear", 10, MAX, claim_dequantize, lower_dequantize)
        .notes("8/16/32/4/2-bit integer, float8 and float4 e2m1 inputs");
    r.op("", "DynamicQuantizeLinear", 11, MAX, claim_dynamic, lower_dynamic);
}

/// Quantized integer types and their ranges.
fn q_range(dt: DataType) -> Option<(f64, f64)> {
    Some(match dt {
        DataType::Int8 => (-128.0, 127.0),
        DataType::Uint8 => (0.0, 255.0),
        DataType::Int16 => (-32768.0, 32767.0),
        DataType::Uint16 => (0.0, 65535.0),
        // held one value per byte (the runtime packs and unpacks)
        DataType::Int4 => (-8.0, 7.0),
        DataType::Uint4 => (0.0, 15.0),
        DataType::Int2 => (-2.0, 1.0),
        DataType::Uint2 => (0.0, 3.0),
        _ => return None,
    })
}

/// The `output_dtype` attribute, when set (0 means "from the other inputs").
fn output_dtype(node: &Node) -> Result<Option<DataType>, String> {
    match attr_int(node, "output_dtype")? {
        None | Some(0) => Ok(None),
        Some(v) => DataType::from_onnx(v as i32)
            .map(Some)
            .ok_or_else(|| format!("{}: unknown output_dtype {v}", node.op_type)),
    }
}

/// Checks the layout of a scale (or zero point) input `i` against input 0: a scalar (or
/// one-element 1-D), per axis, or blocked.
fn claim_layout(ctx: &ClaimCtx, node: &Node, i: usize) -> Result<(), Decline> {
    let Some(name) = node.input(i) else {
        return Ok(());
    };
    let block = attr_int(node, "block_size").or_decline()?.unwrap_or(0);
    let srank = ctx.rank(name);
    if block == 0 && matches!(srank, Some(0)) {
        return Ok(());
    }
    let xrank = ctx.expect_rank(node, 0)?;
    if block > 0 {
        let axis = norm_axis(node, xrank).or_decline()?;
        let dims = ctx
            .graph
            .value(node.input(0).unwrap_or(""))
            .and_then(|v| v.fixed_shape());
        match dims {
            Some(d) if d.get(axis).is_some() => {}
            _ => decline!(
                "{}: blocked quantization needs the input's dims known at plan time",
                node.op_type
            ),
        }
        if srank != Some(xrank) {
            decline!(
                "{}: a blocked scale must have the input's rank",
                node.op_type
            );
        }
        return Ok(());
    }
    if srank != Some(1) {
        decline!(
            "{}: input {i} must be a scalar or 1-D (its rank is {})",
            node.op_type,
            srank.map_or("unknown".to_string(), |r| r.to_string())
        );
    }
    Ok(())
}

fn norm_axis(node: &Node, rank: usize) -> Result<usize, String> {
    let axis = attr_int(node, "axis")?.unwrap_or(1);
    crate::step::normalize_axis(axis, rank)
}

pub(crate) fn claim_quantize(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, &[DataType::Float])?;
    ctx.expect_dtype(node, 1, &[DataType::Float])?;
    let q = match (node.input(2), output_dtype(node).or_decline()?) {
        (_, Some(dt)) => dt,
        (Some(zp), None) => ctx
            .dtype(zp)
            .ok_or_else(|| Decline::new("QuantizeLinear: the zero point's type is unknown"))?,
        (None, None) => DataType::Uint8,
    };
    if let Some(zp) = node.input(2)
        && ctx.dtype(zp) != Some(q)
    {
        decline!("QuantizeLinear: the zero point's type differs from output_dtype");
    }
    if attr_int(node, "precision").or_decline()?.unwrap_or(0) != 0 {
        decline!("QuantizeLinear: the precision attribute is not claimed");
    }
    if crate::ops::bits::Float8::of(q).is_some() {
        return claim_float8_zero_point(ctx, node).and_then(|()| claim_layout(ctx, node, 1));
    }
    if q_range(q).is_none() {
        decline!(
            "QuantizeLinear: quantizing to {q} is not claimed (8- and 16-bit, 4-bit and 2-bit integers and float8 are){}",
            crate::registry::dtype_note(q)
        );
    }
    claim_layout(ctx, node, 1)?;
    claim_layout(ctx, node, 2)
}

pub(crate) fn claim_dequantize(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let x = ctx.expect_dtype(
        node,
        0,
        &[
            DataType::Int8,
            DataType::Uint8,
            DataType::Int16,
            DataType::Uint16,
            DataType::Int32,
            DataType::Int4,
            DataType::Uint4,
            DataType::Int2,
            DataType::Uint2,
            DataType::Float8E4M3FN,
            DataType::Float8E4M3FNUZ,
            DataType::Float8E5M2,
            DataType::Float8E5M2FNUZ,
            DataType::Float4E2M1,
        ],
    )?;
    let float8 = crate::ops::bits::Float8::of(x).is_some();
    if float8 {
        claim_float8_zero_point(ctx, node)?;
    }
    let scale = ctx.expect_dtype(node, 1, FLOATS)?;
    if let Some(zp) = node.input(2)
        && ctx.dtype(zp) != Some(x)
    {
        decline!("DequantizeLinear: the zero point's type differs from the input's");
    }
    match output_dtype(node).or_decline()? {
        None => {}
        Some(out) if out == scale => {}
        Some(other) => {
            decline!("DequantizeLinear: output_dtype {other} differs from the scale's type")
        }
    }
    claim_layout(ctx, node, 1)?;
    if float8 {
        // a float8 zero point is zero, whatever its layout
        return Ok(());
    }
    claim_layout(ctx, node, 2)
}

/// A float8 zero point must be zero (ORT's kernels fail otherwise; ONNX ignores it): a
/// constant one is checked here, one known only at run time by a run-time requirement.
fn claim_float8_zero_point(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let Some(zp) = node.input(2) else {
        return Ok(());
    };
    match ctx.constant(zp) {
        Some(t) if !t.bytes.iter().all(|&b| b == 0) => {
            decline!("{}: a float8 zero point must be zero", node.op_type)
        }
        _ => Ok(()),
    }
}

/// Fails the run, as ORT's kernels do, unless a run-time float8 zero point is all zero codes.
fn require_float8_zero_point(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    if node.input(2).is_none() || ctx.const_input(node, 2).is_some() {
        return Ok(());
    }
    let dt = ctx.input_dtype(node, 2)?;
    let zp = ctx.input(node, 2)?;
    let codes = ctx.cast(zp, dt, DataType::Uint8);
    let zero = ctx.scalar(DataType::Uint8, 0.0)?;
    let ok = ctx.binary(B::Equal, codes, zero, DataType::Uint8);
    ctx.require(ok, "a float8 zero point must be zero");
    Ok(())
}

fn claim_dynamic(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, &[DataType::Float]).map(|_| ())
}

/// Input `i` (a scale or zero point) cast to `dt` and laid out to broadcast against input 0.
fn broadcastable(
    ctx: &mut LowerCtx,
    node: &Node,
    i: usize,
    dt: DataType,
) -> Result<Option<Slot>, PlanError> {
    let Some(name) = node.input(i) else {
        return Ok(None);
    };
    let from = ctx.input_dtype(node, i)?;
    let s = ctx.input(node, i)?;
    let s = ctx.cast(s, from, dt);
    let srank = ctx.shape_of(name).map(|s| s.len());
    let block = attr_int(node, "block_size").or_invalid(node)?.unwrap_or(0);
    if block == 0 && srank == Some(0) {
        return Ok(Some(s));
    }
    let xrank = ctx.need_rank(node, 0)?;
    let axis = norm_axis(node, xrank).or_invalid(node)?;
    if block > 0 {
        let Some(d) = ctx
            .input_fixed_shape(node, 0)
            .and_then(|d| d.get(axis).copied())
        else {
            invalid!(node, "blocked quantization needs the input dims");
        };
        // repeat each block's value over its block: take index i / block along the axis
        let idx: Vec<i64> = (0..d).map(|j| j / block).collect();
        let bytes = idx
            .iter()
            .flat_map(|v| (*v as i32).to_le_bytes())
            .collect::<Vec<u8>>();
        let t = TensorData::new(DataType::Int32, vec![d], bytes).or_invalid(node)?;
        let indices = ctx.constant(t);
        let out = ctx.temp(dt);
        ctx.push(Step::Take {
            x: s,
            indices,
            axis: axis as i32,
            out,
        });
        return Ok(Some(out));
    }
    // 1-D along `axis`: [d] -> [d, 1, ..., 1]; a one-element 1-D needs nothing when axis
    // is the last (it broadcasts either way, but keep the rule uniform)
    let trailing = xrank - 1 - axis;
    if trailing == 0 {
        return Ok(Some(s));
    }
    let out = ctx.temp(dt);
    ctx.push(Step::Reshape {
        x: s,
        target: ReshapeTarget::Unsqueeze {
            axes: ShapeSource::Static((1..=trailing as i64).collect()),
        },
        out,
    });
    Ok(Some(out))
}

/// `saturate(round(x / scale) + zero_point)` in float32, cast to `q`.
fn quantize_f32(
    ctx: &mut LowerCtx,
    x: Slot,
    scale: Slot,
    zero_point: Option<Slot>,
    q: DataType,
) -> Result<Slot, PlanError> {
    let f = DataType::Float;
    let (lo, hi) = q_range(q).unwrap_or((0.0, 255.0));
    let d = ctx.binary(B::Divide, x, scale, f);
    let mut r = ctx.unary(U::Round, d, f);
    if let Some(zp) = zero_point {
        r = ctx.binary(B::Add, r, zp, f);
    }
    let lo = ctx.scalar(f, lo)?;
    let hi = ctx.scalar(f, hi)?;
    let r = ctx.binary(B::Maximum, r, lo, f);
    let r = ctx.binary(B::Minimum, r, hi, f);
    Ok(ctx.cast(r, f, q))
}

pub(crate) fn lower_quantize(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let f = DataType::Float;
    let q = match (output_dtype(node).or_invalid(node)?, node.input(2)) {
        (Some(dt), _) => dt,
        (None, Some(_)) => ctx.input_dtype(node, 2)?,
        (None, None) => DataType::Uint8,
    };
    let x = ctx.input(node, 0)?;
    let scale = broadcastable(ctx, node, 1, f)?.expect("scale is required");
    if crate::ops::bits::Float8::of(q).is_some() {
        // x / scale converted as Cast does (the zero point is zero)
        let saturate = attr_int(node, "saturate").or_invalid(node)?.unwrap_or(1) != 0;
        require_float8_zero_point(ctx, node)?;
        let d = ctx.binary(B::Divide, x, scale, f);
        let y = crate::ops::bits::f32_to_float8(ctx, d, q, saturate)?;
        return ctx.finish(node, 0, y, q);
    }
    let zp = broadcastable(ctx, node, 2, f)?;
    let y = quantize_f32(ctx, x, scale, zp, q)?;
    ctx.finish(node, 0, y, q)
}

/// `float(x - zero_point) * float(scale)` in float32, rounded once to the scale's type.
pub(crate) fn lower_dequantize(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let f = DataType::Float;
    let xdt = ctx.input_dtype(node, 0)?;
    let out_dt = ctx.input_dtype(node, 1)?;
    let x = ctx.input(node, 0)?;
    let xf = if crate::ops::bits::Float8::of(xdt).is_some() {
        // the zero point is zero
        require_float8_zero_point(ctx, node)?;
        crate::ops::bits::float8_to_f32(ctx, x, xdt)?
    } else {
        let mut xi = ctx.cast(x, xdt, DataType::Int32);
        if let Some(zp) = broadcastable(ctx, node, 2, DataType::Int32)? {
            xi = ctx.binary(B::Subtract, xi, zp, DataType::Int32);
        }
        ctx.cast(xi, DataType::Int32, f)
    };
    let scale = broadcastable(ctx, node, 1, f)?.expect("scale is required");
    let y = ctx.binary(B::Multiply, xf, scale, f);
    let y = ctx.cast(y, f, out_dt);
    ctx.finish(node, 0, y, out_dt)
}

/// DynamicQuantizeLinear of the float32 `x`: `(y, scale, zero_point)`, `y` uint8 and the zero
/// point as a float32 scalar holding an integer in [0, 255].
pub(crate) fn dynamic_quantize(
    ctx: &mut LowerCtx,
    x: Slot,
) -> Result<(Slot, Slot, Slot), PlanError> {
    let f = DataType::Float;
    let reduce = |ctx: &mut LowerCtx, op: ReduceOp| {
        let out = ctx.temp(f);
        ctx.push(Step::Reduce {
            op,
            x,
            axes: ReduceAxes::All,
            keepdims: false,
            out,
        });
        out
    };
    let zero = ctx.scalar(f, 0.0)?;
    let one = ctx.scalar(f, 1.0)?;
    let qmax = ctx.scalar(f, 255.0)?;
    let mn = reduce(ctx, ReduceOp::Min);
    let mx = reduce(ctx, ReduceOp::Max);
    let rmin = ctx.binary(B::Minimum, mn, zero, f);
    let rmax = ctx.binary(B::Maximum, mx, zero, f);
    let span = ctx.binary(B::Subtract, rmax, rmin, f);
    let scale = ctx.binary(B::Divide, span, qmax, f);
    let flat = ctx.binary(B::Equal, rmax, rmin, f);
    let scale = {
        let out = ctx.temp(f);
        ctx.push(Step::Where {
            cond: flat,
            x: one,
            y: scale,
            out,
        });
        out
    };
    // zero point: round(clamp(0 - rmin / scale, 0, 255))
    let m = ctx.binary(B::Divide, rmin, scale, f);
    let izp = ctx.binary(B::Subtract, zero, m, f);
    let izp = ctx.binary(B::Maximum, izp, zero, f);
    let izp = ctx.binary(B::Minimum, izp, qmax, f);
    let zpf = ctx.unary(U::Round, izp, f);
    let y = quantize_f32(ctx, x, scale, Some(zpf), DataType::Uint8)?;
    Ok((y, scale, zpf))
}

fn lower_dynamic(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let f = DataType::Float;
    let x = ctx.input(node, 0)?;
    let (y, scale, zpf) = dynamic_quantize(ctx, x)?;
    let zp = ctx.cast(zpf, f, DataType::Uint8);
    ctx.finish(node, 0, y, DataType::Uint8)?;
    ctx.finish(node, 1, scale, f)?;
    ctx.finish(node, 2, zp, DataType::Uint8)
}
