//! Executes a [`plan::Plan`] with MLX.
//!
//! An [`Executable`] holds one plan (one fused ORT node), its constants (shared across
//! sessions through the initializer pool), the MLX stream it runs on, and a run gate. Each
//! [`Executable::run`] binds the inputs, interprets the steps (building MLX's lazy graph),
//! evaluates the outputs together and hands back their bytes.

mod attention;
mod compiled;
mod config;
mod contrib;
mod control;
mod decode;
pub mod device_memory;
mod dtype;
mod empty_reduce;
mod guard;
mod interpreter;
pub mod kernel_cache;
mod lanes;
mod packed;
mod probe;
mod random;
mod stats;
mod strings;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use initializer_pool::{InitializerKey, InitializerPool};
use mlx::{Array, FrozenArray, Stream};
use onnx_ir::{DataType, TensorData};
use parking_lot::Mutex;
use plan::{Plan, Slot};
use run_gate::RunGate;

pub use compiled::{CacheStats, CompileSlot, GENERAL_CAPACITY, PREFILL_CAPACITY};
pub use config::{RuntimeConfig, config, install_config};
pub use decode::{DecodeStats, GENERATION_KEY, RunContext};
pub use dtype::{to_mlx, to_onnx};
pub use guard::{MAX_TENSOR_BYTES_VAR, max_tensor_bytes};
pub use stats::{RunPath, RunPhases, RunRecord, RunStats};

use compiled::CompiledCache;

/// Where a plan runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceKind {
    /// MLX's CPU stream.
    #[default]
    Cpu,
    /// MLX's GPU stream (CUDA or Metal), when the linked MLX has one.
    Gpu,
}

/// Options for building an [`Executable`].
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Device to run on.
    pub device: DeviceKind,
    /// Share identical initializers across sessions (the pool's own environment switch
    /// can still turn sharing off).
    pub share_initializers: bool,
    /// Compile plans with `mlx_compile`; `None` picks the default: on for the GPU; on the
    /// CPU only the shapeless decode closure (one closure serves every token of every
    /// generation, so MLX's CPU compile, which runs the system C++ compiler at first use of
    /// each fused kernel and costs seconds, is paid once; shape-keyed closures of other
    /// runs would pay it per shape).
    pub compile: Option<bool>,
    /// Capacity of each shape-keyed compiled cache (`None`: the defaults).
    pub compile_cache_capacity: Option<usize>,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            device: DeviceKind::Cpu,
            share_initializers: true,
            compile: None,
            compile_cache_capacity: None,
        }
    }
}

/// A runtime failure, with a message fit for an `OrtStatus`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeError(pub String);

impl std::fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RuntimeError {}

impl From<mlx::Error> for RuntimeError {
    fn from(e: mlx::Error) -> Self {
        RuntimeError(e.to_string())
    }
}

/// A borrowed input tensor in host memory (ORT's CPU buffer).
#[derive(Debug, Clone, Copy)]
pub struct InputTensor<'a> {
    /// Element type.
    pub dtype: DataType,
    /// Dimensions.
    pub dims: &'a [i64],
    /// Element bytes, row-major (for strings: each element's little-endian `u64` length and
    /// bytes, as [`TensorData::from_strings`] writes them).
    pub data: &'a [u8],
}

impl<'a> InputTensor<'a> {
    /// An absent optional input (an `optional(tensor)` graph input holding no tensor): no dims
    /// and no bytes, which no tensor has (a scalar holds one element).
    pub fn absent(dtype: DataType) -> InputTensor<'static> {
        InputTensor {
            dtype,
            dims: &[],
            data: &[],
        }
    }

    /// True for [`InputTensor::absent`].
    pub fn is_absent(&self) -> bool {
        self.dims.is_empty() && self.data.is_empty()
    }
}

/// An evaluated output tensor; [`OutputTensor::data`] borrows its bytes from MLX.
pub struct OutputTensor {
    /// Element type.
    pub dtype: DataType,
    /// Dimensions.
    pub dims: Vec<i64>,
    array: Array,
    /// The packed bytes of a sub-byte type (int4, int2, ...), which MLX holds one per byte;
    /// the length-prefixed elements of a string tensor, which MLX does not hold at all.
    packed: Option<Vec<u8>>,
}

impl OutputTensor {
    /// The elements of a string output (`None` for other types).
    pub fn strings(&self) -> Option<Vec<&[u8]>> {
        if self.dtype != DataType::String {
            return None;
        }
        onnx_ir::decode_strings(self.packed.as_deref()?).ok()
    }

    /// Element bytes, row-major and contiguous (packed for the sub-byte types; for strings,
    /// each element's `u64` length and bytes, see [`OutputTensor::strings`]).
    pub fn data(&self) -> &[u8] {
        if let Some(p) = &self.packed {
            return p;
        }
        // The array was made contiguous and evaluated when the output was built.
        self.array.as_bytes().unwrap_or(&[])
    }
}

/// Mutable per-run state, used by one thread at a time (behind the run gate and a lock).
struct RunState {
    compiled: CompiledCache,
    /// The current generation of a decoder with a KV cache (`None` for other plans).
    decode: Option<decode::DecodeState>,
    /// For GPU runs with an empty input, by input shapes: whether the run gives an empty
    /// output (and so stays on the CPU stream; see `run_on_lane`).
    empty_outputs: HashMap<Vec<Vec<i64>>, bool>,
    /// Which path served each run, and its host synchronisations.
    runs: RunStats,
}

/// A plan with its constants: everything a trace needs, shared with compiled closures.
pub(crate) struct Program {
    pub(crate) plan: Plan,
    constants: Vec<(Slot, Arc<FrozenArray>)>,
    /// The value ranges of the integer constants (indices known safe need no guard).
    constant_ranges: Arc<guard::ConstantRanges>,
    /// For each step, the slots whose last reader it is (dropped after it runs).
    release_after: Vec<Vec<Slot>>,
    /// Whether a trace ends with the guards' status (see [`Program::has_status`]).
    guarded: bool,
    /// The plan inputs (indices) whose values steps or the host program read on the host.
    value_inputs: Vec<usize>,
    /// The slots steps read on the host, in a fixed order (see `HostBinding::read_values`).
    pub(crate) host_read_slots: Vec<Slot>,
    /// The programs of the sub-plans of steps that hold some (branches, repeated bodies), by
    /// step index, in [`plan::Step::sub_plans`] order.
    subs: HashMap<usize, Vec<Arc<Program>>>,
    /// For a sub-program (a body): its compiled closures, bounded like an executable's, and
    /// the device they compile for; `None` for the top-level program.
    body_cache: Option<(Mutex<CompiledCache>, DeviceKind)>,
    /// The run counters of the random steps (see `random`).
    random: random::RandomSteps,
    /// Whether the plan holds host-only (string) values (see `strings`): its runs are eager.
    host_only: bool,
}

impl Program {
    /// True when the traced program ends with the status of its guarded steps (an int32
    /// scalar after the outputs; see `guard`).
    pub(crate) fn has_status(&self) -> bool {
        self.guarded
    }

    /// What a run with these input shapes and input values (`value_of(plan input index)`)
    /// knows on the host: the host program's results, and the values of the inputs that
    /// steps or the host program read.
    pub(crate) fn host_binding(
        &self,
        shapes: &[Vec<i64>],
        value_of: &dyn Fn(usize) -> Option<TensorData>,
    ) -> Result<HostBinding, RuntimeError> {
        let plan = &self.plan;
        let results = if plan.host.is_empty() {
            Vec::new()
        } else {
            plan.host
                .run_with_values(shapes, value_of)
                .map_err(RuntimeError)?
        };
        let input_values = self
            .value_inputs
            .iter()
            .filter_map(|&i| Some((plan.inputs[i].slot, value_of(i)?)))
            .collect();
        let input_shapes = plan
            .inputs
            .iter()
            .zip(shapes)
            .map(|(i, d)| (i.slot, d.clone()))
            .collect();
        Ok(HostBinding {
            results,
            input_values,
            input_shapes,
            absent_inputs: Vec::new(),
        })
    }

    /// [`Program::trace`] without evaluating anything, recording the input and output shapes
    /// of every step that is neither shape-polymorphic nor a decode layout step (see `probe`).
    pub(crate) fn trace_recording(
        &self,
        inputs: Vec<Array>,
        host: &HostBinding,
        s: &Stream,
        record: &mut Vec<probe::StepShapes>,
    ) -> Result<Vec<Array>, RuntimeError> {
        self.trace_with(inputs, host, None, s, Some(record), None)
    }

    /// [`Program::trace`] of a plan with host-only (string) values, eagerly: the outputs'
    /// arrays (a placeholder for each string output) and, per output, its host value when it
    /// is a string (see `strings`).
    pub(crate) fn trace_host_only(
        &self,
        inputs: Vec<Array>,
        host: &HostBinding,
        s: &Stream,
    ) -> Result<(Vec<Array>, Vec<Option<TensorData>>), RuntimeError> {
        let mut values = Vec::new();
        let arrays = self.trace_with(inputs, host, None, s, None, Some(&mut values))?;
        Ok((arrays, values))
    }

    /// Names the node that step `i` belongs to in an error.
    pub(crate) fn at_step(&self, i: usize, message: impl std::fmt::Display) -> RuntimeError {
        match self.plan.nodes.iter().find(|n| n.steps.contains(&i)) {
            Some(n) => RuntimeError(format!("node '{}' ({}): {message}", n.name, n.op_type)),
            None => RuntimeError(message.to_string()),
        }
    }

    /// The error for a raised status (see `guard`), or `Ok` for -1.
    pub(crate) fn check_status(&self, status: &Array) -> Result<(), RuntimeError> {
        let code = status.to_vec::<i32>()?.first().copied().unwrap_or(-1);
        if code < 0 {
            return Ok(());
        }
        let i = code as usize;
        let meaning = self
            .plan
            .steps
            .get(i)
            .map(guard::flag_meaning)
            .unwrap_or("a guarded step failed");
        Err(self.at_step(i, meaning))
    }

    /// Builds the outputs' (lazy) arrays from the input arrays, in the plan's output order
    /// and dtypes, then (when [`Program::has_status`]) the guards' status. `host` binds the
    /// host program's results and the host-read input values for this run; a compiled
    /// closure passes the results' arrays as `host_arrays` (its arguments), so that they are
    /// not baked into the closure.
    pub(crate) fn trace(
        &self,
        inputs: Vec<Array>,
        host: &HostBinding,
        host_arrays: Option<Vec<Array>>,
        s: &Stream,
    ) -> Result<Vec<Array>, RuntimeError> {
        self.trace_with(inputs, host, host_arrays, s, None, None)
    }

    fn trace_with(
        &self,
        inputs: Vec<Array>,
        host: &HostBinding,
        host_arrays: Option<Vec<Array>>,
        s: &Stream,
        mut record: Option<&mut Vec<probe::StepShapes>>,
        mut host_outputs: Option<&mut Vec<Option<TensorData>>>,
    ) -> Result<Vec<Array>, RuntimeError> {
        let mut slots = interpreter::Slots::new(self.plan.num_slots);
        slots.constant_ranges = self.constant_ranges.clone();
        for (input, array) in self.plan.inputs.iter().zip(inputs) {
            // a string input is bound as its host value (below), never as an array
            if host.absent_inputs.contains(&input.slot) {
                slots.set_absent(input.slot);
            } else if !strings::is_host_only(input.dtype) {
                slots.set(input.slot, array);
            }
        }
        for (slot, array) in &self.constants {
            slots.set(*slot, array.get());
        }
        match host_arrays {
            Some(arrays) => {
                slots.in_closure = true;
                for ((slot, value), array) in host.results.iter().zip(arrays) {
                    slots.set_with_host(*slot, array, value.clone());
                }
            }
            None => {
                for (slot, value) in &host.results {
                    slots.set_host(*slot, value.clone())?;
                }
            }
        }
        for (slot, value) in &host.input_values {
            slots.set_host_value(*slot, value.clone());
        }
        let mut working_set = guard::WorkingSet::new(self.plan.num_slots);
        for (i, (step, release)) in self.plan.steps.iter().zip(&self.release_after).enumerate() {
            slots.flags.step = i;
            slots.draw_seed = self.random.next(i);
            match self.subs.get(&i) {
                Some(subs) => control::run(self, step, subs, &mut slots, s),
                None => interpreter::execute(step, &mut slots, s),
            }
            .map_err(|e| self.at_step(i, e))?;
            if let Some(record) = record.as_deref_mut()
                && !step.is_shapeless()
                && !step.is_decode_layout()
            {
                let shapes = |slots_of: Vec<Slot>| -> Vec<Vec<i32>> {
                    slots_of
                        .into_iter()
                        .map(|x| slots.get(x).map(Array::shape).unwrap_or_default())
                        .collect()
                };
                record.push((i, shapes(step.inputs()), shapes(step.outputs())));
            }
            for out in step.outputs() {
                if let Ok(a) = slots.get(out) {
                    guard::check_size(a).map_err(|e| self.at_step(i, e))?;
                    working_set.add(out, a).map_err(|e| self.at_step(i, e))?;
                }
            }
            for r in release {
                slots.clear(*r);
                working_set.release(*r);
            }
        }
        let flags = std::mem::take(&mut slots.flags);
        let mut outputs = self
            .plan
            .outputs
            .iter()
            .map(|slot| {
                if strings::is_host_only(self.plan.dtype(*slot)) {
                    let value = strings::output_value(&slots, *slot)?;
                    let sink = host_outputs.as_deref_mut().ok_or_else(|| {
                        RuntimeError("a string output outside an eager run".into())
                    })?;
                    sink.push(Some(value));
                    return strings::placeholder();
                }
                if let Some(sink) = host_outputs.as_deref_mut() {
                    sink.push(None);
                }
                let a = slots.get(*slot)?.clone();
                let want = to_mlx(self.plan.dtype(*slot))?;
                if a.dtype() == want {
                    return Ok(a);
                }
                log::warn!(
                    "{} is {:?}, the plan declares {want:?}; casting",
                    self.plan.slots[slot.index()].name,
                    a.dtype()
                );
                mlx::ops::astype(&a, want, s).map_err(Into::into)
            })
            .collect::<Result<Vec<Array>, RuntimeError>>()?;
        if self.has_status() {
            outputs.push(flags.finish()?);
        }
        Ok(outputs)
    }
}

/// What a run knows on the host before MLX is called.
#[derive(Debug, Clone, Default)]
pub(crate) struct HostBinding {
    /// The host program's results, bound to their slots.
    pub(crate) results: Vec<(Slot, TensorData)>,
    /// The values of the plan inputs that steps or the host program read on the host.
    pub(crate) input_values: Vec<(Slot, TensorData)>,
    /// The shapes of the plan inputs, by slot.
    input_shapes: Vec<(Slot, Vec<i64>)>,
    /// The plan inputs the run bound nothing to (absent optional inputs).
    pub(crate) absent_inputs: Vec<Slot>,
}

impl HostBinding {
    /// The arrays of the host program's results (a compiled closure's extra arguments).
    pub(crate) fn result_arrays(&self) -> Result<Vec<Array>, RuntimeError> {
        self.results
            .iter()
            .map(|(_, t)| interpreter::host_array(t))
            .collect()
    }

    /// The values that shape the MLX calls (those steps read on the host), in `slots` order:
    /// with the input shapes they identify a shape-keyed compiled trace.
    pub(crate) fn read_values(&self, slots: &[Slot]) -> Vec<Vec<u8>> {
        slots
            .iter()
            .map(|s| {
                plan::HostValues::value(self, *s)
                    .map(|t| t.bytes.to_vec())
                    .unwrap_or_default()
            })
            .collect()
    }
}

impl plan::HostValues for HostBinding {
    fn value(&self, slot: Slot) -> Option<&TensorData> {
        self.results
            .iter()
            .chain(&self.input_values)
            .find(|(s, _)| *s == slot)
            .map(|(_, t)| t)
    }

    fn input_shape(&self, slot: Slot) -> Option<&[i64]> {
        self.input_shapes
            .iter()
            .find(|(s, _)| *s == slot)
            .map(|(_, d)| d.as_slice())
    }
}

/// How an [`Executable`] admits runs: from any thread, one at a time (runs execute on the
/// lane's streams, which are not tied to the calling thread).
pub const RUN_POLICY: run_gate::Policy = run_gate::Policy::AnyThreadSerialized;

/// How many compile blockers the executable's info log names.
const MAX_BLOCKERS_LOGGED: usize = 4;

/// One runnable plan (a fused ORT node).
pub struct Executable {
    program: Arc<Program>,
    device: DeviceKind,
    /// The streams runs execute on (see `lanes`).
    lane: &'static lanes::Lane,
    gate: RunGate,
    state: Mutex<RunState>,
    /// (start, length) of each constant's bytes: outputs sharing them are never lent to ORT
    /// as device memory (see `device_memory`).
    constant_extents: Vec<(usize, usize)>,
}

fn constant_array(t: &TensorData) -> Result<FrozenArray, RuntimeError> {
    let shape = dims_i32(&t.dims)?;
    FrozenArray::new(packed::array_from_bytes(&t.bytes, &shape, t.dtype)?).map_err(Into::into)
}

fn dims_i32(dims: &[i64]) -> Result<Vec<i32>, RuntimeError> {
    dims.iter()
        .map(|&d| {
            i32::try_from(d)
                .map_err(|_| RuntimeError(format!("dimension {d} is out of MLX's range")))
        })
        .collect()
}

/// For each step, the slots whose last reader it is (output slots are kept).
fn release_schedule(plan: &Plan) -> Vec<Vec<Slot>> {
    let mut out = vec![Vec::new(); plan.steps.len()];
    for (slot, last) in plan.last_uses().into_iter().enumerate() {
        let slot = Slot(slot as u32);
        if let Some(i) = last
            && !plan.outputs.contains(&slot)
        {
            out[i].push(slot);
        }
    }
    out
}

/// True when the plan or one of its sub-plans holds a float64 value.
fn uses_f64(plan: &Plan) -> bool {
    plan.slots.iter().any(|s| s.dtype == DataType::Double)
        || plan
            .steps
            .iter()
            .flat_map(|s| s.sub_plans())
            .any(|sub| uses_f64(&sub.plan))
}

impl Program {
    /// Prepares a plan and, recursively, the sub-plans its steps hold: creates (or shares)
    /// the constants. `compile` (whether to compile, for which device) applies to the bodies,
    /// which keep their own closure caches (`is_body`).
    fn build(
        plan: Plan,
        share_initializers: bool,
        on_gpu: bool,
        compile: (bool, DeviceKind),
        is_body: bool,
    ) -> Result<Program, RuntimeError> {
        let plan = contrib::prepare_plan(plan, on_gpu);
        let pool = InitializerPool::<FrozenArray>::global();
        let constants = plan
            .constants
            .iter()
            .map(|(slot, t)| {
                let array = if share_initializers {
                    let key = InitializerKey::new(t.dtype.to_onnx(), &t.dims, &t.bytes);
                    pool.get_or_insert_with(key, || constant_array(t))?
                } else {
                    Arc::new(constant_array(t)?)
                };
                Ok((*slot, array))
            })
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        let constant_ranges = Arc::new(guard::ConstantRanges::new(
            plan.constants.iter().map(|(slot, t)| (*slot, t)),
        ));
        let host_read_slots = plan.host_read_slots();
        let value_inputs = plan
            .inputs
            .iter()
            .enumerate()
            .filter(|(n, i)| {
                host_read_slots.contains(&i.slot)
                    || strings::is_host_only(i.dtype)
                    || plan.host.value_inputs.iter().any(|(v, _)| v == n)
            })
            .map(|(n, _)| n)
            .collect();
        let mut subs = HashMap::new();
        for (i, step) in plan.steps.iter().enumerate() {
            let bodies = step.sub_plans();
            if bodies.is_empty() {
                continue;
            }
            let programs = bodies
                .into_iter()
                .map(|b| {
                    Program::build((*b.plan).clone(), share_initializers, on_gpu, compile, true)
                        .map(Arc::new)
                })
                .collect::<Result<Vec<_>, _>>()?;
            subs.insert(i, programs);
        }
        let host_only = strings::has_host_only(&plan);
        if host_only && is_body {
            return Err(RuntimeError(
                "a control-flow body holds string values, which run on the host only".into(),
            ));
        }
        let mut program = Program {
            host_only,
            random: random::RandomSteps::new(&plan),
            release_after: release_schedule(&plan),
            guarded: plan.steps.iter().any(|step| guard::may_flag(&plan, step)),
            value_inputs,
            host_read_slots,
            plan,
            constants,
            constant_ranges,
            subs,
            body_cache: None,
        };
        if is_body {
            let cache = CompiledCache::new(&program, compile.0, None);
            program.body_cache = Some((Mutex::new(cache), compile.1));
        }
        Ok(program)
    }

    /// For a sub-program: its compiled-closure cache and device (see `control`).
    pub(crate) fn body_cache(&self) -> Option<&(Mutex<CompiledCache>, DeviceKind)> {
        self.body_cache.as_ref()
    }
}

impl Executable {
    /// Prepares a plan: creates (or shares) its constants and chooses the stream.
    pub fn new(plan: Plan, options: &RuntimeOptions) -> Result<Self, RuntimeError> {
        init()?;
        let uses_f64 = uses_f64(&plan);
        // float64 (and a missing GPU) run on the CPU stream.
        let device = match options.device {
            DeviceKind::Gpu if !uses_f64 && gpu_available() => DeviceKind::Gpu,
            _ => DeviceKind::Cpu,
        };
        let compile = options.compile.unwrap_or(device == DeviceKind::Gpu);
        // the CPU's default: the decode closure only
        let decode_only = options.compile.is_none() && device == DeviceKind::Cpu;
        let program = Program::build(
            plan,
            options.share_initializers,
            options.device == DeviceKind::Gpu && gpu_available(),
            (compile, device),
            false,
        )?;
        let mut compiled = CompiledCache::new(
            &program,
            compile || decode_only,
            options.compile_cache_capacity,
        );
        if decode_only {
            compiled.decode_only();
        }
        log::info!(
            "executable: {} step(s) on the {device:?} stream, compile class {:?}, compile {}",
            program.plan.steps.len(),
            program.plan.compile_class(),
            if compile {
                "on"
            } else if decode_only {
                "decode closure only"
            } else {
                "off"
            }
        );
        if log::log_enabled!(log::Level::Info) {
            // What keeps the plan eager first (host reads), then what makes it shape-keyed.
            let blockers = program.plan.compile_blockers();
            for class in [plan::CompileClass::Eager, plan::CompileClass::ShapeKeyed] {
                let of_class: Vec<_> = blockers.iter().filter(|b| b.limits_to == class).collect();
                for (i, b) in of_class.iter().enumerate() {
                    if i < MAX_BLOCKERS_LOGGED {
                        log::info!("  not shapeless: {b}");
                    } else {
                        log::debug!("  not shapeless: {b}");
                    }
                }
                if of_class.len() > MAX_BLOCKERS_LOGGED {
                    log::info!(
                        "  not shapeless: ... {} more {class:?} (ORTMLX_LOG=debug lists them)",
                        of_class.len() - MAX_BLOCKERS_LOGGED
                    );
                }
            }
        }
        let decode = {
            let plan = &program.plan;
            let inputs: Vec<&str> = plan.inputs.iter().map(|i| i.name.as_str()).collect();
            let outputs: Vec<&str> = plan.output_names.iter().map(String::as_str).collect();
            // On a GPU a carried array lives in device memory: comparing its bytes on the host
            // would move it there and back, so only an input bound to its own buffer is reused.
            let compare = if device == DeviceKind::Gpu {
                decode::Compare::SameBuffer
            } else {
                decode::Compare::Bytes
            };
            decode::DecodeState::new(
                inputs.len(),
                decode::cache_pairs(&inputs, &outputs),
                compare,
            )
        };
        let constant_extents = program
            .constants
            .iter()
            .filter_map(|(_, c)| {
                let a = c.get();
                let b = a.as_bytes().ok()?;
                Some((b.as_ptr() as usize, b.len()))
            })
            .collect();
        Ok(Executable {
            constant_extents,
            program: Arc::new(program),
            device,
            lane: lanes::assign(),
            // Any thread may run, one at a time: runs execute on the lane's streams, which
            // are not tied to a thread.
            gate: RunGate::with_policy(RUN_POLICY),
            state: Mutex::new(RunState {
                compiled,
                decode,
                empty_outputs: HashMap::new(),
                runs: RunStats::default(),
            }),
        })
    }

    /// Offers `output` (of this executable's latest run) to the next device-memory allocation
    /// on this thread, unless it shares bytes with a constant or a lent block (see
    /// [`device_memory::offer_output`]).
    pub fn offer_output(&self, output: &OutputTensor) -> bool {
        device_memory::offer_output(output, &self.constant_extents)
    }

    /// `(input index, output index)` of each KV-cache pair (`past…` fed by `present…`).
    pub fn cache_pairs(&self) -> Vec<(usize, usize)> {
        let plan = &self.program.plan;
        let inputs: Vec<&str> = plan.inputs.iter().map(|i| i.name.as_str()).collect();
        let outputs: Vec<&str> = plan.output_names.iter().map(String::as_str).collect();
        decode::cache_pairs(&inputs, &outputs)
    }

    /// The plan this executable runs.
    pub fn plan(&self) -> &Plan {
        &self.program.plan
    }

    /// The device the plan runs on (the GPU only when asked for, present, and no float64).
    pub fn device(&self) -> DeviceKind {
        self.device
    }

    /// Counters of the compiled-closure caches.
    pub fn cache_stats(&self) -> CacheStats {
        self.state.lock().compiled.stats()
    }

    /// Counters of the decode path (`None` when the plan has no KV cache; see `decode`).
    pub fn decode_stats(&self) -> Option<DecodeStats> {
        self.state
            .lock()
            .decode
            .as_ref()
            .map(decode::DecodeState::stats)
    }

    /// Counters of the runs so far: which path served them (compiled decode / prefill /
    /// general closure, or eager) and their host synchronisations and host reads (see
    /// `stats`).
    pub fn run_stats(&self) -> RunStats {
        self.state.lock().runs
    }

    /// Runs the plan on inputs given in the plan's input order.
    pub fn run(&self, inputs: &[InputTensor<'_>]) -> Result<Vec<OutputTensor>, RuntimeError> {
        self.run_with(inputs, &RunContext::default())
    }

    /// Runs the plan as [`Executable::run`], with the caller's per-run context.
    pub fn run_with(
        &self,
        inputs: &[InputTensor<'_>],
        ctx: &RunContext<'_>,
    ) -> Result<Vec<OutputTensor>, RuntimeError> {
        let _run = self.gate.enter().map_err(|e| RuntimeError(e.to_string()))?;
        let mut state = self.state.lock();
        let state = &mut *state;
        let entered = Instant::now();
        self.lane.run(self.device, |lane| {
            let counter = stats::RunCounter::start();
            let mut phases = RunPhases {
                handoff_us: stats::micros_since(entered),
                ..RunPhases::default()
            };
            let (outputs, path) = self.run_on_lane(state, inputs, ctx, lane, &mut phases)?;
            state.runs.record(counter.finish(path, phases));
            Ok(outputs)
        })?
    }

    /// The body of a run, on the lane's thread and streams.
    fn run_on_lane(
        &self,
        state: &mut RunState,
        inputs: &[InputTensor<'_>],
        ctx: &RunContext<'_>,
        lane: &lanes::LaneStreams,
        phases: &mut RunPhases,
    ) -> Result<(Vec<OutputTensor>, RunPath), RuntimeError> {
        let mut phase_start = Instant::now();
        let plan = &self.program.plan;
        if inputs.len() != plan.inputs.len() {
            return Err(RuntimeError(format!(
                "the fused node takes {} inputs, {} were given",
                plan.inputs.len(),
                inputs.len()
            )));
        }
        for (input, tensor) in plan.inputs.iter().zip(inputs) {
            if tensor.dtype != input.dtype {
                return Err(RuntimeError(format!(
                    "input '{}' is {}, the model declares {}",
                    input.name, tensor.dtype, input.dtype
                )));
            }
            if strings::is_host_only(tensor.dtype) && !tensor.is_absent() {
                TensorData::new(tensor.dtype, tensor.dims.to_vec(), tensor.data)
                    .map_err(|e| RuntimeError(format!("input '{}': {e}", input.name)))?;
            }
        }
        let RunState {
            compiled,
            decode,
            empty_outputs,
            runs: _,
        } = state;
        let bound = match decode {
            Some(d) => d.begin(inputs, ctx),
            None => vec![None; inputs.len()],
        };
        let mut arrays = Vec::with_capacity(inputs.len());
        for (tensor, bound) in inputs.iter().zip(bound) {
            arrays.push(match bound {
                Some(a) => a,
                // a string input is bound as its host value (see `strings`), an absent
                // optional input as absent
                None if strings::is_host_only(tensor.dtype) || tensor.is_absent() => {
                    strings::placeholder()?
                }
                None => {
                    let shape = dims_i32(tensor.dims)?;
                    // an input in the EP's device memory is a view of its block (no copy)
                    match device_memory::bind_input(tensor, &shape, lane.stream(self.device))? {
                        Some(a) => a,
                        None => packed::array_from_bytes(tensor.data, &shape, tensor.dtype)?,
                    }
                }
            });
        }
        // The decode path keeps this step's input arrays for the next one.
        let kept_inputs = decode.is_some().then(|| arrays.clone());
        let shapes: Vec<Vec<i64>> = inputs.iter().map(|t| t.dims.to_vec()).collect();
        let value_of = |i: usize| {
            let t = inputs.get(i)?;
            TensorData::new(t.dtype, t.dims.to_vec(), t.data).ok()
        };
        let mut host = self.program.host_binding(&shapes, &value_of)?;
        host.absent_inputs = plan
            .inputs
            .iter()
            .zip(inputs)
            .filter(|(_, t)| t.is_absent())
            .map(|(i, _)| i.slot)
            .collect();
        // MLX's CUDA kernels don't all handle empty tensors: some crash the process (a
        // zero-batch cuDNN convolution, an empty Gather). A GPU run with an empty input is first
        // traced (lazily, nothing launched) on the CPU stream; when that gives an empty output,
        // the run stays there. Runs whose empty inputs feed non-empty results (an LLM prefill
        // with an empty KV cache) go on to the GPU.
        // The answer depends on the input shapes only, so it is remembered per shape set.
        let mut device = self.device;
        let mut on_cpu = None;
        let mut host_values = Vec::new();
        if self.program.host_only || !host.absent_inputs.is_empty() {
            // strings live on the host, an absent input has no array: one eager trace, string
            // outputs as host values
            let (traced, values) =
                self.program
                    .trace_host_only(arrays.clone(), &host, lane.stream(device))?;
            host_values = values;
            on_cpu = Some(traced);
        } else if device == DeviceKind::Gpu && inputs.iter().any(|t| t.dims.contains(&0)) {
            let known = empty_outputs.get(&shapes).copied();
            if known != Some(false) {
                let traced = self.program.trace(
                    arrays.clone(),
                    &host,
                    None,
                    lane.stream(DeviceKind::Cpu),
                )?;
                let empty = traced.iter().any(|a| a.size() == 0);
                if empty_outputs.len() >= 64 {
                    empty_outputs.clear();
                }
                empty_outputs.insert(shapes.clone(), empty);
                if empty {
                    device = DeviceKind::Cpu;
                    on_cpu = Some(traced);
                }
            }
        }
        let stream = lane.stream(device);
        phases.bind_us = stats::micros_since(phase_start);
        phase_start = Instant::now();
        let mut choice = compiled.slot_for(&self.program, &shapes, &host);
        if let Some(compiled::SlotChoice::Decode(key)) = &choice
            && on_cpu.is_none()
            && !compiled.decode_allowed(key, &self.program, &arrays, &host, &shapes, stream)?
        {
            choice = None;
        }
        let (outputs, path) = match (on_cpu, choice) {
            (Some(traced), _) => (traced, RunPath::Eager),
            (None, Some(slot)) => (
                compiled.run(slot.clone(), &self.program, device, &arrays, host)?,
                slot.kind().into(),
            ),
            (None, None) => (
                self.program.trace(arrays, &host, None, stream)?,
                RunPath::Eager,
            ),
        };
        let mut outputs = outputs;
        let status = if self.program.has_status() {
            outputs.pop()
        } else {
            None
        };
        for (slot, a) in plan.outputs.iter().zip(&outputs) {
            guard::check_size(a).map_err(|e| {
                RuntimeError(format!("output '{}': {e}", plan.slots[slot.index()].name))
            })?;
        }
        let mut refs: Vec<&Array> = outputs.iter().collect();
        refs.extend(status.as_ref());
        phases.dispatch_us = stats::micros_since(phase_start);
        phase_start = Instant::now();
        mlx::eval(&refs)?;
        stats::note_sync();
        phases.eval_us = stats::micros_since(phase_start);
        phase_start = Instant::now();
        if let Some(status) = &status {
            self.program.check_status(status)?;
        }
        let outputs = outputs
            .iter()
            .map(|a| {
                // A strided output (a transposed view) is copied and evaluated once more.
                if !a.is_row_contiguous()? {
                    stats::note_sync();
                }
                a.to_contiguous(stream)
            })
            .collect::<mlx::Result<Vec<Array>>>()?;
        if let (Some(d), Some(kept)) = (decode, kept_inputs) {
            d.finish(&kept, &outputs);
        }
        let outputs = outputs
            .into_iter()
            .zip(&plan.outputs)
            .enumerate()
            .map(|(k, (array, slot))| {
                if let Some(Some(t)) = host_values.get_mut(k).map(Option::take) {
                    return Ok(OutputTensor {
                        dtype: t.dtype,
                        dims: t.dims,
                        array,
                        packed: Some(t.bytes.to_vec()),
                    });
                }
                // the plan's type when MLX holds it as this dtype (float8 codes are uint8)
                let declared = plan.dtype(*slot);
                let dtype = match to_mlx(declared) {
                    Ok(d) if d == array.dtype() => declared,
                    _ => to_onnx(array.dtype())
                        .ok_or_else(|| RuntimeError("complex output".into()))?,
                };
                let packed = match dtype.packed_bits() {
                    Some(bits) => Some(packed::pack(bits, array.as_bytes()?)),
                    None => None,
                };
                Ok(OutputTensor {
                    dtype,
                    dims: array.shape().into_iter().map(i64::from).collect(),
                    array,
                    packed,
                })
            })
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        phases.finish_us = stats::micros_since(phase_start);
        Ok((outputs, path))
    }
}

/// Sets MLX's process-wide allocator limits (see `mlx::set_memory_limit` and
/// `mlx::set_cache_limit`); `None` leaves a limit as it is.
pub fn set_memory_limits(memory: Option<usize>, cache: Option<usize>) -> Result<(), RuntimeError> {
    if let Some(bytes) = memory {
        mlx::set_memory_limit(bytes)
            .map_err(|e| RuntimeError(format!("setting MLX's memory limit: {e}")))?;
    }
    if let Some(bytes) = cache {
        mlx::set_cache_limit(bytes)
            .map_err(|e| RuntimeError(format!("setting MLX's cache limit: {e}")))?;
    }
    Ok(())
}

/// One-time process setup (MLX's error handler, float32 matmul precision). Safe to call
/// repeatedly.
///
/// MLX's CUDA backend computes float32 matmuls in TF32 unless `MLX_ENABLE_TF32=0`, which moves
/// results by about 1e-3 relative; ONNX Runtime users expect float32. So TF32 is off unless the
/// user set `MLX_ENABLE_TF32` before the EP loaded (`MLX_ENABLE_TF32=1` allows it).
pub fn init() -> Result<(), RuntimeError> {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        mlx::install_error_handler();
        if !config().mlx_enable_tf32_set {
            // SAFETY: runs once, when the EP library is set up (ORT's registration call),
            // before any MLX work that reads the variable; nothing else here touches the
            // environment concurrently.
            unsafe { std::env::set_var("MLX_ENABLE_TF32", "0") };
        }
    });
    Ok(())
}

/// True when the linked MLX has a GPU backend with a device present.
pub fn gpu_available() -> bool {
    mlx::gpu_available()
}
