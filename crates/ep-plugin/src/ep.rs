//! The `OrtEp` implementation: claiming nodes (`GetCapability`) and compiling fused groups.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::ffi::{CStr, c_char, c_int};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use onnx_ir::{Graph, ValueInfo};
use ort_sys::{OrtGraph, OrtLogger, OrtLoggingLevel, OrtNode, OrtRunOptions, OrtStatusPtr};

use crate::abi::{
    ORT_ABI_VERSION, OrtEp, OrtEpGraphSupportInfo, OrtEpProfilerImpl, OrtNodeComputeInfo,
    OrtNodeFusionOptions, PROFILING_CATEGORY_SESSION, StatusPtr, ep_version_for_host,
};
use crate::api::Api;
use crate::compute::ComputeInfo;
use crate::context::{self, counters};
use crate::error::{EpError, guard, guard_value};
use crate::graph_reader::{Scope, read_graph, value_name};
use crate::logging;
use crate::options::EpOptions;
use crate::profiler::{EpEvent, ProfileHub};
use crate::summary::{NotClaimed, SessionSummary, is_own_fused_node};

const NAME: &CStr = c"MLXExecutionProvider";

/// Domain given to nodes another EP already owns, so that no registry entry claims them.
const FOREIGN_DOMAIN: &str = "ortmlx.assigned_elsewhere";

/// One EP instance (one per session); the vtable is its first field.
#[repr(C)]
pub struct Ep {
    base: OrtEp,
    api: Api,
    options: EpOptions,
    registry: plan::Registry,
    /// Whether some `GetCapability` call of this EP (session) claimed nodes.
    claimed: AtomicBool,
    /// The session's logger (ORT's, from `CreateEp`; lives as long as the session), for the
    /// placement summary. May be null.
    logger: *const OrtLogger,
    /// Where the session's nodes went, over all `GetCapability` passes.
    summary: SessionSummary,
    /// Whether the placement summary was reported (at the session's first run).
    summary_reported: AtomicBool,
    /// The profilers ORT asked for (`CreateProfiler`, ORT >= 1.25) that record now.
    profiles: Arc<ProfileHub>,
    /// (fused node, source hash) of each group compiled into an EPContext node.
    context_partitions: Mutex<Vec<(String, String)>>,
    /// The last compatibility string handed to ORT (kept alive for it to copy).
    compatibility: Mutex<CString>,
}

impl Ep {
    /// An EP with the given options, logging through the session's `logger` (may be null).
    pub fn new(api: Api, options: EpOptions, logger: *const OrtLogger) -> Box<Self> {
        Box::new(Ep {
            base: OrtEp {
                ort_version_supported: ep_version_for_host(api.host_minor),
                GetName: get_name,
                GetCapability: get_capability,
                Compile: compile,
                ReleaseNodeComputeInfos: release_node_compute_infos,
                GetPreferredDataLayout: None,
                ShouldConvertDataLayoutForOp: None,
                SetDynamicOptions: None,
                OnRunStart: Some(on_run_start),
                OnRunEnd: Some(on_run_end),
                CreateAllocator: None,
                CreateSyncStreamForDevice: None,
                GetCompiledModelCompatibilityInfo: Some(get_compiled_model_compatibility_info),
                GetKernelRegistry: None,
                IsConcurrentRunSupported: Some(is_concurrent_run_supported),
                Sync: Some(sync),
                CreateProfiler: Some(create_profiler),
            },
            api,
            options,
            registry: plan::Registry::default(),
            claimed: AtomicBool::new(false),
            logger,
            summary: SessionSummary::default(),
            summary_reported: AtomicBool::new(false),
            profiles: Arc::new(ProfileHub::default()),
            context_partitions: Mutex::new(Vec::new()),
            compatibility: Mutex::new(CString::default()),
        })
    }
}

crate::abi::vtable_object!(Ep, OrtEp);

unsafe extern "system" fn get_name(_this: *const OrtEp) -> *const c_char {
    NAME.as_ptr()
}

/// Marks nodes that ORT already assigned to another EP so the registry declines them (they
/// stay in the graph, so clusters remain convex around them). Returns node name -> EP name.
fn mark_foreign_nodes(
    api: &Api,
    graph: &mut Graph,
    nodes: &[*const OrtNode],
) -> HashMap<String, String> {
    let mut foreign = HashMap::new();
    for (node, &handle) in graph.nodes.iter_mut().zip(nodes) {
        let mut ep: *const c_char = ptr::null();
        // SAFETY: live node handle.
        let st = unsafe { (api.ort.Node_GetEpName)(handle, &mut ep) };
        if api.check(st, "Node_GetEpName").is_err() || ep.is_null() {
            continue;
        }
        // SAFETY: NUL-terminated from ORT.
        let ep = unsafe { CStr::from_ptr(ep) }.to_string_lossy();
        if !ep.is_empty() && ep != crate::options::EP_NAME {
            log::debug!("node '{}' is already assigned to {ep}", node.name);
            node.domain = FOREIGN_DOMAIN.to_string();
            foreign.insert(node.name.clone(), ep.into_owned());
        }
    }
    foreign
}

/// Ops whose lowering reproduces the float formulas of one range of ORT releases' CPU kernels
/// (MLAS lookup tables and requantisation): (domain, op, the first ORT minor version matched).
/// On an older host they stay on ORT's CPU EP, whose own results differ from newer releases.
const HOST_FORMULA_OPS: &[(&str, &str, u32)] = &[
    ("com.microsoft", "QLinearSoftmax", 31),
    ("com.microsoft", "QLinearAdd", 31),
    ("com.microsoft", "QLinearMul", 31),
];

/// Puts the [`HOST_FORMULA_OPS`] nodes that this host's ORT computes differently in the
/// foreign domain (they stay on the CPU EP); returns how many.
fn hold_back_for_host(graph: &mut Graph, host_minor: u32) -> usize {
    let mut held = 0;
    for node in &mut graph.nodes {
        let matched = HOST_FORMULA_OPS
            .iter()
            .find(|&&(d, op, since)| node.domain == d && node.op_type == op && host_minor < since);
        if let Some(&(_, op, since)) = matched {
            log::debug!(
                "node '{}' ({op}) stays on the CPU EP: its formulas match ORT 1.{since} and newer",
                node.name
            );
            node.domain = FOREIGN_DOMAIN.to_string();
            held += 1;
        }
    }
    held
}

/// Puts the nodes that produce the graph's outputs in the foreign domain, so that nothing
/// claims them (the body of a control-flow node ORT runs, see [`crate::device_memory`]);
/// returns their names.
fn hold_back_output_producers(graph: &mut Graph) -> HashSet<String> {
    let outputs: HashSet<String> = graph.outputs.iter().map(|v| v.name.clone()).collect();
    let mut held = HashSet::new();
    for node in &mut graph.nodes {
        if node.outputs.iter().any(|o| outputs.contains(o)) {
            node.domain = FOREIGN_DOMAIN.to_string();
            held.insert(node.name.clone());
        }
    }
    held
}

/// Logs the outcome of a partition: a summary at info level, every decline at debug level,
/// and with `ORTMLX_LOG_CLAIMS=1` one line per node on stderr. `refusal` says why claimable
/// clusters are left to ORT after all; `total` counts the graph's nodes but this EP's fused
/// nodes of earlier passes (which `partition.declines` no longer holds either).
fn report_claims(g: &Graph, partition: &plan::Partition, refusal: Option<&str>, total: usize) {
    let claimable: usize = partition.clusters.iter().map(|c| c.nodes.len()).sum();
    let claimed = if refusal.is_some() { 0 } else { claimable };
    log::info!(
        "GetCapability '{}': {claimed} of {total} nodes claimed in {} cluster(s)",
        g.name,
        if refusal.is_some() {
            0
        } else {
            partition.clusters.len()
        }
    );
    for line in plan::decline_summary(partition) {
        log::info!("  declined: {line}");
    }
    for d in &partition.declines {
        log::debug!(
            "decline {} ({} {}): {}",
            d.node,
            d.domain,
            d.op_type,
            d.reason
        );
    }
    if logging::claims_file().is_some() {
        record_claims(g, partition, refusal);
    }
    if !logging::claims_enabled() {
        return;
    }
    logging::claim_line(&format!(
        "graph '{}': {claimed} of {total} node(s) claimed in {} cluster(s){}",
        g.name,
        if refusal.is_some() {
            0
        } else {
            partition.clusters.len()
        },
        match refusal {
            Some(why) => format!("; {claimable} claimable node(s) left to ORT: {why}"),
            None => String::new(),
        }
    ));
    let op = |domain: &str, op_type: &str| {
        if domain.is_empty() {
            op_type.to_string()
        } else {
            format!("{domain}.{op_type}")
        }
    };
    for (ci, cluster) in partition.clusters.iter().enumerate() {
        for &i in &cluster.nodes {
            let n = &g.nodes[i];
            let line = match refusal {
                None => format!(
                    "claim   {} ({}) -> cluster {ci}",
                    n.name,
                    op(&n.domain, &n.op_type)
                ),
                Some(why) => format!("left    {} ({}): {why}", n.name, op(&n.domain, &n.op_type)),
            };
            logging::claim_line(&line);
        }
    }
    for d in &partition.declines {
        logging::claim_line(&format!(
            "decline {} ({}): {}",
            d.node,
            op(&d.domain, &d.op_type),
            d.reason
        ));
    }
}

/// Appends one JSON line per node of this partition to `ORTMLX_CLAIMS_FILE`.
fn record_claims(g: &Graph, partition: &plan::Partition, refusal: Option<&str>) {
    let mut records = Vec::new();
    for (ci, cluster) in partition.clusters.iter().enumerate() {
        for &i in &cluster.nodes {
            let n = &g.nodes[i];
            records.push(logging::ClaimRecord {
                graph: &g.name,
                node: &n.name,
                domain: &n.domain,
                op_type: &n.op_type,
                action: if refusal.is_some() { "left" } else { "claim" },
                cluster: refusal.is_none().then_some(ci),
                reason: refusal.unwrap_or(""),
            });
        }
    }
    for d in &partition.declines {
        records.push(logging::ClaimRecord {
            graph: &g.name,
            node: &d.node,
            domain: &d.domain,
            op_type: &d.op_type,
            action: "decline",
            cluster: None,
            reason: &d.reason,
        });
    }
    logging::record_claims(&records);
}

unsafe extern "system" fn get_capability(
    this: *mut OrtEp,
    graph: *const OrtGraph,
    support: *mut OrtEpGraphSupportInfo,
) -> StatusPtr {
    guard("GetCapability", || {
        // SAFETY: `this` is our EP.
        let ep = unsafe { Ep::from_ptr(this) };
        let api = &ep.api;
        let mut span = crate::trace::span("capability", || "GetCapability".into());
        // SAFETY: `graph` is live for this callback.
        let mut read = unsafe { read_graph(api, graph, Scope::Closed) }?;
        let foreign = mark_foreign_nodes(api, &mut read.graph, &read.nodes);
        let parent = parent_op(api, graph)?;
        log::debug!(
            "GetCapability '{}': parent node {parent:?}",
            read.graph.name
        );
        // With the device memory declared, ORT copies nothing out of it for the body of a
        // control-flow node it runs (see `device_memory`).
        let in_control_flow = parent
            .as_deref()
            .is_some_and(|op| CONTROL_FLOW_OPS.contains(&op));
        // A body whose If/Loop/Scan this EP claims whole (bodies included) claims nothing
        // itself: the parent's fused node runs it.
        let parent_on_mlx = if in_control_flow {
            parent_claim(api, ep, graph, &read.graph)?
        } else {
            None
        };
        let in_cpu_control_flow = in_control_flow && parent_on_mlx.is_none();
        let held_back = if in_cpu_control_flow && crate::device_memory::enabled() {
            hold_back_output_producers(&mut read.graph)
        } else {
            HashSet::new()
        };
        hold_back_for_host(&mut read.graph, api.host_minor);
        let mut partition = plan::partition_plannable(&read.graph, &ep.registry);
        // ORT 1.23 gives a fused node no inputs for what its nodes' bodies read from outside.
        let mut unfed: HashMap<String, String> = HashMap::new();
        if api.host_minor == 23 {
            for _ in 0..8 {
                let found = unfed_bodies(&read.graph, &partition);
                if found.is_empty() {
                    break;
                }
                for (i, value) in found {
                    let node = &mut read.graph.nodes[i];
                    node.domain = FOREIGN_DOMAIN.to_string();
                    unfed.insert(node.name.clone(), value);
                }
                partition = plan::partition_plannable(&read.graph, &ep.registry);
            }
        }
        let g = &read.graph;
        for d in &mut partition.declines {
            if let Some(other) = foreign.get(&d.node) {
                d.reason = format!("already assigned to {other}");
            } else if let Some(value) = unfed.get(&d.node) {
                d.reason = format!(
                    "a body reads '{value}' from the enclosing graph, which ONNX Runtime 1.23 \
                     does not pass to a fused node"
                );
            } else if held_back.contains(&d.node) {
                d.reason = format!(
                    "produces an output of the {} body that ORT's CPU EP runs (ORT would not \
                     copy it out of MLX memory)",
                    parent.as_deref().unwrap_or("control-flow")
                );
            }
        }
        // Nodes this EP fused in an earlier pass (ORT partitions again after inlining
        // functions) show up as ops of its own domain: neither nodes to claim nor declines.
        partition.declines.retain(|d| !is_own_fused_node(&d.domain));
        // This EP's EPContext nodes (a compiled model): each is one group, loaded in Compile
        // from its cache without lowering.
        let contexts: Vec<usize> = (0..g.nodes.len())
            .filter(|&i| context::cache_of(&g.nodes[i]).is_some())
            .collect();
        if !contexts.is_empty() {
            partition
                .declines
                .retain(|d| !contexts.iter().any(|&i| g.nodes[i].name == d.node));
            partition
                .clusters
                .extend(contexts.iter().map(|&i| plan::Cluster { nodes: vec![i] }));
        }
        let total = g
            .nodes
            .iter()
            .filter(|n| !is_own_fused_node(&n.domain))
            .count();
        let mut refusal = parent
            .as_deref()
            .filter(|op| !CONTROL_FLOW_OPS.contains(op))
            .map(|op| format!("the graph is the body of a {op}, which ORT inlines"))
            .or(parent_on_mlx.clone());
        // A function body's nodes are counted where ORT inlines them, not here.
        let inlined_body = refusal.is_some();
        if refusal.is_none() && api.host_minor == 23 && !partition.clusters.is_empty() {
            refusal = ort_1_23_refusal(api, ep, graph, g, &partition)?;
        }
        report_claims(g, &partition, refusal.as_deref(), total);
        if !inlined_body {
            record_summary(&ep.summary, g, &partition, refusal.as_deref(), &foreign);
        }
        if let Some(why) = &refusal
            && !partition.clusters.is_empty()
        {
            if parent_on_mlx.is_some() {
                // Not a loss: the parent's fused node runs this body.
                log::debug!("leaving graph '{}' to its parent: {why}", g.name);
            } else {
                log::warn!("leaving graph '{}' to ORT: {why}", g.name);
            }
            partition.clusters.clear();
        }
        if !partition.clusters.is_empty() {
            ep.claimed.store(true, Ordering::Relaxed);
        }
        if let Some(span) = span.as_mut() {
            span.rename(format!("GetCapability {}", g.name));
            span.arg("graph", g.name.as_str());
            span.arg("nodes", g.nodes.len());
            span.arg(
                "claimed",
                partition
                    .clusters
                    .iter()
                    .map(|c| c.nodes.len())
                    .sum::<usize>(),
            );
            span.arg("clusters", partition.clusters.len());
            span.arg("declined", partition.declines.len());
            if let Some(why) = &refusal {
                span.arg("refusal", why.as_str());
            }
        }

        let options = OrtNodeFusionOptions {
            ort_version_supported: ORT_ABI_VERSION,
            // The plan keeps its own copy of constant initializers (read in Compile), so ORT
            // need not feed them as inputs and may free those only this EP uses; but when the
            // session writes a compiled (EPContext) model, ORT must keep them for that model,
            // whose EPContext nodes read them by name.
            drop_constant_initializers: !ep.options.ep_context,
        };
        for cluster in &partition.clusters {
            let handles: Vec<*const OrtNode> =
                cluster.nodes.iter().map(|&i| read.nodes[i]).collect();
            if handles.is_empty() {
                continue;
            }
            // SAFETY: live handles of this graph; ORT copies the list.
            let st = unsafe {
                (api.ep.EpGraphSupportInfo_AddNodesToFuse)(
                    support,
                    handles.as_ptr(),
                    handles.len(),
                    &options,
                )
            };
            api.check(OrtStatusPtr(st), "EpGraphSupportInfo_AddNodesToFuse")?;
        }
        Ok(())
    })
}

/// Adds one `GetCapability` pass to the session's placement summary.
fn record_summary(
    summary: &SessionSummary,
    g: &Graph,
    partition: &plan::Partition,
    refusal: Option<&str>,
    foreign: &HashMap<String, String>,
) {
    let claimable: usize = partition.clusters.iter().map(|c| c.nodes.len()).sum();
    let mut not_claimed: Vec<NotClaimed> = partition
        .declines
        .iter()
        .map(|d| NotClaimed {
            node: d.node.clone(),
            reason: d.reason.clone(),
            assigned_elsewhere: foreign.contains_key(&d.node),
        })
        .collect();
    let claimed = match refusal {
        Some(why) => {
            for cluster in &partition.clusters {
                not_claimed.extend(cluster.nodes.iter().map(|&i| NotClaimed {
                    node: g.nodes[i].name.clone(),
                    reason: why.to_string(),
                    assigned_elsewhere: false,
                }));
            }
            0
        }
        None => claimable,
    };
    summary.record(&g.name, claimed, not_claimed);
}

/// Reports the session's placement summary once, at its first run (partitioning, with its
/// passes after function inlining, is over by then): one warning through the session's
/// logger when some node does not run on MLX, so ORT's default level (warning) shows it.
fn report_summary(ep: &Ep) {
    if ep.summary_reported.swap(true, Ordering::Relaxed) {
        return;
    }
    let Some(line) = ep.summary.line() else {
        return;
    };
    log_warning(&ep.api, ep.logger, &line);
}

/// Logs `message` at warning level through ORT's `logger` (null: straight to stderr).
fn log_warning(api: &Api, logger: *const OrtLogger, message: &str) {
    if !logger.is_null() {
        let text = crate::api::to_cstring(message);
        let line = c_int::try_from(line!()).unwrap_or(0);
        // SAFETY: the session's logger outlives this EP instance; the strings live across
        // the call.
        let st = unsafe {
            (api.ort.Logger_LogMessage)(
                logger,
                OrtLoggingLevel::ORT_LOGGING_LEVEL_WARNING,
                text.as_ptr(),
                c"ep.rs".as_ptr(),
                line,
                c"MLXExecutionProvider".as_ptr(),
            )
        };
        if api.check(st, "Logger_LogMessage").is_ok() {
            return;
        }
    }
    logging::warning_line(message);
}

/// The node whose subgraph `graph` is (If/Loop/Scan body), if it is one.
fn parent_node(api: &Api, graph: *const OrtGraph) -> Result<Option<*const OrtNode>, EpError> {
    // SAFETY: live graph.
    let parent: *const OrtNode = api.out("Graph_GetParentNode", ptr::null(), |out| unsafe {
        (api.ort.Graph_GetParentNode)(graph, out)
    })?;
    Ok((!parent.is_null()).then_some(parent))
}

/// The op type of the node whose subgraph `graph` is (If/Loop/Scan body), if it is one.
fn parent_op(api: &Api, graph: *const OrtGraph) -> Result<Option<String>, EpError> {
    let Some(parent) = parent_node(api, graph)? else {
        return Ok(None);
    };
    // SAFETY: live parent node.
    let op: *const c_char = api.out("Node_GetOperatorType", ptr::null(), |out| unsafe {
        (api.ort.Node_GetOperatorType)(parent, out)
    })?;
    // SAFETY: NUL-terminated from ORT.
    Ok(Some(unsafe { crate::api::cstr_lossy(op) }))
}

/// The clustered nodes (index, one such value) whose bodies read a value from outside their
/// cluster that no node of the cluster reads as an ordinary input and that is no constant:
/// ORT 1.23 would not pass it to the fused node.
fn unfed_bodies(g: &Graph, partition: &plan::Partition) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for cluster in &partition.clusters {
        let mut fed: HashSet<&str> = HashSet::new();
        for &i in &cluster.nodes {
            let n = &g.nodes[i];
            fed.extend(n.inputs.iter().chain(&n.outputs).map(String::as_str));
        }
        for &i in &cluster.nodes {
            let n = &g.nodes[i];
            let missing = Graph::subgraphs_of(n)
                .into_iter()
                .flat_map(|(_, b)| b.outer_references())
                .find(|r| !fed.contains(r.as_str()) && !g.initializers.contains_key(r));
            if let Some(value) = missing {
                out.push((i, value));
            }
        }
    }
    out
}

/// When `graph` is a body of an If/Loop/Scan node that this EP claims whole, the reason its
/// own nodes are left alone; `None` when the parent stays on ORT's CPU EP (or there is none).
fn parent_claim(
    api: &Api,
    ep: &Ep,
    graph: *const OrtGraph,
    body: &Graph,
) -> Result<Option<String>, EpError> {
    let Some(parent) = parent_node(api, graph)? else {
        return Ok(None);
    };
    // SAFETY: the parent node is live for this callback.
    let mut alone = match unsafe { crate::graph_reader::read_node_alone(api, parent) } {
        Ok(g) => g,
        Err(e) => {
            log::debug!("reading the parent of '{}' failed: {e}", body.name);
            return Ok(None);
        }
    };
    alone.opset_imports = body.opset_imports.clone();
    let node = &alone.nodes[0];
    Ok(match ep.registry.claim(&alone, node) {
        Ok(()) => Some(format!(
            "the graph is a body of {} '{}', which runs on MLX with its bodies",
            node.op_type, node.name
        )),
        Err(d) => {
            log::debug!(
                "the {} '{}' holding '{}' stays on ORT's CPU EP: {d}",
                node.op_type,
                node.name,
                body.name
            );
            None
        }
    })
}

/// Why ORT 1.23 can't take this graph's clusters, if it can't.
///
/// - 1.23.x names fused nodes `<EP>_<model hash>_<id>` with ids restarting at 0 in every
///   `GetCapability` call, so clusters claimed in two calls of one session (a subgraph and the
///   main graph, or the main graph before and after function inlining) collide: "Conflicting
///   with a registered kernel". Only the first claiming call of a session may claim.
/// - 1.23.x gives subgraphs no parent node, so nested graphs are recognised by name (a
///   subgraph's name differs from the model's graph name) and left alone: a claim there would
///   block the main graph's claims (and in function bodies, like SequenceMap's, breaks
///   inlining).
/// - 1.23.0 also can't mix this EP with the CPU EP in one graph (its memcpy transformer
///   finds no MemcpyFromHost kernel for plugin EPs; fixed in 1.23.1).
fn ort_1_23_refusal(
    api: &Api,
    ep: &Ep,
    graph: *const OrtGraph,
    g: &Graph,
    partition: &plan::Partition,
) -> Result<Option<String>, EpError> {
    if ep.claimed.load(Ordering::Relaxed) {
        return Ok(Some(
            "ONNX Runtime 1.23 allows one claiming pass per session (fused-node names collide)"
                .into(),
        ));
    }
    if let Some(model_graph) = model_graph_name(api, graph)
        && model_graph != g.name
    {
        return Ok(Some(format!(
            "nested graph (the model's graph is '{model_graph}'); ONNX Runtime 1.23 allows one claiming pass per session"
        )));
    }
    if api.needs_whole_graphs() && !partition.declines.is_empty() {
        return Ok(Some(format!(
            "ONNX Runtime 1.23.0 can't mix this EP with the CPU EP in one graph ({} node(s) declined; fixed in 1.23.1)",
            partition.declines.len()
        )));
    }
    Ok(None)
}

/// The model's main graph name, from the model metadata ORT attaches to every graph.
fn model_graph_name(api: &Api, graph: *const OrtGraph) -> Option<String> {
    let o = api.ort;
    let mut meta: *mut ort_sys::OrtModelMetadata = ptr::null_mut();
    // SAFETY: live graph; ORT only reads it (the C signature lacks const).
    let st = unsafe { (o.Graph_GetModelMetadata)(graph as *mut OrtGraph, &mut meta) };
    api.check(st, "Graph_GetModelMetadata").ok()?;
    if meta.is_null() {
        return None;
    }
    let mut alloc: *mut ort_sys::OrtAllocator = ptr::null_mut();
    let mut name: *mut c_char = ptr::null_mut();
    // SAFETY: ORT's default allocator is static.
    let ok = api
        .check(unsafe { (o.GetAllocatorWithDefaultOptions)(&mut alloc) }, "GetAllocatorWithDefaultOptions")
        .is_ok()
        // SAFETY: live metadata; the string comes from `alloc`.
        && api
            .check(unsafe { (o.ModelMetadataGetGraphName)(meta, alloc, &mut name) }, "ModelMetadataGetGraphName")
            .is_ok();
    // SAFETY: NUL-terminated from ORT.
    let result = (ok && !name.is_null()).then(|| unsafe { crate::api::cstr_lossy(name) });
    if !name.is_null() {
        // SAFETY: allocated by `alloc`.
        api.discard(unsafe { (o.AllocatorFree)(alloc, name.cast()) });
    }
    // SAFETY: we own it.
    unsafe { (o.ReleaseModelMetadata)(meta) };
    result
}

/// Ops whose subgraphs ORT runs as they are; other graph-carrying ops (SequenceMap, ...) are
/// functions that ORT inlines after partitioning, and a fused node inside their body then
/// breaks the inlined graph (measured on 1.31: "No opset import for domain
/// 'MLXExecutionProvider'").
const CONTROL_FLOW_OPS: &[&str] = &["If", "Loop", "Scan"];

/// Names of a node's inputs or outputs ("" for absent optional ones).
fn node_io(api: &Api, node: *const OrtNode, outputs: bool) -> Result<Vec<String>, EpError> {
    let o = api.ort;
    let mut n = 0usize;
    // SAFETY (all calls): live node; buffers sized by the count.
    let st = unsafe {
        if outputs {
            (o.Node_GetNumOutputs)(node, &mut n)
        } else {
            (o.Node_GetNumInputs)(node, &mut n)
        }
    };
    api.check(st, "Node_GetNum{Inputs,Outputs}")?;
    let mut list = vec![ptr::null(); n];
    if n > 0 {
        let st = unsafe {
            if outputs {
                (o.Node_GetOutputs)(node, list.as_mut_ptr(), n)
            } else {
                (o.Node_GetInputs)(node, list.as_mut_ptr(), n)
            }
        };
        api.check(st, "Node_Get{Inputs,Outputs}")?;
    }
    list.into_iter()
        .map(|vi| {
            if vi.is_null() {
                Ok(String::new())
            } else {
                // SAFETY: live value info of the node.
                unsafe { value_name(api, vi) }
            }
        })
        .collect()
}

/// Sets the IR graph's interface to the fused node's: inputs in the fused node's order
/// (constants excluded: the graph holds them), outputs in its output order.
pub fn align_interface(
    graph: &mut Graph,
    fused_inputs: &[String],
    fused_outputs: &[String],
) -> Result<(), EpError> {
    let lookup = |graph: &Graph, name: &str| -> ValueInfo {
        graph.value(name).unwrap_or_else(|| ValueInfo {
            name: name.to_string(),
            ..ValueInfo::default()
        })
    };
    let read_inputs: HashMap<String, ValueInfo> = graph
        .inputs
        .drain(..)
        .map(|v| (v.name.clone(), v))
        .collect();
    let mut inputs = Vec::new();
    for name in fused_inputs.iter().filter(|n| !n.is_empty()) {
        if graph.initializers.contains_key(name)
            || inputs.iter().any(|v: &ValueInfo| &v.name == name)
        {
            continue;
        }
        inputs.push(
            read_inputs
                .get(name)
                .cloned()
                .unwrap_or_else(|| lookup(graph, name)),
        );
    }
    // Inputs the group reads that the fused node doesn't list would be unbound at run time.
    for (name, _) in read_inputs {
        if !inputs.iter().any(|v| v.name == name) && !graph.initializers.contains_key(&name) {
            return Err(EpError::new(format!(
                "the fused group reads '{name}', which is not an input of the fused node"
            )));
        }
    }
    graph.inputs = inputs;
    let outputs: Vec<ValueInfo> = fused_outputs
        .iter()
        .map(|name| {
            graph
                .outputs
                .iter()
                .find(|v| &v.name == name)
                .cloned()
                .unwrap_or_else(|| lookup(graph, name))
        })
        .collect();
    graph.outputs = outputs;
    Ok(())
}

/// Compiles one fused group into a compute info.
/// An EPContext node to hand ORT for a compiled group.
struct ContextNode {
    name: String,
    inputs: Vec<String>,
    outputs: Vec<String>,
    blob: String,
    notes: String,
}

/// Compiles one fused group into a compute info; also describes its EPContext node when the
/// session compiles the model (`ep.context_enable=1`).
fn compile_one(
    ep: &Ep,
    graph: *const OrtGraph,
    fused: *const OrtNode,
) -> Result<(Box<ComputeInfo>, Option<ContextNode>), EpError> {
    let api = &ep.api;
    let mut span = crate::trace::span("compile", || "Compile".into());
    // SAFETY: live for this callback.
    let mut read = unsafe { read_graph(api, graph, Scope::Closed) }?;
    // SAFETY: live fused node.
    let fused_name: *const c_char = api.out("Node_GetName", ptr::null(), |out| unsafe {
        (api.ort.Node_GetName)(fused, out)
    })?;
    // SAFETY: NUL-terminated from ORT.
    let fused_name = unsafe { crate::api::cstr_lossy(fused_name) };
    let fused_inputs = node_io(api, fused, false)?;
    let fused_outputs = node_io(api, fused, true)?;
    align_interface(&mut read.graph, &fused_inputs, &fused_outputs)
        .map_err(|e| e.context(&fused_name))?;
    read.graph.name = fused_name.clone();

    let lowering_start = Instant::now();
    let cache = match read.graph.nodes.as_slice() {
        [only] => context::cache_of(only),
        _ => None,
    };
    let from_context = cache.is_some();
    let (plan, source) = match cache {
        Some(blob) => {
            let node = &read.graph.nodes[0];
            let (header, mut plan) = context::decode(blob?, &read.graph, &node.name)?;
            order_outputs(&mut plan, &fused_outputs).map_err(|e| e.context(&node.name))?;
            counters::loaded();
            log::info!(
                "Compile '{fused_name}': plan loaded from EPContext node '{}' (source {})",
                node.name,
                header.source
            );
            (plan, Some(header.source))
        }
        None => {
            let plan = plan::build_plan(&read.graph, &ep.registry).map_err(|e| {
                EpError::new(format!("{fused_name}: building the plan failed: {e}"))
            })?;
            counters::lowered();
            let source = ep
                .options
                .ep_context
                .then(|| context::source_hash(&read.graph));
            (plan, source)
        }
    };
    let input_map = plan
        .inputs
        .iter()
        .map(|pi| {
            fused_inputs
                .iter()
                .position(|n| *n == pi.name)
                .ok_or_else(|| {
                    EpError::new(format!(
                        "{fused_name}: plan input '{}' is not an input of the fused node",
                        pi.name
                    ))
                })
        })
        .collect::<Result<Vec<usize>, _>>()?;
    let input_names: Vec<String> = plan.inputs.iter().map(|pi| pi.name.clone()).collect();
    let output_dtypes = read.graph.outputs.iter().map(|v| v.dtype).collect();
    let lowered = lowering_start.elapsed();
    // The cache holds the plan as lowered, before the runtime's own rewrites (dequantized
    // weights, layouts), which it makes again when it loads the plan.
    let cached = match (ep.options.ep_context, &source) {
        (true, Some(source)) => Some((
            context::encode(&plan, source).map_err(|e| e.context(&fused_name))?,
            context::weight_names(&plan),
            plan.nodes.len(),
            plan.steps.len(),
        )),
        _ => None,
    };
    let exe = runtime::Executable::new(
        plan,
        &runtime::RuntimeOptions {
            device: ep.options.device,
            compile: ep.options.compile,
            share_initializers: ep.options.share_initializers,
            ..runtime::RuntimeOptions::default()
        },
    )
    .map_err(|e| EpError::new(format!("{fused_name}: preparing the plan failed: {e}")))?;
    if let Some(span) = span.as_mut() {
        span.rename(format!("Compile {fused_name}"));
        span.arg("fused_node", fused_name.as_str());
        span.arg(
            "nodes",
            read.graph
                .nodes
                .iter()
                .map(|n| format!("{} ({})", n.name, n.op_type))
                .collect::<Vec<_>>(),
        );
        span.arg("device", format!("{:?}", ep.options.device));
        span.arg("compile_class", format!("{:?}", exe.plan().compile_class()));
    }
    let prepared = lowering_start.elapsed().saturating_sub(lowered);
    let op_types = op_type_summary(read.graph.nodes.iter().map(|n| n.op_type.as_str()));
    let device = device_name(exe.device());
    if ep.profiles.enabled() {
        let p = exe.plan();
        let (suffix, origin) = if from_context {
            ("context_load", "epcontext")
        } else {
            ("lowering", "lowered")
        };
        ep.profiles.record(EpEvent {
            category: PROFILING_CATEGORY_SESSION,
            name: format!("{fused_name}_mlx_{suffix}"),
            start: lowering_start,
            duration: lowered + prepared,
            args: vec![
                ("ep", crate::options::EP_NAME.to_string()),
                ("fused_node", fused_name.clone()),
                ("source", origin.into()),
                ("nodes", read.graph.nodes.len().to_string()),
                ("op_types", op_types.clone()),
                ("steps", p.steps.len().to_string()),
                ("constants", p.constants.len().to_string()),
                ("compile_class", format!("{:?}", p.compile_class())),
                ("device", device.to_string()),
                ("lowering_us", lowered.as_micros().to_string()),
                ("prepare_us", prepared.as_micros().to_string()),
            ],
        });
    }
    log::info!(
        "Compile '{fused_name}': {} node(s), {} input(s), {} constant(s), {} output(s), device {:?}",
        read.graph.nodes.len(),
        input_map.len(),
        read.graph.initializers.len(),
        fused_outputs.len(),
        exe.device()
    );
    if let Some(span) = span.as_mut() {
        span.arg("source", if from_context { "epcontext" } else { "lowered" });
    }
    let context_node = match (cached, source) {
        (Some((blob, weights, lowered_nodes, lowered_steps)), Some(source)) => {
            let mut inputs: Vec<String> = fused_inputs
                .iter()
                .filter(|n| !n.is_empty() && !read.graph.initializers.contains_key(*n))
                .cloned()
                .collect();
            for w in weights {
                if !inputs.contains(&w) {
                    inputs.push(w);
                }
            }
            ep.context_partitions
                .lock()
                .map_err(|_| EpError::new("poisoned"))?
                .push((fused_name.clone(), source.clone()));
            Some(ContextNode {
                name: fused_name.clone(),
                inputs,
                outputs: fused_outputs.clone(),
                notes: format!(
                    "{lowered_nodes} ONNX node(s) ({op_types}) lowered to {lowered_steps} MLX step(s); source {source}"
                ),
                blob,
            })
        }
        _ => None,
    };
    let info = ComputeInfo::new(
        *api,
        fused_name,
        exe,
        crate::compute::Wiring {
            input_map,
            input_names,
            optional_names: read.graph.optional_inputs.clone(),
            output_dtypes,
        },
        crate::compute::RunLabels {
            nodes: read.graph.nodes.len(),
            op_types,
            device,
            profiles: Arc::clone(&ep.profiles),
        },
    );
    Ok((info, context_node))
}

/// Puts a loaded plan's outputs in the fused node's output order (matched by name).
fn order_outputs(plan: &mut plan::Plan, fused_outputs: &[String]) -> Result<(), EpError> {
    if plan.output_names == fused_outputs {
        return Ok(());
    }
    let mut slots = Vec::with_capacity(fused_outputs.len());
    for name in fused_outputs {
        let at = plan
            .output_names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| {
                EpError::invalid_argument(format!(
                    "the cached plan has no output '{name}': stale context; compile the model again from the original"
                ))
            })?;
        slots.push(plan.outputs[at]);
    }
    plan.outputs = slots;
    plan.output_names = fused_outputs.to_vec();
    Ok(())
}

/// Makes the `EPContext` node ORT writes into the compiled model in place of a fused group.
fn make_context_node(api: &Api, node: &ContextNode) -> Result<*mut OrtNode, EpError> {
    use ort_sys::OrtOpAttrType::{ORT_OP_ATTR_INT, ORT_OP_ATTR_STRING};
    let o = api.ort;
    // SAFETY: GetModelEditorApi exists from 1.22 on and returns ORT's static table.
    let editor = unsafe { (o.GetModelEditorApi)() };
    if editor.is_null() {
        return Err(EpError::new("ORT has no model editor API"));
    }
    // SAFETY: non-null static table.
    let editor = unsafe { &*editor };
    let mut attrs: Vec<*mut ort_sys::OrtOpAttr> = Vec::new();
    let result = (|| -> Result<*mut OrtNode, EpError> {
        let one: i64 = 1;
        let ints: [(&CStr, i64); 2] = [(c"main_context", one), (c"embed_mode", one)];
        for (name, value) in ints {
            let mut a = ptr::null_mut();
            // SAFETY: `value` lives across the call; ORT copies it.
            api.check(
                unsafe {
                    (o.CreateOpAttr)(
                        name.as_ptr(),
                        (&value as *const i64).cast(),
                        1,
                        ORT_OP_ATTR_INT,
                        &mut a,
                    )
                },
                "CreateOpAttr",
            )?;
            attrs.push(a);
        }
        let sdk = format!("MLX {}", context::mlx_version());
        let strings: [(&CStr, &str); 5] = [
            (c"ep_cache_context", node.blob.as_str()),
            (c"ep_sdk_version", sdk.as_str()),
            (c"partition_name", node.name.as_str()),
            (c"source", crate::options::EP_NAME),
            (c"notes", node.notes.as_str()),
        ];
        for (name, value) in strings {
            let len = c_int::try_from(value.len())
                .map_err(|_| EpError::new(format!("{} is too long", name.to_string_lossy())))?;
            let mut a = ptr::null_mut();
            // SAFETY: `value` lives across the call; ORT copies `len` bytes.
            api.check(
                unsafe {
                    (o.CreateOpAttr)(
                        name.as_ptr(),
                        value.as_ptr().cast(),
                        len,
                        ORT_OP_ATTR_STRING,
                        &mut a,
                    )
                },
                "CreateOpAttr",
            )?;
            attrs.push(a);
        }
        let cstrings = |names: &[String]| -> Vec<CString> {
            names.iter().map(|n| crate::api::to_cstring(n)).collect()
        };
        let ins = cstrings(&node.inputs);
        let outs = cstrings(&node.outputs);
        let in_ptrs: Vec<*const c_char> = ins.iter().map(|c| c.as_ptr()).collect();
        let out_ptrs: Vec<*const c_char> = outs.iter().map(|c| c.as_ptr()).collect();
        let name = crate::api::to_cstring(&node.name);
        let op = crate::api::to_cstring(context::OP_TYPE);
        let domain = crate::api::to_cstring(context::DOMAIN);
        let mut out = ptr::null_mut();
        // SAFETY: every array lives across the call; ORT copies names and attributes.
        api.check(
            unsafe {
                (editor.CreateNode)(
                    op.as_ptr(),
                    domain.as_ptr(),
                    name.as_ptr(),
                    in_ptrs.as_ptr(),
                    in_ptrs.len(),
                    out_ptrs.as_ptr(),
                    out_ptrs.len(),
                    attrs.as_mut_ptr(),
                    attrs.len(),
                    &mut out,
                )
            },
            "CreateNode",
        )?;
        Ok(out)
    })();
    for a in attrs {
        // SAFETY: made by CreateOpAttr; CreateNode copied them.
        unsafe { (o.ReleaseOpAttr)(a) };
    }
    result
}

/// `OrtEp::GetCompiledModelCompatibilityInfo`: the versions this EP's EPContext caches depend
/// on and each compiled group's source hash (ORT stores it in the compiled model's metadata
/// and hands it to `ValidateCompiledModelCompatibilityInfo` when the model is loaded).
unsafe extern "system" fn get_compiled_model_compatibility_info(
    this: *mut OrtEp,
    _graph: *const OrtGraph,
) -> *const c_char {
    guard_value("GetCompiledModelCompatibilityInfo", ptr::null(), || {
        // SAFETY: `this` is our EP.
        let ep = unsafe { Ep::from_ptr(this) };
        let partitions = ep
            .context_partitions
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default();
        let text = crate::api::to_cstring(&context::compatibility_info(&partitions));
        let Ok(mut keep) = ep.compatibility.lock() else {
            return ptr::null();
        };
        *keep = text;
        keep.as_ptr()
    })
}

/// The distinct op types of a group, in first-seen order, comma-separated.
fn op_type_summary<'a>(ops: impl Iterator<Item = &'a str>) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for op in ops {
        if !seen.contains(&op) {
            seen.push(op);
        }
    }
    seen.join(",")
}

/// `cpu` or `gpu`.
fn device_name(device: runtime::DeviceKind) -> &'static str {
    match device {
        runtime::DeviceKind::Gpu => "gpu",
        runtime::DeviceKind::Cpu => "cpu",
    }
}

/// `OrtEp::CreateProfiler` (ORT >= 1.25): a profiler that puts this session's EP events into
/// ORT's profile.
unsafe extern "system" fn create_profiler(
    this: *mut OrtEp,
    profiler: *mut *mut OrtEpProfilerImpl,
) -> StatusPtr {
    guard("CreateProfiler", || {
        // SAFETY: `this` is our EP.
        let ep = unsafe { Ep::from_ptr(this) };
        // SAFETY: ORT's out-pointer.
        unsafe { crate::profiler::create_profiler(&ep.api, &ep.profiles, profiler) }
    })
}

unsafe extern "system" fn compile(
    this: *mut OrtEp,
    graphs: *mut *const OrtGraph,
    fused_nodes: *mut *const OrtNode,
    count: usize,
    node_compute_infos: *mut *mut OrtNodeComputeInfo,
    ep_context_nodes: *mut *mut OrtNode,
) -> StatusPtr {
    guard("Compile", || {
        // SAFETY: `this` is our EP.
        let ep = unsafe { Ep::from_ptr(this) };
        if count == 0 {
            return Ok(());
        }
        if graphs.is_null() || fused_nodes.is_null() || node_compute_infos.is_null() {
            return Err(EpError::new("null arrays"));
        }
        for i in 0..count {
            // SAFETY: ORT passes `count` entries in each array.
            let (graph, fused) = unsafe { (*graphs.add(i), *fused_nodes.add(i)) };
            let (info, context_node) = compile_one(ep, graph, fused)?;
            // Written as soon as made: ORT releases every non-null entry, also on failure.
            // SAFETY: ORT's array of `count` slots.
            unsafe { *node_compute_infos.add(i) = info.into_raw() };
            if let Some(node) = context_node {
                if ep_context_nodes.is_null() {
                    return Err(EpError::new(
                        "ep.context_enable=1 but ORT passed no room for EPContext nodes",
                    ));
                }
                let made = make_context_node(&ep.api, &node)?;
                // SAFETY: ORT's array of `count` slots; ORT owns the node.
                unsafe { *ep_context_nodes.add(i) = made };
            }
        }
        Ok(())
    })
}

/// Reads the run's generation key (run option [`runtime::GENERATION_KEY`]) for the fused
/// nodes this thread computes in the run.
unsafe extern "system" fn on_run_start(
    this: *mut OrtEp,
    run_options: *const OrtRunOptions,
) -> StatusPtr {
    guard("OnRunStart", || {
        // SAFETY: ORT passes the EP it created.
        let ep = unsafe { Ep::from_ptr(this) };
        report_summary(ep);
        let key = if run_options.is_null() {
            None
        } else {
            let name = crate::api::to_cstring(runtime::GENERATION_KEY);
            // SAFETY: live run options; the returned string is owned by them.
            let value = unsafe { (ep.api.ort.GetRunConfigEntry)(run_options, name.as_ptr()) };
            // SAFETY: NUL-terminated when not null.
            (!value.is_null()).then(|| {
                unsafe { CStr::from_ptr(value) }
                    .to_string_lossy()
                    .into_owned()
            })
        };
        crate::compute::set_generation_key(key);
        Ok(())
    })
}

unsafe extern "system" fn on_run_end(
    _this: *mut OrtEp,
    _run_options: *const OrtRunOptions,
    _sync_stream: bool,
) -> StatusPtr {
    guard("OnRunEnd", || {
        crate::compute::set_generation_key(None);
        Ok(())
    })
}

/// ORT >= 1.25 waits for the device (IOBinding's output synchronisation, a run's end). Every
/// run evaluates its outputs before it returns and every data transfer copies synchronously,
/// so no MLX work of this EP is outstanding when ORT asks: there is nothing to wait for.
unsafe extern "system" fn sync(_this: *mut OrtEp) -> StatusPtr {
    guard("Sync", || {
        let _span = crate::trace::span("ep", || "Sync".to_string());
        Ok(())
    })
}

/// ORT >= 1.24 asks whether `Run` may be called on a session concurrently: yes when the run
/// gate lets callers on several threads in (each fused node's runs then wait for each other).
unsafe extern "system" fn is_concurrent_run_supported(
    _this: *mut OrtEp,
    is_supported: *mut bool,
) -> StatusPtr {
    guard("IsConcurrentRunSupported", || {
        if is_supported.is_null() {
            return Err(EpError::new("null is_supported out-pointer"));
        }
        let supported = runtime::RUN_POLICY.allows_concurrent_callers();
        log::debug!("IsConcurrentRunSupported: {supported}");
        // SAFETY: ORT's out-pointer, checked above.
        unsafe { *is_supported = supported };
        Ok(())
    })
}

unsafe extern "system" fn release_node_compute_infos(
    _this: *mut OrtEp,
    infos: *mut *mut OrtNodeComputeInfo,
    count: usize,
) {
    guard_value("ReleaseNodeComputeInfos", (), || {
        if infos.is_null() {
            return;
        }
        for i in 0..count {
            // SAFETY: ORT passes back the pointers Compile made.
            let p = unsafe { *infos.add(i) };
            if !p.is_null() {
                // SAFETY: made by ComputeInfo::into_raw, released once.
                drop(unsafe { ComputeInfo::from_raw(p) });
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use onnx_ir::{DataType, Dim, Node, TensorData};

    use super::*;

    fn fused_graph() -> Graph {
        let mut g = Graph::default();
        g.inputs
            .push(ValueInfo::new("x", DataType::Float, vec![Dim::Fixed(2)]));
        g.inputs
            .push(ValueInfo::new("y", DataType::Float, vec![Dim::Fixed(2)]));
        g.initializers
            .insert("w".into(), TensorData::from_f32(vec![2], &[1.0, 2.0]));
        g.nodes.push(Node::new("Add", ["x", "w"], ["a"]));
        g.nodes.push(Node::new("Mul", ["a", "y"], ["b"]));
        g.nodes.push(Node::new("Relu", ["b"], ["c"]));
        g.value_info.insert(
            "b".into(),
            ValueInfo::new("b", DataType::Float, vec![Dim::Fixed(2)]),
        );
        g.outputs
            .push(ValueInfo::new("c", DataType::Float, vec![Dim::Fixed(2)]));
        g
    }

    #[test]
    fn interface_follows_the_fused_node() {
        let mut g = fused_graph();
        let ins = ["y".to_string(), "w".to_string(), "x".to_string()];
        let outs = ["b".to_string(), "c".to_string()];
        align_interface(&mut g, &ins, &outs).unwrap();
        let names: Vec<&str> = g.inputs.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["y", "x"]);
        let names: Vec<&str> = g.outputs.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["b", "c"]);
        assert_eq!(g.outputs[0].dtype, Some(DataType::Float));
    }

    #[test]
    fn unbound_group_inputs_are_an_error() {
        let mut g = fused_graph();
        let err = align_interface(&mut g, &["x".to_string()], &["c".to_string()]).unwrap_err();
        assert!(err.message.contains("'y'"), "{err}");
    }
}
