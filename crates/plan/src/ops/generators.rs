//! Generated tensors: EyeLike, HannWindow, HammingWindow, BlackmanWindow, AffineGrid.

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::host::HostArg;
use crate::kernel::{self, KernelAttrs};
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, FloatSource, ShapeSource, WindowKind, cosine_window};

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "EyeLike", 9, MAX, claim_eye_like, lower_eye_like);
    r.op("", "HannWindow", 17, MAX, claim_window, lower_window);
    r.op("", "HammingWindow", 17, MAX, claim_window, lower_window);
    r.op("", "BlackmanWindow", 17, MAX, claim_window, lower_window);
    r.op("", "AffineGrid", 20, MAX, claim_affine_grid, lower_affine_grid);
    r.kernel(WINDOW_KERNEL, window_kernel);
}

const WINDOW_KERNEL: &str = "cosine_window";

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
fn window_type_claimed(dt: DataType) -> bool {
    dt == DataType::Float || INTEGERS.contains(&dt)
}

fn claim_window(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, INDEX)?;
    let dt = window_dtype(node).or_decline()?;
    if !window_type_claimed(dt) {
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
    // Small constant windows become constants; larger ones are computed when the plan runs
    // (planning, done for every claim check too, stays cheap).
    if let ShapeSource::Static(v) = &size
        && let Some(&n) = v.first()
        && n <= 1 << 16
    {
        let t = cosine_window(kind, n, periodic, dt).or_invalid(node)?;
        ctx.fold(node, 0, t);
        return Ok(());
    }
    let size = match size {
        ShapeSource::Static(v) => HostArg::Const(TensorData::from_i64(vec![v.len() as i64], &v)),
        ShapeSource::Dynamic(s) => HostArg::Value(s),
    };
    let kind = match kind {
        WindowKind::Hann => 0,
        WindowKind::Hamming => 1,
        WindowKind::Blackman => 2,
    };
    let attrs = KernelAttrs::new()
        .int("kind", kind)
        .bool("periodic", periodic)
        .int("dtype", dt.to_onnx() as i64);
    let out = ctx.host_kernel(node, WINDOW_KERNEL, vec![size], attrs, &[dt])?;
    ctx.finish(node, 0, out[0], dt)
}

/// A window of a size known at run time: input 0 holds the size (its first element); attrs
/// `kind` (0 Hann, 1 Hamming, 2 Blackman), `periodic`, `dtype` ([`cosine_window`]).
fn window_kernel(
    inputs: &[Option<TensorData>],
    attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let size = kernel::i64s(kernel::input(inputs, 0)?)?;
    let n = *size.first().ok_or("window size is empty")?;
    let kind = match attrs.get_int("kind")? {
        0 => WindowKind::Hann,
        1 => WindowKind::Hamming,
        2 => WindowKind::Blackman,
        k => return Err(format!("unknown window kind {k}")),
    };
    let t = cosine_window(
        kind,
        n,
        attrs.get_bool("periodic")?,
        attrs.get_dtype("dtype")?,
    )?;
    Ok(vec![t])
}

// ---------------------------------------------------------------------------------------------
// AffineGrid.

/// The length of the `size` input (4: 2-D grid, 5: 3-D grid), when known.
fn size_len(ctx: &ClaimCtx, node: &Node) -> Option<i64> {
    let name = node.input(1)?;
    if let Some(t) = ctx.constant(name) {
        return t.dims.first().copied();
    }
    ctx.graph.value(name)?.fixed_shape()?.first().copied()
}

fn claim_affine_grid(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, &[DataType::Float])?;
    ctx.expect_dtype(node, 1, &[DataType::Int64])?;
    match size_len(ctx, node) {
        Some(4) | Some(5) => Ok(()),
        Some(n) => decline!("AffineGrid: a size of {n} values is invalid (4 or 5)"),
        None => decline!("AffineGrid: the length of size must be known"),
    }
}

/// ORT's float32 grid: per axis Eigen's `LinSpaced(n, -1, 1)` (`-1 + i * (2 / (n - 1))`, the
/// last exactly 1; `1` alone for `n = 1`), scaled by `(n - 1) / n` unless `align_corners`; then
/// `theta[:, :, :d] @ base + theta[:, :, d]`, accumulated left to right.
fn lower_affine_grid(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    const F: DataType = DataType::Float;
    const I: DataType = DataType::Int64;
    let align = attr_int(node, "align_corners")
        .or_invalid(node)?
        .unwrap_or(0)
        != 0;
    let d = match ctx
        .input_fixed_shape(node, 1)
        .and_then(|s| s.first().copied())
    {
        Some(4) => 2usize,
        Some(5) => 3,
        _ => match ctx.const_input(node, 1).map(|t| t.dims.first().copied()) {
            Some(Some(4)) => 2,
            Some(Some(5)) => 3,
            _ => crate::plan::invalid!(node, "the length of size is unknown"),
        },
    };
    let theta = ctx.input(node, 0)?;
    let size = ctx.input(node, 1)?;
    let one = ctx.scalar(F, 1.0)?;
    let minus_one = ctx.scalar(F, -1.0)?;
    let two = ctx.scalar(F, 2.0)?;
    let one_i = ctx.scalar(I, 1.0)?;
    // Base coordinates, innermost axis first (x over W, y over H, z over D), each shaped to
    // broadcast over [N, *spatial].
    let mut base = Vec::with_capacity(d);
    for j in 0..d {
        let n = ctx.pick(size, (d + 1 - j) as i64, 0, I);
        let pos = ctx.temp(I);
        ctx.push(Step::Arange {
            start: FloatSource::Static(vec![0.0]),
            limit: FloatSource::Dynamic(n),
            delta: FloatSource::Static(vec![1.0]),
            dtype: I,
            out: pos,
        });
        let last = ctx.binary(B::Subtract, n, one_i, I);
        let is_last = ctx.binary(B::Equal, pos, last, I);
        let posf = ctx.cast(pos, I, F);
        let lastf = ctx.cast(last, I, F);
        let nf = ctx.cast(n, I, F);
        let step = ctx.binary(B::Divide, two, lastf, F);
        let t = ctx.binary(B::Multiply, posf, step, F);
        let v = ctx.binary(B::Add, minus_one, t, F);
        let mut v = {
            let out = ctx.temp(F);
            ctx.push(Step::Where {
                cond: is_last,
                x: one,
                y: v,
                out,
            });
            out
        };
        if !align {
            let scaled = ctx.binary(B::Multiply, v, lastf, F);
            v = ctx.binary(B::Divide, scaled, nf, F);
        }
        // [n] -> [1, .., n, .., 1] at spatial position d - 1 - j of [N, *spatial].
        let at = 1 + (d - 1 - j);
        let axes: Vec<i64> = (0..=d as i64).filter(|&a| a != at as i64).collect();
        base.push(ctx.unsqueeze(v, axes, F));
    }
    // theta [N, d, d + 1] -> coefficients [N, 1, .., 1].
    let unit: Vec<i64> = (1..=d as i64).collect();
    let mut coords = Vec::with_capacity(d);
    for row in 0..d {
        let r = ctx.pick(theta, row as i64, 1, F);
        let coef = |ctx: &mut LowerCtx, k: usize| {
            let c = ctx.pick(r, k as i64, 1, F);
            ctx.unsqueeze(c, unit.clone(), F)
        };
        let mut acc = {
            let c0 = coef(ctx, 0);
            ctx.binary(B::Multiply, c0, base[0], F)
        };
        for (k, &b) in base.iter().enumerate().skip(1) {
            let ck = coef(ctx, k);
            let t = ctx.binary(B::Multiply, ck, b, F);
            acc = ctx.binary(B::Add, acc, t, F);
        }
        let shift = coef(ctx, d);
        let v = ctx.binary(B::Add, acc, shift, F);
        coords.push(ctx.unsqueeze(v, vec![d as i64 + 1], F));
    }
    let out = ctx.temp(F);
    ctx.push(Step::Concat {
        inputs: coords,
        axis: d as i32 + 1,
        out,
    });
    ctx.finish(node, 0, out, F)
}
