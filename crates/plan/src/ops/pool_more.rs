//! More pooling: LpPool, GlobalLpPool, MaxUnpool, and MaxPool's Indices output.

use onnx_ir::{DataType, Node};

use super::nn::{pool_spec, spatial_attr};
use super::*;
use crate::decline;
use crate::plan::invalid;
use crate::registry::ClaimCtx;
use crate::step::{
    AutoPad, BinaryOp as B, PadMode, PadSpec, PoolSpec, ReduceAxes, ReduceOp, ReshapeTarget,
    ScatterOp, ShapeSource, UnaryOp as U, WindowSpec,
};

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "LpPool", 2, MAX, claim_lp_pool, lower_lp_pool);
    r.op("", "GlobalLpPool", 2, MAX, claim_global_lp_pool, lower_global_lp_pool);
    r.op("", "MaxUnpool", 9, MAX, claim_max_unpool, lower_max_unpool);
}

fn p_attr(node: &Node) -> Result<i64, String> {
    let p = attr_int(node, "p")?.unwrap_or(2);
    if p < 1 {
        return Err(format!("{}: p={p} is not claimed", node.op_type));
    }
    Ok(p)
}

/// LpPool's spec: `dilations` and `ceil_mode` exist from opset 18.
fn lp_pool_spec(opset: i64, node: &Node) -> Result<PoolSpec, String> {
    let mut spec = pool_spec(opset, node)?;
    let d = spec.kernel.len();
    spec.dilations = if opset >= 18 {
        spatial_attr(node, "dilations", d)?
    } else {
        vec![1; d]
    };
    spec.ceil_mode = opset >= 18 && attr_int(node, "ceil_mode")?.unwrap_or(0) != 0;
    spec.count_include_pad = false;
    Ok(spec)
}

fn claim_lp_pool(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, FLOATS)?;
    p_attr(node).or_decline()?;
    let spec = lp_pool_spec(ctx.opset, node).or_decline()?;
    if let Some(r) = ctx.rank(node.input(0).unwrap_or(""))
        && r != spec.kernel.len() + 2
    {
        decline!(
            "LpPool: input rank {r} does not match kernel_shape {:?}",
            spec.kernel
        );
    }
    Ok(())
}

/// `|x|^p` as ORT computes it (a square for p = 2, in the compute dtype).
fn abs_pow(ctx: &mut LowerCtx, x: Slot, p: i64, dt: DataType) -> Result<Slot, PlanError> {
    Ok(match p {
        1 => ctx.unary(U::Abs, x, dt),
        2 => ctx.unary(U::Square, x, dt),
        _ => {
            let a = ctx.unary(U::Abs, x, dt);
            let e = ctx.scalar(dt, p as f64)?;
            ctx.binary(B::Power, a, e, dt)
        }
    })
}

/// `s^(1/p)` with the exponent `1.0f / p` (float32), as ORT computes it.
fn root(ctx: &mut LowerCtx, s: Slot, p: i64, dt: DataType) -> Result<Slot, PlanError> {
    if p == 1 {
        return Ok(s);
    }
    let e = ctx.scalar(dt, (1.0f32 / p as f32) as f64)?;
    Ok(ctx.binary(B::Power, s, e, dt))
}

fn lower_lp_pool(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let cdt = compute_dtype(dt);
    let p = p_attr(node).or_invalid(node)?;
    let spec = lp_pool_spec(ctx.opset(), node).or_invalid(node)?;
    let d = spec.kernel.len();
    let x0 = ctx.input(node, 0)?;
    let x = ctx.cast(x0, dt, cdt);
    let powered = abs_pow(ctx, x, p, cdt)?;
    let spatial: Option<Vec<i64>> = ctx
        .input_fixed_shape(node, 0)
        .map(|s| s[s.len().saturating_sub(d)..].to_vec());
    let pads = match &spatial {
        Some(s) => {
            let g = spec.geometry(s).or_invalid(node)?;
            if g.pad_lo.iter().chain(&g.pad_hi).all(|&v| v == 0) {
                None
            } else {
                Some(PadSpec::Static {
                    axes: (2..2 + d as i32).collect(),
                    lo: g.pad_lo.iter().map(|&v| v as i32).collect(),
                    hi: g.pad_hi.iter().map(|&v| v as i32).collect(),
                })
            }
        }
        None => {
            let zero_pads = !spec.ceil_mode
                && matches!(&spec.padding, AutoPad::Explicit { lo, hi }
                    if lo.iter().chain(hi).all(|&v| v == 0));
            (!zero_pads).then(|| PadSpec::Pool(spec.clone()))
        }
    };
    let padded = match pads {
        None => powered,
        Some(pads) => {
            let value = ctx.scalar(cdt, 0.0)?;
            let out = ctx.temp(cdt);
            ctx.push(Step::Pad {
                x: powered,
                pads,
                mode: PadMode::Constant,
                value,
                out,
            });
            out
        }
    };
    let windows = ctx.temp(cdt);
    ctx.push(Step::Windows {
        x: padded,
        spec: WindowSpec {
            kernel: spec.kernel.clone(),
            strides: spec.strides.clone(),
            dilations: spec.dilations.clone(),
        },
        out: windows,
    });
    let sum = ctx.temp(cdt);
    ctx.push(Step::Reduce {
        op: ReduceOp::Sum,
        x: windows,
        axes: ReduceAxes::Static((2 + d as i64..2 + 2 * d as i64).collect()),
        keepdims: false,
        out: sum,
    });
    let y = root(ctx, sum, p, cdt)?;
    let y = ctx.cast(y, cdt, dt);
    ctx.finish(node, 0, y, dt)
}

fn claim_global_lp_pool(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, FLOATS)?;
    p_attr(node).or_decline()?;
    let r = ctx.expect_rank(node, 0)?;
    if r < 3 {
        decline!("GlobalLpPool: input rank {r} is below 3");
    }
    Ok(())
}

fn lower_global_lp_pool(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let cdt = compute_dtype(dt);
    let p = p_attr(node).or_invalid(node)?;
    let r = ctx.need_rank(node, 0)?;
    let x0 = ctx.input(node, 0)?;
    let x = ctx.cast(x0, dt, cdt);
    let powered = abs_pow(ctx, x, p, cdt)?;
    let sum = ctx.temp(cdt);
    ctx.push(Step::Reduce {
        op: ReduceOp::Sum,
        x: powered,
        axes: ReduceAxes::Static((2..r as i64).collect()),
        keepdims: true,
        out: sum,
    });
    let y = root(ctx, sum, p, cdt)?;
    let y = ctx.cast(y, cdt, dt);
    ctx.finish(node, 0, y, dt)
}

// ---------------------------------------------------------------------------------------------
// MaxUnpool.

/// The output shape of a MaxUnpool over an input of `shape` without `output_shape`:
/// `(in - 1) * stride - pad_lo - pad_hi + kernel` per spatial dim.
pub(crate) fn unpool_shape(node: &Node, shape: &[i64]) -> Result<Vec<i64>, String> {
    let kernel = attr_ints(node, "kernel_shape")?
        .ok_or_else(|| "MaxUnpool: kernel_shape is missing".to_string())?;
    let d = kernel.len();
    if shape.len() != d + 2 {
        return Err(format!(
            "MaxUnpool: input {shape:?} does not match kernel {kernel:?}"
        ));
    }
    let strides = spatial_attr(node, "strides", d)?;
    let pads = attr_ints(node, "pads")?.unwrap_or_else(|| vec![0; 2 * d]);
    if pads.len() != 2 * d {
        return Err(format!(
            "MaxUnpool: pads {pads:?} do not match {d} spatial dims"
        ));
    }
    let mut out = shape[..2].to_vec();
    for i in 0..d {
        out.push((shape[2 + i] - 1) * strides[i] - pads[i] - pads[d + i] + kernel[i]);
    }
    Ok(out)
}

fn claim_max_unpool(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, FLOATS)?;
    ctx.expect_dtype(node, 1, &[DataType::Int64])?;
    if node.input(2).is_some() {
        ctx.expect_dtype(node, 2, &[DataType::Int64])?;
    } else {
        let x = node.input(0).unwrap_or("");
        let Some(shape) = ctx.graph.value(x).and_then(|v| v.fixed_shape()) else {
            decline!("MaxUnpool: the input shape must be fixed (or output_shape given)");
        };
        unpool_shape(node, &shape).or_decline()?;
    }
    Ok(())
}

/// Zeros of the output shape with `x` scattered at the flat positions `indices` (which
/// MaxPool computes over the whole tensor, batch and channels included).
fn lower_max_unpool(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let shape = if node.input(2).is_some() {
        ctx.ints_input(node, 2)?
    } else {
        match ctx.input_fixed_shape(node, 0) {
            Some(s) => ShapeSource::Static(unpool_shape(node, &s).or_invalid(node)?),
            None => invalid!(node, "the output shape is unknown"),
        }
    };
    let x = ctx.input(node, 0)?;
    let indices = ctx.input(node, 1)?;
    let zero = ctx.scalar(dt, 0.0)?;
    let zeros = ctx.temp(dt);
    ctx.push(Step::Full {
        shape: shape.clone(),
        value: zero,
        dtype: dt,
        out: zeros,
    });
    let flat = |ctx: &mut LowerCtx, v: Slot, dims: Vec<i64>, t: DataType| {
        let out = ctx.temp(t);
        ctx.push(Step::Reshape {
            x: v,
            target: ReshapeTarget::Onnx {
                shape: ShapeSource::Static(dims),
                allowzero: false,
            },
            out,
        });
        out
    };
    let base = flat(ctx, zeros, vec![-1], dt);
    let idx = flat(ctx, indices, vec![-1], DataType::Int64);
    let updates = flat(ctx, x, vec![-1, 1], dt);
    let scattered = ctx.temp(dt);
    ctx.push(Step::Scatter {
        op: ScatterOp::Assign,
        x: base,
        indices: vec![idx],
        updates,
        axes: vec![0],
        out: scattered,
    });
    let out = ctx.temp(dt);
    ctx.push(Step::Reshape {
        x: scattered,
        target: ReshapeTarget::Like(zeros),
        out,
    });
    ctx.finish(node, 0, out, dt)
}

// ---------------------------------------------------------------------------------------------
// MaxPool Indices.

fn storage_order(node: &Node) -> Result<bool, String> {
    match attr_int(node, "storage_order")?.unwrap_or(0) {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(format!("MaxPool: storage_order {v} is invalid")),
    }
}

/// MaxPool's Indices output needs the low padding at plan time (explicit pads, or an input
/// whose spatial dims are fixed).
pub(crate) fn claim_max_pool_indices(
    ctx: &ClaimCtx,
    node: &Node,
    spec: &PoolSpec,
) -> Result<(), Decline> {
    storage_order(node).or_decline()?;
    if !matches!(spec.padding, AutoPad::Explicit { .. }) {
        let fixed = node
            .input(0)
            .and_then(|x| ctx.graph.value(x))
            .and_then(|v| v.fixed_shape())
            .is_some();
        if !fixed {
            decline!("MaxPool: Indices with auto_pad need the input's spatial dims");
        }
    }
    Ok(())
}

/// The flat input position of each window's first maximum: `(n * C + c) * S + spatial`, the
/// spatial offset row-major (`storage_order` 0) or column-major (1), as ORT computes it.
pub(crate) fn lower_max_pool_indices(
    ctx: &mut LowerCtx,
    node: &Node,
    spec: &PoolSpec,
    x: Slot,
    windows: Slot,
    pad_lo: Option<Vec<i64>>,
) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let d = spec.kernel.len();
    let r = d + 2;
    let pad_lo = match (pad_lo, &spec.padding) {
        (Some(p), _) => p,
        (None, AutoPad::Explicit { lo, .. }) => lo.clone(),
        _ => invalid!(node, "the padding of MaxPool Indices is unknown"),
    };
    let column_major = storage_order(node).or_invalid(node)?;
    // [N, C, *out, *kernel] -> [N, C, *out, K] -> first argmax over K.
    let mut rules: Vec<crate::step::DimRule> = (0..r).map(crate::step::DimRule::copy).collect();
    rules.push(crate::step::DimRule::product(
        &(r..r + d).collect::<Vec<_>>(),
    ));
    let flat = ctx.temp(dt);
    ctx.push(Step::Reshape {
        x: windows,
        target: ReshapeTarget::Dims(rules),
        out: flat,
    });
    let j = ctx.temp(DataType::Uint32);
    ctx.push(Step::ArgReduce {
        op: crate::step::ArgReduceOp::ArgMax,
        x: flat,
        axis: r as i32,
        keepdims: false,
        out: j,
    });
    let j = ctx.cast(j, DataType::Uint32, DataType::Int64);
    let i64s = |ctx: &mut LowerCtx, v: i64| ctx.scalar(DataType::Int64, v as f64);
    let mut pos = Vec::with_capacity(d);
    let mut lens = Vec::with_capacity(d);
    for (i, &lo_i) in pad_lo.iter().enumerate().take(d) {
        let inner: i64 = spec.kernel[i + 1..].iter().product();
        let div = i64s(ctx, inner)?;
        let k = i64s(ctx, spec.kernel[i])?;
        let q = ctx.binary(B::FloorDivide, j, div, DataType::Int64);
        let ki = ctx.binary(B::Remainder, q, k, DataType::Int64);
        let o = ctx.iota_along(j, (2 + i) as i32, r, 2 + i);
        let s = i64s(ctx, spec.strides[i])?;
        let dil = i64s(ctx, spec.dilations[i])?;
        let lo = i64s(ctx, lo_i)?;
        let os = ctx.binary(B::Multiply, o, s, DataType::Int64);
        let start = ctx.binary(B::Subtract, os, lo, DataType::Int64);
        let kd = ctx.binary(B::Multiply, ki, dil, DataType::Int64);
        pos.push(ctx.binary(B::Add, start, kd, DataType::Int64));
        lens.push(ctx.dim_of(x, 2 + i));
    }
    // Horner over the spatial dims, outermost first (row-major) or innermost first.
    let order: Vec<usize> = if column_major {
        (0..d).rev().collect()
    } else {
        (0..d).collect()
    };
    let mut spatial = pos[order[0]];
    let mut size = lens[order[0]];
    for &i in &order[1..] {
        let scaled = ctx.binary(B::Multiply, spatial, lens[i], DataType::Int64);
        spatial = ctx.binary(B::Add, scaled, pos[i], DataType::Int64);
        size = ctx.binary(B::Multiply, size, lens[i], DataType::Int64);
    }
    let n = ctx.iota_along(j, 0, r, 0);
    let c = ctx.iota_along(j, 1, r, 1);
    let channels = ctx.dim_of(x, 1);
    let nc = ctx.binary(B::Multiply, n, channels, DataType::Int64);
    let nc = ctx.binary(B::Add, nc, c, DataType::Int64);
    let base = ctx.binary(B::Multiply, nc, size, DataType::Int64);
    let index = ctx.binary(B::Add, base, spatial, DataType::Int64);
    ctx.finish(node, 1, index, DataType::Int64)
}
