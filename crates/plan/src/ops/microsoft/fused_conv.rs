//! `FusedConv`: ORT's Conv with the optional sum input `Z` and an activation fused in, as its
//! graph optimizer writes it: `Y = activation(Conv(X, W, B) + Z)`. The Conv is the ONNX one's
//! lowering; the activation is one of ORT's fused kinds (`activation`, with `activation_params`
//! for the ones that take parameters). float32 only, as ORT's CPU EP registers it.

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, UnaryOp as U};

/// Registers the op.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(MS, "FusedConv", 1, 1, claim_fused_conv, lower_fused_conv)
        .notes("float32; activations Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid; optional sum input Z");
}

/// One of ORT's fused activations with its parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Activation {
    Identity,
    Relu,
    Tanh,
    Sigmoid,
    LeakyRelu(f32),
    Clip(f32, f32),
    HardSigmoid(f32, f32),
}

/// The activation of a FusedConv node; ORT requires the exact number of parameters.
fn activation(node: &Node) -> Result<Activation, String> {
    let Some(kind) = attr_str(node, "activation")? else {
        return Ok(Activation::Identity);
    };
    let params = attr_floats(node, "activation_params")?.unwrap_or_default();
    let want = match kind.as_str() {
        "Relu" | "Tanh" | "Sigmoid" => 0,
        "LeakyRelu" => 1,
        "Clip" | "HardSigmoid" => 2,
        other => return Err(format!("FusedConv: activation '{other}' is not supported")),
    };
    if want > 0 && params.len() != want {
        return Err(format!(
            "FusedConv: activation {kind} takes {want} activation_params, {} given",
            params.len()
        ));
    }
    Ok(match kind.as_str() {
        "Relu" => Activation::Relu,
        "Tanh" => Activation::Tanh,
        "Sigmoid" => Activation::Sigmoid,
        "LeakyRelu" => Activation::LeakyRelu(params[0]),
        "Clip" => Activation::Clip(params[0], params[1]),
        _ => Activation::HardSigmoid(params[0], params[1]),
    })
}

fn claim_fused_conv(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, &[DataType::Float])?;
    crate::ops::nn::claim_conv(ctx, node)?;
    activation(node).or_decline()?;
    if node.input(3).is_some() {
        ctx.expect_dtype(node, 3, &[DataType::Float])?;
    }
    if node.inputs.len() > 4 {
        decline!("FusedConv: more than 4 inputs");
    }
    Ok(())
}

/// Applies `a` to `x`.
fn apply(ctx: &mut LowerCtx, x: Slot, a: Activation, dt: DataType) -> Result<Slot, PlanError> {
    Ok(match a {
        Activation::Identity => x,
        Activation::Relu => {
            let zero = ctx.scalar(dt, 0.0)?;
            ctx.binary(B::Maximum, x, zero, dt)
        }
        Activation::Tanh => ctx.unary(U::Tanh, x, dt),
        Activation::Sigmoid => ctx.unary(U::Sigmoid, x, dt),
        Activation::LeakyRelu(alpha) => {
            // MLAS: x >= 0 ? x : alpha * x
            let alpha = ctx.scalar(dt, alpha as f64)?;
            let zero = ctx.scalar(dt, 0.0)?;
            let neg = ctx.binary(B::Less, x, zero, dt);
            let ax = ctx.binary(B::Multiply, x, alpha, dt);
            crate::ops::elementwise::select(ctx, neg, ax, x, dt)
        }
        Activation::Clip(lo, hi) => {
            // MLAS: min(max(x, lo), hi)
            let lo = ctx.scalar(dt, lo as f64)?;
            let hi = ctx.scalar(dt, hi as f64)?;
            let v = ctx.binary(B::Maximum, x, lo, dt);
            ctx.binary(B::Minimum, v, hi, dt)
        }
        Activation::HardSigmoid(alpha, beta) => {
            // MLAS: min(max(alpha * x + beta, 0), 1)
            let alpha = ctx.scalar(dt, alpha as f64)?;
            let beta = ctx.scalar(dt, beta as f64)?;
            let zero = ctx.scalar(dt, 0.0)?;
            let one = ctx.scalar(dt, 1.0)?;
            let ax = ctx.binary(B::Multiply, x, alpha, dt);
            let v = ctx.binary(B::Add, ax, beta, dt);
            let v = ctx.binary(B::Maximum, v, zero, dt);
            ctx.binary(B::Minimum, v, one, dt)
        }
    })
}

fn lower_fused_conv(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let a = activation(node).or_invalid(node)?;
    let mut y = crate::ops::nn::conv_channels_first(ctx, node)?;
    if let Some(z) = ctx.opt_input(node, 3)? {
        y = ctx.binary(B::Add, y, z, dt);
    }
    let y = apply(ctx, y, a, dt)?;
    ctx.finish(node, 0, y, dt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use onnx_ir::Attribute;

    fn node(kind: Option<&str>, params: Option<Vec<f32>>) -> Node {
        let mut n = Node::new("FusedConv", ["x", "w"], ["y"]);
        n.domain = MS.into();
        if let Some(k) = kind {
            n.attributes.insert(
                "activation".into(),
                Attribute::String(k.as_bytes().to_vec()),
            );
        }
        if let Some(p) = params {
            n.attributes
                .insert("activation_params".into(), Attribute::Floats(p));
        }
        n
    }

    #[test]
    fn activations_and_their_parameters() {
        assert_eq!(activation(&node(None, None)), Ok(Activation::Identity));
        assert_eq!(activation(&node(Some("Relu"), None)), Ok(Activation::Relu));
        assert_eq!(
            activation(&node(Some("Clip"), Some(vec![-1.0, 2.0]))),
            Ok(Activation::Clip(-1.0, 2.0))
        );
        assert!(activation(&node(Some("LeakyRelu"), None)).is_err());
        assert!(activation(&node(Some("HardSigmoid"), Some(vec![0.2]))).is_err());
        assert!(activation(&node(Some("Elu"), None)).is_err());
    }
}
