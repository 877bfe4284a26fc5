//! Guards between a plan and MLX: inputs that would make MLX crash the process (rather than
//! return an error) never reach it, and no step may build a tensor too large to exist.
//!
//! MLX trusts its callers where ONNX Runtime's kernels check:
//!
//! - `take` / `take_along_axis` / `gather` / `scatter*` read or write memory at whatever index
//!   they are given: an out-of-range index reads garbage or ends in SIGSEGV, and scatters write
//!   out of bounds. The guard replaces out-of-range indices by 0 inside the graph and raises a
//!   *status flag*; the run evaluates the flags with the outputs and fails (naming the node)
//!   when one is raised, so the garbage never leaves the EP.
//! - Integer `floor_divide` / `remainder` by 0, and of the minimum value by -1, raise SIGFPE on
//!   x86. The guard divides by 1 where the divisor is 0 or -1, negates where it is -1 (which
//!   wraps for the minimum, like two's complement), and raises a status flag where it is 0.
//! - An allocation MLX can't satisfy fails on its evaluation thread, which aborts the process.
//!   [`check_size`] refuses, before anything is evaluated, any step output larger than
//!   [`max_tensor_bytes`] (physical memory by default; `ORTMLX_MAX_TENSOR_BYTES` overrides).
//!
//! Status flags are collected per run as one int32 scalar: -1 when every guarded step was
//! fine, else the index of the last step that raised its flag. It is an extra output of the
//! traced program (so compiled closures carry it too), read after the outputs are evaluated.

use std::sync::OnceLock;

use mlx::{Array, Dtype, Stream, ops};
use plan::{BinaryOp, Plan, Slot, Step};

use crate::RuntimeError;

/// The environment variable that overrides [`max_tensor_bytes`].
pub const MAX_TENSOR_BYTES_VAR: &str = "ORTMLX_MAX_TENSOR_BYTES";

/// The largest tensor (in bytes) one plan step may produce: `ORTMLX_MAX_TENSOR_BYTES` when it
/// is set to a positive integer, else the machine's physical memory (no single tensor larger
/// than that can be computed anyway; trying makes the allocation fail on MLX's evaluation
/// thread, which takes the process down).
pub fn max_tensor_bytes() -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        if let Some(v) = crate::config().max_tensor_bytes.filter(|&v| v > 0) {
            return v;
        }
        physical_memory().unwrap_or(64 << 30)
    })
}

#[cfg(unix)]
fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf only reads system configuration.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && size > 0).then(|| (pages as u64).saturating_mul(size as u64))
}

#[cfg(not(unix))]
fn physical_memory() -> Option<u64> {
    None
}

/// The smallest and largest value of each integer constant of a plan, read once when the
/// program is built: a gather or scatter whose indices are a constant in range for the axis it
/// indexes needs no guard (no compare, reduce and select kernels per run; a rotary embedding's
/// half-swap permutation is such a constant in every layer).
#[derive(Default)]
pub(crate) struct ConstantRanges(std::collections::HashMap<Slot, (i64, i64)>);

impl ConstantRanges {
    /// The ranges of `constants`' integer tensors (empty ones have none).
    pub(crate) fn new<'a>(
        constants: impl IntoIterator<Item = (Slot, &'a onnx_ir::TensorData)>,
    ) -> ConstantRanges {
        let ranges = constants
            .into_iter()
            .filter_map(|(slot, t)| {
                let v = t.dtype.is_integer().then(|| t.to_i64_vec()).flatten()?;
                let lo = *v.iter().min()?;
                let hi = *v.iter().max()?;
                Some((slot, (lo, hi)))
            })
            .collect();
        ConstantRanges(ranges)
    }

    /// True when `slot` is an integer constant whose values all lie in `[lo, hi)`.
    pub(crate) fn within(&self, slot: Slot, lo: i64, hi: i64) -> bool {
        self.0
            .get(&slot)
            .is_some_and(|&(min, max)| min >= lo && max < hi)
    }
}

/// Fails when `a` is larger than [`max_tensor_bytes`].
pub(crate) fn check_size(a: &Array) -> Result<(), String> {
    let bytes = (a.size() as u64).saturating_mul(a.dtype().size() as u64);
    let limit = max_tensor_bytes();
    if bytes > limit {
        return Err(format!(
            "the result would be a tensor of shape {:?} ({bytes} bytes), more than the {limit} bytes one tensor may have (physical memory, or {MAX_TENSOR_BYTES_VAR})",
            a.shape()
        ));
    }
    Ok(())
}

/// The bytes a trace's live step results hold at once, following the plan's release schedule:
/// an estimate of the run's peak memory, checked against MLX's memory limit (95% of the GPU's
/// memory on CUDA, 80% of RAM on the CPU; the EP option `memory_limit` sets it). A run that
/// would need more fails before anything is evaluated, instead of exhausting the device (on
/// CUDA, MLX's managed memory would oversubscribe the GPU), and the session stays usable.
pub(crate) struct WorkingSet {
    bytes: Vec<u64>,
    live: u64,
    limit: u64,
}

impl WorkingSet {
    /// An empty working set for a plan of `num_slots` slots.
    pub(crate) fn new(num_slots: usize) -> WorkingSet {
        let limit = mlx::memory_limit().map_or(u64::MAX, |l| l as u64);
        WorkingSet {
            bytes: vec![0; num_slots],
            live: 0,
            limit: if limit == 0 { u64::MAX } else { limit },
        }
    }

    /// Counts the result `a` held in `slot`; fails when the live results exceed the limit.
    pub(crate) fn add(&mut self, slot: Slot, a: &Array) -> Result<(), String> {
        let bytes = (a.size() as u64).saturating_mul(a.dtype().size() as u64);
        let Some(held) = self.bytes.get_mut(slot.index()) else {
            return Ok(());
        };
        self.live = self.live.saturating_sub(*held).saturating_add(bytes);
        *held = bytes;
        if self.live > self.limit {
            return Err(format!(
                "this run would hold about {} bytes of intermediate results at once, more than MLX's memory limit of {} bytes (the EP option memory_limit); use smaller inputs",
                self.live, self.limit
            ));
        }
        Ok(())
    }

    /// Forgets the result held in `slot` (its last reader has run).
    pub(crate) fn release(&mut self, slot: Slot) {
        if let Some(held) = self.bytes.get_mut(slot.index()) {
            self.live = self.live.saturating_sub(std::mem::take(held));
        }
    }
}

/// True when running `step` may raise a status flag (see the module docs). A superset is
/// fine: a guarded step that raises nothing leaves the status at -1.
pub(crate) fn may_flag(plan: &Plan, step: &Step) -> bool {
    match step {
        Step::Take { .. }
        | Step::TakeAlongAxis { .. }
        | Step::Gather { .. }
        | Step::Scatter { .. }
        | Step::Require { .. } => true,
        Step::Repeat {
            inline: true, body, ..
        } => body.plan.steps.iter().any(|s| may_flag(&body.plan, s)),
        Step::Binary { op, out, .. } => {
            matches!(
                op,
                BinaryOp::FloorDivide | BinaryOp::Remainder | BinaryOp::Divide
            ) && !plan.dtype(*out).is_float()
        }
        _ => false,
    }
}

/// What a raised flag of `step` means, for the error message.
pub(crate) fn flag_meaning(step: &Step) -> &str {
    match step {
        Step::Binary { .. } => "integer division by zero",
        Step::Scatter { .. } => "an index is out of range for the updated tensor",
        Step::Require { what, .. } => what,
        Step::Repeat { .. } => "a check of a repeated body failed",
        _ => "an index is out of range for the indexed tensor",
    }
}

/// Status flags raised while tracing one run.
#[derive(Default)]
pub(crate) struct Flags {
    /// int32 scalar: -1, or the index of the last step whose flag was raised.
    status: Option<Array>,
    /// The step being traced.
    pub(crate) step: usize,
}

impl Flags {
    /// Records `ok` (a bool array: every element must be true) for the current step.
    pub(crate) fn require(&mut self, ok: &Array, s: &Stream) -> mlx::Result<()> {
        let axes: Vec<i32> = (0..ok.ndim() as i32).collect();
        let all = ops::all_axes(ok, &axes, false, s)?;
        let code = ops::where_(
            &all,
            &Array::scalar(-1i32)?,
            &Array::scalar(self.step as i32)?,
            s,
        )?;
        self.status = Some(match self.status.take() {
            Some(prev) => ops::maximum(&prev, &code, s)?,
            None => code,
        });
        Ok(())
    }

    /// The status array (-1 when nothing was guarded).
    pub(crate) fn finish(self) -> mlx::Result<Array> {
        match self.status {
            Some(a) => Ok(a),
            None => Array::scalar(-1i32),
        }
    }
}

/// `v` as a scalar of the integer type `dtype`, saturated to the type's range (index types are
/// int32/int64 in ONNX, where every dimension fits). Made directly in that type rather than cast
/// on the stream: an evaluated scalar is one that a compiled closure's simplification merges
/// with its equals, so guards of the same indices (every layer's rotary gathers) become one.
fn scalar_like(v: i64, dtype: Dtype, s: &Stream) -> mlx::Result<Array> {
    fn sat<T: TryFrom<i64> + mlx::Element>(v: i64, lo: T, hi: T) -> mlx::Result<Array> {
        Array::scalar(T::try_from(v).unwrap_or(if v < 0 { lo } else { hi }))
    }
    match dtype {
        Dtype::Int8 => sat(v, i8::MIN, i8::MAX),
        Dtype::Int16 => sat(v, i16::MIN, i16::MAX),
        Dtype::Int32 => sat(v, i32::MIN, i32::MAX),
        Dtype::Int64 => Array::scalar(v),
        Dtype::Uint8 => sat(v, 0, u8::MAX),
        Dtype::Uint16 => sat(v, 0, u16::MAX),
        Dtype::Uint32 => sat(v, 0, u32::MAX),
        Dtype::Uint64 => sat(v, 0, u64::MAX),
        _ => ops::astype(&Array::scalar(v)?, dtype, s),
    }
}

fn is_signed(dtype: Dtype) -> bool {
    matches!(
        dtype,
        Dtype::Int8 | Dtype::Int16 | Dtype::Int32 | Dtype::Int64
    )
}

/// `indices` with every value outside `[-n, n)` replaced by 0, and the requirement that there
/// were none recorded in `flags`.
pub(crate) fn bounded_indices(
    indices: &Array,
    n: i32,
    flags: &mut Flags,
    s: &Stream,
) -> mlx::Result<Array> {
    bounded(indices, -(n as i64), n, flags, s)
}

/// `indices` (non-negative by contract, as a scatter's) with every value outside `[0, n)`
/// replaced by 0, the requirement recorded in `flags`.
pub(crate) fn bounded_nonnegative_indices(
    indices: &Array,
    n: i32,
    flags: &mut Flags,
    s: &Stream,
) -> mlx::Result<Array> {
    bounded(indices, 0, n, flags, s)
}

/// `indices` with every value outside `[lo, n)` replaced by 0 (an unsigned type has no lower
/// bound to check), the requirement recorded in `flags`.
fn bounded(indices: &Array, lo: i64, n: i32, flags: &mut Flags, s: &Stream) -> mlx::Result<Array> {
    let dt = indices.dtype();
    let mut ok = ops::less(indices, &scalar_like(n as i64, dt, s)?, s)?;
    if is_signed(dt) {
        let lo = scalar_like(lo, dt, s)?;
        ok = ops::logical_and(&ok, &ops::greater_equal(indices, &lo, s)?, s)?;
    }
    flags.require(&ok, s)?;
    ops::where_(&ok, indices, &scalar_like(0, dt, s)?, s)
}

/// The dimension `axis` (negative counts from the end) of `a`.
pub(crate) fn dim(a: &Array, axis: i32) -> Result<i32, RuntimeError> {
    let shape = a.shape();
    let rank = shape.len() as i32;
    let ax = if axis < 0 { axis + rank } else { axis };
    if ax < 0 || ax >= rank {
        return Err(RuntimeError(format!(
            "axis {axis} is out of range for rank {rank}"
        )));
    }
    Ok(shape[ax as usize])
}

/// Integer `floor_divide` / `remainder` / `divide` that can't trap: a zero divisor raises the
/// step's flag (its lanes divide by 1), and a divisor of -1 negates (`remainder`: 0), which
/// wraps for the type's minimum instead of trapping. Float operands go straight to MLX.
pub(crate) fn int_binary(
    op: BinaryOp,
    a: &Array,
    b: &Array,
    flags: &mut Flags,
    s: &Stream,
    plain: impl Fn(BinaryOp, &Array, &Array, &Stream) -> mlx::Result<Array>,
) -> mlx::Result<Array> {
    let dt = b.dtype();
    if dt.is_float() || a.dtype().is_float() || dt == Dtype::Complex64 {
        return plain(op, a, b, s);
    }
    let zero = scalar_like(0, dt, s)?;
    let one = scalar_like(1, dt, s)?;
    let is_zero = ops::equal(b, &zero, s)?;
    flags.require(&ops::logical_not(&is_zero, s)?, s)?;
    if !is_signed(dt) {
        let safe = ops::where_(&is_zero, &one, b, s)?;
        return plain(op, a, &safe, s);
    }
    let is_minus_one = ops::equal(b, &scalar_like(-1, dt, s)?, s)?;
    let unsafe_lanes = ops::logical_or(&is_zero, &is_minus_one, s)?;
    let safe = ops::where_(&unsafe_lanes, &one, b, s)?;
    let r = plain(op, a, &safe, s)?;
    match op {
        // x rem 1 == 0 == x rem -1.
        BinaryOp::Remainder => Ok(r),
        _ => {
            let neg = ops::negative(a, s)?;
            let neg = if neg.dtype() == r.dtype() {
                neg
            } else {
                ops::astype(&neg, r.dtype(), s)?
            };
            ops::where_(&is_minus_one, &neg, &r, s)
        }
    }
}
