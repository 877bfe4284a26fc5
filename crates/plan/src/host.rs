//! The host program: shape arithmetic computed on the CPU from input shapes at run time.
//!
//! Exported transformer graphs compute reshape targets from `Shape` of values whose dims are
//! symbolic (`batch`, `seq`). When every symbolic dim involved also appears in a cluster
//! input's declared shape, the whole `Shape -> Gather -> Unsqueeze -> Concat` chain depends only
//! on the input shapes: the runtime runs it here (no MLX evaluation) before the steps, binds the
//! results to their slots, and the steps' host reads of those slots need no device sync, so
//! the plan stays compilable per input-shape key.

use std::collections::HashMap;

use onnx_ir::{DataType, Dim, Node, TensorData};

use crate::step::{Slot, shape_range};

/// One node of the host program.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct HostNode {
    /// The ONNX node (shape arithmetic: `Shape`, `Gather`, `Concat`, integer math, ...).
    pub node: Node,
    /// Its opset.
    pub opset: i64,
    /// For `Shape` nodes: the declared dims of the input (fixed or bound symbols).
    pub input_dims: Option<Vec<Dim>>,
}

/// Shape arithmetic evaluated on the host from input shapes, before the steps run.
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct HostProgram {
    /// Nodes in execution order.
    pub nodes: Vec<HostNode>,
    /// Plan-time constants the nodes read, by value name.
    pub constants: HashMap<String, TensorData>,
    /// Symbols bound from input shapes: (plan input index, dim index, symbol).
    pub symbols: Vec<(usize, usize, String)>,
    /// Values the steps read, and the slots the runtime binds them to.
    pub outputs: Vec<(String, Slot)>,
    /// Integer graph inputs whose values the nodes read: (plan input index, value name).
    /// Results that depend on them change with the input values, not only with the shapes.
    pub value_inputs: Vec<(usize, String)>,
}

impl HostProgram {
    /// True when there is nothing to compute.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Runs the program for the actual shapes of the plan inputs (in `Plan::inputs` order);
    /// returns the tensors to bind to their slots (as arrays of their dtype) before the steps.
    /// A program with [`HostProgram::value_inputs`] needs [`HostProgram::run_with_values`].
    pub fn run(&self, input_shapes: &[Vec<i64>]) -> Result<Vec<(Slot, TensorData)>, String> {
        self.run_with_values(input_shapes, &|_| None)
    }

    /// [`HostProgram::run`] with, for each of [`HostProgram::value_inputs`], that input's value
    /// (`input_value(plan input index)`).
    pub fn run_with_values(
        &self,
        input_shapes: &[Vec<i64>],
        input_value: &dyn Fn(usize) -> Option<TensorData>,
    ) -> Result<Vec<(Slot, TensorData)>, String> {
        if self.nodes.is_empty() {
            return Ok(Vec::new());
        }
        let mut sym: HashMap<&str, i64> = HashMap::new();
        for (i, d, name) in &self.symbols {
            let v = *input_shapes
                .get(*i)
                .and_then(|s| s.get(*d))
                .ok_or_else(|| format!("input {i} has no dim {d} (symbol '{name}')"))?;
            if let Some(old) = sym.insert(name, v)
                && old != v
            {
                return Err(format!(
                    "symbolic dim '{name}' is {old} in one input and {v} in another"
                ));
            }
        }
        let mut env: HashMap<&str, TensorData> = HashMap::new();
        for (i, name) in &self.value_inputs {
            let value =
                input_value(*i).ok_or_else(|| format!("the value of input '{name}' is missing"))?;
            env.insert(name, value);
        }
        for hn in &self.nodes {
            let node = &hn.node;
            let out = if node.op_type == "Shape" {
                let dims = hn.input_dims.as_ref().ok_or("Shape without dims")?;
                let values: Vec<i64> = dims
                    .iter()
                    .map(|d| match d {
                        Dim::Fixed(v) => Ok(*v),
                        Dim::Symbolic(s) => sym
                            .get(s.as_str())
                            .copied()
                            .ok_or_else(|| format!("symbol '{s}' is not bound")),
                        Dim::Unknown => Err("unknown dim".to_string()),
                    })
                    .collect::<Result<_, _>>()?;
                let (start, end) = shape_attrs(node, hn.opset);
                let r = shape_range(values.len(), start, end);
                let v = &values[r];
                TensorData::from_i64(vec![v.len() as i64], v)
            } else {
                let inputs: Vec<Option<TensorData>> = node
                    .inputs
                    .iter()
                    .map(|n| {
                        if n.is_empty() {
                            return Ok(None);
                        }
                        env.get(n.as_str())
                            .or_else(|| self.constants.get(n))
                            .cloned()
                            .map(Some)
                            .ok_or_else(|| format!("host value '{n}' is missing"))
                    })
                    .collect::<Result<_, String>>()?;
                crate::fold::eval_host(hn.opset, node, &inputs).ok_or_else(|| {
                    format!(
                        "cannot evaluate {} node '{}' on the host",
                        node.op_type, node.name
                    )
                })?
            };
            if let Some(o) = node.output(0) {
                env.insert(o, out);
            }
        }
        self.outputs
            .iter()
            .map(|(name, slot)| {
                env.get(name.as_str())
                    .or_else(|| self.constants.get(name))
                    .cloned()
                    .map(|t| (*slot, t))
                    .ok_or_else(|| format!("host value '{name}' was not computed"))
            })
            .collect()
    }
}

/// An argument of a [`crate::Step::HostEval`]: where the host value of one node input comes
/// from during the trace.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum HostArg {
    /// The host value of a slot (a host-program result, an earlier `HostEval`, a small plan
    /// input).
    Value(Slot),
    /// The shape of a slot's array, as an int64 vector (for `Shape`: known without evaluating).
    ShapeOf(Slot),
    /// A plan-time constant.
    Const(TensorData),
    /// An omitted optional input.
    Absent,
}

impl HostArg {
    /// The slot this argument reads, if any.
    pub fn slot(&self) -> Option<Slot> {
        match self {
            HostArg::Value(s) | HostArg::ShapeOf(s) => Some(*s),
            HostArg::Const(_) | HostArg::Absent => None,
        }
    }

    /// The slot this argument reads, mutably.
    pub fn slot_mut(&mut self) -> Option<&mut Slot> {
        match self {
            HostArg::Value(s) | HostArg::ShapeOf(s) => Some(s),
            HostArg::Const(_) | HostArg::Absent => None,
        }
    }
}

/// Evaluates a host node over its inputs' host values (for `Shape`: input 0 is the shape of
/// its input, as an int64 vector).
pub fn eval_host_node(hn: &HostNode, inputs: &[Option<TensorData>]) -> Result<TensorData, String> {
    let node = &hn.node;
    if node.op_type == "Shape" {
        let dims = inputs
            .first()
            .and_then(Option::as_ref)
            .and_then(TensorData::to_i64_vec)
            .ok_or("Shape without its input's shape")?;
        let (start, end) = shape_attrs(node, hn.opset);
        let v = &dims[shape_range(dims.len(), start, end)];
        return Ok(TensorData::from_i64(vec![v.len() as i64], v));
    }
    crate::fold::eval_host(hn.opset, node, inputs).ok_or_else(|| {
        format!(
            "cannot evaluate {} node '{}' on the host",
            node.op_type, node.name
        )
    })
}

fn shape_attrs(node: &Node, opset: i64) -> (i64, Option<i64>) {
    if opset < 15 {
        return (0, None);
    }
    let get = |n: &str| match node.attributes.get(n) {
        Some(onnx_ir::Attribute::Int(v)) => Some(*v),
        _ => None,
    };
    (get("start").unwrap_or(0), get("end"))
}

/// Ops the host program evaluates (integer/bool tensors of rank <= 1).
pub(crate) const HOST_OPS: &[&str] = &[
    "Gather",
    "Unsqueeze",
    "Squeeze",
    "Concat",
    "Slice",
    "Cast",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Mod",
    "Max",
    "Min",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "Not",
    "Neg",
    "Abs",
    "Where",
    "Identity",
    "Reshape",
    "Flatten",
    "Expand",
    "ReduceProd",
    "ReduceSum",
    "Range",
];

/// True for the element types the host program computes with.
pub(crate) fn host_dtype(dt: DataType) -> bool {
    dt.is_integer() || dt == DataType::Bool
}
