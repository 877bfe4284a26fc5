//! EPContext caches: a fused group's lowered [`plan::Plan`], saved in an `EPContext` node of a
//! compiled model and loaded back without partitioning or lowering.
//!
//! Compiling a model (session option `ep.context_enable=1`, or ORT's model compiler) makes
//! the EP write one `com.microsoft.EPContext` node per fused group: `source` is this EP,
//! `embed_mode` 1, and `ep_cache_context` this module's text blob:
//!
//! ```text
//! ORTMLX-EPCONTEXT 1
//! ep=<EP version>
//! mlx=<MLX version>
//! plan=<fingerprint of the plan types' source>
//! source=<SHA-256 of the source subgraph>
//! digest=<SHA-256 of the payload bytes>
//! payload=<base64 of the bincode-encoded plan>
//! ```
//!
//! The payload holds no initializer bytes: a constant that came from an initializer keeps its
//! type and dims and is filled again at load time from the initializer of that name, which the
//! `EPContext` node takes as an input (so ORT keeps it in the compiled model, inline or in its
//! external data file). Loading checks the versions and the plan fingerprint (a stale cache),
//! the digest (a corrupt or edited one), decodes with a size limit and then validates every
//! slot index and every initializer against the plan: any mismatch is an error naming what
//! differs and saying to compile the model again from the original.

use std::collections::HashMap;
use std::fmt::Write as _;

use onnx_ir::{Attribute, Graph, TensorData};
use sha2::{Digest, Sha256};

use crate::error::EpError;
use crate::options::EP_NAME;

/// The `EPContext` op type and domain.
pub const OP_TYPE: &str = "EPContext";
/// The `EPContext` domain.
pub const DOMAIN: &str = "com.microsoft";

/// The blob's first line; the number is the layout of the blob itself.
const MAGIC: &str = "ORTMLX-EPCONTEXT 1";

/// The EP's version.
pub const EP_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Fingerprint of the source of the serialized plan types (from `build.rs`).
pub const PLAN_FINGERPRINT: &str = env!("PLAN_TYPES_FINGERPRINT");

/// The linked MLX's version.
pub fn mlx_version() -> String {
    mlx::version()
}

/// Processes-wide counts of plans lowered from ONNX nodes and of plans loaded from EPContext
/// caches (exported as `OrtMlxEp_LoweringCount` / `OrtMlxEp_ContextLoadCount`).
pub mod counters {
    use std::sync::atomic::{AtomicU64, Ordering};

    static LOWERINGS: AtomicU64 = AtomicU64::new(0);
    static CONTEXT_LOADS: AtomicU64 = AtomicU64::new(0);

    /// A plan was lowered (`plan::build_plan`).
    pub fn lowered() {
        LOWERINGS.fetch_add(1, Ordering::Relaxed);
    }

    /// A plan was loaded from an EPContext cache.
    pub fn loaded() {
        CONTEXT_LOADS.fetch_add(1, Ordering::Relaxed);
    }

    /// Plans lowered so far in this process.
    pub fn lowerings() -> u64 {
        LOWERINGS.load(Ordering::Relaxed)
    }

    /// Plans loaded from EPContext caches so far in this process.
    pub fn context_loads() -> u64 {
        CONTEXT_LOADS.load(Ordering::Relaxed)
    }
}

/// Hex of a digest.
fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// SHA-256 of the fused group as ONNX: its nodes (name, op, domain, inputs, outputs,
/// attributes), interface (names, types, shapes) and initializers (names, types, dims).
pub fn source_hash(g: &Graph) -> String {
    let mut h = Sha256::new();
    for n in &g.nodes {
        h.update(format!(
            "node {}|{}|{}|{:?}|{:?}|{:?}\n",
            n.name, n.domain, n.op_type, n.inputs, n.outputs, n.attributes
        ));
    }
    for v in &g.inputs {
        h.update(format!("in {}|{:?}|{:?}\n", v.name, v.dtype, v.shape));
    }
    for v in &g.outputs {
        h.update(format!("out {}|{:?}|{:?}\n", v.name, v.dtype, v.shape));
    }
    let mut inits: Vec<(&String, &TensorData)> = g.initializers.iter().collect();
    inits.sort_by(|a, b| a.0.cmp(b.0));
    for (name, t) in inits {
        h.update(format!(
            "init {name}|{:?}|{:?}|{}\n",
            t.dtype,
            t.dims,
            t.bytes.len()
        ));
    }
    hex(&h.finalize())
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64 (padding required, no whitespace).
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for (k, chunk) in bytes.chunks(4).enumerate() {
        let last = k + 1 == bytes.len() / 4;
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = (n << 6) | value(c)?;
        }
        n <<= 6 * pad as u32;
        let got = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&got[..3 - pad]);
    }
    Some(out)
}

/// The plan with every initializer-sourced constant's bytes left out (type and dims kept).
fn strip_weights(plan: &plan::Plan) -> plan::Plan {
    let mut stripped = plan.clone();
    for ((_, t), source) in stripped
        .constants
        .iter_mut()
        .zip(&stripped.constant_sources)
    {
        if source.is_some() {
            *t = TensorData {
                dtype: t.dtype,
                dims: t.dims.clone(),
                bytes: Vec::new().into(),
            };
        }
    }
    stripped
}

/// Initializers the plan reads by name (the `EPContext` node's extra inputs), in plan order.
pub fn weight_names(plan: &plan::Plan) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for name in plan.constant_sources.iter().flatten() {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}

/// The `ep_cache_context` text of `plan`, lowered from a group whose [`source_hash`] is
/// `source`.
pub fn encode(plan: &plan::Plan, source: &str) -> Result<String, EpError> {
    use bincode::Options as _;
    let payload = bincode::options()
        .with_fixint_encoding()
        .allow_trailing_bytes()
        .serialize(&strip_weights(plan))
        .map_err(|e| EpError::new(format!("serializing the plan failed: {e}")))?;
    let digest = hex(&Sha256::digest(&payload));
    Ok(format!(
        "{MAGIC}\nep={EP_VERSION}\nmlx={}\nplan={PLAN_FINGERPRINT}\nsource={source}\ndigest={digest}\npayload={}",
        mlx_version(),
        base64_encode(&payload)
    ))
}

/// What a blob's header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// EP version that wrote it.
    pub ep: String,
    /// MLX version it was lowered for.
    pub mlx: String,
    /// Plan-type fingerprint.
    pub plan: String,
    /// Source-subgraph hash.
    pub source: String,
}

const RECOMPILE: &str =
    "compile the model again from the original ONNX model (or load the original instead)";

/// Why an `EPContext` blob can't be used; each message ends by saying what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContextError {
    /// The blob is not UTF-8.
    NotText,
    /// The blob does not start with this EP's magic line.
    NotOurFormat,
    /// A line without `key=value` (the line).
    MalformedLine(String),
    /// A header field is missing.
    MissingField(String),
    /// Written by another EP version, MLX version or plan format (what the header says).
    Stale {
        /// EP version of the writer.
        ep: String,
        /// MLX version of the writer.
        mlx: String,
        /// Plan-type fingerprint of the writer.
        plan: String,
    },
    /// The payload is not valid base64.
    BadBase64,
    /// The payload does not match its digest.
    DigestMismatch,
    /// The payload does not decode as a plan (bincode's reason).
    Undecodable(String),
    /// The plan's constant sources and constants differ in number.
    ConstantCount,
    /// The plan reads an initializer the model no longer has.
    MissingInitializer(String),
    /// An initializer's type or shape changed since the plan was made.
    InitializerChanged {
        /// The initializer.
        name: String,
        /// Its element type and dims in the model now.
        now: String,
        /// Those the plan was made for.
        planned: String,
    },
    /// The plan is inconsistent (slots, steps, kernels; the reason).
    InvalidPlan(String),
}

impl std::fmt::Display for ContextError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use ContextError::*;
        match self {
            NotText => write!(f, "ep_cache_context is not text"),
            NotOurFormat => write!(
                f,
                "ep_cache_context does not start with '{MAGIC}': not a cache of this EP's format"
            ),
            MalformedLine(line) => write!(f, "malformed line in ep_cache_context: '{line:.40}'"),
            MissingField(k) => write!(f, "ep_cache_context lacks '{k}'"),
            Stale { ep, mlx, plan } => write!(
                f,
                "stale context: written by {EP_NAME} {ep} for MLX {mlx} (plan format {plan}), this is {EP_NAME} {EP_VERSION} with MLX {} (plan format {PLAN_FINGERPRINT}); {RECOMPILE}",
                mlx_version()
            ),
            BadBase64 => write!(
                f,
                "the payload is not valid base64: corrupt context; {RECOMPILE}"
            ),
            DigestMismatch => write!(
                f,
                "the payload does not match its digest: the context was modified or is corrupt; {RECOMPILE}"
            ),
            Undecodable(e) => write!(f, "the plan does not decode ({e}); {RECOMPILE}"),
            ConstantCount => write!(
                f,
                "constant sources and constants differ in number; {RECOMPILE}"
            ),
            MissingInitializer(name) => write!(
                f,
                "the plan reads initializer '{name}', which the model no longer has; {RECOMPILE}"
            ),
            InitializerChanged { name, now, planned } => write!(
                f,
                "initializer '{name}' is {now}, the plan was made for {planned}; {RECOMPILE}"
            ),
            InvalidPlan(reason) => write!(f, "invalid plan: {reason}; {RECOMPILE}"),
        }
    }
}

impl std::error::Error for ContextError {}

/// Parses, checks and decodes `blob`; fills the weights from `graph`'s initializers and
/// validates the plan against them. Errors name the `EPContext` node.
pub fn decode(blob: &[u8], graph: &Graph, node: &str) -> Result<(Header, plan::Plan), EpError> {
    parse(blob, graph)
        .map_err(|e| EpError::invalid_argument(format!("EPContext node '{node}': {e}")))
}

/// [`decode`] with the reason as a [`ContextError`].
fn parse(blob: &[u8], graph: &Graph) -> Result<(Header, plan::Plan), ContextError> {
    let text = std::str::from_utf8(blob).map_err(|_| ContextError::NotText)?;
    let mut lines = text.split('\n');
    if lines.next() != Some(MAGIC) {
        return Err(ContextError::NotOurFormat);
    }
    let mut fields: HashMap<&str, &str> = HashMap::new();
    for line in lines {
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| ContextError::MalformedLine(line.to_string()))?;
        fields.insert(k, v);
    }
    let field = |k: &str| {
        fields
            .get(k)
            .copied()
            .ok_or_else(|| ContextError::MissingField(k.to_string()))
    };
    let header = Header {
        ep: field("ep")?.to_string(),
        mlx: field("mlx")?.to_string(),
        plan: field("plan")?.to_string(),
        source: field("source")?.to_string(),
    };
    if header.ep != EP_VERSION || header.mlx != mlx_version() || header.plan != PLAN_FINGERPRINT {
        return Err(ContextError::Stale {
            ep: header.ep,
            mlx: header.mlx,
            plan: header.plan,
        });
    }
    let payload = base64_decode(field("payload")?).ok_or(ContextError::BadBase64)?;
    if hex(&Sha256::digest(&payload)) != field("digest")? {
        return Err(ContextError::DigestMismatch);
    }
    use bincode::Options as _;
    let mut plan: plan::Plan = bincode::options()
        .with_fixint_encoding()
        .allow_trailing_bytes()
        .with_limit(payload.len() as u64 * 4 + 1024)
        .deserialize(&payload)
        .map_err(|e| ContextError::Undecodable(e.to_string()))?;
    fill_weights(&mut plan, graph)?;
    validate(&plan).map_err(ContextError::InvalidPlan)?;
    Ok((header, plan))
}

/// Puts the initializers' bytes back into the constants that came from them.
fn fill_weights(plan: &mut plan::Plan, graph: &Graph) -> Result<(), ContextError> {
    if plan.constant_sources.len() != plan.constants.len() {
        return Err(ContextError::ConstantCount);
    }
    for ((_, t), source) in plan.constants.iter_mut().zip(&plan.constant_sources) {
        let Some(name) = source else { continue };
        let init = graph
            .initializers
            .get(name)
            .ok_or_else(|| ContextError::MissingInitializer(name.clone()))?;
        if init.dtype != t.dtype || init.dims != t.dims {
            return Err(ContextError::InitializerChanged {
                name: name.clone(),
                now: format!("{} {:?}", init.dtype, init.dims),
                planned: format!("{} {:?}", t.dtype, t.dims),
            });
        }
        *t = init.clone();
    }
    Ok(())
}

/// Every slot a step, input, output or constant names is below `num_slots`, and the
/// parallel lists agree in length.
fn validate(plan: &plan::Plan) -> Result<(), String> {
    let n = plan.num_slots;
    if plan.slots.len() != n {
        return Err(format!("{} slot infos for {n} slots", plan.slots.len()));
    }
    if plan.outputs.len() != plan.output_names.len() {
        return Err("output slots and names differ in number".into());
    }
    let check = |s: plan::Slot, what: &str| -> Result<(), String> {
        if s.index() < n {
            Ok(())
        } else {
            Err(format!(
                "{what} slot {} is out of range ({n} slots)",
                s.index()
            ))
        }
    };
    for i in &plan.inputs {
        check(i.slot, "input")?;
    }
    for &o in &plan.outputs {
        check(o, "output")?;
    }
    for (s, _) in &plan.constants {
        check(*s, "constant")?;
    }
    for (_, s) in &plan.host.outputs {
        check(*s, "host")?;
    }
    for (k, step) in plan.steps.iter().enumerate() {
        if let plan::Step::HostKernel { kernel, .. } = step
            && plan::host_kernel(kernel).is_none()
        {
            return Err(format!("step {k} names no known host kernel ({kernel:?})"));
        }
        for s in step
            .inputs()
            .into_iter()
            .chain(step.outputs())
            .chain(step.host_reads())
        {
            check(s, &format!("step {k}"))?;
        }
    }
    for span in &plan.nodes {
        if span.steps.end > plan.steps.len() || span.steps.start > span.steps.end {
            return Err(format!("node '{}' names steps out of range", span.name));
        }
    }
    Ok(())
}

/// The `ep_cache_context` attribute of an `EPContext` node of this EP (`source` names it),
/// or `None` for another EP's node.
pub fn cache_of(node: &onnx_ir::Node) -> Option<Result<&[u8], EpError>> {
    if node.op_type != OP_TYPE || node.domain != DOMAIN {
        return None;
    }
    match node.attributes.get("source") {
        Some(Attribute::String(s)) if s == EP_NAME.as_bytes() => {}
        _ => return None,
    }
    if let Some(Attribute::Int(mode)) = node.attributes.get("embed_mode")
        && *mode != 1
    {
        return Some(Err(EpError::invalid_argument(format!(
            "EPContext node '{}': embed_mode {mode} is not supported ({EP_NAME} embeds its context)",
            node.name
        ))));
    }
    Some(match node.attributes.get("ep_cache_context") {
        Some(Attribute::String(s)) => Ok(s.as_slice()),
        _ => Err(EpError::invalid_argument(format!(
            "EPContext node '{}' has no ep_cache_context string",
            node.name
        ))),
    })
}

/// The model-level compatibility string (`GetCompiledModelCompatibilityInfo`): the versions
/// a cache depends on and the source hash of each partition.
pub fn compatibility_info(partitions: &[(String, String)]) -> String {
    let mut s = format!(
        "{EP_NAME};context=1;ep={EP_VERSION};mlx={};plan={PLAN_FINGERPRINT}",
        mlx_version()
    );
    if !partitions.is_empty() {
        s.push_str(";partitions=");
        for (i, (name, hash)) in partitions.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(s, "{name}:{hash}");
        }
    }
    s
}

/// Whether a model compiled with compatibility string `info` runs here: `Ok(())`, or the
/// reason it does not.
pub fn check_compatibility(info: &str) -> Result<(), String> {
    let mut parts = info.split(';');
    if parts.next() != Some(EP_NAME) {
        return Err(format!("not a {EP_NAME} compatibility string"));
    }
    let fields: HashMap<&str, &str> = parts.filter_map(|p| p.split_once('=')).collect();
    let mlx = mlx_version();
    let want = [
        ("context", "1"),
        ("ep", EP_VERSION),
        ("mlx", mlx.as_str()),
        ("plan", PLAN_FINGERPRINT),
    ];
    for (k, v) in want {
        match fields.get(k) {
            Some(got) if *got == v => {}
            got => {
                return Err(format!(
                    "compiled with {k}={}, this build has {k}={v}",
                    got.unwrap_or(&"(none)")
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use onnx_ir::{DataType, Dim, Node, ValueInfo};

    use super::*;

    fn graph() -> Graph {
        let mut g = Graph::default();
        g.opset_imports.insert(String::new(), 17);
        g.inputs
            .push(ValueInfo::new("x", DataType::Float, vec![Dim::Fixed(1024)]));
        g.outputs
            .push(ValueInfo::new("y", DataType::Float, vec![Dim::Fixed(1024)]));
        let w: Vec<f32> = (0..1024).map(|i| i as f32).collect();
        g.initializers
            .insert("w".into(), TensorData::from_f32(vec![1024], &w));
        g.nodes.push(Node::new("Add", ["x", "w"], ["a"]));
        g.value_info.insert(
            "a".into(),
            ValueInfo::new("a", DataType::Float, vec![Dim::Fixed(1024)]),
        );
        // Clip without bounds: infinite limits must survive the encoding.
        g.nodes.push(Node::new("Clip", ["a"], ["y"]));
        g
    }

    fn plan_of(g: &Graph) -> plan::Plan {
        plan::build_plan(g, &plan::Registry::default()).unwrap()
    }

    #[test]
    fn base64_round_trips() {
        for n in 0..20 {
            let data: Vec<u8> = (0..n).map(|i| (i * 37 + 5) as u8).collect();
            assert_eq!(base64_decode(&base64_encode(&data)).unwrap(), data);
        }
        assert_eq!(
            base64_encode(b"any carnal pleas"),
            "YW55IGNhcm5hbCBwbGVhcw=="
        );
        assert!(base64_decode("YW5=IGNh").is_none());
        assert!(base64_decode("abc").is_none());
    }

    #[test]
    fn a_plan_round_trips_without_its_weights() {
        let g = graph();
        let plan = plan_of(&g);
        let blob = encode(&plan, &source_hash(&g)).unwrap();
        // The 4 KiB weight is not in the blob.
        assert!(blob.len() < 4096, "{} bytes", blob.len());
        let (header, back) = decode(blob.as_bytes(), &g, "n").unwrap();
        assert_eq!(header.source, source_hash(&g));
        assert_eq!(back, plan);
    }

    /// NonMaxSuppression and RoiAlign: plans of host kernel steps round-trip by kernel name,
    /// and a name this build doesn't know is refused.
    #[test]
    fn host_kernel_steps_round_trip_by_name() {
        let mut g = Graph::default();
        g.opset_imports.insert(String::new(), 16);
        let f = |n: &str, d: &[i64]| {
            ValueInfo::new(
                n,
                DataType::Float,
                d.iter().map(|&v| Dim::Fixed(v)).collect(),
            )
        };
        g.inputs.push(f("boxes", &[1, 4, 4]));
        g.inputs.push(f("scores", &[1, 1, 4]));
        g.inputs.push(f("x", &[1, 2, 8, 8]));
        g.inputs.push(f("rois", &[3, 4]));
        g.inputs
            .push(ValueInfo::new("bi", DataType::Int64, vec![Dim::Fixed(3)]));
        g.outputs.push(ValueInfo::new(
            "sel",
            DataType::Int64,
            vec![Dim::Symbolic("n".into()), Dim::Fixed(3)],
        ));
        g.outputs.push(f("y", &[3, 2, 2, 2]));
        g.nodes
            .push(Node::new("NonMaxSuppression", ["boxes", "scores"], ["sel"]));
        let mut ra = Node::new("RoiAlign", ["x", "rois", "bi"], ["y"]);
        ra.attributes
            .insert("output_height".into(), onnx_ir::Attribute::Int(2));
        ra.attributes
            .insert("output_width".into(), onnx_ir::Attribute::Int(2));
        g.nodes.push(ra);
        let plan = plan_of(&g);
        let kernels: Vec<&str> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                plan::Step::HostKernel { kernel, .. } => Some(kernel.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(kernels, ["non_max_suppression", "roi_align"]);
        let blob = encode(&plan, "src").unwrap();
        let (_, back) = decode(blob.as_bytes(), &g, "n").unwrap();
        assert_eq!(back, plan);
        let mut renamed = plan.clone();
        for s in &mut renamed.steps {
            if let plan::Step::HostKernel { kernel, .. } = s {
                *kernel = "no_such_kernel".into();
            }
        }
        let err = validate(&renamed).unwrap_err();
        assert!(err.contains("no_such_kernel"), "{err}");
    }

    #[test]
    fn stale_or_edited_contexts_are_refused() {
        let g = graph();
        let blob = encode(&plan_of(&g), "src").unwrap();
        let stale = blob.replace(&format!("ep={EP_VERSION}"), "ep=0.0.0-old");
        let err = parse(stale.as_bytes(), &g).unwrap_err();
        assert!(
            matches!(&err, ContextError::Stale { ep, .. } if ep == "0.0.0-old"),
            "{err:?}"
        );
        // The EP's error names the node and keeps the reason's words.
        let err = decode(stale.as_bytes(), &g, "n").unwrap_err();
        assert!(
            err.message.starts_with("EPContext node 'n': stale context"),
            "{err}"
        );
        // One payload character changed: the digest no longer matches.
        let at = blob.find("payload=").unwrap() + 20;
        let mut edited = blob.clone().into_bytes();
        edited[at] = if edited[at] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            parse(&edited, &g).unwrap_err(),
            ContextError::DigestMismatch
        );
        assert_eq!(
            parse(b"something else", &g).unwrap_err(),
            ContextError::NotOurFormat
        );
    }

    #[test]
    fn a_changed_initializer_is_refused() {
        let g = graph();
        let blob = encode(&plan_of(&g), "src").unwrap();
        let mut other = g.clone();
        other
            .initializers
            .insert("w".into(), TensorData::from_f32(vec![2], &[1.0, 2.0]));
        let err = parse(blob.as_bytes(), &other).unwrap_err();
        assert!(
            matches!(&err, ContextError::InitializerChanged { name, .. } if name == "w"),
            "{err:?}"
        );
        other.initializers.remove("w");
        assert_eq!(
            parse(blob.as_bytes(), &other).unwrap_err(),
            ContextError::MissingInitializer("w".into())
        );
    }

    #[test]
    fn source_hashes_see_the_graph() {
        let g = graph();
        let mut other = g.clone();
        other.nodes[1].op_type = "Sub".into();
        assert_ne!(source_hash(&g), source_hash(&other));
        assert_eq!(source_hash(&g), source_hash(&g.clone()));
    }

    #[test]
    fn compatibility_strings_check_versions() {
        let info = compatibility_info(&[("p0".into(), "abc".into())]);
        assert!(info.contains(";partitions=p0:abc"), "{info}");
        assert_eq!(check_compatibility(&info), Ok(()));
        let old = info.replace(&format!("ep={EP_VERSION}"), "ep=0.0.1");
        assert!(check_compatibility(&old).unwrap_err().contains("ep=0.0.1"));
        assert!(check_compatibility("OtherEP;x=1").is_err());
    }
}
