//! Host kernels: named, pure-Rust computations over host buffers, for the few ops MLX can't
//! express (data-dependent output shapes, sequential scans over small inputs).
//!
//! A kernel takes its inputs as [`TensorData`] (dtype, dims, little-endian bytes; `None` for an
//! omitted optional input) and its [`KernelAttrs`], and returns its outputs the same way. Each
//! op family registers its kernels by name next to its lowerings
//! (`r.kernel("non_max_suppression", nms_kernel)` in `ops/detection.rs`); a lowering emits a
//! [`Step::HostKernel`](crate::Step::HostKernel) naming one, and the runtime reads the inputs to
//! the host, calls [`run_host_kernel`] and binds the results as arrays. The runtime knows no
//! kernel; a plan (an EPContext one too) holds kernels by name only.

use std::collections::HashMap;
use std::sync::OnceLock;

use onnx_ir::{DataType, TensorData};

/// A host kernel: inputs and static attributes in, outputs out (or an error message).
pub type KernelFn = fn(&[Option<TensorData>], &KernelAttrs) -> Result<Vec<TensorData>, String>;

/// One static attribute of a host kernel.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum KernelAttr {
    /// An integer (bools too).
    Int(i64),
    /// Integers.
    Ints(Vec<i64>),
    /// A float.
    Float(f64),
}

/// The static attributes of a host kernel step, by name.
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct KernelAttrs(pub Vec<(String, KernelAttr)>);

impl KernelAttrs {
    /// No attributes.
    pub fn new() -> Self {
        KernelAttrs(Vec::new())
    }

    /// Adds an integer attribute.
    pub fn int(mut self, name: &str, v: i64) -> Self {
        self.0.push((name.into(), KernelAttr::Int(v)));
        self
    }

    /// Adds a bool attribute (stored as 0 / 1).
    pub fn bool(self, name: &str, v: bool) -> Self {
        self.int(name, v as i64)
    }

    /// Adds an integer-list attribute.
    pub fn ints(mut self, name: &str, v: Vec<i64>) -> Self {
        self.0.push((name.into(), KernelAttr::Ints(v)));
        self
    }

    /// Adds a float attribute.
    pub fn float(mut self, name: &str, v: f64) -> Self {
        self.0.push((name.into(), KernelAttr::Float(v)));
        self
    }

    fn find(&self, name: &str) -> Result<&KernelAttr, String> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a)
            .ok_or_else(|| format!("host kernel attribute {name:?} is missing"))
    }

    /// The integer attribute `name`.
    pub fn get_int(&self, name: &str) -> Result<i64, String> {
        match self.find(name)? {
            KernelAttr::Int(v) => Ok(*v),
            a => Err(format!(
                "host kernel attribute {name:?} is {a:?}, not an int"
            )),
        }
    }

    /// The bool attribute `name`.
    pub fn get_bool(&self, name: &str) -> Result<bool, String> {
        Ok(self.get_int(name)? != 0)
    }

    /// The integer-list attribute `name`.
    pub fn get_ints(&self, name: &str) -> Result<&[i64], String> {
        match self.find(name)? {
            KernelAttr::Ints(v) => Ok(v),
            a => Err(format!("host kernel attribute {name:?} is {a:?}, not ints")),
        }
    }

    /// The float attribute `name`.
    pub fn get_float(&self, name: &str) -> Result<f64, String> {
        match self.find(name)? {
            KernelAttr::Float(v) => Ok(*v),
            a => Err(format!(
                "host kernel attribute {name:?} is {a:?}, not a float"
            )),
        }
    }

    /// The dtype attribute `name` (an ONNX `TensorProto` data type number).
    pub fn get_dtype(&self, name: &str) -> Result<DataType, String> {
        let v = self.get_int(name)?;
        i32::try_from(v)
            .ok()
            .and_then(DataType::from_onnx)
            .ok_or_else(|| format!("host kernel attribute {name:?}: {v} is not a data type"))
    }
}

/// The kernel table: every kernel the op families register.
fn table() -> &'static HashMap<&'static str, KernelFn> {
    static TABLE: OnceLock<HashMap<&'static str, KernelFn>> = OnceLock::new();
    TABLE.get_or_init(|| crate::Registry::default().kernels().clone())
}

/// The kernel registered as `name`.
pub fn host_kernel(name: &str) -> Option<KernelFn> {
    table().get(name).copied()
}

/// Runs the kernel `name`; an unknown name (a plan from another build) is an error.
pub fn run_host_kernel(
    name: &str,
    inputs: &[Option<TensorData>],
    attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let k = host_kernel(name).ok_or_else(|| format!("no host kernel named {name:?}"))?;
    k(inputs, attrs)
}

/// Input `i`, which the kernel requires.
pub fn input(inputs: &[Option<TensorData>], i: usize) -> Result<&TensorData, String> {
    inputs
        .get(i)
        .and_then(Option::as_ref)
        .ok_or_else(|| format!("host kernel input {i} is missing"))
}

/// Input `i` if present.
pub fn opt_input(inputs: &[Option<TensorData>], i: usize) -> Option<&TensorData> {
    inputs.get(i).and_then(Option::as_ref)
}

/// The values of a float32 tensor.
pub fn f32s(t: &TensorData) -> Result<Vec<f32>, String> {
    if t.dtype != DataType::Float {
        return Err(format!("host kernel input is {}, not float32", t.dtype));
    }
    Ok(t.bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// The values of an integer or bool tensor as `i64` (uint64 keeps its bits).
pub fn i64s(t: &TensorData) -> Result<Vec<i64>, String> {
    if t.dtype == DataType::Uint64 {
        return Ok(t
            .bytes
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect());
    }
    t.to_i64_vec()
        .ok_or_else(|| format!("host kernel input is {}, not an integer type", t.dtype))
}

/// The values of a float tensor (any float type) or an integer one as `f64`.
pub fn f64s(t: &TensorData) -> Result<Vec<f64>, String> {
    if t.dtype == DataType::Uint64 {
        return Ok(i64s(t)?.into_iter().map(|v| v as u64 as f64).collect());
    }
    t.to_f64_vec()
        .ok_or_else(|| format!("host kernel input is {}, not a numeric type", t.dtype))
}
