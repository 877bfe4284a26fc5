//! The op registry: one entry per (domain, op, opset range) with a claim predicate and the
//! lowering that runs what it claims.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;

use onnx_ir::{Attribute, DataType, Graph, Node, TensorData};

use crate::plan::{LowerCtx, PlanError};
use crate::schema_versions::{DOMAIN_OPSETS, ONNX_VERSION, SINCE_VERSIONS};

/// The newest `ai.onnx` opset whose op definitions this planner was checked against (onnx
/// 1.21; versions 24-26 of the registered ops only added element types).
///
/// A node of a model importing a newer opset is claimed only when its op got no new schema
/// since (see [`handled_opset`]).
pub const MAX_KNOWN_OPSET: i64 = 26;

/// The newest opset of each ONNX domain whose op definitions this planner was checked
/// against (onnx 1.21). Domains not listed (`com.microsoft`, ...) have no schema history in
/// onnx: there the registered opset ranges alone decide.
pub const PLANNER_OPSETS: &[(&str, i64)] = &[("", MAX_KNOWN_OPSET), ("ai.onnx.ml", 5)];

/// Why a node is not claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decline {
    /// A human-readable reason, e.g. "Softmax: float64 input is not claimed (...)".
    pub reason: String,
}

impl Decline {
    /// A decline with this reason.
    pub fn new(reason: impl Into<String>) -> Self {
        Decline {
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Decline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for Decline {}

/// Returns `Err(Decline)` with a formatted reason.
#[macro_export]
macro_rules! decline {
    ($($arg:tt)*) => {
        return Err($crate::Decline::new(format!($($arg)*)))
    };
}

/// The opsets in which `domain::op_type` got a schema, ascending, from onnx's schema history
/// (the generated table `schema_versions.rs`); `None` when onnx has no such op.
pub fn schema_since_versions(domain: &str, op_type: &str) -> Option<&'static [i64]> {
    let domain = if domain == "ai.onnx" { "" } else { domain };
    SINCE_VERSIONS
        .binary_search_by(|(d, op, _)| (*d, *op).cmp(&(domain, op_type)))
        .ok()
        .map(|i| SINCE_VERSIONS[i].2)
}

/// The opset at which the planner handles a node of `domain::op_type` in a model importing
/// `opset` of that domain, or why it can't.
///
/// Up to the planner's newest opset of the domain ([`PLANNER_OPSETS`]), and for domains it
/// lists no opset for, that is `opset` itself. Above it, an opset bump changes only the ops
/// that got a new schema version in it: when onnx's schema history shows no schema of the op
/// in `(newest, opset]`, the schema in force at `opset` is the one in force at the planner's
/// newest, so the node is handled (claimed and lowered) exactly as at that opset. An op that
/// did change and an opset newer than the schema table knows are declined with the reason. An
/// op the table lacks is not an onnx op (ONNX Runtime defines a few in the ONNX domain) and
/// does not change with onnx's opsets.
pub fn handled_opset(domain: &str, op_type: &str, opset: i64) -> Result<i64, Decline> {
    let domain = if domain == "ai.onnx" { "" } else { domain };
    let Some(&(_, known)) = PLANNER_OPSETS.iter().find(|(d, _)| *d == domain) else {
        return Ok(opset);
    };
    if opset <= known {
        return Ok(opset);
    }
    let name = domain_name(domain);
    let table_newest = DOMAIN_OPSETS
        .iter()
        .find(|(d, _)| *d == domain)
        .map_or(known, |&(_, v)| v);
    if opset > table_newest {
        decline!(
            "{op_type}: {name} opset {opset} is newer than the newest this planner knows ({known}) \
             and than the newest in its schema table (onnx {ONNX_VERSION}: {table_newest})"
        );
    }
    // Not an onnx op: ONNX Runtime defines a few ops in the ONNX domain itself
    // (SimplifiedLayerNormalization, ...), whose schemas don't follow onnx's opset bumps.
    let since = schema_since_versions(domain, op_type).unwrap_or_default();
    if let Some(changed) = since.iter().rev().find(|&&v| v > known && v <= opset) {
        decline!(
            "Op {op_type} got a new schema in opset {changed}, which this planner does not \
             implement (it implements {name} up to opset {known}; the model imports {opset})"
        );
    }
    Ok(known)
}

/// What a claim predicate may look at: the graph (types, ranks, initializers) and the opset.
pub struct ClaimCtx<'g> {
    /// The graph holding the node.
    pub graph: &'g Graph,
    /// The opset version in effect for the node's domain.
    pub opset: i64,
    constants: Option<&'g HashMap<String, TensorData>>,
    registry: Option<&'g Registry>,
    /// When set, [`ClaimCtx::expect_dtype`] records each (input, allowed types) it checks
    /// (how `docs` reads an entry's element types from its claim predicate).
    dtype_checks: Option<&'g DtypeChecks>,
}

/// The element-type checks a claim predicate made: (input index, allowed types).
pub(crate) type DtypeChecks = RefCell<Vec<(usize, Vec<DataType>)>>;

impl<'g> ClaimCtx<'g> {
    /// A context for nodes of `graph` at `opset`.
    pub fn new(graph: &'g Graph, opset: i64) -> Self {
        ClaimCtx {
            graph,
            opset,
            constants: None,
            registry: None,
            dtype_checks: None,
        }
    }

    /// Lets claim predicates of ops with bodies check the bodies' nodes with `registry`.
    pub fn with_registry(mut self, registry: &'g Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// The registry claiming the graph, when the caller gave one (see
    /// [`ClaimCtx::with_registry`]).
    pub fn registry(&self) -> Option<&'g Registry> {
        self.registry
    }

    /// Records the element-type checks of [`ClaimCtx::expect_dtype`] into `checks`.
    pub(crate) fn with_dtype_checks(mut self, checks: &'g DtypeChecks) -> Self {
        self.dtype_checks = Some(checks);
        self
    }

    /// Also treat these values as known constants (Constant-node outputs, folded values).
    pub fn with_constants(mut self, constants: &'g HashMap<String, TensorData>) -> Self {
        self.constants = Some(constants);
        self
    }

    /// The element type of a value, when known.
    pub fn dtype(&self, name: &str) -> Option<DataType> {
        if let Some(t) = self.constant(name) {
            return Some(t.dtype);
        }
        self.graph.value(name).and_then(|v| v.dtype).or_else(|| {
            // A Constant node's output may lack value info.
            let n = self.graph.nodes.iter().find(|n| {
                n.op_type == "Constant" && n.outputs.first().map(String::as_str) == Some(name)
            })?;
            constant_node_dtype(n)
        })
    }

    /// The rank of a value, when known.
    pub fn rank(&self, name: &str) -> Option<usize> {
        if let Some(t) = self.constant(name) {
            return Some(t.dims.len());
        }
        self.graph.value(name).and_then(|v| v.rank())
    }

    /// The value of an initializer (or registered constant), when it is one.
    pub fn constant(&self, name: &str) -> Option<&TensorData> {
        self.graph
            .initializers
            .get(name)
            .or_else(|| self.constants.and_then(|c| c.get(name)))
    }

    /// The dtype of input `i` of `node`, or a decline naming it.
    pub fn input_dtype(&self, node: &Node, i: usize) -> Result<DataType, Decline> {
        let name = node.input(i).ok_or_else(|| {
            Decline::new(format!("{}: required input {i} is missing", node.op_type))
        })?;
        self.dtype(name).ok_or_else(|| {
            Decline::new(format!(
                "{}: element type of input {i} ('{name}') is unknown",
                node.op_type
            ))
        })
    }

    /// Input `i`'s dtype, which must be in `allowed`.
    pub fn expect_dtype(
        &self,
        node: &Node,
        i: usize,
        allowed: &[DataType],
    ) -> Result<DataType, Decline> {
        let widened;
        let allowed = if allowed.contains(&DataType::Float)
            && !allowed.contains(&DataType::Double)
            && float64_claimed(node)
        {
            widened = [allowed, &[DataType::Double]].concat();
            &widened[..]
        } else {
            allowed
        };
        if let Some(checks) = self.dtype_checks {
            checks.borrow_mut().push((i, allowed.to_vec()));
        }
        let dt = self.input_dtype(node, i)?;
        if !allowed.contains(&dt) {
            return Err(Decline::new(format!(
                "{}: input {i} has element type {dt}, which is not claimed{} (claimed: {})",
                node.op_type,
                dtype_note(dt),
                allowed
                    .iter()
                    .map(|d| d.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(dt)
    }

    /// Input `i`'s rank, or a decline saying the op needs it.
    pub fn expect_rank(&self, node: &Node, i: usize) -> Result<usize, Decline> {
        let name = node.input(i).unwrap_or("");
        self.rank(name).ok_or_else(|| {
            Decline::new(format!(
                "{}: the rank of input {i} ('{name}') is unknown and this lowering needs it",
                node.op_type
            ))
        })
    }
}

/// ONNX-domain ops whose float64 form is claimed wherever their float32 form is. MLX computes
/// float64 on its CPU backend only (the runtime puts a plan holding float64 on the CPU stream),
/// and each of these was checked there to compute in float64, not through float32: the
/// float64 sweep (`tests/conformance/run.py --float64`) runs every backend-suite case of the op
/// widened to float64 against ORT's CPU EP at rtol 1e-9, and `tests/python/test_float64.py`
/// pins it. Sorted (binary search).
pub const FLOAT64_OPS: &[&str] = &[
    "Abs",
    "Acos",
    "Acosh",
    "Add",
    "ArgMax",
    "ArgMin",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "AveragePool",
    "BatchNormalization",
    "Cast",
    "CastLike",
    "Ceil",
    "CenterCropPad",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Cosh",
    "CumProd",
    "CumSum",
    "Div",
    "Dropout",
    "Einsum",
    "Elu",
    "Equal",
    "Exp",
    "Expand",
    "EyeLike",
    "Flatten",
    "Floor",
    "Gather",
    "GatherElements",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Greater",
    "GreaterOrEqual",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "InstanceNormalization",
    "IsInf",
    "IsNaN",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "Log",
    "MatMul",
    "Max",
    "MaxPool",
    "Mean",
    "Min",
    "Mod",
    "Mul",
    "Neg",
    "NegativeLogLikelihoodLoss",
    "PRelu",
    "Pad",
    "Pow",
    "Range",
    "Reciprocal",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
    "Relu",
    "Reshape",
    "Round",
    "Shape",
    "Sign",
    "Sinh",
    "Size",
    "Slice",
    "SoftmaxCrossEntropyLoss",
    "Softsign",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Sum",
    "Swish",
    "Tan",
    "Tanh",
    "ThresholdedRelu",
    "Tile",
    "Transpose",
    "Trilu",
    "Unsqueeze",
    "Where",
];

/// Whether `node`'s float64 form is claimed (see [`FLOAT64_OPS`]).
pub fn float64_claimed(node: &Node) -> bool {
    (node.domain.is_empty() || node.domain == "ai.onnx")
        && FLOAT64_OPS.binary_search(&node.op_type.as_str()).is_ok()
}

/// Why a dtype is never claimed, as a parenthesised note.
pub(crate) fn dtype_note(dt: DataType) -> &'static str {
    match dt {
        DataType::Double => {
            " (float64: claimed only for ops checked to compute in float64 on MLX's CPU backend)"
        }
        DataType::String => " (MLX has no strings)",
        DataType::Complex64 | DataType::Complex128 => " (complex types are not claimed)",
        DataType::Float8E4M3FN
        | DataType::Float8E4M3FNUZ
        | DataType::Float8E5M2
        | DataType::Float8E5M2FNUZ
        | DataType::Float4E2M1
        | DataType::Float8E8M0
        | DataType::Int4
        | DataType::Uint4
        | DataType::Int2
        | DataType::Uint2 => " (no MLX dtype; only Cast and (De)QuantizeLinear convert it)",
        _ => "",
    }
}

fn constant_node_dtype(n: &Node) -> Option<DataType> {
    for (k, v) in &n.attributes {
        return Some(match (k.as_str(), v) {
            ("value", Attribute::Tensor(t)) => t.dtype,
            ("value_float" | "value_floats", _) => DataType::Float,
            ("value_int" | "value_ints", _) => DataType::Int64,
            _ => continue,
        });
    }
    None
}

/// A claim predicate: `Ok` when the entry's lowering runs the node exactly.
pub type ClaimFn = fn(&ClaimCtx, &Node) -> Result<(), Decline>;
/// A lowering: emits the node's steps into the context.
pub type LowerFn = fn(&mut LowerCtx, &Node) -> Result<(), PlanError>;

/// One registration: an op at a range of opset versions.
#[derive(Clone, Copy)]
pub struct OpEntry {
    /// Domain (`""` for `ai.onnx`).
    pub domain: &'static str,
    /// Op type.
    pub op_type: &'static str,
    /// First opset version the entry covers.
    pub since: i64,
    /// Last opset version the entry covers.
    pub until: i64,
    /// Claim predicate.
    pub claim: ClaimFn,
    /// Lowering.
    pub lower: LowerFn,
    /// Element types the entry claims, for the documentation; empty when not declared (the
    /// generated docs then read them from the claim predicate). Set with [`EntryMeta::dtypes`].
    pub dtypes: &'static [DataType],
    /// Known limits, for the documentation (`""`: none noted). Set with [`EntryMeta::notes`].
    pub notes: &'static str,
}

/// Documentation metadata of the entry [`Registry::op`] just registered, all optional:
/// `r.op("", "Erf", 9, MAX, claim, lower).notes("computed in float32 for half inputs");`
pub struct EntryMeta<'r> {
    entry: &'r mut OpEntry,
}

impl EntryMeta<'_> {
    /// Declares the element types the entry claims (input 0's, for most ops).
    pub fn dtypes(self, dtypes: &'static [DataType]) -> Self {
        self.entry.dtypes = dtypes;
        self
    }

    /// Notes the entry's known limits (one line of Markdown, shown in `docs/operators.md`).
    pub fn notes(self, notes: &'static str) -> Self {
        self.entry.notes = notes;
        self
    }
}

impl fmt::Debug for OpEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}::{} {}..={}",
            domain_name(self.domain),
            self.op_type,
            self.since,
            self.until
        )
    }
}

pub(crate) fn domain_name(domain: &str) -> &str {
    if domain.is_empty() { "ai.onnx" } else { domain }
}

/// The ops that may read an optional graph input ([`Graph::optional_inputs`]).
const OPTIONAL_READERS: &[&str] = &["OptionalHasElement", "OptionalGetElement"];

/// Every op the planner can lower, keyed by (domain, op type).
pub struct Registry {
    entries: HashMap<(String, String), Vec<OpEntry>>,
    /// Host kernels by name (see [`crate::kernel`]).
    kernels: HashMap<&'static str, crate::kernel::KernelFn>,
}

impl Default for Registry {
    /// A registry with every op family registered.
    fn default() -> Self {
        let mut r = Registry::empty();
        crate::ops::register_all(&mut r);
        r
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.entries()).finish()
    }
}

/// A registration helper: `reg.op("", "Relu", 6, MAX, claim, lower)`.
impl Registry {
    /// A registry with no entries.
    pub fn empty() -> Self {
        Registry {
            entries: HashMap::new(),
            kernels: HashMap::new(),
        }
    }

    /// Registers the host kernel `name` (one line next to the op family that uses it).
    ///
    /// A name registered twice keeps its first kernel (a unit test checks there is none).
    pub fn kernel(&mut self, name: &'static str, run: crate::kernel::KernelFn) {
        if self.kernels.contains_key(name) {
            debug_assert!(false, "host kernel {name:?} registered twice");
            return;
        }
        self.kernels.insert(name, run);
    }

    /// The registered host kernels by name.
    pub fn kernels(&self) -> &HashMap<&'static str, crate::kernel::KernelFn> {
        &self.kernels
    }

    /// Registers one entry.
    pub fn register(&mut self, entry: OpEntry) -> EntryMeta<'_> {
        let list = self
            .entries
            .entry((entry.domain.to_string(), entry.op_type.to_string()))
            .or_default();
        list.push(entry);
        EntryMeta {
            entry: list.last_mut().expect("just pushed"),
        }
    }

    /// Registers `domain::op_type` for opsets `since..=until`; the result takes optional
    /// documentation metadata ([`EntryMeta`]).
    pub fn op(
        &mut self,
        domain: &'static str,
        op_type: &'static str,
        since: i64,
        until: i64,
        claim: ClaimFn,
        lower: LowerFn,
    ) -> EntryMeta<'_> {
        self.register(OpEntry {
            domain,
            op_type,
            since,
            until,
            claim,
            lower,
            dtypes: &[],
            notes: "",
        })
    }

    /// All entries, sorted by domain, op type and opset.
    pub fn entries(&self) -> Vec<OpEntry> {
        let mut v: Vec<OpEntry> = self.entries.values().flatten().copied().collect();
        v.sort_by(|a, b| (a.domain, a.op_type, a.since).cmp(&(b.domain, b.op_type, b.since)));
        v
    }

    /// The entry for `node` at the graph's opset, or the reason there is none, with the opset
    /// the entry handles the node at: the graph's, or the planner's newest when the graph's is
    /// newer and the op's schema did not change since ([`handled_opset`]).
    pub fn lookup(&self, graph: &Graph, node: &Node) -> Result<(OpEntry, i64), Decline> {
        let domain = node.normalized_domain();
        // An optional graph input may be absent at run time: only the optional ops read one.
        if !(domain.is_empty() && OPTIONAL_READERS.contains(&node.op_type.as_str()))
            && let Some(name) = node
                .inputs
                .iter()
                .find(|i| graph.optional_inputs.contains(*i))
        {
            decline!(
                "{}: reads the optional graph input '{name}' (only {} read optionals)",
                node.op_type,
                OPTIONAL_READERS.join(" and ")
            );
        }
        let Some(entries) = self
            .entries
            .get(&(domain.to_string(), node.op_type.clone()))
        else {
            decline!(
                "no MLX lowering for {}::{}",
                domain_name(domain),
                node.op_type
            );
        };
        let Some(opset) = graph.opset(domain) else {
            decline!(
                "the model imports no opset for domain {}",
                domain_name(domain)
            );
        };
        let model_opset = opset;
        let opset = handled_opset(domain, &node.op_type, model_opset)?;
        match entries
            .iter()
            .find(|e| e.since <= opset && opset <= e.until)
        {
            Some(e) => Ok((*e, opset)),
            None => {
                let ranges: Vec<String> = entries
                    .iter()
                    .map(|e| format!("{}..={}", e.since, e.until))
                    .collect();
                let read_as = if opset == model_opset {
                    String::new()
                } else {
                    format!(" (read as {opset}: no new schema since)")
                };
                decline!(
                    "{}::{} at opset {model_opset}{read_as} is outside the supported opset range {}",
                    domain_name(domain),
                    node.op_type,
                    ranges.join(", ")
                )
            }
        }
    }

    /// Whether `node` (of `graph`) is claimed; the reason when not.
    pub fn claim(&self, graph: &Graph, node: &Node) -> Result<(), Decline> {
        let (entry, opset) = self.lookup(graph, node)?;
        (entry.claim)(&ClaimCtx::new(graph, opset).with_registry(self), node)
    }

    /// [`Registry::claim`] with extra known constants (used by the partitioner and planner).
    pub fn claim_with(
        &self,
        graph: &Graph,
        node: &Node,
        constants: &HashMap<String, TensorData>,
    ) -> Result<(), Decline> {
        let (entry, opset) = self.lookup(graph, node)?;
        (entry.claim)(
            &ClaimCtx::new(graph, opset)
                .with_constants(constants)
                .with_registry(self),
            node,
        )
    }
}
