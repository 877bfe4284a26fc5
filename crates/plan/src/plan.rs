//! The plan: slots, constants, steps; and the builder that lowers a fused cluster into one.

use std::collections::HashMap;
use std::fmt;

use onnx_ir::{DataType, Dim, Graph, IrError, Node, TensorData};

use crate::host::{HOST_OPS, HostNode, HostProgram, host_dtype};
use crate::registry::{ClaimCtx, Registry};
use crate::step::{ShapeSource, Slot, Step, SubPlan};

/// A graph input of the plan: the runtime binds the ORT input array to `slot`.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PlanInput {
    /// The slot the input array is bound to.
    pub slot: Slot,
    /// The ONNX value name.
    pub name: String,
    /// The element type.
    pub dtype: DataType,
    /// The declared shape, when its rank is known.
    pub shape: Option<Vec<Dim>>,
}

/// What the planner knows about a slot, for diagnostics and snapshots.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SlotInfo {
    /// The ONNX value name it holds, or a synthetic name for temporaries.
    pub name: String,
    /// Its element type.
    pub dtype: DataType,
}

/// Which steps one ONNX node became (for diagnostics and snapshots).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct NodeSpan {
    /// Node name.
    pub name: String,
    /// Op type.
    pub op_type: String,
    /// Indices into `Plan::steps`; empty when the node was folded, aliased or moved to the
    /// host program.
    pub steps: std::ops::Range<usize>,
    /// True when the node runs in the host program.
    pub on_host: bool,
}

/// One reason a plan is not [`CompileClass::Shapeless`] (see [`Plan::compile_blockers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CompileBlocker {
    /// The step, or `None` for the host program.
    pub step: Option<usize>,
    /// The ONNX node's name (for the host program: its first node).
    pub node: String,
    /// The ONNX node's op type (empty for the host program).
    pub op_type: String,
    /// The most permissive class this reason allows.
    pub limits_to: CompileClass,
    /// Why, in words.
    pub reason: String,
}

impl fmt::Display for CompileBlocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.op_type.is_empty() {
            write!(f, "{:?}: {}", self.limits_to, self.reason)
        } else {
            write!(
                f,
                "{:?}: node '{}' ({}): {}",
                self.limits_to, self.node, self.op_type, self.reason
            )
        }
    }
}

/// The step's variant name (`Reshape`, `KvCache`, ...).
fn step_kind(s: &Step) -> String {
    let text = format!("{s:?}");
    text.split([' ', '{', '('])
        .next()
        .unwrap_or_default()
        .to_string()
}

/// How a plan may be compiled (`mlx_compile`) by the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum CompileClass {
    /// Every step is shape-polymorphic: one shapeless compiled closure serves all shapes.
    Shapeless,
    /// Steps resolve attributes from input shapes: compile per input-shape key.
    ShapeKeyed,
    /// Some step reads values back to the host, or draws random values: run eagerly (or split
    /// at the host reads).
    Eager,
}

/// A lowered cluster: the runtime binds inputs and constants to slots, runs the steps in
/// order, and returns the output slots' arrays.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Plan {
    /// Graph inputs, in the cluster graph's input order.
    pub inputs: Vec<PlanInput>,
    /// Slots of the graph outputs, in the cluster graph's output order.
    pub outputs: Vec<Slot>,
    /// Names of the graph outputs (parallel to `outputs`).
    pub output_names: Vec<String>,
    /// Constant arrays to create once (initializers, folded values, scalars).
    pub constants: Vec<(Slot, TensorData)>,
    /// The steps, in execution order.
    pub steps: Vec<Step>,
    /// The number of slots (every slot index is below it).
    pub num_slots: usize,
    /// Per-slot information, indexed by slot.
    pub slots: Vec<SlotInfo>,
    /// Names of the initializers each constant slot came from (`None` for synthesised ones),
    /// parallel to `constants`; lets the runtime share initializer memory across sessions.
    pub constant_sources: Vec<Option<String>>,
    /// The nodes lowered, in order, with the steps each became.
    pub nodes: Vec<NodeSpan>,
    /// Shape arithmetic the runtime evaluates on the host from input shapes before the steps
    /// (`host.run(&input_shapes)` gives `(slot, tensor)` pairs to bind); empty for most plans.
    pub host: HostProgram,
}

impl Plan {
    /// The index in [`Plan::constants`] of each constant slot.
    pub fn constant_positions(&self) -> std::collections::HashMap<Slot, usize> {
        self.constants
            .iter()
            .enumerate()
            .map(|(i, (s, _))| (*s, i))
            .collect()
    }

    /// Adds a synthesised constant (no initializer behind it) in a new slot named `name`.
    pub fn push_constant(&mut self, name: String, t: TensorData) -> Slot {
        let slot = Slot(self.num_slots as u32);
        self.num_slots += 1;
        self.slots.push(SlotInfo {
            name,
            dtype: t.dtype,
        });
        self.constants.push((slot, t));
        self.constant_sources.push(None);
        slot
    }

    /// Drops the constants that no step and no output reads (after a rewrite replaced them).
    pub fn drop_unread_constants(&mut self) {
        let read: std::collections::HashSet<Slot> = self
            .steps
            .iter()
            .flat_map(Step::inputs)
            .chain(self.outputs.iter().copied())
            .collect();
        let keep: Vec<bool> = self
            .constants
            .iter()
            .map(|(s, _)| read.contains(s))
            .collect();
        let mut k = keep.iter();
        self.constants.retain(|_| *k.next().expect("same length"));
        let mut k = keep.iter();
        self.constant_sources
            .retain(|_| *k.next().expect("same length"));
    }
}

impl Plan {
    /// The most permissive compile mode the steps allow.
    pub fn compile_class(&self) -> CompileClass {
        if self.has_strings() {
            return CompileClass::Eager;
        }
        let host_bound = self.host_known_slots();
        let mut class = if self.host.is_empty() {
            CompileClass::Shapeless
        } else {
            CompileClass::ShapeKeyed
        };
        for s in &self.steps {
            if s.runs_sub_plans_on_host()
                || s.is_random()
                || s.host_reads().iter().any(|r| !host_bound.contains(r))
                || s.sub_plans()
                    .iter()
                    .any(|b| b.plan.compile_class() == CompileClass::Eager)
            {
                return CompileClass::Eager;
            }
            if !s.is_shapeless() {
                class = CompileClass::ShapeKeyed;
            }
        }
        class
    }

    /// What keeps the plan from a more permissive compile mode: one entry per step (or for
    /// the host program) that makes it [`CompileClass::ShapeKeyed`] or
    /// [`CompileClass::Eager`], in step order, naming the ONNX node. Empty for a
    /// [`CompileClass::Shapeless`] plan. Diagnostics for "why did the decode step not compile".
    pub fn compile_blockers(&self) -> Vec<CompileBlocker> {
        let host_bound = self.host_known_slots();
        let mut out = Vec::new();
        if let Some(s) = self.slots.iter().find(|s| s.dtype == DataType::String) {
            out.push(CompileBlocker {
                step: None,
                node: s.name.clone(),
                op_type: String::new(),
                limits_to: CompileClass::Eager,
                reason: format!(
                    "string value '{}' lives on the host (MLX has no strings): the plan runs eagerly",
                    s.name
                ),
            });
        }
        if !self.host.is_empty() {
            let nodes: Vec<String> = self
                .host
                .nodes
                .iter()
                .map(|n| format!("{} ({})", n.node.name, n.node.op_type))
                .collect();
            out.push(CompileBlocker {
                step: None,
                node: nodes.first().cloned().unwrap_or_default(),
                op_type: String::new(),
                limits_to: CompileClass::ShapeKeyed,
                reason: format!(
                    "{} node(s) of shape arithmetic run on the host per input-shape set: {}",
                    nodes.len(),
                    nodes.join(", ")
                ),
            });
        }
        for (i, s) in self.steps.iter().enumerate() {
            let (node, op_type) = match self.nodes.iter().find(|n| n.steps.contains(&i)) {
                Some(n) => (n.name.clone(), n.op_type.clone()),
                None => (String::new(), String::new()),
            };
            let kind = step_kind(s);
            let device_reads: Vec<&str> = s
                .host_reads()
                .into_iter()
                .filter(|r| !host_bound.contains(r))
                .map(|r| self.slots[r.index()].name.as_str())
                .collect();
            if s.runs_sub_plans_on_host() {
                out.push(CompileBlocker {
                    step: Some(i),
                    node,
                    op_type,
                    limits_to: CompileClass::Eager,
                    reason: format!("step {kind} runs sub-plans chosen or repeated on the host"),
                });
            } else if s
                .sub_plans()
                .iter()
                .any(|b| b.plan.compile_class() == CompileClass::Eager)
            {
                out.push(CompileBlocker {
                    step: Some(i),
                    node,
                    op_type,
                    limits_to: CompileClass::Eager,
                    reason: format!("step {kind} traces a sub-plan that runs eagerly"),
                });
            } else if s.is_random() {
                out.push(CompileBlocker {
                    step: Some(i),
                    node,
                    op_type,
                    limits_to: CompileClass::Eager,
                    reason: format!("step {kind} draws new random values on every run"),
                });
            } else if !device_reads.is_empty() {
                out.push(CompileBlocker {
                    step: Some(i),
                    node,
                    op_type,
                    limits_to: CompileClass::Eager,
                    reason: format!(
                        "step {kind} reads computed value(s) {} back to the host",
                        device_reads.join(", ")
                    ),
                });
            } else if !s.is_shapeless() {
                out.push(CompileBlocker {
                    step: Some(i),
                    node,
                    op_type,
                    limits_to: CompileClass::ShapeKeyed,
                    reason: format!("step {kind} resolves its arguments from input shapes"),
                });
            }
        }
        out
    }

    /// True when a slot holds strings: such values live on the host only (host kernels read
    /// and write them, the runtime never makes an array of them), so the plan runs eagerly.
    pub fn has_strings(&self) -> bool {
        self.slots.iter().any(|s| s.dtype == DataType::String)
    }

    /// For each slot, the index of the last step reading it (`None` when no step does);
    /// output slots are never freed by the runtime regardless.
    pub fn last_uses(&self) -> Vec<Option<usize>> {
        let mut last = vec![None; self.num_slots];
        for (i, s) in self.steps.iter().enumerate() {
            for slot in s.inputs() {
                last[slot.index()] = Some(i);
            }
        }
        last
    }

    /// The dtype of a slot.
    pub fn dtype(&self, slot: Slot) -> DataType {
        self.slots[slot.index()].dtype
    }
}

impl fmt::Display for Plan {
    /// A readable listing: inputs, constants, then each node's steps, then outputs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for i in &self.inputs {
            writeln!(f, "input  {:?} {} : {}", i.slot, i.name, i.dtype)?;
        }
        for (slot, t) in &self.constants {
            write!(
                f,
                "const  {slot:?} {} : {} {:?}",
                self.slots[slot.index()].name,
                t.dtype,
                t.dims
            )?;
            if t.numel() <= 8 {
                write!(f, " = {}", ValuesDisplay(t))?;
            }
            writeln!(f)?;
        }
        let mut next = 0;
        for n in &self.nodes {
            if n.on_host {
                writeln!(f, "# {} ({}): host program", n.name, n.op_type)?;
                continue;
            }
            if n.steps.is_empty() {
                writeln!(
                    f,
                    "# {} ({}): no steps (folded or aliased)",
                    n.name, n.op_type
                )?;
                continue;
            }
            writeln!(f, "# {} ({})", n.name, n.op_type)?;
            for s in &self.steps[n.steps.clone()] {
                self.write_step(f, s)?;
            }
            next = n.steps.end;
        }
        for s in &self.steps[next.min(self.steps.len())..] {
            self.write_step(f, s)?;
        }
        for (slot, name) in self.outputs.iter().zip(&self.output_names) {
            writeln!(f, "output {slot:?} {name}")?;
        }
        for (name, slot) in &self.host.outputs {
            writeln!(f, "host   {slot:?} {name} (computed from input shapes)")?;
        }
        Ok(())
    }
}

impl Plan {
    fn write_step(&self, f: &mut fmt::Formatter<'_>, s: &Step) -> fmt::Result {
        let outs: Vec<String> = s
            .outputs()
            .iter()
            .map(|o| format!("{o:?}:{}", self.slots[o.index()].dtype))
            .collect();
        writeln!(f, "  {} = {:?}", outs.join(", "), StepBody(s))
    }
}

/// Short element listing of a small constant.
struct ValuesDisplay<'a>(&'a TensorData);

impl fmt::Display for ValuesDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.0;
        let items: Vec<String> = if t.dtype.is_float() {
            t.to_f64_vec()
                .unwrap_or_default()
                .iter()
                .map(|&v| format!("{}", v as f32))
                .collect()
        } else {
            t.to_i64_vec()
                .unwrap_or_default()
                .iter()
                .map(|v| v.to_string())
                .collect()
        };
        write!(f, "[{}]", items.join(", "))
    }
}

/// Debug of a step without its `out` field noise: the variant and its fields.
struct StepBody<'a>(&'a Step);

impl fmt::Debug for StepBody<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = format!("{:?}", self.0);
        // Drop the trailing `, out: %N` / `, outs: [...]` the listing shows on the left.
        let trimmed = match s.rfind(", out") {
            Some(p) => format!("{} }}", &s[..p]),
            None => s,
        };
        f.write_str(&trimmed)
    }
}

/// Why a cluster could not be planned.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum PlanError {
    /// A node the registry does not (or no longer) claim.
    Unsupported {
        /// Node name.
        node: String,
        /// The decline reason.
        reason: String,
    },
    /// A node whose inputs, attributes or types are invalid or inconsistent.
    Invalid {
        /// Node name.
        node: String,
        /// What is wrong.
        reason: String,
    },
    /// The graph itself is malformed.
    Graph(IrError),
    /// A graph output nothing produces.
    MissingOutput(String),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::Unsupported { node, reason } => {
                write!(f, "node '{node}' is not supported: {reason}")
            }
            PlanError::Invalid { node, reason } => write!(f, "node '{node}': {reason}"),
            PlanError::Graph(e) => write!(f, "{e}"),
            PlanError::MissingOutput(o) => write!(f, "graph output '{o}' is not produced"),
        }
    }
}

impl std::error::Error for PlanError {}

impl From<IrError> for PlanError {
    fn from(e: IrError) -> Self {
        PlanError::Graph(e)
    }
}

/// Returns an `Invalid` error for `node` with a formatted reason.
macro_rules! invalid {
    ($node:expr, $($arg:tt)*) => {
        return Err($crate::plan::PlanError::Invalid {
            node: $node.name.clone(),
            reason: format!($($arg)*),
        })
    };
}
pub(crate) use invalid;

/// The lowering context: maps ONNX values to slots and collects steps and constants.
pub struct LowerCtx<'g> {
    graph: &'g Graph,
    registry: Option<&'g Registry>,
    opset: i64,
    node_name: String,
    values: HashMap<String, Slot>,
    /// Values known on the host: initializers and folded results, by ONNX name.
    known: HashMap<String, TensorData>,
    slots: Vec<SlotInfo>,
    constants: Vec<(Slot, TensorData)>,
    constant_sources: Vec<Option<String>>,
    scalar_cache: HashMap<(DataType, u64), Slot>,
    steps: Vec<Step>,
    temp_counter: usize,
    /// Values the host program computes, with their dtypes.
    host_values: HashMap<String, DataType>,
    host: HostProgram,
    /// Outputs of integer nodes that go to the host program although they read graph input
    /// values (see [`host_read_cones`]).
    force_host: std::collections::HashSet<String>,
    /// Outputs of integer nodes that run as `HostEval` steps (see [`host_read_cones`]).
    trace_host: std::collections::HashSet<String>,
    /// Sequence-valued ONNX values (plan-time lists of tensor slots), by name.
    sequences: HashMap<String, SeqValue>,
    /// Optional values that are None, by name.
    nones: std::collections::HashSet<String>,
}

/// A sequence-valued ONNX value inside one fused node: a list of tensor slots known at plan
/// time (sequences never cross the fused node's boundary).
#[derive(Debug, Clone, PartialEq)]
pub struct SeqValue {
    /// The element type of every tensor in the sequence.
    pub dtype: DataType,
    /// The tensors, in order.
    pub items: Vec<Slot>,
}

impl<'g> LowerCtx<'g> {
    fn new(graph: &'g Graph) -> Self {
        LowerCtx {
            graph,
            registry: None,
            opset: 0,
            node_name: String::new(),
            values: HashMap::new(),
            known: HashMap::new(),
            slots: Vec::new(),
            constants: Vec::new(),
            constant_sources: Vec::new(),
            scalar_cache: HashMap::new(),
            steps: Vec::new(),
            temp_counter: 0,
            host_values: HashMap::new(),
            host: HostProgram::default(),
            force_host: Default::default(),
            trace_host: Default::default(),
            sequences: HashMap::new(),
            nones: Default::default(),
        }
    }

    /// The sequence value `name`, when an earlier node of this plan made it.
    pub fn sequence(&self, name: &str) -> Option<&SeqValue> {
        self.sequences.get(name)
    }

    /// Binds output `i` of `node` to a sequence value.
    pub fn set_sequence(&mut self, node: &Node, i: usize, seq: SeqValue) {
        if let Some(name) = node.output(i) {
            self.sequences.insert(name.to_string(), seq);
        }
    }

    /// True when `name` is an optional value that an earlier node of this plan made None.
    pub fn is_none(&self, name: &str) -> bool {
        self.nones.contains(name)
    }

    /// Binds output `i` of `node` to a None optional value.
    pub fn set_none(&mut self, node: &Node, i: usize) {
        if let Some(name) = node.output(i) {
            self.nones.insert(name.to_string());
        }
    }

    /// The graph being lowered.
    pub fn graph(&self) -> &'g Graph {
        self.graph
    }

    /// The registry lowering this graph (for ops whose bodies are plans of their own).
    pub fn registry(&self) -> Option<&'g Registry> {
        self.registry
    }

    /// The opset version in effect for the current node.
    pub fn opset(&self) -> i64 {
        self.opset
    }

    fn new_slot(&mut self, name: String, dtype: DataType) -> Slot {
        let s = Slot(self.slots.len() as u32);
        self.slots.push(SlotInfo { name, dtype });
        s
    }

    /// A fresh temporary slot of `dtype`.
    pub fn temp(&mut self, dtype: DataType) -> Slot {
        self.temp_counter += 1;
        let name = format!("{}#t{}", self.node_name, self.temp_counter);
        self.new_slot(name, dtype)
    }

    /// Appends a step.
    pub fn push(&mut self, step: Step) {
        self.steps.push(step);
    }

    /// Appends the step `make` builds around a fresh temporary of `dtype`; returns that slot.
    pub fn emit(&mut self, dtype: DataType, make: impl FnOnce(Slot) -> Step) -> Slot {
        let out = self.temp(dtype);
        self.push(make(out));
        out
    }

    /// Appends a [`Step::HostKernel`] running the registered kernel `kernel` (see
    /// [`crate::kernel`]) and returns one fresh slot per entry of `outputs` (their dtypes).
    pub fn host_kernel(
        &mut self,
        node: &Node,
        kernel: &str,
        inputs: Vec<crate::host::HostArg>,
        attrs: crate::kernel::KernelAttrs,
        outputs: &[DataType],
    ) -> Result<Vec<Slot>, PlanError> {
        if crate::kernel::host_kernel(kernel).is_none() {
            invalid!(node, "no host kernel named {kernel:?} is registered");
        }
        let outs: Vec<Slot> = outputs.iter().map(|&dt| self.temp(dt)).collect();
        self.push(Step::HostKernel {
            kernel: kernel.to_string(),
            inputs,
            attrs,
            outputs: outs.clone(),
        });
        Ok(outs)
    }

    /// A constant slot holding `t` (materialised once).
    pub fn constant(&mut self, t: TensorData) -> Slot {
        let name = format!("{}#c{}", self.node_name, self.constants.len());
        let s = self.new_slot(name, t.dtype);
        self.constants.push((s, t));
        self.constant_sources.push(None);
        s
    }

    /// A constant slot holding `t`, derived from initializer `source` (e.g. pre-transposed).
    pub fn constant_from(&mut self, source: &str, t: TensorData) -> Slot {
        let s = self.new_slot(format!("{source}'"), t.dtype);
        self.constants.push((s, t));
        self.constant_sources.push(None);
        s
    }

    /// A scalar constant of `dtype` (shared between uses).
    pub fn scalar(&mut self, dtype: DataType, v: f64) -> Result<Slot, PlanError> {
        if let Some(&s) = self.scalar_cache.get(&(dtype, v.to_bits())) {
            return Ok(s);
        }
        let t = crate::consts::scalar(dtype, v).ok_or_else(|| PlanError::Invalid {
            node: self.node_name.clone(),
            reason: format!("cannot make a {dtype} scalar"),
        })?;
        let s = self.new_slot(format!("scalar({v}:{dtype})"), dtype);
        self.constants.push((s, t));
        self.constant_sources.push(None);
        self.scalar_cache.insert((dtype, v.to_bits()), s);
        Ok(s)
    }

    /// The slot holding value `name`, materialising an initializer or folded constant.
    pub fn value(&mut self, name: &str) -> Result<Slot, PlanError> {
        if let Some(&s) = self.values.get(name) {
            return Ok(s);
        }
        if let Some(t) = self.known.get(name).cloned() {
            if t.dtype == DataType::String {
                // no array holds strings: a host kernel takes them as `HostArg::Const`
                return Err(PlanError::Unsupported {
                    node: self.node_name.clone(),
                    reason: format!(
                        "reads the string constant '{name}' as an array (MLX has no strings)"
                    ),
                });
            }
            let s = self.new_slot(name.to_string(), t.dtype);
            self.constants.push((s, t));
            self.constant_sources.push(
                self.graph
                    .initializers
                    .contains_key(name)
                    .then(|| name.to_string()),
            );
            self.values.insert(name.to_string(), s);
            return Ok(s);
        }
        if let Some(&dt) = self.host_values.get(name) {
            let s = self.new_slot(name.to_string(), dt);
            self.host.outputs.push((name.to_string(), s));
            self.values.insert(name.to_string(), s);
            return Ok(s);
        }
        Err(PlanError::Invalid {
            node: self.node_name.clone(),
            reason: format!("reads '{name}', which is not available"),
        })
    }

    /// The slot of required input `i`.
    pub fn input(&mut self, node: &Node, i: usize) -> Result<Slot, PlanError> {
        match node.input(i) {
            Some(n) => self.value(n),
            None => invalid!(node, "required input {i} is missing"),
        }
    }

    /// The slot of optional input `i`, if present.
    pub fn opt_input(&mut self, node: &Node, i: usize) -> Result<Option<Slot>, PlanError> {
        match node.input(i) {
            Some(n) => self.value(n).map(Some),
            None => Ok(None),
        }
    }

    /// The host value of input `i` when it is known at plan time (initializer or folded).
    pub fn const_input(&self, node: &Node, i: usize) -> Option<&TensorData> {
        self.known.get(node.input(i)?)
    }

    /// The dtype of value `name`.
    pub fn dtype_of(&self, name: &str) -> Option<DataType> {
        if let Some(s) = self.values.get(name) {
            return Some(self.slots[s.index()].dtype);
        }
        if let Some(t) = self.known.get(name) {
            return Some(t.dtype);
        }
        if let Some(&dt) = self.host_values.get(name) {
            return Some(dt);
        }
        self.graph.value(name).and_then(|v| v.dtype)
    }

    /// The dtype of required input `i`.
    pub fn input_dtype(&self, node: &Node, i: usize) -> Result<DataType, PlanError> {
        let name = node.input(i).ok_or_else(|| PlanError::Invalid {
            node: node.name.clone(),
            reason: format!("required input {i} is missing"),
        })?;
        self.dtype_of(name).ok_or_else(|| PlanError::Invalid {
            node: node.name.clone(),
            reason: format!("element type of '{name}' is unknown"),
        })
    }

    /// The declared shape of value `name`, when its rank is known.
    pub fn shape_of(&self, name: &str) -> Option<Vec<Dim>> {
        if let Some(t) = self.known.get(name) {
            return Some(t.dims.iter().map(|&d| Dim::Fixed(d)).collect());
        }
        self.graph.value(name).and_then(|v| v.shape)
    }

    /// The shape of value `name` when every dim is fixed.
    pub fn fixed_shape(&self, name: &str) -> Option<Vec<i64>> {
        self.shape_of(name)?.iter().map(Dim::fixed).collect()
    }

    /// The fixed shape of input `i`, when known.
    pub fn input_fixed_shape(&self, node: &Node, i: usize) -> Option<Vec<i64>> {
        self.fixed_shape(node.input(i)?)
    }

    /// The fixed shape of output `i`, when declared.
    pub fn output_fixed_shape(&self, node: &Node, i: usize) -> Option<Vec<i64>> {
        self.fixed_shape(node.output(i)?)
    }

    /// The rank of input `i`, when known.
    pub fn input_rank(&self, node: &Node, i: usize) -> Option<usize> {
        self.shape_of(node.input(i)?).map(|s| s.len())
    }

    /// The rank of input `i`, or an error saying the lowering needs it.
    pub fn need_rank(&self, node: &Node, i: usize) -> Result<usize, PlanError> {
        match self.input_rank(node, i) {
            Some(r) => Ok(r),
            None => invalid!(node, "the rank of input {i} is unknown"),
        }
    }

    /// Input `i` as a host `i64` vector: static when known at plan time, else read at run time.
    pub fn ints_input(&mut self, node: &Node, i: usize) -> Result<ShapeSource, PlanError> {
        if let Some(t) = self.const_input(node, i) {
            return match t.to_i64_vec() {
                Some(v) => Ok(ShapeSource::Static(v)),
                None => invalid!(node, "input {i} must be an integer tensor"),
            };
        }
        Ok(ShapeSource::Dynamic(self.input(node, i)?))
    }

    /// A new slot for output `i` of `node` with element type `dtype`, bound to its name.
    pub fn output(&mut self, node: &Node, i: usize, dtype: DataType) -> Result<Slot, PlanError> {
        let Some(name) = node.output(i) else {
            // An unused optional output: still give the step somewhere to write.
            return Ok(self.temp(dtype));
        };
        if let Some(declared) = self.graph.value(name).and_then(|v| v.dtype)
            && declared != dtype
        {
            invalid!(
                node,
                "output '{name}' is declared {declared} but the op produces {dtype}"
            );
        }
        let s = self.new_slot(name.to_string(), dtype);
        self.values.insert(name.to_string(), s);
        Ok(s)
    }

    /// Binds output `i` of `node` to an existing slot (no step; e.g. Identity).
    pub fn alias(&mut self, node: &Node, i: usize, slot: Slot) {
        if let Some(name) = node.output(i) {
            self.values.insert(name.to_string(), slot);
        }
    }

    /// Binds output `i` of `node` to `slot`, which must hold `dtype` (the output's ONNX type);
    /// a temporary slot takes the output's name.
    pub fn finish(
        &mut self,
        node: &Node,
        i: usize,
        slot: Slot,
        dtype: DataType,
    ) -> Result<(), PlanError> {
        let Some(name) = node.output(i) else {
            return Ok(());
        };
        if self.slots[slot.index()].dtype != dtype {
            invalid!(
                node,
                "internal: output {i} is {} but {dtype} was expected",
                self.slots[slot.index()].dtype
            );
        }
        if let Some(declared) = self.graph.value(name).and_then(|v| v.dtype)
            && declared != dtype
        {
            invalid!(
                node,
                "output '{name}' is declared {declared} but the op produces {dtype}"
            );
        }
        let info = &mut self.slots[slot.index()];
        if info.name.starts_with(&format!("{}#t", self.node_name)) {
            info.name = name.to_string();
        }
        self.values.insert(name.to_string(), slot);
        Ok(())
    }

    /// Binds output `i` of `node` to a value computed at plan time.
    pub fn fold(&mut self, node: &Node, i: usize, t: TensorData) {
        if let Some(name) = node.output(i) {
            self.known.insert(name.to_string(), t);
        }
    }

    /// True when output `i` of `node` is consumed (by a later node or as a graph output).
    pub fn output_used(&self, node: &Node, i: usize) -> bool {
        node.output(i).is_some()
    }
}

/// Lowers one fused cluster (as its own [`Graph`]) into a [`Plan`].
///
/// Every node must be claimed by `registry` (the same entry lowers it). Initializers of the
/// cluster graph become constants; values computable at plan time from initializers (shape
/// arithmetic) are folded.
pub fn build_plan(graph: &Graph, registry: &Registry) -> Result<Plan, PlanError> {
    let plan = build_plan_with(graph, registry, Default::default())?;
    let cones = host_read_cones(graph, &plan);
    if cones.is_empty() {
        return Ok(plan);
    }
    build_plan_with(graph, registry, cones)
}

/// Where the integer nodes that feed a host read run (see [`host_read_cones`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum HostStage {
    /// In the host program, before the steps: the node needs only input shapes and values.
    BeforeSteps,
    /// As a `HostEval` step while tracing: it needs the shape of a computed value.
    Trace,
}

/// The integer nodes that compute, from shapes, graph input values and constants alone, the
/// values `plan`'s steps read back from the device (`seqlens_k` of a decoder from its
/// `attention_mask`, a reshape target from `Shape` of an activation), by output name, with
/// where they run. On the host, those values need no device synchronisation, and the plan can
/// compile. Empty when no such node exists.
fn host_read_cones(graph: &Graph, plan: &Plan) -> HashMap<String, HostStage> {
    let host_bound = plan.host_known_slots();
    let mut memo: HashMap<String, Option<HostStage>> = HashMap::new();
    let mut force = HashMap::new();
    for step in &plan.steps {
        for slot in step.host_reads() {
            if host_bound.contains(&slot) {
                continue;
            }
            let name = &plan.slots[slot.index()].name;
            let mut cone = HashMap::new();
            if host_stage(graph, name, &mut memo, &mut cone, 0).is_some() {
                force.extend(cone);
            }
        }
    }
    force
}

/// How deep [`host_stage`] follows producers (shape arithmetic chains are short).
const MAX_HOST_CONE_DEPTH: usize = 32;

/// Where value `name` can be computed on the host: `BeforeSteps` for an initializer, an
/// integer graph input, and an ai.onnx host-program op over such values (or `Shape` of a graph
/// input); `Trace` when the chain includes `Shape` of a computed value; `None` otherwise.
/// Collects the producing nodes' outputs into `cone`.
fn host_stage(
    graph: &Graph,
    name: &str,
    memo: &mut HashMap<String, Option<HostStage>>,
    cone: &mut HashMap<String, HostStage>,
    depth: usize,
) -> Option<HostStage> {
    if let Some(&known) = memo.get(name) {
        if let Some(stage) = known {
            cone.insert(name.to_string(), stage);
        }
        return known;
    }
    if graph.initializers.contains_key(name) {
        return Some(HostStage::BeforeSteps);
    }
    if let Some(input) = graph.inputs.iter().find(|i| i.name == name) {
        return input
            .dtype
            .is_some_and(host_dtype)
            .then_some(HostStage::BeforeSteps);
    }
    let node = graph
        .nodes
        .iter()
        .find(|n| n.outputs.iter().any(|o| o == name))?;
    let out_dtype = graph.value(name).and_then(|v| v.dtype);
    let op_ok = node.normalized_domain().is_empty()
        && node.outputs.len() == 1
        && out_dtype.is_some_and(host_dtype)
        && depth < MAX_HOST_CONE_DEPTH;
    let stage = if !op_ok {
        None
    } else if node.op_type == "Shape" {
        let x = node.input(0)?;
        Some(if graph.inputs.iter().any(|i| i.name == x) {
            HostStage::BeforeSteps
        } else {
            HostStage::Trace
        })
    } else if node.op_type == "Constant" {
        crate::fold::constant_node_value(node).map(|_| HostStage::BeforeSteps)
    } else if HOST_OPS.contains(&node.op_type.as_str()) {
        node.inputs
            .iter()
            .filter(|i| !i.is_empty())
            .try_fold(HostStage::BeforeSteps, |acc, i| {
                Some(acc.max(host_stage(graph, i, memo, cone, depth + 1)?))
            })
    } else {
        None
    };
    memo.insert(name.to_string(), stage);
    if let Some(stage) = stage {
        cone.insert(name.to_string(), stage);
    }
    stage
}

fn build_plan_with(
    graph: &Graph,
    registry: &Registry,
    cones: HashMap<String, HostStage>,
) -> Result<Plan, PlanError> {
    let order = graph.topological_order()?;
    let mut ctx = LowerCtx::new(graph);
    ctx.registry = Some(registry);
    for (name, stage) in cones {
        match stage {
            HostStage::BeforeSteps => ctx.force_host.insert(name),
            HostStage::Trace => ctx.trace_host.insert(name),
        };
    }
    for (name, t) in &graph.initializers {
        ctx.known.insert(name.clone(), t.clone());
    }
    let mut inputs: Vec<PlanInput> = Vec::new();
    for vi in &graph.inputs {
        if graph.initializers.contains_key(&vi.name) {
            continue;
        }
        let Some(dtype) = vi.dtype else {
            return Err(PlanError::Invalid {
                node: String::new(),
                reason: format!("graph input '{}' has no element type", vi.name),
            });
        };
        let slot = ctx.new_slot(vi.name.clone(), dtype);
        ctx.values.insert(vi.name.clone(), slot);
        inputs.push(PlanInput {
            slot,
            name: vi.name.clone(),
            dtype,
            shape: vi.shape.clone(),
        });
    }
    let mut spans = Vec::with_capacity(order.len());
    for (i, vi) in inputs.iter().enumerate() {
        for (d, dim) in vi.shape.iter().flatten().enumerate() {
            if let Dim::Symbolic(s) = dim {
                ctx.host.symbols.push((i, d, s.clone()));
            }
        }
    }
    for &i in &order {
        let node = &graph.nodes[i];
        let (entry, opset) = registry
            .lookup(graph, node)
            .map_err(|d| PlanError::Unsupported {
                node: node.name.clone(),
                reason: d.reason,
            })?;
        (entry.claim)(
            &ClaimCtx::new(graph, opset)
                .with_constants(&ctx.known)
                .with_registry(registry),
            node,
        )
        .map_err(|d| PlanError::Unsupported {
            node: node.name.clone(),
            reason: d.reason,
        })?;
        ctx.opset = opset;
        ctx.node_name = node.name.clone();
        ctx.temp_counter = 0;
        let start = ctx.steps.len();
        let folded = crate::fold::try_fold(&mut ctx, node)?;
        let on_host = !folded && ctx.try_host(node);
        if !folded && !on_host && !ctx.try_host_eval(node)? {
            (entry.lower)(&mut ctx, node)?;
        }
        spans.push(NodeSpan {
            name: node.name.clone(),
            op_type: node.op_type.clone(),
            steps: start..ctx.steps.len(),
            on_host,
        });
    }
    let mut outputs = Vec::new();
    let mut output_names = Vec::new();
    let remap = eliminate_common_steps(&mut ctx.steps, &mut spans);
    for s in ctx.values.values_mut() {
        if let Some(r) = remap.get(s) {
            *s = *r;
        }
    }
    ctx.node_name = String::from("output");
    for vi in &graph.outputs {
        let slot = ctx
            .value(&vi.name)
            .map_err(|_| PlanError::MissingOutput(vi.name.clone()))?;
        outputs.push(slot);
        output_names.push(vi.name.clone());
    }
    Ok(Plan {
        inputs,
        outputs,
        output_names,
        num_slots: ctx.slots.len(),
        slots: ctx.slots,
        constants: ctx.constants,
        constant_sources: ctx.constant_sources,
        steps: ctx.steps,
        nodes: spans,
        host: ctx.host,
    })
}

/// Common-subexpression elimination: a step identical (same op, attributes and inputs) to an
/// earlier one is dropped and its outputs are replaced by the earlier step's (random steps are
/// always kept: each is a draw of its own). Returns the
/// replacement map (dropped slot -> kept slot).
fn eliminate_common_steps(steps: &mut Vec<Step>, spans: &mut [NodeSpan]) -> HashMap<Slot, Slot> {
    let mut remap: HashMap<Slot, Slot> = HashMap::new();
    let mut seen: HashMap<String, Vec<Slot>> = HashMap::new();
    let mut kept: Vec<Step> = Vec::with_capacity(steps.len());
    let mut new_index = Vec::with_capacity(steps.len() + 1);
    for mut step in std::mem::take(steps) {
        new_index.push(kept.len());
        step.map_inputs(&mut |s| {
            if let Some(r) = remap.get(s) {
                *s = *r;
            }
        });
        // Two random steps are two draws, never one value.
        if step.is_random() {
            kept.push(step);
            continue;
        }
        let outs = step.outputs();
        let mut key_step = step.clone();
        key_step.map_outputs(&mut |s| *s = Slot(u32::MAX));
        let mut key = format!("{key_step:?}");
        // A constant argument prints as its dtype and dims only: its bytes tell two apart.
        if let Step::HostKernel { inputs: args, .. } | Step::HostEval { args, .. } = &step {
            for a in args {
                if let crate::host::HostArg::Const(t) = a {
                    key.push_str(&format!("{:?}", t.bytes));
                }
            }
        }
        if let Some(prev) = seen.get(&key) {
            for (o, p) in outs.iter().zip(prev) {
                remap.insert(*o, *p);
            }
            continue;
        }
        seen.insert(key, outs);
        kept.push(step);
    }
    new_index.push(kept.len());
    for span in spans.iter_mut() {
        span.steps = new_index[span.steps.start]..new_index[span.steps.end];
    }
    *steps = kept;
    remap
}

impl<'g> LowerCtx<'g> {
    /// Moves `node` to the host program when it is shape arithmetic on values known from input
    /// shapes; returns whether it did.
    fn try_host(&mut self, node: &Node) -> bool {
        if !node.normalized_domain().is_empty() || node.outputs.len() != 1 {
            return false;
        }
        let Some(out) = node.output(0) else {
            return false;
        };
        let out_info = self.graph.value(out);
        let Some(out_dt) = out_info.as_ref().and_then(|v| v.dtype) else {
            return false;
        };
        let forced = self.force_host.contains(out);
        if !host_dtype(out_dt) || (!forced && out_info.and_then(|v| v.rank()).is_none_or(|r| r > 1))
        {
            return false;
        }
        let bound = |s: &str| self.host.symbols.iter().any(|(_, _, n)| n == s);
        let mut input_dims = None;
        if node.op_type == "Shape" {
            let Some(dims) = node.input(0).and_then(|x| self.shape_of(x)) else {
                return false;
            };
            let resolvable = dims.iter().all(|d| match d {
                Dim::Fixed(_) => true,
                Dim::Symbolic(s) => bound(s),
                Dim::Unknown => false,
            });
            // Fully fixed shapes are folded by the lowering instead.
            if !resolvable || dims.iter().all(|d| d.fixed().is_some()) {
                return false;
            }
            input_dims = Some(dims);
        } else {
            if !HOST_OPS.contains(&node.op_type.as_str()) {
                return false;
            }
            let mut any_host = false;
            let mut value_inputs = Vec::new();
            for name in node.inputs.iter().filter(|s| !s.is_empty()) {
                if self.host_values.contains_key(name) {
                    any_host = true;
                } else if let Some(i) = self.graph_input_index(name).filter(|_| forced) {
                    any_host = true;
                    value_inputs.push((i, name.clone()));
                } else if let Some(t) = self.known.get(name) {
                    if !host_dtype(t.dtype) {
                        return false;
                    }
                } else {
                    return false;
                }
            }
            if !any_host {
                return false;
            }
            for v in value_inputs {
                if !self.host.value_inputs.contains(&v) {
                    self.host.value_inputs.push(v);
                }
            }
            for name in node.inputs.iter().filter(|s| !s.is_empty()) {
                if let Some(t) = self.known.get(name) {
                    self.host.constants.insert(name.clone(), t.clone());
                }
            }
        }
        self.host.nodes.push(HostNode {
            node: node.clone(),
            opset: self.opset,
            input_dims,
        });
        self.host_values.insert(out.to_string(), out_dt);
        true
    }

    /// Lowers `node` to a `HostEval` step when it is one of the trace-time host nodes (see
    /// [`host_read_cones`]); returns whether it did.
    fn try_host_eval(&mut self, node: &Node) -> Result<bool, PlanError> {
        let Some(out) = node.output(0).filter(|o| self.trace_host.contains(*o)) else {
            return Ok(false);
        };
        let Some(dtype) = self.graph.value(out).and_then(|v| v.dtype) else {
            return Ok(false);
        };
        let mut args = Vec::with_capacity(node.inputs.len());
        for (i, name) in node.inputs.iter().enumerate() {
            args.push(if name.is_empty() {
                crate::host::HostArg::Absent
            } else if node.op_type == "Shape" && i == 0 {
                crate::host::HostArg::ShapeOf(self.value(name)?)
            } else if let Some(t) = self.known.get(name) {
                crate::host::HostArg::Const(t.clone())
            } else {
                crate::host::HostArg::Value(self.value(name)?)
            });
        }
        let out = self.output(node, 0, dtype)?;
        self.push(Step::HostEval {
            node: Box::new(HostNode {
                node: node.clone(),
                opset: self.opset,
                input_dims: None,
            }),
            args,
            out,
        });
        Ok(true)
    }

    /// The index among the plan's inputs of graph input `name` (of an integer or bool type),
    /// when it is one.
    fn graph_input_index(&self, name: &str) -> Option<usize> {
        self.graph
            .inputs
            .iter()
            .filter(|vi| !self.graph.initializers.contains_key(&vi.name))
            .position(|vi| vi.name == name)
            .filter(|_| self.dtype_of(name).is_some_and(host_dtype))
    }

    /// Known host values (initializers and folded), by name.
    pub fn known(&self) -> &HashMap<String, TensorData> {
        &self.known
    }

    /// A fresh context for a sub-plan that the lowering of `node` builds step by step (a body
    /// with no ONNX graph of its own): declare its inputs with [`LowerCtx::body_input`], push
    /// its steps, then close it with [`LowerCtx::into_sub_plan`].
    pub fn for_body(&self, node: &Node) -> LowerCtx<'g> {
        let mut body = LowerCtx::new(self.graph);
        body.registry = self.registry;
        body.opset = self.opset;
        body.node_name = node.name.clone();
        body
    }

    /// A new input slot of a body being built (see [`LowerCtx::for_body`]).
    pub fn body_input(&mut self, name: &str, dtype: DataType) -> Slot {
        self.new_slot(format!("{}#{name}", self.node_name), dtype)
    }

    /// The body built in this context as a [`SubPlan`]: `inputs` (the first `formal_inputs`
    /// of them formal, the rest outer values), its steps as one span of `node`, and `outputs`.
    pub fn into_sub_plan(
        self,
        node: &Node,
        inputs: &[Slot],
        outputs: Vec<Slot>,
        formal_inputs: usize,
    ) -> SubPlan {
        let inputs = inputs
            .iter()
            .map(|&slot| {
                let info = &self.slots[slot.index()];
                PlanInput {
                    slot,
                    name: info.name.clone(),
                    dtype: info.dtype,
                    shape: None,
                }
            })
            .collect();
        let output_names = outputs
            .iter()
            .map(|o| self.slots[o.index()].name.clone())
            .collect();
        let plan = Plan {
            inputs,
            outputs,
            output_names,
            num_slots: self.slots.len(),
            slots: self.slots,
            constants: self.constants,
            constant_sources: self.constant_sources,
            nodes: vec![NodeSpan {
                name: node.name.clone(),
                op_type: node.op_type.clone(),
                steps: 0..self.steps.len(),
                on_host: false,
            }],
            steps: self.steps,
            host: self.host,
        };
        SubPlan {
            plan: Box::new(plan),
            formal_inputs,
        }
    }
}
