//! The partitioner: groups claimed nodes into convex clusters.

use std::collections::{BTreeSet, HashMap, HashSet};

use onnx_ir::{Graph, TensorData, ValueInfo};

use crate::registry::{Registry, domain_name};

/// A set of claimed nodes that runs as one fused subgraph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// Indices into `graph.nodes`, in a topological order.
    pub nodes: Vec<usize>,
}

/// A node left to ORT, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeDecline {
    /// Node name.
    pub node: String,
    /// Op type.
    pub op_type: String,
    /// Domain as written in the model.
    pub domain: String,
    /// Why it was not claimed.
    pub reason: String,
}

/// The result of partitioning a graph.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Partition {
    /// Convex clusters of claimed nodes, in topological order of their first nodes.
    pub clusters: Vec<Cluster>,
    /// Every node left to ORT with the reason: unclaimed nodes in graph order, then nodes of
    /// clusters not worth fusing (only Constant nodes).
    pub declines: Vec<NodeDecline>,
}

/// Claims nodes with `registry` and groups the claimed ones into maximal convex clusters.
///
/// A cluster never has a path that leaves it through an unclaimed node and re-enters it, so it
/// can run as one fused node. The grouping walks a topological order that takes every ready
/// claimed node before any unclaimed one: each cluster is a run of claimed nodes in that
/// order, and all unclaimed nodes that become ready are drained before the next cluster
/// starts, which keeps the number of clusters low. Deterministic (ties go to the lower node
/// index). A graph that is not a DAG yields no clusters (everything is declined).
pub fn partition(graph: &Graph, registry: &Registry) -> Partition {
    let n = graph.nodes.len();
    // Constant-node outputs are known values for claims (e.g. their dtype).
    let constants: HashMap<String, TensorData> = graph
        .nodes
        .iter()
        .filter(|nd| nd.op_type == "Constant" && nd.normalized_domain().is_empty())
        .filter_map(|nd| {
            let out = nd.output(0)?;
            crate::fold::constant_node_value(nd).map(|t| (out.to_string(), t))
        })
        .collect();
    let mut claimed = vec![false; n];
    let mut declines = Vec::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        match registry.claim_with(graph, node, &constants) {
            Ok(()) => claimed[i] = true,
            Err(d) => declines.push(NodeDecline {
                node: node.name.clone(),
                op_type: node.op_type.clone(),
                domain: node.domain.clone(),
                reason: d.reason,
            }),
        }
    }
    if graph.topological_order().is_err() {
        // Leave a malformed graph entirely to ORT.
        for (i, node) in graph.nodes.iter().enumerate() {
            if claimed[i] {
                declines.push(NodeDecline {
                    node: node.name.clone(),
                    op_type: node.op_type.clone(),
                    domain: node.domain.clone(),
                    reason: "the graph is not a valid DAG".into(),
                });
            }
        }
        return Partition {
            clusters: Vec::new(),
            declines,
        };
    }

    let (preds, succs) = edges(graph);
    let mut indegree: Vec<usize> = preds.iter().map(|p| p.len()).collect();
    let mut ready_claimed: BTreeSet<usize> = BTreeSet::new();
    let mut ready_other: BTreeSet<usize> = BTreeSet::new();
    for i in 0..n {
        if indegree[i] == 0 {
            if claimed[i] {
                ready_claimed.insert(i);
            } else {
                ready_other.insert(i);
            }
        }
    }
    let mut clusters = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let release = |i: usize,
                   indegree: &mut Vec<usize>,
                   rc: &mut BTreeSet<usize>,
                   ro: &mut BTreeSet<usize>| {
        for &s in &succs[i] {
            indegree[s] -= 1;
            if indegree[s] == 0 {
                if claimed[s] {
                    rc.insert(s);
                } else {
                    ro.insert(s);
                }
            }
        }
    };
    loop {
        if let Some(i) = ready_claimed.pop_first() {
            current.push(i);
            release(i, &mut indegree, &mut ready_claimed, &mut ready_other);
            continue;
        }
        if !current.is_empty() {
            clusters.push(Cluster {
                nodes: std::mem::take(&mut current),
            });
        }
        // Drain every unclaimed node that is (or becomes) ready before the next cluster.
        let mut progressed = false;
        while let Some(i) = ready_other.pop_first() {
            progressed = true;
            release(i, &mut indegree, &mut ready_claimed, &mut ready_other);
        }
        if !progressed && ready_claimed.is_empty() {
            break;
        }
    }
    // A cluster of nothing but Constant nodes computes nothing: leave it to ORT.
    clusters.retain(|c| {
        let only_constants = c
            .nodes
            .iter()
            .all(|&i| graph.nodes[i].op_type == "Constant");
        if only_constants {
            for &i in &c.nodes {
                let node = &graph.nodes[i];
                declines.push(NodeDecline {
                    node: node.name.clone(),
                    op_type: node.op_type.clone(),
                    domain: node.domain.clone(),
                    reason: "a cluster of only Constant nodes is left to ORT".into(),
                });
            }
        }
        !only_constants
    });
    Partition { clusters, declines }
}

/// Predecessor and successor node lists (deduplicated) through values.
fn edges(graph: &Graph) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    let producers = graph.producers();
    let n = graph.nodes.len();
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, node) in graph.nodes.iter().enumerate() {
        let mut seen = HashSet::new();
        for input in node.inputs.iter().filter(|s| !s.is_empty()) {
            for &p in producers.get(input.as_str()).iter().copied() {
                if p != i && seen.insert(p) {
                    preds[i].push(p);
                    succs[p].push(i);
                }
            }
        }
        for sub in implicit_inputs(node) {
            if let Some(&p) = producers.get(sub.as_str())
                && p != i
                && seen.insert(p)
            {
                preds[i].push(p);
                succs[p].push(i);
            }
        }
    }
    (preds, succs)
}

/// Outer-scope values read by a node's subgraphs (If/Loop bodies, nested ones included),
/// which are dependencies too.
fn implicit_inputs(node: &onnx_ir::Node) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, g) in Graph::subgraphs_of(node) {
        for r in g.outer_references() {
            if !out.contains(&r) {
                out.push(r);
            }
        }
    }
    out
}

/// The cluster as its own graph: its nodes, the values it reads from outside as inputs (or
/// initializers when `graph` has them), and the values read outside it (or graph outputs) as
/// outputs. Useful to test [`crate::build_plan`] on a partition; the EP builds the same from
/// ORT's fused node.
pub fn cluster_graph(graph: &Graph, cluster: &Cluster) -> Graph {
    let members: HashSet<usize> = cluster.nodes.iter().copied().collect();
    let produced: HashSet<&str> = cluster
        .nodes
        .iter()
        .flat_map(|&i| graph.nodes[i].outputs.iter().map(String::as_str))
        .filter(|s| !s.is_empty())
        .collect();
    let mut g = Graph {
        name: format!(
            "{}_cluster{}",
            graph.name,
            cluster.nodes.first().unwrap_or(&0)
        ),
        opset_imports: graph.opset_imports.clone(),
        ..Graph::default()
    };
    let info = |name: &str| -> ValueInfo {
        graph.value(name).unwrap_or_else(|| ValueInfo {
            name: name.to_string(),
            ..ValueInfo::default()
        })
    };
    let mut seen_inputs = HashSet::new();
    for &i in &cluster.nodes {
        let node = &graph.nodes[i];
        g.nodes.push(node.clone());
        let reads: Vec<String> = node
            .inputs
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .chain(implicit_inputs(node))
            .collect();
        for input in &reads {
            if produced.contains(input.as_str()) || !seen_inputs.insert(input.clone()) {
                continue;
            }
            if let Some(t) = graph.initializers.get(input) {
                g.initializers.insert(input.clone(), t.clone());
            } else {
                if graph.optional_inputs.contains(input) {
                    g.optional_inputs.insert(input.clone());
                }
                g.inputs.push(info(input));
            }
        }
    }
    let graph_outputs: HashSet<&str> = graph.outputs.iter().map(|v| v.name.as_str()).collect();
    let mut seen_outputs = HashSet::new();
    for &i in &cluster.nodes {
        for out in graph.nodes[i].outputs.iter().filter(|s| !s.is_empty()) {
            let used_outside = graph_outputs.contains(out.as_str())
                || graph.nodes.iter().enumerate().any(|(j, n)| {
                    !members.contains(&j)
                        && (n.inputs.iter().any(|x| x == out)
                            || implicit_inputs(n).iter().any(|x| x == out))
                });
            if used_outside && seen_outputs.insert(out.clone()) {
                g.outputs.push(info(out));
            }
        }
    }
    for name in produced {
        if let Some(v) = graph.value_info.get(name) {
            g.value_info.insert(name.to_string(), v.clone());
        }
    }
    g
}

/// A one-line summary of declines grouped by reason, for logs.
pub fn decline_summary(p: &Partition) -> Vec<String> {
    let mut counts: HashMap<(String, String), usize> = HashMap::new();
    for d in &p.declines {
        *counts
            .entry((
                format!("{}::{}", domain_name(&d.domain), d.op_type),
                d.reason.clone(),
            ))
            .or_default() += 1;
    }
    let mut v: Vec<_> = counts
        .into_iter()
        .map(|((op, r), c)| format!("{c} x {op}: {r}"))
        .collect();
    v.sort();
    v
}
