//! Signal processing: DFT and STFT (MLX FFTs; complex values packed as a trailing dim of 2),
//! MelWeightMatrix (a host kernel).

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::host::HostArg;
use crate::kernel::{self, KernelAttrs};
use crate::plan::invalid;
use crate::registry::ClaimCtx;
use crate::step::{
    BinaryOp as B, DftSpec, FloatSource, MEL_TYPES, ReshapeTarget, ShapeSource, WindowSpec,
    mel_weight_matrix,
};

/// The host kernel computing a mel filter bank.
const MEL_KERNEL: &str = "mel_weight_matrix";

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "DFT", 17, MAX, claim_dft, lower_dft);
    r.op("", "STFT", 17, MAX, claim_stft, lower_stft);
    r.op("", "MelWeightMatrix", 17, MAX, claim_mel, lower_mel);
    r.kernel(MEL_KERNEL, mel_kernel);
}

/// `output_datatype` (default float).
fn mel_dtype(node: &Node) -> Result<DataType, String> {
    let code = attr_int(node, "output_datatype")?.unwrap_or(1);
    i32::try_from(code)
        .ok()
        .and_then(DataType::from_onnx)
        .ok_or_else(|| format!("MelWeightMatrix: output_datatype {code} is not a tensor type"))
}

fn claim_mel(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    for i in 0..3 {
        ctx.expect_dtype(node, i, INDEX)?;
    }
    for i in 3..5 {
        ctx.expect_dtype(node, i, &[DataType::Float])?;
    }
    let dt = mel_dtype(node).or_decline()?;
    if !MEL_TYPES.contains(&dt) {
        decline!("MelWeightMatrix: output_datatype {dt} is not claimed");
    }
    Ok(())
}

/// Computed on the host from the five scalars (the `mel_weight_matrix` kernel); folded when
/// they are constants.
fn lower_mel(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dtype = mel_dtype(node).or_invalid(node)?;
    let consts: Option<Vec<Vec<f64>>> = (0..5)
        .map(|i| ctx.const_input(node, i).and_then(|t| t.to_f64_vec()))
        .collect();
    if let Some(c) = consts
        && c.iter().all(|v| v.len() == 1)
    {
        let t = mel_weight_matrix(
            c[0][0] as i64,
            c[1][0] as i64,
            c[2][0] as i64,
            c[3][0] as f32,
            c[4][0] as f32,
            dtype,
        )
        .or_invalid(node)?;
        ctx.fold(node, 0, t);
        return Ok(());
    }
    let mut inputs = Vec::with_capacity(5);
    for i in 0..5 {
        inputs.push(HostArg::Value(ctx.input(node, i)?));
    }
    let attrs = KernelAttrs::new().int("output_datatype", dtype.to_onnx() as i64);
    let out = ctx.host_kernel(node, MEL_KERNEL, inputs, attrs, &[dtype])?;
    ctx.finish(node, 0, out[0], dtype)
}

/// `MelWeightMatrix` from its five scalars (num_mel_bins, dft_length, sample_rate: integers;
/// lower and upper edge in hertz: float32), of dtype `output_datatype`.
fn mel_kernel(
    inputs: &[Option<TensorData>],
    attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let scalar = |i: usize, what: &str| -> Result<f64, String> {
        match kernel::f64s(kernel::input(inputs, i)?)?.as_slice() {
            [v] => Ok(*v),
            _ => Err(format!("MelWeightMatrix: {what} is not a single value")),
        }
    };
    let t = mel_weight_matrix(
        scalar(0, "num_mel_bins")? as i64,
        scalar(1, "dft_length")? as i64,
        scalar(2, "sample_rate")? as i64,
        scalar(3, "lower_edge_hertz")? as f32,
        scalar(4, "upper_edge_hertz")? as f32,
        attrs.get_dtype("output_datatype")?,
    )?;
    Ok(vec![t])
}

/// The fixed last dim of input `i` (1 real, 2 complex), when known.
fn last_dim(ctx: &ClaimCtx, node: &Node, i: usize) -> Option<i64> {
    let shape = ctx.graph.value(node.input(i)?)?.shape?;
    shape.last()?.fixed()
}

fn claim_dft(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, &[DataType::Float])?;
    let r = ctx.expect_rank(node, 0)?;
    if r < 3 {
        decline!("DFT: a rank-{r} input is not claimed (ONNX packs complex values in a last dim)");
    }
    if node.input(1).is_some() {
        ctx.expect_dtype(node, 1, INDEX)?;
    }
    if ctx.opset >= 20 && node.input(2).is_some() {
        ctx.expect_dtype(node, 2, INDEX)?;
    }
    let inverse = attr_int(node, "inverse").or_decline()?.unwrap_or(0) != 0;
    let onesided = attr_int(node, "onesided").or_decline()?.unwrap_or(0) != 0;
    if onesided && !inverse && last_dim(ctx, node, 0) != Some(1) {
        decline!("DFT: a one-sided forward transform needs an input known to be real");
    }
    Ok(())
}

fn lower_dft(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let axis = if ctx.opset() >= 20 {
        match node.input(2) {
            Some(_) => ctx.ints_input(node, 2)?,
            None => ShapeSource::Static(vec![-2]),
        }
    } else {
        ShapeSource::Static(vec![attr_int(node, "axis").or_invalid(node)?.unwrap_or(1)])
    };
    let length = match node.input(1) {
        Some(_) => Some(ctx.ints_input(node, 1)?),
        None => None,
    };
    let spec = DftSpec {
        axis,
        length,
        inverse: attr_int(node, "inverse").or_invalid(node)?.unwrap_or(0) != 0,
        onesided: attr_int(node, "onesided").or_invalid(node)?.unwrap_or(0) != 0,
    };
    let x = ctx.input(node, 0)?;
    let out = ctx.temp(DataType::Float);
    ctx.push(Step::Dft { x, spec, out });
    ctx.finish(node, 0, out, DataType::Float)
}

fn claim_stft(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, &[DataType::Float])?;
    let r = ctx.expect_rank(node, 0)?;
    if r != 3 {
        decline!("STFT: a rank-{r} signal is not claimed ([batch, length, 1 | 2])");
    }
    ctx.expect_dtype(node, 1, INDEX)?;
    if node.input(2).is_some() {
        ctx.expect_dtype(node, 2, &[DataType::Float])?;
    }
    if node.input(3).is_some() {
        ctx.expect_dtype(node, 3, INDEX)?;
    } else if node.input(2).is_none() {
        decline!("STFT: neither a window nor frame_length gives the frame length");
    }
    let onesided = attr_int(node, "onesided").or_decline()?.unwrap_or(1) != 0;
    match last_dim(ctx, node, 0) {
        Some(1) => {}
        Some(2) if !onesided => {}
        Some(2) => decline!("STFT: a one-sided transform of a complex signal is not claimed"),
        _ => decline!("STFT: the signal's last dim must be known (1 or 2)"),
    }
    Ok(())
}

/// An int64 scalar slot of input `i`.
fn scalar_input(ctx: &mut LowerCtx, node: &Node, i: usize) -> Result<Slot, PlanError> {
    let dt = ctx.input_dtype(node, i)?;
    let v = ctx.input(node, i)?;
    let v = ctx.cast(v, dt, DataType::Int64);
    let out = ctx.temp(DataType::Int64);
    ctx.push(Step::Reshape {
        x: v,
        target: ReshapeTarget::Fixed(vec![]),
        out,
    });
    Ok(out)
}

/// Frames `[B, F, frame_length, c]` of the signal, times the window, then a DFT along the frame
/// axis. Known step and length: a strided view; otherwise a gather of `start + offset` with both
/// ranges made at run time.
fn lower_stft(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let konst = |ctx: &LowerCtx, i: usize| {
        ctx.const_input(node, i)
            .and_then(|t| t.to_i64_vec())
            .and_then(|v| v.first().copied())
    };
    let step = konst(ctx, 1);
    let length = match konst(ctx, 3) {
        Some(l) => Some(l),
        None if node.input(3).is_none() => node
            .input(2)
            .and_then(|w| ctx.fixed_shape(w))
            .and_then(|s| s.first().copied()),
        None => None,
    };
    let c = ctx
        .shape_of(node.input(0).unwrap_or(""))
        .and_then(|s| s.last().and_then(|d| d.fixed()));
    let Some(c) = c else {
        invalid!(node, "the signal's last dim is unknown");
    };
    let x = ctx.input(node, 0)?;
    let (frames, dft_length) = match (step, length) {
        (Some(step), Some(length)) if step >= 1 && length >= 1 => {
            let frames = ctx.temp(DataType::Float);
            ctx.push(Step::Windows {
                x,
                spec: WindowSpec {
                    kernel: vec![length, c],
                    strides: vec![step, 1],
                    dilations: vec![1, 1],
                },
                out: frames,
            });
            // [B, F, 1, length, c] -> [B, F, length, c]
            let y = ctx.squeeze(frames, vec![2], DataType::Float);
            (y, ShapeSource::Static(vec![length]))
        }
        _ => {
            let step = scalar_input(ctx, node, 1)?;
            let len = if node.input(3).is_some() {
                scalar_input(ctx, node, 3)?
            } else {
                let w = ctx.input(node, 2)?;
                ctx.dim_of(w, 0)
            };
            let total = ctx.dim_of(x, 1);
            let one = ctx.scalar(DataType::Int64, 1.0)?;
            let span = ctx.binary(B::Subtract, total, len, DataType::Int64);
            let limit = ctx.binary(B::Add, span, one, DataType::Int64);
            let starts = ctx.temp(DataType::Int64);
            ctx.push(Step::Arange {
                start: FloatSource::Static(vec![0.0]),
                limit: FloatSource::Dynamic(limit),
                delta: FloatSource::Dynamic(step),
                dtype: DataType::Int64,
                out: starts,
            });
            let offsets = ctx.temp(DataType::Int64);
            ctx.push(Step::Arange {
                start: FloatSource::Static(vec![0.0]),
                limit: FloatSource::Dynamic(len),
                delta: FloatSource::Static(vec![1.0]),
                dtype: DataType::Int64,
                out: offsets,
            });
            let starts = ctx.unsqueeze(starts, vec![1], DataType::Int64);
            let idx = ctx.binary(B::Add, starts, offsets, DataType::Int64);
            let y = ctx.temp(DataType::Float);
            ctx.push(Step::Take {
                x,
                indices: idx,
                axis: 1,
                out: y,
            });
            (y, ShapeSource::Dynamic(len))
        }
    };
    let mut y = frames;
    if node.input(2).is_some() {
        let window = ctx.input(node, 2)?;
        let w = ctx.unsqueeze(window, vec![1], DataType::Float);
        y = ctx.binary(B::Multiply, y, w, DataType::Float);
    }
    let spec = DftSpec {
        axis: ShapeSource::Static(vec![2]),
        length: Some(dft_length),
        inverse: false,
        onesided: attr_int(node, "onesided").or_invalid(node)?.unwrap_or(1) != 0,
    };
    let out = ctx.temp(DataType::Float);
    ctx.push(Step::Dft { x: y, spec, out });
    ctx.finish(node, 0, out, DataType::Float)
}
