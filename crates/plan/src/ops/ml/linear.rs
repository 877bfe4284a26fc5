//! `ai.onnx.ml` linear models: LinearRegressor and LinearClassifier (int64 labels), with ORT's
//! post transforms NONE, LOGISTIC, SOFTMAX and SOFTMAX_ZERO.
//!
//! Scores are `X @ coefficients^T + intercepts` in float32; ORT computes the product with its
//! own GEMM, so the last bits of a score may differ (tests compare at a small tolerance). The
//! transforms follow ORT's scalar formulas. PROBIT is declined: ORT's inverse-erf
//! approximation was not reproduced (a closed form that looked like it differs by up to 1e-3
//! near 0.5, where it cancels), so those nodes stay on ORT's CPU EP.

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::step::{ReduceOp, UnaryOp as U};

/// Registers the linear models.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(ML, "LinearRegressor", 1, ML_MAX, claim_regressor, lower_regressor)
        .notes("float32 `[N, C]`/`[C]`; post transforms but PROBIT (a single target ignores them, as in ORT)");
    r.op(ML, "LinearClassifier", 1, ML_MAX, claim_classifier, lower_classifier)
        .notes("float32 (int32/int64 converted to it, as ORT) `[N, C]`, `classlabels_ints`; binary form with one coefficient row (LOGISTIC as ORT 1.31); PROBIT and string labels declined");
}

/// ORT's post transforms of scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Post {
    None,
    Logistic,
    Softmax,
    SoftmaxZero,
    Probit,
}

/// The `post_transform` attribute (default NONE).
pub(super) fn post_transform(node: &Node) -> Result<Post, String> {
    Ok(
        match attr_str(node, "post_transform")?
            .as_deref()
            .unwrap_or("NONE")
        {
            "NONE" => Post::None,
            "LOGISTIC" => Post::Logistic,
            "SOFTMAX" => Post::Softmax,
            "SOFTMAX_ZERO" => Post::SoftmaxZero,
            "PROBIT" => Post::Probit,
            other => {
                return Err(format!(
                    "{}: unknown post_transform '{other}'",
                    node.op_type
                ));
            }
        },
    )
}

/// The attributes both models share.
struct Linear {
    coefficients: Vec<f32>,
    intercepts: Vec<f32>,
    post: Post,
}

fn linear_attrs(node: &Node) -> Result<Linear, String> {
    Ok(Linear {
        coefficients: attr_floats(node, "coefficients")?.unwrap_or_default(),
        intercepts: attr_floats(node, "intercepts")?.unwrap_or_default(),
        post: post_transform(node)?,
    })
}

/// Declines PROBIT (see the module docs).
fn no_probit(node: &Node, post: Post) -> Result<(), Decline> {
    if post == Post::Probit {
        decline!(
            "{}: post_transform PROBIT is not claimed (ORT's inverse-erf approximation is not \
             reproduced exactly)",
            node.op_type
        );
    }
    Ok(())
}

/// Checks `rows * C` coefficients for input 0's `C` features.
fn check_coefficients(ctx: &ClaimCtx, node: &Node, a: &Linear, rows: usize) -> Result<(), Decline> {
    let c = features(ctx, node, 0)?;
    if rows == 0 || a.coefficients.len() as i64 != rows as i64 * c {
        decline!(
            "{}: {} coefficients for {rows} rows of {c} features",
            node.op_type,
            a.coefficients.len()
        );
    }
    Ok(())
}

/// `X @ W^T (+ b)` as float32 `[N, rows]` (a 1-D X is one row; integers become float32).
fn scores(ctx: &mut LowerCtx, node: &Node, a: &Linear, rows: usize) -> Result<Slot, PlanError> {
    let f = DataType::Float;
    let c = lower_features(ctx, node, 0)?;
    let rank = ctx.need_rank(node, 0)?;
    let dt = ctx.input_dtype(node, 0)?;
    let x = ctx.input(node, 0)?;
    // ORT converts integer inputs to float32 before its GEMM.
    let x = ctx.cast(x, dt, f);
    let x = if rank == 1 {
        crate::ops::microsoft::unsqueeze(ctx, x, 0, f)
    } else {
        x
    };
    let mut wt = vec![0f32; a.coefficients.len()];
    for r in 0..rows {
        for j in 0..c as usize {
            wt[j * rows + r] = a.coefficients[r * c as usize + j];
        }
    }
    let w = f32_const(ctx, vec![c, rows as i64], &wt);
    let s = ctx.temp(f);
    ctx.push(Step::MatMul { a: x, b: w, out: s });
    if a.intercepts.is_empty() {
        return Ok(s);
    }
    let b = f32_const(ctx, vec![rows as i64], &a.intercepts);
    Ok(ctx.binary(BinaryOp::Add, s, b, f))
}

/// Applies `post` to float32 scores `[N, t]` row by row, as ORT's scalar loops do.
pub(super) fn apply_post(
    ctx: &mut LowerCtx,
    node: &Node,
    s: Slot,
    t: i64,
    post: Post,
) -> Result<Slot, PlanError> {
    let f = DataType::Float;
    Ok(match post {
        Post::None => s,
        Post::Logistic => ctx.unary(U::Sigmoid, s, f),
        Post::Probit => crate::plan::invalid!(node, "PROBIT is not lowered"),
        Post::Softmax => {
            let m = reduce_last(ctx, ReduceOp::Max, s, 2, f);
            let d = ctx.binary(BinaryOp::Subtract, s, m, f);
            let e = ctx.unary(U::Exp, d, f);
            let sum = sequential_sum(ctx, e, t, f)?;
            ctx.binary(BinaryOp::Divide, e, sum, f)
        }
        Post::SoftmaxZero => {
            // Scores within 1e-7 of zero are scaled by exp(-max) and left out of the sum.
            let m = reduce_last(ctx, ReduceOp::Max, s, 2, f);
            let eps = ctx.scalar(f, 0.0000001f32 as f64)?;
            let neps = ctx.scalar(f, -0.0000001f32 as f64)?;
            let above = ctx.binary(BinaryOp::Greater, s, eps, f);
            let below = ctx.binary(BinaryOp::Less, s, neps, f);
            let nz = ctx.binary(BinaryOp::LogicalOr, above, below, DataType::Bool);
            let d = ctx.binary(BinaryOp::Subtract, s, m, f);
            let e = ctx.unary(U::Exp, d, f);
            let nm = ctx.unary(U::Negative, m, f);
            let enm = ctx.unary(U::Exp, nm, f);
            let z = ctx.binary(BinaryOp::Multiply, s, enm, f);
            let v = select(ctx, nz, e, z, f);
            let zero = ctx.scalar(f, 0.0)?;
            let counted = select(ctx, nz, e, zero, f);
            let sum = sequential_sum(ctx, counted, t, f)?;
            ctx.binary(BinaryOp::Divide, v, sum, f)
        }
    })
}

// ---------------------------------------------------------------------------------------------
// LinearRegressor.

fn targets(node: &Node) -> Result<i64, String> {
    Ok(attr_int(node, "targets")?.unwrap_or(1))
}

fn claim_regressor(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    // ORT registers the float32 kernel only.
    ctx.expect_dtype(node, 0, &[DataType::Float])?;
    let a = linear_attrs(node).or_decline()?;
    let t = targets(node).or_decline()?;
    if t < 1 {
        decline!("LinearRegressor: targets = {t}");
    }
    if !a.intercepts.is_empty() && a.intercepts.len() as i64 != t {
        decline!(
            "LinearRegressor: {} intercepts for {t} targets",
            a.intercepts.len()
        );
    }
    check_coefficients(ctx, node, &a, t as usize)?;
    no_probit(node, a.post)?;
    if a.post != Post::None {
        sequential_ok(node, t)?;
    }
    Ok(())
}

fn lower_regressor(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let a = linear_attrs(node).or_invalid(node)?;
    let t = targets(node).or_invalid(node)?;
    let s = scores(ctx, node, &a, t as usize)?;
    // ORT transforms a single target only by PROBIT (declined): the others leave it as is.
    let post = if t == 1 { Post::None } else { a.post };
    let y = apply_post(ctx, node, s, t, post)?;
    ctx.finish(node, 0, y, DataType::Float)
}

// ---------------------------------------------------------------------------------------------
// LinearClassifier.

fn labels(node: &Node) -> Result<Vec<i64>, String> {
    Ok(attr_ints(node, "classlabels_ints")?.unwrap_or_default())
}

fn claim_classifier(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(
        node,
        0,
        &[DataType::Float, DataType::Int32, DataType::Int64],
    )?;
    no_strings(node, "classlabels_strings")?;
    let a = linear_attrs(node).or_decline()?;
    let l = labels(node).or_decline()?;
    if l.is_empty() {
        decline!("LinearClassifier: no classlabels_ints (ORT's kernel rejects it)");
    }
    if a.intercepts.is_empty() {
        decline!("LinearClassifier: no intercepts (ORT's kernel rejects it)");
    }
    let rows = a.intercepts.len();
    if ctx.expect_rank(node, 0)? != 2 {
        decline!("LinearClassifier: X must be [N, C]");
    }
    check_coefficients(ctx, node, &a, rows)?;
    no_probit(node, a.post)?;
    if rows == 1 {
        if l.len() != 2 {
            decline!(
                "LinearClassifier: one coefficient row needs two class labels, got {}",
                l.len()
            );
        }
    } else {
        if l.len() != rows {
            decline!(
                "LinearClassifier: {} class labels for {rows} coefficient rows",
                l.len()
            );
        }
        if a.post != Post::None {
            sequential_ok(node, rows as i64)?;
        }
    }
    Ok(())
}

fn lower_classifier(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let f = DataType::Float;
    let i = DataType::Int64;
    let a = linear_attrs(node).or_invalid(node)?;
    let l = labels(node).or_invalid(node)?;
    let rows = a.intercepts.len();
    let s = scores(ctx, node, &a, rows)?;
    let (label, y) = if rows == 1 {
        // Binary: label l[1] where the score is positive; scores [1 - p, p] with p the score
        // (LOGISTIC: its sigmoid, as ORT 1.31 does, where 1.23 left it as is; SOFTMAX and
        // SOFTMAX_ZERO leave it as is).
        let zero = ctx.scalar(f, 0.0)?;
        let pos = ctx.binary(BinaryOp::Greater, s, zero, f);
        let lpos = ctx.scalar(i, l[1] as f64)?;
        let lneg = ctx.scalar(i, l[0] as f64)?;
        let lab = select(ctx, pos, lpos, lneg, i);
        let lab = crate::ops::microsoft::reshape_to(ctx, lab, &[-1], i);
        let p = if a.post == Post::Logistic {
            ctx.unary(U::Sigmoid, s, f)
        } else {
            s
        };
        let one = ctx.scalar(f, 1.0)?;
        let q = ctx.binary(BinaryOp::Subtract, one, p, f);
        let y = crate::ops::microsoft::concat(ctx, vec![q, p], 1, f);
        (lab, y)
    } else {
        // The first best raw score picks the label.
        let at = ctx.temp(DataType::Uint32);
        ctx.push(Step::ArgReduce {
            op: crate::step::ArgReduceOp::ArgMax,
            x: s,
            axis: 1,
            keepdims: false,
            out: at,
        });
        let lc = i64_const(ctx, vec![l.len() as i64], &l);
        let lab = ctx.temp(i);
        ctx.push(Step::Take {
            x: lc,
            indices: at,
            axis: 0,
            out: lab,
        });
        let y = apply_post(ctx, node, s, rows as i64, a.post)?;
        (lab, y)
    };
    ctx.finish(node, 0, label, i)?;
    ctx.finish(node, 1, y, f)
}
