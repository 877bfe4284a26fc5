//! Graphs, nodes, values and attributes.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::{DataType, TensorData};

/// The default ONNX operator domain (`ai.onnx`), written as the empty string.
pub const DEFAULT_DOMAIN: &str = "";

/// One dimension of a value's shape.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Dim {
    /// A known size.
    Fixed(i64),
    /// A named size known only at run time (`batch`, `seq`, ...).
    Symbolic(String),
    /// An unnamed size known only at run time.
    Unknown,
}

impl Dim {
    /// The size, when fixed.
    pub fn fixed(&self) -> Option<i64> {
        match self {
            Dim::Fixed(v) => Some(*v),
            _ => None,
        }
    }
}

/// A named value's type: element type and (possibly partial) shape.
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ValueInfo {
    /// The value's name, unique in its graph.
    pub name: String,
    /// Element type, when the value is a tensor of known type.
    pub dtype: Option<DataType>,
    /// Shape, when its rank is known.
    pub shape: Option<Vec<Dim>>,
}

impl ValueInfo {
    /// A tensor value of known type and rank.
    pub fn new(name: impl Into<String>, dtype: DataType, shape: Vec<Dim>) -> Self {
        ValueInfo {
            name: name.into(),
            dtype: Some(dtype),
            shape: Some(shape),
        }
    }

    /// The rank, when known.
    pub fn rank(&self) -> Option<usize> {
        self.shape.as_ref().map(Vec::len)
    }

    /// The shape as fixed sizes, when every dim is fixed.
    pub fn fixed_shape(&self) -> Option<Vec<i64>> {
        self.shape.as_ref()?.iter().map(Dim::fixed).collect()
    }
}

/// A node attribute value.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Attribute {
    /// `FLOAT`.
    Float(f32),
    /// `INT`.
    Int(i64),
    /// `STRING` (raw bytes, usually UTF-8).
    String(Vec<u8>),
    /// `TENSOR`.
    Tensor(TensorData),
    /// `GRAPH` (a subgraph of If, Loop, Scan).
    Graph(Box<Graph>),
    /// `FLOATS`.
    Floats(Vec<f32>),
    /// `INTS`.
    Ints(Vec<i64>),
    /// `STRINGS`.
    Strings(Vec<Vec<u8>>),
    /// `TENSORS`.
    Tensors(Vec<TensorData>),
    /// `GRAPHS`.
    Graphs(Vec<Graph>),
    /// A kind this IR does not model (sparse tensors, type protos); named for diagnostics.
    Unsupported(String),
}

impl Attribute {
    /// ONNX's name of the attribute kind, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Attribute::Float(_) => "FLOAT",
            Attribute::Int(_) => "INT",
            Attribute::String(_) => "STRING",
            Attribute::Tensor(_) => "TENSOR",
            Attribute::Graph(_) => "GRAPH",
            Attribute::Floats(_) => "FLOATS",
            Attribute::Ints(_) => "INTS",
            Attribute::Strings(_) => "STRINGS",
            Attribute::Tensors(_) => "TENSORS",
            Attribute::Graphs(_) => "GRAPHS",
            Attribute::Unsupported(_) => "UNSUPPORTED",
        }
    }
}

/// One operator application.
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Node {
    /// Node name (may be empty in ONNX; the EP fills a unique one when it is).
    pub name: String,
    /// Operator type, e.g. `MatMul`.
    pub op_type: String,
    /// Operator domain; [`DEFAULT_DOMAIN`] (empty) for `ai.onnx`.
    pub domain: String,
    /// Input value names; an empty string marks an absent optional input.
    pub inputs: Vec<String>,
    /// Output value names; an empty string marks an unused optional output.
    pub outputs: Vec<String>,
    /// Attributes by name.
    pub attributes: BTreeMap<String, Attribute>,
}

impl Node {
    /// A default-domain node with no attributes, named after its op and first output.
    pub fn new<I, O>(op_type: &str, inputs: I, outputs: O) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
        O: IntoIterator,
        O::Item: Into<String>,
    {
        let outputs: Vec<String> = outputs.into_iter().map(Into::into).collect();
        Node {
            name: format!(
                "{op_type}_{}",
                outputs.first().map(String::as_str).unwrap_or("")
            ),
            op_type: op_type.to_string(),
            domain: DEFAULT_DOMAIN.to_string(),
            inputs: inputs.into_iter().map(Into::into).collect(),
            outputs,
            attributes: BTreeMap::new(),
        }
    }

    /// Adds an attribute, builder style.
    pub fn with_attr(mut self, name: &str, value: Attribute) -> Self {
        self.attributes.insert(name.to_string(), value);
        self
    }

    /// The `i`-th input's name if present and not empty.
    pub fn input(&self, i: usize) -> Option<&str> {
        self.inputs
            .get(i)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    /// The `i`-th output's name if present and not empty.
    pub fn output(&self, i: usize) -> Option<&str> {
        self.outputs
            .get(i)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    /// The domain with `ai.onnx` folded into the default (empty) domain.
    pub fn normalized_domain(&self) -> &str {
        if self.domain == "ai.onnx" {
            DEFAULT_DOMAIN
        } else {
            &self.domain
        }
    }
}

/// A graph (or subgraph): nodes, its interface and constant values.
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Graph {
    /// Graph name.
    pub name: String,
    /// Nodes, in the order the producer listed them (see [`Graph::topological_order`]).
    pub nodes: Vec<Node>,
    /// Graph inputs that are not initializers.
    pub inputs: Vec<ValueInfo>,
    /// Graph outputs.
    pub outputs: Vec<ValueInfo>,
    /// Constant initializers by name.
    pub initializers: HashMap<String, TensorData>,
    /// Type information of intermediate values, by name.
    pub value_info: HashMap<String, ValueInfo>,
    /// Opset version per domain (`""` for `ai.onnx`).
    pub opset_imports: HashMap<String, i64>,
    /// The graph inputs of an `optional(tensor)` type: listed among `inputs` with their tensor
    /// type, and absent at run time when the optional holds no tensor. Only ops that read
    /// optionals (`OptionalHasElement`, `OptionalGetElement`) may read them.
    #[cfg_attr(feature = "serde", serde(default))]
    pub optional_inputs: std::collections::BTreeSet<String>,
}

/// A structural error in a graph.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum IrError {
    /// A value is produced by more than one node (or is also an input/initializer).
    DuplicateProducer(String),
    /// A node reads a value nothing produces.
    Dangling {
        /// The node reading it.
        node: String,
        /// The value's name.
        value: String,
    },
    /// The nodes form a cycle.
    Cycle,
}

impl std::fmt::Display for IrError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IrError::DuplicateProducer(v) => write!(f, "value '{v}' has more than one producer"),
            IrError::Dangling { node, value } => {
                write!(f, "node '{node}' reads '{value}', which nothing produces")
            }
            IrError::Cycle => f.write_str("the graph has a cycle"),
        }
    }
}

impl std::error::Error for IrError {}

impl Graph {
    /// The opset version imported for `domain` (`ai.onnx` and `""` are the same).
    pub fn opset(&self, domain: &str) -> Option<i64> {
        let d = if domain == "ai.onnx" { "" } else { domain };
        self.opset_imports
            .get(d)
            .or_else(|| {
                if d.is_empty() {
                    self.opset_imports.get("ai.onnx")
                } else {
                    None
                }
            })
            .copied()
    }

    /// Type information for a value: graph input/output, value_info, or initializer.
    pub fn value(&self, name: &str) -> Option<ValueInfo> {
        if let Some(v) = self
            .inputs
            .iter()
            .chain(&self.outputs)
            .find(|v| v.name == name)
        {
            return Some(v.clone());
        }
        if let Some(v) = self.value_info.get(name) {
            return Some(v.clone());
        }
        self.initializers.get(name).map(|t| ValueInfo {
            name: name.to_string(),
            dtype: Some(t.dtype),
            shape: Some(t.dims.iter().map(|&d| Dim::Fixed(d)).collect()),
        })
    }

    /// Index of the node producing each value.
    pub fn producers(&self) -> HashMap<&str, usize> {
        let mut map = HashMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for o in n.outputs.iter().filter(|o| !o.is_empty()) {
                map.insert(o.as_str(), i);
            }
        }
        map
    }

    /// Node indices in an order where every producer precedes its consumers.
    ///
    /// Values from outer scopes (read by subgraphs) are accepted when `outer` names them; at
    /// the top level pass an empty set through [`Graph::topological_order`].
    pub fn topological_order_with_outer(
        &self,
        outer: &HashSet<String>,
    ) -> Result<Vec<usize>, IrError> {
        let mut producer: HashMap<&str, usize> = HashMap::new();
        let mut defined: HashSet<&str> = self.inputs.iter().map(|v| v.name.as_str()).collect();
        defined.extend(self.initializers.keys().map(String::as_str));
        for (i, n) in self.nodes.iter().enumerate() {
            for o in n.outputs.iter().filter(|o| !o.is_empty()) {
                if defined.contains(o.as_str()) || producer.insert(o.as_str(), i).is_some() {
                    return Err(IrError::DuplicateProducer(o.clone()));
                }
            }
        }
        let mut indegree = vec![0usize; self.nodes.len()];
        let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            // Values the node's bodies read from this graph are dependencies too.
            let implicit: Vec<String> = Graph::subgraphs_of(n)
                .into_iter()
                .flat_map(|(_, g)| g.outer_references())
                .filter(|r| producer.contains_key(r.as_str()) && !n.inputs.contains(r))
                .collect();
            for input in n.inputs.iter().chain(&implicit).filter(|s| !s.is_empty()) {
                if let Some(&p) = producer.get(input.as_str()) {
                    indegree[i] += 1;
                    consumers[p].push(i);
                } else if !defined.contains(input.as_str()) && !outer.contains(input) {
                    return Err(IrError::Dangling {
                        node: n.name.clone(),
                        value: input.clone(),
                    });
                }
            }
        }
        // Kahn's algorithm; a min-heap keeps the producer's order where it is free to.
        let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = indegree
            .iter()
            .enumerate()
            .filter(|(_, d)| **d == 0)
            .map(|(i, _)| std::cmp::Reverse(i))
            .collect();
        let mut order = Vec::with_capacity(self.nodes.len());
        while let Some(std::cmp::Reverse(i)) = ready.pop() {
            order.push(i);
            for &c in &consumers[i] {
                indegree[c] -= 1;
                if indegree[c] == 0 {
                    ready.push(std::cmp::Reverse(c));
                }
            }
        }
        if order.len() != self.nodes.len() {
            return Err(IrError::Cycle);
        }
        Ok(order)
    }

    /// The graphs held by `node`'s attributes (If branches, Loop and Scan bodies).
    pub fn subgraphs_of(node: &Node) -> Vec<(&str, &Graph)> {
        let mut out = Vec::new();
        for (name, a) in &node.attributes {
            match a {
                Attribute::Graph(g) => out.push((name.as_str(), g.as_ref())),
                Attribute::Graphs(gs) => out.extend(gs.iter().map(|g| (name.as_str(), g))),
                _ => {}
            }
        }
        out
    }

    /// Values this graph reads from enclosing scopes, in first-use order: names its nodes
    /// (and their nested subgraphs, recursively) and its outputs read but that neither its
    /// inputs, its initializers nor its nodes define.
    pub fn outer_references(&self) -> Vec<String> {
        let mut defined: HashSet<&str> = self.inputs.iter().map(|v| v.name.as_str()).collect();
        defined.extend(self.initializers.keys().map(String::as_str));
        for n in &self.nodes {
            defined.extend(
                n.outputs
                    .iter()
                    .filter(|o| !o.is_empty())
                    .map(String::as_str),
            );
        }
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        let mut note = |name: &str, out: &mut Vec<String>| {
            if !name.is_empty() && !defined.contains(name) && seen.insert(name.to_string()) {
                out.push(name.to_string());
            }
        };
        for n in &self.nodes {
            for i in &n.inputs {
                note(i, &mut out);
            }
            for (_, g) in Graph::subgraphs_of(n) {
                for r in g.outer_references() {
                    note(&r, &mut out);
                }
            }
        }
        for o in &self.outputs {
            note(&o.name, &mut out);
        }
        out
    }

    /// Node indices in topological order; see [`Graph::topological_order_with_outer`].
    pub fn topological_order(&self) -> Result<Vec<usize>, IrError> {
        self.topological_order_with_outer(&HashSet::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain() -> Graph {
        let mut g = Graph::default();
        g.inputs
            .push(ValueInfo::new("x", DataType::Float, vec![Dim::Fixed(2)]));
        g.nodes.push(Node::new("Neg", ["a"], ["b"]));
        g.nodes.push(Node::new("Relu", ["x"], ["a"]));
        g.outputs
            .push(ValueInfo::new("b", DataType::Float, vec![Dim::Fixed(2)]));
        g
    }

    #[test]
    fn orders_producers_first() {
        assert_eq!(chain().topological_order().unwrap(), vec![1, 0]);
    }

    #[test]
    fn detects_dangling_duplicate_and_cycle() {
        let mut g = chain();
        g.nodes.push(Node::new("Relu", ["missing"], ["c"]));
        assert!(matches!(
            g.topological_order(),
            Err(IrError::Dangling { .. })
        ));

        let mut g = chain();
        g.nodes.push(Node::new("Relu", ["x"], ["a"]));
        assert_eq!(
            g.topological_order(),
            Err(IrError::DuplicateProducer("a".into()))
        );

        let mut g = chain();
        g.nodes[1].inputs[0] = "b".into();
        assert_eq!(g.topological_order(), Err(IrError::Cycle));
    }

    #[test]
    fn outer_references_follow_nested_graphs() {
        let mut inner = Graph::default();
        inner.nodes.push(Node::new("Add", ["a", "outer2"], ["b"]));
        inner
            .outputs
            .push(ValueInfo::new("b", DataType::Float, vec![]));
        let mut body = Graph::default();
        body.nodes.push(Node::new("Relu", ["outer1"], ["a"]));
        body.nodes.push(
            Node::new("If", ["c"], ["r"])
                .with_attr("then_branch", Attribute::Graph(Box::new(inner))),
        );
        body.outputs
            .push(ValueInfo::new("r", DataType::Float, vec![]));
        body.outputs
            .push(ValueInfo::new("outer3", DataType::Float, vec![]));
        assert_eq!(
            body.outer_references(),
            vec!["outer1", "c", "outer2", "outer3"]
        );
    }

    #[test]
    fn value_lookup_and_opsets() {
        let mut g = chain();
        g.initializers
            .insert("w".into(), TensorData::from_f32(vec![2], &[1.0, 2.0]));
        g.opset_imports.insert("".into(), 17);
        assert_eq!(g.value("w").unwrap().fixed_shape(), Some(vec![2]));
        assert_eq!(g.value("x").unwrap().rank(), Some(1));
        assert_eq!(g.opset("ai.onnx"), Some(17));
        assert_eq!(g.opset("com.microsoft"), None);
    }
}
