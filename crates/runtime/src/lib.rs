//! Executes a [`plan::Plan`] with MLX.
//!
//! An [`Executable`] holds one plan (one fused ORT node), its constants (shared across
//! sessions through the initializer pool), the MLX stream it runs on, and a run gate. Each
//! [`Executable::run`] binds the inputs, interprets the steps (building MLX's lazy graph),
//! evaluates the outputs together and hands back their bytes.

mod dtype;
mod interpreter;

use std::sync::Arc;

use initializer_pool::{InitializerKey, InitializerPool};
use mlx::{Array, Device, FrozenArray, Stream};
use onnx_ir::{DataType, TensorData};
use parking_lot::Mutex;
use plan::{Plan, Slot};
use run_gate::RunGate;

pub use dtype::{to_mlx, to_onnx};

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
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            device: DeviceKind::Cpu,
            share_initializers: true,
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
    /// Element bytes, row-major.
    pub data: &'a [u8],
}

/// An evaluated output tensor; [`OutputTensor::data`] borrows its bytes from MLX.
pub struct OutputTensor {
    /// Element type.
    pub dtype: DataType,
    /// Dimensions.
    pub dims: Vec<i64>,
    array: Array,
}

impl OutputTensor {
    /// Element bytes, row-major and contiguous.
    pub fn data(&self) -> &[u8] {
        // The array was made contiguous and evaluated when the output was built.
        self.array.as_bytes().unwrap_or(&[])
    }
}

/// Mutable per-run state, used by one thread at a time (behind the run gate and a lock).
struct RunState {
    stream: Stream,
}

/// One runnable plan (a fused ORT node).
pub struct Executable {
    plan: Plan,
    constants: Vec<(Slot, Arc<FrozenArray>)>,
    /// For each step, the slots whose last reader it is (dropped after it runs).
    release_after: Vec<Vec<Slot>>,
    gate: RunGate,
    state: Mutex<RunState>,
}

fn constant_array(t: &TensorData) -> Result<FrozenArray, RuntimeError> {
    let shape = dims_i32(&t.dims)?;
    FrozenArray::new(Array::from_bytes(&t.bytes, &shape, to_mlx(t.dtype)?)?).map_err(Into::into)
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

impl Executable {
    /// Prepares a plan: creates (or shares) its constants and chooses the stream.
    pub fn new(plan: Plan, options: &RuntimeOptions) -> Result<Self, RuntimeError> {
        init()?;
        let pool = InitializerPool::<FrozenArray>::global();
        let constants = plan
            .constants
            .iter()
            .map(|(slot, t)| {
                let array = if options.share_initializers {
                    let key = InitializerKey::new(t.dtype.to_onnx(), &t.dims, &t.bytes);
                    pool.get_or_insert_with(key, || constant_array(t))?
                } else {
                    Arc::new(constant_array(t)?)
                };
                Ok((*slot, array))
            })
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        let uses_f64 = plan.slots.iter().any(|s| s.dtype == DataType::Double);
        let device = match options.device {
            DeviceKind::Gpu if !uses_f64 && gpu_available() => Device::gpu(),
            // float64 (and a missing GPU) run on the CPU stream.
            _ => Device::cpu(),
        };
        let stream = Stream::default_for(&device)?;
        Ok(Executable {
            release_after: release_schedule(&plan),
            plan,
            constants,
            gate: RunGate::new(),
            state: Mutex::new(RunState { stream }),
        })
    }

    /// The plan this executable runs.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Runs the plan on inputs given in the plan's input order.
    pub fn run(&self, inputs: &[InputTensor<'_>]) -> Result<Vec<OutputTensor>, RuntimeError> {
        let _run = self.gate.enter().map_err(|e| RuntimeError(e.to_string()))?;
        let state = self.state.lock();
        let s = &state.stream;
        if inputs.len() != self.plan.inputs.len() {
            return Err(RuntimeError(format!(
                "the fused node takes {} inputs, {} were given",
                self.plan.inputs.len(),
                inputs.len()
            )));
        }
        let mut slots = interpreter::Slots::new(self.plan.num_slots);
        for (input, tensor) in self.plan.inputs.iter().zip(inputs) {
            if tensor.dtype != input.dtype {
                return Err(RuntimeError(format!(
                    "input '{}' is {}, the model declares {}",
                    input.name, tensor.dtype, input.dtype
                )));
            }
            let shape = dims_i32(tensor.dims)?;
            slots.set(
                input.slot,
                Array::from_bytes(tensor.data, &shape, to_mlx(tensor.dtype)?)?,
            );
        }
        for (slot, array) in &self.constants {
            slots.set(*slot, array.get());
        }
        if !self.plan.host.is_empty() {
            let shapes: Vec<Vec<i64>> = inputs.iter().map(|t| t.dims.to_vec()).collect();
            for (slot, value) in self.plan.host.run(&shapes).map_err(RuntimeError)? {
                slots.set_host(slot, value)?;
            }
        }
        for (step, release) in self.plan.steps.iter().zip(&self.release_after) {
            interpreter::execute(step, &mut slots, s)?;
            for r in release {
                slots.clear(*r);
            }
        }
        let mut outputs = Vec::with_capacity(self.plan.outputs.len());
        for (i, slot) in self.plan.outputs.iter().enumerate() {
            let want = self.plan.slots.get(slot.index()).map(|s| s.dtype);
            let mut a = slots.get(*slot)?.clone();
            if let Some(want) = want {
                let want_mlx = to_mlx(want)?;
                if a.dtype() != want_mlx {
                    log::warn!(
                        "output {i} is {:?}, the plan declares {want}; casting",
                        a.dtype()
                    );
                    a = mlx::ops::astype(&a, want_mlx, s)?;
                }
            }
            outputs.push(a);
        }
        let refs: Vec<&Array> = outputs.iter().collect();
        mlx::eval(&refs)?;
        drop(slots);
        outputs
            .into_iter()
            .map(|a| {
                let array = a.to_contiguous(s)?;
                let dtype =
                    to_onnx(array.dtype()).ok_or_else(|| RuntimeError("complex output".into()))?;
                Ok(OutputTensor {
                    dtype,
                    dims: array.shape().into_iter().map(i64::from).collect(),
                    array,
                })
            })
            .collect()
    }
}

/// One-time process setup (MLX's error handler). Safe to call repeatedly.
pub fn init() -> Result<(), RuntimeError> {
    mlx::install_error_handler();
    Ok(())
}

/// True when the linked MLX has a GPU backend with a device present.
pub fn gpu_available() -> bool {
    mlx::gpu_available()
}
