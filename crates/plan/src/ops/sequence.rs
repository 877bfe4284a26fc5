//! Sequences and optionals: `SequenceEmpty`, `SequenceConstruct`, `SequenceInsert`,
//! `SequenceErase`, `SequenceAt`, `SequenceLength`, `SplitToSequence`, `ConcatFromSequence`,
//! `Optional`, `OptionalHasElement`, `OptionalGetElement`.
//!
//! A sequence is a plan-time list of tensor slots ([`SeqValue`]) inside one fused node, and an
//! optional tensor is either its tensor's slot or None. Neither crosses the fused node's
//! boundary: ORT's kernel API (`KernelContext_GetOutput`) makes only tensors (a sequence output
//! comes back as an empty `TensorSeq` the C API can't fill, and a None output can't be made),
//! and sequence graph inputs are not read. So a node whose sequence or optional output is a
//! graph output, or that reads a sequence made outside its fused node, is declined (claim) or
//! refused (lowering, which names the node so that partitioning drops it), and positions,
//! split sizes and element counts must be known at plan time. An `optional(tensor)` graph
//! input ([`onnx_ir::Graph::optional_inputs`]) is read by `OptionalHasElement` (the
//! `optional_has_element` host kernel: whether the run bound it) and `OptionalGetElement`
//! (its tensor; a run without one fails, as in ORT).

use onnx_ir::{DataType, Node};

use super::*;
use crate::consts::tensor_from_f64;
use crate::decline;
use crate::plan::{SeqValue, invalid};
use crate::registry::ClaimCtx;
use crate::step::{ReshapeTarget, ShapeSource, normalize_axis};

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "SequenceEmpty", 11, MAX, claim_sequence_empty, lower_sequence_empty);
    r.op("", "SequenceConstruct", 11, MAX, claim_sequence_construct, lower_sequence_construct);
    r.op("", "SequenceInsert", 11, MAX, claim_sequence_insert, lower_sequence_insert);
    r.op("", "SequenceErase", 11, MAX, claim_sequence_erase, lower_sequence_erase);
    r.op("", "SequenceAt", 11, MAX, claim_sequence_at, lower_sequence_at);
    r.op("", "SequenceLength", 11, MAX, claim_sequence_length, lower_sequence_length);
    r.op("", "SplitToSequence", 11, MAX, claim_split_to_sequence, lower_split_to_sequence);
    r.op("", "ConcatFromSequence", 11, MAX, claim_concat_from_sequence, lower_concat_from_sequence);
    r.op("", "Optional", 15, MAX, claim_optional, lower_optional);
    r.op("", "OptionalHasElement", 15, MAX, claim_optional_has_element, lower_optional_has_element);
    r.op("", "OptionalGetElement", 15, MAX, claim_optional_get_element, lower_optional_get_element);
    r.kernel(OPTIONAL_HAS_ELEMENT_KERNEL, optional_has_element_kernel);
}

/// Whether an optional graph input holds a tensor in this run.
const OPTIONAL_HAS_ELEMENT_KERNEL: &str = "optional_has_element";

/// `OptionalHasElement` of an optional graph input: input 0 the input's shape (absent when
/// the run bound none); a bool scalar.
fn optional_has_element_kernel(
    inputs: &[Option<onnx_ir::TensorData>],
    _attrs: &crate::kernel::KernelAttrs,
) -> Result<Vec<onnx_ir::TensorData>, String> {
    let present = crate::kernel::opt_input(inputs, 0).is_some();
    Ok(vec![onnx_ir::TensorData::new(
        DataType::Bool,
        vec![],
        vec![present as u8],
    )?])
}

/// Ops whose output 0 is a sequence.
const SEQ_MAKERS: &[&str] = &[
    "SequenceEmpty",
    "SequenceConstruct",
    "SequenceInsert",
    "SequenceErase",
    "SplitToSequence",
];

/// What made a non-tensor value inside the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Container {
    /// A sequence op.
    Sequence,
    /// `Optional` with an input (a present optional tensor).
    Some,
    /// `Optional` without an input (None).
    None,
    /// An optional graph input: present or absent, as the run binds it.
    Input,
}

/// The kind of container value `name` is when a sequence op or `Optional` of this graph made
/// it (through any chain of `Identity` nodes); `None` for anything else (a graph input, a
/// tensor, a value of another op).
pub(crate) fn container_source(graph: &onnx_ir::Graph, name: &str) -> Option<Container> {
    let mut name = name.to_string();
    // A DAG has at most one producer per value, so the chain is at most `nodes.len()` long.
    for _ in 0..=graph.nodes.len() {
        let node = graph
            .nodes
            .iter()
            .find(|n| n.outputs.first().map(String::as_str) == Some(name.as_str()))?;
        if !node.normalized_domain().is_empty() {
            return None;
        }
        match node.op_type.as_str() {
            op if SEQ_MAKERS.contains(&op) => return Some(Container::Sequence),
            "Optional" => {
                return Some(if node.input(0).is_some() {
                    Container::Some
                } else {
                    Container::None
                });
            }
            "Identity" => name = node.input(0)?.to_string(),
            _ => return None,
        }
    }
    None
}

/// Declines when output 0 of `node` is a graph output (a fused node returns only tensors).
pub(crate) fn container_output_stays_inside(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    if let Some(out) = node.output(0)
        && ctx.graph.outputs.iter().any(|o| o.name == out)
    {
        decline!(
            "{}: its sequence/optional output '{out}' is a graph output (a fused node can return only tensors through ORT's kernel API)",
            node.op_type
        );
    }
    Ok(())
}

/// The same check at lowering time, against the fused node's own outputs.
fn output_stays_inside(ctx: &LowerCtx, node: &Node) -> Result<(), PlanError> {
    if let Some(out) = node.output(0)
        && ctx.graph().outputs.iter().any(|o| o.name == out)
    {
        invalid!(
            node,
            "its sequence/optional output '{out}' would leave the fused node (ORT's kernel API returns only tensors)"
        );
    }
    Ok(())
}

/// Declines unless input `i` is a sequence a claimed sequence op of this graph makes.
fn seq_input(ctx: &ClaimCtx, node: &Node, i: usize) -> Result<(), Decline> {
    let Some(name) = node.input(i) else {
        decline!("{}: the sequence input {i} is missing", node.op_type);
    };
    if container_source(ctx.graph, name) != Some(Container::Sequence) {
        decline!(
            "{}: the sequence '{name}' is not made by a sequence op of this graph (sequence graph inputs are not read)",
            node.op_type
        );
    }
    Ok(())
}

/// The sequence value of input `i`, which an earlier node of this fused node made.
fn sequence_in(ctx: &LowerCtx, node: &Node, i: usize) -> Result<SeqValue, PlanError> {
    let Some(name) = node.input(i) else {
        invalid!(node, "the sequence input {i} is missing");
    };
    match ctx.sequence(name) {
        Some(s) => Ok(s.clone()),
        None => invalid!(
            node,
            "the sequence '{name}' is not made inside this fused node"
        ),
    }
}

/// Declines unless input `i`, when present, is a plan-time constant integer scalar.
fn const_position(ctx: &ClaimCtx, node: &Node, i: usize) -> Result<(), Decline> {
    let Some(name) = node.input(i) else {
        return Ok(());
    };
    ctx.expect_dtype(node, i, INDEX)?;
    match ctx.constant(name).and_then(|t| t.to_i64_vec()) {
        Some(v) if v.len() == 1 => Ok(()),
        Some(_) => decline!("{}: the position must be a scalar", node.op_type),
        None => decline!(
            "{}: the position '{name}' is not a plan-time constant",
            node.op_type
        ),
    }
}

/// The constant position input `i`, if present.
fn position(ctx: &LowerCtx, node: &Node, i: usize) -> Result<Option<i64>, PlanError> {
    if node.input(i).is_none() {
        return Ok(None);
    }
    match ctx.const_input(node, i).and_then(|t| t.to_i64_vec()) {
        Some(v) if v.len() == 1 => Ok(Some(v[0])),
        _ => invalid!(node, "the position must be a constant scalar"),
    }
}

/// Resolves position `p` (negative counts from the end) against `[-n, n + extra)`.
fn resolve(node: &Node, p: i64, n: usize, extra: usize) -> Result<usize, PlanError> {
    let n = n as i64;
    if p < -n || p >= n + extra as i64 {
        invalid!(
            node,
            "position {p} is out of range for a sequence of {n} tensors"
        );
    }
    Ok(if p < 0 { p + n } else { p } as usize)
}

fn claim_sequence_empty(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let code = attr_int(node, "dtype").or_decline()?.unwrap_or(1);
    match DataType::from_onnx(code as i32) {
        Some(dt) if DATA.contains(&dt) => {}
        _ => decline!("SequenceEmpty: dtype {code} is not claimed"),
    }
    container_output_stays_inside(ctx, node)
}

fn lower_sequence_empty(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    output_stays_inside(ctx, node)?;
    let code = attr_int(node, "dtype").or_invalid(node)?.unwrap_or(1);
    let Some(dtype) = DataType::from_onnx(code as i32) else {
        invalid!(node, "unknown dtype {code}");
    };
    ctx.set_sequence(
        node,
        0,
        SeqValue {
            dtype,
            items: Vec::new(),
        },
    );
    Ok(())
}

fn claim_sequence_construct(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    if node.inputs.is_empty() || node.inputs.iter().any(String::is_empty) {
        decline!("SequenceConstruct: needs one or more inputs");
    }
    same_dtypes(ctx, node, 0..node.inputs.len(), DATA)?;
    container_output_stays_inside(ctx, node)
}

fn lower_sequence_construct(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    output_stays_inside(ctx, node)?;
    let dtype = ctx.input_dtype(node, 0)?;
    let mut items = Vec::with_capacity(node.inputs.len());
    for i in 0..node.inputs.len() {
        items.push(ctx.input(node, i)?);
    }
    ctx.set_sequence(node, 0, SeqValue { dtype, items });
    Ok(())
}

fn claim_sequence_insert(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    seq_input(ctx, node, 0)?;
    ctx.expect_dtype(node, 1, DATA)?;
    const_position(ctx, node, 2)?;
    container_output_stays_inside(ctx, node)
}

fn lower_sequence_insert(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    output_stays_inside(ctx, node)?;
    let mut seq = sequence_in(ctx, node, 0)?;
    let dt = ctx.input_dtype(node, 1)?;
    if dt != seq.dtype {
        invalid!(
            node,
            "inserts a {dt} tensor into a sequence of {}",
            seq.dtype
        );
    }
    let n = seq.items.len();
    let at = match position(ctx, node, 2)? {
        Some(p) => resolve(node, p, n, 1)?,
        None => n,
    };
    let x = ctx.input(node, 1)?;
    seq.items.insert(at, x);
    ctx.set_sequence(node, 0, seq);
    Ok(())
}

fn claim_sequence_erase(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    seq_input(ctx, node, 0)?;
    const_position(ctx, node, 1)?;
    container_output_stays_inside(ctx, node)
}

fn lower_sequence_erase(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    output_stays_inside(ctx, node)?;
    let mut seq = sequence_in(ctx, node, 0)?;
    let n = seq.items.len();
    if n == 0 {
        invalid!(node, "erases from an empty sequence");
    }
    let at = resolve(node, position(ctx, node, 1)?.unwrap_or(-1), n, 0)?;
    seq.items.remove(at);
    ctx.set_sequence(node, 0, seq);
    Ok(())
}

fn claim_sequence_at(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    seq_input(ctx, node, 0)?;
    if node.input(1).is_none() {
        decline!("SequenceAt: the position input is missing");
    }
    const_position(ctx, node, 1)
}

fn lower_sequence_at(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let seq = sequence_in(ctx, node, 0)?;
    let Some(p) = position(ctx, node, 1)? else {
        invalid!(node, "the position input is missing");
    };
    let at = resolve(node, p, seq.items.len(), 0)?;
    ctx.alias(node, 0, seq.items[at]);
    Ok(())
}

fn claim_sequence_length(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    seq_input(ctx, node, 0)
}

fn lower_sequence_length(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let seq = sequence_in(ctx, node, 0)?;
    let Some(t) = tensor_from_f64(DataType::Int64, Vec::new(), &[seq.items.len() as f64]) else {
        invalid!(node, "internal: cannot make the length scalar");
    };
    ctx.fold(node, 0, t);
    Ok(())
}

fn claim_split_to_sequence(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA)?;
    let rank = ctx.expect_rank(node, 0)?;
    let axis = attr_int(node, "axis").or_decline()?.unwrap_or(0);
    let axis = normalize_axis(axis, rank).or_decline()?;
    let input = node.input(0).unwrap_or("");
    let dim = ctx
        .graph
        .value(input)
        .and_then(|v| v.shape)
        .and_then(|s| s.get(axis).and_then(onnx_ir::Dim::fixed))
        .or_else(|| ctx.constant(input).and_then(|t| t.dims.get(axis).copied()));
    match node.input(1) {
        Some(split) => {
            ctx.expect_dtype(node, 1, INDEX)?;
            match ctx.constant(split) {
                Some(t) if t.dims.is_empty() && dim.is_none() => decline!(
                    "SplitToSequence: a scalar split needs the size of axis {axis} at plan time"
                ),
                Some(_) => {}
                None => {
                    let fixed_len = ctx
                        .graph
                        .value(split)
                        .and_then(|v| v.fixed_shape())
                        .is_some_and(|s| s.len() == 1);
                    if !fixed_len {
                        decline!(
                            "SplitToSequence: a run-time split must be 1-D of a known length (the sequence length is fixed at plan time)"
                        );
                    }
                }
            }
        }
        None if dim.is_none() => decline!(
            "SplitToSequence: without split, the size of axis {axis} must be known at plan time"
        ),
        None => {}
    }
    container_output_stays_inside(ctx, node)
}

fn lower_split_to_sequence(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    output_stays_inside(ctx, node)?;
    let dt = ctx.input_dtype(node, 0)?;
    let rank = ctx.need_rank(node, 0)?;
    let axis = attr_int(node, "axis").or_invalid(node)?.unwrap_or(0);
    let axis = normalize_axis(axis, rank).or_invalid(node)?;
    let keepdims = attr_int(node, "keepdims").or_invalid(node)?.unwrap_or(1) != 0;
    let dim = ctx
        .shape_of(node.input(0).unwrap_or(""))
        .and_then(|s| s.get(axis).and_then(onnx_ir::Dim::fixed));
    // (sizes, count, squeeze)
    let (sizes, count, squeeze) = if node.input(1).is_some() {
        let split_rank = ctx.input_rank(node, 1);
        match ctx.const_input(node, 1).and_then(|t| t.to_i64_vec()) {
            Some(v) if split_rank == Some(0) => {
                let (Some(&s), Some(d)) = (v.first(), dim) else {
                    invalid!(node, "a scalar split needs the size of axis {axis}");
                };
                if s <= 0 {
                    invalid!(node, "split {s} must be positive");
                }
                let mut sizes = vec![s; (d / s) as usize];
                if d % s != 0 {
                    sizes.push(d % s);
                }
                let n = sizes.len();
                // ORT's CPU EP applies keepdims=0 to a scalar split too (the spec ignores it
                // there): it squeezes the axis, which works only for parts of size 1.
                if !keepdims && s != 1 {
                    invalid!(
                        node,
                        "keepdims=0 with a scalar split of {s} fails on ORT's CPU EP (it squeezes parts of size {s})"
                    );
                }
                (Some(ShapeSource::Static(sizes)), n, !keepdims)
            }
            Some(v) => {
                if v.iter().any(|&s| s < 0) {
                    invalid!(node, "split {v:?} has a negative size");
                }
                if let Some(d) = dim
                    && v.iter().sum::<i64>() != d
                {
                    invalid!(node, "split {v:?} does not sum to the axis size {d}");
                }
                let n = v.len();
                (Some(ShapeSource::Static(v)), n, false)
            }
            None => {
                let n = match ctx.input_fixed_shape(node, 1).as_deref() {
                    Some(&[n]) if n >= 0 => n,
                    _ => invalid!(node, "a run-time split must be 1-D of known length"),
                };
                let sizes = ShapeSource::Dynamic(ctx.input(node, 1)?);
                (Some(sizes), n as usize, false)
            }
        }
    } else {
        let Some(d) = dim else {
            invalid!(node, "the size of axis {axis} is not known at plan time");
        };
        (None, d as usize, !keepdims)
    };
    if count == 0 {
        invalid!(node, "the split makes an empty sequence");
    }
    let x = ctx.input(node, 0)?;
    let mut items: Vec<Slot> = (0..count).map(|_| ctx.temp(dt)).collect();
    ctx.push(Step::Split {
        x,
        axis: axis as i32,
        sizes,
        outs: items.clone(),
    });
    if squeeze {
        for item in items.iter_mut() {
            let out = ctx.temp(dt);
            ctx.push(Step::Reshape {
                x: *item,
                target: ReshapeTarget::Squeeze {
                    axes: Some(ShapeSource::Static(vec![axis as i64])),
                },
                out,
            });
            *item = out;
        }
    }
    ctx.set_sequence(node, 0, SeqValue { dtype: dt, items });
    Ok(())
}

fn claim_concat_from_sequence(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    seq_input(ctx, node, 0)?;
    if attr_int(node, "axis").or_decline()?.is_none() {
        decline!("ConcatFromSequence: the 'axis' attribute is missing");
    }
    match attr_int(node, "new_axis").or_decline()?.unwrap_or(0) {
        0 | 1 => Ok(()),
        v => decline!("ConcatFromSequence: new_axis {v} is not 0 or 1"),
    }
}

fn lower_concat_from_sequence(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let seq = sequence_in(ctx, node, 0)?;
    if seq.items.is_empty() {
        invalid!(node, "concatenates an empty sequence");
    }
    let Some(axis) = attr_int(node, "axis").or_invalid(node)? else {
        invalid!(node, "the 'axis' attribute is missing");
    };
    let new_axis = attr_int(node, "new_axis").or_invalid(node)?.unwrap_or(0) == 1;
    let mut inputs = seq.items.clone();
    if new_axis {
        for item in inputs.iter_mut() {
            let out = ctx.temp(seq.dtype);
            ctx.push(Step::Reshape {
                x: *item,
                target: ReshapeTarget::Unsqueeze {
                    axes: ShapeSource::Static(vec![axis]),
                },
                out,
            });
            *item = out;
        }
    }
    let Ok(axis) = i32::try_from(axis) else {
        invalid!(node, "axis {axis} is out of range");
    };
    let out = ctx.temp(seq.dtype);
    ctx.push(Step::Concat { inputs, axis, out });
    ctx.finish(node, 0, out, seq.dtype)
}

fn claim_optional(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    if node.input(0).is_some() {
        ctx.expect_dtype(node, 0, DATA)?;
    }
    container_output_stays_inside(ctx, node)
}

fn lower_optional(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    output_stays_inside(ctx, node)?;
    match node.input(0) {
        Some(_) => {
            let x = ctx.input(node, 0)?;
            ctx.alias(node, 0, x);
        }
        None => ctx.set_none(node, 0),
    }
    Ok(())
}

/// Declines unless input 0 is a tensor of a claimed type or an optional tensor made by
/// `Optional` inside the graph (optional graph inputs are not read).
fn optional_input(ctx: &ClaimCtx, node: &Node) -> Result<Option<Container>, Decline> {
    let Some(name) = node.input(0) else {
        return Ok(None);
    };
    match container_source(ctx.graph, name) {
        Some(Container::Sequence) => {
            decline!("{}: optional sequences are not claimed", node.op_type)
        }
        Some(c) => Ok(Some(c)),
        None if ctx.graph.optional_inputs.contains(name) => match ctx.dtype(name) {
            Some(dt) if DATA.contains(&dt) => Ok(Some(Container::Input)),
            _ => decline!(
                "{}: the optional input '{name}' holds a tensor of a type not claimed",
                node.op_type
            ),
        },
        None => match ctx.dtype(name) {
            Some(dt) if DATA.contains(&dt) => Ok(Some(Container::Some)),
            _ => decline!(
                "{}: '{name}' is neither a tensor of a claimed type, an optional tensor graph input, nor made by Optional in this graph (sequence graph inputs are not read)",
                node.op_type
            ),
        },
    }
}

fn claim_optional_has_element(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    if ctx.opset < 18 && node.input(0).is_none() {
        decline!("OptionalHasElement: opset {} needs an input", ctx.opset);
    }
    optional_input(ctx, node).map(|_| ())
}

fn lower_optional_has_element(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    if let Some(name) = node.input(0)
        && ctx.graph().optional_inputs.contains(name)
    {
        let x = ctx.input(node, 0)?;
        let out = ctx.host_kernel(
            node,
            OPTIONAL_HAS_ELEMENT_KERNEL,
            vec![crate::host::HostArg::ShapeOf(x)],
            crate::kernel::KernelAttrs::new(),
            &[DataType::Bool],
        )?;
        return ctx.finish(node, 0, out[0], DataType::Bool);
    }
    let present = match node.input(0) {
        None => false,
        Some(name) if ctx.is_none(name) => false,
        Some(name) => {
            // A present optional or a tensor: it must be a value of this plan.
            ctx.value(name)?;
            true
        }
    };
    let Some(t) = tensor_from_f64(DataType::Bool, Vec::new(), &[present as u8 as f64]) else {
        invalid!(node, "internal: cannot make the result scalar");
    };
    ctx.fold(node, 0, t);
    Ok(())
}

fn claim_optional_get_element(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    match optional_input(ctx, node)? {
        None => decline!("OptionalGetElement: the input is missing"),
        Some(Container::None) => {
            decline!("OptionalGetElement: the input is None (ORT fails the run)")
        }
        Some(_) => Ok(()),
    }
}

fn lower_optional_get_element(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let Some(name) = node.input(0) else {
        invalid!(node, "the input is missing");
    };
    if ctx.is_none(name) {
        invalid!(node, "the input is None");
    }
    let x = ctx.input(node, 0)?;
    ctx.alias(node, 0, x);
    Ok(())
}

/// `Identity` of a sequence or optional made inside the fused node: forwards it. Returns
/// whether input 0 was one (otherwise the caller lowers a tensor `Identity`).
pub(crate) fn forward_container(ctx: &mut LowerCtx, node: &Node) -> Result<bool, PlanError> {
    let Some(name) = node.input(0) else {
        return Ok(false);
    };
    if let Some(seq) = ctx.sequence(name).cloned() {
        output_stays_inside(ctx, node)?;
        ctx.set_sequence(node, 0, seq);
        return Ok(true);
    }
    if ctx.is_none(name) {
        output_stays_inside(ctx, node)?;
        ctx.set_none(node, 0);
        return Ok(true);
    }
    Ok(false)
}
