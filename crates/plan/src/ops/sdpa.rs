//! Scaled dot-product attention over `[B, H, S, D]` heads, shared by ONNX `Attention` and the
//! `com.microsoft` attention ops (GroupQueryAttention, MultiHeadAttention, Attention,
//! PackedMultiHeadAttention).
//!
//! Without a soft cap this is one [`Step::Attention`] (MLX's fused attention, with sinks); a
//! causal mask given together with an array mask is folded into it first (the bottom-right
//! aligned keep-mask from iotas over the query and key lengths). With a soft cap the
//! attention is computed step by step: `scores = softcap * tanh(q k^T * scale / softcap)`,
//! masked, a softmax (with the sink logits in its denominator), times `v`. Query heads
//! `h * G .. (h + 1) * G` share key-value head `h`: when the head counts are known the scores
//! are laid out `[G, B, Hkv, S, T]` (the keys broadcast over `G`, nothing is copied and no
//! reshape touches the key length, so a decode closure traced for one past length serves the
//! next); otherwise the key-value heads are gathered up to the query heads.

use onnx_ir::DataType;

use super::*;
use crate::step::{DimRule, ReduceAxes, ReduceOp, ReshapeTarget, ShapeSource};

/// One attention: queries `[B, Hq, S, D]`, keys `[B, Hkv, T, D]`, values `[B, Hkv, T, Dv]`.
pub(crate) struct Sdpa {
    /// Queries.
    pub q: Slot,
    /// Keys.
    pub k: Slot,
    /// Values.
    pub v: Slot,
    /// A bool keep-mask or an additive mask (with its dtype) broadcastable to `[B, Hq, S, T]`.
    pub mask: Option<(Slot, DataType)>,
    /// The mask's head dim (its dim -3; 1 for masks of rank 2), when known.
    pub mask_heads: Option<i64>,
    /// A causal mask aligned to the bottom-right: query `s` sees keys `t <= s + T - S`.
    pub causal: bool,
    /// Per-head sink logits `[Hq]` (the inputs' dtype): one more logit per row in the softmax.
    pub sinks: Option<Slot>,
    /// Score scale.
    pub scale: f32,
    /// Logit soft cap (`0`: none).
    pub softcap: f32,
    /// `(Hq, Hkv)` when known at plan time (any equal pair when they are known to be equal).
    pub heads: Option<(i64, i64)>,
    /// The inputs' dtype.
    pub dt: DataType,
}

/// Emits the attention; returns its `[B, Hq, S, Dv]` output.
pub(crate) fn attention(ctx: &mut LowerCtx, a: &Sdpa) -> Result<Slot, PlanError> {
    let mask = match (a.causal, a.mask) {
        (true, Some((m, mdt))) => {
            let keep = causal_keep(ctx, a.q, a.k)?;
            Some((combine(ctx, keep, m, mdt)?, mdt))
        }
        (_, m) => m,
    };
    if a.softcap <= 0.0 {
        let out = ctx.temp(a.dt);
        ctx.push(Step::Attention {
            q: a.q,
            k: a.k,
            v: a.v,
            mask: mask.map(|m| m.0),
            causal: a.causal && a.mask.is_none(),
            sinks: a.sinks,
            scale: a.scale,
            out,
        });
        return Ok(out);
    }
    let mask = match mask {
        Some(m) => Some(m),
        None if a.causal => Some((causal_keep(ctx, a.q, a.k)?, DataType::Bool)),
        None => None,
    };
    softcapped(ctx, a, mask)
}

/// `[S, T]`: key `t` is visible from query `s` when `t <= s + T - S`.
fn causal_keep(ctx: &mut LowerCtx, q: Slot, k: Slot) -> Result<Slot, PlanError> {
    let i64_ = DataType::Int64;
    let s = ctx.iota(q, 2);
    let s = unsqueeze(ctx, s, vec![1], i64_);
    let sl = ctx.dim_1d(q, 2);
    let tl = ctx.dim_1d(k, 2);
    let shift = ctx.binary(BinaryOp::Subtract, tl, sl, i64_);
    let rows = ctx.binary(BinaryOp::Add, s, shift, i64_);
    let cols = ctx.iota(k, 2);
    Ok(ctx.binary(BinaryOp::LessEqual, cols, rows, i64_))
}

/// The array mask `m` limited to `keep`: `m && keep` (bool), else `where(keep, m, -inf)`.
fn combine(ctx: &mut LowerCtx, keep: Slot, m: Slot, mdt: DataType) -> Result<Slot, PlanError> {
    if mdt == DataType::Bool {
        return Ok(ctx.binary(BinaryOp::LogicalAnd, m, keep, DataType::Bool));
    }
    let ninf = ctx.scalar(mdt, f64::NEG_INFINITY)?;
    Ok(ctx.emit(mdt, |out| Step::Where {
        cond: keep,
        x: m,
        y: ninf,
        out,
    }))
}

fn unsqueeze(ctx: &mut LowerCtx, x: Slot, axes: Vec<i64>, dt: DataType) -> Slot {
    reshape(
        ctx,
        x,
        ReshapeTarget::Unsqueeze {
            axes: ShapeSource::Static(axes),
        },
        dt,
    )
}

fn reshape(ctx: &mut LowerCtx, x: Slot, target: ReshapeTarget, dt: DataType) -> Slot {
    ctx.emit(dt, |out| Step::Reshape { x, target, out })
}

fn transpose(ctx: &mut LowerCtx, x: Slot, perm: Vec<i32>, dt: DataType) -> Slot {
    ctx.emit(dt, |out| Step::Transpose {
        x,
        perm: Some(perm),
        out,
    })
}

fn reduce_last(ctx: &mut LowerCtx, op: ReduceOp, x: Slot, dt: DataType) -> Slot {
    ctx.emit(dt, |out| Step::Reduce {
        op,
        x,
        axes: ReduceAxes::Static(vec![-1]),
        keepdims: true,
        out,
    })
}

/// How the query heads meet the key-value heads in the step-by-step form.
enum Heads {
    /// One key-value head per query head (or broadcast ones): plain `[B, H, S, T]` scores.
    Plain,
    /// `G` query heads per key-value head: scores `[G, B, Hkv, S, T]`.
    Grouped { hkv: i64, g: i64 },
    /// Head counts unknown: the key-value heads are gathered up to `Hq`.
    Expanded,
}

/// The soft-capped attention, step by step, under the (already combined) `mask`.
fn softcapped(
    ctx: &mut LowerCtx,
    a: &Sdpa,
    mask: Option<(Slot, DataType)>,
) -> Result<Slot, PlanError> {
    let dt = a.dt;
    let heads = match a.heads {
        Some((hq, hkv)) if hq == hkv => Heads::Plain,
        // A mask with a head dim of Hq does not broadcast against the grouped layout.
        Some((hq, hkv))
            if hkv > 0 && hq % hkv == 0 && (a.mask.is_none() || a.mask_heads == Some(1)) =>
        {
            Heads::Grouped { hkv, g: hq / hkv }
        }
        _ => Heads::Expanded,
    };
    let (mut q, mut k, mut v) = (a.q, a.k, a.v);
    match heads {
        Heads::Plain => {}
        Heads::Grouped { hkv, g } => {
            // [B, Hq, S, D] -> [B, Hkv, G, S, D] -> [G, B, Hkv, S, D]
            let qg = reshape(
                ctx,
                q,
                ReshapeTarget::Dims(vec![
                    DimRule::copy(0),
                    DimRule::fixed(hkv),
                    DimRule::fixed(g),
                    DimRule::copy(2),
                    DimRule::copy(3),
                ]),
                dt,
            );
            q = transpose(ctx, qg, vec![2, 0, 1, 3, 4], dt);
        }
        Heads::Expanded => {
            // key-value head of query head h: h / (Hq / Hkv)
            let i64_ = DataType::Int64;
            let h = ctx.iota(q, 1);
            let hq = ctx.dim_1d(q, 1);
            let hkv = ctx.dim_1d(k, 1);
            let g = ctx.binary(BinaryOp::FloorDivide, hq, hkv, i64_);
            let src = ctx.binary(BinaryOp::FloorDivide, h, g, i64_);
            for t in [&mut k, &mut v] {
                let x = *t;
                *t = ctx.emit(dt, |out| Step::Take {
                    x,
                    indices: src,
                    axis: 1,
                    out,
                });
            }
        }
    }
    let kt = transpose(ctx, k, vec![0, 1, 3, 2], dt);
    let raw = ctx.emit(dt, |out| Step::MatMul { a: q, b: kt, out });
    let scale = ctx.scalar(dt, a.scale as f64)?;
    let scaled = ctx.binary(BinaryOp::Multiply, raw, scale, dt);
    let cap = ctx.scalar(dt, a.softcap as f64)?;
    let d = ctx.binary(BinaryOp::Divide, scaled, cap, dt);
    let t = ctx.unary(UnaryOp::Tanh, d, dt);
    let mut scores = ctx.binary(BinaryOp::Multiply, t, cap, dt);
    if let Some((m, mdt)) = mask {
        scores = if mdt == DataType::Bool {
            let ninf = ctx.scalar(dt, f64::NEG_INFINITY)?;
            ctx.emit(dt, |out| Step::Where {
                cond: m,
                x: scores,
                y: ninf,
                out,
            })
        } else {
            ctx.binary(BinaryOp::Add, scores, m, dt)
        };
    }
    let probs = match a.sinks {
        Some(sinks) => {
            let sinks = match heads {
                Heads::Grouped { hkv, g } => {
                    // [Hq] -> [Hkv, G] -> [G, Hkv] -> [G, 1, Hkv, 1, 1]
                    let s = reshape(ctx, sinks, ReshapeTarget::Fixed(vec![hkv, g]), dt);
                    let s = transpose(ctx, s, vec![1, 0], dt);
                    reshape(ctx, s, ReshapeTarget::Fixed(vec![g, 1, hkv, 1, 1]), dt)
                }
                _ => unsqueeze(ctx, sinks, vec![0, 2, 3], dt),
            };
            sink_softmax(ctx, scores, sinks, dt)?
        }
        None => ctx.emit(dt, |out| Step::Softmax {
            x: scores,
            axes: vec![-1],
            precise: true,
            out,
        }),
    };
    let y = ctx.emit(dt, |out| Step::MatMul {
        a: probs,
        b: v,
        out,
    });
    Ok(match heads {
        Heads::Grouped { .. } => {
            // [G, B, Hkv, S, Dv] -> [B, Hkv, G, S, Dv] -> [B, Hq, S, Dv]
            let y = transpose(ctx, y, vec![1, 2, 0, 3, 4], dt);
            reshape(
                ctx,
                y,
                ReshapeTarget::Dims(vec![
                    DimRule::copy(0),
                    DimRule::product(&[1, 2]),
                    DimRule::copy(3),
                    DimRule::copy(4),
                ]),
                dt,
            )
        }
        _ => y,
    })
}

/// A softmax over the last axis with one more logit per row, `sinks` (broadcast to the rows),
/// that takes part in the denominator only: `exp(x - m) / (sum exp(x - m) + exp(sink - m))`
/// with `m = max(max x, sink)`, in float32 for half inputs.
fn sink_softmax(
    ctx: &mut LowerCtx,
    scores: Slot,
    sinks: Slot,
    dt: DataType,
) -> Result<Slot, PlanError> {
    let cdt = compute_dtype(dt);
    let x = ctx.cast(scores, dt, cdt);
    let sk = ctx.cast(sinks, dt, cdt);
    let mx = reduce_last(ctx, ReduceOp::Max, x, cdt);
    let m = ctx.binary(BinaryOp::Maximum, mx, sk, cdt);
    let shifted = ctx.binary(BinaryOp::Subtract, x, m, cdt);
    let e = ctx.unary(UnaryOp::Exp, shifted, cdt);
    let z = reduce_last(ctx, ReduceOp::Sum, e, cdt);
    let sink_shifted = ctx.binary(BinaryOp::Subtract, sk, m, cdt);
    let es = ctx.unary(UnaryOp::Exp, sink_shifted, cdt);
    let denom = ctx.binary(BinaryOp::Add, z, es, cdt);
    let p = ctx.binary(BinaryOp::Divide, e, denom, cdt);
    Ok(ctx.cast(p, cdt, dt))
}
