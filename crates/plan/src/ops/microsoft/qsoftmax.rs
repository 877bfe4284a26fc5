//! `QLinearSoftmax` as ORT's CPU kernel computes it (opset 1 and 13 forms, int8/uint8).
//!
//! ORT ignores the zero point of X (softmax is shift invariant) and looks `e^(x - max)` up in
//! a 256-entry float32 table: `table[i] = float(exp((i - 255 + shift) * x_scale))` in double,
//! `shift = max(0, ln(FLT_MAX / D) - 5) / x_scale` (`D` the reduced size, so that the sum
//! stays finite), entry `255 - (max - x)` for an element `x` of a row whose maximum is `max`.
//! Per row it sums the entries in float32, left to right, and writes
//! `min(nearbyint(e * floor(1 / y_scale) / sum) + y_zero_point, qmax)`.
//!
//! Here the table is built at plan time (X_scale a constant, `D` fixed), the gather, the
//! products and the rounding are MLX steps, and the row sums a host kernel that adds in
//! ORT's order (MLX's reductions add in another, which changes the last bit). The opset 1 form
//! reduces `[N, D]` flattened from `axis`, the opset 13 one the single `axis`.

use onnx_ir::{DataType, Dim, Node, TensorData};

use super::*;
use crate::decline;
use crate::host::HostArg;
use crate::kernel::{self, KernelAttrs};
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, ReduceAxes, ReduceOp, ReshapeTarget, UnaryOp as U};

/// The host kernel summing a float32 tensor's rows (last axis) left to right.
const ROW_SUM_KERNEL: &str = "float32_row_sum_in_order";

/// Registers the op and its kernel.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(MS, "QLinearSoftmax", 1, 1, claim_softmax, lower_softmax)
        .notes("int8/uint8, opset 1 and 13 forms; constant scales and y_zero_point, reduced dims fixed (ORT's table of exp, built at plan time; row sums in ORT's order on the host)");
    r.kernel(ROW_SUM_KERNEL, row_sum_kernel);
}

/// What the lowering needs to know.
#[derive(Debug, Clone, PartialEq)]
struct Softmax {
    /// Normalised axis.
    axis: usize,
    /// The opset 13 form (reduce `axis` alone).
    single_axis: bool,
    rank: usize,
    /// Elements per reduced row.
    d: i64,
    table: Vec<f32>,
    /// `floor(1 / y_scale)`.
    y_mult: f32,
    y_zero_point: i32,
}

/// A constant scalar or one-element 1-D input `i` of type `dt`.
fn const_scalar<'t>(
    i: usize,
    dt: DataType,
    get: &impl Fn(usize) -> Option<&'t TensorData>,
    what: &str,
) -> Result<f64, String> {
    let t =
        get(i).ok_or_else(|| format!("QLinearSoftmax: {what} must be a constant initializer"))?;
    if t.dtype != dt || t.dims.len() > 1 || t.numel() != 1 {
        return Err(format!("QLinearSoftmax: {what} must be a {dt} scalar"));
    }
    t.to_f64_vec()
        .and_then(|v| v.first().copied())
        .ok_or_else(|| format!("QLinearSoftmax: {what} is unreadable"))
}

/// ORT's table of `exp` for `D` elements per row.
fn exp_table(x_scale: f32, d: i64) -> Vec<f32> {
    let shift = ((f32::MAX / d as f32) as f64).ln();
    let shift = (shift - 5.0).max(0.0) / x_scale as f64;
    (0..256)
        .map(|i| ((i as f64 - 255.0 + shift) * x_scale as f64).exp() as f32)
        .collect()
}

fn softmax_of<'t>(
    node: &Node,
    dt: DataType,
    dims: Option<Vec<Dim>>,
    get: impl Fn(usize) -> Option<&'t TensorData>,
) -> Result<Softmax, String> {
    if node.inputs.len() < 4 {
        return Err("QLinearSoftmax: X, X_scale, X_zero_point and Y_scale are required".into());
    }
    let opset =
        attr_int(node, "opset")?.ok_or("QLinearSoftmax: the opset attribute is required")?;
    let single_axis = opset >= 13;
    let dims = dims.ok_or("QLinearSoftmax: the input rank is unknown")?;
    let rank = dims.len();
    if rank == 0 {
        return Err("QLinearSoftmax: a scalar input is not claimed".into());
    }
    let axis = attr_int(node, "axis")?.unwrap_or(if single_axis { -1 } else { 1 });
    let axis = crate::step::normalize_axis(axis, rank)?;
    let reduced = if single_axis {
        &dims[axis..=axis]
    } else {
        &dims[axis..]
    };
    let d = reduced
        .iter()
        .map(Dim::fixed)
        .product::<Option<i64>>()
        .filter(|&d| d > 0)
        .ok_or("QLinearSoftmax: the reduced dims must be fixed and non-empty")?;
    let x_scale = const_scalar(1, DataType::Float, &get, "X_scale")? as f32;
    let y_scale = const_scalar(3, DataType::Float, &get, "Y_scale")? as f32;
    if !(x_scale.is_finite() && x_scale > 0.0 && y_scale.is_finite() && y_scale > 0.0) {
        return Err("QLinearSoftmax: the scales must be positive and finite".into());
    }
    let y_zero_point = match node.input(4) {
        None => 0,
        Some(_) => const_scalar(4, dt, &get, "Y_zero_point")? as i32,
    };
    let table = exp_table(x_scale, d);
    let y_mult = (1.0f32 / y_scale).floor();
    // ORT multiplies before dividing by the sum: keep that product finite
    if !(table[255] * y_mult).is_finite() || y_mult > (1 << 24) as f32 {
        return Err(format!(
            "QLinearSoftmax: Y_scale {y_scale} overflows ORT's float32 arithmetic for {d} elements"
        ));
    }
    Ok(Softmax {
        axis,
        single_axis,
        rank,
        d,
        table,
        y_mult,
        y_zero_point,
    })
}

fn claim_softmax(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, 0, &[DataType::Int8, DataType::Uint8])?;
    if let Some(a) = node
        .attributes
        .keys()
        .find(|k| !matches!(k.as_str(), "axis" | "opset"))
    {
        decline!("QLinearSoftmax: the attribute {a} is not claimed");
    }
    let get = |i: usize| node.input(i).and_then(|n| ctx.constant(n));
    softmax_of(node, dt, dims_of(ctx, node.input(0).unwrap_or("")), get).or_decline()?;
    Ok(())
}

fn lower_softmax(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let dims = ctx.shape_of(node.input(0).unwrap_or(""));
    let sm = {
        let get = |i: usize| ctx.const_input(node, i);
        softmax_of(node, dt, dims, get).or_invalid(node)?
    };
    let (i32t, f) = (DataType::Int32, DataType::Float);
    let x = ctx.input(node, 0)?;
    // rows on the last axis
    let last = sm.rank - 1;
    let perm: Option<Vec<i32>> = (sm.single_axis && sm.axis != last).then(|| {
        let mut p: Vec<i32> = (0..sm.rank as i32).collect();
        p.swap(sm.axis, last);
        p
    });
    let rows = match &perm {
        Some(p) => transpose(ctx, x, p, dt),
        None if sm.single_axis => x,
        None => reshape(
            ctx,
            x,
            ReshapeTarget::Onnx {
                shape: crate::step::ShapeSource::Static(vec![-1, sm.d]),
                allowzero: false,
            },
            dt,
        ),
    };
    let xi = ctx.cast(rows, dt, i32t);
    let max = ctx.temp(i32t);
    ctx.push(Step::Reduce {
        op: ReduceOp::Max,
        x: xi,
        axes: ReduceAxes::Static(vec![-1]),
        keepdims: true,
        out: max,
    });
    // entry 255 - (max - x)
    let below = ctx.binary(B::Subtract, max, xi, i32t);
    let top = ctx.scalar(i32t, 255.0)?;
    let idx = ctx.binary(B::Subtract, top, below, i32t);
    let table = TensorData::from_f32(vec![256], &sm.table);
    let table = ctx.constant(table);
    let e = take(ctx, table, idx, 0, f);
    let sum = ctx.host_kernel(
        node,
        ROW_SUM_KERNEL,
        vec![HostArg::Value(e)],
        KernelAttrs::new(),
        &[f],
    )?[0];
    let m = ctx.scalar(f, sm.y_mult as f64)?;
    let v = ctx.binary(B::Multiply, e, m, f);
    let v = ctx.binary(B::Divide, v, sum, f);
    let v = ctx.unary(U::Round, v, f);
    let q = ctx.cast(v, f, i32t);
    let zp = ctx.scalar(i32t, sm.y_zero_point as f64)?;
    let q = ctx.binary(B::Add, q, zp, i32t);
    let hi = ctx.scalar(i32t, if dt == DataType::Int8 { 127.0 } else { 255.0 })?;
    let q = ctx.binary(B::Minimum, q, hi, i32t);
    let y = ctx.cast(q, i32t, dt);
    let y = match &perm {
        Some(p) => transpose(ctx, y, p, dt),
        None if sm.single_axis => y,
        None => reshape(ctx, y, ReshapeTarget::Like(x), dt),
    };
    ctx.finish(node, 0, y, dt)
}

/// Sums each row (last axis) of a float32 tensor left to right, keeping the axis (size 1).
fn row_sum_kernel(
    inputs: &[Option<TensorData>],
    _attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let x = kernel::input(inputs, 0)?;
    let v = kernel::f32s(x)?;
    let d = *x.dims.last().ok_or("row sum of a scalar")? as usize;
    let sums: Vec<f32> = if d == 0 {
        vec![0.0; v.len()]
    } else {
        v.chunks_exact(d)
            .map(|r| r.iter().fold(0.0f32, |s, &e| s + e))
            .collect()
    };
    let mut dims = x.dims.clone();
    *dims.last_mut().expect("rank >= 1") = 1;
    Ok(vec![TensorData::from_f32(dims, &sums)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_ends_at_the_shift_and_sums_stay_finite() {
        let t = exp_table(0.1, 10);
        // the top entry is e^(ln(FLT_MAX / 10) - 5)
        let want = ((f32::MAX / 10.0) as f64).ln() - 5.0;
        assert!((t[255] as f64).ln() - want < 1e-5);
        assert!(t.windows(2).all(|w| w[0] <= w[1]));
        assert!((t[255] * 10.0).is_finite());
    }

    #[test]
    fn row_sums_add_left_to_right() {
        // 1e8 + 1 + ... (left to right in float32) drops every 1
        let mut row = vec![1.0e8f32];
        row.extend(std::iter::repeat_n(1.0f32, 8));
        let x = TensorData::from_f32(vec![1, 9], &row);
        let out = row_sum_kernel(&[Some(x)], &KernelAttrs::new()).unwrap();
        assert_eq!(out[0].dims, vec![1, 1]);
        assert_eq!(kernel::f32s(&out[0]).unwrap(), vec![1.0e8]);
    }
}
