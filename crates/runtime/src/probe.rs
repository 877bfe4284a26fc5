//! The check that makes a decode closure safe to reuse across past lengths.
//!
//! A decoder's decode closure is traced once, for one past length, and compiled shapeless.
//! MLX then re-infers every primitive's output shape for the next past length, which is right
//! for shape-polymorphic steps and for the GroupQueryAttention layout steps in the decode
//! layout (`plan::Plan::decode_key`), but not for steps that resolved arguments from shapes
//! (a reshape target, slice bounds): those were baked in. Before the closure is compiled, the
//! plan is traced a second time (lazily, nothing is evaluated) with every dim that grows with
//! the past one longer; the closure is used only when each such step sees the same shapes in
//! both traces, i.e. when none of them depends on the past length.

use mlx::{Array, Stream, ops};
use onnx_ir::TensorData;
use plan::DecodeKey;

use crate::{HostBinding, Program, RuntimeError};

/// The input and output shapes of one step that is not shape-polymorphic, in a trace.
pub(crate) type StepShapes = (usize, Vec<Vec<i32>>, Vec<Vec<i32>>);

/// True when the closure traced for `inputs` / `host` may serve every run with `key`.
pub(crate) fn past_independent(
    program: &Program,
    key: &DecodeKey,
    inputs: &[Array],
    host: &HostBinding,
    shapes: &[Vec<i64>],
    s: &Stream,
) -> Result<bool, RuntimeError> {
    let mut seen = Vec::new();
    program.trace_recording(inputs.to_vec(), host, s, &mut seen)?;
    let Some((probe_inputs, probe_host)) = longer_past(program, key, inputs, host, shapes, s)?
    else {
        return Ok(false);
    };
    let mut probed = Vec::new();
    program.trace_recording(probe_inputs, &probe_host, s, &mut probed)?;
    Ok(seen == probed)
}

/// The inputs and host binding of the same run with a past one longer: lazy zeros for the
/// arrays; the host-read values extended by repeating their last entry along the grown dims
/// (an attention mask of ones stays ones). `None` when that run would not be in the decode
/// layout with the same key.
fn longer_past(
    program: &Program,
    key: &DecodeKey,
    inputs: &[Array],
    host: &HostBinding,
    shapes: &[Vec<i64>],
    s: &Stream,
) -> Result<Option<(Vec<Array>, HostBinding)>, RuntimeError> {
    let plan = &program.plan;
    let mut grown: Vec<Vec<i64>> = shapes.to_vec();
    for &(i, d) in &key.varying {
        grown[i][d] += 1;
    }
    let probe_inputs = inputs
        .iter()
        .zip(&grown)
        .map(|(a, shape)| {
            let shape = crate::dims_i32(shape)?;
            ops::zeros(&shape, a.dtype(), s).map_err(RuntimeError::from)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let value_of = |i: usize| -> Option<TensorData> {
        let slot = plan.inputs.get(i)?.slot;
        let value = plan::HostValues::value(host, slot).cloned()?;
        let dims: Vec<usize> = key
            .varying
            .iter()
            .filter(|(input, _)| *input == i)
            .map(|(_, d)| *d)
            .collect();
        dims.iter().try_fold(value, |t, &d| repeat_last(&t, d))
    };
    // A host program that fails on the longer past (a hostile graph) just means no closure.
    let Ok(probe_host) = program.host_binding(&grown, &value_of) else {
        return Ok(None);
    };
    let probe_key = plan.decode_key(&grown, &probe_host);
    Ok((probe_key.as_ref() == Some(key)).then_some((probe_inputs, probe_host)))
}

/// `t` one longer along `axis`, the new entries copied from the last ones.
fn repeat_last(t: &TensorData, axis: usize) -> Option<TensorData> {
    let size = t.dtype.size_in_bytes()?;
    let n = *t.dims.get(axis)? as usize;
    if n == 0 {
        return None;
    }
    let inner: usize = t.dims[axis + 1..].iter().product::<i64>() as usize * size;
    let outer: usize = t.dims[..axis].iter().product::<i64>() as usize;
    let mut bytes = Vec::with_capacity(t.bytes.len() + outer * inner);
    for o in 0..outer {
        let row = &t.bytes[o * n * inner..(o + 1) * n * inner];
        bytes.extend_from_slice(row);
        bytes.extend_from_slice(&row[(n - 1) * inner..]);
    }
    let mut dims = t.dims.clone();
    dims[axis] += 1;
    TensorData::new(t.dtype, dims, bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeat_last_grows_one_axis() {
        let t = TensorData::from_i64(vec![2, 3], &[1, 2, 3, 4, 5, 6]);
        let g = repeat_last(&t, 1).unwrap();
        assert_eq!(g.dims, vec![2, 4]);
        assert_eq!(g.to_i64_vec().unwrap(), vec![1, 2, 3, 3, 4, 5, 6, 6]);
        let g = repeat_last(&t, 0).unwrap();
        assert_eq!(g.to_i64_vec().unwrap(), vec![1, 2, 3, 4, 5, 6, 4, 5, 6]);
        assert!(repeat_last(&TensorData::from_i64(vec![0], &[]), 0).is_none());
    }
}
