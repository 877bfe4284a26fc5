//! Control flow: `If`, `Loop`, `Scan`. Each body is lowered into a plan of its own (a
//! [`SubPlan`]); values the body reads from enclosing scopes become its trailing inputs (or
//! constants, when they are known at plan time), nested bodies included. A node is claimed
//! only when every body lowers, so claimed and runnable agree.

use onnx_ir::{Attribute, DataType, Dim, Graph, Node, TensorData, ValueInfo};

use super::{MAX, attr_int, attr_ints};
use crate::host::HostProgram;
use crate::plan::{LowerCtx, NodeSpan, Plan, PlanError, PlanInput, SlotInfo, build_plan, invalid};
use crate::registry::{ClaimCtx, Decline, Registry};
use crate::step::{ReshapeTarget, ScanAxis, ShapeSource, Slot, Step, SubPlan};

/// The most iterations of a Loop with a constant trip count that are unrolled into the
/// enclosing plan (so it can compile as one closure), and the most steps the copies may add.
const MAX_UNROLL_TRIPS: i64 = 16;
const MAX_UNROLL_STEPS: usize = 512;

/// Copies the steps of `sub` into the enclosing plan with its inputs bound to `inputs`; returns
/// the slots of its outputs. `None` (nothing emitted) when `sub` has a host program, which
/// binds values from its own input shapes.
fn inline(ctx: &mut LowerCtx, sub: &Plan, inputs: &[Slot]) -> Result<Option<Vec<Slot>>, PlanError> {
    if !sub.host.is_empty() || sub.inputs.len() != inputs.len() {
        return Ok(None);
    }
    let mut map: Vec<Option<Slot>> = vec![None; sub.num_slots];
    for (pi, s) in sub.inputs.iter().zip(inputs) {
        map[pi.slot.index()] = Some(*s);
    }
    for (slot, t) in &sub.constants {
        map[slot.index()] = Some(ctx.constant(t.clone()));
    }
    let mut missing = None;
    for step in &sub.steps {
        let mut st = step.clone();
        st.map_inputs(&mut |s| match map[s.index()] {
            Some(m) => *s = m,
            None => missing = Some(*s),
        });
        if let Some(s) = missing {
            return Err(PlanError::Invalid {
                node: sub
                    .nodes
                    .first()
                    .map(|n| n.name.clone())
                    .unwrap_or_default(),
                reason: format!("inlining a body: slot {s:?} is read before it is written"),
            });
        }
        st.map_outputs(&mut |s| {
            let fresh = ctx.temp(sub.dtype(*s));
            map[s.index()] = Some(fresh);
            *s = fresh;
        });
        ctx.push(st);
    }
    sub.outputs
        .iter()
        .map(|o| {
            map[o.index()].ok_or_else(|| PlanError::Invalid {
                node: String::new(),
                reason: format!("inlining a body: output {o:?} is never written"),
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The value of a constant boolean or integer scalar input, when known at plan time.
fn const_scalar(ctx: &LowerCtx, node: &Node, i: usize) -> Option<i64> {
    match ctx.const_input(node, i)?.to_i64_vec()?.as_slice() {
        [v] => Some(*v),
        _ => None,
    }
}

/// Registers the control-flow ops.
pub fn register(r: &mut Registry) {
    r.op("", "If", 1, MAX, claim_if, lower_if)
        .notes("the condition is read on the host; each branch is a plan of its own");
    r.op("", "Loop", 11, MAX, claim_loop, lower_loop)
        .notes("tensor loop-carried values only (no sequences or optionals); runs eagerly");
    r.op("", "Scan", 8, 8, claim_scan8, lower_scan8)
        .notes("opset 8's batched form without sequence_lens; runs eagerly");
    r.op("", "Scan", 9, MAX, claim_scan, lower_scan)
        .notes("runs eagerly");
}

/// Where an outer-scope value of a body comes from.
enum Outer {
    /// Known at plan time: copied into the body as an initializer.
    Const(TensorData),
    /// Computed at run time: passed to the body as an input of this type.
    Value(ValueInfo),
}

/// The graph attribute `name` of `node`.
fn body<'n>(node: &'n Node, name: &str) -> Result<&'n Graph, String> {
    match node.attributes.get(name) {
        Some(Attribute::Graph(g)) => Ok(g),
        Some(Attribute::Unsupported(why)) => Err(format!(
            "{}: attribute '{name}' could not be read ({why})",
            node.op_type
        )),
        Some(a) => Err(format!(
            "{}: attribute '{name}' is {}, expected GRAPH",
            node.op_type,
            a.kind()
        )),
        None => Err(format!("{}: attribute '{name}' is missing", node.op_type)),
    }
}

/// The body as a self-contained graph: its formal inputs (with `formal` filling element types
/// the body leaves out), then one input per outer value it reads at run time; outer constants
/// become initializers; the outer opsets fill the ones it doesn't import. Returns the graph and
/// the outer values passed as inputs, in order.
fn closed_body(
    node: &Node,
    name: &str,
    body: &Graph,
    outer: &Graph,
    formal: &[Option<DataType>],
    lookup: &dyn Fn(&str) -> Option<Outer>,
) -> Result<(Graph, Vec<String>), String> {
    let op = &node.op_type;
    if body.inputs.len() != formal.len() {
        return Err(format!(
            "{op}: body '{name}' has {} input(s), the node needs {}",
            body.inputs.len(),
            formal.len()
        ));
    }
    let mut g = body.clone();
    for (k, v) in &outer.opset_imports {
        g.opset_imports.entry(k.clone()).or_insert(*v);
    }
    for (vi, dt) in g.inputs.iter_mut().zip(formal) {
        match (vi.dtype, dt) {
            (None, Some(dt)) => vi.dtype = Some(*dt),
            (Some(have), Some(want)) if have != *want => {
                return Err(format!(
                    "{op}: body '{name}' input '{}' is {have}, the node passes {want}",
                    vi.name
                ));
            }
            (None, None) => {
                return Err(format!(
                    "{op}: body '{name}' input '{}' is not a tensor of known type (sequences and \
                     optionals are not claimed)",
                    vi.name
                ));
            }
            _ => {}
        }
    }
    let mut passed = Vec::new();
    for r in body.outer_references() {
        match lookup(&r) {
            Some(Outer::Const(t)) => {
                g.initializers.insert(r, t);
            }
            Some(Outer::Value(mut vi)) => {
                if vi.dtype.is_none() {
                    return Err(format!(
                        "{op}: body '{name}' reads outer value '{r}', which is not a tensor of \
                         known type"
                    ));
                }
                vi.name = r.clone();
                g.inputs.push(vi);
                passed.push(r);
            }
            None => {
                return Err(format!(
                    "{op}: body '{name}' reads '{r}', which no enclosing scope defines"
                ));
            }
        }
    }
    Ok((g, passed))
}

/// Outer values as a claim sees them.
fn claim_lookup<'a>(cx: &'a ClaimCtx<'a>) -> impl Fn(&str) -> Option<Outer> + 'a {
    move |name: &str| {
        if let Some(t) = cx.constant(name) {
            return Some(Outer::Const(t.clone()));
        }
        let declared = cx.graph.value(name);
        let known = declared.is_some()
            || cx
                .graph
                .nodes
                .iter()
                .any(|n| n.outputs.iter().any(|o| o == name));
        known.then(|| {
            Outer::Value(ValueInfo {
                name: name.to_string(),
                dtype: cx.dtype(name),
                shape: declared.and_then(|v| v.shape),
            })
        })
    }
}

/// Checks that body `name` lowers (as a claim), returning its plan's output dtypes.
fn claim_body(
    cx: &ClaimCtx,
    node: &Node,
    name: &str,
    formal: &[Option<DataType>],
) -> Result<Vec<DataType>, Decline> {
    let Some(registry) = cx.registry() else {
        return Err(Decline::new(format!(
            "{}: bodies are checked only with the registry at hand",
            node.op_type
        )));
    };
    let g = body(node, name).map_err(Decline::new)?;
    let (closed, _) =
        closed_body(node, name, g, cx.graph, formal, &claim_lookup(cx)).map_err(Decline::new)?;
    let plan = build_plan(&closed, registry)
        .map_err(|e| Decline::new(format!("{}: body '{name}': {e}", node.op_type)))?;
    if plan.has_strings() {
        crate::decline!(
            "{}: body '{name}' holds string values, which live on the host only (a body runs as MLX steps)",
            node.op_type
        );
    }
    Ok(plan.outputs.iter().map(|s| plan.dtype(*s)).collect())
}

/// Lowers body `name` into a sub-plan, returning it with the outer slots it reads.
fn lower_body(
    ctx: &mut LowerCtx,
    node: &Node,
    name: &str,
    formal: &[Option<DataType>],
) -> Result<(SubPlan, Vec<Slot>, Graph), PlanError> {
    let Some(registry) = ctx.registry() else {
        invalid!(node, "bodies are lowered only with the registry at hand");
    };
    let g = body(node, name).map_err(|reason| PlanError::Invalid {
        node: node.name.clone(),
        reason,
    })?;
    let lookup = |r: &str| -> Option<Outer> {
        if let Some(t) = ctx.known().get(r) {
            return Some(Outer::Const(t.clone()));
        }
        let dtype = ctx.dtype_of(r)?;
        Some(Outer::Value(ValueInfo {
            name: r.to_string(),
            dtype: Some(dtype),
            shape: ctx.shape_of(r),
        }))
    };
    let (closed, passed) =
        closed_body(node, name, g, ctx.graph(), formal, &lookup).map_err(|reason| {
            PlanError::Invalid {
                node: node.name.clone(),
                reason,
            }
        })?;
    let plan = build_plan(&closed, registry).map_err(|e| PlanError::Invalid {
        node: node.name.clone(),
        reason: format!("body '{name}': {e}"),
    })?;
    if plan.inputs.len() != formal.len() + passed.len() {
        invalid!(
            node,
            "body '{name}': its plan has {} input(s), expected {}",
            plan.inputs.len(),
            formal.len() + passed.len()
        );
    }
    let args = passed
        .iter()
        .map(|r| ctx.value(r))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((
        SubPlan {
            plan: Box::new(plan),
            formal_inputs: formal.len(),
        },
        args,
        closed,
    ))
}

/// The dtype of optional input `i` when present (a decline when present but of unknown type).
fn opt_dtype(cx: &ClaimCtx, node: &Node, i: usize) -> Result<Option<DataType>, Decline> {
    match node.input(i) {
        None => Ok(None),
        Some(_) => cx.input_dtype(node, i).map(Some),
    }
}

// ---------------------------------------------------------------------------------------------
// If

fn claim_if(cx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    cx.expect_dtype(node, 0, &[DataType::Bool])?;
    let then_types = claim_body(cx, node, "then_branch", &[])?;
    let else_types = claim_body(cx, node, "else_branch", &[])?;
    if then_types.len() != node.outputs.len() || else_types.len() != node.outputs.len() {
        return Err(Decline::new(format!(
            "If: the branches have {} and {} outputs, the node {}",
            then_types.len(),
            else_types.len(),
            node.outputs.len()
        )));
    }
    if then_types != else_types {
        return Err(Decline::new(format!(
            "If: the branches' output types differ ({then_types:?} vs {else_types:?})"
        )));
    }
    Ok(())
}

fn lower_if(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let (then_body, then_args, then_graph) = lower_body(ctx, node, "then_branch", &[])?;
    let (else_body, else_args, else_graph) = lower_body(ctx, node, "else_branch", &[])?;
    let n = node.outputs.len();
    // A condition known at plan time: the chosen branch's steps join the enclosing plan.
    if let Some(c) = const_scalar(ctx, node, 0) {
        let (body, args) = if c != 0 {
            (&then_body, &then_args)
        } else {
            (&else_body, &else_args)
        };
        if body.plan.outputs.len() == n
            && let Some(outs) = inline(ctx, &body.plan, args)?
        {
            for (k, o) in outs.into_iter().enumerate() {
                let dt = body.plan.dtype(body.plan.outputs[k]);
                ctx.finish(node, k, o, dt)?;
            }
            return Ok(());
        }
    }
    let cond = ctx.input(node, 0)?;
    if then_body.plan.outputs.len() != n || else_body.plan.outputs.len() != n {
        invalid!(node, "the branches' output counts differ from the node's");
    }
    if select_on_device(
        ctx,
        node,
        [
            (&then_body, &then_args, &then_graph),
            (&else_body, &else_args, &else_graph),
        ],
        cond,
    )? {
        return Ok(());
    }
    let mut outs = Vec::with_capacity(n);
    for k in 0..n {
        let dt = then_body.plan.dtype(then_body.plan.outputs[k]);
        let other = else_body.plan.dtype(else_body.plan.outputs[k]);
        if dt != other {
            invalid!(
                node,
                "output {k} is {dt} in then_branch, {other} in else_branch"
            );
        }
        outs.push(ctx.output(node, k, dt)?);
    }
    ctx.push(Step::Branch {
        cond,
        then_body,
        else_body,
        then_args,
        else_args,
        outs,
    });
    Ok(())
}

/// The most steps a branch may have to be computed along with the other one.
const MAX_SELECT_STEPS: usize = 16;

/// For a condition computed on the device (not a graph input): when both branches are a few
/// elementwise steps that cannot fail, with the same fixed output shapes declared, computes
/// both and selects each output with `where` (no host read; the plan stays compilable).
/// Returns whether it did.
fn select_on_device(
    ctx: &mut LowerCtx,
    node: &Node,
    branches: [(&SubPlan, &Vec<Slot>, &Graph); 2],
    cond: Slot,
) -> Result<bool, PlanError> {
    let Some(cond_name) = node.input(0) else {
        return Ok(false);
    };
    if ctx.graph().inputs.iter().any(|i| i.name == cond_name) {
        return Ok(false);
    }
    let cheap = |s: &Step| match s {
        Step::Unary { .. } | Step::Where { .. } | Step::AsType { .. } => true,
        Step::Binary { op, .. } => !matches!(
            op,
            crate::BinaryOp::Divide | crate::BinaryOp::FloorDivide | crate::BinaryOp::Remainder
        ),
        _ => false,
    };
    for (sub, _, _) in &branches {
        let p = &sub.plan;
        if !p.host.is_empty() || p.steps.len() > MAX_SELECT_STEPS || !p.steps.iter().all(cheap) {
            return Ok(false);
        }
    }
    let n = node.outputs.len();
    let mut shapes = Vec::with_capacity(n);
    for k in 0..n {
        let shape = |g: &Graph| g.outputs.get(k).and_then(|v| v.fixed_shape());
        match (shape(branches[0].2), shape(branches[1].2)) {
            (Some(a), Some(b)) if a == b => shapes.push(a),
            _ => return Ok(false),
        }
    }
    let mut outs = Vec::with_capacity(2);
    for (sub, args, _) in &branches {
        match inline(ctx, &sub.plan, args)? {
            Some(o) => outs.push(o),
            None => return Ok(false),
        }
    }
    let flag = ctx.temp(DataType::Bool);
    ctx.push(Step::Reshape {
        x: cond,
        target: ReshapeTarget::Fixed(Vec::new()),
        out: flag,
    });
    for (k, shape) in shapes.into_iter().enumerate() {
        let dt = branches[0].0.plan.dtype(branches[0].0.plan.outputs[k]);
        // Each side is pinned to the declared shape, so a branch that disagrees fails
        // instead of broadcasting.
        let mut sides = [Slot(0); 2];
        for (side, o) in sides.iter_mut().zip([outs[0][k], outs[1][k]]) {
            let pinned = ctx.temp(dt);
            ctx.push(Step::Reshape {
                x: o,
                target: ReshapeTarget::Fixed(shape.clone()),
                out: pinned,
            });
            *side = pinned;
        }
        let out = ctx.output(node, k, dt)?;
        ctx.push(Step::Where {
            cond: flag,
            x: sides[0],
            y: sides[1],
            out,
        });
    }
    Ok(true)
}

// ---------------------------------------------------------------------------------------------
// Loop

/// The element types of a Loop's body inputs: iteration number, condition, carried values.
fn loop_formal(dtypes: &[Option<DataType>]) -> Vec<Option<DataType>> {
    let mut v = vec![Some(DataType::Int64), Some(DataType::Bool)];
    v.extend_from_slice(dtypes);
    v
}

/// (carried count, scan-output count) of a Loop, checked against its body.
fn loop_arity(node: &Node) -> Result<(usize, usize), String> {
    let n = node.inputs.len().saturating_sub(2);
    let g = body(node, "body")?;
    if g.outputs.len() < 1 + n {
        return Err(format!(
            "Loop: the body has {} output(s), needs at least {} (condition and {n} carried)",
            g.outputs.len(),
            1 + n
        ));
    }
    let k = g.outputs.len() - 1 - n;
    if node.outputs.len() != n + k {
        return Err(format!(
            "Loop: the node has {} output(s), its body gives {n} carried and {k} scanned",
            node.outputs.len()
        ));
    }
    Ok((n, k))
}

fn claim_loop(cx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let (n, _) = loop_arity(node).map_err(Decline::new)?;
    if let Some(dt) = opt_dtype(cx, node, 0)?
        && dt != DataType::Int64
    {
        return Err(Decline::new(format!("Loop: M is {dt}, expected int64")));
    }
    if let Some(dt) = opt_dtype(cx, node, 1)?
        && dt != DataType::Bool
    {
        return Err(Decline::new(format!("Loop: cond is {dt}, expected bool")));
    }
    let mut carried = Vec::with_capacity(n);
    for i in 0..n {
        carried.push(Some(cx.input_dtype(node, 2 + i).map_err(|_| {
            Decline::new(format!(
                "Loop: loop-carried input {i} is not a tensor of known type (sequences and \
                 optionals are not claimed)"
            ))
        })?));
    }
    let out = claim_body(cx, node, "body", &loop_formal(&carried))?;
    if out.first() != Some(&DataType::Bool) {
        return Err(Decline::new("Loop: the body's first output is not bool"));
    }
    for (i, dt) in carried.iter().enumerate() {
        if out.get(1 + i) != dt.as_ref() {
            return Err(Decline::new(format!(
                "Loop: carried value {i} changes type in the body"
            )));
        }
    }
    Ok(())
}

/// The declared per-iteration shape of body output `name` (unknown dims 0), for a stacked
/// output of zero iterations.
fn empty_shape(body: &Graph, name: &str) -> Vec<i64> {
    body.value(name)
        .and_then(|v| v.shape)
        .map(|dims| {
            dims.iter()
                .map(|d| match d {
                    Dim::Fixed(v) => *v,
                    _ => 0,
                })
                .collect()
        })
        .unwrap_or_default()
}

fn lower_loop(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let (n, k) = loop_arity(node).map_err(|reason| PlanError::Invalid {
        node: node.name.clone(),
        reason,
    })?;
    let max_trips = ctx.opt_input(node, 0)?;
    let cond = ctx.opt_input(node, 1)?;
    let mut carried = Vec::with_capacity(n);
    let mut dtypes = Vec::with_capacity(n);
    for i in 0..n {
        carried.push(ctx.input(node, 2 + i)?);
        dtypes.push(Some(ctx.input_dtype(node, 2 + i)?));
    }
    let (body, args, closed) = lower_body(ctx, node, "body", &loop_formal(&dtypes))?;
    if unroll_loop(ctx, node, &body, &carried, &args, n)? {
        return Ok(());
    }
    let mut outs = Vec::with_capacity(n + k);
    for j in 0..n + k {
        let dt = body.plan.dtype(body.plan.outputs[1 + j]);
        outs.push(ctx.output(node, j, dt)?);
    }
    let empty_shapes = closed.outputs[1 + n..]
        .iter()
        .map(|v| empty_shape(&closed, &v.name))
        .collect();
    ctx.push(Step::Repeat {
        body,
        inline: false,
        counted: true,
        max_trips,
        cond,
        carried,
        scanned: Vec::new(),
        scan_in: Vec::new(),
        args,
        scan_out: vec![
            ScanAxis {
                axis: 0,
                reverse: false
            };
            k
        ],
        empty_shapes,
        outs,
    });
    Ok(())
}

/// Unrolls a Loop whose trip count is a small constant, whose initial condition is absent or
/// true and whose body returns its condition unchanged: the body's steps are copied once per
/// iteration (iteration numbers become constants) and scan outputs are stacked with a concat.
/// Returns whether it did.
fn unroll_loop(
    ctx: &mut LowerCtx,
    node: &Node,
    body: &SubPlan,
    carried: &[Slot],
    args: &[Slot],
    n: usize,
) -> Result<bool, PlanError> {
    let plan = &body.plan;
    let Some(trips) = const_scalar(ctx, node, 0) else {
        return Ok(false);
    };
    let cond_ok = node.input(1).is_none() || const_scalar(ctx, node, 1).is_some_and(|c| c != 0);
    let passes_cond = plan.inputs.get(1).map(|i| i.slot) == plan.outputs.first().copied();
    if !(1..=MAX_UNROLL_TRIPS).contains(&trips)
        || !cond_ok
        || !passes_cond
        || !plan.host.is_empty()
        || plan.steps.len() * trips as usize > MAX_UNROLL_STEPS
        || plan.steps.iter().any(|s| !s.sub_plans().is_empty())
    {
        return Ok(false);
    }
    let k = plan.outputs.len() - 1 - n;
    let mut values = carried.to_vec();
    let mut stacked: Vec<Vec<Slot>> = vec![Vec::new(); k];
    let flag = ctx.scalar(DataType::Bool, 1.0)?;
    for i in 0..trips {
        let mut inputs = vec![ctx.scalar(DataType::Int64, i as f64)?, flag];
        inputs.extend_from_slice(&values);
        inputs.extend_from_slice(args);
        let Some(outs) = inline(ctx, plan, &inputs)? else {
            return Ok(false);
        };
        values = outs[1..1 + n].to_vec();
        for (j, o) in outs[1 + n..].iter().enumerate() {
            let dt = plan.dtype(plan.outputs[1 + n + j]);
            let one = ctx.temp(dt);
            ctx.push(Step::Reshape {
                x: *o,
                target: ReshapeTarget::Unsqueeze {
                    axes: ShapeSource::Static(vec![0]),
                },
                out: one,
            });
            stacked[j].push(one);
        }
    }
    for (j, v) in values.into_iter().enumerate() {
        let dt = plan.dtype(plan.outputs[1 + j]);
        ctx.finish(node, j, v, dt)?;
    }
    for (j, parts) in stacked.into_iter().enumerate() {
        let dt = plan.dtype(plan.outputs[1 + n + j]);
        let out = ctx.output(node, n + j, dt)?;
        ctx.push(Step::Concat {
            inputs: parts,
            axis: 0,
            out,
        });
    }
    Ok(true)
}

// ---------------------------------------------------------------------------------------------
// Scan

/// A Scan's attributes, resolved.
struct ScanAttrs {
    /// State values (N).
    states: usize,
    /// Per-input slicing (M).
    scan_in: Vec<ScanAxis>,
    /// Per-output stacking (K).
    scan_out: Vec<ScanAxis>,
}

fn scan_attrs(node: &Node) -> Result<ScanAttrs, String> {
    let m =
        attr_int(node, "num_scan_inputs")?.ok_or("Scan: attribute 'num_scan_inputs' is missing")?;
    let m = usize::try_from(m).map_err(|_| format!("Scan: num_scan_inputs {m} is negative"))?;
    if m == 0 || m > node.inputs.len() {
        return Err(format!(
            "Scan: num_scan_inputs {m} does not fit the node's {} input(s)",
            node.inputs.len()
        ));
    }
    let states = node.inputs.len() - m;
    let g = body(node, "body")?;
    if g.outputs.len() < states || node.outputs.len() != g.outputs.len() {
        return Err(format!(
            "Scan: the body has {} output(s) for {states} state(s) and the node {}",
            g.outputs.len(),
            node.outputs.len()
        ));
    }
    let k = g.outputs.len() - states;
    let axes = |axes: &str, dirs: &str, count: usize| -> Result<Vec<ScanAxis>, String> {
        let a = attr_ints(node, axes)?.unwrap_or_else(|| vec![0; count]);
        let d = attr_ints(node, dirs)?.unwrap_or_else(|| vec![0; count]);
        if a.len() != count || d.len() != count {
            return Err(format!(
                "Scan: '{axes}' and '{dirs}' need {count} entries each, have {} and {}",
                a.len(),
                d.len()
            ));
        }
        a.iter()
            .zip(&d)
            .map(|(&axis, &dir)| match dir {
                0 | 1 => Ok(ScanAxis {
                    axis,
                    reverse: dir == 1,
                }),
                _ => Err(format!("Scan: direction {dir} in '{dirs}' is not 0 or 1")),
            })
            .collect()
    };
    Ok(ScanAttrs {
        states,
        scan_in: axes("scan_input_axes", "scan_input_directions", m)?,
        scan_out: axes("scan_output_axes", "scan_output_directions", k)?,
    })
}

fn claim_scan(cx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let a = scan_attrs(node).map_err(Decline::new)?;
    let mut formal = Vec::with_capacity(node.inputs.len());
    for i in 0..node.inputs.len() {
        formal.push(Some(cx.input_dtype(node, i)?));
    }
    let out = claim_body(cx, node, "body", &formal)?;
    for (i, dt) in formal.iter().take(a.states).enumerate() {
        if out.get(i) != dt.as_ref() {
            return Err(Decline::new(format!(
                "Scan: state {i} changes type in the body"
            )));
        }
    }
    Ok(())
}

fn lower_scan(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let a = scan_attrs(node).map_err(|reason| PlanError::Invalid {
        node: node.name.clone(),
        reason,
    })?;
    let mut formal = Vec::with_capacity(node.inputs.len());
    let mut inputs = Vec::with_capacity(node.inputs.len());
    for i in 0..node.inputs.len() {
        formal.push(Some(ctx.input_dtype(node, i)?));
        inputs.push(ctx.input(node, i)?);
    }
    let (body, args, closed) = lower_body(ctx, node, "body", &formal)?;
    let mut outs = Vec::with_capacity(node.outputs.len());
    for j in 0..node.outputs.len() {
        let dt = body.plan.dtype(body.plan.outputs[j]);
        outs.push(ctx.output(node, j, dt)?);
    }
    let empty_shapes = closed.outputs[a.states..]
        .iter()
        .map(|v| empty_shape(&closed, &v.name))
        .collect();
    let scanned = inputs.split_off(a.states);
    ctx.push(Step::Repeat {
        body,
        inline: false,
        counted: false,
        max_trips: None,
        cond: None,
        carried: inputs,
        scanned,
        scan_in: a.scan_in,
        args,
        scan_out: a.scan_out,
        empty_shapes,
        outs,
    });
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Scan, opset 8: every input has a batch axis first (scan inputs have time second); each batch
// element runs the opset-9 semantics. Lowered as a repeat over the batch whose body is a plan
// holding the repeat over time.

/// (states, per-scan-input direction) of an opset-8 Scan.
fn scan8_attrs(node: &Node) -> Result<(usize, Vec<bool>), String> {
    if node.input(0).is_some() {
        return Err("Scan: opset 8's sequence_lens input is not claimed".into());
    }
    let m =
        attr_int(node, "num_scan_inputs")?.ok_or("Scan: attribute 'num_scan_inputs' is missing")?;
    let m = usize::try_from(m).map_err(|_| format!("Scan: num_scan_inputs {m} is negative"))?;
    let values = node.inputs.len().saturating_sub(1);
    if m == 0 || m > values {
        return Err(format!(
            "Scan: num_scan_inputs {m} does not fit the node's {values} value input(s)"
        ));
    }
    let states = values - m;
    let dirs = attr_ints(node, "directions")?.unwrap_or_else(|| vec![0; m]);
    if dirs.len() != m || dirs.iter().any(|d| *d != 0 && *d != 1) {
        return Err(format!(
            "Scan: 'directions' needs {m} entries of 0 or 1, has {dirs:?}"
        ));
    }
    let g = body(node, "body")?;
    if g.outputs.len() < states || node.outputs.len() != g.outputs.len() {
        return Err(format!(
            "Scan: the body has {} output(s) for {states} state(s) and the node {}",
            g.outputs.len(),
            node.outputs.len()
        ));
    }
    Ok((states, dirs.iter().map(|d| *d == 1).collect()))
}

fn claim_scan8(cx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let (states, _) = scan8_attrs(node).map_err(Decline::new)?;
    let mut formal = Vec::with_capacity(node.inputs.len() - 1);
    for i in 1..node.inputs.len() {
        formal.push(Some(cx.input_dtype(node, i)?));
    }
    let out = claim_body(cx, node, "body", &formal)?;
    for (i, dt) in formal.iter().take(states).enumerate() {
        if out.get(i) != dt.as_ref() {
            return Err(Decline::new(format!(
                "Scan: state {i} changes type in the body"
            )));
        }
    }
    Ok(())
}

fn lower_scan8(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let (states, dirs) = scan8_attrs(node).map_err(|reason| PlanError::Invalid {
        node: node.name.clone(),
        reason,
    })?;
    let mut formal = Vec::with_capacity(node.inputs.len() - 1);
    let mut inputs = Vec::with_capacity(node.inputs.len() - 1);
    for i in 1..node.inputs.len() {
        formal.push(Some(ctx.input_dtype(node, i)?));
        inputs.push(ctx.input(node, i)?);
    }
    let (time_body, args, closed) = lower_body(ctx, node, "body", &formal)?;
    let k = node.outputs.len() - states;
    let out_dtypes: Vec<DataType> = time_body
        .plan
        .outputs
        .iter()
        .map(|o| time_body.plan.dtype(*o))
        .collect();
    let empty_shapes: Vec<Vec<i64>> = closed.outputs[states..]
        .iter()
        .map(|v| empty_shape(&closed, &v.name))
        .collect();
    // The per-batch-element plan: inputs (states, scan inputs, outer values), one repeat.
    let mut slots = Vec::new();
    let mut plan_inputs = Vec::new();
    let new_slot = |name: String, dtype: DataType, slots: &mut Vec<SlotInfo>| {
        slots.push(SlotInfo { name, dtype });
        Slot(slots.len() as u32 - 1)
    };
    for (vi, dt) in closed.inputs.iter().zip(
        formal.iter().map(|d| d.unwrap_or(DataType::Float)).chain(
            closed.inputs[formal.len()..]
                .iter()
                .map(|v| v.dtype.unwrap_or(DataType::Float)),
        ),
    ) {
        let slot = new_slot(vi.name.clone(), dt, &mut slots);
        plan_inputs.push(PlanInput {
            slot,
            name: vi.name.clone(),
            dtype: dt,
            shape: None,
        });
    }
    let in_slots: Vec<Slot> = plan_inputs.iter().map(|i| i.slot).collect();
    let outs: Vec<Slot> = out_dtypes
        .iter()
        .enumerate()
        .map(|(j, dt)| new_slot(format!("{}#b{j}", node.name), *dt, &mut slots))
        .collect();
    let n_values = formal.len();
    let batch_plan = Plan {
        inputs: plan_inputs,
        outputs: outs.clone(),
        output_names: outs.iter().map(|o| slots[o.index()].name.clone()).collect(),
        constants: Vec::new(),
        steps: vec![Step::Repeat {
            body: time_body,
            inline: false,
            counted: false,
            max_trips: None,
            cond: None,
            carried: in_slots[..states].to_vec(),
            scanned: in_slots[states..n_values].to_vec(),
            scan_in: dirs
                .iter()
                .map(|&reverse| ScanAxis { axis: 0, reverse })
                .collect(),
            args: in_slots[n_values..].to_vec(),
            scan_out: vec![
                ScanAxis {
                    axis: 0,
                    reverse: false
                };
                k
            ],
            empty_shapes: empty_shapes.clone(),
            outs: outs.clone(),
        }],
        num_slots: slots.len(),
        slots,
        constant_sources: Vec::new(),
        nodes: vec![NodeSpan {
            name: node.name.clone(),
            op_type: node.op_type.clone(),
            steps: 0..1,
            on_host: false,
        }],
        host: HostProgram::default(),
    };
    let mut node_outs = Vec::with_capacity(node.outputs.len());
    for (j, dt) in out_dtypes.iter().enumerate() {
        node_outs.push(ctx.output(node, j, *dt)?);
    }
    let batch = ScanAxis {
        axis: 0,
        reverse: false,
    };
    // Shapes of one batch element's outputs for an empty batch: unknown.
    let batch_empty = vec![Vec::new(); node.outputs.len()];
    ctx.push(Step::Repeat {
        body: SubPlan {
            plan: Box::new(batch_plan),
            formal_inputs: n_values,
        },
        inline: false,
        counted: false,
        max_trips: None,
        cond: None,
        carried: Vec::new(),
        scanned: inputs,
        scan_in: vec![batch; n_values],
        args,
        scan_out: vec![batch; node.outputs.len()],
        empty_shapes: batch_empty,
        outs: node_outs,
    });
    Ok(())
}
