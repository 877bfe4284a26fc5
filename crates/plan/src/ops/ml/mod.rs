//! The `ai.onnx.ml` domain (classical machine learning): preprocessing ops (Scaler,
//! Normalizer, Binarizer, Imputer, ArrayFeatureExtractor, FeatureVectorizer, OneHotEncoder,
//! LabelEncoder), linear models (LinearRegressor, LinearClassifier), SVMRegressor and the tree
//! ensembles (TreeEnsembleRegressor, TreeEnsembleClassifier, TreeEnsemble).
//!
//! Each lowering follows ONNX Runtime's CPU kernel (which defines the numbers users compare
//! against): its accepted element types, its shape rules (most kernels read the input as
//! `[N, C]`, a 1-D input as one row) and its float32 arithmetic, step for step where the order
//! of rounding matters. Strings have no MLX type: LabelEncoder maps with strings run as a host
//! kernel (strings live on the host, see `ops::text`); the other ops' string forms (label
//! lists, categories) are declined and stay on ORT's CPU EP, as are attribute values and
//! shapes ORT's kernel rejects or treats in a way not reproduced here.

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::registry::ClaimCtx;
use crate::step::{ReduceAxes, ReduceOp};

pub mod linear;
pub mod preprocess;
pub mod svm;
pub mod tree;

/// The `ai.onnx.ml` domain.
pub(crate) const ML: &str = "ai.onnx.ml";

/// The newest `ai.onnx.ml` opset the family was checked against (onnx 1.21).
pub(crate) const ML_MAX: i64 = 5;

/// Registers the family.
pub fn register(r: &mut Registry) {
    preprocess::register(r);
    linear::register(r);
    svm::register(r);
    tree::register(r);
}

/// The declared dims of input `i`.
fn in_dims(ctx: &ClaimCtx, node: &Node, i: usize) -> Option<Vec<onnx_ir::Dim>> {
    crate::ops::microsoft::dims_of(ctx, node.input(i)?)
}

/// Declines unless input `i` has rank 1 or 2 (ORT's `[C]` or `[N, C]`); returns the rank.
fn rank_1_or_2(ctx: &ClaimCtx, node: &Node, i: usize) -> Result<usize, Decline> {
    let rank = ctx.expect_rank(node, i)?;
    if !(1..=2).contains(&rank) {
        return Err(Decline::new(format!(
            "{}: input {i} has rank {rank}; ORT's kernel reads it as [C] or [N, C] (rank 1 or 2)",
            node.op_type
        )));
    }
    Ok(rank)
}

/// The fixed feature count of input `i` (its last dim), when declared.
fn feature_count(ctx: &ClaimCtx, node: &Node, i: usize) -> Option<i64> {
    in_dims(ctx, node, i)?.last()?.fixed()
}

/// Declines unless input `i` is `[C]` or `[N, C]` with a declared `C`, returned.
fn features(ctx: &ClaimCtx, node: &Node, i: usize) -> Result<i64, Decline> {
    rank_1_or_2(ctx, node, i)?;
    feature_count(ctx, node, i).ok_or_else(|| {
        Decline::new(format!(
            "{}: the feature count (last dim) of input {i} is not declared, and the lowering \
             needs it",
            node.op_type
        ))
    })
}

/// Declines an attribute of strings (`*_strings`): MLX has no strings.
fn no_strings(node: &Node, name: &str) -> Result<(), Decline> {
    match node.attributes.get(name) {
        Some(onnx_ir::Attribute::Strings(v)) if !v.is_empty() => Err(Decline::new(format!(
            "{}: attribute '{name}' holds strings (MLX has no strings)",
            node.op_type
        ))),
        _ => Ok(()),
    }
}

/// The fixed feature count of input `i` at lowering time.
fn lower_features(ctx: &LowerCtx, node: &Node, i: usize) -> Result<i64, PlanError> {
    match crate::ops::microsoft::lower_last_dim(ctx, node, i) {
        Some(c) => Ok(c),
        None => crate::plan::invalid!(node, "the feature count of input {i} is unknown"),
    }
}

/// A float32 constant of shape `dims`.
fn f32_const(ctx: &mut LowerCtx, dims: Vec<i64>, v: &[f32]) -> Slot {
    ctx.constant(TensorData::from_f32(dims, v))
}

/// An int64 constant of shape `dims`.
fn i64_const(ctx: &mut LowerCtx, dims: Vec<i64>, v: &[i64]) -> Slot {
    ctx.constant(TensorData::from_i64(dims, v))
}

/// `mlx_where(cond, x, y)` into a new temporary of `dt`.
fn select(ctx: &mut LowerCtx, cond: Slot, x: Slot, y: Slot, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Where { cond, x, y, out });
    out
}

/// A reduction over the last axis of a rank-`rank` value, keeping it as size 1.
fn reduce_last(ctx: &mut LowerCtx, op: ReduceOp, x: Slot, rank: usize, dt: DataType) -> Slot {
    let out = ctx.temp(if matches!(op, ReduceOp::Any | ReduceOp::All) {
        DataType::Bool
    } else {
        dt
    });
    ctx.push(Step::Reduce {
        op,
        x,
        axes: ReduceAxes::Static(vec![rank as i64 - 1]),
        keepdims: true,
        out,
    });
    out
}

/// The sum over the last axis (of `c` elements, kept as size 1) added left to right, one
/// column at a time: the order of ORT's scalar loops, so the float32 rounding matches (an MLX
/// reduction may add in another order).
fn sequential_sum(ctx: &mut LowerCtx, x: Slot, c: i64, dt: DataType) -> Result<Slot, PlanError> {
    if c == 0 {
        return ctx.scalar(dt, 0.0);
    }
    let mut acc = crate::ops::microsoft::slice_last(ctx, x, 0, 1, 1, dt);
    for j in 1..c {
        let col = crate::ops::microsoft::slice_last(ctx, x, j, j + 1, 1, dt);
        acc = ctx.binary(BinaryOp::Add, acc, col, dt);
    }
    Ok(acc)
}

/// The most features a [`sequential_sum`] is emitted for (one step per feature).
const MAX_SEQUENTIAL: i64 = 512;

/// Declines when a sequential sum over `c` features would be too long a step list.
fn sequential_ok(node: &Node, c: i64) -> Result<(), Decline> {
    if c > MAX_SEQUENTIAL {
        return Err(Decline::new(format!(
            "{}: {c} features; row sums are emitted as one add per feature (to round as ORT \
             does) up to {MAX_SEQUENTIAL}",
            node.op_type
        )));
    }
    Ok(())
}
