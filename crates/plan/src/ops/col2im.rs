//! Col2Im (opset 18): the inverse of im2col, an accumulation of column blocks into an image.
//!
//! With constant `image_shape` and `block_shape` the geometry ([`Col2ImGeometry`]) is resolved
//! at plan time: `x` (`[N, C*K, L]`) is reshaped to `[N, C, K*L]`, one zero is padded at the
//! end of its last axis, and for each kernel offset `k` a `Take` of the constant index row
//! `sources[k]` (the padding zero where no column lands) is summed in order, then reshaped to
//! `[N, C, *image]`. Shapes known only at run time go to the host kernel `col2im`, which does
//! the same sum on the host.

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::host::HostArg;
use crate::kernel::{KernelAttrs, f32s, i64s, input};
use crate::registry::ClaimCtx;
use crate::step::{DimRule, PadMode, PadSpec, ReshapeTarget, ShapeSource};

/// Registers Col2Im.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "Col2Im", 18, MAX, claim_col2im, lower_col2im);
    r.kernel(COL2IM_KERNEL, col2im_kernel);
}

const COL2IM_KERNEL: &str = "col2im";

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

/// The geometry of `image` / `block` with the given attributes (ONNX defaults for `None`);
/// only 2-D images may have non-default dilations / pads / strides (see [`check_ort_rank`]).
pub fn geometry(
    image: &[i64],
    block: &[i64],
    dilations: Option<&[i64]>,
    pads: Option<&[i64]>,
    strides: Option<&[i64]>,
) -> Result<Col2ImGeometry, String> {
    let d = image.len();
    let dilations = dilations.map_or_else(|| vec![1; d], <[i64]>::to_vec);
    let strides = strides.map_or_else(|| vec![1; d], <[i64]>::to_vec);
    let pads = pads.map_or_else(|| vec![0; 2 * d], <[i64]>::to_vec);
    check_ort_rank(d, &dilations, &pads, &strides)?;
    Col2ImGeometry::new(image, block, &dilations, &pads, &strides)
}

impl Col2ImGeometry {
    /// Kernel positions `K` and blocks `L`.
    fn sizes(&self) -> (i64, i64) {
        (self.block.iter().product(), self.blocks.iter().product())
    }

    /// `(N, C)` of an input of `x_shape` (`[N, C*K, L]`); `Err` when it does not match.
    pub fn batch_channels(&self, x_shape: &[i64]) -> Result<(i64, i64), String> {
        let (k, l) = self.sizes();
        if x_shape.len() != 3 || x_shape[1] % k != 0 || x_shape[2] != l {
            return Err(format!(
                "Col2Im: input shape {x_shape:?} does not match {k} kernel positions and {l} \
                 blocks"
            ));
        }
        Ok((x_shape[0], x_shape[1] / k))
    }
}

fn lower_col2im(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let (dilations, pads, strides) = attrs(node).or_invalid(node)?;
    let image = ctx.ints_input(node, 1)?;
    let block = ctx.ints_input(node, 2)?;
    let x = ctx.input(node, 0)?;
    let f = DataType::Float;
    let y = match (&image, &block) {
        (ShapeSource::Static(image), ShapeSource::Static(block)) => {
            let g = geometry(
                image,
                block,
                dilations.as_deref(),
                pads.as_deref(),
                strides.as_deref(),
            )
            .or_invalid(node)?;
            let x_shape = ctx.input_fixed_shape(node, 0);
            lower_static(ctx, node, x, &g, x_shape)?
        }
        _ => {
            let arg = |s: &ShapeSource| match s {
                ShapeSource::Static(v) => {
                    HostArg::Const(TensorData::from_i64(vec![v.len() as i64], v))
                }
                ShapeSource::Dynamic(slot) => HostArg::Value(*slot),
            };
            let mut a = KernelAttrs::new();
            for (name, v) in [
                ("dilations", dilations),
                ("pads", pads),
                ("strides", strides),
            ] {
                if let Some(v) = v {
                    a = a.ints(name, v);
                }
            }
            let inputs = vec![HostArg::Value(x), arg(&image), arg(&block)];
            ctx.host_kernel(node, COL2IM_KERNEL, inputs, a, &[f])?[0]
        }
    };
    ctx.finish(node, 0, y, f)
}

/// The generic steps of a Col2Im whose geometry is known (see the module doc); reshapes to
/// fixed shapes when `x_shape` is known.
fn lower_static(
    ctx: &mut LowerCtx,
    node: &Node,
    x: Slot,
    g: &Col2ImGeometry,
    x_shape: Option<Vec<i64>>,
) -> Result<Slot, PlanError> {
    let f = DataType::Float;
    let (k, l) = g.sizes();
    let (rows, out) = match x_shape {
        Some(shape) => {
            let (n, c) = g.batch_channels(&shape).or_invalid(node)?;
            let mut out = vec![n, c];
            out.extend(&g.image);
            (
                ReshapeTarget::Fixed(vec![n, c, k * l]),
                ReshapeTarget::Fixed(out),
            )
        }
        None => {
            let mut out = vec![DimRule::copy(0), DimRule::copy(1)];
            out.extend(g.image.iter().map(|&d| DimRule::fixed(d)));
            (
                ReshapeTarget::Dims(vec![
                    DimRule::copy(0),
                    DimRule::divided(1, k),
                    DimRule::fixed(k * l),
                ]),
                ReshapeTarget::Dims(out),
            )
        }
    };
    let flat = ctx.emit(f, |out| Step::Reshape {
        x,
        target: rows,
        out,
    });
    let zero = ctx.scalar(f, 0.0)?;
    let padded = ctx.emit(f, |out| Step::Pad {
        x: flat,
        pads: PadSpec::Static {
            axes: vec![2],
            lo: vec![0],
            hi: vec![1],
        },
        mode: PadMode::Constant,
        value: zero,
        out,
    });
    let pixels: i64 = g.image.iter().product();
    let mut acc = None;
    for row in &g.sources {
        let indices = ctx.const_i32(vec![pixels], row);
        let t = ctx.emit(f, |out| Step::Take {
            x: padded,
            indices,
            axis: 2,
            out,
        });
        acc = Some(match acc {
            None => t,
            Some(a) => ctx.binary(BinaryOp::Add, a, t, f),
        });
    }
    let Some(sum) = acc else {
        crate::plan::invalid!(node, "Col2Im: empty block");
    };
    Ok(ctx.emit(f, |o| Step::Reshape {
        x: sum,
        target: out,
        out: o,
    }))
}

/// The most elements the host kernel writes (a bound on what a hostile shape can allocate).
const MAX_KERNEL_OUTPUT: i64 = 1 << 28;

/// Col2Im on the host, for shapes known only at run time: inputs `x` (float32 `[N, C*K, L]`),
/// `image_shape`, `block_shape`; attributes `dilations`, `pads`, `strides` when given. Each
/// pixel is the sum, in kernel-offset order, of the columns that land on it (0 where none).
fn col2im_kernel(
    inputs: &[Option<TensorData>],
    attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let x = input(inputs, 0)?;
    let image = i64s(input(inputs, 1)?)?;
    let block = i64s(input(inputs, 2)?)?;
    let opt = |name: &str| attrs.get_ints(name).ok().map(<[i64]>::to_vec);
    let (dilations, pads, strides) = (opt("dilations"), opt("pads"), opt("strides"));
    let g = geometry(
        &image,
        &block,
        dilations.as_deref(),
        pads.as_deref(),
        strides.as_deref(),
    )?;
    let (n, c) = g.batch_channels(&x.dims)?;
    let (k, l) = g.sizes();
    let pixels: i64 = g.image.iter().product();
    let total = n
        .checked_mul(c)
        .and_then(|v| v.checked_mul(pixels))
        .filter(|&v| v <= MAX_KERNEL_OUTPUT)
        .ok_or_else(|| format!("Col2Im: an output of {n} x {c} x {pixels} is too large"))?;
    let xs = f32s(x)?;
    let (kl, pixels) = ((k * l) as usize, pixels as usize);
    let mut out = Vec::with_capacity(total as usize);
    for row in xs.chunks_exact(kl.max(1)).take((n * c) as usize) {
        let at = |i: i32| row.get(i as usize).copied().unwrap_or(0.0);
        for p in 0..pixels {
            let mut acc = at(g.sources[0][p]);
            for src in &g.sources[1..] {
                acc += at(src[p]);
            }
            out.push(acc);
        }
    }
    let mut dims = vec![n, c];
    dims.extend(&g.image);
    Ok(vec![TensorData::from_f32(dims, &out)])
}

/// The resolved geometry of a Col2Im node.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Col2ImGeometry {
    /// Output spatial dims.
    pub image: Vec<i64>,
    /// Kernel dims.
    pub block: Vec<i64>,
    /// Number of blocks per spatial dim.
    pub blocks: Vec<i64>,
    /// For each kernel offset `k` (row-major over `block`), for each image pixel (row-major over
    /// `image`): the column position `k * L + l` that lands there, or `K * L` when none does.
    pub sources: Vec<Vec<i32>>,
}

impl Col2ImGeometry {
    /// Resolves the geometry; `Err` with a reason on inconsistent shapes.
    pub fn new(
        image: &[i64],
        block: &[i64],
        dilations: &[i64],
        pads: &[i64],
        strides: &[i64],
    ) -> Result<Self, String> {
        let d = image.len();
        if d == 0 || block.len() != d {
            return Err(format!(
                "Col2Im: image_shape {image:?} and block_shape {block:?} must have the same \
                 non-zero length"
            ));
        }
        if dilations.len() != d || strides.len() != d || pads.len() != 2 * d {
            return Err("Col2Im: dilations / strides / pads do not match the spatial rank".into());
        }
        if image.iter().chain(block).any(|&v| v <= 0)
            || dilations.iter().chain(strides).any(|&v| v <= 0)
            || pads.iter().any(|&p| p < 0)
        {
            return Err("Col2Im: shapes, dilations and strides must be positive".into());
        }
        let mut blocks = Vec::with_capacity(d);
        for i in 0..d {
            let span = dilations[i] * (block[i] - 1) + 1;
            let padded = image[i] + pads[i] + pads[d + i];
            if padded < span {
                return Err(format!("Col2Im: the block does not fit axis {i}"));
            }
            blocks.push((padded - span) / strides[i] + 1);
        }
        let k_total: i64 = block.iter().product();
        let l_total: i64 = blocks.iter().product();
        let p_total: i64 = image.iter().product();
        if k_total * l_total >= i32::MAX as i64 || k_total * p_total > 1 << 28 {
            return Err("Col2Im: the index map would be too large".into());
        }
        let none = (k_total * l_total) as i32;
        let unravel = |mut flat: i64, dims: &[i64]| -> Vec<i64> {
            let mut idx = vec![0; dims.len()];
            for j in (0..dims.len()).rev() {
                idx[j] = flat % dims[j];
                flat /= dims[j];
            }
            idx
        };
        let mut sources = vec![vec![none; p_total as usize]; k_total as usize];
        for (k, row) in sources.iter_mut().enumerate() {
            let kk = unravel(k as i64, block);
            for l in 0..l_total {
                let ll = unravel(l, &blocks);
                let mut dest = 0i64;
                let mut inside = true;
                for i in 0..d {
                    let p = ll[i] * strides[i] - pads[i] + kk[i] * dilations[i];
                    if p < 0 || p >= image[i] {
                        inside = false;
                        break;
                    }
                    dest = dest * image[i] + p;
                }
                if inside {
                    row[dest as usize] = (k as i64 * l_total + l) as i32;
                }
            }
        }
        Ok(Col2ImGeometry {
            image: image.to_vec(),
            block: block.to_vec(),
            blocks,
            sources,
        })
    }
}

/// ONNX Runtime's CPU EP runs spatial ranks other than 2 through its N-D im2col with the
/// dilated kernel and `image - kernel + 1` blocks, which ignores pads and strides (and can read
/// past the input): it agrees with the ONNX definition only without dilations, pads and strides.
pub fn check_ort_rank(
    d: usize,
    dilations: &[i64],
    pads: &[i64],
    strides: &[i64],
) -> Result<(), String> {
    if d != 2 && (dilations.iter().chain(strides).any(|&v| v != 1) || pads.iter().any(|&p| p != 0))
    {
        return Err(format!(
            "Col2Im: {d}-D with dilations / pads / strides differs on ONNX Runtime's CPU EP \
             (only 2-D honours them)"
        ));
    }
    Ok(())
}
