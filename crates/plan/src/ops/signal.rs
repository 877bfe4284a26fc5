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
    BinaryOp as B, FftOp, FloatSource, MEL_TYPES, PadMode, PadSpec, ReshapeTarget, ShapeSource,
    SliceSpec, WindowSpec, mel_weight_matrix, normalize_axis,
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
    let axis = int64_source(ctx, node, axis, 2)?;
    let length = match node.input(1) {
        Some(_) => {
            let l = ctx.ints_input(node, 1)?;
            Some(int64_source(ctx, node, l, 1)?)
        }
        None => None,
    };
    let rank = ctx.need_rank(node, 0)?;
    let shape = ctx
        .shape_of(node.input(0).unwrap_or(""))
        .unwrap_or_default();
    let dims: Vec<Option<i64>> = shape.iter().map(|d| d.fixed()).collect();
    let x = ctx.input(node, 0)?;
    let t = Transform {
        rank,
        dims,
        axis,
        length,
        inverse: attr_int(node, "inverse").or_invalid(node)?.unwrap_or(0) != 0,
        onesided: attr_int(node, "onesided").or_invalid(node)?.unwrap_or(0) != 0,
    };
    let out = lower_transform(ctx, node, x, t)?;
    ctx.finish(node, 0, out, DataType::Float)
}

/// A dynamic integer source as an int64 slot (`i`: the node input it came from).
fn int64_source(
    ctx: &mut LowerCtx,
    node: &Node,
    src: ShapeSource,
    i: usize,
) -> Result<ShapeSource, PlanError> {
    Ok(match src {
        ShapeSource::Dynamic(s) => {
            let dt = ctx.input_dtype(node, i)?;
            ShapeSource::Dynamic(ctx.cast(s, dt, DataType::Int64))
        }
        st => st,
    })
}

/// A DFT over a float32 array of rank `rank` whose last dim (1 real, 2 complex) packs the
/// complex values.
struct Transform {
    rank: usize,
    /// The input's dims, where fixed at plan time.
    dims: Vec<Option<i64>>,
    /// One int64 value (negative counts from the end, the complex dim included).
    axis: ShapeSource,
    /// `dft_length` (one int64 value), when given.
    length: Option<ShapeSource>,
    inverse: bool,
    onesided: bool,
}

/// ONNX `DFT` as MLX calls: a real input (`[..., 1]`) padded with a zero imaginary part, both
/// viewed as complex64 `[..., 1]`; one `mlx_fft_*` along the axis (the trailing dim of 1 rides
/// along); a one-sided forward result sliced to `n / 2 + 1` bins; complex results viewed back
/// as float32 `[..., 2]` (an inverse one-sided transform is real already: `[..., 1]`).
fn lower_transform(
    ctx: &mut LowerCtx,
    node: &Node,
    x: Slot,
    t: Transform,
) -> Result<Slot, PlanError> {
    let last = t.rank - 1;
    let zero = ctx.scalar(DataType::Float, 0.0)?;
    let pads = match t.dims.get(last).copied().flatten() {
        Some(1) => Some(PadSpec::Static {
            axes: vec![last as i32],
            lo: vec![0],
            hi: vec![1],
        }),
        Some(2) => None,
        Some(d) => invalid!(node, "the input's last dim is {d}, not 1 or 2"),
        None => {
            // [0, 2 - d] on the last axis, after requiring d in {1, 2}.
            let d = ctx.dim_1d(x, last as i64);
            let one = ctx.scalar(DataType::Int64, 1.0)?;
            let two = ctx.scalar(DataType::Int64, 2.0)?;
            let real = ctx.binary(B::Equal, d, one, DataType::Int64);
            let complex = ctx.binary(B::Equal, d, two, DataType::Int64);
            let ok = ctx.binary(B::LogicalOr, real, complex, DataType::Bool);
            ctx.require(ok, "the input's last dim must be 1 (real) or 2 (complex)");
            let hi = ctx.binary(B::Subtract, two, d, DataType::Int64);
            let lo = ctx.constant(TensorData::from_i64(vec![1], &[0]));
            let pads = ctx.temp(DataType::Int64);
            ctx.push(Step::Concat {
                inputs: vec![lo, hi],
                axis: 0,
                out: pads,
            });
            Some(PadSpec::Onnx {
                pads: ShapeSource::Dynamic(pads),
                axes: Some(ShapeSource::Static(vec![last as i64])),
            })
        }
    };
    let pairs = match pads {
        Some(pads) => {
            let out = ctx.temp(DataType::Float);
            ctx.push(Step::Pad {
                x,
                pads,
                mode: PadMode::Constant,
                value: zero,
                out,
            });
            out
        }
        None => x,
    };
    let signal = ctx.temp(DataType::Complex64);
    ctx.push(Step::View {
        x: pairs,
        dtype: DataType::Complex64,
        out: signal,
    });
    // The axis, counted from the front where known.
    let axis = match &t.axis {
        ShapeSource::Static(v) => {
            let a = *v.first().ok_or_else(|| PlanError::Invalid {
                node: node.name.clone(),
                reason: "the axis is empty".into(),
            })?;
            let a = normalize_axis(a, t.rank).or_invalid(node)?;
            if a == last {
                invalid!(node, "the axis is the complex dim");
            }
            ShapeSource::Static(vec![a as i64])
        }
        ShapeSource::Dynamic(a) => {
            let minus_one = ctx.scalar(DataType::Int64, -1.0)?;
            let last_dim = ctx.scalar(DataType::Int64, last as f64)?;
            let not_neg = ctx.binary(B::NotEqual, *a, minus_one, DataType::Int64);
            let not_last = ctx.binary(B::NotEqual, *a, last_dim, DataType::Int64);
            let ok = ctx.binary(B::LogicalAnd, not_neg, not_last, DataType::Bool);
            ctx.require(ok, "the axis is the complex dim");
            ShapeSource::Dynamic(*a)
        }
    };
    let op = match (t.inverse, t.onesided) {
        (true, true) => FftOp::Irfft,
        (true, false) => FftOp::Ifft,
        (false, _) => FftOp::Fft,
    };
    let y_dt = if op == FftOp::Irfft {
        DataType::Float
    } else {
        DataType::Complex64
    };
    let mut y = ctx.temp(y_dt);
    ctx.push(Step::Fft {
        op,
        x: signal,
        length: t.length.clone(),
        axis: axis.clone(),
        out: y,
    });
    if op == FftOp::Fft && t.onesided {
        y = keep_half(ctx, x, &t, &axis, y)?;
    }
    if op == FftOp::Irfft {
        return Ok(y);
    }
    let out = ctx.temp(DataType::Float);
    ctx.push(Step::View {
        x: y,
        dtype: DataType::Float,
        out,
    });
    Ok(out)
}

/// The leading `n / 2 + 1` bins along `axis` of the forward transform `y` of `x`.
fn keep_half(
    ctx: &mut LowerCtx,
    x: Slot,
    t: &Transform,
    axis: &ShapeSource,
    y: Slot,
) -> Result<Slot, PlanError> {
    let static_axis = match axis {
        ShapeSource::Static(v) => v.first().map(|&a| a as usize),
        ShapeSource::Dynamic(_) => None,
    };
    let n = match &t.length {
        Some(ShapeSource::Static(v)) => v.first().copied(),
        Some(ShapeSource::Dynamic(_)) => None,
        None => static_axis.and_then(|a| t.dims.get(a).copied().flatten()),
    };
    let ends = match n {
        Some(n) => ShapeSource::Static(vec![n / 2 + 1]),
        None => {
            let n = match (&t.length, axis) {
                (Some(ShapeSource::Dynamic(l)), _) => *l,
                (_, ShapeSource::Static(a)) => ctx.dim_1d(x, a[0]),
                (_, ShapeSource::Dynamic(a)) => {
                    let dims = ctx.shape_vec(x);
                    let out = ctx.temp(DataType::Int64);
                    ctx.push(Step::Take {
                        x: dims,
                        indices: *a,
                        axis: 0,
                        out,
                    });
                    out
                }
            };
            let two = ctx.scalar(DataType::Int64, 2.0)?;
            let one = ctx.scalar(DataType::Int64, 1.0)?;
            let half = ctx.binary(B::FloorDivide, n, two, DataType::Int64);
            ShapeSource::Dynamic(ctx.binary(B::Add, half, one, DataType::Int64))
        }
    };
    let out = ctx.temp(DataType::Complex64);
    ctx.push(Step::Slice {
        x: y,
        spec: SliceSpec {
            starts: ShapeSource::Static(vec![0]),
            ends,
            axes: Some(axis.clone()),
            steps: None,
        },
        out,
    });
    Ok(out)
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
    let t = Transform {
        rank: 4,
        dims: vec![None, None, None, Some(c)],
        axis: ShapeSource::Static(vec![2]),
        length: Some(dft_length),
        inverse: false,
        onesided: attr_int(node, "onesided").or_invalid(node)?.unwrap_or(1) != 0,
    };
    let out = lower_transform(ctx, node, y, t)?;
    ctx.finish(node, 0, out, DataType::Float)
}
