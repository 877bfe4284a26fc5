//! ConvTranspose: one `mlx_conv_general` over the stride-dilated input with the flipped,
//! regrouped kernel (see [`crate::step::ConvTransposeSpec`]), then a `Slice` where the pads
//! exceed the kernel.

use onnx_ir::{Node, TensorData};

use super::nn::{channel_perms, finish_channels_last, spatial_attr};
use super::*;
use crate::decline;
use crate::host::HostArg;
use crate::kernel::{self, KernelAttrs};
use crate::plan::invalid;
use crate::registry::ClaimCtx;
use crate::step::{ConvTransposePadding, ConvTransposeSpec, ReshapeTarget, ShapeSource, SliceSpec};

/// Registers the ConvTranspose family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "ConvTranspose", 1, MAX, claim_conv_transpose, lower_conv_transpose);
    r.kernel(CROP_KERNEL, crop_kernel);
}

/// The host kernel giving the crop bounds of a ConvTranspose with `output_shape`.
const CROP_KERNEL: &str = "conv_transpose_crop";

/// The attributes of a ConvTranspose whose weight has shape `w_shape` (`[C, M/group, *k]`).
pub(crate) fn conv_transpose_spec(
    node: &Node,
    w_shape: &[i64],
) -> Result<ConvTransposeSpec, String> {
    if w_shape.len() < 3 {
        return Err(format!(
            "ConvTranspose: weight shape {w_shape:?} has no spatial dims"
        ));
    }
    let kernel = match attr_ints(node, "kernel_shape")? {
        Some(k) => {
            if k[..] != w_shape[2..] {
                return Err(format!(
                    "ConvTranspose: kernel_shape {k:?} differs from the weight's {:?}",
                    &w_shape[2..]
                ));
            }
            k
        }
        None => w_shape[2..].to_vec(),
    };
    let d = kernel.len();
    if !(1..=3).contains(&d) {
        return Err(format!(
            "ConvTranspose: {d} spatial dims are not claimed (MLX convolves 1-3)"
        ));
    }
    let strides = spatial_attr(node, "strides", d)?;
    let dilations = spatial_attr(node, "dilations", d)?;
    let output_padding = attr_ints(node, "output_padding")?.unwrap_or_else(|| vec![0; d]);
    if output_padding.len() != d {
        return Err(format!(
            "ConvTranspose: output_padding {output_padding:?} does not match {d} spatial dims"
        ));
    }
    for i in 0..d {
        if output_padding[i] < 0 || output_padding[i] >= strides[i].max(dilations[i]) {
            return Err(format!(
                "ConvTranspose: output_padding {output_padding:?} must be in [0, max(stride, \
                 dilation)) (ONNX Runtime rejects it)"
            ));
        }
    }
    let groups = attr_int(node, "group")?.unwrap_or(1);
    if groups < 1 {
        return Err(format!("ConvTranspose: group {groups} is invalid"));
    }
    if w_shape[0] % groups != 0 {
        return Err(format!(
            "ConvTranspose: {} input channels do not split into {groups} groups",
            w_shape[0]
        ));
    }
    let auto = attr_str(node, "auto_pad")?.unwrap_or_else(|| "NOTSET".into());
    let upper = auto == "SAME_UPPER";
    let padding = if let Some(shape) = attr_ints(node, "output_shape")? {
        if shape.len() != d && shape.len() != d + 2 {
            return Err(format!(
                "ConvTranspose: output_shape {shape:?} has neither {d} nor {} entries",
                d + 2
            ));
        }
        if !matches!(
            auto.as_str(),
            "NOTSET" | "VALID" | "SAME_UPPER" | "SAME_LOWER"
        ) {
            return Err(format!("ConvTranspose: auto_pad '{auto}' is invalid"));
        }
        let spatial = shape[shape.len() - d..].to_vec();
        if spatial.iter().any(|&v| v < 0) {
            return Err(format!("ConvTranspose: output_shape {shape:?} is negative"));
        }
        ConvTransposePadding::OutputShape {
            shape: spatial,
            upper,
        }
    } else {
        match auto.as_str() {
            "NOTSET" => {
                let pads = attr_ints(node, "pads")?.unwrap_or_else(|| vec![0; 2 * d]);
                if pads.len() != 2 * d || pads.iter().any(|&p| p < 0) {
                    return Err(format!(
                        "ConvTranspose: pads {pads:?} are invalid for {d} spatial dims"
                    ));
                }
                ConvTransposePadding::Explicit {
                    lo: pads[..d].to_vec(),
                    hi: pads[d..].to_vec(),
                }
            }
            "VALID" => ConvTransposePadding::Explicit {
                lo: vec![0; d],
                hi: vec![0; d],
            },
            "SAME_UPPER" | "SAME_LOWER" => ConvTransposePadding::Same { upper },
            other => return Err(format!("ConvTranspose: auto_pad '{other}' is invalid")),
        }
    };
    Ok(ConvTransposeSpec {
        kernel,
        strides,
        dilations,
        output_padding,
        padding,
        groups,
    })
}

fn weight_shape(ctx: &ClaimCtx, node: &Node) -> Option<Vec<i64>> {
    let w = node.input(1)?;
    ctx.constant(w)
        .map(|t| t.dims.clone())
        .or_else(|| ctx.graph.value(w).and_then(|v| v.fixed_shape()))
}

fn claim_conv_transpose(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let n = if node.input(2).is_some() { 3 } else { 2 };
    same_dtypes(ctx, node, 0..n, FLOATS)?;
    let Some(wshape) = weight_shape(ctx, node) else {
        decline!("ConvTranspose: the weight's shape is not fixed (it is regrouped at plan time)");
    };
    let spec = conv_transpose_spec(node, &wshape).or_decline()?;
    if let Some(r) = ctx.rank(node.input(0).unwrap_or(""))
        && r != spec.kernel.len() + 2
    {
        decline!(
            "ConvTranspose: input rank {r} does not match the weight rank {}",
            wshape.len()
        );
    }
    Ok(())
}

/// `[C, M/g, *k]` -> `[M, *k, C/g]`: `[g, C/g, M/g, *k]` transposed to `[g, M/g, *k, C/g]`.
fn regroup(w_shape: &[i64], groups: i64) -> (Vec<i64>, Vec<usize>, Vec<i64>) {
    let d = w_shape.len() - 2;
    let (c, mg) = (w_shape[0], w_shape[1]);
    let mut split = vec![groups, c / groups, mg];
    split.extend_from_slice(&w_shape[2..]);
    let mut perm = vec![0, 2];
    perm.extend(3..3 + d);
    perm.push(1);
    let mut merged = vec![groups * mg];
    merged.extend_from_slice(&w_shape[2..]);
    merged.push(c / groups);
    (split, perm, merged)
}

fn lower_conv_transpose(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let wname = node.input(1).unwrap_or("").to_string();
    let Some(wshape) = ctx.fixed_shape(&wname) else {
        invalid!(node, "the weight's shape is not fixed");
    };
    let spec = conv_transpose_spec(node, &wshape).or_invalid(node)?;
    let rank = spec.kernel.len() + 2;
    let (split, perm, merged) = regroup(&wshape, spec.groups);
    let (to_cl, to_cf) = channel_perms(rank);

    let x = ctx.input(node, 0)?;
    let xcl = ctx.temp(dt);
    ctx.push(Step::Transpose {
        x,
        perm: Some(to_cl),
        out: xcl,
    });
    let folded: Option<TensorData> = ctx.const_input(node, 1).and_then(|t| {
        let t = crate::consts::reshaped(t, split.clone())?;
        let t = crate::consts::transpose(&t, &perm)?;
        crate::consts::reshaped(&t, merged.clone())
    });
    let w = match folded {
        Some(t) => ctx.constant_from(&wname, t),
        None => {
            let w = ctx.input(node, 1)?;
            let a = ctx.temp(dt);
            ctx.push(Step::Reshape {
                x: w,
                target: ReshapeTarget::Fixed(split),
                out: a,
            });
            let b = ctx.temp(dt);
            ctx.push(Step::Transpose {
                x: a,
                perm: Some(perm.iter().map(|&p| p as i32).collect()),
                out: b,
            });
            let c = ctx.temp(dt);
            ctx.push(Step::Reshape {
                x: b,
                target: ReshapeTarget::Fixed(merged),
                out: c,
            });
            c
        }
    };
    let spatial: Vec<Option<i64>> = ctx
        .shape_of(node.input(0).unwrap_or(""))
        .map(|s| s.iter().skip(2).map(|d| d.fixed()).collect())
        .unwrap_or_default();
    let crop = spec.static_crop(&spatial);
    let d = spec.kernel.len();
    let y = ctx.temp(dt);
    ctx.push(Step::ConvFlipped {
        x: xcl,
        w,
        spec: spec.clone(),
        out: y,
    });
    let axes = Some(ShapeSource::Static((1..=d as i64).collect()));
    let bounds = match crop {
        Some((lo, hi)) if lo.iter().chain(&hi).all(|&c| c == 0) => None,
        // A negative end counts from the dim's end; `i64::MAX` keeps the whole tail.
        Some((lo, hi)) => Some((
            ShapeSource::Static(lo),
            ShapeSource::Static(
                hi.iter()
                    .map(|&h| if h > 0 { -h } else { i64::MAX })
                    .collect(),
            ),
        )),
        None => {
            let ConvTransposePadding::OutputShape { shape, upper } = &spec.padding else {
                invalid!(
                    node,
                    "internal: only output_shape makes a crop depend on the input"
                );
            };
            let attrs = KernelAttrs::new()
                .ints("kernel", spec.kernel.clone())
                .ints("strides", spec.strides.clone())
                .ints("dilations", spec.dilations.clone())
                .ints("output_padding", spec.output_padding.clone())
                .ints("output_shape", shape.clone())
                .bool("upper", *upper);
            let out = ctx.host_kernel(
                node,
                CROP_KERNEL,
                vec![HostArg::ShapeOf(xcl)],
                attrs,
                &[DataType::Int64, DataType::Int64],
            )?;
            Some((ShapeSource::Dynamic(out[0]), ShapeSource::Dynamic(out[1])))
        }
    };
    let y = match bounds {
        None => y,
        Some((starts, ends)) => {
            let out = ctx.temp(dt);
            ctx.push(Step::Slice {
                x: y,
                spec: SliceSpec {
                    starts,
                    ends,
                    axes,
                    steps: None,
                },
                out,
            });
            out
        }
    };
    finish_channels_last(ctx, node, y, to_cf, dt)
}

/// The crop of a ConvTranspose with `output_shape` over a channels-last input of run-time
/// shape (input 0): the start and end of each spatial dim of the flipped convolution's
/// output (int64 `[d]` each).
fn crop_kernel(
    inputs: &[Option<TensorData>],
    attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let shape = kernel::i64s(kernel::input(inputs, 0)?)?;
    let spec = ConvTransposeSpec {
        kernel: attrs.get_ints("kernel")?.to_vec(),
        strides: attrs.get_ints("strides")?.to_vec(),
        dilations: attrs.get_ints("dilations")?.to_vec(),
        output_padding: attrs.get_ints("output_padding")?.to_vec(),
        padding: ConvTransposePadding::OutputShape {
            shape: attrs.get_ints("output_shape")?.to_vec(),
            upper: attrs.get_bool("upper")?,
        },
        groups: 1,
    };
    let a = spec.resolve(&shape)?;
    let d = a.crop_lo.len();
    let starts: Vec<i64> = a.crop_lo.iter().map(|&c| i64::from(c)).collect();
    let ends: Vec<i64> = (0..d).map(|i| starts[i] + a.out_spatial[i]).collect();
    let dims = vec![d as i64];
    Ok(vec![
        TensorData::from_i64(dims.clone(), &starts),
        TensorData::from_i64(dims, &ends),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regroups_the_weight_for_mlx() {
        // C=4, M/g=3, g=2, k=5: [2, 2, 3, 5] -> [2, 3, 5, 2] -> [6, 5, 2].
        let (split, perm, merged) = regroup(&[4, 3, 5], 2);
        assert_eq!(split, vec![2, 2, 3, 5]);
        assert_eq!(perm, vec![0, 2, 3, 1]);
        assert_eq!(merged, vec![6, 5, 2]);
        let (_, perm, merged) = regroup(&[1, 2, 3, 3], 1);
        assert_eq!(perm, vec![0, 2, 3, 4, 1]);
        assert_eq!(merged, vec![2, 3, 3, 1]);
    }

    #[test]
    fn attribute_validation() {
        let node = |attrs: Vec<(&str, onnx_ir::Attribute)>| {
            let mut n = Node::new("ConvTranspose", ["x", "w"], ["y"]);
            for (k, v) in attrs {
                n.attributes.insert(k.into(), v);
            }
            n
        };
        use onnx_ir::Attribute as A;
        let s = conv_transpose_spec(&node(vec![]), &[2, 3, 3, 3]).unwrap();
        assert_eq!(s.kernel, vec![3, 3]);
        assert_eq!(s.output_padding, vec![0, 0]);
        let s = conv_transpose_spec(
            &node(vec![("output_shape", A::Ints(vec![1, 2, 10, 8]))]),
            &[2, 3, 3, 3],
        )
        .unwrap();
        assert_eq!(
            s.padding,
            ConvTransposePadding::OutputShape {
                shape: vec![10, 8],
                upper: false
            }
        );
        let err = conv_transpose_spec(
            &node(vec![("output_padding", A::Ints(vec![1, 1]))]),
            &[2, 3, 3, 3],
        )
        .unwrap_err();
        assert!(err.contains("max(stride, dilation)"), "{err}");
        assert!(conv_transpose_spec(&node(vec![("group", A::Int(3))]), &[2, 3, 3, 3]).is_err());
        assert!(conv_transpose_spec(&node(vec![]), &[2, 3, 3, 3, 3, 3]).is_err());
        assert!(
            conv_transpose_spec(
                &node(vec![("kernel_shape", A::Ints(vec![2, 2]))]),
                &[2, 3, 3, 3]
            )
            .is_err()
        );
    }
}
