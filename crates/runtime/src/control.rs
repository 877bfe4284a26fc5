//! Steps that run sub-plans: a branch chosen on the host, a body repeated with its carried
//! values kept as device arrays, and a body traced inline once per index of a scanned axis.
//! Generic over the sub-plans' contents.

use std::sync::Arc;

use mlx::{Array, Stream, ops};
use onnx_ir::TensorData;
use plan::step::ScanAxis;
use plan::{Slot, Step};

use crate::compiled::SlotChoice;
use crate::dtype::{to_mlx, to_onnx};
use crate::interpreter::{Slots, read_ints};
use crate::{HostBinding, Program, RuntimeError};

/// How many iterations a repeated body runs before its carried values are evaluated (so the
/// lazy graph stays shallow when nothing else synchronises).
const EVAL_EVERY: i64 = 32;

fn err(e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError(e.to_string())
}

fn shape_i64(a: &Array) -> Vec<i64> {
    a.shape().into_iter().map(i64::from).collect()
}

/// The one value of a scalar (or one-element) integer or bool slot.
fn scalar(slots: &Slots, slot: Slot, what: &str) -> Result<i64, RuntimeError> {
    match read_ints(slots, slot)?.as_slice() {
        [v] => Ok(*v),
        v => Err(RuntimeError(format!(
            "{what} has {} elements, expected one",
            v.len()
        ))),
    }
}

/// An array's value as a host tensor (evaluates it).
fn host_tensor(a: &Array, s: &Stream) -> Option<TensorData> {
    let a = a.to_contiguous(s).ok()?;
    a.eval().ok()?;
    let dtype = to_onnx(a.dtype())?;
    TensorData::new(dtype, shape_i64(&a), a.as_bytes().ok()?.to_vec()).ok()
}

/// Runs a sub-program on `inputs` (in its plan's input order), returning its outputs: through
/// its compiled closure for these input shapes when the session compiles and the body allows
/// it, else eagerly.
fn call(prog: &Arc<Program>, inputs: Vec<Array>, s: &Stream) -> Result<Vec<Array>, RuntimeError> {
    if inputs.len() != prog.plan.inputs.len() {
        return Err(RuntimeError(format!(
            "a body takes {} inputs, {} were given",
            prog.plan.inputs.len(),
            inputs.len()
        )));
    }
    let shapes: Vec<Vec<i64>> = inputs.iter().map(shape_i64).collect();
    let value_of = |i: usize| inputs.get(i).and_then(|a| host_tensor(a, s));
    let host = prog.host_binding(&shapes, &value_of)?;
    let compiled = match prog.body_cache() {
        Some((cache, device)) => {
            let mut cache = cache.lock();
            match cache.slot_for(prog, &shapes, &host) {
                // A body's closure is keyed by its input shapes (no decode path for bodies).
                Some(choice @ SlotChoice::Keyed(..)) => {
                    Some(cache.run(choice, prog, *device, &inputs, host.clone())?)
                }
                _ => None,
            }
        }
        None => None,
    };
    let mut outs = match compiled {
        Some(outs) => {
            log::trace!("a body ran through its compiled closure");
            outs
        }
        None => prog.trace(inputs, &host, None, s)?,
    };
    if prog.has_status() {
        let status = outs
            .pop()
            .ok_or_else(|| err("a guarded body lost its status"))?;
        status.eval()?;
        prog.check_status(&status)?;
    }
    Ok(outs)
}

/// Executes a step holding sub-plans (`subs`, its sub-plans' programs) of `outer`.
pub(crate) fn run(
    outer: &Program,
    step: &Step,
    subs: &[Arc<Program>],
    slots: &mut Slots,
    s: &Stream,
) -> Result<(), RuntimeError> {
    match step {
        Step::Branch {
            cond,
            then_args,
            else_args,
            outs,
            ..
        } => {
            let (prog, args) = if scalar(slots, *cond, "the condition")? != 0 {
                (&subs[0], then_args)
            } else {
                (&subs[1], else_args)
            };
            let inputs = args
                .iter()
                .map(|a| slots.get(*a).cloned())
                .collect::<Result<Vec<_>, _>>()?;
            let results = call(prog, inputs, s)?;
            if results.len() != outs.len() {
                return Err(err("a branch gave the wrong number of outputs"));
            }
            for (o, r) in outs.iter().zip(results) {
                slots.set(*o, r);
            }
            Ok(())
        }
        Step::Repeat { inline: true, .. } => inline_repeat(step, &subs[0], slots, s),
        Step::Repeat {
            counted,
            max_trips,
            cond,
            carried,
            scanned,
            scan_in,
            args,
            scan_out,
            empty_shapes,
            outs,
            ..
        } => {
            let prog = &subs[0];
            let limit = match max_trips {
                Some(m) => Some(scalar(slots, *m, "the trip count")?),
                None => None,
            };
            let mut go = match cond {
                Some(c) => scalar(slots, *c, "the condition")? != 0,
                None => true,
            };
            let mut values = carried
                .iter()
                .map(|a| slots.get(*a).cloned())
                .collect::<Result<Vec<_>, _>>()?;
            let outer_args = args
                .iter()
                .map(|a| slots.get(*a).cloned())
                .collect::<Result<Vec<_>, _>>()?;
            let (sliced, length) = scanned_inputs(slots, scanned, scan_in)?;
            let limit = match (limit, length) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // A body that returns its continue flag unchanged needs no host read of it.
            let passes_cond = *counted
                && prog.plan.inputs.get(1).map(|i| i.slot) == prog.plan.outputs.first().copied();
            let n = values.len();
            let mut stacked: Vec<Vec<Array>> = vec![Vec::new(); scan_out.len()];
            let mut i: i64 = 0;
            while go && limit.is_none_or(|l| i < l) {
                let mut inputs = Vec::with_capacity(prog.plan.inputs.len());
                if *counted {
                    inputs.push(Array::scalar(i)?);
                    inputs.push(Array::scalar(true)?);
                }
                inputs.extend(values.iter().cloned());
                for x in &sliced {
                    let index = Array::scalar(x.index(i, length.unwrap_or_default()) as i32)?;
                    inputs.push(ops::take_axis(&x.array, &index, x.axis as i32, s)?);
                }
                inputs.extend(outer_args.iter().cloned());
                let results = call(prog, inputs, s)?;
                let mut rest = results.into_iter();
                if *counted {
                    let flag = rest
                        .next()
                        .ok_or_else(|| err("the body gave no condition"))?;
                    if !passes_cond {
                        flag.eval()?;
                        go = match flag.to_vec::<bool>()?.as_slice() {
                            [v] => *v,
                            v => {
                                return Err(RuntimeError(format!(
                                    "the body's condition has {} elements, expected one",
                                    v.len()
                                )));
                            }
                        };
                    }
                }
                values = rest.by_ref().take(n).collect();
                if values.len() != n {
                    return Err(err("the body gave too few carried values"));
                }
                for (k, v) in rest.enumerate() {
                    stacked
                        .get_mut(k)
                        .ok_or_else(|| err("the body gave too many outputs"))?
                        .push(v);
                }
                i += 1;
                if i % EVAL_EVERY == 0 {
                    mlx::eval(&values.iter().collect::<Vec<_>>())?;
                }
            }
            for (o, v) in outs.iter().zip(values) {
                slots.set(*o, v);
            }
            for (k, (per_iter, how)) in stacked.into_iter().zip(scan_out).enumerate() {
                let out = outs[n + k];
                let value = if per_iter.is_empty() {
                    let mut shape = empty_shapes.get(k).cloned().unwrap_or_default();
                    let axis = how.resolve(shape.len() + 1).map_err(err)?;
                    shape.insert(axis, 0);
                    let shape: Vec<i32> = shape.iter().map(|&d| d as i32).collect();
                    ops::zeros(&shape, to_mlx(outer.plan.dtype(out))?, s)?
                } else {
                    stack(per_iter, how, s)?
                };
                slots.set(out, value);
            }
            Ok(())
        }
        _ => Err(err("not a step with sub-plans")),
    }
}

/// `a[.., i, ..]` along `axis`, that axis removed.
fn slice_at(a: &Array, axis: usize, i: i64, s: &Stream) -> Result<Array, RuntimeError> {
    let mut start = vec![0i32; a.ndim()];
    let mut stop = a.shape();
    start[axis] = i as i32;
    stop[axis] = i as i32 + 1;
    let y = ops::slice(a, &start, &stop, &vec![1; a.ndim()], s)?;
    Ok(ops::squeeze_axes(&y, &[axis as i32], s)?)
}

/// Traces a body inline on `inputs` (inside the enclosing closure when `slots` belongs to
/// one); a guarded body's status raises the enclosing step's flag.
fn trace_inline(
    prog: &Program,
    inputs: Vec<Array>,
    slots: &mut Slots,
    s: &Stream,
) -> Result<Vec<Array>, RuntimeError> {
    let host = HostBinding::default();
    let mut outs = prog.trace(inputs, &host, slots.in_closure.then(Vec::new), s)?;
    if prog.has_status() {
        let status = outs
            .pop()
            .ok_or_else(|| err("a guarded body lost its status"))?;
        let ok = ops::equal(&status, &Array::scalar(-1i32)?, s)?;
        slots.flags.require(&ok, s)?;
    }
    Ok(outs)
}

/// A scanned input with its resolved axis and direction.
struct Scanned {
    array: Array,
    axis: usize,
    reverse: bool,
}

impl Scanned {
    /// The index iteration `i` of `len` reads.
    fn index(&self, i: i64, len: i64) -> i64 {
        if self.reverse { len - 1 - i } else { i }
    }
}

/// The scanned inputs of a repeat with their axes, and their common length (`None`: none).
fn scanned_inputs(
    slots: &Slots,
    scanned: &[Slot],
    scan_in: &[ScanAxis],
) -> Result<(Vec<Scanned>, Option<i64>), RuntimeError> {
    let mut sliced = Vec::with_capacity(scanned.len());
    let mut length: Option<i64> = None;
    for (x, how) in scanned.iter().zip(scan_in) {
        let array = slots.get(*x)?.clone();
        let axis = how.resolve(array.ndim()).map_err(err)?;
        let len = i64::from(array.shape()[axis]);
        if length.is_some_and(|l| l != len) {
            return Err(RuntimeError(format!(
                "scanned inputs differ in length along their axes ({} vs {len})",
                length.unwrap_or_default()
            )));
        }
        length = Some(len);
        let reverse = how.reverse;
        sliced.push(Scanned {
            array,
            axis,
            reverse,
        });
    }
    Ok((sliced, length))
}

/// One output per iteration stacked along its axis (the last iteration first when `reverse`).
fn stack(per_iter: Vec<Array>, how: &ScanAxis, s: &Stream) -> Result<Array, RuntimeError> {
    let first = per_iter
        .first()
        .ok_or_else(|| err("no iteration to stack"))?;
    let axis = how.resolve(first.ndim() + 1).map_err(err)?;
    let mut refs: Vec<&Array> = per_iter.iter().collect();
    if how.reverse {
        refs.reverse();
    }
    Ok(ops::stack(&refs, axis as i32, s)?)
}

/// Runs an inline [`Step::Repeat`]: its body traced into the enclosing program once per index
/// of the scanned axis.
fn inline_repeat(
    step: &Step,
    prog: &Program,
    slots: &mut Slots,
    s: &Stream,
) -> Result<(), RuntimeError> {
    let Step::Repeat {
        counted: false,
        max_trips: None,
        cond: None,
        carried,
        scanned,
        scan_in,
        args,
        scan_out,
        outs,
        ..
    } = step
    else {
        return Err(err(
            "an inline repeat is counted or has a trip count or condition",
        ));
    };
    if !prog.plan.host.is_empty() || !prog.host_read_slots.is_empty() {
        return Err(err("an inline repeat's body reads values on the host"));
    }
    let get = |slots: &Slots, v: &[Slot]| {
        v.iter()
            .map(|a| slots.get(*a).cloned())
            .collect::<Result<Vec<_>, _>>()
    };
    let mut values = get(slots, carried)?;
    let outer_args = get(slots, args)?;
    let (sliced, length) = scanned_inputs(slots, scanned, scan_in)?;
    let length = length.ok_or_else(|| err("an inline repeat has no scanned input"))?;
    let n = values.len();
    let mut stacked: Vec<Vec<Array>> = vec![Vec::with_capacity(length as usize); scan_out.len()];
    for i in 0..length {
        let mut inputs = std::mem::take(&mut values);
        for x in &sliced {
            inputs.push(slice_at(&x.array, x.axis, x.index(i, length), s)?);
        }
        inputs.extend(outer_args.iter().cloned());
        let mut results = trace_inline(prog, inputs, slots, s)?;
        if results.len() != n + scan_out.len() {
            return Err(err("the body gave the wrong number of outputs"));
        }
        for (k, v) in results.drain(n..).enumerate() {
            stacked[k].push(v);
        }
        values = results;
    }
    let mut joined = Vec::with_capacity(scan_out.len());
    if length == 0 {
        // The shapes one iteration's outputs would have: the body traced, never evaluated.
        let mut inputs = values.clone();
        for x in &sliced {
            let mut shape = x.array.shape();
            shape.remove(x.axis);
            inputs.push(ops::zeros(&shape, x.array.dtype(), s)?);
        }
        inputs.extend(outer_args.iter().cloned());
        let host = HostBinding::default();
        let results = prog.trace(inputs, &host, slots.in_closure.then(Vec::new), s)?;
        for (k, how) in scan_out.iter().enumerate() {
            let one = results
                .get(n + k)
                .ok_or_else(|| err("the body gave too few outputs"))?;
            let mut shape = one.shape();
            let axis = how.resolve(shape.len() + 1).map_err(err)?;
            shape.insert(axis, 0);
            joined.push(ops::zeros(&shape, one.dtype(), s)?);
        }
    } else {
        for (per_iter, how) in stacked.into_iter().zip(scan_out) {
            joined.push(stack(per_iter, how, s)?);
        }
    }
    if outs.len() != n + joined.len() {
        return Err(err("an inline repeat has the wrong number of outputs"));
    }
    for (o, v) in outs.iter().zip(values.into_iter().chain(joined)) {
        slots.set(*o, v);
    }
    Ok(())
}
