//! `ai.onnx.ml` SVMRegressor (and one-class SVM): the kernel between each row and every
//! support vector (LINEAR, POLY, RBF, SIGMOID), weighted by the coefficients, plus `rho`; with
//! no support vectors, a linear model `X @ coefficients + rho`. The dot products come out of
//! matrix products, so the last bits may differ from ORT's own GEMM (tests compare at a small
//! tolerance). Post transforms other than NONE are declined.

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::step::{ReduceAxes, ReduceOp, UnaryOp as U};

/// Registers the SVM ops.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(ML, "SVMRegressor", 1, ML_MAX, claim_svm_regressor, lower_svm_regressor)
        .notes("float32 `[N, C]`; LINEAR, POLY, RBF, SIGMOID kernels, one_class; post_transform NONE only");
}

/// The SVM kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    Linear,
    Poly,
    Rbf,
    Sigmoid,
}

/// The attributes of an SVMRegressor node.
struct SvmAttrs {
    kernel: Kernel,
    /// gamma, coef0, degree.
    params: [f32; 3],
    support_vectors: Vec<f32>,
    coefficients: Vec<f32>,
    rho: Vec<f32>,
    n_supports: i64,
    one_class: bool,
}

fn svm_attrs(node: &Node) -> Result<SvmAttrs, String> {
    let kernel = match attr_str(node, "kernel_type")?
        .as_deref()
        .unwrap_or("LINEAR")
    {
        "LINEAR" => Kernel::Linear,
        "POLY" => Kernel::Poly,
        "RBF" => Kernel::Rbf,
        "SIGMOID" => Kernel::Sigmoid,
        other => return Err(format!("SVMRegressor: unknown kernel_type '{other}'")),
    };
    // ORT's kernel rejects a node without the three (gamma, coef0, degree).
    let p = attr_floats(node, "kernel_params")?.unwrap_or_default();
    let params: [f32; 3] = p.as_slice().try_into().map_err(|_| {
        format!(
            "SVMRegressor: {} kernel_params (ORT's kernel needs gamma, coef0, degree)",
            p.len()
        )
    })?;
    match attr_str(node, "post_transform")?
        .as_deref()
        .unwrap_or("NONE")
    {
        "NONE" => {}
        other => {
            return Err(format!(
                "SVMRegressor: post_transform {other} is not claimed (NONE only)"
            ));
        }
    }
    Ok(SvmAttrs {
        kernel,
        params,
        support_vectors: attr_floats(node, "support_vectors")?.unwrap_or_default(),
        coefficients: attr_floats(node, "coefficients")?.unwrap_or_default(),
        rho: attr_floats(node, "rho")?.unwrap_or_default(),
        n_supports: attr_int(node, "n_supports")?.unwrap_or(0),
        one_class: attr_int(node, "one_class")?.unwrap_or(0) != 0,
    })
}

fn claim_svm_regressor(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    // ORT's kernel takes float32 (and double, declined here).
    ctx.expect_dtype(node, 0, &[DataType::Float])?;
    let a = svm_attrs(node).or_decline()?;
    let c = features(ctx, node, 0)?;
    if a.rho.len() != 1 {
        decline!("SVMRegressor: {} rho values (one expected)", a.rho.len());
    }
    if a.n_supports < 0 {
        decline!("SVMRegressor: n_supports = {}", a.n_supports);
    }
    if a.n_supports == 0 {
        if a.coefficients.len() as i64 != c {
            decline!(
                "SVMRegressor: a linear model (no support vectors) needs one coefficient per \
                 feature ({c}), got {}",
                a.coefficients.len()
            );
        }
    } else {
        let s = a.n_supports;
        if a.support_vectors.len() as i64 != s * c || a.coefficients.len() as i64 != s {
            decline!(
                "SVMRegressor: {} support-vector values and {} coefficients for {s} support \
                 vectors of {c} features",
                a.support_vectors.len(),
                a.coefficients.len()
            );
        }
    }
    Ok(())
}

fn lower_svm_regressor(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let f = DataType::Float;
    let a = svm_attrs(node).or_invalid(node)?;
    let c = lower_features(ctx, node, 0)?;
    let rank = ctx.need_rank(node, 0)?;
    let x = ctx.input(node, 0)?;
    let x = if rank == 1 {
        crate::ops::microsoft::unsqueeze(ctx, x, 0, f)
    } else {
        x
    };
    let matmul = |ctx: &mut LowerCtx, a: Slot, b: Slot| {
        let out = ctx.temp(f);
        ctx.push(Step::MatMul { a, b, out });
        out
    };
    let [gamma, coef0, degree] = a.params;
    let score = if a.n_supports == 0 {
        let w = f32_const(ctx, vec![c, 1], &a.coefficients);
        matmul(ctx, x, w)
    } else {
        let s = a.n_supports;
        let k = if a.kernel == Kernel::Rbf {
            // exp(-gamma * sum((x - sv)^2)) over [N, S, C].
            let sv = f32_const(ctx, vec![1, s, c], &a.support_vectors);
            let xe = crate::ops::microsoft::unsqueeze(ctx, x, 1, f);
            let d = ctx.binary(BinaryOp::Subtract, xe, sv, f);
            let sq = ctx.binary(BinaryOp::Multiply, d, d, f);
            let d2 = ctx.temp(f);
            ctx.push(Step::Reduce {
                op: ReduceOp::Sum,
                x: sq,
                axes: ReduceAxes::Static(vec![2]),
                keepdims: false,
                out: d2,
            });
            let ng = ctx.scalar(f, -gamma as f64)?;
            let e = ctx.binary(BinaryOp::Multiply, d2, ng, f);
            ctx.unary(U::Exp, e, f)
        } else {
            let mut svt = vec![0f32; a.support_vectors.len()];
            for i in 0..s as usize {
                for j in 0..c as usize {
                    svt[j * s as usize + i] = a.support_vectors[i * c as usize + j];
                }
            }
            let svt = f32_const(ctx, vec![c, s], &svt);
            let dot = matmul(ctx, x, svt);
            match a.kernel {
                Kernel::Linear => dot,
                Kernel::Poly | Kernel::Sigmoid => {
                    let g = ctx.scalar(f, gamma as f64)?;
                    let c0 = ctx.scalar(f, coef0 as f64)?;
                    let gd = ctx.binary(BinaryOp::Multiply, dot, g, f);
                    let t = ctx.binary(BinaryOp::Add, gd, c0, f);
                    if a.kernel == Kernel::Poly {
                        let deg = ctx.scalar(f, degree as f64)?;
                        ctx.binary(BinaryOp::Power, t, deg, f)
                    } else {
                        ctx.unary(U::Tanh, t, f)
                    }
                }
                Kernel::Rbf => {
                    crate::plan::invalid!(node, "internal: RBF lowered as a dot-product kernel")
                }
            }
        };
        let w = f32_const(ctx, vec![s, 1], &a.coefficients);
        matmul(ctx, k, w)
    };
    let rho = ctx.scalar(f, a.rho[0] as f64)?;
    let mut y = ctx.binary(BinaryOp::Add, score, rho, f);
    if a.one_class {
        let zero = ctx.scalar(f, 0.0)?;
        let one = ctx.scalar(f, 1.0)?;
        let minus_one = ctx.scalar(f, -1.0)?;
        let pos = ctx.binary(BinaryOp::Greater, y, zero, f);
        y = select(ctx, pos, one, minus_one, f);
    }
    ctx.finish(node, 0, y, f)
}
