//! The step interpreter: one match arm per MLX primitive a plan step names.

use mlx::{Array, Dtype, Stream, fast, ops};
use plan::step::ScatterOp;
use plan::{ArgReduceOp, BinaryOp, HostReader, ReduceOp, Slot, Step, UnaryOp};

use crate::RuntimeError;
use crate::dtype::to_mlx;

/// The arrays bound to a plan's slots during one run.
pub(crate) struct Slots {
    values: Vec<Option<Array>>,
    /// Host copies of slots computed on the host (the plan's host program), so reading them
    /// back needs no device sync.
    host_values: std::collections::HashMap<Slot, onnx_ir::TensorData>,
    /// Integer values already read back from the device in this run: slots are written once
    /// per run, so each is synchronised at most once (GroupQueryAttention layers all read the
    /// same `seqlens_k` and `total_sequence_length`).
    read_back: std::cell::RefCell<std::collections::HashMap<Slot, Vec<i64>>>,
    /// Status flags of guarded steps (see `guard`).
    pub(crate) flags: crate::guard::Flags,
    /// Slots a step left without an array on purpose: a GroupQueryAttention mask that keeps
    /// every key (its attention runs unmasked).
    absent: std::collections::HashSet<Slot>,
    /// True while tracing a compiled closure: values that change from run to run must then
    /// come from arrays (the closure's arguments), never from host values baked in.
    pub(crate) in_closure: bool,
    /// The key seed of the step about to run when it is a random one (set per step by the
    /// program, which counts each random step's runs; see `random`).
    pub(crate) draw_seed: Option<u64>,
    /// The value ranges of the plan's integer constants (see [`crate::guard::ConstantRanges`]).
    pub(crate) constant_ranges: std::sync::Arc<crate::guard::ConstantRanges>,
}

fn err(e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError(e.to_string())
}

fn shape_i64(a: &Array) -> Vec<i64> {
    a.shape().into_iter().map(i64::from).collect()
}

fn to_i32s(v: &[i64], what: &str) -> Result<Vec<i32>, RuntimeError> {
    v.iter()
        .map(|&x| {
            i32::try_from(x)
                .map_err(|_| RuntimeError(format!("{what} value {x} does not fit in int32")))
        })
        .collect()
}

impl Slots {
    /// Empty slots for a plan with `n` of them.
    pub(crate) fn new(n: usize) -> Slots {
        Slots {
            values: (0..n).map(|_| None).collect(),
            host_values: Default::default(),
            read_back: Default::default(),
            flags: Default::default(),
            absent: Default::default(),
            in_closure: false,
            draw_seed: None,
            constant_ranges: Default::default(),
        }
    }

    /// Binds an array to a slot.
    pub(crate) fn set(&mut self, slot: Slot, value: Array) {
        let read_back = self.read_back.get_mut();
        if !read_back.is_empty() {
            read_back.remove(&slot);
        }
        self.values[slot.index()] = Some(value);
    }

    /// Binds a host-computed tensor to a slot, keeping its host copy for host reads.
    pub(crate) fn set_host(
        &mut self,
        slot: Slot,
        value: onnx_ir::TensorData,
    ) -> Result<(), RuntimeError> {
        let shape = to_i32s(&value.dims, "host tensor dim")?;
        self.set(
            slot,
            Array::from_bytes(&value.bytes, &shape, to_mlx(value.dtype)?).map_err(err)?,
        );
        self.host_values.insert(slot, value);
        Ok(())
    }

    /// Binds an array to a slot together with its host value (a host-program result whose
    /// array the caller made, e.g. a compiled closure's argument).
    pub(crate) fn set_with_host(&mut self, slot: Slot, array: Array, value: onnx_ir::TensorData) {
        self.set(slot, array);
        self.host_values.insert(slot, value);
    }

    /// Records the host value of a slot whose array is bound already (a plan input that steps
    /// read on the host: ORT hands it over in host memory).
    pub(crate) fn set_host_value(&mut self, slot: Slot, value: onnx_ir::TensorData) {
        self.host_values.insert(slot, value);
    }

    /// The host value of a slot, if it has one (a host-only string value, a host result).
    pub(crate) fn host_value(&self, slot: Slot) -> Option<&onnx_ir::TensorData> {
        self.host_values.get(&slot)
    }

    /// Leaves `slot` without an array on purpose (see [`Slots::is_absent`]; an optional plan
    /// input the run bound none to, too).
    pub(crate) fn set_absent(&mut self, slot: Slot) {
        self.absent.insert(slot);
    }

    /// True when the step writing `slot` left it empty on purpose.
    fn is_absent(&self, slot: Slot) -> bool {
        self.absent.contains(&slot)
    }

    /// The array bound to a slot.
    pub(crate) fn get(&self, slot: Slot) -> Result<&Array, RuntimeError> {
        self.values
            .get(slot.index())
            .and_then(Option::as_ref)
            .ok_or_else(|| RuntimeError(format!("slot {slot:?} read before it was written")))
    }

    /// The indices in `slot` (bound to `indices`) made safe for an axis of length `n`
    /// (`[-n, n)`, or `[0, n)` when `nonnegative`): as they are when `slot` is a constant
    /// whose every value is in range, else guarded (see [`crate::guard`]).
    fn safe_indices(
        &mut self,
        slot: Slot,
        indices: &Array,
        n: i32,
        nonnegative: bool,
        s: &Stream,
    ) -> Result<Array, RuntimeError> {
        let lo = if nonnegative { 0 } else { -(n as i64) };
        if self.constant_ranges.within(slot, lo, n as i64) {
            return Ok(indices.clone());
        }
        if nonnegative {
            crate::guard::bounded_nonnegative_indices(indices, n, &mut self.flags, s)
        } else {
            crate::guard::bounded_indices(indices, n, &mut self.flags, s)
        }
        .map_err(err)
    }

    /// Drops a slot's array (after its last use, so MLX may reuse its buffer).
    pub(crate) fn clear(&mut self, slot: Slot) {
        if let Some(v) = self.values.get_mut(slot.index()) {
            *v = None;
        }
    }
}

/// Reads small tensors back to the host for steps whose arguments depend on values.
struct Host<'a> {
    slots: &'a Slots,
}

impl Host<'_> {
    fn values<T: mlx::Element>(&self, slot: Slot, dtype: Dtype) -> Result<Vec<T>, String> {
        let a = self.slots.get(slot).map_err(|e| e.0)?;
        // Host reads run on the CPU stream whatever the plan's device.
        let cpu = Stream::default_cpu();
        let a = if a.dtype() == dtype {
            a.clone()
        } else {
            ops::astype(a, dtype, &cpu).map_err(|e| e.to_string())?
        };
        crate::stats::note_host_read();
        log::trace!(
            "host read of slot {slot:?} ({:?}, {:?})",
            a.dtype(),
            a.shape()
        );
        a.to_vec::<T>().map_err(|e| e.to_string())
    }
}

impl HostReader for Host<'_> {
    fn ints(&mut self, slot: Slot) -> Result<Vec<i64>, String> {
        if let Some(v) = self
            .slots
            .host_values
            .get(&slot)
            .and_then(|t| t.to_i64_vec())
        {
            return Ok(v);
        }
        if let Some(v) = self.slots.read_back.borrow().get(&slot) {
            return Ok(v.clone());
        }
        let v = self.values::<i64>(slot, Dtype::Int64)?;
        self.slots.read_back.borrow_mut().insert(slot, v.clone());
        Ok(v)
    }

    fn floats(&mut self, slot: Slot) -> Result<Vec<f64>, String> {
        if let Some(v) = self
            .slots
            .host_values
            .get(&slot)
            .and_then(|t| t.to_f64_vec())
        {
            return Ok(v);
        }
        self.values::<f64>(slot, Dtype::Float64)
    }
}

/// The values of a slot as `i64` (integer or bool arrays), read on the host once per run.
pub(crate) fn read_ints(slots: &Slots, slot: Slot) -> Result<Vec<i64>, RuntimeError> {
    Host { slots }.ints(slot).map_err(RuntimeError)
}

/// `Split` at `points` along `axis` (of length `len`) as dynamic slices: MLX's split and slice
/// primitives cannot re-infer their shapes in a shapeless compiled closure.
fn split_in_closure(
    x: &Array,
    points: &[i32],
    len: i64,
    axis: i32,
    s: &Stream,
) -> Result<Vec<Array>, RuntimeError> {
    let mut bounds = Vec::with_capacity(points.len() + 2);
    bounds.push(0);
    bounds.extend_from_slice(points);
    bounds.push(len as i32);
    let shape = x.shape();
    bounds
        .windows(2)
        .map(|w| {
            let start = Array::from_slice(&[w[0]], &[1]).map_err(err)?;
            let mut size = shape.clone();
            size[axis as usize] = w[1] - w[0];
            ops::slice_dynamic(x, &start, &[axis], &size, s).map_err(err)
        })
        .collect()
}

/// The host value of a `HostEval` argument: a host copy the slot has (reading the array back
/// when it has none, which the planner avoids), or the shape of its array.
fn host_arg(
    arg: &plan::HostArg,
    slots: &Slots,
) -> Result<Option<onnx_ir::TensorData>, RuntimeError> {
    Ok(match arg {
        plan::HostArg::Absent => None,
        plan::HostArg::Const(t) => Some(t.clone()),
        // an absent optional input has no shape: the kernel sees it omitted
        plan::HostArg::ShapeOf(slot) if slots.is_absent(*slot) => None,
        plan::HostArg::ShapeOf(slot) => {
            let dims = shape_i64(slots.get(*slot)?);
            Some(onnx_ir::TensorData::from_i64(
                vec![dims.len() as i64],
                &dims,
            ))
        }
        plan::HostArg::Value(slot) => {
            if let Some(t) = slots.host_values.get(slot) {
                return Ok(Some(t.clone()));
            }
            let a = slots.get(*slot)?;
            let dtype = crate::dtype::to_onnx(a.dtype())
                .ok_or_else(|| err("a host value of a complex array"))?;
            let v = Host { slots }.ints(*slot).map_err(err)?;
            let t = plan::tensor_from_i64(dtype, shape_i64(a), &v)
                .ok_or_else(|| err("a host value of a non-integer array"))?;
            Some(t)
        }
    })
}

/// The host buffer of a `HostKernel` input: a slot's host copy or its array's values read
/// back (in its own dtype), its shape, a constant, or nothing.
fn host_tensor(
    arg: &plan::HostArg,
    slots: &Slots,
) -> Result<Option<onnx_ir::TensorData>, RuntimeError> {
    let plan::HostArg::Value(slot) = arg else {
        return host_arg(arg, slots);
    };
    if slots.is_absent(*slot) {
        return Ok(None);
    }
    if let Some(t) = slots.host_values.get(slot) {
        return Ok(Some(t.clone()));
    }
    let a = slots.get(*slot)?;
    let dtype = crate::dtype::to_onnx(a.dtype())
        .ok_or_else(|| err("a host kernel input of a complex array"))?;
    // Host reads run on the CPU stream whatever the plan's device.
    let c = a.to_contiguous(&Stream::default_cpu()).map_err(err)?;
    crate::stats::note_host_read();
    log::trace!(
        "host read of slot {slot:?} ({:?}, {:?})",
        a.dtype(),
        a.shape()
    );
    let t = onnx_ir::TensorData::new(dtype, shape_i64(&c), c.as_bytes().map_err(err)?.to_vec())
        .map_err(err)?;
    Ok(Some(t))
}

/// An array of a host-computed tensor.
pub(crate) fn host_array(t: &onnx_ir::TensorData) -> Result<Array, RuntimeError> {
    let shape = to_i32s(&t.dims, "host tensor dim")?;
    Array::from_bytes(&t.bytes, &shape, to_mlx(t.dtype)?).map_err(err)
}

fn unary(op: UnaryOp, x: &Array, s: &Stream) -> mlx::Result<Array> {
    use UnaryOp::*;
    match op {
        Abs => ops::abs(x, s),
        Negative => ops::negative(x, s),
        Exp => ops::exp(x, s),
        Log => ops::log(x, s),
        Log1p => ops::log1p(x, s),
        Expm1 => ops::expm1(x, s),
        Sqrt => ops::sqrt(x, s),
        Rsqrt => ops::rsqrt(x, s),
        Square => ops::square(x, s),
        Reciprocal => ops::reciprocal(x, s),
        Erf => ops::erf(x, s),
        Tanh => ops::tanh(x, s),
        Sigmoid => ops::sigmoid(x, s),
        Sin => ops::sin(x, s),
        Cos => ops::cos(x, s),
        Tan => ops::tan(x, s),
        Asin => ops::arcsin(x, s),
        Acos => ops::arccos(x, s),
        Atan => ops::arctan(x, s),
        Sinh => ops::sinh(x, s),
        Cosh => ops::cosh(x, s),
        Asinh => ops::arcsinh(x, s),
        Acosh => ops::arccosh(x, s),
        Atanh => ops::arctanh(x, s),
        Floor => ops::floor(x, s),
        Ceil => ops::ceil(x, s),
        Round => ops::round(x, 0, s),
        Sign => ops::sign(x, s),
        LogicalNot => ops::logical_not(x, s),
        BitwiseInvert => ops::bitwise_invert(x, s),
        IsNan => ops::isnan(x, s),
        IsInf => ops::isinf(x, s),
        IsPosInf => ops::isposinf(x, s),
        IsNegInf => ops::isneginf(x, s),
    }
}

fn binary(op: BinaryOp, a: &Array, b: &Array, s: &Stream) -> mlx::Result<Array> {
    use BinaryOp::*;
    match op {
        Add => ops::add(a, b, s),
        Subtract => ops::subtract(a, b, s),
        Multiply => ops::multiply(a, b, s),
        Divide => ops::divide(a, b, s),
        FloorDivide => ops::floor_divide(a, b, s),
        Remainder => ops::remainder(a, b, s),
        Power => ops::power(a, b, s),
        Maximum => ops::maximum(a, b, s),
        Minimum => ops::minimum(a, b, s),
        Equal => ops::equal(a, b, s),
        NotEqual => ops::not_equal(a, b, s),
        Less => ops::less(a, b, s),
        LessEqual => ops::less_equal(a, b, s),
        Greater => ops::greater(a, b, s),
        GreaterEqual => ops::greater_equal(a, b, s),
        LogicalAnd => ops::logical_and(a, b, s),
        LogicalOr => ops::logical_or(a, b, s),
        BitwiseAnd => ops::bitwise_and(a, b, s),
        BitwiseOr => ops::bitwise_or(a, b, s),
        BitwiseXor => ops::bitwise_xor(a, b, s),
        LeftShift => ops::left_shift(a, b, s),
        RightShift => ops::right_shift(a, b, s),
        Atan2 => ops::arctan2(a, b, s),
        LogAddExp => ops::logaddexp(a, b, s),
    }
}

fn reduce(op: ReduceOp, x: &Array, axes: &[i32], keepdims: bool, s: &Stream) -> mlx::Result<Array> {
    use ReduceOp::*;
    if crate::empty_reduce::reduces_empty_axis(&x.shape(), axes) {
        return crate::empty_reduce::reduce(op, x, axes, keepdims, s);
    }
    match op {
        Sum => ops::sum_axes(x, axes, keepdims, s),
        Mean => ops::mean_axes(x, axes, keepdims, s),
        Max => ops::max_axes(x, axes, keepdims, s),
        Min => ops::min_axes(x, axes, keepdims, s),
        Prod => ops::prod_axes(x, axes, keepdims, s),
        LogSumExp => ops::logsumexp_axes(x, axes, keepdims, s),
        All => ops::all_axes(x, axes, keepdims, s),
        Any => ops::any_axes(x, axes, keepdims, s),
    }
}

/// Executes one step, writing its outputs into `slots`.
pub(crate) fn execute(step: &Step, slots: &mut Slots, s: &Stream) -> Result<(), RuntimeError> {
    use Step::*;
    let out_value = match step {
        Unary { op, x, .. } => unary(*op, slots.get(*x)?, s).map_err(err)?,
        Binary { op, a, b, .. }
            if matches!(
                op,
                BinaryOp::FloorDivide | BinaryOp::Remainder | BinaryOp::Divide
            ) =>
        {
            let (a, b) = (slots.get(*a)?.clone(), slots.get(*b)?.clone());
            crate::guard::int_binary(*op, &a, &b, &mut slots.flags, s, binary).map_err(err)?
        }
        Binary { op, a, b, .. } => binary(*op, slots.get(*a)?, slots.get(*b)?, s).map_err(err)?,
        Where { cond, x, y, .. } => {
            ops::where_(slots.get(*cond)?, slots.get(*x)?, slots.get(*y)?, s).map_err(err)?
        }
        AsType { x, dtype, .. } => ops::astype(slots.get(*x)?, to_mlx(*dtype)?, s).map_err(err)?,
        MatMul { a, b, .. } => ops::matmul(slots.get(*a)?, slots.get(*b)?, s).map_err(err)?,
        MatMulTransposed { a, bt, .. } => {
            let b = ops::transpose_axes(slots.get(*bt)?, &[1, 0], s).map_err(err)?;
            ops::matmul(slots.get(*a)?, &b, s).map_err(err)?
        }
        Addmm {
            c,
            a,
            b,
            alpha,
            beta,
            ..
        } => ops::addmm(
            slots.get(*c)?,
            slots.get(*a)?,
            slots.get(*b)?,
            *alpha,
            *beta,
            s,
        )
        .map_err(err)?,
        Reshape { x, target, .. } => {
            let xa = slots.get(*x)?;
            let like = match target {
                plan::ReshapeTarget::Like(l) => Some(shape_i64(slots.get(*l)?)),
                _ => None,
            };
            let shape = target
                .resolve(&shape_i64(xa), like.as_deref(), &mut Host { slots })
                .map_err(err)?;
            ops::reshape(slots.get(*x)?, &shape, s).map_err(err)?
        }
        Transpose { x, perm, .. } => {
            let xa = slots.get(*x)?;
            let perm: Vec<i32> = match perm {
                Some(p) => p.clone(),
                None => (0..xa.ndim() as i32).rev().collect(),
            };
            ops::transpose_axes(xa, &perm, s).map_err(err)?
        }
        Expand { x, shape, .. } => {
            let target = shape.get(&mut Host { slots }).map_err(err)?;
            let xa = slots.get(*x)?;
            let out_shape = plan::step::expand_shape(&shape_i64(xa), &target).map_err(err)?;
            ops::broadcast_to(xa, &out_shape, s).map_err(err)?
        }
        Concat { inputs, axis, .. } => {
            let arrays = inputs
                .iter()
                .map(|i| slots.get(*i))
                .collect::<Result<Vec<_>, _>>()?;
            ops::concatenate(&arrays, *axis, s).map_err(err)?
        }
        Slice { x, spec, .. } => {
            let shape = shape_i64(slots.get(*x)?);
            let b = spec.resolve(&shape, &mut Host { slots }).map_err(err)?;
            ops::slice(slots.get(*x)?, &b.start, &b.stop, &b.strides, s).map_err(err)?
        }
        Take {
            x, indices, axis, ..
        } => {
            let (xa, ia) = (slots.get(*x)?.clone(), slots.get(*indices)?.clone());
            let n = crate::guard::dim(&xa, *axis)?;
            let ia = slots.safe_indices(*indices, &ia, n, false, s)?;
            ops::take_axis(&xa, &ia, *axis, s).map_err(err)?
        }
        TakeAlongAxis {
            x, indices, axis, ..
        } => {
            let (xa, ia) = (slots.get(*x)?.clone(), slots.get(*indices)?.clone());
            let n = crate::guard::dim(&xa, *axis)?;
            let ia = slots.safe_indices(*indices, &ia, n, false, s)?;
            ops::take_along_axis(&xa, &ia, *axis, s).map_err(err)?
        }
        Softmax {
            x, axes, precise, ..
        } => ops::softmax_axes(slots.get(*x)?, axes, *precise, s).map_err(err)?,
        LayerNorm {
            x,
            weight,
            bias,
            eps,
            ..
        } => {
            let w = weight.map(|w| slots.get(w)).transpose()?;
            let b = bias.map(|b| slots.get(b)).transpose()?;
            fast::layer_norm(slots.get(*x)?, w, b, *eps, s).map_err(err)?
        }
        RmsNorm { x, weight, eps, .. } => {
            let w = weight.map(|w| slots.get(w)).transpose()?;
            fast::rms_norm(slots.get(*x)?, w, *eps, s).map_err(err)?
        }
        Attention {
            q,
            k,
            v,
            mask,
            causal,
            sinks,
            scale,
            ..
        } => {
            let mask = mask.filter(|m| !slots.is_absent(*m));
            let mask = match (causal, mask) {
                (true, _) => fast::AttentionMask::Causal,
                (false, Some(m)) => fast::AttentionMask::Array(slots.get(m)?),
                (false, None) => fast::AttentionMask::None,
            };
            let sinks = sinks.map(|m| slots.get(m)).transpose()?;
            let (q, k, v) = (slots.get(*q)?, slots.get(*k)?, slots.get(*v)?);
            crate::attention::attention(q, k, v, *scale, mask, sinks, s).map_err(err)?
        }
        Reduce {
            op,
            x,
            axes,
            keepdims,
            ..
        } => {
            let rank = slots.get(*x)?.ndim();
            match axes.resolve(rank, &mut Host { slots }).map_err(err)? {
                None => slots.get(*x)?.clone(),
                Some(axes) => reduce(*op, slots.get(*x)?, &axes, *keepdims, s).map_err(err)?,
            }
        }
        ArgReduce {
            op,
            x,
            axis,
            keepdims,
            ..
        } => match (op, empty_arg_reduce(slots.get(*x)?, *axis, *keepdims)) {
            (_, Some(shape)) => ops::zeros(&shape, Dtype::Uint32, s).map_err(err)?,
            (ArgReduceOp::ArgMax, None) => {
                ops::argmax_axis(slots.get(*x)?, *axis, *keepdims, s).map_err(err)?
            }
            (ArgReduceOp::ArgMin, None) => {
                ops::argmin_axis(slots.get(*x)?, *axis, *keepdims, s).map_err(err)?
            }
        },
        Conv { x, w, spec, .. } => {
            // Exact integer convolutions run on the (lane's) CPU stream; see `ConvSpec`.
            let cpu;
            let s = if spec.exact_integers {
                cpu = Stream::default_cpu();
                &cpu
            } else {
                s
            };
            let xa = slots.get(*x)?;
            let a = spec.resolve(&shape_i64(xa)).map_err(err)?;
            ops::conv_general(xa, slots.get(*w)?, &conv_params(a, false), s).map_err(err)?
        }
        Pad {
            x,
            pads,
            mode,
            value,
            ..
        } => {
            let shape = shape_i64(slots.get(*x)?);
            let a = pads.resolve(&shape, &mut Host { slots }).map_err(err)?;
            match mode.mlx_mode() {
                Some(m) => ops::pad(
                    slots.get(*x)?,
                    &a.axes,
                    &a.lo,
                    &a.hi,
                    slots.get(*value)?,
                    m,
                    s,
                )
                .map_err(err)?,
                None => {
                    let mut y = slots.get(*x)?.clone();
                    for ((&axis, &lo), &hi) in a.axes.iter().zip(&a.lo).zip(&a.hi) {
                        if lo == 0 && hi == 0 {
                            continue;
                        }
                        let n = shape.get(axis as usize).copied().unwrap_or(0);
                        let idx = mode
                            .source_indices(n, i64::from(lo), i64::from(hi))
                            .map_err(err)?;
                        let idx = Array::from_slice(&idx, &[idx.len() as i32]).map_err(err)?;
                        y = ops::take_axis(&y, &idx, axis, s).map_err(err)?;
                    }
                    y
                }
            }
        }
        Windows { x, spec, .. } => {
            let xa = slots.get(*x)?;
            let a = spec.resolve(&shape_i64(xa)).map_err(err)?;
            let xc = ops::contiguous(xa, false, s).map_err(err)?;
            ops::as_strided(&xc, &a.shape, &a.strides, a.offset, s).map_err(err)?
        }
        PoolDivisor { x, spec, dtype, .. } => {
            let (shape, data) = spec.divisor(&shape_i64(slots.get(*x)?)).map_err(err)?;
            let d = Array::from_slice(&data, &shape).map_err(err)?;
            ops::astype(&d, to_mlx(*dtype)?, s).map_err(err)?
        }
        Shape { x, start, end, .. } => {
            let shape = shape_i64(slots.get(*x)?);
            let range = plan::step::shape_range(shape.len(), *start, *end);
            let dims: Vec<i64> = shape[range].to_vec();
            Array::from_slice(&dims, &[dims.len() as i32]).map_err(err)?
        }
        Full {
            shape,
            value,
            dtype,
            ..
        } => {
            let dims = shape.get(&mut Host { slots }).map_err(err)?;
            let dims = plan::step::full_shape(&dims).map_err(err)?;
            ops::full(&dims, slots.get(*value)?, to_mlx(*dtype)?, s).map_err(err)?
        }
        Arange {
            start,
            limit,
            delta,
            dtype,
            ..
        } => {
            let mut host = Host { slots };
            let scalar = |v: Vec<f64>, what: &str| {
                v.first()
                    .copied()
                    .ok_or_else(|| RuntimeError(format!("Range {what} is empty")))
            };
            let st = scalar(start.get(&mut host).map_err(err)?, "start")?;
            let li = scalar(limit.get(&mut host).map_err(err)?, "limit")?;
            let de = scalar(delta.get(&mut host).map_err(err)?, "delta")?;
            if de == 0.0 {
                return Err(RuntimeError("Range delta is 0".into()));
            }
            ops::arange(st, li, de, to_mlx(*dtype)?, s).map_err(err)?
        }
        Split {
            x,
            axis,
            sizes,
            outs,
        } => {
            let shape = shape_i64(slots.get(*x)?);
            let ax = plan::step::normalize_axis(*axis as i64, shape.len()).map_err(err)?;
            let sizes = sizes
                .as_ref()
                .map(|z| z.get(&mut Host { slots }))
                .transpose()
                .map_err(err)?;
            let points =
                plan::step::split_points(shape[ax], outs.len(), sizes.as_deref()).map_err(err)?;
            let parts = if slots.in_closure {
                split_in_closure(slots.get(*x)?, &points, shape[ax], ax as i32, s)?
            } else {
                ops::split_sections(slots.get(*x)?, &points, ax as i32, s).map_err(err)?
            };
            if parts.len() != outs.len() {
                return Err(RuntimeError(format!(
                    "Split made {} parts for {} outputs",
                    parts.len(),
                    outs.len()
                )));
            }
            for (slot, part) in outs.iter().zip(parts) {
                slots.set(*slot, part);
            }
            return Ok(());
        }
        CumSum {
            x,
            axis,
            reverse,
            inclusive,
            dtype,
            ..
        } => ops::cumsum(
            slots.get(*x)?,
            *axis,
            *reverse,
            *inclusive,
            Some(to_mlx(*dtype)?),
            s,
        )
        .map_err(err)?,
        Triangle {
            x, upper: true, k, ..
        } => ops::triu(slots.get(*x)?, *k, s).map_err(err)?,
        Triangle {
            x, upper: false, k, ..
        } => ops::tril(slots.get(*x)?, *k, s).map_err(err)?,
        View { x, dtype, .. } => ops::view(slots.get(*x)?, to_mlx(*dtype)?, s).map_err(err)?,
        Cumulative {
            op,
            x,
            axis,
            reverse,
            inclusive,
            ..
        } => {
            let axis = axis.get(&mut Host { slots }).map_err(err)?;
            let xa = slots.get(*x)?;
            let axis = plan::step::cumulative_axis(&axis, xa.ndim()).map_err(err)?;
            let dtype = Some(xa.dtype());
            match op {
                plan::step::CumOp::Sum => ops::cumsum(xa, axis, *reverse, *inclusive, dtype, s),
                plan::step::CumOp::Prod => ops::cumprod(xa, axis, *reverse, *inclusive, dtype, s),
            }
            .map_err(err)?
        }
        Tile { x, reps, .. } => {
            let reps = reps.get(&mut Host { slots }).map_err(err)?;
            ops::tile(slots.get(*x)?, &to_i32s(&reps, "Tile repeats")?, s).map_err(err)?
        }
        ConvFlipped { x, w, spec, .. } => {
            let xa = slots.get(*x)?;
            let a = spec.resolve(&shape_i64(xa)).map_err(err)?.conv;
            ops::conv_general(xa, slots.get(*w)?, &conv_params(a, true), s).map_err(err)?
        }
        ArgSort { x, axis, .. } => ops::argsort(slots.get(*x)?, *axis, s).map_err(err)?,
        Scatter {
            op,
            x,
            indices,
            updates,
            axes,
            ..
        } => {
            let (xa, u) = (slots.get(*x)?.clone(), slots.get(*updates)?.clone());
            // MLX's GPU scatter lacks 64-bit integers: those run on the CPU stream.
            let cpu = Stream::default_cpu();
            let s = if matches!(xa.dtype(), Dtype::Int64 | Dtype::Uint64) {
                &cpu
            } else {
                s
            };
            let mut idx = Vec::with_capacity(indices.len());
            for (i, axis) in indices.iter().zip(axes) {
                let n = crate::guard::dim(&xa, *axis)?;
                let ia = slots.get(*i)?.clone();
                idx.push(slots.safe_indices(*i, &ia, n, true, s)?);
            }
            let idx: Vec<&Array> = idx.iter().collect();
            let (xa, u) = (&xa, &u);
            match op {
                ScatterOp::Assign => ops::scatter(xa, &idx, u, axes, s),
                ScatterOp::Add => ops::scatter_add(xa, &idx, u, axes, s),
                ScatterOp::Prod => ops::scatter_prod(xa, &idx, u, axes, s),
                ScatterOp::Max => ops::scatter_max(xa, &idx, u, axes, s),
                ScatterOp::Min => ops::scatter_min(xa, &idx, u, axes, s),
            }
            .map_err(err)?
        }
        Gather {
            x, indices, axes, ..
        } => {
            let xa = slots.get(*x)?.clone();
            let sizes = plan::step::gather_slice_sizes(&shape_i64(&xa), axes).map_err(err)?;
            let mut idx = Vec::with_capacity(indices.len());
            for (i, axis) in indices.iter().zip(axes) {
                let n = crate::guard::dim(&xa, *axis)?;
                let ia = slots.get(*i)?.clone();
                idx.push(slots.safe_indices(*i, &ia, n, false, s)?);
            }
            let idx: Vec<&Array> = idx.iter().collect();
            ops::gather(&xa, &idx, axes, &sizes, s).map_err(err)?
        }
        Branch { .. } | Repeat { .. } => {
            return Err(err(
                "a step with sub-plans runs through its program's sub-programs",
            ));
        }
        HostEval { node, args, out } => {
            let values = args
                .iter()
                .map(|a| host_arg(a, slots))
                .collect::<Result<Vec<_>, _>>()?;
            let value = plan::eval_host_node(node, &values).map_err(err)?;
            slots.set_host(*out, value)?;
            return Ok(());
        }
        Random {
            dist,
            x,
            shape,
            dtype,
            ..
        } => {
            let seed = slots
                .draw_seed
                .take()
                .ok_or_else(|| err("a random step ran without its program's run counter"))?;
            let x = x.map(|x| slots.get(x)).transpose()?;
            crate::random::draw(dist, x, shape, *dtype, seed, s)?
        }
        Require { ok, .. } => {
            let ok = slots.get(*ok)?.clone();
            let axes: Vec<i32> = (0..ok.ndim() as i32).collect();
            let all = ops::all_axes(&ok, &axes, false, s).map_err(err)?;
            slots.flags.require(&all, s).map_err(err)?;
            all
        }
        HostKernel {
            kernel,
            inputs,
            attrs,
            outputs,
        } => {
            let values = inputs
                .iter()
                .map(|a| host_tensor(a, slots))
                .collect::<Result<Vec<_>, _>>()?;
            let results = plan::run_host_kernel(kernel, &values, attrs).map_err(err)?;
            if results.len() != outputs.len() {
                return Err(RuntimeError(format!(
                    "host kernel {kernel:?} made {} outputs, the step has {}",
                    results.len(),
                    outputs.len()
                )));
            }
            for (slot, t) in outputs.iter().zip(results) {
                crate::strings::bind_result(slots, *slot, t)?;
            }
            return Ok(());
        }
        Fft {
            op,
            x,
            length,
            axis,
            ..
        } => {
            let mut host = Host { slots };
            let length = length.as_ref().map(|l| l.get(&mut host)).transpose();
            let axis = axis.get(&mut host).map_err(err)?;
            let xa = slots.get(*x)?;
            let axis = *axis
                .first()
                .ok_or_else(|| RuntimeError("FFT axis is empty".into()))?;
            let dim = crate::guard::dim(xa, to_i32s(&[axis], "FFT axis")?[0])?;
            let n = op
                .length(length.map_err(err)?.as_deref(), i64::from(dim))
                .map_err(err)?;
            let (n, axis) = (to_i32s(&[n], "FFT length")?[0], axis as i32);
            match op {
                plan::step::FftOp::Fft => ops::fft(xa, n, axis, s),
                plan::step::FftOp::Ifft => ops::ifft(xa, n, axis, s),
                plan::step::FftOp::Irfft => ops::irfft(xa, n, axis, s),
            }
            .map_err(err)?
        }
        Det { x, .. } => {
            // MLX's linear algebra runs on the CPU stream only.
            ops::linalg_det(slots.get(*x)?, &Stream::default_cpu()).map_err(err)?
        }
        QuantizedMatmul {
            x,
            w,
            scales,
            biases,
            group_size,
            bits,
            ..
        } => ops::quantized_matmul(
            slots.get(*x)?,
            slots.get(*w)?,
            slots.get(*scales)?,
            slots.get(*biases)?,
            true,
            *group_size,
            *bits,
            s,
        )
        .map_err(err)?,
        KvCache {
            past,
            new,
            seqlens,
            total,
            ..
        } => {
            let past_shape = past.map(|p| slots.get(p).map(Array::shape)).transpose()?;
            let new_shape = slots.get(*new)?.shape();
            let l = crate::contrib::layout(
                &mut Host { slots },
                *seqlens,
                total,
                &new_shape,
                past_shape.as_deref(),
            )?;
            let past = past.map(|p| slots.get(p)).transpose()?;
            crate::contrib::kv_cache(past, slots.get(*new)?, &l, s)?
        }
        GqaMask {
            seqlens,
            total,
            like,
            past,
            window,
            bias,
            omit,
            out,
        } => {
            let past_shape = past.map(|p| slots.get(p).map(Array::shape)).transpose()?;
            let like_shape = slots.get(*like)?.shape();
            let l = crate::contrib::layout(
                &mut Host { slots },
                *seqlens,
                total,
                &like_shape,
                past_shape.as_deref(),
            )?;
            if bias.is_none() && l.keeps_every_key(*window) {
                if *omit {
                    slots.set_absent(*out);
                    return Ok(());
                }
                Array::from_bytes(&[1], &[], Dtype::Bool).map_err(err)?
            } else {
                let bias = bias.map(|b| slots.get(b)).transpose()?;
                crate::contrib::gqa_mask(&l, *window, bias, s)?
            }
        }
        GqaPositions {
            seqlens,
            total,
            like,
            past,
            position_ids,
            ..
        } => {
            let past_shape = past.map(|p| slots.get(p).map(Array::shape)).transpose()?;
            let like_shape = slots.get(*like)?.shape();
            let mut host = Host { slots };
            let l = crate::contrib::layout(
                &mut host,
                *seqlens,
                total,
                &like_shape,
                past_shape.as_deref(),
            )?;
            if l.first_prompt || !slots.in_closure {
                let ids = position_ids
                    .map(|p| host.ints(p))
                    .transpose()
                    .map_err(err)?;
                crate::contrib::gqa_positions(&l, ids.as_deref())?
            } else {
                // From the arrays, so that a compiled closure follows their values.
                let ids = position_ids.map(|p| slots.get(p)).transpose()?;
                crate::contrib::gqa_positions_on_device(&l, slots.get(*seqlens)?, ids, s)?
            }
        }
        Iota {
            like, axis, dtype, ..
        } => {
            let shape = slots.get(*like)?.shape();
            let ax = plan::step::normalize_axis(*axis as i64, shape.len()).map_err(err)?;
            ops::arange(0.0, shape[ax] as f64, 1.0, to_mlx(*dtype)?, s).map_err(err)?
        }
    };
    let outs = step.outputs();
    let out = outs
        .first()
        .ok_or_else(|| RuntimeError("step without output".into()))?;
    slots.set(*out, out_value);
    Ok(())
}

/// `mlx_conv_general`'s parameters from resolved arguments.
fn conv_params(a: plan::step::ConvArgs, flip: bool) -> ops::ConvParams {
    ops::ConvParams {
        stride: a.stride,
        padding_lo: a.padding_lo,
        padding_hi: a.padding_hi,
        kernel_dilation: a.kernel_dilation,
        input_dilation: a.input_dilation,
        groups: a.groups,
        flip,
    }
}

/// `axis` counted from the front of a rank-`rank` shape.
fn normalized(axis: i32, rank: usize) -> usize {
    if axis < 0 {
        (axis + rank as i32).max(0) as usize
    } else {
        axis as usize
    }
}

/// For an arg-reduction of a zero-size `x` along a non-empty `axis`, the (empty) result's
/// shape. MLX refuses to arg-reduce any zero-size array ("Cannot argmax reduce zero size
/// array"), even when the reduced axis itself has elements (an empty batch), where the result
/// is simply empty. `None` otherwise (an empty axis stays MLX's error).
fn empty_arg_reduce(x: &Array, axis: i32, keepdims: bool) -> Option<Vec<i32>> {
    let shape = x.shape();
    let a = normalized(axis, shape.len());
    if x.size() != 0 || shape.get(a).is_none_or(|&d| d == 0) {
        return None;
    }
    Some(
        shape
            .iter()
            .enumerate()
            .filter_map(|(i, &d)| match (i == a, keepdims) {
                (false, _) => Some(d),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect(),
    )
}
