//! Integer matmul and convolution: MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv.
//!
//! MLX has no integer matmul or convolution, so the int32 accumulation is rebuilt exactly from
//! float32 ones: each operand has its zero point subtracted (exact in float32: the results lie
//! in [-255, 255]), the reduction axis is split into chunks of at most [`CHUNK`] terms so that
//! every partial dot product is an integer of magnitude below 2^24 (255 * 255 * 256 <
//! 2^24, exact whatever the summation order), each chunk is multiplied in float32, converted to
//! int32, and the chunks are summed in int32 (wrapping as ORT's int32 accumulator does).
//!
//! The QLinear ops requantize as ORT's CPU kernels (MLAS) do: `multiplier = a_scale * b_scale /
//! y_scale` in float32, then `y = round_half_even(clamp(float(acc) * multiplier, qmin - y_zp,
//! qmax - y_zp)) + y_zp`, with QLinearConv's int32 bias added to `acc` first.
//!
//! The reduction length must be known at plan time (K for the matmuls; the weight's input
//! channels and kernel for the convolutions). A convolution whose kernel alone has more than
//! [`CHUNK`] taps, or a grouped one with more than [`CHUNK`] taps per output, is declined.

use onnx_ir::{DataType, Dim, Node};

use super::*;
use crate::decline;
use crate::plan::invalid;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, ReshapeTarget, ShapeSource, UnaryOp as U};

/// The most terms of one float32 partial dot product (255 * 255 * 256 < 2^24).
pub const CHUNK: i64 = 256;

/// The 8-bit integer types these ops take.
const INT8: &[DataType] = &[DataType::Int8, DataType::Uint8];

/// Registers the integer matmul and convolution family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "MatMulInteger", 10, MAX, claim_matmul_integer, lower_matmul_integer)
        .notes("int8/uint8; K known at plan time; exact int32 accumulation in float32 chunks of 256");
    r.op("", "QLinearMatMul", 10, MAX, claim_qlinear_matmul, lower_qlinear_matmul)
        .notes("int8/uint8; float32 scales (and float16/bfloat16 from opset 21); requantized as ORT's MLAS kernels");
    r.op("", "ConvInteger", 10, MAX, claim_conv_integer, lower_conv_integer)
        .notes("int8/uint8; input channels and kernel known at plan time");
    r.op("", "QLinearConv", 10, MAX, claim_qlinear_conv, lower_qlinear_conv)
        .notes("int8/uint8 with float32 scales; requantized as ORT's MLAS kernels");
}

/// Which operand a quantization parameter belongs to: A's are per row, B's per column; a
/// `Scalar` one is per tensor.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    A,
    B,
    Scalar,
}

/// A value's declared shape (a constant's dims when it is one).
pub(crate) fn claim_shape(ctx: &ClaimCtx, name: &str) -> Option<Vec<Dim>> {
    if let Some(t) = ctx.constant(name) {
        return Some(t.dims.iter().map(|&d| Dim::Fixed(d)).collect());
    }
    ctx.graph.value(name).and_then(|v| v.shape.clone())
}

/// The reduction length of `a @ b` from either operand's shape.
pub(crate) fn matmul_k(a: Option<Vec<Dim>>, b: Option<Vec<Dim>>) -> Option<i64> {
    let from_a = a.and_then(|s| s.last().and_then(Dim::fixed));
    let from_b = b.and_then(|s| {
        let i = if s.len() >= 2 { s.len() - 2 } else { 0 };
        s.get(i).and_then(Dim::fixed)
    });
    from_a.or(from_b)
}

/// Chunk sizes covering `k` terms, each at most [`CHUNK`].
fn chunks(k: i64, chunk: i64) -> Vec<i64> {
    let mut sizes = vec![chunk; (k / chunk) as usize];
    if k % chunk != 0 {
        sizes.push(k % chunk);
    }
    sizes
}

/// Input `i` must be absent, a scalar, or a one-element 1-D tensor.
pub(crate) fn claim_scalar_param(ctx: &ClaimCtx, node: &Node, i: usize) -> Result<(), Decline> {
    let Some(name) = node.input(i) else {
        return Ok(());
    };
    match claim_shape(ctx, name) {
        // unknown rank (ORT 1.23 reports scalars so): reshaped to a scalar at run time
        None => Ok(()),
        Some(s) if s.is_empty() || s == [Dim::Fixed(1)] => Ok(()),
        _ => decline!(
            "{}: input {i} must be a scalar or a one-element 1-D tensor",
            node.op_type
        ),
    }
}

/// A matmul quantization parameter (input `i`) laid out per tensor, per row of A / column of
/// B (1-D), or with the operand's rank (`[..., M, 1]` / `[..., 1, N]`).
pub(crate) fn claim_matmul_param(
    ctx: &ClaimCtx,
    node: &Node,
    i: usize,
    operand_rank: usize,
) -> Result<(), Decline> {
    let Some(name) = node.input(i) else {
        return Ok(());
    };
    match ctx.rank(name) {
        // unknown rank: B's broadcast as they are, A's are reshaped to a scalar at run time
        None | Some(0) => Ok(()),
        Some(1) if operand_rank >= 2 => Ok(()),
        Some(r) if r == operand_rank && r >= 2 => Ok(()),
        _ => claim_scalar_param(ctx, node, i),
    }
}

/// Checks the operand types and ranks of a matmul (A at `a`, B at `b`) and that K is known.
pub(crate) fn claim_matmul_operands(
    ctx: &ClaimCtx,
    node: &Node,
    a: usize,
    b: usize,
) -> Result<(usize, usize), Decline> {
    ctx.expect_dtype(node, a, INT8)?;
    ctx.expect_dtype(node, b, INT8)?;
    let ra = ctx.expect_rank(node, a)?;
    let rb = ctx.expect_rank(node, b)?;
    if ra == 0 || rb == 0 {
        decline!("{}: scalar operands are invalid", node.op_type);
    }
    let sa = claim_shape(ctx, node.input(a).unwrap_or(""));
    let sb = claim_shape(ctx, node.input(b).unwrap_or(""));
    if matmul_k(sa, sb).is_none() {
        decline!(
            "{}: the reduction length K is unknown at plan time (needed to split it exactly)",
            node.op_type
        );
    }
    Ok((ra, rb))
}

/// Input `zp` must be absent or of input `x`'s type.
pub(crate) fn claim_zero_point_type(
    ctx: &ClaimCtx,
    node: &Node,
    x: usize,
    zp: usize,
) -> Result<(), Decline> {
    if let Some(name) = node.input(zp)
        && ctx.dtype(name) != ctx.dtype(node.input(x).unwrap_or(""))
    {
        decline!(
            "{}: zero point {zp} differs in type from input {x}",
            node.op_type
        );
    }
    Ok(())
}

fn claim_matmul_integer(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let (ra, rb) = claim_matmul_operands(ctx, node, 0, 1)?;
    claim_zero_point_type(ctx, node, 0, 2)?;
    claim_zero_point_type(ctx, node, 1, 3)?;
    claim_matmul_param(ctx, node, 2, ra)?;
    claim_matmul_param(ctx, node, 3, rb)
}

fn claim_qlinear_matmul(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let (ra, rb) = claim_matmul_operands(ctx, node, 0, 3)?;
    // opset 21 also allows float16 and bfloat16 scales: widened to float32 exactly
    let scales: &[DataType] = if ctx.opset >= 21 {
        FLOATS
    } else {
        &[DataType::Float]
    };
    for i in [1, 4, 6] {
        ctx.expect_dtype(node, i, scales)?;
    }
    for i in [2, 5, 7] {
        if node.input(i).is_none() {
            decline!("{}: zero point {i} is missing", node.op_type);
        }
    }
    ctx.expect_dtype(node, 7, INT8)?;
    claim_zero_point_type(ctx, node, 0, 2)?;
    claim_zero_point_type(ctx, node, 3, 5)?;
    for (i, r) in [(1, ra), (2, ra), (4, rb), (5, rb)] {
        claim_matmul_param(ctx, node, i, r)?;
    }
    claim_scalar_param(ctx, node, 6)?;
    claim_scalar_param(ctx, node, 7)
}

/// Input `i` reshaped to a scalar when its rank is unknown (a run-time error unless it has
/// one element, as ORT's kernels require).
pub(crate) fn scalar_input(ctx: &mut LowerCtx, node: &Node, i: usize) -> Result<Slot, PlanError> {
    let dt = ctx.input_dtype(node, i)?;
    let x = ctx.input(node, i)?;
    if ctx.input_rank(node, i).is_some() {
        return Ok(x);
    }
    let out = ctx.temp(dt);
    ctx.push(Step::Reshape {
        x,
        target: ReshapeTarget::Fixed(vec![]),
        out,
    });
    Ok(out)
}

/// Quantization parameter `i` as float32, laid out to broadcast against its operand: a 1-D
/// per-row parameter of A becomes `[M, 1]`, one of A or `Scalar` of unknown rank a scalar;
/// everything else broadcasts as it is.
pub(crate) fn param_f32(
    ctx: &mut LowerCtx,
    node: &Node,
    i: usize,
    operand_rank: usize,
    side: Side,
) -> Result<Option<Slot>, PlanError> {
    if node.input(i).is_none() {
        return Ok(None);
    }
    let dt = ctx.input_dtype(node, i)?;
    if side != Side::B && ctx.input_rank(node, i).is_none() {
        let p = scalar_input(ctx, node, i)?;
        return Ok(Some(ctx.cast(p, dt, DataType::Float)));
    }
    let p = ctx.input(node, i)?;
    let p = ctx.cast(p, dt, DataType::Float);
    if side == Side::A && operand_rank >= 2 && ctx.input_rank(node, i) == Some(1) {
        let out = ctx.temp(DataType::Float);
        ctx.push(Step::Reshape {
            x: p,
            target: ReshapeTarget::Unsqueeze {
                axes: ShapeSource::Static(vec![1]),
            },
            out,
        });
        return Ok(Some(out));
    }
    Ok(Some(p))
}

/// Input `x` as float32 less its zero point `zp`: integers in [-255, 255].
pub(crate) fn centered(
    ctx: &mut LowerCtx,
    node: &Node,
    x: usize,
    zp: usize,
    side: Side,
) -> Result<Slot, PlanError> {
    let f = DataType::Float;
    let dt = ctx.input_dtype(node, x)?;
    let rank = ctx.need_rank(node, x)?;
    let v = ctx.input(node, x)?;
    let v = ctx.cast(v, dt, f);
    Ok(match param_f32(ctx, node, zp, rank, side)? {
        Some(z) => ctx.binary(B::Subtract, v, z, f),
        None => v,
    })
}

/// Splits `x` along `axis` into parts of `sizes`.
fn split(ctx: &mut LowerCtx, x: Slot, axis: i32, sizes: &[i64]) -> Vec<Slot> {
    let outs: Vec<Slot> = sizes.iter().map(|_| ctx.temp(DataType::Float)).collect();
    ctx.push(Step::Split {
        x,
        axis,
        sizes: Some(ShapeSource::Static(sizes.to_vec())),
        outs: outs.clone(),
    });
    outs
}

/// Sums int32 parts (wrapping, as an int32 accumulator does).
fn sum_i32(ctx: &mut LowerCtx, parts: Vec<Slot>) -> Slot {
    let mut it = parts.into_iter();
    let first = it.next().expect("at least one part");
    it.fold(first, |acc, p| ctx.binary(B::Add, acc, p, DataType::Int32))
}

/// `a @ b` accumulated exactly in int32 from float32 operands holding integers in
/// [-255, 255], K split into chunks of at most [`CHUNK`].
pub(crate) fn exact_matmul(ctx: &mut LowerCtx, a: Slot, b: Slot, b_rank: usize, k: i64) -> Slot {
    let f = DataType::Float;
    let mm = |ctx: &mut LowerCtx, a: Slot, b: Slot| {
        let out = ctx.temp(f);
        ctx.push(Step::MatMul { a, b, out });
        ctx.cast(out, f, DataType::Int32)
    };
    if k <= CHUNK {
        return mm(ctx, a, b);
    }
    let sizes = chunks(k, CHUNK);
    let pa = split(ctx, a, -1, &sizes);
    let pb = split(ctx, b, if b_rank == 1 { -1 } else { -2 }, &sizes);
    let parts = pa.into_iter().zip(pb).map(|(a, b)| mm(ctx, a, b)).collect();
    sum_i32(ctx, parts)
}

/// The int32 product of inputs `a` and `b` less their zero points `azp` and `bzp`.
pub(crate) fn matmul_acc(
    ctx: &mut LowerCtx,
    node: &Node,
    (a, azp): (usize, usize),
    (b, bzp): (usize, usize),
) -> Result<Slot, PlanError> {
    let sa = ctx.shape_of(node.input(a).unwrap_or(""));
    let sb = ctx.shape_of(node.input(b).unwrap_or(""));
    let Some(k) = matmul_k(sa, sb) else {
        invalid!(node, "K is unknown");
    };
    let rb = ctx.need_rank(node, b)?;
    let av = centered(ctx, node, a, azp, Side::A)?;
    let bv = centered(ctx, node, b, bzp, Side::B)?;
    Ok(exact_matmul(ctx, av, bv, rb, k))
}

fn lower_matmul_integer(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let acc = matmul_acc(ctx, node, (0, 2), (1, 3))?;
    ctx.finish(node, 0, acc, DataType::Int32)
}

/// `qmin` and `qmax` of an 8-bit type.
fn q_bounds(dt: DataType) -> (f64, f64) {
    match dt {
        DataType::Int8 => (-128.0, 127.0),
        _ => (0.0, 255.0),
    }
}

/// `round_half_even(clamp(float(acc) * multiplier, qmin - zp, qmax - zp)) + zp` cast to
/// `y_dt` (MLAS's requantization).
pub(crate) fn requantize(
    ctx: &mut LowerCtx,
    acc: Slot,
    multiplier: Slot,
    y_zp: Slot,
    y_dt: DataType,
) -> Result<Slot, PlanError> {
    let f = DataType::Float;
    let accf = ctx.cast(acc, DataType::Int32, f);
    let v = ctx.binary(B::Multiply, accf, multiplier, f);
    let zp = ctx.cast(y_zp, y_dt, f);
    let (lo, hi) = q_bounds(y_dt);
    let lo = ctx.scalar(f, lo)?;
    let hi = ctx.scalar(f, hi)?;
    let lo = ctx.binary(B::Subtract, lo, zp, f);
    let hi = ctx.binary(B::Subtract, hi, zp, f);
    let v = ctx.binary(B::Maximum, v, lo, f);
    let v = ctx.binary(B::Minimum, v, hi, f);
    let v = ctx.unary(U::Round, v, f);
    let v = ctx.binary(B::Add, v, zp, f);
    Ok(ctx.cast(v, f, y_dt))
}

/// `x_scale * w_scale / y_scale` in float32 (ORT's order of operations).
fn multiplier(ctx: &mut LowerCtx, xs: Slot, ws: Slot, ys: Slot) -> Slot {
    let f = DataType::Float;
    let m = ctx.binary(B::Multiply, xs, ws, f);
    ctx.binary(B::Divide, m, ys, f)
}

fn lower_qlinear_matmul(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let acc = matmul_acc(ctx, node, (0, 2), (3, 5))?;
    let ra = ctx.need_rank(node, 0)?;
    let rb = ctx.need_rank(node, 3)?;
    let a_s = param_f32(ctx, node, 1, ra, Side::A)?.expect("a_scale is required");
    let b_s = param_f32(ctx, node, 4, rb, Side::B)?.expect("b_scale is required");
    let ys_dt = ctx.input_dtype(node, 6)?;
    let y_s = scalar_input(ctx, node, 6)?;
    let y_s = ctx.cast(y_s, ys_dt, DataType::Float);
    let m = multiplier(ctx, a_s, b_s, y_s);
    let y_dt = ctx.input_dtype(node, 7)?;
    let y_zp = scalar_input(ctx, node, 7)?;
    let y = requantize(ctx, acc, m, y_zp, y_dt)?;
    ctx.finish(node, 0, y, y_dt)
}

// ---------------------------------------------------------------------------------------------
// Convolutions.

/// Input positions of a conv's operands and parameters.
struct ConvInputs {
    x: usize,
    x_zp: usize,
    w: usize,
    w_zp: usize,
}

const CONV_INTEGER: ConvInputs = ConvInputs {
    x: 0,
    x_zp: 2,
    w: 1,
    w_zp: 3,
};

const QLINEAR_CONV: ConvInputs = ConvInputs {
    x: 0,
    x_zp: 2,
    w: 3,
    w_zp: 5,
};

/// The conv attributes and the weight's input channels per group, from the weight's shape.
fn conv_geometry(
    node: &Node,
    wshape: Option<Vec<Dim>>,
) -> Result<(crate::step::ConvSpec, i64), String> {
    let fixed = wshape
        .as_ref()
        .and_then(|s| s.iter().map(Dim::fixed).collect::<Option<Vec<_>>>());
    let mut spec = super::nn::conv_spec(node, fixed, wshape.as_ref().map(Vec::len))?;
    spec.exact_integers = true;
    let cpg = wshape
        .as_ref()
        .and_then(|s| s.get(1))
        .and_then(Dim::fixed)
        .ok_or_else(|| {
            format!(
                "{}: the weight's input channels are unknown at plan time",
                node.op_type
            )
        })?;
    if spec.groups < 1 {
        return Err(format!(
            "{}: group {} is invalid",
            node.op_type, spec.groups
        ));
    }
    let taps: i64 = spec.kernel.iter().product();
    if cpg * taps > CHUNK && (spec.groups != 1 || taps > CHUNK) {
        return Err(format!(
            "{}: {cpg} channels x {taps} kernel taps can't be split into exact chunks of {CHUNK}",
            node.op_type
        ));
    }
    Ok((spec, cpg))
}

/// A conv's weight zero point (or scale), input `i`: a scalar or one per output channel.
fn claim_conv_weight_param(ctx: &ClaimCtx, node: &Node, i: usize) -> Result<(), Decline> {
    match node.input(i).and_then(|n| ctx.rank(n)) {
        None | Some(1) => Ok(()),
        _ => claim_scalar_param(ctx, node, i),
    }
}

fn claim_conv(ctx: &ClaimCtx, node: &Node, io: &ConvInputs) -> Result<(), Decline> {
    ctx.expect_dtype(node, io.x, INT8)?;
    ctx.expect_dtype(node, io.w, INT8)?;
    claim_zero_point_type(ctx, node, io.x, io.x_zp)?;
    claim_zero_point_type(ctx, node, io.w, io.w_zp)?;
    let wshape = claim_shape(ctx, node.input(io.w).unwrap_or(""));
    let (spec, _) = conv_geometry(node, wshape).or_decline()?;
    if ctx.expect_rank(node, io.x)? != spec.kernel.len() + 2 {
        decline!("{}: the input rank does not match the kernel", node.op_type);
    }
    claim_scalar_param(ctx, node, io.x_zp)?;
    claim_conv_weight_param(ctx, node, io.w_zp)
}

fn claim_conv_integer(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    claim_conv(ctx, node, &CONV_INTEGER)
}

fn claim_qlinear_conv(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    claim_conv(ctx, node, &QLINEAR_CONV)?;
    for i in [1, 4, 6] {
        ctx.expect_dtype(node, i, &[DataType::Float])?;
    }
    for i in [2, 5, 7] {
        if node.input(i).is_none() {
            decline!("{}: zero point {i} is missing", node.op_type);
        }
    }
    ctx.expect_dtype(node, 7, INT8)?;
    claim_scalar_param(ctx, node, 1)?;
    claim_conv_weight_param(ctx, node, 4)?;
    claim_scalar_param(ctx, node, 6)?;
    claim_scalar_param(ctx, node, 7)?;
    if node.input(8).is_some() {
        ctx.expect_dtype(node, 8, &[DataType::Int32])?;
        if ctx.expect_rank(node, 8)? != 1 {
            decline!("{}: the bias must be 1-D", node.op_type);
        }
    }
    Ok(())
}

fn transpose(ctx: &mut LowerCtx, x: Slot, perm: Vec<usize>, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Transpose {
        x,
        perm: Some(perm.into_iter().map(|p| p as i32).collect()),
        out,
    });
    out
}

/// The conv's int32 accumulator, channels-last `[N, *spatial, M]`.
fn conv_acc(ctx: &mut LowerCtx, node: &Node, io: &ConvInputs) -> Result<Slot, PlanError> {
    let f = DataType::Float;
    let wname = node.input(io.w).unwrap_or("").to_string();
    let (spec, cpg) = conv_geometry(node, ctx.shape_of(&wname)).or_invalid(node)?;
    let rank = spec.kernel.len() + 2;
    let x = centered(ctx, node, io.x, io.x_zp, Side::Scalar)?;
    let x = transpose(ctx, x, super::nn::channels_last_perm(rank), f);
    // weight less its zero point, a scalar or [M] laid out as [M or 1, 1, ...]
    let wdt = ctx.input_dtype(node, io.w)?;
    let w = ctx.input(node, io.w)?;
    let mut w = ctx.cast(w, wdt, f);
    if node.input(io.w_zp).is_some() {
        let zdt = ctx.input_dtype(node, io.w_zp)?;
        let z = ctx.input(node, io.w_zp)?;
        let z = ctx.cast(z, zdt, f);
        let laid = ctx.temp(f);
        let mut shape = vec![1; rank];
        shape[0] = -1;
        ctx.push(Step::Reshape {
            x: z,
            target: ReshapeTarget::Onnx {
                shape: ShapeSource::Static(shape),
                allowzero: false,
            },
            out: laid,
        });
        w = ctx.binary(B::Subtract, w, laid, f);
    }
    let w = transpose(ctx, w, super::nn::channels_last_perm(rank), f);
    let taps: i64 = spec.kernel.iter().product();
    let conv = |ctx: &mut LowerCtx, x: Slot, w: Slot| {
        let out = ctx.temp(f);
        ctx.push(Step::Conv {
            x,
            w,
            spec: spec.clone(),
            out,
        });
        ctx.cast(out, f, DataType::Int32)
    };
    if cpg * taps <= CHUNK {
        return Ok(conv(ctx, x, w));
    }
    // one group (checked by the claim): split the input channels
    let sizes = chunks(cpg, (CHUNK / taps).max(1));
    let xs = split(ctx, x, -1, &sizes);
    let ws = split(ctx, w, -1, &sizes);
    let parts = xs
        .into_iter()
        .zip(ws)
        .map(|(x, w)| conv(ctx, x, w))
        .collect();
    Ok(sum_i32(ctx, parts))
}

fn lower_conv_integer(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let acc = conv_acc(ctx, node, &CONV_INTEGER)?;
    let rank = ctx.need_rank(node, 0)?;
    let y = transpose(
        ctx,
        acc,
        super::nn::channels_first_perm(rank),
        DataType::Int32,
    );
    ctx.finish(node, 0, y, DataType::Int32)
}

fn lower_qlinear_conv(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let mut acc = conv_acc(ctx, node, &QLINEAR_CONV)?;
    if let Some(b) = ctx.opt_input(node, 8)? {
        // channels-last: the [M] bias broadcasts along the last axis
        acc = ctx.binary(B::Add, acc, b, DataType::Int32);
    }
    // scales are scalars or [M], which broadcast along the channels-last output's last axis
    let xs = scalar_input(ctx, node, 1)?;
    let ws = ctx.input(node, 4)?;
    let ys = scalar_input(ctx, node, 6)?;
    let m = multiplier(ctx, xs, ws, ys);
    let y_dt = ctx.input_dtype(node, 7)?;
    let y_zp = scalar_input(ctx, node, 7)?;
    let y = requantize(ctx, acc, m, y_zp, y_dt)?;
    let rank = ctx.need_rank(node, 0)?;
    let y = transpose(ctx, y, super::nn::channels_first_perm(rank), y_dt);
    ctx.finish(node, 0, y, y_dt)
}
