//! `ai.onnx.ml` SVMRegressor (and one-class SVM) and SVMClassifier: the kernel between each row
//! and every support vector (LINEAR, POLY, RBF, SIGMOID), weighted by the coefficients, plus
//! `rho`; with no support vectors, a linear model `X @ coefficients + rho`. The dot products
//! come out of matrix products, so the last bits may differ from ORT's own GEMM (and ORT adds
//! the classifier's one-vs-one terms in float64): tests compare at a small tolerance. The
//! regressor's post transforms other than NONE, the classifier's PROBIT and its probability
//! estimates (`prob_a`/`prob_b`, ORT's iterative pairwise coupling) are declined.

use onnx_ir::{DataType, Node};

use super::linear::{Post, apply_post, post_transform};
use super::*;
use crate::decline;
use crate::step::{ArgReduceOp, ReduceAxes, ReduceOp, UnaryOp as U};

/// Registers the SVM ops.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(ML, "SVMRegressor", 1, ML_MAX, claim_svm_regressor, lower_svm_regressor)
        .notes("float32 `[N, C]`; LINEAR, POLY, RBF, SIGMOID kernels, one_class; post_transform NONE only");
    r.op(ML, "SVMClassifier", 1, ML_MAX, claim_svm_classifier, lower_svm_classifier)
        .notes("float32/float64/int32/int64 `[N, C]` (read as float32, as ORT), `classlabels_ints`; one-vs-one votes over LINEAR, POLY, RBF, SIGMOID kernels, or the linear form; prob_a/prob_b, PROBIT and string labels declined");
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

/// The kernel and its parameters (gamma, coef0, degree), which ORT's kernels require.
fn kernel_of(node: &Node) -> Result<(Kernel, [f32; 3]), String> {
    let op = &node.op_type;
    let kernel = match attr_str(node, "kernel_type")?
        .as_deref()
        .unwrap_or("LINEAR")
    {
        "LINEAR" => Kernel::Linear,
        "POLY" => Kernel::Poly,
        "RBF" => Kernel::Rbf,
        "SIGMOID" => Kernel::Sigmoid,
        other => return Err(format!("{op}: unknown kernel_type '{other}'")),
    };
    // ORT's kernel rejects a node without the three (gamma, coef0, degree).
    let p = attr_floats(node, "kernel_params")?.unwrap_or_default();
    let params: [f32; 3] = p.as_slice().try_into().map_err(|_| {
        format!(
            "{op}: {} kernel_params (ORT's kernel needs gamma, coef0, degree)",
            p.len()
        )
    })?;
    Ok((kernel, params))
}

fn svm_attrs(node: &Node) -> Result<SvmAttrs, String> {
    let (kernel, params) = kernel_of(node)?;
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
    let score = if a.n_supports == 0 {
        let w = f32_const(ctx, vec![c, 1], &a.coefficients);
        matmul(ctx, x, w)
    } else {
        let s = a.n_supports;
        let k = kernel_matrix(ctx, node, x, a.kernel, a.params, &a.support_vectors, s, c)?;
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

/// The kernel of every row of `x` (`[N, C]` float32) with each of the `s` support vectors
/// (`[s, C]` row-major): `[N, s]`, as ORT's `batched_kernel_dot` (without its bias).
#[allow(clippy::too_many_arguments)]
fn kernel_matrix(
    ctx: &mut LowerCtx,
    node: &Node,
    x: Slot,
    kernel: Kernel,
    params: [f32; 3],
    support_vectors: &[f32],
    s: i64,
    c: i64,
) -> Result<Slot, PlanError> {
    let f = DataType::Float;
    let [gamma, coef0, degree] = params;
    let matmul = |ctx: &mut LowerCtx, a: Slot, b: Slot| {
        let out = ctx.temp(f);
        ctx.push(Step::MatMul { a, b, out });
        out
    };
    let k = if kernel == Kernel::Rbf {
        // exp(-gamma * sum((x - sv)^2)) over [N, S, C].
        let sv = f32_const(ctx, vec![1, s, c], support_vectors);
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
        let mut svt = vec![0f32; support_vectors.len()];
        for i in 0..s as usize {
            for j in 0..c as usize {
                svt[j * s as usize + i] = support_vectors[i * c as usize + j];
            }
        }
        let svt = f32_const(ctx, vec![c, s], &svt);
        let dot = matmul(ctx, x, svt);
        match kernel {
            Kernel::Linear => dot,
            Kernel::Poly | Kernel::Sigmoid => {
                let g = ctx.scalar(f, gamma as f64)?;
                let c0 = ctx.scalar(f, coef0 as f64)?;
                let gd = ctx.binary(BinaryOp::Multiply, dot, g, f);
                let t = ctx.binary(BinaryOp::Add, gd, c0, f);
                if kernel == Kernel::Poly {
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
    Ok(k)
}

// ---------------------------------------------------------------------------------------------
// SVMClassifier.

/// The attributes of an SVMClassifier node.
struct SvcAttrs {
    kernel: Kernel,
    params: [f32; 3],
    support_vectors: Vec<f32>,
    coefficients: Vec<f32>,
    rho: Vec<f32>,
    vectors_per_class: Vec<i64>,
    labels: Vec<i64>,
    post: Post,
    /// Support vectors in all (0: the linear form).
    vectors: i64,
}

fn svc_attrs(node: &Node) -> Result<SvcAttrs, String> {
    let op = "SVMClassifier";
    let (kernel, params) = kernel_of(node)?;
    let post = post_transform(node)?;
    if post == Post::Probit {
        return Err(format!(
            "{op}: post_transform PROBIT is not claimed (ORT's inverse-erf approximation is not \
             reproduced exactly)"
        ));
    }
    if !attr_floats(node, "prob_a")?.unwrap_or_default().is_empty()
        || !attr_floats(node, "prob_b")?.unwrap_or_default().is_empty()
    {
        return Err(format!(
            "{op}: prob_a/prob_b (ORT's iterative pairwise coupling of probabilities is not \
             reproduced)"
        ));
    }
    if matches!(node.attributes.get("classlabels_strings"), Some(onnx_ir::Attribute::Strings(v)) if !v.is_empty())
    {
        return Err(format!(
            "{op}: attribute 'classlabels_strings' holds strings (MLX has no strings)"
        ));
    }
    let labels = attr_ints(node, "classlabels_ints")?.unwrap_or_default();
    if labels.len() < 2 {
        return Err(format!(
            "{op}: {} class labels (two or more are claimed)",
            labels.len()
        ));
    }
    let vectors_per_class = attr_ints(node, "vectors_per_class")?.unwrap_or_default();
    if vectors_per_class.iter().any(|&v| v < 0) {
        return Err(format!("{op}: a negative vectors_per_class"));
    }
    let vectors = vectors_per_class.iter().sum::<i64>();
    Ok(SvcAttrs {
        kernel,
        params,
        support_vectors: attr_floats(node, "support_vectors")?.unwrap_or_default(),
        coefficients: attr_floats(node, "coefficients")?.unwrap_or_default(),
        rho: attr_floats(node, "rho")?.unwrap_or_default(),
        vectors_per_class,
        labels,
        post,
        vectors,
    })
}

/// The feature count of an SVMClassifier, from its attributes (ORT's own rule).
fn svc_features(a: &SvcAttrs) -> Result<i64, String> {
    let k = a.labels.len() as i64;
    let (total, per) = if a.vectors > 0 {
        (a.support_vectors.len() as i64, a.vectors)
    } else {
        (a.coefficients.len() as i64, k)
    };
    if total == 0 || total % per != 0 {
        return Err(format!(
            "SVMClassifier: {total} {} values for {per} rows",
            if a.vectors > 0 {
                "support-vector"
            } else {
                "coefficient"
            }
        ));
    }
    Ok(total / per)
}

fn claim_svm_classifier(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    // ORT converts every input type to float32 first.
    ctx.expect_dtype(
        node,
        0,
        &[
            DataType::Float,
            DataType::Double,
            DataType::Int32,
            DataType::Int64,
        ],
    )?;
    let a = svc_attrs(node).or_decline()?;
    let c = svc_features(&a).or_decline()?;
    // An input of unknown rank (another claimed node's output) is checked at run time.
    if node.input(0).and_then(|n| ctx.rank(n)).is_some() {
        let declared = features(ctx, node, 0)?;
        if declared != c {
            decline!("SVMClassifier: the input has {declared} features, the model {c}");
        }
    }
    let k = a.labels.len() as i64;
    if a.vectors > 0 {
        let v = a.vectors;
        if a.vectors_per_class.len() as i64 != k {
            decline!(
                "SVMClassifier: {} vectors_per_class for {k} classes (ORT's kernel rejects it)",
                a.vectors_per_class.len()
            );
        }
        if (a.coefficients.len() as i64) < (k - 1) * v || (a.rho.len() as i64) < k * (k - 1) / 2 {
            decline!(
                "SVMClassifier: {} coefficients and {} rho for {k} classes of {v} vectors \
                 (ORT's kernel rejects it)",
                a.coefficients.len(),
                a.rho.len()
            );
        }
        if k > 2 && a.post != Post::None {
            sequential_ok(node, k * (k - 1) / 2)?;
        }
    } else {
        if a.rho.is_empty() {
            decline!("SVMClassifier: the linear form needs a rho (ORT's kernel rejects it)");
        }
        if a.post != Post::None {
            sequential_ok(node, k)?;
        }
    }
    Ok(())
}

/// The float32 `[N, C]` rows of input 0 (a 1-D input is one row, as in ORT). Where the claim
/// could not see the input's rank, a run-time requirement checks it is `[N, c]` or `[c]`.
fn svc_rows(ctx: &mut LowerCtx, node: &Node, c: i64) -> Result<Slot, PlanError> {
    let (f, i, b) = (DataType::Float, DataType::Int64, DataType::Bool);
    let dt = ctx.input_dtype(node, 0)?;
    let x = ctx.input(node, 0)?;
    // ORT converts other input types to float32 first.
    let x = ctx.cast(x, dt, f);
    match ctx.input_rank(node, 0) {
        Some(1) => return Ok(crate::ops::microsoft::unsqueeze(ctx, x, 0, f)),
        Some(_) => return Ok(x),
        None => {}
    }
    let shape = ctx.shape_vec(x);
    let rank = ctx.shape_vec(shape);
    let last = crate::ops::microsoft::slice_last(ctx, shape, -1, i64::MAX, 1, i);
    let cs = ctx.scalar(i, c as f64)?;
    let wide = ctx.binary(BinaryOp::Equal, last, cs, i);
    let three = ctx.scalar(i, 3.0)?;
    let low = ctx.binary(BinaryOp::Less, rank, three, i);
    let ok = ctx.binary(BinaryOp::LogicalAnd, low, wide, b);
    let out = ctx.temp(b);
    ctx.push(Step::Require {
        ok,
        what: format!("the input must be [N, {c}] or [{c}]"),
        out,
    });
    let flat = ctx.temp(f);
    ctx.push(Step::Reshape {
        x,
        target: crate::step::ReshapeTarget::Flatten { axis: -1 },
        out: flat,
    });
    Ok(flat)
}

fn lower_svm_classifier(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let (f, i) = (DataType::Float, DataType::Int64);
    let a = svc_attrs(node).or_invalid(node)?;
    let c = svc_features(&a).or_invalid(node)?;
    let k = a.labels.len() as i64;
    let x = svc_rows(ctx, node, c)?;
    let matmul = |ctx: &mut LowerCtx, a: Slot, b: Slot| {
        let out = ctx.temp(f);
        ctx.push(Step::MatMul { a, b, out });
        out
    };
    let argmax = |ctx: &mut LowerCtx, s: Slot| {
        let at = ctx.temp(DataType::Uint32);
        ctx.push(Step::ArgReduce {
            op: ArgReduceOp::ArgMax,
            x: s,
            axis: 1,
            keepdims: false,
            out: at,
        });
        at
    };
    let labels = i64_const(ctx, vec![k], &a.labels);
    let label_of = |ctx: &mut LowerCtx, at: Slot| {
        let lab = ctx.temp(i);
        ctx.push(Step::Take {
            x: labels,
            indices: at,
            axis: 0,
            out: lab,
        });
        lab
    };
    if a.vectors == 0 {
        // The linear form: X @ coefficients^T + rho[0], one score per class.
        let mut wt = vec![0f32; (k * c) as usize];
        for r in 0..k as usize {
            for j in 0..c as usize {
                wt[j * k as usize + r] = a.coefficients[r * c as usize + j];
            }
        }
        let w = f32_const(ctx, vec![c, k], &wt);
        let s = matmul(ctx, x, w);
        let rho = ctx.scalar(f, a.rho[0] as f64)?;
        let s = ctx.binary(BinaryOp::Add, s, rho, f);
        let best = argmax(ctx, s);
        let mut lab = label_of(ctx, best);
        if k == 2 {
            // ORT's binary rule on the best score.
            let m = reduce_last(ctx, ReduceOp::Max, s, 2, f);
            let m = crate::ops::microsoft::reshape_to(ctx, m, &[-1], f);
            let positive = a.coefficients.iter().all(|w| *w >= 0.0);
            let cut = ctx.scalar(f, if positive { 0.5 } else { 0.0 })?;
            let op = if positive {
                BinaryOp::GreaterEqual
            } else {
                BinaryOp::Greater
            };
            let up = ctx.binary(op, m, cut, f);
            let l1 = ctx.scalar(i, a.labels[1] as f64)?;
            lab = select(ctx, up, l1, lab, i);
        }
        let y = apply_post(ctx, node, s, k, a.post)?;
        ctx.finish(node, 0, lab, i)?;
        return ctx.finish(node, 1, y, f);
    }
    let v = a.vectors;
    let kern = kernel_matrix(ctx, node, x, a.kernel, a.params, &a.support_vectors, v, c)?;
    // One column per pair (i, j), i < j: class i's vectors weighted by coefficient row j - 1,
    // class j's by row i, plus rho.
    let starts: Vec<i64> = a
        .vectors_per_class
        .iter()
        .scan(0, |acc, &n| {
            let s = *acc;
            *acc += n;
            Some(s)
        })
        .collect();
    let pairs = (k * (k - 1) / 2) as usize;
    let (vu, ku) = (v as usize, k as usize);
    let mut w = vec![0f32; vu * pairs];
    let mut for_i = vec![0f32; pairs * ku];
    let mut for_j = vec![0f32; pairs * ku];
    let mut p = 0;
    for ci in 0..ku - 1 {
        for cj in ci + 1..ku {
            for (class, row) in [(ci, cj - 1), (cj, ci)] {
                let s0 = starts[class] as usize;
                for m in 0..a.vectors_per_class[class] as usize {
                    w[(s0 + m) * pairs + p] = a.coefficients[row * vu + s0 + m];
                }
            }
            for_i[p * ku + ci] = 1.0;
            for_j[p * ku + cj] = 1.0;
            p += 1;
        }
    }
    let wc = f32_const(ctx, vec![v, pairs as i64], &w);
    let d = matmul(ctx, kern, wc);
    let rho = f32_const(ctx, vec![pairs as i64], &a.rho[..pairs]);
    let d = ctx.binary(BinaryOp::Add, d, rho, f);
    // Votes: a positive score votes for i, any other for j; the first most voted class wins.
    let zero = ctx.scalar(f, 0.0)?;
    let pos = ctx.binary(BinaryOp::Greater, d, zero, f);
    let one = ctx.scalar(f, 1.0)?;
    let posf = select(ctx, pos, one, zero, f);
    let negf = ctx.binary(BinaryOp::Subtract, one, posf, f);
    let mi = f32_const(ctx, vec![pairs as i64, k], &for_i);
    let mj = f32_const(ctx, vec![pairs as i64, k], &for_j);
    let vi = matmul(ctx, posf, mi);
    let vj = matmul(ctx, negf, mj);
    let votes = ctx.binary(BinaryOp::Add, vi, vj, f);
    let best = argmax(ctx, votes);
    let lab = label_of(ctx, best);
    let y = if k == 2 {
        // One score s: [-s, s] without a transform, [1 - p, p] with LOGISTIC (p its logistic,
        // as ORT 1.31), [1 - s, s] with the others.
        let (lo, hi) = match a.post {
            Post::None => (ctx.unary(U::Negative, d, f), d),
            Post::Logistic => {
                let p = ctx.unary(U::Sigmoid, d, f);
                (ctx.binary(BinaryOp::Subtract, one, p, f), p)
            }
            _ => (ctx.binary(BinaryOp::Subtract, one, d, f), d),
        };
        crate::ops::microsoft::concat(ctx, vec![lo, hi], 1, f)
    } else {
        apply_post(ctx, node, d, pairs as i64, a.post)?
    };
    ctx.finish(node, 0, lab, i)?;
    ctx.finish(node, 1, y, f)
}
