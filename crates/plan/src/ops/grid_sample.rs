//! GridSample (4-D and 5-D inputs), computed elementwise in float32 with ONNX Runtime's order of
//! operations: denormalised coordinates, integer taps with the padding rule, weights, then one
//! `mlx_gather` per tap over the flattened spatial dims.

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, DimRule, ReshapeTarget, UnaryOp as U};

/// Registers GridSample.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "GridSample", 16, MAX, claim_grid_sample, lower_grid_sample);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

fn modes(node: &Node, opset: i64) -> Result<(Mode, Padding, bool), String> {
    let mode = match attr_str(node, "mode")?.as_deref() {
        None => Mode::Linear,
        Some("bilinear") if opset < 20 => Mode::Linear,
        Some("bicubic") if opset < 20 => Mode::Cubic,
        Some("linear") if opset >= 20 => Mode::Linear,
        Some("cubic") if opset >= 20 => Mode::Cubic,
        Some("nearest") => Mode::Nearest,
        Some(m) => {
            return Err(format!(
                "GridSample: mode '{m}' is invalid at opset {opset}"
            ));
        }
    };
    let padding = match attr_str(node, "padding_mode")?.as_deref() {
        None | Some("zeros") => Padding::Zeros,
        Some("border") => Padding::Border,
        Some("reflection") => Padding::Reflection,
        Some(p) => return Err(format!("GridSample: padding_mode '{p}' is invalid")),
    };
    let align = attr_int(node, "align_corners")?.unwrap_or(0) != 0;
    Ok((mode, padding, align))
}

fn claim_grid_sample(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, &[DataType::Float])?;
    ctx.expect_dtype(node, 1, &[DataType::Float])?;
    let (mode, _, _) = modes(node, ctx.opset).or_decline()?;
    let r = ctx.expect_rank(node, 0)?;
    if r != 4 && r != 5 {
        decline!("GridSample: a rank-{r} input is not supported by ONNX Runtime (4-D or 5-D)");
    }
    if r == 5 && mode == Mode::Cubic {
        decline!("GridSample: cubic mode on a 5-D input is not supported by ONNX Runtime");
    }
    if let Some(q) = ctx.rank(node.input(1).unwrap_or(""))
        && q != r
    {
        decline!("GridSample: grid rank {q} does not match the input rank {r}");
    }
    Ok(())
}

const F: DataType = DataType::Float;
const I: DataType = DataType::Int64;

/// Per spatial dim: the denormalised coordinate and the dim (an int64 scalar).
struct Axis {
    coord: Slot,
    len_i: Slot,
    /// Reflection borders (low, high).
    lo: Slot,
    hi: Slot,
}

struct Sampler {
    /// `[N, C, S]`: the input with its spatial dims flattened.
    flat: Slot,
    /// `[N, 1, ..]`: batch positions broadcast over the output grid.
    batch: Slot,
    padding: Padding,
    /// The grid's spatial rank.
    d: usize,
}

impl Sampler {
    /// The pixel values `[N, *out, C]` at integer coordinates (int64, innermost first) under
    /// the padding rule.
    fn pixel(&self, ctx: &mut LowerCtx, axes: &[Axis], idx: &[Slot]) -> Result<Slot, PlanError> {
        let zero_i = ctx.scalar(I, 0.0)?;
        let one_i = ctx.scalar(I, 1.0)?;
        let mut valid: Option<Slot> = None;
        let mut coords = Vec::with_capacity(idx.len());
        for (a, &c) in axes.iter().zip(idx) {
            let last = ctx.binary(B::Subtract, a.len_i, one_i, I);
            let c = match self.padding {
                Padding::Zeros => {
                    let ge = ctx.binary(B::GreaterEqual, c, zero_i, I);
                    let lt = ctx.binary(B::Less, c, a.len_i, I);
                    let ok = ctx.binary(B::LogicalAnd, ge, lt, DataType::Bool);
                    valid = Some(match valid {
                        None => ok,
                        Some(v) => ctx.binary(B::LogicalAnd, v, ok, DataType::Bool),
                    });
                    let lo = ctx.binary(B::Maximum, c, zero_i, I);
                    ctx.binary(B::Minimum, lo, last, I)
                }
                Padding::Border => {
                    let lo = ctx.binary(B::Maximum, c, zero_i, I);
                    ctx.binary(B::Minimum, lo, last, I)
                }
                Padding::Reflection => {
                    let f = ctx.cast(c, I, F);
                    let r = reflect(ctx, f, a.lo, a.hi)?;
                    let r = ctx.cast(r, F, I);
                    // Guard the gather (ORT reads in range by construction).
                    let lo = ctx.binary(B::Maximum, r, zero_i, I);
                    ctx.binary(B::Minimum, lo, last, I)
                }
            };
            coords.push(c);
        }
        // Flat index, outermost first: ((z * H) + y) * W + x.
        let mut flat = coords[0];
        for j in 1..self.d {
            let scaled = ctx.binary(B::Multiply, flat, axes[j].len_i, I);
            flat = ctx.binary(B::Add, scaled, coords[j], I);
        }
        let g = ctx.temp(F);
        ctx.push(Step::Gather {
            x: self.flat,
            indices: vec![self.batch, flat],
            axes: vec![0, 2],
            out: g,
        });
        // [N, *out, 1, C, 1] -> [N, *out, C]
        let k = 1 + self.d as i64;
        let v = ctx.squeeze(g, vec![k, k + 2], F);
        Ok(match valid {
            None => v,
            Some(ok) => {
                let ok = ctx.unsqueeze(ok, vec![k], DataType::Bool);
                let zero = ctx.scalar(F, 0.0)?;
                let out = ctx.temp(F);
                ctx.push(Step::Where {
                    cond: ok,
                    x: v,
                    y: zero,
                    out,
                });
                out
            }
        })
    }
}

/// ORT's `GsReflect`: fold `x` into `[lo, hi]` by reflecting at the borders (float32).
fn reflect(ctx: &mut LowerCtx, x: Slot, lo: Slot, hi: Slot) -> Result<Slot, PlanError> {
    let range = ctx.binary(B::Subtract, hi, lo, F);
    let below = ctx.binary(B::Less, x, lo, F);
    let above = ctx.binary(B::Greater, x, hi, F);
    let d_lo = ctx.binary(B::Subtract, lo, x, F);
    let d_hi = ctx.binary(B::Subtract, x, hi, F);
    let d = select(ctx, below, d_lo, d_hi, F);
    let q = ctx.binary(B::Divide, d, range, F);
    let n = ctx.unary(U::Floor, q, F);
    let nr = ctx.binary(B::Multiply, n, range, F);
    let r = ctx.binary(B::Subtract, d, nr, F);
    let half = ctx.scalar(F, 0.5)?;
    let two = ctx.scalar(F, 2.0)?;
    let h = ctx.binary(B::Multiply, n, half, F);
    let hf = ctx.unary(U::Floor, h, F);
    let h2 = ctx.binary(B::Multiply, hf, two, F);
    let even = ctx.binary(B::Equal, h2, n, F);
    let lo_r = ctx.binary(B::Add, lo, r, F);
    let hi_r = ctx.binary(B::Subtract, hi, r, F);
    let from_below = select(ctx, even, lo_r, hi_r, F);
    let from_above = select(ctx, even, hi_r, lo_r, F);
    let folded = select(ctx, above, from_above, x, F);
    Ok(select(ctx, below, from_below, folded, F))
}

fn select(ctx: &mut LowerCtx, cond: Slot, x: Slot, y: Slot, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Where { cond, x, y, out });
    out
}

/// Keys cubic coefficients (`a = -0.75`) of the offsets `t`, as ORT's `GsGetCubicCoeffs`.
fn cubic_coeffs(ctx: &mut LowerCtx, t: Slot) -> Result<[Slot; 4], PlanError> {
    let s = |ctx: &mut LowerCtx, v: f64| ctx.scalar(F, v);
    let a = s(ctx, -0.75)?;
    let a2 = s(ctx, -0.75 + 2.0)?;
    let a3 = s(ctx, -0.75 + 3.0)?;
    let a5 = s(ctx, 5.0 * -0.75)?;
    let a8 = s(ctx, 8.0 * -0.75)?;
    let a4 = s(ctx, 4.0 * -0.75)?;
    let one = s(ctx, 1.0)?;
    let two = s(ctx, 2.0)?;
    let x = ctx.unary(U::Abs, t, F);
    let outer = |ctx: &mut LowerCtx, u: Slot| {
        // ((a * u - 5a) * u + 8a) * u - 4a
        let p = ctx.binary(B::Multiply, a, u, F);
        let p = ctx.binary(B::Subtract, p, a5, F);
        let p = ctx.binary(B::Multiply, p, u, F);
        let p = ctx.binary(B::Add, p, a8, F);
        let p = ctx.binary(B::Multiply, p, u, F);
        ctx.binary(B::Subtract, p, a4, F)
    };
    let inner = |ctx: &mut LowerCtx, u: Slot| {
        // ((a + 2) * u - (a + 3)) * u * u + 1
        let p = ctx.binary(B::Multiply, a2, u, F);
        let p = ctx.binary(B::Subtract, p, a3, F);
        let p = ctx.binary(B::Multiply, p, u, F);
        let p = ctx.binary(B::Multiply, p, u, F);
        ctx.binary(B::Add, p, one, F)
    };
    let x1 = ctx.binary(B::Add, x, one, F);
    let c0 = outer(ctx, x1);
    let c1 = inner(ctx, x);
    let omx = ctx.binary(B::Subtract, one, x, F);
    let c2 = inner(ctx, omx);
    let tmx = ctx.binary(B::Subtract, two, x, F);
    let c3 = outer(ctx, tmx);
    Ok([c0, c1, c2, c3])
}

/// `sum_i w_i * v_i`, accumulated left to right.
fn dot(ctx: &mut LowerCtx, w: &[Slot], v: &[Slot]) -> Slot {
    let mut acc = ctx.binary(B::Multiply, w[0], v[0], F);
    for i in 1..w.len() {
        let t = ctx.binary(B::Multiply, w[i], v[i], F);
        acc = ctx.binary(B::Add, acc, t, F);
    }
    acc
}

fn lower_grid_sample(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let (mode, padding, align) = modes(node, ctx.opset()).or_invalid(node)?;
    let r = ctx.need_rank(node, 0)?;
    let d = r - 2;
    let x = ctx.input(node, 0)?;
    let grid = ctx.input(node, 1)?;
    let mut rules = vec![DimRule::copy(0), DimRule::copy(1)];
    rules.push(DimRule::product(&(2..r).collect::<Vec<_>>()));
    let flat = ctx.temp(F);
    ctx.push(Step::Reshape {
        x,
        target: ReshapeTarget::Dims(rules),
        out: flat,
    });
    // Batch positions [N, 1, ..] over the output grid [N, *out].
    let batch = ctx.iota_along(grid, 0, d + 1, 0);
    let sampler = Sampler {
        flat,
        batch,
        padding,
        d,
    };
    let one = ctx.scalar(F, 1.0)?;
    let two = ctx.scalar(F, 2.0)?;
    let half = ctx.scalar(F, 0.5)?;
    let zero = ctx.scalar(F, 0.0)?;
    // Axes innermost first: grid[..., 0] is x (the last input dim).
    let mut axes = Vec::with_capacity(d);
    for j in 0..d {
        let dim = r - 1 - j;
        let len_i = ctx.dim_of(x, dim);
        let len_f = ctx.cast(len_i, I, F);
        let g = ctx.pick(grid, j as i64, d as i32 + 1, F);
        let g1 = ctx.binary(B::Add, g, one, F);
        let coord = if align {
            // (n + 1) / 2 * (len - 1)
            let h = ctx.binary(B::Divide, g1, two, F);
            let lm1 = ctx.binary(B::Subtract, len_f, one, F);
            ctx.binary(B::Multiply, h, lm1, F)
        } else {
            // ((n + 1) * len - 1) / 2
            let p = ctx.binary(B::Multiply, g1, len_f, F);
            let p = ctx.binary(B::Subtract, p, one, F);
            ctx.binary(B::Divide, p, two, F)
        };
        let (lo, hi) = if align {
            (zero, ctx.binary(B::Subtract, len_f, one, F))
        } else {
            let neg_half = ctx.scalar(F, -0.5)?;
            (neg_half, ctx.binary(B::Subtract, len_f, half, F))
        };
        axes.push(Axis {
            coord,
            len_i,
            lo,
            hi,
        });
    }
    // Spatial lists are innermost first; `Sampler::pixel` wants outermost first.
    axes.reverse();
    let y_last = match mode {
        Mode::Nearest => {
            let idx: Vec<Slot> = axes
                .iter()
                .map(|a| {
                    let rd = ctx.unary(U::Round, a.coord, F);
                    ctx.cast(rd, F, I)
                })
                .collect();
            sampler.pixel(ctx, &axes, &idx)?
        }
        Mode::Linear => {
            // Per axis: floor, floor + 1 and the weights (t2 - c, c - t1).
            let mut lo_i = Vec::new();
            let mut hi_i = Vec::new();
            let mut w_lo = Vec::new();
            let mut w_hi = Vec::new();
            for a in &axes {
                let fl = ctx.unary(U::Floor, a.coord, F);
                let f2 = ctx.binary(B::Add, fl, one, F);
                lo_i.push(ctx.cast(fl, F, I));
                hi_i.push(ctx.cast(f2, F, I));
                w_lo.push(ctx.binary(B::Subtract, f2, a.coord, F));
                w_hi.push(ctx.binary(B::Subtract, a.coord, fl, F));
            }
            // The innermost axis pairs first, then outward:
            // dy2 * (dx2 * p11 + dx1 * p12) + dy1 * (dx2 * p21 + dx1 * p22), and for 3-D
            // dz2 * (that at z1) + dz1 * (that at z2).
            let n = axes.len();
            let mut level: Vec<Slot> = Vec::new();
            for corner in 0..(1usize << n) {
                // Bit j (from the outermost axis) picks the upper tap on axis j.
                let idx: Vec<Slot> = (0..n)
                    .map(|j| {
                        if corner >> (n - 1 - j) & 1 == 1 {
                            hi_i[j]
                        } else {
                            lo_i[j]
                        }
                    })
                    .collect();
                level.push(sampler.pixel(ctx, &axes, &idx)?);
            }
            for j in (0..n).rev() {
                let wl = ctx.unsqueeze(w_lo[j], vec![d as i64 + 1], F);
                let wh = ctx.unsqueeze(w_hi[j], vec![d as i64 + 1], F);
                level = level
                    .chunks(2)
                    .map(|pair| {
                        let a = ctx.binary(B::Multiply, wl, pair[0], F);
                        let b = ctx.binary(B::Multiply, wh, pair[1], F);
                        ctx.binary(B::Add, a, b, F)
                    })
                    .collect();
            }
            level[0]
        }
        Mode::Cubic => {
            // 2-D only: 4 x 4 taps around floor(c) - 1, x coefficients per row, then y.
            let mut base = Vec::new();
            let mut coeffs = Vec::new();
            for a in &axes {
                let fl = ctx.unary(U::Floor, a.coord, F);
                let b0 = ctx.binary(B::Subtract, fl, one, F);
                // t = c - b0 - 1
                let t = ctx.binary(B::Subtract, a.coord, b0, F);
                let t = ctx.binary(B::Subtract, t, one, F);
                let c = cubic_coeffs(ctx, t)?;
                base.push(ctx.cast(b0, F, I));
                coeffs.push(c);
            }
            let k = d as i64 + 1;
            let cy: Vec<Slot> = coeffs[0]
                .iter()
                .map(|&c| ctx.unsqueeze(c, vec![k], F))
                .collect();
            let cx: Vec<Slot> = coeffs[1]
                .iter()
                .map(|&c| ctx.unsqueeze(c, vec![k], F))
                .collect();
            let mut rows = Vec::with_capacity(4);
            for h in 0..4 {
                let oh = ctx.scalar(I, h as f64)?;
                let yi = ctx.binary(B::Add, base[0], oh, I);
                let mut px = Vec::with_capacity(4);
                for w in 0..4 {
                    let ow = ctx.scalar(I, w as f64)?;
                    let xi = ctx.binary(B::Add, base[1], ow, I);
                    px.push(sampler.pixel(ctx, &axes, &[yi, xi])?);
                }
                rows.push(dot(ctx, &cx, &px));
            }
            dot(ctx, &cy, &rows)
        }
    };
    // [N, *out, C] -> [N, C, *out]
    let mut perm = vec![0i32, r as i32 - 1];
    perm.extend(1..r as i32 - 1);
    let out = ctx.temp(F);
    ctx.push(Step::Transpose {
        x: y_last,
        perm: Some(perm),
        out,
    });
    ctx.finish(node, 0, out, F)
}
