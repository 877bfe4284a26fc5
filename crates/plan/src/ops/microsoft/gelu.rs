//! The Gelu family of `com.microsoft`: Gelu (erf), FastGelu (tanh, optional bias), BiasGelu
//! (erf of `A + B`) and QuickGelu (`x * sigmoid(alpha * x)`), computed in float32 for half
//! inputs as ORT does.

use onnx_ir::{DataType, Node};

use super::*;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, UnaryOp as U};

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(MS, "Gelu", 1, 1, claim_gelu, lower_gelu);
    r.op(MS, "FastGelu", 1, 1, claim_gelu, lower_gelu).notes("tanh approximation; optional bias");
    r.op(MS, "BiasGelu", 1, 1, claim_gelu, lower_gelu);
    r.op(MS, "QuickGelu", 1, 1, claim_gelu, lower_gelu).notes("`x * sigmoid(alpha * x)`");
}

fn claim_gelu(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let n = match node.op_type.as_str() {
        "FastGelu" | "BiasGelu" => 2,
        _ => 1,
    };
    same_dtypes(ctx, node, 0..n, FLOATS)?;
    if node.op_type == "QuickGelu" {
        attr_float(node, "alpha").or_decline()?;
    }
    Ok(())
}

/// `0.5 * x * (1 + erf(x / sqrt(2)))` in `cdt`.
pub(crate) fn gelu_erf(ctx: &mut LowerCtx, x: Slot, cdt: DataType) -> Result<Slot, PlanError> {
    let c = ctx.scalar(cdt, std::f64::consts::FRAC_1_SQRT_2)?;
    let xs = ctx.binary(B::Multiply, x, c, cdt);
    let e = ctx.unary(U::Erf, xs, cdt);
    half_x_one_plus(ctx, x, e, cdt)
}

/// `0.5 * x * (1 + inner)`.
fn half_x_one_plus(
    ctx: &mut LowerCtx,
    x: Slot,
    inner: Slot,
    cdt: DataType,
) -> Result<Slot, PlanError> {
    let one = ctx.scalar(cdt, 1.0)?;
    let half = ctx.scalar(cdt, 0.5)?;
    let p = ctx.binary(B::Add, inner, one, cdt);
    let hx = ctx.binary(B::Multiply, x, half, cdt);
    Ok(ctx.binary(B::Multiply, hx, p, cdt))
}

fn lower_gelu(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let cdt = compute_dtype(dt);
    let mut x = ctx.input(node, 0)?;
    if matches!(node.op_type.as_str(), "FastGelu" | "BiasGelu")
        && let Some(b) = ctx.opt_input(node, 1)?
    {
        x = ctx.binary(B::Add, x, b, dt);
    }
    let x = ctx.cast(x, dt, cdt);
    let y = match node.op_type.as_str() {
        "FastGelu" => {
            // tanh(sqrt(2/pi) * (x + 0.044715 x^3))
            let c = ctx.scalar(cdt, (2.0 / std::f64::consts::PI).sqrt())?;
            let k = ctx.scalar(cdt, 0.044715)?;
            let x2 = ctx.unary(U::Square, x, cdt);
            let x3 = ctx.binary(B::Multiply, x2, x, cdt);
            let kx3 = ctx.binary(B::Multiply, x3, k, cdt);
            let s = ctx.binary(B::Add, x, kx3, cdt);
            let cs = ctx.binary(B::Multiply, s, c, cdt);
            let t = ctx.unary(U::Tanh, cs, cdt);
            half_x_one_plus(ctx, x, t, cdt)?
        }
        "QuickGelu" => {
            let alpha = attr_float(node, "alpha").or_invalid(node)?.unwrap_or(1.702);
            let a = ctx.scalar(cdt, alpha as f64)?;
            let ax = ctx.binary(B::Multiply, x, a, cdt);
            let s = ctx.unary(U::Sigmoid, ax, cdt);
            ctx.binary(B::Multiply, x, s, cdt)
        }
        _ => gelu_erf(ctx, x, cdt)?,
    };
    let y = ctx.cast(y, cdt, dt);
    ctx.finish(node, 0, y, dt)
}
