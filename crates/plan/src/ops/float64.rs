//! float64 forms of ops whose MLX kernel is not float64-accurate.
//!
//! MLX computes float64 on its CPU backend only, and its float64 `exp` (and what builds on it:
//! `sigmoid`, `logaddexp`, `logsumexp`, `softmax`) evaluates a float32-accurate approximation
//! (about 1e-7 relative error), while `power`, `expm1`, `log` and the other libm-backed
//! kernels are float64-accurate. Here `exp` is rebuilt from `power`:
//!
//! `exp(x) = e_d^x * exp(x * c)`, where `e_d` is the double nearest e and
//! `c = 1 - ln(e_d) ~ 5.3e-17`; since `|x * c| < 4e-14` wherever `exp(x)` is finite and
//! non-zero, `exp(x * c) = 1 + x * c` to double precision. So `exp(x) ~ pow(e_d, x) * (1 + x*c)`,
//! within a few ulps of the correctly rounded value (plain `pow(e_d, x)` is off by up to
//! `|x| * 5.3e-17` relative, 4e-14 near the overflow limit).

use onnx_ir::DataType;

use crate::plan::{LowerCtx, PlanError};
use crate::step::{BinaryOp as B, Slot, UnaryOp as U};

/// `1 - ln(e_d)`, with `e_d` = `std::f64::consts::E` (the double nearest e).
const LN_CORRECTION: f64 = 5.318_237_706_605_891e-17;

/// `|x|` beyond which `exp(x)` is 0 or infinite in float64; the correction clamps `x` there so
/// that `0 * (1 + x*c)` and `inf * (1 + x*c)` stay 0 and inf (not NaN for infinite `x`).
const EXP_LIMIT: f64 = 750.0;

/// `exp(x)` in float64 from float64-accurate MLX kernels (see the module docs).
pub(crate) fn exp(ctx: &mut LowerCtx, x: Slot) -> Result<Slot, PlanError> {
    let dt = DataType::Double;
    let e = ctx.scalar(dt, std::f64::consts::E)?;
    let c = ctx.scalar(dt, LN_CORRECTION)?;
    let one = ctx.scalar(dt, 1.0)?;
    let lo = ctx.scalar(dt, -EXP_LIMIT)?;
    let hi = ctx.scalar(dt, EXP_LIMIT)?;
    let p = ctx.binary(B::Power, e, x, dt);
    let xc = ctx.binary(B::Maximum, x, lo, dt);
    let xc = ctx.binary(B::Minimum, xc, hi, dt);
    let t = ctx.binary(B::Multiply, xc, c, dt);
    let corr = ctx.binary(B::Add, t, one, dt);
    Ok(ctx.binary(B::Multiply, p, corr, dt))
}

/// `log(sum(exp(x), axes))` in float64, shifted by the maximum as usual: with
/// `m = max(x, axes)` (0 where the maximum is infinite or the reduction is empty),
/// `log(sum(exp(x - m))) + m`.
pub(crate) fn log_sum_exp(
    ctx: &mut LowerCtx,
    x: Slot,
    axes: &crate::step::ReduceAxes,
    keepdims: bool,
) -> Result<Slot, PlanError> {
    use crate::step::{ReduceOp, Step};
    let dt = DataType::Double;
    let zero = ctx.scalar(dt, 0.0)?;
    let reduce = |ctx: &mut LowerCtx, op: ReduceOp, x: Slot, keep: bool| {
        let out = ctx.temp(dt);
        ctx.push(Step::Reduce {
            op,
            x,
            axes: axes.clone(),
            keepdims: keep,
            out,
        });
        out
    };
    let finite_max = |ctx: &mut LowerCtx, m: Slot| {
        let inf = ctx.unary(U::IsInf, m, DataType::Bool);
        let out = ctx.temp(dt);
        ctx.push(Step::Where {
            cond: inf,
            x: zero,
            y: m,
            out,
        });
        out
    };
    let m_kept = reduce(ctx, ReduceOp::Max, x, true);
    let m_kept = finite_max(ctx, m_kept);
    let shifted = ctx.binary(B::Subtract, x, m_kept, dt);
    let e = exp(ctx, shifted)?;
    let s = reduce(ctx, ReduceOp::Sum, e, keepdims);
    let l = ctx.unary(U::Log, s, dt);
    let m = if keepdims {
        m_kept
    } else {
        let m = reduce(ctx, ReduceOp::Max, x, false);
        finite_max(ctx, m)
    };
    Ok(ctx.binary(B::Add, l, m, dt))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `exp` as the lowering computes it, in Rust's float64 (`powf` is libm's `pow`).
    fn exp_as_lowered(x: f64) -> f64 {
        let xc = x.clamp(-EXP_LIMIT, EXP_LIMIT);
        std::f64::consts::E.powf(x) * (1.0 + xc * LN_CORRECTION)
    }

    #[test]
    fn float64_ops_are_sorted_and_registered() {
        let ops = crate::registry::FLOAT64_OPS;
        assert!(
            ops.windows(2).all(|w| w[0] < w[1]),
            "FLOAT64_OPS must be sorted"
        );
        let r = crate::Registry::default();
        let entries = r.entries();
        for op in ops {
            assert!(
                entries
                    .iter()
                    .any(|e| e.domain.is_empty() && e.op_type == *op),
                "{op} is in FLOAT64_OPS but not registered"
            );
        }
    }

    #[test]
    fn correction_constant_is_one_minus_ln_e_d() {
        // ln(e_d) = 1 - c to double precision: e_d^(1/(1-c)) would be e itself.
        let ln_e_d = std::f64::consts::E.ln();
        assert!((1.0 - ln_e_d - LN_CORRECTION).abs() < 1.2e-16, "{ln_e_d}");
    }

    #[test]
    fn exp_from_pow_is_float64_accurate() {
        for &x in &[
            -700.0_f64, -30.5, -1.0, -1e-3, 0.0, 0.5, 1.0, 3.25, 30.0, 700.0, 709.7,
        ] {
            let want = x.exp();
            let got = exp_as_lowered(x);
            let rel = ((got - want) / want).abs();
            assert!(rel < 4e-16, "x = {x}: {got} vs {want} (rel {rel:e})");
        }
        assert_eq!(exp_as_lowered(f64::NEG_INFINITY), 0.0);
        assert_eq!(exp_as_lowered(f64::INFINITY), f64::INFINITY);
        assert_eq!(exp_as_lowered(800.0), f64::INFINITY);
        assert_eq!(exp_as_lowered(-800.0), 0.0);
        assert!(exp_as_lowered(f64::NAN).is_nan());
    }
}
