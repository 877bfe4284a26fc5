//! The step vocabulary: MLX-level operations over value slots.
//!
//! Every [`Step`] names one MLX primitive (or one small, fixed group of calls documented on the
//! variant) with its static attributes already resolved. What can only be known at run time
//! (input shapes, values of shape tensors) is resolved by the pure functions on the helper types
//! here ([`ReshapeTarget::resolve`], [`SliceSpec::resolve`], [`ConvSpec::resolve`], ...), which the
//! runtime calls with the actual shapes; so ONNX semantics live in this crate and the runtime's
//! interpreter is one flat match.
//!
//! Conventions:
//! - Shapes passed to resolve functions are the runtime array's shape as `i64`.
//! - Axes in steps are non-negative when the rank was known at plan time. Where a step documents
//!   that an axis may be negative, MLX's own negative-axis handling (relative to the input rank)
//!   is the intended meaning.
//! - `dtype` fields are ONNX [`DataType`](onnx_ir::DataType)s; the runtime maps them to MLX dtypes.

use std::fmt;

mod control;
mod conv;
mod conv_transpose;
mod cumulative;
mod detection;
mod dft;
mod elementwise;
mod gather_scatter;
mod host_compute;
mod operands;
mod random;
mod resize;
mod resize_interp;
mod roi_align;
mod shape;
#[cfg(test)]
mod tests;
mod tfidf_mel;
mod variants;

pub use control::{ScanAxis, SubPlan};
pub use conv_transpose::{
    ConvTransposeArgs, ConvTransposePadding, ConvTransposeSpec, distribute_padding,
};
pub use cumulative::{CumOp, cumulative_axis};
pub use detection::{NmsInputs, non_max_suppression};
pub use dft::FftOp;
pub use gather_scatter::{
    DimRule, ScatterOp, dims_target, gather_slice_sizes, iota_i32, nonzero_coords,
};
pub use host_compute::{HostValue, UniqueResult, WindowKind, cosine_window, unique};
pub use random::{RandomDist, random_base, random_draw_seed};
pub use resize_interp::{
    AspectPolicy, AxisTables, InterpArgs, InterpAxis, InterpCoordinates, InterpLayout, InterpMode,
    InterpSpec, LayoutAxis, MAX_LAYOUT_TAPS, antialias_taps, cubic_coeffs, interpolated_axes,
    interpolated_axes_for, resize_output, resize_target, resized_length, source_coordinate,
};
pub use roi_align::{RoiAlignSpec, RoiSamples};
pub use tfidf_mel::{MEL_TYPES, TfIdfMode, TfIdfSpec, mel_weight_matrix};

/// A value slot: the index of one array in the runtime's value table.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Slot(pub u32);

impl Slot {
    /// The slot as an index into a value table.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// Reads small integer or float tensors back to the host at run time.
///
/// The runtime implements this (evaluating the slot's array and copying it out); resolve
/// functions call it only for the `Dynamic` sources of the step being executed.
pub trait HostReader {
    /// The slot's values as `i64` (integer or bool tensors), flattened.
    fn ints(&mut self, slot: Slot) -> Result<Vec<i64>, String>;
    /// The slot's values as `f64` (float or integer tensors), flattened.
    fn floats(&mut self, slot: Slot) -> Result<Vec<f64>, String>;
}

/// A host-side `i64` vector: known at plan time, or read from a slot at run time.
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ShapeSource {
    /// Known at plan time (from an initializer, a Constant node or an attribute).
    Static(Vec<i64>),
    /// Read from this slot on the host at run time ([`HostReader::ints`]).
    Dynamic(Slot),
}

impl fmt::Debug for ShapeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeSource::Static(v) => write!(f, "{v:?}"),
            ShapeSource::Dynamic(s) => write!(f, "host({s:?})"),
        }
    }
}

impl ShapeSource {
    /// The values, reading a dynamic source through `host`.
    pub fn get(&self, host: &mut dyn HostReader) -> Result<Vec<i64>, String> {
        match self {
            ShapeSource::Static(v) => Ok(v.clone()),
            ShapeSource::Dynamic(s) => host.ints(*s),
        }
    }

    /// The slot read on the host, if dynamic.
    pub fn dynamic_slot(&self) -> Option<Slot> {
        match self {
            ShapeSource::Static(_) => None,
            ShapeSource::Dynamic(s) => Some(*s),
        }
    }
}

/// A host-side `f64` vector: known at plan time, or read from a slot at run time.
#[derive(Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum FloatSource {
    /// Known at plan time.
    Static(Vec<f64>),
    /// Read from this slot on the host at run time ([`HostReader::floats`]).
    Dynamic(Slot),
}

impl fmt::Debug for FloatSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FloatSource::Static(v) => write!(f, "{v:?}"),
            FloatSource::Dynamic(s) => write!(f, "host({s:?})"),
        }
    }
}

impl FloatSource {
    /// The values, reading a dynamic source through `host`.
    pub fn get(&self, host: &mut dyn HostReader) -> Result<Vec<f64>, String> {
        match self {
            FloatSource::Static(v) => Ok(v.clone()),
            FloatSource::Dynamic(s) => host.floats(*s),
        }
    }

    /// The slot read on the host, if dynamic.
    pub fn dynamic_slot(&self) -> Option<Slot> {
        match self {
            FloatSource::Static(_) => None,
            FloatSource::Dynamic(s) => Some(*s),
        }
    }
}

pub use conv::*;
pub use elementwise::*;
pub use resize::*;
pub use shape::*;
use shape::{shape_to_i32, to_i32};
pub use variants::Step;
