//! DeformConv (2-D, float32), as ONNX Runtime's CPU kernel: bilinear samples at
//! `base + offset` (torchvision's rule: a sample with `y <= -1`, `y >= H` (same for `x`) is 0
//! and corners outside the image are 0), scaled by the mask, gathered into an im2col matrix and
//! contracted with the weight per group.

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, ReshapeTarget, UnaryOp as U};

/// Registers DeformConv.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "DeformConv", 19, MAX, claim_deform_conv, lower_deform_conv);
}

const F: DataType = DataType::Float;
const I: DataType = DataType::Int64;

/// The static geometry of one DeformConv node.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Geometry {
    n: i64,
    c: i64,
    h: i64,
    w: i64,
    oc: i64,
    kh: i64,
    kw: i64,
    oh: i64,
    ow: i64,
    group: i64,
    offset_group: i64,
    strides: [i64; 2],
    pads: [i64; 4],
    dilations: [i64; 2],
}

fn pair(v: Option<Vec<i64>>, n: usize, default: i64, what: &str) -> Result<Vec<i64>, String> {
    let v = v.unwrap_or_else(|| vec![default; n]);
    if v.len() != n {
        return Err(format!(
            "DeformConv: {what} has {} values, expected {n}",
            v.len()
        ));
    }
    Ok(v)
}

/// Reads the attributes and checks them against the fixed input shapes.
fn geometry(node: &Node, shape: &dyn Fn(usize) -> Option<Vec<i64>>) -> Result<Geometry, String> {
    let has = |i: usize| node.input(i).is_some_and(|n| !n.is_empty());
    let x = shape(0).ok_or("DeformConv: X needs a static shape")?;
    let wt = shape(1).ok_or("DeformConv: W needs a static shape")?;
    let off = shape(2).ok_or("DeformConv: offset needs a static shape")?;
    if x.len() != 4 || wt.len() != 4 || off.len() != 4 {
        return Err("DeformConv: only 2-D (rank-4 X, W and offset) is supported".into());
    }
    let kernel = pair(attr_ints(node, "kernel_shape")?, 2, 0, "kernel_shape")?;
    if kernel != [0, 0] && kernel != wt[2..] {
        return Err(format!(
            "DeformConv: kernel_shape {kernel:?} does not match W {wt:?}"
        ));
    }
    let strides = pair(attr_ints(node, "strides")?, 2, 1, "strides")?;
    let dilations = pair(attr_ints(node, "dilations")?, 2, 1, "dilations")?;
    let pads = pair(attr_ints(node, "pads")?, 4, 0, "pads")?;
    let group = attr_int(node, "group")?.unwrap_or(1);
    let offset_group = attr_int(node, "offset_group")?.unwrap_or(1);
    if strides.iter().chain(&dilations).any(|&v| v < 1)
        || pads.iter().any(|&p| p < 0)
        || group < 1
        || offset_group < 1
    {
        return Err("DeformConv: invalid strides, dilations, pads or groups".into());
    }
    let (n, c, h, w) = (x[0], x[1], x[2], x[3]);
    let (oc, kh, kw) = (wt[0], wt[2], wt[3]);
    if c != wt[1] * group || oc % group != 0 || c % offset_group != 0 || kh < 1 || kw < 1 {
        return Err(format!(
            "DeformConv: X {x:?}, W {wt:?}, group {group} and offset_group {offset_group} disagree"
        ));
    }
    let span = |k: i64, d: i64| d * (k - 1) + 1;
    let oh = (h + pads[0] + pads[2] - span(kh, dilations[0])) / strides[0] + 1;
    let ow = (w + pads[1] + pads[3] - span(kw, dilations[1])) / strides[1] + 1;
    if oh < 1 || ow < 1 || n < 1 {
        return Err("DeformConv: empty output".into());
    }
    let k = kh * kw;
    if off != [n, offset_group * 2 * k, oh, ow] {
        return Err(format!("DeformConv: offset shape {off:?} does not fit"));
    }
    if has(3) && shape(3) != Some(vec![oc]) {
        return Err("DeformConv: B must have a static shape [oC]".into());
    }
    if has(4) && shape(4) != Some(vec![n, offset_group * k, oh, ow]) {
        return Err(
            "DeformConv: mask must have the static shape [N, offset_group*kH*kW, oH, oW]".into(),
        );
    }
    Ok(Geometry {
        n,
        c,
        h,
        w,
        oc,
        kh,
        kw,
        oh,
        ow,
        group,
        offset_group,
        strides: [strides[0], strides[1]],
        pads: [pads[0], pads[1], pads[2], pads[3]],
        dilations: [dilations[0], dilations[1]],
    })
}

fn claim_deform_conv(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    for i in 0..5 {
        if node.input(i).is_some_and(|n| !n.is_empty()) {
            ctx.expect_dtype(node, i, &[DataType::Float])?;
        }
    }
    let shape = |i: usize| {
        let name = node.input(i)?;
        match ctx.constant(name) {
            Some(t) => Some(t.dims.clone()),
            None => ctx.graph.value(name)?.fixed_shape(),
        }
    };
    geometry(node, &shape).or_decline()?;
    Ok(())
}

fn reshape(ctx: &mut LowerCtx, x: Slot, dims: Vec<i64>, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Reshape {
        x,
        target: ReshapeTarget::Fixed(dims),
        out,
    });
    out
}

fn lower_deform_conv(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let g = {
        let shape = |i: usize| {
            ctx.const_input(node, i)
                .map(|t| t.dims.clone())
                .or_else(|| ctx.input_fixed_shape(node, i))
        };
        geometry(node, &shape).or_invalid(node)?
    };
    let x = ctx.input(node, 0)?;
    let wt = ctx.input(node, 1)?;
    let off = ctx.input(node, 2)?;
    let has = |i: usize| node.input(i).is_some_and(|n| !n.is_empty());
    let bias = if has(3) {
        Some(ctx.input(node, 3)?)
    } else {
        None
    };
    let mask = if has(4) {
        Some(ctx.input(node, 4)?)
    } else {
        None
    };
    let (og, k, l) = (g.offset_group, g.kh * g.kw, g.oh * g.ow);
    let cg = g.c / g.offset_group;

    // Integer sample bases [K, L] (exact in float32): out * stride - pad + tap * dilation.
    let mut by = Vec::with_capacity((k * l) as usize);
    let mut bx = Vec::with_capacity((k * l) as usize);
    for i in 0..g.kh {
        for j in 0..g.kw {
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    by.push((oy * g.strides[0] - g.pads[0] + i * g.dilations[0]) as f32);
                    bx.push((ox * g.strides[1] - g.pads[1] + j * g.dilations[1]) as f32);
                }
            }
        }
    }
    let base_y = ctx.constant(TensorData::from_f32(vec![k, l], &by));
    let base_x = ctx.constant(TensorData::from_f32(vec![k, l], &bx));

    // offset [N, G*2K, oH, oW] -> [N, G, K, 2, L]: y then x per tap.
    let off = reshape(ctx, off, vec![g.n, og, k, 2, l], F);
    let oy = ctx.pick(off, 0, 3, F);
    let ox = ctx.pick(off, 1, 3, F);
    let y = ctx.binary(B::Add, base_y, oy, F);
    let xc = ctx.binary(B::Add, base_x, ox, F);

    // Inside the sampling range: -1 < y < H and -1 < x < W.
    let minus_one = ctx.scalar(F, -1.0)?;
    let h_f = ctx.scalar(F, g.h as f64)?;
    let w_f = ctx.scalar(F, g.w as f64)?;
    let mut inside = ctx.binary(B::Greater, y, minus_one, F);
    for (a, b, op) in [
        (y, h_f, B::Less),
        (xc, minus_one, B::Greater),
        (xc, w_f, B::Less),
    ] {
        let t = ctx.binary(op, a, b, F);
        inside = ctx.binary(B::LogicalAnd, inside, t, DataType::Bool);
    }

    let one = ctx.scalar(F, 1.0)?;
    let y0 = ctx.unary(U::Floor, y, F);
    let x0 = ctx.unary(U::Floor, xc, F);
    let ly = ctx.binary(B::Subtract, y, y0, F);
    let lx = ctx.binary(B::Subtract, xc, x0, F);
    let hy = ctx.binary(B::Subtract, one, ly, F);
    let hx = ctx.binary(B::Subtract, one, lx, F);
    let y0i = ctx.cast(y0, F, I);
    let x0i = ctx.cast(x0, F, I);
    let one_i = ctx.scalar(I, 1.0)?;
    let zero_i = ctx.scalar(I, 0.0)?;
    let y1i = ctx.binary(B::Add, y0i, one_i, I);
    let x1i = ctx.binary(B::Add, x0i, one_i, I);
    let h_i = ctx.scalar(I, g.h as f64)?;
    let w_i = ctx.scalar(I, g.w as f64)?;
    let h_last = ctx.scalar(I, (g.h - 1) as f64)?;
    let w_last = ctx.scalar(I, (g.w - 1) as f64)?;

    // Per axis: (clamped index, in-range flag).
    let axis = |ctx: &mut LowerCtx, v: Slot, len: Slot, last: Slot| {
        let ge = ctx.binary(B::GreaterEqual, v, zero_i, I);
        let lt = ctx.binary(B::Less, v, len, I);
        let ok = ctx.binary(B::LogicalAnd, ge, lt, DataType::Bool);
        let lo = ctx.binary(B::Maximum, v, zero_i, I);
        (ctx.binary(B::Minimum, lo, last, I), ok)
    };
    let ys = [axis(ctx, y0i, h_i, h_last), axis(ctx, y1i, h_i, h_last)];
    let xs = [axis(ctx, x0i, w_i, w_last), axis(ctx, x1i, w_i, w_last)];

    // X [N, C, H, W] -> [N, G, C/G, H*W]; taps gathered along the last axis.
    let xf = reshape(ctx, x, vec![g.n, og, cg, g.h * g.w], F);
    let zero = ctx.scalar(F, 0.0)?;
    let mut acc: Option<Slot> = None;
    for (a, wy) in [(0usize, hy), (1, ly)] {
        for (b, wx) in [(0usize, hx), (1, lx)] {
            let (yi, yok) = ys[a];
            let (xi, xok) = xs[b];
            let row = ctx.binary(B::Multiply, yi, w_i, I);
            let idx = ctx.binary(B::Add, row, xi, I);
            let idx = reshape(ctx, idx, vec![g.n, og, 1, k * l], I);
            let idx = {
                let out = ctx.temp(I);
                ctx.push(Step::Expand {
                    x: idx,
                    shape: crate::step::ShapeSource::Static(vec![g.n, og, cg, k * l]),
                    out,
                });
                out
            };
            let v = ctx.temp(F);
            ctx.push(Step::TakeAlongAxis {
                x: xf,
                indices: idx,
                axis: 3,
                out: v,
            });
            let ok = ctx.binary(B::LogicalAnd, yok, xok, DataType::Bool);
            let ok = ctx.binary(B::LogicalAnd, ok, inside, DataType::Bool);
            let ok = reshape(ctx, ok, vec![g.n, og, 1, k * l], DataType::Bool);
            let wgt = ctx.binary(B::Multiply, wy, wx, F);
            let wgt = reshape(ctx, wgt, vec![g.n, og, 1, k * l], F);
            let p = ctx.binary(B::Multiply, wgt, v, F);
            let p = {
                let out = ctx.temp(F);
                ctx.push(Step::Where {
                    cond: ok,
                    x: p,
                    y: zero,
                    out,
                });
                out
            };
            acc = Some(match acc {
                None => p,
                Some(s) => ctx.binary(B::Add, s, p, F),
            });
        }
    }
    let mut cols = acc.expect("four corners");
    if let Some(m) = mask {
        let m = reshape(ctx, m, vec![g.n, og, 1, k * l], F);
        cols = ctx.binary(B::Multiply, cols, m, F);
    }
    // [N, G, C/G, K*L] -> [N, group, C/group*K, L] against W as [group, oC/group, C/group*K].
    let cpg = g.c / g.group;
    let cols = reshape(ctx, cols, vec![g.n, g.group, cpg * k, l], F);
    let wr = reshape(ctx, wt, vec![g.group, g.oc / g.group, cpg * k], F);
    let prod = ctx.temp(F);
    ctx.push(Step::MatMul {
        a: wr,
        b: cols,
        out: prod,
    });
    let mut y = reshape(ctx, prod, vec![g.n, g.oc, g.oh, g.ow], F);
    if let Some(b) = bias {
        let b = reshape(ctx, b, vec![g.oc, 1, 1], F);
        y = ctx.binary(B::Add, y, b, F);
    }
    ctx.finish(node, 0, y, F)
}
