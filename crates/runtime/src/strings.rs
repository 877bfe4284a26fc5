//! String values: tensors that live on the host only.
//!
//! MLX has no string dtype, so a plan's string values never become arrays. A string plan input
//! is bound as the host value of its slot (the `TensorData` ORT's strings were read into, see
//! [`onnx_ir::TensorData::strings`]); host kernels read string slots through their host
//! values and bind string results the same way ([`bind_result`]); a string plan output leaves
//! the trace as its host value and reaches ORT as the bytes of its [`crate::OutputTensor`]
//! (`dtype` string, elements length-prefixed). Where the run's bookkeeping expects an array
//! (the input list, the output list), an empty [`placeholder`] stands in; no step reads it.
//!
//! A plan holding a string value runs eagerly (`plan::Plan::compile_class`): a compiled
//! closure's arguments and results are arrays.

use mlx::Array;
use onnx_ir::{DataType, TensorData};
use plan::{Plan, Slot};

use crate::RuntimeError;
use crate::interpreter::Slots;

/// True for the element types that live on the host only (strings).
pub(crate) fn is_host_only(dtype: DataType) -> bool {
    dtype == DataType::String
}

/// True when `plan` has a host-only value (an input, a result or an output).
pub(crate) fn has_host_only(plan: &Plan) -> bool {
    plan.slots.iter().any(|s| is_host_only(s.dtype))
}

/// The array standing in for a host-only value where the run expects one (an empty uint8
/// vector; nothing reads it).
pub(crate) fn placeholder() -> Result<Array, RuntimeError> {
    Ok(Array::from_bytes(&[], &[0], mlx::Dtype::Uint8)?)
}

/// Binds a host kernel's result `t` to `slot`: a string as the slot's host value only, any
/// other type as an array.
pub(crate) fn bind_result(
    slots: &mut Slots,
    slot: Slot,
    t: TensorData,
) -> Result<(), RuntimeError> {
    if is_host_only(t.dtype) {
        if t.strings().is_none() {
            return Err(RuntimeError(
                "a host kernel made a string tensor of malformed bytes".into(),
            ));
        }
        slots.set_host_value(slot, t);
        return Ok(());
    }
    slots.set(slot, crate::interpreter::host_array(&t)?);
    Ok(())
}

/// The value of host-only output `slot` at the end of a trace.
pub(crate) fn output_value(slots: &Slots, slot: Slot) -> Result<TensorData, RuntimeError> {
    slots
        .host_value(slot)
        .filter(|t| is_host_only(t.dtype))
        .cloned()
        .ok_or_else(|| RuntimeError(format!("string slot {slot:?} read before it was written")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholder_is_empty() {
        crate::init().unwrap();
        let p = placeholder().unwrap();
        assert_eq!(p.size(), 0);
        assert!(is_host_only(DataType::String));
        assert!(!is_host_only(DataType::Float));
    }
}
