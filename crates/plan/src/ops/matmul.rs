//! MatMul and Gemm.

use onnx_ir::Node;

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;

/// Registers the matmul family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "MatMul", 1, MAX, claim_matmul, lower_matmul)
        .notes("floating-point only: integer products stay on ORT (float32 can't hold int64 exactly)");
    r.op("", "Gemm", 7, MAX, claim_gemm, lower_gemm)
        .notes("A and B of rank 2; a constant transposed operand is transposed at plan time");
}

fn claim_matmul(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    // MLX's matmul runs on real floating types only; integer products would need an exact
    // widening that float32 cannot give for int64.
    same_dtypes(ctx, node, 0..2, FLOATS).map(|_| ())
}

fn lower_matmul(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let a = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    let out = ctx.temp(dt);
    ctx.push(Step::MatMul { a, b, out });
    ctx.finish(node, 0, out, dt)
}

fn claim_gemm(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let n = if node.input(2).is_some() { 3 } else { 2 };
    same_dtypes(ctx, node, 0..n, FLOATS)?;
    for i in 0..2 {
        if let Some(r) = ctx.rank(node.input(i).unwrap_or(""))
            && r != 2
        {
            decline!("Gemm: input {i} has rank {r}, expected 2");
        }
    }
    Ok(())
}

/// Transposes a 2-D operand, at plan time when it is a constant.
fn transposed(ctx: &mut LowerCtx, node: &Node, i: usize) -> Result<Slot, PlanError> {
    if let Some(t) = ctx.const_input(node, i)
        && let Some(tt) = crate::consts::transpose(t, &[1, 0])
    {
        return Ok(ctx.constant_from(node.input(i).unwrap_or(""), tt));
    }
    let dt = ctx.input_dtype(node, i)?;
    let x = ctx.input(node, i)?;
    let out = ctx.temp(dt);
    ctx.push(Step::Transpose {
        x,
        perm: Some(vec![1, 0]),
        out,
    });
    Ok(out)
}

fn lower_gemm(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let alpha = attr_float(node, "alpha").or_invalid(node)?.unwrap_or(1.0);
    let beta = attr_float(node, "beta").or_invalid(node)?.unwrap_or(1.0);
    let ta = attr_int(node, "transA").or_invalid(node)?.unwrap_or(0) != 0;
    let tb = attr_int(node, "transB").or_invalid(node)?.unwrap_or(0) != 0;
    let a = if ta {
        transposed(ctx, node, 0)?
    } else {
        ctx.input(node, 0)?
    };
    let b = if tb {
        transposed(ctx, node, 1)?
    } else {
        ctx.input(node, 1)?
    };
    let c = if beta != 0.0 {
        ctx.opt_input(node, 2)?
    } else {
        None
    };
    let out = match c {
        Some(c) => {
            let out = ctx.temp(dt);
            ctx.push(Step::Addmm {
                c,
                a,
                b,
                alpha,
                beta,
                out,
            });
            out
        }
        None => {
            let out = ctx.temp(dt);
            ctx.push(Step::MatMul { a, b, out });
            if alpha != 1.0 {
                let s = ctx.scalar(dt, alpha as f64)?;
                ctx.binary(crate::step::BinaryOp::Multiply, out, s, dt)
            } else {
                out
            }
        }
    };
    ctx.finish(node, 0, out, dt)
}
