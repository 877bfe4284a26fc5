//! Partitioning that only keeps clusters the plan builder can lower.
//!
//! A claim predicate looks at one node; the lowering sees the node in its cluster, with the
//! shapes and constants around it, and can still find it invalid (a pool window larger than
//! its static input, attributes that contradict each other, ...). ORT fails the whole session
//! when `Compile` fails, even where its CPU EP would have run the node. So the EP partitions
//! with [`partition_plannable`]: every cluster is planned once, a node whose lowering fails is
//! declined (with the planner's message as the reason) and the graph is partitioned again,
//! until every cluster plans.

use std::collections::HashMap;

use onnx_ir::{DataType, Graph};

use crate::partition::{NodeDecline, Partition, cluster_graph, partition};
use crate::plan::{LowerCtx, PlanError, build_plan};
use crate::registry::Registry;
use crate::step::{BinaryOp, Slot, Step};

/// Domain given to nodes declined here, so that no registry entry claims them on the next pass.
const REFUSED_DOMAIN: &str = "ortmlx.plan_failed";

/// [`partition`], keeping only clusters whose plans build: a node whose lowering fails is
/// declined ("planning failed: ..."), and a cluster whose failure names no node of it is
/// declined whole. Deterministic; at most one extra partition per refused node.
pub fn partition_plannable(graph: &Graph, registry: &Registry) -> Partition {
    let mut part = partition(graph, registry);
    // Node index -> why planning refused it.
    let mut refused: HashMap<usize, String> = HashMap::new();
    let mut work: Option<Graph> = None;
    loop {
        let g = work.as_ref().unwrap_or(graph);
        let failures = failed_nodes(g, &part, registry);
        if failures.is_empty() {
            break;
        }
        let w = work.get_or_insert_with(|| graph.clone());
        for (i, reason) in failures {
            w.nodes[i].domain = REFUSED_DOMAIN.to_string();
            refused.insert(i, reason);
        }
        part = partition(w, registry);
    }
    if refused.is_empty() {
        return part;
    }
    // Report the refused nodes as they are in the model, with the planner's reason.
    let mut declines: Vec<NodeDecline> = part
        .declines
        .into_iter()
        .filter(|d| d.domain != REFUSED_DOMAIN)
        .collect();
    let mut order: Vec<(usize, String)> = refused.into_iter().collect();
    order.sort();
    for (i, reason) in order {
        let n = &graph.nodes[i];
        declines.push(NodeDecline {
            node: n.name.clone(),
            op_type: n.op_type.clone(),
            domain: n.domain.clone(),
            reason: format!("planning failed: {reason}"),
        });
    }
    Partition {
        clusters: part.clusters,
        declines,
    }
}

/// The nodes to decline so that the failing clusters of `part` can plan: for each cluster
/// whose plan fails, the node the error names, or every node of the cluster.
fn failed_nodes(graph: &Graph, part: &Partition, registry: &Registry) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for cluster in &part.clusters {
        let Err(e) = build_plan(&cluster_graph(graph, cluster), registry) else {
            continue;
        };
        let named = match &e {
            PlanError::Unsupported { node, .. } | PlanError::Invalid { node, .. } => cluster
                .nodes
                .iter()
                .copied()
                .find(|&i| !node.is_empty() && graph.nodes[i].name == *node),
            _ => None,
        };
        match named {
            Some(i) => out.push((i, e.to_string())),
            None => out.extend(cluster.nodes.iter().map(|&i| (i, e.to_string()))),
        }
    }
    out
}

impl LowerCtx<'_> {
    /// Appends a run-time requirement ([`Step::Require`]): the run fails, naming the node
    /// being lowered, with `what` unless every element of `ok` (bool) is true.
    pub fn require(&mut self, ok: Slot, what: impl Into<String>) {
        let out = self.temp(DataType::Bool);
        self.push(Step::Require {
            ok,
            what: what.into(),
            out,
        });
    }

    /// Requires `lo <= v` (and `v <= hi` when given) of every element of the int64 `v`; `hi`
    /// is an int64 slot broadcasting against `v`.
    pub fn require_between(
        &mut self,
        v: Slot,
        lo: i64,
        hi: Option<Slot>,
        what: impl Into<String>,
    ) -> Result<(), PlanError> {
        let lo = self.scalar(DataType::Int64, lo as f64)?;
        let mut ok = self.binary(BinaryOp::GreaterEqual, v, lo, DataType::Int64);
        if let Some(hi) = hi {
            let below = self.binary(BinaryOp::LessEqual, v, hi, DataType::Int64);
            ok = self.binary(BinaryOp::LogicalAnd, ok, below, DataType::Bool);
        }
        self.require(ok, what);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use onnx_ir::{Attribute, DataType, Dim, Node, ValueInfo};

    use super::*;

    fn pool_graph(kernel: i64) -> Graph {
        let mut g = Graph::default();
        g.opset_imports.insert(String::new(), 17);
        let shape = |d: &[i64]| d.iter().map(|&v| Dim::Fixed(v)).collect();
        g.inputs
            .push(ValueInfo::new("x", DataType::Float, shape(&[1, 1, 3, 3])));
        g.nodes.push(Node::new("Relu", ["x"], ["r"]));
        g.nodes.push(
            Node::new("AveragePool", ["r"], ["p"])
                .with_attr("kernel_shape", Attribute::Ints(vec![kernel, kernel])),
        );
        g.nodes.push(Node::new("Neg", ["p"], ["y"]));
        g.value_info.insert(
            "r".into(),
            ValueInfo::new("r", DataType::Float, shape(&[1, 1, 3, 3])),
        );
        g.value_info.insert(
            "p".into(),
            ValueInfo {
                name: "p".into(),
                dtype: Some(DataType::Float),
                shape: None,
            },
        );
        g.outputs.push(ValueInfo {
            name: "y".into(),
            dtype: Some(DataType::Float),
            shape: None,
        });
        g
    }

    #[test]
    fn unplannable_nodes_are_declined_with_the_reason() {
        let registry = Registry::default();
        let ok = partition_plannable(&pool_graph(2), &registry);
        assert_eq!(ok, partition(&pool_graph(2), &registry));
        assert_eq!(ok.clusters.len(), 1);

        let g = pool_graph(5);
        let p = partition_plannable(&g, &registry);
        let claimed: Vec<usize> = p.clusters.iter().flat_map(|c| c.nodes.clone()).collect();
        assert!(!claimed.contains(&1), "the pool can't be planned: {p:?}");
        assert!(claimed.contains(&0) && claimed.contains(&2), "{p:?}");
        let d = p
            .declines
            .iter()
            .find(|d| d.op_type == "AveragePool")
            .unwrap();
        assert_eq!(d.domain, "");
        assert!(d.reason.starts_with("planning failed:"), "{}", d.reason);
        for c in &p.clusters {
            build_plan(&cluster_graph(&g, c), &registry).unwrap();
        }
    }
}
