//! `QLinearAveragePool` and `QLinearGlobalAveragePool` as ORT's CPU kernels compute them
//! (int8/uint8, NCHW or NHWC by `channels_last`).
//!
//! - The global pool (and an average pool whose kernel covers the whole unpadded image, which
//!   ORT sends the same way) is MLAS' integer one: `acc = sum(x) - x_zero_point * image_size`
//!   in int32, requantized with `scale = x_scale / (y_scale * image_size)` in float32
//!   (`round_half_even(clamp(acc * scale, qmin - zp, qmax - zp)) + zp`). MLAS rejects scales
//!   outside `[2^-32, 256)` and images of `2^24` elements or more: those are declined.
//! - Any other average pool dequantizes X to float32 (`x_scale * (x - x_zero_point)`), sums
//!   each window left to right over the in-bounds elements in row-major order, divides by the
//!   count (the whole kernel with `count_include_pad`, else the in-bounds elements), and
//!   quantizes as `clamp(int(nearbyint(v / y_scale + y_zero_point)), qmin, qmax)`. Here the
//!   zero-padded image's kernel taps are strided slices added in that order (a padded zero
//!   leaves a float sum unchanged), so the sums are ORT's to the bit.
//!
//! Scales and zero points must be constants and the spatial dims fixed at plan time.

use onnx_ir::{DataType, Dim, Node, TensorData};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{
    BinaryOp as B, PadMode, PadSpec, PoolGeometry, PoolSpec, ReduceAxes, ReduceOp, UnaryOp as U,
};

/// Registers the ops.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(MS, "QLinearAveragePool", 1, 1, claim_avg, lower_avg)
        .notes("int8/uint8, 1-3 spatial dims, NCHW or channels_last; constant scales and zero points, fixed spatial dims; at most 64 kernel taps");
    r.op(MS, "QLinearGlobalAveragePool", 1, 1, claim_global, lower_global)
        .notes("int8/uint8, NCHW or channels_last; constant scales and zero points, fixed spatial dims (MLAS' integer sum and requantization)");
}

/// The most kernel taps the float path unrolls.
const MAX_TAPS: i64 = 64;

/// `(x_scale, x_zero_point, y_scale, y_zero_point)`: inputs 1..=4, constants; an absent zero
/// point is 0.
fn params<'t>(
    node: &Node,
    dt: DataType,
    get: impl Fn(usize) -> Option<&'t TensorData>,
) -> Result<(f32, i32, f32, i32), String> {
    let op = &node.op_type;
    let mut v = [0.0f64; 4];
    for (k, name) in ["x_scale", "x_zero_point", "y_scale", "y_zero_point"]
        .iter()
        .enumerate()
    {
        let zero_point = k % 2 == 1;
        if node.input(k + 1).is_none() && zero_point {
            continue;
        }
        let t = get(k + 1).ok_or_else(|| format!("{op}: {name} must be a constant initializer"))?;
        let want = if zero_point { dt } else { DataType::Float };
        if t.dtype != want || t.dims.len() > 1 || t.numel() != 1 {
            return Err(format!("{op}: {name} must be a {want} scalar"));
        }
        v[k] = t
            .to_f64_vec()
            .and_then(|x| x.first().copied())
            .unwrap_or(f64::NAN);
    }
    let (xs, ys) = (v[0] as f32, v[2] as f32);
    if !(xs.is_finite() && xs > 0.0 && ys.is_finite() && ys > 0.0) {
        return Err(format!("{op}: the scales must be positive and finite"));
    }
    Ok((xs, v[1] as i32, ys, v[3] as i32))
}

fn channels_last(node: &Node) -> Result<bool, String> {
    Ok(attr_int(node, "channels_last")?.unwrap_or(0) != 0)
}

/// The spatial dims of input 0 (`dims` its declared shape), fixed.
fn spatial(node: &Node, dims: Option<Vec<Dim>>) -> Result<Vec<i64>, String> {
    let dims = dims.ok_or_else(|| format!("{}: the input rank is unknown", node.op_type))?;
    if dims.len() < 3 {
        return Err(format!("{}: the input rank is below 3", node.op_type));
    }
    let s = if channels_last(node)? {
        &dims[1..dims.len() - 1]
    } else {
        &dims[2..]
    };
    s.iter()
        .map(Dim::fixed)
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| format!("{}: the spatial dims must be fixed", node.op_type))
}

/// MLAS' global-pool scale for `image` elements, or why MLAS rejects it.
fn global_scale(op: &str, xs: f32, ys: f32, image: i64) -> Result<f32, String> {
    if !(1..0x100_0000).contains(&image) {
        return Err(format!(
            "{op}: {image} elements per image are outside MLAS' range"
        ));
    }
    let scale = xs / (ys * image as f32);
    if !(2f32.powi(-32)..256.0).contains(&scale) {
        return Err(format!(
            "{op}: the scale {scale} is outside MLAS' range (ORT fails the run)"
        ));
    }
    Ok(scale)
}

fn check_attrs(node: &Node, allowed: &[&str]) -> Result<(), String> {
    match node
        .attributes
        .keys()
        .find(|k| !allowed.contains(&k.as_str()))
    {
        Some(a) => Err(format!(
            "{}: the attribute {a} is not claimed",
            node.op_type
        )),
        None => Ok(()),
    }
}

fn claim_global(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, 0, &[DataType::Int8, DataType::Uint8])?;
    check_attrs(node, &["channels_last"]).or_decline()?;
    let get = |i: usize| node.input(i).and_then(|n| ctx.constant(n));
    let (xs, _, ys, _) = params(node, dt, get).or_decline()?;
    let s = spatial(node, dims_of(ctx, node.input(0).unwrap_or(""))).or_decline()?;
    global_scale(&node.op_type, xs, ys, s.iter().product()).or_decline()?;
    Ok(())
}

/// The integer global pool over the spatial axes of `x` (kept, size 1).
fn global_pool(
    ctx: &mut LowerCtx,
    node: &Node,
    x: Slot,
    dt: DataType,
    rank: usize,
    image: i64,
) -> Result<Slot, PlanError> {
    let (xs, xz, ys, yz) = {
        let get = |i: usize| ctx.const_input(node, i);
        params(node, dt, get).or_invalid(node)?
    };
    let scale = global_scale(&node.op_type, xs, ys, image).or_invalid(node)?;
    let axes: Vec<i64> = if channels_last(node).or_invalid(node)? {
        (1..rank as i64 - 1).collect()
    } else {
        (2..rank as i64).collect()
    };
    let i32t = DataType::Int32;
    let xi = ctx.cast(x, dt, i32t);
    let sum = ctx.emit(i32t, |out| Step::Reduce {
        op: ReduceOp::Sum,
        x: xi,
        axes: ReduceAxes::Static(axes),
        keepdims: true,
        out,
    });
    let bias = ctx.scalar(i32t, (xz as i64 * image) as f64)?;
    let acc = ctx.binary(B::Subtract, sum, bias, i32t);
    let m = ctx.scalar(DataType::Float, scale as f64)?;
    let zp = ctx.scalar(dt, yz as f64)?;
    crate::ops::integer::requantize(ctx, acc, m, zp, dt)
}

fn lower_global(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let rank = ctx.need_rank(node, 0)?;
    let s = spatial(node, ctx.shape_of(node.input(0).unwrap_or(""))).or_invalid(node)?;
    let x = ctx.input(node, 0)?;
    let y = global_pool(ctx, node, x, dt, rank, s.iter().product())?;
    ctx.finish(node, 0, y, dt)
}

// ---------------------------------------------------------------------------------------------
// QLinearAveragePool.

/// The pool's attributes and geometry for the fixed spatial dims `s`.
fn avg_geometry(node: &Node, s: &[i64]) -> Result<(PoolSpec, PoolGeometry), String> {
    check_attrs(
        node,
        &[
            "auto_pad",
            "ceil_mode",
            "channels_last",
            "count_include_pad",
            "kernel_shape",
            "pads",
            "strides",
        ],
    )?;
    let mut spec = crate::ops::nn::pool_spec(19, node)?;
    // the schema has no dilations; `pool_spec` reads count_include_pad of AveragePool only
    spec.count_include_pad = attr_int(node, "count_include_pad")?.unwrap_or(0) != 0;
    let d = spec.kernel.len();
    if !(1..=3).contains(&d) || d != s.len() {
        return Err(format!(
            "{}: kernel_shape {:?} does not fit spatial dims {s:?} (1-3 are claimed)",
            node.op_type, spec.kernel
        ));
    }
    let g = spec.geometry(s)?;
    if g.out.iter().any(|&o| o < 1) {
        return Err(format!("{}: an empty output", node.op_type));
    }
    Ok((spec, g))
}

/// Whether ORT sends the pool to its global kernel: the kernel is the image, no pads.
fn is_global(spec: &PoolSpec, g: &PoolGeometry, s: &[i64]) -> bool {
    spec.kernel == s
        && g.pad_lo.iter().all(|&p| p == 0)
        && g.pad_hi.iter().zip(&g.ceil_tail).all(|(h, t)| h - t == 0)
}

fn claim_avg(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, 0, &[DataType::Int8, DataType::Uint8])?;
    let get = |i: usize| node.input(i).and_then(|n| ctx.constant(n));
    let (xs, _, ys, _) = params(node, dt, get).or_decline()?;
    let s = spatial(node, dims_of(ctx, node.input(0).unwrap_or(""))).or_decline()?;
    let (spec, g) = avg_geometry(node, &s).or_decline()?;
    if is_global(&spec, &g, &s) {
        global_scale(&node.op_type, xs, ys, s.iter().product()).or_decline()?;
        return Ok(());
    }
    let taps: i64 = spec.kernel.iter().product();
    if taps > MAX_TAPS {
        decline!("QLinearAveragePool: {taps} kernel taps are more than the {MAX_TAPS} unrolled");
    }
    // |v / y_scale| must stay within int32 (ORT converts it unchecked)
    if xs as f64 / ys as f64 * 256.0 >= 2f64.powi(31) {
        decline!("QLinearAveragePool: x_scale / y_scale overflows ORT's int32 conversion");
    }
    Ok(())
}

/// ORT's divisor of every output position (row-major over the output's spatial dims).
fn divisors(spec: &PoolSpec, g: &PoolGeometry, s: &[i64]) -> Vec<f32> {
    let d = s.len();
    let total: i64 = g.out.iter().product();
    let full: i64 = spec.kernel.iter().product();
    (0..total)
        .map(|mut flat| {
            if spec.count_include_pad {
                return full as f32;
            }
            let mut count = 1;
            for i in (0..d).rev() {
                let o = flat % g.out[i];
                flat /= g.out[i];
                let start = o * spec.strides[i] - g.pad_lo[i];
                let end = (start + spec.kernel[i]).min(s[i]);
                count *= end - start.max(0);
            }
            count as f32
        })
        .collect()
}

fn lower_avg(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let rank = ctx.need_rank(node, 0)?;
    let s = spatial(node, ctx.shape_of(node.input(0).unwrap_or(""))).or_invalid(node)?;
    let (spec, g) = avg_geometry(node, &s).or_invalid(node)?;
    let x = ctx.input(node, 0)?;
    if is_global(&spec, &g, &s) {
        let y = global_pool(ctx, node, x, dt, rank, s.iter().product())?;
        return ctx.finish(node, 0, y, dt);
    }
    let (xs, xz, ys, yz) = {
        let get = |i: usize| ctx.const_input(node, i);
        params(node, dt, get).or_invalid(node)?
    };
    let nhwc = channels_last(node).or_invalid(node)?;
    let (to_cl, to_cf) = crate::ops::nn::channel_perms(rank);
    let x = if nhwc {
        transpose(ctx, x, &to_cf, dt)
    } else {
        x
    };
    let (i32t, f) = (DataType::Int32, DataType::Float);
    // dequantize: x_scale * (x - x_zero_point)
    let xi = ctx.cast(x, dt, i32t);
    let z = ctx.scalar(i32t, xz as f64)?;
    let xc = ctx.binary(B::Subtract, xi, z, i32t);
    let xf = ctx.cast(xc, i32t, f);
    let sc = ctx.scalar(f, xs as f64)?;
    let xf = ctx.binary(B::Multiply, sc, xf, f);
    let d = s.len();
    // zero padding so that every window lies inside
    let hi: Vec<i64> = (0..d)
        .map(|i| ((g.out[i] - 1) * spec.strides[i] + spec.kernel[i] - s[i] - g.pad_lo[i]).max(0))
        .collect();
    let padded = if g.pad_lo.iter().chain(&hi).all(|&p| p == 0) {
        xf
    } else {
        let value = ctx.scalar(f, 0.0)?;
        let pads = PadSpec::Static {
            axes: (2..2 + d as i32).collect(),
            lo: g.pad_lo.iter().map(|&v| v as i32).collect(),
            hi: hi.iter().map(|&v| v as i32).collect(),
        };
        ctx.emit(f, |out| Step::Pad {
            x: xf,
            pads,
            mode: PadMode::Constant,
            value,
            out,
        })
    };
    // the taps in row-major order, each a strided slice, summed left to right
    let taps: i64 = spec.kernel.iter().product();
    let mut acc: Option<Slot> = None;
    for t in 0..taps {
        let mut rest = t;
        let mut offs = vec![0; d];
        for i in (0..d).rev() {
            offs[i] = rest % spec.kernel[i];
            rest /= spec.kernel[i];
        }
        let ends: Vec<i64> = (0..d)
            .map(|i| offs[i] + (g.out[i] - 1) * spec.strides[i] + 1)
            .collect();
        let tap = ctx.emit(f, |out| Step::Slice {
            x: padded,
            spec: crate::step::SliceSpec {
                starts: crate::step::ShapeSource::Static(offs),
                ends: crate::step::ShapeSource::Static(ends),
                axes: Some(crate::step::ShapeSource::Static(
                    (2..2 + d as i64).collect(),
                )),
                steps: Some(crate::step::ShapeSource::Static(spec.strides.clone())),
            },
            out,
        });
        acc = Some(match acc {
            None => tap,
            Some(a) => ctx.binary(B::Add, a, tap, f),
        });
    }
    let acc = acc.expect("at least one tap");
    let div = TensorData::from_f32(g.out.clone(), &divisors(&spec, &g, &s));
    let div = ctx.constant(div);
    let v = ctx.binary(B::Divide, acc, div, f);
    // clamp(int(nearbyint(v / y_scale + y_zero_point)), qmin, qmax)
    let ysc = ctx.scalar(f, ys as f64)?;
    let v = ctx.binary(B::Divide, v, ysc, f);
    let zf = ctx.scalar(f, yz as f64)?;
    let v = ctx.binary(B::Add, v, zf, f);
    let v = ctx.unary(U::Round, v, f);
    let q = ctx.cast(v, f, i32t);
    let (lo, hi) = if dt == DataType::Int8 {
        (-128.0, 127.0)
    } else {
        (0.0, 255.0)
    };
    let lo = ctx.scalar(i32t, lo)?;
    let hi = ctx.scalar(i32t, hi)?;
    let q = ctx.binary(B::Maximum, q, lo, i32t);
    let q = ctx.binary(B::Minimum, q, hi, i32t);
    let y = ctx.cast(q, i32t, dt);
    let y = if nhwc {
        transpose(ctx, y, &to_cl, dt)
    } else {
        y
    };
    ctx.finish(node, 0, y, dt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divisors_count_in_bounds_elements_or_the_whole_kernel() {
        let mut spec = PoolSpec {
            kernel: vec![3],
            strides: vec![2],
            dilations: vec![1],
            padding: crate::step::AutoPad::Explicit {
                lo: vec![1],
                hi: vec![1],
            },
            ceil_mode: true,
            count_include_pad: false,
        };
        let s = [6];
        let g = spec.geometry(&s).unwrap();
        // windows [-1, 2), [1, 4), [3, 6), [5, 8): 2, 3, 3, 1 in bounds
        assert_eq!(g.out, vec![4]);
        assert_eq!(divisors(&spec, &g, &s), vec![2.0, 3.0, 3.0, 1.0]);
        spec.count_include_pad = true;
        assert_eq!(divisors(&spec, &g, &s), vec![3.0; 4]);
        assert!(!is_global(&spec, &g, &s));
    }

    #[test]
    fn global_scale_range_is_mlas() {
        assert!(global_scale("op", 0.1, 0.1, 49).is_ok());
        assert!(global_scale("op", 100.0, 0.1, 1).is_err());
        assert!(global_scale("op", 0.1, 0.1, 1 << 24).is_err());
    }
}
