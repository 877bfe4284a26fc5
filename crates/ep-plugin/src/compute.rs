//! `OrtNodeComputeInfo` of one compiled fused node: kernel-context I/O around
//! [`runtime::Executable::run`].

use std::cell::RefCell;
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;
use std::time::Instant;

use onnx_ir::DataType;
use ort_sys::{OrtKernelContext, OrtTensorTypeAndShapeInfo, OrtValue};
use runtime::{Executable, InputTensor, RunContext};

use crate::abi::{
    ORT_ABI_VERSION, OrtNodeComputeContext, OrtNodeComputeInfo, PROFILING_CATEGORY_KERNEL,
    StatusPtr,
};
use crate::api::Api;
use crate::error::{EpError, guard, guard_value};
use crate::profiler::{EpEvent, ProfileHub};

/// What a fused node's run events say about it, besides the run's own counters.
pub struct RunLabels {
    /// ONNX nodes in the group.
    pub nodes: usize,
    /// Its distinct op types, comma-separated.
    pub op_types: String,
    /// `cpu` or `gpu`.
    pub device: &'static str,
    /// The session's recording profilers.
    pub profiles: Arc<ProfileHub>,
}

/// Counters read before a run, to tell afterwards what it did.
#[derive(Clone, Copy)]
struct Before {
    runs: u64,
    compiles: u64,
}

/// Whether a run's compiled closure was found in the cache: `hit`, `miss` (compiled for this
/// run), `none` (eager), or `unknown` when another run of the node finished in between.
fn cache_outcome(before: Before, after: Before, path: runtime::RunPath) -> &'static str {
    if path == runtime::RunPath::Eager {
        "none"
    } else if after.runs != before.runs + 1 {
        "unknown"
    } else if after.compiles > before.compiles {
        "miss"
    } else {
        "hit"
    }
}

thread_local! {
    /// The generation key of the run this thread is in (from `OnRunStart`; ORT computes the
    /// nodes of a sequential run on the thread that called `Run`).
    static GENERATION_KEY: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Sets the generation key of the run starting (or, with `None`, ending) on this thread.
pub fn set_generation_key(key: Option<String>) {
    GENERATION_KEY.with(|k| *k.borrow_mut() = key);
}

/// A compiled fused node; the vtable is its first field. Holds no ORT handle.
#[repr(C)]
pub struct ComputeInfo {
    base: OrtNodeComputeInfo,
    api: Api,
    name: String,
    /// The prepared plan; its run gate decides which thread may run it and serialises runs.
    exe: Executable,
    /// How the plan's inputs and outputs sit among the kernel context's.
    wiring: Wiring,
    /// Labels of its profile events.
    labels: RunLabels,
    /// Per plan input / output: whether it is half of a KV-cache pair (for the counters).
    cache_inputs: Vec<bool>,
    /// Per plan input: whether it is an optional graph input (may hold no tensor).
    optional_inputs: Vec<bool>,
    cache_outputs: Vec<bool>,
    /// How the runs so far moved their inputs and outputs.
    io: std::sync::Mutex<IoCounts>,
}

/// How a fused node's plan inputs and outputs map onto its kernel context.
pub struct Wiring {
    /// `input_map[j]`: kernel-context input index of plan input `j`.
    pub input_map: Vec<usize>,
    /// Names of the plan inputs, for messages.
    pub input_names: Vec<String>,
    /// The plan inputs of an `optional(tensor)` type, which may hold no tensor.
    pub optional_names: std::collections::BTreeSet<String>,
    /// Expected element type of each output, when known.
    pub output_dtypes: Vec<Option<DataType>>,
}

/// How runs moved their inputs and outputs: bound in place (in the EP's device memory) or
/// copied.
#[derive(Debug, Clone, Copy, Default)]
struct IoCounts {
    runs: u64,
    /// Inputs read in place from the EP's memory.
    bound_inputs: u64,
    /// Bytes of inputs outside the EP's memory: copied into MLX, or (a cache input the decode
    /// path carries from the previous step) read once to compare them.
    copied_input_bytes: u64,
    /// Outputs whose MLX buffer became ORT's allocation.
    adopted_outputs: u64,
    /// Bytes of outputs copied into ORT's buffers.
    copied_output_bytes: u64,
    /// Of the bytes above, those of KV-cache inputs and outputs: the cache's host traffic.
    kv_copied_bytes: u64,
}

impl IoCounts {
    fn add(&mut self, run: &IoCounts) {
        self.runs += 1;
        self.bound_inputs += run.bound_inputs;
        self.copied_input_bytes += run.copied_input_bytes;
        self.adopted_outputs += run.adopted_outputs;
        self.copied_output_bytes += run.copied_output_bytes;
        self.kv_copied_bytes += run.kv_copied_bytes;
    }
}

impl ComputeInfo {
    /// A compute info for a prepared executable.
    pub fn new(
        api: Api,
        name: String,
        exe: Executable,
        wiring: Wiring,
        labels: RunLabels,
    ) -> Box<Self> {
        let mut cache_inputs = vec![false; wiring.input_map.len()];
        let mut cache_outputs = vec![false; wiring.output_dtypes.len()];
        for (i, o) in exe.cache_pairs() {
            if let Some(c) = cache_inputs.get_mut(i) {
                *c = true;
            }
            if let Some(c) = cache_outputs.get_mut(o) {
                *c = true;
            }
        }
        let optional_inputs = wiring
            .input_names
            .iter()
            .map(|n| wiring.optional_names.contains(n))
            .collect();
        Box::new(ComputeInfo {
            optional_inputs,
            cache_inputs,
            cache_outputs,
            io: std::sync::Mutex::new(IoCounts::default()),
            base: OrtNodeComputeInfo {
                ort_version_supported: ORT_ABI_VERSION,
                CreateState: create_state,
                Compute: compute,
                ReleaseState: release_state,
            },
            api,
            name,
            exe,
            wiring,
            labels,
        })
    }

    fn counters(&self) -> Before {
        Before {
            runs: self.exe.run_stats().runs,
            compiles: self.exe.cache_stats().compiles,
        }
    }

    /// Reads the kernel-context inputs, runs, writes the outputs; adds the run's path and
    /// host synchronisations to the trace span, when tracing.
    fn run(
        &self,
        ctx: *mut OrtKernelContext,
        span: Option<&mut crate::trace::Span>,
    ) -> Result<(), EpError> {
        let api = &self.api;
        let o = api.ort;
        let entered = Instant::now();
        // SAFETY: live kernel context for this call.
        let count = api.out("KernelContext_GetInputCount", 0usize, |out| unsafe {
            (o.KernelContext_GetInputCount)(ctx, out)
        })?;

        let mut metas: Vec<(DataType, Vec<i64>, *const u8, usize)> =
            Vec::with_capacity(self.wiring.input_map.len());
        // String inputs, read through ORT's string API (they have no flat buffer).
        let mut owned: Vec<Option<onnx_ir::TensorData>> =
            Vec::with_capacity(self.wiring.input_map.len());
        for (j, &idx) in self.wiring.input_map.iter().enumerate() {
            let name = &self.wiring.input_names[j];
            if idx >= count {
                return Err(EpError::new(format!(
                    "input '{name}' is #{idx} but the node has {count} inputs"
                )));
            }
            // SAFETY: index checked above.
            let v: *const OrtValue =
                api.out("KernelContext_GetInput", ptr::null(), |out| unsafe {
                    (o.KernelContext_GetInput)(ctx, idx, out)
                })?;
            if v.is_null() {
                return Err(EpError::new(format!("input '{name}' is missing")));
            }
            if self.optional_inputs.get(j).copied().unwrap_or(false) {
                // an optional(tensor) input holding no tensor is passed as absent
                // SAFETY: live input value.
                let has = api.out("HasValue", 0, |out| unsafe { (o.HasValue)(v, out) })?;
                if has == 0 {
                    let dtype = self.exe.plan().inputs[j].dtype;
                    metas.push((dtype, Vec::new(), ptr::null(), 0));
                    owned.push(None);
                    continue;
                }
            }
            // SAFETY: live input value.
            let (dtype, dims) = unsafe { value_type(api, v) }.map_err(|e| e.context(name))?;
            if dtype == DataType::String {
                // SAFETY: live string tensor of these dims.
                let t = unsafe { crate::strings::read_strings(api, v, &dims) }
                    .map_err(|e| e.context(name))?;
                metas.push((dtype, dims, ptr::null(), 0));
                owned.push(Some(t));
                continue;
            }
            owned.push(None);
            // SAFETY: live input value.
            let size = api.out("GetTensorSizeInBytes", 0usize, |out| unsafe {
                (o.GetTensorSizeInBytes)(v, out)
            })?;
            let mut data: *const c_void = ptr::null();
            if size > 0 {
                // SAFETY: live input value; data valid during this call.
                api.check(unsafe { (o.GetTensorData)(v, &mut data) }, "GetTensorData")?;
                if data.is_null() {
                    return Err(EpError::new(format!("input '{name}' has no data")));
                }
            }
            metas.push((dtype, dims, data as *const u8, size));
        }
        let inputs: Vec<InputTensor<'_>> = metas
            .iter()
            .zip(&owned)
            .map(|((dtype, dims, data, size), owned)| InputTensor {
                dtype: *dtype,
                dims,
                data: if let Some(t) = owned {
                    &t.bytes
                } else if *size == 0 {
                    &[]
                } else {
                    // SAFETY: ORT's input buffer of `size` bytes, alive during Compute.
                    unsafe { std::slice::from_raw_parts(*data, *size) }
                },
            })
            .collect();

        let mut io = IoCounts::default();
        for (j, t) in inputs.iter().enumerate() {
            if runtime::device_memory::can_bind(t) {
                io.bound_inputs += 1;
            } else {
                io.copied_input_bytes += t.data.len() as u64;
                if self.cache_inputs.get(j).copied().unwrap_or(false) {
                    io.kv_copied_bytes += t.data.len() as u64;
                }
            }
        }
        let key = GENERATION_KEY.with(|k| k.borrow().clone());
        let run = RunContext {
            generation_key: key.as_deref(),
        };
        let profiling = self.labels.profiles.enabled();
        let before = (profiling || span.is_some()).then(|| self.counters());
        let started = Instant::now();
        let inputs_us = started.duration_since(entered).as_micros() as usize;
        let outputs = self
            .exe
            .run_with(&inputs, &run)
            // ORT_FAIL, not ORT_EP_FAIL: a failed run (a bad feed, a foreign thread, a guard)
            // leaves the session usable, and ORT's Python API answers EP_FAIL by rebuilding
            // the session on the CPU EP for good.
            .map_err(|e| EpError {
                code: ort_sys::OrtErrorCode::ORT_FAIL,
                message: e.to_string(),
            })?;
        let ran = started.elapsed();
        let mut span_io = None;
        if let Some(before) = before
            && let Some(last) = self.exe.run_stats().last
        {
            let cache = cache_outcome(before, self.counters(), last.path);
            if let Some(span) = span {
                span.arg("path", last.path.name());
                span.arg("cache", cache);
                span.arg("host_syncs", last.host_syncs as usize);
                span.arg("host_reads", last.host_reads as usize);
                span.arg("inputs_us", inputs_us);
                for (name, us) in last.phases.named() {
                    span.arg(name, us as usize);
                }
                span_io = Some(span);
            }
            if profiling {
                self.labels.profiles.record(EpEvent {
                    category: PROFILING_CATEGORY_KERNEL,
                    name: format!("{}_mlx_run", self.name),
                    start: started,
                    duration: ran,
                    args: vec![
                        ("ep", crate::options::EP_NAME.to_string()),
                        ("fused_node", self.name.clone()),
                        ("path", last.path.name().to_string()),
                        ("cache", cache.to_string()),
                        ("nodes", self.labels.nodes.to_string()),
                        ("op_types", self.labels.op_types.clone()),
                        ("device", self.labels.device.to_string()),
                        ("host_syncs", last.host_syncs.to_string()),
                        ("host_reads", last.host_reads.to_string()),
                        ("mlx_us", ran.as_micros().to_string()),
                    ],
                });
            }
        }
        let ran_until = Instant::now();
        if outputs.len() != self.wiring.output_dtypes.len() {
            return Err(EpError::new(format!(
                "the plan produced {} outputs, the node has {}",
                outputs.len(),
                self.wiring.output_dtypes.len()
            )));
        }
        for (k, out) in outputs.iter().enumerate() {
            if let Some(expected) = self.wiring.output_dtypes[k]
                && expected != out.dtype
            {
                return Err(EpError::new(format!(
                    "output #{k} is {} but the graph declares {expected}",
                    out.dtype
                )));
            }
            let mut ov: *mut OrtValue = ptr::null_mut();
            // When ORT allocates this output in the EP's memory, the allocation is the output's
            // own MLX buffer (see `runtime::device_memory`): offered here, taken by the
            // allocator during GetOutput, withdrawn after it either way.
            let offered = self.exe.offer_output(out);
            let status =
                // SAFETY: live context; ORT allocates the output with these dims.
                unsafe {
                    (o.KernelContext_GetOutput)(ctx, k, out.dims.as_ptr(), out.dims.len(), &mut ov)
                };
            if offered {
                runtime::device_memory::withdraw_offer();
            }
            api.check(status, "KernelContext_GetOutput")?;
            if ov.is_null() {
                return Err(EpError::new(format!("ORT gave no buffer for output #{k}")));
            }
            // SAFETY: live output value.
            let (dtype, allocated_dims) = unsafe { value_type(api, ov) }?;
            if dtype != out.dtype {
                return Err(EpError::new(format!(
                    "output #{k}: ORT allocated {dtype}, the plan produced {}",
                    out.dtype
                )));
            }
            if let Some(elements) = out.strings() {
                let numel = allocated_dims
                    .iter()
                    .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?));
                if numel != Some(elements.len()) {
                    return Err(EpError::new(format!(
                        "output #{k}: ORT allocated {allocated_dims:?} strings, the plan produced {}",
                        elements.len()
                    )));
                }
                // SAFETY: live string output of `numel` elements.
                unsafe { crate::strings::write_strings(api, ov, &elements) }?;
                io.copied_output_bytes += out.data().len() as u64;
                continue;
            }
            if out.dtype == DataType::String {
                return Err(EpError::new(format!(
                    "output #{k}: the plan's string bytes are malformed"
                )));
            }
            // SAFETY: live output value.
            let size = api.out("GetTensorSizeInBytes", 0usize, |out| unsafe {
                (o.GetTensorSizeInBytes)(ov, out)
            })?;
            let bytes = out.data();
            if size != bytes.len() {
                return Err(EpError::new(format!(
                    "output #{k}: ORT buffer has {size} bytes, the plan produced {}",
                    bytes.len()
                )));
            }
            if size > 0 {
                // SAFETY: live output value.
                let dst: *mut c_void =
                    api.out("GetTensorMutableData", ptr::null_mut(), |out| unsafe {
                        (o.GetTensorMutableData)(ov, out)
                    })?;
                if dst.is_null() {
                    return Err(EpError::new(format!("output #{k} has no buffer")));
                }
                if runtime::device_memory::output_address(out) == Some(dst as *const u8) {
                    io.adopted_outputs += 1;
                } else {
                    // SAFETY: `size` bytes at `dst` (checked), source has the same length.
                    unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, size) };
                    io.copied_output_bytes += size as u64;
                    if self.cache_outputs.get(k).copied().unwrap_or(false) {
                        io.kv_copied_bytes += size as u64;
                    }
                }
            }
        }
        if let Some(span) = span_io {
            span.arg("outputs_us", ran_until.elapsed().as_micros() as usize);
            span.arg("bound_inputs", io.bound_inputs as usize);
            span.arg("copied_input_bytes", io.copied_input_bytes as usize);
            span.arg("adopted_outputs", io.adopted_outputs as usize);
            span.arg("copied_output_bytes", io.copied_output_bytes as usize);
            span.arg("kv_copied_bytes", io.kv_copied_bytes as usize);
        }
        if let Ok(mut total) = self.io.lock() {
            total.add(&io);
        }
        Ok(())
    }
}

crate::abi::vtable_object!(ComputeInfo, OrtNodeComputeInfo);

impl Drop for ComputeInfo {
    /// The fused node's per-run summary at info level (`ORTMLX_LOG=info`): paths taken and
    /// host synchronisations, and the compiled caches' counters.
    fn drop(&mut self) {
        let runs = self.exe.run_stats();
        if runs.runs == 0 {
            return;
        }
        let c = self.exe.cache_stats();
        let io = self.io.lock().map(|g| *g).unwrap_or_default();
        log::info!(
            "{}: I/O over {} run(s): {} input(s) bound in MLX memory, {} output(s) adopted, \
             {} input byte(s) and {} output byte(s) copied ({} of the KV cache)",
            self.name,
            io.runs,
            io.bound_inputs,
            io.adopted_outputs,
            io.copied_input_bytes,
            io.copied_output_bytes,
            io.kv_copied_bytes
        );
        log::info!(
            "{}: {}; compiled: {} compile(s), {} hit(s), {} eager fallback(s)",
            self.name,
            runs.summary(),
            c.compiles,
            c.hits,
            c.eager_fallbacks
        );
        // The totals as a zero-length trace event, for scripts that read the trace.
        if let Some(mut span) = crate::trace::span("run_stats", || self.name.clone()) {
            for (key, value) in [
                ("runs", runs.runs),
                ("decode", runs.decode_compiled),
                ("prefill", runs.prefill_compiled),
                ("general", runs.general_compiled),
                ("eager", runs.eager),
                ("host_syncs", runs.host_syncs),
                ("host_reads", runs.host_reads),
                ("eager_fallbacks", c.eager_fallbacks),
                ("bound_inputs", io.bound_inputs),
                ("adopted_outputs", io.adopted_outputs),
                ("copied_input_bytes", io.copied_input_bytes),
                ("copied_output_bytes", io.copied_output_bytes),
                ("kv_copied_bytes", io.kv_copied_bytes),
            ] {
                span.arg(key, usize::try_from(value).unwrap_or(usize::MAX));
            }
        }
    }
}

/// Element type and dims of a tensor `OrtValue`.
///
/// # Safety
/// `v` must be a live tensor value.
pub(crate) unsafe fn value_type(
    api: &Api,
    v: *const OrtValue,
) -> Result<(DataType, Vec<i64>), EpError> {
    let o = api.ort;
    // SAFETY: live value; `info` released below.
    let info: *mut OrtTensorTypeAndShapeInfo =
        api.out("GetTensorTypeAndShape", ptr::null_mut(), |out| unsafe {
            (o.GetTensorTypeAndShape)(v, out)
        })?;
    // SAFETY: live info.
    let result = unsafe { crate::graph_reader::element_type_and_dims(api, info) }.and_then(
        |(elem, dims)| {
            let dtype = crate::graph_reader::dtype_from_ort(elem).ok_or_else(|| {
                EpError::new(format!("tensor element type {elem} is not supported"))
            })?;
            Ok((dtype, dims))
        },
    );
    // SAFETY: we own it.
    unsafe { (o.ReleaseTensorTypeAndShapeInfo)(info) };
    result
}

unsafe extern "system" fn create_state(
    this: *mut OrtNodeComputeInfo,
    _context: *mut OrtNodeComputeContext,
    state: *mut *mut c_void,
) -> StatusPtr {
    guard("CreateState", || {
        if state.is_null() {
            return Err(EpError::new("null state out-pointer"));
        }
        // The compute info is the state: the plan and executable live there.
        // SAFETY: ORT's out-pointer.
        unsafe { *state = this as *mut c_void };
        Ok(())
    })
}

unsafe extern "system" fn compute(
    this: *mut OrtNodeComputeInfo,
    _state: *mut c_void,
    ctx: *mut OrtKernelContext,
) -> StatusPtr {
    guard("Compute", || {
        // SAFETY: `this` is ours, alive until ReleaseNodeComputeInfos.
        let info = unsafe { ComputeInfo::from_ptr(this) };
        let mut span = crate::trace::span("compute", || info.name.clone());
        info.run(ctx, span.as_mut())
            .map_err(|e| e.context(&info.name))
    })
}

unsafe extern "system" fn release_state(_this: *mut OrtNodeComputeInfo, _state: *mut c_void) {
    guard_value("ReleaseState", (), || {})
}
