//! Col2Im (opset 18): the inverse of im2col, an accumulation of column blocks into an image,
//! lowered to one [`Step::TakeSum`] (see [`crate::step::Col2ImGeometry`]).

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{Col2ImGeometry, Col2ImSpec, check_ort_rank};

/// Registers Col2Im.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "Col2Im", 18, MAX, claim_col2im, lower_col2im);
}

/// The attributes as given (`None` when absent).
#[allow(clippy::type_complexity)]
fn attrs(node: &Node) -> Result<(Option<Vec<i64>>, Option<Vec<i64>>, Option<Vec<i64>>), String> {
    Ok((
        attr_ints(node, "dilations")?,
        attr_ints(node, "pads")?,
        attr_ints(node, "strides")?,
    ))
}

fn claim_col2im(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, &[DataType::Float])?;
    ctx.expect_dtype(node, 1, &[DataType::Int64])?;
    ctx.expect_dtype(node, 2, &[DataType::Int64])?;
    if let Some(r) = ctx.rank(node.input(0).unwrap_or(""))
        && r != 3
    {
        decline!("Col2Im: input rank {r} is not 3");
    }
    let (dilations, pads, strides) = attrs(node).or_decline()?;
    let constant = |i: usize| {
        node.input(i)
            .and_then(|n| ctx.constant(n))
            .and_then(|t| t.to_i64_vec())
    };
    match (constant(1), constant(2)) {
        (Some(image), Some(block)) => {
            let d = image.len();
            let dilations = dilations.unwrap_or_else(|| vec![1; d]);
            let pads = pads.unwrap_or_else(|| vec![0; 2 * d]);
            let strides = strides.unwrap_or_else(|| vec![1; d]);
            check_ort_rank(d, &dilations, &pads, &strides).or_decline()?;
            Col2ImGeometry::new(&image, &block, &dilations, &pads, &strides).or_decline()?;
        }
        _ => {
            // Shapes read at run time: the spatial rank comes from the attributes (or is
            // irrelevant when they are all defaults).
            let d = dilations
                .as_ref()
                .map(Vec::len)
                .or(strides.as_ref().map(Vec::len))
                .or(pads.as_ref().map(|p| p.len() / 2));
            if let Some(d) = d {
                check_ort_rank(
                    d,
                    dilations.as_deref().unwrap_or(&[]),
                    pads.as_deref().unwrap_or(&[]),
                    strides.as_deref().unwrap_or(&[]),
                )
                .or_decline()?;
            }
        }
    }
    Ok(())
}

fn lower_col2im(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let (dilations, pads, strides) = attrs(node).or_invalid(node)?;
    let image = ctx.ints_input(node, 1)?;
    let block = ctx.ints_input(node, 2)?;
    let x = ctx.input(node, 0)?;
    let out = ctx.temp(DataType::Float);
    ctx.push(Step::TakeSum {
        x,
        spec: Col2ImSpec {
            image,
            block,
            dilations,
            pads,
            strides,
        },
        out,
    });
    ctx.finish(node, 0, out, DataType::Float)
}
