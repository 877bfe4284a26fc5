//! Generated tensors: EyeLike, HannWindow, HammingWindow, BlackmanWindow.

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, ShapeSource, WindowKind, cosine_window};

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "EyeLike", 9, MAX, claim_eye_like, lower_eye_like);
    r.op("", "HannWindow", 17, MAX, claim_window, lower_window);
    r.op("", "HammingWindow", 17, MAX, claim_window, lower_window);
    r.op("", "BlackmanWindow", 17, MAX, claim_window, lower_window);
}

fn eye_dtype(node: &Node, input: DataType) -> Result<DataType, String> {
    match attr_int(node, "dtype")? {
        None => Ok(input),
        Some(v) => {
            DataType::from_onnx(v as i32).ok_or_else(|| format!("EyeLike: unknown dtype {v}"))
        }
    }
}

fn claim_eye_like(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, 0, DATA)?;
    let out = eye_dtype(node, dt).or_decline()?;
    let f64_ok = out == DataType::Double && crate::registry::float64_claimed(node);
    if !DATA.contains(&out) && !f64_ok {
        decline!(
            "EyeLike: output type {out} is not claimed{}",
            crate::registry::dtype_note(out)
        );
    }
    if let Some(r) = ctx.rank(node.input(0).unwrap_or(""))
        && r != 2
    {
        decline!("EyeLike: input rank {r} is not 2");
    }
    attr_int(node, "k").or_decline()?;
    Ok(())
}

/// Ones where `col - row == k`: positions compared, then cast to the output type.
fn lower_eye_like(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let out_dt = eye_dtype(node, dt).or_invalid(node)?;
    let k = attr_int(node, "k").or_invalid(node)?.unwrap_or(0);
    let x = ctx.input(node, 0)?;
    let rows = ctx.iota_along(x, 0, 2, 0);
    let cols = ctx.iota_along(x, 1, 2, 1);
    let diag = ctx.binary(B::Subtract, cols, rows, DataType::Int64);
    let kk = ctx.scalar(DataType::Int64, k as f64)?;
    let hit = ctx.binary(B::Equal, diag, kk, DataType::Int64);
    let out = ctx.cast(hit, DataType::Bool, out_dt);
    ctx.finish(node, 0, out, out_dt)
}

fn window_kind(node: &Node) -> WindowKind {
    match node.op_type.as_str() {
        "HammingWindow" => WindowKind::Hamming,
        "BlackmanWindow" => WindowKind::Blackman,
        _ => WindowKind::Hann,
    }
}

fn window_dtype(node: &Node) -> Result<DataType, String> {
    let v = attr_int(node, "output_datatype")?.unwrap_or(1);
    DataType::from_onnx(v as i32)
        .ok_or_else(|| format!("{}: unknown output_datatype {v}", node.op_type))
}

/// Integer outputs truncate, float32 rounds once from ORT's double values; half types would
/// round twice, so they are not claimed.
const WINDOW_TYPES: &[DataType] = &[
    DataType::Float,
    DataType::Int8,
    DataType::Int16,
    DataType::Int32,
    DataType::Int64,
    DataType::Uint8,
    DataType::Uint16,
    DataType::Uint32,
    DataType::Uint64,
];

fn claim_window(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, INDEX)?;
    let dt = window_dtype(node).or_decline()?;
    if !WINDOW_TYPES.contains(&dt) {
        decline!(
            "{}: output_datatype {dt} is not claimed{}",
            node.op_type,
            crate::registry::dtype_note(dt)
        );
    }
    Ok(())
}

/// Folded at plan time when the size is known, else computed on the host at run time.
fn lower_window(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = window_dtype(node).or_invalid(node)?;
    let periodic = attr_int(node, "periodic").or_invalid(node)?.unwrap_or(1) != 0;
    let kind = window_kind(node);
    let size = ctx.ints_input(node, 0)?;
    if let ShapeSource::Static(v) = &size
        && let Some(&n) = v.first()
    {
        let t = cosine_window(kind, n, periodic, dt).or_invalid(node)?;
        ctx.fold(node, 0, t);
        return Ok(());
    }
    let out = ctx.temp(dt);
    ctx.push(Step::Window {
        kind,
        size,
        periodic,
        dtype: dt,
        out,
    });
    ctx.finish(node, 0, out, dt)
}
